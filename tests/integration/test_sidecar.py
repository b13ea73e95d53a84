"""End-to-end: the real tpumesh-sidecar against the kube-apiserver simulator (issue 5).

Two sidecars watch one 4-pod Indexed Job: A (pod trainer-0, auto/dns mode, expected count
from the pod annotation tpumesh.dev/expected-workers) and B (pod trainer-1, ip mode,
--expected-workers 4). The test walks the pod lifecycle and the API failures of issue 5 and
checks the published files, /readyz, /healthz, /metrics and /topology after every transition.
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
sys.path.insert(0, os.path.join(ROOT, "tests/sim/kube-apiserver"))
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))
from simctl import start_sim  # noqa: E402
from tap import check, done, fail, scaled, wait  # noqa: E402
from sidecarproc import SidecarProcess  # noqa: E402

SIDECAR = os.path.join(BUILD, "bin/tpumesh-sidecar")
FILES = ("dtensor.env", "tf_config.json", "tpu.env", "jax.env", "topology.json")
ENV_FILES = FILES[:4]


class Sidecar(SidecarProcess):
    def __init__(self, name, sim_url, token_file, pod, out_dir, extra=()):
        self.name, self.out = name, out_dir
        super().__init__([SIDECAR, "--apiserver", sim_url, "--token-file", token_file, "--namespace", "default",
                          "--pod-name", pod, "--out-dir", out_dir, "--http-addr", "127.0.0.1:0",
                          "--grpc-addr", "127.0.0.1:0", "--stall-timeout", "5"] + list(extra))

    def path(self, f):
        return os.path.join(self.out, f)

    def topology(self):
        with open(self.path("topology.json")) as f:
            return json.load(f)

    def sourced(self, var):
        """Value of var after `. ./dtensor.env` (or another env file) in sh, in the out dir."""
        f = "dtensor.env" if var.startswith("DTENSOR") else ("tpu.env" if var.startswith("TPU") else "jax.env")
        r = subprocess.run(["sh", "-c", '. ./%s && printf %%s "$%s"' % (f, var)], cwd=self.out,
                           capture_output=True, text=True, timeout=scaled(10))
        return r.stdout

    def stats(self):
        return {f: (os.stat(self.path(f)).st_ino, os.stat(self.path(f)).st_mtime_ns) for f in FILES}

    def stop(self):
        """SIGTERM: (exit status, seconds it took)."""
        if self.proc.poll() is not None:
            return self.proc.returncode, 0.0
        t0 = time.monotonic()
        rc = self.terminate(5)
        return rc, time.monotonic() - t0


def jobs_dns(n):
    return ",".join("trainer-%d.trainer:10000" % i for i in range(n))


def main():
    tmp = tempfile.mkdtemp(prefix="tpumesh-sidecar-test.")
    sim_tok = os.path.join(tmp, "sim-token")
    sc_tok = os.path.join(tmp, "sc-token")
    for p in (sim_tok, sc_tok):
        with open(p, "w") as f:
            f.write("t0\n")
    sim = start_sim(["--token-file", sim_tok, "--bookmark-interval", "2"])
    cars = []
    try:
        run(sim, tmp, sc_tok, sim_tok, cars)
    finally:
        for c in cars:
            c.stop()
            if os.environ.get("VERBOSE"):
                print("\n".join("# %s: %s" % (c.name, l) for l in c.lines))
        sim.stop()
        subprocess.run(["rm", "-rf", tmp])
    return done()


def run(sim, tmp, sc_tok, sim_tok, cars):
    c = sim.client
    anno = {"tpumesh.dev/expected-workers": "4"}
    names = ["trainer-%d-abcde" % i for i in range(4)]
    for i, n in enumerate(names):
        c.make(name=n, index=i, annotations=anno)
    out_a, out_b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    os.mkdir(out_a)
    os.mkdir(out_b)
    a = Sidecar("A", sim.url, sc_tok, names[0], out_a)
    cars.append(a)
    b = Sidecar("B", sim.url, sc_tok, names[1], out_b, ["--address-mode", "ip", "--expected-workers", "4"])
    cars.append(b)
    if not check("both sidecars serve HTTP", a.port and b.port, "\n".join(a.lines + b.lines)):
        return

    # 1. Complete 4-pod job, dns and ip modes.
    check("dns: /readyz 200 once the 4 pods are listed", wait(lambda: a.readyz()[0] == 200), a.readyz())
    check("dns: DTENSOR_JOBS lists <hostname>.<subdomain>:port in index order",
          a.sourced("DTENSOR_JOBS") == jobs_dns(4), a.sourced("DTENSOR_JOBS"))
    check("dns: DTENSOR_CLIENT_ID == TPU_WORKER_ID == own index 0",
          a.sourced("DTENSOR_CLIENT_ID") == "0" and a.sourced("TPU_WORKER_ID") == "0")
    t = a.topology()
    check("dns: topology.json complete, 4 workers, generation 1",
          t["complete"] is True and len(t["workers"]) == 4 and t["generation"] == 1, t)
    check("dns: topology.json shows expected vs present and where the count came from",
          (t.get("expectedWorkers"), t.get("presentWorkers"), t.get("expectedWorkersSource")) == (4, 4, "annotation"), t)
    check("expected count taken from the pod annotation",
          a.log_count("expecting 4 workers (from annotation tpumesh.dev/expected-workers)") == 1)
    check("selector derived from the Indexed Job label and logged",
          a.log_count("selector batch.kubernetes.io/job-name=trainer") == 1)
    code, body = a.http("/topology")
    with open(a.path("topology.json")) as f:
        check("/topology serves the published topology.json", code == 200 and body == f.read())
    check("/healthz 200", a.http("/healthz")[0] == 200)
    check("/metrics: generation 1, 4 expected, complete",
          a.metric("tpumesh_generation") == 1 and a.metric('tpumesh_workers{state="expected"}') == 4
          and a.metric("tpumesh_topology_complete") == 1)
    check("ip: /readyz 200", wait(lambda: b.readyz()[0] == 200), b.readyz())
    ips = ["10.64.0.%d" % (i + 2) for i in range(4)]
    check("ip: DTENSOR_JOBS lists pod IPs, client id 1",
          b.sourced("DTENSOR_JOBS") == ",".join("%s:10000" % ip for ip in ips)
          and b.sourced("DTENSOR_CLIENT_ID") == "1", b.sourced("DTENSOR_JOBS"))

    # 2. An irrelevant change (a label) rewrites nothing.
    before = a.stats()
    ev0 = a.metric('tpumesh_watch_events_total{type="object"}')
    c.labels(name=names[2], set={"team": "infra"})
    wait(lambda: a.metric('tpumesh_watch_events_total{type="object"}') > ev0)
    time.sleep(scaled(0.3))  # time for a wrong rewrite to happen
    check("irrelevant change: every file keeps its inode and mtime", a.stats() == before)
    check("irrelevant change: generation unchanged", a.topology()["generation"] == 1)

    # 3. Readiness is reported, never required.
    c.ready(name=names[3], ready=False)
    check("peer not Ready: topology.json shows ready=false",
          wait(lambda: a.topology()["workers"][3]["ready"] is False))
    after = a.stats()
    check("peer not Ready: env files untouched",
          all(after[f] == before[f] for f in ENV_FILES))
    check("peer not Ready: still ready (readiness never required)", a.readyz()[0] == 200)
    c.ready(name=names[3], ready=True)
    wait(lambda: a.topology()["workers"][3]["ready"] is True)

    # 4. A pod deleted, recreated without an IP, then given a new IP.
    env_before = open(a.path("dtensor.env")).read()
    c.delete(name=names[2], grace=0)
    check("pod deleted: /readyz 503 naming the missing worker",
          wait(lambda: a.readyz() == (503, "3 of 4 workers present; missing 2\n")), a.readyz())
    check("pod deleted: ip sidecar 503 too", wait(lambda: b.readyz()[0] == 503), b.readyz())
    check("pod deleted: dtensor.env keeps the last complete version",
          open(a.path("dtensor.env")).read() == env_before)
    check("pod deleted: topology.json complete=false, 3 of 4 present",
          wait(lambda: (a.topology()["complete"], a.topology()["presentWorkers"],
                        a.topology()["expectedWorkers"]) == (False, 3, 4)), a.topology())
    c.make(name="trainer-2-fghij", index=2, ip="", annotations=anno)
    check("recreated without IP: /readyz 503 'no address 2'",
          wait(lambda: a.readyz()[1].startswith("4 of 4 workers present; no address 2")), a.readyz())
    c.set_ip(name="trainer-2-fghij", ip="10.99.0.7")
    check("IP assigned: /readyz 200 again", wait(lambda: a.readyz()[0] == 200), a.readyz())
    check("IP assigned: dns DTENSOR_JOBS unchanged (stable names)", a.sourced("DTENSOR_JOBS") == jobs_dns(4))
    want_b = ",".join("%s:10000" % ip for ip in (ips[0], ips[1], "10.99.0.7", ips[3]))
    check("recreated with a new IP: ip-mode DTENSOR_JOBS has it",
          wait(lambda: b.sourced("DTENSOR_JOBS") == want_b), b.sourced("DTENSOR_JOBS"))
    check("ip sidecar ready again", wait(lambda: b.readyz()[0] == 200), b.readyz())

    # 5. Terminating pod yields its index to its replacement.
    c.delete(name=names[3], grace=30)
    check("terminating: /readyz 503 'terminating 3'",
          wait(lambda: a.readyz()[1].startswith("3 of 4 workers present; terminating 3")), a.readyz())
    c.make(name="trainer-3-klmno", index=3, annotations=anno)
    check("terminating pod yields its index to the live replacement",
          wait(lambda: a.readyz()[0] == 200 and a.topology()["workers"][3]["pod"] == "trainer-3-klmno"),
          a.readyz())
    c.delete(name=names[3], grace=0)

    # 6. Duplicate index: incomplete, reported once with both names.
    c.make(name="trainer-1-zzzzz", index=1, annotations=anno)
    check("duplicate index: /readyz 503 'duplicate index 1'",
          wait(lambda: a.readyz()[1].startswith("3 of 4 workers present; duplicate index 1")), a.readyz())
    c.labels(name="trainer-1-zzzzz", set={"x": "1"})  # more events: still logged once
    c.ready(name="trainer-0-abcde", ready=False)
    wait(lambda: a.topology()["workers"][0]["ready"] is False)
    check("duplicate index logged once, naming both pods",
          a.log_count("index 1 claimed by 2 pods (trainer-1-abcde, trainer-1-zzzzz)") == 1,
          [l for l in a.lines if "claimed" in l])
    c.delete(name="trainer-1-zzzzz", grace=0)
    c.ready(name="trainer-0-abcde", ready=True)
    check("duplicate removed: ready again", wait(lambda: a.readyz()[0] == 200), a.readyz())

    # 7. Hostile names and values are left out; sourcing the env files runs nothing.
    pwned = os.path.join(tmp, "pwned")
    base = c.get(name="trainer-0-abcde")
    base = base.get("pod", base)
    for nm, host in ((". dtensor.env", "trainer-9"), ("trainer-9-evil1", "x$(touch %s)" % pwned),
                     ("trainer-9-evil2;touch %s" % pwned, "trainer-9")):
        p = json.loads(json.dumps(base))
        md = p["metadata"]
        md["name"] = nm
        for k in ("uid", "resourceVersion", "creationTimestamp", "generateName"):
            md.pop(k, None)
        md["labels"]["batch.kubernetes.io/job-completion-index"] = "2"
        md["annotations"]["batch.kubernetes.io/job-completion-index"] = "2"
        p["spec"]["hostname"] = host
        c.create(pod=p)
    check("hostile pods are left out and logged",
          wait(lambda: a.log_count("left out: metadata.name") >= 2 and a.log_count("left out: spec.hostname") >= 1),
          [l for l in a.lines if "left out" in l])
    check("hostile pods: still complete and ready", a.readyz()[0] == 200, a.readyz())
    for f in ENV_FILES:
        subprocess.run(["sh", "-c", ". ./%s" % f], cwd=a.out, capture_output=True, timeout=scaled(10))
    check("sourcing every env file runs nothing", not os.path.exists(pwned))
    check("DTENSOR_JOBS still the 4 workers", a.sourced("DTENSOR_JOBS") == jobs_dns(4))

    # 8. API failures: every one converges on the next relevant change.
    def converges(label, ip, timeout=20):
        c.set_ip(name="trainer-2-fghij", ip=ip)
        got = wait(lambda: any(w["ip"] == ip for w in a.topology()["workers"]), timeout)
        check(label, got, "\n".join(a.lines[-15:]))
        return got

    c.call("cut", mode="mid-event")
    converges("watch cut mid-event: converges", "10.99.0.8")
    relists = a.metric("tpumesh_api_relists_total")
    c.stall(seconds=2)  # the sidecar misses these events, then their history is compacted
    for i in range(5):
        c.labels(name=names[0], set={"step": str(i)})
    c.compact()
    c.call("cut", mode="abrupt")
    converges("410 Gone after compaction: relists and converges", "10.99.0.9")
    check("410: relist counted", wait(lambda: a.metric("tpumesh_api_relists_total") > relists))
    c.restart(unavailable=1)
    converges("apiserver restart (history lost, 429 while initialising): converges", "10.99.0.10", 30)
    with open(sc_tok, "w") as f:
        f.write("t1\n")
    with open(sim_tok, "w") as f:
        f.write("t1\n")
    c.token(reload=True)
    c.call("cut", mode="clean")
    converges("token rotation: re-reads the token after a 401 and converges", "10.99.0.11", 30)
    c.fail(code=429, count=2, retry_after=1, match="watch")
    c.call("cut", mode="clean")
    converges("429 with Retry-After: converges", "10.99.0.12", 30)
    c.stall(seconds=scaled(40))  # every watch stream is silent for that long; LISTs answer
    t0 = time.monotonic()
    converges("stalled stream: reconnected after --stall-timeout and converges", "10.99.0.13", 30)
    check("stalled stream: detected well before the stall ends", time.monotonic() - t0 < scaled(30),
          "%.1f s" % (time.monotonic() - t0))
    c.call("stall", seconds=0)
    def inject_until_counted(what, reason, **kw):
        """The simulator injects into the watches open at that moment; A may be between a relist
        and its next watch (after the previous fault), so inject again until A counts it."""
        key = 'tpumesh_watch_restarts_total{reason="%s"}' % reason
        n0 = a.metric(key) or 0

        def once():
            c.call(what, **kw)
            return wait(lambda: (a.metric(key) or 0) > n0, 2)
        return wait(once, 30, interval=0)

    inject_until_counted("malformed", "malformed")
    converges("malformed line: relists and converges", "10.99.0.14")
    inject_until_counted("oversize", "oversized", mib=20)
    converges("oversized object: relists and converges", "10.99.0.15", 30)
    check("sidecar alive after every failure", a.proc.poll() is None and a.http("/healthz")[0] == 200)
    check("still complete after every failure", wait(lambda: a.readyz()[0] == 200), a.readyz())

    # 8b. /metrics names what happened: restarts by reason, API errors by code,
    # publish latency from event arrival; every sample line is well-formed.
    _, body = a.http("/metrics")
    sample = re.compile(r'^[a-z_]+(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"\})? [0-9.e+-]+$')
    bad = [l for l in body.splitlines() if not l.startswith("#") and not sample.match(l)]
    check("/metrics: every sample line is well-formed", not bad, bad[:3])
    for reason in ("cut", "expired", "stalled", "malformed", "oversized"):
        v = a.metric('tpumesh_watch_restarts_total{reason="%s"}' % reason)
        check("/metrics: watch restarts by reason %s counted" % reason, v is not None and v >= 1, v)
    v = a.metric('tpumesh_api_errors_total{code="429"}')
    check("/metrics: API errors by code (429 counted)", v is not None and v >= 1, v)
    n = a.metric("tpumesh_publish_latency_seconds_count")
    p50 = a.metric('tpumesh_publish_latency_seconds{quantile="0.5"}')
    check("/metrics: publish latency from event arrival recorded",
          n is not None and n >= 10 and p50 is not None and 0 < p50 < scaled(5), (n, p50))
    check("/metrics: latency HELP says from event arrival",
          "arrival of the earliest change" in body)
    builds = a.metric("tpumesh_worker_list_builds_total")
    check("/metrics: worker list builds counted", builds is not None and builds >= 5, builds)
    # After all those changes, the published list is exactly the store's.
    live = {}
    for p in c.pods():
        md, st = p["metadata"], p.get("status", {})
        idx = md.get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
        if md.get("deletionTimestamp") or idx is None or not re.match(r"^trainer-\d-[a-z]{5}$", md["name"]):
            continue  # the hostile pods of step 7 are left out
        ready = any(x.get("type") == "Ready" and x.get("status") == "True"
                    for x in st.get("conditions", []))
        live[int(idx)] = (md["name"], st.get("podIP", ""), ready)
    shown = {w["index"]: (w["pod"], w["ip"], w["ready"]) for w in a.topology()["workers"]}
    check("published worker list equals the pods in the apiserver", shown == live, (shown, live))

    # 9. SIGTERM: exit 0 within a second (of the plain build's time), files stay.
    gen = a.topology()["generation"]
    rc, secs = a.stop()
    check("SIGTERM: exit 0", rc == 0, rc)
    check("SIGTERM: within a second", secs < scaled(1.0), "%.3fs" % secs)
    check("SIGTERM: files stay", all(os.path.exists(a.path(f)) for f in FILES)
          and a.topology()["generation"] == gen)
    check("one info line per transition, not per event",
          sum(1 for l in a.lines if " INFO " in l) < 120, len(a.lines))

    # 10. Restart from the files: generation continues, nothing rewritten while unchanged.
    before = a.stats()
    a2 = Sidecar("A2", sim.url, sc_tok, names[0], out_a)
    cars.append(a2)
    check("restart: ready again", wait(lambda: a2.readyz()[0] == 200), a2.readyz())
    check("restart: continues from the files' generation", a2.log_count("continuing from generation %d" % gen) == 1)
    check("restart: unchanged files are not rewritten", a2.stats() == before)
    c.set_ip(name="trainer-2-fghij", ip="10.99.0.20")
    check("restart: next change publishes generation + 1",
          wait(lambda: a2.topology()["generation"] == gen + 1), a2.topology()["generation"])

    # 11. A job start: every peer changes several times while the topology is incomplete.
    job_start(sim, sc_tok, os.path.join(os.path.dirname(out_a), "burst"), cars)


# Publish pacing (common/core/pace.h): routine publishes (an incomplete topology after an
# incomplete one, readiness-only changes of a complete one) wait 1 s after the first publish, and
# twice as long after each further one (urgent ones included), up to 16 s; urgent ones (the first,
# a change of completeness, an address change) go out at once; a change 16 s or more after the last
# publish starts the series again.
PACE_MIN, PACE_MAX = 1.0, 16.0


def routine_max(elapsed):
    """The most routine publishes the pacing allows in `elapsed` seconds after any publish: the
    k-th one in a row comes at least 1 + 2 + ... + min(2^(k-1), 16) s after it. A series that
    starts again (after 16 s without a publish) only spreads them further. (+10 ms: the sidecar
    counts whole milliseconds.)"""
    k, t = 0, -0.01
    while True:
        t += min(PACE_MIN * 2 ** k, PACE_MAX)
        if t > elapsed:
            return k
        k += 1


def drive_until(label, change, pred, limit):
    """Apply change(i) every 50 ms until pred() holds (at most scaled(limit) s): the sidecar's state
    is reached by construction however slow it runs. Returns (reached, changes applied)."""
    deadline = time.monotonic() + scaled(limit)
    i = 0
    while time.monotonic() < deadline:
        change(i)
        i += 1
        try:
            if pred():
                return True, i
        except (OSError, TypeError, ValueError):
            pass  # /metrics not answering yet
        time.sleep(0.05)
    print("# %s: not reached after %d changes" % (label, i), flush=True)
    return False, i


def job_start(sim, sc_tok, out, cars):
    """N pods appear and change in a burst (created without an IP, Ready, given an IP, then IPs
    changed again while the last pod still has none; the last IP completes the job). While
    incomplete the publishes are paced: after the first, 1 s, 2 s, 4 s... apart, whatever the rate
    of changes; what is held back is counted and folded in; the completing change is published and
    starts the series again; the files are right."""
    c = sim.client
    n = 32
    names = ["burst-%d-%s" % (i, "abcdefghijklmnopqrstuvwxyzabcdef"[i] * 5) for i in range(n)]
    ips = ["10.65.0.%d" % (i + 2) for i in range(n)]
    c.make(name=names[0], index=0, job="burst", ip=ips[0])
    os.mkdir(out)
    t0 = time.monotonic()
    s = Sidecar("C", sim.url, sc_tok, names[0], out, ["--address-mode", "ip", "--expected-workers", str(n)])
    cars.append(s)
    check("job start: first publish (1 of %d workers)" % n,
          wait(lambda: s.metric("tpumesh_publishes_total") == 1, 10), s.metric("tpumesh_publishes_total"))
    p0 = s.metric("tpumesh_publishes_total")
    check("job start: after the first publish a routine one waits 1 s (tpumesh_publish_wait_seconds)",
          s.metric("tpumesh_publish_wait_seconds") == PACE_MIN, s.metric("tpumesh_publish_wait_seconds"))
    ch0 = s.metric('tpumesh_store_changes_total{type="added"}') + \
        s.metric('tpumesh_store_changes_total{type="modified"}')
    for i in range(1, n):
        c.make(name=names[i], index=i, job="burst", ip="", ready=False)
    for i in range(1, n):
        c.ready(name=names[i], ready=True)
    for i in range(1, n - 1):
        c.set_ip(name=names[i], ip=ips[i])
    # Worker n-1 still has no IP: keep changing worker 1's IP until two routine publishes went out
    # in a row (the wait doubled twice, to 4 s) and a change was held back.
    waits = set()

    def grown():
        w = s.metric("tpumesh_publish_wait_seconds")
        if w is not None:
            waits.add(w)
        return w >= 4 * PACE_MIN and s.metric("tpumesh_publishes_coalesced_total") >= 1
    reached, churn = drive_until("job start: the wait grows while incomplete",
                                 lambda i: c.set_ip(name=names[1], ip="10.65.1.%d" % (i % 200 + 2)), grown, 120)
    check("job start: the wait between routine publishes doubles while incomplete (seen: %s s)"
          % sorted(waits), reached and waits <= {1.0, 2.0, 4.0, 8.0, 16.0}, sorted(waits))
    check("job start: incomplete all along (worker %d has no IP)" % (n - 1),
          s.readyz()[1].startswith("%d of %d workers present; no address %d" % (n, n, n - 1)), s.readyz())
    c.set_ip(name=names[1], ip=ips[1])
    c.set_ip(name=names[n - 1], ip=ips[n - 1])
    ok_ready = wait(lambda: s.readyz()[0] == 200, 30)
    elapsed = time.monotonic() - t0
    check("job start: complete once the last IP arrives", ok_ready, s.readyz())
    pubs = s.metric("tpumesh_publishes_total") - p0
    changes = s.metric('tpumesh_store_changes_total{type="added"}') + \
        s.metric('tpumesh_store_changes_total{type="modified"}') - ch0
    coalesced = s.metric("tpumesh_publishes_coalesced_total")
    # Every publish after the first was routine (incomplete after incomplete) but the completing one.
    bound = routine_max(elapsed) + 1
    check("job start: routine publishes paced 1, 2, 4... s apart (%d publishes after the first, "
          "%d changes, %.2f s; at most %d)" % (pubs, changes, elapsed, bound), 1 <= pubs <= bound, (pubs, bound))
    check("job start: fewer publishes than store changes (%d changed worker 1 again)" % churn,
          pubs < changes, (pubs, changes))
    check("job start: coalesced publishes counted in /metrics", coalesced >= 1, coalesced)
    check("job start: the publish log line says what was coalesced",
          any("coalesced into it" in l for l in s.lines), "\n".join(s.lines[-20:]))
    w1 = s.metric("tpumesh_publish_wait_seconds")
    quiet = time.time() - s.metric("tpumesh_last_publish_timestamp_seconds")
    check("job start: the completing publish doubled the wait too (%s s before, %s s after)" % (max(waits), w1),
          w1 >= min(2 * max(waits), PACE_MAX) or (quiet >= PACE_MAX and w1 == PACE_MIN), (waits, w1, quiet))
    t = s.topology()
    check("job start: topology.json complete with every worker, all ready",
          t["complete"] is True and [w["ip"] for w in t["workers"]] == ips
          and all(w["ready"] for w in t["workers"]), t.get("workers"))
    check("job start: generation counts the publishes", t["generation"] == p0 + pubs, (t["generation"], p0, pubs))
    check("job start: DTENSOR_JOBS lists all %d workers in index order" % n,
          s.sourced("DTENSOR_JOBS") == ",".join("%s:10000" % ip for ip in ips), s.sourced("DTENSOR_JOBS"))
    check("job start: the volume holds ..data, the current version and at most the one before",
          os.readlink(os.path.join(out, "..data")).startswith("..")
          and len([e for e in os.listdir(out) if e.startswith("..") and e != "..data"]) <= 2,
          sorted(os.listdir(out)))
    ready_burst(s, c, names, ips)
    rc, _ = s.stop()
    check("job start: SIGTERM exit 0", rc == 0, rc)


def ready_burst(s, c, names, ips):
    """On a complete topology, peers' readiness flips (each pod turning Ready) are routine: held
    back while the wait runs (1, 2, 4... up to 16 s after the publish before), the last state always
    goes out; an address change is never held."""
    n = len(names)
    p0 = s.metric("tpumesh_publishes_total")
    r0 = s.metric("tpumesh_publishes_coalesced_readiness_total")
    t0 = time.monotonic()
    for i in range(1, n):
        c.ready(name=names[i], ready=False)
    for i in range(1, n):
        c.ready(name=names[i], ready=True)
    # Keep flipping worker 1 until a flip was held back.
    reached, flips = drive_until("ready burst: a readiness change held back",
                                 lambda i: c.ready(name=names[1], ready=i % 2 == 1),
                                 lambda: s.metric("tpumesh_publishes_coalesced_readiness_total") > r0, 120)
    check("ready burst: readiness changes are held back (%d more flips)" % flips, reached)
    for i in range(1, n // 2):
        c.ready(name=names[i], ready=False)

    def settled():
        t = s.topology()
        return [w["ready"] for w in t["workers"]] == [True] + [False] * (n // 2 - 1) + [True] * (n - n // 2)
    ok = wait(settled, 2 * PACE_MAX + 10)
    elapsed = time.monotonic() - t0
    check("ready burst: the last readiness state is published", ok, s.topology().get("workers"))
    check("ready burst: still complete and ready", s.readyz()[0] == 200 and s.topology()["complete"] is True,
          s.readyz())
    pubs = s.metric("tpumesh_publishes_total") - p0
    held = s.metric("tpumesh_publishes_coalesced_readiness_total") - r0
    # The first may go out at once (its wait after the completing publish may have passed).
    bound = 1 + routine_max(elapsed)
    check("ready burst: %d readiness flips paced 1, 2, 4... s apart (%d publishes, %.2f s; at most %d)"
          % (2 * (n - 1) + flips + n // 2 - 1, pubs, elapsed, bound), 1 <= pubs <= bound, (pubs, bound))
    check("ready burst: coalesced readiness changes counted in /metrics", held >= 1, held)
    check("ready burst: env files unchanged by readiness",
          s.sourced("DTENSOR_JOBS") == ",".join("%s:10000" % ip for ip in ips), s.sourced("DTENSOR_JOBS"))
    # An address change right after a publish (within its wait) is published at once, not held back.
    c1 = s.metric("tpumesh_publishes_coalesced_total")
    c.set_ip(name=names[n - 1], ip="10.65.1.1")
    ok = wait(lambda: s.topology()["workers"][n - 1]["ip"] == "10.65.1.1", 20)
    check("ready burst: an address change of a complete topology is published", ok,
          s.topology()["workers"][n - 1])
    check("ready burst: the address change was not held back",
          s.metric("tpumesh_publishes_coalesced_total") == c1,
          (s.metric("tpumesh_publishes_coalesced_total"), c1))
    check("ready burst: DTENSOR_JOBS has the new address",
          s.sourced("DTENSOR_JOBS").endswith(",10.65.1.1:10000"), s.sourced("DTENSOR_JOBS"))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report as a failed test, not a traceback only
        import traceback
        traceback.print_exc()
        fail("test raised", repr(e))
        sys.exit(1)
