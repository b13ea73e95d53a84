"""Helpers for the k8s client integration tests: run tests/tools/k8s_driver against the
kube-apiserver simulator, follow its change lines, replay them into a model (rejecting any
duplicate or impossible change) and compare that model with the simulator's truth."""
import atexit
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
DRIVER = os.environ.get("K8S_DRIVER") or os.path.join(BUILD, "tests", "tools", "k8s_driver")
sys.path.insert(0, os.path.join(ROOT, "tests", "sim", "kube-apiserver"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from simctl import start_sim, SimClient  # noqa: E402,F401
from tap import scaled  # noqa: E402


class ReplayError(Exception):
    pass


ALL_DRIVERS = []


def stop_all():
    """Stop every driver still running (a scenario that raised may leave one behind)."""
    for d in ALL_DRIVERS:
        d.stop()


atexit.register(stop_all)


def sanitizer_reports(extra_stderr=()):
    """Sanitizer lines from every Driver of this process (and from extra stderr texts)."""
    out = []
    for d in ALL_DRIVERS:
        out += [line for line in d.err_lines if "Sanitizer" in line or "runtime error:" in line]
    for text in extra_stderr:
        out += [line for line in text.splitlines() if "Sanitizer" in line or "runtime error:" in line]
    return out


class Driver:
    """A running k8s_driver. lines: every stdout line; model: the store rebuilt from the
    ADD/UPDATE/DELETE lines; errors: impossible changes seen (duplicates, unknown keys)."""

    def __init__(self, args, env=None):
        self.lines = []
        self.model = {}
        self.errors = []
        self.synced = []
        self.stats = None
        self.cond = threading.Condition()
        ALL_DRIVERS.append(self)
        self.proc = subprocess.Popen([DRIVER] + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.err_lines = []
        self._t1 = threading.Thread(target=self._read_out, daemon=True)
        self._t2 = threading.Thread(target=self._read_err, daemon=True)
        self._t1.start()
        self._t2.start()

    def _apply(self, line):
        parts = line.split()
        if not parts:
            return
        kind = parts[0]
        if kind in ("ADD", "UPDATE"):
            key = parts[1]
            fields = dict(p.split("=", 1) for p in parts[2:])
            if kind == "ADD" and key in self.model:
                self.errors.append("duplicate ADD " + line)
            if kind == "UPDATE":
                if key not in self.model:
                    self.errors.append("UPDATE of unknown key " + line)
                elif self.model[key]["rv"] == fields["rv"]:
                    self.errors.append("UPDATE without change " + line)
            self.model[key] = fields
        elif kind == "DELETE":
            if parts[1] not in self.model:
                self.errors.append("DELETE of unknown key " + line)
            self.model.pop(parts[1], None)
        elif kind == "SYNCED":
            self.synced.append(int(parts[1]))
        elif kind == "STATS":
            self.stats = dict(p.split("=", 1) for p in parts[1:])

    def _read_out(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            with self.cond:
                self.lines.append(line)
                self._apply(line)
                self.cond.notify_all()

    def _read_err(self):
        for line in self.proc.stderr:
            with self.cond:
                self.err_lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait(self, pred, timeout=15.0):
        """Wait up to scaled(timeout) seconds (tap.py) until pred(self) is true; returns whether it
        became true."""
        end = time.time() + scaled(timeout)
        with self.cond:
            while True:
                if pred(self):
                    return True
                left = end - time.time()
                if left <= 0:
                    return False
                if self.proc.poll() is not None and not self._t1.is_alive():
                    return pred(self)
                self.cond.wait(min(left, 0.2))

    def wait_synced(self, n_lists=1, timeout=15.0):
        return self.wait(lambda d: len(d.synced) >= n_lists, timeout)

    def log_has(self, text):
        with self.cond:
            return any(text in line for line in self.err_lines)

    def wait_log(self, text, timeout=15.0):
        return self.wait(lambda d: any(text in line for line in d.err_lines), timeout)

    def count_log(self, text):
        with self.cond:
            return sum(1 for line in self.err_lines if text in line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._t1.join(scaled(5))
        self._t2.join(scaled(5))
        # Sanitizer builds (BUILD=build-asan): any report is a failure of the scenario.
        for line in self.err_lines:
            if "Sanitizer" in line or "runtime error:" in line:
                self.errors.append("sanitizer: " + line)
        return self.proc.returncode

    def stderr_tail(self, n=15):
        with self.cond:
            return "\n".join(self.err_lines[-n:])


def truth(sim_client, namespace="default"):
    """The simulator's pods as {ns/name: {rv, ip, ready}}."""
    out = {}
    for p in sim_client.pods(namespace=namespace):
        md = p["metadata"]
        st = p.get("status", {})
        ready = "0"
        for c in st.get("conditions") or []:
            if c.get("type") == "Ready":
                ready = "1" if c.get("status") == "True" else "0"
        out["%s/%s" % (md.get("namespace", ""), md["name"])] = {
            "rv": md["resourceVersion"], "ip": st.get("podIP", "") or "", "ready": ready}
    return out


def model_view(driver):
    with driver.cond:
        return {k: {"rv": v["rv"], "ip": v["ip"], "ready": v["ready"]} for k, v in driver.model.items()}


def converged(driver, sim_client, namespace="default", timeout=15.0):
    """Wait (bounded) until the driver's replayed store equals the simulator's truth."""
    want = truth(sim_client, namespace)
    ok = driver.wait(lambda d: model_view(d) == want, timeout)
    return ok, want


def diff(a, b):
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        if a.get(k) != b.get(k):
            out.append("%s: driver=%s sim=%s" % (k, a.get(k), b.get(k)))
    return "\n".join(out[:20])
