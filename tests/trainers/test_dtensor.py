"""Real DTensor (the pinned tensorflow-cpu of requirements-tf.txt) reads the files tpumesh
published.

For a single-slice job (4 pods) and a 2 x 2 multi-slice JobSet (global, slice-major
DTENSOR_JOBS), every pod runs a TensorFlow process that loads dtensor.env (and tpu.env, and
TF_CONFIG) with the env-loading lines of the README's DTensor snippet (extracted from README.md),
then, as DTensor's own multi-client tests do on CPU: 2 logical CPU devices per client,
initialize_accelerator_system("CPU"), a mesh over every client's devices, and an all-reduce (a
sum over a sharded tensor). Every process must see client id = DTENSOR_CLIENT_ID, num_clients =
the job's size (DTensor counts DTENSOR_JOBS) and the global sum. Each process's gRPC server
listens on its pod IP (podbind.so) at the one port every worker has in DTENSOR_JOBS.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, results, tail  # noqa: E402

PROGRAM = r'''
import json, os
import tensorflow as tf
from tensorflow.experimental import dtensor
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
dtensor.initialize_accelerator_system("CPU")
n = dtensor.num_global_devices("CPU")
mesh = dtensor.create_distributed_mesh([("batch", n)], device_type="CPU")
me = dtensor.client_id()
local = [tf.constant([float(me + 1)]) for _ in range(dtensor.num_local_devices("CPU"))]
x = dtensor.pack(local, dtensor.Layout.batch_sharded(mesh, "batch", rank=1))
total = tf.reduce_sum(x)
got = float(dtensor.unpack(total)[0].numpy())
print("RESULT " + json.dumps({"client_id": me, "num_clients": dtensor.num_clients(),
                              "job_name": dtensor.job_name(), "devices": n,
                              "jobs": dtensor.jobs(), "sum": got}), flush=True)
dtensor.barrier(mesh, "tpumesh-test-done")
'''


def run_jobs(env, py, jobs, head):
    """Both jobs' trainers run at the same time (their startup waits overlap); each job is
    judged on its own."""
    env.run_together([([env.trainer(p, py, head, PROGRAM) for p in job.pods],
                       lambda outs, took, job=job, label=label: judge(job, label, outs, took))
                      for job, label in jobs], 300)


def judge(job, label, outs, took):
    n = len(job.pods)
    want_sum = float(sum((i + 1) * 2 for i in range(n)))
    problems = []
    for pod, (rc, text) in zip(job.pods, outs):
        dt = pod.env("dtensor.env")
        r = results(text)
        if not r:
            problems.append("%s: exit %s\n%s" % (pod.name, rc, tail(text)))
            continue
        r = r[0]
        want = {"client_id": int(dt["DTENSOR_CLIENT_ID"]), "num_clients": n,
                "job_name": dt["DTENSOR_JOB_NAME"], "devices": 2 * n,
                "jobs": dt["DTENSOR_JOBS"].split(","), "sum": want_sum}
        if r != want:
            problems.append("%s: got %r, want %r" % (pod.name, r, want))
        elif r["client_id"] != pod.index or r["jobs"][pod.index] != "%s:10000" % pod.ip:
            problems.append("%s: client %d is not its global index %d at its pod IP %s"
                            % (pod.name, r["client_id"], pod.index, pod.ip))
        if rc != 0:
            problems.append("%s: exit %s after its result\n%s" % (pod.name, rc, tail(text, 8)))
    check("DTensor %s: %d clients from dtensor.env + the README snippet, "
          "initialize_accelerator_system('CPU'), mesh over %d devices, all-reduce = %g (%.1f s)"
          % (label, n, 2 * n, want_sum, took), not problems, "\n".join(problems[:3]))


COUNT = r'''
import json, os
from tensorflow.experimental import dtensor
print("RESULT " + json.dumps({"num_clients": dtensor.num_clients(), "client_id": dtensor.client_id(),
                              "env": os.environ["DTENSOR_NUM_CLIENTS"]}), flush=True)
'''


def num_clients_test(env, py, pod, head):
    """DTensor counts DTENSOR_JOBS; DTENSOR_NUM_CLIENTS (in dtensor.env for people) is not read."""
    (rc, text), = env.finish([env.trainer(pod, py, head + "\nexport DTENSOR_NUM_CLIENTS=99\n", COUNT)], 120)
    r = results(text)
    dt = pod.env("dtensor.env")
    want = {"num_clients": len(dt["DTENSOR_JOBS"].split(",")), "client_id": int(dt["DTENSOR_CLIENT_ID"]),
            "env": "99"}
    check("DTensor's num_clients() is the length of DTENSOR_JOBS; DTENSOR_NUM_CLIENTS (99 here) is "
          "not read", rc == 0 and r and r[0] == want, "%r want %r\n%s" % (r, want, tail(text)))


def body(env, py):
    head, _ = harness.readme_snippet("TensorFlow with DTensor")
    check("README's DTensor snippet loads dtensor.env", "dtensor.env" in head, head)
    one = env.job("dt", 1, 4, "v4-32", "2x2x4")
    multi = env.job("dm", 2, 2, "v4-16", "2x2x2")
    env.start_jobs(one, multi)
    run_jobs(env, py, [(one, "single slice"), (multi, "2 x 2 multi-slice")], head)
    num_clients_test(env, py, multi.pods[2], head)


if __name__ == "__main__":
    sys.exit(harness.run_file("tf", body))
