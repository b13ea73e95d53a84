#!/usr/bin/env python3
"""tpumesh-injector end to end on 127.0.0.1: HTTPS with a certificate made here (verified by the
client), POST /mutate answers applied with python3-jsonpatch (RFC 6902), denials, 400/404/405/413,
hostile bodies, 200 concurrent reviews, probes and metrics, certificate rotation without a restart,
--config, --image, flags and variables, exit codes."""
import base64
import concurrent.futures
import copy
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import jsonpatch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, done, fail, ok, scaled, skip  # noqa: E402

ROOT = os.environ.get("ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "bin",
                   "tpumesh-injector")
POD = json.load(open(os.path.join(ROOT, "tests/fixtures/injector/jobset-pod.json")))
TMP = tempfile.mkdtemp(prefix="tpumesh-injector-")


def make_cert(name, cn):
    key, crt = os.path.join(TMP, name + ".key"), os.path.join(TMP, name + ".crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "1", "-subj", "/CN=" + cn, "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return crt, key


def review(pod, op="CREATE", uid="11111111-2222-3333-4444-555555555555"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "ml", "operation": op, "object": pod, "oldObject": None,
                        "dryRun": False}}


class Injector:
    count = 0

    def __init__(self, *args, env=None, wrap=()):
        Injector.count += 1
        self.log = open(os.path.join(TMP, f"injector-{Injector.count}.log"), "w+")
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("TPUMESH_"):
                del e[k]
        e.update(env or {})
        self.p = subprocess.Popen([*wrap, BIN, "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
                                   *args], stdout=self.log, stderr=subprocess.STDOUT, env=e)
        self.https = self.http = None
        deadline = time.time() + 10
        while time.time() < deadline and self.https is None:
            self.log.seek(0)
            for line in self.log.read().splitlines():
                if "serving POST /mutate" in line:
                    words = line.split()
                    self.https = int(words[words.index("https") + 2].rstrip(","))
                    self.http = int(words[words.index("http") + 2].rstrip(";"))
            if self.p.poll() is not None:
                break
            time.sleep(0.05)

    def stop(self):
        self.p.terminate()
        try:
            return self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return -9

    def logtext(self):
        self.log.seek(0)
        return self.log.read()


def post(port, ca, body, path="/mutate", method="POST", headers=None):
    ctx = ssl.create_default_context(cafile=ca)
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    c.request(method, path, body=data, headers={"Content-Type": "application/json",
                                                **(headers or {})})
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    out = r.status, r.read().decode()
    c.close()
    return out


def patched(resp_body, pod):
    r = json.loads(resp_body)["response"]
    ops = json.loads(base64.b64decode(r["patch"]))
    return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(pod)), r


def names(lst):
    return [x["name"] for x in lst or []]


crt, key = make_cert("a", "tpumesh-injector")
inj = Injector("--tls-cert-file", crt, "--tls-key-file", key, "--cert-check-interval", "1")
if not check("starts and logs its ports", inj.https is not None, inj.logtext()):
    done()
# PR_SET_DUMPABLE 0: the kernel makes a non-dumpable process's /proc files root's, so a
# same-UID process can neither ptrace it nor read its memory (the serving key).
# Run as root, the test starts a second injector as user 65534 (setpriv) to tell.
def proc_owner(pid):
    return os.stat(f"/proc/{pid}/environ").st_uid


if os.getuid() != 0:
    check("not dumpable: its /proc/PID/environ belongs to root, not to the injector's user",
          proc_owner(inj.p.pid) == 0, proc_owner(inj.p.pid))
