"""The C Kubernetes client + informer (tests/tools/k8s_driver) against the kube-apiserver
simulator over TLS with bearer tokens: list/watch, every failure the issue names, and
convergence to the simulator's truth with no lost or duplicate change."""
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8s_harness import Driver, converged, diff, model_view, sanitizer_reports, start_sim, stop_all, truth  # noqa: E402
from tap import check, done, fail, ok, scaled, wait  # noqa: E402

TMP = tempfile.mkdtemp(prefix="k8s-client-")
SIM_TOKEN_FILE = os.path.join(TMP, "sim-token")
TOKEN_FILE = os.path.join(TMP, "token")


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


write(SIM_TOKEN_FILE, "tok-1\n")
write(TOKEN_FILE, "tok-1\n")
sim = start_sim(["--tls", "--token-file", SIM_TOKEN_FILE, "--state-dir", os.path.join(TMP, "sim"),
                 "--bookmark-interval", "1", "--pods", "6"])
S = sim.client


def driver(*extra, **kw):
    args = ["--apiserver", sim.url, "--token-file", TOKEN_FILE, "--ca-file", sim.ca,
            "--namespace", "default", "--backoff-ms", "100", "--stall", "5"] + list(extra)
    watches = S.stats()["watchesTotal"]
    d = Driver(args, **kw)
    d.watches_before = watches
    return d


def ready(d, timeout=20.0):
    """Synced, and its watch is registered at the simulator (so injected stream faults reach it)."""
    if not d.wait_synced(timeout=timeout):
        return False
    return bool(wait(lambda: S.stats()["watchesTotal"] > d.watches_before, timeout))


def reset():
    S.call("fail", code=429, count=0)
    S.call("chunking", mode="natural")
    S.call("config", expired_watch="event", bookmark_interval=1)
    S.stall(seconds=0)


def lists(d):
    return len(d.synced)


def scenario(name, fn):
    if os.environ.get("K8S_ONLY") and os.environ["K8S_ONLY"] not in name:
        return
    reset()
    try:
        fn(name)
    except Exception as e:  # a broken scenario is a failure, not a crash of the whole file
        fail(name, "exception: %r" % (e,))


def breakdown(d, key):
    """The STATS line's starts= or errors= breakdown as {label: count}."""
    v = (d.stats or {}).get(key, "-")
    return {} if v == "-" else {k: int(n) for k, n in (kv.rsplit(":", 1) for kv in v.split(","))}


def stats_check(name, d, starts=(), errors=()):
    """After d.stop(): every named watch-start reason and API error label was counted, and the
    starts add up to the watches."""
    st, er = breakdown(d, "starts"), breakdown(d, "errors")
    good = (all(st.get(r, 0) >= 1 for r in starts) and all(er.get(e, 0) >= 1 for e in errors) and
            sum(st.values()) == int((d.stats or {}).get("watches", -1)))
    check(name + ": counted as watch start %s, API error %s" % ("/".join(starts) or "-", "/".join(errors) or "-"),
          good, str(d.stats))


def conv_check(name, d, timeout=15.0):
    good, want = converged(d, S, timeout=timeout)
    check(name + ": store equals the simulator's truth", good, diff(model_view(d), want) +
          "\n" + d.stderr_tail())
    check(name + ": no duplicate or impossible change", not d.errors, "\n".join(d.errors[:10]))


def t_basic(name):
    d = driver("--limit", "4")
    check(name + ": initial paginated list synced", d.wait_synced() and d.synced[0] == len(truth(S)),
          d.stderr_tail())
    before = len(d.lines)
    S.make(name="extra-0", index=50)
    S.ready(name="extra-0", ready=False)
    S.set_ip(name="extra-0", ip="10.9.9.9")
    S.labels(name="extra-0", set="a=b")
    S.delete(name="extra-0")
    ok_ = d.wait(lambda x: any(line.startswith("DELETE default/extra-0") for line in x.lines[before:]))
    changes = [line.split()[0] for line in d.lines[before:] if line.split()[0] in ("ADD", "UPDATE", "DELETE")]
    check(name + ": each watch event is exactly one callback",
          ok_ and changes == ["ADD", "UPDATE", "UPDATE", "UPDATE", "DELETE"], str(changes))
    conv_check(name, d)
    d.stop()
    check(name + ": one list, no relist", d.stats and d.stats["lists"] == "1", str(d.stats))
    check(name + ": the notify fd woke the driver's event loop", d.stats and int(d.stats["wakeups"]) >= 2,
          str(d.stats))


