"""A node without a kubelet for the end-to-end tests (docs/e2e.md): registers a Node, schedules
pods onto it (the Binding API, as kube-scheduler does), gives each an IP of its own in
127.64.0.0/16 and runs the containers whose program is one of tpumesh's as local processes, the
way a kubelet would run them, and serves Services at their cluster IP (the job of kube-proxy).

What a pod gets, as from a kubelet:
  - volumes under <workdir>/pods/<ns>_<name>/<volume>: emptyDir, downwardAPI (annotations and
    labels files in the kubelet's format), secret, configMap, and the projected service-account
    volume the ServiceAccount admission adds (a real bound token from the TokenRequest API,
    ca.crt, namespace);
  - env from the container spec (values, fieldRefs, secretKeyRef, configMapKeyRef), with mount
    paths moved to those directories, the API server given as TPUMESH_APISERVER /
    TPUMESH_TOKEN_FILE / TPUMESH_CA_FILE (the in-cluster paths cannot be used by several pods
    on one host), and listen addresses (":9431") bound to the pod's IP;
  - its own source address: every tpumesh process runs with $BUILD/tests/podbind.so preloaded
    (tests/tools/podbind.c), so its TCP connections leave from the pod IP, not 127.0.0.1;
  - what GKE adds on a TPU node pool to containers requesting google.com/tpu (TPU_WORKER_ID,
    TPU_WORKER_HOSTNAMES, TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY) and TPUMESH_SKIP_INIT=true for
    tpumesh-init (there is no TPU here);
  - init containers in order (a native sidecar, restartPolicy Always, must pass its startup probe
    before the next starts), then the regular containers; a container whose program is not
    tpumesh's (the trainer) is Running without a process unless the test gives a runner for it;
  - the Ready condition from the readiness probes (httpGet), checked every
    min(periodSeconds, PROBE_PERIOD) seconds;
  - on deletion: SIGTERM to the processes, SIGKILL after the grace period, then the final
    delete (grace 0), as the kubelet does.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import threading
import time
import traceback
import urllib.request

import controlplane as cpmod
import kube
from tap import scaled

PODBIND = os.path.join(cpmod.BUILD, "tests", "podbind.so")

PROBE_PERIOD = 1.0
TPU_PROGRAMS = ("tpumesh-init", "tpumesh-sidecar", "tpumesh-injector")
# Variables and flags holding a listen address: ":PORT" and "0.0.0.0:PORT" are bound to the pod IP.
ADDR_VARS = ("TPUMESH_HTTP_ADDR", "TPUMESH_GRPC_ADDR", "TPUMESH_LISTEN")
ADDR_FLAGS = ("--http-addr", "--grpc-addr", "--listen")
DEFAULT_ADDRS = {"tpumesh-sidecar": {"TPUMESH_HTTP_ADDR": ":9431", "TPUMESH_GRPC_ADDR": ":9432"},
                 "tpumesh-injector": {"TPUMESH_LISTEN": ":9443", "TPUMESH_HTTP_ADDR": ":9431"}}

# GKE's accelerator node label -> the accelerator type prefix and chips per unit of its name.
GKE_ACCELERATORS = {"tpu-v5-lite-podslice": ("v5litepod", 1), "tpu-v5-lite-device": ("v5litepod", 1),
                    "tpu-v6e-slice": ("v6e", 1), "tpu-v4-podslice": ("v4", 2), "tpu-v5p-slice": ("v5p", 2)}


def annotations_file(d):
    """The kubelet's downward-API format: sorted key="value" lines (Go %q quoting)."""
    return "\n".join("%s=%s" % (k, json.dumps(d[k])) for k in sorted(d))


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class PodRun:
    """One pod on the node: its IP, directories, processes and status."""

    def __init__(self, node, pod):
        self.node = node
        self.pod = pod
        self.ns = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.key = "%s/%s" % (self.ns, self.name)
        self.dir = os.path.join(node.dir, "pods", "%s_%s_%s" % (self.ns, self.name, self.uid[:8]))
        self.ip = None
        self.procs = {}        # container name -> Proc
        self.exits = {}        # container name -> exit code of a finished init container
        self.ready = {}        # container name -> bool
        self.started = set()   # containers started (status running)
        self.deleted = threading.Event()
        self.status_lock = threading.Lock()
        self.phase = "Pending"
        self.failed_reason = None
        self.last_ready = False
        self.terminating = False
        self.start_time = now_rfc3339()
        self.thread = threading.Thread(target=self._run, name="pod " + self.key, daemon=True)

    # ---- environment -----------------------------------------------------------------------
    def mounts_for(self, c):
        return {m["mountPath"]: os.path.join(self.dir, "vol", m["name"]) for m in c.get("volumeMounts") or []}

    def remap(self, c, value):
        for src, dst in sorted(self.mounts_for(c).items(), key=lambda kv: -len(kv[0])):
            if value == src or value.startswith(src.rstrip("/") + "/"):
                return dst + value[len(src.rstrip("/")):]
        return value

    def field(self, fp):
        md = self.pod["metadata"]
        m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", fp)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        simple = {"metadata.name": md["name"], "metadata.namespace": md["namespace"], "metadata.uid": md["uid"],
                  "spec.nodeName": self.node.name, "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
                  "status.podIP": self.ip, "status.hostIP": "127.0.0.1", "status.podIPs": self.ip,
                  "status.hostIPs": "127.0.0.1"}
        if fp in simple:
            return simple[fp]
        raise ValueError("fieldRef %s is not resolved by the e2e node" % fp)

    def env_for(self, c, program):
        env = {"PATH": "/usr/bin:/bin", "HOME": os.path.join(self.dir, "home")}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = self.remap(c, str(e["value"]))
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[e["name"]] = self.field(vf["fieldRef"]["fieldPath"])
                elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
                    ref = vf.get("secretKeyRef") or vf.get("configMapKeyRef")
                    res = "secrets" if "secretKeyRef" in vf else "configmaps"
                    obj = self.node.api.get(res, ref["name"], self.ns)
                    data = obj.get("data") or {}
                    val = data.get(ref["key"], "")
                    if res == "secrets":
                        import base64
                        val = base64.b64decode(val).decode()
                    env[e["name"]] = val
                elif "resourceFieldRef" in vf:
                    continue
            else:
                env[e["name"]] = ""
        for k, v in DEFAULT_ADDRS.get(program, {}).items():
            env.setdefault(k, v)
        for k in ADDR_VARS:
            if k in env:
                env[k] = self.bind_addr(env[k])
        sa = self.sa_dir()
        if sa and program in ("tpumesh-sidecar", "tpumesh-injector"):
            env.setdefault("TPUMESH_APISERVER", self.node.cp.server)
            env.setdefault("TPUMESH_TOKEN_FILE", os.path.join(sa, "token"))
            env.setdefault("TPUMESH_CA_FILE", os.path.join(sa, "ca.crt"))
        if self.requests_tpu(c):
            env.update(self.node.tpu_env(self))
        if program == "tpumesh-init":
            env["TPUMESH_SKIP_INIT"] = "true"
        if os.path.exists(PODBIND):
            # The pod's connections leave from its IP, as a pod's do (podbind.so): a relay
            # admits its subscribers by pod IP, and from 127.0.0.1 every one would look like
            # the relay's own pod.
            env["LD_PRELOAD"] = PODBIND
            env["TPUMESH_POD_IP"] = self.ip
        env.update(self.node.extra_env(self, c) or {})
        return env

    def bind_addr(self, v):
        m = re.match(r"^(|0\.0\.0\.0|\[::\]):(\d+)$", v)
        return "%s:%s" % (self.ip, m.group(2)) if m else v

    def requests_tpu(self, c):
        res = c.get("resources") or {}
        return any("google.com/tpu" in (res.get(k) or {}) for k in ("requests", "limits"))

    def sa_dir(self):
        for v in self.pod["spec"].get("volumes") or []:
            if v.get("projected") and any("serviceAccountToken" in s for s in v["projected"].get("sources", [])):
                return os.path.join(self.dir, "vol", v["name"])
        return None

    # ---- volumes ----------------------------------------------------------------------------
    def write_downward(self):
        for v in self.pod["spec"].get("volumes") or []:
            if "downwardAPI" in v:
                d = os.path.join(self.dir, "vol", v["name"])
                os.makedirs(d, exist_ok=True)
                for it in v["downwardAPI"].get("items") or []:
                    fp = it["fieldRef"]["fieldPath"]
                    md = self.pod["metadata"]
                    if fp in ("metadata.annotations", "metadata.labels"):
                        text = annotations_file(md.get(fp.split(".")[1]) or {})
                    else:
                        text = self.field(fp)
                    tmp = os.path.join(d, "." + it["path"] + ".tmp")
                    with open(tmp, "w") as f:
                        f.write(text)
                    os.replace(tmp, os.path.join(d, it["path"]))

    def wait_object(self, res, name):
        """A Secret or ConfigMap the pod mounts; like the kubelet, wait until it exists."""
        while not self.deleted.is_set():
            try:
                return self.node.api.get(res, name, self.ns)
            except kube.ApiError as e:
                if e.status != 404:
                    raise
            self.deleted.wait(0.5)
        return None

    def write_volumes(self):
        """False when the pod was deleted while waiting for a Secret or ConfigMap."""
        self.write_downward()
        for v in self.pod["spec"].get("volumes") or []:
            d = os.path.join(self.dir, "vol", v["name"])
            os.makedirs(d, exist_ok=True)
            if "secret" in v or "configMap" in v:
                src = v.get("secret") or v.get("configMap")
                res = "secrets" if "secret" in v else "configmaps"
                name = src.get("secretName") or src.get("name")
                obj = self.wait_object(res, name)
                if obj is None:
                    return False
                import base64
                for k, val in (obj.get("data") or {}).items():
                    with open(os.path.join(d, k), "wb") as f:
                        f.write(base64.b64decode(val) if res == "secrets" else val.encode())
            elif "projected" in v:
                for s in v["projected"].get("sources", []):
                    if "serviceAccountToken" in s:
                        tok = self.node.cp.token(self.ns, self.pod["spec"].get("serviceAccountName", "default"),
                                                 pod=self.pod, seconds=s["serviceAccountToken"].get("expirationSeconds", 3607))
                        with open(os.path.join(d, s["serviceAccountToken"].get("path", "token")), "w") as f:
                            f.write(tok)
                    elif "configMap" in s and s["configMap"]["name"] == "kube-root-ca.crt":
                        shutil.copy(self.node.cp.pki.ca, os.path.join(d, "ca.crt"))
                    elif "downwardAPI" in s:
                        with open(os.path.join(d, "namespace"), "w") as f:
                            f.write(self.ns)
        return True

    # ---- status ------------------------------------------------------------------------------
    def container_status(self, c, init):
        name = c["name"]
        st = {"name": name, "image": c.get("image", ""), "imageID": "", "restartCount": 0,
              "ready": bool(self.ready.get(name)), "started": name in self.started}
        if name in self.exits:
            code = self.exits[name]
            st["state"] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                          "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}}
            st["started"] = False
        elif name in self.started:
            st["state"] = {"running": {"startedAt": now_rfc3339()}}
        else:
            st["state"] = {"waiting": {"reason": "PodInitializing"}}
        if init and name in self.exits:
            st["ready"] = self.exits[name] == 0
        return st

    def push_status(self):
        spec = self.pod["spec"]
        with self.status_lock:
            inits = spec.get("initContainers") or []
            conts = spec.get("containers") or []
            init_done = all(c["name"] in self.exits or (c.get("restartPolicy") == "Always" and c["name"] in self.started)
                            for c in inits)
            side_ready = all(self.ready.get(c["name"]) for c in inits if c.get("restartPolicy") == "Always")
            cont_ready = all(self.ready.get(c["name"]) for c in conts)
            ready = self.phase == "Running" and init_done and side_ready and cont_ready
            cond = lambda t, ok: {"type": t, "status": "True" if ok else "False", "lastProbeTime": None,  # noqa: E731
                                  "lastTransitionTime": now_rfc3339()}
            status = {"phase": self.phase, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                      "podIP": self.ip, "podIPs": [{"ip": self.ip}], "startTime": self.start_time,
                      "conditions": [cond("PodScheduled", True), cond("Initialized", init_done),
                                     cond("ContainersReady", self.phase == "Running" and cont_ready and side_ready),
                                     cond("Ready", ready)],
                      "initContainerStatuses": [self.container_status(c, True) for c in inits],
                      "containerStatuses": [self.container_status(c, False) for c in conts]}
            if self.failed_reason:
                status["reason"] = "Error"
                status["message"] = self.failed_reason
            try:
                self.node.api.patch("pods", self.name, {"status": status}, self.ns, sub="status", kind="strategic")
            except kube.ApiError as e:
                if e.status != 404:
                    self.node.note("status of %s: %s" % (self.key, e))
            self.last_ready = ready

    # ---- processes -----------------------------------------------------------------------------
    def program_of(self, c):
        args = (c.get("command") or []) + (c.get("args") or [])
        if args and os.path.basename(args[0]) in TPU_PROGRAMS:
            return os.path.basename(args[0]), args[1:]
        return None, None

    def start_container(self, c):
        program, argv = self.program_of(c)
        runner = self.node.runners.get(c["name"])
        if program is None and runner is None:
            return None
        if program:
            env = self.env_for(c, program)
            argv = [self.bind_flag(a) for a in argv]
            cmd = [os.path.join(self.node.bin_dir, program)] + argv
            if self.node.wrap:
                cmd = self.node.wrap + cmd
        else:
            cmd, env = runner(self, c)
        log = os.path.join(self.dir, "%s.log" % c["name"])
        p = cpmod.Proc("%s/%s" % (self.key, c["name"]), cmd, log, env=env, cwd=self.dir)
        self.procs[c["name"]] = p
        return p

    def bind_flag(self, a):
        for f in ADDR_FLAGS:
            if a.startswith(f + "="):
                return f + "=" + self.bind_addr(a[len(f) + 1:])
        return a

    def probe(self, c, kind):
        pr = c.get(kind)
        if not pr:
            return None
        hg = pr.get("httpGet")
        if not hg:
            return True  # exec/tcp probes of containers without processes: pass
        port = hg["port"]
        if isinstance(port, str):
            port = next((p["containerPort"] for p in c.get("ports") or [] if p.get("name") == port), None)
        url = "http://%s:%s%s" % (self.ip, port, hg.get("path", "/"))
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "kube-probe/1.35", "Accept": "*/*"})
            with urllib.request.urlopen(req, timeout=max(1, pr.get("timeoutSeconds", 1)) * cpmod_slow()) as r:
                return 200 <= r.status < 400
        except Exception:  # noqa: BLE001 - refused, timeout or an error status
            return False

    def container_ready(self, c):
        if c["name"] in self.procs:
            if not self.procs[c["name"]].alive():
                return False
            r = self.probe(c, "readinessProbe")
            return True if r is None else r
        return True

    def _run(self):
        try:
            self._lifecycle()
        except Exception:  # noqa: BLE001 - a harness bug: record it, never leave the pod half-run
            self.node.note("pod %s: %s" % (self.key, traceback.format_exc()))
        finally:
            for name, p in list(self.procs.items()):
                p.stop(timeout=scaled(10))
            self.node.release(self)

    def _lifecycle(self):
        spec = self.pod["spec"]
        os.makedirs(os.path.join(self.dir, "home"), exist_ok=True)
        self.push_status()
        if not self.write_volumes():
            return
        for c in spec.get("initContainers") or []:
            if self.deleted.is_set():
                return
            sidecar = c.get("restartPolicy") == "Always"
            attempt = 0
            while True:
                p = self.start_container(c)
                self.started.add(c["name"])
                if p is None:
                    if not sidecar:
                        self.exits[c["name"]] = 0
                    self.ready[c["name"]] = True
                    break
                self.exits.pop(c["name"], None)
                self.push_status()
                if sidecar:
                    # The next container starts once the startup probe passed.
                    while not self.deleted.is_set() and p.alive():
                        if self.probe(c, "startupProbe") in (True, None):
                            break
                        time.sleep(min(PROBE_PERIOD, (c.get("startupProbe") or {}).get("periodSeconds", 1)))
                    if not p.alive():
                        self.node.note("%s: sidecar %s exited %s:\n%s" % (self.key, c["name"], p.p.returncode, p.tail()))
                    break
                while p.alive() and not self.deleted.is_set():
                    time.sleep(0.05)
                if self.deleted.is_set():
                    return
                code = p.p.returncode
                self.exits[c["name"]] = code
                self.started.discard(c["name"])
                if code == 0:
                    break
                self.node.note("%s: init container %s exited %d:\n%s" % (self.key, c["name"], code, p.tail(5)))
                if spec.get("restartPolicy", "Always") == "Never":
                    self.phase = "Failed"
                    self.failed_reason = "init container %s exited %d" % (c["name"], code)
                    self.push_status()
                    self.node.failed_pods[self.key] = self
                    self.deleted.wait()
                    return
                attempt += 1
                self.push_status()
                if self.deleted.wait(min(10 * 2 ** (attempt - 1), 60)):
                    return
        for c in spec.get("containers") or []:
            self.start_container(c)
            self.started.add(c["name"])
        self.phase = "Running"
        self.push_status()
        # The kubelet's probe loop.
        all_c = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"] + \
            list(spec.get("containers") or [])
        last = None
        # A pod whose regular containers are all processes (the chart's helm test pod) ends
        # when they have: Succeeded when every one exited 0, else Failed.
        procs = [c["name"] for c in spec.get("containers") or [] if c["name"] in self.procs]
        finite = procs and len(procs) == len(spec.get("containers") or [])
        while not self.deleted.is_set():
            for c in all_c:
                self.ready[c["name"]] = self.container_ready(c)
            if finite and not any(self.procs[n].alive() for n in procs):
                for n in procs:
                    self.exits[n] = self.procs[n].p.returncode
                    self.ready[n] = False
                bad = [n for n in procs if self.exits[n] != 0]
                self.phase = "Failed" if bad else "Succeeded"
                if bad:
                    self.failed_reason = "container %s exited %d" % (bad[0], self.exits[bad[0]])
                for c in spec.get("initContainers") or []:  # sidecars stop with the pod
                    if c.get("restartPolicy") == "Always" and c["name"] in self.procs:
                        self.procs[c["name"]].stop(timeout=scaled(10))
                self.push_status()
                self.deleted.wait()
                return
            state = tuple(sorted(self.ready.items()))
            if state != last:
                self.push_status()
                last = state
            self.deleted.wait(PROBE_PERIOD)

    def terminate(self, grace):
        """The kubelet's part of a graceful delete: SIGTERM, SIGKILL after grace, final delete."""
        procs = list(self.procs.values())
        for p in procs:
            if p.alive():
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + grace
        while time.monotonic() < end and any(p.alive() for p in procs):
            time.sleep(0.05)
        self.deleted.set()
        for p in procs:
            p.stop(timeout=1)
        try:
            self.node.api.request("DELETE", kube.path_of("pods", self.ns, self.name),
                                  body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                        "preconditions": {"uid": self.uid}})
        except kube.ApiError as e:
            if e.status not in (404, 409):
                self.node.note("final delete of %s: %s" % (self.key, e))


