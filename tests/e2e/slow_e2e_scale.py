#!/usr/bin/env python3
"""Scenario 8 (docs/e2e.md, `make e2e-slow`): relay and direct mode at 64 pods, API cost measured
by the real API server itself.

An Indexed Job of 64 (k8s/job-v5litepod-16.yaml's pod template without TPU node selectors,
tpumesh.dev/tpu local, 64 expected workers, ip addresses) runs once with every sidecar in
--watch-mode direct and once in relay, each in a fresh namespace. For each run the API server's
own /metrics are read before the Job is applied and once all 64 pods are Ready (+ 5 s):
apiserver_watch_events_sizes_sum and apiserver_response_sizes_sum for pods, and the API server
process's CPU seconds. Relay must cost at most 1/10 of direct in bytes sent to watchers."""
import re
import time

from e2e import apply_all, check, done, load_manifests, setup, sidecar_metrics, wait, pods

NAME = "relay vs direct at 64 pods (API server metrics)"
N = int(__import__("os").environ.get("E2E_SCALE_PODS", "64"))


def sidecar_counts(node, ns):
    """Sum over the namespace's sidecars of their own LIST and WATCH counters (/metrics)."""
    out = {"lists": 0.0, "watch_starts": 0.0}
    for pr in list(node.pods.values()):
        if pr.ns != ns or "tpumesh-sidecar" not in pr.procs:
            continue
        try:
            m = sidecar_metrics(pr.ip)
        except OSError:
            continue
        out["lists"] += m.get("tpumesh_api_lists_total", 0.0)
        out["watch_starts"] += m.get("tpumesh_watch_starts_total", 0.0)
    return out


def manifests(ns, mode):
    def edit(d):
        if d["kind"] == "RoleBinding":
            for s in d["subjects"]:
                s["namespace"] = ns
        if d["kind"] == "Job":
            d["metadata"]["name"] = "scale"
            d["spec"]["completions"] = d["spec"]["parallelism"] = N
            tpl = d["spec"]["template"]
            ann = tpl["metadata"]["annotations"]
            ann.update({"tpumesh.dev/tpu": "local", "tpumesh.dev/expected-workers": str(N),
                        "tpumesh.dev/address-mode": "ip"})
            spec = tpl["spec"]
            spec.pop("nodeSelector", None)
            spec.pop("subdomain", None)
            for c in spec.get("initContainers", []) + spec["containers"]:
                # the example's selector names its own Job; this one's pods derive theirs
                c["env"] = [e for e in c.get("env") or [] if e["name"] != "TPUMESH_SELECTOR"]
                for k in ("requests", "limits"):
                    (c.get("resources") or {}).get(k, {}).pop("google.com/tpu", None)
                    (c.get("resources") or {}).get(k, {}).pop("cpu", None)
                    (c.get("resources") or {}).get(k, {}).pop("memory", None)
                if c["name"] == "tpumesh-sidecar":
                    c.setdefault("env", []).append({"name": "TPUMESH_WATCH_MODE", "value": mode})
            if mode == "none":  # the control plane's own cost of the job: no tpumesh at all
                spec["initContainers"] = []
                spec["containers"][0]["volumeMounts"] = [m for m in spec["containers"][0].get("volumeMounts") or []
                                                         if m["name"] == "scratch"]
    return [d for d in load_manifests("k8s/rbac.yaml", ns, edit) + load_manifests("k8s/job-v5litepod-16.yaml", ns, edit)
            if d["kind"] != "Service"]


def scrape(cp):
    text = cp.metrics()
    out = {"watch_bytes": 0.0, "list_bytes": 0.0, "watch_resp_bytes": 0.0, "cpu": 0.0, "list_requests": 0.0}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if not m:
            continue
        name, labels, v = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "apiserver_watch_events_sizes_sum" and 'resource="pods"' in labels:
            out["watch_bytes"] += v
        elif name == "apiserver_response_sizes_sum" and 'resource="pods"' in labels:
            if 'verb="LIST"' in labels:
                out["list_bytes"] += v
            elif 'verb="WATCH"' in labels:
                out["watch_resp_bytes"] += v
        elif name == "apiserver_request_total" and 'resource="pods"' in labels and 'verb="LIST"' in labels:
            out["list_requests"] += v
        elif name == "process_cpu_seconds_total":
            out["cpu"] = v
    return out


def run(cp, node, mode):
    ns = "scale-" + mode
    cp.namespace(ns, enforce="restricted")
    before = scrape(cp)
    t0 = time.monotonic()
    apply_all(cp, manifests(ns, mode))
    # Readiness as the node pushed it (no LIST polling of our own during the measurement).
    ps = wait(lambda: sum(1 for pr in list(node.pods.values()) if pr.ns == ns and pr.last_ready) == N, 600, 0.5)
    took = time.monotonic() - t0
    time.sleep(5)
    after = scrape(cp)
    cost = {k: after[k] - before[k] for k in after}
    cost["seconds"] = took
    cost.update(sidecar_counts(node, ns))
    print("# %s: %d pods Ready in %.1f s; pod watch events %.0f B, pod LIST responses %.0f B, API server CPU %.1f s;"
          " %d pod LIST requests; the sidecars' own counters: %d LISTs, %d WATCHes"
          % (mode, N, took, cost["watch_bytes"], cost["list_bytes"], cost["cpu"], cost["list_requests"],
             cost["lists"], cost["watch_starts"]))
    ok = bool(ps)
    cp.admin.delete("jobs", "scale", ns, propagation="Foreground")
    wait(lambda: not pods(cp, ns, "batch.kubernetes.io/job-name=scale"), 120, 1)
    return ok, cost


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    ok_b, base = run(cp, node, "none")
    check("baseline without tpumesh: %d pods Ready (%.0f s)" % (N, base["seconds"]), ok_b)
    ok_d, direct = run(cp, node, "direct")
    check("direct: %d pods Ready (%.0f s)" % (N, direct["seconds"]), ok_d, "\n".join(node.notes[-5:]))
    ok_r, relay = run(cp, node, "relay")
    check("relay: %d pods Ready (%.0f s)" % (N, relay["seconds"]), ok_r, "\n".join(node.notes[-5:]))
    if ok_b and ok_d and ok_r:
        # tpumesh's own cost: what a run adds over the same job without tpumesh (the Job
        # controller's and the node's watches and writes are the same in every run).
        def extra(c):
            return c["watch_bytes"] + c["list_bytes"] - base["watch_bytes"] - base["list_bytes"]
        ratio = extra(relay) / max(extra(direct), 1)
        check("relay's API egress for pods (watch events + LIST responses, over the baseline) is at most 1/10 of "
              "direct's (%.0f / %.0f = %.3f)" % (extra(relay), extra(direct), ratio), ratio <= 0.1)
        print("# API server CPU seconds: none %.1f, direct %.1f, relay %.1f"
              % (base["cpu"], direct["cpu"], relay["cpu"]))
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