elif shutil.which("setpriv"):
    for path in (crt, key):
        os.chmod(path, 0o644)
    os.chmod(TMP, 0o755)
    nobody = Injector("--tls-cert-file", crt, "--tls-key-file", key,
                      wrap=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    owner = proc_owner(nobody.p.pid) if nobody.https is not None else None
    check("not dumpable: an injector running as 65534 has /proc/PID owned by root (PR_SET_DUMPABLE "
          "0; a dumpable one's would be 65534's)", owner == 0, (owner, nobody.logtext()[-300:]))
    nobody.stop()
else:
    skip("not dumpable", "runs as root without setpriv, and root owns /proc/PID either way")

# --- the patch, applied by a real RFC 6902 implementation ---
st, body = post(inj.https, crt, review(POD))
pod, resp = patched(body, POD)
check("labelled pod: 200, allowed, JSONPatch, the request's uid",
      st == 200 and resp["allowed"] and resp["patchType"] == "JSONPatch"
      and resp["uid"] == "11111111-2222-3333-4444-555555555555", body[:300])
check("init containers: the user's first (order kept), then tpumesh-init, then the sidecar",
      names(pod["spec"]["initContainers"]) == ["fetch-data", "tpumesh-init", "tpumesh-sidecar"],
      names(pod["spec"]["initContainers"]))
init, side = pod["spec"]["initContainers"][1], pod["spec"]["initContainers"][2]
check("tpumesh-init requests and limits the trainer's google.com/tpu",
      init["resources"]["requests"].get("google.com/tpu") == "4"
      and init["resources"]["limits"].get("google.com/tpu") == "4", init["resources"])
check("the sidecar is a native sidecar without TPUs",
      side.get("restartPolicy") == "Always" and "google.com/tpu" not in json.dumps(side))
check("volumes appended to the user's", names(pod["spec"]["volumes"]) ==
      ["data", "tpumesh", "tpumesh-podinfo"], names(pod["spec"]["volumes"]))
tr = pod["spec"]["containers"][0]
check("the trainer mounts the shared volume read-only, its own mounts kept",
      tr["volumeMounts"] == [{"name": "data", "mountPath": "/data"},
                             {"name": "tpumesh", "mountPath": "/var/run/tpumesh",
                              "readOnly": True}], tr["volumeMounts"])
env = {e["name"]: e for e in side["env"]}
check("downward-API env in the sidecar (POD_NAME, TPUMESH_NAMESPACE)",
      env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
      and env["TPUMESH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace")
check("image of both containers is the built-in default",
      init["image"] == side["image"] == "tpumesh:" + open(os.path.join(ROOT, "VERSION")).read()
      .strip())

# Reinvocation: the patched pod is not patched again.
st, body = post(inj.https, crt, review(pod))
r = json.loads(body)["response"]
check("an injected pod is allowed without a patch (reinvocation)",
      st == 200 and r["allowed"] and "patch" not in r, body)

legacy = copy.deepcopy(POD)
legacy["spec"]["containers"][0]["resources"] = {"limits": {"cloud-tpus.google.com/v3": "8"}}
lp, _ = patched(post(inj.https, crt, review(legacy))[1], legacy)
check("legacy TPU Node pod: tpumesh-init with cloud-tpus.google.com/v3, no sidecar",
      names(lp["spec"]["initContainers"]) == ["fetch-data", "tpumesh-init"]
      and lp["spec"]["initContainers"][1]["resources"]["limits"]["cloud-tpus.google.com/v3"]
      == "8", names(lp["spec"]["initContainers"]))

sel = copy.deepcopy(POD)
sel["spec"]["containers"].append({"name": "logger", "image": "busybox"})
sel["spec"]["containers"].append({"name": "helper", "image": "busybox"})
sel["metadata"]["annotations"]["tpumesh.dev/containers"] = "trainer,helper"
sp, _ = patched(post(inj.https, crt, review(sel))[1], sel)
mounted = [c["name"] for c in sp["spec"]["containers"]
           if any(m["name"] == "tpumesh" for m in c.get("volumeMounts", []))]
check("tpumesh.dev/containers picks the containers that get the mount",
      mounted == ["trainer", "helper"], mounted)

bare = {"metadata": {"labels": {"tpumesh.dev/inject": "true"}},
        "spec": {"containers": [{"name": "a", "image": "x"}]}}
bp, _ = patched(post(inj.https, crt, review(bare))[1], bare)
check("a pod without initContainers/volumes/volumeMounts gets the arrays created",
      names(bp["spec"]["initContainers"]) == ["tpumesh-init", "tpumesh-sidecar"]
      and len(bp["spec"]["containers"][0]["volumeMounts"]) == 1)

# --- no patch, denials ---
unl = copy.deepcopy(POD)
del unl["metadata"]["labels"]["tpumesh.dev/inject"]
r = json.loads(post(inj.https, crt, review(unl))[1])["response"]
check("unlabelled pod: allowed, no patch", r["allowed"] and "patch" not in r, r)
r = json.loads(post(inj.https, crt, review(POD, op="UPDATE"))[1])["response"]
check("UPDATE: allowed, no patch", r["allowed"] and "patch" not in r, r)
bad = copy.deepcopy(POD)
bad["metadata"]["annotations"]["tpumesh.dev/address-mode"] = "fast"
r = json.loads(post(inj.https, crt, review(bad))[1])["response"]
check("invalid annotation: denied, message names the key and the accepted values",
      not r["allowed"] and "tpumesh.dev/address-mode" in r["status"]["message"]
      and "auto, dns, ip" in r["status"]["message"], r)
bad = copy.deepcopy(POD)
bad["metadata"]["annotations"]["tpumesh.dev/expected-wrokers"] = "2"
r = json.loads(post(inj.https, crt, review(bad))[1])["response"]
check("unknown tpumesh.dev key: denied naming it and the accepted keys",
      not r["allowed"] and "tpumesh.dev/expected-wrokers" in r["status"]["message"]
      and "expected-workers" in r["status"]["message"], r)

# --- hostile and wrong requests ---
# Nesting is bounded by the server's pre-scan as the body arrives (64 levels), before any parse:
# a real review nested 65 deep in its pod is refused naming that limit; 64 levels are served.
def nested(levels):
    pod = copy.deepcopy(POD)
    pod["metadata"]["x"] = json.loads("[" * (levels - 4) + "]" * (levels - 4))  # 4 levels above
    return json.dumps(review(pod))


for levels, want in [(64, 200), (65, 400)]:
    st, body = post(inj.https, crt, nested(levels))
    check(f"a review nested {levels} deep: {want}", st == want and
          (want == 200 or b"JSON nested deeper than 64 levels" in body), f"{st} {body[:200]}")
for name, payload, want in [
        ("not JSON", b"hello", 400),
        ("JSON, not an AdmissionReview", b'{"kind":"Pod"}', 400),
        ("admission v1beta1", json.dumps({**review(POD), "apiVersion":
                                          "admission.k8s.io/v1beta1"}), 400),
        ("no uid", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "request": {}}), 400),
        ("nested 10,000 deep", b"[" * 10000 + b"]" * 10000, 400),
        ("5 MiB body", b" " * (5 << 20), 413)]:
    try:
        st, body = post(inj.https, crt, payload)
    except (ConnectionError, OSError) as e:  # 413 may close before the whole body is read
        st, body = 413 if want == 413 else -1, str(e).encode()
    check(f"{name}: {want}", st == want, f"{st} {body[:200]}")
