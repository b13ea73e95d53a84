"""Mutating admission of the kube-apiserver simulator, as the API server does it for pod CREATEs:

  * admissionregistration.k8s.io/v1 MutatingWebhookConfigurations are created, read, listed and
    deleted through the API (`kubectl create -f`, `kubectl get`, `kubectl delete`); they are
    cluster-scoped;
  * a pod CREATE (also with ?dryRun=All) runs every matching webhook, configurations in name
    order and webhooks in list order: rules (operations CREATE, group "", version v1, resource
    pods), objectSelector and namespaceSelector (matchLabels and matchExpressions);
  * a webhook is called over HTTPS with an admission.k8s.io/v1 AdmissionReview, verifying its
    certificate against the caBundle (clientConfig.url, or clientConfig.service mapped to a
    loopback address with --webhook-service NS/NAME=127.0.0.1:PORT, the certificate checked for
    the name <name>.<namespace>.svc), with timeoutSeconds (default 10) as the deadline;
  * the answer must be a v1 AdmissionReview with the request's uid; allowed=false rejects the
    pod with the webhook's status (code, default 403; message as `admission webhook "<name>"
    denied the request: <message>`); patchType JSONPatch patches are applied with python3-jsonpatch
    (RFC 6902); warnings become Warning headers (299);
  * a failure (unreachable, TLS, timeout, bad answer) rejects the pod with 500 InternalError
    `failed calling webhook "<name>": ...` under failurePolicy Fail (the default) and is ignored
    under Ignore;
  * reinvocationPolicy IfNeeded: when a later webhook changed the pod after an IfNeeded webhook
    ran, that webhook is called once more (the API server's single reinvocation round);
  * dryRun requires sideEffects None or NoneOnDryRun (else 400, as the API server answers).

authorization.k8s.io/v1 SubjectAccessReviews are answered from the simulator's forbid rules (the
same ones that make its own requests 403), so an injector's access check sees what the API would
enforce.

Python 3 standard library plus python3-jsonpatch (Debian); imported by kube_apiserver_sim.py.
"""

import base64
import copy
import http.client
import json
import re
import socket
import ssl
import threading
import time
import uuid

import jsonpatch

GROUP = "admissionregistration.k8s.io"
KIND = "MutatingWebhookConfiguration"
RESOURCE = "mutatingwebhookconfigurations"
PATH = re.compile(r"^/apis/admissionregistration\.k8s\.io/v1/mutatingwebhookconfigurations(?:/([^/]+))?/?$")
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class AdmissionError(Exception):
    """An API error to answer: (code, reason, message)."""

    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


# -- discovery -------------------------------------------------------------------------------------

def group_list_entries():
    out = []
    for group in (GROUP, "authorization.k8s.io"):
        gvs = {"groupVersion": group + "/v1", "version": "v1"}
        out.append({"name": group, "versions": [gvs], "preferredVersion": gvs})
    return out


def aggregated_entries():
    mwc = {"resource": RESOURCE, "responseKind": {"group": "", "version": "", "kind": KIND},
           "scope": "Cluster", "singularResource": "mutatingwebhookconfiguration", "verbs": VERBS}
    sar = {"resource": "subjectaccessreviews",
           "responseKind": {"group": "", "version": "", "kind": "SubjectAccessReview"},
           "scope": "Cluster", "singularResource": "subjectaccessreview", "verbs": ["create"]}
    return [{"metadata": {"name": g, "creationTimestamp": None},
             "versions": [{"version": "v1", "resources": [r], "freshness": "Current"}]}
            for g, r in ((GROUP, mwc), ("authorization.k8s.io", sar))]


def group_doc(path):
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != "apis" or parts[1] not in (GROUP, "authorization.k8s.io"):
        return None
    group = parts[1]
    gvs = {"groupVersion": group + "/v1", "version": "v1"}
    if len(parts) == 2:
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gvs], "preferredVersion": gvs}
    if len(parts) != 3 or parts[2] != "v1":
        return None
    if group == GROUP:
        res = [{"name": RESOURCE, "singularName": "mutatingwebhookconfiguration", "namespaced": False,
                "kind": KIND, "verbs": VERBS}]
    else:
        res = [{"name": "subjectaccessreviews", "singularName": "subjectaccessreview", "namespaced": False,
                "kind": "SubjectAccessReview", "verbs": ["create"]}]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group + "/v1", "resources": res}


