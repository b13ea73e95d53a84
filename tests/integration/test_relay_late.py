"""A relay pod that gets its IP last (issue 22): what its subscribers cost the API at that moment.

A 7-pod job with --relay-fanout 2 (rank 0 the root; 1 and 2 follow it; 3, 4 follow 1; 5, 6
follow 2). Pod 1 is Pending without an IP while the others run, so its subscribers 3 and 4 wait:
each lists the relay's selector once, then watches that pod and the coordinator's index (the
simulator shows three watches: the root's and the two waits). Then pod 1 gets its IP and its
sidecar starts. Checked from the simulator's request log (every core-API request with its
selectors):

- 3 and 4 follow pod 1 from the watch event that showed it running: no LIST of the relay's
  selector after the IP (one each before it, which also shows the log is read right);
- they check the coordinator's record and their own against what the API already gave (the
  wait's watch, their own start-up GET): no GET of any pod but pod 1's own start-up GET;
- the waits end (the root's watch is the only one left), 3 and 4 follow pod 1 at depth 2, and
  every sidecar publishes the complete job with pod 1's IP."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meshgrpc import Sidecar, end_session, free_port, sim_session  # noqa: E402
from tap import check, done, scaled, wait  # noqa: E402

N = 7
# Long enough that no subscriber lists its relay again on the timer while pod 1's sidecar starts
# (a relay that does not answer is listed again every --relay-fallback seconds).
FALLBACK = str(int(scaled(20)))
# The relay selector of ranks 3 and 4 (pod 1's index), alone or with the coordinator's.
RELAY1 = re.compile(r"job-completion-index(=1$|=1,| in \(0,1\))")


def ip_of(i):
    return "127.64.0.%d" % (i + 1)


def source(car):
    """(tpumesh_source{source="relay"}, tpumesh_relay_depth), or None while car does not answer."""
    try:
        return (car.metric('tpumesh_source{source="relay"}'), car.metric("tpumesh_relay_depth"))
    except Exception:  # noqa: BLE001
        return None


def complete_with(car, ip):
    try:
        t = json.loads(car.topology_text())
    except (OSError, ValueError):
        return False
    return t["complete"] and t["workers"][1]["ip"] == ip


def main():
    tmp, tok, sim = sim_session("tpumesh-relay-late.")
    cars = {}
    try:
        run(sim, tmp, tok, cars)
    finally:
        end_session(sim, tmp, list(cars.values()))
    return done()


def run(sim, tmp, tok, cars):
    c = sim.client
    port = free_port("127.64.0.1")
    anno = {"tpumesh.dev/expected-workers": str(N)}
    names = ["trainer-%d-abcde" % i for i in range(N)]
    for i in range(N):
        c.make(name=names[i], index=i, ip="" if i == 1 else ip_of(i), annotations=anno)

    def start(i):
        out = os.path.join(tmp, "out-%d" % i)
        os.makedirs(out, exist_ok=True)
        cars[i] = Sidecar(str(i), sim.url, tok, names[i], out, host=ip_of(i), grpc_port=port,
                          extra=["--watch-mode", "relay", "--relay-fanout", "2", "--relay-fallback", FALLBACK,
                                 "--address-mode", "ip"])

    for i in (0, 2, 3, 4, 5, 6):
        start(i)
    check("relay pod 1 Pending: its subscribers 3 and 4 wait for it (logged)",
          wait(lambda: all(cars[i].log_count("is not running with an IP yet") >= 1 for i in (3, 4)), 20),
          [cars[i].lines[-4:] for i in (3, 4)])
    check("waiting: the root's watch and one wait per subscriber of pod 1 (3 watches)",
          wait(lambda: c.stats()["watchesActive"] == 3, 20), c.stats()["watchers"])
    check("meanwhile 2 follows the root, 5 and 6 follow 2",
          wait(lambda: all(source(cars[i]) == (1.0, 1.0 if i == 2 else 2.0) for i in (2, 5, 6)), 20),
          [source(cars[i]) for i in (2, 5, 6)])
    before = c.stats(log=True)["log"]
    found = [x for x in before if x[0] == "list" and RELAY1.search(x[2])]
    check("before the IP: 3 and 4 each listed pod 1's selector once (the request log is read right)",
          len(found) == 2, found)

    c.reset_stats()
    c.set_ip(name=names[1], ip=ip_of(1))
    start(1)
    check("pod 1 runs: every sidecar is ready",
          wait(lambda: all(cars[i].readyz()[0] == 200 for i in range(N)), 30),
          [cars[i].readyz() for i in range(N)])
    check("3 and 4 follow pod 1 (depth 2)", wait(lambda: all(source(cars[i]) == (1.0, 2.0) for i in (3, 4)), 15),
          [source(cars[i]) for i in (3, 4)])
    check("every sidecar publishes the complete job with pod 1's IP",
          wait(lambda: all(complete_with(cars[i], ip_of(1)) for i in range(N)), 10))
    check("the waits ended: only the root watches the API", wait(lambda: c.stats()["watchesActive"] == 1, 10),
          c.stats()["watchers"])
    log = c.stats(log=True)["log"]
    lists = [x for x in log if x[0] == "list" and RELAY1.search(x[2])]
    check("a late relay costs its subscribers no LIST: they follow it from the watch event", not lists, lists)
    own = "/pods/" + names[1]
    gets = [x for x in log if x[0] == "get" and not x[1].endswith(own)]
    check("nor a GET: the coordinator's and their own records are checked against what the API gave",
          not gets, gets)
    check("the request log holds pod 1's own start-up GET (so a GET would have been seen)",
          any(x[0] == "get" and x[1].endswith(own) for x in log), log)


if __name__ == "__main__":
    sys.exit(main())
