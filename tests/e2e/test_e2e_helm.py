#!/usr/bin/env python3
"""Scenario 1 (docs/e2e.md): `helm install` of charts/tpumesh (injector on, the chart's own
generated certificate) with Helm 3 and with Helm 4 (the binaries `make deps` unpacks into
build/helm, scripts/helm.sh), each waiting for the injector's Deployment, then a second install
for the same namespace (refused by name), then `helm test`: the chart's test pods run on the e2e node (tpumesh-injector --check-namespace creates a labelled
pod as a dry run through the real API server and its webhook; the topology pod runs
tpumesh-init and the sidecar) and leaves nothing behind (hook-succeeded), then `helm uninstall`."""
import os
import subprocess
import time

from e2e import check, done, setup, skip_needs, elapsed, ROOT
import controlplane
from tap import scaled

NAME = "helm install + helm test (charts/tpumesh)"
HELMS = [("3", "3.17.2"), ("4", "4.1.4")]


def helm(cp, binary, *args, timeout=240):
    home = os.path.join(cp.dir, "helm-home")
    os.makedirs(home, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "KUBECONFIG": cp.admin_kubeconfig,
           "HELM_CACHE_HOME": os.path.join(home, "cache"), "HELM_CONFIG_HOME": os.path.join(home, "config"),
           "HELM_DATA_HOME": os.path.join(home, "data")}
    return subprocess.run([binary] + list(args), capture_output=True, text=True, env=env, timeout=scaled(timeout))


def main():
    missing = [v for _, v in HELMS if not os.access(os.path.join(controlplane.BUILD, "helm", v, "helm"), os.X_OK)]
    if missing:
        skip_needs(NAME, "helm", "Helm %s not unpacked under %s/helm: run make deps" % (", ".join(missing), controlplane.BUILD))
        return done()
    env = setup(NAME)
    if not env:
        return done()
    cp, node = env
    chart = os.path.join(ROOT, "charts", "tpumesh")
    for major, ver in HELMS:
        binary = os.path.join(controlplane.BUILD, "helm", ver, "helm")
        ns = "tpumesh-h%s" % major
        cp.namespace(ns, enforce="restricted")
        t0 = time.monotonic()
        r = helm(cp, binary, "install", "tpumesh", chart, "--namespace", ns, "--wait", "--timeout", "%ds" % scaled(180))
        if not check("Helm %s: helm install (injector on) completes with the injector Ready (%s)" % (ver, elapsed(t0)),
                     r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:] + "\n" + "\n".join(node.notes[-5:])):
            continue
        # A second install whose injector would serve the same namespace is refused by name
        # (templates/validate.yaml reads the first one's webhook with lookup: only a real
        # cluster can show this; `helm template` sees no webhooks).
        r = helm(cp, binary, "install", "tpumesh-again", chart, "--namespace", ns, "--timeout", "%ds" % scaled(60))
        check("Helm %s: a second install for the same namespace is refused, naming the first" % ver,
              r.returncode != 0 and "already installed for these pods" in r.stderr and "tpumesh" in r.stderr,
              "exit %d\n%s" % (r.returncode, (r.stdout + r.stderr)[-1500:]))
        t1 = time.monotonic()
        r = helm(cp, binary, "test", "tpumesh", "--namespace", ns, "--timeout", "%ds" % scaled(120))
        if check("Helm %s: helm test passes (%s)" % (ver, elapsed(t1)), r.returncode == 0,
                 r.stdout[-2000:] + r.stderr[-1500:] + "\n" + "\n".join(node.notes[-5:])):
            # hook-succeeded: the test pods and the injection test's ServiceAccount, Role (it may
            # create pods) and RoleBinding are deleted once the test passed.
            left = []
            deadline = time.monotonic() + scaled(60)
            while time.monotonic() < deadline:
                q = cp.kubectl("get", "pods,serviceaccounts,roles,rolebindings", "-n", ns, "-o", "name")
                left = [n for n in q.stdout.split() if n.rsplit("/", 1)[-1] in ("tpumesh-test", "tpumesh-injection-test")]
                if q.returncode == 0 and not left:
                    break
                time.sleep(0.5)
            check("Helm %s: helm test left nothing behind (test pods, ServiceAccount, Role, RoleBinding)" % ver,
                  q.returncode == 0 and not left, "%s %s" % (left, q.stderr[-500:]))
        r = helm(cp, binary, "uninstall", "tpumesh", "--namespace", ns, "--wait", "--timeout", "%ds" % scaled(120))
        check("Helm %s: helm uninstall" % ver, r.returncode == 0, r.stdout[-800:] + r.stderr[-800:])
    return done()


if __name__ == "__main__":
    raise SystemExit(main())
