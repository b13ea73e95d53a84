"""Workload objects of the kube-apiserver simulator: batch/v1 Jobs, apps/v1 StatefulSets and
jobset.x-k8s.io/v1alpha2 JobSets, served for GET and LIST (JSON, Table and metadata-only) as the
API server serves them, so that a pod's owner can be read (tpumesh-sidecar's expected worker
count). The objects are kept apart from the pods: they have no watch and no history, and their
resourceVersions come from a counter of their own.

Python 3 standard library only; imported by kube_apiserver_sim.py.
"""

import copy
import hashlib
import re
import time
import uuid

# resource -> what discovery and the error messages say about it
RESOURCES = {
    "jobs": {"group": "batch", "version": "v1", "kind": "Job", "singular": "job", "short": [],
             "categories": ["all"]},
    "statefulsets": {"group": "apps", "version": "v1", "kind": "StatefulSet", "singular": "statefulset",
                     "short": ["sts"], "categories": ["all"]},
    "jobsets": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet", "singular": "jobset",
                "short": [], "categories": []},
}
KIND_TO_RESOURCE = {v["kind"]: k for k, v in RESOURCES.items()}
GROUPS = ("batch", "apps", "jobset.x-k8s.io")

# /apis/<group>/<version>[/namespaces/<ns>]/<resource>[/<name>]
PATH = re.compile(r"^/apis/([^/]+)/([^/]+)/(?:(watch)/)?(?:namespaces/([^/]+)/)?([^/]+)(?:/([^/]+))?(/status)?/?$")

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def resource_of(path):
    """(resource, ns, name, watch) for a workload path of a group/version we serve, else None."""
    m = PATH.match(path)
    if not m:
        return None
    group, version, watch, ns, resource, name, status = m.groups()
    info = RESOURCES.get(resource)
    if info is None or info["group"] != group or info["version"] != version or status:
        return None
    return resource, ns, name, bool(watch)


def qualified(resource):
    """'jobs.batch': how the API server names a resource in its messages."""
    return "%s.%s" % (resource, RESOURCES[resource]["group"])


def gv(resource):
    info = RESOURCES[resource]
    return "%s/%s" % (info["group"], info["version"])


# -- discovery ------------------------------------------------------------------------------------

def _agg_res(resource):
    info = RESOURCES[resource]
    r = {"resource": resource, "responseKind": {"group": "", "version": "", "kind": info["kind"]},
         "scope": "Namespaced", "singularResource": info["singular"], "verbs": VERBS,
         "subresources": [{"subresource": "status", "responseKind": {"group": "", "version": "",
                                                                   "kind": info["kind"]},
                           "verbs": ["get", "patch", "update"]}]}
    if info["short"]:
        r["shortNames"] = info["short"]
    if info["categories"]:
        r["categories"] = info["categories"]
    return r


def aggregated_groups(jobset_crd=True):
    """Items of the /apis APIGroupDiscoveryList (apidiscovery.k8s.io/v2)."""
    items = []
    for group in GROUPS:
        if group == "jobset.x-k8s.io" and not jobset_crd:
            continue
        res = sorted(r for r, i in RESOURCES.items() if i["group"] == group)
        version = RESOURCES[res[0]]["version"]
        items.append({"metadata": {"name": group, "creationTimestamp": None},
                      "versions": [{"version": version, "resources": [_agg_res(r) for r in res],
                                    "freshness": "Current"}]})
    return items


