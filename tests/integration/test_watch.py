"""The sidecar's WebSocket /watch on --http-addr (issue 15 part 3), checked with an independent
client (python3-websocket, the websocket-client library) against the kube-apiserver simulator:
the first message is the published topology.json, each pod change yields a message with the new
generation, --watch-max-clients is enforced with a 503 (Retry-After), upgrades on other paths are
refused, a client that sends a message is closed with 1008, the server answers pings and close
frames, /readyz is unchanged, and SIGTERM closes every client with 1001 before the sidecar exits 0.
Traffic stays on 127.0.0.1.

Env: BUILD (build dir, e.g. build-asan), WRAP (a command the sidecar runs under)."""
import json
import os
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, done, scaled, wait  # noqa: E402
from sidecarproc import SidecarProcess  # noqa: E402

import websocket  # noqa: E402  (python3-websocket)

sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
from simctl import start_sim  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
SIDECAR = os.path.join(BUILD, "bin/tpumesh-sidecar")
WRAP = shlex.split(os.environ.get("WRAP", ""))
MAX = 3
TO = scaled(5)  # seconds a read may wait


class Sidecar(SidecarProcess):
    """One tpumesh-sidecar process (under WRAP when set); its stderr lines are collected in .lines."""

    def __init__(self, name, sim_url, token_file, pod, out_dir, extra=()):
        self.name, self.out = name, out_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("TPUMESH_")}
        super().__init__(WRAP + [SIDECAR, "--apiserver", sim_url, "--token-file", token_file,
                                 "--namespace", "default", "--pod-name", pod, "--out-dir", out_dir,
                                 "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"] + list(extra),
                         env=env, port_timeout=20)

    def stop(self):
        return self.terminate(30)


def topology_file(out):
    with open(os.path.join(out, "topology.json"), "rb") as f:
        return f.read()


def connect(port, path="/watch", timeout=TO):
    return websocket.create_connection("ws://127.0.0.1:%d%s" % (port, path), timeout=timeout)


def recv_json(ws):
    op, data = ws.recv_data()
    return op, json.loads(data)


def close_code(ws, timeout=TO):
    """Read frames until a close frame; its status code (None when the connection ends
    without one)."""
    ws.settimeout(timeout)
    try:
        while True:
            f = ws.recv_frame()
            if f.opcode == websocket.ABNF.OPCODE_CLOSE:
                return struct.unpack(">H", f.data[:2])[0] if len(f.data) >= 2 else 0
    except (websocket.WebSocketException, OSError):
        return None


