#!/usr/bin/env python3
"""A new user's first job on the real control plane: k8s/first-job-cpu.yaml applied exactly as
its header says (k8s/rbac.yaml with the namespace replaced, then the Job), with its smoke trainer
run as a local process (its command as written; TPUMESH_DIR, which the script reads, points at
the pod's shared volume). `kubectl wait --for=condition=complete` (the pinned kubectl) must
return once the real Job controller counts 4 succeeded pods, and every trainer's output must
say what this test computes from the pods: its rank, the 4 workers at <hostname>.<subdomain>,
and the workersDigest by docs/shared-volume.md's definition (64-bit FNV-1a over index and
address), the same on every pod."""
import os
import time

from e2e import apply_all, check, done, elapsed, load_manifests, pod_log, pods, setup

NAME = "k8s/first-job-cpu.yaml: the smoke job completes"
NS = "training"
SEL = "batch.kubernetes.io/job-name=first-job-cpu"


def smoke_trainer(pr, c):
    """The trainer container's own command, run on the host (a kubelet would run it in the
    image); the shared volume's host directory is where the script looks for the files."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.path.join(pr.dir, "home"),
           "TPUMESH_DIR": pr.remap(c, "/var/run/tpumesh")}
    return (c.get("command") or []) + (c.get("args") or []), env


def digest(addresses):
    B, P, M = 14695981039346656037, 1099511628211, 2 ** 64
    t = B
    for i, a in enumerate(addresses):
        h = B
        for byte in a.encode():
            h = ((h ^ byte) * P) % M
        t = ((t ^ i) * P) % M
        t = ((t ^ h) * P) % M
    return "%016x" % t


def main():
    env = setup(NAME, runners={"trainer": smoke_trainer})
    if not env:
        return done()
    cp, node = env
    cp.namespace(NS, enforce="restricted")

    def rbac_ns(d):  # the header's sed 's/namespace: default/namespace: training/'
        for s in d.get("subjects") or []:
            if s.get("namespace") == "default":
                s["namespace"] = NS
    apply_all(cp, load_manifests("k8s/rbac.yaml", NS, edit=rbac_ns))
    t0 = time.monotonic()
    r = cp.kubectl("apply", "-n", NS, "-f", os.path.join(os.path.dirname(__file__), "..", "..", "k8s", "first-job-cpu.yaml"))
    if not check("kubectl apply -n %s -f k8s/first-job-cpu.yaml" % NS, r.returncode == 0, r.stderr):
        return done()
    r = cp.kubectl("wait", "-n", NS, "--for=condition=complete", "job/first-job-cpu", "--timeout=120s", timeout=150)
    if not check("kubectl wait --for=condition=complete job/first-job-cpu (%s)" % elapsed(t0), r.returncode == 0,
                 r.stdout + r.stderr + "\n" + "\n".join(node.notes[-5:])):
        return done()
    ps = sorted(pods(cp, NS, SEL), key=lambda p: int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]))
    check("4 pods Succeeded", len(ps) == 4 and all(p["status"]["phase"] == "Succeeded" for p in ps),
          [(p["metadata"]["name"], p["status"].get("phase")) for p in ps])
    workers = ["%s.%s:10000" % (p["spec"]["hostname"], p["spec"]["subdomain"]) for p in ps]
    want_digest = digest(workers)
    for i, p in enumerate(ps):
        out = pod_log(node, p, "trainer")
        want = ["tpumesh smoke: rank %d of 4 (TPU_WORKER_ID %d)" % (i, i),
                "tpumesh smoke: DTENSOR_JOBS=%s" % ",".join(workers),
                "tpumesh smoke: workersDigest=%s" % want_digest]
        got = [line for line in out.splitlines() if line.startswith("tpumesh smoke:")]
        check("trainer %d's output: rank, the 4 workers, the digest computed here" % i, got == want,
              "got  %s\nwant %s\n%s" % (got, want, out[-800:]))
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
