"""End-to-end: multi-slice JobSets with the real sidecar on every pod, against the
kube-apiserver simulator. A 2 x 2 and a 4 x 4 JobSet; each pod's sidecar must publish a tpu.env
for its own slice (TPU_WORKER_ID within the slice, the slice's hosts in order) with MEGASCALE_*
(slice 0 worker 0, the slice count, its slice, the port: 8080 or tpumesh.dev/megascale-port),
a jax.env with what JAX's multislice detection computes (process 0, even when the JobSet names
another pod as its coordinator: JAX starts its coordination service in process 0), global
slice-major DTENSOR_JOBS and TF_CONFIG (read back as TFConfigClusterResolver does), and a
topology.json whose slices and workersDigest agree across pods.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sidecar import Sidecar  # noqa: E402
from simctl import start_sim  # noqa: E402
from tap import check, done, fail, scaled, wait  # noqa: E402
import tfconfig_check  # noqa: E402


def run_init(out, s, w, hps, slices, extra_env):
    """tpumesh-init as GKE starts it on pod s/w of JobSet ms21 (static path, no TPU)."""
    build = os.environ.get("BUILD", "build")
    root = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
    exe = os.path.join(build if os.path.isabs(build) else os.path.join(root, build), "bin/tpumesh-init")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TPU_WORKER_ID": str(w),
           "TPU_WORKER_HOSTNAMES": ",".join("ms21-slice-%d-%d.ms21" % (s, k) for k in range(hps)),
           "MEGASCALE_NUM_SLICES": str(slices), "MEGASCALE_SLICE_ID": str(s),
           "MEGASCALE_COORDINATOR_ADDRESS": "ms21-slice-0-0.ms21"}
    env.update(extra_env)
    return subprocess.run([exe, "--skip-init", "--out-dir", out, "--annotations-file", "/dev/null"],
                          env=env, capture_output=True, text=True, timeout=scaled(60))


def sourced(out, f):
    """Every variable of env file f after `set -a; . ./f` in sh."""
    r = subprocess.run(["sh", "-c", "env -i sh -c 'set -a; . ./%s; set +a; env'" % f], cwd=out,
                       capture_output=True, text=True, timeout=scaled(10))
    return dict(l.split("=", 1) for l in r.stdout.splitlines()
                if "=" in l and l.split("=", 1)[0] not in ("PWD", "SHLVL", "_", "OLDPWD"))


def fnv1a64(data, h=14695981039346656037):
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def workers_digest(workers):
    """topology.json's workersDigest, as the README defines it."""
    t = 14695981039346656037
    for w in workers:
        t = ((t ^ w["index"]) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        t = ((t ^ fnv1a64((w["address"] or "").encode())) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % t


def make_jobset(c, name, slices, hps, annotations=None, labels=None):
    anns = {"tpumesh.dev/expected-workers": str(slices * hps)}
    anns.update(annotations or {})
    # Created out of order: the sidecars must not depend on creation order.
    for s in reversed(range(slices)):
        for w in range(hps):
            c.make(jobset=name, slice=s, index=w, slices=slices, per_slice=hps,
                   annotations=anns, labels=labels or {})


def check_job(label, cars, slices, hps, mport, jax_host):
    """cars[s][w]: the sidecar of slice s worker w."""
    host = lambda s, w: "%s-slice-%d-%d.%s" % (label, s, w, label)  # noqa: E731
    jobs = ",".join("%s:10000" % host(s, w) for s in range(slices) for w in range(hps))
    problems, digests = [], set()
    for s in range(slices):
        for w in range(hps):
            car = cars[s][w]
            tpu = sourced(car.out, "tpu.env")
            want = {"TPU_WORKER_ID": str(w),
                    "TPU_WORKER_HOSTNAMES": ",".join(host(s, k) for k in range(hps)),
                    "MEGASCALE_COORDINATOR_ADDRESS": host(0, 0),
                    "MEGASCALE_NUM_SLICES": str(slices), "MEGASCALE_SLICE_ID": str(s),
                    "MEGASCALE_PORT": str(mport)}
            got = {k: tpu.get(k) for k in want}
            if got != want:
                problems.append("%d/%d tpu.env %r" % (s, w, got))
            jax = sourced(car.out, "jax.env")
            jwant = {"JAX_COORDINATOR_ADDRESS": jax_host + ":8482",
                     "JAX_NUM_PROCESSES": str(slices * hps), "JAX_PROCESS_ID": str(s * hps + w)}
            if jax != jwant:
                problems.append("%d/%d jax.env %r" % (s, w, jax))
            dt = sourced(car.out, "dtensor.env")
            if dt.get("DTENSOR_JOBS") != jobs or dt.get("DTENSOR_CLIENT_ID") != str(s * hps + w):
                problems.append("%d/%d dtensor.env %r" % (s, w, dt))
            with open(car.path("tf_config.json")) as f:
                cluster, ttype, tid, _ = tfconfig_check.parse(f.read())
            if cluster != {"worker": jobs.split(",")} or (ttype, tid) != ("worker", s * hps + w):
                problems.append("%d/%d TF_CONFIG %r %r %r" % (s, w, cluster, ttype, tid))
            t = car.topology()
            if t["slices"] != {"count": slices, "id": s, "hostsPerSlice": hps}:
                problems.append("%d/%d slices %r" % (s, w, t["slices"]))
            if t["workersDigest"] != workers_digest(t["workers"]):
                problems.append("%d/%d workersDigest %s is not FNV-1a of the list" %
                                (s, w, t["workersDigest"]))
            digests.add(t["workersDigest"])
    check("%s: per-slice tpu.env and MEGASCALE_*, global jax.env, DTENSOR_JOBS and TF_CONFIG on "
          "every pod" % label, not problems, "\n".join(problems[:8]))
    check("%s: workersDigest equal on every pod" % label, len(digests) == 1, digests)


def main():
    tmp = tempfile.mkdtemp(prefix="tpumesh-sidecar-ms.")
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    sim = start_sim(["--token", "t0"])
    cars = []
    try:
        c = sim.client
        make_jobset(c, "ms22", 2, 2)
        coord = {"jobset.sigs.k8s.io/coordinator": "ms44-slice-1-0.ms44"}
        make_jobset(c, "ms44", 4, 4, annotations=dict(coord, **{"tpumesh.dev/megascale-port": "8081"}),
                    labels=coord)
        pods = {p["metadata"]["name"]: p for p in c.pods()}
        by = {}
        for name, p in pods.items():
            lab = p["metadata"]["labels"]
            key = (lab["jobset.sigs.k8s.io/jobset-name"], int(lab["jobset.sigs.k8s.io/job-index"]),
                   int(lab["batch.kubernetes.io/job-completion-index"]))
            by[key] = name
        grid = {}
        for (js, s, w), name in sorted(by.items()):
            out = os.path.join(tmp, "%s-%d-%d" % (js, s, w))
            os.mkdir(out)
            car = Sidecar("%s/%d/%d" % (js, s, w), sim.url, tok, name, out)
            cars.append(car)
            grid.setdefault(js, {}).setdefault(s, {})[w] = car
        check("all %d sidecars ready" % len(cars),
              wait(lambda: all(car.readyz()[0] == 200 for car in cars), 60),
              [(car.name, car.readyz()) for car in cars if car.readyz()[0] != 200][:4])
        check_job("ms22", grid["ms22"], 2, 2, 8080, "ms22-slice-0-0.ms22")
        # tpumesh-init then the sidecar on the same volume (JobSet ms21: 2 slices x 1 host):
        # init takes MEGASCALE_PORT from GKE's variable, which the sidecar's container does
        # not have; the sidecar keeps it, and its complete files leave init's tpu.env and
        # jax.env byte for byte as they were.
        make_jobset(c, "ms21", 2, 1)
        before, cars21 = {}, []
        for s in range(2):
            name = next(p["metadata"]["name"] for p in c.pods()
                        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == "ms21"
                        and p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == str(s))
            out = os.path.join(tmp, "ms21-%d" % s)
            os.mkdir(out)
            r = run_init(out, s, 0, 1, 2, {"MEGASCALE_PORT": "8095"})
            check("ms21 slice %d: tpumesh-init exit 0" % s, r.returncode == 0, r.stderr[-800:])
            before[s] = {f: open(os.path.join(out, f)).read() for f in ("tpu.env", "jax.env")}
            car = Sidecar("ms21/%d" % s, sim.url, tok, name, out)
            cars.append(car)
            cars21.append(car)
        check("ms21: sidecars ready", wait(lambda: all(x.readyz()[0] == 200 for x in cars21), 30))
        for s, car in enumerate(cars21):
            after = {f: open(car.path(f)).read() for f in ("tpu.env", "jax.env")}
            check("ms21 slice %d: init's tpu.env and jax.env unchanged by the sidecar" % s,
                  after == before[s] and "MEGASCALE_PORT='8095'" in after["tpu.env"],
                  "%r\n%r" % (before[s], after))
            check("ms21 slice %d: the port's source is logged" % s,
                  car.log_count("MEGASCALE_PORT 8095 (from the tpu.env tpumesh-init published)") == 1,
                  car.lines[:14])
        # A bad MEGASCALE_PORT in the sidecar's own environment: exit 2, saying so.
        os.environ["MEGASCALE_PORT"] = "80a"
        try:
            bad = Sidecar("bad-port", sim.url, tok, by[("ms22", 0, 0)], os.path.join(tmp, "bad"))
        finally:
            del os.environ["MEGASCALE_PORT"]
        rc = bad.proc.wait(scaled(20))
        check("bad MEGASCALE_PORT: the sidecar exits 2 naming it",
              rc == 2 and any("MEGASCALE_PORT='80a' is not a port" in l for l in bad.lines[-3:]),
              (rc, bad.lines[-3:]))
        check_job("ms44", grid["ms44"], 4, 4, 8081, "ms44-slice-0-0.ms44")
        car = grid["ms44"][2][3]
        check("ms44: the multi-slice settings and their sources are logged",
              car.log_count("MEGASCALE_PORT 8081 (from annotation tpumesh.dev/megascale-port), "
                            "JAX coordinator slice 0 worker 0") == 1, car.lines[:14])
        # A peer's IP changes (dns mode: the addresses stay): every pod still agrees.
        for car in cars:
            car.digest0 = car.topology()["workersDigest"]
        c.set_ip(name=by[("ms22", 1, 1)], ip="10.77.0.9")
        ms22 = [grid["ms22"][s][w] for s in range(2) for w in range(2)]
        check("ms22: every pod republishes the changed IP",
              wait(lambda: all(any(x["ip"] == "10.77.0.9" for x in car.topology()["workers"])
                               for car in ms22), 20))
        digests = {car.topology()["workersDigest"] for car in ms22}
        check("ms22: workersDigest unchanged by an IP change in dns mode, equal everywhere",
              digests == {grid["ms22"][0][0].digest0}, digests)
        # The peer is replaced (a new pod, same host name): the others' digest stays.
        old = by[("ms22", 1, 1)]
        c.delete(name=old)
        c.make(jobset="ms22", slice=1, index=1, slices=2, per_slice=2,
               annotations={"tpumesh.dev/expected-workers": "4"})
        others = [grid["ms22"][s][w] for s, w in ((0, 0), (0, 1), (1, 0))]
        # One read of topology.json decides (complete, and the old pod gone): /readyz and the
        # file read one after the other could pair a 200 from before the deletion was seen
        # with the incomplete 3-worker file published right after it.
        def replaced(car):
            t = car.topology()
            return t["complete"] is True and all(x["pod"] != old for x in t["workers"])
        check("ms22: the replacement pod is published by the other pods",
              wait(lambda: all(replaced(car) for car in others), 30))
        digests = {car.topology()["workersDigest"] for car in others}
        check("ms22: workersDigest unchanged by a replaced peer at the same address",
              digests == {grid["ms22"][0][0].digest0}, digests)
        for car in cars:
            rc, _ = car.stop()
            if rc != 0:
                fail("%s: SIGTERM exit %s" % (car.name, rc))
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
