"""Real JAX (the pinned jax/jaxlib of requirements-jax.txt, CPU) reads the files tpumesh published.

1. Distributed start: every pod of a 4-pod job runs the README's JAX trainer snippet (its
   env-loading line and its Python program, extracted from README.md) with the program
   extended by a cross-process psum on CPU: every process must report the process index and
   count jax.env gave it and the global sum.
2. JAX's own GKE TPU detection: for every pod of a single-slice (4 pods) and a 2 x 2
   multi-slice job, a JAX process with that pod's tpu.env (JAX_FORCE_TPU_INIT forces TPU
   presence; no TPU is needed) runs ClusterEnv.auto_detect_unset_distributed_params, the
   function jax.distributed.initialize() calls: it must pick GkeTpuCluster and compute the
   coordinator host and port, process id and process count that jax.env holds. On a single
   slice it asks the metadata server (the simulator) for MEGASCALE_*; TPU_PROCESS_ADDRESSES
   in the environment takes precedence over tpu.env (docs/runtimes.md says why tpumesh does not
   write it), JAX_COORDINATOR_PORT over port 8482: a job whose pod spec sets it for the trainer
   gets it in jax.env too, and detection and jax.env agree again.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, results, tail  # noqa: E402

PSUM = r'''
# --- appended by tests/trainers/test_jax.py: a cross-process psum on CPU ---
import json, os
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((jax.device_count(),), ("i",))
mine = np.full((jax.local_device_count(),), float(jax.process_index() + 1), dtype=np.float32)
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), mine)
f = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=P("i"),
                          out_specs=P()))
total = float(np.asarray(f(x).addressable_data(0))[0])
multihost_utils.sync_global_devices("tpumesh-test-done")
print("RESULT " + json.dumps({"index": jax.process_index(), "count": jax.process_count(),
                              "devices": jax.device_count(), "local": jax.local_device_count(),
                              "sum": total, "coordinator": os.environ["JAX_COORDINATOR_ADDRESS"],
                              "backend": jax.default_backend()}), flush=True)
'''

DETECT = r'''
import json, os
import jax
from jax._src import clusters
from jax._src.clusters import cloud_tpu_cluster
present = [c.__name__ for c in clusters.ClusterEnv._cluster_types
           if not c.opt_in_only_method and c.is_env_present()]
addr, n, pid, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(
    None, None, None, None, None, 30)
print("RESULT " + json.dumps({"present": present, "address": addr, "count": n, "id": pid,
                              "jax": jax.__version__,
                              "port_default": cloud_tpu_cluster.coordinator_port}), flush=True)
'''

# The sh lines that load tpu.env as the README's JAX snippet does (tpu.env only: JAX's detection
# must find its values in what libtpu reads, not in jax.env).
DETECT_ENV = "set -a; . /var/run/tpumesh/tpu.env; set +a\n"


def psum_test(env, py, job):
    head, code = harness.readme_snippet("JAX (`. jax.env`")
    check("README's JAX snippet loads jax.env and tpu.env and passes them to "
          "jax.distributed.initialize", "jax.env" in head and "tpu.env" in head and
          "jax.distributed.initialize(" in code and "JAX_COORDINATOR_ADDRESS" in code, head + code)
    procs = [env.trainer(p, py, head, code + "\n" + PSUM, {"JAX_NUM_CPU_DEVICES": "2"})
             for p in job.pods]
    return procs, lambda outs, took: psum_judge(job, outs, took)


def psum_judge(job, outs, took):
    n = len(job.pods)
    want_sum = float(sum((i + 1) * 2 for i in range(n)))
    problems = []
    for pod, (rc, text) in zip(job.pods, outs):
        jx = pod.env("jax.env")
        r = results(text)
        first = text.splitlines()
        # The README program's own line: "<process_index> <process_count> <device_count>".
        readme_line = "%s %d %d" % (jx.get("JAX_PROCESS_ID"), n, 2 * n)
        if rc != 0 or not r:
            problems.append("%s: exit %s\n%s" % (pod.name, rc, tail(text)))
            continue
        r = r[0]
        want = {"index": int(jx["JAX_PROCESS_ID"]), "count": n, "devices": 2 * n, "local": 2,
                "sum": want_sum, "coordinator": jx["JAX_COORDINATOR_ADDRESS"], "backend": "cpu"}
        if r != want:
            problems.append("%s: got %r, want %r" % (pod.name, r, want))
        if readme_line not in first:
            problems.append("%s: the README program did not print %r" % (pod.name, readme_line))
    check("JAX: %d processes from jax.env + the README snippet: jax.distributed.initialize, "
          "process index/count from jax.env, psum over %d CPU devices = %g (%.1f s)"
          % (n, 2 * n, want_sum, took), not problems, "\n".join(problems[:3]))


def detect_test(env, py, job, label):
    procs = [env.trainer(p, py, DETECT_ENV, DETECT, {"JAX_FORCE_TPU_INIT": "1"}) for p in job.pods]
    return procs, lambda outs, took: detect_judge(job, label, outs, took)


def detect_judge(job, label, outs, took):
    problems = []
    version = None
    for pod, (rc, text) in zip(job.pods, outs):
        r = results(text)
        if rc != 0 or not r:
            problems.append("%s: exit %s\n%s" % (pod.name, rc, tail(text)))
            continue
        r = r[0]
        version = r["jax"]
        jx = pod.env("jax.env")
        got = {"present": r["present"][:1], "address": r["address"], "count": r["count"], "id": r["id"]}
        want = {"present": ["GkeTpuCluster"], "address": jx.get("JAX_COORDINATOR_ADDRESS"),
                "count": int(jx.get("JAX_NUM_PROCESSES", -1)), "id": int(jx.get("JAX_PROCESS_ID", -1))}
        if got != want:
            problems.append("%s (slice %d worker %d): JAX detects %r, jax.env says %r"
                            % (pod.name, pod.slice, pod.worker, got, want))
    check("JAX %s GKE TPU detection on every pod of %s from tpu.env = jax.env (coordinator host "
          "and port, process id, process count) (%.1f s)" % (version, label, took),
          not problems, "\n".join(problems[:4]))


def metadata_asks(env):
    """How often the metadata simulator was asked for the tpu-env attribute."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/_stats" % env.md_port, timeout=10) as r:
        paths = json.loads(r.read()).get("paths", {})
    return sum(v for k, v in paths.items() if k.endswith("/attributes/tpu-env"))