def t_bookmarks(name):
    d = driver()
    ready(d)
    for i in range(3):  # changes outside the watched namespace: only bookmarks can tell us
        S.make(name="bm-%d" % i, index=i, namespace="elsewhere")
    want_rv = S.state()["rv"]
    time.sleep(2.5)  # bookmark interval is 1 s
    d.stop()
    check(name + ": bookmarks advance the resourceVersion to %s" % want_rv,
          d.stats and int(d.stats["bookmarks"]) > 0 and d.stats["rv"] == str(want_rv) and
          d.stats["lists"] == "1", str(d.stats))
    for i in range(3):
        S.delete(name="bm-%d" % i, namespace="elsewhere")


def t_selectors(name):
    S.make(name="sel-a", index=60, labels={"tier": "x"})
    S.make(name="sel-b", index=61, labels={"tier": "y"}, ip="")
    d = driver("--list", "--selector", "tier in (x,y)", "--limit", "1")
    d.wait(lambda x: x.proc.poll() is not None, 10)
    d.stop()
    check(name + ": label selector + pagination", any(line.startswith("LISTED 2 ") and int(line.split("pages=")[1]) >= 2
                                                      for line in d.lines), "\n".join(d.lines) + d.stderr_tail())
    d = driver("--list", "--field-selector", "status.phase=Pending", "--selector", "tier")
    d.wait(lambda x: x.proc.poll() is not None, 10)
    d.stop()
    check(name + ": field selector", any(line.startswith("LISTED 1 ") for line in d.lines),
          "\n".join(d.lines) + d.stderr_tail())
    S.delete(name="sel-a")
    S.delete(name="sel-b")


def t_get(name):
    pod = S.pods()[0]
    n = pod["metadata"]["name"]
    d = driver("--get", n)
    d.wait(lambda x: x.proc.poll() is not None, 10)
    d.stop()
    check(name + ": GET one pod", any(line.startswith("GOT default/%s rv=%s" % (n, pod["metadata"]["resourceVersion"]))
                                      for line in d.lines), "\n".join(d.lines) + d.stderr_tail())
    d = driver("--get", "no-such-pod")
    d.wait(lambda x: x.proc.poll() is not None, 10)
    rc = d.stop()
    check(name + ": GET of a missing pod is a clear 404", rc == 1 and d.wait_log('404 pods "no-such-pod" not found'),
          d.stderr_tail())


def t_expired_watch(name, mode):
    S.call("config", expired_watch=mode)
    d = driver()
    ready(d)
    # Hold the stream (no event reaches the driver), change things and compact: the
    # re-watch after the cut resumes from an RV the server no longer has -> 410 -> relist.
    S.stall(seconds=30)
    S.make(name="exp-0", index=70)
    S.make(name="exp-1", index=71)
    S.compact()
    S.cut(mode="clean")
    check(name + ": 410 leads to a relist", d.wait(lambda x: lists(x) >= 2), d.stderr_tail())
    conv_check(name, d)
    d.stop()
    stats_check(name, d, starts=("initial", "expired"), errors=("410",))
    S.delete(name="exp-0")
    S.delete(name="exp-1")


def t_cut(name, mode):
    d = driver()
    ready(d)
    S.make(name="cut-0", index=80)
    d.wait(lambda x: "default/cut-0" in x.model)
    S.cut(mode=mode)
    S.ready(name="cut-0", ready=False)
    S.delete(name="cut-0")
    S.make(name="cut-1", index=81)
    conv_check(name, d)
    d.stop()
    check(name + ": re-watch from the last RV without a relist", d.stats["lists"] == "1" and int(d.stats["watches"]) >= 2,
          str(d.stats) + "\n" + d.stderr_tail())
    if mode == "clean":
        stats_check(name, d, starts=("timeout",))
    else:
        stats_check(name, d, starts=("cut",), errors=("protocol",))
    S.delete(name="cut-1")


