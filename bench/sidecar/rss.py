"""tpumesh-sidecar's memory against the kube-apiserver simulator, over HTTP or HTTPS.

Starts the simulator with N pods of one Indexed Job, runs the sidecar (ip mode, publishing into
/dev/shm) until the topology is complete, makes CHANGES single IP changes, and prints VmHWM,
RssAnon and RssFile after the sync and after the changes, the peak of RssAnon over the whole run
(sampled every 5 ms from the start: mem.py) next to VmHWM, then the resident size per mapping
(which library or heap the pages belong to). Nothing is asserted. The goal: peak anonymous
memory <= 8 MiB at 4,096 pods.

Usage: ROOT=$PWD BUILD=build /usr/bin/python3 bench/sidecar/rss.py [--tls] N [CHANGES]
"""
import argparse
import collections
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

# bench.py's setup: where the build is, the simulator.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import BUILD, PeakAnon, start_sim  # noqa: E402
from mem import status_kib as status  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tls", action="store_true", help="HTTPS with the simulator's test CA")
    ap.add_argument("pods", type=int)
    ap.add_argument("changes", type=int, nargs="?", default=0)
    a = ap.parse_args()
    sim = start_sim(["--history", "400000"] + (["--tls"] if a.tls else []))
    work = tempfile.mkdtemp(prefix="tpumesh-rss-", dir="/dev/shm")
    proc = None
    try:
        c = sim.client
        c.bulk_create(count=a.pods, job="trainer")
        pods = c.pods()
        pods = pods.get("items") if isinstance(pods, dict) else pods
        own = next(p["metadata"]["name"] for p in pods
                   if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0")
        log = os.path.join(work, "sidecar.log")
        out = os.path.join(work, "out")
        os.makedirs(out)
        cmd = [os.path.join(BUILD, "bin/tpumesh-sidecar"), "--apiserver", sim.url,
               "--namespace", "default", "--pod-name", own, "--out-dir", out,
               "--address-mode", "ip", "--expected-workers", str(a.pods),
               "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--watch-mode", "direct"] + (["--ca-file", sim.ca] if a.tls else [])
        t0 = time.time()
        with open(log, "w") as errf:
            proc = subprocess.Popen(cmd, stderr=errf)
        peak = PeakAnon(proc.pid)
        while time.time() - t0 < 120:
            with open(log) as f:
                if "topology complete" in f.read():
                    break
            time.sleep(0.05)
        print("%s, %d pods: complete after %.2f s" % ("https" if a.tls else "http", a.pods,
                                                       time.time() - t0))
        time.sleep(0.5)
        print("after sync   ", status(proc.pid))
        names = [p["metadata"]["name"] for p in pods]
        for i in range(a.changes):
            c.set_ip(name=random.choice(names), ip="10.9.%d.%d" % (i // 250 % 250, i % 250 + 1))
            time.sleep(0.01)
        if a.changes:
            time.sleep(1)
            print("after %d changes" % a.changes, status(proc.pid))
        hwm = status(proc.pid).get("VmHWM", 0)
        anon = peak.stop()
        print("peak: VmHWM %d KiB, RssAnon %d KiB (%.2f MiB; goal at 4,096 pods: <= 8 MiB)"
              % (hwm, anon, anon / 1024.0))
        per = collections.Counter()
        cur = None
        with open("/proc/%d/smaps" % proc.pid) as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    parts = line.split()
                    cur = os.path.basename(parts[5]) if len(parts) > 5 else "[anon]"
                elif line.startswith("Rss:"):
                    per[cur] += int(line.split()[1])
        for name, kb in per.most_common(12):
            print("%8d kB  %s" % (kb, name))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        sim.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
