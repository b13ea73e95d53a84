#!/usr/bin/python3
"""kube-apiserver simulator for tpumesh tests (Pods only).

A standalone, loopback-only fake of the parts of the Kubernetes API that a
Pod list/watch client uses, written to be byte-faithful where it matters.
Facts come from the Kubernetes API documentation, apiserver sources and real captures.

Run `kube_apiserver_sim.py --help` for the server options and
`kube_apiserver_sim.py ctl --help` for the control CLI. The control API is
described in README.md next to this file.

Standard library only (http.server, ssl, json, threading); the `openssl`
CLI makes the test CA for --tls.
"""

import argparse
import base64
import bisect
import collections
import gc
import gzip
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402  (Jobs, StatefulSets, JobSets: GET and LIST)
import admission  # noqa: E402  (MutatingWebhookConfigurations, webhook calls, SubjectAccessReviews)

SIM_VERSION = "1.0"

# ---------------------------------------------------------------------------
# JSON as Go's encoding/json writes it: compact, UTF-8, HTML-escaped
# (json.Encoder has SetEscapeHTML(true) by default).

_ENC = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def gojson(obj):
    s = _ENC.encode(obj)
    if "<" in s or ">" in s or "&" in s or "\u2028" in s or "\u2029" in s:
        s = (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
             .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    return s


def gojson_b(obj):
    return gojson(obj).encode("utf-8")


def now_rfc3339(t=None):
    """metav1.Time: RFC3339, UTC, seconds precision."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def parse_rfc3339(s):
    try:
        return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------
# Status bodies (apimachinery meta/v1 Status; field order = Go struct order:
# kind, apiVersion, metadata, status, message, reason, details, code).


def status_obj(code, reason, message, details=None, meta=None):
    st = {"kind": "Status", "apiVersion": "v1", "metadata": meta or {}, "status": "Failure",
          "message": message, "reason": reason}
    if details is not None:
        st["details"] = details
    st["code"] = code
    return st


def details_obj(name=None, group=None, kind=None, causes=None, retry_after=None):
    d = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    if kind:
        d["kind"] = kind
    if causes:
        d["causes"] = causes
    if retry_after:
        d["retryAfterSeconds"] = retry_after
    return d


class ApiError(Exception):
    """An error answered as a Status body (or plain text for APF 429)."""

    def __init__(self, status, headers=None, plain=None):
        super().__init__(status.get("message") if status else plain)
        self.status = status
        self.headers = headers or {}
        self.plain = plain

    @property
    def code(self):
        return self.status["code"] if self.status else 429


def err_bad_request(msg):
    return ApiError(status_obj(400, "BadRequest", msg))


def err_invalid_listoptions(field, kind, detail, value=None):
    """422 ListOptions validation error."""
    types = {"Forbidden": "FieldValueForbidden", "Unsupported value": "FieldValueNotSupported",
             "Invalid value": "FieldValueInvalid"}
    if kind == "Forbidden":
        part = "Forbidden: " + detail
    else:
        part = "%s: %s: %s" % (kind, gojson(value), detail)
    msg = 'ListOptions.meta.k8s.io "" is invalid: %s: %s' % (field, part)
    cause = {"reason": types.get(kind, "FieldValueInvalid"), "message": part, "field": field}
    return ApiError(status_obj(422, "Invalid", msg, details_obj(group="meta.k8s.io", kind="ListOptions",
                                                                 causes=[cause])))


def err_not_found_pod(name):
    return ApiError(status_obj(404, "NotFound", 'pods "%s" not found' % name,
                               details_obj(name=name, kind="pods")))


def err_not_found_path():
    return ApiError(status_obj(404, "NotFound", "the server could not find the requested resource",
                               {}))


def err_expired_list():
    return ApiError(status_obj(410, "Expired", "The resourceVersion for the provided list is too old."))


EXPIRED_CONTINUE_MSG = (
    "The provided continue parameter is too old to display a consistent list result. You can start"
    " a new list without the continue parameter, or use the continue token in this response to"
    " retrieve the remainder of the results. Continuing with the provided token results in an"
    " inconsistent list - objects that were created, modified, or deleted between the time the"
    " first chunk was returned and now may show up in the list.")


def err_too_large_rv(req, cur):
    """504 for a resourceVersion from the future."""
    st = status_obj(504, "Timeout", "Timeout: Too large resource version: %d, current: %d" % (req, cur),
                    details_obj(causes=[{"reason": "ResourceVersionTooLarge",
                                         "message": "Too large resource version"}], retry_after=1))
    return ApiError(st, {"Retry-After": "1"})


UNAUTHORIZED_BODY = gojson_b(status_obj(401, "Unauthorized", "Unauthorized")) + b"\n"

# ---------------------------------------------------------------------------
# Selectors.

_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                           r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VAL_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class Requirement:
    __slots__ = ("key", "op", "values")

    def __init__(self, key, op, values):
        self.key, self.op, self.values = key, op, values

    def matches(self, labels):
        has = self.key in labels
        if self.op in ("=", "=="):
            return has and labels[self.key] == self.values[0]
        if self.op == "!=":
            return not has or labels[self.key] != self.values[0]
        if self.op == "in":
            return has and labels[self.key] in self.values
        if self.op == "notin":
            return not has or labels[self.key] not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("gt", "lt"):
            if not has:
                return False
            try:
                v = int(labels[self.key])
            except ValueError:
                return False
            return v > int(self.values[0]) if self.op == "gt" else v < int(self.values[0])
        return False


def _split_top(s):
    """Split on commas that are not inside parentheses."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def parse_label_selector(sel):
    """Parse labelSelector; raises ApiError 400 with the reason."""
    reqs = []
    if sel is None or sel.strip() == "":
        return reqs
    for part in _split_top(sel):
        p = part.strip()
        if not p:
            raise err_bad_request("unable to parse requirement: found '', expected: identifier")
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", p)
        if m:
            key, op = m.group(1), m.group(2)
            vals = [v.strip() for v in m.group(3).split(",")]
            if vals == [""]:
                raise err_bad_request("unable to parse requirement: for 'in', 'notin' operators, values set can't"
                                      " be empty")
            vals = [v for v in vals if v != ""]
        elif p.startswith("!"):
            key, op, vals = p[1:].strip(), "!", []
        else:
            m = re.match(r"^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$", p)
            if m:
                key, o, v = m.group(1), m.group(2), m.group(3).strip()
                op = {">": "gt", "<": "lt"}.get(o, o)
                vals = [v]
                if op in ("gt", "lt"):
                    try:
                        int(v)
                    except ValueError:
                        raise err_bad_request("unable to parse requirement: for 'gt', 'lt' operators,"
                                              " the value must be an integer")
            elif re.match(r"^\S+$", p):
                key, op, vals = p, "exists", []
            else:
                raise err_bad_request("unable to parse requirement: found '%s', expected: "
                                      "'=', '!=', '==', 'in', notin'" % p)
        if not _LABEL_KEY_RE.match(key):
            raise err_bad_request("unable to parse requirement: invalid label key \"%s\": name part must "
                                  "consist of alphanumeric characters, '-', '_' or '.'" % key)
        for v in vals:
            if len(v) > 63 or not _LABEL_VAL_RE.match(v):
                raise err_bad_request("unable to parse requirement: invalid label value: \"%s\": a valid label"
                                      " must be an empty string or consist of alphanumeric characters,"
                                      " '-', '_' or '.'" % v)
        reqs.append(Requirement(key, op, vals))
    return reqs


def _pod_field(pod, field):
    md, sp, st = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    if field == "metadata.name":
        return md.get("name", "")
    if field == "metadata.namespace":
        return md.get("namespace", "")
    if field in ("spec.nodeName", "spec.host"):
        return sp.get("nodeName", "")
    if field == "spec.restartPolicy":
        return sp.get("restartPolicy", "")
    if field == "spec.schedulerName":
        return sp.get("schedulerName", "")
    if field == "spec.serviceAccountName":
        return sp.get("serviceAccountName", "")
    if field == "spec.hostNetwork":
        return "true" if sp.get("hostNetwork") else "false"
    if field == "status.phase":
        return st.get("phase", "")
    if field == "status.podIP":
        return st.get("podIP", "")
    if field == "status.nominatedNodeName":
        return st.get("nominatedNodeName", "")
    return None


POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.host", "spec.restartPolicy",
              "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
              "status.podIP", "status.nominatedNodeName")


def parse_field_selector(sel):
    reqs = []
    if sel is None or sel.strip() == "":
        return reqs
    for part in sel.split(","):
        p = part.strip()
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", p)
        if not m:
            raise err_bad_request("invalid selector: '%s'; can't understand '%s'" % (sel, p))
        field, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in POD_FIELDS:
            raise err_bad_request("field label not supported: %s" % field)
        reqs.append((field, op != "!=", val))
    return reqs


class Filter:
    """Namespace + label + field filter of one request."""

    def __init__(self, ns, labels, fields):
        self.ns, self.labels, self.fields = ns, labels, fields

    @property
    def has_selectors(self):
        return bool(self.labels or self.fields)

    def matches(self, rec):
        pod = rec.pod
        md = pod["metadata"]
        if self.ns is not None and md.get("namespace") != self.ns:
            return False
        if self.labels:
            lab = md.get("labels") or {}
            for r in self.labels:
                if not r.matches(lab):
                    return False
        for field, eq, val in self.fields:
            if (_pod_field(pod, field) == val) != eq:
                return False
        return True


def parse_bool_param(q, name):
    """Convert_Slice_string_To_bool: absent/0/false -> False, anything else True."""
    if name not in q:
        return False
    v = q[name][0]
    return v.lower() not in ("0", "false")


# ---------------------------------------------------------------------------
# Pod records and store.

POD_TOP = ("metadata", "spec", "status")
META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
              "annotations", "ownerReferences", "finalizers", "managedFields")


def order_meta(md):
    out = {}
    for k in META_ORDER:
        if k in md:
            out[k] = md[k]
    for k, v in md.items():
        if k not in out:
            out[k] = v
    return out


class Rec:
    """One immutable version of a pod: the dict and the JSON of its three parts. Versions share
    unchanged spec/status dicts (never mutated), so they share those JSON bytes too; a body is
    joined from the parts when sent, which keeps a long event history small."""

    __slots__ = ("pod", "rv", "key", "md_j", "spec_j", "status_j")

    def __init__(self, pod, rv, prev=None):
        self.pod = pod
        self.rv = rv
        md = pod["metadata"]
        self.key = (md["namespace"], md["name"])
        spec, status = pod.get("spec", {}), pod.get("status", {})
        if prev is not None and prev.pod.get("spec") is spec:
            self.spec_j = prev.spec_j
        else:
            self.spec_j = gojson_b(spec)
        if prev is not None and prev.pod.get("status") is status:
            self.status_j = prev.status_j
        else:
            self.status_j = gojson_b(status)
        self.md_j = gojson_b(md)

    def item(self):
        """The pod as a list item (no kind/apiVersion)."""
        return b"".join((b'{"metadata":', self.md_j, b',"spec":', self.spec_j, b',"status":', self.status_j,
                         b"}"))

    def full(self):
        return b"".join((b'{"kind":"Pod","apiVersion":"v1","metadata":', self.md_j, b',"spec":', self.spec_j,
                         b',"status":', self.status_j, b"}"))

    def event_line(self, etype):
        """One watch event line: compact JSON + newline."""
        return b"".join((b'{"type":"', etype, b'","object":{"kind":"Pod","apiVersion":"v1","metadata":', self.md_j,
                         b',"spec":', self.spec_j, b',"status":', self.status_j, b"}}\n"))

    def full_obj(self):
        o = {"kind": "Pod", "apiVersion": "v1"}
        o.update(self.pod)
        return o


def with_rv(pod, rv, **meta_changes):
    """A new pod dict sharing spec/status with `pod`, with metadata.resourceVersion=rv."""
    md = dict(pod["metadata"])
    md["resourceVersion"] = str(rv)
    md.update(meta_changes)
    md = order_meta(md)
    return {"metadata": md, "spec": pod.get("spec", {}), "status": pod.get("status", {})}


class Event:
    __slots__ = ("rv", "type", "key", "new", "old", "_old_at")

    def __init__(self, rv, etype, key, new, old):
        self.rv, self.type, self.key, self.new, self.old = rv, etype, key, new, old
        self._old_at = None

    def line(self, etype, which):
        """Compact JSON + "\\n" of this event as seen by one watcher."""
        if which == "new":
            rec = self.new
        else:
            if self._old_at is None:
                self._old_at = Rec(with_rv(self.old.pod, self.rv), self.rv, self.old)
            rec = self._old_at
        return rec.event_line(etype.encode())

    def view(self, flt):
        """(type, which) for a watcher with filter flt, or None."""
        if flt is None:
            return (self.type, "new")
        if self.type == "ADDED":
            return ("ADDED", "new") if flt.matches(self.new) else None
        if self.type == "DELETED":
            return ("DELETED", "new") if flt.matches(self.old) else None
        o, n = flt.matches(self.old), flt.matches(self.new)
        if o and n:
            return ("MODIFIED", "new")
        if n:
            return ("ADDED", "new")
        if o:
            return ("DELETED", "old")
        return None


def bookmark_line(rv, initial_end=False):
    md = {"resourceVersion": str(rv)}
    if initial_end:
        md["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": md, "spec": {"containers": None}, "status": {}}
    return gojson_b({"type": "BOOKMARK", "object": obj}) + b"\n"


def error_line(status):
    return gojson_b({"type": "ERROR", "object": status}) + b"\n"


class Snapshot:
    """A consistent view of the store at one resourceVersion, with sorted views per scope."""

    def __init__(self, rv, recs):
        self.rv = rv
        self.recs = recs  # dict key -> Rec
        self.views = {}

    def view(self, ns):
        v = self.views.get(ns)
        if v is None:
            if ns is None:
                items = sorted(((k[0] + "/" + k[1]), r) for k, r in self.recs.items())
            else:
                items = sorted((k[1], r) for k, r in self.recs.items() if k[0] == ns)
            v = ([k for k, _ in items], [r for _, r in items])
            self.views[ns] = v
        return v


class Watcher:
    __slots__ = ("flt", "cursor", "inject", "bookmarks", "cut", "table", "id", "bytes", "events",
                 "bookmark_now", "desc", "started", "last_sent")

    def __init__(self, flt, cursor, bookmarks, table, wid, desc=None):
        self.flt, self.cursor, self.bookmarks, self.table, self.id = flt, cursor, bookmarks, table, wid
        self.inject = []
        self.cut = None
        self.bytes = 0
        self.events = 0
        self.bookmark_now = False
        self.desc = desc or {}
        self.started = time.time()
        # time.perf_counter() (CLOCK_MONOTONIC on Linux, comparable across processes on this
        # machine) just before the last write that carried object events: lets a benchmark
        # measure event-to-output from the moment the event left the apiserver.
        self.last_sent = 0.0


class FaultRule:
    def __init__(self, code, count, retry_after, match, kind, message, agent=None):
        self.code, self.count, self.retry_after, self.match = code, count, retry_after, match
        self.kind, self.message, self.agent = kind, message, agent

    def applies(self, verb, user_agent):
        if self.count <= 0:
            return False
        if self.agent and self.agent not in (user_agent or ""):
            return False
        return self.match == "any" or self.match == verb or (self.match == "pods" and verb in ("list", "watch", "get"))

    def describe(self):
        return {"code": self.code, "remaining": self.count, "retryAfter": self.retry_after,
                "match": self.match, "kind": self.kind, "agent": self.agent}


