"""What every real-runtime test (tests/trainers/test_*.py) shares: a job whose files tpumesh
itself published, and trainer processes started the way a pod starts its trainer container.

A Job is made on the kube-apiserver simulator (an Indexed Job for one slice, a JobSet with one
child Job per slice for several): every pod gets its own IP in 127.64.0.0/16. For every pod,
as on GKE, tpumesh-init runs first (static TPU VM path, GKE's TPU_WORKER_ID /
TPU_WORKER_HOSTNAMES / MEGASCALE_* in its environment) and publishes into the pod's out dir,
then the real tpumesh-sidecar (ip address mode, so every address is a pod IP a process here
can listen on) watches the pods and republishes. Job.start() returns when every sidecar's
/readyz is 200 — the startupProbe the trainer container waits for.

A trainer process is started by `trainer()`: the env-loading lines of the README's trainer
snippet (extracted from README.md at run time, /var/run/tpumesh replaced by the pod's out dir)
run in sh, then the venv's python runs a program. Its environment is empty but for PATH, HOME,
the variables the snippet exports and TPUMESH_POD_IP + LD_PRELOAD=podbind.so (a wildcard bind
becomes a bind on the pod IP: one IP per pod, one port per job, as in the product; connections
leave from the pod IP) and
GCE_METADATA_HOST/IP pointing at the metadata simulator (nothing may ask a real one).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
# The venvs are made by `make deps` (scripts/trainer-deps.sh) in build/ (TRAINER_VENVS), whatever
# BUILD the programs come from.
VENV_DIR = os.path.join(ROOT, os.environ.get("TRAINER_VENVS") or "build")
sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from simctl import start_sim  # noqa: E402
from tap import check, done, fail, ok, scaled, skip_needs, wait  # noqa: E402,F401
from test_sidecar import Sidecar  # noqa: E402

INIT = os.path.join(BUILD, "bin/tpumesh-init")
PODBIND = os.path.join(BUILD, "tests/podbind.so")
README = os.path.join(ROOT, "README.md")
MNT = "/var/run/tpumesh"


def venv_python(kind):
    """The python of $VENV_DIR/venv-<kind> ("tf" or "jax"), or None when it is not there."""
    py = os.path.join(VENV_DIR, "venv-" + kind, "bin", "python")
    ok_stamp = os.path.exists(os.path.join(VENV_DIR, "venv-" + kind, ".tpumesh-stamp"))
    return py if ok_stamp and os.access(py, os.X_OK) else None


def need_venv(kind):
    """The venv's python; without it the test reports itself skipped ("needs venv-<kind>",
    which tests/run.sh counts as failed under CI, where `make deps` made it) and ends."""
    py = venv_python(kind)
    if py is None:
        skip_needs("real %s processes read the published files" % kind.upper(), "venv-" + kind,
                   "%s/venv-%s is missing: run `make trainer-deps` (or `make deps`)" % (VENV_DIR, kind))
        done()
    for f in (INIT, PODBIND):
        if not os.path.exists(f):
            fail("%s missing: run `make all test-unit`" % f)
            done()
    return py


def readme_snippet(marker):
    """The ```sh block of README.md that follows the first line containing marker:
    (env lines, python code). env lines: the shell lines before `exec python3 -c '`;
    python code: the program between its quotes."""
    with open(README) as f:
        text = f.read()
    at = text.index(marker)
    m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    block = m.group(1)
    head, sep, code = block.partition("exec python3 -c '")
    if not sep or not code.rstrip().endswith("'"):
        raise ValueError("README snippet after %r has no `exec python3 -c '...'`" % marker)
    return head, code.rstrip()[:-1]


def pod_ip_base():
    """A /24 of 127.64.0.0/16 for this run (not 0 and 1, which test_relay uses), picked from
    the pid so that two test runs on one machine do not share addresses."""
    return "127.64.%d" % (20 + os.getpid() % 230)


class Pod:
    def __init__(self, job, s, w, hps, ip, name, out):
        self.job, self.slice, self.worker, self.ip, self.name, self.out = job, s, w, ip, name, out
        self.index = s * hps + w
        self.car = None

    def read(self, f):
        with open(os.path.join(self.out, f)) as fh:
            return fh.read()

    def env(self, f):
        """Every variable of env file f after `set -a; . ./f` in an empty sh."""
        r = subprocess.run(["env", "-i", "sh", "-c", "set -a; . ./%s; set +a; env" % f], cwd=self.out,
                           capture_output=True, text=True, timeout=scaled(10))
        return dict(line.split("=", 1) for line in r.stdout.splitlines()
                    if "=" in line and line.split("=", 1)[0] not in ("PWD", "SHLVL", "_", "OLDPWD"))


class Job:
    """A job of `slices` x `hps` pods, tpumesh-init and a sidecar on each (see the module doc).
    accel/topo: the slice's accelerator type and topology as GKE's node labels give them."""

    def __init__(self, tmp, sim, name, slices, hps, accel, topo, ips, container_env=None):
        self.tmp, self.sim, self.name, self.slices, self.hps = tmp, sim, name, slices, hps
        self.accel, self.topo = accel, topo
        self.container_env = dict(container_env or {})
        self.pods = []
        c = sim.client
        anns = {"tpumesh.dev/expected-workers": str(slices * hps), "tpumesh.dev/address-mode": "ip"}
        for s in range(slices):
            for w in range(hps):
                ip = ips[s * hps + w]
                if slices > 1:
                    r = c.make(jobset=name, slice=s, index=w, slices=slices, per_slice=hps, ip=ip,
                               annotations=anns)
                else:
                    r = c.make(job=name, index=w, ip=ip, annotations=anns)
                pname = r["pod"]["metadata"]["name"]
                if container_env:
                    # Variables the pod spec gives its trainer container (the sidecar reads
                    # them from its own pod); the trainer processes get them too (env()).
                    pod = r["pod"]
                    pod["spec"]["containers"][0].setdefault("env", []).extend(
                        {"name": k, "value": v} for k, v in container_env.items())
                    c.update(pod=pod)
                out = os.path.join(tmp, "%s-%d-%d" % (name, s, w))
                os.mkdir(out)
                self.pods.append(Pod(self, s, w, hps, ip, pname, out))

    def host(self, s, w):
        """The pod's DNS name, as GKE puts it in TPU_WORKER_HOSTNAMES (hostname.subdomain)."""
        if self.slices > 1:
            return "%s-slice-%d-%d.%s" % (self.name, s, w, self.name)
        return "%s-%d.%s" % (self.name, w, self.name)

    def gke_env(self, pod):
        """What GKE's TPU webhook gives the pod's containers."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TPU_WORKER_ID": str(pod.worker),
               "TPU_WORKER_HOSTNAMES": ",".join(self.host(pod.slice, k) for k in range(self.hps)),
               "TPU_ACCELERATOR_TYPE": self.accel, "TPU_TOPOLOGY": self.topo}
        if self.slices > 1:
            env.update({"MEGASCALE_NUM_SLICES": str(self.slices), "MEGASCALE_SLICE_ID": str(pod.slice),
                        "MEGASCALE_COORDINATOR_ADDRESS": self.host(0, 0)})
        return env

    def run_init(self, pod):
        r = subprocess.run([INIT, "--skip-init", "--out-dir", pod.out, "--annotations-file", "/dev/null"],
                           env=self.gke_env(pod), capture_output=True, text=True, timeout=scaled(60))
        if r.returncode != 0:
            raise RuntimeError("tpumesh-init on %s exited %d: %s" % (pod.name, r.returncode, r.stderr[-600:]))

    def start_sidecar(self, pod, token_file):
        pod.car = Sidecar(pod.name, self.sim.url, token_file, pod.name, pod.out,
                          extra=["--address-mode", "ip"])

    def start(self, token_file, timeout=60):
        """tpumesh-init, then the sidecar, on every pod; wait (bounded) until every /readyz is 200."""
        for pod in self.pods:
            self.run_init(pod)
            self.start_sidecar(pod, token_file)
        return wait(lambda: all(p.car.readyz()[0] == 200 for p in self.pods), timeout)

    def stop(self):
        for pod in self.pods:
            if pod.car is not None:
                pod.car.stop()


class Env:
    """The simulators one test file needs: the kube-apiserver simulator (a token file for the
    sidecars) and the GCE metadata simulator the trainers are pointed at."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="tpumesh-trainers.")
        self.token = os.path.join(self.tmp, "token")
        with open(self.token, "w") as f:
            f.write("t0\n")
        self.sim = start_sim(["--token", "t0"])
        self.md = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/sim/gce-metadata/gce_metadata_sim.py"),
                                    "--attr", "agent-worker-number=0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.md.stdout.readline()
        if not line.startswith("READY port="):
            raise RuntimeError("gce-metadata simulator did not start: %r" % line)
        self.md_port = int(line.split()[1].split("=", 1)[1])
        self.jobs = []
        self.procs = []
        self.nproc = 0
        self.base = pod_ip_base()
        self.next_host = 0

    def job(self, name, slices, hps, accel, topo, container_env=None):
        # Each job gets its own addresses within this run's /24.
        n = slices * hps
        ips = ["%s.%d" % (self.base, 2 + self.next_host + i) for i in range(n)]
        self.next_host += n
        j = Job(self.tmp, self.sim, name, slices, hps, accel, topo, ips, container_env)
        self.jobs.append(j)
        return j

    def start_jobs(self, *jobs):
        """tpumesh-init and the sidecar on every pod of every job: one check a job."""
        for job in jobs:
            check("%s: tpumesh-init and the sidecar published a complete topology on every pod"
                  % job.name, job.start(self.token), [(p.name, p.car.readyz()) for p in job.pods])

    def trainer_env(self, pod, extra=None):
        env = {"PATH": "/usr/bin:/bin", "HOME": self.tmp, "LANG": "C.UTF-8",
               "TPUMESH_POD_IP": pod.ip, "LD_PRELOAD": PODBIND,
               "GCE_METADATA_HOST": "127.0.0.1:%d" % self.md_port,
               "GCE_METADATA_IP": "127.0.0.1:%d" % self.md_port,
               "NO_PROXY": "*", "no_proxy": "*", "TF_CPP_MIN_LOG_LEVEL": "1"}
        env.update(pod.job.container_env if pod.job is not None else {})
        env.update(extra or {})
        return env

    def trainer(self, pod, python, env_lines, program, extra_env=None, log=None):
        """Start one trainer process "in" pod: env_lines (the README snippet's env-loading shell
        lines, /var/run/tpumesh -> the pod's out dir) run in sh, then `exec python program`.
        program: Python source, written to a file. Returns the Popen (stdout and stderr to log)."""
        lines = env_lines.replace(MNT, pod.out)
        # Several processes may run "in" one pod at once: each has its own program and log.
        self.nproc += 1
        prog = os.path.join(self.tmp, "%s-%d.py" % (pod.name, self.nproc))
        with open(prog, "w") as f:
            f.write(program)
        log = log or os.path.join(self.tmp, "%s-%d.log" % (pod.name, self.nproc))
        script = lines + '\nexec "$TRAINER_PYTHON" "$TRAINER_PROGRAM"\n'
        env = self.trainer_env(pod, extra_env)
        env.update({"TRAINER_PYTHON": python, "TRAINER_PROGRAM": prog})
        fh = open(log, "w")
        p = subprocess.Popen(["sh", "-c", script], env=env, stdout=fh, stderr=subprocess.STDOUT,
                             cwd=self.tmp)
        p.log = log
        self.procs.append(p)
        return p

    def finish(self, procs, timeout):
        """Wait for every process (bounded, scaled); kill stragglers. Returns [(rc, log text)]."""
        end = time.monotonic() + scaled(timeout)
        out = []
        for p in procs:
            try:
                p.wait(max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            with open(p.log, errors="replace") as f:
                out.append((p.returncode, f.read()))
        return out

    def run_together(self, parts, timeout):
        """parts: [(procs, judge)]. Waits for the processes of every part at once (their start-up
        waits overlap; bounded as finish()), then calls judge(outs, took) for each part with its
        processes' [(rc, log text)] and the wall time of the whole phase in seconds."""
        t0 = time.monotonic()
        outs = self.finish([p for procs, _ in parts for p in procs], timeout)
        took = time.monotonic() - t0
        at = 0
        for procs, judge in parts:
            judge(outs[at:at + len(procs)], took)
            at += len(procs)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for j in self.jobs:
            j.stop()
        self.sim.stop()
        if self.md.poll() is None:
            self.md.terminate()
            self.md.wait(10)
        if not os.environ.get("KEEP"):
            subprocess.run(["rm", "-rf", self.tmp])


def run_file(kind, body):
    """A test file's frame: the venv's python (or the file reports itself skipped), the
    simulators, body(env, python), anything it raised reported as a failure, everything
    stopped. Returns tap.done()'s exit code."""
    py = need_venv(kind)
    env = Env()
    try:
        body(env, py)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        fail("test raised", repr(e))
    finally:
        env.stop()
    return done()


def results(text):
    """The JSON objects a trainer printed on lines starting with RESULT."""
    return [json.loads(line[len("RESULT "):]) for line in text.splitlines() if line.startswith("RESULT ")]


def tail(text, n=25):
    return "\n".join(text.splitlines()[-n:])
