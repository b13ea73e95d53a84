#!/usr/bin/python3
"""Cloud TPU REST API (v1) simulator for tpumesh tests.

Serves GET /v1/projects/<p>/locations/<z>/nodes/<name> on 127.0.0.1 with
node resources shaped like cloud.google.com/tpu/docs/reference/rest/v1/
projects.locations.nodes: name, state,
health, acceleratorType, tensorflowVersion, networkEndpoints[{ipAddress,
port}] (or the deprecated top-level ipAddress/port), symptoms.

Nodes: --node NAME=JSON (repeatable). JSON holds node fields plus simulator
controls (keys starting with '_'):
  _ready_after N     state _initial (default CREATING) for the first N GETs, then the node's state
  _ready_after_s S   the same, by seconds since the node's first GET
  _initial STATE     state before _ready_after* expires (default CREATING)
  _status CODE       answer with this HTTP status (e.g. 403, 404, 500, 503) and a Google error body
  _fail_first N      answer the first N GETs with 503
  _delay S           sleep S seconds before answering
  _raw TEXT          send TEXT as the body (malformed JSON tests)
  _legacy true       use top-level ipAddress/port instead of networkEndpoints
  _pad N             add a "padding" field of N bytes (oversized reply tests)
Defaults: state READY, health HEALTHY, acceleratorType v3-8, one endpoint
10.240.1.2:8470. Unknown nodes are 404 with Google's error body.

Auth: with --token T every API request must carry `Authorization: Bearer T`:
missing -> 401, wrong -> 403 (Google's error bodies). --project/--zone, when
given, must match the path (else 404).

Discovery: GET /discovery/<api>/<apiVersion> (any path starting /discovery/)
returns a discovery document whose rootUrl points at this simulator, for
TPU_API_DISCOVERY_URL=http://127.0.0.1:<port>/discovery/{api}/{apiVersion}.
GET /_stats returns {"requests": N, "nodes": {name: GETs}}.

Standard library only; prints `READY port=<p> url=<url>` on stdout.
"""

import argparse
import json
import re
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import simserve  # noqa: E402  (tests/sim/simserve.py: the serving loop)

NODE_RE = re.compile(r"^/v1/projects/([^/]+)/locations/([^/]+)/nodes/([^/?]+)$")
STATUS_TEXT = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
               404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    p.add_argument("--token", default=None, help="required bearer token (default: no check)")
    p.add_argument("--project", default=None, help="only this project exists")
    p.add_argument("--zone", default=None, help="only this zone exists")
    p.add_argument("--node", action="append", default=[], metavar="NAME=JSON", help="a node (repeatable)")
    return p.parse_args(argv)


def google_error(code, msg):
    return json.dumps({"error": {"code": code, "message": msg, "status": STATUS_TEXT.get(code, "UNKNOWN")}})


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.requests = 0
        self.gets = {}
        self.first_get = {}
        self.nodes = {}
        for spec in args.node:
            name, _, js = spec.partition("=")
            node = json.loads(js) if js else {}
            if not isinstance(node, dict):
                raise SystemExit("--node %s: JSON must be an object" % name)
            self.nodes[name] = node

    def resource(self, project, zone, name, node, n):
        ctl = {k: v for k, v in node.items() if k.startswith("_")}
        res = {k: v for k, v in node.items() if not k.startswith("_")}
        res.setdefault("state", "READY")
        res.setdefault("health", "HEALTHY")
        res.setdefault("acceleratorType", "v3-8")
        res.setdefault("tensorflowVersion", "2.12.0")
        res["name"] = "projects/%s/locations/%s/nodes/%s" % (project, zone, name)
        eps = res.pop("networkEndpoints", [{"ipAddress": "10.240.1.2", "port": 8470}])
        waiting = False
        if "_ready_after" in ctl and n <= int(ctl["_ready_after"]):
            waiting = True
        first = self.first_get.get(name, time.monotonic())
        if "_ready_after_s" in ctl and time.monotonic() - first < float(ctl["_ready_after_s"]):
            waiting = True
        if waiting:
            res["state"] = ctl.get("_initial", "CREATING")
            res.pop("health", None)
            eps = []
        if ctl.get("_legacy") and eps:
            res["ipAddress"] = eps[0]["ipAddress"]
            res["port"] = str(eps[0].get("port", 8470))
        elif eps:
            res["networkEndpoints"] = eps
        return res


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def reply(self, code, body, ctype="application/json; charset=UTF-8"):
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def discovery(self):
            port = self.server.server_address[1]
            doc = {"kind": "discovery#restDescription", "name": "tpu", "version": "v1",
                   "rootUrl": "http://127.0.0.1:%d/" % port, "servicePath": "",
                   "baseUrl": "http://127.0.0.1:%d/" % port, "batchPath": "batch",
                   "resources": {"projects": {"resources": {"locations": {"resources": {"nodes": {
                       "methods": {"get": {"path": "v1/{+name}", "httpMethod": "GET",
                                           "id": "tpu.projects.locations.nodes.get"}}}}}}}}}
            return self.reply(200, json.dumps(doc))

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/_stats":
                with state.lock:
                    return self.reply(200, json.dumps({"requests": state.requests, "nodes": state.gets}))
            if path.startswith("/discovery/"):
                return self.discovery()
            with state.lock:
                state.requests += 1
            a = state.args
            if a.token is not None:
                auth = self.headers.get("Authorization")
                if auth is None:
                    return self.reply(401, google_error(401, "Request is missing required authentication credential."))
                if auth != "Bearer " + a.token:
                    return self.reply(403, google_error(403, "The caller does not have permission"))
            m = NODE_RE.match(path)
            if not m:
                return self.reply(404, google_error(404, "Requested entity was not found."))
            project, zone, name = m.groups()
            if (a.project and project != a.project) or (a.zone and zone != a.zone) or name not in state.nodes:
                return self.reply(404, google_error(404, "Resource 'projects/%s/locations/%s/nodes/%s' was not found" % (project, zone, name)))
            node = state.nodes[name]
            with state.lock:
                n = state.gets.get(name, 0) + 1
                state.gets[name] = n
                state.first_get.setdefault(name, time.monotonic())
            if "_delay" in node:
                time.sleep(float(node["_delay"]))
            if "_status" in node:
                code = int(node["_status"])
                return self.reply(code, google_error(code, "simulated %d" % code))
            if n <= int(node.get("_fail_first", 0)):
                return self.reply(503, google_error(503, "The service is currently unavailable."))
            if "_raw" in node:
                return self.reply(200, str(node["_raw"]))
            res = state.resource(project, zone, name, node, n)
            if "_pad" in node:
                res["padding"] = "x" * int(node["_pad"])
            return self.reply(200, json.dumps(res))

    return Handler


def main(argv):
    args = parse_args(argv)
    return simserve.serve(args.port, make_handler(State(args)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
