#!/usr/bin/env python3
"""Scenario 10 (docs/e2e.md): relay mode on the real API server, with pods that merely carry the
job's labels.

Before k8s/job-v5litepod-16.yaml's Job is applied (sidecars in --watch-mode relay, fan-out 2, so
ranks 1 and 2 follow rank 0 and rank 3 follows rank 1), two pods are created in its namespace that
carry the job's name label and completion index 0 (label and annotation), as anyone allowed to
create pods there could: `a-forged` without an owner, and `b-forged` whose controller is another
object (a ConfigMap: an owner reference to another Job does not last, the real Job controller
releases a pod that its selector does not match, which leaves a pod like `a-forged`). The node
gives both an IP and runs them. The real Job controller then creates
the job's pods in its own order, and the node starts them as they come.

Checked: the job's 4 pods become Ready; ranks 1 and 2, whose relay is at index 0, log that they
refuse both pods (no controller; another controller) and follow the job's own pod 0; every
subscriber's /readyz names a relay at the IP of a pod of the job, never a forged pod's; every
topology.json lists exactly the job's 4 pods: neither a relay nor the root's own API watch takes a
forged pod as a worker, although the manifest gives the selector (TPUMESH_SELECTOR) instead of
letting the sidecar derive it. Every tpumesh process connects from its pod IP (the node preloads
podbind.so), so the relay admits ranks 1 and 2 by their pod IPs, found among the job's pods on
the real API server, and refuses VIEW_PODS streams from a-forged's IP."""
import json
import os
import urllib.request

from e2e import (apply_all, check, done, is_ready, load_manifests, out_dir, pod_log, pods, setup,
                 sidecar_metrics, wait)
from meshgrpc import raw_subscribers

NAME = "relay mode: pods with the job's labels but not of the job are never followed (real API)"
NS = "relay-trust"
JOB = "tpumesh-v5e16"
SEL = "batch.kubernetes.io/job-name=" + JOB


def workload():
    def edit(d):
        if d["kind"] == "RoleBinding":
            for s in d["subjects"]:
                s["namespace"] = NS
        if d["kind"] == "Job":
            for c in d["spec"]["template"]["spec"]["initContainers"]:
                if c["name"] == "tpumesh-sidecar":
                    c.setdefault("env", []).extend([{"name": "TPUMESH_WATCH_MODE", "value": "relay"},
                                                    {"name": "TPUMESH_RELAY_FANOUT", "value": "2"}])
    return load_manifests("k8s/rbac.yaml", NS, edit) + load_manifests("k8s/job-v5litepod-16.yaml", NS, edit)


def restricted_container(name):
    return {"name": name, "image": "busybox", "command": ["sleep", "3600"],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}