def raw_upgrade(port, path):
    """A WebSocket handshake by hand; the first bytes of the answer (b"" when the server hangs
    up without one)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TO)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                   % path).encode())
        # A refusal is read to its end (the server closes after it); a 101 keeps the connection
        # open, so its headers are enough. Bounded by the per-read timeout and 3 x TO overall.
        data = b""
        deadline = time.monotonic() + 3 * TO
        while time.monotonic() < deadline:
            if b"\r\n\r\n" in data and data.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"101"]:
                break
            try:
                chunk = s.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def run(sim, tmp, tok, cars):
    c = sim.client
    anno = {"tpumesh.dev/expected-workers": "3"}
    names = ["trainer-%d-abcde" % i for i in range(3)]
    c.make(name=names[0], index=0, annotations=anno)
    c.make(name=names[1], index=1, annotations=anno)
    out = os.path.join(tmp, "a")
    os.mkdir(out)
    a = Sidecar("A", sim.url, tok, names[0], out, extra=["--watch-max-clients", str(MAX)])
    cars.append(a)
    if not check("sidecar serves HTTP (port in the log)", a.port, "\n".join(a.lines)):
        return
    check("the log names /watch among the paths served",
          any("serving" in l and "/watch" in l for l in a.lines), a.lines[:10])
    wait(lambda: os.path.exists(os.path.join(out, "topology.json")), 10)

    # 1. First message = the current topology.json (byte for byte), as one text message.
    w1 = connect(a.port)
    op, first = w1.recv_data()
    disk = topology_file(out)
    check("first message is a text message equal to topology.json on disk (generation %s)"
          % json.loads(disk).get("generation"),
          op == websocket.ABNF.OPCODE_TEXT and first == disk, (first[:200], disk[:200]))
    g0 = json.loads(first)["generation"]
    check("/readyz is still 503 with its reason while 1 of 3 pods is missing",
          a.readyz()[0] == 503 and "missing" in a.readyz()[1], a.readyz())

    # 2. A pod change: a new message with the new generation, equal to the new file.
    c.make(name=names[2], index=2, annotations=anno)
    _, m2 = recv_json(w1)
    check("pod added: a new message with a newer generation (%d -> %d), complete"
          % (g0, m2["generation"]), m2["generation"] > g0 and m2.get("complete") is True, m2)
    check("pod added: /readyz 200", wait(lambda: a.readyz()[0] == 200), a.readyz())
    g1 = m2["generation"]
    c.set_ip(name=names[1], ip="127.64.9.9")
    _, m3 = recv_json(w1)
    check("pod IP changed: a new message (generation %d -> %d) naming the new IP"
          % (g1, m3["generation"]), m3["generation"] > g1 and "127.64.9.9" in json.dumps(m3), m3)
    check("the latest message equals topology.json on disk",
          wait(lambda: json.loads(topology_file(out))["generation"] == m3["generation"])
          and json.loads(topology_file(out)) == m3)

    # 3. A second client joining now gets the current document first.
    w2 = connect(a.port)
    _, f2 = recv_json(w2)
    check("a later client's first message is the current document (generation %d)" % f2["generation"],
          f2 == m3, f2.get("generation"))

    # 4. The cap: MAX clients; one more gets 503 with Retry-After and a reason.
    w3 = connect(a.port)
    recv_json(w3)
    try:
        extra = connect(a.port)
        extra.close()
        check("client %d over --watch-max-clients %d refused" % (MAX + 1, MAX), False, "connected")
    except websocket.WebSocketBadStatusException as e:
        check("client %d over --watch-max-clients %d refused with 503" % (MAX + 1, MAX),
              e.status_code == 503, e)
    raw = raw_upgrade(a.port, "/watch")
    check("the refusal says why and when to retry (Retry-After, body names /watch)",
          re.match(rb"HTTP/1\.[01] 503 ", raw) is not None and b"retry-after: 1" in raw.lower()
          and b"/watch clients" in raw, raw[:300])
    check("/readyz answers 200 with the cap reached", a.readyz()[0] == 200)
    busy = a.metric("tpumesh_watch_busy_total")
    check("tpumesh_watch_clients %s, tpumesh_watch_busy_total %s" % (a.metric("tpumesh_watch_clients"), busy),
          a.metric("tpumesh_watch_clients") == MAX and busy is not None and busy >= 2)

    # 5. Upgrades on other paths are still refused (no 101).
    for path in ("/readyz", "/topology", "/watch/x", "/watch?x=1"):
        r = raw_upgrade(a.port, path)
        check("upgrade on %s refused (no 101)" % path, not r.startswith(b"HTTP/1.1 101"), r[:100])
    st, body = a.http("/watch")
    check("plain GET /watch: 404 saying it is a WebSocket", st == 404 and "WebSocket" in body, (st, body))

    # 6. Close frames: a client's close is answered and frees its slot.
    w3.send_close(websocket.STATUS_NORMAL)
    check("client close (1000) answered with a close frame", close_code(w3) == websocket.STATUS_NORMAL)
    w3.shutdown()
    check("its slot is freed (tpumesh_watch_clients back to %d)" % (MAX - 1),
          wait(lambda: a.metric("tpumesh_watch_clients") == MAX - 1))
    w4 = connect(a.port)
    _, f4 = recv_json(w4)
    check("a new client is admitted after a close", f4["generation"] == m3["generation"])

    # 7. Pings are answered; a client that sends a message is closed with 1008.
    w2.ping("are-you-there")
    w2.settimeout(TO)
    f = w2.recv_frame()
    check("ping answered with a pong carrying the payload",
          f.opcode == websocket.ABNF.OPCODE_PONG and f.data == b"are-you-there", (f.opcode, f.data))
    w2.send("hello")
    check("a client that sends a message is closed with 1008 (policy violation)",
          close_code(w2) == websocket.STATUS_POLICY_VIOLATION)
    w2.shutdown()
    w5 = connect(a.port)
    recv_json(w5)
    w5.send_binary(b"\x00" * 1000000)  # a 1 MB frame
    check("a client that sends a 1 MB frame is closed with 1008",
          close_code(w5) == websocket.STATUS_POLICY_VIOLATION)
    w5.shutdown()
    check("tpumesh_watch_dropped_total counts them (%s)" % a.metric("tpumesh_watch_dropped_total"),
          wait(lambda: a.metric("tpumesh_watch_dropped_total") >= 2))
    check("sidecar still ready", a.readyz()[0] == 200)

    # 8. Bursts are coalesced: a client that does not read during 10 changes then gets the latest.
    gen_before = json.loads(topology_file(out))["generation"]
    for i in range(10):
        c.set_ip(name=names[2], ip="127.64.8.%d" % (10 + i))
    wait(lambda: "127.64.8.19" in topology_file(out).decode(), 10)
    last = json.loads(topology_file(out))
    seen = []
    w4.settimeout(TO)
    while not seen or seen[-1]["generation"] < last["generation"]:
        try:
            seen.append(recv_json(w4)[1])
        except websocket.WebSocketTimeoutException:
            break
    check("after a burst of 10 changes (generation %d -> %d) the client reads %d messages ending "
          "with the latest document" % (gen_before, last["generation"], len(seen)),
          seen and seen[-1] == last and all(x["generation"] > gen_before for x in seen)
          and [x["generation"] for x in seen] == sorted({x["generation"] for x in seen}), seen[-1:] and
          [x["generation"] for x in seen])

    # 9. SIGTERM: every client gets a close frame with 1001, and the sidecar exits 0.
    w1.settimeout(TO)
    while True:  # drain what the burst left for w1
        try:
            if recv_json(w1)[1]["generation"] >= last["generation"]:
                break
        except (websocket.WebSocketException, OSError):
            break
    rc_box = []
    a.proc.send_signal(signal.SIGTERM)
    codes = [close_code(w1), close_code(w4)]
    try:
        rc_box.append(a.proc.wait(timeout=scaled(30)))
    except subprocess.TimeoutExpired:
        rc_box.append(None)
    check("SIGTERM: both clients get a close frame with 1001 (going away): %s" % codes,
          codes == [websocket.STATUS_GOING_AWAY] * 2)
    check("SIGTERM: the sidecar exits 0", rc_box == [0], (rc_box, a.lines[-10:]))
    for w in (w1, w4):
        w.shutdown()


def main():
    tmp = tempfile.mkdtemp(prefix="tpumesh-watch-test.")
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write("t0\n")
    sim = start_sim(["--token-file", tok])
    cars = []
    try:
        run(sim, tmp, tok, cars)
    finally:
        for car in cars:
            car.stop()
            if os.environ.get("VERBOSE"):
                print("\n".join("# %s: %s" % (car.name, l) for l in car.lines))
        sim.stop()
        subprocess.run(["rm", "-rf", tmp])
    return done()


if __name__ == "__main__":
    sys.exit(main())
