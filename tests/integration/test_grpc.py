"""The sidecar's gRPC services (issue 15 part 1), checked with Google's python3-grpcio:
grpc.health.v1.Health Check and Watch (liveness "" and readiness "tpumesh.v1.Topology"),
tpumesh.v1.Topology Get (= topology.json) and Watch (full value first, every change, again after a
reconnect), the VIEW_PODS relay view and its scope check, limits, and a hostile subscriber that
opens a stream with a zero flow-control window and never reads (dropped, server unaffected)."""
import json
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meshgrpc import (H2_PREFACE, NOT_SERVING, SERVING, SERVICE_UNKNOWN, Client, Sidecar,  # noqa: E402
                      end_session, h2_frame, sim_session, snapshot_as_json, topo_pb2, watch_frames)
from tap import check, done, scaled, wait  # noqa: E402

import grpc  # noqa: E402


class Collector:
    """Reads a server stream on a thread into .items."""

    def __init__(self, it):
        self.it, self.items, self.error = it, [], None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            for m in self.it:
                self.items.append(m)
        except grpc.RpcError as e:
            self.error = e

    def cancel(self):
        self.it.cancel()
        self.t.join(5)


def hostile_subscriber(host, port):
    """HTTP/2 by hand: a Topology/Watch whose stream window is 0, then silence."""
    s = socket.create_connection((host, port), timeout=scaled(5))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(H2_PREFACE)
    s.sendall(h2_frame(4, 0, 0, struct.pack(">HI", 4, 0)))  # SETTINGS_INITIAL_WINDOW_SIZE = 0
    s.sendall(watch_frames(host, port, 1, topo_pb2.WatchRequest(subscriber="hostile")))
    return s


def main():
    tmp, tok, sim = sim_session("tpumesh-grpc-test.")
    cars = []
    try:
        run(sim, tmp, tok, cars)
    finally:
        end_session(sim, tmp, cars)
    return done()


