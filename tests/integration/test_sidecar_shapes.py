"""End-to-end: workload shapes other than a plain Indexed Job (issue 5), with the real sidecar
against the kube-apiserver simulator: a multi-slice JobSet (slice-major order, selector from the
JobSet label), a StatefulSet on IPv6 (selector from its template labels, pods of another
controller ignored, [addr]:port), and --verify-dns keeping a dns-mode job incomplete while the
names do not resolve. The expected worker count (issue 12): from the owning JobSet, Indexed Job
and StatefulSet (one GET each), the slice fallback when the owner GET is refused (403) or the
owner is gone (404), and never complete without a count (highest index missing, a slice missing).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sidecar import Sidecar  # noqa: E402
from simctl import start_sim  # noqa: E402
from tap import check, done, fail, wait  # noqa: E402


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
                                              "uid": "0f00aa00-0000-4000-8000-%012x" % sum(map(ord, owner_kind + owner)),
                                              "controller": True}]},
            "spec": {"hostname": name, "subdomain": "w", "containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


SLICE_TOPOLOGY = {"generation": 1, "complete": False,
                  "slice": {"acceleratorType": "v5litepod-16", "topology": "4x4", "chips": 16, "hosts": 4,
                            "chipsPerHost": 4}}


def write_init_topology(d):
    """What tpumesh-init leaves on the volume: a v5litepod-16 slice (4 hosts)."""
    with open(os.path.join(d, "topology.json"), "w") as f:
        json.dump(SLICE_TOPOLOGY, f)


def counts(sim, tmp, tok, cars):
    """Expected worker counts from owners, fallbacks, and never-complete cases."""
    c = sim.client

    def outdir(name):
        d = os.path.join(tmp, name)
        os.mkdir(d)
        return d

    def car(name, ns, pod, out, extra=()):
        sc = Sidecar(name, sim.url, tok, pod, out, ["--namespace", ns, "--address-mode", "ip"] + list(extra))
        cars.append(sc)
        return sc

    # 1. JobSet, one slice of 4, no annotation, highest index missing.
    c.make_jobset(namespace="hx", name="hx", replicas=1, completions=4)
    for w in range(3):
        c.make(namespace="hx", jobset="hx", slice=0, index=w, slices=1, per_slice=4)
    hx_pod = [p["metadata"]["name"] for p in c.pods(namespace="hx")][0]
    hx = car("highest-missing", "hx", hx_pod, outdir("hx"))

    # 2. Two-slice JobSet (2 x 2), only slice 0 created.
    c.make_jobset(namespace="two", name="two", replicas=2, completions=2)
    for w in range(2):
        c.make(namespace="two", jobset="two", slice=0, index=w, slices=2, per_slice=2)
    two_pod = [p["metadata"]["name"] for p in c.pods(namespace="two")][0]
    two = car("slice-missing", "two", two_pod, outdir("two"))

    # 3. Indexed Job: the count is spec.completions.
    c.make_job(namespace="ij", name="ij", completions=3)
    for i in range(3):
        c.make(namespace="ij", name="ij-%d-aaaaa" % i, index=i, job="ij")
    ij = car("indexed-job", "ij", "ij-1-aaaaa", outdir("ij"))

    # 4. Owner GET refused (403): the slice's host count, from tpumesh-init's topology.json.
    c.forbid(namespace="refused", verbs="get", resources="jobs")
    for i in range(4):
        c.make(namespace="refused", name="rj-%d-aaaaa" % i, index=i, job="rj")
    d = outdir("refused")
    write_init_topology(d)
    rf = car("owner-refused", "refused", "rj-0-aaaaa", d)
    # ... and without a slice to fall back on: never complete.
    rn = car("owner-refused-no-slice", "refused", "rj-1-aaaaa", outdir("refused-noslice"))

    # 5. Owner gone (404): no Job object at all.
    for i in range(4):
        c.make(namespace="gone", name="gj-%d-aaaaa" % i, index=i, job="gj")
    d = outdir("gone")
    write_init_topology(d)
    gn = car("owner-gone", "gone", "gj-2-aaaaa", d)

    # 6. A JobSet child pod whose JobSet GET is refused: slice hosts x global-replicas.
    c.forbid(namespace="jsref", verbs="get", resources="jobsets")
    for s_ in range(2):
        for w in range(4):
            c.make(namespace="jsref", jobset="jr", slice=s_, index=w, slices=2, per_slice=4)
    d = outdir("jsref")
    write_init_topology(d)
    jr_pod = sorted(p["metadata"]["name"] for p in c.pods(namespace="jsref"))[5]
    jr = car("jobset-refused", "jsref", jr_pod, d)

    # 7. A pod owned by a Job without jobset labels: the Job's owner is a JobSet, read next.
    c.make_jobset(namespace="viajob", name="vj", replicas=1, completions=2)
    c.make_job(namespace="viajob", jobset="vj", index=0, completions=2)
    for i in range(2):
        c.make(namespace="viajob", name="vj-slice-0-%d-aaaaa" % i, index=i, job="vj-slice-0")
    vj = car("job-owned-by-jobset", "viajob", "vj-slice-0-1-aaaaa", outdir("viajob"))

    check("highest index missing: never complete", wait(lambda: hx.readyz()[0] == 503, 15) and
          wait(lambda: hx.readyz()[1] == "3 of 4 workers present; missing 3\n", 10), hx.readyz())
    check("highest index missing: the count comes from the JobSet and is logged",
          hx.log_count("expecting 4 workers (from JobSet hx: 1 Job x 4 pods)") == 1,
          [l for l in hx.lines if "expect" in l])
    t = wait(lambda: hx.topology(), 5) or {}
    check("highest index missing: topology.json shows expected vs present",
          (t.get("complete"), t.get("expectedWorkers"), t.get("presentWorkers"), t.get("expectedWorkersSource"))
          == (False, 4, 3, "jobset"), t)
    check("highest index missing: no env file published", not os.path.exists(hx.path("dtensor.env")))
    c.make(namespace="hx", jobset="hx", slice=0, index=3, slices=1, per_slice=4)
    check("highest index created: ready", wait(lambda: hx.readyz()[0] == 200, 15), hx.readyz())
    check("highest index created: 4 workers", hx.sourced("DTENSOR_JOBS").count(",") == 3, hx.sourced("DTENSOR_JOBS"))

    check("one slice of two missing: never complete",
          wait(lambda: two.readyz()[1] == "2 of 4 workers present; missing 2-3\n", 15), two.readyz())
    t = wait(lambda: two.topology(), 5) or {}
    check("one slice of two missing: topology.json 2 of 4, from the JobSet",
          (t.get("expectedWorkers"), t.get("presentWorkers"), t.get("expectedWorkersSource")) == (4, 2, "jobset"), t)
    for w in range(2):
        c.make(namespace="two", jobset="two", slice=1, index=w, slices=2, per_slice=2)
    check("second slice created: ready", wait(lambda: two.readyz()[0] == 200, 15), two.readyz())

    check("Indexed Job: ready with spec.completions workers", wait(lambda: ij.readyz()[0] == 200, 15), ij.readyz())
    check("Indexed Job: the count and its source are logged",
          ij.log_count("expecting 3 workers (from Job ij spec.completions)") == 1,
          [l for l in ij.lines if "expect" in l])
    check("Indexed Job: topology.json expectedWorkersSource job",
          ij.topology().get("expectedWorkersSource") == "job", ij.topology())

    check("owner refused (403): falls back to the slice's 4 hosts and is ready",
          wait(lambda: rf.readyz()[0] == 200, 15), rf.readyz())
    check("owner refused (403): logged as an authorization failure naming verb and resource",
          rf.log_count('403 Forbidden (authorization failed)') == 1 and
          rf.log_count('must allow verb "get" on resource "jobs" in API group "batch"') == 1,
          [l for l in rf.lines if "403" in l])
    check("owner refused (403): source slice",
          rf.topology().get("expectedWorkersSource") == "slice" and
          rf.log_count("expecting 4 workers (from the slice: v5litepod-16 4x4 has 4 hosts x 1 slice") == 1,
          [l for l in rf.lines if "expect" in l])
    check("owner refused, no slice: /readyz says the count is unknown and what to set",
          wait(lambda: rn.readyz() == (503, "expected worker count unknown: set tpumesh.dev/expected-workers\n"),
               15), rn.readyz())
    check("owner refused, no slice: logged once",
          rn.log_count("expected worker count unknown: set tpumesh.dev/expected-workers") == 1 and
          rn.log_count("no source gives the number of workers") == 1,
          [l for l in rn.lines if "unknown" in l or "no source" in l])
    t = wait(lambda: rn.topology(), 5) or {}
    check("owner refused, no slice: topology.json expectedWorkers null, 4 present, incomplete",
          (t.get("complete"), t.get("expectedWorkers"), t.get("presentWorkers"), t.get("expectedWorkersSource"))
          == (False, None, 4, None), t)

    check("owner gone (404): falls back to the slice and is ready", wait(lambda: gn.readyz()[0] == 200, 15),
          gn.readyz())
    check("owner gone (404): logged", gn.log_count('jobs.batch "gj" not found') == 1,
          [l for l in gn.lines if "404" in l])

    check("Job owned by a JobSet: the count comes from the JobSet (two GETs), ready",
          wait(lambda: vj.readyz()[0] == 200, 15) and
          vj.log_count("expecting 2 workers (from JobSet vj: 1 Job x 2 pods)") == 1,
          (vj.readyz(), [l for l in vj.lines if "expect" in l]))

    check("JobSet GET refused: slice hosts x global-replicas = 8, ready",
          wait(lambda: jr.readyz()[0] == 200, 15) and
          jr.log_count("4 hosts x 2 slices from jobset.sigs.k8s.io/global-replicas") == 1,
          (jr.readyz(), [l for l in jr.lines if "expect" in l or "403" in l]))
    check("JobSet GET refused: client id = slice 1 x 4 + worker 1", jr.sourced("DTENSOR_CLIENT_ID") == "5",
          jr.sourced("DTENSOR_CLIENT_ID"))


def refusals(sim, tmp, tok, cars):
    """Refusals that say why: a selector that does not select the own pod or that the API rejects
    (exit 2), and dns mode on pods without spec.hostname/spec.subdomain."""
    c = sim.client
    c.make_job(namespace="refuse", name="rz", completions=2)
    for i in range(2):
        c.make(namespace="refuse", name="rz-%d-aaaaa" % i, index=i, job="rz", hostname="", subdomain="")

    def run(name, extra):
        d = os.path.join(tmp, name)
        os.mkdir(d)
        sc = Sidecar(name, sim.url, tok, "rz-0-aaaaa", d, ["--namespace", "refuse"] + list(extra))
        cars.append(sc)
        return sc

    nm = run("selector-misses-own-pod", ["--selector", "app=somebody-else"])
    bad = run("selector-rejected", ["--selector", "x in ("])
    dns = run("dns-without-hostname", ["--address-mode", "dns"])
    for sc in (nm, bad):
        wait(lambda: sc.proc.poll() is not None, 15)
    check("own pod not matched by its selector: exit 2", nm.proc.poll() == 2, (nm.proc.poll(), nm.lines[-3:]))
    check("own pod not matched by its selector: says so",
          nm.log_count("this pod (refuse/rz-0-aaaaa) does not match its own peer selector 'app=somebody-else'")
          == 1, nm.lines[-3:])
    check("selector the API rejects (400): exit 2", bad.proc.poll() == 2, (bad.proc.poll(), bad.lines[-3:]))
    check("selector the API rejects (400): the API's message",
          bad.log_count("the API rejects the peer selector 'x in (' (check --selector)") == 1 and
          bad.log_count("unable to parse requirement") == 1, bad.lines[-3:])
    want = ("2 of 2 workers present; dns mode: no spec.hostname/spec.subdomain on 0-1 (they have an IP): "
            "use address mode ip (tpumesh.dev/address-mode: ip) or give the pods a headless Service "
            "(spec.hostname + spec.subdomain)")
    check("dns mode on pods with an IP but no hostname/subdomain: says exactly that",
          wait(lambda: dns.readyz() == (503, want + "\n"), 15), dns.readyz())


def main():
    tmp = tempfile.mkdtemp(prefix="tpumesh-sidecar-shapes.")
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    sim = start_sim(["--token", "t0"])
    cars = []
    try:
        c = sim.client
        c.make_jobset(name="ms", replicas=2, completions=2)
        jobset(c)
        c.make_statefulset(name="w", replicas=3)
        c.make_job(name="dnsjob", completions=2)
        c.make_job(name="annjob", completions=2)
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
        check("statefulset: the count is spec.replicas",
              t.get("expectedWorkersSource") == "statefulset" and t.get("expectedWorkers") == 3 and
              ss.log_count("expecting 3 workers (from StatefulSet w spec.replicas)") == 1, t)

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
        counts(sim, tmp, tok, cars)
        refusals(sim, tmp, tok, cars)
        for car in cars:
            if car.proc.poll() is not None and car.proc.returncode == 2:
                continue  # a refusal, checked above
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
