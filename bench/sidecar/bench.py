"""tpumesh-sidecar against its peers on the same simulated pod stream (issue 5 benchmark).

Peers, all watching one kube-apiserver simulator at the same time:
  c   tpumesh-sidecar (--address-mode ip), publishing into a tmpfs dir (/dev/shm, like the
      emptyDir medium: Memory it uses in a pod)
  py  bench/sidecar/py_sidecar.py: python3-kubernetes list + watch writing DTENSOR_JOBS
  kc  kubectl get pods -w -o json (client-go), stdout read by this script

For each pod count: time from start to a complete worker list, LIST-to-publish (c and py from
their own logs), CPU seconds per 100,000 events (a "mixed" churn: annotations, readiness, IPs),
peak RSS (VmHWM), and event-to-output latency over a series of single IP changes (a change is
made through the simulator's control API at t0; the output is seen by inotify on the published
file, or on kubectl's stdout), the same changes measured from the moment the simulator wrote the
event to that peer's watch stream ("sent-to-output": leaves out the control call and the
simulator's own work), and tpumesh's own event-arrival-to-renamed quantiles from its /metrics.
Also: apiserver bytes sent per pod change per watcher.
Usage: /usr/bin/python3 bench/sidecar/bench.py [--sizes 1024,4096,16384] [--events N] [--changes M]
       [--ip-share F] [--burst N] [--fixed-events]
Issue 21's run: --sizes 4096 --events 20000 --fixed-events --ip-share 0.02 --burst 100
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
from simctl import start_sim  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu import cpu_seconds  # noqa: E402
from mem import PeakAnon  # noqa: E402

PY = "/usr/bin/python3"
SELECTOR = "batch.kubernetes.io/job-name=trainer"
# User-Agent substrings that tell the peers' watches apart in the simulator's stats.
AGENTS = {"c": "tpumesh", "py": "OpenAPI-Generator", "kc": "kubectl"}
IN_MOVED_TO = 0x80
IN_CLOSE_WRITE = 0x8
libc = ctypes.CDLL("libc.so.6", use_errno=True)


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Seen:
    """Records the first time each interesting string shows up in a peer's output."""

    def __init__(self):
        self.times = {}
        self.cond = threading.Condition()

    def note(self, text, t):
        with self.cond:
            for ip in re.findall(r"10\.2\d\d\.\d+\.\d+", text):
                self.times.setdefault(ip, t)
            self.cond.notify_all()

    def wait(self, key, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while key not in self.times:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.times[key]


def watch_file(path, seen, stop):
    """inotify on the file's directory: on every rename onto it (or onto ..data, whose swap
    publishes a new version of every file), read it and note its IPs."""
    fd = libc.inotify_init1(os.O_CLOEXEC)
    d, name = os.path.split(path)
    libc.inotify_add_watch(fd, d.encode(), IN_MOVED_TO | IN_CLOSE_WRITE)
    while not stop.is_set():
        buf = os.read(fd, 65536)
        t = time.perf_counter()
        off = 0
        hit = False
        while off < len(buf):
            _, _, _, ln = struct.unpack_from("iIII", buf, off)
            nm = buf[off + 16:off + 16 + ln].rstrip(b"\0").decode()
            off += 16 + ln
            hit = hit or nm in (name, "..data")  # tpumesh swaps ..data, a plain writer the name
        if hit:
            try:
                with open(path) as f:
                    seen.note(f.read(), t)
            except OSError:
                pass
    os.close(fd)


def read_kubectl(proc, seen, counts):
    for line in proc.stdout:
        t = time.perf_counter()
        # kubectl prints the initial LIST pages as List objects and then one
        # object per event: count pods by their own "kind" line.
        if re.match(r'^\s*"kind": "Pod",?$', line):
            counts["objects"] += 1
            if counts["objects"] == counts["want"]:
                counts["complete_at"] = time.time()
        if '"podIP"' in line or '"ip"' in line:
            seen.note(line, t)


def pct(vals, p):
    if not vals:
        return float("nan")
    s = sorted(vals)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def all_pods(c):
    r = c.pods()
    if isinstance(r, dict):
        r = r.get("items") or r.get("pods") or []
    return r


def run_size(n, events, changes, workdir, churn_args=None):
    # A peer that falls behind (the Python client on a long churn) must not be cut off as a slow
    # consumer: it catches up, and its CPU is what the run measures.
    sim = start_sim(["--history", "400000", "--bookmark-interval", "60", "--slow-consumer-timeout", "0"])
    c = sim.client
    res = {"pods": n}
    procs = []
    stop = threading.Event()
    try:
        t0 = time.time()
        c.bulk_create(count=n, job="trainer")
        res["create_s"] = time.time() - t0
        own = next(p["metadata"]["name"] for p in all_pods(c)
                   if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0")
        cdir = os.path.join(workdir, "c")
        os.makedirs(cdir)
        pyfile = os.path.join(workdir, "py", "dtensor.env")
        os.makedirs(os.path.dirname(pyfile))
        seen = {k: Seen() for k in ("c", "py", "kc")}
        for key, path in (("c", os.path.join(cdir, "dtensor.env")), ("py", pyfile)):
            threading.Thread(target=watch_file, args=(path, seen[key], stop), daemon=True).start()
        time.sleep(0.2)

        # Start-up one peer at a time (each measured alone on the 2-core machine): until
        # each has a complete worker list.
        logs = {"c": [], "py": []}
        kcounts = {"objects": 0, "want": n, "complete_at": None}

        def drain(key, proc):
            for line in proc.stderr:
                logs[key].append((time.time(), line.rstrip("\n")))

        def c_done():
            return any("topology complete with %d workers" % n in l for _, l in logs["c"]) and \
                any("published generation" in l for _, l in logs["c"])

        def py_done():
            return any(l.startswith("PUBLISHED") and l.endswith(" %d" % n) for _, l in logs["py"])

        def wait_until(pred):
            deadline = time.time() + 900
            while time.time() < deadline and not pred():
                time.sleep(0.02)

        start = {}
        start["c"] = time.time()
        pc = subprocess.Popen([os.path.join(BUILD, "bin/tpumesh-sidecar"), "--apiserver", sim.url,
                               "--namespace", "default", "--pod-name", own, "--out-dir", cdir,
                               "--address-mode", "ip", "--expected-workers", str(n),
                               "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--watch-mode", "direct"],
                              stderr=subprocess.PIPE, text=True)
        procs = [("c", pc)]
        c_anon = PeakAnon(pc.pid)
        threading.Thread(target=drain, args=("c", pc), daemon=True).start()
        wait_until(c_done)
        start["py"] = time.time()
        pp = subprocess.Popen([PY, os.path.join(ROOT, "bench/sidecar/py_sidecar.py"), "--url", sim.url,
                               "--selector", SELECTOR, "--out", pyfile], stderr=subprocess.PIPE, text=True)
        procs.append(("py", pp))
        threading.Thread(target=drain, args=("py", pp), daemon=True).start()
        wait_until(py_done)
        start["kc"] = time.time()
        pk = subprocess.Popen(["kubectl", "--server", sim.url, "--request-timeout", "0", "get", "pods",
                               "-n", "default", "-l", SELECTOR, "-w", "-o", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(("kc", pk))
        threading.Thread(target=read_kubectl, args=(pk, seen["kc"], kcounts), daemon=True).start()
        wait_until(lambda: kcounts["complete_at"])

        def logtime(key, pred):
            return next((t for t, l in logs[key] if pred(l)), None)
        c_pub = logtime("c", lambda l: "published generation" in l and l.endswith(": complete"))
        py_pub = logtime("py", lambda l: l.startswith("PUBLISHED") and l.endswith(" %d" % n))
        res["startup_s"] = {"c": (c_pub or float("nan")) - start["c"],
                            "py": (py_pub or float("nan")) - start["py"],
                            "kc": (kcounts["complete_at"] or float("nan")) - start["kc"]}
        # LIST response -> complete file: from each peer's own log lines.
        c_publ = next((l for _, l in logs["c"] if "published generation" in l and l.endswith(": complete")),
                      None)
        py_list = logtime("py", lambda l: l.startswith("LISTED"))
        py_list_t = float(next(l for _, l in logs["py"] if l.startswith("LISTED")).split()[1]) if py_list else None
        py_pub_t = float(next(l for _, l in logs["py"] if l.startswith("PUBLISHED") and l.endswith(" %d" % n)).split()[1]) if py_pub else None
        # tpumesh says it itself: its first publish line gives the time from the LIST's last
        # byte to the files renamed (log stamps have 1 ms steps and come from two threads).
        m = re.search(r"rewritten, ([0-9.]+) ms after the change arrived", c_publ or "")
        res["list_to_publish_ms"] = {
            "c": float(m.group(1)) if m else float("nan"),
            "py": (py_pub_t - py_list_t) * 1000 if py_list_t and py_pub_t else float("nan"),
        }

        # CPU per event: a mixed churn, then a sentinel change every peer must show.
        cpu0 = {k: cpu_seconds(p.pid) for k, p in procs}
        c.call("reset-stats")
        t_churn = time.time()
        c.churn(events, kind="mixed", wait=True, **(churn_args or {}))
        churn_s = time.time() - t_churn
        sentinel = "10.250.250.250"
        c.set_ip(name=own, ip=sentinel)
        for k in seen:
            seen[k].wait(sentinel, 600)
        cpu1 = {k: cpu_seconds(p.pid) for k, p in procs}
        st = c.stats()
        res["churn"] = {"events": events, "seconds": churn_s}
        res["cpu_per_100k_events_s"] = {k: (cpu1[k] - cpu0[k]) * 100000.0 / events for k in cpu0}
        res["bytes_per_event_per_watcher"] = st["bytesSent"] / max(1, st["eventsSent"])

        # Latency: single IP changes, one at a time, one peer at a time (the others are
        # SIGSTOPped so that the 2-core machine measures the peer, not CPU contention;
        # their streams buffer and they catch up afterwards). The apiserver bytes per
        # change are measured first with every watcher running.
        pods = [p["metadata"]["name"] for p in all_pods(c)]
        lat = {k: [] for k in seen}
        lat_sent = {k: [] for k in seen}
        seq = [0]

        def change():
            i = seq[0]
            seq[0] += 1
            ip = "10.2%02d.%d.%d" % (i // 62500 % 100, (i // 250) % 250, i % 250 + 1)
            name = pods[(i * 7919) % len(pods)]
            t0 = time.perf_counter()
            c.set_ip(name=name, ip=ip)
            return ip, t0

        c.call("reset-stats")
        for _ in range(50):
            ip, _t0 = change()
            for k in seen:
                seen[k].wait(ip, 60)
        st = c.stats()
        res["bytes_per_change_per_watcher"] = st["bytesSent"] / 50.0 / max(1, st["watchesActive"])
        for key in ("py", "kc", "c"):  # c last: its /metrics ring then holds its own phase
            others = [p for k, p in procs if k != key]
            for p in others:
                p.send_signal(signal.SIGSTOP)
            time.sleep(0.2)
            n_changes = max(changes, 1100) if key == "c" else changes
            for _ in range(n_changes):
                ip, t0 = change()
                t1 = seen[key].wait(ip, 30)
                if t1 is not None:
                    lat[key].append((t1 - t0) * 1000.0)
                    # The same change measured from the moment the apiserver wrote the event
                    # to this peer's watch stream (simulator's CLOCK_MONOTONIC stamp), which
                    # leaves out the control call and the simulator's own work.
                    sent = [w.get("lastEventSent", 0.0) for w in c.stats().get("watchers", [])
                            if AGENTS[key] in w.get("userAgent", "")]
                    if sent and 0 < t1 - max(sent) < 30:
                        lat_sent[key].append((t1 - max(sent)) * 1000.0)
            for p in others:
                p.send_signal(signal.SIGCONT)
        res["latency_ms"] = {k: {"p50": pct(v, 50), "p99": pct(v, 99), "n": len(v)} for k, v in lat.items()}
        res["latency_from_send_ms"] = {k: {"p50": pct(v, 50), "p99": pct(v, 99), "n": len(v)}
                                       for k, v in lat_sent.items()}
        res["peak_rss_kib"] = {k: peak_rss_kib(p.pid) for k, p in procs}
        res["c_peak_anon_kib"] = c_anon.stop()
        with open("/proc/%d/status" % pc.pid) as f:
            res["c_rss_detail"] = {l.split(":")[0]: l.split()[1] for l in f
                                   if l.split(":")[0] in ("RssAnon", "RssFile", "VmHWM")}
        # The sidecar's own view: event bytes read to files renamed (tpumesh_publish_latency_seconds).
        port = next((re.search(r"\(port (\d+)\)", l).group(1) for _, l in logs["c"]
                     if "serving /healthz" in l), None)
        res["c_internal_ms"] = {}
        if port:
            import urllib.request
            body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
            for m in re.finditer(r'tpumesh_publish_latency_seconds\{quantile="([0-9.]+)"\} ([0-9.e-]+)', body):
                res["c_internal_ms"][m.group(1)] = float(m.group(2)) * 1000
    finally:
        stop.set()
        for _, p in procs:
            p.terminate()
        for _, p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        sim.stop()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,4096,16384")
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--ip-share", type=float, help="mixed churn: this fraction of events change a pod IP "
                    "(the rest 2/3 annotations, 1/3 readiness flips); default 1/4")
    ap.add_argument("--burst", type=int, help="churn events stored this many at a time (default 64)")
    ap.add_argument("--fixed-events", action="store_true",
                    help="churn --events at every size (default: fewer above 1,024 pods)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    results = []
    for n in (int(x) for x in args.sizes.split(",")):
        # The Python peer needs O(pods) per event: fewer churn events for big jobs (CPU is
        # reported per 100,000 events either way).
        events = args.events if n <= 1024 or args.fixed_events else max(1000, args.events * 1024 // n)
        churn_args = {k: v for k, v in (("ip_share", args.ip_share), ("burst", args.burst)) if v is not None}
        workdir = "/dev/shm/tpumesh-bench-%d-%d" % (os.getpid(), n)
        os.makedirs(workdir)
        try:
            r = run_size(n, events, args.changes, workdir, churn_args)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        results.append(r)
        report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def report(r):
    n = r["pods"]
    print("== %d pods (churn %d events in %.1fs) ==" % (n, r["churn"]["events"], r["churn"]["seconds"]))
    row = "%-34s %12s %12s %12s %10s %10s"
    print(row % ("", "tpumesh", "python", "kubectl", "py/c", "kc/c"))

    def line(label, d, fmt="%.3f"):
        c, p, k = d.get("c", float("nan")), d.get("py", float("nan")), d.get("kc", float("nan"))
        rp = p / c if c else float("nan")
        rk = k / c if c else float("nan")
        print(row % (label, fmt % c, fmt % p, fmt % k, "%.1fx" % rp, "%.1fx" % rk))
    line("CPU s per 100k events", r["cpu_per_100k_events_s"])
    line("peak RSS MiB", {k: v / 1024.0 for k, v in r["peak_rss_kib"].items()}, "%.1f")
    line("start to complete list s", r["startup_s"])
    line("LIST to complete publish ms", r["list_to_publish_ms"], "%.1f")
    line("event-to-output p50 ms", {k: v["p50"] for k, v in r["latency_ms"].items()}, "%.2f")
    line("event-to-output p99 ms", {k: v["p99"] for k, v in r["latency_ms"].items()}, "%.2f")
    ls = r.get("latency_from_send_ms", {})
    line("event sent-to-output p50 ms", {k: v["p50"] for k, v in ls.items()}, "%.2f")
    line("event sent-to-output p99 ms", {k: v["p99"] for k, v in ls.items()}, "%.2f")
    print("tpumesh internal event arrival to files renamed (ms): " +
          ", ".join("q%s=%.3f" % (q, v) for q, v in sorted(r.get("c_internal_ms", {}).items())))
    print("tpumesh peak RssAnon %.1f MiB (sampled every 5 ms; goal <= 8 MiB at 4,096 pods), "
          "VmHWM %.1f MiB" % (r.get("c_peak_anon_kib", 0) / 1024.0, r["peak_rss_kib"]["c"] / 1024.0))
    print("tpumesh RSS detail at the end (KiB): %s" % r.get("c_rss_detail"))
    print("apiserver bytes per pod change per watcher: %.0f (mixed churn: %.0f per event)" %
          (r["bytes_per_change_per_watcher"], r["bytes_per_event_per_watcher"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