def t_malformed(name):
    d = driver()
    ready(d)
    S.call("malformed")
    S.make(name="mal-0", index=90)
    check(name + ": malformed line is logged and relisted", d.wait(lambda x: lists(x) >= 2) and
          d.wait_log("relisting"), d.stderr_tail())
    conv_check(name, d)
    d.stop()
    check(name + ": driver exited cleanly", d.proc.returncode == 0)
    stats_check(name, d, starts=("malformed",), errors=("malformed",))
    S.delete(name="mal-0")


def peak_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def t_oversize(name):
    d = driver("--max-event", str(1 << 20))
    ready(d)
    before = peak_rss_kb(d.proc.pid)
    S.call("oversize", mib=24)
    S.make(name="big-0", index=91)
    check(name + ": oversized event -> error + relist", d.wait(lambda x: lists(x) >= 2) and
          d.wait_log("larger than the limit of 1048576 bytes"), d.stderr_tail())
    grown = peak_rss_kb(d.proc.pid) - before
    check(name + ": memory stays bounded by the limit, not the event (peak RSS +%d KiB for a "
          "24 MiB event)" % grown, grown < 12 * 1024)
    conv_check(name, d)
    d.stop()
    stats_check(name, d, starts=("oversized",), errors=("oversized",))
    S.delete(name="big-0")


def t_stall(name):
    S.call("config", bookmark_interval=1)
    d = driver("--stall", "2")
    ready(d)
    time.sleep(3)  # bookmarks every 1 s keep a healthy stream alive past the 2 s stall limit
    check(name + ": bookmarks keep a quiet stream alive", not d.log_has("presumed dead"), d.stderr_tail())
    S.stall(seconds=4)
    S.make(name="stall-0", index=92)
    check(name + ": a silent stream is declared dead and reconnected",
          d.wait_log("presumed dead", 8), d.stderr_tail())
    conv_check(name, d)
    d.stop()
    stats_check(name, d, starts=("stalled",), errors=("timeout",))
    S.delete(name="stall-0")


def t_429(name):
    d = driver()
    ready(d)
    S.fail(code=429, count=1, retry_after=2, match="watch", kind="apf")
    t0 = time.time()
    S.cut(mode="clean")
    S.make(name="thr-0", index=93)
    good = d.wait(lambda x: "default/thr-0" in x.model, 10)
    took = time.time() - t0
    check(name + ": 429 honours Retry-After (%.1f s)" % took, good and took >= 1.9 and
          d.wait_log("retrying after 2 s (Retry-After)"), d.stderr_tail())
    conv_check(name, d)
    d.stop()
    stats_check(name, d, starts=("http_error",), errors=("429",))
    S.delete(name="thr-0")


def t_token_rotation(name):
    d = driver("--token-reload", "1")
    ready(d)
    # Periodic reload: the kubelet rotates the file; the next request uses the new token.
    write(TOKEN_FILE, "tok-2\n")
    write(SIM_TOKEN_FILE, "tok-2\n")
    S.token(reload=True)
    time.sleep(1.2)
    S.cut(mode="clean")
    S.make(name="tok-0", index=94)
    check(name + ": rotated token file is re-read", d.wait(lambda x: "default/tok-0" in x.model, 10),
          d.stderr_tail())
    d.stop()
    # 401 -> immediate re-read (long reload period, so only the 401 can explain it).
    d = driver("--token-reload", "3600")
    ready(d)
    write(TOKEN_FILE, "tok-3\n")
    write(SIM_TOKEN_FILE, "tok-3\n")
    S.token(reload=True)
    S.cut(mode="clean")
    S.make(name="tok-1", index=95)
    check(name + ": 401 re-reads the token and retries once",
          d.wait(lambda x: "default/tok-1" in x.model, 10) and d.wait_log("401 from") and
          d.wait_log("re-reading the token"), d.stderr_tail())
    conv_check(name, d)
    d.stop()
    check(name + ": the token never appears in the logs", not any("tok-3" in line or "Bearer" in line
                                                                   for line in d.err_lines))
    S.delete(name="tok-0")
    S.delete(name="tok-1")


