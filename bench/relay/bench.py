"""A job start with N real tpumesh-sidecars against the kube-apiserver simulator, in direct and
relay mode (issue 15, docs/scale.md).

Every pod gets an IP in 127.64.0.0/16 and its sidecar binds HTTP and gRPC to that IP, so the
sidecars reach each other on loopback only; each sidecar runs with $BUILD/tests/podbind.so
preloaded (tests/tools/podbind.c), so its connections leave from its pod IP as a pod's do, and a
relay admits its subscribers by pod IP as in a cluster (`refused` counts the streams relays
refused: a subscriber that connects before its relay has seen its pod's IP is refused and tries
again). The job start: all N pods are created scheduled
without an IP (Pending); then each pod gets its IP and its sidecar starts; each pod is marked Ready
once its own sidecar logged a complete topology. The run ends when every sidecar's files show all
N workers, complete and Ready, with the right DTENSOR_JOBS.

Per mode and N it reports: API bytes (the simulator's bytes sent), watch events sent, requests,
peak open watches, bytes between sidecars (gRPC message bytes sent by all sidecars), time from the
last IP to the last sidecar ready, total sidecar CPU seconds, publishes per sidecar (mean, max),
and checks the goals of the issue: relay API bytes at the largest N <= 1/20 of direct, fitted
exponent of relay API bytes <= 1.2, relay last-ready <= direct + --last-ready-slack (1 s), every
file correct.
--kill adds the relay-death scenarios at one size: a relay killed mid-start, and a relay killed
after the start followed by a worker replaced (every sidecar must go incomplete, never keep a stale
complete, then converge on the new IP).

    ROOT=$PWD BUILD=build /usr/bin/python3 bench/relay/bench.py --sizes 16,32,64,128,256 --kill 64
"""
import argparse
import calendar
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
from simctl import start_sim  # noqa: E402

SIDECAR = os.path.join(BUILD, "bin/tpumesh-sidecar")
PODBIND = os.path.join(BUILD, "tests/podbind.so")
TICK = os.sysconf("SC_CLK_TCK")


