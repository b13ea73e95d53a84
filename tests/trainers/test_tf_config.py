"""Real TensorFlow (the pinned tensorflow-cpu of requirements-tf.txt) reads tf_config.json.

1. MultiWorkerMirroredStrategy: every pod of a 2-pod job exports TF_CONFIG from tf_config.json
   with the README's DTensor/TF_CONFIG snippet lines (extracted from README.md), checks that
   TFConfigClusterResolver reports the cluster (every pod's IP at the job's port, in index
   order) and the task (worker, its index) tpumesh meant, builds the strategy and all-reduces a
   value: every worker must get the sum over workers.
2. Legacy TPU Node: tpumesh-init given a TPU as `--tpu grpc://...` (the pod's `tpu` argument)
   and, separately, as KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS (what GKE sets on a TPU Node pod) writes
   tf_config.json; TensorFlow's TPUClusterResolver given the same tpu argument, or the same
   variable, must return that cluster (no TPU is contacted: tpumesh-init runs with --skip-init,
   and the resolver only parses endpoints).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, fail, results, scaled, tail  # noqa: E402

MWMS = r'''
import json, os
import tensorflow as tf
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
cluster = r.cluster_spec().as_dict()
task = [r.task_type, r.task_id]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
mine = float(r.task_id + 1)
def step():
    ctx = tf.distribute.get_replica_context()
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(mine))
total = float(strategy.experimental_local_results(strategy.run(tf.function(step)))[0].numpy())
# A second collective: no worker leaves before every worker has its result.
strategy.run(tf.function(step))
print("RESULT " + json.dumps({"cluster": cluster, "task": task, "sum": total,
                              "replicas": strategy.num_replicas_in_sync}), flush=True)
'''

RESOLVER = r'''
import json, os, sys
import tensorflow as tf
TPUClusterResolver = tf.distribute.cluster_resolver.TPUClusterResolver
tpu = sys.argv[1] if len(sys.argv) > 1 else None
r = TPUClusterResolver(tpu=tpu) if tpu else TPUClusterResolver()
print("RESULT " + json.dumps({"cluster": r.cluster_spec().as_dict(), "master": r.master()}),
      flush=True)
'''


def mwms_test(env, py, job, head):
    env.run_together([([env.trainer(p, py, head, MWMS) for p in job.pods],
                       lambda outs, took: mwms_judge(job, outs, took))], 240)


def mwms_judge(job, outs, took):
    n = len(job.pods)
    want_cluster = {"worker": ["%s:10000" % p.ip for p in job.pods]}
    problems = []
    for pod, (rc, text) in zip(job.pods, outs):
        r = results(text)
        if not r:
            problems.append("%s: exit %s\n%s" % (pod.name, rc, tail(text)))
            continue
        r = r[0]
        mine = json.loads(pod.read("tf_config.json"))
        want = {"cluster": want_cluster, "task": ["worker", pod.index], "sum": float(n * (n + 1) // 2),
                "replicas": n}
        if r != want or mine["cluster"] != want_cluster:
            problems.append("%s: got %r, want %r (tf_config.json %r)" % (pod.name, r, want, mine))
        if rc != 0:
            problems.append("%s: exit %s after its result\n%s" % (pod.name, rc, tail(text, 8)))
    check("TF_CONFIG: TFConfigClusterResolver reports every pod's IP:port in index order and "
          "(worker, own index) on %d pods; MultiWorkerMirroredStrategy all-reduce = %d (%.1f s)"
          % (n, n * (n + 1) // 2, took), not problems, "\n".join(problems[:3]))


def legacy_test(env, py):
    """tpumesh-init's legacy tf_config.json against TPUClusterResolver, both inputs."""
    base = harness.pod_ip_base()
    eps = "grpc://%s.240:8470,grpc://%s.241:8470,grpc://%s.242:8470,grpc://%s.243:8470" % ((base,) * 4)
    pod = harness.Pod(None, 0, 0, 1, base + ".239", "tpunode-client", os.path.join(env.tmp, "tpunode"))
    os.mkdir(pod.out)
    cases = [("the tpu argument (--tpu)", ["--tpu", eps], {}, [eps]),
             ("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", [], {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": eps}, [])]
    for label, args, genv, rargs in cases:
        e = {"PATH": "/usr/bin:/bin"}
        e.update(genv)
        r = subprocess.run([harness.INIT, "--skip-init", "--out-dir", pod.out, "--annotations-file",
                            "/dev/null"] + args, env=e, capture_output=True, text=True, timeout=scaled(60))
        if r.returncode != 0:
            fail("legacy TPU Node via %s: tpumesh-init exit %d" % (label, r.returncode), r.stderr[-800:])
            continue
        published = json.loads(pod.read("tf_config.json"))
        p = subprocess.Popen([py, "-c", RESOLVER] + rargs, env=env.trainer_env(pod, genv),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(timeout=scaled(120))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        got = results(out)
        check("legacy TPU Node via %s: TPUClusterResolver's cluster_spec() is the cluster of "
              "tpumesh-init's tf_config.json (no task)" % label,
              got and got[0]["cluster"] == published.get("cluster") and "task" not in published
              and published["cluster"] == {"worker": [x[len("grpc://"):] for x in eps.split(",")]},
              "published %r\nresolver %r\n%s" % (published, got, tail(out)))


def body(env, py):
    head, _ = harness.readme_snippet("TensorFlow with DTensor")
    check("README's TensorFlow snippet exports TF_CONFIG from tf_config.json",
          'TF_CONFIG="$(cat /var/run/tpumesh/tf_config.json)"' in head, head)
    job = env.job("tc", 1, 2, "v4-16", "2x2x2")
    env.start_jobs(job)
    mwms_test(env, py, job, head)
    legacy_test(env, py)


if __name__ == "__main__":
    sys.exit(harness.run_file("tf", body))