class State:
    """Everything the simulator knows, guarded by one condition variable."""

    def __init__(self, args):
        self.args = args
        self.cond = threading.Condition(threading.RLock())
        self.rv = max(1, int(args.initial_rv))
        self.compacted = self.rv  # every event with rv > compacted is in hist
        self.hist = []  # hist[i].rv == compacted + 1 + i
        self.pods = {}
        self.keys_gen = 0
        self.snaps = collections.OrderedDict()
        self.watchers = set()
        self.next_wid = 1
        self.tokens = set()
        self.token_file = args.token_file
        self.token_file_mtime = None
        if args.token:
            self.tokens.add(args.token)
        if args.token_file:
            self._reload_token_file()
        self.auth = bool(self.tokens) or bool(args.token_file)
        self.faults = []
        self.forbid = []  # (namespace or "*", set of verbs, set of resources: empty = pods)
        self.sar_delay = 0.0  # seconds every SubjectAccessReview answer is held (a slow authorizer)
        self.ns_labels = {}  # namespace -> its labels beyond kubernetes.io/metadata.name (namespaceSelector)
        self.workloads = workloads.Store()
        smap = {}
        for spec in getattr(args, "webhook_service", None) or []:
            key, _, addr = spec.partition("=")
            host, _, port = addr.rpartition(":")
            if not key.count("/") == 1 or not port.isdigit() or not host.startswith("127."):
                raise SystemExit("--webhook-service %r: want NS/NAME=127.x.y.z:PORT" % spec)
            smap[key] = (host, int(port))
        self.admission = admission.Admission(smap, log=lambda m: sys.stderr.write("kube-apiserver-sim: %s\n" % m))
        self.stall_until = 0.0
        self.unavailable_until = 0.0
        self.unavailable_start = 0.0
        self.chunking = {"mode": args.chunking, "max": args.chunk_max, "delay": args.chunk_delay_ms / 1000.0}
        self.rng = random.Random(args.seed)
        self.bookmark_interval = float(args.bookmark_interval)
        self.expired_watch = args.expired_watch
        self.future_watch = args.future_watch
        self.watchlist = args.watchlist == "on"
        self.history_cap = int(args.history)
        self.stats = {"requests": collections.Counter(), "codes": collections.Counter(),
                      "watches_total": 0, "bytes_sent": 0, "events_sent": 0, "bookmarks_sent": 0,
                      "started": time.time()}
        self.stats_lock = threading.Lock()
        # The last requests of the core API as (verb, path, labelSelector, fieldSelector): which
        # sidecar asked what, for tests that must tell one client's requests from another's.
        self.request_log = collections.deque(maxlen=4096)
        self.churn = {"running": False, "done": 0, "target": 0, "started": None, "finished": None}
        self.churn_stop = threading.Event()
        self.restarts = 0
        self.job_uids = {}
        self.namespaces = {"default", "kube-system", "kube-public", "kube-node-lease"}
        self.kubelet_delete_after = 1.0
        self.slow_consumer_timeout = float(args.slow_consumer_timeout)
        self.managed_fields = bool(getattr(args, "managed_fields", False))

    # -- auth ------------------------------------------------------------
    def _reload_token_file(self):
        try:
            st = os.stat(self.token_file)
            sig = (st.st_mtime_ns, st.st_ino, st.st_size)
            if self.token_file_mtime == sig:
                return
            with open(self.token_file, "r", encoding="utf-8") as f:
                tok = f.read().strip()
            self.token_file_mtime = sig
            self.tokens = {tok} if tok else set()
        except OSError:
            pass

    def check_token(self, header):
        if self.token_file:
            self._reload_token_file()
        if not header or not header.startswith("Bearer "):
            return None if header is None else False
        return header[7:].strip() in self.tokens

    # -- stats -----------------------------------------------------------
    def count(self, verb, code=None, nbytes=0):
        with self.stats_lock:
            if verb:
                self.stats["requests"][verb] += 1
            if code:
                self.stats["codes"][str(code)] += 1
            self.stats["bytes_sent"] += nbytes

    def add_bytes(self, n, events=0, bookmarks=0):
        with self.stats_lock:
            self.stats["bytes_sent"] += n
            self.stats["events_sent"] += events
            self.stats["bookmarks_sent"] += bookmarks

    # -- mutation (call with cond held) ----------------------------------
    def _emit(self, etype, key, new, old):
        ev = Event(self.rv, etype, key, new, old)
        self.hist.append(ev)
        if len(self.hist) > self.history_cap + max(64, self.history_cap // 8):
            self._trim_to(len(self.hist) - self.history_cap)
        self.cond.notify_all()
        return ev

    def _trim_to(self, n):
        """Drop the n oldest history events."""
        n = min(n, len(self.hist))
        if n <= 0:
            return
        del self.hist[:n]
        self.compacted += n
        for rv in [r for r in self.snaps if r < self.compacted]:
            del self.snaps[rv]

    def compact(self, upto=None):
        with self.cond:
            target = self.rv if upto is None else min(int(upto), self.rv)
            if target > self.compacted:
                self._trim_to(target - self.compacted)
            return self.compacted

    def put(self, pod, etype_hint=None):
        """Create or replace a pod (cond held). Returns the new Rec."""
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        old = self.pods.get(key)
        self.rv += 1
        pod = with_rv(pod, self.rv)
        rec = Rec(pod, self.rv, old)
        self.pods[key] = rec
        if old is None:
            self.keys_gen += 1
            self._emit("ADDED", key, rec, None)
        else:
            self._emit("MODIFIED", key, rec, old)
        return rec

    def remove(self, key):
        old = self.pods.pop(key, None)
        if old is None:
            return None
        self.keys_gen += 1
        self.rv += 1
        gone = Rec(with_rv(old.pod, self.rv), self.rv, old)
        self._emit("DELETED", key, gone, old)
        return gone

    # -- snapshots -------------------------------------------------------
    def snapshot_at(self, rv):
        """Snapshot at rv (cond held). None if rv is compacted away."""
        s = self.snaps.get(rv)
        if s is not None:
            self.snaps.move_to_end(rv)
            return s
        if rv > self.rv or rv < self.compacted:
            return None
        recs = dict(self.pods)
        if rv < self.rv:
            start = rv - self.compacted  # index of event rv+1
            for ev in reversed(self.hist[start:]):
                if ev.type == "ADDED":
                    recs.pop(ev.key, None)
                else:
                    recs[ev.key] = ev.old
        s = Snapshot(rv, recs)
        self.snaps[rv] = s
        while len(self.snaps) > 16:
            self.snaps.popitem(last=False)
        return s

    def restart(self, new_rv=None, unavailable=0.0):
        """etcd restore / apiserver restart with history lost: RVs restart lower."""
        with self.cond:
            old = self.rv
            if new_rv is None:
                new_rv = max(1, old // 2)
            new_rv = max(1, min(int(new_rv), old))
            self.rv = new_rv
            for key, rec in list(self.pods.items()):
                self.pods[key] = Rec(with_rv(rec.pod, new_rv), new_rv, rec)
            self.hist = []
            self.compacted = new_rv
            self.snaps.clear()
            self.keys_gen += 1
            self.restarts += 1
            for w in self.watchers:
                w.cut = "abrupt"
            if unavailable > 0:
                self.unavailable_start = time.time()
                self.unavailable_until = time.time() + unavailable
            self.cond.notify_all()
            return {"oldRv": old, "rv": new_rv}


# ---------------------------------------------------------------------------
# Pod construction helpers.


def _uid(seed=None):
    if seed is None:
        return str(uuid.uuid4())
    return str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))


def _rand_suffix(rng, n=5):
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(rng.choice(alphabet) for _ in range(n))


def ready_conditions(ready, t):
    v = "True" if ready else "False"
    conds = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
        {"type": "Ready", "status": v, "lastProbeTime": None, "lastTransitionTime": t},
        {"type": "ContainersReady", "status": v, "lastProbeTime": None, "lastTransitionTime": t},
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
    ]
    if not ready:
        for c in conds[2:4]:
            c["reason"] = "ContainersNotReady"
            c["message"] = "containers with unready status: [trainer]"
    return conds


def auto_ip(index):
    """A unique pod IP per index: 10.64.0.2, 10.64.0.3, ... (250 per /24)."""
    n = int(index)
    return "10.%d.%d.%d" % (64 + (n // 64000) % 64, (n // 250) % 256, n % 250 + 2)


def make_job_pod(state, a):
    """An Indexed-Job pod as the Job controller and kubelet would leave it;
    with `jobset` a JobSet child-Job pod, with `statefulset` a StatefulSet pod."""
    if a.get("statefulset"):
        return make_sts_pod(state, a)
    ns = a.get("namespace") or "default"
    jobset = a.get("jobset")
    if jobset:
        rjob = a.get("rjob") or "slice"
        slice_ = int(a.get("slice") or 0)
        job = "%s-%s-%d" % (jobset, rjob, slice_)
    else:
        job = a.get("job") or "trainer"
    index = a.get("index")
    name = a.get("name")
    if index is None and name:
        m = re.search(r"-(\d+)(-[a-z0-9]{5})?$", name)
        index = int(m.group(1)) if m else None
    if index is None:
        index = 0
    index = int(index)
    if not name:
        name = "%s-%d-%s" % (job, index, _rand_suffix(state.rng))
    # The Job object's uid when one was made (make-job): a pod's controller reference names that very
    # object, as the Job controller writes it.
    jobj = state.workloads.get("jobs", ns, job) if getattr(state, "workloads", None) is not None else None
    juid = (jobj["metadata"]["uid"] if jobj else
            state.job_uids.setdefault((ns, job), _uid("job/%s/%s/%d" % (ns, job, state.restarts))))
    t = a.get("created") or now_rfc3339()
    labels = {
        "batch.kubernetes.io/controller-uid": juid,
        "batch.kubernetes.io/job-completion-index": str(index),
        "batch.kubernetes.io/job-name": job,
        "controller-uid": juid,
        "job-name": job,
    }
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    ip_seq = index
    if jobset:
        slices = int(a.get("slices") or 1)
        per = int(a.get("per_slice") or 1)
        js = {"jobset.sigs.k8s.io/global-replicas": str(slices),
              "jobset.sigs.k8s.io/job-global-index": str(slice_),
              "jobset.sigs.k8s.io/job-index": str(slice_),
              "jobset.sigs.k8s.io/job-key": hashlib.sha1(("%s/%s" % (ns, job)).encode()).hexdigest(),
              "jobset.sigs.k8s.io/jobset-name": jobset,
              "jobset.sigs.k8s.io/jobset-uid": _uid("jobset/%s/%s" % (ns, jobset)),
              "jobset.sigs.k8s.io/replicatedjob-name": rjob,
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(slices)}
        labels.update(js)
        annotations.update(js)
        annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = "cloud.google.com/gke-nodepool"
        ip_seq = slice_ * per + index
    labels.update(a.get("labels") or {})
    annotations.update(a.get("annotations") or {})
    md = {"name": name, "generateName": "%s-%d-" % (job, index), "namespace": ns, "uid": _uid(),
          "resourceVersion": "0", "creationTimestamp": t, "labels": labels, "annotations": annotations,
          "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": juid,
                               "controller": True, "blockOwnerDeletion": True}],
          "finalizers": ["batch.kubernetes.io/job-tracking"]}
    hostname = a.get("hostname", "%s-%d" % (job, index))
    subdomain = a.get("subdomain", jobset or job)
    node = a.get("node", "gke-tpu-%s-%04d" % (hashlib.sha1(job.encode()).hexdigest()[:8], index))
    ip = a.get("ip", "auto")
    if ip == "auto":
        ip = auto_ip(ip_seq)
    ready = a.get("ready", True)
    if isinstance(ready, str):
        ready = ready.lower() in ("1", "true", "yes")
    phase = a.get("phase", "Running" if ip else "Pending")
    spec = {
        "volumes": [{"name": "tpumesh", "emptyDir": {"medium": "Memory"}}],
        "initContainers": [{"name": "tpumesh-sidecar", "image": "tpumesh:dev", "restartPolicy": "Always",
                            "resources": {}, "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
        "containers": [{"name": "trainer", "image": "trainer:dev",
                        "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                            "apiVersion": "v1",
                            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}],
                        "resources": {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}},
                        "volumeMounts": [{"name": "tpumesh", "mountPath": "/var/run/tpumesh"}],
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                         "cloud.google.com/gke-tpu-topology": "2x2x2"},
        "serviceAccountName": "default",
        "serviceAccount": "default",
    }
    # PodSpec field order (kubernetes/api core/v1 types.go): nodeName, securityContext, hostname,
    # subdomain, schedulerName, tolerations, priority, enableServiceLinks, preemptionPolicy.
    if node:
        spec["nodeName"] = node
    spec["securityContext"] = {}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    spec.update({"schedulerName": "default-scheduler",
                 "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"})
    status = pod_status(phase, ip, ready, t, node)
    if _as_bool(a.get("managed_fields"), state.managed_fields):
        md["managedFields"] = managed_fields(md, spec, status, t)
    return {"metadata": md, "spec": spec, "status": status}


def _fields_v1(obj, depth):
    """A FieldsV1 set in the shape server-side apply records: f:<key> per field, k:{...} for keyed
    list items (containers by name, conditions by type), "." for a map that is itself owned."""
    if not isinstance(obj, dict) or depth == 0:
        return {}
    out = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            sub = _fields_v1(v, depth - 1)
            out["f:" + k] = dict({".": {}}, **sub) if sub else {}
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            items = {}
            for it in v:
                field = next((f for f in ("uid", "name", "type", "ip", "mountPath", "key") if f in it), "key")
                kk = json.dumps({field: it.get(field)}, separators=(",", ":"))
                items["k:" + kk] = dict({".": {}}, **_fields_v1(it, depth - 1))
            out["f:" + k] = items
        else:
            out["f:" + k] = {}
    return out


def managed_fields(md, spec, status, t):
    """managedFields as a real Job pod carries them: the Job controller owns metadata and spec, the
    kubelet owns status (subresource status). About 3 KiB, like real pods."""
    meta_owned = {k: md[k] for k in ("generateName", "labels", "annotations", "ownerReferences", "finalizers")
                  if k in md}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": t,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": _fields_v1(meta_owned, 3),
                                                "f:spec": _fields_v1(spec, 4)}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": t, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": _fields_v1(status, 3)}, "subresource": "status"},
    ]


def make_sts_pod(state, a):
    """A StatefulSet pod: name = hostname = <sts>-<ordinal>, subdomain = serviceName, label
    apps.kubernetes.io/pod-index."""
    sts = a.get("statefulset")
    ns = a.get("namespace") or "default"
    index = int(a.get("index") or 0)
    name = a.get("name") or "%s-%d" % (sts, index)
    uid = _uid("sts/%s/%s" % (ns, sts))
    labels = {"app": sts, "apps.kubernetes.io/pod-index": str(index),
              "controller-revision-hash": "%s-%s" % (sts, hashlib.sha1(sts.encode()).hexdigest()[:10]),
              "statefulset.kubernetes.io/pod-name": name}
    labels.update(a.get("labels") or {})
    pod = make_job_pod(state, dict(a, statefulset=None, job=sts, name=name, index=index,
                                   hostname=a.get("hostname", name), subdomain=a.get("subdomain", sts)))
    md = dict(pod["metadata"])
    md.pop("generateName", None)
    md.pop("finalizers", None)
    md["generateName"] = sts + "-"
    md["labels"] = labels
    md["annotations"] = dict(a.get("annotations") or {})
    md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": uid,
                              "controller": True, "blockOwnerDeletion": True}]
    spec = dict(pod["spec"])
    spec["restartPolicy"] = "Always"
    return {"metadata": order_meta(md), "spec": spec, "status": pod["status"]}


