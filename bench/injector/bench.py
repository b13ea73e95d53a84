#!/usr/bin/python3
"""bench/injector: admission latency of tpumesh-injector under 200 concurrent keep-alive HTTPS
connections (what a 4,096-pod job's pod creations put on a webhook), against a peer measured in
the same run: the same webhook in Python (peer_webhook.py). Both get the same AdmissionReview (a
labelled JobSet pod, tests/fixtures/injector/jobset-pod.json) from the same load generator
(tests/tools/webhook_load.c, libcurl). Prints the numbers and the ratios; asserts nothing.

    bench.py [--build build] [--conns 200] [--requests 20000] [--rounds 3] [--rates 200,500,1000,0]
             [--before OTHER_BUILD]

--before OTHER_BUILD: a second tpumesh-injector (another tree's build directory, e.g. the tree
before a change) runs beside the first, each round running the three webhooks one after the
other, and the table gains its rows and the p99 ratio of the two injectors.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))


def cpu_ns(pid):
    """CPU time of every thread of pid so far (ns, /proc/PID/task/*/schedstat)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
            total += int(f.read().split()[0])
    return total


def cpu_split(load, port, crt, body, pid, conns):
    """Where the injector's CPU goes: TLS handshakes (a new connection) against reviews on a
    kept-alive connection. Run A: 5 x `conns` new connections with one review each (plus one);
    run B: `conns` connections, then 20,000 reviews on them. Two equations, two unknowns."""
    url = "https://127.0.0.1:%d/mutate" % port
    c0 = cpu_ns(pid)
    for _ in range(5):
        subprocess.run([load, url, crt, body, str(conns), "1", "0"], capture_output=True, check=True)
    c1 = cpu_ns(pid)
    subprocess.run([load, url, crt, body, str(conns), "20000", "0"], capture_output=True, check=True)
    c2 = cpu_ns(pid)
    a_hs, a_rv = 5 * conns, 5 * (conns + 1)
    b_hs, b_rv = conns, conns + 20000
    a, b = (c1 - c0) / 1e6, (c2 - c1) / 1e6
    det = a_hs * b_rv - b_hs * a_rv
    hs = (a * b_rv - b * a_rv) / det
    rv = (a_hs * b - b_hs * a) / det
    print("injector CPU: %.3f ms per TLS handshake (new connection), %.4f ms per review on a kept-alive"
          " connection (%d handshakes + %d reviews took %.0f ms; %d + %d took %.0f ms)"
          % (hs, rv, a_hs, a_rv, a, b_hs, b_rv, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="200,500,1000,0", help="reviews/s of each open-loop run; 0 = closed loop")
    ap.add_argument("--seconds", type=int, default=10, help="length of an open-loop run")
    ap.add_argument("--before", help="build directory of another tree's tpumesh-injector, measured in the same rounds")
    a = ap.parse_args()
    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    tmp = tempfile.mkdtemp(prefix="tpumesh-bench-injector-")
    crt, key = os.path.join(tmp, "c.crt"), os.path.join(tmp, "c.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    pod = json.load(open(os.path.join(ROOT, "tests/fixtures/injector/jobset-pod.json")))
    body = os.path.join(tmp, "review.json")
    with open(body, "w") as f:
        json.dump({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                               "kind": {"group": "", "version": "v1", "kind": "Pod"},
                               "resource": {"group": "", "version": "v1", "resource": "pods"},
                               "namespace": "ml", "operation": "CREATE", "object": pod}}, f)
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        f.write(subprocess.run([os.path.join(build, "tests/tools/inject_config")], check=True,
                               capture_output=True, text=True).stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUMESH_")}

    def start_injector(bdir, name):
        log = open(os.path.join(tmp, name + ".log"), "w+")
        p = subprocess.Popen([os.path.join(bdir, "bin/tpumesh-injector"), "--listen", "127.0.0.1:0", "--http-addr",
                              "127.0.0.1:0", "--tls-cert-file", crt, "--tls-key-file", key],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
        port = None
        for _ in range(200):
            log.seek(0)
            for line in log.read().splitlines():
                if "https port " in line:
                    port = int(line.split("https port ")[1].split(",")[0])
            if port:
                break
            time.sleep(0.05)
        return p, port

    procs = []
    try:
        inj, https_port = start_injector(build, "injector")
        procs.append(inj)
        webhooks = [("tpumesh-injector", https_port)]
        if a.before:
            before = a.before if os.path.isabs(a.before) else os.path.join(ROOT, a.before)
            old, old_port = start_injector(before, "injector-before")
            procs.append(old)
            webhooks.append(("injector before", old_port))
        peer = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/injector/peer_webhook.py"), crt, key, cfg],
                                stdout=subprocess.PIPE, text=True)
        procs.append(peer)
        peer_port = int(peer.stdout.readline().split()[1])
        webhooks.append(("python peer", peer_port))
        load = os.path.join(build, "tests/tools/webhook_load")
        cpu_split(load, https_port, crt, body, inj.pid, a.conns)
        if a.before:
            print("(before) ", end="")
            cpu_split(load, old_port, crt, body, old.pid, a.conns)
        rows = []
        runs_by_rate = {}
        for rate in [int(x) for x in a.rates.split(",")]:
            n = a.requests if rate == 0 else max(1000, min(a.requests, rate * a.seconds))
            runs = {name: [] for name, _ in webhooks}
            for _ in range(a.rounds):
                for name, port in webhooks:
                    r = subprocess.run([load, "https://127.0.0.1:%d/mutate" % port, crt, body, str(a.conns), str(n),
                                        str(rate)], capture_output=True, text=True)
                    runs[name].append(json.loads(r.stdout))
            # The median round by p99 of each webhook.
            med = {k: sorted(v, key=lambda x: x["p99_ms"])[len(v) // 2] for k, v in runs.items()}
            rows.append((rate, n, med))
            runs_by_rate[rate] = runs
        print("%d keep-alive HTTPS connections; open loop at RATE reviews/s (latency from when a review was due),"
              " 0 = closed loop (every connection busy); median of %d rounds" % (a.conns, a.rounds))
        print("load average at the end: %s" % open("/proc/loadavg").read().strip())
        print("%-6s %-17s %7s %8s %8s %8s %8s %7s" % ("RATE", "webhook", "rps", "p50 ms", "p90 ms", "p99 ms",
                                                    "max ms", "errors"))
        for rate, n, med in rows:
            for name, x in med.items():
                print("%-6d %-17s %7.0f %8.3f %8.3f %8.3f %8.3f %7d" % (rate, name, x["rps"], x["p50_ms"],
                                                                      x["p90_ms"], x["p99_ms"], x["max_ms"],
                                                                      x["errors"]))
            i, p = med["tpumesh-injector"], med["python peer"]
            print("       ratio: p99 %.1fx lower, p50 %.1fx lower, throughput %.1fx" % (
                p["p99_ms"] / i["p99_ms"] if i["p99_ms"] else 0, p["p50_ms"] / i["p50_ms"] if i["p50_ms"] else 0,
                i["rps"] / p["rps"] if p["rps"] else 0))
            if "injector before" in med:
                b = med["injector before"]
                def allp(k, rate=rate):
                    return " ".join("%.2f" % x["p99_ms"] for x in runs_by_rate[rate][k])
                print("       against before: p99 %.2fx, p50 %.2fx, throughput %.2fx (every round's p99: %s | before %s)"
                      % (i["p99_ms"] / b["p99_ms"] if b["p99_ms"] else 0, i["p50_ms"] / b["p50_ms"] if b["p50_ms"] else 0,
                         i["rps"] / b["rps"] if b["rps"] else 0, allp("tpumesh-injector"), allp("injector before")))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


if __name__ == "__main__":
    main()