st, _ = post(inj.https, crt, b"{}", path="/other")
check("other path: 404", st == 404)
st, _ = post(inj.https, crt, None, method="GET")
check("GET /mutate: 405", st == 405)

# Truncated body and a client that goes away mid-request: the server stays up.
s = socket.create_connection(("127.0.0.1", inj.https))
ts = ssl.create_default_context(cafile=crt).wrap_socket(s, server_hostname="127.0.0.1")
ts.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"")
ts.close()
raw = socket.create_connection(("127.0.0.1", inj.https))
raw.sendall(b"GET / HTTP/1.1\r\n\r\n")  # plain HTTP on the TLS port
raw.close()
st, _ = post(inj.https, crt, review(POD))
check("still serving after a truncated request and plain HTTP on the TLS port", st == 200)

# Two reviews pipelined on one TLS connection (the API server never pipelines): the first is
# answered, then the connection closes with the second unread (libwebsockets 4.1 would parse it
# from its pipeline buffer twice), and the server keeps serving.
one = json.dumps(review(POD)).encode()
req = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(one), one)
ts = ssl.create_default_context(cafile=crt).wrap_socket(
    socket.create_connection(("127.0.0.1", inj.https), timeout=scaled(5)), server_hostname="127.0.0.1")
t0 = time.monotonic()
ts.sendall(req * 2)
got = b""
try:
    while True:
        chunk = ts.recv(65536)
        if not chunk:
            break
        got += chunk
