"""The sidecar's HTTP server under hostile and broken clients (issue 13), against the
kube-apiserver simulator. Traffic goes to 127.0.0.1 only; attackers connect from
127.64.0.0/16 source addresses (simulated pods); every loop has a deadline.

  1. malformed-input corpus (tests/fuzz/corpus/httpd): one connection each; the sidecar
     survives and answers /readyz within 1 s after each
  2. 300 slowloris clients + 100 WebSocket upgrades (on a path other than /watch) held on the
     port: >= 28 of 30 /readyz probes (1 s timeout, one per second) succeed, and a pod change is
     published within 2 s
  (Every time here is the plain build's: under valgrind or ASan each is multiplied by
  TPUMESH_TEST_SLOWDOWN, see tap.py; http() scales its own timeout.)
  3. 60 clients that never read /topology at 16,384 workers: VmHWM grows <= 24 MiB, and the
     memory comes back when they leave
  3b. /watch: 16 WebSocket clients that never read (the cap), 40 more refused with 503; pod
     changes while they are held add <= 24 MiB to VmHWM, probes keep succeeding, the stalled
     clients are dropped and their slots come back
  4. RFC 9110: HEAD without body, complete 405 with Allow, 404 with a body, 503 from /readyz with
     `waiting for the first list of pods`, /healthz saying why it fails; pipelined requests
     (two POSTs, a GET and a POST) get the first answer and a closed connection
  5. secrets: the token never reaches logs, /metrics, error messages or /proc/<pid>/environ;
     a crash leaves no core dump (PR_SET_DUMPABLE 0)
  6. the fd count is back to its baseline at the end

Env: BUILD (build dir; build-asan = the sanitizer build), WRAP (e.g. "valgrind -q
--error-exitcode=99"): the sidecar runs under it, with fewer pods. Under either the memory
figures are skipped (the instrumented heap hides them); errors the instrumentation finds make
the sidecar exit non-zero, which the last check reports.
"""
import glob
import json
import os
import random
import re
import resource
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from simctl import start_sim  # noqa: E402
from tap import SLOW, check, done, fail, scaled, skip, wait  # noqa: E402
from sidecarproc import SidecarProcess  # noqa: E402

SIDECAR = os.path.join(BUILD, "bin/tpumesh-sidecar")
CORPUS = os.path.join(ROOT, "tests/fuzz/corpus/httpd")
WRAP = shlex.split(os.environ.get("WRAP", ""))
ASAN = "asan" in os.path.basename(BUILD)
PODS = 2048 if WRAP else 16384
TOKEN = "tpumesh-test-token-%08x" % random.getrandbits(32)
MiB = 1 << 20


def http(port, path, method="GET", headers=(), body=b"", timeout=2.0, raw=None):
    """One request on a new connection (Connection: close). Returns (status, headers dict, body)
    or None when there is no complete answer within scaled(timeout)."""
    timeout = scaled(timeout)
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if raw is None:
            hs = ["Host: 127.0.0.1", "User-Agent: kube-probe/1.35", "Connection: close"]
            hs += list(headers)
            if body:
                hs.append("Content-Length: %d" % len(body))
            raw = ("%s %s HTTP/1.1\r\n%s\r\n\r\n" % (method, path, "\r\n".join(hs))).encode() + body
        s.sendall(raw)
        deadline = time.monotonic() + timeout
        data = b""
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            return None
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            return None
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        return int(m.group(1)), hdrs, rest
    except OSError:
        return None
    finally:
        s.close()


