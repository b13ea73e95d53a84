"""The sidecar's cost per pod event, short enough for CI (`make bench-check`), and the harness
the full figures and profiles are taken with.

One simulated Indexed Job of --pods ready pods; tpumesh-sidecar (--watch-mode direct,
--address-mode ip, publishing into /dev/shm) syncs it; then the simulator stores --events MODIFIED
events in bursts of --burst, of which --ip-share change a pod IP (the rest annotations and
readiness flips), and finally one sentinel IP change that every peer must show. Measured over
the churn, sentinel included:

  - the sidecar's CPU time (schedstat, cpu.py) and, with --python, the in-repo Python peer's
    (py_sidecar.py: the official client, list + watch) on the same stream: their ratio;
  - with --callgrind, the instructions the sidecar executed per event (valgrind's callgrind,
    counters zeroed after the sync and dumped after the sentinel): a count that does not
    depend on how loaded the machine is;
  - VmHWM and RssAnon of the sidecar at the end.

--budget FILE compares each figure with its limit there and exits 1 when one is over; every
figure is printed with its limit. --perf FILE records the churn with `perf record -g`.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# bench.py's setup: where the repository and the build are, the simulator, the peers' selector.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import BUILD, PY, ROOT, SELECTOR, PeakAnon, cpu_seconds, start_sim  # noqa: E402
from mem import status_kib  # noqa: E402

SENTINEL = "10.250.250.250"


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise SystemExit("bench-check: timed out waiting for %s" % what)


def file_has(path, text):
    try:
        with open(path) as f:
            return text in f.read()
    except OSError:
        return False


def entries(path):
    try:
        with open(path) as f:
            m = re.search(r"DTENSOR_JOBS='?([^'\n]*)", f.read())
    except OSError:
        return 0
    return len(m.group(1).split(",")) if m and m.group(1) else 0


def callgrind_total(path):
    """Instructions (Ir) in a callgrind dump: its "totals:" (or "summary:") line."""
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise SystemExit("bench-check: no totals in %s" % path)


def smaps_breakdown(pid):
    """Where the resident memory is: KiB of Rss and of anonymous pages per mapping, grouped by
    what backs it (a library's file, [heap], [stack], or "anon" for unnamed mappings: thread
    stacks and allocator arenas)."""
    out = {}
    name = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":") or "-" in parts[0]:
                name = os.path.basename(parts[5]) if len(parts) > 5 else "anon"
                continue
            if parts[0] in ("Rss:", "Anonymous:"):
                e = out.setdefault(name, {"rss": 0, "anon": 0})
                e["rss" if parts[0] == "Rss:" else "anon"] += int(parts[1])
    return out


def run(args):
    work = tempfile.mkdtemp(prefix="tpumesh-check-", dir="/dev/shm")
    # A peer that falls behind must not be cut off (slow-consumer timeout 0): it catches up.
    sim = start_sim(["--history", "400000", "--bookmark-interval", "60", "--slow-consumer-timeout", "0"])
    c = sim.client
    procs = []
    res = {"pods": args.pods, "events": args.events, "ip_share": args.ip_share, "burst": args.burst}
    try:
        c.bulk_create(count=args.pods, job="trainer")
        pods = c.pods()
        if isinstance(pods, dict):
            pods = pods.get("items") or pods.get("pods") or []
        own = next(p["metadata"]["name"] for p in pods
                   if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0")
        cdir = os.path.join(work, "c")
        os.makedirs(cdir)
        cmd = [args.sidecar or os.path.join(BUILD, "bin/tpumesh-sidecar"), "--apiserver", sim.url, "--namespace", "default",
               "--pod-name", own, "--out-dir", cdir, "--address-mode", "ip", "--expected-workers",
               str(args.pods), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
               "--watch-mode", "direct", "--log-level", "warn"]
        cg_out = os.path.join(work, "callgrind.out")
        if args.callgrind:
            cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + cg_out + ".%p",
                   "--collect-atstart=yes"] + cmd
        pc = subprocess.Popen(cmd, stderr=open(os.path.join(work, "c.log"), "w"))
        procs.append(pc)
        peak = PeakAnon(pc.pid)
        cfile = os.path.join(cdir, "dtensor.env")
        wait_for(lambda: entries(cfile) == args.pods, 600, "the sidecar's first complete publish")
        pp = None
        pyfile = os.path.join(work, "py.env")
        if args.python:
            pp = subprocess.Popen([PY, os.path.join(ROOT, "bench/sidecar/py_sidecar.py"), "--url", sim.url,
                                   "--selector", SELECTOR, "--out", pyfile],
                                  stderr=open(os.path.join(work, "py.log"), "w"))
            procs.append(pp)
            wait_for(lambda: entries(pyfile) == args.pods, 600, "the Python peer's first publish")
        time.sleep(1.0)  # let start-up settle (paced publishes, informer resync)
        if args.callgrind:
            subprocess.run(["callgrind_control", "-z", str(pc.pid)], check=True, stdout=subprocess.DEVNULL)
        perf = None
        if args.perf:
            perf = subprocess.Popen(["perf", "record", "-g", "-o", args.perf, "-p", str(pc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        cpu0 = {"c": cpu_seconds(pc.pid)}
        if pp:
            cpu0["py"] = cpu_seconds(pp.pid)
        t0 = time.time()
        c.churn(args.events, kind="mixed", ip_share=args.ip_share, burst=args.burst, rate=args.rate, wait=True)
        c.set_ip(name=own, ip=SENTINEL)
        wait_for(lambda: file_has(cfile, SENTINEL), 600, "the sidecar to publish the sentinel")
        if pp:
            wait_for(lambda: file_has(pyfile, SENTINEL) or pp.poll() is not None, 1800,
                     "the Python peer to publish the sentinel")
            if pp.poll() is not None:
                with open(os.path.join(work, "py.log")) as f:
                    raise SystemExit("bench-check: the Python peer exited:\n" + f.read()[-3000:])
        res["seconds"] = time.time() - t0
        cpu1 = {"c": cpu_seconds(pc.pid)}
        if pp:
            cpu1["py"] = cpu_seconds(pp.pid)
        if perf:
            perf.send_signal(2)
            perf.wait(60)
        res["cpu_us_per_event"] = {k: (cpu1[k] - cpu0[k]) * 1e6 / args.events for k in cpu0}
        if pp:
            res["cpu_ratio_vs_python"] = res["cpu_us_per_event"]["c"] / res["cpu_us_per_event"]["py"]
        if args.callgrind:
            subprocess.run(["callgrind_control", "-d", str(pc.pid)], check=True, stdout=subprocess.DEVNULL)
            dumps = sorted(glob.glob(cg_out + ".%d.*" % pc.pid))
            wait_for(lambda: sorted(glob.glob(cg_out + ".%d.*" % pc.pid)), 60, "the callgrind dump")
            dumps = sorted(glob.glob(cg_out + ".%d.*" % pc.pid))
            res["instructions_per_event"] = callgrind_total(dumps[-1]) / args.events
            if args.keep_callgrind:
                shutil.copy(dumps[-1], args.keep_callgrind)
        st = status_kib(pc.pid)
        res["smaps_kib"] = smaps_breakdown(pc.pid)
        res["vmhwm_kib"] = st.get("VmHWM")
        res["rss_anon_end_kib"] = st.get("RssAnon")
        res["rss_anon_peak_kib"] = peak.stop()
        if pp:
            res["python_vmhwm_kib"] = status_kib(pp.pid).get("VmHWM")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        sim.stop()
        if args.keep_log:
            shutil.copy(os.path.join(work, "c.log"), args.keep_log)
        shutil.rmtree(work, ignore_errors=True)
    return res


FIGURES = [
    # key, label, format
    ("instructions_per_event", "tpumesh instructions per event (callgrind)", "%.0f"),
    ("cpu_ratio_vs_python", "tpumesh CPU / Python client CPU on the same stream", "%.4f"),
    ("cpu_us_per_event.c", "tpumesh CPU us per event", "%.1f"),
    ("cpu_us_per_event.py", "Python client CPU us per event", "%.1f"),
    ("rss_anon_peak_kib", "tpumesh peak RssAnon KiB", "%.0f"),
    ("rss_anon_end_kib", "tpumesh RssAnon at the end KiB", "%.0f"),
    ("vmhwm_kib", "tpumesh VmHWM KiB", "%.0f"),
]


def get(res, key):
    v = res
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1024)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--ip-share", type=float, default=0.02)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0, help="events per second (0: as fast as the simulator can)")
    ap.add_argument("--sidecar", help="the binary to measure (default $BUILD/bin/tpumesh-sidecar)")
    ap.add_argument("--python", action="store_true", help="also run the Python peer on the same stream")
    ap.add_argument("--callgrind", action="store_true", help="run the sidecar under callgrind")
    ap.add_argument("--keep-callgrind", help="copy the churn's callgrind dump here")
    ap.add_argument("--perf", help="perf record -g the churn into this file")
    ap.add_argument("--keep-log", help="copy the sidecar's log here")
    ap.add_argument("--budget", help="JSON {figure: limit}; exit 1 when a figure is over its limit")
    ap.add_argument("--only", help="comma-separated figures whose limits this run checks (default: all)")
    ap.add_argument("--smaps", type=int, default=0, help="print the N largest mappings at the end")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    res = run(args)
    limits = {}
    if args.budget:
        with open(args.budget) as f:
            limits = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        if args.only:
            limits = {k: v for k, v in limits.items() if k in args.only.split(",")}
    print("bench-check: %d pods, %d events (%.0f%% IP changes, bursts of %d) in %.1f s" %
          (args.pods, args.events, args.ip_share * 100, args.burst, res["seconds"]))
    over = []
    for key, label, fmt in FIGURES:
        v = get(res, key)
        if v is None:
            continue
        lim = limits.get(key)
        if lim is None:
            print("  %-52s %12s" % (label, fmt % v))
            continue
        ok = v <= lim
        print("  %-52s %12s  limit %s  %s" % (label, fmt % v, fmt % lim, "ok" if ok else "OVER"))
        if not ok:
            over.append(label)
    missing = [k for k in limits if get(res, k) is None]
    for k in missing:
        print("  %-52s %12s  limit %s  NOT MEASURED" % (k, "-", limits[k]))
    if args.smaps and res.get("smaps_kib"):
        rows = sorted(res["smaps_kib"].items(), key=lambda kv: -kv[1]["rss"])
        print("  resident memory by mapping at the end (KiB rss / anonymous):")
        for name, e in rows[:args.smaps]:
            print("    %-40s %8d %8d" % (name, e["rss"], e["anon"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if over or missing:
        print("bench-check: over the budget: %s" % ", ".join(over + missing))
        sys.exit(1)
    if limits:
        print("bench-check: within the budget")


if __name__ == "__main__":
    main()