def forged_pod(name, owner=None):
    md = {"name": name, "namespace": NS,
          "labels": {"batch.kubernetes.io/job-name": JOB, "batch.kubernetes.io/job-completion-index": "0"},
          "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}
    if owner:
        md["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                                  "uid": owner["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"restartPolicy": "Never", "containers": [restricted_container("forged")],
                     "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}}


def readyz(ip):
    try:
        with urllib.request.urlopen("http://%s:9431/readyz" % ip, timeout=5) as r:
            return r.read().decode()
    except OSError as e:
        return "unreachable: %s" % e


def metric(ip, name):
    try:
        return sidecar_metrics(ip).get(name)
    except OSError:
        return None


def peers_of(ip, port):
    """The remote addresses of the established TCP connections to ip:port, from /proc/net/tcp
    and tcp6 (an IPv4-mapped address counts as its IPv4 address)."""
    def v4(hexaddr):
        b = bytes.fromhex(hexaddr[-8:])  # the last 32-bit word, in host (little-endian) order
        return "%d.%d.%d.%d" % (b[3], b[2], b[1], b[0])
    out = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for r in rows:
            cols = r.split()
            (la, lp), (ra, _), st = cols[1].split(":"), cols[2].split(":"), cols[3]
            if len(la) == 32 and la[:24] != "0000000000000000FFFF0000":
                continue
            if st == "01" and v4(la) == ip and int(lp, 16) == port:
                out.append(v4(ra))
    return sorted(out)


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    cp.namespace(NS, enforce="restricted")
    other = cp.admin.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": "other", "namespace": NS}}, NS)
    for p in (forged_pod("a-forged"), forged_pod("b-forged", other)):
        cp.admin.create("pods", p, NS)

    def forged_ips():
        ps = {p["metadata"]["name"]: p.get("status", {}).get("podIP") for p in pods(cp, NS, SEL)}
        return ps if all(ps.get(n) for n in ("a-forged", "b-forged")) else None
    forged = wait(forged_ips, 60, 0.5)
    if not check("the two forged pods run with IPs", forged, pods(cp, NS, SEL)):
        return done()
    forged = {n: forged[n] for n in ("a-forged", "b-forged")}

    apply_all(cp, workload())
    job = cp.admin.get("jobs", JOB, NS)

    def job_pods():
        ps = [p for p in pods(cp, NS, SEL)
              if any(o.get("uid") == job["metadata"]["uid"] for o in p["metadata"].get("ownerReferences") or [])
              and not p["metadata"].get("deletionTimestamp")]
        return sorted(ps, key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]))

    ps = wait(lambda: (lambda x: x if len(x) == 4 and all(is_ready(p) for p in x) else None)(job_pods()), 120, 0.5)
    if not check("the job's 4 pods become Ready beside the forged pods", ps,
                 "pods: %s\nnode: %s\n%s" % (
                     [(p["metadata"]["name"], p["status"].get("phase")) for p in pods(cp, NS, SEL)],
                     "\n".join(node.notes[-5:]),
                     "\n".join("%s: %s" % (p["metadata"]["name"], pod_log(node, p, "tpumesh-sidecar")[-1200:])
                               for p in job_pods()))):
        return done()
    ips = [p["status"]["podIP"] for p in ps]
    names = [p["metadata"]["name"] for p in ps]
    logs = [pod_log(node, p, "tpumesh-sidecar") for p in ps]
    for rank in (1, 2):
        lg = logs[rank]
        check("rank %d refuses the pod without an owner (its log)" % rank,
              "not following a pod as relay: pod a-forged has no controller owner" in lg, lg[-1500:])
        check("rank %d refuses the pod of another controller (its log)" % rank,
              "not following a pod as relay: pod b-forged is controlled by ConfigMap other" in lg, lg[-1500:])
    want = {1: ips[0], 2: ips[0], 3: ips[1]}
    for rank, relay_ip in want.items():
        body = wait(lambda rank=rank: (lambda b: b if "source relay %s:9432" % want[rank] in b else None)(
            readyz(ips[rank])), 30, 0.5)
        check("rank %d follows the job's rank %d at %s (its /readyz), no forged pod" % (
            rank, (rank - 1) // 2, relay_ip), body and not any(ip in body for ip in forged.values()),
            readyz(ips[rank]))
    # Admission by pod IP on the real API server: the node preloads podbind.so, so each
    # subscriber connects from its pod's IP, which the relay finds among its job's pods.
    peers = peers_of(ips[0], 9432)
    check("the relay at rank 0 admitted its subscribers by pod IP: its connections come from "
          "ranks 1 and 2's pod IPs, none from 127.0.0.1",
          set(peers) >= {ips[1], ips[2]} and set(peers) <= set(ips), (peers, ips))
    # (A subscriber that connects before the relay has seen its pod's IP is refused and tries
    # again within a second: the refusal count before the stranger is not asserted.)
    base = metric(ips[0], "tpumesh_grpc_streams_refused_total")
    check("the relay at rank 0 serves 2 subscribers (tpumesh_grpc_relay_subscribers)",
          base is not None and metric(ips[0], "tpumesh_grpc_relay_subscribers") == 2,
          (base, metric(ips[0], "tpumesh_grpc_relay_subscribers")))
    # A stranger at a forged pod's IP (labels of the job, not of it) asks the relay for the job.
    sock = raw_subscribers(forged["a-forged"], ips[0], 9432, 3, SEL, namespace=NS)
    try:
        refused = wait(lambda: (metric(ips[0], "tpumesh_grpc_streams_refused_total") or 0) >= (base or 0) + 3,
                       20, 0.5)
        lg = pod_log(node, ps[0], "tpumesh-sidecar")
        check("the relay refuses 3 streams from a-forged's IP %s, logs it, and keeps its 2 subscribers"
              % forged["a-forged"],
              refused and "refusing a relay stream from %s" % forged["a-forged"] in lg
              and "not the IP of a pod of this job" in lg
              and metric(ips[0], "tpumesh_grpc_relay_subscribers") == 2,
              (metric(ips[0], "tpumesh_grpc_streams_refused_total"),
               metric(ips[0], "tpumesh_grpc_relay_subscribers"), lg[-800:]))
    finally:
        sock.close()
    for i, p in enumerate(ps):
        d = out_dir(node, p)
        try:
            with open(os.path.join(d, "topology.json")) as f:
                t = json.load(f)
        except (OSError, TypeError, ValueError) as e:
            t = {"error": str(e)}
        check("rank %d's topology.json lists exactly the job's 4 pods" % i,
              [w.get("pod") for w in t.get("workers", [])] == names, t)
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