def ip_of(i):
    return "127.64.%d.%d" % (i // 250, i % 250 + 1)


def free_port():
    s = socket.socket()
    s.bind(("127.64.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Car:
    def __init__(self, i, name, args, port, tok, sim_url, outroot, mode, fanout, on_complete):
        self.i, self.name = i, name
        self.out = os.path.join(outroot, "p%d" % i)
        os.makedirs(self.out, exist_ok=True)
        self.complete_at = None
        self.on_complete = on_complete
        self.lines = []
        self.pubs_incomplete = 0  # publish log lines of an incomplete topology
        cmd = [SIDECAR, "--apiserver", sim_url, "--token-file", tok, "--namespace", "default",
               "--pod-name", name, "--out-dir", self.out, "--address-mode", "ip",
               "--http-addr", "%s:%d" % (ip_of(i), port), "--grpc-addr", "%s:%d" % (ip_of(i), port + 1),
               "--watch-mode", mode, "--relay-fanout", str(fanout), "--expected-workers", str(args.n)]
        env = dict(os.environ, LD_PRELOAD=PODBIND, TPUMESH_POD_IP=ip_of(i))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.proc.stderr:
            if len(self.lines) < 2000:
                self.lines.append(line.rstrip("\n"))
            if "published generation" in line and "incomplete, env files keep" in line:
                self.pubs_incomplete += 1
            if self.complete_at is None and "topology complete with" in line:
                # When the sidecar logged it (its own wall-clock timestamp), on the monotonic
                # clock: the bench reads 256 processes' logs on threads of one Python process, and
                # at a high load average its reading lags the sidecars by seconds.
                self.complete_at = time.monotonic() - max(0.0, time.time() - log_time(line))
                self.on_complete(self)

    def cpu(self):
        return proc_cpu(self.proc.pid)

    def metrics(self, port):
        import urllib.request
        try:
            with urllib.request.urlopen("http://%s:%d/metrics" % (ip_of(self.i), port), timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return {}
        m = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                m[k] = float(v)
        return m

    def stop(self, sig=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def proc_cpu(pid):
    """CPU seconds (utime + stime) of process pid so far; 0 once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / TICK
    except OSError:
        return 0.0


def log_time(line):
    """The wall-clock time of a sidecar log line (2026-11-28T10:41:43.446Z ...), or now."""
    try:
        return calendar.timegm(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S")) + float(line[19:23])
    except ValueError:
        return time.time()


def relay_ranks(n, fanout):
    """Ranks that serve subscribers in relay mode: r serves r*F+1.. while that is below n."""
    return [r for r in range(n) if r * fanout + 1 < n]


def start_plan(args, n):
    """(index, seconds after the first IP) for every pod, in start order. sequential: one after the
    other as fast as the bench goes (the relays first); random: uniformly over --window seconds, in
    random order (as image pulls and node readiness spread a real start); relays-last: the others
    at random over the window, then the relay pods."""
    if args.order == "sequential":
        return [(i, 0.0) for i in range(n)]
    rng = random.Random(args.seed * 1000 + n)
    relays = set(relay_ranks(n, args.fanout)) if args.order == "relays-last" else set()
    others = [i for i in range(n) if i not in relays]
    plan = sorted(((i, rng.uniform(0, args.window)) for i in others), key=lambda x: x[1])
    plan += [(r, args.window + 0.2 * (k + 1)) for k, r in enumerate(sorted(relays))]
    return plan


def files_ok(car, n, want_jobs, want_ready=True):
    try:
        with open(os.path.join(car.out, "topology.json")) as f:
            t = json.load(f)
        with open(os.path.join(car.out, "dtensor.env")) as f:
            env = f.read()
    except (OSError, ValueError):
        return False
    return (t["complete"] and len(t["workers"]) == n and t["clientId"] == car.i
            and all(w["ready"] == want_ready for w in t["workers"])
            and [w["ip"] for w in t["workers"]] == [ip_of(i) for i in range(n)]
            and "DTENSOR_JOBS='%s'" % want_jobs in env)


def run_one(args, mode, n, tmp, kill=None):
    """One job start; returns the figures. kill: None, 'mid' or 'after'."""
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    sim = start_sim(["--token-file", tok, "--bookmark-interval", "60"])
    c = sim.client
    port = free_port()
    outroot = tempfile.mkdtemp(prefix="relay-bench.", dir="/dev/shm")
    a = argparse.Namespace(n=n)
    names = ["trainer-%d-x%04d" % (i, i) for i in range(n)]
    pool = futures.ThreadPoolExecutor(8)
    for i in range(n):
        c.make(name=names[i], index=i, ip="", ready=False, managed_fields=True)
    c.reset_stats()
    peak = [0]
    series = []  # (monotonic time, requests by verb, CPU s of sidecars, simulator, bench)
    cars = [None] * n
    stop_poll = threading.Event()

    def poll():
        while not stop_poll.is_set():
            try:
                st = c.stats()
                peak[0] = max(peak[0], st["watchesActive"])
                # CPU only with --late (256 /proc reads a sample would load the runs it measures).
                cpu = (sum(car.cpu() for car in cars if car is not None) if args.late else 0.0,
                       proc_cpu(sim.proc.pid), sum(os.times()[:2]))
                series.append((time.monotonic(), dict(st["requests"]), cpu))
            except Exception:  # noqa: BLE001
                pass
            stop_poll.wait(0.2)
    threading.Thread(target=poll, daemon=True).start()

    def became_complete(car):
        pool.submit(c.ready, name=names[car.i], ready=True)

    t_last_ip = None
    t_first_ip = time.monotonic()
    plan = start_plan(args, n)
    perf = []
    if args.perf and mode in args.perf_modes.split(","):
        # perf record -a over the same window as --late's figures: from 2 s before the last IP to
        # the last ready (stopped below), every process on the machine, for `perf report`.
        def perf_start():
            perf.append(subprocess.Popen(["perf", "record", "-a", "-g", "-F", "499", "-o",
                                          "%s.%s.%d" % (args.perf, mode, n)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        threading.Timer(max(0.0, plan[-1][1] - 2.0), perf_start).start()
    for i, at in plan:
        # Each pod gets its IP at its time in the plan, and its sidecar starts then, as in a pod
        # whose containers start once the pod has its IP.
        left = t_first_ip + at - time.monotonic()
        if left > 0:
            time.sleep(left)
        c.set_ip(name=names[i], ip=ip_of(i))
        t_last_ip = time.monotonic()
        cars[i] = Car(i, names[i], a, port, tok, sim.url, outroot, mode, args.fanout, became_complete)
        if kill == "mid" and i == n // 2:
            # A relay (rank 1 serves ranks fanout+1..2*fanout) dies mid-start; the kubelet
            # restarts the container a little later (same pod, same IP).
            cars[1].stop(sig=9)
            threading.Timer(2.0, lambda: cars.__setitem__(1, Car(
                1, names[1], a, port, tok, sim.url, outroot, mode, args.fanout, became_complete))).start()
    want_jobs = ",".join("%s:10000" % ip_of(i) for i in range(n))
    if kill == "mid":
        time.sleep(2.5)
    alive = [car for car in cars if car.proc.poll() is None]
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and not all(car.complete_at for car in alive):
        time.sleep(0.05)
    last_ready = max((car.complete_at or float("inf")) for car in alive)
    for p in perf:
        p.send_signal(2)
        p.wait()
    while time.monotonic() < deadline and not all(files_ok(car, n, want_jobs) for car in alive):
        time.sleep(0.1)
    correct = sum(files_ok(car, n, want_jobs) for car in alive)
    if args.late:
        # The API requests from the last 2 s before the last IP to the last ready, by verb.
        t0 = t_last_ip - 2.0
        before = next((x for x in reversed(series) if x[0] <= t0), series[0])
        after = next((x for x in series if x[0] >= last_ready), series[-1])
        print("# from 2 s before the last IP to the last ready (%.1f s): requests %s; CPU s: sidecars "
              "%.2f, simulator %.2f, bench %.2f" % (
                  after[0] - before[0], ", ".join("%s %d" % (k, after[1].get(k, 0) - before[1].get(k, 0))
                                                  for k in sorted(after[1])),
                  *(a - b for a, b in zip(after[2], before[2]))))
        late = sorted(alive, key=lambda car: car.complete_at or float("inf"))[-args.late:]
        for car in late:
            print("# late: rank %d complete %.3f s after the last IP" % (
                car.i, (car.complete_at or float("nan")) - t_last_ip))
            for line in car.lines[:40]:
                print("#   " + line)
        if mode == "relay":
            # The relays' own logs: where the chain to the latest sidecars spent its time.
            for r in relay_ranks(n, args.fanout):
                car = cars[r]
                print("# relay rank %d complete %.3f s after the last IP" % (
                    r, (car.complete_at or float("nan")) - t_last_ip))
                for line in car.lines[:40]:
                    print("#   " + line)
        warn = [(car.i, l) for car in cars for l in car.lines if " WARN " in l or " ERROR " in l]
        print("# %d warning/error lines; the first ones:" % len(warn))
        for i, l in warn[:15]:
            print("#   rank %d: %s" % (i, l))
    stop_poll.set()
    time.sleep(0.3)
    st = c.stats()
    r = {"mode": mode, "n": n, "kill": kill, "api_bytes": st["bytesSent"], "events": st["eventsSent"],
         "lists": st["requests"].get("list", 0),
         "requests": sum(st["requests"].values()), "peak_watches": peak[0],
         "last_ip_to_last_ready_s": round(last_ready - t_last_ip, 3),
         "cpu_s": round(sum(car.cpu() for car in cars), 2), "files_correct": correct, "alive": len(alive)}
    mets = [car.metrics(port) for car in alive]
    r["sidecar_bytes"] = int(sum(m.get("tpumesh_grpc_sent_bytes_total", 0) for m in mets))
    pubs = [m.get("tpumesh_publishes_total", 0) for m in mets]
    r["publishes_mean"] = round(sum(pubs) / max(1, len(pubs)), 1)
    r["publishes_max"] = int(max(pubs or [0]))
    # Which phase the publishes come from: while incomplete (paced 1, 2, 4... up to 16 s apart, so
    # growing with the log of how long the IP assignment takes: the first sidecar waits for every
    # other IP) or after (the completing publish, then readiness-only changes, paced the same way).
    r["ip_phase_s"] = round(t_last_ip - t_first_ip, 3)
    inc = [car.pubs_incomplete for car in alive]
    r["publishes_incomplete_max"] = int(max(inc or [0]))
    r["publishes_complete_max"] = int(max((p - q for p, q in zip(pubs, inc)), default=0))
    r["readiness_coalesced_mean"] = round(
        sum(m.get("tpumesh_publishes_coalesced_readiness_total", 0) for m in mets) / max(1, len(mets)), 1)
    r["fallbacks"] = int(sum(m.get("tpumesh_relay_fallbacks_total", 0) for m in mets))
    r["refused"] = int(sum(m.get("tpumesh_grpc_streams_refused_total", 0) for m in mets))
    if kill == "after":
        r.update(kill_after(c, cars, names, n, port))
    for car in cars:
        car.stop()
    pool.shutdown()
    sim.stop()
    subprocess.run(["rm", "-rf", outroot])
    return r


def kill_after(c, cars, names, n, port):
    """After the start: kill relay rank 1, then replace worker n-1 (a subscriber of rank 1's
    subtree when n > fanout+1): every live sidecar must drop to incomplete (no stale complete),
    then converge on the new IP."""
    cars[1].stop(sig=9)
    alive = [car for car in cars if car.proc.poll() is None]
    victim = n - 1
    c.delete(name=names[victim], grace=0)
    c.make(name="trainer-%d-new" % victim, index=victim, ip="", ready=False, managed_fields=True)
    t0 = time.monotonic()
    stale = []

    def incomplete(car):
        try:
            with open(os.path.join(car.out, "topology.json")) as f:
                return not json.load(f)["complete"]
        except (OSError, ValueError):
            return False
    ok_incomplete = all(wait_for(lambda car=car: incomplete(car), 30) for car in alive if car.i != victim)
    if not ok_incomplete:
        stale = [car.i for car in alive if car.i != victim and not incomplete(car)]
    new_ip = "127.64.200.1"
    c.set_ip(name="trainer-%d-new" % victim, ip=new_ip)

    def converged(car):
        try:
            with open(os.path.join(car.out, "topology.json")) as f:
                t = json.load(f)
        except (OSError, ValueError):
            return False
        return t["complete"] and t["workers"][victim]["ip"] == new_ip
    conv = all(wait_for(lambda car=car: converged(car), 40) for car in alive if car.i != victim)
    return {"after_kill_no_stale_complete": ok_incomplete, "stale": stale,
            "after_kill_converged": conv, "after_kill_converge_s": round(time.monotonic() - t0, 2)}


def wait_for(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def fit_exponent(xs, ys):
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


ORDERS = ("sequential", "random", "relays-last")


def order_goals(args, res, sizes):
    """The goals of one start order's runs: (name, met, value) each."""
    goals = []
    by = {(r["mode"], r["n"]): r for r in res}
    big = max(sizes)
    if ("direct", big) in by and ("relay", big) in by:
        d, rl = by[("direct", big)], by[("relay", big)]
        ratio = rl["api_bytes"] / max(1, d["api_bytes"])
        goals.append(("relay API bytes at N=%d <= 1/20 of direct" % big, ratio <= 0.05, "%.4f" % ratio))
        goals.append(("relay last ready <= direct + %.1f s at N=%d" % (args.last_ready_slack, big),
                      rl["last_ip_to_last_ready_s"] <= d["last_ip_to_last_ready_s"] + args.last_ready_slack,
                      "%.3f vs %.3f s" % (rl["last_ip_to_last_ready_s"], d["last_ip_to_last_ready_s"])))
    rel = [by[("relay", n)] for n in sizes if ("relay", n) in by]
    if len(rel) >= 2:
        e = fit_exponent([r["n"] for r in rel], [r["api_bytes"] for r in rel])
        goals.append(("relay API bytes fitted exponent <= 1.2", e <= 1.2, "%.2f" % e))
    dr = [by[("direct", n)] for n in sizes if ("direct", n) in by]
    if len(dr) >= 2:
        goals.append(("(direct API bytes fitted exponent, for reference)", True,
                      "%.2f" % fit_exponent([r["n"] for r in dr], [r["api_bytes"] for r in dr])))
    goals.append(("every sidecar's files correct", all(r["files_correct"] == r["alive"] for r in res),
                  ";".join("%s/%d:%d/%d" % (r["mode"], r["n"], r["files_correct"], r["alive"]) for r in res)))
    goals.append(("publishes per sidecar <= 10 at N=%d (both modes)" % big,
                  all(r["publishes_max"] <= 10 for r in res if r["n"] == big),
                  ",".join("%s:%d" % (r["mode"], r["publishes_max"]) for r in res if r["n"] == big)))
    return goals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16,32,64,128,256")
    ap.add_argument("--modes", default="direct,relay")
    ap.add_argument("--fanout", type=int, default=64)
    ap.add_argument("--kill", type=int, default=0, help="also run the relay-death scenarios at this N")
    ap.add_argument("--kill-fanout", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--late", type=int, default=0,
                    help="print the logs of the N latest sidecars (and in relay mode the relays')")
    ap.add_argument("--order", default="sequential",
                    help="the order pods get their IPs (and their sidecars start): %s, or several "
                         "separated by commas (each runs every size and mode; goals per order)"
                         % ", ".join(ORDERS))
    ap.add_argument("--window", type=float, default=30.0,
                    help="random, relays-last: seconds over which the pods get their IPs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--last-ready-slack", type=float, default=1.0,
                    help="goal: relay last ready <= direct + this many seconds")
    ap.add_argument("--perf", metavar="PREFIX",
                    help="perf record -a -g from 2 s before the last IP to the last ready into "
                         "PREFIX.MODE.N (for perf report --comm tpumesh-sidecar)")
    ap.add_argument("--perf-modes", default="direct,relay", help="the modes --perf records")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not os.path.exists(PODBIND):
        ap.error("%s is missing (the sidecars connect from their pod IPs through it): run "
                 "`make %s` first" % (PODBIND, os.path.relpath(PODBIND, ROOT)))
    orders = args.order.split(",")
    for o in orders:
        if o not in ORDERS:
            ap.error("--order: '%s' is not one of %s" % (o, ", ".join(ORDERS)))
    sizes = [int(x) for x in args.sizes.split(",")]
    tmp = tempfile.mkdtemp(prefix="relay-bench-tok.")
    res = []
    hdr = ("order", "mode", "n", "api_bytes", "events", "requests", "peak_watches", "sidecar_bytes",
           "last_ip_to_last_ready_s", "cpu_s", "publishes_mean", "publishes_max", "files_correct",
           "ip_phase_s", "publishes_incomplete_max", "publishes_complete_max", "readiness_coalesced_mean",
           "lists", "fallbacks", "refused", "load1")
    print("# orders %s, window %.0f s, seed %d; load average at start %s" % (
        ",".join(orders), args.window, args.seed, " ".join("%.2f" % x for x in os.getloadavg())), flush=True)
    print(" ".join("%14s" % h[:14] for h in hdr), flush=True)
    for order in orders:
        args.order = order
        for n in sizes:
            for mode in args.modes.split(","):
                r = run_one(args, mode, n, tmp)
                r["order"] = order
                r["load1"] = round(os.getloadavg()[0], 2)
                res.append(r)
                print(" ".join("%14s" % r[h] for h in hdr), flush=True)
    kills = []
    if args.kill:
        fo = args.fanout
        args.fanout = args.kill_fanout
        for k in ("mid", "after"):
            r = run_one(args, "relay", args.kill, tmp, kill=k)
            kills.append(r)
            print("kill %s (n=%d, fanout %d): %s" % (k, args.kill, args.fanout, json.dumps(r)), flush=True)
        args.fanout = fo
    goals = []
    for order in orders:
        prefix = "%s: " % order if len(orders) > 1 else ""
        goals += [(prefix + g, ok, v) for g, ok, v in order_goals(args, [r for r in res if r["order"] == order],
                                                                   sizes)]
    if kills:
        goals.append(("every sidecar's files correct (relay death runs)",
                      all(r["files_correct"] == r["alive"] for r in kills),
                      ";".join("%s:%d/%d" % (r["kill"], r["files_correct"], r["alive"]) for r in kills)))
    for k in kills:
        if k["kill"] == "after":
            goals.append(("relay killed after start: no stale complete, converged",
                          k["after_kill_no_stale_complete"] and k["after_kill_converged"],
                          "stale=%s converge %.2f s" % (k["stale"], k["after_kill_converge_s"])))
    print()
    for name, ok, val in goals:
        print("%-4s %-67s %s" % ("ok" if ok else "MISS", name, val))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": res, "kills": kills, "goals": goals}, f, indent=1)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
