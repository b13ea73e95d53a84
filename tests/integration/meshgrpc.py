"""An independent gRPC client for tpumesh-sidecar's services: Google's python3-grpcio with
messages generated from proto/ by protoc --python_out (make gen-py). grpc_tools is not a Debian
package, so the methods are called with grpcio's generic channel.unary_unary / unary_stream and
the generated message classes, which is what generated stubs do.

Also what the gRPC and relay tests share: a Sidecar process, a simulator session (sim_session /
end_session), and Topology/Watch calls written by hand where grpcio cannot go."""
import importlib.util
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile

import grpc

from tap import scaled, wait  # noqa: F401 - wait is shared with the tests that import it here
from sidecarproc import SidecarProcess  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
SIDECAR = os.path.join(BUILD, "bin/tpumesh-sidecar")
GEN = os.path.join(BUILD, "gen/py")


def _load(name, rel):
    # build/gen/py/grpc/... would shadow grpcio's own "grpc" package: load by path.
    spec = importlib.util.spec_from_file_location(name, os.path.join(GEN, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


health_pb2 = _load("health_pb2", "grpc/health/v1/health_pb2.py")
topo_pb2 = _load("tpumesh_topology_pb2", "tpumesh/v1/topology_pb2.py")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Client:
    def __init__(self, target):
        self.channel = grpc.insecure_channel(target)
        H = health_pb2
        T = topo_pb2
        self._check = self.channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=H.HealthCheckRequest.SerializeToString,
            response_deserializer=H.HealthCheckResponse.FromString)
        self._hwatch = self.channel.unary_stream(
            "/grpc.health.v1.Health/Watch", request_serializer=H.HealthCheckRequest.SerializeToString,
            response_deserializer=H.HealthCheckResponse.FromString)
        self._get = self.channel.unary_unary(
            "/tpumesh.v1.Topology/Get", request_serializer=T.GetRequest.SerializeToString,
            response_deserializer=T.TopologySnapshot.FromString)
        self._twatch = self.channel.unary_stream(
            "/tpumesh.v1.Topology/Watch", request_serializer=T.WatchRequest.SerializeToString,
            response_deserializer=T.WatchResponse.FromString)

    def check(self, service="", timeout=5):
        return self._check(health_pb2.HealthCheckRequest(service=service), timeout=scaled(timeout)).status

    def health_watch(self, service="", timeout=None):
        return self._hwatch(health_pb2.HealthCheckRequest(service=service), timeout=timeout)

    def get(self, timeout=5):
        return self._get(topo_pb2.GetRequest(), timeout=scaled(timeout))

    def watch(self, view=0, namespace="", selector="", subscriber="test", timeout=None):
        return self._twatch(topo_pb2.WatchRequest(view=view, namespace=namespace, selector=selector,
                                                  subscriber=subscriber), timeout=timeout)

    def close(self):
        self.channel.close()


def free_port(host):
    """A TCP port free on host now (a sidecar binds it next)."""
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---- gRPC by hand: what grpcio will not do (choose a source address, a zero window) ----

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    # Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2); names
    # and values here are shorter than 127 bytes.
    n, v = name.encode(), value.encode()
    return bytes([0, len(n)]) + n + bytes([len(v)]) + v


def watch_frames(host, port, sid, request):
    """HEADERS and DATA (END_STREAM) of one Topology/Watch call on stream sid."""
    hdrs = b"".join(hpack_literal(a, b) for a, b in [
        (":method", "POST"), (":scheme", "http"), (":path", "/tpumesh.v1.Topology/Watch"),
        (":authority", "%s:%d" % (host, port)), ("content-type", "application/grpc"), ("te", "trailers")])
    body = request.SerializeToString()
    return h2_frame(1, 4, sid, hdrs) + h2_frame(0, 1, sid, b"\x00" + struct.pack(">I", len(body)) + body)


def raw_subscribers(src, host, port, streams, selector, namespace="default"):
    """HTTP/2 by hand from source address src (grpcio cannot choose one): `streams` VIEW_PODS
    Watch calls on one connection, left open; the caller closes the socket."""
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(scaled(5))
    s.connect((host, port))
    s.sendall(H2_PREFACE + h2_frame(4, 0, 0, b""))
    req = topo_pb2.WatchRequest(view=topo_pb2.VIEW_PODS, namespace=namespace, selector=selector,
                                subscriber="stranger")
    for k in range(streams):
        s.sendall(watch_frames(host, port, 1 + 2 * k, req))
    return s


# ---- a test's simulator and sidecars ----

def sim_session(prefix):
    """(tmp, token file, simulator): a new directory with a token file, and the kube-apiserver
    simulator accepting that token (bookmarks every 2 s)."""
    sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
    from simctl import start_sim
    tmp = tempfile.mkdtemp(prefix=prefix)
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    return tmp, tok, start_sim(["--token-file", tok, "--bookmark-interval", "2"])


def end_session(sim, tmp, cars):
    """Stop the sidecars (their lines printed with VERBOSE set), the simulator, remove tmp."""
    for c in cars:
        c.stop()
    if os.environ.get("VERBOSE"):
        for c in cars:
            print("\n".join("# %s: %s" % (c.name, line) for line in c.lines))
    sim.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def snapshot_as_json(s):
    """A TopologySnapshot in topology.json's shape ("" -> None as the file writes null)."""
    def n(v):
        return v if v != "" else None
    sl = None
    if s.HasField("slice"):
        sl = {"acceleratorType": s.slice.accelerator_type, "topology": s.slice.topology,
              "chips": s.slice.chips, "hosts": s.slice.hosts, "chipsPerHost": s.slice.chips_per_host,
              "coresPerChip": s.slice.cores_per_chip, "devicesPerHost": s.slice.devices_per_host,
              "meshShape": list(s.slice.mesh_shape)}
    out = {"generation": s.generation, "complete": s.complete, "slice": sl}
    if s.HasField("slices"):
        out["slices"] = {"count": s.slices.count, "id": s.slices.id if s.slices.id >= 0 else None,
                         "hostsPerSlice": s.slices.hosts_per_slice}
    out.update({"jobName": n(s.job_name),
            "clientId": s.client_id if s.client_id >= 0 else None, "numClients": s.num_clients,
            "expectedWorkers": s.expected_workers if s.expected_workers >= 0 else None,
            "presentWorkers": s.present_workers, "expectedWorkersSource": n(s.expected_workers_source),
            "coordinator": n(s.coordinator)})
    if s.workers_digest:
        out["workersDigest"] = s.workers_digest
    out["workers"] = [{"index": w.index, "pod": n(w.pod), "host": n(w.host), "ip": n(w.ip),
                         "address": n(w.address), "ready": w.ready} for w in s.workers]
    return out


class Sidecar(SidecarProcess):
    """One tpumesh-sidecar process; its stderr lines are collected in .lines."""

    def __init__(self, name, sim_url, token_file, pod, out_dir, extra=(), host="127.0.0.1",
                 http_port=0, grpc_port=0, env=None):
        self.name, self.out, self.host = name, out_dir, host
        e = dict(os.environ)
        e.update(env or {})
        super().__init__([SIDECAR, "--apiserver", sim_url, "--token-file", token_file, "--namespace", "default",
                          "--pod-name", pod, "--out-dir", out_dir, "--http-addr", "%s:%d" % (host, http_port),
                          "--grpc-addr", "%s:%d" % (host, grpc_port), "--stall-timeout", "5"] + list(extra),
                         env=e)
        self.grpc_port = self.logged_port("grpc: serving")

    @property
    def target(self):
        return "%s:%d" % (self.host, self.grpc_port)

    def topology_text(self):
        with open(os.path.join(self.out, "topology.json")) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM):
        return self.terminate(10, sig)
