#!/usr/bin/python3
"""scripts/demo_injector.py - `make demo`'s injector section: the headline install path on this
machine. k8s/injector.yaml's webhook configuration goes into the kube-apiserver simulator
(tests/sim/kube-apiserver, whose admission calls webhooks over verified HTTPS), tpumesh-injector
serves it with k8s/injector.yaml's ConfigMap, and the four pods of k8s/first-job.yaml - whose
template carries only the label tpumesh.dev/inject: "true" - are created through the API. They
come back with tpumesh-init, the native sidecar, the volumes and the mount; pod 0's injected
containers then run as a kubelet would run them (their env, the downward-API annotations file,
the volume), and its smoke trainer (k8s/first-job.yaml's command) prints what it read.

  BUILD=build PY=/usr/bin/python3 scripts/demo_injector.py     (scripts/demo.sh, section 6)

Only what a node adds is added: GKE's TPU_WORKER_* variables and the device plugin's
TPU_ACCELERATOR_TYPE/TPU_TOPOLOGY, TPUMESH_SKIP_INIT (there is no TPU here), the API server's
address, and loopback addresses for the sidecar's servers. Every process it starts is stopped
before it exits."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim", "kube-apiserver"))
from simctl import start_sim  # noqa: E402

# Bounds on a hang, stretched when the programs run slowed down (ASan, valgrind).
SLOW = max(1, int(os.environ.get("TPUMESH_TEST_SLOWDOWN", "1") or 1))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("BUILD", "build")))
NS = "training"
HOSTS = ",".join("first-job-%d.first-job" % i for i in range(4))
procs = []


def say(line=""):
    print(line, flush=True)


def docs(f):
    return [d for d in yaml.safe_load_all(open(os.path.join(ROOT, "k8s", f))) if d]


def start(argv, log, env=None):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env)
    procs.append(p)
    return p


def port_from(log, marker, pattern=r"\(port (\d+)\)", timeout=20):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        for line in open(log):
            m = re.search(pattern, line)
            if m and marker in line:
                return int(m.group(1))
        time.sleep(0.05)
    raise SystemExit("demo: no '%s' line in %s:\n%s" % (marker, log, open(log).read()))


def api(url, method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10 * SLOW) as r:
            return r.status, json.load(r), r.headers.get_all("Warning") or []
    except urllib.error.HTTPError as e:
        return e.code, json.load(e), []


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def container_env(c, pod):
    """A container's env as the kubelet resolves it (values and the fieldRefs tpumesh uses)."""
    out = {}
    for e in c.get("env") or []:
        if "value" in e:
            out[e["name"]] = e["value"]
        else:
            fp = e["valueFrom"]["fieldRef"]["fieldPath"]
            out[e["name"]] = {"metadata.name": pod["metadata"]["name"],
                              "metadata.namespace": pod["metadata"]["namespace"]}[fp]
    return out


def in_uts(hostname, argv):
    """argv with the pod's host name (its own UTS namespace), as a pod's containers have it."""
    for pre in (["unshare", "-u"], ["unshare", "-Ur", "-u"]):
        if subprocess.run(pre + ["true"], capture_output=True).returncode == 0:
            return pre + ["sh", "-c", 'hostname "$0" && exec "$@"', hostname] + argv
    return argv


