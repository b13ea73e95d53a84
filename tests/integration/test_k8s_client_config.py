"""Configuration and authentication of the C Kubernetes client (tests/tools/k8s_driver) against
the kube-apiserver simulator: TLS with the right and the wrong CA, in-cluster configuration from
a service-account directory, kubeconfig with certificate-authority-data and an exec credential
plugin (expiry and 401 re-run), and configuration errors that name the file and the key."""
import base64
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from k8s_harness import DRIVER, Driver, converged, diff, model_view, sanitizer_reports, start_sim, stop_all  # noqa: E402
from tap import check, done, fail, scaled  # noqa: E402

TMP = tempfile.mkdtemp(prefix="k8s-config-")
SIM_TOKEN = os.path.join(TMP, "sim-token")


def plugin_calls(path):
    """How many times the fake exec plugin ran (one line each in its calls file)."""
    with open(path) as f:
        return len(f.read().splitlines())


def write(path, text, mode=None):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    if mode:
        os.chmod(tmp, mode)
    os.rename(tmp, path)


def run(args, env=None, timeout=20):
    e = dict(os.environ)
    for k in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG", "TPUMESH_SA_DIR",
              "POD_NAMESPACE"):
        e.pop(k, None)
    e["HOME"] = TMP  # no ~/.kube/config
    e.update(env or {})
    p = subprocess.run([DRIVER] + args, capture_output=True, text=True, env=e, timeout=scaled(timeout))
    STDERRS.append(p.stderr)
    return p.returncode, p.stdout, p.stderr


STDERRS = []


write(SIM_TOKEN, "secret-a\n")
sim = start_sim(["--tls", "--client-cert-auth", "--token-file", SIM_TOKEN, "--state-dir", os.path.join(TMP, "sim"),
                 "--pods", "3"])
S = sim.client
POD = S.pods()[0]["metadata"]["name"]
CLIENT_CRT = os.path.join(TMP, "sim", "client.crt")
CLIENT_KEY = os.path.join(TMP, "sim", "client.key")