def probe(port, timeout=1.0):
    r = http(port, "/readyz", timeout=timeout)
    return r is not None and 200 <= r[0] < 400


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("VmHWM", "VmRSS"))}


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def reset_hwm(pid):
    """Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sidecar(SidecarProcess):
    def __init__(self, sim, pod, out, token_file, extra=(), cwd=None, core=False, env=None):
        self.out = out
        cmd = WRAP + [SIDECAR, "--apiserver", sim.url, "--token-file", token_file,
                      "--namespace", "default", "--pod-name", pod, "--out-dir", out,
                      "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--address-mode", "ip"] + list(extra)
        pre = None
        if core:
            def pre():
                resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        env = dict({k: v for k, v in os.environ.items() if not k.startswith("TPUMESH_")}, **(env or {}))
        self.status = None
        super().__init__(cmd, env=env, cwd=cwd, preexec_fn=pre)

    def alive(self):
        return self.proc.poll() is None

    def reap(self, timeout):
        """waitpid ourselves to see the core-dump flag."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.proc.pid, os.WNOHANG)
            if pid:
                self.status = st
                self.proc.returncode = (-os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
                return st
            time.sleep(0.05)
        return None

    def stop(self):
        return self.terminate(10)


def generation(out):
    try:
        with open(os.path.join(out, "topology.json")) as f:
            return json.load(f)["generation"]
    except (OSError, ValueError, KeyError):
        return None


# ---- 1. corpus -----------------------------------------------------------------------------

def send_raw(port, data, timeout=2.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            if data:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        first = b""
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            if len(first) < 64:
                first += chunk[:64]
        return first
    finally:
        s.close()


def corpus(car):
    files = sorted(glob.glob(os.path.join(CORPUS, "*")))
    bad = []
    upgraded = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        first = send_raw(car.port, data)
        if first.startswith(b"HTTP/1.1 101"):
            upgraded.append((os.path.basename(path), data.startswith(b"GET /watch HTTP/1.1\r\n")))
        if not car.alive() or not probe(car.port):
            bad.append(os.path.basename(path))
            if not car.alive():
                break
    check("corpus: %d malformed inputs, one connection each; the sidecar survives and answers "
          "/readyz within %g s after each" % (len(files), scaled(1.0)), len(files) >= 40 and not bad,
          "failed after: %s" % bad)
    # /watch is the one WebSocket served: a well-formed handshake there may get 101.
    wrong = [n for n, watch in upgraded if not watch]
    check("corpus: no upgrade but a WebSocket handshake on /watch is accepted (no 101 for the "
          "others; %d to /watch)" % (len(upgraded) - len(wrong)), not wrong, wrong)


# ---- 2. slowloris + upgrades -----------------------------------------------------------------

class Attack:
    """n_slow slowloris clients (a request line, then a header byte every 2 s, never the end)
    and n_upg WebSocket upgrades, each reopened when the server closes it, spread over 20
    source addresses in 127.64.0.0/16."""

    UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")

    def __init__(self, port, n_slow, n_upg):
        self.port = port
        self.kinds = ["slow"] * n_slow + ["upg"] * n_upg
        self.socks = [None] * len(self.kinds)
        self.next_open = [0.0] * len(self.kinds)
        self.last_send = [0.0] * len(self.kinds)
        self.stop = threading.Event()
        self.opened = self.closed = self.got_101 = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open(self, i, now):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind(("127.64.0.%d" % (1 + i % 20), 0))
            s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            self.next_open[i] = now + 0.5
            return
        self.socks[i] = s
        self.last_send[i] = 0.0
        self.opened += 1

    def drop(self, i, now):
        self.socks[i].close()
        self.socks[i] = None
        self.closed += 1
        self.next_open[i] = now + (0.5 if self.kinds[i] == "upg" else 0.2)

    def run(self):
        deadline = time.monotonic() + scaled(120)
        while not self.stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            for i, s in enumerate(self.socks):
                if s is None and now >= self.next_open[i]:
                    self.open(i, now)
            live = [s for s in self.socks if s is not None]
            try:
                r, w, _ = select.select(live, live, [], 0.1)
            except (OSError, ValueError):
                r, w = [], []
            rs, ws = set(r), set(w)
            now = time.monotonic()
            for i, s in enumerate(self.socks):
                if s is None:
                    continue
                if s in rs:
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if data.startswith(b"HTTP/1.1 101"):
                        self.got_101 += 1
                    if not data:
                        self.drop(i, now)
                        continue
                if s in ws and now - self.last_send[i] >= 2.0:
                    if self.last_send[i] == 0.0:
                        msg = (b"GET /readyz HTTP/1.1\r\nHost: a\r\n" if self.kinds[i] == "slow"
                               else self.UPGRADE)
                    else:
                        msg = b"X" if self.kinds[i] == "slow" else b""
                    try:
                        if msg:
                            s.send(msg)
                        self.last_send[i] = now
                    except OSError:
                        self.drop(i, now)
        for i, s in enumerate(self.socks):
            if s is not None:
                s.close()
                self.socks[i] = None


def slowloris(car, sim, pod_names):
    pid = car.proc.pid
    atk = Attack(car.port, 300, 100)
    atk.thread.start()
    time.sleep(3)
    held = nfds(pid)
    results = []
    published = None
    for i in range(30):
        t0 = time.monotonic()
        results.append(probe(car.port, timeout=1.0))
        held = max(held, nfds(pid))
        if i == 10:
            gen0 = generation(car.out)
            t_change = time.monotonic()
            sim.client.set_ip(name=pod_names[5], ip="10.99.%d.%d" % (random.randrange(250), random.randrange(1, 250)))
            g = wait(lambda: (generation(car.out) or 0) > (gen0 or 0), 5, 0.02)
            published = time.monotonic() - t_change if g else None
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    atk.stop.set()
    atk.thread.join(10)
    good = sum(results)
    check("slowloris: the attack held connections (at most %d fds open, %d connects, %d closed by "
          "the server)" % (held, atk.opened, atk.closed), held >= 200 and atk.closed > 0,
          "fds %d" % held)
    check("slowloris: %d of 30 /readyz probes (%g s timeout, 1/s) answered with 300 slow clients "
          "and 100 upgrades held (>= 28)" % (good, scaled(1.0)), good >= 28, results)
    check("slowloris: no WebSocket upgrade answered 101", atk.got_101 == 0, atk.got_101)
    check("slowloris: a pod change is published within %g s during the attack (%.2f s)"
          % (scaled(2.0), published if published is not None else -1),
          published is not None and published <= scaled(2.0))
    check("slowloris: the sidecar is alive after the attack", car.alive())


# ---- 3. /topology readers that never read -----------------------------------------------------

def no_readers(car):
    pid = car.proc.pid
    r = http(car.port, "/topology", timeout=30)
    size = len(r[2]) if r else 0
    check("/topology: served whole (%d bytes, %d workers)" % (size, PODS),
          r is not None and r[0] == 200 and json.loads(r[2])["numClients"] == PODS,
          r[:2] if r else None)
    time.sleep(0.5)
    can_reset = reset_hwm(pid)
    before = proc_status(pid)
    socks = []
    for _ in range(60):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        s.settimeout(scaled(2))
        s.connect(("127.0.0.1", car.port))
        s.sendall(b"GET /topology HTTP/1.1\r\nHost: a\r\n\r\n")
        socks.append(s)
    time.sleep(3)
    during = proc_status(pid)
    alive_probe = probe(car.port, timeout=1.0)
    for s in socks:
        s.close()
    wait(lambda: nfds(pid) <= 40, 15)
    time.sleep(1)
    after = proc_status(pid)
    grown = (during["VmHWM"] - before["VmHWM"]) * 1024
    back = (after["VmRSS"] - before["VmRSS"]) * 1024
    if SLOW:
        skip("/topology no-read: memory figures", "the heap of %s hides them" % (WRAP[0] if WRAP else "ASan"))
    else:
        check("/topology no-read: 60 clients that never read add %.1f MiB to VmHWM (<= 24 MiB; "
              "hwm reset %s, before %d kB)" % (grown / MiB, can_reset, before["VmHWM"]),
              grown <= 24 * MiB, (before, during))
        check("/topology no-read: the memory comes back when they leave (RSS %+.1f MiB)" % (back / MiB),
              back <= 4 * MiB, (before, after))
    check("/topology no-read: /readyz answered while they were held", alive_probe)
    busy = http(car.port, "/metrics", timeout=5)
    m = re.search(rb"tpumesh_http_busy_total (\d+)", busy[2]) if busy else None
    check("/topology no-read: transfers beyond the cap were answered 503 (%s)" % (m and m.group(1)),
          m is not None and int(m.group(1)) >= 1)


# ---- 3b. /watch clients that never read --------------------------------------------------------

WATCH_MAX = 16


def watch_open(port, src):
    """A /watch handshake from src with a small receive window; returns (socket, status line)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.settimeout(scaled(5))
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(Attack.UPGRADE.replace(b"/ws ", b"/watch "))
    data = b""
    while b"\r\n" not in data:
        try:
            chunk = s.recv(1)  # the status line only: the rest stays unread
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return s, data.decode("latin-1").strip()


def metric(port, name):
    r = http(port, "/metrics", timeout=5)
    m = re.search(rb"^%s (\d+)" % name.encode(), r[2], re.M) if r else None
    return int(m.group(1)) if m else None


def watch_abuse(car, sim, pod_names):
    pid = car.proc.pid
    time.sleep(0.5)
    can_reset = reset_hwm(pid)
    before = proc_status(pid)
    held = []
    for i in range(WATCH_MAX):
        s, st = watch_open(car.port, "127.64.1.%d" % (1 + i % 8))
        held.append((s, st))
    refused = []
    for i in range(40):
        s, st = watch_open(car.port, "127.64.2.%d" % (1 + i % 8))
        refused.append(st)
        s.close()
    check("/watch: %d clients admitted (101), the cap" % WATCH_MAX,
          all(st.endswith("101 Switching Protocols") for _, st in held), [st for _, st in held])
    check("/watch: 40 more refused with 503 (%s)" % sorted(set(refused)),
          all(re.match(r"HTTP/1\.[01] 503 ", st) for st in refused), refused)
    gen0 = generation(car.out) or 0
    probes = []
    for i in range(2):
        sim.client.set_ip(name=pod_names[7 + i], ip="10.98.%d.%d" % (i, random.randrange(1, 250)))
        wait(lambda: (generation(car.out) or 0) > gen0 + i, 10, 0.05)
        probes.append(probe(car.port, timeout=1.0))
    for _ in range(6):
        t0 = time.monotonic()
        probes.append(probe(car.port, timeout=1.0))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    during = proc_status(pid)
    check("/watch: 2 pod changes published while they are held (generation %d -> %s)"
          % (gen0, generation(car.out)), (generation(car.out) or 0) >= gen0 + 2)
    check("/watch: %d of %d /readyz probes answered while they are held" % (sum(probes), len(probes)),
          sum(probes) >= len(probes) - 1, probes)
    grown = (during["VmHWM"] - before["VmHWM"]) * 1024
    if SLOW:
        skip("/watch no-read: memory figures", "the heap of %s hides them" % (WRAP[0] if WRAP else "ASan"))
    else:
        check("/watch no-read: %d clients that never read, 2 changes of a %d-worker topology add "
              "%.1f MiB to VmHWM (<= 24 MiB; hwm reset %s)" % (WATCH_MAX, PODS, grown / MiB, can_reset),
              grown <= 24 * MiB, (before, during))
    # A stalled client is dropped once a document made no progress for the send timeout (10 s).
    # Under valgrind the sidecar pushes the 16 documents into the sockets many times slower, so
    # the last stall begins much later: the wait is scaled.
    dropped = wait(lambda: (metric(car.port, "tpumesh_watch_clients") == 0) or None, 25, 0.5)
    check("/watch: the clients that never read are dropped (tpumesh_watch_clients 0, dropped_total %s)"
          % metric(car.port, "tpumesh_watch_dropped_total"), dropped)
    for s, _ in held:
        s.close()
    s, st = watch_open(car.port, "127.64.3.1")
    s.close()
    check("/watch: their slots come back (a new client gets 101)", st.endswith("101 Switching Protocols"), st)
    if not SLOW:
        time.sleep(1)
        after = proc_status(pid)
        # What stays is bounded by the sidecar's own documents, not by the clients: freed
        # buffers of a document's size may stay in malloc's heap (glibc raises its mmap threshold
        # after such a free), so up to two documents plus 4 MiB may remain; one copy per client
        # (16 x the document) would not.
        doc = os.path.getsize(os.path.join(car.out, "topology.json"))
        kept = (after["VmRSS"] - before["VmRSS"]) * 1024
        check("/watch no-read: the memory comes back (RSS %+.1f MiB, document %.1f MiB)"
              % (kept / MiB, doc / MiB), kept <= 4 * MiB + 2 * doc, (before, after, doc))
    else:
        skip("/watch no-read: the memory comes back", "the heap of %s hides it" % (WRAP[0] if WRAP else "ASan"))
    check("/watch: the sidecar is alive", car.alive())


# ---- 4. HTTP semantics ------------------------------------------------------------------------

def semantics(car):
    get = http(car.port, "/readyz")
    head = http(car.port, "/readyz", method="HEAD")
    check("HEAD /readyz: same status and Content-Length as GET, no body",
          head is not None and get is not None and head[0] == get[0] and head[2] == b""
          and head[1].get("content-length") == str(len(get[2])), (get, head))
    t0 = time.monotonic()
    post = http(car.port, "/readyz", method="POST", body=b"x=" + b"y" * 5000, timeout=5)
    took = time.monotonic() - t0
    check("POST with a body: complete 405 with Allow: GET, HEAD and a body, connection closed "
          "(%.2f s)" % took,
          post is not None and post[0] == 405 and post[1].get("allow") == "GET, HEAD"
          and len(post[2]) == int(post[1].get("content-length", -1)) > 0 and took < scaled(5), post)
    # Pipelined requests (no real client sends them): the first is answered, then the
    # connection closes unread; two POSTs once sent libwebsockets 4.1 into a loop that never
    # returned, and a request parsed from its pipeline buffer into a use after free.
    for name, data in (
            ("two pipelined POSTs", b"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" * 2),
            ("a GET and a POST pipelined", b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
             b"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")):
        t0 = time.monotonic()
        first = send_raw(car.port, data, timeout=scaled(5))
        took = time.monotonic() - t0
        check("%s: the first answered, the connection closed (%.2f s), /readyz still answers"
              % (name, took), first.startswith(b"HTTP/1.1 405" if data.startswith(b"POST") else b"HTTP/1.1 ")
              and took < scaled(2) and probe(car.port), (first, took))
    opt = http(car.port, "/readyz", method="OPTIONS")
    check("OPTIONS: 405 with Allow", opt is not None and opt[0] == 405 and "GET" in opt[1].get("allow", ""),
          opt)
    nf = http(car.port, "/nope")
    check("404 with a body naming the paths", nf is not None and nf[0] == 404 and b"/readyz" in nf[2], nf)
    ct = http(car.port, "/topology", method="HEAD", timeout=10)
    check("HEAD /topology: headers only", ct is not None and ct[0] == 200 and ct[2] == b""
          and int(ct[1].get("content-length", 0)) > 1000, ct and ct[:2])


def early_and_health(sim2, tmp, tok):
    """Sidecar B on its own simulator: /readyz before its pod exists, /healthz when the API is
    gone, and a crash without a core dump."""
    out = os.path.join(tmp, "b")
    os.mkdir(out)
    cwd = os.path.join(tmp, "cwd-b")
    os.mkdir(cwd)
    # ASan's own SIGSEGV handler would exit instead of leaving the signal to the kernel.
    b = Sidecar(sim2, "late-0", out, tok, ["--stuck-limit", "10", "--expected-workers", "1"], cwd=cwd,
                core=True, env={"ASAN_OPTIONS": "handle_segv=0:detect_leaks=0"} if ASAN else None)
    try:
        r = wait(lambda: http(b.port, "/readyz"), 10)
        check("/readyz while the own pod is missing: 503 with a one-line reason",
              r is not None and r[0] == 503 and len(r[2]) > 1 and r[2].count(b"\n") == 1
              and r[2].endswith(b"\n"), r)
        # The pod appears, but LISTs fail for a while: every answer before the first LIST is a
        # 503 with one non-empty line (the sidecar's status before its first LIST is "waiting for
        # the first list of pods (selector ...)"; a failing step says what failed instead).
        sim2.client.fail(code=503, count=3, match="list")
        sim2.client.make(name="late-0", index=0)
        seen = []
        deadline = time.monotonic() + scaled(20)
        while time.monotonic() < deadline:
            x = http(b.port, "/readyz")
            if x is not None:
                seen.append((x[0], x[2]))
                if x[0] == 200:
                    break
            time.sleep(0.1)
        early = [x for x in seen if x[0] != 200]
        check("/readyz before the first list: 503 with a one-line reason each time (%d answers, "
              "reasons: %s)" % (len(early), sorted({x[1][:40] for x in early})),
              early and all(c == 503 and len(t) > 1 and t.count(b"\n") == 1 and t.endswith(b"\n")
                            for c, t in early), early[:5])
        check("pod appears: /readyz 200", wait(lambda: http(b.port, "/readyz")[0] == 200, 30), b.lines[-5:])
        sim2.stop()
        h = wait(lambda: (lambda x: x if x and x[0] == 503 else None)(http(b.port, "/healthz")),
                 25, 0.5)
        check("/healthz fails with the reason when the API is gone", h is not None
              and h[2].startswith(b"stuck: no progress from the Kubernetes API"), h)
        if WRAP:
            skip("no core dump on SIGSEGV", "%s handles the signal itself" % WRAP[0])
            return b
        os.kill(b.proc.pid, signal.SIGSEGV)
        st = b.reap(scaled(10))
        ctl_dir = os.path.join(tmp, "cwd-ctl")
        os.mkdir(ctl_dir)
        ctl = subprocess.Popen([sys.executable, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                               cwd=ctl_dir, preexec_fn=lambda: resource.setrlimit(
                                   resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
        _, cst = os.waitpid(ctl.pid, 0)
        ctl.returncode = -11
        if not os.WCOREDUMP(cst):
            skip("no core dump on SIGSEGV", "this machine writes no core files (a control process wrote none)")
        else:
            check("no core dump on SIGSEGV (PR_SET_DUMPABLE 0; a control process dumps core)",
                  st is not None and os.WIFSIGNALED(st) and not os.WCOREDUMP(st)
                  and not os.listdir(cwd), (st, os.listdir(cwd)))
        return b
    finally:
        b.stop()


def secrets(car, sim, pid):
    m = http(car.port, "/metrics", timeout=5)
    # A 401: the simulator changes its token; the sidecar logs the failure and recovers.
    sim.client.token(token="rotated-%08x" % random.getrandbits(32))
    wait(lambda: any("401" in l or "nauthori" in l for l in car.lines), 15)
    sim.client.token(token=TOKEN)
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = f.read()
    logs = "\n".join(car.lines)
    check("token absent from /metrics", m is not None and TOKEN.encode() not in m[2])
    check("token absent from the logs, including the 401 error lines (%d lines)" % len(car.lines),
          TOKEN not in logs and TOKEN[:16] not in logs)
    check("token absent from /proc/<pid>/environ", TOKEN.encode() not in env)


def main():
    if not os.path.exists(SIDECAR):
        fail("sidecar binary", SIDECAR + " missing")
        return done()
    tmp = tempfile.mkdtemp(prefix="tpumesh-http-abuse.")
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    sim = start_sim(["--token-file", tok, "--history", "400000"])
    sim2 = None
    car = None
    try:
        sim.client.bulk_create(count=PODS, job="trainer")
        pods = sim.client.pods()
        pods = pods.get("items") if isinstance(pods, dict) else pods
        names = [p["metadata"]["name"] for p in pods]
        own = next(p["metadata"]["name"] for p in pods
                   if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0")
        out = os.path.join(tmp, "a")
        os.mkdir(out)
        car = Sidecar(sim, own, out, tok, ["--expected-workers", str(PODS)])
        if not check("sidecar serves HTTP", car.port is not None, car.lines[-10:]):
            return done()
        if not check("%d-pod topology complete" % PODS,
                     wait(lambda: probe(car.port), 60, 0.2), car.lines[-10:]):
            return done()
        pid = car.proc.pid
        time.sleep(0.5)
        base_fds = nfds(pid)
        corpus(car)
        semantics(car)
        slowloris(car, sim, names)
        no_readers(car)
        watch_abuse(car, sim, names)
        secrets(car, sim, pid)
        fds = wait(lambda: (lambda n: n if n <= base_fds else None)(nfds(pid)), 12, 0.2)
        check("fd count back to its baseline (%d, now %s)" % (base_fds, fds or nfds(pid)), fds is not None)
        sim2_tok = os.path.join(tmp, "token2")
        with open(sim2_tok, "w") as f:
            f.write(TOKEN + "\n")
        sim2 = start_sim(["--token-file", sim2_tok])
        early_and_health(sim2, tmp, sim2_tok)
        rc = car.stop()
        check("sidecar exits 0 on SIGTERM (clean under %s)" % (WRAP[0] if WRAP else "the build's checks"),
              rc == 0, "rc %s\n%s" % (rc, "\n".join(car.lines[-30:])))
    finally:
        if car is not None:
            car.stop()
            if os.environ.get("VERBOSE"):
                print("\n".join("# " + l for l in car.lines))
        sim.stop()
        if sim2 is not None:
            sim2.stop()
        subprocess.run(["rm", "-rf", tmp])
    return done()


if __name__ == "__main__":
    sys.exit(main())