def main():
    work = tempfile.mkdtemp(prefix="tpumesh-demo-injector-")
    sim = None
    try:
        inj_objs = docs("injector.yaml")
        svc = next(o for o in inj_objs if o["kind"] == "Service")
        cm = next(o for o in inj_objs if o["kind"] == "ConfigMap")
        wh = next(o for o in inj_objs if o["kind"] == "MutatingWebhookConfiguration")
        sns, sname = svc["metadata"]["namespace"], svc["metadata"]["name"]

        sim = start_sim(["--bookmark-interval", "2"])
        say("simulated API server %s; its admission calls webhooks over HTTPS" % sim.url)

        # The serving certificate, as k8s/README.md's openssl recipe makes it.
        dns = "%s.%s.svc" % (sname, sns)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=%s-ca" % sname,
                "-keyout", "ca.key", "-out", "ca.crt", cwd=work)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + dns, "-keyout", "tls.key", "-out", "tls.csr",
                cwd=work)
        with open(os.path.join(work, "tls.ext"), "w") as f:
            f.write("subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n" % dns)
        openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
                "-extfile", "tls.ext", "-out", "tls.crt", cwd=work)
        config = os.path.join(work, "config.yaml")
        with open(config, "w") as f:
            f.write(next(iter(cm["data"].values())))
        log = os.path.join(work, "injector.log")
        start([os.path.join(BUILD, "bin", "tpumesh-injector"), "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
               "--tls-cert-file", os.path.join(work, "tls.crt"), "--tls-key-file", os.path.join(work, "tls.key"),
               "--config", config, "--apiserver", sim.url], log)
        port = port_from(log, "serving POST /mutate", r"https port (\d+)")
        sim.client.call("webhook-service", service="%s/%s" % (sns, sname), address="127.0.0.1:%d" % port)
        say("tpumesh-injector (k8s/injector.yaml's ConfigMap) serves https://%s/mutate on 127.0.0.1:%d" % (dns, port))

        wh["webhooks"][0]["clientConfig"]["caBundle"] = __import__("base64").b64encode(
            open(os.path.join(work, "ca.crt"), "rb").read()).decode()
        st, _, _ = api(sim.url, "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", wh)
        sim.client.call("namespace-labels", namespace=NS, set="tpumesh.dev/injection=enabled")
        say("$ kubectl apply -f k8s/injector.yaml   # the webhook configuration: %d" % st)
        say("$ kubectl label namespace %s tpumesh.dev/injection=enabled" % NS)

        # The Job controller's part: the Job, then its 4 pods from k8s/first-job.yaml's template.
        job = next(o for o in docs("first-job.yaml") if o["kind"] == "Job")
        tpl = job["spec"]["template"]
        sim.client.call("make-job", name="first-job", completions=4, namespace=NS)
        say("$ kubectl apply -n %s -f k8s/first-job.yaml   # the pod template has only the label" % NS)
        pods = []
        for i in range(4):
            md = json.loads(json.dumps(tpl["metadata"]))
            md["name"] = "first-job-%d-demo0" % i
            md["labels"].update({"batch.kubernetes.io/job-name": "first-job",
                                 "batch.kubernetes.io/job-completion-index": str(i)})
            md["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
            md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "first-job",
                                      "uid": "00000000-0000-4000-8000-00000000f157", "controller": True}]
            spec = json.loads(json.dumps(tpl["spec"]))
            spec["hostname"] = "first-job-%d" % i
            st, pod, warnings = api(sim.url, "POST", "/api/v1/namespaces/%s/pods" % NS,
                                    {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec})
            if st != 201:
                raise SystemExit("demo: creating %s: %d %s" % (md["name"], st, pod.get("message")))
            for w in warnings:
                say("Warning: " + w)
            pods.append(pod)
            sim.client.call("ip", namespace=NS, name=md["name"], ip="10.64.7.%d" % (10 + i))
            sim.client.call("phase", namespace=NS, name=md["name"], phase="Running")
            sim.client.call("ready", namespace=NS, name=md["name"], ready=True)
        p0 = pods[0]
        trainer = next(c for c in p0["spec"]["containers"] if c["name"] == "trainer")
        say("pod %s as admitted (the injector's patch applied):" % p0["metadata"]["name"])
        say("  initContainers: %s" % ", ".join("%s%s" % (c["name"], " (native sidecar)" if c.get("restartPolicy") == "Always"
                                                          else "") for c in p0["spec"]["initContainers"]))
        say("  volumes:        %s" % ", ".join(v["name"] for v in p0["spec"]["volumes"]))
        say("  trainer mounts: %s" % ", ".join("%s%s" % (m["mountPath"], " (ro)" if m.get("readOnly") else "")
                                               for m in trainer.get("volumeMounts") or []))
        calls = [tuple(c[:2]) for c in sim.client.call("admission-calls")["calls"]]
        say("  admission: %s" % ", ".join("%d x %s %s" % (calls.count(c), c[0], c[1]) for c in sorted(set(calls))))

        # The kubelet's part for pod 0: the volumes, then tpumesh-init, then the sidecar.
        say()
        say("-- the kubelet runs pod %s's injected containers --" % p0["metadata"]["name"])
        vol, podinfo = os.path.join(work, "tpumesh"), os.path.join(work, "podinfo")
        os.makedirs(vol)
        os.makedirs(podinfo)
        with open(os.path.join(podinfo, "annotations"), "w") as f:  # the downward API's format
            f.write("\n".join('%s=%s' % (k, json.dumps(v)) for k, v in sorted(p0["metadata"]["annotations"].items())))
        remap = {"/var/run/tpumesh": vol, "/etc/podinfo": podinfo}

        def env_of(c, extra):
            e = {k: v for k, v in os.environ.items() if not k.startswith(("TPU", "MEGASCALE", "KUBE_GOOGLE"))}
            for k, v in container_env(c, p0).items():
                for a, b in remap.items():
                    v = v.replace(a, b)
                e[k] = v
            e.update(extra)
            return e
        init = next(c for c in p0["spec"]["initContainers"] if c["name"] == "tpumesh-init")
        gke = {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": HOSTS, "TPU_ACCELERATOR_TYPE": "v5litepod-16",
               "TPU_TOPOLOGY": "4x4", "TPUMESH_SKIP_INIT": "true"}
        r = subprocess.run(in_uts("first-job-0", [os.path.join(BUILD, "bin", init["args"][0])] + init["args"][1:]),
                           env=env_of(init, gke), capture_output=True, text=True)
        say("tpumesh-init: exit %d, %s" % (r.returncode, r.stderr.strip().splitlines()[-1].split("  ", 1)[-1]))
        if r.returncode != 0:
            raise SystemExit(r.stderr)
        side = next(c for c in p0["spec"]["initContainers"] if c["name"] == "tpumesh-sidecar")
        log = os.path.join(work, "sidecar.log")
        start([os.path.join(BUILD, "bin", side["args"][0])] + side["args"][1:],
              log, env_of(side, {"TPUMESH_APISERVER": sim.url, "TPUMESH_HTTP_ADDR": "127.0.0.1:0",
                                 "TPUMESH_GRPC_ADDR": "127.0.0.1:0"}))
        hport = port_from(log, "serving /healthz")
        deadline, code = time.monotonic() + 20 * SLOW, None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % hport, timeout=2) as rr:
                    code, text = rr.status, rr.read().decode().strip()
                    break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        say("tpumesh-sidecar: /readyz -> %s %s (the startup probe passes: the trainer may start)" % (code, text))
        for line in open(log):
            if re.search(r"expecting \d+ workers|published generation| (WARN|ERROR) ", line):
                say("  " + line.rstrip().split(" ", 1)[1])
        for line in open(os.path.join(work, "injector.log")):
            if re.search(r" (WARN|ERROR) ", line):
                say("  injector: " + line.rstrip().split(" ", 1)[1])
        cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
        r = subprocess.run(cmd, env=dict(os.environ, TPUMESH_DIR=vol), capture_output=True, text=True)
        say("the trainer (k8s/first-job.yaml's smoke test), exit %d:" % r.returncode)
        for line in (r.stdout + r.stderr).splitlines():
            say("  " + line)
        return 0 if r.returncode == 0 and code == 200 else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if sim:
            sim.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