def cpmod_slow():
    from tap import SLOWDOWN
    return SLOWDOWN


class Node:
    """node = Node(cp).start(); node.pods[ns/name] is a PodRun; node.stop() at the end."""

    def __init__(self, cp, name="e2e-node", labels=None, bin_dir=None, runners=None, extra_env=None):
        self.cp = cp
        self.api = cp.admin
        self.name = name
        self.labels = labels or {}
        self.dir = os.path.join(cp.dir, "node-" + name)
        self.bin_dir = bin_dir or os.path.join(cpmod.BUILD, "bin")
        wrap = os.environ.get("WRAP", "")
        self.wrap = wrap.split() if wrap else []
        self.runners = runners or {}
        self.extra_env = extra_env or (lambda pod, c: {})
        self.pods = {}
        self.failed_pods = {}
        self.notes = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.used_ips = set()
        # Pod IPs: a random /20 of 127.64.0.0/16 (others on this machine use 127.64.x.y too).
        self.ip_base = random.randrange(0, 16) * 16
        self.next_ip = 0
        self.proxies = {}
        self.threads = []
        self.watch = None

    def note(self, msg):
        with self.lock:
            self.notes.append(msg)
        if os.environ.get("E2E_VERBOSE"):
            print("# node: " + msg.replace("\n", "\n#   "), flush=True)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64"}
        labels.update(self.labels)
        self.api.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels}})
        cap = {"cpu": "64", "memory": "256Gi", "pods": "1000", "google.com/tpu": "1000",
               "ephemeral-storage": "100Gi"}
        self.api.patch("nodes", self.name, {"status": {
            "capacity": cap, "allocatable": cap,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "e2e node harness", "lastHeartbeatTime": now_rfc3339(),
                            "lastTransitionTime": now_rfc3339()}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.name}],
            "nodeInfo": {"kubeletVersion": cpmod.K8S_VERSION, "architecture": "amd64", "operatingSystem": "linux",
                         "containerRuntimeVersion": "e2e://0", "kernelVersion": "", "osImage": "",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}},
            sub="status")
        t = threading.Thread(target=self._pod_loop, name="node pods", daemon=True)
        t.start()
        self.threads.append(t)
        t = threading.Thread(target=self._service_loop, name="node services", daemon=True)
        t.start()
        self.threads.append(t)
        cpmod.at_exit(self.stop)
        return self

    def stop(self):
        if self.stopping.is_set():
            return
        self.stopping.set()
        if self.watch:
            self.watch.close()
        for pr in list(self.pods.values()):
            pr.deleted.set()
        for pr in list(self.pods.values()):
            pr.thread.join(scaled(15))
        for lst in list(self.proxies.values()):
            lst.close()
        for t in self.threads:
            t.join(5)

    def release(self, pr):
        with self.lock:
            if self.pods.get(pr.key) is pr:
                del self.pods[pr.key]
            self.used_ips.discard(pr.ip)

    # ---- IPs ----------------------------------------------------------------------------------
    def alloc_ip(self):
        with self.lock:
            for _ in range(4096):
                self.next_ip += 1
                n = self.next_ip % (16 * 256)
                third, fourth = self.ip_base + n // 256, n % 256
                if fourth in (0, 255):
                    continue
                ip = "127.64.%d.%d" % (third, fourth)
                if ip in self.used_ips or not self._ports_free(ip):
                    continue
                self.used_ips.add(ip)
                return ip
        raise RuntimeError("no free pod IP in 127.64.%d.0/20" % self.ip_base)

    @staticmethod
    def _ports_free(ip):
        for port in (9431, 9432, 9443, 10000):
            s = socket.socket()
            try:
                s.bind((ip, port))
            except OSError:
                return False
            finally:
                s.close()
        return True

    # ---- the scheduler and the kubelet's pod sync ----------------------------------------
    def _pod_loop(self):
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    lst = self.api.list("pods")
                    rv = lst["metadata"]["resourceVersion"]
                    for p in lst["items"]:
                        self._pod_event("ADDED", p)
                    # pods deleted while the watch was down
                    live = {p["metadata"]["uid"] for p in lst["items"]}
                    for pr in list(self.pods.values()):
                        if pr.uid not in live:
                            pr.deleted.set()
                self.watch = self.api.watch("pods", resourceVersion=rv, timeout=60)
                for typ, obj in self.watch:
                    if typ == "ERROR":
                        rv = None
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if typ != "BOOKMARK":
                        self._pod_event(typ, obj)
            except Exception as e:  # noqa: BLE001 - API down (a restart scenario): retry
                if self.stopping.is_set():
                    return
                if isinstance(e, kube.ApiError) and e.status == 410:
                    rv = None
                self.stopping.wait(0.5)

    def _pod_event(self, typ, pod):
        md, spec = pod["metadata"], pod["spec"]
        key = "%s/%s" % (md["namespace"], md["name"])
        if typ == "DELETED":
            pr = self.pods.get(key)
            if pr and pr.uid == md["uid"]:
                pr.deleted.set()
            return
        if not spec.get("nodeName"):
            if not md.get("deletionTimestamp") and spec.get("schedulerName", "default-scheduler") == "default-scheduler":
                self._bind(pod)
            return
        if spec["nodeName"] != self.name:
            return
        pr = self.pods.get(key)
        if pr and pr.uid != md["uid"]:
            pr.deleted.set()  # an older pod of that name
            pr = None
        if md.get("deletionTimestamp"):
            if pr and not pr.terminating:
                pr.terminating = True
                grace = md.get("deletionGracePeriodSeconds") or 0
                threading.Thread(target=pr.terminate, args=(grace,), daemon=True).start()
            elif not pr and pod.get("status", {}).get("phase") in ("Succeeded", "Failed", "Pending", None):
                # nothing runs for it here: finish the deletion
                try:
                    self.api.request("DELETE", kube.path_of("pods", md["namespace"], md["name"]),
                                     body={"gracePeriodSeconds": 0, "preconditions": {"uid": md["uid"]}})
                except kube.ApiError:
                    pass
            return
        if pr:
            old = pr.pod["metadata"]
            pr.pod["metadata"] = md
            if (old.get("annotations"), old.get("labels")) != (md.get("annotations"), md.get("labels")):
                pr.write_downward()  # the kubelet updates downward-API files
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        pr = PodRun(self, pod)
        pr.ip = self.alloc_ip()
        with self.lock:
            self.pods[key] = pr
        pr.thread.start()

    def _bind(self, pod):
        md = pod["metadata"]
        try:
            self.api.create("pods", {"apiVersion": "v1", "kind": "Binding",
                                     "metadata": {"name": md["name"], "uid": md["uid"]},
                                     "target": {"apiVersion": "v1", "kind": "Node", "name": self.name}},
                            namespace=md["namespace"], name=md["name"], sub="binding")
        except kube.ApiError as e:
            if e.status not in (404, 409):
                self.note("bind %s/%s: %s" % (md["namespace"], md["name"], e))

    # ---- GKE's TPU variables --------------------------------------------------------------
    def tpu_env(self, pr):
        """TPU_* as GKE sets them on a TPU VM node pool: the slice's hosts from the pod's Job
        (Indexed Job or a JobSet's child Job), its worker ID from the completion index, the
        accelerator type and topology from the node selectors."""
        pod = pr.pod
        md, spec = pod["metadata"], pod["spec"]
        sel = spec.get("nodeSelector") or {}
        env = {}
        topo = sel.get("cloud.google.com/gke-tpu-topology")
        acc = sel.get("cloud.google.com/gke-tpu-accelerator")
        if topo and acc in GKE_ACCELERATORS:
            prefix, per_chip = GKE_ACCELERATORS[acc]
            chips = 1
            for d in topo.split("x"):
                chips *= int(d)
            env["TPU_ACCELERATOR_TYPE"] = "%s-%d" % (prefix, chips * per_chip)
            env["TPU_TOPOLOGY"] = topo
        idx = (md.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        job = (md.get("labels") or {}).get("batch.kubernetes.io/job-name")
        if idx is not None and job and spec.get("subdomain"):
            try:
                j = self.api.get("jobs", job, md["namespace"])
                n = j["spec"].get("completions") or j["spec"].get("parallelism") or 1
                env["TPU_WORKER_ID"] = idx
                env["TPU_WORKER_HOSTNAMES"] = ",".join("%s-%d.%s" % (job, i, spec["subdomain"]) for i in range(n))
            except kube.ApiError as e:
                self.note("tpu env of %s: %s" % (pr.key, e))
        return env

    # ---- Services at their cluster IP (kube-proxy's job) --------------------------------
    def _service_loop(self):
        while not self.stopping.is_set():
            try:
                want = {}
                for s in self.api.list("services")["items"]:
                    ip = s["spec"].get("clusterIP")
                    if not ip or ip == "None" or not s["spec"].get("selector"):
                        continue
                    for port in s["spec"].get("ports") or []:
                        want[(ip, port["port"])] = (s, port)
                for k in list(self.proxies):
                    if k not in want:
                        self.proxies.pop(k).close()
                for k, (s, port) in want.items():
                    if k in self.proxies:
                        self.proxies[k].service = s
                    else:
                        try:
                            self.proxies[k] = ServiceProxy(self, s, port)
                        except OSError as e:
                            self.note("service %s/%s %s:%d: %s" % (s["metadata"]["namespace"], s["metadata"]["name"],
                                                                   k[0], k[1], e))
            except Exception:  # noqa: BLE001 - API down: try again
                pass
            self.stopping.wait(0.5)

    def endpoints(self, service, port):
        """Ready pods of this node matching the Service's selector, with the target port."""
        sel = service["spec"]["selector"]
        out = []
        for pr in list(self.pods.values()):
            labels = pr.pod["metadata"].get("labels") or {}
            if pr.pod["metadata"]["namespace"] != service["metadata"]["namespace"]:
                continue
            if any(labels.get(k) != v for k, v in sel.items()):
                continue
            if not pr.last_ready:
                continue
            tp = port.get("targetPort", port["port"])
            if isinstance(tp, str):
                tp = next((p["containerPort"] for c in pr.pod["spec"].get("containers", [])
                           for p in c.get("ports") or [] if p.get("name") == tp), None)
                if tp is None:
                    continue
            out.append((pr.ip, tp))
        return out


class ServiceProxy:
    """Listens on a Service's clusterIP:port and forwards each connection to a ready endpoint."""

    def __init__(self, node, service, port):
        self.node = node
        self.service = service
        self.port = port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((service["spec"]["clusterIP"], port["port"]))
        self.sock.listen(64)
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        eps = self.node.endpoints(self.service, self.port)
        if not eps:
            c.close()  # no endpoint: the connection is refused, as with kube-proxy's REJECT
            return
        ip, port = random.choice(eps)
        try:
            u = socket.create_connection((ip, port), timeout=5)
        except OSError:
            c.close()
            return
        u.settimeout(None)

        def pipe(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        t = threading.Thread(target=pipe, args=(u, c), daemon=True)
        t.start()
        pipe(c, u)
        t.join(60)
        c.close()
        u.close()