except (OSError, ssl.SSLError):
    pass
took = time.monotonic() - t0
ts.close()
st, _ = post(inj.https, crt, review(POD))
check("two pipelined reviews on one connection: the first answered, then closed (%.2f s); still "
      "serving" % took, got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1 ") == 1
      and took < scaled(3) and st == 200, (got[:80], took, st))

# 200 concurrent reviews, each on its own connection.
def one(i):
    st, body = post(inj.https, crt, review(POD, uid=f"uid-{i}"))
    r = json.loads(body)["response"]
    return st == 200 and r["uid"] == f"uid-{i}" and r["allowed"]


with concurrent.futures.ThreadPoolExecutor(200) as ex:
    results = list(ex.map(one, range(200)))
check("200 concurrent reviews all answered with their own uid", all(results),
      f"{results.count(False)} failed")

# Many idle connections on both ports (a flood, or a broken client pool): the probes, on their
# own server with its own limits, still answer, and so does the admission port.
idle = []
for port, n in ((inj.https, 300), (inj.http, 100)):
    for _ in range(n):
        try:
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
time.sleep(0.5)
check("with 300 idle connections on the HTTPS port and 100 on the probe port, /healthz answers",
      get(inj.http, "/healthz")[0] == 200)
check("... and a review is answered", post(inj.https, crt, review(POD))[0] == 200)
for sck in idle:
    sck.close()

# --- probes and metrics ---
check("/healthz 200", get(inj.http, "/healthz")[0] == 200)
check("/readyz 200", get(inj.http, "/readyz")[0] == 200)
st, m = get(inj.http, "/metrics")
check("/metrics counts outcomes", st == 200 and
      'tpumesh_injector_reviews_total{outcome="patched"}' in m
      and 'tpumesh_injector_reviews_total{outcome="denied"} 2' in m
      and "tpumesh_injector_review_seconds_count" in m, m[:400])

# --- certificate rotation without a restart ---
crt2, key2 = make_cert("b", "tpumesh-injector-rotated")
with open(crt2) as f:
    new_crt = f.read()
with open(key2) as f:
    new_key = f.read()
# Replace both files the way a Secret volume does: new files renamed over the old.
for path, text in ((key, new_key), (crt, new_crt)):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)
deadline = time.time() + 10
rotated = False
while time.time() < deadline and not rotated:
    try:
        rotated = post(inj.https, crt2, review(POD))[0] == 200
    except ssl.SSLError:
        time.sleep(0.2)
check("rotated certificate served without a restart (new CA verifies)", rotated, inj.logtext())
check("rotation logged", "serving certificate reloaded" in inj.logtext())
with open(key, "w") as f:
    f.write("not a key\n")
time.sleep(2.5)
check("a broken key file is refused, the previous pair keeps serving",
      post(inj.https, crt2, review(POD))[0] == 200 and "still serving the previous pair" in
      inj.logtext(), inj.logtext()[-400:])
rc = inj.stop()
check("SIGTERM: exit 0", rc == 0, rc)

# --- flags, variables, config ---
def run(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TPUMESH_")}
    e.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=e, timeout=20)


