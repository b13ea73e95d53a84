"""The README's claim "the trainer starts only after its startup probe passed, i.e. with a
complete topology", with real processes.

A 2 x 2 multi-slice JobSet whose pods arrive one by one (slice 1 first, the coordinator's pod
last, one of them first without an IP). For every pod, as the kubelet does: tpumesh-init runs,
then the sidecar starts, and a prober asks its /readyz every second (the chart's startupProbe);
on the first 200 it starts the trainer container: a real JAX process that loads tpu.env and
jax.env as the README's snippet does, first checks the whole file set it sees through `..data`
(dtensor.env, tf_config.json, tpu.env, jax.env, topology.json: every worker present, its own
index the same in all of them, topology complete), then runs the README's
jax.distributed.initialize and a cross-process psum. No trainer may start before the last pod
has its IP; every trainer must see a complete, consistent set and get the global sum.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, results, scaled, tail  # noqa: E402
from test_jax import PSUM  # noqa: E402

CHECK_FILES = r'''
# --- prepended by tests/trainers/test_startup.py: the file set this trainer starts with ---
import json, os, shlex
def _env(text):
    return {k: shlex.split(v)[0] if v else "" for k, v in
            (line.split("=", 1) for line in text.splitlines() if "=" in line)}
_d = os.path.join(os.environ["TPUMESH_DIR"], "..data")
_f = {n: open(os.path.join(_d, n)).read() for n in
      ("dtensor.env", "tf_config.json", "tpu.env", "jax.env", "topology.json")}
_dt, _tpu, _jx = _env(_f["dtensor.env"]), _env(_f["tpu.env"]), _env(_f["jax.env"])
_tf, _topo = json.loads(_f["tf_config.json"]), json.loads(_f["topology.json"])
_n = int(os.environ["EXPECT_WORKERS"])
print("FILESET " + json.dumps({
    "jobs": len(_dt["DTENSOR_JOBS"].split(",")), "tf_workers": len(_tf["cluster"]["worker"]),
    "jax_n": int(_jx["JAX_NUM_PROCESSES"]), "topo_complete": _topo["complete"],
    "topo_workers": len([w for w in _topo["workers"] if w.get("address")]),
    "ids": sorted({int(_dt["DTENSOR_CLIENT_ID"]), int(_jx["JAX_PROCESS_ID"]), _tf["task"]["index"],
                   _topo["clientId"]}),
    "slice_hosts": len(_tpu["TPU_WORKER_HOSTNAMES"].split(","))}), flush=True)
'''


def body(env, py):
    head, code = harness.readme_snippet("JAX (`. jax.env`")
    job = env.job("su", 2, 2, "v4-16", "2x2x2")
    c = env.sim.client
    # Pods arrive one by one, the coordinator's (slice 0 worker 0) last; one has no IP yet.
    order = [job.pods[i] for i in (3, 2, 1, 0)]
    for p in job.pods:
        c.delete(name=p.name)
    started = {}
    lock = threading.Lock()

    def prober(pod):
        # The kubelet: startupProbe every 1 s until 200, then the trainer container starts.
        while pod.car.proc.poll() is None:
            if pod.car.readyz()[0] == 200:
                with lock:
                    started[pod.name] = time.monotonic()
                pod.trainer = env.trainer(
                    pod, py, head, CHECK_FILES + code + "\n" + PSUM,
                    {"JAX_NUM_CPU_DEVICES": "1", "TPUMESH_DIR": pod.out, "EXPECT_WORKERS": "4"})
                return
            time.sleep(1)

    threads = []
    anns = {"tpumesh.dev/expected-workers": "4", "tpumesh.dev/address-mode": "ip"}
    early = None
    for k, pod in enumerate(order):
        if k == len(order) - 1:
            with lock:
                early = dict(started)
            last_made = time.monotonic()
        ip = None if k == 1 else pod.ip
        r = c.make(jobset="su", slice=pod.slice, index=pod.worker, slices=2, per_slice=2,
                   ip=ip or "", annotations=anns)
        pod.name = r["pod"]["metadata"]["name"]
        job.run_init(pod)
        job.start_sidecar(pod, env.token)
        t = threading.Thread(target=prober, args=(pod,), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(2)
        if k == 2:
            c.set_ip(name=order[1].name, ip=order[1].ip)
            time.sleep(2)
    check("no trainer started while the job was incomplete (3 of 4 pods, one of them without "
          "an IP for 4 s, over 8 s)", early == {}, early)
    for t in threads:
        t.join(scaled(60))
    check("every pod's startup probe passed after the last pod arrived, and its trainer started",
          len(started) == 4 and all(t >= last_made for t in started.values()),
          (sorted(started), last_made))
    procs = [p.trainer for p in job.pods if getattr(p, "trainer", None)]
    outs = env.finish(procs, 180)
    problems = []
    for pod, (rc, text) in zip([p for p in job.pods if getattr(p, "trainer", None)], outs):
        fs = results(text.replace("FILESET ", "RESULT "))
        r = [x for x in fs if "sum" in x]
        files = [x for x in fs if "jobs" in x]
        want_files = {"jobs": 4, "tf_workers": 4, "jax_n": 4, "topo_complete": True,
                      "topo_workers": 4, "ids": [pod.index], "slice_hosts": 2}
        if not files or files[0] != want_files:
            problems.append("%s: file set %r, want %r" % (pod.name, files, want_files))
        if rc != 0 or not r or r[0]["sum"] != 10.0 or r[0]["index"] != pod.index:
            problems.append("%s: exit %s %r\n%s" % (pod.name, rc, r, tail(text)))
    check("every trainer started by the probe saw a complete, consistent file set (4 workers "
          "in dtensor.env, tf_config.json, jax.env and topology.json; its own index in all) "
          "and the psum over 4 processes = 10", not problems and len(outs) == 4,
          "\n".join(problems[:4]))


if __name__ == "__main__":
    sys.exit(harness.run_file("jax", body))