# -- selectors -------------------------------------------------------------------------------------

def selector_matches(sel, labels):
    """metav1.LabelSelector: matchLabels AND matchExpressions; an empty selector matches all."""
    if not sel:
        return True
    labels = labels or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def rule_matches(rule, op):
    def has(lst, v):
        return "*" in (lst or []) or v in (lst or [])
    return (has(rule.get("operations"), op) and has(rule.get("apiGroups"), "")
            and has(rule.get("apiVersions"), "v1") and has(rule.get("resources"), "pods")
            and rule.get("scope", "*") in ("*", "Namespaced"))


# -- the store and the calls -----------------------------------------------------------------------

class Admission:
    def __init__(self, service_map=None, log=None):
        self.lock = threading.Lock()
        self.configs = {}  # name -> object
        self.rv = 1
        self.service_map = dict(service_map or {})  # "ns/name" -> (host, port)
        self.calls = []  # (webhook name, outcome) of every call, for tests
        self.log = log or (lambda *a: None)

    # configurations ---------------------------------------------------------------
    def validate(self, obj):
        if not isinstance(obj, dict) or obj.get("kind") != KIND:
            raise AdmissionError(400, "BadRequest", "the body must be an admissionregistration.k8s.io/v1 " + KIND)
        md = obj.get("metadata") or {}
        if not md.get("name"):
            raise AdmissionError(422, "Invalid", KIND + ' "" is invalid: metadata.name: Required value')
        errs = []
        for i, w in enumerate(obj.get("webhooks") or []):
            f = "webhooks[%d]" % i
            if not w.get("name") or len(w["name"].split(".")) < 3:
                errs.append(f + ".name: Invalid value: %r: should be a domain with at least three segments"
                            % w.get("name"))
            if w.get("admissionReviewVersions") is None:
                errs.append(f + ".admissionReviewVersions: Required value")
            if w.get("sideEffects") not in ("None", "NoneOnDryRun", "Some", "Unknown"):
                errs.append(f + ".sideEffects: Unsupported value: %r" % w.get("sideEffects"))
            cc = w.get("clientConfig") or {}
            if bool(cc.get("url")) == bool(cc.get("service")):
                errs.append(f + ".clientConfig: Required value: exactly one of url or service is required")
            if w.get("failurePolicy", "Fail") not in ("Fail", "Ignore"):
                errs.append(f + ".failurePolicy: Unsupported value: %r" % w.get("failurePolicy"))
            if w.get("reinvocationPolicy", "Never") not in ("Never", "IfNeeded"):
                errs.append(f + ".reinvocationPolicy: Unsupported value: %r" % w.get("reinvocationPolicy"))
            t = w.get("timeoutSeconds", 10)
            if not isinstance(t, int) or not 1 <= t <= 30:
                errs.append(f + ".timeoutSeconds: Invalid value: %r: the timeout value must be between 1 and 30 "
                                "seconds" % t)
        if errs:
            raise AdmissionError(422, "Invalid", '%s "%s" is invalid: [%s]' % (KIND, md["name"], ", ".join(errs)))

    def create(self, obj):
        self.validate(obj)
        obj = copy.deepcopy(obj)
        md = obj.setdefault("metadata", {})
        with self.lock:
            if md["name"] in self.configs:
                raise AdmissionError(409, "AlreadyExists", '%s.%s "%s" already exists'
                                     % (RESOURCE, GROUP, md["name"]))
            self.rv += 1
            md["uid"] = str(uuid.uuid4())
            md["resourceVersion"] = str(self.rv)
            md["generation"] = 1
            md["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for w in obj.get("webhooks") or []:  # API server defaults
                w.setdefault("failurePolicy", "Fail")
                w.setdefault("matchPolicy", "Equivalent")
                w.setdefault("namespaceSelector", {})
                w.setdefault("objectSelector", {})
                w.setdefault("timeoutSeconds", 10)
                w.setdefault("reinvocationPolicy", "Never")
            self.configs[md["name"]] = obj
        return obj

    def get(self, name):
        with self.lock:
            obj = self.configs.get(name)
        if obj is None:
            raise AdmissionError(404, "NotFound", '%s.%s "%s" not found' % (RESOURCE, GROUP, name))
        return obj

    def list(self):
        with self.lock:
            items = [self.configs[k] for k in sorted(self.configs)]
            rv = self.rv
        return {"kind": KIND + "List", "apiVersion": GROUP + "/v1", "metadata": {"resourceVersion": str(rv)},
                "items": items}

    def delete(self, name):
        with self.lock:
            obj = self.configs.pop(name, None)
        if obj is None:
            raise AdmissionError(404, "NotFound", '%s.%s "%s" not found' % (RESOURCE, GROUP, name))
        return obj

    # admission ----------------------------------------------------------------------
    def _webhooks(self, pod, ns_labels):
        with self.lock:
            configs = [self.configs[k] for k in sorted(self.configs)]
        out = []
        for c in configs:
            for w in c.get("webhooks") or []:
                if not any(rule_matches(r, "CREATE") for r in w.get("rules") or []):
                    continue
                if not selector_matches(w.get("objectSelector"), (pod.get("metadata") or {}).get("labels")):
                    continue
                if not selector_matches(w.get("namespaceSelector"), ns_labels):
                    continue
                out.append(w)
        return out

    def _call(self, w, review):
        cc = w.get("clientConfig") or {}
        ctx = ssl.create_default_context()
        ctx.load_default_certs() if not cc.get("caBundle") else None
        if cc.get("caBundle"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(cadata=base64.b64decode(cc["caBundle"]).decode())
        if cc.get("url"):
            u = cc["url"]
            if not u.startswith("https://"):
                raise RuntimeError("webhook URL %r is not https" % u)
            hostport, _, path = u[len("https://"):].partition("/")
            host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "443")
            connect, sni, path = (host, int(port)), host, "/" + path
        else:
            s = cc["service"]
            key = "%s/%s" % (s.get("namespace"), s.get("name"))
            if key not in self.service_map:
                raise RuntimeError('service "%s" not found (the simulator maps services with --webhook-service)'
                                   % key)
            connect = self.service_map[key]
            sni = "%s.%s.svc" % (s.get("name"), s.get("namespace"))
            path = s.get("path") or "/"
        timeout = w.get("timeoutSeconds", 10)
        sock = socket.create_connection(connect, timeout=timeout)
        try:
            tls = ctx.wrap_socket(sock, server_hostname=sni)
            body = json.dumps(review).encode()
            c = http.client.HTTPConnection(sni, timeout=timeout)
            c.sock = tls
            c.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                        "Accept": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise RuntimeError("expected response code 200, got %d: %s" % (r.status, data[:200]))
            return json.loads(data)
        finally:
            sock.close()

    def admit(self, pod, ns, ns_labels, user, dry_run=False):
        """Run the mutating webhooks on a pod CREATE. Returns (pod, warnings) or raises AdmissionError."""
        pod = copy.deepcopy(pod)
        warnings = []
        hooks = self._webhooks(pod, ns_labels)
        if dry_run:
            for w in hooks:
                if w.get("sideEffects") not in ("None", "NoneOnDryRun"):
                    raise AdmissionError(400, "BadRequest", 'admission webhook "%s" has sideEffects %s and cannot '
                                         'be called for a dry run' % (w["name"], w.get("sideEffects")))
        ran_at = {}  # webhook name -> change counter when it last ran
        changes = 0
        order = list(hooks)
        reinvoked = set()
        i = 0
        while i < len(order):
            w = order[i]
            i += 1
            before = copy.deepcopy(pod)
            pod = self._one(w, pod, ns, user, dry_run, warnings)
            if pod != before:
                changes += 1
            ran_at[w["name"]] = changes  # its own change does not call for its reinvocation
            if i == len(order):
                # One reinvocation round: IfNeeded webhooks that ran before the pod changed again.
                again = [x for x in hooks if x.get("reinvocationPolicy") == "IfNeeded"
                         and x["name"] not in reinvoked and ran_at.get(x["name"], changes) < changes]
                for x in again:
                    reinvoked.add(x["name"])
                order.extend(again)
        return pod, warnings

    def _one(self, w, pod, ns, user, dry_run, warnings):
        uid = str(uuid.uuid4())
        review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                  "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "resource": {"group": "", "version": "v1", "resource": "pods"},
                              "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                              "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                              "name": (pod.get("metadata") or {}).get("name", ""), "namespace": ns,
                              "operation": "CREATE", "userInfo": {"username": user}, "object": pod,
                              "oldObject": None, "dryRun": bool(dry_run),
                              "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}
        if "v1" not in (w.get("admissionReviewVersions") or []):
            return self._failed(w, pod, "none of the admissionReviewVersions %s is supported (v1)"
                                % w.get("admissionReviewVersions"))
        try:
            answer = self._call(w, review)
            resp = answer.get("response") or {}
            if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != "AdmissionReview":
                raise RuntimeError("expected admission.k8s.io/v1 AdmissionReview, got %s %s"
                                   % (answer.get("apiVersion"), answer.get("kind")))
            if resp.get("uid") != uid:
                raise RuntimeError("expected response.uid=%r, got %r" % (uid, resp.get("uid")))
        except Exception as e:  # noqa: BLE001 - every failure is the webhook's failure
            return self._failed(w, pod, str(e) or type(e).__name__)
        warnings.extend(resp.get("warnings") or [])
        if not resp.get("allowed"):
            self.calls.append((w["name"], "denied"))
            st = resp.get("status") or {}
            raise AdmissionError(st.get("code") or 403, st.get("reason") or "Forbidden",
                                 'admission webhook "%s" denied the request: %s'
                                 % (w["name"], st.get("message") or "without explanation"))
        if resp.get("patch"):
            if resp.get("patchType") != "JSONPatch":
                return self._failed(w, pod, "unsupported patch type %r" % resp.get("patchType"))
            try:
                ops = json.loads(base64.b64decode(resp["patch"]))
                pod = jsonpatch.JsonPatch(ops).apply(pod)
            except Exception as e:  # noqa: BLE001
                return self._failed(w, pod, "the patch does not apply: %s" % e)
            self.calls.append((w["name"], "patched"))
        else:
            self.calls.append((w["name"], "allowed"))
        return pod

    def _failed(self, w, pod, why):
        self.log("webhook %s failed: %s" % (w["name"], why))
        if w.get("failurePolicy", "Fail") == "Ignore":
            self.calls.append((w["name"], "ignored"))
            return pod
        self.calls.append((w["name"], "failed"))
        raise AdmissionError(500, "InternalError", 'Internal error occurred: failed calling webhook "%s": %s'
                             % (w["name"], why))


# -- SubjectAccessReview ---------------------------------------------------------------------------

def subject_access_review(body, forbid):
    """Answer a SubjectAccessReview from the simulator's forbid rules ((ns|*, verbs, resources))."""
    spec = body.get("spec") or {}
    ra = spec.get("resourceAttributes") or {}
    ns, verb, resource = ra.get("namespace") or "", ra.get("verb") or "", ra.get("resource") or ""
    allowed = True
    for fns, verbs, resources in forbid:
        if ((fns == "*" or fns == ns) and (not verbs or verb in verbs)
                and (resource in resources or (not resources and resource == "pods"))):
            allowed = False
            break
    out = copy.deepcopy(body)
    out.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    out["status"] = {"allowed": allowed}
    if not allowed:
        out["status"]["reason"] = "forbidden by the simulator's forbid rule"
    return out
