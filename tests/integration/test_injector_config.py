#!/usr/bin/env python3
"""One source of truth for what gets injected, checked with real Helm (3 and 4, the binaries
`make deps` unpacks into $BUILD/helm/<version>/helm):
  1. the injector's built-in config equals the chart's default rendering of its named templates
     (the ConfigMap the chart gives the injector as --config);
  2. a pod a GitOps user writes with the named templates (a chart with tpumesh as a dependency)
     equals the pod tpumesh-injector makes from the same pod with only the label, through the
     chart-rendered config, with the patch applied by python3-jsonpatch;
  3. non-default values reach the injected containers the same way."""
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import jsonpatch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, done, ok, scaled, skip_needs, wait  # noqa: E402

ROOT = os.environ.get("ROOT", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
BUILD = os.environ.get("BUILD", "build")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
CHART = os.path.join(ROOT, "charts/tpumesh")
TOOL = os.path.join(BUILD, "tests/tools/inject_config")
INJ = os.path.join(BUILD, "bin/tpumesh-injector")
TMP = tempfile.mkdtemp(prefix="tpumesh-injcfg-")


def helm_bins():
    out = []
    for ver in ("3.17.2", "4.1.4"):
        h = os.path.join(BUILD, "helm", ver, "helm")
        if os.access(h, os.X_OK):
            out.append((ver, h))
    return out


def render(helm, chart, *args):
    r = subprocess.run([helm, "template", "r1", chart, "--namespace", "ml", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def injector_config(docs):
    cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(
        "-injector")]
    return cm[0]["data"]["config.yaml"]


def norm(x):
    """JSON round trip; quantities as strings (the API server stores "4" for 4)."""
    return json.loads(json.dumps(x))


def config_json(path=None):
    r = subprocess.run([TOOL] + ([path] if path else []), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def one(x):
    return x[0] if isinstance(x, list) else x


# A chart of a GitOps user: tpumesh as a dependency, the pod written with the named templates.
USER_POD = """apiVersion: v1
kind: Pod
metadata:
  name: train-0
  labels:
    tpumesh.dev/inject: "true"
spec:
  serviceAccountName: {{ include "tpumesh.serviceAccountName" . }}
  initContainers:
    - name: fetch-data
      image: busybox
    {{- include "tpumesh.initContainer" (dict "ctx" . "tpuChips" 4) | nindent 4 }}
    {{- include "tpumesh.sidecar" . | nindent 4 }}
  containers:
    - name: trainer
      image: python:3.11
      resources:
        limits:
          google.com/tpu: "4"
      volumeMounts:
        - name: data
          mountPath: /data
        {{- include "tpumesh.volumeMounts" . | nindent 8 }}
  volumes:
    - name: data
      emptyDir: {}
    {{- include "tpumesh.volumes" . | nindent 4 }}
"""


def user_chart():
    d = os.path.join(TMP, "app")
    os.makedirs(os.path.join(d, "templates"), exist_ok=True)
    os.makedirs(os.path.join(d, "charts"), exist_ok=True)
    with open(os.path.join(d, "Chart.yaml"), "w") as f:
        f.write("apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n"
                "  - name: tpumesh\n    version: 0.1.0\n    repository: file://../tpumesh\n")
    with open(os.path.join(d, "templates", "pod.yaml"), "w") as f:
        f.write(USER_POD)
    dst = os.path.join(d, "charts", "tpumesh")
    if not os.path.exists(dst):
        shutil.copytree(CHART, dst)
    return d


def strip_tpumesh(pod):
    """The same pod as the user writes it for the injector: label only, no tpumesh parts."""
    p = copy.deepcopy(pod)
    p["spec"]["initContainers"] = [c for c in p["spec"]["initContainers"]
                                   if not c["name"].startswith("tpumesh-")]
    p["spec"]["volumes"] = [v for v in p["spec"]["volumes"] if not v["name"].startswith("tpumesh")]
    for c in p["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "tpumesh"]
    return p


def inject(config_text, pod):
    cfg = os.path.join(TMP, "config.yaml")
    with open(cfg, "w") as f:
        f.write(config_text)
    crt, key = os.path.join(TMP, "c.crt"), os.path.join(TMP, "c.key")
    if not os.path.exists(crt):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        key, "-out", crt, "-days", "1", "-subj", "/CN=t", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    log = os.path.join(TMP, "inj.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUMESH_")}
    p = subprocess.Popen([INJ, "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
                          "--tls-cert-file", crt, "--tls-key-file", key, "--config", cfg],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    try:
        def listening():
            text = open(log).read()
            return int(text.split("https port ")[1].split(",")[0]) if "https port" in text else None
        port = wait(listening, 10)
        import http.client
        import ssl
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=scaled(10),
                                        context=ssl.create_default_context(cafile=crt))
        c.request("POST", "/mutate", body=json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": "ml", "operation": "CREATE", "object": pod}}))
        r = json.loads(c.getresponse().read())["response"]
        ops = json.loads(base64.b64decode(r["patch"]))
        return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(pod))
    finally:
        p.terminate()
        p.wait(scaled(10))


bins = helm_bins()
if not bins:
    skip_needs("the chart's injector config equals the built-in one", "helm",
               "real Helm is not unpacked in $BUILD/helm (run make deps)")
    done()

builtin = config_json()
for ver, helm in bins:
    docs = render(helm, CHART)
    text = injector_config(docs)
    chart_cfg = yaml.safe_load(text)
    chart_norm = {"initContainer": one(chart_cfg["initContainer"]),
                  "sidecar": one(chart_cfg["sidecar"]), "volumes": chart_cfg["volumes"],
                  "volumeMounts": chart_cfg["volumeMounts"]}
    check(f"helm {ver}: built-in config == the chart's default rendering of its named templates",
          norm(chart_norm) == builtin,
          json.dumps(chart_norm, sort_keys=True)[:600] + "\n" + json.dumps(builtin, sort_keys=True)
          [:600])
    path = os.path.join(TMP, f"chart-{ver}.yaml")
    with open(path, "w") as f:
        f.write(text)
    check(f"helm {ver}: the injector reads the chart-rendered config as the chart meant it",
          config_json(path) == norm(chart_norm))

    app = user_chart()
    upod = [d for d in render(helm, app) if d["kind"] == "Pod" and d["metadata"]["name"] ==
            "train-0"][0]
    labelled = strip_tpumesh(upod)
    injected = inject(text, labelled)
    # Quantities: the template renders the count as a YAML number, the injector copies the
    # pod's; the API server stores both as the string "4".
    for c in upod["spec"]["initContainers"]:
        for k in ("requests", "limits"):
            if "google.com/tpu" in c.get("resources", {}).get(k, {}):
                c["resources"][k]["google.com/tpu"] = str(c["resources"][k]["google.com/tpu"])
    check(f"helm {ver}: injected pod == the pod written with the named templates",
          norm(injected) == norm(upod),
          json.dumps(jsonpatch.make_patch(norm(upod), norm(injected)).patch)[:800])

    # Non-default values flow through the ConfigMap into the injected containers.
    docs = render(helm, CHART, "--set", "image.repository=reg.example/tpumesh",
                  "--set", "logFormat=json", "--set", "sidecar.httpPort=9500",
                  "--set", "sharedVolume.mountPath=/mesh", "--set", "sidecar.verifyDns=true",
                  "--set", "sidecar.extraEnv[0].name=TPUMESH_STALL_TIMEOUT",
                  "--set-string", "sidecar.extraEnv[0].value=120",
                  "--set", "init.extraEnv[0].name=TPU_SKIP_MDS_QUERY",
                  "--set-string", "init.extraEnv[0].value=true")
    inj2 = inject(injector_config(docs), labelled)
    side = [c for c in inj2["spec"]["initContainers"] if c["name"] == "tpumesh-sidecar"][0]
    env = {e["name"]: e.get("value") for e in side["env"]}
    check(f"helm {ver}: chart values reach the injected pod (image, log format, port, path)",
          side["image"] == "reg.example/tpumesh:0.1.0" and env["TPUMESH_LOG_FORMAT"] == "json"
          and env["TPUMESH_HTTP_ADDR"] == ":9500"
          and inj2["spec"]["containers"][0]["volumeMounts"][-1]["mountPath"] == "/mesh", side)
    init = [c for c in inj2["spec"]["initContainers"] if c["name"] == "tpumesh-init"][0]
    ienv = {e["name"]: e.get("value") for e in init["env"]}
    check(f"helm {ver}: sidecar.verifyDns and init/sidecar.extraEnv reach the injected pod",
          env.get("TPUMESH_VERIFY_DNS") == "true" and env.get("TPUMESH_STALL_TIMEOUT") == "120"
          and ienv.get("TPU_SKIP_MDS_QUERY") == "true", {"sidecar": env, "init": ienv})
done()
