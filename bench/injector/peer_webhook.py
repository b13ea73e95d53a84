#!/usr/bin/python3
"""The peer of tpumesh-injector in bench/injector: the same mutating webhook written the way
many are, in Python with the standard library (ThreadingHTTPServer + ssl, one thread per
connection): parse the AdmissionReview, skip unlabelled or injected pods, append the same
volumes, init containers and mounts as RFC 6902 "add" operations, base64 the patch, answer.
It validates nothing else (no annotation rules, no limits): it does less work than the injector.

    peer_webhook.py CERT KEY CONFIG_JSON      prints "port N" when listening on 127.0.0.1
"""
import base64
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CFG = json.load(open(sys.argv[3]))


def add_ops(parent, key, path, items):
    if not isinstance(parent.get(key), list):
        return [{"op": "add", "path": path, "value": list(items)}]
    return [{"op": "add", "path": path + "/-", "value": i} for i in items]


def patch_for(pod):
    spec = pod.get("spec") or {}
    names = {c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get("tpumesh.dev/inject") != "true" or CFG["initContainer"]["name"] in names:
        return None
    init = json.loads(json.dumps(CFG["initContainer"]))
    for c in spec.get("containers") or []:
        for k in ("limits", "requests"):
            n = ((c.get("resources") or {}).get(k) or {}).get("google.com/tpu")
            if n is not None:
                for kk in ("requests", "limits"):
                    init.setdefault("resources", {}).setdefault(kk, {})["google.com/tpu"] = str(n)
    ops = add_ops(spec, "volumes", "/spec/volumes", CFG["volumes"])
    ops += add_ops(spec, "initContainers", "/spec/initContainers", [init, CFG["sidecar"]])
    for i, c in enumerate(spec.get("containers") or []):
        ops += add_ops(c, "volumeMounts", "/spec/containers/%d/volumeMounts" % i, CFG["volumeMounts"])
    return ops


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and
    # the client's delayed ACK would add ~40 ms to every answer, which is not the peer's cost.
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            rv = json.loads(body)
            req = rv["request"]
            ops = patch_for(req.get("object") or {})
            resp = {"uid": req["uid"], "allowed": True}
            if ops:
                resp["patchType"] = "JSONPatch"
                resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": resp}).encode()
            code = 200
        except (ValueError, KeyError, TypeError) as e:
            out, code = str(e).encode(), 400
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class S(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512


srv = S(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("port %d" % srv.server_address[1], flush=True)
srv.serve_forever()
