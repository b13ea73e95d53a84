"""End-to-end: workload shapes other than a plain Indexed Job (issue 5), with the real sidecar
against the kube-apiserver simulator: a multi-slice JobSet (slice-major order, selector from the
JobSet label), a StatefulSet on IPv6 (selector from its template labels, pods of another
controller ignored, [addr]:port), and --verify-dns keeping a dns-mode job incomplete while the
names do not resolve.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sidecar import Sidecar, wait  # noqa: E402
from simctl import start_sim  # noqa: E402
from tap import check, done, fail  # noqa: E402


def jobset(c):
    """2 slices x 2 hosts, created out of order."""
    for s, w in ((1, 1), (0, 0), (1, 0), (0, 1)):
        job = "ms-slice-%d" % s
        c.make(name="%s-%d-aaaaa" % (job, w), index=w, job=job, hostname="%s-%d" % (job, w), subdomain="ms",
               labels={"jobset.sigs.k8s.io/jobset-name": "ms", "jobset.sigs.k8s.io/replicatedjob-name": "slice",
                       "jobset.sigs.k8s.io/job-index": str(s), "jobset.sigs.k8s.io/job-global-index": str(s)})


def statefulset_pod(name, index, owner_kind, owner, ip):
    return {"metadata": {"name": name, "namespace": "default",
                         "labels": {"app": "w", "tier": "train", "apps.kubernetes.io/pod-index": str(index),
                                    "statefulset.kubernetes.io/pod-name": name,
                                    "controller-revision-hash": "w-5d8f7"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner,
                                              "uid": "0f00aa00-0000-4000-8000-00000000000%d" % index,
                                              "controller": True}]},
            "spec": {"hostname": name, "subdomain": "w", "containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def main():
    tmp = tempfile.mkdtemp(prefix="tpumesh-sidecar-shapes.")
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    sim = start_sim(["--token", "t0"])
    cars = []
    try:
        c = sim.client
        jobset(c)
        for i in range(3):
            c.create(pod=statefulset_pod("w-%d" % i, i, "StatefulSet", "w", "fd00:10::%x" % (i + 1)))
        # Same template labels, another controller: not a peer.
        c.create(pod=statefulset_pod("w-decoy", 7, "ReplicaSet", "w-decoy", "fd00:10::99"))
        for i in range(2):
            c.make(name="dnsjob-%d-bbbbb" % i, index=i, job="dnsjob")

        anns = {"tpumesh.dev/port": "12000", "tpumesh.dev/address-mode": "ip"}
        for i in range(2):
            c.make(name="annjob-%d-ccccc" % i, index=i, job="annjob", annotations=anns)

        out = {k: os.path.join(tmp, k) for k in ("js", "ss", "dns", "ann", "annflag")}
        for d in out.values():
            os.mkdir(d)
        js = Sidecar("jobset", sim.url, tok, "ms-slice-1-0-aaaaa", out["js"])
        ss = Sidecar("statefulset", sim.url, tok, "w-1", out["ss"], ["--address-mode", "ip"])
        dn = Sidecar("verify-dns", sim.url, tok, "dnsjob-0-bbbbb", out["dns"],
                     ["--address-mode", "dns", "--verify-dns"])
        an = Sidecar("annotations", sim.url, tok, "annjob-0-ccccc", out["ann"])
        af = Sidecar("flag-over-annotation", sim.url, tok, "annjob-1-ccccc", out["annflag"],
                     ["--port", "13000"])
        cars += [js, ss, dn, an, af]

        check("jobset: ready", wait(lambda: js.readyz()[0] == 200, 15), js.readyz())
        check("jobset: selector is the JobSet label (every slice)",
              js.log_count("selector jobset.sigs.k8s.io/jobset-name=ms") == 1, js.lines[:8])
        want = ",".join("ms-slice-%d-%d.ms:10000" % (s, w) for s in (0, 1) for w in (0, 1))
        check("jobset: DTENSOR_JOBS slice-major, worker-minor", js.sourced("DTENSOR_JOBS") == want,
              js.sourced("DTENSOR_JOBS"))
        check("jobset: slice 1 worker 0 is client 2", js.sourced("DTENSOR_CLIENT_ID") == "2")

        check("statefulset: ready", wait(lambda: ss.readyz()[0] == 200, 15), ss.readyz())
        check("statefulset: selector from template labels, per-pod labels left out",
              ss.log_count("selector app=w,tier=train (template labels of StatefulSet w") == 1,
              [l for l in ss.lines if "selector" in l])
        want = ",".join("[fd00:10::%x]:10000" % (i + 1) for i in range(3))
        check("statefulset: IPv6 addresses as [addr]:port, decoy pod ignored",
              ss.sourced("DTENSOR_JOBS") == want, ss.sourced("DTENSOR_JOBS"))
        check("statefulset: pod-index order, own index 1", ss.sourced("DTENSOR_CLIENT_ID") == "1")
        with open(os.path.join(out["ss"], "topology.json")) as f:
            t = json.load(f)
        check("statefulset: decoy not among the workers", all(w["pod"] != "w-decoy" for w in t["workers"]))

        check("annotations: ready", wait(lambda: an.readyz()[0] == 200, 15), an.readyz())
        jobs = (an.sourced("DTENSOR_JOBS") or "").split(",")
        check("annotations: tpumesh.dev/port and tpumesh.dev/address-mode apply without flags",
              len(jobs) == 2 and all(j.endswith(":12000") and not j.startswith("annjob") for j in jobs),
              jobs)
        check("annotations: the source is logged",
              an.log_count("port 12000 (from annotation tpumesh.dev/port)") == 1, an.lines[:12])
        check("flag over annotation: ready", wait(lambda: af.readyz()[0] == 200, 15), af.readyz())
        jobs = (af.sourced("DTENSOR_JOBS") or "").split(",")
        check("flag over annotation: --port wins, address mode still from the annotation",
              len(jobs) == 2 and all(j.endswith(":13000") and not j.startswith("annjob") for j in jobs),
              jobs)

        check("--verify-dns: names that do not resolve keep it incomplete",
              wait(lambda: dn.readyz()[1].startswith("dns not resolved 0,1"), 15), dn.readyz())
        check("--verify-dns: no env file published while incomplete",
              not os.path.exists(os.path.join(out["dns"], "dtensor.env")))
        with open(os.path.join(out["dns"], "topology.json")) as f:
            t = json.load(f)
        check("--verify-dns: topology.json shows what is known, complete=false",
              t["complete"] is False and len(t["workers"]) == 2)
        for car in cars:
            rc, secs = car.stop()
            check("%s: SIGTERM exit 0" % car.name, rc == 0, rc)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        fail("test raised", repr(e))
    finally:
        for car in cars:
            car.stop()
            if os.environ.get("VERBOSE"):
                print("\n".join("# %s: %s" % (car.name, l) for l in car.lines))
        sim.stop()
        os.system("rm -rf '%s'" % tmp)
    return done()


if __name__ == "__main__":
    sys.exit(main())
