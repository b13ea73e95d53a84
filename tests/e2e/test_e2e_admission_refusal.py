#!/usr/bin/env python3
"""Scenario 9 (docs/e2e.md): a pod labelled for injection whose tpumesh.dev/ annotations
tpumesh-init would refuse (here tpumesh.dev/port "8470", a port TPU software uses) is refused at
admission by the real API server, with the message tpumesh-init gives for it, so no pod is
created to crash-loop. Checked for a bare Pod (the API server's answer to kubectl) and for an
Indexed Job (the Job controller's FailedCreate event; no pod exists)."""
import os
import re
import subprocess
import tempfile
import time

from e2e import check, done, install_injector_manifests, load_manifests, apply_all, setup, wait, pods
import controlplane
import kube
from node import annotations_file

NAME = "an annotation tpumesh-init refuses is refused at admission"
NS = "refused"
BAD = {"tpumesh.dev/port": "8470"}


def init_message(annotations):
    """tpumesh-init's own verdict on these annotations: exit code and its last error line's message."""
    with tempfile.TemporaryDirectory() as d:
        ann = os.path.join(d, "annotations")
        with open(ann, "w") as f:
            f.write(annotations_file(annotations))
        os.mkdir(os.path.join(d, "out"))
        r = subprocess.run([os.path.join(controlplane.BUILD, "bin", "tpumesh-init"), "--out-dir", os.path.join(d, "out"),
                            "--annotations-file", ann],
                           capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/bin:/bin", "TPUMESH_SKIP_INIT": "true", "TPU_WORKER_ID": "0",
                                "TPU_WORKER_HOSTNAMES": "localhost", "TPU_ACCELERATOR_TYPE": "v5litepod-1",
                                "TPU_TOPOLOGY": "1x1"})
    errs = [line for line in r.stderr.splitlines() if " ERROR " in line]
    # "2026-...Z ERROR <module> <message> key=value...": keep the message's text
    m = re.match(r"^\S+\s+ERROR\s+\S+\s+(.*)$", errs[-1]) if errs else None
    return r.returncode, (m.group(1) if m else ""), r.stderr


def _rbac_subject(d):
    if d["kind"] == "RoleBinding":
        for s in d["subjects"]:
            s["namespace"] = NS


def main():
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    code, msg, stderr = init_message(BAD)
    if not check("tpumesh-init refuses tpumesh.dev/port 8470 with exit 2 and an error line", code == 2 and msg, stderr[-1500:]):
        return done()
    print("# tpumesh-init: %s" % msg)
    if not check("injector up (k8s/injector.yaml)", install_injector_manifests(cp), "\n".join(node.notes[-5:])):
        return done()
    # The injector serves namespaces labelled for it (k8s/injector.yaml's namespaceSelector).
    cp.namespace(NS, enforce="restricted", labels={"tpumesh.dev/injection": "enabled"})
    apply_all(cp, load_manifests("k8s/rbac.yaml", NS, edit=_rbac_subject))
    pod = next(d for d in load_manifests("k8s/injected-job-v5litepod-16.yaml", NS) if d["kind"] == "Job")
    tpl = pod["spec"]["template"]
    tpl["metadata"]["annotations"].update(BAD)
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-port", "namespace": NS,
                                                              "labels": tpl["metadata"]["labels"],
                                                              "annotations": tpl["metadata"]["annotations"]},
            "spec": dict(tpl["spec"], restartPolicy="Never", serviceAccountName="default")}
    i = msg.find("annotation tpumesh.dev/")
    core = msg[i:] if i >= 0 else msg
    try:
        cp.admin.create("pods", bare, namespace=NS)
        check("a bare labelled Pod with tpumesh.dev/port 8470 is refused at admission", False, "it was created")
    except kube.ApiError as e:
        check("a bare labelled Pod with tpumesh.dev/port 8470 is refused at admission by the injector",
              "inject.tpumesh.dev" in e.message and e.status in (400, 403), e.message)
        check("... with tpumesh-init's message (%r)" % core, core and core in e.message,
              "admission: %s\ninit:      %s" % (e.message, msg))
    apply_all(cp, [pod])
    ev = wait(lambda: [x for x in cp.admin.list("events", NS)["items"] if x["reason"] == "FailedCreate"], 30)
    check("the Job controller's pod creation fails with FailedCreate giving tpumesh-init's message",
          ev and core in ev[0]["message"], ev and ev[0]["message"])
    time.sleep(1)
    check("no pod of the Job exists (nothing to crash-loop)",
          not pods(cp, NS, "batch.kubernetes.io/job-name=tpumesh-v5e16-injected"))
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
