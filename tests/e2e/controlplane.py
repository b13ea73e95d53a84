"""Start a real Kubernetes control plane on 127.0.0.1 for the end-to-end tests (docs/e2e.md):
etcd, kube-apiserver, kube-controller-manager and, when asked, the JobSet controller, all built
from the pins in tests/e2e/cluster/go.mod by scripts/e2e-deps.sh into $BUILD/e2e/.

    cp = ControlPlane(jobset=True)
    cp.start()          # raises Unavailable when the binaries are not built, StartError on failure
    cp.admin            # kube.Client with a system:masters client certificate
    cp.kubectl("get", "pods", "-A")
    cp.stop()           # also at exit, on SIGTERM/SIGINT; children die with the test (PDEATHSIG)

Every port is a free one on 127.0.0.1; Service cluster IPs come from a random /24 of 127.96.0.0/11
(Services are reached through the node harness's service proxy, node.py). Certificates are made
with openssl: one CA signs the API server's serving certificate, the client certificates and the
webhook serving certificates the tests need."""
import atexit
import ctypes
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
E2E = os.path.join(BUILD, "e2e")
BIN = os.path.join(E2E, "e2e-cluster")
JOBSET_BIN = os.path.join(E2E, "jobset-controller")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)
from tap import scaled  # noqa: E402
import kube  # noqa: E402

K8S_VERSION = "v1.35.4"


class Unavailable(Exception):
    """A dependency of the e2e tests is missing (the test reports it as skipped)."""


class StartError(Exception):
    pass


# ---- processes: stopped at exit, and killed by the kernel if the test process dies ----------
_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1
ALL_PROCS = []
_exit_hooks = []


def _pdeathsig():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setpgrp()  # its own group: stopping it stops what it started


def _stop_everything():
    for hook in reversed(_exit_hooks):
        try:
            hook()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    for p in reversed(ALL_PROCS):
        p.stop(timeout=5)


atexit.register(_stop_everything)


def _on_signal(signum, _frame):
    sys.exit(128 + signum)  # runs atexit (tests/run.sh's timeout sends SIGTERM)


for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def at_exit(fn):
    """Run fn at exit before the processes are stopped (the node harness's stop)."""
    _exit_hooks.append(fn)


