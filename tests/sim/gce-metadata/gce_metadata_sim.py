#!/usr/bin/python3
"""GCE metadata server simulator for tpumesh tests.

Serves http://127.0.0.1:<port>/computeMetadata/v1/<path> the way the GCE
metadata server does for the keys tpumesh-init reads:

  project/project-id                       --project
  instance/zone                            projects/<num>/zones/<--zone>
  instance/network-interfaces/0/ip         --ip
  instance/service-accounts/default/token  {"access_token": --token, ...} (404 with --no-token;
                                           --tokens T1,T2 rotates them)
  instance/attributes/<key>                --attr KEY=VALUE / --attr-file KEY=PATH

Every request must carry `Metadata-Flavor: Google` (else 403, like the real
server); every reply carries `Metadata-Flavor: Google` unless --no-flavor.
Failure modes: --delay SECONDS (slow), --status CODE (every reply), --fail-first N
(the first N requests answer 500), --hang-up (close without replying). A
server that is not there at all: point the client at a closed port. GET /_stats (no header needed) returns
{"requests": N, "paths": {...}}. Standard library only; binds 127.0.0.1;
prints `READY port=<p> url=<url>` on stdout when serving.
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import simserve  # noqa: E402  (tests/sim/simserve.py: the serving loop)

PREFIX = "/computeMetadata/v1/"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    p.add_argument("--project", default="sim-project")
    p.add_argument("--project-number", default="123456789012")
    p.add_argument("--zone", default="us-central2-b")
    p.add_argument("--ip", default="10.128.0.7")
    p.add_argument("--token", default="sim-token-123")
    p.add_argument("--tokens", default=None, metavar="T1,T2,...",
                   help="hand out these tokens in turn (the last one repeats): token rotation")
    p.add_argument("--no-token", action="store_true", help="404 for the service-account token")
    p.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE",
                   help="instance attribute (repeatable)")
    p.add_argument("--attr-file", action="append", default=[], metavar="KEY=PATH",
                   help="instance attribute read from a file (repeatable)")
    p.add_argument("--delay", type=float, default=0.0, help="sleep this long before every reply")
    p.add_argument("--status", type=int, default=0, help="answer every request with this status")
    p.add_argument("--fail-first", type=int, default=0, help="answer the first N requests with 500")
    p.add_argument("--no-flavor", action="store_true", help="omit the Metadata-Flavor reply header")
    p.add_argument("--hang-up", action="store_true",
                   help="accept each connection and close it without a reply (unreachable server)")
    return p.parse_args(argv)


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.requests = 0
        self.paths = {}
        self.attrs = {}
        self.tokens = args.tokens.split(",") if args.tokens else [args.token]
        self.token_calls = 0
        for kv in args.attr:
            k, _, v = kv.partition("=")
            self.attrs[k] = v
        for kv in args.attr_file:
            k, _, path = kv.partition("=")
            with open(path, encoding="utf-8") as f:
                self.attrs[k] = f.read()

    def value(self, path):
        a = self.args
        if path == "project/project-id":
            return 200, a.project, "application/text"
        if path == "project/numeric-project-id":
            return 200, a.project_number, "application/text"
        if path == "instance/zone":
            return 200, "projects/%s/zones/%s" % (a.project_number, a.zone), "application/text"
        if path == "instance/network-interfaces/0/ip":
            return 200, a.ip, "application/text"
        if path == "instance/service-accounts/default/token":
            if a.no_token:
                return 404, "Not Found", "text/html"
            with self.lock:
                tok = self.tokens[min(self.token_calls, len(self.tokens) - 1)]
                self.token_calls += 1
            body = json.dumps({"access_token": tok, "expires_in": 3599, "token_type": "Bearer"})
            return 200, body, "application/json"
        if path.startswith("instance/attributes/"):
            key = path[len("instance/attributes/"):]
            if key in self.attrs:
                return 200, self.attrs[key], "application/text"
        return 404, "Not Found", "text/html"


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "Metadata Server for VM"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass

        def reply(self, code, body, ctype):
            data = body.encode("utf-8")
            self.send_response(code)
            if not state.args.no_flavor:
                self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/_stats":
                with state.lock:
                    body = json.dumps({"requests": state.requests, "paths": state.paths})
                return self.reply(200, body, "application/json")
            with state.lock:
                state.requests += 1
                n = state.requests
                state.paths[path] = state.paths.get(path, 0) + 1
            if state.args.delay > 0:
                time.sleep(state.args.delay)
            if state.args.hang_up:
                self.close_connection = True
                return
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(403, "Missing Metadata-Flavor:Google header.", "text/html")
            if state.args.status:
                return self.reply(state.args.status, "simulated failure", "text/html")
            if n <= state.args.fail_first:
                return self.reply(500, "simulated failure %d" % n, "text/html")
            if not path.startswith(PREFIX):
                return self.reply(404, "Not Found", "text/html")
            code, body, ctype = state.value(path[len(PREFIX):])
            return self.reply(code, body, ctype)

    return Handler


def main(argv):
    args = parse_args(argv)
    return simserve.serve(args.port, make_handler(State(args)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