def group_list(jobset_crd=True):
    """The legacy /apis APIGroupList."""
    groups = []
    for group in GROUPS:
        if group == "jobset.x-k8s.io" and not jobset_crd:
            continue
        version = next(i["version"] for i in RESOURCES.values() if i["group"] == group)
        gvs = {"groupVersion": "%s/%s" % (group, version), "version": version}
        groups.append({"name": group, "versions": [gvs], "preferredVersion": gvs})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group_doc(path, jobset_crd=True):
    """/apis/<group> (APIGroup) or /apis/<group>/<version> (APIResourceList), or None."""
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != "apis" or parts[1] not in GROUPS:
        return None
    group = parts[1]
    if group == "jobset.x-k8s.io" and not jobset_crd:
        return None
    res = sorted(r for r, i in RESOURCES.items() if i["group"] == group)
    version = RESOURCES[res[0]]["version"]
    gvs = {"groupVersion": "%s/%s" % (group, version), "version": version}
    if len(parts) == 2:
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gvs], "preferredVersion": gvs}
    if len(parts) != 3 or parts[2] != version:
        return None
    out = []
    for r in res:
        info = RESOURCES[r]
        d = {"name": r, "singularName": info["singular"], "namespaced": True, "kind": info["kind"], "verbs": VERBS}
        if info["short"]:
            d["shortNames"] = info["short"]
        if info["categories"]:
            d["categories"] = info["categories"]
        out.append(d)
        out.append({"name": r + "/status", "singularName": "", "namespaced": True, "kind": info["kind"],
                    "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "%s/%s" % (group, version),
            "resources": out}


# -- objects --------------------------------------------------------------------------------------

def _uid(seed):
    return str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _int(v, name, default=None, low=0):
    if v is None or v == "":
        if default is None:
            raise ValueError("%s is required" % name)
        return default
    n = int(v)
    if n < low:
        raise ValueError("%s must be >= %d" % (name, low))
    return n


def _pod_template(labels):
    return {"metadata": {"creationTimestamp": None, "labels": labels},
            "spec": {"containers": [{"name": "trainer", "image": "trainer:dev", "resources": {},
                                     "terminationMessagePath": "/dev/termination-log",
                                     "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                     "securityContext": {}, "schedulerName": "default-scheduler"}}


def job_spec(completions, parallelism, indexed, labels, subdomain=None):
    """A Job spec as the API server defaults it (completionMode, backoffLimit, suspend...)."""
    spec = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    spec["backoffLimit"] = 0 if indexed else 6
    tmpl = _pod_template(labels)
    if subdomain:
        tmpl["spec"]["subdomain"] = subdomain
    spec["template"] = tmpl
    spec["completionMode"] = "Indexed" if indexed else "NonIndexed"
    spec["suspend"] = False
    spec["podReplacementPolicy"] = "TerminatingOrFailed"
    return spec


def make_job(ns, a, jobsets=None):
    """A batch/v1 Job (what `kubectl get job -o json` shows once the controller ran). With `jobset`
    the Job is a JobSet child (`<jobset>-<rjob>-<index>`, owned by the JobSet)."""
    name = a.get("name")
    owner = a.get("jobset")
    if not name:
        if not owner:
            raise ValueError("name (or jobset + rjob + index) is required")
        name = "%s-%s-%d" % (owner, a.get("rjob") or "slice", _int(a.get("index"), "index", 0))
    completions = a.get("completions")
    completions = None if completions is None or completions == "null" else _int(completions, "completions", low=0)
    parallelism = a.get("parallelism")
    parallelism = completions if parallelism is None else _int(parallelism, "parallelism", low=0)
    indexed = str(a.get("indexed", "true")).lower() in ("1", "true", "yes")
    juid = _uid("job/%s/%s" % (ns, name))
    labels = {"batch.kubernetes.io/controller-uid": juid, "batch.kubernetes.io/job-name": name,
              "controller-uid": juid, "job-name": name}
    md = {"name": name, "namespace": ns, "uid": juid, "creationTimestamp": _now(), "generation": 1,
          "labels": dict(labels), "annotations": {}}
    if owner:
        rjob = a.get("rjob") or "slice"
        js = {"jobset.sigs.k8s.io/jobset-name": owner, "jobset.sigs.k8s.io/replicatedjob-name": rjob,
              "jobset.sigs.k8s.io/job-index": str(_int(a.get("index"), "index", 0))}
        md["labels"].update(js)
        md["annotations"].update(js)
        md["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": owner,
                                  "uid": _uid("jobset/%s/%s" % (ns, owner)), "controller": True,
                                  "blockOwnerDeletion": True}]
    spec = job_spec(completions, parallelism, indexed, labels, a.get("subdomain"))
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": juid}}
    status = {"startTime": md["creationTimestamp"], "active": parallelism or 0, "ready": 0, "terminating": 0,
              "uncountedTerminatedPods": {}}
    if indexed:
        status["completedIndexes"] = ""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md, "spec": spec, "status": status}


def make_jobset(ns, a):
    """A jobset.x-k8s.io/v1alpha2 JobSet. `replicated_jobs`: a list of {name, replicas, completions,
    parallelism}; else one replicated job `rjob` (default "slice") with `replicas` (default 1) Jobs
    of `completions` (default 4) pods each."""
    name = a.get("name")
    if not name:
        raise ValueError("name is required")
    rjs = a.get("replicated_jobs")
    if rjs is None:
        rjs = [{"name": a.get("rjob") or "slice", "replicas": a.get("replicas", 1),
                "completions": a.get("completions", 4), "parallelism": a.get("parallelism")}]
    if not isinstance(rjs, list) or not rjs:
        raise ValueError("replicated_jobs must be a non-empty list")
    out = []
    for rj in rjs:
        if not isinstance(rj, dict) or not rj.get("name"):
            raise ValueError("each replicated job needs a name")
        c = rj.get("completions")
        c = None if c is None else _int(c, "completions")
        p = rj.get("parallelism")
        p = c if p is None else _int(p, "parallelism")
        tmpl = {"metadata": {}, "spec": job_spec(c, p, True, {}, a.get("subdomain", name))}
        entry = {"name": rj["name"], "groupName": "default", "template": tmpl}
        if rj.get("replicas") is not None:
            entry["replicas"] = _int(rj.get("replicas"), "replicas")
        out.append(entry)
    uid = _uid("jobset/%s/%s" % (ns, name))
    md = {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": _now(), "generation": 1}
    if a.get("annotations"):
        md["annotations"] = dict(a["annotations"])
    spec = {"replicatedJobs": out,
            "network": {"enableDNSHostnames": True, "subdomain": a.get("subdomain", name),
                        "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"}, "failurePolicy": {"maxRestarts": 0},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"}, "suspend": False}
    status = {"replicatedJobsStatus": [{"name": e["name"], "ready": 0, "succeeded": 0, "failed": 0,
                                        "active": e.get("replicas", 1), "suspended": 0} for e in out],
              "terminalState": ""}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": md, "spec": spec,
            "status": status}


def make_statefulset(ns, a):
    """An apps/v1 StatefulSet whose template labels are `app: <name>` (what make_sts_pod puts on its
    pods). `replicas` defaults to 1, as the API server defaults a manifest without it."""
    name = a.get("name")
    if not name:
        raise ValueError("name is required")
    replicas = _int(a.get("replicas"), "replicas", 1)
    labels = {"app": name}
    uid = _uid("sts/%s/%s" % (ns, name))
    tmpl = _pod_template(labels)
    tmpl["spec"]["restartPolicy"] = "Always"
    spec = {"replicas": replicas, "selector": {"matchLabels": labels}, "template": tmpl,
            "serviceName": a.get("service", name), "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "revisionHistoryLimit": 10,
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}}
    status = {"observedGeneration": 1, "replicas": replicas, "readyReplicas": 0, "currentReplicas": replicas,
              "updatedReplicas": replicas, "availableReplicas": 0, "collisionCount": 0}
    md = {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": _now(), "generation": 1}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": md, "spec": spec, "status": status}


class Store:
    """The workload objects, keyed (resource, namespace, name). Guarded by the simulator's lock."""

    def __init__(self):
        self.objs = {}
        self.rv = 1000
        self.jobset_crd = True

    def put(self, obj):
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError("object needs a metadata object")
        resource = KIND_TO_RESOURCE.get(obj.get("kind"))
        if resource is None:
            raise ValueError("kind must be one of %s" % ", ".join(sorted(KIND_TO_RESOURCE)))
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = gv(resource)
        md = obj["metadata"]
        if not md.get("name"):
            raise ValueError("object needs metadata.name")
        md.setdefault("namespace", "default")
        md.setdefault("uid", _uid("%s/%s/%s" % (resource, md["namespace"], md["name"])))
        md.setdefault("creationTimestamp", _now())
        md.setdefault("generation", 1)
        self.rv += 1
        md["resourceVersion"] = str(self.rv)
        self.objs[(resource, md["namespace"], md["name"])] = obj
        return obj

    def delete(self, resource, ns, name):
        return self.objs.pop((resource, ns, name), None)

    def get(self, resource, ns, name):
        return self.objs.get((resource, ns, name))

    def list(self, resource, ns):
        return [o for (r, n, _), o in sorted(self.objs.items()) if r == resource and (ns is None or n == ns)]


# -- tables (kubectl's default output) ---------------------------------------------------------

def _age(obj):
    t = obj["metadata"].get("creationTimestamp") or ""
    try:
        sec = max(0, int(time.time() - time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")) + time.timezone))
    except ValueError:
        sec = 0
    if sec < 120:
        return "%ds" % sec
    if sec < 3 * 3600:
        return "%dm" % (sec // 60)
    return "%dh" % (sec // 3600)


def _col(name, typ="string", fmt="", desc=""):
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": 0}


COLUMNS = {
    "jobs": [_col("Name", fmt="name", desc="Name must be unique within a namespace."),
             _col("Status", desc="Status of the job."),
             _col("Completions", desc="The desired number of successfully finished pods the job should be run with."),
             _col("Duration", desc="Time required to complete the job."),
             _col("Age", desc="CreationTimestamp is a timestamp representing the server time when this object "
                              "was created.")],
    "statefulsets": [_col("Name", fmt="name", desc="Name must be unique within a namespace."),
                     _col("Ready", desc="Number of the pod with ready state"),
                     _col("Age", desc="CreationTimestamp is a timestamp representing the server time when this "
                                      "object was created.")],
    "jobsets": [_col("Name", fmt="name", desc="Name must be unique within a namespace."),
                _col("TerminalState", desc="Final state of JobSet"),
                _col("Restarts", "integer", desc="Number of restarts"),
                _col("Completed", desc="JobSet completed"),
                _col("Suspended", desc="JobSet suspended"),
                _col("Age", desc="Time this JobSet was created")],
}


def table_cells(resource, o):
    sp, st = o.get("spec", {}), o.get("status", {})
    if resource == "jobs":
        c = sp.get("completions")
        return [o["metadata"]["name"], "Running", "%d/%s" % (st.get("succeeded", 0), c if c is not None else "1"),
                _age(o), _age(o)]
    if resource == "statefulsets":
        return [o["metadata"]["name"], "%d/%d" % (st.get("readyReplicas", 0), sp.get("replicas", 1)), _age(o)]
    return [o["metadata"]["name"], st.get("terminalState", ""), st.get("restarts", 0), "", "False", _age(o)]


def table(resource, objs, meta, include):
    rows = []
    for o in objs:
        row = {"cells": table_cells(resource, o)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": COLUMNS[resource],
            "rows": rows}