class Proc:
    """A child process with its output in a log file. Only started from long-lived threads
    (the main thread or a harness thread): PDEATHSIG fires when the starting thread ends."""

    def __init__(self, name, argv, log, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.log = log
        self.logf = open(log, "ab")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
                                  env=env, cwd=cwd, preexec_fn=_pdeathsig)
        self.pid = self.p.pid
        ALL_PROCS.append(self)

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=10, sig=signal.SIGTERM):
        """Stop the process (and its group); returns its exit status."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(timeout=10)
        try:
            self.logf.close()
        except OSError:
            pass
        if self in ALL_PROCS:
            ALL_PROCS.remove(self)
        return self.p.returncode

    def tail(self, n=20):
        try:
            with open(self.log, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def text(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- certificates ------------------------------------------------------------------------
class PKI:
    """A CA and the certificates it signs, made with the openssl command (EC P-256)."""

    def __init__(self, d):
        self.d = d
        os.makedirs(d, exist_ok=True)
        self.ca_key = os.path.join(d, "ca.key")
        self.ca = os.path.join(d, "ca.crt")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", self.ca_key, "-out", self.ca, "-days", "2", "-subj", "/CN=tpumesh-e2e-ca",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def _run(self, *args):
        r = subprocess.run(["openssl"] + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            raise StartError("openssl %s failed: %s" % (args[0], r.stderr.strip()[-400:]))

    def issue(self, name, cn, org=None, dns=(), ips=(), server=False, client=False):
        """Write <name>.crt/.key signed by the CA; returns (cert, key)."""
        crt = os.path.join(self.d, name + ".crt")
        key = os.path.join(self.d, name + ".key")
        subj = "/CN=" + cn + ("/O=" + org if org else "")
        usage = ",".join(([] if not server else ["serverAuth"]) + ([] if not client else ["clientAuth"]))
        args = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", crt, "-days", "2", "-subj", subj, "-CA", self.ca, "-CAkey", self.ca_key,
                "-addext", "basicConstraints=critical,CA:FALSE",
                "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
                "-addext", "extendedKeyUsage=" + usage]
        sans = ["DNS:" + d for d in dns] + ["IP:" + i for i in ips]
        if sans:
            args += ["-addext", "subjectAltName=" + ",".join(sans)]
        self._run(*args)
        return crt, key

    def keypair(self, name):
        """An EC key and its public half (the service-account signing key)."""
        key = os.path.join(self.d, name + ".key")
        pub = os.path.join(self.d, name + ".pub")
        self._run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key)
        self._run("ec", "-in", key, "-pubout", "-out", pub)
        return key, pub


def kubeconfig(path, server, ca, cert=None, key=None, token=None):
    user = {"client-certificate": cert, "client-key": key} if cert else {"token": token}
    import json
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
           "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": ca}}],
           "users": [{"name": "e2e", "user": user}],
           "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}]}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)  # JSON is YAML
    return path


def need_binaries(jobset=False):
    missing = [b for b in [BIN] + ([JOBSET_BIN] if jobset else []) if not os.access(b, os.X_OK)]
    if missing:
        raise Unavailable("missing %s: run make e2e-deps (builds the pinned control plane, ~15 min cold)"
                          % ", ".join(missing))
    if shutil.which("openssl") is None:
        raise Unavailable("openssl is missing: run make deps")


# ---- the control plane -------------------------------------------------------------------
KCM_CONTROLLERS = ["job-controller", "statefulset-controller", "deployment-controller",
                   "replicaset-controller", "endpointslice-controller", "garbage-collector-controller",
                   "serviceaccount-token-controller", "serviceaccount-controller", "namespace-controller",
                   "root-ca-certificate-publisher-controller"]


class ControlPlane:
    def __init__(self, jobset=False, workdir=None, apiserver_args=(), log=None):
        need_binaries(jobset)
        self.jobset = jobset
        self.keep = bool(os.environ.get("E2E_KEEP"))
        self.dir = workdir or tempfile.mkdtemp(prefix="tpumesh-e2e-")
        self.extra_api_args = list(apiserver_args)
        self.log = log or (lambda msg: print("# " + msg, flush=True))
        self.procs = {}
        # Service cluster IPs: a random /24 of 127.96.0.0/11, so that two clusters on one machine
        # (two helpers, a test and a demo) do not share addresses.
        self.service_cidr = "127.%d.%d.0/24" % (random.randint(96, 127), random.randint(0, 255))
        self.kubernetes_service_ip = self.service_cidr.rsplit(".", 1)[0] + ".1"

    # paths
    def p(self, *parts):
        return os.path.join(self.dir, *parts)

    def start(self):
        t0 = time.monotonic()
        at_exit(self.stop)  # after the node's stop (hooks run last first): processes, then the directory
        self.pki = PKI(self.p("pki"))
        pki = self.pki
        self.api_port = free_port()
        self.server = "https://127.0.0.1:%d" % self.api_port
        self.api_crt, self.api_key = pki.issue(
            "apiserver", "kube-apiserver", server=True,
            dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"], ips=["127.0.0.1", self.kubernetes_service_ip])
        self.admin_crt, self.admin_key = pki.issue("admin", "e2e-admin", org="system:masters", client=True)
        kcm_crt, kcm_key = pki.issue("kcm", "system:kube-controller-manager", client=True)
        self.sa_key, self.sa_pub = pki.keypair("sa")
        self.admin_kubeconfig = kubeconfig(self.p("admin.kubeconfig"), self.server, pki.ca,
                                           self.admin_crt, self.admin_key)
        kcm_kubeconfig = kubeconfig(self.p("kcm.kubeconfig"), self.server, pki.ca, kcm_crt, kcm_key)
        self.admin = kube.Client("127.0.0.1", self.api_port, pki.ca, self.admin_crt, self.admin_key)

        self._start_etcd()
        self._start_apiserver()
        self.procs["kube-controller-manager"] = Proc(
            "kube-controller-manager",
            [BIN, "kube-controller-manager", "--kubeconfig=" + kcm_kubeconfig,
             "--controllers=" + ",".join(KCM_CONTROLLERS), "--leader-elect=false",
             "--use-service-account-credentials=true", "--service-account-private-key-file=" + self.sa_key,
             "--root-ca-file=" + pki.ca, "--secure-port=0", "--concurrent-job-syncs=5",
             "--v=1"], self.p("kube-controller-manager.log"))
        # The namespace the tests use most: its "default" ServiceAccount comes from the
        # serviceaccount controller, i.e. the controller manager is working.
        if not self._wait(lambda: self.admin.get("serviceaccounts", "default", "default"), 90):
            raise StartError("kube-controller-manager did not create default/default within %ds:\n%s"
                             % (scaled(90), self.procs["kube-controller-manager"].tail()))
        if self.jobset:
            self._start_jobset()
        self.log("control plane up in %.1f s (kubernetes %s, %s)" % (time.monotonic() - t0, K8S_VERSION, self.dir))
        return self

    def _wait(self, fn, timeout, interval=0.2):
        end = time.monotonic() + scaled(timeout)
        while True:
            try:
                v = fn()
                if v:
                    return v
            except Exception:  # noqa: BLE001 - not up yet
                pass
            for name, pr in self.procs.items():
                if not pr.alive():
                    raise StartError("%s exited with %s:\n%s" % (name, pr.p.returncode, pr.tail(30)))
            if time.monotonic() >= end:
                return None
            time.sleep(interval)

    def _start_etcd(self):
        self.etcd_port = free_port()
        peer = free_port()
        self.etcd_url = "http://127.0.0.1:%d" % self.etcd_port
        self.procs["etcd"] = Proc("etcd", [
            BIN, "etcd", "--name=e2e", "--data-dir=" + self.p("etcd"),
            "--listen-client-urls=" + self.etcd_url, "--advertise-client-urls=" + self.etcd_url,
            "--listen-peer-urls=http://127.0.0.1:%d" % peer,
            "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer,
            "--initial-cluster=e2e=http://127.0.0.1:%d" % peer,
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296"],
            self.p("etcd.log"))

        def healthy():
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as r:
                return b'"health":"true"' in r.read()
        if not self._wait(healthy, 30):
            raise StartError("etcd not healthy within %ds:\n%s" % (scaled(30), self.procs["etcd"].tail()))

    def apiserver_argv(self):
        pki = self.pki
        return [BIN, "kube-apiserver",
                "--etcd-servers=" + self.etcd_url,
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                "--secure-port=%d" % self.api_port,
                "--tls-cert-file=" + self.api_crt, "--tls-private-key-file=" + self.api_key,
                "--client-ca-file=" + pki.ca,
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file=" + self.sa_pub,
                "--service-account-signing-key-file=" + self.sa_key,
                "--service-cluster-ip-range=" + self.service_cidr,
                "--authorization-mode=Node,RBAC",
                # The default plugins (NamespaceLifecycle, ServiceAccount, PodSecurity,
                # MutatingAdmissionWebhook, ValidatingAdmissionWebhook, ResourceQuota, ...) plus
                # NodeRestriction, as a real cluster runs them.
                "--enable-admission-plugins=NodeRestriction",
                # Endpoint addresses may not be loopback, so neither the endpoint reconciler
                # nor aggregator routing can work here: webhooks and Services are reached at
                # their cluster IP (127.96.0.0/11), which node.py's service proxy serves.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=false", "--profiling=false",
                "--v=1"] + self.extra_api_args

    def _start_apiserver(self):
        self.procs["kube-apiserver"] = Proc("kube-apiserver", self.apiserver_argv(), self.p("kube-apiserver.log"))
        if not self._wait(lambda: self.admin.request("GET", "/readyz", raw=True) == "ok", 120):
            raise StartError("kube-apiserver not ready within %ds:\n%s"
                             % (scaled(120), self.procs["kube-apiserver"].tail()))

    def restart_apiserver(self, down_seconds=0.0):
        """Stop kube-apiserver (SIGTERM, as a rolling upgrade does), wait, start it again."""
        self.procs["kube-apiserver"].stop(timeout=30)
        time.sleep(down_seconds)
        self._start_apiserver()

    # ---- JobSet ----------------------------------------------------------------------------
    def _start_jobset(self):
        import yaml
        pki = self.pki
        cfgdir = os.path.join(E2E, "jobset-config")
        for f in sorted(os.listdir(cfgdir)):
            if f.startswith("jobset.x-k8s.io_"):
                with open(os.path.join(cfgdir, f)) as fh:
                    self.admin.apply(yaml.safe_load(fh))
        certdir = self.p("jobset-certs")
        os.makedirs(certdir, exist_ok=True)
        crt, key = pki.issue("jobset-webhook", "jobset-webhook", server=True, ips=["127.0.0.1"])
        shutil.copy(crt, os.path.join(certdir, "tls.crt"))
        shutil.copy(key, os.path.join(certdir, "tls.key"))
        wport, hport = free_port(), free_port()
        with open(self.p("jobset-config.yaml"), "w") as f:
            f.write("apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
                    "leaderElection:\n  leaderElect: false\n"
                    "internalCertManagement:\n  enable: false\n"
                    "webhook:\n  host: 127.0.0.1\n  port: %d\n  certDir: %s\n"
                    "metrics:\n  bindAddress: \"0\"\n"
                    "health:\n  healthProbeBindAddress: 127.0.0.1:%d\n" % (wport, certdir, hport))
        # The controller runs as cluster-admin (its own RBAC is not what these tests check).
        jcrt, jkey = pki.issue("jobset-client", "jobset-controller", org="system:masters", client=True)
        kc = kubeconfig(self.p("jobset.kubeconfig"), self.server, pki.ca, jcrt, jkey)
        self.procs["jobset-controller"] = Proc(
            "jobset-controller", [JOBSET_BIN, "--config=" + self.p("jobset-config.yaml"), "--kubeconfig=" + kc,
                                  "--zap-log-level=info", "--zap-devel=false"], self.p("jobset-controller.log"))

        def ready():
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % hport, timeout=2) as r:
                return r.status == 200
        if not self._wait(ready, 60):
            raise StartError("jobset-controller not ready:\n%s" % self.procs["jobset-controller"].tail())
        with open(os.path.join(cfgdir, "webhook-manifests.yaml")) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        paths = sorted({w["clientConfig"]["service"]["path"] for d in docs for w in d["webhooks"]})
        # Its /readyz turns ready when the webhook server listens, but the webhook handlers are
        # registered by another goroutine (main.go: go setupControllers, after the controllers):
        # until then every path is a 404, which the API server reports as "failed calling
        # webhook ... could not find the requested resource". Wait until each path answers.
        tls = ssl.create_default_context(cafile=pki.ca)

        def handlers():
            for path in paths:
                req = urllib.request.Request("https://127.0.0.1:%d%s" % (wport, path), data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(req, timeout=2, context=tls).close()
                except urllib.error.HTTPError as e:
                    if e.code == 404:
                        return False
            return True
        if not self._wait(handlers, 60):
            raise StartError("jobset-controller's webhook paths %s still answer 404 60 s after /readyz:\n%s"
                             % (", ".join(paths), self.procs["jobset-controller"].tail()))
        # Its webhooks as config/components/webhook declares them (with the kustomize patch
        # that limits the pod webhooks to JobSet pods), reached by URL with our CA.
        import base64
        with open(pki.ca, "rb") as f:
            ca_b64 = base64.b64encode(f.read()).decode()
        for d in docs:
            d["metadata"]["name"] = "jobset-" + d["metadata"]["name"]
            for w in d["webhooks"]:
                path = w["clientConfig"]["service"]["path"]
                w["clientConfig"] = {"url": "https://127.0.0.1:%d%s" % (wport, path), "caBundle": ca_b64}
                if w["name"] in ("mpod.kb.io", "vpod.kb.io"):
                    w["objectSelector"] = {"matchExpressions": [
                        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
            self.admin.apply(d)
        # A CRD is served a moment after it is created (the API server installs the handler of
        # the new group/version asynchronously): a JobSet created before then is a 404.
        def served():
            self.admin.request("GET", "/apis/jobset.x-k8s.io/v1alpha2/jobsets", query={"limit": "1"})
            return True
        if not self._wait(served, 60):
            raise StartError("the JobSet API (jobset.x-k8s.io/v1alpha2) is not served 60 s after its CRD was created")

    # ---- helpers ------------------------------------------------------------------------------
    def kubectl(self, *args, kubeconfig_path=None, input=None, timeout=60, check=False):
        env = dict(os.environ)
        env["KUBECONFIG"] = kubeconfig_path or self.admin_kubeconfig
        env["HOME"] = self.dir  # no ~/.kube cache shared with anything else
        r = subprocess.run([os.path.join(E2E, "bin", "kubectl")] + list(args), capture_output=True, text=True,
                           env=env, input=input, timeout=scaled(timeout))
        if check and r.returncode != 0:
            raise StartError("kubectl %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
        return r

    def token(self, namespace, sa, pod=None, seconds=3600, audience=None):
        """A bound service-account token from the TokenRequest API (bound to pod when given)."""
        spec = {"expirationSeconds": seconds}
        if audience:
            spec["audiences"] = [audience]
        if pod:
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"]["uid"]}
        tr = self.admin.create("serviceaccounts", {"apiVersion": "authentication.k8s.io/v1",
                                                   "kind": "TokenRequest", "spec": spec},
                               namespace=namespace, name=sa, sub="token")
        return tr["status"]["token"]

    def namespace(self, name, enforce="restricted", labels=None):
        """Create a namespace with Pod Security `enforce` (and warn/audit) at that level."""
        labels = dict(labels or {})
        if enforce:
            for mode in ("enforce", "warn", "audit"):
                labels["pod-security.kubernetes.io/" + mode] = enforce
                labels["pod-security.kubernetes.io/%s-version" % mode] = "latest"
        self.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        # wait for its default ServiceAccount (the controller manager makes it)
        self._wait(lambda: self.admin.get("serviceaccounts", "default", name), 30)
        return name

    def metrics(self):
        return self.admin.request("GET", "/metrics", raw=True)

    def stop(self):
        for name in ["jobset-controller", "kube-controller-manager", "kube-apiserver", "etcd"]:
            pr = self.procs.pop(name, None)
            if pr:
                pr.stop(timeout=15)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def wait_threads():
    """Threads other than the main one (for tests that check nothing is left)."""
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]


def ssl_context(ca):
    return ssl.create_default_context(cafile=ca)