def t_forbidden(name):
    pod = S.pods()[0]["metadata"]["name"]
    S.call("forbid", namespace="*", verbs="get")
    d = driver("--get", pod)
    d.wait(lambda x: x.proc.poll() is not None, 10)
    d.stop()
    S.call("forbid", clear=True)
    check(name + ": 403 names the RBAC fix", d.proc.returncode == 1 and d.wait_log("403 Forbidden") and
          d.wait_log("RBAC"), d.stderr_tail())


def t_restart(name):
    d = driver()
    ready(d)
    for i in range(5):
        S.labels(name=S.pods()[0]["metadata"]["name"], set="round=%d" % i)
    rv_before = int(S.state()["rv"])
    S.restart(unavailable=1)
    rv_after = int(S.state()["rv"])
    S.make(name="rst-0", index=96)
    S.delete(name=S.pods()[1]["metadata"]["name"])
    check(name + ": simulator RVs went backwards (%d -> %d)" % (rv_before, rv_after), rv_after < rv_before)
    check(name + ": client relists after the restart", d.wait(lambda x: lists(x) >= 2, 20), d.stderr_tail())
    conv_check(name, d, timeout=20)
    d.stop()


def t_expired_continue(name):
    S.bulk_create(count=600, namespace="paged", job="big")
    S.call("chunking", mode="natural", delay_ms=0)
    d = Driver(["--apiserver", sim.url, "--token-file", TOKEN_FILE, "--ca-file", sim.ca,
                "--namespace", "paged", "--limit", "1", "--backoff-ms", "100"])
    # Keep expiring continue tokens while the 600-page list runs (etcd compaction).
    end = time.time() + scaled(60)
    i = 0
    while not d.synced and time.time() < end and d.proc.poll() is None:
        S.make(name="tick-%d" % i, index=i, namespace="other")
        S.compact()
        i += 1
    check(name + ": expired continue token restarts the list", d.wait_synced(timeout=30) and
          d.wait_log("continue token expired"), d.stderr_tail())
    good, want = converged(d, S, namespace="paged")
    check(name + ": the restarted list is complete (%d pods)" % len(want), good and d.synced[0] == 600,
          diff(model_view(d), want))
    d.stop()
    S.call("clear")
    for _ in range(6):
        S.make(name="trainer-%d-x" % _, index=_)


def t_streaming(name):
    d = driver("--streaming-list")
    check(name + ": synced from the initial events", d.wait_synced() and d.synced[0] == len(truth(S)) and
          d.wait_log("streamed %d objects (sendInitialEvents)" % len(truth(S))), d.stderr_tail())
    S.make(name="wl-0", index=97)
    S.ready(name="wl-0", ready=False)
    conv_check(name, d)
    S.compact()
    S.stall(seconds=30)
    S.make(name="wl-1", index=98)
    S.compact()
    S.cut(mode="clean")
    check(name + ": 410 -> a new streaming list", d.wait(lambda x: lists(x) >= 2), d.stderr_tail())
    S.stall(seconds=0)
    conv_check(name + " after relist", d)
    d.stop()
    S.call("config", watchlist=False)
    d = driver("--streaming-list")
    check(name + ": falls back to LIST when the server rejects it (422)", d.wait_synced(timeout=30) and
          d.wait_log("does not support streaming lists") and d.wait_log("listed"), d.stderr_tail())
    conv_check(name + " (fallback)", d)
    d.stop()
    S.call("config", watchlist=True)
    S.delete(name="wl-0")
    S.delete(name="wl-1")


