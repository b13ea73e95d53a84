#!/usr/bin/python3
"""bench/init/bench_init.py - tpumesh-init figures for the note (issue 4).

Measures, for build/bin/tpumesh-init --skip-init:
  static   the GKE TPU VM path (TPU_WORKER_* env, v4-32, 4 workers): wall time
           from process start (fork+exec) to exit, i.e. to all files written
           and renamed into place (goal <= 10 ms);
  api      the Cloud TPU API path against tests/sim (metadata server + TPU
           API, node READY and HEALTHY on the first GET, so no waits): same
           wall time, which includes 3 metadata GETs, 1 API GET and the
           simulators' (Python) reply latency;
  grpc     the legacy KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS path (no network).
the CPU time (user + system, from wait4: steadier than wall time on a busy
machine) and the peak RSS of each run (ru_maxrss). `floor` is the same binary
with --version: what loading its shared libraries costs before main() does any
work. As a yardstick in the same
run it also times a Python process that only parses the same environment and
writes one file (`python3 -S -c ...`), the cheapest Python stand-in for an init
container.

The output directory is on tmpfs (/dev/shm) like the pod's memory-backed
emptyDir. Load average is printed: the figures are only as quiet as the machine.

Usage: bench_init.py [--build DIR] [--runs N]. Prints one line per case:
  <case> runs=N median_ms=.. p90_ms=.. max_ms=.. rss_kb_max=..
Standard library only; simulators bind 127.0.0.1 and are killed at exit.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GKE_ENV = {
    "TPU_WORKER_ID": "1",
    "TPU_WORKER_HOSTNAMES": "w-0.s,w-1.s,w-2.s,w-3.s",
    "TPU_ACCELERATOR_TYPE": "v4-32",
    "TPU_TOPOLOGY": "2x2x4",
    "TPU_HOST_BOUNDS": "1,1,4",
    "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
}

PY_PEER = r"""
import os, json
h = os.environ["TPU_WORKER_HOSTNAMES"].split(",")
i = int(os.environ["TPU_WORKER_ID"])
d = os.environ["OUT"]
with open(d + "/tf_config.json.tmp", "w") as f:
    json.dump({"cluster": {"worker": [x + ":10000" for x in h]}, "task": {"type": "worker", "index": i}}, f)
    f.flush(); os.fsync(f.fileno())
os.rename(d + "/tf_config.json.tmp", d + "/tf_config.json")
"""


def run_once(argv, env):
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    t1 = time.perf_counter_ns()
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if p.returncode != 0:
        raise SystemExit("%s failed (%d): %s" % (argv[0], p.returncode, err[-400:]))
    return (t1 - t0) / 1e6, ru.ru_maxrss, (ru.ru_utime + ru.ru_stime) * 1000.0


def bench(cases, runs):
    """Run every case once per round, round after round (interleaved, so a
    noisy shared machine slows all cases alike). cases: [(name, argv, env)].
    Prints one line per case; returns ({name: median_ms}, {name: min_ms})."""
    times = {c[0]: [] for c in cases}
    rss = {c[0]: [] for c in cases}
    cpu = {c[0]: [] for c in cases}
    for _ in range(3):  # warm the page cache
        for _, argv, env in cases:
            run_once(argv, env)
    for _ in range(runs):
        for name, argv, env in cases:
            ms, kb, cpu_ms = run_once(argv, env)
            times[name].append(ms)
            rss[name].append(kb)
            cpu[name].append(cpu_ms)
    med = {}
    best = {}
    for name, _, _ in cases:
        t = sorted(times[name])
        p90 = t[min(len(t) - 1, int(len(t) * 0.9))]
        med[name] = statistics.median(t)
        best[name] = t[0]
        print("%-7s runs=%d median_ms=%.2f p90_ms=%.2f min_ms=%.2f max_ms=%.2f cpu_ms_median=%.2f "
              "rss_kb_max=%d" % (name, runs, med[name], p90, t[0], t[-1],
                                 statistics.median(cpu[name]), max(rss[name])), flush=True)
    return med, best


def start_sim(args):
    p = subprocess.Popen([sys.executable] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    if not line.startswith("READY port="):
        p.kill()
        raise SystemExit("simulator did not start: %r" % line)
    return p, int(line.split()[1].split("=")[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    init = os.path.join(build, "bin", "tpumesh-init")
    # The shared volume is an emptyDir with medium: Memory (docs/DESIGN.md §4): use
    # tmpfs too, so fsync costs what it costs in a pod.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    tmp = tempfile.mkdtemp(prefix="tpumesh-bench-", dir=shm)
    sims = []
    try:
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        base = {"PATH": "/usr/bin:/bin", "TPUMESH_ANNOTATIONS_FILE": os.path.join(tmp, "none"),
                "TPUMESH_METADATA_HOST": "127.0.0.1:9", "TPUMESH_LOG_LEVEL": "warn"}
        argv = [init, "--skip-init", "--out-dir", out]
        md, mport = start_sim([os.path.join(ROOT, "tests/sim/gce-metadata/gce_metadata_sim.py"),
                               "--token", "t"])
        sims.append(md)
        api, aport = start_sim([os.path.join(ROOT, "tests/sim/tpu-api/tpu_api_sim.py"), "--token", "t",
                                "--node", 'b={"acceleratorType":"v3-32"}'])
        sims.append(api)
        api_env = dict(base, TPUMESH_METADATA_HOST="127.0.0.1:%d" % mport,
                       TPUMESH_TPU_API_ENDPOINT="http://127.0.0.1:%d" % aport, TPUMESH_TPU="b")
        kube = "grpc://10.0.0.1:8470,grpc://10.0.0.2:8470,grpc://10.0.0.3:8470"
        med, best = bench([
            # The same binary doing no work: dynamic loader + library constructors
            # (libcurl, gRPC, libwebsockets, ...), the floor under every case.
            ("floor", [init, "--version"], base),
            ("static", argv, dict(base, **GKE_ENV)),
            ("grpc", argv, dict(base, KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS=kube)),
            ("api", argv, api_env),
            ("python", [sys.executable, "-S", "-c", PY_PEER], dict(base, OUT=out, **GKE_ENV)),
        ], a.runs)
        print("static minus floor (resolve + derive + render + publish): median %.2f ms, "
              "min %.2f ms" % (med["static"] - med["floor"], best["static"] - best["floor"]))
        print("api minus floor (3 metadata GETs + 1 API GET + publish, no waits): median %.2f ms, "
              "min %.2f ms" % (med["api"] - med["floor"], best["api"] - best["floor"]))
        print("load average during the run: %.2f %.2f %.2f" % os.getloadavg())
        print("ratio static/python-minimal=%.2f (lower is better)" % (med["static"] / med["python"]))
    finally:
        for p in sims:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
