#!/usr/bin/env python3
"""Scenarios 4 and 6 (docs/e2e.md) on the real control plane: a StatefulSet of 3 whose pod
template is k8s/job-v5litepod-16.yaml's (tpumesh-init, the native sidecar, the volumes) made a
StatefulSet's: podManagementPolicy Parallel, no TPU node selectors, `tpumesh.dev/tpu: local` and no
expected-workers annotation, so the sidecar takes the count from the StatefulSet (one GET).

4. The real StatefulSet controller's 3 pods become Ready; every pod's files list the 3 workers by
   apps.kubernetes.io/pod-index at <hostname>.<serviceName> (dns mode), computed here from the
   pods the API server holds; topology.json says the count came from the StatefulSet.
6. A pod deleted is recreated by the controller with the same name and a new IP: every sidecar
   publishes the new IP (topology.json), and since the addresses are DNS names the env files and
   tf_config.json stay byte for byte the same."""
import json
import os
import time

from e2e import (apply_and_wait_ready, check, done, load_manifests, out_dir, setup, source_env, wait,
                 wait_pods_ready, elapsed)

NAME = "StatefulSet of 3 (k8s/job-v5litepod-16.yaml's pod template)"
NS = "sts"
STS = "tpumesh-sts"
SEL = "app.kubernetes.io/name=tpumesh-sts"
FILES = ("dtensor.env", "tpu.env", "jax.env", "tf_config.json")


def manifests():
    docs = load_manifests("k8s/job-v5litepod-16.yaml", NS)
    job = next(d for d in docs if d["kind"] == "Job")
    tpl = job["spec"]["template"]
    tpl["metadata"]["labels"] = {"app.kubernetes.io/name": STS}
    ann = tpl["metadata"]["annotations"]
    ann.pop("tpumesh.dev/expected-workers", None)
    ann["tpumesh.dev/tpu"] = "local"
    spec = tpl["spec"]
    spec.pop("nodeSelector", None)
    spec.pop("subdomain", None)
    spec["restartPolicy"] = "Always"
    spec["terminationGracePeriodSeconds"] = 5
    for c in spec.get("initContainers", []) + spec["containers"]:
        # The Job's explicit peer selector names the Job; a StatefulSet's pods derive theirs.
        c["env"] = [e for e in c.get("env") or [] if e["name"] != "TPUMESH_SELECTOR"]
        for k in ("requests", "limits"):
            (c.get("resources") or {}).get(k, {}).pop("google.com/tpu", None)
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": STS, "namespace": NS},
           "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                    "selector": {"app.kubernetes.io/name": STS}, "ports": [{"name": "dtensor", "port": 10000}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": STS, "namespace": NS},
           "spec": {"replicas": 3, "serviceName": STS, "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app.kubernetes.io/name": STS}}, "template": tpl}}
    rbac = load_manifests("k8s/rbac.yaml", NS, edit=_rbac_subject)
    return rbac + [svc, sts]


def _rbac_subject(d):
    if d["kind"] == "RoleBinding":
        for s in d["subjects"]:
            s["namespace"] = NS


def expected(ps):
    by = sorted(ps, key=lambda p: int(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"]))
    hosts = ["%s.%s" % (p["spec"]["hostname"], p["spec"]["subdomain"]) for p in by]
    workers = [h + ":10000" for h in hosts]
    return {p["metadata"]["name"]: {
        "DTENSOR_JOBS": ",".join(workers), "DTENSOR_CLIENT_ID": str(i), "DTENSOR_NUM_CLIENTS": "3",
        "tf": {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}},
        "ips": [q["status"]["podIP"] for q in by]} for i, p in enumerate(by)}


def check_files(node, ps, want):
    errs = []
    for p in ps:
        d = out_dir(node, p)
        w = want[p["metadata"]["name"]]
        try:
            env = source_env(os.path.join(d, "dtensor.env"))
            for k in ("DTENSOR_JOBS", "DTENSOR_CLIENT_ID", "DTENSOR_NUM_CLIENTS"):
                if env.get(k) != w[k]:
                    errs.append("%s: %s=%r want %r" % (p["metadata"]["name"], k, env.get(k), w[k]))
            with open(os.path.join(d, "tf_config.json")) as f:
                if json.load(f) != w["tf"]:
                    errs.append("%s: tf_config.json differs" % p["metadata"]["name"])
            with open(os.path.join(d, "topology.json")) as f:
                topo = json.load(f)
            if [x["ip"] for x in topo["workers"]] != w["ips"] or topo.get("expectedWorkersSource") != "statefulset":
                errs.append("%s: topology.json ips %s source %s, want %s statefulset" % (
                    p["metadata"]["name"], [x["ip"] for x in topo["workers"]], topo.get("expectedWorkersSource"), w["ips"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            errs.append("%s: %s" % (p["metadata"]["name"], e))
    return errs


def snapshot(node, ps):
    out = {}
    for p in ps:
        d = out_dir(node, p)
        for f in FILES:
            with open(os.path.join(d, f), "rb") as fh:
                out[(p["metadata"]["name"], f)] = fh.read()
    return out


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    cp.namespace(NS, enforce="restricted")
    ps = apply_and_wait_ready(cp, node, manifests(), NS, SEL, 3,
                              "scenario 4: the StatefulSet controller's 3 pods are Ready")
    if not ps:
        return done()
    want = expected(ps)
    wait(lambda: not check_files(node, ps, want), 10)
    errs = check_files(node, ps, want)
    check("scenario 4: every pod's files list the 3 workers by pod index at <hostname>.<service>, "
          "count from the StatefulSet", not errs, "\n".join(errs))
    before = snapshot(node, ps)

    # Scenario 6: delete pod 1; the controller recreates it (same name, new uid and IP).
    victim = next(p for p in ps if p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1")
    old_ip, old_uid = victim["status"]["podIP"], victim["metadata"]["uid"]
    t1 = time.monotonic()
    cp.admin.delete("pods", victim["metadata"]["name"], NS)

    def replaced():
        ps2 = wait_pods_ready(cp, NS, SEL, 3, timeout=1)
        if not ps2:
            return None
        new = next(p for p in ps2 if p["metadata"]["name"] == victim["metadata"]["name"])
        return ps2 if new["metadata"]["uid"] != old_uid else None
    ps2 = wait(replaced, 90, 0.5)
    if not check("scenario 6: pod %s is recreated by the StatefulSet controller and all 3 are Ready again"
                 % victim["metadata"]["name"], ps2, "\n".join(node.notes[-5:])):
        return done()
    new_ip = next(p for p in ps2 if p["metadata"]["name"] == victim["metadata"]["name"])["status"]["podIP"]
    check("scenario 6: the recreated pod has a new IP (%s -> %s), %s after the delete" % (old_ip, new_ip, elapsed(t1)),
          new_ip != old_ip)
    want2 = expected(ps2)
    wait(lambda: not check_files(node, ps2, want2), 20)
    errs = check_files(node, ps2, want2)
    check("scenario 6: every sidecar published the new IP", not errs, "\n".join(errs))
    after = snapshot(node, ps2)
    changed = sorted("%s/%s" % k for k in before if before[k] != after.get(k))
    check("scenario 6: dns mode: dtensor.env, tpu.env, jax.env and tf_config.json unchanged on every pod",
          not changed, "changed: %s" % changed)
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
