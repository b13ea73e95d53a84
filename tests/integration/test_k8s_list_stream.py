"""LIST pages streamed item by item (tests/tools/k8s_driver against a scripted apiserver that
serves exactly the bytes each case needs): items before metadata, tiny chunks, gzip, a cut in
the middle of an item, an item over the object limit, a malformed page, and the informer's
API-error and watch-start counters for them. The kube-apiserver simulator always writes a
well-formed list in Go's key order, so these cases need their own server (127.0.0.1, port 0)."""
import gzip
import http.server
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8s_harness import Driver, sanitizer_reports, stop_all  # noqa: E402
from tap import check, done, fail  # noqa: E402


def pod(i, ip=None):
    """A pod of ~3 KB whose strings hold braces, brackets and escaped quotes."""
    return {"metadata": {"name": "p-%d" % i, "namespace": "default", "resourceVersion": str(50 + i),
                         "annotations": {"note": "}{][\"\\ " * 8, "pad": "x" * 2600}},
            "spec": {"hostname": "p-%d" % i, "containers": [{"name": "c", "args": ["[", "{"]}]},
            "status": {"podIP": ip or "10.0.0.%d" % (i + 1), "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def dumps(o):
    return json.dumps(o, separators=(",", ":"))


# Page bodies, items first and metadata last (valid, though not Go's order).
PAGE1 = ('{"items":[%s,%s],"metadata":{"continue":"p2","resourceVersion":"100"},'
         '"kind":"PodList","apiVersion":"v1"}' % (dumps(pod(0)), dumps(pod(1)))).encode()
PAGE2 = ('{"kind":"PodList","items":[ %s ],\n "metadata":{"resourceVersion":"100"}}'
         % dumps(pod(2))).encode()


class Case:
    """What the server does now: chunk sizes, gzip, faults for the next LIST requests."""
    chunk_max = 7
    gzip = False
    cut_lists = 0  # the next N LIST requests are cut in the middle of an item
    malformed_lists = 0  # the next N LIST requests get a page with a syntax error
    lists = 0
    gzipped = 0  # LIST bodies sent gzipped


STOP = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        if "watch=1" in self.path:
            # A quiet watch that stays open until the test stops it.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            while not STOP.wait(0.2):
                pass
            self.wfile.write(b"0\r\n\r\n")
            return
        Case.lists += 1
        body = PAGE2 if "continue=p2" in self.path else PAGE1
        cut = None
        if Case.cut_lists > 0:
            Case.cut_lists -= 1
            cut = body.index(b'"name":"p-1"') + 5  # inside the second item
        elif Case.malformed_lists > 0:
            Case.malformed_lists -= 1
            body = body.replace(b'"phase":"Running",', b'"phase":"Running" ', 1)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        use_gzip = Case.gzip and "gzip" in (self.headers.get("Accept-Encoding") or "")
        if use_gzip:
            self.send_header("Content-Encoding", "gzip")
            body = gzip.compress(body)
            Case.gzipped += 1
        self.end_headers()
        rnd = random.Random(len(body) + Case.lists)
        at = 0
        end = cut if cut is not None else len(body)
        while at < end:
            n = min(end - at, rnd.randint(1, Case.chunk_max))
            self.chunk(body[at:at + n])
            at += n
        if cut is not None:
            self.close_connection = True
            self.connection.shutdown(2)  # abrupt: no terminating chunk
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up (the cut case, the limits) are expected


server = Server(("127.0.0.1", 0), Handler)
URL = "http://127.0.0.1:%d" % server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()


def driver(*extra):
    return Driver(["--apiserver", URL, "--namespace", "default", "--limit", "2",
                   "--backoff-ms", "100"] + list(extra))


def want_store(d):
    want = {"default/p-%d" % i: "10.0.0.%d" % (i + 1) for i in range(3)}
    got = {k: v["ip"] for k, v in d.model.items()}
    return got == want, "got %s" % got


def scenario(name, fn):
    Case.chunk_max, Case.gzip, Case.cut_lists, Case.malformed_lists = 7, False, 0, 0
    try:
        fn(name)
    except Exception as e:  # a broken scenario is a failure, not a crash of the whole file
        fail(name, "exception: %r" % (e,))


def t_items_first(name):
    d = driver("--list")
    d.wait(lambda x: x.proc.poll() is not None, 15)
    d.stop()
    check(name + ": --list reads 3 items over 2 pages in 1-7 byte chunks",
          "LISTED 3 kind=PodList rv=100 pages=2" in d.lines, "\n".join(d.lines) + d.stderr_tail())
    d = driver()
    good = d.wait_synced()
    same, why = want_store(d)
    check(name + ": the informer syncs the 3 pods", good and d.synced[0] == 3 and same,
          why + "\n" + d.stderr_tail())
    d.stop()
    check(name + ": one watch start (initial), no API error, event times set",
          d.stats and d.stats["starts"] == "initial:1" and d.stats["errors"] == "-" and
          d.stats["badtime"] == "0", str(d.stats))


def t_gzip(name):
    Case.gzip = True
    Case.chunk_max = 50
    d = driver()
    good = d.wait_synced()
    same, why = want_store(d)
    check(name + ": a gzip page (%d sent) streams the same items" % Case.gzipped,
          good and same and Case.gzipped >= 2, why + "\n" + d.stderr_tail())
    d.stop()


def t_cut(name):
    Case.cut_lists = 1
    d = driver()
    good = d.wait_synced()
    same, why = want_store(d)
    check(name + ": cut in the middle of an item -> the page fails, the list is retried",
          good and same and d.count_log("list failed") == 1 and len(d.synced) == 1,
          why + "\n" + d.stderr_tail())
    d.stop()
    check(name + ": nothing from the cut page leaks out, no duplicate change", not d.errors,
          "\n".join(d.errors[:10]))
    check(name + ": counted as API error 'protocol'", d.stats and d.stats["errors"] == "protocol:1",
          str(d.stats))


def t_oversized(name):
    d = driver("--max-event", "2000")
    got = d.wait_log("larger than the limit of 2000 bytes", 10)
    check(name + ": an item over the object limit fails the page with a clear error",
          got and not d.synced and d.wait_log("raise the object size limit"), d.stderr_tail())
    d.stop()
    errs = dict(kv.split(":") for kv in (d.stats or {}).get("errors", "x:0").split(","))
    check(name + ": counted as API error 'oversized'", int(errs.get("oversized", 0)) >= 1, str(d.stats))


def t_malformed(name):
    Case.malformed_lists = 1
    d = driver()
    good = d.wait_synced()
    check(name + ": a malformed page names the byte and the item, then the retry syncs",
          good and d.wait_log("is not valid JSON") and
          d.wait_log("list response: byte "), d.stderr_tail())
    d.stop()
    check(name + ": counted as API error 'malformed'",
          d.stats and d.stats["errors"] == "malformed:1", str(d.stats))


def t_page_limit(name):
    d = driver("--list", "--max-list", "4000")
    d.wait(lambda x: x.proc.poll() is not None, 15)
    d.stop()
    check(name + ": the whole-page limit keeps its meaning",
          d.proc.returncode == 1 and d.log_has("list response larger than the limit of 4000 bytes")
          and d.log_has("error class oversized"), d.stderr_tail())


scenario("items before metadata", t_items_first)
scenario("gzip", t_gzip)
scenario("cut mid-item", t_cut)
scenario("item over the object limit", t_oversized)
scenario("malformed page", t_malformed)
scenario("page limit", t_page_limit)

STOP.set()
stop_all()
server.shutdown()
reports = sanitizer_reports()
check("no sanitizer report from any driver run", not reports, "\n".join(reports[:20]))
done()
