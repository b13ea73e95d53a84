#!/usr/bin/python3
"""Drives the kube-apiserver simulator (HTTPS, bearer token) with the official Kubernetes Python
client (python3-kubernetes): typed list with selectors and pagination, get, watch with bookmarks,
410 on an expired resourceVersion, 401/404/429. Prints TAP."""

import datetime
import os
import sys
import tempfile
import threading
import time

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim", "kube-apiserver"))

import tap  # noqa: E402
from simctl import start_sim  # noqa: E402

try:
    from kubernetes import client, watch
    from kubernetes.client.rest import ApiException
except ImportError as e:  # pragma: no cover
    print("not ok 1 - import kubernetes (python3-kubernetes): %s" % e)
    sys.exit(1)

TOKEN = "py-token-1"
NS = "ml"


def api_for(sim, token=TOKEN):
    cfg = client.Configuration()
    cfg.host = sim.url
    cfg.ssl_ca_cert = sim.ca
    cfg.verify_ssl = True
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.CoreV1Api(client.ApiClient(cfg))


def later(delay, fn):
    t = threading.Timer(delay, fn)
    t.daemon = True
    t.start()
    return t


def stream_until(w, fn, stop, limit=10.0, **kw):
    """Collect watch events until stop(events) is true (then w.stop()) or `limit` seconds pass."""
    got = []
    kill = later(limit, w.stop)
    try:
        for ev in w.stream(fn, **kw):
            got.append(ev)
            if stop(got):
                w.stop()
    finally:
        kill.cancel()
    return got


def main():
    import kubernetes
    print("# python3-kubernetes %s" % kubernetes.__version__, flush=True)
    state_dir = tempfile.mkdtemp(prefix="kubesim-py.")
    sim = start_sim(["--tls", "--token", TOKEN, "--state-dir", state_dir, "--seed", "5"])
    try:
        run(sim)
    finally:
        sim.stop()
    tap.done()


