"""A small Kubernetes REST client for the end-to-end tests: JSON over HTTPS with a client
certificate or a bearer token, verification on (the cluster's CA), list/get/create/patch/delete
and a streaming watch. Written here rather than taken from python3-kubernetes so that every
request the tests make is visible and the same on every Debian release."""
import http.client
import json
import socket
import ssl
import threading
import urllib.parse


class ApiError(Exception):
    def __init__(self, status, body, method, path):
        self.status = status
        self.body = body
        try:
            self.obj = json.loads(body)
        except ValueError:
            self.obj = {}
        self.reason = self.obj.get("reason", "")
        self.message = self.obj.get("message", body[:300])
        super().__init__("%s %s: %d %s" % (method, path, status, self.message))


# Plural resource -> API path prefix for the kinds the tests use.
GROUPS = {
    "pods": "/api/v1", "services": "/api/v1", "namespaces": "/api/v1", "nodes": "/api/v1",
    "serviceaccounts": "/api/v1", "secrets": "/api/v1", "configmaps": "/api/v1",
    "events": "/api/v1", "endpoints": "/api/v1",
    "jobs": "/apis/batch/v1", "statefulsets": "/apis/apps/v1", "deployments": "/apis/apps/v1",
    "replicasets": "/apis/apps/v1",
    "roles": "/apis/rbac.authorization.k8s.io/v1", "rolebindings": "/apis/rbac.authorization.k8s.io/v1",
    "clusterroles": "/apis/rbac.authorization.k8s.io/v1",
    "clusterrolebindings": "/apis/rbac.authorization.k8s.io/v1",
    "mutatingwebhookconfigurations": "/apis/admissionregistration.k8s.io/v1",
    "validatingwebhookconfigurations": "/apis/admissionregistration.k8s.io/v1",
    "customresourcedefinitions": "/apis/apiextensions.k8s.io/v1",
    "jobsets": "/apis/jobset.x-k8s.io/v1alpha2",
    "endpointslices": "/apis/discovery.k8s.io/v1",
    "poddisruptionbudgets": "/apis/policy/v1",
    "networkpolicies": "/apis/networking.k8s.io/v1",
}
CLUSTER_SCOPED = {"namespaces", "nodes", "clusterroles", "clusterrolebindings",
                  "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
                  "customresourcedefinitions"}

# Kind -> plural, for applying manifests.
PLURALS = {
    "Pod": "pods", "Service": "services", "Namespace": "namespaces", "ServiceAccount": "serviceaccounts",
    "Secret": "secrets", "ConfigMap": "configmaps", "Job": "jobs", "StatefulSet": "statefulsets",
    "Deployment": "deployments", "Role": "roles", "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "CustomResourceDefinition": "customresourcedefinitions", "JobSet": "jobsets",
    "PodDisruptionBudget": "poddisruptionbudgets", "Node": "nodes", "Endpoints": "endpoints",
    "NetworkPolicy": "networkpolicies",
}


def path_of(resource, namespace=None, name=None, sub=None):
    prefix = GROUPS[resource]
    p = prefix
    if namespace and resource not in CLUSTER_SCOPED:
        p += "/namespaces/" + namespace
    p += "/" + resource
    if name:
        p += "/" + name
    if sub:
        p += "/" + sub
    return p


class Client:
    """host, port: the API server; ca: its CA file; cert/key: a client certificate, or token: a
    bearer token. Thread-safe: each request opens its own connection."""

    def __init__(self, host, port, ca, cert=None, key=None, token=None, timeout=30.0):
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout
        self.ctx = ssl.create_default_context(cafile=ca)
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.lock = threading.Lock()

    def _conn(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def request(self, method, path, body=None, query=None, content_type="application/json",
                raw=False, ok=(200, 201, 202)):
        if query:
            path += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        c = self._conn()
        try:
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
        finally:
            c.close()
        if r.status not in ok:
            raise ApiError(r.status, text, method, path)
        if raw:
            return text
        return json.loads(text) if text else {}

    # ---- typed helpers -----------------------------------------------------------------
    def get(self, resource, name, namespace=None, sub=None):
        return self.request("GET", path_of(resource, namespace, name, sub))

    def list(self, resource, namespace=None, **query):
        return self.request("GET", path_of(resource, namespace), query=query or None)

    def create(self, resource, obj, namespace=None, sub=None, name=None, **query):
        ns = namespace or obj.get("metadata", {}).get("namespace")
        return self.request("POST", path_of(resource, ns, name, sub), body=obj, query=query or None)

    def patch(self, resource, name, patch, namespace=None, sub=None, kind="merge"):
        ct = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
              "json": "application/json-patch+json"}[kind]
        return self.request("PATCH", path_of(resource, namespace, name, sub), body=patch, content_type=ct)

    def replace(self, resource, obj, namespace=None, sub=None):
        ns = namespace or obj["metadata"].get("namespace")
        return self.request("PUT", path_of(resource, ns, obj["metadata"]["name"], sub), body=obj)

    def delete(self, resource, name, namespace=None, grace=None, propagation="Background", missing_ok=True):
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            return self.request("DELETE", path_of(resource, namespace, name), body=body)
        except ApiError as e:
            if e.status == 404 and missing_ok:
                return None
            raise

    def apply(self, obj, namespace=None):
        """Create obj (a manifest dict); if it exists, replace it keeping its resourceVersion."""
        res = PLURALS[obj["kind"]]
        ns = namespace or obj["metadata"].get("namespace")
        if res not in CLUSTER_SCOPED and ns:
            obj.setdefault("metadata", {})["namespace"] = ns
        try:
            return self.create(res, obj, namespace=ns if res not in CLUSTER_SCOPED else None)
        except ApiError as e:
            if e.status != 409:
                raise
        cur = self.get(res, obj["metadata"]["name"], ns if res not in CLUSTER_SCOPED else None)
        obj["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.replace(res, obj, namespace=ns if res not in CLUSTER_SCOPED else None)

    def watch(self, resource, namespace=None, timeout=300, **query):
        """A Watch (iterate it for (type, object); close() from any thread ends it) of resource.
        Pass resourceVersion in query to start there; without it the server sends the current
        objects as ADDED first."""
        q = dict(query)
        q["watch"] = "1"
        q.setdefault("allowWatchBookmarks", "true")
        q["timeoutSeconds"] = str(int(timeout))
        return Watch(self, path_of(resource, namespace) + "?" + urllib.parse.urlencode(q))


class Watch:
    def __init__(self, client, path):
        self.closed = False
        headers = {"Accept": "application/json"}
        if client.token:
            headers["Authorization"] = "Bearer " + client.token
        self.conn = http.client.HTTPSConnection(client.host, client.port, context=client.ctx, timeout=30)
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            text = self.resp.read().decode("utf-8", "replace")
            self.conn.close()
            raise ApiError(self.resp.status, text, "WATCH", path)
        self.conn.sock.settimeout(None)  # events may be minutes apart; close() ends the wait

    def close(self):
        self.closed = True
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass

    def __iter__(self):
        buf = b""
        try:
            while not self.closed:
                try:
                    chunk = self.resp.read1(65536)
                except (OSError, ValueError, http.client.HTTPException):
                    break
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        ev = json.loads(line)
                        yield ev["type"], ev["object"]
        finally:
            self.conn.close()

CLUSTER_SCOPED_KINDS = {k for k, v in PLURALS.items() if v in CLUSTER_SCOPED}
