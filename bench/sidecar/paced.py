"""tpumesh-sidecar alone under paced single changes: what one relevant change costs.

bench.py measures mixed churn, which arrives in bursts the sidecar coalesces. This runs the
sidecar alone (no peers) on the kube-apiserver simulator and makes one change at a time at a
fixed rate, so every change is its own recompute and publish. Per run it prints:

  - CPU milliseconds per change (utime + stime from /proc, ticks of 10 ms),
  - publishes (tpumesh_publishes_total) and how often the worker list was built from the store
    (tpumesh_worker_list_builds_total, counted since start-up, so the build after the initial
    LIST is in it),
  - event arrival to files renamed p50 / p90 / p99, from the sidecar's debug line
    "generation N: T us from event arrival (wake-up after .. us; workers .. us, render .. us,
    write .. us)", with the same quantiles of each part.

Kinds of change: ip (status.podIP of a random pod), ready (Ready condition flips), label (a
label the sidecar does not use: nothing must be published).

  ROOT=$PWD BUILD=build /usr/bin/python3 bench/sidecar/paced.py --pods 4096 --changes 500 \\
      --rate 100 --kind ip

Not part of make test; nothing is asserted (timings on a shared 2-core machine).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# bench.py's setup: where the build is, the simulator, the CPU clock.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import BUILD, cpu_seconds, start_sim  # noqa: E402

DEBUG_LINE = re.compile(r"generation \d+: (\d+) us from event arrival \(wake-up after (-?\d+) us; "
                        r"workers (\d+) us, render (\d+) us, write (\d+) us\)")
PARTS = ("total", "wake-up", "workers", "render", "write")


def pct(vals, p):
    if not vals:
        return float("nan")
    s = sorted(vals)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def metric(port, name):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return float("nan")


def run(pods, changes, rate, kind, mode):
    sim = start_sim(["--history", "400000", "--bookmark-interval", "60"])
    c = sim.client
    out = tempfile.mkdtemp(prefix="tpumesh-paced-", dir="/dev/shm")
    proc = None
    try:
        c.bulk_create(count=pods, job="trainer")
        items = c.pods()
        names = [p["metadata"]["name"] for p in items]
        own = next(p["metadata"]["name"] for p in items
                   if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0")
        logs = []
        proc = subprocess.Popen([os.path.join(BUILD, "bin/tpumesh-sidecar"), "--apiserver", sim.url,
                                 "--namespace", "default", "--pod-name", own, "--out-dir", out,
                                 "--address-mode", mode, "--expected-workers", str(pods),
                                 "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--watch-mode", "direct", "--log-level", "debug"],
                                stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: [logs.append(l) for l in proc.stderr], daemon=True).start()
        deadline = time.time() + 300
        while not any("topology complete" in l for l in logs) and time.time() < deadline:
            time.sleep(0.05)
        port = next(int(re.search(r"\(port (\d+)\)", l).group(1)) for l in logs if "serving /healthz" in l)
        time.sleep(0.5)
        start = len(logs)
        pub0 = metric(port, "tpumesh_publishes_total")
        cpu0 = cpu_seconds(proc.pid)
        t_next = time.monotonic()
        for i in range(changes):
            name = names[(i * 7919) % len(names)]
            if kind == "ip":
                c.set_ip(name=name, ip="10.2%02d.%d.%d" % (i // 62500 % 100, (i // 250) % 250, i % 250 + 1))
            elif kind == "ready":
                # Each pod flips twice in a row (not Ready, Ready again): every call is a change.
                c.ready(name=names[((i // 2) * 7919) % len(names)], ready=i % 2 == 1)
            else:
                c.labels(name=name, set={"paced": str(i)})
            t_next += 1.0 / rate
            time.sleep(max(0.0, t_next - time.monotonic()))
        time.sleep(1.0)
        cpu = cpu_seconds(proc.pid) - cpu0
        res = {
            "pods": pods, "kind": kind, "mode": mode, "changes": changes, "rate": rate,
            "cpu_ms_per_change": cpu * 1000.0 / changes,
            "publishes": metric(port, "tpumesh_publishes_total") - pub0,
            "builds": metric(port, "tpumesh_worker_list_builds_total"),
        }
        rows = [tuple(int(g) for g in m.groups()) for m in (DEBUG_LINE.search(l) for l in logs[start:]) if m]
        res["us"] = {p: [pct([r[k] for r in rows], q) for q in (50, 90, 99)] for k, p in enumerate(PARTS)}
        res["files"] = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))
                        if not f.startswith(".")}
        return res
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        sim.stop()
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=4096)
    ap.add_argument("--changes", type=int, default=500)
    ap.add_argument("--rate", type=float, default=100.0, help="changes per second")
    ap.add_argument("--kind", choices=("ip", "ready", "label"), default="ip")
    ap.add_argument("--mode", choices=("ip", "dns"), default="ip", help="--address-mode of the sidecar")
    a = ap.parse_args()
    r = run(a.pods, a.changes, a.rate, a.kind, a.mode)
    print("%d pods, %d %s changes at %g/s (%s mode): %.3f ms CPU per change, %d publishes, "
          "worker list built %d times" %
          (r["pods"], r["changes"], r["kind"], r["rate"], r["mode"], r["cpu_ms_per_change"],
           r["publishes"], r["builds"]))
    for p in PARTS:
        if r["publishes"] > 0:
            print("  %-8s p50 %6d  p90 %6d  p99 %6d us" % ((p,) + tuple(r["us"][p])))
    print("  files: " + ", ".join("%s %d B" % kv for kv in r["files"].items()))


if __name__ == "__main__":
    main()