def detect_overrides(env, py, pod):
    """What JAX's detection does with two variables tpu.env never holds (docs/runtimes.md)."""
    jx = pod.env("jax.env")
    host = jx["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[0]
    # Three processes per slice where tpu.env lists two hosts: JAX counts 3 x 2 slices and puts
    # process 3 (worker 1 of slice 1) at 1 + 1 x 3 = 4.
    others = "127.64.0.77:8476,127.64.0.78:8476,127.64.0.79:8476"
    cases = [({"TPU_PROCESS_ADDRESSES": others},
              {"address": host + ":8482", "count": 3 * 2, "id": pod.worker + pod.slice * 3},
              "TPU_PROCESS_ADDRESSES in the pod's environment wins over tpu.env's "
              "TPU_WORKER_HOSTNAMES (its length is the processes per slice: count and id "
              "then differ from jax.env)"),
             ({"JAX_COORDINATOR_PORT": "9123"},
              {"address": host + ":9123", "count": int(jx["JAX_NUM_PROCESSES"]),
               "id": int(jx["JAX_PROCESS_ID"])},
              "JAX_COORDINATOR_PORT replaces the port 8482 (the next job's pods set it in their "
              "spec, so jax.env names it too)")]
    procs = [env.trainer(pod, py, DETECT_ENV, DETECT, dict(extra, JAX_FORCE_TPU_INIT="1"))
             for extra, _, _ in cases]

    def judge(outs, took):
        for (_, want, label), (rc, text) in zip(cases, outs):
            r = results(text)
            got = {k: r[0][k] for k in ("address", "count", "id")} if r else None
            check("JAX's detection: %s" % label, got == want,
                  "got %r, want %r\n%s" % (got, want, tail(text)))
    return procs, judge


def body(env, py):
    one = env.job("jx", 1, 4, "v4-32", "2x2x4")
    multi = env.job("jm", 2, 2, "v4-16", "2x2x2")
    # A pod that sets JAX_COORDINATOR_PORT for its trainer: the sidecar reads it from its
    # own pod, and jax.env names it, as JAX's detection does.
    port = env.job("jp", 2, 2, "v4-16", "2x2x2", {"JAX_COORDINATOR_PORT": "9123"})
    env.start_jobs(one, multi, port)
    check("jp: jax.env names the pod's JAX_COORDINATOR_PORT 9123 on every pod",
          all(p.env("jax.env")["JAX_COORDINATOR_ADDRESS"].endswith(":9123") for p in port.pods),
          [p.read("jax.env") for p in port.pods])
    # Two phases of processes running together (their waits overlap): nothing in the first
    # asks the metadata server, the single slice's detection in the second does.
    asked = metadata_asks(env)
    env.run_together([psum_test(env, py, one), detect_test(env, py, multi, "a 2 x 2 multi-slice job"),
                      detect_overrides(env, py, multi.pods[3])], 240)
    multi_asks = metadata_asks(env) - asked
    env.run_together([detect_test(env, py, one, "a single-slice job (4 pods)"),
                      detect_test(env, py, port, "a 2 x 2 job whose pods set JAX_COORDINATOR_PORT=9123")],
                     240)
    single = metadata_asks(env) - asked - multi_asks
    check("JAX's detection asks the metadata server for tpu-env (MEGASCALE_*) on a single "
          "slice, where tpu.env has no MEGASCALE_*, and never on a multi-slice job",
          single >= len(one.pods) and multi_asks == 0, (single, multi_asks))


if __name__ == "__main__":
    sys.exit(harness.run_file("jax", body))