def pod_status(phase, ip, ready, t, node, restarts=0):
    st = {"phase": phase}
    if phase != "Pending" or ip:
        st["conditions"] = ready_conditions(bool(ready) and phase == "Running", t)
    else:
        st["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                             "lastTransitionTime": t}]
    if node:
        hip = "10.128.%d.%d" % ((len(node) * 7) % 256, (sum(node.encode()) % 250) + 2)
        st["hostIP"] = hip
        st["hostIPs"] = [{"ip": hip}]
    if ip:
        st["podIP"] = ip
        st["podIPs"] = [{"ip": ip}]
    st["startTime"] = t
    if phase == "Running":
        running = bool(ready)
        st["initContainerStatuses"] = [{"name": "tpumesh-sidecar", "state": {"running": {"startedAt": t}},
                                        "lastState": {}, "ready": running, "restartCount": 0,
                                        "image": "tpumesh:dev", "imageID": "", "containerID":
                                        "containerd://" + hashlib.sha256((t + "s").encode()).hexdigest(),
                                        "started": True}]
        st["containerStatuses"] = [{"name": "trainer", "state": {"running": {"startedAt": t}},
                                    "lastState": {}, "ready": running, "restartCount": restarts,
                                    "image": "trainer:dev", "imageID": "", "containerID":
                                    "containerd://" + hashlib.sha256((t + "t").encode()).hexdigest(),
                                    "started": True}]
    st["qosClass"] = "BestEffort"
    return st


def normalize_pod(pod, default_ns):
    """Fill what the apiserver would (uid, namespace, creationTimestamp) into a user-given pod."""
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise ValueError("pod JSON needs a metadata object")
    md = dict(pod["metadata"])
    if not md.get("name"):
        if md.get("generateName"):
            md["name"] = md["generateName"] + _rand_suffix(random)
        else:
            raise ValueError("pod JSON needs metadata.name (or metadata.generateName)")
    md.setdefault("namespace", default_ns or "default")
    md.setdefault("uid", _uid())
    md.setdefault("creationTimestamp", now_rfc3339())
    spec = pod.get("spec") or {}
    if "containers" not in spec:
        spec = dict(spec)
        spec["containers"] = [{"name": "main", "image": "busybox"}]
    return {"metadata": order_meta(md), "spec": spec, "status": pod.get("status") or {"phase": "Pending"}}


def set_ready(pod, ready):
    t = now_rfc3339()
    st = dict(pod.get("status") or {})
    conds = []
    seen = False
    for c in st.get("conditions") or []:
        c = dict(c)
        if c.get("type") in ("Ready", "ContainersReady"):
            seen = True
            want = "True" if ready else "False"
            if c.get("status") != want:
                c["status"] = want
                c["lastTransitionTime"] = t
            if ready:
                c.pop("reason", None)
                c.pop("message", None)
            else:
                c["reason"] = "ContainersNotReady"
                c["message"] = "containers with unready status: [trainer]"
        conds.append(c)
    if not seen:
        conds.append({"type": "Ready", "status": "True" if ready else "False", "lastProbeTime": None,
                      "lastTransitionTime": t})
    st["conditions"] = conds
    for k in ("containerStatuses", "initContainerStatuses"):
        if k in st:
            st[k] = [dict(cs, ready=bool(ready)) for cs in st[k]]
    return {"metadata": pod["metadata"], "spec": pod.get("spec", {}), "status": st}


def set_ip(pod, ip):
    st = dict(pod.get("status") or {})
    if ip:
        st["podIP"] = ip
        st["podIPs"] = [{"ip": ip}]
    else:
        st.pop("podIP", None)
        st.pop("podIPs", None)
    return {"metadata": pod["metadata"], "spec": pod.get("spec", {}), "status": st}


def set_meta_map(pod, field, set_map, remove):
    md = dict(pod["metadata"])
    m = dict(md.get(field) or {})
    m.update(set_map or {})
    for k in remove or []:
        m.pop(k, None)
    md[field] = m
    return {"metadata": order_meta(md), "spec": pod.get("spec", {}), "status": pod.get("status", {})}


# ---------------------------------------------------------------------------
# Table output for kubectl (application/json;as=Table;g=meta.k8s.io;v=v1).

TABLE_COLUMNS = [
    {"name": "Name", "type": "string", "format": "name",
     "description": "Name must be unique within a namespace. Is required when creating resources, although"
                    " some resources may allow a client to request the generation of an appropriate name"
                    " automatically. Name is primarily intended for creation idempotence and configuration"
                    " definition. Cannot be updated. More info:"
                    " https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
     "priority": 0},
    {"name": "Ready", "type": "string", "format": "",
     "description": "The aggregate readiness state of this pod for accepting traffic.", "priority": 0},
    {"name": "Status", "type": "string", "format": "",
     "description": "The aggregate status of the containers in this pod.", "priority": 0},
    {"name": "Restarts", "type": "string", "format": "",
     "description": "The number of times the containers in this pod have been restarted and when the last"
                    " container in this pod has restarted.", "priority": 0},
    {"name": "Age", "type": "string", "format": "",
     "description": "CreationTimestamp is a timestamp representing the server time when this object was"
                    " created.", "priority": 0},
    {"name": "IP", "type": "string", "format": "", "description": "podIP is the IP address allocated to the"
                                                                   " pod.", "priority": 1},
    {"name": "Node", "type": "string", "format": "",
     "description": "nodeName indicates in which node this pod is scheduled.", "priority": 1},
    {"name": "Nominated Node", "type": "string", "format": "",
     "description": "nominatedNodeName is set only when this pod preempts other pods on the node.",
     "priority": 1},
    {"name": "Readiness Gates", "type": "string", "format": "",
     "description": "If specified, all readiness gates will be evaluated for pod readiness.", "priority": 1},
]


def human_age(sec):
    sec = max(0, int(sec))
    if sec < 120:
        return "%ds" % sec
    if sec < 600:
        return "%dm%ds" % (sec // 60, sec % 60) if sec % 60 else "%dm" % (sec // 60)
    if sec < 3 * 3600:
        return "%dm" % (sec // 60)
    if sec < 48 * 3600:
        return "%dh" % (sec // 3600)
    return "%dd" % (sec // 86400)


def table_row(pod, include):
    md, sp, st = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
    cs = st.get("containerStatuses") or []
    total = len(sp.get("containers") or [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    phase = st.get("reason") or st.get("phase") or "Unknown"
    if md.get("deletionTimestamp"):
        phase = "Terminating"
    created = parse_rfc3339(md.get("creationTimestamp", "")) or time.time()
    cells = [md.get("name"), "%d/%d" % (ready, total), phase, str(restarts), human_age(time.time() - created),
             st.get("podIP") or "<none>", sp.get("nodeName") or "<none>",
             st.get("nominatedNodeName") or "<none>", "<none>"]
    row = {"cells": cells}
    if include == "Object":
        o = {"kind": "Pod", "apiVersion": "v1"}
        o.update(pod)
        row["object"] = o
    elif include != "None":
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}
    return row


def pom_obj(pod):
    """PartialObjectMetadata of a pod (metadata-only clients)."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": pod["metadata"]}


def table_obj(pods, meta, include, headers=True):
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    if headers:
        t["columnDefinitions"] = TABLE_COLUMNS
    t["rows"] = [table_row(p, include) for p in pods]
    return t


# ---------------------------------------------------------------------------
# Chunked-transfer writers.


class GoBufWriter:
    """Go's http response path: a 2048-byte bufio.Writer over the chunk writer; each flush or large
    direct write is one HTTP chunk (net/http server.go bufferBeforeChunkingSize)."""

    SIZE = 2048

    def __init__(self):
        self.buf = bytearray()
        self.chunks = []

    def write(self, p):
        while len(p) > self.SIZE - len(self.buf):
            if not self.buf:
                self.chunks.append(bytes(p))
                return
            n = self.SIZE - len(self.buf)
            self.buf += p[:n]
            self.flush()
            p = p[n:]
        self.buf += p

    def flush(self):
        if self.buf:
            self.chunks.append(bytes(self.buf))
            self.buf = bytearray()


def plan_chunks(lines, mode, maxsize, rng):
    """Turn event lines (each ends in \\n) into a list of chunk payloads per the chunking mode."""
    if not lines:
        return []
    if mode == "natural":
        w = GoBufWriter()
        for ln in lines:
            w.write(ln)
        w.flush()
        return w.chunks
    if mode == "event":
        return list(lines)
    if mode == "coalesce":
        data = b"".join(lines)
        if maxsize and len(data) > maxsize:
            return [data[i:i + maxsize] for i in range(0, len(data), maxsize)]
        return [data]
    if mode == "split":
        out = []
        for ln in lines:
            if len(ln) < 4:
                out.append(ln)
                continue
            cut = rng.randint(1, len(ln) - 2)
            out.append(ln[:cut])
            out.append(ln[cut:])
        return out
    if mode == "random":
        data = b"".join(lines)
        out, i = [], 0
        top = max(1, maxsize or 4096)
        while i < len(data):
            n = rng.randint(1, top)
            out.append(data[i:i + n])
            i += n
        return out
    if mode == "bytes":
        data = b"".join(lines)
        n = max(1, maxsize or 1)
        return [data[i:i + n] for i in range(0, len(data), n)]
    raise ValueError("unknown chunking mode %r" % mode)


def is_websocket(headers):
    """Upgrade: websocket + Connection: Upgrade (apimachinery IsWebSocketRequest)."""
    return ("websocket" in (headers.get("Upgrade") or "").lower()
            and "upgrade" in (headers.get("Connection") or "").lower())


def ws_bearer(headers):
    """The bearer token of a base64url.bearer.authorization.k8s.io.<token> subprotocol, as an
    Authorization header value, or None."""
    if not is_websocket(headers):
        return None
    for proto in (headers.get("Sec-WebSocket-Protocol") or "").split(","):
        proto = proto.strip()
        prefix = "base64url.bearer.authorization.k8s.io."
        if proto.startswith(prefix):
            enc = proto[len(prefix):]
            try:
                return "Bearer " + base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return "Bearer -"
    return None


def ws_frame(opcode, payload):
    """One unmasked server->client WebSocket frame with FIN set (RFC 6455 §5.2)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


def encode_chunks(chunks):
    return b"".join(b"%x\r\n" % len(c) + c + b"\r\n" for c in chunks if c)


# ---------------------------------------------------------------------------
# HTTP handler.


class StreamClosed(Exception):
    pass


API_RESOURCES = {
    "kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace",
         "verbs": ["get", "list"], "shortNames": ["ns"]},
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
         "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    ]}

def _agg_resource(resource, singular, kind, scope, verbs, short=None, categories=None, subresources=None):
    r = {"resource": resource, "responseKind": {"group": "", "version": "v1", "kind": kind}, "scope": scope,
         "singularResource": singular, "verbs": verbs}
    if short:
        r["shortNames"] = short
    if categories:
        r["categories"] = categories
    if subresources:
        r["subresources"] = subresources
    return r


AGGREGATED_CORE = {"metadata": {}, "versions": [{"version": "v1", "resources": [
    _agg_resource("namespaces", "namespace", "Namespace", "Cluster", ["get", "list"], ["ns"]),
    _agg_resource("pods", "pod", "Pod", "Namespaced", ["create", "delete", "get", "list", "watch"], ["po"], ["all"],
                  [{"subresource": "status", "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                    "verbs": ["get"]}]),
], "freshness": "Current"}]}

NS_PATH = re.compile(r"^/api/v1/namespaces(?:/([^/]+))?/?$")
POD_PATH = re.compile(r"^/api/v1/(?:(watch)/)?(?:namespaces/([^/]+)/)?pods(?:/([^/]+))?(/status)?/?$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ws = False
    server_version = "kube-apiserver-sim"
    sys_version = ""

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (now_rfc3339(), fmt % args))

    @property
    def st(self):
        return self.server.state

    # -- low-level responses ---------------------------------------------
    def _start(self, code, ctype, extra=None):
        self.send_response_only(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        if ctype:
            self.send_header("Content-Type", ctype)
        if code != 401:
            # APF classifies only authenticated requests.
            self.send_header("X-Kubernetes-Pf-Flowschema-Uid", self.server.fs_uid)
            self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid", self.server.pl_uid)
        self.send_header("Date", self.date_time_string())
        for k, v in (extra or {}).items():
            self.send_header(k, v)

    def send_body(self, code, body, ctype="application/json", extra=None, verb=None, gzip_ok=True):
        extra = dict(extra or {})
        if (gzip_ok and self.server.gzip_min and len(body) >= self.server.gzip_min
                and "gzip" in (self.headers.get("Accept-Encoding") or "")):
            body = gzip.compress(body, compresslevel=1)
            extra["Content-Encoding"] = "gzip"
        self._start(code, ctype, extra)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.st.count(None, code, len(body))

    def send_json(self, code, obj, extra=None):
        self.send_body(code, gojson_b(obj) + b"\n", extra=extra)

    def send_api_error(self, e):
        if e.plain is not None:
            body = e.plain.encode() + b"\n"
            hdr = {"X-Content-Type-Options": "nosniff"}
            hdr.update(e.headers)
            self.send_body(429, body, ctype="text/plain; charset=utf-8", extra=hdr, gzip_ok=False)
            return
        hdr = dict(e.headers)
        if e.code == 403:
            hdr.setdefault("X-Content-Type-Options", "nosniff")
        self.send_body(e.code, gojson_b(e.status) + b"\n", extra=hdr, gzip_ok=False)

    # -- dispatch --------------------------------------------------------
    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def _read_body(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise err_bad_request("invalid Content-Length")
        if n > 64 * 1024 * 1024:
            self.close_connection = True
            raise ApiError(status_obj(413, "RequestEntityTooLarge", "Request entity too large: limit is 67108864"))
        return self.rfile.read(n) if n > 0 else b""

    def _dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        try:
            if path.startswith("/_sim/") or path == "/_sim":
                self.st.count("sim")
                body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
                self.server.control.handle(self, method, path, q, body)
                return
            self.req_body = b""
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                self.req_body = self._read_body()
            self._api(method, path, q)
        except ApiError as e:
            self.send_api_error(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, StreamClosed, socket.timeout):
            self.close_connection = True
        except OSError:
            self.close_connection = True

    def _verb_of(self, path, q, method):
        m = POD_PATH.match(path)
        if not m:
            return "other", m
        if method != "GET" and method != "HEAD":
            return {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}[method], m
        if m.group(1) or parse_bool_param(q, "watch"):
            return "watch", m
        if m.group(3):
            return "get", m
        return "list", m

    def _authenticate(self, authorization, anonymous):
        """The user a request acts as, or None once it has been answered 401. A bad token is
        always 401; a missing one is 401 unless anonymous (--anonymous), where it becomes
        system:anonymous (403 later). x509 client-cert authentication (--client-cert-auth): the
        TLS layer already verified the certificate against the CA."""
        if not self.st.auth:
            return self.server.user
        ok = self.st.check_token(authorization)
        peer = getattr(self.connection, "getpeercert", None)
        if ok is not True and peer is not None and peer():
            ok = True
        if ok is True:
            return self.server.user
        if ok is None and anonymous:
            return "system:anonymous"
        self.send_body(401, UNAUTHORIZED_BODY, gzip_ok=False)
        return None

    def _api(self, method, path, q):
        st = self.st
        if admission.PATH.match(path) or path.rstrip("/") == admission.SAR_PATH:
            return self._admission_api(method, path, q)
        wl = workloads.resource_of(path)
        if wl is not None and not (wl[0] == "jobsets" and not st.workloads.jobset_crd):
            return self._workload(method, path, q, wl)
        verb, m = self._verb_of(path, q, method)
        if path in ("/version", "/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/",
                                                                                      "/readyz/")):
            verb = "discovery" if path == "/version" else "health"
        elif m is None and (path in ("/api", "/apis", "/api/v1") or path.startswith("/apis/")
                            or path.startswith("/openapi")):
            verb = "discovery"
        st.count(verb)
        with st.stats_lock:
            st.request_log.append((verb, path, (q.get("labelSelector") or [""])[0],
                                   (q.get("fieldSelector") or [""])[0]))
        user = self._authenticate(self.headers.get("Authorization") or ws_bearer(self.headers),
                                  self.server.anonymous)
        if user is None:
            return
        if verb == "health":
            self.send_body(200, b"ok", ctype="text/plain; charset=utf-8")
            return
        if verb == "discovery" and path == "/version":
            self.send_json(200, self.server.version_info)
            return
        self._faults(verb, path)
        if verb == "discovery":
            return self._discovery(path)
        if m is None:
            nm = NS_PATH.match(path)
            if nm and method in ("GET", "HEAD"):
                return self._namespaces(nm.group(1))
            raise err_not_found_path()
        ns, name = m.group(2), m.group(3)
        if ns is not None:
            ns = urllib.parse.unquote(ns)
        if name is not None:
            name = urllib.parse.unquote(name)
        self._authorize(user, verb, ns, name)
        if verb == "create" and name is None and ns is not None and not m.group(1):
            return self._create(ns, q)
        if verb == "delete" and name is not None and not m.group(4):
            return self._delete(ns, name, q)
        if verb not in ("get", "list", "watch"):
            raise ApiError(status_obj(405, "MethodNotAllowed",
                                      "the server does not allow this method on the requested resource",
                                      details_obj(kind="pods")))
        accept = self.headers.get("Accept") or "application/json"
        table = self._negotiate(accept)
        if table is None:
            raise ApiError(status_obj(406, "NotAcceptable",
                                      "only the following media types are accepted: application/json,"
                                      " application/yaml, application/vnd.kubernetes.protobuf"))
        is_list = verb == "list"
        if table == "PartialObjectMetadata" and is_list:
            raise ApiError(status_obj(406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested "
                                                            "object is a list (*v1.PodList)"))
        if table == "PartialObjectMetadataList" and not is_list:
            raise ApiError(status_obj(406, "NotAcceptable", "you requested PartialObjectMetadataList, but the "
                                                            "requested object is not a list (*v1.Pod)"))
        if name is not None and verb == "get":
            return self._get_pod(ns, name, q, table)
        if name is not None and verb == "watch":
            # A watch of one object is a watch with metadata.name=<name>.
            fs = q.get("fieldSelector", [""])[0]
            q["fieldSelector"] = [("metadata.name=%s" % name) + ("," + fs if fs else "")]
        if verb == "watch":
            return self._watch(ns, q, table)
        return self._list(ns, q, table)

    def _negotiate(self, accept):
        """The first acceptable JSON target in the client's order: '' (the object itself), 'Table',
        'PartialObjectMetadata' or 'PartialObjectMetadataList'; None when nothing is acceptable."""
        for part in accept.split(","):
            params = [x.strip() for x in part.split(";")]
            mt = params[0].lower()
            kv = dict(p.split("=", 1) for p in params[1:] if "=" in p)
            if mt not in ("application/json", "*/*", "application/*", ""):
                continue
            as_ = kv.get("as")
            if as_ is None:
                return ""
            if kv.get("g") != "meta.k8s.io" or kv.get("v") not in ("v1", "v1beta1"):
                continue
            if as_ in ("Table", "PartialObjectMetadata", "PartialObjectMetadataList"):
                return as_
        return None

    def _faults(self, verb, path):
        st = self.st
        now = time.time()
        with st.cond:
            if now < st.unavailable_until:
                # The watch cache re-initialising: 429 with a growing Retry-After.
                down = now - st.unavailable_start
                ra = int(min(30, max(1, math.exp(0.06 * down))))
                raise ApiError(status_obj(429, "TooManyRequests", "storage is (re)initializing",
                                          details_obj(retry_after=ra)), {"Retry-After": str(ra)})
            rule = None
            agent = self.headers.get("User-Agent")
            for r in st.faults:
                if r.applies(verb, agent):
                    rule = r
                    r.count -= 1
                    break
            st.faults = [r for r in st.faults if r.count > 0]
        if rule is None:
            return
        hdr = {}
        if rule.retry_after is not None:
            hdr["Retry-After"] = str(rule.retry_after)
        if rule.code == 429 and rule.kind == "apf":
            raise ApiError(None, hdr, plain=rule.message or "Too many requests, please try again later.")
        if rule.code == 429 and rule.kind == "shutdown":
            # The shutting-down apiserver: plain text, Retry-After 5, Connection: close.
            hdr.setdefault("Retry-After", "5")
            hdr["Connection"] = "close"
            self.close_connection = True
            raise ApiError(None, hdr, plain=rule.message or "The apiserver is shutting down, please try again later.")
        reasons = {429: ("TooManyRequests", "storage is (re)initializing"),
                   500: ("InternalError", "Internal error occurred: injected by kube-apiserver-sim"),
                   503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
                   504: ("Timeout", "Timeout: request did not complete within the allotted timeout"),
                   403: ("Forbidden", "forbidden: injected by kube-apiserver-sim"),
                   401: ("Unauthorized", "Unauthorized"),
                   410: ("Expired", "The resourceVersion for the provided list is too old."),
                   404: ("NotFound", "the server could not find the requested resource")}
        reason, msg = reasons.get(rule.code, ("InternalError", "injected error"))
        if rule.code == 401:
            hdr_only = hdr
            self.send_body(401, UNAUTHORIZED_BODY, extra=hdr_only, gzip_ok=False)
            raise StreamClosed()
        det = details_obj(retry_after=rule.retry_after) if rule.retry_after else None
        raise ApiError(status_obj(rule.code, reason, rule.message or msg, det), hdr)

    def _authorize(self, user, verb, ns, name, resource="pods"):
        for fns, verbs, resources in self.st.forbid:
            if ((fns == "*" or fns == ns) and (not verbs or verb in verbs)
                    and (resource in resources or (not resources and resource == "pods"))):
                break
        else:
            if user != "system:anonymous":
                return
        group = workloads.RESOURCES[resource]["group"] if resource in workloads.RESOURCES else ""
        qual = workloads.qualified(resource) if group else resource
        scope = 'in the namespace "%s"' % ns if ns is not None else "at the cluster scope"
        who = '%s "%s" is forbidden' % (qual, name) if name else "%s is forbidden" % qual
        msg = '%s: User "%s" cannot %s resource "%s" in API group "%s" %s' % (who, user, verb, resource, group,
                                                                            scope)
        raise ApiError(status_obj(403, "Forbidden", msg, details_obj(name=name, group=group or None,
                                                                     kind=resource)))

    # -- workloads: Jobs, StatefulSets, JobSets (GET and LIST) ----------------
    def _workload(self, method, path, q, wl):
        """GET / LIST of batch/v1 Jobs, apps/v1 StatefulSets, jobset.x-k8s.io/v1alpha2 JobSets, as the
        API server answers them (JSON, Table, PartialObjectMetadata). No watch: 405."""
        st = self.st
        resource, ns, name, watch = wl
        if ns is not None:
            ns = urllib.parse.unquote(ns)
        if name is not None:
            name = urllib.parse.unquote(name)
        if method not in ("GET", "HEAD"):
            verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}[method]
        elif watch or parse_bool_param(q, "watch"):
            verb = "watch"
        else:
            verb = "get" if name is not None else "list"
        st.count(verb + "-" + resource)
        user = self._authenticate(self.headers.get("Authorization"), self.server.anonymous)
        if user is None:
            return
        self._faults(verb + "-" + resource, path)
        self._authorize(user, verb, ns, name, resource)
        kind = workloads.RESOURCES[resource]["kind"]
        if verb not in ("get", "list"):
            raise ApiError(status_obj(405, "MethodNotAllowed",
                                      "the server does not allow this method on the requested resource",
                                      details_obj(group=workloads.RESOURCES[resource]["group"], kind=resource)))
        table = self._negotiate(self.headers.get("Accept") or "application/json")
        if table is None:
            raise ApiError(status_obj(406, "NotAcceptable",
                                      "only the following media types are accepted: application/json,"
                                      " application/yaml, application/vnd.kubernetes.protobuf"))
        include = q.get("includeObject", ["Metadata"])[0] or "Metadata"
        if verb == "get":
            if table == "PartialObjectMetadataList":
                raise ApiError(status_obj(406, "NotAcceptable", "you requested PartialObjectMetadataList, but the "
                                          "requested object is not a list (*v1.%s)" % kind))
            with st.cond:
                obj = st.workloads.get(resource, ns, name)
            if obj is None:
                raise ApiError(status_obj(404, "NotFound", '%s "%s" not found' % (workloads.qualified(resource), name),
                                          details_obj(name=name, group=workloads.RESOURCES[resource]["group"],
                                                      kind=resource)))
            if table == "Table":
                out = workloads.table(resource, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                      include)
            elif table == "PartialObjectMetadata":
                out = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
            else:
                out = obj
            self.send_json(200, out)
            return
        if table == "PartialObjectMetadata":
            raise ApiError(status_obj(406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested "
                                      "object is a list (*v1.%sList)" % kind))
        sel = q.get("labelSelector", [""])[0]
        try:
            reqs = parse_label_selector(sel) if sel else []
        except ApiError:
            raise
        with st.cond:
            objs = st.workloads.list(resource, ns)
            rv = str(st.workloads.rv)
        objs = [o for o in objs if all(r.matches(o["metadata"].get("labels") or {}) for r in reqs)]
        meta = {"resourceVersion": rv}
        if table == "Table":
            out = workloads.table(resource, objs, meta, include)
        elif table == "PartialObjectMetadataList":
            out = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                   "items": [{"metadata": o["metadata"]} for o in objs]}
        else:
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objs]
            out = {"kind": kind + "List", "apiVersion": workloads.gv(resource), "metadata": meta, "items": items}
        self.send_json(200, out)

    def _discovery(self, path):
        accept = self.headers.get("Accept") or ""
        if (path in ("/api", "/apis") and self.server.discovery == "aggregated"
                and "as=APIGroupDiscoveryList" in accept and "g=apidiscovery.k8s.io" in accept
                and "v=v2" in accept.replace("v=v2beta1", "")):
            # Aggregated discovery (apidiscovery.k8s.io/v2, GA 1.30): one document per root.
            items = ([AGGREGATED_CORE] if path == "/api"
                     else workloads.aggregated_groups(self.st.workloads.jobset_crd) + admission.aggregated_entries())
            body = gojson_b({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
                             "metadata": {}, "items": items}) + b"\n"
            self.send_body(200, body, ctype="application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                           extra={"Vary": "Accept", "Etag": '"%s"' % hashlib.sha256(body).hexdigest().upper()})
            return
        if path == "/api":
            self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % self.server.port}]})
        elif path == "/apis":
            groups = workloads.group_list(self.st.workloads.jobset_crd)
            groups["groups"] = groups["groups"] + admission.group_list_entries()
            self.send_json(200, groups)
        elif path == "/api/v1":
            self.send_json(200, API_RESOURCES)
        elif workloads.group_doc(path, self.st.workloads.jobset_crd) is not None:
            self.send_json(200, workloads.group_doc(path, self.st.workloads.jobset_crd))
        elif admission.group_doc(path) is not None:
            self.send_json(200, admission.group_doc(path))
        else:
            raise err_not_found_path()

    # -- namespaces (kubectl checks the namespace after a NotFound) -----------
    def _namespaces(self, name):
        st = self.st
        with st.cond:
            names = set(st.namespaces) | {k[0] for k in st.pods}
            rv = st.rv
        if name is not None:
            name = urllib.parse.unquote(name)
            if name not in names:
                raise ApiError(status_obj(404, "NotFound", 'namespaces "%s" not found' % name,
                                          details_obj(name=name, kind="namespaces")))
            self.send_body(200, gojson_b(namespace_obj(name, rv)) + b"\n")
            return
        items = b",".join(gojson_b({k: v for k, v in namespace_obj(n, rv).items() if k not in ("kind", "apiVersion")})
                          for n in sorted(names))
        body = (b'{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"%d"},"items":[' % rv
                + items + b"]}\n")
        self.send_body(200, body)

    # -- writes through the API: create and (graceful) delete ---------------
    def _admission_api(self, method, path, q):
        """MutatingWebhookConfigurations (create, get, list, delete) and SubjectAccessReviews
        (create), see admission.py."""
        st = self.st
        m = admission.PATH.match(path)
        name = urllib.parse.unquote(m.group(1)) if m and m.group(1) else None
        resource = admission.RESOURCE if m else "subjectaccessreviews"
        verb = ({"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(method)
                or ("get" if name else "list"))
        st.count(verb + "-" + resource)
        if self._authenticate(self.headers.get("Authorization"), False) is None:
            return
        self._faults(verb + "-" + resource, path)
        try:
            if m is None:
                if method != "POST":
                    raise admission.AdmissionError(405, "MethodNotAllowed", "the server does not allow this method "
                                                   "on the requested resource")
                body = json.loads(self.req_body or b"null")
                if not isinstance(body, dict) or body.get("kind") != "SubjectAccessReview":
                    raise admission.AdmissionError(400, "BadRequest", "the body must be an authorization.k8s.io/v1 "
                                                   "SubjectAccessReview")
                with st.cond:
                    forbid = list(st.forbid)
                    delay = st.sar_delay
                if delay > 0:
                    time.sleep(delay)
                self.send_json(201, admission.subject_access_review(body, forbid))
                return
            adm = st.admission
            if method == "POST" and name is None:
                try:
                    obj = json.loads(self.req_body or b"null")
                except ValueError as e:
                    raise admission.AdmissionError(400, "BadRequest", "the body of the request was in an unknown "
                                                   "format (%s)" % e)
                self.send_json(201, adm.create(obj))
            elif method in ("GET", "HEAD"):
                self.send_json(200, adm.get(name) if name else adm.list())
            elif method == "DELETE" and name:
                adm.delete(name)
                self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                     "details": {"name": name, "group": admission.GROUP,
                                                 "kind": admission.RESOURCE}})
            else:
                raise admission.AdmissionError(405, "MethodNotAllowed", "the server does not allow this method on "
                                               "the requested resource")
        except admission.AdmissionError as e:
            raise ApiError(status_obj(e.code, e.reason, e.message, details_obj(name=name, group=admission.GROUP,
                                                                               kind=resource)))

    def _create(self, ns, q=None):
        """POST a pod: 201 with the stored object; 409 if it exists (apiserver create semantics)."""
        st = self.st
        try:
            pod = json.loads(self.req_body or b"null")
        except ValueError as e:
            raise err_bad_request("the body of the request was in an unknown format - accepted media types "
                                  "include: application/json, application/yaml (%s)" % e)
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
            raise err_bad_request("the body must be a v1 Pod")
        md = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        if md.get("namespace") and md["namespace"] != ns:
            raise err_bad_request("the namespace of the provided object does not match the namespace sent on the"
                                  " request")
        if not md.get("name") and not md.get("generateName"):
            raise ApiError(status_obj(422, "Invalid", 'Pod "" is invalid: metadata.name: Required value: name or '
                                                       'generateName is required',
                                      details_obj(kind="Pod", causes=[{"reason": "FieldValueRequired",
                                                                        "message": "Required value: name or "
                                                                                   "generateName is required",
                                                                        "field": "metadata.name"}])))
        md = dict(md)
        md["namespace"] = ns
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            md.pop(k, None)
        # Mutating admission (admission.py): the webhooks see the pod as sent, with its namespace.
        dry_run = "All" in (q or {}).get("dryRun", [])
        warnings = []
        try:
            admitted, warnings = st.admission.admit({"apiVersion": "v1", "kind": "Pod", "metadata": md,
                                                     "spec": pod.get("spec")}, ns,
                                                    dict(st.ns_labels.get(ns, {}),
                                                         **{"kubernetes.io/metadata.name": ns}),
                                                    self.server.user,
                                                    dry_run=dry_run)
        except admission.AdmissionError as e:
            raise ApiError(status_obj(e.code, e.reason, e.message))
        md, pod = dict(admitted.get("metadata") or {}), dict(pod, spec=admitted.get("spec"))
        md["namespace"] = ns
        extra = {"Warning": ", ".join('299 - "%s"' % w.replace('"', "'") for w in warnings)} if warnings else None
        status = pod.get("status") or {"phase": "Pending", "qosClass": "BestEffort"}
        pod = normalize_pod({"metadata": md, "spec": pod.get("spec"), "status": status}, ns)
        if dry_run:
            self.send_body(201, gojson_b(pod) + b"\n", extra=extra)
            return
        with st.cond:
            key = (ns, pod["metadata"]["name"])
            if key in st.pods:
                raise ApiError(status_obj(409, "AlreadyExists", 'pods "%s" already exists' % key[1],
                                          details_obj(name=key[1], kind="pods")))
            rec = st.put(pod)
        self.send_body(201, rec.full() + b"\n", extra=extra)

    def _delete(self, ns, name, q):
        """DELETE a pod: a scheduled pod with a grace period gets deletionTimestamp
        (MODIFIED) and the simulated kubelet removes it (DELETED) `kubelet_delete_after` seconds
        later; grace 0 or an unscheduled pod is removed at once. Answers 200 with the object."""
        st = self.st
        grace = None
        try:
            body = json.loads(self.req_body) if self.req_body else {}
        except ValueError:
            raise err_bad_request("the body of the request was in an unknown format")
        if isinstance(body, dict) and body.get("gracePeriodSeconds") is not None:
            grace = body["gracePeriodSeconds"]
        if q.get("gracePeriodSeconds", [""])[0] != "":
            grace = q["gracePeriodSeconds"][0]
        try:
            grace = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise err_bad_request('invalid gracePeriodSeconds: strconv.ParseInt: parsing "%s": invalid syntax' % grace)
        key = (ns, name)
        with st.cond:
            rec = st.pods.get(key)
            if rec is None:
                raise err_not_found_pod(name)
            spec = rec.pod.get("spec") or {}
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30))
            md = rec.pod["metadata"]
            done = None
            if grace <= 0 or not spec.get("nodeName"):
                done = st.remove(key)
            elif md.get("deletionTimestamp"):
                done = rec
        if done is not None:
            self.send_body(200, done.full() + b"\n")
            return
        with st.cond:
            rec = st.pods.get(key)
            if rec is None:
                raise err_not_found_pod(name)
            md = dict(rec.pod["metadata"])
            md["deletionTimestamp"] = now_rfc3339(time.time() + grace)
            md["deletionGracePeriodSeconds"] = grace
            new = st.put({"metadata": order_meta(md), "spec": rec.pod.get("spec", {}),
                          "status": rec.pod.get("status", {})})
            after = min(float(grace), st.kubelet_delete_after)
            uid = md.get("uid")

        def kubelet_done():
            with st.cond:
                cur = st.pods.get(key)
                if cur is not None and cur.pod["metadata"].get("uid") == uid:
                    st.remove(key)
        t = threading.Timer(after, kubelet_done)
        t.daemon = True
        t.start()
        self.send_body(200, new.full() + b"\n")

    # -- GET one pod -----------------------------------------------------
    def _get_pod(self, ns, name, q, table=""):
        st = self.st
        rv_s = q.get("resourceVersion", [""])[0]
        if rv_s not in ("", "0"):
            # GET with RV=N is "not older than" N: wait for it, then 504.
            if not re.match(r"^[0-9]+$", rv_s):
                raise err_bad_request('invalid resource version: strconv.ParseUint: parsing "%s": invalid syntax'
                                      % rv_s)
            self._wait_rv(int(rv_s))
        with st.cond:
            rec = st.pods.get((ns, name))
        if rec is None:
            raise err_not_found_pod(name)
        if table == "Table":
            include = q.get("includeObject", ["Metadata"])[0] or "Metadata"
            body = gojson_b(table_obj([rec.pod], {"resourceVersion": str(rec.rv)}, include)) + b"\n"
        elif table == "PartialObjectMetadata":
            body = gojson_b(pom_obj(rec.pod)) + b"\n"
        else:
            body = rec.full() + b"\n"
        self.send_body(200, body)

    # -- LIST ------------------------------------------------------------
    def _list_params(self, q):
        rv_s = q.get("resourceVersion", [""])[0]
        match = q.get("resourceVersionMatch", [""])[0]
        cont = q.get("continue", [""])[0]
        limit_s = q.get("limit", [""])[0]
        if "sendInitialEvents" in q:
            raise err_invalid_listoptions("sendInitialEvents", "Forbidden", "sendInitialEvents is forbidden for list")
        if match:
            if match not in ("Exact", "NotOlderThan"):
                raise err_invalid_listoptions("resourceVersionMatch", "Unsupported value",
                                              'supported values: "Exact", "NotOlderThan", ""', match)
            if rv_s == "":
                raise err_invalid_listoptions("resourceVersionMatch", "Forbidden",
                                              "resourceVersionMatch is forbidden unless resourceVersion is provided")
            if cont:
                raise err_invalid_listoptions("resourceVersionMatch", "Forbidden",
                                              "resourceVersionMatch is forbidden when continue is provided")
            if match == "Exact" and rv_s == "0":
                raise err_invalid_listoptions("resourceVersionMatch", "Forbidden",
                                              'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        rv = None
        if rv_s != "":
            if not re.match(r"^[0-9]+$", rv_s) or int(rv_s) >= 1 << 64:
                raise err_bad_request('invalid resource version: strconv.ParseUint: parsing "%s": invalid syntax'
                                      % rv_s)
            rv = int(rv_s)
        limit = 0
        if limit_s != "":
            try:
                limit = int(limit_s)
            except ValueError:
                raise err_bad_request('invalid limit: strconv.ParseInt: parsing "%s": invalid syntax' % limit_s)
            limit = max(0, limit)
        if cont and rv_s not in ("", "0"):
            raise err_bad_request("specifying resource version is not allowed when using continue")
        return rv, match, cont, limit

    def _wait_rv(self, rv):
        """Wait up to 3 s for a future resourceVersion (blockTimeout)."""
        st = self.st
        deadline = time.time() + 3.0
        with st.cond:
            while st.rv < rv:
                left = deadline - time.time()
                if left <= 0:
                    raise err_too_large_rv(rv, st.rv)
                st.cond.wait(left)

    def _list(self, ns, q, table):
        st = self.st
        flt = Filter(ns, parse_label_selector(q.get("labelSelector", [""])[0]),
                     parse_field_selector(q.get("fieldSelector", [""])[0]))
        rv, match, cont, limit = self._list_params(q)
        start = None
        inconsistent = False
        if cont:
            tok = decode_continue(cont)
            start = tok["start"]
            snap_rv = tok["rv"]
            with st.cond:
                if snap_rv == -1:
                    inconsistent = True
                    snap = st.snapshot_at(st.rv)
                else:
                    snap = st.snapshot_at(snap_rv) if snap_rv <= st.rv else None
                if snap is None:
                    newtok = encode_continue(-1, start)
                    raise ApiError(status_obj(410, "Expired", EXPIRED_CONTINUE_MSG, meta={"continue": newtok}))
        else:
            exact = rv is not None and rv != 0 and (match == "Exact" or (match == "" and limit > 0))
            if rv is not None and rv > 0:
                self._wait_rv(rv)
            with st.cond:
                if exact:
                    snap = st.snapshot_at(rv)
                    if snap is None:
                        raise err_expired_list()
                else:
                    snap = st.snapshot_at(st.rv)
        keys, recs = snap.view(ns)
        i = 0
        if start is not None:
            i = bisect.bisect_left(keys, start)
        items = []
        n = len(keys)
        last = None
        while i < n:
            r = recs[i]
            if flt.matches(r):
                items.append(r)
                last = keys[i]
                if limit and len(items) >= limit:
                    i += 1
                    break
            i += 1
        meta = {"resourceVersion": str(snap.rv)}
        if limit and i < n and last is not None:
            meta["continue"] = encode_continue(-1 if inconsistent else snap.rv, last + "\x00")
            if not flt.has_selectors:
                meta["remainingItemCount"] = n - i
        if table == "Table":
            include = q.get("includeObject", ["Metadata"])[0] or "Metadata"
            body = gojson_b(table_obj([r.pod for r in items], meta, include)) + b"\n"
        elif table == "PartialObjectMetadataList":
            body = gojson_b({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                             "items": [pom_obj(r.pod) for r in items]}) + b"\n"
        else:
            body = (b'{"kind":"PodList","apiVersion":"v1","metadata":' + gojson_b(meta) + b',"items":['
                    + b",".join(r.item() for r in items) + b"]}\n")
        self.send_body(200, body)

    # -- WATCH -----------------------------------------------------------
    def _watch(self, ns, q, table):
        st = self.st
        flt = Filter(ns, parse_label_selector(q.get("labelSelector", [""])[0]),
                     parse_field_selector(q.get("fieldSelector", [""])[0]))
        rv_s = q.get("resourceVersion", [""])[0]
        match = q.get("resourceVersionMatch", [""])[0]
        bookmarks = parse_bool_param(q, "allowWatchBookmarks")
        send_initial = parse_bool_param(q, "sendInitialEvents") if "sendInitialEvents" in q else None
        if "continue" in q and q["continue"][0]:
            raise err_bad_request("continue is not supported with watch")
        timeout = None
        ts = q.get("timeoutSeconds", [""])[0]
        if ts != "":
            try:
                timeout = int(ts)
            except ValueError:
                raise err_bad_request('invalid timeoutSeconds: strconv.ParseInt: parsing "%s": invalid syntax' % ts)
        if timeout is None or timeout <= 0:
            mrt = self.server.min_request_timeout
            timeout = mrt * (1 + random.random())
        rv = None
        if rv_s != "":
            if not re.match(r"^[0-9]+$", rv_s):
                raise err_invalid_listoptions("resourceVersion", "Invalid value", "invalid resource version",
                                              rv_s)
            rv = int(rv_s)
        # sendInitialEvents / resourceVersionMatch validation.
        if send_initial is not None:
            if not st.watchlist:
                raise err_invalid_listoptions("sendInitialEvents", "Forbidden",
                                              "sendInitialEvents is forbidden for watch unless the WatchList"
                                              " feature gate is enabled")
            if match != "NotOlderThan":
                raise err_invalid_listoptions("resourceVersionMatch", "Forbidden",
                                              "sendInitialEvents requires setting resourceVersionMatch to"
                                              " NotOlderThan")
        elif match:
            raise err_invalid_listoptions("resourceVersionMatch", "Forbidden",
                                          "resourceVersionMatch is forbidden for watch unless sendInitialEvents"
                                          " is provided")
        if match and match not in ("NotOlderThan",):
            raise err_invalid_listoptions("resourceVersionMatch", "Unsupported value",
                                          'supported values: "NotOlderThan"', match)
        # Server-side defaulting with the WatchList gate on.
        if send_initial is None and st.watchlist and (rv is None or rv == 0):
            send_initial = True
        if send_initial is None:
            send_initial = rv is None or rv == 0
        initial_end = send_initial and bookmarks and st.watchlist
        if rv is not None and rv > 0 and send_initial:
            self._wait_rv(rv)  # NotOlderThan
        # Register under the lock: the snapshot and the cursor are consistent.
        initial = []
        too_old = None
        future = False
        with st.cond:
            if send_initial:
                snap = st.snapshot_at(st.rv)
                keys, recs = snap.view(ns)
                initial = [r for r in recs if flt.matches(r)]
                cursor = st.rv
            elif rv is None or rv == 0:
                # sendInitialEvents=false: start at the most recent (or any) state, no initial events.
                cursor = st.rv
            else:
                cursor = rv
                if rv < st.compacted:
                    too_old = (rv, st.compacted)
                elif rv > st.rv:
                    future = True
            w = None
            if too_old is None:
                desc = {"namespace": ns, "labelSelector": q.get("labelSelector", [""])[0],
                        "fieldSelector": q.get("fieldSelector", [""])[0],
                        "userAgent": self.headers.get("User-Agent", "")}
                w = Watcher(flt if (flt.ns is not None or flt.has_selectors) else None, cursor, bookmarks,
                            table, st.next_wid, desc)
                st.next_wid += 1
                st.watchers.add(w)
                with st.stats_lock:
                    st.stats["watches_total"] += 1
        if too_old is not None and st.expired_watch == "http410":
            raise ApiError(status_obj(410, "Expired", "too old resource version: %d (%d)" % too_old))
        self.ws = is_websocket(self.headers)
        ws = self.ws
        if ws and not self.headers.get("Sec-WebSocket-Key"):
            with st.cond:
                st.watchers.discard(w)
            raise err_bad_request("websocket: missing Sec-WebSocket-Key")
        if self.ws:
            # Watch over WebSocket: one text message per event, client messages ignored.
            key = self.headers.get("Sec-WebSocket-Key", "")
            self.send_response_only(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(
                (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode())
            self.end_headers()
            self.wfile.flush()
            st.count(None, 101)
        else:
            self._start(200, "application/json", {"Transfer-Encoding": "chunked"})
            self.end_headers()
            self.wfile.flush()
            st.count(None, 200)
        self.close_connection = True
        # A client that stops reading blocks our writes; after slow_consumer_timeout seconds the watch is
        # closed, as the cacher force-closes an unresponsive watcher.
        if st.slow_consumer_timeout > 0:
            self.connection.settimeout(st.slow_consumer_timeout)
        try:
            if too_old is not None:
                # Too-old RV: 200 + one in-stream ERROR 410 + end.
                ln = error_line(status_obj(410, "Expired", "too old resource version: %d (%d)" % too_old))
                self._send_lines([ln], None)
                self._end_stream()
            else:
                self._stream(w, initial, initial_end, timeout, future)
            # The chunked body ended properly: the connection can carry the next request, as Go's does.
            self.close_connection = ws
            self.connection.settimeout(None)
        finally:
            if w is not None:
                with st.cond:
                    st.watchers.discard(w)

    def _send_lines(self, lines, w, events=0, bookmarks=0):
        st = self.st
        if w is not None and events > 0:
            w.last_sent = time.perf_counter()
        if getattr(self, "ws", False):
            data = b"".join(ws_frame(0x1, ln) for ln in lines)
            self.wfile.write(data)
            if w is not None:
                w.bytes += len(data)
                w.events += events
            st.add_bytes(len(data), events, bookmarks)
            return
        with st.cond:
            mode, maxsize, delay = st.chunking["mode"], st.chunking["max"], st.chunking["delay"]
        chunks = plan_chunks(lines, mode, maxsize, st.rng)
        if delay > 0 or mode in ("split", "random", "bytes", "event"):
            for c in chunks:
                self.wfile.write(b"%x\r\n" % len(c) + c + b"\r\n")
                if delay > 0:
                    time.sleep(delay)
        else:
            self.wfile.write(encode_chunks(chunks))
        n = sum(len(c) for c in chunks)
        if w is not None:
            w.bytes += n
            w.events += events
        st.add_bytes(n, events, bookmarks)

    def _end_stream(self):
        try:
            if getattr(self, "ws", False):
                self.wfile.write(ws_frame(0x8, b"\x03\xe8"))  # close, 1000 normal
                self.close_connection = True
                self.ws = False
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def _abort(self):
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise StreamClosed()

    def _table_line(self, mode, etype, rec, first):
        """A watch event line for a Table or PartialObjectMetadata watch."""
        if mode == "PartialObjectMetadata":
            return gojson_b({"type": etype, "object": pom_obj(rec.pod)}) + b"\n"
        meta = {"resourceVersion": str(rec.rv)}
        obj = table_obj([rec.pod], meta, "Metadata", headers=first)
        return gojson_b({"type": etype, "object": obj}) + b"\n"

    def _stream(self, w, initial, initial_end, timeout, future):
        st = self.st
        start = time.time()
        deadline = start + timeout
        bm_every = st.bookmark_interval
        next_bm = start + bm_every if bm_every > 0 else float("inf")
        final_bm = deadline - 2.0
        first_table = True
        # Synthetic ADDED events for the initial state (object RVs need not be ordered).
        if initial:
            batch = []
            for r in initial:
                if w.table:
                    batch.append(self._table_line(w.table, "ADDED", r, first_table))
                    first_table = False
                else:
                    batch.append(r.event_line(b"ADDED"))
                if len(batch) >= 256:
                    self._send_lines(batch, w, events=len(batch))
                    batch = []
            if batch:
                self._send_lines(batch, w, events=len(batch))
        if initial_end:
            self._send_lines([bookmark_line(w.cursor, True)], w, bookmarks=1)
        # A future RV: the cacher waits 3 s then errors (default); --future-watch wait follows the
        # API Concepts page, "may wait indefinitely".
        future_deadline = time.time() + 3.0 if future and st.future_watch == "error" else None
        last_check = time.time()
        while True:
            now = time.time()
            lines = []
            nev = nbm = 0
            cut = None
            inject = []
            pending = []
            with st.cond:
                while True:
                    now = time.time()
                    if w.cut:
                        cut = w.cut
                        w.cut = None
                        break
                    if now >= deadline:
                        break
                    stalled = now < st.stall_until
                    if not stalled:
                        if w.inject or w.bookmark_now:
                            break
                        if w.cursor < st.rv:
                            break
                        if w.bookmarks and (now >= next_bm or (now >= final_bm and final_bm > start)):
                            break
                    if future_deadline is not None and now >= future_deadline:
                        break
                    wake = deadline
                    if stalled:
                        wake = min(wake, st.stall_until)
                    elif w.bookmarks:
                        wake = min(wake, next_bm, final_bm if final_bm > now else deadline)
                    if future_deadline is not None:
                        wake = min(wake, future_deadline)
                    st.cond.wait(max(0.001, min(1.0, wake - now)))
                    if time.time() - last_check >= 1.0:
                        # A client that went away is noticed within a second even on a quiet stream.
                        last_check = time.time()
                        if self._peer_gone():
                            cut = "gone"
                            break
                if cut is None and now < deadline:
                    if future_deadline is not None:
                        if w.cursor > st.rv and now >= future_deadline:
                            status = err_too_large_rv(w.cursor, st.rv).status
                            lines = [error_line(status)]
                            cut = "clean"
                        elif w.cursor <= st.rv:
                            future_deadline = None
                    if cut is None and w.cursor < st.compacted:
                        # Fell behind the bounded history: the cacher closes a slow watcher.
                        cut = "clean"
                    elif cut is None and w.cursor < st.rv and now >= st.stall_until:
                        i0 = w.cursor - st.compacted
                        evs = st.hist[i0:i0 + 2000]
                        if evs:
                            w.cursor = evs[-1].rv
                        pending = evs
                    else:
                        pending = []
                    inject, w.inject = w.inject, []
                else:
                    pending = []
            if cut is None and pending:
                for ev in pending:
                    v = ev.view(w.flt)
                    if v is None:
                        continue
                    if w.table:
                        rec = ev.new if v[1] == "new" else Rec(with_rv(ev.old.pod, ev.rv), ev.rv)
                        lines.append(self._table_line(w.table, v[0], rec, first_table))
                        first_table = False
                    else:
                        lines.append(ev.line(v[0], v[1]))
                    nev += 1
            now = time.time()
            if cut is None and now < deadline and now >= st.stall_until and w.bookmarks and w.cursor <= st.rv and (
                    w.bookmark_now or now >= next_bm or (now >= final_bm > start)):
                lines.append(bookmark_line(w.cursor))
                nbm += 1
                w.bookmark_now = False
                if now >= final_bm:
                    final_bm = start - 1  # the pre-deadline bookmark is sent once
                next_bm = now + bm_every if bm_every > 0 else float("inf")
            w.bookmark_now = False
            if lines:
                self._send_lines(lines, w, events=nev, bookmarks=nbm)
            for item in inject:
                kind, data = item
                if kind == "lines":
                    self._send_lines([data], w)
                elif kind == "error":
                    # An in-stream ERROR ends the watch.
                    self._send_lines([data], w)
                    self._end_stream()
                    return
            if cut is not None:
                if cut == "clean":
                    self._end_stream()
                    return
                if cut == "mid-event":
                    half = self._half_event(w)
                    if self.ws:
                        # Half of a frame: the header promises the whole line, then the socket closes.
                        whole = self._half_event(w, whole=True)
                        half = ws_frame(0x1, whole)[:2 + len(whole) // 2]
                        self.wfile.write(half)
                    else:
                        self.wfile.write(encode_chunks([half]))
                    st.add_bytes(len(half))
                self._abort()
            if time.time() >= deadline:
                # timeoutSeconds: end the body with no final event.
                self._end_stream()
                return

    def _peer_gone(self):
        """True when the client closed its side (EOF readable) or reset the connection."""
        import select
        sock = self.connection
        try:
            r, _, _ = select.select([sock], [], [], 0)
            if not r:
                return False
            if isinstance(sock, ssl.SSLSocket):
                old = sock.gettimeout()
                sock.setblocking(False)
                try:
                    return sock.recv(1) == b""
                except (ssl.SSLWantReadError, BlockingIOError):
                    return False
                finally:
                    sock.settimeout(old)
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (OSError, ValueError):
            return True

    def _half_event(self, w, whole=False):
        st = self.st
        with st.cond:
            rec = None
            for r in st.pods.values():
                if w.flt is None or w.flt.matches(r):
                    rec = r
                    break
        if rec is None:
            line = bookmark_line(w.cursor)
        else:
            line = b'{"type":"MODIFIED","object":' + rec.full() + b"}\n"
        return line if whole else line[:max(1, len(line) // 2)]


def namespace_obj(name, rv):
    created = "2026-01-01T00:00:00Z"
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": _uid("namespace/" + name), "resourceVersion": "1",
                         "creationTimestamp": created, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def encode_continue(rv, start):
    raw = gojson_b({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(tok):
    """Decode a continue token; 400 on a malformed one."""
    try:
        pad = "=" * (-len(tok) % 4)
        raw = base64.urlsafe_b64decode(tok + pad)
        d = json.loads(raw)
        if d.get("v") != "meta.k8s.io/v1" or not isinstance(d.get("rv"), int) or not isinstance(d.get("start"), str):
            raise ValueError
        if d["start"] == "" or d["start"].startswith("/"):
            raise ValueError
        return d
    except (ValueError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
        raise err_bad_request("invalid continue token: continue key is not valid: %s" % tok[:64])


# ---------------------------------------------------------------------------
# Control API (/_sim/<verb>).


def _as_bool(v, default=None):
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    return str(v).lower() in ("1", "true", "yes", "on")


def _as_int(v, name, default=None):
    if v is None:
        return default
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ValueError("%s must be an integer, got %r" % (name, v))


def _as_map(v):
    """A label/annotation map from a dict or 'k=v,k2=v2'."""
    if v is None:
        return {}
    if isinstance(v, dict):
        return {str(k): str(x) for k, x in v.items()}
    out = {}
    for part in str(v).split(","):
        if part.strip():
            if "=" not in part:
                raise ValueError("expected key=value, got %r" % part)
            k, x = part.split("=", 1)
            out[k.strip()] = x.strip()
    return out


def _as_list(v):
    if v is None:
        return []
    if isinstance(v, list):
        return [str(x) for x in v]
    return [x.strip() for x in str(v).split(",") if x.strip()]


class Control:
    VERBS = ("state", "pods", "get", "create", "make", "update", "delete", "ready", "ip", "labels",
             "annotate", "phase", "cut", "malformed", "oversize", "stall", "token", "fail", "forbid",
             "compact", "restart", "stats", "reset-stats", "bookmark", "chunking", "config", "bulk-create",
             "churn", "churn-stop", "batch", "clear", "error-event", "make-job", "make-jobset",
             "make-statefulset", "put-object", "delete-object", "objects", "webhook-service", "admission-calls", "sar-delay",
             "namespace-labels")

    def __init__(self, server):
        self.server = server

    @property
    def st(self):
        return self.server.state

    def handle(self, h, method, path, q, body):
        verb = path[len("/_sim/"):].strip("/") if path.startswith("/_sim/") else ""
        args = {k: v[0] for k, v in q.items()}
        if body:
            try:
                parsed = json.loads(body)
            except json.JSONDecodeError as e:
                h.send_json(400, {"ok": False, "error": "control body is not JSON: %s" % e})
                return
            if not isinstance(parsed, dict):
                h.send_json(400, {"ok": False, "error": "control body must be a JSON object"})
                return
            args.update(parsed)
        if verb not in self.VERBS:
            h.send_json(404, {"ok": False, "error": "unknown control verb %r; verbs: %s" % (
                verb, ", ".join(self.VERBS))})
            return
        try:
            res = getattr(self, "v_" + verb.replace("-", "_"))(args)
        except KeyError as e:
            h.send_json(404, {"ok": False, "error": "not found: %s" % e.args[0]})
            return
        except (ValueError, TypeError, AttributeError) as e:
            h.send_json(400, {"ok": False, "error": "bad arguments: %s" % e})
            return
        out = {"ok": True}
        if res:
            out.update(res)
        h.send_body(200, json.dumps(out).encode() + b"\n", gzip_ok=False)

    # -- helpers ---------------------------------------------------------
    def _key(self, a):
        name = a.get("name")
        if name is None or name == "":
            raise ValueError("name is required")
        return (str(a.get("namespace") or "default"), str(name))

    def _mutate(self, a, fn):
        st = self.st
        with st.cond:
            key = self._key(a)
            rec = st.pods.get(key)
            if rec is None:
                raise KeyError("pod %s/%s" % key)
            new = st.put(fn(rec.pod))
            return {"rv": new.rv, "pod": new.full_obj()}

    # -- verbs -------------------------------------------------------------
    def v_state(self, a):
        st = self.st
        with st.cond:
            per_ns = collections.Counter(k[0] for k in st.pods)
            return {"rv": st.rv, "compacted": st.compacted, "history": len(st.hist), "pods": len(st.pods),
                    "podsPerNamespace": dict(per_ns),
                    "watchers": len(st.watchers), "restarts": st.restarts,
                    "faults": [r.describe() for r in st.faults], "chunking": st.chunking,
                    "stallUntil": st.stall_until, "auth": st.auth}

    def v_pods(self, a):
        st = self.st
        ns = a.get("namespace")
        with st.cond:
            recs = [r for k, r in sorted(st.pods.items()) if ns is None or k[0] == ns]
            rv = st.rv
        if _as_bool(a.get("names_only"), False):
            return {"rv": rv, "names": ["%s/%s" % r.key for r in recs]}
        return {"rv": rv, "items": [r.full_obj() for r in recs]}

    def v_get(self, a):
        st = self.st
        with st.cond:
            key = self._key(a)
            rec = st.pods.get(key)
            if rec is None:
                raise KeyError("pod %s/%s" % key)
            return {"rv": st.rv, "pod": rec.full_obj()}

    def v_create(self, a):
        pod = a.get("pod")
        if isinstance(pod, str):
            pod = json.loads(pod)
        pod = normalize_pod(pod, a.get("namespace"))
        st = self.st
        with st.cond:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key in st.pods:
                raise ValueError('pods "%s" already exists' % key[1])
            rec = st.put(pod)
            return {"rv": rec.rv, "pod": rec.full_obj()}

    def v_make(self, a):
        st = self.st
        with st.cond:
            pod = make_job_pod(st, a)
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key in st.pods:
                raise ValueError('pods "%s" already exists' % key[1])
            rec = st.put(pod)
            return {"rv": rec.rv, "pod": rec.full_obj()}

    def v_webhook_service(self, a):
        """Where the Service a webhook's clientConfig.service names listens (admission.py)."""
        key, addr = a.get("service") or "", a.get("address") or ""
        host, _, port = addr.rpartition(":")
        if key.count("/") != 1 or not port.isdigit() or not host.startswith("127."):
            raise ValueError("want service=NS/NAME address=127.x.y.z:PORT")
        with self.st.admission.lock:
            self.st.admission.service_map[key] = (host, int(port))
        return {"services": {k: "%s:%d" % v for k, v in self.st.admission.service_map.items()}}

    def v_namespace_labels(self, a):
        """Labels of a namespace, as webhooks' namespaceSelector sees them: set (k=v,...) and
        remove (k,...); kubernetes.io/metadata.name is always the namespace's name."""
        ns = a.get("namespace") or "default"
        with self.st.cond:
            labels = self.st.ns_labels.setdefault(ns, {})
            for k, v in _as_map(a.get("set")).items():
                labels[k] = v
            for k in _as_list(a.get("remove")):
                labels.pop(k, None)
            out = dict(labels, **{"kubernetes.io/metadata.name": ns})
        return {"namespace": ns, "labels": out}

    def v_admission_calls(self, a):
        """Every webhook call so far: [webhook name, patched|allowed|denied|failed|ignored]."""
        return {"calls": [list(c) for c in self.st.admission.calls]}

    def v_update(self, a):
        pod = a.get("pod")
        if isinstance(pod, str):
            pod = json.loads(pod)
        if not isinstance(pod, dict) or "metadata" not in pod:
            raise ValueError("update needs pod JSON with metadata")
        st = self.st
        with st.cond:
            md = pod["metadata"]
            key = (md.get("namespace") or a.get("namespace") or "default", md.get("name"))
            old = st.pods.get(key)
            if old is None:
                raise KeyError("pod %s/%s" % key)
            md = dict(md)
            md.setdefault("namespace", key[0])
            md.setdefault("uid", old.pod["metadata"].get("uid"))
            md.setdefault("creationTimestamp", old.pod["metadata"].get("creationTimestamp"))
            rec = st.put({"metadata": order_meta(md), "spec": pod.get("spec", old.pod.get("spec", {})),
                          "status": pod.get("status", old.pod.get("status", {}))})
            return {"rv": rec.rv, "pod": rec.full_obj()}

    def v_delete(self, a):
        """grace=0 (default): DELETED now. grace>0: MODIFIED with deletionTimestamp, then DELETED after
        `after` seconds (if given) or on a second delete with grace=0."""
        st = self.st
        grace = _as_int(a.get("grace"), "grace", 0)
        after = a.get("after")
        with st.cond:
            key = self._key(a)
            rec = st.pods.get(key)
            if rec is None:
                raise KeyError("pod %s/%s" % key)
            if grace > 0 and not rec.pod["metadata"].get("deletionTimestamp"):
                md = dict(rec.pod["metadata"])
                md["deletionTimestamp"] = now_rfc3339(time.time() + grace)
                md["deletionGracePeriodSeconds"] = grace
                new = st.put({"metadata": order_meta(md), "spec": rec.pod.get("spec", {}),
                              "status": rec.pod.get("status", {})})
                res = {"rv": new.rv, "terminating": True, "pod": new.full_obj()}
            else:
                gone = st.remove(key)
                return {"rv": gone.rv, "deleted": True}
        if after is not None:
            uid = res["pod"]["metadata"].get("uid")

            def finish():
                with st.cond:
                    cur = st.pods.get(key)
                    if cur is not None and cur.pod["metadata"].get("uid") == uid:
                        st.remove(key)
            t = threading.Timer(float(after), finish)
            t.daemon = True
            t.start()
        return res

    def v_ready(self, a):
        ready = _as_bool(a.get("ready"), True)
        return self._mutate(a, lambda p: set_ready(p, ready))

    def v_ip(self, a):
        ip = a.get("ip") or ""
        return self._mutate(a, lambda p: set_ip(p, ip))

    def v_labels(self, a):
        return self._mutate(a, lambda p: set_meta_map(p, "labels", _as_map(a.get("set")), _as_list(a.get("remove"))))

    def v_annotate(self, a):
        return self._mutate(a, lambda p: set_meta_map(p, "annotations", _as_map(a.get("set")),
                                                      _as_list(a.get("remove"))))

    def v_phase(self, a):
        phase = a.get("phase")
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError("phase must be Pending, Running, Succeeded, Failed or Unknown")

        def fn(p):
            s = dict(p.get("status") or {})
            s["phase"] = phase
            return {"metadata": p["metadata"], "spec": p.get("spec", {}), "status": s}
        return self._mutate(a, fn)

    def v_batch(self, a):
        """Apply several control operations at once, under one lock hold, so that watchers receive
        all their events together (several events per chunk)."""
        ops = a.get("ops")
        if isinstance(ops, str):
            ops = json.loads(ops)
        if not isinstance(ops, list):
            raise ValueError("batch needs ops: a list of {\"verb\":..., args...}")
        allowed = ("create", "make", "update", "delete", "ready", "ip", "labels", "annotate", "phase")
        st = self.st
        results = []
        with st.cond:
            for op in ops:
                v = op.get("verb")
                if v not in allowed:
                    raise ValueError("batch verb must be one of %s" % ", ".join(allowed))
                results.append(getattr(self, "v_" + v)(op).get("rv"))
        return {"rvs": results}

    def v_clear(self, a):
        """Delete every pod (DELETED events)."""
        st = self.st
        with st.cond:
            keys = list(st.pods)
            for k in keys:
                st.remove(k)
            return {"deleted": len(keys), "rv": st.rv}

    def v_cut(self, a):
        mode = a.get("mode") or ("mid-event" if _as_bool(a.get("mid_event")) else "clean")
        if mode not in ("clean", "abrupt", "mid-event"):
            raise ValueError("cut mode must be clean, abrupt or mid-event")
        st = self.st
        with st.cond:
            ws = self._targets(a)
            for w in ws:
                w.cut = mode
            st.cond.notify_all()
        return {"cut": len(ws), "mode": mode}

    def _targets(self, a):
        """The active watches a stream verb acts on (cond held): all, or those whose User-Agent
        contains `agent`."""
        agent = a.get("agent")
        return [w for w in self.st.watchers if not agent or agent in w.desc.get("userAgent", "")]

    def _inject(self, item, a=None):
        st = self.st
        with st.cond:
            ws = self._targets(a or {})
            for w in ws:
                w.inject.append(item)
            st.cond.notify_all()
        return len(ws)

    def v_error_event(self, a):
        """Send an in-stream ERROR event to every watch, then end it: code 410 (Expired,
        'too old resource version'), 500 (InternalError), 429 (TooManyRequests) or 504 (Timeout)."""
        code = _as_int(a.get("code"), "code", 410)
        st = self.st
        with st.cond:
            cur, comp = st.rv, st.compacted
        texts = {410: ("Expired", "too old resource version: %d (%d)" % (max(0, comp - 1), comp)),
                 500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
                 429: ("TooManyRequests", "storage is (re)initializing"),
                 504: ("Timeout", "Timeout: Too large resource version: %d, current: %d" % (cur + 1, cur))}
        if code not in texts:
            raise ValueError("code must be 410, 500, 429 or 504")
        reason, msg = texts[code]
        status = status_obj(code, reason, a.get("message") or msg,
                            details_obj(retry_after=1) if code in (429, 504) else None)
        return {"watchers": self._inject(("error", error_line(status)), a)}

    def v_malformed(self, a):
        line = a.get("line")
        data = (line.encode() if line else b'{"type":"MODIFIED","object":{"kind":"Pod",,"apiVersion":"v1"}}') + b"\n"
        return {"watchers": self._inject(("lines", data), a)}

    def v_oversize(self, a):
        """Send one MODIFIED event of about `mib` MiB (a real pod padded with an annotation) to every watch.
        The store is not changed, so a relist shows the real pod."""
        mib = float(a.get("mib", 1))
        if mib <= 0 or mib > 1024:
            raise ValueError("mib must be in (0, 1024]")
        st = self.st
        with st.cond:
            key = (a.get("namespace") or "default", a["name"]) if a.get("name") else None
            rec = st.pods.get(key) if key else next(iter(st.pods.values()), None)
            pod = rec.pod if rec is not None else normalize_pod(
                {"metadata": {"name": "oversize", "namespace": "default"}}, "default")
            pod = set_meta_map(pod, "annotations", {"sim.tpumesh.dev/padding": "x" * int(mib * 1024 * 1024)}, [])
            pod = with_rv(pod, st.rv)
        line = b'{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1",' + gojson_b(pod)[1:] + b"}\n"
        return {"watchers": self._inject(("lines", line), a), "bytes": len(line)}

    def v_stall(self, a):
        sec = float(a.get("seconds", 5))
        st = self.st
        with st.cond:
            st.stall_until = time.time() + sec
            st.cond.notify_all()
        return {"until": st.stall_until}

    def v_token(self, a):
        st = self.st
        tok = a.get("token")
        with st.cond:
            if a.get("reload"):
                st.token_file_mtime = None
                st._reload_token_file()
            elif tok:
                if _as_bool(a.get("keep_old"), False):
                    st.tokens.add(tok)
                else:
                    st.tokens = {tok}
                st.token_file = None
                st.auth = True
            elif _as_bool(a.get("disable"), False):
                st.tokens = set()
                st.token_file = None
                st.auth = False
            else:
                raise ValueError("token needs token=T (optional keep_old=true), reload=true or disable=true")
            return {"accepted": len(st.tokens), "auth": st.auth}

    def v_fail(self, a):
        code = _as_int(a.get("code"), "code", 429)
        count = _as_int(a.get("count"), "count", 1)
        match = a.get("match") or "any"
        if match not in ("any", "pods", "list", "watch", "get", "discovery"):
            raise ValueError("match must be any, pods, list, watch, get or discovery")
        kind = a.get("kind") or ("apf" if code == 429 else "status")
        if kind not in ("apf", "status", "shutdown"):
            raise ValueError("kind must be apf (plain-text APF 429), shutdown (plain-text 429, Retry-After 5,"
                             " Connection: close) or status (a Status body)")
        ra = a.get("retry_after")
        ra = _as_int(ra, "retry_after") if ra not in (None, "") else (
            (5 if kind == "shutdown" else 1) if code == 429 else None)
        st = self.st
        with st.cond:
            if count <= 0:
                st.faults = []
            else:
                st.faults.append(FaultRule(code, count, ra, match, kind, a.get("message"), a.get("agent") or None))
            return {"faults": [r.describe() for r in st.faults]}

    def v_sar_delay(self, a):
        st = self.st
        with st.cond:
            st.sar_delay = max(0.0, float(a.get("ms") or 0) / 1000.0)
            return {"sarDelayMs": st.sar_delay * 1000.0}

    def v_forbid(self, a):
        st = self.st
        with st.cond:
            if _as_bool(a.get("clear"), False):
                st.forbid = []
            else:
                resources = set(_as_list(a.get("resources")))
                bad = resources - set(workloads.RESOURCES) - {"pods"}
                if bad:
                    raise ValueError("resources must be among pods, %s" % ", ".join(sorted(workloads.RESOURCES)))
                st.forbid.append((a.get("namespace") or "*", set(_as_list(a.get("verbs"))), resources))
            return {"rules": [{"namespace": n, "verbs": sorted(v), "resources": sorted(r) or ["pods"]}
                              for n, v, r in st.forbid]}

    # -- workload objects (Jobs, StatefulSets, JobSets) -------------------------
    def v_make_job(self, a):
        st = self.st
        with st.cond:
            return {"object": st.workloads.put(workloads.make_job(str(a.get("namespace") or "default"), a))}

    def v_make_jobset(self, a):
        st = self.st
        with st.cond:
            return {"object": st.workloads.put(workloads.make_jobset(str(a.get("namespace") or "default"), a))}

    def v_make_statefulset(self, a):
        st = self.st
        with st.cond:
            return {"object": st.workloads.put(workloads.make_statefulset(str(a.get("namespace") or "default"),
                                                                          a))}

    def v_put_object(self, a):
        obj = a.get("object")
        if isinstance(obj, str):
            obj = json.loads(obj)
        st = self.st
        with st.cond:
            return {"object": st.workloads.put(obj)}

    def v_delete_object(self, a):
        resource = a.get("resource")
        if resource not in workloads.RESOURCES:
            raise ValueError("resource must be one of %s" % ", ".join(sorted(workloads.RESOURCES)))
        ns, name = self._key(a)
        st = self.st
        with st.cond:
            if st.workloads.delete(resource, ns, name) is None:
                raise KeyError("%s %s/%s" % (resource, ns, name))
        return {}

    def v_objects(self, a):
        st = self.st
        with st.cond:
            return {"objects": [o for r in sorted(workloads.RESOURCES) for o in st.workloads.list(r, None)],
                    "jobsetCRD": st.workloads.jobset_crd}

    def v_compact(self, a):
        c = self.st.compact(a.get("rv"))
        return {"compacted": c}

    def v_restart(self, a):
        res = self.st.restart(a.get("rv"), float(a.get("unavailable", 0) or 0))
        down = float(a.get("down", 0) or 0)
        if down > 0:
            self.server.go_down(down)
            res["down"] = down
        return res

    def v_stats(self, a):
        st = self.st
        with st.stats_lock:
            s = {"requests": dict(st.stats["requests"]), "codes": dict(st.stats["codes"]),
                 "watchesTotal": st.stats["watches_total"], "bytesSent": st.stats["bytes_sent"],
                 "eventsSent": st.stats["events_sent"], "bookmarksSent": st.stats["bookmarks_sent"],
                 "uptime": time.time() - st.stats["started"]}
            if str(a.get("log", "")).lower() in ("1", "true"):
                s["log"] = [list(x) for x in st.request_log]
        with st.cond:
            s["watchesActive"] = len(st.watchers)
            s["watchers"] = [dict(w.desc, id=w.id, bytes=w.bytes, events=w.events, rv=w.cursor,
                                  seconds=round(time.time() - w.started, 3),
                                  lastEventSent=w.last_sent)
                             for w in sorted(st.watchers, key=lambda x: x.id)]
            s["rv"] = st.rv
            s["churn"] = dict(st.churn)
        return s

    def v_reset_stats(self, a):
        st = self.st
        with st.stats_lock:
            st.stats.update({"requests": collections.Counter(), "codes": collections.Counter(),
                             "watches_total": 0, "bytes_sent": 0, "events_sent": 0, "bookmarks_sent": 0,
                             "started": time.time()})
            st.request_log.clear()
        return {}

    def v_bookmark(self, a):
        st = self.st
        with st.cond:
            n = 0
            for w in self._targets(a):
                if w.bookmarks:
                    w.bookmark_now = True
                    n += 1
            st.cond.notify_all()
        return {"watchers": n}

    def v_chunking(self, a):
        st = self.st
        mode = a.get("mode")
        if mode is not None and mode not in ("natural", "event", "coalesce", "split", "random", "bytes"):
            raise ValueError("mode must be natural, event, coalesce, split, random or bytes")
        with st.cond:
            if mode is not None:
                st.chunking["mode"] = mode
            if a.get("max") is not None:
                st.chunking["max"] = _as_int(a.get("max"), "max")
            if a.get("delay_ms") is not None:
                st.chunking["delay"] = float(a.get("delay_ms")) / 1000.0
            if a.get("seed") is not None:
                st.rng.seed(_as_int(a.get("seed"), "seed"))
            return {"chunking": dict(st.chunking)}

    def v_config(self, a):
        st = self.st
        with st.cond:
            if a.get("bookmark_interval") is not None:
                st.bookmark_interval = float(a["bookmark_interval"])
            if a.get("expired_watch") is not None:
                if a["expired_watch"] not in ("event", "http410"):
                    raise ValueError("expired_watch must be event or http410")
                st.expired_watch = a["expired_watch"]
            if a.get("future_watch") is not None:
                if a["future_watch"] not in ("error", "wait"):
                    raise ValueError("future_watch must be error or wait")
                st.future_watch = a["future_watch"]
            if a.get("watchlist") is not None:
                st.watchlist = _as_bool(a["watchlist"])
            if a.get("history") is not None:
                st.history_cap = max(1, _as_int(a["history"], "history"))
            if a.get("min_request_timeout") is not None:
                self.server.min_request_timeout = float(a["min_request_timeout"])
            if a.get("slow_consumer_timeout") is not None:
                st.slow_consumer_timeout = float(a["slow_consumer_timeout"])
            if a.get("kubelet_delete_after") is not None:
                st.kubelet_delete_after = float(a["kubelet_delete_after"])
            if a.get("jobset_crd") is not None:
                st.workloads.jobset_crd = _as_bool(a["jobset_crd"])
            st.cond.notify_all()
            return {"bookmarkInterval": st.bookmark_interval, "expiredWatch": st.expired_watch,
                    "futureWatch": st.future_watch,
                    "watchlist": st.watchlist, "history": st.history_cap,
                    "kubeletDeleteAfter": st.kubelet_delete_after, "slowConsumerTimeout": st.slow_consumer_timeout,
                    "minRequestTimeout": self.server.min_request_timeout,
                    "jobsetCRD": st.workloads.jobset_crd}

    def v_bulk_create(self, a):
        """Create `count` Indexed-Job pods (index start..start+count-1), one ADDED event each."""
        count = _as_int(a.get("count"), "count", 0)
        if count <= 0 or count > 1_000_000:
            raise ValueError("count must be in 1..1000000")
        start = _as_int(a.get("start"), "start", 0)
        base = {k: v for k, v in a.items() if k in ("namespace", "job", "ready", "phase", "labels",
                                                   "annotations", "jobset", "rjob", "per_slice", "statefulset",
                                                   "managed_fields")}
        per = _as_int(a.get("per_slice"), "per_slice", 0)
        if a.get("jobset"):
            if per <= 0 or count % per:
                raise ValueError("bulk-create with jobset needs per_slice dividing count")
            base["slices"] = count // per
        st = self.st
        t0 = time.time()
        created = 0
        step = 512
        for off in range(0, count, step):
            with st.cond:
                for i in range(start + off, start + min(count, off + step)):
                    b = dict(base)
                    if b.get("jobset"):
                        b["slice"], b["index"] = divmod(i, per)
                        job = "%s-%s-%d" % (b["jobset"], b.get("rjob") or "slice", b["slice"])
                        b["name"] = "%s-%d-%s" % (job, b["index"], _rand_suffix(st.rng))
                    elif b.get("statefulset"):
                        b["index"] = i
                    else:
                        b["index"] = i
                        job = b.get("job") or "trainer"
                        b["name"] = "%s-%d-%s" % (job, i, _rand_suffix(st.rng))
                    b["ip"] = "auto"
                    st.put(make_job_pod(st, b))
                    created += 1
        with st.cond:
            rv = st.rv
        return {"created": created, "rv": rv, "seconds": time.time() - t0}

    def v_churn(self, a):
        """Modify random pods `events` times at `rate` events/s (0 = as fast as possible) in the background.
        kind: annotate (irrelevant change, default), ready (flip readiness), ip (new IP), mixed
        (1/2 annotate, 1/4 ready, 1/4 ip; with ip_share=F: an IP change with probability F, the rest
        2/3 annotate, 1/3 ready). burst=N: events are stored N at a time (default 64, at a rate
        rate/100 per step), so watchers get bursts of N."""
        events = _as_int(a.get("events"), "events", 1000)
        rate = float(a.get("rate", 0) or 0)
        kind = a.get("kind") or "annotate"
        ns = a.get("namespace")
        ip_share = a.get("ip_share")
        burst = a.get("burst")
        if kind not in ("annotate", "ready", "ip", "mixed"):
            raise ValueError("kind must be annotate, ready, ip or mixed")
        if ip_share is not None and (kind != "mixed" or not 0 <= float(ip_share) <= 1):
            raise ValueError("ip_share is a fraction 0..1 of a mixed churn")
        if burst is not None and _as_int(burst, "burst", 64) < 1:
            raise ValueError("burst must be >= 1")
        st = self.st
        with st.cond:
            if st.churn["running"]:
                raise ValueError("a churn is already running (churn-stop first)")
            if not st.pods:
                raise ValueError("no pods to churn (bulk-create first)")
            st.churn = {"running": True, "done": 0, "target": events, "started": time.time(), "finished": None,
                        "kind": kind, "rate": rate}
        st.churn_stop.clear()
        th = threading.Thread(target=self._churn_run, daemon=True,
                              args=(events, rate, kind, ns, None if ip_share is None else float(ip_share),
                                    None if burst is None else int(burst)))
        th.start()
        if _as_bool(a.get("wait"), False):
            th.join()
            with st.cond:
                return {"churn": dict(st.churn)}
        return {"started": True}

    def _churn_run(self, events, rate, kind, ns, ip_share=None, burst=None):
        st = self.st
        rng = random.Random(st.rng.random())
        t0 = time.time()
        done = 0
        keys = None
        keys_gen = -1
        batch = burst or (64 if rate <= 0 else max(1, min(64, int(rate / 100))))
        while done < events and not st.churn_stop.is_set():
            if rate > 0:
                due = t0 + done / rate
                d = due - time.time()
                if d > 0:
                    time.sleep(min(d, 0.5))
                    continue
            with st.cond:
                if keys_gen != st.keys_gen:
                    keys = [k for k in st.pods if ns is None or k[0] == ns]
                    keys_gen = st.keys_gen
                if not keys:
                    break
                for _ in range(min(batch, events - done)):
                    key = keys[rng.randrange(len(keys))]
                    rec = st.pods[key]
                    if kind != "mixed":
                        k = kind
                    elif ip_share is not None:
                        k = "ip" if rng.random() < ip_share else rng.choice(("annotate", "annotate", "ready"))
                    else:
                        k = rng.choice(("annotate", "annotate", "ready", "ip"))
                    if k == "annotate":
                        pod = set_meta_map(rec.pod, "annotations", {"sim.tpumesh.dev/churn": str(st.rv + 1)}, [])
                    elif k == "ready":
                        cur = any(c.get("type") == "Ready" and c.get("status") == "True"
                                  for c in rec.pod.get("status", {}).get("conditions") or [])
                        pod = set_ready(rec.pod, not cur)
                    else:
                        pod = set_ip(rec.pod, "10.%d.%d.%d" % (rng.randrange(64, 128), rng.randrange(256),
                                                               rng.randrange(1, 255)))
                    st.put(pod)
                    done += 1
                st.churn["done"] = done
        with st.cond:
            st.churn["running"] = False
            st.churn["done"] = done
            st.churn["finished"] = time.time()
            st.churn["seconds"] = time.time() - t0

    def v_churn_stop(self, a):
        self.st.churn_stop.set()
        return {}


# ---------------------------------------------------------------------------
# Server.


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, addr, args, state):
        super().__init__(addr, Handler)
        self.state = state
        self.verbose = args.verbose
        self.anonymous = args.anonymous
        self.user = args.user
        self.ssl_ctx = None
        self.gzip_min = args.gzip_min
        self.discovery = args.discovery
        self.min_request_timeout = float(args.min_request_timeout)
        self.port = self.server_address[1]
        self.fs_uid = _uid("flowschema")
        self.pl_uid = _uid("prioritylevel")
        major, minor = re.match(r"^v?(\d+)\.(\d+)", args.k8s_version).groups()
        self.version_info = {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
                             "minCompatibilityMajor": major, "minCompatibilityMinor": str(max(0, int(minor) - 1)),
                             "gitVersion": args.k8s_version, "gitCommit": hashlib.sha1(
                                 args.k8s_version.encode()).hexdigest(), "gitTreeState": "clean",
                             "buildDate": "2026-07-01T00:00:00Z", "goVersion": "go1.24.6", "compiler": "gc",
                             "platform": "linux/amd64"}
        self.control = Control(self)
        self.conns = set()
        self.conns_lock = threading.Lock()
        self.down_for = 0.0
        self.stopping = False

    def finish_request(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.ssl_ctx is None:
            self._serve_conn(request, client_address)
            return
        request.settimeout(10)
        try:
            conn = self.ssl_ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        conn.settimeout(None)
        try:
            self._serve_conn(conn, client_address)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _serve_conn(self, conn, client_address):
        with self.conns_lock:
            self.conns.add(conn)
        try:
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            with self.conns_lock:
                self.conns.discard(conn)

    def go_down(self, seconds):
        """Emulate an apiserver process restart: stop listening (connections are refused), drop every
        open connection, and listen again on the same port after `seconds`."""
        self.down_for = max(0.0, float(seconds))
        t = threading.Timer(0.05, self.shutdown)
        t.daemon = True
        t.start()

    def serve(self):
        """serve_forever, with the down/up cycles that go_down asks for."""
        while True:
            self.serve_forever(poll_interval=0.2)
            if self.stopping or not self.down_for:
                return
            down, self.down_for = self.down_for, 0.0
            self.socket.close()
            with self.conns_lock:
                conns = list(self.conns)
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            time.sleep(down)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.port))
            sock.listen(self.request_queue_size)
            self.socket = sock

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)


def make_tls(state_dir):
    """A test CA and a server certificate for 127.0.0.1/localhost, made with the openssl CLI."""
    os.makedirs(state_dir, exist_ok=True)
    ca_key, ca_crt = os.path.join(state_dir, "ca.key"), os.path.join(state_dir, "ca.crt")
    key, csr, crt = (os.path.join(state_dir, n) for n in ("server.key", "server.csr", "server.crt"))
    ext = os.path.join(state_dir, "server.ext")

    def run(*cmd):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        if r.returncode != 0:
            raise SystemExit("kube-apiserver-sim: openssl failed: %s\n%s" % (" ".join(cmd),
                                                                           r.stderr.decode(errors="replace")))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "2", "-subj",
        "/CN=kube-apiserver-sim-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver")
    with open(ext, "w", encoding="ascii") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", crt,
        "-days", "2", "-extfile", ext)
    # A client certificate from the same CA (x509 client-cert authentication: the
    # apiserver takes the user from CN and groups from O).
    ckey, ccsr, ccrt = (os.path.join(state_dir, n) for n in ("client.key", "client.csr", "client.crt"))
    cext = os.path.join(state_dir, "client.ext")
    run("openssl", "req", "-new", *ec, "-keyout", ckey, "-out", ccsr, "-subj", "/O=tpumesh/CN=tpumesh-client")
    with open(cext, "w", encoding="ascii") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
    run("openssl", "x509", "-req", "-in", ccsr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", ccrt,
        "-days", "2", "-extfile", cext)
    return ca_crt, crt, key


HELP_EPILOG = """
control API (unauthenticated, same port, see README.md):
  GET  /_sim/state | /_sim/stats[?log=true: also the last 4096 API requests] | /_sim/pods[?namespace=NS]
  POST /_sim/<verb> with a JSON object of arguments (query parameters also work):
    make        name namespace index job hostname subdomain ip ready phase node labels annotations
                managed_fields=true (JobSet pod: jobset rjob slice index slices per_slice; StatefulSet pod:
                statefulset index)
    create      pod (JSON)            update   pod (JSON, replaces spec/status/metadata)
    delete      name namespace [grace S: MODIFIED with deletionTimestamp first] [after T: DELETED after T s]
    ready       name namespace ready=true|false      ip  name namespace ip=ADDR ('' clears)
    labels / annotate  name namespace set=k=v,... remove=k,...      phase name namespace phase=P
    batch       ops=[{verb:...,...},...]  (one lock hold: watchers get the events together)
    clear       delete every pod
    cut         mode=clean|abrupt|mid-event   (end every watch; mid-event closes inside a JSON line)
                cut, error-event, malformed, oversize and bookmark take agent=SUBSTRING (User-Agent)
    error-event code=410|500|429|504 [message=...]  in-stream ERROR Status on every watch, then end it
    malformed   [line=TEXT]  inject a malformed line into every watch
    oversize    mib=N [name namespace]  inject one MODIFIED event of N MiB into every watch
    stall       seconds=N    watches send nothing for N s (events are delivered afterwards)
    token       token=T [keep_old=true] | reload=true | disable=true
    fail        code=429|500|503|... count=N [retry_after=S] [match=any|pods|list|watch|get|discovery]
                [kind=apf|shutdown|status] [message=...] [agent=SUBSTRING of User-Agent]  (count=0 clears)
    forbid      namespace=NS|* verbs=list,watch,get | clear=true      (403 with the real message; also what
                SubjectAccessReviews answer)
    webhook-service service=NS/NAME address=127.x.y.z:PORT   (where a webhook's Service listens)
    sar-delay   ms=N     hold every SubjectAccessReview answer N ms (a slow authorizer; 0 = none)
    admission-calls   every mutating webhook call so far and its outcome
    compact     [rv=N]       expire history (and continue tokens) up to rv (default: now)
    restart     [rv=N] [unavailable=S] [down=S]  history lost, resourceVersions restart lower (etcd
                restore); every watch is cut; down: connections refused for S s (process restart);
                unavailable: then 429 'storage is (re)initializing' for S s
    bookmark    send a BOOKMARK now on every watch that allows them
    chunking    mode=natural|event|coalesce|split|random|bytes [max=N] [delay_ms=N] [seed=N]
    config      bookmark_interval=S expired_watch=event|http410 future_watch=error|wait
                watchlist=true|false history=N
                min_request_timeout=S kubelet_delete_after=S (API DELETE: DELETED this long after MODIFIED)
                slow_consumer_timeout=S (close a watch whose client stopped reading; 0 = never)
    bulk-create count=N [start=I namespace job ready | jobset per_slice rjob | statefulset]
                churn events=N [rate=R kind=annotate|ready|ip|mixed ip_share=F burst=N
                wait=true]   churn-stop   stats   reset-stats
  CLI: kube_apiserver_sim.py ctl --url URL <verb> [--key value ...]   (values parsed as JSON when they can be)
"""


def server_main(argv):
    p = argparse.ArgumentParser(
        prog="kube_apiserver_sim.py",
        description="Loopback-only kube-apiserver simulator for tpumesh tests. Serves /api/v1/pods and "
                    "/api/v1/namespaces/NS/pods[/NAME] (list with label/field selectors, limit/continue and the "
                    "resourceVersion rules; watch=1 with bookmarks, sendInitialEvents, timeoutSeconds; get; "
                    "create; graceful delete), /api/v1/namespaces[/NS], aggregated and legacy discovery, /version, "
                    "/healthz; JSON, Table and PartialObjectMetadata. Prints 'READY port=<p> url=<url> "
                    "ca=<path or ->' on stdout when serving and writes the same to STATE_DIR/ready.json.",
        epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: pick a free one)")
    p.add_argument("--tls", action="store_true", help="serve HTTPS with a test CA made by openssl into --state-dir")
    p.add_argument("--client-cert-auth", action="store_true",
                   help="with --tls: also accept x509 client certificates signed by the test CA as authentication "
                        "(a valid certificate authenticates like a good token); --state-dir gets client.crt and "
                        "client.key")
    p.add_argument("--state-dir", help="directory for ready.json and the TLS files (a temp dir if omitted)")
    p.add_argument("--token", help="accepted bearer token (no auth when neither --token nor --token-file)")
    p.add_argument("--token-file", help="file holding the accepted bearer token (re-read when it changes)")
    p.add_argument("--anonymous", action="store_true",
                   help="treat requests without a token as system:anonymous (403) instead of 401")
    p.add_argument("--user", default="system:serviceaccount:default:default",
                   help="user name in 403 messages for authenticated requests")
    p.add_argument("--initial-rv", type=int, default=1000, help="first resourceVersion (default 1000)")
    p.add_argument("--history", type=int, default=50000,
                   help="events kept for watch resumption; older RVs get 410 (default 50000)")
    p.add_argument("--bookmark-interval", type=float, default=60.0,
                   help="seconds between bookmarks on watches that allow them (default 60, as the apiserver;"
                        " 0 = only the one 2 s before the deadline and those the bookmark verb asks for)")
    p.add_argument("--min-request-timeout", type=float, default=1800.0,
                   help="watch without timeoutSeconds lasts this x (1+rand) seconds (default 1800)")
    p.add_argument("--chunking", default="natural",
                   choices=("natural", "event", "coalesce", "split", "random", "bytes"),
                   help="how watch events map to HTTP chunks (default natural = Go's 2 KiB bufio behaviour)")
    p.add_argument("--chunk-max", type=int, default=0, help="max chunk size for coalesce/random/bytes modes")
    p.add_argument("--chunk-delay-ms", type=float, default=0.0, help="sleep between chunks (default 0)")
    p.add_argument("--seed", type=int, default=None, help="random seed (chunking, names, churn)")
    p.add_argument("--expired-watch", default="event", choices=("event", "http410"),
                   help="too-old watch RV: 200 + ERROR event (default, as the apiserver) or HTTP 410")
    p.add_argument("--future-watch", default="error", choices=("error", "wait"),
                   help="watch from an RV newer than the server's: in-stream ERROR 504 'Too large resource version'"
                        " after 3 s (default, as the watch cache) or wait until it exists")
    p.add_argument("--slow-consumer-timeout", type=float, default=30.0,
                   help="close a watch whose client has not taken our bytes for this many seconds (default 30;"
                        " 0 = never)")
    p.add_argument("--watchlist", default="on", choices=("on", "off"),
                   help="WatchList feature gate: sendInitialEvents allowed (on, 1.34+ default) or 422 (off)")
    p.add_argument("--gzip-min", type=int, default=128 * 1024,
                   help="gzip list/get bodies at least this big when asked (0 = never; default 128 KiB)")
    p.add_argument("--discovery", default="aggregated", choices=("aggregated", "legacy"),
                   help="serve aggregated discovery (apidiscovery.k8s.io/v2) when asked, or only the legacy"
                        " /api, /apis, /api/v1 documents (default aggregated)")
    p.add_argument("--k8s-version", default="v1.34.1", help="version reported by /version")
    p.add_argument("--pods", type=int, default=0, help="bulk-create this many Indexed-Job pods at start-up")
    p.add_argument("--namespace", default="default", help="namespace for --pods (default 'default')")
    p.add_argument("--job", default="trainer", help="job name for --pods (default 'trainer')")
    p.add_argument("--managed-fields", action="store_true",
                   help="give made pods managedFields as real pods have (about +3 KiB each; default off)")
    p.add_argument("--jobset", help="make the --pods JobSet (multislice) pods of this JobSet instead")
    p.add_argument("--per-slice", type=int, default=0, help="pods per slice for --jobset (must divide --pods)")
    p.add_argument("--gc", default="off", choices=("on", "off"),
                   help="Python's cyclic garbage collector (default off: pods and events are acyclic, and full"
                        " collections over a 16k-pod heap stall every stream; about 2x faster churn)")
    p.add_argument("--webhook-service", action="append", metavar="NS/NAME=127.x.y.z:PORT",
                   help="where the Service a webhook's clientConfig.service names listens (repeatable); the "
                        "webhook's certificate is checked for <NAME>.<NS>.svc")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request to stderr")
    args = p.parse_args(argv)
    if args.gc == "off":
        gc.disable()

    import shutil
    import tempfile
    own_dir = not args.state_dir
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="kube-apiserver-sim.")
    os.makedirs(state_dir, exist_ok=True)
    state = State(args)
    try:
        srv = Server(("127.0.0.1", args.port), args, state)
    except OSError as e:
        if own_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
        sys.stderr.write("kube-apiserver-sim: cannot listen on 127.0.0.1:%d: %s (pick another --port, or 0)\n"
                         % (args.port, e.strerror or e))
        return 1
    ca = "-"
    scheme = "http"
    if args.tls:
        ca, crt, key = make_tls(state_dir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        if args.client_cert_auth:
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(ca)
        ctx.set_alpn_protocols(["http/1.1"])
        srv.ssl_ctx = ctx
        scheme = "https"
    if args.pods > 0:
        bulk = {"count": args.pods, "namespace": args.namespace, "job": args.job}
        if args.jobset:
            bulk.update({"jobset": args.jobset, "per_slice": args.per_slice or args.pods})
        try:
            srv.control.v_bulk_create(bulk)
        except ValueError as e:
            srv.server_close()
            if own_dir:
                shutil.rmtree(state_dir, ignore_errors=True)
            p.error(str(e))
    url = "%s://127.0.0.1:%d" % (scheme, srv.port)
    ready = {"port": srv.port, "url": url, "ca": ca, "pid": os.getpid(), "stateDir": state_dir}
    tmp = os.path.join(state_dir, "ready.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(ready, f)
    os.replace(tmp, os.path.join(state_dir, "ready.json"))

    def stop(signum, frame):
        srv.stopping = True
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("READY port=%d url=%s ca=%s" % (srv.port, url, ca), flush=True)
    try:
        srv.serve()
    finally:
        srv.server_close()
        if own_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
    return 0


def ctl_main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import simctl
    return simctl.cli(argv)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ctl":
        return ctl_main(sys.argv[2:])
    return server_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
