"""Client for the kube-apiserver simulator's control API (/_sim/<verb>).

    from simctl import SimClient, start_sim
    sim = start_sim(["--token", "t0"])          # spawns the simulator, waits for READY
    c = SimClient(sim.url)                      # or SimClient("http://127.0.0.1:PORT")
    c.make(name="w-0", index=0, ip="10.0.0.1")  # Indexed-Job pod helper
    c.ready(name="w-0", ready=False)
    c.cut(mode="mid-event")
    sim.stop()

Every method returns the decoded JSON answer (a dict with "ok": true) or raises SimError with the
simulator's message. `cli(argv)` is the `kube_apiserver_sim.py ctl` command line.
Standard library only.
"""

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = os.path.join(HERE, "kube_apiserver_sim.py")


class SimError(Exception):
    pass


class SimClient:
    """Calls POST <url>/_sim/<verb> with a JSON body. `ca` verifies an HTTPS simulator (or pass
    insecure=True)."""

    def __init__(self, url, ca=None, insecure=False, timeout=60):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.ctx = None
        if self.url.startswith("https://"):
            self.ctx = ssl.create_default_context(cafile=ca if ca and ca != "-" else None)
            if insecure or not ca or ca == "-":
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE

    def call(self, verb, **args):
        body = json.dumps({k: v for k, v in args.items() if v is not None}).encode()
        req = urllib.request.Request(self.url + "/_sim/" + verb, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read()).get("error")
            except ValueError:
                msg = str(e)
            raise SimError("%s: %s" % (verb, msg)) from None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        verb = name.replace("_", "-")
        return lambda **kw: self.call(verb, **kw)

    # Named shortcuts for the common verbs (the others work through __getattr__).
    def state(self):
        return self.call("state")

    def pods(self, namespace=None):
        return self.call("pods", namespace=namespace)["items"]

    def make(self, **kw):
        return self.call("make", **kw)

    def create(self, pod, namespace=None):
        return self.call("create", pod=pod, namespace=namespace)

    def update(self, pod):
        return self.call("update", pod=pod)

    def delete(self, name, namespace=None, grace=None, after=None):
        return self.call("delete", name=name, namespace=namespace, grace=grace, after=after)

    def ready(self, name, ready=True, namespace=None):
        return self.call("ready", name=name, ready=ready, namespace=namespace)

    def set_ip(self, name, ip, namespace=None):
        return self.call("ip", name=name, ip=ip, namespace=namespace)

    def labels(self, name, set=None, remove=None, namespace=None):  # noqa: A002
        return self.call("labels", name=name, set=set, remove=remove, namespace=namespace)

    def cut(self, mode="clean"):
        return self.call("cut", mode=mode)

    def stall(self, seconds):
        return self.call("stall", seconds=seconds)

    def token(self, token=None, keep_old=None, reload=None, disable=None):
        return self.call("token", token=token, keep_old=keep_old, reload=reload, disable=disable)

    def fail(self, code, count=1, retry_after=None, match=None, kind=None, message=None, agent=None):
        return self.call("fail", code=code, count=count, retry_after=retry_after, match=match, kind=kind,
                         message=message, agent=agent)

    def compact(self, rv=None):
        return self.call("compact", rv=rv)

    def restart(self, rv=None, unavailable=None, down=None):
        return self.call("restart", rv=rv, unavailable=unavailable, down=down)

    def stats(self, log=None):
        return self.call("stats", log=log)

    def bulk_create(self, count, **kw):
        return self.call("bulk-create", count=count, **kw)

    def churn(self, events, rate=0, **kw):
        return self.call("churn", events=events, rate=rate, **kw)


class Sim:
    """A running simulator process started by start_sim()."""

    def __init__(self, proc, url, port, ca, state_dir):
        self.proc, self.url, self.port, self.ca, self.state_dir = proc, url, port, ca, state_dir
        self.client = SimClient(url, ca=ca)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _die_with_parent():
    """In the child: ask Linux for SIGTERM when the test that started us dies (prctl
    PR_SET_PDEATHSIG), so a killed test never leaves a simulator behind."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def start_sim(args=(), timeout=30, python=None, stderr=None):
    """Start the simulator with extra command-line args; wait (bounded) for its READY line."""
    cmd = [python or sys.executable or "/usr/bin/python3", SIM] + list(args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, preexec_fn=_die_with_parent)
    line = [None]

    def reader():
        line[0] = proc.stdout.readline()
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    th.join(timeout)
    if not line[0] or not line[0].startswith("READY "):
        proc.kill()
        proc.wait()
        raise SimError("simulator did not become ready within %ss (got %r)" % (timeout, line[0]))
    kv = dict(part.split("=", 1) for part in line[0].split()[1:])
    state_dir = None
    if "--state-dir" in args:
        state_dir = list(args)[list(args).index("--state-dir") + 1]
    return Sim(proc, kv["url"], int(kv["port"]), kv["ca"], state_dir)


def _parse_value(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def cli(argv):
    """kube_apiserver_sim.py ctl --url URL [--ca FILE] <verb> [--key value ...]"""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: kube_apiserver_sim.py ctl --url URL [--ca FILE] <verb> [--key value ...]\n"
              "  Calls POST URL/_sim/<verb>; --key value pairs become the JSON body (values parsed as\n"
              "  JSON when they can be, else strings; '--pod @file.json' reads a file, '-' stdin).\n"
              "  Prints the JSON answer; exit 0 on success, 1 on a control error, 2 on usage.\n"
              "  Verbs: see 'kube_apiserver_sim.py --help' or README.md.")
        return 0
    url = os.environ.get("KUBESIM_URL")
    ca = None
    i = 0
    while i < len(argv) and argv[i].startswith("--") and argv[i] in ("--url", "--ca"):
        if i + 1 >= len(argv):
            print("ctl: %s needs a value" % argv[i], file=sys.stderr)
            return 2
        if argv[i] == "--url":
            url = argv[i + 1]
        else:
            ca = argv[i + 1]
        i += 2
    if not url:
        print("ctl: --url URL (or KUBESIM_URL) is required", file=sys.stderr)
        return 2
    if i >= len(argv):
        print("ctl: a verb is required", file=sys.stderr)
        return 2
    verb = argv[i]
    rest = argv[i + 1:]
    args = {}
    j = 0
    while j < len(rest):
        k = rest[j]
        if not k.startswith("--"):
            print("ctl: expected --key, got %r" % k, file=sys.stderr)
            return 2
        k = k[2:].replace("-", "_")
        if "=" in k:
            k, v = k.split("=", 1)
            j += 1
        elif j + 1 < len(rest) and not rest[j + 1].startswith("--"):
            v = rest[j + 1]
            j += 2
        else:
            v = "true"
            j += 1
        if isinstance(v, str) and v.startswith("@"):
            with (sys.stdin if v == "@-" else open(v[1:], "r", encoding="utf-8")) as f:
                v = f.read()
        elif v == "-":
            v = sys.stdin.read()
        args[k] = _parse_value(v)
    try:
        res = SimClient(url, ca=ca).call(verb, **args)
    except SimError as e:
        print("ctl: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("ctl: cannot reach %s: %s" % (url, e), file=sys.stderr)
        return 1
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
