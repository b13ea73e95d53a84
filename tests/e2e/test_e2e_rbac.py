#!/usr/bin/env python3
"""Scenario 5 (docs/e2e.md): the real RBAC authorizer decides what the sidecar may do.

a. The chart's Role (k8s/rbac.yaml, equal to the chart at default values) is enough and nothing
   more: the pods of k8s/job-v5litepod-16.yaml become Ready with it, and `kubectl auth can-i
   --list` run with a pod's own bound token lists exactly what a fresh service account may do
   plus the Role's rules.
b. Without `get` on jobs (the owner) the sidecar takes the count from the slice (4 hosts of
   v5litepod-16) and says so in its log; topology.json's expectedWorkersSource is "slice".
c. Without `list` on pods the sidecar names the verb and resource it lacks in its log and in
   /readyz, and the pod is not Ready."""
import json
import os
import re
import urllib.request

from e2e import (apply_all, check, done, load_manifests, out_dir, pod_log, pods, setup, wait, wait_pods_ready)
import controlplane

NAME = "RBAC: the chart's Role, and what the sidecar says without parts of it"
SEL = "batch.kubernetes.io/job-name=tpumesh-v5e16"


def workload(ns, role_edit=None, drop_expected=False):
    def edit(d):
        if d["kind"] == "RoleBinding":
            for s in d["subjects"]:
                s["namespace"] = ns
        if d["kind"] == "Role" and role_edit:
            role_edit(d)
        if d["kind"] == "Job" and drop_expected:
            d["spec"]["template"]["metadata"]["annotations"].pop("tpumesh.dev/expected-workers", None)
    return load_manifests("k8s/rbac.yaml", ns, edit) + load_manifests("k8s/job-v5litepod-16.yaml", ns, edit)


def can_i_list(cp, token):
    kc = controlplane.kubeconfig(os.path.join(cp.dir, "can-i-%d.kubeconfig" % abs(hash(token))), cp.server,
                                 cp.pki.ca, token=token)
    r = cp.kubectl("auth", "can-i", "--list", "-n", "rbac-a", kubeconfig_path=kc)
    rows = set()
    for line in r.stdout.splitlines()[1:]:
        parts = line.split()
        if not parts:
            continue
        # Resources  Non-Resource URLs  Resource Names  Verbs: the verbs are the last [..] group.
        verbs = line[line.rfind("["):].strip("[] ").split()
        rows.add((parts[0], tuple(sorted(verbs))))
    return rows, r


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    for ns in ("rbac-a", "rbac-b", "rbac-c"):
        cp.namespace(ns, enforce="restricted")
    apply_all(cp, workload("rbac-a"))
    apply_all(cp, workload("rbac-b", role_edit=lambda r: r.__setitem__(
        "rules", [x for x in r["rules"] if "jobs" not in x["resources"]]), drop_expected=True))
    apply_all(cp, workload("rbac-c", role_edit=lambda r: r["rules"][0].__setitem__("verbs", ["get", "watch"])))

    # a.
    ps = wait_pods_ready(cp, "rbac-a", SEL, 4, timeout=120)
    check("a: with k8s/rbac.yaml's Role the 4 pods become Ready", ps, "\n".join(node.notes[-5:]))
    if ps:
        logs = "".join(pod_log(node, p, "tpumesh-sidecar") for p in ps)
        # A refusal reads "<VERB> <resource>: 403 Forbidden (...)" (io/k8s_client); a bare
        # "403" also appears in durations ("over 403 ms") and pod uids.
        refused = [x for x in logs.splitlines() if re.search(r"\b403 Forbidden\b", x) or "forbidden" in x.lower()]
        check("a: no sidecar was refused anything (no 403 in their logs)", not refused, "\n".join(refused)[:2000])
        cp.admin.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "baseline", "namespace": "rbac-a"}})
        base, _ = can_i_list(cp, cp.token("rbac-a", "baseline"))
        pod = ps[0]
        mine, r = can_i_list(cp, cp.token("rbac-a", "tpumesh", pod=pod))
        role = next(d for d in load_manifests("k8s/rbac.yaml") if d["kind"] == "Role")
        want = set()
        for rule in role["rules"]:
            for res in rule["resources"]:
                g = rule["apiGroups"][0]
                want.add((res if not g else "%s.%s" % (res, g), tuple(sorted(rule["verbs"]))))
        extra = mine - base
        check("a: kubectl auth can-i --list with a pod's bound token: a fresh account's rights + exactly the Role's",
              extra == want and base <= mine, "extra %s\nwant  %s\n%s" % (sorted(extra), sorted(want), r.stdout))

    # b.
    ps = wait_pods_ready(cp, "rbac-b", SEL, 4, timeout=90)
    check("b: without get on jobs the 4 pods still become Ready (count from the slice)", ps,
          "\n".join(node.notes[-5:]))
    if ps:
        p = ps[0]
        log = pod_log(node, p, "tpumesh-sidecar")
        check("b: the sidecar logs that it took the count from the slice", "from the slice" in log, log[-1500:])
        try:
            with open(os.path.join(out_dir(node, p), "topology.json")) as f:
                src = json.load(f).get("expectedWorkersSource")
        except (OSError, ValueError) as e:
            src = str(e)
        check("b: topology.json expectedWorkersSource is \"slice\"", src == "slice", "got %r" % src)

    # c.
    def c_state():
        ps = [p for p in pods(cp, "rbac-c", SEL) if p.get("status", {}).get("podIP")]
        for p in ps:
            pr = node.pods.get("rbac-c/" + p["metadata"]["name"])
            if not pr or "tpumesh-sidecar" not in pr.procs:
                continue
            try:
                urllib.request.urlopen("http://%s:9431/readyz" % pr.ip, timeout=2)
                body = "200"
            except urllib.error.HTTPError as e:
                body = e.read().decode("utf-8", "replace")
            except OSError:
                continue
            log = pod_log(node, p, "tpumesh-sidecar")
            if "list" in body and "pods" in body:
                return p, body, log
        return None
    st = wait(c_state, 90, 0.5)
    if check("c: without list on pods /readyz names the verb and the resource", st,
             "\n".join(node.notes[-5:])):
        p, body, log = st
        lines = [x for x in log.splitlines() if "list" in x and "pods" in x and ("403 Forbidden" in x or "orbid" in x or "not allowed" in x or "authoriz" in x)]
        check("c: ... and so does the sidecar's log", lines, log[-1500:])
        check("c: ... and the pod is not Ready", not any(c["type"] == "Ready" and c["status"] == "True"
                                                         for c in cp.admin.get("pods", p["metadata"]["name"], "rbac-c")
                                                         ["status"].get("conditions", [])))
        print("# /readyz: %s" % body.strip())
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
