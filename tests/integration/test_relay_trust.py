"""Relay mode against strangers (issue 22): real sidecars bound to pod IPs in 127.64.0.0/16,
against the kube-apiserver simulator, and hostile relays written with python3-grpcio.

1. Waiting is not failing, and forged relays are never followed: the relay pod (index 0) of job
   "ft" is Pending; two pods at index 0 that carry the job's labels and run a Topology service
   that advertises forged addresses — one without an owner, one owned by another Job — are refused
   and logged; the subscribers neither follow them nor fall back to their own API watch (no LIST
   polling while they wait); when the real relay pod gets its IP and its sidecar starts, they
   follow it and publish the real addresses.
2. A relay of the job that sends a wrong coordinator (index 0 at another IP) is refused: the
   subscriber compares the coordinator's record with the API, logs what differed, falls back and
   publishes the API's address.
3. A 32 MiB message of empty records: refused (the gRPC receive limit follows the job's 2 workers),
   and the subscriber's peak memory grows by at most 16 MiB.
4. Relay slots: a peer whose IP is not a pod of the job gets no VIEW_PODS stream at all; a pod of
   the job gets at most 4.
5. A JobSet: a relay in another slice (another Job) is of the same job through its Job's owner;
   a pod at rank 0 whose Job belongs to another JobSet is refused."""
import json
import os
import sys
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meshgrpc import Sidecar, end_session, free_port, raw_subscribers, sim_session, topo_pb2  # noqa: E402
from tap import check, done, scaled, skip, wait  # noqa: E402

import grpc  # noqa: E402

FALLBACK = str(int(scaled(2)))


class EvilRelay:
    """A Topology/Watch server that sends `first` (a WatchResponse or raw bytes), then heartbeats."""

    def __init__(self, host, port, first):
        self.calls = 0

        def watch(req, ctx):
            self.calls += 1
            yield first
            while ctx.is_active():
                time.sleep(0.5)
                yield topo_pb2.WatchResponse(synced=True, resource_version="5").SerializeToString()
        handler = grpc.method_handlers_generic_handler("tpumesh.v1.Topology", {
            "Watch": grpc.unary_stream_rpc_method_handler(
                watch, request_deserializer=topo_pb2.WatchRequest.FromString,
                response_serializer=lambda b: b if isinstance(b, bytes) else b.SerializeToString())})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                  options=[("grpc.max_send_message_length", 64 << 20)])
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("%s:%d" % (host, port))
        self.server.start()

    def stop(self):
        self.server.stop(0)


def pod(name, ip, index):
    return topo_pb2.Pod(name=name, ip=ip, completion_index=index, pod_index=-1, job_index=-1, job_global_index=-1,
                        hostname=name.rsplit("-", 1)[0], subdomain=name.split("-")[0], ready=True)


def snapshot(pods):
    return topo_pb2.WatchResponse(synced=True, resource_version="5",
                                  pods=topo_pb2.PodDelta(reset=True, upserts=pods))


def files_text(out):
    r = ""
    for f in ("dtensor.env", "jax.env", "tf_config.json", "topology.json"):
        try:
            with open(os.path.join(out, f)) as fh:
                r += fh.read()
        except OSError:
            pass
    return r


