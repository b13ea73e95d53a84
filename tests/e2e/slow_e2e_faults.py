#!/usr/bin/env python3
"""Scenario 7 (docs/e2e.md, `make e2e-slow`): faults the real server produces, on the StatefulSet
of 3 from test_e2e_statefulset.py.

- Watch bookmarks: every sidecar receives BOOKMARK events from the real watch cache (it sends
  them about once a minute, hence a slow scenario).
- kube-apiserver restarted (SIGTERM, 2 s down, started again) during the sidecars' watches:
  every sidecar watches again, relists at most once (the restarted watch cache answers an old
  resourceVersion with 410), and then still follows changes: a pod deleted afterwards is
  republished with its new IP by every sidecar.
- etcd compacted at its current revision, then kube-apiserver restarted: every sidecar's resume
  gets the real 410 Gone, relists once, and converges."""
import json
import os
import time
import urllib.request

from e2e import apply_and_wait_ready, check, done, out_dir, setup, sidecar_metrics, wait, wait_pods_ready
from test_e2e_statefulset import manifests, NS, SEL

NAME = "faults of the real API server (restart, compaction, bookmarks)"


def total(m, prefix):
    return sum(v for k, v in m.items() if k == prefix or k.startswith(prefix + "{"))


def all_metrics(node, ps):
    return {p["metadata"]["name"]: sidecar_metrics(node.pods["%s/%s" % (NS, p["metadata"]["name"])].ip)
            for p in ps}


def ips_published(node, ps):
    want = [q["status"]["podIP"] for q in sorted(ps, key=lambda p: p["metadata"]["name"])]
    for p in ps:
        try:
            with open(os.path.join(out_dir(node, p), "topology.json")) as f:
                got = [w["ip"] for w in json.load(f)["workers"]]
        except (OSError, ValueError, KeyError):
            return False
        if got != want:
            return False
    return True


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    cp.namespace(NS, enforce="restricted")
    ps = apply_and_wait_ready(cp, node, manifests(), NS, SEL, 3, "the StatefulSet's 3 pods are Ready")
    if not ps:
        return done()

    # Bookmarks from the real watch cache.
    got = wait(lambda: all(m.get('tpumesh_watch_events_total{type="BOOKMARK"}', 0) >= 1
                           for m in all_metrics(node, ps).values()), 150, 2)
    check("every sidecar received a watch BOOKMARK from the real API server", got,
          json.dumps({k: v.get('tpumesh_watch_events_total{type="BOOKMARK"}') for k, v in all_metrics(node, ps).items()}))

    for label, compact in (("kube-apiserver restart", False), ("etcd compaction + kube-apiserver restart", True)):
        before = all_metrics(node, ps)
        if compact:
            with urllib.request.urlopen(cp.etcd_url + "/v3/kv/range", data=b'{"key":"AA=="}', timeout=5) as r:
                rev = int(json.load(r)["header"]["revision"])
            req = urllib.request.Request(cp.etcd_url + "/v3/kv/compaction",
                                         data=json.dumps({"revision": str(rev), "physical": True}).encode())
            with urllib.request.urlopen(req, timeout=30) as r:
                r.read()
            print("# etcd compacted at revision %d" % rev)
        t0 = time.monotonic()
        cp.restart_apiserver(down_seconds=2)
        print("# %s: API server back after %.1f s" % (label, time.monotonic() - t0))

        def resumed():
            now = all_metrics(node, ps)
            return now if all(total(now[n], "tpumesh_watch_starts_total") > total(before[n], "tpumesh_watch_starts_total")
                              for n in now) else None
        after = wait(resumed, 60, 1)
        if not check("%s: every sidecar watches again" % label, after):
            continue
        time.sleep(3)
        after = all_metrics(node, ps)
        relists = {n: total(after[n], "tpumesh_api_relists_total") - total(before[n], "tpumesh_api_relists_total")
                   for n in after}
        lists = {n: total(after[n], "tpumesh_api_lists_total") - total(before[n], "tpumesh_api_lists_total")
                 for n in after}
        check("%s: no relist storm (at most one LIST per sidecar): %s" % (label, lists),
              all(v <= 1 for v in lists.values()), json.dumps({"lists": lists, "relists": relists}))
        if compact:
            gone = {n: total(after[n], 'tpumesh_api_errors_total{code="410"}') - total(before[n], 'tpumesh_api_errors_total{code="410"}')
                    + total(after[n], 'tpumesh_watch_restarts_total{reason="expired"}')
                    - total(before[n], 'tpumesh_watch_restarts_total{reason="expired"}') for n in after}
            check("%s: every sidecar got the real 410 Gone and relisted" % label,
                  all(gone[n] >= 1 and relists[n] >= 1 for n in after), json.dumps({"410": gone, "relists": relists}))
        # Still following changes: delete pod 2, every sidecar publishes its new IP.
        victim = next(p for p in ps if p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "2")
        cp.admin.delete("pods", victim["metadata"]["name"], NS)
        ps2 = wait(lambda: (lambda x: x if x and all(p["metadata"]["uid"] != victim["metadata"]["uid"] for p in x) else None)(
            wait_pods_ready(cp, NS, SEL, 3, timeout=1)), 90, 0.5)
        ok2 = ps2 and wait(lambda: ips_published(node, ps2), 30, 0.5)
        check("%s: afterwards every sidecar still follows changes (a recreated pod's new IP is published)" % label,
              ok2, "\n".join(node.notes[-5:]))
        if ps2:
            ps = ps2
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
