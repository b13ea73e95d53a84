#!/usr/bin/python3
"""bench/k8s_client: the C client + informer (tests/tools/k8s_driver) against the official Python
Kubernetes client doing the same list+watch on the same simulator in the same run.

  /usr/bin/python3 bench/k8s_client/bench.py [--pods 10000] [--events 100000] [--build build]

Measured per client (each in its own process, CPU = user+sys of that process only):
  - CPU time to ingest a LIST of --pods pods (pages of 500, as client-go's pager),
  - CPU time to apply --events watch events (annotation/ready/ip churn from the simulator),
  - memory per stored pod: live heap (C: mallinfo2) or RSS growth (Python: VmRSS) after the
    list, minus the same client's figure after listing an empty namespace, divided by --pods.
The C store keeps a compact record per pod (what the sidecar needs); the Python peer keeps
V1Pod objects, as a Python informer/sidecar built on the official client does.
Also kubectl (client-go) when installed: CPU of `kubectl get pods -o json --chunk-size=500` and of
`kubectl get pods -w --output-watch-events -o name` over the same churn (its CPU includes printing).
Prints one table and the ratios (peer / C). Not part of make test."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim", "kube-apiserver"))
from simctl import start_sim  # noqa: E402

TOKEN = "bench-token"


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tck


def run_c(driver, sim, ns, events, tokfile, sim_client):
    """Start the C driver on namespace ns; returns (list_cpu, heap_after_list, watch_cpu)."""
    p = subprocess.Popen([driver, "--apiserver", sim.url, "--token-file", tokfile, "--ca-file", sim.ca,
                          "--namespace", ns, "--limit", "500", "--quiet", "--stall", "300"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = {"heap": None}
    synced = threading.Event()
    progress = [0]
    done = threading.Event()

    def reader():
        for line in p.stdout:
            if line.startswith("SYNCED"):
                out["list_cpu"] = proc_cpu(p.pid)
            elif line.startswith("MEM heap="):
                out["heap"] = int(line.split("=")[1])
                synced.set()
            elif line.startswith("PROGRESS changes="):
                progress[0] = int(line.split("=")[1])
                if events and progress[0] >= out.get("target", 1 << 62):
                    out["watch_cpu_end"] = proc_cpu(p.pid)
                    done.set()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if not synced.wait(600):
        raise SystemExit("C driver did not sync")
    if events:
        # changes = initial ADDs + one UPDATE per event; PROGRESS comes every 1,000 changes.
        out["target"] = ((ns_count(sim_client, ns) + events) // 1000) * 1000
        cpu0 = proc_cpu(p.pid)
        sim_client.churn(events=events, rate=0, kind="mixed", namespace=ns, wait=False)
        if not done.wait(1800):
            raise SystemExit("C driver did not see %d events (at %d)" % (events, progress[0]))
        out["watch_cpu"] = out["watch_cpu_end"] - cpu0
        out["events_seen"] = out["target"] - ns_count(sim_client, ns)
    p.terminate()
    p.wait(10)
    return out


def ns_count(sim_client, ns):
    return len(sim_client.pods(namespace=ns))


PEER = r'''
import json, os, sys, time
from kubernetes import client, watch
url, ca, token, ns, events = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
cfg = client.Configuration()
cfg.host = url
cfg.ssl_ca_cert = ca
cfg.api_key = {"authorization": "Bearer " + token}
v1 = client.CoreV1Api(client.ApiClient(cfg))
# Warm up the client (imports, TLS, models) before measuring.
v1.list_namespaced_pod("bench-empty", limit=1)
rss0 = rss()
t0 = time.process_time()
store, cont = {}, None
while True:
    r = v1.list_namespaced_pod(ns, limit=500, _continue=cont)
    for p in r.items:
        store[p.metadata.namespace + "/" + p.metadata.name] = p
    rv = r.metadata.resource_version
    cont = r.metadata._continue
    if not cont:
        break
list_cpu = time.process_time() - t0
rss1 = rss()
print("SYNCED", flush=True)
seen = 0
watch_cpu = 0.0
if events:
    sys.stdin.readline()  # the driver starts the churn, then tells us
    t1 = time.process_time()
    w = watch.Watch()
    while seen < events:
        for ev in w.stream(v1.list_namespaced_pod, ns, resource_version=rv, allow_watch_bookmarks=True,
                           timeout_seconds=600):
            o = ev["object"]
            if isinstance(o, dict):  # BOOKMARK/ERROR come back undecoded in some client versions
                if ev["type"] == "ERROR":
                    raise SystemExit("watch ERROR: %s" % o)
                rv = o.get("metadata", {}).get("resourceVersion", rv)
                continue
            if ev["type"] == "BOOKMARK":
                rv = o.metadata.resource_version
                continue
            key = o.metadata.namespace + "/" + o.metadata.name
            if ev["type"] == "DELETED":
                store.pop(key, None)
            else:
                store[key] = o
            rv = o.metadata.resource_version
            seen += 1
            if seen >= events:
                w.stop()
                break
    watch_cpu = time.process_time() - t1
print(json.dumps({"list_cpu": list_cpu, "rss_growth": rss1 - rss0, "count": len(store),
                  "watch_cpu": watch_cpu, "events_seen": seen}), flush=True)
'''


def run_py(sim, ns, events, sim_client):
    p = subprocess.Popen(["/usr/bin/python3", "-c", PEER, sim.url, sim.ca, TOKEN, ns, str(events)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("SYNCED"):
        raise SystemExit("python peer failed to list")
    if events:
        sim_client.churn(events=events, rate=0, kind="mixed", namespace=ns, wait=False)
        p.stdin.write("go\n")
        p.stdin.flush()
    res = json.loads(p.stdout.readline())
    p.wait(60)
    return res


def run_kubectl(sim, ns, events, sim_client, tmp):
    """kubectl (client-go): CPU of `get pods -o json` (LIST) and of `get pods -w` over the same
    churn. Returns {} when kubectl is not installed."""
    kubectl = subprocess.run(["sh", "-c", "command -v kubectl"], capture_output=True, text=True).stdout.strip()
    if not kubectl:
        return {}
    kc = os.path.join(tmp, "kubeconfig")
    with open(kc, "w") as f:
        f.write("apiVersion: v1\nkind: Config\ncurrent-context: s\nclusters:\n- name: s\n  cluster:\n"
                "    server: %s\n    certificate-authority: %s\nusers:\n- name: u\n  user:\n"
                "    token: %s\ncontexts:\n- name: s\n  context: {cluster: s, user: u, namespace: %s}\n"
                % (sim.url, sim.ca, TOKEN, ns))
    env = dict(os.environ, KUBECONFIG=kc, HOME=tmp)
    base = [kubectl, "get", "pods", "-n", ns, "--chunk-size=500"]

    def cpu_of(p):
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = status
        return ru.ru_utime + ru.ru_stime
    p = subprocess.Popen(base + ["-o", "json"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    list_cpu = cpu_of(p)
    out = {"list_cpu": list_cpu}
    if events:
        p = subprocess.Popen(base + ["-w", "--output-watch-events", "-o", "name"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        n = 0
        # the initial list prints one line per pod, then one per event
        npods = ns_count(sim_client, ns)
        total = npods + events
        started = False
        for _ in p.stdout:
            n += 1
            if not started and n >= npods:
                started = True
                sim_client.churn(events=events, rate=0, kind="mixed", namespace=ns, wait=False)
            if n >= total:
                break
        p.terminate()
        out["watch_cpu"] = cpu_of(p) - list_cpu  # minus the initial list it also did
        out["events_seen"] = n - npods
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--events", type=int, default=100000)
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    a = ap.parse_args()
    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    driver = os.path.join(build, "tests", "tools", "k8s_driver")
    tmp = tempfile.mkdtemp(prefix="bench-k8s-")
    tokfile = os.path.join(tmp, "token")
    with open(tokfile, "w") as f:
        f.write(TOKEN + "\n")
    sim = start_sim(["--tls", "--token", TOKEN, "--state-dir", os.path.join(tmp, "sim"),
                     "--history", str(a.events * 3 + 10000), "--bookmark-interval", "60"], timeout=60)
    S = sim.client
    try:
        S.bulk_create(count=a.pods, namespace="bench", job="bench")
        S.bulk_create(count=a.pods, namespace="benchpy", job="bench")
        # C: memory baseline from an empty namespace, then the real list and the churn.
        c0 = run_c(driver, sim, "bench-empty", 0, tokfile, S)
        c = run_c(driver, sim, "bench", a.events, tokfile, S)
        print("C: list %.3f s CPU, %d events %.3f s CPU, heap %d (empty ns %d)" % (
            c["list_cpu"], c.get("events_seen", 0), c["watch_cpu"], c["heap"], c0["heap"]), flush=True)
        py = run_py(sim, "benchpy", a.events, S)
        S.bulk_create(count=a.pods, namespace="benchkc", job="bench")
        kc = run_kubectl(sim, "benchkc", a.events, S, tmp)
        c_mem = (c["heap"] - c0["heap"]) / a.pods
        py_mem = py["rss_growth"] / a.pods
        rows = [
            ("CPU to ingest a %d-pod LIST (s)" % a.pods, c["list_cpu"], py["list_cpu"]),
            ("CPU to apply %d watch events (s)" % a.events, c["watch_cpu"], py["watch_cpu"]),
            ("memory per stored pod (bytes)", c_mem, py_mem),
        ]
        kv = [kc.get("list_cpu"), kc.get("watch_cpu"), None]
        print("%-42s %12s %14s %9s %14s %9s" % ("figure", "C (tpumesh)", "Python client", "Py / C",
                                                "kubectl", "kc / C"))
        for (name, cv, pv), k in zip(rows, kv):
            ks = ("%14.3f %8.1fx" % (k, k / cv)) if k is not None and cv else "%14s %9s" % ("-", "-")
            print("%-42s %12.3f %14.3f %8.1fx %s" % (name, cv, pv, pv / cv if cv else float("inf"), ks))
        if kc:
            print("kubectl saw %s events (get pods -w --output-watch-events -o name; its CPU includes "
                  "printing)" % kc.get("events_seen"))
        print("C saw %s events, Python %s; Python stored %d pods" % (c.get("events_seen"), py["events_seen"],
                                                                   py["count"]))
        print("C per-event CPU: %.2f us; Python: %.2f us" % (c["watch_cpu"] / max(1, c["events_seen"]) * 1e6,
                                                            py["watch_cpu"] / max(1, py["events_seen"]) * 1e6))
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
