"""Shared pieces of the end-to-end scenarios (tests/e2e/test_*.py): start the control plane
and the node or report the scenario skipped, apply the repository's manifests, read a pod's
published files the way a trainer does (sourcing them with /bin/sh), and wait."""
import base64
import os
import re
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import controlplane as cpmod  # noqa: E402
from controlplane import ROOT, ControlPlane, Unavailable  # noqa: E402,F401
import kube  # noqa: E402,F401
from node import Node  # noqa: E402
import tap  # noqa: E402
from tap import ok, fail, check, scaled  # noqa: E402,F401

import yaml  # noqa: E402  (python3-yaml, make deps)


def skip_needs(name, tool, why):
    """A scenario that cannot run here for want of tool (TAP SKIP "needs TOOL: why"): counted
    as skipped by tests/run.sh, and as failed under CI=true (CI builds everything)."""
    tap.skip_needs(name, tool, why)


def done():
    print("1..%d" % tap._n, flush=True)
    return 1 if tap._failed else 0


def setup(name, jobset=False, **node_kw):
    """(cp, node) running, or None after reporting the scenario skipped."""
    for prog in ("tpumesh-init", "tpumesh-sidecar", "tpumesh-injector"):
        if not os.access(os.path.join(cpmod.BUILD, "bin", prog), os.X_OK):
            skip_needs(name, "tpumesh", "%s is not built: make all" % prog)
            return None
    try:
        cp = ControlPlane(jobset=jobset)
    except Unavailable as e:
        skip_needs(name, "e2e-deps", str(e))
        return None
    try:
        cp.start()
    except cpmod.StartError as e:
        fail(name + ": control plane starts", str(e))
        cp.stop()
        return None
    node = Node(cp, **node_kw).start()
    return cp, node


def wait(pred, timeout=60.0, interval=0.2):
    return tap.wait(pred, timeout, interval)


def load_manifests(rel, namespace=None, edit=None):
    with open(os.path.join(ROOT, rel)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        if namespace and d["kind"] not in kube.CLUSTER_SCOPED_KINDS:
            d["metadata"]["namespace"] = namespace
        if edit:
            edit(d)
    return docs


def apply_all(cp, docs):
    for d in docs:
        cp.admin.apply(d)


def pods(cp, namespace, selector):
    return cp.admin.list("pods", namespace, labelSelector=selector)["items"]


def is_ready(pod):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])


def wait_pods_ready(cp, namespace, selector, n, timeout=120):
    """The n pods of selector, all Ready (None on timeout)."""
    def all_ready():
        ps = [p for p in pods(cp, namespace, selector) if not p["metadata"].get("deletionTimestamp")]
        return ps if len(ps) == n and all(is_ready(p) for p in ps) else None
    return wait(all_ready, timeout, 0.5)


def apply_and_wait_ready(cp, node, docs, namespace, selector, n, label, timeout=120, more=None):
    """Apply docs, then wait (bounded) until the n pods of selector are Ready: check(label), whose
    diagnostics are the pods' phases, the node's last notes and more() when given, then one ok
    line with the time it took. Returns the Ready pods, or None after the failed check."""
    t0 = time.monotonic()
    apply_all(cp, docs)
    ps = wait_pods_ready(cp, namespace, selector, n, timeout)
    if not check(label, ps, "pods: %s\nnode: %s%s" % (
            [(p["metadata"]["name"], p["status"].get("phase")) for p in pods(cp, namespace, selector)],
            "\n".join(node.notes[-5:]), "\n" + more() if more and not ps else "")):
        return None
    ok("%d pods Ready %s after apply" % (n, elapsed(t0)))
    return ps


def out_dir(node, pod):
    """The host directory of pod's shared volume (where tpumesh-init's TPUMESH_OUT_DIR points)."""
    pr = node.pods.get("%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
    if not pr:
        return None
    init = next(c for c in pr.pod["spec"]["initContainers"] if c["name"] == "tpumesh-init")
    want = next((e["value"] for e in init.get("env") or [] if e["name"] == "TPUMESH_OUT_DIR"), "/var/run/tpumesh")
    return pr.remap(init, want)


def source_env(path):
    """The variables a trainer gets from `set -a; . FILE`, read back from /bin/sh."""
    r = subprocess.run(["/bin/sh", "-c", 'set -a; . "$1"; env -0', "sh", path], capture_output=True,
                       env={"PATH": "/usr/bin:/bin"}, check=True)
    out = {}
    for item in r.stdout.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode()] = v.decode()
    for k in ("PATH", "PWD", "SHLVL", "_", "OLDPWD"):
        out.pop(k, None)
    return out


def sidecar_metrics(ip, port=9431):
    """A sidecar's /metrics as {name or name{labels}: value}; OSError when it does not answer."""
    with urllib.request.urlopen("http://%s:%d/metrics" % (ip, port), timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def pod_log(node, pod, container):
    pr = node.pods.get("%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"]))
    p = pr and pr.procs.get(container)
    return p.text() if p else ""


def injector_certs(cp, namespace, service):
    """The injector's serving certificate for <service>.<namespace>.svc from the cluster CA, as
    README's openssl recipe makes one; returns (tls.crt bytes, tls.key bytes, CA bundle b64)."""
    crt, key = cp.pki.issue("injector-" + namespace, service + "." + namespace + ".svc", server=True,
                            dns=["%s.%s.svc" % (service, namespace), "%s.%s.svc.cluster.local" % (service, namespace)])
    with open(crt, "rb") as f:
        c = f.read()
    with open(key, "rb") as f:
        k = f.read()
    with open(cp.pki.ca, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    return c, k, ca


def install_injector_manifests(cp, timeout=120):
    """k8s/injector.yaml as README's "The injector without Helm" installs it, with the
    certificate from the openssl recipe (here signed by the cluster CA). Returns the injector
    pods once Ready, else None."""
    docs = load_manifests("k8s/injector.yaml")
    apply_all(cp, [d for d in docs if d["kind"] == "Namespace"])
    crt, key, ca = injector_certs(cp, "tpumesh-system", "tpumesh-injector")
    cp.admin.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": "tpumesh-injector-tls", "namespace": "tpumesh-system"},
                    "data": {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()}})
    apply_all(cp, [d for d in docs if d["kind"] not in ("Namespace", "MutatingWebhookConfiguration")])
    ready = wait_pods_ready(cp, "tpumesh-system", "app.kubernetes.io/component=injector",
                            _replicas(docs), timeout)
    for d in docs:
        if d["kind"] == "MutatingWebhookConfiguration":
            for w in d["webhooks"]:
                w["clientConfig"]["caBundle"] = ca
            cp.admin.apply(d)
    return ready


def _replicas(docs):
    return next(d["spec"].get("replicas", 1) for d in docs if d["kind"] == "Deployment")


def elapsed(t0):
    return "%.1f s" % (time.monotonic() - t0)
