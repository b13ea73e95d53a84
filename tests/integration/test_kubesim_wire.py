#!/usr/bin/python3
"""Wire-level checks of the kube-apiserver simulator with a raw socket: watch framing (chunk
boundaries mid-event, several events per chunk, newline-terminated compact JSON), Status bodies
byte for byte as the real apiserver writes them, list/watch parameter rules. Prints TAP."""

import base64
import gzip
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim", "kube-apiserver"))

import tap  # noqa: E402
from simctl import SimError, start_sim  # noqa: E402

TOKEN = "wire-token-1"


class Resp:
    def __init__(self):
        self.status = 0
        self.headers = {}
        self.header_list = []
        self.body = b""
        self.chunks = []
        self.terminated = False  # saw the 0-length last chunk
        self.eof = False


def request(port, path, token=TOKEN, headers=None, timeout=10.0, stop_after=None, on_headers=None):
    """Raw HTTP/1.1 GET; returns Resp with the chunk list for chunked bodies. Reads until the body
    ends, the peer closes, `timeout` passes, or stop_after(resp) says so."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        h = "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (path, port)
        if "User-Agent" not in (headers or {}):
            h += "User-Agent: wire-test\r\n"
        if token:
            h += "Authorization: Bearer %s\r\n" % token
        for k, v in (headers or {}).items():
            h += "%s: %s\r\n" % (k, v)
        s.sendall((h + "\r\n").encode())
        deadline = time.time() + timeout
        buf = b""
        r = Resp()

        def fill():
            nonlocal buf
            s.settimeout(max(0.01, deadline - time.time()))
            try:
                d = s.recv(65536)
            except socket.timeout:
                return False
            except OSError:
                d = b""
            if not d:
                r.eof = True
                return False
            buf += d
            return True

        while b"\r\n\r\n" not in buf:
            if not fill():
                return r
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        r.status = int(lines[0].split()[1])
        for ln in lines[1:]:
            k, v = ln.split(":", 1)
            r.headers[k.strip().lower()] = v.strip()
            r.header_list.append(k.strip())
        if on_headers:
            on_headers(r)
        if r.headers.get("transfer-encoding") == "chunked":
            while time.time() < deadline:
                while b"\r\n" not in buf:
                    if not fill():
                        return r
                size_line, rest = buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(rest) < size + 2:
                    buf = size_line + b"\r\n" + rest
                    if not fill():
                        # A partial chunk before EOF: keep what arrived.
                        r.chunks.append(rest[:size])
                        return r
                    size_line, rest = buf.split(b"\r\n", 1)
                if size == 0:
                    r.terminated = True
                    return r
                r.chunks.append(rest[:size])
                buf = rest[size + 2:]
                if stop_after and stop_after(r):
                    return r
            return r
        n = int(r.headers.get("content-length", "0"))
        while len(buf) < n:
            if not fill():
                break
        r.body = buf[:n]
        return r
    finally:
        s.close()


def stream_lines(r):
    data = b"".join(r.chunks)
    return data.split(b"\n")


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def main():
    sim = start_sim(["--token", TOKEN, "--seed", "7", "--bookmark-interval", "0"])
    c = sim.client
    port = sim.port
    try:
        run(sim, c, port)
    finally:
        sim.stop()
    state_dir = tempfile.mkdtemp(prefix="kubesim-wire.")
    token_file = os.path.join(state_dir, "token")
    with open(token_file, "w") as f:
        f.write("file-token-1\n")
    sim = start_sim(["--token-file", token_file, "--anonymous", "--state-dir", state_dir, "--history", "5",
                     "--gzip-min", "4096"])
    try:
        run2(sim, sim.client, sim.port, token_file, state_dir)
    finally:
        sim.stop()
    tap.done()


def run2(sim, c, port, token_file, state_dir):
    """Second instance: token file, anonymous requests, small history, gzip threshold 4 KiB."""
    tok = "file-token-1"
    with open(os.path.join(state_dir, "ready.json")) as f:
        ready = json.load(f)
    tap.check("ready.json matches the READY line", ready["port"] == port and ready["url"] == sim.url
              and ready["ca"] == "-", ready)
    for i in range(6):
        c.make(name="w-%d-aaaaa" % i, index=i)
    r = request(port, "/api/v1/namespaces/default/pods", token=tok)
    tap.check("--token-file: its token is accepted", r.status == 200, r.status)
    with open(token_file + ".new", "w") as f:
        f.write("file-token-2\n")
    os.replace(token_file + ".new", token_file)
    r1 = request(port, "/api/v1/namespaces/default/pods", token=tok)
    r2 = request(port, "/api/v1/namespaces/default/pods", token="file-token-2")
    tap.check("--token-file: rewriting the file rotates the token", r1.status == 401 and r2.status == 200,
              (r1.status, r2.status))
    tok = "file-token-2"
    r = request(port, "/api/v1/namespaces/default/pods", token=None)
    d = json.loads(r.body)
    tap.check("--anonymous: no token is system:anonymous, 403", r.status == 403 and d["message"] ==
              'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in the '
              'namespace "default"', r.body)
    r = request(port, "/version", token=None)
    tap.check("--anonymous: /version is public", r.status == 200 and json.loads(r.body)["gitVersion"].startswith("v1."),
              r.body)

    # gzip on a big list when asked, not otherwise
    r = request(port, "/api/v1/namespaces/default/pods", token=tok, headers={"Accept-Encoding": "gzip"})
    ok = r.headers.get("content-encoding") == "gzip"
    body = gzip.decompress(r.body) if ok else b""
    tap.check("gzip: a list over the threshold is gzipped when asked", ok and len(json.loads(body)["items"]) == 6,
              r.headers)
    r = request(port, "/api/v1/namespaces/default/pods", token=tok)
    tap.check("gzip: not without Accept-Encoding", "content-encoding" not in r.headers and json.loads(r.body)["items"],
              r.headers)

    # Table list for kubectl
    r = request(port, "/api/v1/namespaces/default/pods?limit=2", token=tok,
                headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    d = json.loads(r.body)
    tap.check("Table list: columns, 2 rows with PartialObjectMetadata, continue",
              d["kind"] == "Table" and d["apiVersion"] == "meta.k8s.io/v1" and d["columnDefinitions"][0]["name"] == "Name"
              and [row["cells"][0] for row in d["rows"]] == ["w-0-aaaaa", "w-1-aaaaa"]
              and d["rows"][0]["object"]["kind"] == "PartialObjectMetadata" and d["metadata"].get("continue"),
              r.body[:300])
    pom_list = ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")
    r = request(port, "/api/v1/namespaces/default/pods?limit=2", token=tok, headers={"Accept": pom_list})
    d = json.loads(r.body)
    tap.check("metadata-only list (client-go metadata client Accept)",
              d["kind"] == "PartialObjectMetadataList" and d["apiVersion"] == "meta.k8s.io/v1"
              and [i["kind"] for i in d["items"]] == ["PartialObjectMetadata"] * 2
              and set(d["items"][0]) == {"kind", "apiVersion", "metadata"} and d["metadata"].get("continue"),
              r.body[:200])
    r = request(port, "/api/v1/namespaces/default/pods", token=tok,
                headers={"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"})
    tap.check("PartialObjectMetadata for a list is 406 with the apiserver's message", r.status == 406 and
              json.loads(r.body)["message"] == "you requested PartialObjectMetadata, but the requested object is a "
              "list (*v1.PodList)", r.body)
    r = request(port, "/api/v1/namespaces/default/pods/w-1-aaaaa", token=tok,
                headers={"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"})
    d = json.loads(r.body)
    tap.check("metadata-only get", d["kind"] == "PartialObjectMetadata" and d["metadata"]["name"] == "w-1-aaaaa", r.body[:120])
    r = request(port, "/api/v1/namespaces/default/pods/w-1-aaaaa", token=tok,
                headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    d = json.loads(r.body)
    tap.check("Table get: one row", d["kind"] == "Table" and [row["cells"][0] for row in d["rows"]] == ["w-1-aaaaa"],
              r.body[:120])
    r = request(port, "/api/v1/namespaces/default/pods", token=tok,
                headers={"Accept": "application/vnd.kubernetes.protobuf"})
    tap.check("protobuf only: 406", r.status == 406, r.status)

    # storage 429 (Status with retryAfterSeconds) and the restart window
    c.fail(429, count=1, retry_after=4, kind="status")
    r = request(port, "/api/v1/namespaces/default/pods", token=tok)
    d = json.loads(r.body)
    tap.check("storage 429: Status TooManyRequests, retryAfterSeconds copied to Retry-After",
              r.status == 429 and d["reason"] == "TooManyRequests" and d["details"]["retryAfterSeconds"] == 4
              and r.headers.get("retry-after") == "4", (r.status, r.body, r.headers))
    c.restart(unavailable=1.0)
    r = request(port, "/api/v1/namespaces/default/pods", token=tok)
    d = json.loads(r.body)
    tap.check("restart window: 429 storage is (re)initializing", r.status == 429 and d["message"] ==
              "storage is (re)initializing" and r.headers.get("retry-after") == "1", (r.status, r.body))
    time.sleep(1.1)
    r = request(port, "/api/v1/namespaces/default/pods", token=tok)
    tap.check("after the restart window: 200", r.status == 200, r.status)

    # keep-alive after a watch that ended cleanly; legacy watch path; single-object watch
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        cur = c.state()["rv"]
        hdr = "Host: x\r\nAuthorization: Bearer %s\r\n\r\n" % tok
        s.sendall(("GET /api/v1/watch/namespaces/default/pods/w-2-aaaaa?resourceVersion=%d&timeoutSeconds=1 HTTP/1.1\r\n"
                   % cur + hdr).encode())
        threading.Timer(0.3, lambda: (c.ready(name="w-1-aaaaa", ready=False), c.ready(name="w-2-aaaaa",
                                                                                     ready=False))).start()
        data = b""
        end = time.time() + 5
        while not data.endswith(b"0\r\n\r\n") and time.time() < end:
            data += s.recv(65536)
        tap.check("legacy /api/v1/watch path, single-object watch sees only that pod",
                  data.count(b'"type":"MODIFIED"') == 1 and b'"name":"w-2-aaaaa"' in data, data[-300:])
        s.sendall(("GET /api/v1/namespaces/default/pods/w-0-aaaaa HTTP/1.1\r\n" + hdr).encode())
        more = b""
        end = time.time() + 5
        while b'"name":"w-0-aaaaa"' not in more and time.time() < end:
            d = s.recv(65536)
            if not d:
                break
            more += d
        tap.check("the connection is reused after the watch body ended", more.startswith(b"HTTP/1.1 200"),
                  more[:100])
    finally:
        s.close()

    # a client that closes a quiet watch is noticed (the watch count drops) within ~1 s
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(("GET /api/v1/namespaces/default/pods?watch=1&resourceVersion=%d HTTP/1.1\r\nHost: x\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (c.state()["rv"], tok)).encode())
    s.recv(4096)
    n_before = c.stats()["watchesActive"]
    ws = c.stats()["watchers"]
    tap.check("stats list each active watch (namespace, selectors, bytes)", len(ws) == n_before and any(
        w["namespace"] == "default" and w["labelSelector"] == "" and "bytes" in w for w in ws), ws)
    s.close()
    end = time.time() + 5
    while c.stats()["watchesActive"] >= n_before and time.time() < end:
        time.sleep(0.1)
    tap.check("a closed quiet watch is dropped", c.stats()["watchesActive"] == n_before - 1, c.stats()["watchesActive"])

    # sendInitialEvents=false: no initial events, starts at the most recent RV
    cur = c.state()["rv"]
    t = threading.Timer(0.4, lambda: c.ready(name="w-3-aaaaa", ready=False))
    t.start()
    r = request(port, "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
                "&timeoutSeconds=3", token=tok, timeout=6, stop_after=lambda resp: b"\n" in b"".join(resp.chunks))
    t.join()
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    tap.check("sendInitialEvents=false: only the new change", [(e["type"], e["object"]["metadata"]["resourceVersion"])
                                                               for e in evs] == [("MODIFIED", str(cur + 1))], evs[:1])

    # a watcher that falls behind the bounded history is closed (slow consumer), without an ERROR
    cur = c.state()["rv"]
    c.stall(1.0)
    t = threading.Timer(0.2, lambda: c.churn(events=120, rate=0, wait=True))
    t.start()
    r = request(port, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d&timeoutSeconds=5" % cur, token=tok,
                timeout=8)
    t.join()
    tap.check("watcher behind the history (--history 5) is closed with no events", r.terminated and r.chunks == [],
              (r.terminated, [c_[:60] for c_ in r.chunks]))
    r = request(port, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d" % cur, token=tok, timeout=5)
    tap.check("its re-watch from the same RV gets the in-stream 410", b'"code":410' in b"".join(r.chunks), r.chunks)
    st = c.state()
    tap.check("history stays bounded", st["history"] <= 5 + 64, st)

    # --- watch over WebSocket: one text message per event, bearer token as subprotocol ------------
    def ws_watch(path, proto_token=None, header_token=None, stop_after=1, timeout=6.0):
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        h = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1\r\n" % (path, key))
        if proto_token:
            h += "Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.%s\r\n" % base64.urlsafe_b64encode(
                proto_token.encode()).decode().rstrip("=")
        if header_token:
            h += "Authorization: Bearer %s\r\n" % header_token
        s.sendall((h + "\r\n").encode())
        buf = b""
        end = time.time() + timeout
        while b"\r\n\r\n" not in buf and time.time() < end:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        head, _, buf = buf.partition(b"\r\n\r\n")
        frames = []
        try:
            while len([f for f in frames if f[0] == 1]) < stop_after and time.time() < end:
                while len(buf) < 2 or (buf[1] & 0x7f == 126 and len(buf) < 4) or (buf[1] & 0x7f == 127 and len(buf) < 10):
                    d = s.recv(65536)
                    if not d:
                        raise EOFError
                    buf += d
                op, n, off = buf[0] & 0x0f, buf[1] & 0x7f, 2
                if n == 126:
                    n, off = int.from_bytes(buf[2:4], "big"), 4
                elif n == 127:
                    n, off = int.from_bytes(buf[2:10], "big"), 10
                while len(buf) < off + n:
                    d = s.recv(65536)
                    if not d:
                        raise EOFError
                    buf += d
                frames.append((op, buf[off:off + n]))
                buf = buf[off + n:]
                if op == 8:
                    break
        except (EOFError, socket.timeout):
            pass
        finally:
            s.close()
        want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        return head.decode("latin-1"), frames, want.decode()

    cur = c.state()["rv"]
    t = threading.Timer(0.4, lambda: c.ready(name="w-4-aaaaa", ready=False))
    t.start()
    head, frames, want_accept = ws_watch("/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d" % cur,
                                         proto_token=tok)
    t.join()
    got_accept = re.search(r"Sec-WebSocket-Accept: (\S+)", head)
    tap.check("websocket watch: 101 Switching Protocols with the RFC 6455 accept key",
              head.startswith("HTTP/1.1 101") and got_accept and got_accept.group(1) == want_accept, head)
    texts = [f[1] for f in frames if f[0] == 1]
    tap.check("websocket watch: one text message per event (JSON + newline), token from the subprotocol",
              len(texts) == 1 and texts[0].endswith(b"\n") and json.loads(texts[0])["type"] == "MODIFIED"
              and json.loads(texts[0])["object"]["metadata"]["name"] == "w-4-aaaaa", frames[:2])
    head, frames, _ = ws_watch("/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d" % cur, proto_token="wrong")
    tap.check("websocket watch: a wrong subprotocol token is 401", head.startswith("HTTP/1.1 401"), head[:40])
    head, frames, _ = ws_watch("/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d&timeoutSeconds=1" % c.state()["rv"],
                            header_token=tok, stop_after=1)
    tap.check("websocket watch: timeoutSeconds ends with a close frame (1000)", frames and frames[-1] == (8, b"\x03\xe8"),
              frames)

    # a client that stops reading is closed after slow_consumer_timeout (the cacher's unresponsive watcher)
    c.call("config", slow_consumer_timeout=1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(("GET /api/v1/namespaces/default/pods?watch=1&resourceVersion=%d HTTP/1.1\r\nHost: x\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (c.state()["rv"], tok)).encode())
    time.sleep(0.3)
    n_before = c.stats()["watchesActive"]
    c.churn(events=3000, rate=0, wait=True)
    end = time.time() + 10
    while c.stats()["watchesActive"] >= n_before and time.time() < end:
        time.sleep(0.2)
    tap.check("a watch whose client stopped reading is closed after slow_consumer_timeout",
              c.stats()["watchesActive"] == n_before - 1, c.stats()["watchesActive"])
    s.close()
    c.call("config", slow_consumer_timeout=30)

    # restart with down: connections refused, then the same port serves again with lower RVs
    before = c.state()["rv"]
    c.restart(down=1.5)
    time.sleep(0.4)
    refused = False
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        refused = True
    tap.check("restart down=1.5: connections are refused meanwhile", refused, "connected")
    end = time.time() + 10
    back = None
    while time.time() < end:
        try:
            back = c.state()
            break
        except (SimError, OSError):
            time.sleep(0.1)
    tap.check("restart down: the same port serves again, RVs lower", back is not None and back["rv"] < before,
              (before, back))

    # bulk-create + churn: every change reaches a watcher once, in RV order
    c.call("config", history=100000)
    res = c.bulk_create(2000, start=100, job="bulk")
    names = c.call("pods", names_only=True)["names"]
    tap.check("bulk-create 2000", res["created"] == 2000 and len(names) == 2006
              and c.state()["podsPerNamespace"] == {"default": 2006}, res)
    cur = c.state()["rv"]
    n = 5000
    t = threading.Timer(0.3, lambda: c.churn(events=n, rate=0, kind="mixed", wait=True))
    t.start()
    t0 = time.time()
    seen = [0]

    def enough(resp):
        seen[0] += resp.chunks[-1].count(b"\n")
        return seen[0] >= n and resp.chunks[-1].endswith(b"\n")
    r = request(port, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=%d&timeoutSeconds=60" % cur, token=tok,
                timeout=60, stop_after=enough)
    t.join()
    dt = time.time() - t0
    rvs = [int(json.loads(ln)["object"]["metadata"]["resourceVersion"]) for ln in stream_lines(r) if ln]
    tap.check("churn 5000 (mixed): the watcher gets each change once, RVs consecutive",
              rvs == list(range(cur + 1, cur + n + 1)), (len(rvs), rvs[:3], rvs[-3:]))
    print("# churn of %d events streamed in %.2f s" % (n, dt))
    t0 = time.time()
    c.churn(events=40, rate=100, wait=True)
    dt = time.time() - t0
    tap.check("churn rate is honoured (40 events at 100/s take ~0.4 s)", 0.3 < dt < 2.0, dt)


def run(sim, c, port):
    ns = "wire"
    for i in range(4):
        c.make(namespace=ns, name="trainer-%d-abcde" % i, index=i)
    rv0 = c.state()["rv"]

    # --- 401 byte for byte (identical real captures, Content-Length 129) -----------
    r = request(port, "/api/v1/namespaces/wire/pods", token="wrong")
    want401 = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized",'
               b'"reason":"Unauthorized","code":401}\n')
    tap.check("401 body byte for byte", r.status == 401 and r.body == want401, repr((r.status, r.body)))
    tap.check("401 Content-Length 129", r.headers.get("content-length") == "129", r.headers)
    r = request(port, "/api/v1/namespaces/wire/pods", token=None)
    tap.check("missing token is 401 too", r.status == 401 and r.body == want401, r.status)

    # --- 404 --------------------------------------------------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods/nope")
    want404 = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"nope\\" not found",'
               b'"reason":"NotFound","details":{"name":"nope","kind":"pods"},"code":404}\n')
    tap.check("404 pod body byte for byte", r.status == 404 and r.body == want404, repr(r.body))

    # --- 403 ---------------------------------------------------------
    c.call("forbid", namespace="secret", verbs="list,watch")
    r = request(port, "/api/v1/namespaces/secret/pods")
    want403 = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: '
               b'User \\"system:serviceaccount:default:default\\" cannot list resource \\"pods\\" in API group \\"\\" '
               b'in the namespace \\"secret\\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}\n')
    tap.check("403 list body byte for byte", r.status == 403 and r.body == want403, repr(r.body))
    tap.check("403 has X-Content-Type-Options: nosniff", r.headers.get("x-content-type-options") == "nosniff",
              r.headers)
    r = request(port, "/api/v1/namespaces/secret/pods?watch=true")
    tap.check("403 watch names the watch verb", r.status == 403 and b'cannot watch resource \\"pods\\"' in r.body,
              repr(r.body))
    c.call("forbid", clear=True)

    # --- 429 APF plain text -----------------------------------------------------------
    c.fail(429, count=1, retry_after=3)
    r = request(port, "/api/v1/namespaces/wire/pods")
    tap.check("APF 429 is plain text with Retry-After",
              r.status == 429 and r.body == b"Too many requests, please try again later.\n"
              and r.headers.get("retry-after") == "3"
              and r.headers.get("content-type") == "text/plain; charset=utf-8", repr((r.status, r.body, r.headers)))
    r = request(port, "/api/v1/namespaces/wire/pods")
    tap.check("fault applies to the next N requests only", r.status == 200, r.status)
    c.fail(500, count=1, agent="only-this-agent")
    r1 = request(port, "/api/v1/namespaces/wire/pods")
    r2 = request(port, "/api/v1/namespaces/wire/pods", headers={"User-Agent": "x only-this-agent/1.0"})
    tap.check("fail agent=...: only that User-Agent gets the fault", r1.status == 200 and r2.status == 500,
              (r1.status, r2.status))
    c.fail(429, count=1, kind="shutdown")
    r = request(port, "/api/v1/namespaces/wire/pods")
    tap.check("shutdown 429: plain text, Retry-After 5, Connection: close",
              r.status == 429 and r.body == b"The apiserver is shutting down, please try again later.\n"
              and r.headers.get("retry-after") == "5" and r.headers.get("connection") == "close",
              repr((r.status, r.body, r.headers)))
    c.fail(503, count=1, match="list")
    r = request(port, "/api/v1/namespaces/wire/pods")
    tap.check("503 Status without Retry-After", r.status == 503 and "retry-after" not in r.headers
              and json.loads(r.body)["reason"] == "ServiceUnavailable", repr((r.status, r.body)))

    # --- list shape and headers --------------------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods")
    body = r.body
    tap.check("list key order kind, apiVersion, metadata, items",
              body.startswith(b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"%d"},"items":[{'
                              % rv0), body[:120])
    tap.check("list ends with a newline (json.Encoder)", body.endswith(b"]}\n"), body[-10:])
    d = json.loads(body)
    tap.check("list items carry no kind/apiVersion", all("kind" not in it for it in d["items"]) and len(d["items"]) == 4,
              [list(it) for it in d["items"]][:1])
    tap.check("list body is compact JSON", body.rstrip(b"\n") == compact(d), "not compact")
    tap.check("response headers Audit-Id, Cache-Control and APF UIDs",
              r.headers.get("cache-control") == "no-cache, private" and "audit-id" in r.headers
              and "x-kubernetes-pf-flowschema-uid" in r.headers and "x-kubernetes-pf-prioritylevel-uid" in r.headers,
              r.headers)
    r = request(port, "/api/v1/namespaces/empty/pods")
    tap.check("empty list has items: []", b'"items":[]}' in r.body, r.body)

    # --- pagination token -----------------------------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods?limit=3")
    d = json.loads(r.body)
    tok = d["metadata"].get("continue", "")
    raw = base64.urlsafe_b64decode(tok + "=" * (-len(tok) % 4))
    tap.check("continue token is RawURL base64 (no padding)", "=" not in tok and "+" not in tok and "/" not in tok, tok)
    tap.check("continue token JSON", raw == b'{"v":"meta.k8s.io/v1","rv":%d,"start":"trainer-2-abcde\\u0000"}' % rv0, raw)
    tap.check("remainingItemCount without selectors", d["metadata"].get("remainingItemCount") == 1, d["metadata"])
    c.make(namespace=ns, name="trainer-9-abcde", index=9)
    r2 = request(port, "/api/v1/namespaces/wire/pods?limit=3&continue=" + tok)
    d2 = json.loads(r2.body)
    tap.check("second page keeps the snapshot RV and excludes the later pod",
              d2["metadata"]["resourceVersion"] == str(rv0)
              and [p["metadata"]["name"] for p in d2["items"]] == ["trainer-3-abcde"]
              and "continue" not in d2["metadata"], d2["metadata"])
    r = request(port, "/api/v1/namespaces/wire/pods?limit=1&labelSelector=job-name%3Dtrainer")
    tap.check("remainingItemCount omitted with a selector", "remainingItemCount" not in json.loads(r.body)["metadata"],
              r.body[:200])

    # expired continue token: 410 with the exact message and a rv -1 token
    c.compact()
    r = request(port, "/api/v1/namespaces/wire/pods?limit=3&continue=" + tok)
    msg = ("The provided continue parameter is too old to display a consistent list result. You can start a new list "
           "without the continue parameter, or use the continue token in this response to retrieve the remainder of "
           "the results. Continuing with the provided token results in an inconsistent list - objects that were "
           "created, modified, or deleted between the time the first chunk was returned and now may show up in the "
           "list.")
    d = json.loads(r.body) if r.body else {}
    newtok = d.get("metadata", {}).get("continue", "")
    ok = (r.status == 410 and d.get("message") == msg and d.get("reason") == "Expired" and d.get("code") == 410
          and r.body.startswith(b'{"kind":"Status","apiVersion":"v1","metadata":{"continue":"'))
    tap.check("expired continue token: 410 Expired, exact message", ok, repr(r.body[:400]))
    raw = base64.urlsafe_b64decode(newtok + "=" * (-len(newtok) % 4)) if newtok else b""
    tap.check("expired continue carries a rv -1 token", b'"rv":-1' in raw, raw)
    r = request(port, "/api/v1/namespaces/wire/pods?limit=3&continue=" + newtok)
    names = [p["metadata"]["name"] for p in json.loads(r.body)["items"]]
    tap.check("rv -1 token continues at latest (inconsistent)", r.status == 200 and names == ["trainer-3-abcde",
                                                                                                 "trainer-9-abcde"],
              names)
    r = request(port, "/api/v1/namespaces/wire/pods?limit=3&continue=%21%21junk")
    tap.check("malformed continue is 400", r.status == 400 and b"invalid continue token" in r.body, r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?limit=3&resourceVersion=5&continue=" + newtok)
    tap.check("continue + resourceVersion is 400 with the exact message", r.status == 400 and json.loads(r.body)[
        "message"] == "specifying resource version is not allowed when using continue", r.body)

    # --- list at an exact past RV reconstructs that state ---------------------------------------------
    base = c.state()["rv"]
    old_body = request(port, "/api/v1/namespaces/wire/pods").body
    c.labels(name="trainer-0-abcde", namespace=ns, set="moved=1")
    c.make(namespace=ns, name="trainer-7-abcde", index=7)
    c.delete(name="trainer-9-abcde", namespace=ns)
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=%d&resourceVersionMatch=Exact" % base)
    tap.check("Exact list at an older RV is byte-identical to the list taken then", r.status == 200 and r.body == old_body,
              (r.status, len(r.body), len(old_body)))
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=%d&limit=2" % base)
    d = json.loads(r.body)
    tap.check("RV=N with limit is Exact too", d["metadata"]["resourceVersion"] == str(base)
              and [p["metadata"]["name"] for p in d["items"]] == ["trainer-0-abcde", "trainer-1-abcde"]
              and "moved" not in d["items"][0]["metadata"]["labels"], d["metadata"])
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=%d" % base)
    d = json.loads(r.body)
    tap.check("RV=N without limit is NotOlderThan: the latest state", d["metadata"]["resourceVersion"] == str(base + 3)
              and "trainer-7-abcde" in [p["metadata"]["name"] for p in d["items"]], d["metadata"])
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=0&limit=1")
    d = json.loads(r.body)
    tap.check("RV=0 is Any: served at the latest RV", d["metadata"]["resourceVersion"] == str(base + 3), d["metadata"])

    # --- resourceVersion rules for list -------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=%d&resourceVersionMatch=Exact" % (rv0 - 2))
    want410 = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The resourceVersion for '
               b'the provided list is too old.","reason":"Expired","code":410}\n')
    tap.check("list at a compacted RV: 410 byte for byte", r.status == 410 and r.body == want410, r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersionMatch=Exact")
    want422 = ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is '
               'forbidden unless resourceVersion is provided')
    d = json.loads(r.body)
    tap.check("422 resourceVersionMatch without resourceVersion", r.status == 422 and d["message"] == want422
              and d["reason"] == "Invalid" and d["details"]["kind"] == "ListOptions"
              and d["details"]["group"] == "meta.k8s.io", r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=0&resourceVersionMatch=Exact")
    tap.check("422 Exact with RV 0", r.status == 422 and b'resourceVersionMatch \\"exact\\" is forbidden for '
                                                        b'resourceVersion \\"0\\"' in r.body, r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=abc")
    tap.check("junk RV on list is 400", r.status == 400 and b"invalid resource version" in r.body, r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=abc")
    tap.check("junk RV on watch is 422", r.status == 422, (r.status, r.body))
    r = request(port, "/api/v1/namespaces/wire/pods?sendInitialEvents=true")
    tap.check("sendInitialEvents on list is 422", r.status == 422 and b"sendInitialEvents is forbidden for list" in r.body,
              r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?fieldSelector=spec.bogus%3Dx")
    tap.check("unsupported field label is 400", r.status == 400 and json.loads(r.body)["message"] ==
              "field label not supported: spec.bogus", r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?labelSelector=a%20in%20(")
    tap.check("bad label selector is 400", r.status == 400, (r.status, r.body))
    cur = c.state()["rv"]
    t0 = time.time()
    r = request(port, "/api/v1/namespaces/wire/pods?resourceVersion=%d" % (cur + 1000), timeout=10)
    dt = time.time() - t0
    d = json.loads(r.body) if r.body else {}
    tap.check("RV from the future: 504 Too large after ~3 s with Retry-After: 1",
              r.status == 504 and 2.5 < dt < 6 and r.headers.get("retry-after") == "1"
              and d.get("message") == "Timeout: Too large resource version: %d, current: %d" % (cur + 1000, cur)
              and d["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
              and d["details"]["retryAfterSeconds"] == 1, (r.status, dt, r.body))

    r = request(port, "/api/v1/namespaces/wire/pods/trainer-0-abcde?resourceVersion=%d" % c.state()["rv"])
    tap.check("GET with a known RV answers at once", r.status == 200 and b'"name":"trainer-0-abcde"' in r.body, r.status)

    # --- watch headers first, then events ------------------------------------------------------------
    cur = c.state()["rv"]
    got_head = {}

    def on_headers(resp):
        got_head["t"] = time.time()
    t0 = time.time()
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=2" % cur,
                on_headers=on_headers, timeout=6)
    tap.check("watch: 200, application/json, chunked", r.status == 200 and r.headers.get("content-type") ==
              "application/json" and r.headers.get("transfer-encoding") == "chunked", r.headers)
    tap.check("watch headers are flushed before any event", got_head.get("t", 99) - t0 < 1.0, got_head)
    tap.check("timeoutSeconds ends the body (0-chunk) with no final event",
              r.terminated and r.chunks == [] and 1.5 < time.time() - t0 < 4, (r.terminated, r.chunks))

    # --- boolean parsing of watch ---------------------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods?watch&resourceVersion=%d&timeoutSeconds=1" % cur, timeout=4)
    tap.check("?watch (empty value) is a watch", r.headers.get("transfer-encoding") == "chunked", r.headers)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=False")
    tap.check("watch=False is a list", b'"kind":"PodList"' in r.body, r.body[:80])
    r = request(port, "/api/v1/namespaces/wire/pods?watch=0")
    tap.check("watch=0 is a list", b'"kind":"PodList"' in r.body, r.body[:80])

    # --- several events per chunk (coalesce) ----------------------------------------------------------
    c.call("chunking", mode="coalesce")
    cur = c.state()["rv"]
    def later(fn, delay=0.4):
        t = threading.Timer(delay, fn)
        t.start()
        return t
    t = later(lambda: c.call("batch", ops=[
        {"verb": "ready", "namespace": ns, "name": "trainer-0-abcde", "ready": False},
        {"verb": "ready", "namespace": ns, "name": "trainer-1-abcde", "ready": False},
        {"verb": "labels", "namespace": ns, "name": "trainer-2-abcde", "set": "x=y"}]))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=3" % cur, timeout=6,
                stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 3)
    t.join()
    counts = [ch.count(b"\n") for ch in r.chunks]
    tap.check("several events in one chunk", counts and counts[0] == 3 and r.chunks[0].endswith(b"\n"), counts)
    lines = [ln for ln in stream_lines(r) if ln]
    evs = [json.loads(ln) for ln in lines]
    tap.check("each event is compact JSON on one line", all(ln == compact(json.loads(ln)) for ln in lines),
              lines[:1])
    tap.check("event key order type, object; object kind Pod v1",
              all(ln.startswith(b'{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{')
                  for ln in lines), lines[0][:100] if lines else "")
    tap.check("event RVs increase by one from the watch RV",
              [int(e["object"]["metadata"]["resourceVersion"]) for e in evs] == [cur + 1, cur + 2, cur + 3],
              [e["object"]["metadata"]["resourceVersion"] for e in evs])

    # --- events split across chunks -------------------------------------------------------------------
    c.call("chunking", mode="split", seed=3)
    cur = c.state()["rv"]
    t = later(lambda: c.ready(name="trainer-3-abcde", namespace=ns, ready=False))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=3" % cur, timeout=6,
                stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 1)
    t.join()
    tap.check("one event split over two chunks", len(r.chunks) == 2 and not r.chunks[0].endswith(b"\n")
              and r.chunks[1].endswith(b"\n") and b"\n" not in r.chunks[0], [len(ch) for ch in r.chunks])
    data = b"".join(r.chunks)
    tap.check("the reassembled event parses", json.loads(data)["type"] == "MODIFIED", data[:80])

    # random chunking of many events: framing on newlines gives back every event intact
    c.call("chunking", mode="random", max=700, seed=11)
    cur = c.state()["rv"]
    t = later(lambda: c.call("batch", ops=[{"verb": "labels", "namespace": ns, "name": "trainer-%d-abcde" % (i % 4),
                                            "set": "n=%d" % i} for i in range(20)]))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=3" % cur, timeout=6,
                stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 20)
    t.join()
    lines = [ln for ln in stream_lines(r) if ln]
    mid = sum(1 for ch in r.chunks if not ch.endswith(b"\n"))
    ok = len(lines) == 20 and [json.loads(ln)["object"]["metadata"]["labels"]["n"] for ln in lines] == [
        str(i) for i in range(20)]
    tap.check("random chunking: 20 events intact, in order", ok, len(lines))
    tap.check("random chunking: chunk boundaries fall mid-event", mid >= 5, mid)

    # natural (Go bufio 2048) mode: an event bigger than 2 KiB is written as its own chunk
    c.call("chunking", mode="natural")
    cur = c.state()["rv"]
    t = later(lambda: c.ready(name="trainer-3-abcde", namespace=ns, ready=True))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=3" % cur, timeout=6,
                stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 1)
    t.join()
    tap.check("natural: a >2 KiB event is one chunk ending in newline",
              len(r.chunks) == 1 and len(r.chunks[0]) > 2048 and r.chunks[0].endswith(b"\n"),
              [len(ch) for ch in r.chunks])

    # --- DELETED carries the deletion RV; selector transitions ------------------------------------------
    cur = c.state()["rv"]
    sel = "labelSelector=batch.kubernetes.io%2Fjob-completion-index%3D1"
    t = later(lambda: c.call("batch", ops=[
        {"verb": "labels", "namespace": ns, "name": "trainer-2-abcde", "set": "batch.kubernetes.io/job-completion-index=1"},
        {"verb": "labels", "namespace": ns, "name": "trainer-2-abcde", "set": "batch.kubernetes.io/job-completion-index=2"},
        {"verb": "delete", "namespace": ns, "name": "trainer-1-abcde"}]))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&%s&resourceVersion=%d&timeoutSeconds=3" % (sel, cur),
                timeout=6, stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 3)
    t.join()
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    got = [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"]) for e in evs]
    want = [("ADDED", "trainer-2-abcde", str(cur + 1)), ("DELETED", "trainer-2-abcde", str(cur + 2)),
            ("DELETED", "trainer-1-abcde", str(cur + 3))]
    tap.check("selector transitions ADDED/DELETED and DELETED at the deletion RV", got == want, got)
    tap.check("transition DELETED carries the old object (old labels)",
              len(evs) > 1 and evs[1]["object"]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1",
              evs[1]["object"]["metadata"]["labels"] if len(evs) > 1 else None)

    # --- bookmarks: exact shape; only when asked ------------------------------------------------------------
    cur = c.state()["rv"]
    t = later(lambda: c.call("bookmark"))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&allowWatchBookmarks=true&timeoutSeconds=3"
                % cur, timeout=6, stop_after=lambda resp: b"\n" in b"".join(resp.chunks))
    t.join()
    want_bm = (b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"%d"},'
               b'"spec":{"containers":null},"status":{}}}\n' % cur)
    tap.check("BOOKMARK byte for byte", b"".join(r.chunks) == want_bm, b"".join(r.chunks))
    t = later(lambda: c.call("bookmark"))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=2" % cur, timeout=5)
    t.join()
    tap.check("no bookmark without allowWatchBookmarks", r.chunks == [] and r.terminated, r.chunks)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&allowWatchBookmarks=true&timeoutSeconds=3"
                % cur, timeout=6)
    tap.check("a bookmark ~2 s before the watch deadline", b"".join(r.chunks) == want_bm and r.terminated,
              b"".join(r.chunks))

    # --- streaming list: initial-events-end bookmark ---------------------------------------------
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                "&allowWatchBookmarks=true&resourceVersion=&timeoutSeconds=3", timeout=6,
                stop_after=lambda resp: b"initial-events-end" in b"".join(resp.chunks))
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    npods = len(c.pods(namespace=ns))
    tap.check("sendInitialEvents: ADDED per pod then the initial-events-end bookmark",
              [e["type"] for e in evs] == ["ADDED"] * npods + ["BOOKMARK"]
              and evs[-1]["object"]["metadata"].get("annotations") == {"k8s.io/initial-events-end": "true"}
              and evs[-1]["object"]["metadata"]["resourceVersion"] == str(c.state()["rv"]), [e["type"] for e in evs])
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true")
    tap.check("sendInitialEvents without NotOlderThan is 422", r.status == 422 and b"sendInitialEvents requires setting "
              b"resourceVersionMatch to NotOlderThan" in r.body, r.body)

    c.call("config", watchlist=False)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                "&allowWatchBookmarks=true")
    tap.check("WatchList gate off: sendInitialEvents is 422", r.status == 422 and b"sendInitialEvents is forbidden for "
              b"watch unless the WatchList feature gate is enabled" in r.body, r.body)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=1", timeout=5)
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    tap.check("WatchList gate off: an RV-unset watch has no initial-events-end bookmark",
              evs and all(e["type"] == "ADDED" for e in evs), [e["type"] for e in evs])
    c.call("config", watchlist=True)

    # --- too-old RV: 200 + one ERROR 410 + end ------------------------------------------------
    c.compact()
    comp = c.state()["compacted"]
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % (comp - 3), timeout=5)
    want_err = (b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                b'"message":"too old resource version: %d (%d)","reason":"Expired","code":410}}\n' % (comp - 3, comp))
    tap.check("too-old watch RV: 200 + ERROR 410 byte for byte + end",
              r.status == 200 and b"".join(r.chunks) == want_err and r.terminated, (r.status, b"".join(r.chunks)))
    c.call("config", expired_watch="http410")
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % (comp - 3), timeout=5)
    tap.check("expired_watch=http410: HTTP 410 at watch start", r.status == 410 and json.loads(r.body)["code"] == 410,
              (r.status, r.body))
    c.call("config", expired_watch="event")

    # --- watch from a future RV ------------------------------------------------------------------------
    cur = c.state()["rv"]
    t0 = time.time()
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % (cur + 50), timeout=8)
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    tap.check("future RV watch: ERROR 504 Too large after ~3 s, then the end",
              len(evs) == 1 and evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 504
              and evs[0]["object"]["message"] == "Timeout: Too large resource version: %d, current: %d" % (cur + 50, cur)
              and r.terminated and 2.5 < time.time() - t0 < 6, (evs, time.time() - t0))
    c.call("config", future_watch="wait")
    t = later(lambda: [c.labels(name="trainer-3-abcde", namespace=ns, set="f=%d" % i) for i in range(3)], 0.5)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=4" % (cur + 2),
                timeout=8, stop_after=lambda resp: b"\n" in b"".join(resp.chunks))
    t.join()
    evs = [json.loads(ln) for ln in stream_lines(r) if ln]
    tap.check("future_watch=wait: the watch starts once the RV exists (only changes after it)",
              [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in evs] == [("MODIFIED", str(cur + 3))],
              [(e["type"], e["object"]["metadata"].get("resourceVersion")) for e in evs])
    c.call("config", future_watch="error")

    # --- faults in the stream --------------------------------------------------------------------------------
    cur = c.state()["rv"]
    t = later(lambda: (c.ready(name="trainer-0-abcde", namespace=ns, ready=True), c.call("malformed")))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=3" % cur, timeout=6,
                stop_after=lambda resp: b"".join(resp.chunks).count(b"\n") >= 2)
    t.join()
    lines = [ln for ln in stream_lines(r) if ln]
    bad = 0
    for ln in lines:
        try:
            json.loads(ln)
        except ValueError:
            bad += 1
    tap.check("malformed line injected after a good event", len(lines) == 2 and bad == 1, lines)

    cur = c.state()["rv"]
    t = later(lambda: c.call("error-event", code=500))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % cur, timeout=6)
    t.join()
    want_500 = (b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                b'"message":"Internal error occurred: etcdserver: request timed out","reason":"InternalError",'
                b'"code":500}}\n')
    tap.check("error-event 500: in-stream ERROR InternalError, then the body ends",
              b"".join(r.chunks) == want_500 and r.terminated, b"".join(r.chunks))

    t = later(lambda: c.call("cut", mode="mid-event"))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % cur, timeout=6)
    t.join()
    data = b"".join(r.chunks)
    tap.check("cut mid-event: partial JSON line, no terminating chunk, EOF",
              r.eof and not r.terminated and data and not data.endswith(b"\n") and data.startswith(b'{"type":'),
              (r.eof, r.terminated, data[:60]))
    t = later(lambda: c.call("cut", mode="clean"))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % cur, timeout=6)
    t.join()
    tap.check("cut clean: terminating chunk", r.terminated and r.chunks == [], (r.terminated, r.chunks))
    got = {}
    t = later(lambda: got.update(c.call("cut", mode="clean", agent="victim")))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=2" % cur, timeout=6)
    t.join()
    tap.check("cut agent=...: other watches are not touched", got.get("cut") == 0 and r.terminated, got)

    t = later(lambda: c.call("oversize", mib=2, namespace=ns, name="trainer-0-abcde"))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=4" % cur, timeout=8,
                stop_after=lambda resp: b"\n" in resp.chunks[-1])
    t.join()
    data = b"".join(r.chunks)
    tap.check("oversize: one event of more than 2 MiB", data.endswith(b"\n") and len(data) > 2 * 1024 * 1024
              and json.loads(data)["object"]["metadata"]["name"] == "trainer-0-abcde", len(data))

    c.stall(1.5)
    t0 = time.time()
    t = later(lambda: c.ready(name="trainer-0-abcde", namespace=ns, ready=False), 0.2)
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d&timeoutSeconds=4" % c.state()["rv"],
                timeout=8, stop_after=lambda resp: b"\n" in b"".join(resp.chunks))
    t.join()
    dt = time.time() - t0
    tap.check("stall: the event arrives only after the stall", 1.2 < dt < 3.5 and r.chunks, dt)

    # --- token rotation -------------------------------------------------------------------------------
    c.token(token="rotated")
    r1 = request(port, "/api/v1/namespaces/wire/pods")
    r2 = request(port, "/api/v1/namespaces/wire/pods", token="rotated")
    tap.check("rotated token: old one 401, new one 200", r1.status == 401 and r2.status == 200, (r1.status, r2.status))
    c.token(token=TOKEN)

    # --- restart with history lost: RVs go back, old RVs are too old ---------------------------------------
    before = c.state()["rv"]
    res = c.restart()
    after = c.state()["rv"]
    r = request(port, "/api/v1/namespaces/wire/pods")
    d = json.loads(r.body)
    tap.check("restart: list RV is lower than before", int(d["metadata"]["resourceVersion"]) == after < before,
              (before, after, d["metadata"]))
    r = request(port, "/api/v1/namespaces/wire/pods?watch=1&resourceVersion=%d" % (after - 1), timeout=5)
    tap.check("restart: a watch from before the new RV gets ERROR 410",
              b'"code":410' in b"".join(r.chunks) and r.terminated, b"".join(r.chunks)[:200])
    stats = c.stats()
    tap.check("stats count requests by verb, watches and bytes",
              stats["requests"].get("watch", 0) >= 15 and stats["requests"].get("list", 0) >= 15
              and stats["watchesTotal"] >= 10 and stats["bytesSent"] > 2 * 1024 * 1024, stats)
    tap.check("restart reported old and new RV", res.get("oldRv") == before and res.get("rv") == after, res)


if __name__ == "__main__":
    main()
