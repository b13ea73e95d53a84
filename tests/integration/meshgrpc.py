"""An independent gRPC client for tpumesh-sidecar's services: Google's python3-grpcio with
messages generated from proto/ by protoc --python_out (make gen-py). grpc_tools is not a Debian
package, so the methods are called with grpcio's generic channel.unary_unary / unary_stream and
the generated message classes, which is what generated stubs do.

Also a Sidecar process helper shared by the gRPC and relay tests."""
import importlib.util
import os
import re
import signal
import subprocess
import threading
import urllib.error
import urllib.request

import grpc

from tap import scaled, wait  # noqa: F401 - wait is shared with the tests that import it here

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


class Sidecar:
    """One tpumesh-sidecar process; its stderr lines are collected in .lines."""

    def __init__(self, name, sim_url, token_file, pod, out_dir, extra=(), host="127.0.0.1",
                 http_port=0, grpc_port=0, env=None):
        self.name, self.out, self.host = name, out_dir, host
        self.lines = []
        cmd = [SIDECAR, "--apiserver", sim_url, "--token-file", token_file, "--namespace", "default",
               "--pod-name", pod, "--out-dir", out_dir, "--http-addr", "%s:%d" % (host, http_port),
               "--grpc-addr", "%s:%d" % (host, grpc_port), "--stall-timeout", "5"] + list(extra)
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=e)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        m = wait(lambda: next((re.search(r"\(port (\d+)\)", l) for l in self.lines
                               if "serving /healthz" in l), None), 10)
        self.port = int(m.group(1)) if m else None
        m = wait(lambda: next((re.search(r"\(port (\d+)\)", l) for l in self.lines
                               if "grpc: serving" in l), None), 10)
        self.grpc_port = int(m.group(1)) if m else None

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def target(self):
        return "%s:%d" % (self.host, self.grpc_port)

    def http(self, path):
        req = urllib.request.Request("http://%s:%d%s" % (self.host, self.port, path),
                                     headers={"User-Agent": "kube-probe/1.35", "Accept": "*/*"})
        try:
            with urllib.request.urlopen(req, timeout=scaled(5)) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def readyz(self):
        return self.http("/readyz")

    def metric(self, name):
        _, body = self.http("/metrics")
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def topology_text(self):
        with open(os.path.join(self.out, "topology.json")) as f:
            return f.read()

    def log_count(self, text):
        return sum(1 for l in self.lines if text in l)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
