#!/usr/bin/python3
"""test_init_tpunode.py - tpumesh-init on the legacy TPU Node path against the simulated
TensorFlow master (tests/sim/tf-master/tf_master_sim.py).

Drives the real binary with `--tpu grpc://127.0.0.1:<port>` and with
KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS: success publishes topology.pb equal to the simulator's bytes
and tf_config.json = a TF_CONFIG whose cluster is TensorFlow's cluster_spec() and which has no
task (read back by tfconfig_check, which parses it as TFConfigClusterResolver does); every failure
exits with its docs/DESIGN.md §6 code
and one clear last log line; deadlines hold. The simulator records every call, which proves the
session is always closed and Reset never sent. Env: ROOT, BUILD, PY (tests/run.sh).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tap  # noqa: E402
import tfconfig_check  # noqa: E402

INIT = os.path.join(BUILD, "bin", "tpumesh-init")
SIM = os.path.join(ROOT, "tests", "sim", "tf-master", "tf_master_sim.py")
GEN_PY = os.path.join(BUILD, "gen", "py")
PY = "/usr/bin/python3"
TMP = tempfile.mkdtemp(prefix="tpumesh-tpunode.")
SIMS = []


class Sim:
    def __init__(self, *args):
        self.record = os.path.join(TMP, f"rec-{len(SIMS)}.jsonl")
        self.proc = subprocess.Popen(
            [PY, SIM, "--gen-py", GEN_PY, "--record", self.record, "--max-seconds", "300",
             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        SIMS.append(self)
        line = self.proc.stdout.readline()  # bounded: the sim prints READY or exits
        if not line.startswith("READY port="):
            self.stop()
            raise RuntimeError(f"simulator did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.strip().split("=", 1)[1])

    def calls(self):
        try:
            with open(self.record) as f:
                return [json.loads(x) for x in f if x.strip()]
        except FileNotFoundError:
            return []

    def methods(self):
        return [c["method"] for c in self.calls()]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sim_topology(*args):
    out = os.path.join(TMP, "expected.pb")
    subprocess.run([PY, SIM, "--gen-py", GEN_PY, "--print-topology", out, *args], check=True,
                   timeout=30)
    with open(out, "rb") as f:
        return f.read()


def run_init(args, env=None, timeout=60):
    out = tempfile.mkdtemp(dir=TMP)
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": TMP}
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([INIT, "--out-dir", out, "--annotations-file", "/dev/null", *args],
                       env=e, capture_output=True, text=True, timeout=timeout)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    return p.returncode, lines, time.monotonic() - t0, out


def tf_config(out):
    """tf_config.json as TFConfigClusterResolver reads it: (cluster, task type), or the error."""
    try:
        jobs, task_type, _, _ = tfconfig_check.parse(read(os.path.join(out, "tf_config.json")))
        return jobs, task_type
    except (OSError, ValueError) as e:
        return str(e), None


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def expect_fail(name, rc, lines, want_rc, needle):
    last = lines[-1] if lines else ""
    tap.check(f"{name}: exit {want_rc}", rc == want_rc, f"rc={rc}\n" + "\n".join(lines[-5:]))
    tap.check(f"{name}: last line says why", "ERROR" in last and needle in last,
              f"last line: {last!r}\nwanted: {needle!r}")


def closed_once(sim, name):
    m = sim.methods()
    tap.check(f"{name}: session closed, never Reset",
              m.count("CreateSession") >= 1 and m.count("CloseSession") == 1 and "Reset" not in m,
              f"calls: {m}")


def test_success():
    sim = Sim("--accelerator-type", "v3-8")
    rc, lines, took, out = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "30"])
    tap.check("grpc success: exit 0", rc == 0, "\n".join(lines[-5:]))
    want = sim_topology("--accelerator-type", "v3-8")
    got = read(os.path.join(out, "topology.pb"), "rb") if rc == 0 else b""
    tap.check("grpc success: topology.pb is exactly the TPU's bytes", got == want,
              f"{got.hex()} != {want.hex()}")
    tf = tf_config(out)
    tap.check("grpc success: tf_config.json is a TF_CONFIG: cluster_spec, no task",
              tf == ({"worker": [f"127.0.0.1:{sim.port}"]}, None), f"{tf}")
    topo = json.loads(read(os.path.join(out, "topology.json"))) if rc == 0 else {}
    tap.check("grpc success: topology.json's slice.meshShape is the TPU's",
              (topo.get("slice") or {}).get("meshShape") == [2, 2, 1, 2], f"{topo.get('slice')}")
    calls = sim.calls()
    tap.check("grpc success: CreateSession, RunStep, CloseSession in order",
              [c["method"] for c in calls] == ["CreateSession", "RunStep", "CloseSession"],
              f"{calls}")
    cs = calls[0] if calls else {}
    tap.check("grpc success: TF client's cluster_def, target and device",
              cs.get("jobs") == json.dumps({"worker": {"0": f"127.0.0.1:{sim.port}"}},
                                           separators=(",", ":"))
              and cs.get("target") == f"grpc://127.0.0.1:{sim.port}"
              and cs.get("device") == "/job:worker/replica:0/task:0/device:TPU_SYSTEM:0",
              f"{cs}")
    tap.check("grpc success: one attr-less ConfigureDistributedTPU node, producer, "
              "allow_soft_placement, operation timeout within --timeout",
              cs.get("nodes") == 1 and cs.get("op") == "ConfigureDistributedTPU"
              and cs.get("attrs") == 0 and cs.get("producer", 0) > 0
              and cs.get("soft_placement") == "true" and 0 < cs.get("op_timeout_ms", 0) <= 30000,
              f"{cs}")
    rs = calls[1] if len(calls) > 1 else {}
    tap.check("grpc success: RunStep fetch, body errors, step timeout within --timeout",
              rs.get("fetch") == "ConfigureDistributedTPU:0" and rs.get("store_errors") == "true"
              and 0 < int(rs.get("timeout_ms", 0)) <= 30000, f"{rs}")
    tap.check("grpc success: progress and result logged",
              any("TPU system initialized" in x for x in lines), "\n".join(lines))
    sim.stop()
    return sim


def test_env_endpoints_multi_host():
    # v3-32: four TPU hosts; the endpoints list is TF's task order, task 0 is
    # the master the client talks to, the others only appear in the cluster_def.
    sim = Sim("--accelerator-type", "v3-32")
    eps = f"grpc://127.0.0.1:{sim.port},grpc://10.0.0.3:8470,10.0.0.4,grpc://10.0.0.5:8470"
    rc, lines, took, out = run_init(["--timeout", "30"],
                                    env={"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": eps})
    tap.check("env endpoints v3-32: exit 0", rc == 0, "\n".join(lines[-5:]))
    want = sim_topology("--accelerator-type", "v3-32")
    got = read(os.path.join(out, "topology.pb"), "rb") if rc == 0 else b""
    tap.check("env endpoints v3-32: topology.pb is the TPU's bytes", got == want)
    tf = tf_config(out)
    tap.check("env endpoints v3-32: TF_CONFIG cluster keeps task order and default port",
              tf == ({"worker": [f"127.0.0.1:{sim.port}", "10.0.0.3:8470", "10.0.0.4:8470",
                                 "10.0.0.5:8470"]}, None), f"{tf}")
    topo = json.loads(read(os.path.join(out, "topology.json"))) if rc == 0 else {}
    sl = topo.get("slice") or {}
    tap.check("env endpoints v3-32: slice known from the TopologyProto alone (type unknown)",
              sl.get("meshShape") == [4, 4, 1, 2] and sl.get("acceleratorType") is None
              and sl.get("hosts") == 4, f"{sl}")
    cs = sim.calls()[0] if sim.calls() else {}
    tap.check("env endpoints v3-32: cluster_def lists all four tasks",
              json.loads(cs.get("jobs", "{}")) == {"worker": {
                  "0": f"127.0.0.1:{sim.port}", "1": "10.0.0.3:8470", "2": "10.0.0.4:8470",
                  "3": "10.0.0.5:8470"}}, f"{cs}")
    sim.stop()


def test_annotation_and_skip_init():
    # The pod annotation tpumesh.dev/tpu (downward API file) names the endpoint; with
    # --skip-init the TPU server is never contacted.
    sim = Sim()
    ann = os.path.join(TMP, "annotations")
    with open(ann, "w") as f:
        f.write(f'tpumesh.dev/tpu="grpc://127.0.0.1:{sim.port}"\n')
    out = tempfile.mkdtemp(dir=TMP)
    p = subprocess.run([INIT, "--out-dir", out, "--annotations-file", ann, "--timeout", "20"],
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": TMP},
                       capture_output=True, text=True, timeout=60)
    tap.check("annotation tpumesh.dev/tpu: exit 0, initialized",
              p.returncode == 0 and sim.methods() == ["CreateSession", "RunStep", "CloseSession"],
              p.stderr[-2000:])
    before = len(sim.methods())
    rc, lines, took, out = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--skip-init"])
    tap.check("--skip-init: exit 0 without contacting the TPU server",
              rc == 0 and len(sim.methods()) == before
              and not os.path.exists(os.path.join(out, "topology.pb")),
              f"rc={rc} calls={sim.methods()}")
    sim.stop()


def test_behind_port_forward():
    # The server believes it is bound to 8470 while we reach it on another port (as through
    # kubectl port-forward): TF's option B is refused, we fall back to option A once.
    sim = Sim("--advertise-port", "8470")
    rc, lines, took, out = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "20"])
    tap.check("behind a port-forward: exit 0 with the TPU's topology",
              rc == 0 and read(os.path.join(out, "topology.pb"), "rb") == sim_topology(),
              "\n".join(lines[-5:]))
    cs = [c for c in sim.calls() if c["method"] == "CreateSession"]
    tap.check("behind a port-forward: option B, then option A on /job:tpu_worker",
              len(cs) == 2 and cs[0]["jobs"] != "{}" and cs[1]["jobs"] == "{}"
              and cs[1]["device"] == "/job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0"
              and cs[1]["target"] == "-", f"{cs}")
    tap.check("behind a port-forward: the fallback is logged",
              any("knows itself by another address" in x for x in lines), "\n".join(lines))
    closed_once(sim, "behind a port-forward")
    sim.stop()


def test_variants_ok():
    # string_val instead of tensor_content; UNAVAILABLE twice then OK (TF's retry); slow step.
    for name, args, extra in (
            ("string_val reply", ["--fail", "string-val"], None),
            ("UNAVAILABLE then OK", ["--fail", "unavailable-first", "--fail-count", "2"],
             lambda s: s.methods().count("CreateSession") == 3),
            ("slow RunStep within the deadline", ["--fail", "slow-run", "--delay", "1.5"],
             None)):
        sim = Sim(*args)
        rc, lines, took, out = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}",
                                         "--timeout", "20"])
        ok = rc == 0 and read(os.path.join(out, "topology.pb"), "rb") == sim_topology()
        tap.check(f"{name}: exit 0 with the TPU's topology", ok, "\n".join(lines[-5:]))
        if extra is not None:
            tap.check(f"{name}: retried", extra(sim), f"{sim.methods()}")
        sim.stop()


FAILURES = [
    # name, sim args, exit code, substring of the last line, session created?
    ("no TPU (no OpKernel)", ["--fail", "no-tpu"], 3,
     "TPUs not found in the cluster. Failed in initialization: No OpKernel", False),
    ("op not registered", ["--fail", "op-not-registered"], 3,
     "TPUs not found in the cluster. Failed in initialization: Op type not registered", False),
    ("RunStep InvalidArgument in body", ["--fail", "run-invalid"], 3,
     "TPUs not found in the cluster. Failed in initialization: No TPU_SYSTEM device", True),
    ("RunStep INTERNAL in body", ["--fail", "run-internal"], 4, "INTERNAL", True),
    ("RunStep gRPC INTERNAL status", ["--fail", "run-grpc-error"], 4,
     "TPU driver connection lost", True),
    ("bad TopologyProto", ["--fail", "bad-topology"], 5, "TopologyProto", True),
    ("unrequested fetch name", ["--fail", "wrong-fetch-name"], 5, "not requested", True),
    ("always UNAVAILABLE", ["--fail", "unavailable"], 4, "UNAVAILABLE", False),
]


def test_failures():
    for name, args, want_rc, needle, session in FAILURES:
        sim = Sim(*args)
        rc, lines, took, out = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}",
                                         "--timeout", "8"])
        expect_fail(name, rc, lines, want_rc, needle)
        tap.check(f"{name}: nothing published", not os.path.exists(
            os.path.join(out, "topology.pb")))
        if session:
            closed_once(sim, name)
        if want_rc == 4 and "UNAVAILABLE" in needle:
            n = sim.methods().count("CreateSession")
            tap.check(f"{name}: retried until the deadline", 7 <= took < 11 and n > 5,
                      f"{took:.2f}s, {n} CreateSession calls")
        sim.stop()


def test_json_log_with_grpc_tracing():
    # gRPC's own log lines (GRPC_VERBOSITY=debug) go through our logger: every stderr line
    # is one JSON object and the last one is our error.
    sim = Sim("--fail", "no-tpu")
    rc, lines, took, _ = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "10",
                                   "--log-format", "json", "--log-level", "debug"],
                                  env={"GRPC_VERBOSITY": "debug"})
    objs = []
    for x in lines:
        try:
            objs.append(json.loads(x))
        except ValueError:
            objs.append(None)
    tap.check("json logs: every line is JSON, gRPC's included",
              objs and None not in objs and any(o["mod"] == "grpc" for o in objs),
              "\n".join(x for x, o in zip(lines, objs) if o is None)[:2000])
    last = objs[-1] if objs and objs[-1] else {}
    tap.check("json logs: the last line is the error, exit 3",
              rc == 3 and last.get("level") == "error" and "TPUs not found" in last.get("msg", ""),
              f"rc={rc} last={last}")
    sim.stop()


def test_deadlines():
    # A server that accepts the connection but never answers CreateSession.
    # 11 s: long enough for the 10 s "still waiting" progress line.
    sim = Sim("--fail", "hang-create")
    rc, lines, took, _ = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "11"])
    expect_fail("CreateSession never answers", rc, lines, 4,
                "did not answer CreateSession within 11 s")
    tap.check("CreateSession never answers: --timeout 11 holds", 10.5 <= took < 15,
              f"{took:.2f}s")
    tap.check("CreateSession never answers: progress line while waiting",
              any("still waiting for MasterService/CreateSession" in x for x in lines),
              "\n".join(lines))
    sim.stop()

    # Several tasks: the hint names the master's wait for every task of the cluster_def.
    sim = Sim("--fail", "hang-create")
    rc, lines, took, _ = run_init(["--timeout", "3"], env={
        "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": f"grpc://127.0.0.1:{sim.port},grpc://10.0.0.9:8470"})
    expect_fail("CreateSession never answers, 2 tasks", rc, lines, 4, "check every endpoint")
    sim.stop()

    # RunStep never answers: deadline, then the session is still closed.
    sim = Sim("--fail", "hang-run")
    rc, lines, took, _ = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "3"])
    expect_fail("RunStep never answers", rc, lines, 4, "RunStep")
    tap.check("RunStep never answers: --timeout 3 holds", 2.5 <= took < 9, f"{took:.2f}s")
    closed_once(sim, "RunStep never answers")
    sim.stop()

    # Slower than RunOptions.timeout_in_ms: the server's own DEADLINE_EXCEEDED body wins.
    sim = Sim("--fail", "slow-run", "--delay", "30")
    rc, lines, took, _ = run_init(["--tpu", f"grpc://127.0.0.1:{sim.port}", "--timeout", "4"])
    expect_fail("step timeout in the body", rc, lines, 4, "DEADLINE_EXCEEDED")
    tap.check("step timeout in the body: bounded", took < 8, f"{took:.2f}s")
    closed_once(sim, "step timeout in the body")
    sim.stop()

    # Nothing listens: unreachable, exit 4 at the deadline.
    port = free_port()
    rc, lines, took, _ = run_init(["--tpu", f"grpc://127.0.0.1:{port}", "--timeout", "2"])
    expect_fail("unreachable server", rc, lines, 4, "unreachable")
    tap.check("unreachable server: --timeout 2 holds", 1.5 <= took < 5, f"{took:.2f}s")


def test_server_boots_late():
    # The TPU server comes up 2 s after tpumesh-init starts: init waits for the channel
    # (TF's fail_fast=false) and succeeds well before its deadline.
    port = free_port()
    out = tempfile.mkdtemp(dir=TMP)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": TMP}
    t0 = time.monotonic()
    p = subprocess.Popen([INIT, "--out-dir", out, "--annotations-file", "/dev/null", "--tpu",
                          f"grpc://127.0.0.1:{port}", "--timeout", "20"], env=env,
                         stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        sim = Sim("--port", str(port))
        _, err = p.communicate(timeout=25)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    took = time.monotonic() - t0
    tap.check("server boots late: exit 0", p.returncode == 0, err)
    tap.check("server boots late: waited, then initialized in time", 2 <= took < tap.scaled(10),
              f"{took:.2f}s")
    tap.check("server boots late: topology.pb written",
              os.path.exists(os.path.join(out, "topology.pb")))
    sim.stop()


class HttpSim:
    """The GCE metadata / Cloud TPU API simulators of tests/sim (READY port=<n> ...)."""

    def __init__(self, script, *args):
        self.proc = subprocess.Popen([PY, os.path.join(ROOT, "tests", "sim", script), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        SIMS.append(self)
        line = self.proc.stdout.readline()
        if not line.startswith("READY port="):
            self.stop()
            raise RuntimeError(f"{script} did not start: {line!r}")
        self.port = int(line.split()[1].split("=", 1)[1])

    stop = Sim.stop


def test_tpu_name_via_api():
    # A TPU name: project/zone/token from the metadata server, the node from the Cloud TPU
    # API (READY, HEALTHY, networkEndpoints -> our TF master), then ConfigureDistributedTPU.
    tf = Sim("--accelerator-type", "v3-8")
    md = HttpSim("gce-metadata/gce_metadata_sim.py", "--project", "p1", "--zone",
                 "us-central1-b", "--token", "tok")
    node = json.dumps({"acceleratorType": "v3-8", "networkEndpoints": [
        {"ipAddress": "127.0.0.1", "port": tf.port}]})
    api = HttpSim("tpu-api/tpu_api_sim.py", "--token", "tok", "--project", "p1", "--zone",
                  "us-central1-b", "--node", f"mytpu={node}")
    rc, lines, took, out = run_init(["--tpu", "mytpu", "--timeout", "30",
                                     "--metadata-host", f"127.0.0.1:{md.port}",
                                     "--tpu-api-endpoint", f"http://127.0.0.1:{api.port}"])
    tap.check("TPU name via the Cloud TPU API: exit 0", rc == 0, "\n".join(lines[-5:]))
    got = read(os.path.join(out, "topology.pb"), "rb") if rc == 0 else b""
    tap.check("TPU name via the Cloud TPU API: topology.pb is the TPU's bytes",
              got == sim_topology("--accelerator-type", "v3-8"))
    spec = tf_config(out)
    tap.check("TPU name via the Cloud TPU API: TF_CONFIG cluster of the node's endpoints",
              spec == ({"worker": [f"127.0.0.1:{tf.port}"]}, None), f"{spec}")
    warns = [x for x in lines if " WARN " in x]
    tap.check("TPU name via the Cloud TPU API: the TPU's topology matches v3-8, no warnings",
              rc == 0 and not warns and any("mesh_shape [2,2,1,2]" in x for x in lines),
              "\n".join(warns or lines))
    tap.check("TPU name via the Cloud TPU API: session opened and closed",
              tf.methods() == ["CreateSession", "RunStep", "CloseSession"], f"{tf.methods()}")
    for s in (tf, md, api):
        s.stop()


def test_one_deadline_for_resolve_and_initialize():
    # --timeout counts once from the start: a node that takes ~3 s to become READY leaves
    # only the rest of --timeout 5 for a TPU server that never answers CreateSession.
    # (Two separate deadlines would take at least 3 + 5 s.)
    tf = Sim("--fail", "hang-create")
    md = HttpSim("gce-metadata/gce_metadata_sim.py", "--project", "p1", "--zone",
                 "us-central1-b", "--token", "tok")
    node = json.dumps({"_ready_after_s": 3, "networkEndpoints": [
        {"ipAddress": "127.0.0.1", "port": tf.port}]})
    api = HttpSim("tpu-api/tpu_api_sim.py", "--token", "tok", "--project", "p1", "--zone",
                  "us-central1-b", "--node", f"slow={node}")
    rc, lines, took, _ = run_init(["--tpu", "slow", "--timeout", "5",
                                   "--metadata-host", f"127.0.0.1:{md.port}",
                                   "--tpu-api-endpoint", f"http://127.0.0.1:{api.port}"])
    expect_fail("READY after 3 s, then a silent TPU server", rc, lines, 4, "CreateSession")
    tap.check("one --timeout covers resolve and initialize together", 4.5 <= took < 7.5,
              f"{took:.2f}s")
    for s in (tf, md, api):
        s.stop()


def test_server_checks_trap():
    # The simulator itself must reject what a real TPU server rejects: a
    # client that names the server's boot job, and the generated stub's method path.
    sys.path.insert(0, GEN_PY)
    import grpc
    from tensorflow.core.protobuf import master_pb2
    sim = Sim()
    ch = grpc.insecure_channel(f"127.0.0.1:{sim.port}")
    req = master_pb2.CreateSessionRequest(target=f"grpc://127.0.0.1:{sim.port}")
    req.graph_def.versions.producer = 1394
    n = req.graph_def.node.add(name="ConfigureDistributedTPU", op="ConfigureDistributedTPU",
                               device="/job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0")
    job = req.config.cluster_def.job.add(name="tpu_worker")
    job.tasks[0] = f"127.0.0.1:{sim.port}"
    call = ch.unary_unary("/tensorflow.MasterService/CreateSession",
                          request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=master_pb2.CreateSessionResponse.FromString)
    try:
        call(req, timeout=5)
        tap.fail("sim rejects a cluster_def naming tpu_worker/0", "accepted")
    except grpc.RpcError as e:
        tap.check("sim rejects a cluster_def naming tpu_worker/0",
                  e.code() == grpc.StatusCode.INVALID_ARGUMENT and "same names" in e.details(),
                  f"{e.code()} {e.details()}")
        md = dict(e.trailing_metadata() or ())
        tap.check("sim: errors carry a GrpcPayloadContainer in grpc-status-details-bin "
                  "(our client ignores it)", md.get("grpc-status-details-bin", b"")[:1] == b"\x0a",
                  f"{md}")
    # Option A (no cluster_def) with /job:worker fails; /job:tpu_worker works.
    req.config.Clear()
    n.device = "/job:worker/replica:0/task:0/device:TPU_SYSTEM:0"
    try:
        call(req, timeout=5)
        tap.fail("sim: option A with /job:worker has no matching device", "accepted")
    except grpc.RpcError as e:
        tap.check("sim: option A with /job:worker has no matching device",
                  "No matching devices found" in e.details(), e.details())
    n.device = "/job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0"
    tap.check("sim: option A with /job:tpu_worker works", bool(call(req, timeout=5).session_handle))
    stub = ch.unary_unary("/tensorflow.grpc.MasterService/CreateSession",
                          request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=master_pb2.CreateSessionResponse.FromString)
    try:
        stub(req, timeout=5)
        tap.fail("sim: generated-stub path is UNIMPLEMENTED", "accepted")
    except grpc.RpcError as e:
        tap.check("sim: generated-stub path is UNIMPLEMENTED",
                  e.code() == grpc.StatusCode.UNIMPLEMENTED, f"{e.code()}")
    ld = ch.unary_unary("/tensorflow.MasterService/ListDevices",
                        request_serializer=lambda m: m.SerializeToString(),
                        response_deserializer=master_pb2.ListDevicesResponse.FromString)
    devs = [d.name for d in ld(master_pb2.ListDevicesRequest(), timeout=5).local_device]
    tap.check("sim: ListDevices shows the tpu_worker job's CPU, 8 TPUs and TPU_SYSTEM",
              "/job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0" in devs
              and sum(":TPU:" in d for d in devs) == 8 and len(devs) == 11, f"{devs}")
    ch.close()
    sim.stop()


def main():
    if not os.access(INIT, os.X_OK) or not os.path.isdir(os.path.join(GEN_PY, "tensorflow")):
        tap.fail("prerequisites", f"need {INIT} and {GEN_PY} (make BUILD=... all gen-py)")
        return tap.done()
    try:
        test_success()
        test_env_endpoints_multi_host()
        test_annotation_and_skip_init()
        test_behind_port_forward()
        test_variants_ok()
        test_failures()
        test_json_log_with_grpc_tracing()
        test_deadlines()
        test_server_boots_late()
        test_tpu_name_via_api()
        test_one_deadline_for_resolve_and_initialize()
        test_server_checks_trap()
    finally:
        for s in SIMS:
            s.stop()
        shutil.rmtree(TMP, ignore_errors=True)
    return tap.done()


if __name__ == "__main__":
    main()