def run(sim):
    c = sim.client
    api = api_for(sim)
    # 12 workers of job "trainer" (index 0..11), 3 of them not ready, one Pending without IP,
    # plus two pods of another job and one in another namespace.
    ops = []
    for i in range(12):
        ops.append({"verb": "make", "namespace": NS, "job": "trainer", "index": i, "name": "trainer-%d-x%04d" % (i, i),
                    "ready": i not in (3, 5, 7)})
    ops[11].update({"ip": "", "phase": "Pending", "ready": False})
    ops.append({"verb": "make", "namespace": NS, "job": "other", "index": 0, "name": "other-0-aaaaa",
                "labels": {"tier": "infra"}})
    ops.append({"verb": "make", "namespace": NS, "job": "other", "index": 1, "name": "other-1-aaaaa",
                "labels": {"tier": "data"}})
    ops.append({"verb": "make", "namespace": "elsewhere", "job": "trainer", "index": 0, "name": "trainer-0-zzzzz"})
    c.call("batch", ops=ops)
    truth = {p["metadata"]["name"]: p for p in c.pods(namespace=NS)}

    # --- typed list --------------------------------------------------------------------------------------
    lst = api.list_namespaced_pod(NS)
    names = sorted(p.metadata.name for p in lst.items)
    tap.check("list_namespaced_pod returns the simulator's truth", names == sorted(truth), names)
    p3 = next(p for p in lst.items if p.metadata.name == "trainer-3-x0003")
    t3 = truth["trainer-3-x0003"]
    ready = [cnd.status for cnd in p3.status.conditions if cnd.type == "Ready"]
    tap.check("typed pod fields: uid, hostname, subdomain, podIP, Ready=False",
              p3.metadata.uid == t3["metadata"]["uid"] and p3.spec.hostname == "trainer-3"
              and p3.spec.subdomain == "trainer" and p3.status.pod_ip == t3["status"]["podIP"]
              and p3.status.pod_i_ps[0].ip == p3.status.pod_ip and ready == ["False"],
              (p3.metadata.uid, p3.spec.hostname, p3.status.pod_ip, ready))
    own = p3.metadata.owner_references[0]
    tap.check("ownerReferences and creationTimestamp deserialize",
              own.kind == "Job" and own.name == "trainer" and own.controller is True
              and isinstance(p3.metadata.creation_timestamp, datetime.datetime), own)
    tap.check("list resourceVersion is the simulator's rv", lst.metadata.resource_version == str(c.state()["rv"]),
              lst.metadata.resource_version)

    # --- label selectors, checked against an independent evaluation of the truth ----------------------------
    def lab(p):
        return p["metadata"].get("labels") or {}
    cases = [
        ("batch.kubernetes.io/job-name=trainer", lambda l: l.get("batch.kubernetes.io/job-name") == "trainer"),
        ("batch.kubernetes.io/job-name==other", lambda l: l.get("batch.kubernetes.io/job-name") == "other"),
        ("batch.kubernetes.io/job-name!=trainer", lambda l: l.get("batch.kubernetes.io/job-name") != "trainer"),
        ("batch.kubernetes.io/job-completion-index in (1,3,10)",
         lambda l: l.get("batch.kubernetes.io/job-completion-index") in ("1", "3", "10")),
        ("job-name=trainer,batch.kubernetes.io/job-completion-index notin (0,1,2)",
         lambda l: l.get("job-name") == "trainer" and l.get("batch.kubernetes.io/job-completion-index") not in (
             "0", "1", "2")),
        ("tier", lambda l: "tier" in l),
        ("!tier", lambda l: "tier" not in l),
        ("tier in (infra),job-name=other", lambda l: l.get("tier") == "infra" and l.get("job-name") == "other"),
    ]
    for sel, pred in cases:
        got = sorted(p.metadata.name for p in api.list_namespaced_pod(NS, label_selector=sel).items)
        want = sorted(n for n, p in truth.items() if pred(lab(p)))
        tap.check("labelSelector %s" % sel, got == want and len(want) > 0, (got, want))

    # --- field selectors -------------------------------------------------------------------------------------
    got = sorted(p.metadata.name for p in api.list_namespaced_pod(NS, field_selector="status.phase=Pending").items)
    tap.check("fieldSelector status.phase=Pending", got == ["trainer-11-x0011"], got)
    got = [p.metadata.name for p in api.list_namespaced_pod(NS, field_selector="metadata.name=other-1-aaaaa").items]
    tap.check("fieldSelector metadata.name", got == ["other-1-aaaaa"], got)
    node = truth["trainer-4-x0004"]["spec"]["nodeName"]
    got = [p.metadata.name for p in api.list_namespaced_pod(NS, field_selector="spec.nodeName=" + node).items]
    tap.check("fieldSelector spec.nodeName", got == ["trainer-4-x0004"], (node, got))
    got = sorted(p.metadata.namespace for p in api.list_pod_for_all_namespaces(
        field_selector="metadata.namespace!=%s" % NS).items)
    tap.check("list_pod_for_all_namespaces with fieldSelector metadata.namespace!=", got == ["elsewhere"], got)
    try:
        api.list_namespaced_pod(NS, field_selector="spec.nope=1")
        tap.fail("bad field selector raises ApiException 400")
    except ApiException as e:
        tap.check("bad field selector raises ApiException 400", e.status == 400 and "field label not supported" in e.body,
                  (e.status, e.body))

    # --- pagination with _continue -------------------------------------------------------------------------------
    pages, seen, rvs, tok = 0, [], set(), None
    while True:
        kw = {"limit": 4}
        if tok:
            kw["_continue"] = tok
        page = api.list_namespaced_pod(NS, **kw)
        pages += 1
        seen += [p.metadata.name for p in page.items]
        rvs.add(page.metadata.resource_version)
        if pages == 1:
            c.make(namespace=NS, name="late-0-aaaaa", job="late", index=0)  # after the snapshot
        tok = page.metadata._continue
        if not tok or pages > 20:
            break
    tap.check("pagination: 4 pages of 4 cover the snapshot exactly once", pages == 4 and sorted(seen) == sorted(truth)
              and len(seen) == len(set(seen)), (pages, len(seen)))
    tap.check("pagination: every page has the same resourceVersion", len(rvs) == 1, rvs)
    page = api.list_pod_for_all_namespaces(limit=5)
    tap.check("all-namespaces pagination: remainingItemCount", page.metadata.remaining_item_count == len(truth) + 2 - 5
              and page.metadata._continue, (page.metadata.remaining_item_count, len(truth)))
    tok = page.metadata._continue
    c.labels(name="other-0-aaaaa", namespace=NS, set={"touched": "1"})
    c.compact()
    try:
        api.list_pod_for_all_namespaces(limit=5, _continue=tok)
        tap.fail("expired continue raises ApiException 410")
    except ApiException as e:
        tap.check("expired continue raises ApiException 410 Expired", e.status == 410 and '"reason":"Expired"' in e.body,
                  (e.status, e.body[:200]))
    truth = {p["metadata"]["name"]: p for p in c.pods(namespace=NS)}

    # --- get -----------------------------------------------------------------------------------------------------
    p = api.read_namespaced_pod("trainer-0-x0000", NS)
    tap.check("read_namespaced_pod", p.kind == "Pod" and p.api_version == "v1" and p.metadata.name == "trainer-0-x0000",
              p.metadata.name)
    try:
        api.read_namespaced_pod("missing", NS)
        tap.fail("missing pod raises ApiException 404")
    except ApiException as e:
        tap.check("missing pod raises ApiException 404 NotFound", e.status == 404 and 'pods \\"missing\\" not found' in
                  e.body, e.body)

    # --- watch from the list RV: events made through the control API, bookmarks ------------------------------
    rv = api.list_namespaced_pod(NS).metadata.resource_version

    def actions():
        c.make(namespace=NS, name="trainer-12-x0012", index=12)
        c.ready(name="trainer-3-x0003", namespace=NS, ready=True)
        c.set_ip(name="trainer-11-x0011", namespace=NS, ip="10.9.9.9")
        c.call("bookmark")
        c.delete(name="trainer-12-x0012", namespace=NS, grace=30)
        c.delete(name="trainer-12-x0012", namespace=NS)
    later(0.5, actions)
    w = watch.Watch()
    evs = stream_until(w, api.list_namespaced_pod, lambda g: sum(1 for e in g if e["type"] == "DELETED") >= 1,
                       namespace=NS, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=20)
    kinds = [(e["type"], e["object"].metadata.name if e["type"] != "BOOKMARK" else None) for e in evs]
    want = [("ADDED", "trainer-12-x0012"), ("MODIFIED", "trainer-3-x0003"), ("MODIFIED", "trainer-11-x0011"),
            ("BOOKMARK", None), ("MODIFIED", "trainer-12-x0012"), ("DELETED", "trainer-12-x0012")]
    tap.check("watch.stream sees ADDED, MODIFIED, BOOKMARK, graceful MODIFIED, DELETED in order", kinds == want, kinds)
    if len(evs) == len(want):
        bm = evs[3]
        tap.check("bookmark carries the current resourceVersion", bm["raw_object"]["metadata"]["resourceVersion"] ==
                  evs[2]["object"].metadata.resource_version, bm["raw_object"])
        term = evs[4]["object"]
        tap.check("graceful delete: deletionTimestamp and grace period", term.metadata.deletion_timestamp is not None
                  and term.metadata.deletion_grace_period_seconds == 30, term.metadata.deletion_timestamp)
        tap.check("typed watch objects: the IP change", evs[2]["object"].status.pod_ip == "10.9.9.9",
                  evs[2]["object"].status.pod_ip)
        tap.check("Watch tracks resource_version through events and bookmarks",
                  w.resource_version == evs[-1]["object"].metadata.resource_version, w.resource_version)
    else:
        for name in ("bookmark carries the current resourceVersion", "graceful delete: deletionTimestamp and grace period",
                     "typed watch objects: the IP change", "Watch tracks resource_version through events and bookmarks"):
            tap.fail(name, "watch events missing")

    # --- watch without RV: initial ADDED events, then the initial-events-end bookmark ---------------------------
    n = len(api.list_namespaced_pod(NS, label_selector="job-name=trainer").items)
    evs = stream_until(watch.Watch(), api.list_namespaced_pod, lambda g: g[-1]["type"] == "BOOKMARK", namespace=NS,
                       label_selector="job-name=trainer", allow_watch_bookmarks=True, timeout_seconds=10)
    types = [e["type"] for e in evs]
    tap.check("watch without RV: one ADDED per pod, then a BOOKMARK", types == ["ADDED"] * n + ["BOOKMARK"], types)
    tap.check("initial-events-end annotation on that bookmark", evs and evs[-1]["raw_object"]["metadata"].get(
        "annotations", {}).get("k8s.io/initial-events-end") == "true", evs[-1]["raw_object"] if evs else None)

    # --- selector transition seen through the client -----------------------------------------------------------
    rv = api.list_namespaced_pod(NS).metadata.resource_version
    later(0.4, lambda: (c.labels(name="other-1-aaaaa", namespace=NS, set={"tier": "infra"}),
                        c.labels(name="other-1-aaaaa", namespace=NS, set={"tier": "data"})))
    evs = stream_until(watch.Watch(), api.list_namespaced_pod, lambda g: len(g) >= 2, namespace=NS,
                       label_selector="tier=infra", resource_version=rv, timeout_seconds=10)
    tap.check("selector transitions arrive as ADDED then DELETED", [(e["type"], e["object"].metadata.name) for e in evs]
              == [("ADDED", "other-1-aaaaa"), ("DELETED", "other-1-aaaaa")], [e["type"] for e in evs])

    # --- 410 on an expired resourceVersion ------------------------------------------------------------------------
    old_rv = rv
    c.compact()
    try:
        evs = stream_until(watch.Watch(), api.list_namespaced_pod, lambda g: True, namespace=NS,
                           resource_version=old_rv, timeout_seconds=5)
        tap.fail("expired RV raises ApiException 410", [e["type"] for e in evs])
    except ApiException as e:
        tap.check("expired RV raises ApiException 410", e.status == 410 and "too old resource version" in str(e.reason),
                  (e.status, e.reason))
    c.call("config", expired_watch="http410")
    try:
        stream_until(watch.Watch(), api.list_namespaced_pod, lambda g: True, namespace=NS, resource_version=old_rv,
                     timeout_seconds=5)
        tap.fail("HTTP 410 at watch start raises ApiException 410")
    except ApiException as e:
        tap.check("HTTP 410 at watch start raises ApiException 410", e.status == 410, e.status)
    c.call("config", expired_watch="event")

    # --- robustness seen by the official client -----------------------------------------------------------------
    rv = api.list_namespaced_pod(NS).metadata.resource_version
    c.call("chunking", mode="bytes", max=7)
    later(0.4, lambda: c.ready(name="trainer-5-x0005", namespace=NS, ready=True))
    evs = stream_until(watch.Watch(), api.list_namespaced_pod, lambda g: len(g) >= 1, namespace=NS, resource_version=rv,
                       timeout_seconds=10)
    tap.check("7-byte chunks: the client still decodes the event", [(e["type"], e["object"].metadata.name) for e in evs]
              == [("MODIFIED", "trainer-5-x0005")], [e["type"] for e in evs])
    c.call("chunking", mode="natural")

    # --- auth and throttling ------------------------------------------------------------------------------------------
    try:
        api_for(sim, token="wrong").list_namespaced_pod(NS)
        tap.fail("bad token raises ApiException 401")
    except ApiException as e:
        tap.check("bad token raises ApiException 401 Unauthorized", e.status == 401 and '"reason":"Unauthorized"' in e.body,
                  (e.status, e.body))
    # urllib3 (under the official client) retries a 429 that carries Retry-After, after waiting for it.
    before = c.stats()["codes"].get("429", 0)
    c.fail(429, count=1, retry_after=1)
    t0 = time.time()
    items = api.list_namespaced_pod(NS).items
    dt = time.time() - t0
    tap.check("APF 429 + Retry-After: the client waits and retries", len(items) > 0 and dt >= 0.9
              and c.stats()["codes"].get("429", 0) == before + 1, (dt, c.stats()["codes"]))
    c.fail(503, count=1, match="list", kind="status")
    try:
        api.list_namespaced_pod(NS)
        tap.fail("503 without Retry-After raises ApiException 503")
    except ApiException as e:
        tap.check("503 without Retry-After raises ApiException 503", e.status == 503 and
                  '"reason":"ServiceUnavailable"' in e.body, (e.status, e.body))
    c.token(token="py-token-2")
    try:
        api.list_namespaced_pod(NS)
        tap.fail("rotated token: old one gets 401")
    except ApiException as e:
        tap.check("rotated token: old one gets 401", e.status == 401, e.status)
    tap.check("rotated token: new one works", len(api_for(sim, "py-token-2").list_namespaced_pod(NS).items) > 0, "")

    # --- workload shapes: JobSet (multislice) and StatefulSet pods -----------------------------------------------
    api2 = api_for(sim, "py-token-2")
    c.bulk_create(8, namespace="ms", jobset="mslice", rjob="slice", per_slice=4)
    c.bulk_create(3, namespace="ms", statefulset="web")
    pods = api2.list_namespaced_pod("ms", label_selector="jobset.sigs.k8s.io/jobset-name=mslice").items
    hosts = sorted(p.spec.hostname for p in pods)
    tap.check("JobSet pods: hostnames <jobset>-<rjob>-<slice>-<index>, subdomain = JobSet",
              hosts == ["mslice-slice-%d-%d" % (s, i) for s in range(2) for i in range(4)]
              and all(p.spec.subdomain == "mslice" for p in pods), hosts)
    s1 = api2.list_namespaced_pod("ms", label_selector="jobset.sigs.k8s.io/job-index=1").items
    tap.check("JobSet pods: job-index label selects one slice, completion index 0..3",
              sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in s1) == ["0", "1", "2", "3"]
              and len({p.status.pod_ip for p in pods}) == 8, [p.metadata.name for p in s1])
    sts = api2.list_namespaced_pod("ms", label_selector="apps.kubernetes.io/pod-index").items
    tap.check("StatefulSet pods: name = hostname, pod-index label, owner StatefulSet",
              sorted((p.metadata.name, p.spec.hostname, p.metadata.labels["apps.kubernetes.io/pod-index"],
                      p.metadata.owner_references[0].kind) for p in sts)
              == [("web-%d" % i, "web-%d" % i, str(i), "StatefulSet") for i in range(3)], [p.metadata.name for p in sts])

    c.make(namespace="ms", name="mf-0-aaaaa", index=0, job="mf", managed_fields=True)
    p = api2.read_namespaced_pod("mf-0-aaaaa", "ms")
    mf = p.metadata.managed_fields or []
    tap.check("managedFields deserialize (V1ManagedFieldsEntry: manager, operation, subresource)",
              [(m.manager, m.operation, m.subresource) for m in mf] == [
                  ("kube-controller-manager", "Update", None), ("kubelet", "Update", "status")]
              and "f:status" in mf[1].fields_v1, [(m.manager, m.subresource) for m in mf])


if __name__ == "__main__":
    main()
