#!/usr/bin/env python3
"""Scenario 3 (docs/e2e.md): k8s/jobset-multislice.yaml through the real JobSet controller (its
webhooks included), made 2 slices x 2 hosts (v5litepod-8, topology 2x4, 2 pods per child Job) to
fit this machine. Every pod's files are checked against what this test computes from the pods:
per-slice tpu.env with MEGASCALE_*, the global DTENSOR_JOBS / TF_CONFIG / jax.env in slice-major
order, and the expected count from the JobSet (replicas x completions)."""
import json
import os

from e2e import (apply_and_wait_ready, check, done, load_manifests, out_dir, setup, source_env,
                 wait)

NAME = "2-slice x 2-host JobSet (k8s/jobset-multislice.yaml)"
NS = "multislice"
JS = "tpumesh-multislice"
SEL = "jobset.sigs.k8s.io/jobset-name=" + JS


def manifests():
    def edit(d):
        if d["kind"] == "RoleBinding":
            for s in d["subjects"]:
                s["namespace"] = NS
        if d["kind"] == "JobSet":
            rj = d["spec"]["replicatedJobs"][0]
            rj["replicas"] = 2
            js = rj["template"]["spec"]
            js["parallelism"] = js["completions"] = 2
            js["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "2x4"
    return load_manifests("k8s/rbac.yaml", NS, edit) + load_manifests("k8s/jobset-multislice.yaml", NS, edit)


def expected(ps):
    def key(p):
        lb = p["metadata"]["labels"]
        return (int(lb["jobset.sigs.k8s.io/job-index"]), int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]))
    by = sorted(ps, key=key)
    host = {key(p): "%s.%s" % (p["spec"]["hostname"], p["spec"]["subdomain"]) for p in by}
    workers = ["%s:10000" % host[key(p)] for p in by]
    out = {}
    for g, p in enumerate(by):
        s, i = key(p)
        out[p["metadata"]["name"]] = {
            "dtensor.env": {"DTENSOR_JOBS": ",".join(workers), "DTENSOR_CLIENT_ID": str(g), "DTENSOR_NUM_CLIENTS": "4"},
            "tpu.env": {"TPU_WORKER_ID": str(i), "TPU_WORKER_HOSTNAMES": "%s,%s" % (host[(s, 0)], host[(s, 1)]),
                        "TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_TOPOLOGY": "2x4",
                        "MEGASCALE_COORDINATOR_ADDRESS": host[(0, 0)], "MEGASCALE_NUM_SLICES": "2",
                        "MEGASCALE_SLICE_ID": str(s), "MEGASCALE_PORT": "8080"},
            "jax.env": {"JAX_COORDINATOR_ADDRESS": host[(0, 0)] + ":8482", "JAX_NUM_PROCESSES": "4",
                        "JAX_PROCESS_ID": str(g)},
            "tf": {"cluster": {"worker": workers}, "task": {"type": "worker", "index": g}},
        }
    return out


def compare(node, ps, want):
    errs = []
    for p in ps:
        name = p["metadata"]["name"]
        d = out_dir(node, p)
        w = want[name]
        try:
            for f in ("dtensor.env", "tpu.env", "jax.env"):
                got = source_env(os.path.join(d, f))
                for k, v in w[f].items():
                    if got.get(k) != v:
                        errs.append("%s %s: %s=%r want %r" % (name, f, k, got.get(k), v))
            with open(os.path.join(d, "tf_config.json")) as f:
                tf = json.load(f)
            if tf != w["tf"]:
                errs.append("%s tf_config.json: %s want %s" % (name, tf, w["tf"]))
            with open(os.path.join(d, "topology.json")) as f:
                topo = json.load(f)
            if (topo.get("expectedWorkers"), topo.get("expectedWorkersSource")) != (4, "jobset"):
                errs.append("%s topology.json: expected %s from %s, want 4 from jobset" % (
                    name, topo.get("expectedWorkers"), topo.get("expectedWorkersSource")))
        except (OSError, ValueError, TypeError, KeyError) as e:
            errs.append("%s: %s" % (name, e))
    return errs


def main():
    env = setup(NAME, jobset=True, labels={"cloud.google.com/gke-nodepool": "tpu-pool-0"})
    if not env:
        return done()
    cp, node = env
    cp.namespace(NS, enforce="restricted")
    ps = apply_and_wait_ready(cp, node, manifests(), NS, SEL, 4, "the JobSet controller's 2 child Jobs x 2 pods "
                              "are created (its webhooks admit them) and Ready", timeout=150,
                              more=lambda: "jobset-controller: %s" % cp.procs["jobset-controller"].tail(8))
    if not ps:
        return done()
    jobs = sorted(j["metadata"]["name"] for j in cp.admin.list("jobs", NS)["items"])
    check("child Jobs are <jobset>-<replicatedJob>-<index>", jobs == [JS + "-slice-0", JS + "-slice-1"], jobs)
    # JobSet's own pod webhook ran (exclusive placement per the manifest's annotation): leader
    # pods get its affinity on cloud.google.com/gke-nodepool, followers the leader's node pool.
    placed = [p["metadata"]["name"] for p in ps
              if (p["spec"].get("nodeSelector") or {}).get("cloud.google.com/gke-nodepool") == "tpu-pool-0"
              or "cloud.google.com/gke-nodepool" in json.dumps(p["spec"].get("affinity") or {})]
    check("JobSet's pod webhook set exclusive placement on every pod (gke-nodepool affinity or selector)",
          len(placed) == 4, [(p["metadata"]["name"], p["spec"].get("nodeSelector"), p["spec"].get("affinity"))
                             for p in ps])
    want = expected(ps)
    wait(lambda: not compare(node, ps, want), 10)
    errs = compare(node, ps, want)
    check("every pod's files: per-slice tpu.env with MEGASCALE_*, global DTENSOR_JOBS/TF_CONFIG/jax.env, "
          "count 4 from the JobSet", not errs, "\n".join(errs))
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