def t_list_failures(name):
    S.fail(code=503, count=2, match="list", kind="status")
    t0 = time.time()
    d = driver("--backoff-ms", "200")
    good = d.wait_synced(timeout=20)
    took = time.time() - t0
    # Backoff 200 ms then 400 ms, each x[1,2) jitter: at least 0.6 s before the third LIST.
    check(name + ": 503 on LIST backs off and retries (%.2f s)" % took, good and took >= 0.6 and
          d.wait_log("HTTP 503") and d.wait_log("retrying") and d.count_log("list failed") == 2,
          d.stderr_tail())
    d.stop()
    check(name + ": the failed LISTs count as API error 503 (twice)", breakdown(d, "errors") == {"503": 2},
          str(d.stats))
    S.fail(code=429, count=1, match="list", kind="apf", retry_after=2)
    t0 = time.time()
    d = driver()
    good = d.wait_synced(timeout=20)
    took = time.time() - t0
    check(name + ": 429 on LIST waits Retry-After (%.2f s)" % took, good and took >= 1.9 and
          d.wait_log("list throttled"), d.stderr_tail())
    conv_check(name, d)
    d.stop()


def t_convergence(name):
    rnd = random.Random(7)
    d = driver("--limit", "3")
    ready(d)
    names = [p["metadata"]["name"] for p in S.pods()]
    n_ops = 0
    faults = ["cut-clean", "cut-abrupt", "cut-mid", "malformed", "compact-cut", "none", "none"]
    for step in range(120):
        op = rnd.choice(["make", "delete", "ready", "ip", "labels", "labels"])
        if op == "make" or not names:
            nm = "conv-%d" % step
            S.make(name=nm, index=100 + step, ready=rnd.random() < 0.5)
            names.append(nm)
        elif op == "delete":
            nm = names.pop(rnd.randrange(len(names)))
            S.delete(name=nm)
        elif op == "ready":
            S.ready(name=rnd.choice(names), ready=rnd.random() < 0.5)
        elif op == "ip":
            S.set_ip(name=rnd.choice(names), ip="10.1.%d.%d" % (rnd.randrange(255), rnd.randrange(255)))
        else:
            S.labels(name=rnd.choice(names), set="step=%d" % step)
        n_ops += 1
        if step % 15 == 7:
            f = rnd.choice(faults)
            if f.startswith("cut-"):
                S.cut(mode={"cut-clean": "clean", "cut-abrupt": "abrupt", "cut-mid": "mid-event"}[f])
            elif f == "malformed":
                S.call("malformed")
            elif f == "compact-cut":
                S.compact()
                S.cut(mode="clean")
    conv_check(name + " (%d random changes with faults)" % n_ops, d, timeout=30)
    d.stop()
    ok(name + ": stats " + " ".join("%s=%s" % kv for kv in sorted((d.stats or {}).items())))
    stats_check(name, d, starts=("initial",))
    check(name + ": every callback saw a plausible event time", (d.stats or {}).get("badtime") == "0",
          str(d.stats))


scenario("basic list+watch", t_basic)
scenario("bookmarks", t_bookmarks)
scenario("selectors", t_selectors)
scenario("get", t_get)
scenario("in-stream ERROR 410", lambda n: t_expired_watch(n, "event"))
scenario("HTTP 410 at watch start", lambda n: t_expired_watch(n, "http410"))
scenario("clean end of stream", lambda n: t_cut(n, "clean"))
scenario("abrupt cut", lambda n: t_cut(n, "abrupt"))
scenario("cut mid-event", lambda n: t_cut(n, "mid-event"))
scenario("malformed line", t_malformed)
scenario("oversized event", t_oversize)
scenario("stall", t_stall)
scenario("429 Retry-After", t_429)
scenario("token rotation", t_token_rotation)
scenario("403", t_forbidden)
scenario("apiserver restart (RVs backwards)", t_restart)
scenario("expired continue token", t_expired_continue)
scenario("streaming list", t_streaming)
scenario("list failures", t_list_failures)
scenario("convergence", t_convergence)

stop_all()
sim.stop()
shutil.rmtree(TMP, ignore_errors=True)
reports = sanitizer_reports()
check("no sanitizer report from any driver run", not reports, "\n".join(reports[:20]))
done()
