"""Relay mode (issue 15 part 2): real sidecars, each bound to its own pod IP in 127.64.0.0/16,
against the kube-apiserver simulator. A 7-pod job with --relay-fanout 2 forms a 3-level tree
(rank 0 watches the API; 1, 2 follow 0; 3, 4 follow 1; 5, 6 follow 2). Checked: every sidecar
publishes what a direct-mode sidecar publishes for the same pods (generation aside), which source
/readyz and /metrics report, changes flowing down two levels, a relay killed (its subscribers fall
back to the API and return when it is back), a relay pod replaced under a new IP (found again by
the one-pod LIST), and a relay that sends an invalid pod name (refused, logged, fallback)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meshgrpc import Sidecar, end_session, free_port, sim_session, topo_pb2  # noqa: E402
from tap import check, done, scaled, wait  # noqa: E402

# --relay-fallback: seconds without a relay's answer before the API is watched instead; a
# relay slowed down by valgrind or ASan gets the same margin as a plain one.
FALLBACK = str(int(scaled(2)))

import grpc  # noqa: E402
from concurrent import futures  # noqa: E402

N = 7
FILES = ("dtensor.env", "tf_config.json", "tpu.env", "jax.env")


def ip_of(i):
    return "127.64.0.%d" % (i + 1)


def files_of(out):
    r = {}
    for f in FILES + ("topology.json",):
        try:
            with open(os.path.join(out, f)) as fh:
                r[f] = fh.read()
        except OSError:
            r[f] = None
    if r["topology.json"]:
        t = json.loads(r["topology.json"])
        t.pop("generation", None)
        r["topology.json"] = t
    return r


class Job:
    def __init__(self, sim, tmp, tok, port):
        self.sim, self.tmp, self.tok, self.port = sim, tmp, tok, port
        self.cars = {}
        self.names = {}

    def start(self, i, name, ip, extra=(), tag=""):
        out = os.path.join(self.tmp, "out-%s%d" % (tag, i))
        os.makedirs(out, exist_ok=True)
        car = Sidecar("%s%d" % (tag, i), self.sim.url, self.tok, name, out, host=ip, grpc_port=self.port,
                      extra=["--watch-mode", "relay", "--relay-fanout", "2", "--relay-fallback", FALLBACK,
                             "--address-mode", "ip"] + list(extra))
        self.cars[i] = car
        return car

def same_as_direct(sim, tmp, tok, car, name, tag):
    """(whether car publishes what direct mode publishes for pod `name`, both sets of files).
    Waited for: a relayed change may reach car a moment after the direct sidecar saw it."""
    out = os.path.join(tmp, "direct-" + tag)
    os.makedirs(out, exist_ok=True)
    d = Sidecar("direct-" + tag, sim.url, tok, name, out,
                extra=["--watch-mode", "direct", "--address-mode", "ip"])
    ok = wait(lambda: d.readyz()[0] == 200, 15)
    ok = ok and wait(lambda: files_of(car.out) == files_of(out), 10)
    pair = (files_of(car.out), files_of(out))
    d.stop()
    return bool(ok), pair


def probe(f, *a):
    """f(*a), or what it raised: for the diagnostics of a check, which are evaluated whether it
    passes or not and must never end the test (a sidecar that does not answer at that moment)."""
    try:
        return f(*a)
    except Exception as e:  # noqa: BLE001
        return "%s: %s" % (type(e).__name__, e)


class EvilRelay:
    """A Topology/Watch server (python3-grpcio) that sends a pod name the API rules refuse."""

    def __init__(self, host, port):
        def watch(req, ctx):
            P = topo_pb2.Pod
            yield topo_pb2.WatchResponse(synced=True, resource_version="5", pods=topo_pb2.PodDelta(
                reset=True, upserts=[
                    P(name="$(touch /tmp/pwned)", ip="127.64.1.1", completion_index=0, pod_index=-1,
                      job_index=-1, job_global_index=-1),
                    P(name="evil-1-abcde", ip="127.64.1.2", completion_index=1, pod_index=-1,
                      job_index=-1, job_global_index=-1)]))
            while ctx.is_active():
                time.sleep(0.5)
                yield topo_pb2.WatchResponse(synced=True, resource_version="5")
        handler = grpc.method_handlers_generic_handler("tpumesh.v1.Topology", {
            "Watch": grpc.unary_stream_rpc_method_handler(
                watch, request_deserializer=topo_pb2.WatchRequest.FromString,
                response_serializer=topo_pb2.WatchResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        if self.server.add_insecure_port("%s:%d" % (host, port)) != port:
            raise RuntimeError("the evil relay cannot listen on %s:%d" % (host, port))
        self.server.start()

    def stop(self):
        self.server.stop(0)


def main():
    tmp, tok, sim = sim_session("tpumesh-relay-test.")
    port = free_port("127.64.0.1")
    job = Job(sim, tmp, tok, port)
    evil = None
    try:
        evil = run(sim, tmp, tok, job)
    finally:
        if evil is not None:
            evil[0].stop()
            evil[1].stop()
        end_session(sim, tmp, list(job.cars.values()))
    return done()


def source(car):
    """(tpumesh_source{source="relay"}, tpumesh_relay_depth), or None while car does not answer."""
    try:
        return (car.metric('tpumesh_source{source="relay"}'), car.metric("tpumesh_relay_depth"))
    except Exception:  # noqa: BLE001
        return None


def run(sim, tmp, tok, job):
    c = sim.client
    anno = {"tpumesh.dev/expected-workers": str(N)}
    for i in range(N):
        job.names[i] = "trainer-%d-abcde" % i
        c.make(name=job.names[i], index=i, ip=ip_of(i), annotations=anno)
    for i in range(N):
        job.start(i, job.names[i], ip_of(i))
    cars = job.cars
    check("relay tree: every sidecar ready", wait(lambda: all(cars[i].readyz()[0] == 200 for i in range(N)), 30),
          [probe(cars[i].readyz) for i in range(N)])
    check("rank 0 watches the API (relay root)", cars[0].log_count("rank 0, the root relay") == 1,
          cars[0].lines[-5:])
    want = {i: (0.0, 0.0) if i == 0 else (1.0, 1.0 if i <= 2 else 2.0) for i in range(N)}
    check("sources: 1-2 follow the root (depth 1), 3-6 a second-level relay (depth 2)",
          wait(lambda: all(source(cars[i]) == want[i] for i in range(N)), 10),
          {i: source(cars[i]) for i in range(N)})
    want5 = "source relay %s:%d depth 2" % (ip_of(2), job.port)
    check("/readyz names the source and its lag",
          wait(lambda: cars[5].readyz()[0] == 200 and want5 in cars[5].readyz()[1], 10), probe(cars[5].readyz))
    check("the API serves one watch: only the root (sim watcher count)",
          wait(lambda: c.state()["watchers"] == 1), probe(c.state))
    # Waited for: a stream a subscriber just replaced may still be counted until its relay sees it end.
    check("relays serve their subscribers (tpumesh_grpc_relay_subscribers 2 on ranks 0-2)",
          wait(lambda: all(cars[i].metric("tpumesh_grpc_relay_subscribers") == 2 for i in range(3)), 10),
          [probe(cars[i].metric, "tpumesh_grpc_relay_subscribers") for i in range(3)])
    for i in (0, 3, 6):
        ok, pair = same_as_direct(sim, tmp, tok, cars[i], job.names[i], "a%d" % i)
        check("rank %d publishes what direct mode publishes (files, topology.json minus generation)" % i,
              ok, pair)

    # A change flows down two levels.
    c.ready(name=job.names[4], ready=False)
    check("a peer's change reaches every level (topology.json ready=false everywhere)",
          wait(lambda: all(json.loads(cars[i].topology_text())["workers"][4]["ready"] is False
                           for i in range(N)), 10))

    # Relay death: 1 is killed; 3 and 4 fall back, then return when 1 is back.
    cars[1].stop(sig=9)
    check("relay killed: its subscribers fall back to the API within --relay-fallback",
          wait(lambda: all(source(cars[i])[0] == 0.0 for i in (3, 4)), 15),
          [source(cars[i]) for i in (3, 4)])
    check("relay killed: the fallback is logged", cars[3].log_count("falling back to the API watch") >= 1)
    c.ready(name=job.names[4], ready=True)
    check("relay killed: fallen-back sidecars still follow changes",
          wait(lambda: all(json.loads(cars[i].topology_text())["workers"][4]["ready"] is True
                           for i in (3, 4)), 10))
    job.start(1, job.names[1], ip_of(1))
    check("relay back: its subscribers return to it",
          wait(lambda: all(source(cars[i]) == (1.0, 2.0) for i in (3, 4)), 20),
          [source(cars[i]) for i in (3, 4)])
    check("relay back: the API watches are closed again (root + none)",
          wait(lambda: c.state()["watchers"] == 1, 10), probe(c.state))

    # Relay restart with a new IP: pod 2 replaced (new name, new IP); 5 and 6 find it.
    cars[2].stop(sig=9)
    c.delete(name=job.names[2], grace=0)
    new_ip = "127.64.0.20"
    job.names[2] = "trainer-2-fghij"
    c.make(name=job.names[2], index=2, ip=new_ip, annotations=anno)
    job.start(2, job.names[2], new_ip)
    check("relay replaced under a new IP: subscribers follow the new pod",
          wait(lambda: all(source(cars[i]) == (1.0, 2.0) for i in (5, 6))
               and all("source relay %s:%d" % (new_ip, job.port) in cars[i].readyz()[1] for i in (5, 6)), 25),
          [probe(cars[i].readyz) for i in (5, 6)])
    check("relay replaced: every sidecar lists the new IP for worker 2",
          wait(lambda: all(json.loads(cars[i].topology_text())["workers"][2]["ip"] == new_ip
                           for i in range(N)), 10))
    ok, pair = same_as_direct(sim, tmp, tok, cars[6], job.names[6], "b6")
    check("after the replacement rank 6 still publishes what direct mode publishes", ok, pair)

    # A relay that sends an invalid name: refused, logged, the subscriber falls back.
    evil_port = free_port("127.64.1.1")
    ev = EvilRelay("127.64.1.1", evil_port)
    eanno = {"tpumesh.dev/expected-workers": "2"}
    c.make(name="evil-0-abcde", index=0, job="evil", ip="127.64.1.1", annotations=eanno)
    c.make(name="evil-1-abcde", index=1, job="evil", ip="127.64.1.2", annotations=eanno)
    out = os.path.join(tmp, "out-evil1")
    os.makedirs(out)
    e1 = Sidecar("evil1", sim.url, tok, "evil-1-abcde", out, host="127.64.1.2", grpc_port=evil_port,
                 extra=["--watch-mode", "relay", "--relay-fanout", "2", "--relay-fallback", FALLBACK,
                        "--address-mode", "ip"])
    check("invalid name from a relay: refused and logged",
          wait(lambda: any("refused" in l and "metadata.name" in l for l in e1.lines), 15), e1.lines[-6:])
    check("invalid name from a relay: falls back to the API and becomes ready",
          wait(lambda: e1.readyz()[0] == 200 and source(e1)[0] == 0.0, 15), probe(e1.readyz))
    t = json.loads(e1.topology_text())
    check("invalid name from a relay: never published", "pwned" not in json.dumps(t)
          and [w["pod"] for w in t["workers"]] == ["evil-0-abcde", "evil-1-abcde"], t)
    check("/metrics counts the refusal", wait(lambda: (e1.metric("tpumesh_relay_refused_total") or 0) >= 1, 5),
          probe(e1.metric, "tpumesh_relay_refused_total"))
    rc = e1.stop()
    check("SIGTERM in relay mode: exit 0", rc == 0 and job.cars[3].stop() == 0, rc)
    return (ev, e1)


if __name__ == "__main__":
    sys.exit(main())