def run(sim, tmp, tok, cars):
    c = sim.client
    anno = {"tpumesh.dev/expected-workers": "3"}
    names = ["trainer-%d-abcde" % i for i in range(3)]
    c.make(name=names[0], index=0, annotations=anno)
    c.make(name=names[1], index=1, annotations=anno)
    out = os.path.join(tmp, "a")
    os.mkdir(out)
    a = Sidecar("A", sim.url, tok, names[0], out)
    cars.append(a)
    if not check("sidecar serves gRPC on --grpc-addr (port in the log)", a.grpc_port, "\n".join(a.lines)):
        return
    cl = Client(a.target)

    # Health before the job is complete: alive, not ready.
    check("Health/Check \"\" (liveness) SERVING", wait(lambda: cl.check("") == SERVING), a.lines[-5:])
    check("Health/Check tpumesh.v1.Topology NOT_SERVING while 1 of 3 pods is missing",
          wait(lambda: cl.check("tpumesh.v1.Topology") == NOT_SERVING) and a.readyz()[0] == 503)
    try:
        cl.check("no.such.Service")
        check("Health/Check of an unknown service is NOT_FOUND", False)
    except grpc.RpcError as e:
        check("Health/Check of an unknown service is NOT_FOUND", e.code() == grpc.StatusCode.NOT_FOUND, e)

    hw = Collector(cl.health_watch("tpumesh.v1.Topology"))
    unk = Collector(cl.health_watch("no.such.Service"))
    tw = Collector(cl.watch())
    check("Health/Watch sends the current status first (NOT_SERVING)",
          wait(lambda: len(hw.items) >= 1) and hw.items[0].status == NOT_SERVING, hw.items)
    check("Health/Watch of an unknown service sends SERVICE_UNKNOWN",
          wait(lambda: len(unk.items) >= 1) and unk.items[0].status == SERVICE_UNKNOWN, unk.items)
    check("Topology/Watch sends a full value first (incomplete, 3 slots)",
          wait(lambda: len(tw.items) >= 1) and not tw.items[0].topology.complete
          and len(tw.items[0].topology.workers) == 3, tw.items)

    # The job becomes complete: readiness flips, the watch sees the new generation.
    c.make(name=names[2], index=2, annotations=anno)
    check("Health/Watch: NOT_SERVING -> SERVING when the topology completes",
          wait(lambda: [m.status for m in hw.items] == [NOT_SERVING, SERVING]), hw.items)
    check("Health/Check tpumesh.v1.Topology SERVING == /readyz 200",
          cl.check("tpumesh.v1.Topology") == SERVING and a.readyz()[0] == 200)
    g = cl.get()
    file_json = json.loads(a.topology_text())
    check("Topology/Get returns what topology.json says", snapshot_as_json(g) == file_json,
          (snapshot_as_json(g), file_json))
    check("Topology/Get carries the API resourceVersion", g.resource_version.isdigit(), g.resource_version)
    check("Topology/Watch: the complete topology arrives with a higher generation",
          wait(lambda: tw.items[-1].topology.complete and tw.items[-1].topology.generation == g.generation),
          tw.items[-1] if tw.items else None)
    n_before = len(tw.items)

    # A change: a peer's readiness; one message, the same as the file.
    c.ready(name=names[1], ready=False)
    check("Topology/Watch: a peer's readiness change arrives",
          wait(lambda: len(tw.items) > n_before and not tw.items[-1].topology.workers[1].ready))
    wait(lambda: json.loads(a.topology_text())["generation"] == tw.items[-1].topology.generation)
    check("Topology/Watch: every message equals the topology.json of its generation",
          snapshot_as_json(tw.items[-1].topology) == json.loads(a.topology_text()))
    gens = [m.topology.generation for m in tw.items]
    check("Topology/Watch: generations strictly increase", gens == sorted(set(gens)), gens)

    # Readiness lost: the health watch follows.
    c.delete(name=names[2], grace=0)
    check("Health/Watch: SERVING -> NOT_SERVING when a pod goes away",
          wait(lambda: hw.items[-1].status == NOT_SERVING), hw.items)

    # Reconnect: a new channel gets the full current value first.
    tw.cancel()
    cl2 = Client(a.target)
    tw2 = Collector(cl2.watch())
    check("Topology/Watch after a reconnect: full current value first",
          wait(lambda: len(tw2.items) >= 1)
          and snapshot_as_json(tw2.items[0].topology) == json.loads(a.topology_text()))
    c.make(name="trainer-2-fghij", index=2, annotations=anno)
    check("Topology/Watch after a reconnect: later changes arrive",
          wait(lambda: tw2.items[-1].topology.complete), tw2.items[-1] if tw2.items else None)
    tw2.cancel()

    # VIEW_PODS (the relay protocol): snapshot of the pod records, scope checked.
    sel = "batch.kubernetes.io/job-name=trainer"
    pw = Collector(cl.watch(view=1, namespace="default", selector=sel, subscriber="t"))
    check("Watch VIEW_PODS: a reset snapshot of the 3 pod records, synced",
          wait(lambda: any(m.HasField("pods") and m.pods.reset for m in pw.items))
          and sorted(p.name for p in next(m for m in pw.items if m.HasField("pods")).pods.upserts)
          == sorted([names[0], names[1], "trainer-2-fghij"]) and pw.items[0].synced, pw.items[:2])
    c.set_ip(name=names[1], ip="10.99.0.9")
    check("Watch VIEW_PODS: a change arrives as a delta of one record",
          wait(lambda: any(m.HasField("pods") and not m.pods.reset and len(m.pods.upserts) == 1
                           and m.pods.upserts[0].ip == "10.99.0.9" for m in pw.items)), pw.items[-2:])
    n = len(pw.items)
    check("Watch VIEW_PODS: heartbeats while nothing changes (source age, rv)",
          wait(lambda: len(pw.items) > n + 1, 8) and pw.items[-1].resource_version.isdigit())
    pw.cancel()
    bad = Collector(cl.watch(view=1, namespace="default", selector="app=other"))
    bad.t.join(scaled(5))
    check("Watch VIEW_PODS with another selector: FAILED_PRECONDITION",
          bad.error is not None and bad.error.code() == grpc.StatusCode.FAILED_PRECONDITION, bad.error)

    # Unknown method: UNIMPLEMENTED.
    try:
        cl.channel.unary_unary("/tpumesh.v1.Topology/Nope")(b"", timeout=scaled(5))
        check("unknown method: UNIMPLEMENTED", False)
    except grpc.RpcError as e:
        check("unknown method: UNIMPLEMENTED", e.code() == grpc.StatusCode.UNIMPLEMENTED, e)

    # Hostile subscriber: a zero window and no reading. The server drops it; others unaffected.
    hs = hostile_subscriber(a.host, a.grpc_port)
    ok_watch = Collector(cl.watch())
    for i in range(20):
        c.ready(name=names[0], ready=(i % 2 == 0))
        time.sleep(0.05)
    check("hostile subscriber: dropped for not reading (logged)",
          wait(lambda: a.log_count("dropping subscriber hostile") == 1, 20), a.lines[-5:])
    check("hostile subscriber: a well-behaved watcher kept getting changes",
          wait(lambda: len(ok_watch.items) >= 2) and ok_watch.error is None, len(ok_watch.items))
    check("hostile subscriber: health still answers", cl.check("") == SERVING)
    check("/metrics: tpumesh_grpc_streams_dropped_total 1",
          a.metric("tpumesh_grpc_streams_dropped_total") == 1, a.metric("tpumesh_grpc_streams_dropped_total"))
    ok_watch.cancel()
    hs.close()
    hw.cancel()
    unk.cancel()

    cl.close()
    cl2.close()
    rc = a.stop()
    check("SIGTERM with gRPC streams served: exit 0", rc == 0, rc)


if __name__ == "__main__":
    sys.exit(main())