r = run("--help")
check("--help lists every flag with its variable", r.returncode == 0 and all(
    f in r.stdout for f in ("--listen", "--tls-cert-file", "--tls-key-file", "--image",
                            "--http-addr", "--config", "TPUMESH_IMAGE", "--log-format",
                            "--log-level")), r.stdout)
check("--help lists the exit codes", "\n  2  usage or configuration error" in r.stdout, r.stdout)
r = run("--cert-check-interval", "0")
check("a command-line error: exit 2, one log line in the format all three programs use",
      r.returncode == 2 and "command line failed (exit 2, configuration error): "
      "--cert-check-interval: '0' is not an integer in 1..3600" in r.stderr, r.stderr)
r = run("--version")
check("--version", r.returncode == 0 and r.stdout.startswith("tpumesh-injector "), r.stdout)
r = run()
check("no certificate: exit 2 saying what is required",
      r.returncode == 2 and "--tls-cert-file and --tls-key-file are required" in r.stderr,
      r.stderr)
r = run("--tls-cert-file", crt2, "--tls-key-file", crt2, "--listen", "127.0.0.1:0")
check("a key that is not a key: exit 2 naming the file",
      r.returncode == 2 and "holds no PEM private key" in r.stderr, r.stderr)
r = run("--tls-cert-file", crt2, "--tls-key-file", key2, "--config", "/nonexistent")
check("--config missing: exit 2", r.returncode == 2 and "/nonexistent" in r.stderr, r.stderr)
badcfg = os.path.join(TMP, "bad.yaml")
with open(badcfg, "w") as f:
    f.write("initContainer: {name: tpumesh-init}\nsidecar: {name: tpumesh-sidecar}\n"
            "volumes: []\nvolumeMounts: []\nextra: 1\n")
r = run("--tls-cert-file", crt2, "--tls-key-file", key2, "--config", badcfg)
check("--config with an unknown key: exit 2 naming it",
      r.returncode == 2 and "unknown config key 'extra'" in r.stderr, r.stderr)
r = run("--tls-cert-file", crt2, "--tls-key-file", key2, "--log-level", "loud")
check("bad --log-level: exit 2", r.returncode == 2 and "--log-level" in r.stderr, r.stderr)

cfg = os.path.join(TMP, "config.yaml")
with open(cfg, "w") as f:
    f.write("""initContainer:
  - name: tpumesh-init
    image: "example/tpumesh:1"
    args: [tpumesh-init]
sidecar:
  - name: tpumesh-sidecar
    image: "example/tpumesh:1"
    restartPolicy: Always
volumes:
  - name: tpumesh
    emptyDir: {medium: Memory}
volumeMounts:
  - name: tpumesh
    mountPath: /mesh
    readOnly: true
""")
inj = Injector("--config", cfg, "--log-format", "json",
               env={"TPUMESH_TLS_CERT_FILE": crt2, "TPUMESH_TLS_KEY_FILE": key2,
                    "TPUMESH_IMAGE": "registry.example/tpumesh@sha256:" + "a" * 64})
if check("starts from TPUMESH_ variables with --config", inj.https is not None, inj.logtext()):
    p2, _ = patched(post(inj.https, crt2, review(POD))[1], POD)
    ic = p2["spec"]["initContainers"]
    check("--config's containers injected; TPUMESH_IMAGE overrides their image",
          names(ic)[1:] == ["tpumesh-init", "tpumesh-sidecar"]
          and ic[1]["image"] == ic[2]["image"] == "registry.example/tpumesh@sha256:" + "a" * 64
          and p2["spec"]["containers"][0]["volumeMounts"][-1]["mountPath"] == "/mesh", ic)
    lines = [json.loads(x) for x in inj.logtext().splitlines() if x.startswith("{")]
    check("--log-format json: one JSON object per line",
          any(x.get("msg", "").startswith("injected pod ml/") for x in lines), lines[-3:])
    inj.stop()

done()