def b64file(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()

PORT = str(sim.port)

try:
    # -- TLS ------------------------------------------------------------------------------
    write(os.path.join(TMP, "tok"), "secret-a\n")
    rc, out, err = run(["--apiserver", sim.url, "--token-file", os.path.join(TMP, "tok"), "--ca-file", sim.ca,
                        "--namespace", "default", "--get", POD])
    check("TLS with the simulator's CA: GET works", rc == 0 and out.startswith("GOT default/" + POD), err)

    other = os.path.join(TMP, "other-ca")
    os.makedirs(other)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other-ca",
                    "-keyout", os.path.join(other, "ca.key"), "-out", os.path.join(other, "ca.crt")],
                   check=True, capture_output=True, timeout=60)
    rc, out, err = run(["--apiserver", sim.url, "--token-file", os.path.join(TMP, "tok"), "--ca-file",
                        os.path.join(other, "ca.crt"), "--namespace", "default", "--get", POD])
    check("TLS with a wrong CA fails clearly", rc == 1 and "TLS with https://127.0.0.1:" in err and
          os.path.join(other, "ca.crt") in err and "check --ca-file" in err, err)

    rc, out, err = run(["--apiserver", sim.url, "--token-file", os.path.join(TMP, "tok"), "--ca-file",
                        os.path.join(TMP, "missing.crt"), "--get", POD])
    check("a missing CA file is a configuration error naming it", rc == 2 and "missing.crt cannot be read" in err, err)

    write(os.path.join(TMP, "bad-tok"), "wrong\n")
    rc, out, err = run(["--apiserver", sim.url, "--token-file", os.path.join(TMP, "bad-tok"), "--ca-file", sim.ca,
                        "--namespace", "default", "--get", POD])
    check("a rejected token is a clear 401 error", rc == 1 and "401 Unauthorized" in err and "wrong" not in err, err)

    # -- in-cluster -----------------------------------------------------------------------
    sa = os.path.join(TMP, "sa")
    os.makedirs(sa)
    write(os.path.join(sa, "token"), "secret-a\n")
    write(os.path.join(sa, "namespace"), "default\n")
    with open(sim.ca) as f:
        write(os.path.join(sa, "ca.crt"), f.read())
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": PORT, "TPUMESH_SA_DIR": sa}
    rc, out, err = run(["--get", POD], env=env)
    check("in-cluster: host/port env + token, ca.crt and namespace files", rc == 0 and
          out.startswith("GOT default/" + POD) and "(in-cluster)" in err, out + err)
    os.unlink(os.path.join(sa, "ca.crt"))
    rc, out, err = run(["--get", POD], env=env)
    check("in-cluster without ca.crt names the file and the fix", rc == 2 and "ca.crt" in err and
          "automountServiceAccountToken" in err, err)

    # -- kubeconfig with an exec credential plugin -----------------------------------------
    with open(sim.ca, "rb") as f:
        ca_b64 = base64.b64encode(f.read()).decode()
    calls = os.path.join(TMP, "plugin-calls")
    plugin_tok = os.path.join(TMP, "plugin-token")
    expire_file = os.path.join(TMP, "plugin-expire-in")  # when present, overrides EXPIRE_IN
    write(plugin_tok, "secret-a")
    plugin = os.path.join(TMP, "bin", "fake-auth-plugin")
    os.makedirs(os.path.dirname(plugin))
    # Prints an ExecCredential whose token comes from a file and expires in $EXPIRE_IN s.
    write(plugin, """#!/bin/sh
echo "$@ $FOO" >> "%s"
[ "$KUBERNETES_EXEC_INFO" ] || exit 3
printf '%%s\\n' "$KUBERNETES_EXEC_INFO" > "%s.info"
[ -f "%s" ] && EXPIRE_IN=$(cat "%s")
exp=$(date -u -d "+${EXPIRE_IN:-3600} seconds" +%%Y-%%m-%%dT%%H:%%M:%%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%%s","expirationTimestamp":"%%s"}}\\n' "$(cat %s)" "$exp"
""" % (calls, calls, expire_file, expire_file, plugin_tok), mode=stat.S_IRWXU)
    kc = os.path.join(TMP, "kube", "config")
    os.makedirs(os.path.dirname(kc))
    write(kc, """apiVersion: v1
kind: Config
current-context: sim
clusters:
- name: simc
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: plug
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ../bin/fake-auth-plugin
      args: ["--project", "p1"]
      env: [{name: FOO, value: bar}, {name: EXPIRE_IN, value: "11"}]
      interactiveMode: Never
      provideClusterInfo: true
contexts:
- name: sim
  context: {cluster: simc, user: plug, namespace: default}
""" % (sim.url, ca_b64))
    rc, out, err = run(["--kubeconfig", kc, "--get", POD], env={"FOO": "outer"})
    with open(calls) as f:
        first = f.read()
    with open(calls + ".info") as f:
        info = f.read()
    check("kubeconfig + exec plugin: GET works", rc == 0 and out.startswith("GOT default/" + POD), err)
    check("exec plugin ran once with its args and env (kubeconfig env wins)", first == "--project p1 bar\n",
          repr(first))
    check("KUBERNETES_EXEC_INFO carries spec.cluster (provideClusterInfo)",
          '"kind":"ExecCredential"' in info and '"interactive":false' in info and
          '"server":"%s"' % sim.url in info and '"certificate-authority-data":"%s"' % ca_b64 in info, info)

    rc, out, err = run(["--get", POD], env={"KUBECONFIG": ":" + kc + ":/nonexistent"})
    check("KUBECONFIG: the first entry of a colon list is used", rc == 0 and "context sim" in err, err)

    # Informer through the plugin: token expiry (11 s - 10 s leeway) and a 401 re-run the plugin.
    open(calls, "w").close()
    d = Driver(["--kubeconfig", kc, "--backoff-ms", "100"],
               env=dict(os.environ, HOME=TMP))
    d.wait_synced()
    time.sleep(1.5)
    S.cut(mode="clean")
    S.make(name="exec-0", index=40)
    good = d.wait(lambda x: "default/exec-0" in x.model, 10)
    n_calls = plugin_calls(calls)
    check("an expired plugin token is refreshed before the next request", good and n_calls >= 2,
          "calls=%d\n%s" % (n_calls, d.stderr_tail()))
    # The 401 path needs a token the driver still holds as valid when the server stops taking
    # it: switch the plugin to hour-long tokens and wait until the driver has taken one (its
    # short token expires ~1 s after it was issued; each cut makes it reconnect, and once that
    # token has expired, ask the plugin again). Otherwise a slow driver would find its short
    # token expired and fetch secret-b before ever sending secret-a.
    write(expire_file, "3600")
    n0 = plugin_calls(calls)
    deadline = time.monotonic() + scaled(15)
    while plugin_calls(calls) == n0 and time.monotonic() < deadline:
        S.cut(mode="clean")
        time.sleep(1.0)
    check("the plugin is asked again once the short token expired (hour-long token now)",
          plugin_calls(calls) > n0, d.stderr_tail())
    S.make(name="exec-0b", index=42)
    d.wait(lambda x: "default/exec-0b" in x.model, 10)
    write(plugin_tok, "secret-b")
    write(SIM_TOKEN, "secret-b\n")
    S.token(reload=True)
    S.cut(mode="clean")
    S.make(name="exec-1", index=41)
    check("401 re-runs the plugin and retries", d.wait(lambda x: "default/exec-1" in x.model, 10) and
          d.wait_log("401 from"), d.stderr_tail())
    good, want = converged(d, S)
    check("exec-plugin informer converges", good, diff(model_view(d), want))
    d.stop()
    check("no token in the logs", not any("secret-" in line for line in d.err_lines))

    # -- kubeconfig variants: static token, tls-server-name, insecure-skip-tls-verify ---------
    write(SIM_TOKEN, "secret-c\n")
    S.token(reload=True)
    variants = [
        ("static token + certificate-authority file",
         "certificate-authority: %s" % sim.ca, "token: secret-c", True),
        ("tls-server-name verifies the certificate against another name",
         "certificate-authority-data: %s\n    tls-server-name: kubernetes" % ca_b64, "token: secret-c", True),
        ("tls-server-name not in the certificate fails",
         "certificate-authority-data: %s\n    tls-server-name: wrong.example" % ca_b64, "token: secret-c", False),
        ("insecure-skip-tls-verify: true skips verification",
         "insecure-skip-tls-verify: true", "token: secret-c", True),
        ("without a CA the system store rejects the test CA", "", "token: secret-c", False),
        ("tokenFile relative to the kubeconfig", "certificate-authority-data: %s" % ca_b64,
         "tokenFile: tok-c", True),
        ("client-certificate-data + client-key-data (x509 auth, no token)",
         "certificate-authority-data: %s" % ca_b64,
         "client-certificate-data: %s\n    client-key-data: %s" % (b64file(CLIENT_CRT), b64file(CLIENT_KEY)), True),
        ("client-certificate + client-key files (x509 auth, no token)",
         "certificate-authority: %s" % sim.ca,
         "client-certificate: %s\n    client-key: %s" % (CLIENT_CRT, CLIENT_KEY), True),
    ]
    write(os.path.join(os.path.dirname(kc), "tok-c"), "secret-c\n")
    for title, cl, us, want_ok in variants:
        write(kc, "apiVersion: v1\nkind: Config\ncurrent-context: v\nclusters:\n- name: c\n  cluster:\n"
                  "    server: %s\n    %s\nusers:\n- name: u\n  user:\n    %s\ncontexts:\n- name: v\n"
                  "  context: {cluster: c, user: u, namespace: default}\n" % (sim.url, cl, us))
        rc, out, err = run(["--kubeconfig", kc, "--get", POD])
        if want_ok:
            check("kubeconfig: " + title, rc == 0 and out.startswith("GOT default/" + POD), err)
        else:
            check("kubeconfig: " + title, rc == 1 and "TLS with" in err, err)

    with open(sim.ca) as f:
        write(os.path.join(sa, "ca.crt"), f.read())
    write(os.path.join(sa, "token"), "secret-c\n")
    rc, out, err = run(["--kubeconfig", kc, "--get", POD], env=env)
    check("an explicit --kubeconfig wins over the in-cluster variables", rc == 0 and "(kubeconfig " in err, err)
    rc, out, err = run(["--get", POD], env=dict(env, KUBECONFIG=kc))
    check("in-cluster wins over $KUBECONFIG", rc == 0 and "(in-cluster)" in err, err)

    # -- configuration errors ---------------------------------------------------------------
    rc, out, err = run(["--get", POD])
    check("no configuration at all names every option", rc == 2 and "--apiserver" in err and
          "KUBERNETES_SERVICE_HOST" in err and "KUBECONFIG" in err, err)
    rc, out, err = run(["--kubeconfig", os.path.join(TMP, "nope"), "--get", POD])
    check("missing kubeconfig names the file", rc == 2 and "kubeconfig %s/nope: cannot open it" % TMP in err, err)
    bad = os.path.join(TMP, "bad-config")
    write(bad, "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
               "- name: c\n  cluster: {server: %s}\nusers:\n- name: u\n  user: {client-key-data: '%%%%'}\n" % sim.url)
    rc, out, err = run(["--kubeconfig", bad, "--get", POD])
    check("bad kubeconfig key is named with what to do", rc == 2 and
          "users[u].user.client-key-data: not valid base64" in err and bad in err, err)
    write(bad, "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
               "- name: c\n  cluster: {server: %s}\nusers:\n- name: u\n  user:\n    exec: {apiVersion: "
               "client.authentication.k8s.io/v1, command: /nonexistent/plugin}\n" % sim.url)
    rc, out, err = run(["--kubeconfig", bad, "--get", POD])
    check("a missing credential plugin is an auth error naming it", rc == 1 and
          "/nonexistent/plugin" in err and "could not be started" in err, err)
except Exception as e:  # report, do not crash without TAP output
    fail("config scenarios", "exception: %r" % (e,))
finally:
    stop_all()
    sim.stop()
    shutil.rmtree(TMP, ignore_errors=True)
reports = sanitizer_reports(STDERRS)
check("no sanitizer report from any driver run", not reports, "\n".join(reports[:20]))
done()
