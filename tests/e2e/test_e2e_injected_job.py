#!/usr/bin/env python3
"""Scenario 2 (docs/e2e.md): k8s/injected-job-v5litepod-16.yaml, an Indexed Job of 4 pods whose
template carries only the label tpumesh.dev/inject: "true", on the real control plane.

The real API server calls tpumesh-injector (k8s/injector.yaml, run as the Deployment's pods on
the e2e node) over TLS through the webhook's Service; the pods the Job controller creates pass
the webhook, the namespace's enforced `restricted` Pod Security and validation; every pod's
tpumesh-init and sidecar run with a bound service-account token and publish; each pod's files
are checked against what this test computes from the pods the API server holds (not with
tpumesh's renderer): DTENSOR_*, TF_CONFIG, TPU_*, JAX_* and topology.json's worker list."""
import json
import os
import time

from e2e import (apply_all, apply_and_wait_ready, check, done, fail, install_injector_manifests,
                 load_manifests, ok, out_dir, setup, source_env, wait, elapsed)
import kube

NAME = "injected Indexed Job of 4 (k8s/injected-job-v5litepod-16.yaml)"
NS = "train"


def expected_files(ps):
    """What every pod's files must say, from the pods alone: the Indexed Job's completion index
    orders the workers, dns mode names them <hostname>.<subdomain>, the port and job name are
    the template's annotations, and v5litepod-16 (4x4) is 4 hosts of 2x2 chips."""
    by_index = sorted(ps, key=lambda p: int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]))
    ann = by_index[0]["metadata"]["annotations"]
    port = ann.get("tpumesh.dev/port", "10000")
    hosts = ["%s.%s" % (p["spec"]["hostname"], p["spec"]["subdomain"]) for p in by_index]
    workers = ["%s:%s" % (h, port) for h in hosts]
    out = {}
    for i, p in enumerate(by_index):
        out[p["metadata"]["name"]] = {
            "dtensor.env": {"DTENSOR_JOBS": ",".join(workers), "DTENSOR_CLIENT_ID": str(i),
                            "DTENSOR_JOB_NAME": ann.get("tpumesh.dev/job-name", "worker"),
                            "DTENSOR_NUM_CLIENTS": str(len(workers))},
            "tpu.env": {"TPU_WORKER_ID": str(i), "TPU_WORKER_HOSTNAMES": ",".join(hosts),
                        "TPU_ACCELERATOR_TYPE": "v5litepod-16", "TPU_TOPOLOGY": "4x4",
                        "TPU_HOST_BOUNDS": "2,2,1", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1"},
            "jax.env": {"JAX_COORDINATOR_ADDRESS": hosts[0] + ":8482", "JAX_NUM_PROCESSES": str(len(hosts)),
                        "JAX_PROCESS_ID": str(i)},
            "tf_config.json": {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}},
            "workers": [(j, q["metadata"]["name"], hosts[j], q["status"]["podIP"], workers[j])
                        for j, q in enumerate(by_index)],
        }
    return out


def compare_pod(d, want):
    errs = []
    for f in ("dtensor.env", "tpu.env", "jax.env"):
        try:
            got = source_env(os.path.join(d, f))
        except Exception as e:  # noqa: BLE001
            errs.append("%s: cannot source: %s" % (f, e))
            continue
        for k, v in want[f].items():
            if got.get(k) != v:
                errs.append("%s: %s=%r, want %r" % (f, k, got.get(k), v))
    try:
        with open(os.path.join(d, "tf_config.json")) as fh:
            tf = json.load(fh)
        if tf != want["tf_config.json"]:
            errs.append("tf_config.json: %s, want %s" % (json.dumps(tf), json.dumps(want["tf_config.json"])))
        with open(os.path.join(d, "topology.json")) as fh:
            topo = json.load(fh)
        got = [(w["index"], w["pod"], w["host"], w["ip"], w["address"]) for w in topo["workers"]]
        if not topo.get("complete") or got != want["workers"]:
            errs.append("topology.json: complete=%s workers=%s, want %s" % (topo.get("complete"), got, want["workers"]))
    except (OSError, ValueError, KeyError) as e:
        errs.append("tf_config.json/topology.json: %s" % e)
    return errs


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    t0 = time.monotonic()
    inj = install_injector_manifests(cp)
    if not check("k8s/injector.yaml: the injector's Deployment pods run tpumesh-injector and are Ready", inj,
                 "\n".join(node.notes[-5:])):
        return done()
    ok("injector up (%s)" % elapsed(t0))

    # The injector serves namespaces labelled for it (k8s/injector.yaml's namespaceSelector).
    cp.namespace(NS, enforce="restricted", labels={"tpumesh.dev/injection": "enabled"})
    apply_all(cp, load_manifests("k8s/rbac.yaml", NS, edit=_rbac_subject))
    # Pod Security really is enforced here: a root pod is refused with PodSecurity's message.
    try:
        cp.admin.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root-probe"},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, namespace=NS)
        fail("namespace %s enforces restricted Pod Security (a non-compliant pod is refused)" % NS, "it was created")
    except kube.ApiError as e:
        check("namespace %s enforces restricted Pod Security (a non-compliant pod is refused)" % NS,
              e.status == 403 and "violates PodSecurity \"restricted:latest\"" in e.message, e.message)

    ps = apply_and_wait_ready(cp, node, load_manifests("k8s/injected-job-v5litepod-16.yaml", NS), NS,
                              "batch.kubernetes.io/job-name=tpumesh-v5e16-injected", 4,
                              "the Job controller's 4 pods were admitted (webhook, restricted Pod Security) "
                              "and are Ready", more=lambda: "events: %s" % _events(cp))
    if not ps:
        return done()
    for p in ps:
        inits = [c["name"] for c in p["spec"].get("initContainers") or []]
        mounts = [m["mountPath"] for m in p["spec"]["containers"][0].get("volumeMounts") or []]
        if inits != ["tpumesh-init", "tpumesh-sidecar"] or "/var/run/tpumesh" not in mounts:
            fail("pod %s was injected by the webhook the API server called" % p["metadata"]["name"],
                 "initContainers %s, trainer mounts %s" % (inits, mounts))
            return done()
    else:
        ok("every pod was injected by the webhook the API server called (tpumesh-init, sidecar, mount)")
    sa_ok = all(p["spec"].get("serviceAccountName") == "tpumesh" for p in ps)
    check("the pods run as service account tpumesh (k8s/rbac.yaml)", sa_ok)

    want = expected_files(ps)
    for p in sorted(ps, key=lambda p: p["metadata"]["name"]):
        d = out_dir(node, p)
        name = p["metadata"]["name"]
        # The sidecar publishes the complete topology before /readyz says 200, so the files are
        # final here; wait briefly anyway for a publish still being renamed in.
        wait(lambda: not compare_pod(d, want[name]), 10)
        errs = compare_pod(d, want[name])
        check("pod %s (index %s): files match the independent computation" % (
            name, p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]), not errs, "\n".join(errs))
    return done()


def _rbac_subject(d):
    if d["kind"] == "RoleBinding":
        for s in d["subjects"]:
            s["namespace"] = NS


def _events(cp):
    try:
        evs = cp.admin.list("events", NS)["items"]
        return "\n".join("%s %s: %s" % (e["involvedObject"]["name"], e["reason"], e["message"]) for e in evs[-8:])
    except Exception as e:  # noqa: BLE001
        return str(e)


if __name__ == "__main__":
    raise SystemExit(main())