def mem_kib(proc, key):
    with open("/proc/%d/status" % proc.pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def main():
    tmp, tok, sim = sim_session("tpumesh-relay-trust.")
    cars, evils, socks = [], [], []
    try:
        run(sim, tmp, tok, cars, evils, socks)
    finally:
        for s in socks:
            s.close()
        for e in evils:
            e.stop()
        end_session(sim, tmp, cars)
    return done()


def run(sim, tmp, tok, cars, evils, socks):
    c = sim.client
    port = free_port("127.64.4.1")

    def car(tag, name, ip, extra=()):
        out = os.path.join(tmp, "out-" + tag)
        os.makedirs(out, exist_ok=True)
        s = Sidecar(tag, sim.url, tok, name, out, host=ip, grpc_port=port,
                    extra=["--watch-mode", "relay", "--relay-fanout", "2", "--relay-fallback", FALLBACK,
                           "--address-mode", "ip"] + list(extra))
        cars.append(s)
        return s

    # 1. Forged relays while the real one is Pending.
    anno = {"tpumesh.dev/expected-workers": "3"}
    c.make(name="ft-0-aaaaa", job="ft", index=0, ip="", annotations=anno)
    c.make(name="ft-1-aaaaa", job="ft", index=1, ip="127.64.4.2", annotations=anno)
    c.make(name="ft-2-aaaaa", job="ft", index=2, ip="127.64.4.3", annotations=anno)
    # a-forged: the job's labels and index 0, no owner; b-forged: owned by another Job.
    c.make(name="a-forged", job="ft", index=0, ip="127.64.4.10", annotations=anno)
    p = next(x for x in c.pods() if x["metadata"]["name"] == "a-forged")
    p["metadata"]["ownerReferences"] = []
    c.update(pod=p)
    c.make(name="b-forged", job="other", index=0, ip="127.64.4.11", annotations=anno,
           labels={"batch.kubernetes.io/job-name": "ft", "job-name": "ft"})
    forged = snapshot([pod("ft-0-aaaaa", "127.64.4.10", 0), pod("ft-1-aaaaa", "127.64.4.10", 1),
                       pod("ft-2-aaaaa", "127.64.4.10", 2)])
    for ip in ("127.64.4.10", "127.64.4.11"):
        evils.append(EvilRelay(ip, port, forged))
    subs = [car("ft1", "ft-1-aaaaa", "127.64.4.2"), car("ft2", "ft-2-aaaaa", "127.64.4.3")]
    check("forged relays: refused and logged (no owner; another owner)",
          wait(lambda: all(s.log_count("not following a pod as relay") >= 1 for s in subs), 15)
          and any("a-forged has no controller owner" in l for s in subs for l in s.lines)
          and any("b-forged is controlled by Job other" in l for s in subs for l in s.lines),
          [l for s in subs for l in s.lines if "relay" in l][-6:])
    check("waiting: the relay pod not running yet is logged",
          wait(lambda: all(s.log_count("is not running with an IP yet") >= 1 for s in subs), 10))
    base = c.stats()["requests"]
    time.sleep(max(3.0, 2 * float(FALLBACK)))
    after = c.stats()["requests"]
    check("waiting is not failing: no fallback to the API watch past --relay-fallback",
          all((s.metric("tpumesh_relay_fallbacks_total") or 0) == 0 for s in subs)
          and all(s.log_count("falling back to the API watch") == 0 for s in subs),
          [s.metric("tpumesh_relay_fallbacks_total") for s in subs])
    check("waiting watches the relay pod: no LIST while it waits",
          after.get("list", 0) == base.get("list", 0), (base, after))
    check("forged relays never followed: never contacted, nothing forged published",
          all(e.calls == 0 for e in evils) and all("127.64.4.10" not in files_text(s.out) for s in subs),
          [e.calls for e in evils])
    c.set_ip(name="ft-0-aaaaa", ip="127.64.4.1")
    # Room for more subscribers than the tree gives it, so that the per-address limit shows.
    root = car("ft0", "ft-0-aaaaa", "127.64.4.1", extra=["--relay-fanout", "16"])
    check("the real relay runs: both subscribers follow it and are ready",
          wait(lambda: all(s.readyz()[0] == 200 and "source relay 127.64.4.1:%d" % port in s.readyz()[1]
                           for s in subs), 20), [s.readyz() for s in subs])
    check("the real relay: files carry the real addresses only",
          all("127.64.4.1:" in files_text(s.out) and "127.64.4.10" not in files_text(s.out) for s in subs))
    check("the real relay: no subscriber ever fell back",
          all((s.metric("tpumesh_relay_fallbacks_total") or 0) == 0 for s in subs))

    # 4. Slots: a stranger's IP gets none; a pod of the job at most 4.
    sel = "batch.kubernetes.io/job-name=ft"
    refused0 = root.metric("tpumesh_grpc_streams_refused_total") or 0
    for _ in range(5):
        socks.append(raw_subscribers("127.64.9.9", "127.64.4.1", port, 14, sel))
    check("foreign IP: 70 relay streams refused, logged, no slot taken",
          wait(lambda: (root.metric("tpumesh_grpc_streams_refused_total") or 0) >= refused0 + 70, 15)
          and root.metric("tpumesh_grpc_relay_subscribers") == 2
          and root.log_count("not the IP of a pod of this job") >= 1,
          (root.metric("tpumesh_grpc_streams_refused_total"), root.metric("tpumesh_grpc_relay_subscribers")))
    socks.append(raw_subscribers("127.64.4.3", "127.64.4.1", port, 6, sel))
    check("a pod of the job: at most 4 relay streams from its address",
          wait(lambda: root.metric("tpumesh_grpc_relay_subscribers") == 6
               and root.log_count("4 streams from that address") >= 1, 10),
          (root.metric("tpumesh_grpc_relay_subscribers"), root.lines[-3:]))
    check("slots: the real subscribers still follow", all(s.readyz()[0] == 200 for s in subs))

    # 2. A relay of the job that sends a wrong coordinator.
    anno2 = {"tpumesh.dev/expected-workers": "3"}
    for i in range(3):
        c.make(name="wc-%d-aaaaa" % i, job="wc", index=i, ip="127.64.5.%d" % (i + 1), annotations=anno2)
    evils.append(EvilRelay("127.64.5.1", port, snapshot([
        pod("wc-0-aaaaa", "127.64.5.99", 0), pod("wc-1-aaaaa", "127.64.5.2", 1), pod("wc-2-aaaaa", "127.64.5.3", 2)])))
    w1 = car("wc1", "wc-1-aaaaa", "127.64.5.2")
    check("wrong coordinator: refused, and the log says what differed",
          wait(lambda: any("differs from the API: IP 127.64.5.99 (relay) vs 127.64.5.1 (API)" in l
                           for l in w1.lines), 15), w1.lines[-6:])
    check("wrong coordinator: falls back and publishes the API's address",
          wait(lambda: w1.readyz()[0] == 200 and "source api" in w1.readyz()[1], 20)
          and "127.64.5.1:" in files_text(w1.out) and "127.64.5.99" not in files_text(w1.out), w1.readyz())
    check("wrong coordinator: counted as refused", (w1.metric("tpumesh_relay_refused_total") or 0) >= 1)

    # 3. A 32 MiB message of empty records.
    anno3 = {"tpumesh.dev/expected-workers": "2"}
    c.make(name="big-0-aaaaa", job="big", index=0, ip="127.64.6.1", annotations=anno3)
    c.make(name="big-1-aaaaa", job="big", index=1, ip="127.64.6.2", annotations=anno3)
    n = (32 << 20) // 2
    delta = b"\x12\x00" * n  # PodDelta.upserts = an empty Pod, n times
    blob = b"\x18\x01" + b"\x12" + _varint(len(delta)) + delta  # synced, pods
    evils.append(EvilRelay("127.64.6.1", port, blob))
    b1 = car("big1", "big-1-aaaaa", "127.64.6.2")
    wait(lambda: b1.log_count("relay: finding the relay") >= 1 or b1.log_count("finding the relay") >= 1, 10)
    hwm0 = mem_kib(b1.proc, "VmHWM")
    check("32 MiB message: refused (the stream ends; the subscriber falls back and is ready)",
          wait(lambda: evils[-1].calls >= 1 and b1.readyz()[0] == 200 and "source api" in b1.readyz()[1], 30),
          (evils[-1].calls, b1.readyz(), b1.lines[-4:]))
    hwm1 = mem_kib(b1.proc, "VmHWM")
    if os.environ.get("ASAN_OPTIONS") or os.environ.get("WRAP"):
        # A sanitizer's own allocator (quarantine, shadow memory) is not the release build's.
        skip("32 MiB message: peak memory grew by at most 16 MiB", "measured on the release build only")
    else:
        check("32 MiB message: peak memory grew by at most 16 MiB (%d KiB)" % (hwm1 - hwm0),
              hwm0 > 0 and hwm1 - hwm0 <= 16 << 10, (hwm0, hwm1))
    t = json.loads(b1.topology_text())
    check("32 MiB message: the published workers are the API's",
          [w["pod"] for w in t["workers"]] == ["big-0-aaaaa", "big-1-aaaaa"], t)

    # 6. A relay that is starting (it has no pods yet: its own relay is Pending) holds the streams
    # that come early and judges their addresses when its pods come: a pod of the job is served
    # without being refused first, a stranger is refused then. Rank 1 of a 4-pod job, fan-out 2.
    anno6 = {"tpumesh.dev/expected-workers": "4"}
    c.make(name="ho-0-aaaaa", job="ho", index=0, ip="", annotations=anno6)
    for i in (1, 2, 3):
        c.make(name="ho-%d-aaaaa" % i, job="ho", index=i, ip="127.64.8.%d" % (i + 1), annotations=anno6)
    h1 = car("ho1", "ho-1-aaaaa", "127.64.8.2", extra=["--relay-fanout", "16"])  # room for 5
    check("starting relay: waits for its own relay (no pods yet)",
          wait(lambda: h1.log_count("is not running with an IP yet") >= 1, 15), h1.lines[-4:])
    hsel = "batch.kubernetes.io/job-name=ho"
    socks.append(raw_subscribers("127.64.8.4", "127.64.8.2", port, 2, hsel))  # rank 3's address
    socks.append(raw_subscribers("127.64.9.8", "127.64.8.2", port, 3, hsel))  # nobody's
    check("starting relay: early streams are held, none refused",
          wait(lambda: h1.metric("tpumesh_grpc_relay_subscribers") == 5, 10)
          and (h1.metric("tpumesh_grpc_streams_refused_total") or 0) == 0,
          (h1.metric("tpumesh_grpc_relay_subscribers"), h1.metric("tpumesh_grpc_streams_refused_total")))
    c.set_ip(name="ho-0-aaaaa", ip="127.64.8.1")
    car("ho0", "ho-0-aaaaa", "127.64.8.1")
    check("starting relay: with its pods, the stranger's 3 streams are refused, the job pod's 2 served",
          wait(lambda: h1.readyz()[0] == 200 and h1.metric("tpumesh_grpc_streams_refused_total") == 3
               and h1.metric("tpumesh_grpc_relay_subscribers") == 2, 20)
          and h1.log_count("refusing a relay stream from 127.64.9.8") >= 1,
          (h1.readyz(), h1.metric("tpumesh_grpc_streams_refused_total"),
           h1.metric("tpumesh_grpc_relay_subscribers")))

    # 5. A JobSet of 2 slices x 2 hosts: each slice is its own Job, so a relay in the other slice
    # is of the same job through its Job's owner (one GET); a pod at rank 0 whose Job belongs to
    # another JobSet is refused.
    c.make_jobset(name="js", replicas=2, completions=2)
    c.make_jobset(name="evil", replicas=1, completions=2)
    for sl in (0, 1):
        c.make_job(jobset="js", rjob="slice", index=sl, completions=2)
    c.make_job(jobset="evil", rjob="slice", index=0, completions=2)
    janno = {"tpumesh.dev/expected-workers": "4"}
    c.make(jobset="evil", slice=0, index=0, slices=2, per_slice=2, ip="127.64.7.20", annotations=janno,
           labels={"jobset.sigs.k8s.io/jobset-name": "js"})
    jcars = {}
    for sl in (0, 1):
        for w in (0, 1):
            r = sl * 2 + w
            name = "js-slice-%d-%d-aaaaa" % (sl, w)
            c.make(name=name, jobset="js", slice=sl, index=w, slices=2, per_slice=2, ip="127.64.7.%d" % (r + 1),
                   annotations=janno)
            jcars[r] = car("js%d" % r, name, "127.64.7.%d" % (r + 1))
    want = {1: "127.64.7.1", 2: "127.64.7.1", 3: "127.64.7.2"}
    check("JobSet: ranks 2 and 3 follow relays in the other slice (same JobSet through their Jobs)",
          wait(lambda: all(jcars[r].readyz()[0] == 200 and "source relay %s:%d" % (want[r], port)
                           in jcars[r].readyz()[1] for r in want), 25),
          {r: jcars[r].readyz() for r in want})
    check("JobSet: a rank-0 pod whose Job belongs to another JobSet is refused and logged",
          any("not to this JobSet" in l for r in (1, 2) for l in jcars[r].lines),
          [l for r in (1, 2) for l in jcars[r].lines if "relay" in l][-4:])
    check("JobSet: every sidecar publishes the 4 real workers",
          all([w["ip"] for w in json.loads(jcars[r].topology_text())["workers"]]
              == ["127.64.7.%d" % (i + 1) for i in range(4)] for r in range(4)))


def _varint(v):
    out = b""
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


if __name__ == "__main__":
    sys.exit(main())
