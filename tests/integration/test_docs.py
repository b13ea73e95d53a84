#!/usr/bin/python3
"""tests/integration/test_docs.py - the shell blocks of README.md, docs/*.md, k8s/README.md and
charts/tpumesh/README.md, run as a user would run them.

Every fenced block whose language is sh, bash, shell or console must be preceded by a marker
line (an HTML comment, invisible on GitHub) saying what it is:

  <!-- doctest: run [exit=N] [output="text"] [fixture=NAME] [background] [ready=URL] -->
      executed here, extracted from the Markdown at test time (never copied), with bash -e
      -o pipefail in a scratch directory where build/ is this build's output and k8s/,
      charts/, tests/, scripts/, VERSION are the repository's. The blocks of one file share
      that directory and run in document order, so a later block sees what an earlier one
      made. exit=N: the status it must end with (default 0); output="text": text its
      stdout+stderr must contain. background: a server (or a watcher) that is started and then
      checked: with ready=URL it must answer 200 there, then SIGTERM must end it with exit 0;
      without ready=, the fixture's poke runs and the block must end by itself with exit=N.
      fixture=NAME: set up first, see FIXTURES below.
  <!-- doctest: cluster -->       needs a Kubernetes cluster (kubectl, helm, docker push)
  <!-- doctest: manual REASON --> not run here, with the reason (e.g. `make test` itself)

Every block runs in a private network namespace (as root: unshare -n, loopback only), so the
fixed ports the documentation uses (6443, 9431, 9432) collide with nothing else on the machine.
Not root: the blocks that need a fixture with a fixed port are reported as skipped.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, done, fail, ok, scaled, wait  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("BUILD", "build")))
PY = os.environ.get("PY", "/usr/bin/python3")
SIM = os.path.join(ROOT, "tests", "sim", "kube-apiserver", "kube_apiserver_sim.py")
DOCS = ["README.md", "k8s/README.md", "charts/tpumesh/README.md"] + sorted(
    "docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^<!--\s*doctest:\s*(.*?)\s*-->\s*$")


def parse_blocks(rel):
    """[(line, lang, body, marker-or-None)] for every fenced block of a Markdown file."""
    lines = open(os.path.join(ROOT, rel), encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mm = MARKER.match(lines[k]) if k >= 0 else None
        out.append((start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", mm.group(1) if mm else None))
        i = j + 1
    return out


def parse_marker(text):
    """'run exit=2 output="x y" background' -> ('run', {'exit': '2', 'output': 'x y', 'background': True})"""
    kind, _, rest = text.partition(" ")
    opts = {}
    for m in re.finditer(r'(\w+)(?:=("([^"]*)"|\S+))?', rest):
        opts[m.group(1)] = m.group(3) if m.group(3) is not None else (m.group(2) or True)
    return kind, opts, rest


# ---- fixtures: what the documentation assumes exists around a block ----------------------

def sim_ctl(url, verb, **body):
    req = urllib.request.Request(url + "/_sim/" + verb, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=scaled(10)) as r:
        return json.load(r)


class Fixture:
    """setup(work, env) before the block; poke(work, env) while a background block runs;
    stop() after it."""
    fixed_ports = False

    def setup(self, work, env):
        pass

    def poke(self, work, env):
        pass

    def stop(self):
        pass


class KubeSim(Fixture):
    """An API server at http://127.0.0.1:6443 (the simulator) that accepts the bearer token in
    ./token, with an Indexed Job 'trainer' of 4 pods trainer-<i>-x7k2q in namespace ml."""
    fixed_ports = True

    def __init__(self):
        self.proc = None

    def setup(self, work, env):
        with open(os.path.join(work, "token"), "w") as f:
            f.write("doc-token\n")
        self.log = open(os.path.join(work, "kubesim.log"), "w")
        self.proc = subprocess.Popen([PY, SIM, "--port", "6443", "--token", "doc-token"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError("kube-apiserver simulator did not start: %r" % line)
        url = "http://127.0.0.1:6443"
        sim_ctl(url, "make-job", name="trainer", completions=4, namespace="ml")
        for i in range(4):
            sim_ctl(url, "make", name="trainer-%d-x7k2q" % i, index=i, namespace="ml")

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.log.close()


def publish(env, out, hosts):
    """tpumesh-init as worker 1 of a v4-32 slice into out (the pod's shared volume)."""
    os.makedirs(out, exist_ok=True)
    e = dict(env, TPU_WORKER_ID="1")
    if hosts:
        e["TPU_WORKER_HOSTNAMES"] = hosts
    subprocess.run([os.path.join(BUILD, "bin", "tpumesh-init"), "--skip-init", "--accelerator-type", "v4-32",
                    "--topology", "2x2x4", "--out-dir", out, "--annotations-file", "/dev/null",
                    "--metadata-host", "127.0.0.1:9"],
                   env=e, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Volume(Fixture):
    """TPUMESH_DIR: a shared volume as tpumesh-init leaves it (worker 1 of 4, complete). Poke:
    worker 2 is replaced by a pod at another address (a new workersDigest)."""

    def setup(self, work, env):
        self.dir = os.path.join(work, "volume")
        env["TPUMESH_DIR"] = self.dir
        publish(env, self.dir, "w-0.s,w-1.s,w-2.s,w-3.s")

    def poke(self, work, env):
        publish(env, self.dir, "w-0.s,w-1.s,w-2b.s,w-3.s")


class VolumeIncomplete(Volume):
    """TPUMESH_DIR: a volume whose topology is not complete yet (tpumesh-init without the worker
    list, as in the first pod of a multi-slice job). Poke: the sidecar completes it."""

    def setup(self, work, env):
        self.dir = os.path.join(work, "volume")
        env["TPUMESH_DIR"] = self.dir
        publish(env, self.dir, "")

    def poke(self, work, env):
        publish(env, self.dir, "w-0.s,w-1.s,w-2.s,w-3.s")


FIXTURES = {"kubesim": KubeSim, "volume": Volume, "volume-incomplete": VolumeIncomplete}


# ---- running one block --------------------------------------------------------------------

def scratch_dir():
    work = tempfile.mkdtemp(prefix="tpumesh-doctest-")
    os.symlink(BUILD, os.path.join(work, "build"))
    for name in ("k8s", "charts", "tests", "scripts", "VERSION", "Makefile"):
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    return work


def block_env(work):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TPUMESH_", "TPU_", "MEGASCALE_", "KUBE_GOOGLE", "JAX_", "DTENSOR_"))}
    env.update(PATH="%s/bin:/usr/local/bin:/usr/bin:/bin" % BUILD, HOME=work, PY=PY)
    return env


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def run_block(name, body, opts, work, in_netns):
    fx = FIXTURES[opts["fixture"]]() if "fixture" in opts else None
    if fx and fx.fixed_ports and not in_netns:
        ok("%s # SKIP not root: no private network namespace for the fixed ports it documents" % name)
        return
    env = block_env(work)
    want = int(opts.get("exit", 0))
    script = "set -e -o pipefail\n" + body
    log = os.path.join(work, "block.log")
    try:
        if fx:
            fx.setup(work, env)
        with open(log, "w") as lf:
            p = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, stdout=lf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            why = []
            if "background" in opts and "ready" in opts:
                st = wait(lambda: p.poll() is None and http_status(opts["ready"]) == 200, timeout=20)
                if not st:
                    why.append("%s never answered 200 (exit %s)" % (opts["ready"], p.poll()))
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
                try:
                    rc = p.wait(timeout=scaled(10))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    rc = p.wait()
                    why.append("did not end within 10 s of SIGTERM")
            else:
                if "background" in opts:
                    time.sleep(scaled(1))  # let it read its starting state
                    if fx:
                        fx.poke(work, env)
                try:
                    rc = p.wait(timeout=scaled(60))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    rc = p.wait()
                    why.append("did not end within 60 s")
            if rc != want:
                why.append("exit %s, wanted %d" % (rc, want))
    except Exception as e:  # noqa: BLE001 - a fixture that failed is this block's failure
        why = ["fixture: %s" % e]
    finally:
        if fx:
            fx.stop()
    out = open(log, encoding="utf-8", errors="replace").read() if os.path.exists(log) else ""
    if "output" in opts and opts["output"] not in out:
        why.append("output lacks %r" % opts["output"])
    check(name, not why, "\n".join(why + ["--- block output:"] + out.splitlines()[-15:]))


def smoke_trainers():
    """The first-job manifests' smoke trainer (k8s/first-job*.yaml), its command taken from the
    YAML, on a volume tpumesh-init published: it prints its rank, DTENSOR_JOBS and
    workersDigest and exits 0."""
    import yaml
    for f in ("k8s/first-job.yaml", "k8s/first-job-cpu.yaml"):
        docs = [d for d in yaml.safe_load_all(open(os.path.join(ROOT, f))) if d]
        job = next(d for d in docs if d["kind"] == "Job")
        trainer = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer")
        work = scratch_dir()
        env = block_env(work)
        Volume().setup(work, env)
        p = subprocess.run(trainer["command"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=scaled(30))
        digest = json.load(open(os.path.join(env["TPUMESH_DIR"], "topology.json")))["workersDigest"]
        want = ["tpumesh smoke: rank 1 of 4 (TPU_WORKER_ID 1)",
                "tpumesh smoke: DTENSOR_JOBS=w-0.s:10000,w-1.s:10000,w-2.s:10000,w-3.s:10000",
                "tpumesh smoke: workersDigest=%s" % digest]
        check("%s: the smoke trainer prints its rank, DTENSOR_JOBS and workersDigest and exits 0" % f,
              p.returncode == 0 and p.stdout.splitlines() == want,
              "exit %d\nstdout: %s\nstderr: %s\nwanted: %s" % (p.returncode, p.stdout, p.stderr, want))
        shutil.rmtree(work, ignore_errors=True)


def bring_loopback_up():
    """ip link set lo up, without iproute2: SIOCSIFFLAGS with IFF_UP|IFF_RUNNING on lo."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        import fcntl
        ifreq = struct.pack("16sH14x", b"lo", 0x1 | 0x40)
        fcntl.ioctl(s.fileno(), 0x8914, ifreq)  # SIOCSIFFLAGS
    finally:
        s.close()


def main():
    in_netns = "--in-netns" in sys.argv
    if not in_netns and os.geteuid() == 0 and shutil.which("unshare"):
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
        if probe.returncode == 0:
            os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__), "--in-netns"])
    if in_netns:
        bring_loopback_up()
    if not os.access(os.path.join(BUILD, "bin", "tpumesh-init"), os.X_OK):
        fail("the programs are built", "%s/bin/tpumesh-init is missing: run make" % BUILD)
        done()
    unmarked = []
    counts = {"run": 0, "cluster": 0, "manual": 0}
    for rel in DOCS:
        work = None
        for line, lang, body, marker in parse_blocks(rel):
            if lang not in SHELL_LANGS:
                continue
            where = "%s:%d" % (rel, line)
            if marker is None:
                unmarked.append(where)
                continue
            kind, opts, rest = parse_marker(marker)
            if kind not in counts:
                fail("%s: doctest marker" % where, "unknown kind %r (run, cluster or manual)" % kind)
                continue
            counts[kind] += 1
            if kind == "manual" and not rest.strip():
                fail("%s: a manual block says why it is not run" % where, "<!-- doctest: manual REASON -->")
            if kind != "run":
                print("# %s: %s%s" % (where, "needs a cluster, not run" if kind == "cluster" else "not run: ",
                                      rest if kind == "manual" else ""))
                continue
            if work is None:
                work = scratch_dir()
            first = body.strip().split("\n")[0][:60]
            run_block("%s runs as documented (exit %s): %s" % (where, opts.get("exit", 0), first),
                      body, opts, work, in_netns)
        if work:
            shutil.rmtree(work, ignore_errors=True)
    smoke_trainers()
    check("every shell block of the documentation is run here or marked cluster/manual "
          "(%d run, %d need a cluster, %d manual)" % (counts["run"], counts["cluster"], counts["manual"]),
          not unmarked, "no <!-- doctest: ... --> marker before:\n" + "\n".join(unmarked))
    done()


if __name__ == "__main__":
    main()
