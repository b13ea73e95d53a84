"""One started tpumesh-sidecar as the integration tests see it: the process, its stderr lines
(collected in .lines by a reader thread), its HTTP port (read from its "serving /healthz ... (port
N)" log line, so tests can ask for port 0) and the probe, metric and stop calls every test makes.
Each test's Sidecar class builds its own command line and subclasses this."""
import re
import signal
import subprocess
import threading
import urllib.error
import urllib.request

from tap import scaled, wait


class SidecarProcess:
    host = "127.0.0.1"

    def __init__(self, cmd, env=None, port_timeout=10, **popen):
        self.lines = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=env, **popen)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.port = self.logged_port("serving /healthz", port_timeout)

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def logged_port(self, marker, timeout=10):
        """The port of the first log line containing marker and "(port N)"; None if none came."""
        m = wait(lambda: next((re.search(r"\(port (\d+)\)", l) for l in self.lines if marker in l), None),
                 timeout)
        return int(m.group(1)) if m else None

    def http(self, path):
        req = urllib.request.Request("http://%s:%d%s" % (self.host, self.port, path),
                                     headers={"User-Agent": "kube-probe/1.35", "Accept": "*/*"})
        try:
            with urllib.request.urlopen(req, timeout=scaled(5)) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def readyz(self):
        return self.http("/readyz")

    def metric(self, name):
        _, body = self.http("/metrics")
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def log_count(self, text):
        return sum(1 for l in self.lines if text in l)

    def terminate(self, timeout, sig=signal.SIGTERM):
        """Send sig and wait up to scaled(timeout) s (then SIGKILL); the exit status as Popen gives it."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
