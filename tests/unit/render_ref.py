#!/usr/bin/python3
"""render_ref.py - the reference renderer of the shared volume's text files, for the
differential test tests/unit/test_render_json.c.

Written from the formats docs/shared-volume.md describes and the input rules of
common/core/render.h, not from render.c: its own host-name, pod-name and job-name checks,
Python's ipaddress module for IP literals, its own printer of cJSON_Print's layout (one member
per line indented with tabs, "key":<TAB>value, array elements separated by ", ").

Usage: render_ref.py CASES.jsonl  - each line is one case written by the C test: the input, and
what mesh_render_all and each renderer returned (an error code, or the bytes of each file).
For every case the reference works out which rules the input breaks (each with the error code
render.h gives it) and what the files are. It wants a refusal exactly when some rule is
broken, with one of those rules' codes, and otherwise the same bytes. Prints each
disagreement and exits 1 if there was one.
"""
import ipaddress
import json
import re
import sys

MAX_WORKERS = 16384
GENERATION_MAX = 2**53 - 1
SOURCE_MAX = 32
HOST_MAX = 254
IP_MAX = 46
POD_MAX = 254
JOB_NAME_MAX = 64
JAX_PORT = 8482  # docs/shared-volume.md: JAX's Cloud TPU coordinator port since jax 0.8.1
MEGASCALE_PORT = 8080
AUTO, DNS, IP = 0, 1, 2

# err.h's codes, as the C test writes them (positive).
E = {}


def load_codes(root):
    with open(root + "/common/core/err.h") as f:
        for m in re.finditer(r"\bMESH_E_([A-Z_]+)\s*=\s*(\d+)", f.read()):
            E[m.group(1)] = int(m.group(2))


# ---- value rules (docs/shared-volume.md "Env file syntax", DESIGN §4) ----

LABEL_ANY = re.compile(rb"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
LABEL_LOWER = re.compile(rb"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_dns_name(b, lower):
    """RFC 1123 host name (lower: a Kubernetes object name, RFC 1123 subdomain)."""
    if not 1 <= len(b) <= 253:
        return False
    rx = LABEL_LOWER if lower else LABEL_ANY
    return all(rx.match(label) for label in b.split(b"."))


def ip_family(b):
    """4 or 6 for an IP literal as inet_pton reads it, else None."""
    if not b or len(b) >= IP_MAX or b"%" in b or b"/" in b:
        return None
    try:
        s = b.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not s.isprintable() or s.strip() != s:
        return None
    try:
        return ipaddress.ip_address(s).version
    except ValueError:
        return None


def is_job_name(b):
    return re.match(rb"^[A-Za-z][A-Za-z0-9_]*$", b) is not None and len(b) < JOB_NAME_MAX


def is_host_or_ip(b):
    return is_dns_name(b, False) or ip_family(b) is not None


# ---- cJSON_Print's layout --------------------------------------------------


def j_str(b):
    out = bytearray(b'"')
    for c in b:
        if c == 0x22:
            out += b'\\"'
        elif c == 0x5C:
            out += b"\\\\"
        elif c in (8, 12, 10, 13, 9):
            out += {8: b"\\b", 12: b"\\f", 10: b"\\n", 13: b"\\r", 9: b"\\t"}[c]
        elif c < 0x20:
            out += b"\\u%04x" % c
        else:
            out.append(c)
    out += b'"'
    return bytes(out)


def j_num(v):
    """A number as cJSON (a double) prints it: the integer when it fits a C int, else %1.15g
    unless that does not read back within DBL_EPSILON relative, then %1.17g."""
    if -2**31 <= v <= 2**31 - 1:
        return b"%d" % v
    d = float(v)
    s = "%1.15g" % d
    back = float(s)
    if abs(back - d) > max(abs(back), abs(d)) * sys.float_info.epsilon:
        s = "%1.17g" % d
    return s.encode()


class Obj(list):
    """An ordered JSON object: [(key, value)]."""


def j_print(v, depth=0):
    if v is None:
        return b"null"
    if v is True:
        return b"true"
    if v is False:
        return b"false"
    if isinstance(v, int):
        return j_num(v)
    if isinstance(v, bytes):
        return j_str(v)
    if isinstance(v, Obj):
        out = b"{\n"
        for i, (k, x) in enumerate(v):
            out += b"\t" * (depth + 1) + j_str(k.encode()) + b":\t" + j_print(x, depth + 1)
            out += (b",\n" if i + 1 < len(v) else b"\n")
        return out + b"\t" * depth + b"}"
    if isinstance(v, list):
        return b"[" + b", ".join(j_print(x, depth + 1) for x in v) + b"]"  # an array is a level too
    raise TypeError(v)


def j_compact(v):
    if isinstance(v, Obj):
        return b"{" + b",".join(j_str(k.encode()) + b":" + j_compact(x) for k, x in v) + b"}"
    if isinstance(v, list):
        return b"[" + b",".join(j_compact(x) for x in v) + b"]"
    return j_print(v)


# ---- the input ---------------------------------------------------------------


def lat(s):
    return None if s is None else s.encode("latin-1")


class In:
    def __init__(self, d):
        self.__dict__.update(d)
        for k in ("job_name", "megascale_coordinator", "expected_source"):
            setattr(self, k, lat(d[k]))
        self.ws = [dict(w, pod=lat(w["pod"]), host=lat(w["host"]), ip=lat(w["ip"])) for w in d["workers"]]
        s = d["slice"]
        if s is not None:
            s = dict(s, accelerator_type=lat(s["accelerator_type"]), topology=lat(s["topology"]))
        self.sl = s
        self.n = d["nworkers"]

    def total(self):
        """The job's worker count (render.h: expected, else the list size; one slice listed:
        slices x its size)."""
        if self.slice_only:
            return min(max(self.slices, 1) * self.n, MAX_WORKERS)
        return self.expected if self.expected > 0 else self.n

    def mode(self):
        if self.mode_ != AUTO:
            return self.mode_
        return DNS if self.n > 0 and all(w["host"] for w in self.ws) else IP


def bare(inp, w):
    """(address without port, is IPv6) of worker w in the effective mode; (b"", False) when it
    has none."""
    a = w["host"] if inp.mode() == DNS else w["ip"]
    return a, ip_family(a) == 6


def with_port(a, v6, port):
    return (b"[" + a + b"]" if v6 else a) + b":%d" % port


def address(inp, w):
    a, v6 = bare(inp, w)
    return with_port(a, v6, inp.port) if a else None


def slices_of(inp):
    """(slice count, hosts per slice, own slice or -1, global index of own slice's worker 0,
    its position in the list)."""
    ns = inp.slices if inp.slices > 1 else 1
    total = inp.total()
    hps = inp.n if inp.slice_only else total // ns
    if inp.slice_only:
        own = inp.slice_id
    else:
        own = inp.self_index // hps if inp.self_index >= 0 and hps > 0 else -1
    base = own * hps if own > 0 else 0
    return ns, hps, own, base, (0 if inp.slice_only else base)


# ---- which rules an input breaks ---------------------------------------------


def common_faults(inp):
    f = set()
    if inp.n > MAX_WORKERS:
        return {"RANGE"}  # nothing else is looked at
    if inp.n > 0 and inp.workers_null:
        return {"INVAL"}
    if not 0 <= inp.expected <= MAX_WORKERS:
        f.add("RANGE")
    if not 1 <= inp.port <= 65535:
        f.add("RANGE")
    if not 0 <= inp.present <= MAX_WORKERS:
        f.add("RANGE")
    if inp.expected_source is not None and len(inp.expected_source) >= SOURCE_MAX:
        f.add("RANGE")
    if inp.generation > GENERATION_MAX:
        f.add("RANGE")
    if inp.mode_ not in (AUTO, DNS, IP):
        f.add("INVAL")
    if inp.job_name and not is_job_name(inp.job_name):
        f.add("INVAL")
    if not -1 <= inp.self_index < MAX_WORKERS:
        f.add("RANGE")
    # multi-slice
    if not 0 <= inp.slices <= MAX_WORKERS:
        f.add("RANGE")
    if not 0 <= inp.megascale_port <= 65535:
        f.add("RANGE")
    if inp.megascale_coordinator and not is_host_or_ip(inp.megascale_coordinator):
        f.add("INVAL")
    if inp.slice_only:
        if inp.slices < 2 or not 0 <= inp.slice_id < inp.slices:
            f.add("INVAL")
        if inp.slices * inp.n > MAX_WORKERS:
            f.add("RANGE")
    elif inp.slices > 1 and 0 <= inp.slices and inp.total() % inp.slices != 0:
        f.add("INVAL")
    for w in inp.ws:
        if len(w["host"]) >= HOST_MAX or len(w["ip"]) >= IP_MAX or len(w["pod"]) >= POD_MAX:
            f.add("INVAL")
        if w["host"] and not is_host_or_ip(w["host"]):
            f.add("INVAL")
        if w["ip"] and ip_family(w["ip"]) is None:
            f.add("INVAL")
        if w["pod"] and not is_dns_name(w["pod"], True):
            f.add("INVAL")
    return f


def slice_terminated_faults(inp):
    s = inp.sl
    if s is not None and not (s["accelerator_type_terminated"] and s["topology_terminated"]):
        return {"INVAL"}
    return set()


def slice_token_faults(inp):
    s = inp.sl
    if s is not None and not (is_dns_name(s["accelerator_type"], False) and is_dns_name(s["topology"], False)):
        return {"INVAL"}
    return set()


def complete_faults(inp):
    """What the env files and TF_CONFIG need beyond the common rules."""
    if not inp.complete:
        return {"INCOMPLETE"}
    f = set()
    mode = inp.mode()
    if inp.slice_only:
        _, _, _, base, _ = slices_of(inp)
        m = inp.n
        if m == 0:
            return {"INCOMPLETE"}
        if not base <= inp.self_index < base + m:
            f.add("INVAL")
        for i, w in enumerate(inp.ws):
            if w["index"] != base + i:
                f.add("INVAL")
            if not (w["host"] if mode == DNS else w["ip"]):
                f.add("INCOMPLETE")
        if inp.slice_id != 0 and not inp.megascale_coordinator:
            f.add("INCOMPLETE")
        return f
    n = inp.total()
    if n == 0 or n != inp.n:
        return {"INCOMPLETE"}
    if not 0 <= inp.self_index < n:
        f.add("INVAL")
    for i, w in enumerate(inp.ws):
        if w["index"] != i:
            f.add("INVAL")
        if not (w["host"] if mode == DNS else w["ip"]):
            f.add("INCOMPLETE")
    return f


def renders(inp, name):
    """Which files a set holds (render.h mesh_render_all)."""
    if name == "topology.json":
        return True
    if not inp.complete:
        return False
    return not inp.slice_only or name in ("tpu.env", "jax.env")


def faults_of(inp, name):
    """The rules input breaks for one renderer (name) or the whole set ("all")."""
    f = common_faults(inp)
    if f and (inp.n > MAX_WORKERS or (inp.n > 0 and inp.workers_null)):
        return f
    if name == "topology.json":
        return f | slice_terminated_faults(inp)
    if name == "all":
        f |= slice_terminated_faults(inp)
        if inp.complete:
            f |= complete_faults(inp) | slice_token_faults(inp)
        return f
    if inp.slice_only and inp.complete and not renders(inp, name):
        f.add("INCOMPLETE")
    f |= complete_faults(inp)
    if name == "tpu.env":
        f |= slice_token_faults(inp)
    return f


# ---- the files ---------------------------------------------------------------


def quote(b):
    return b"'" + b.replace(b"'", b"'\\''") + b"'"


def env(key, value):
    if isinstance(value, int):
        value = b"%d" % value
    return key.encode() + b"=" + quote(value) + b"\n"


def job_name(inp):
    if inp.job_name:
        return inp.job_name
    return b"localhost" if inp.total() == 1 else b"worker"


def workers_digest(inp):
    basis, prime, mask = 14695981039346656037, 1099511628211, 2**64 - 1

    def fnv(b):
        h = basis
        for c in b:
            h = ((h ^ c) * prime) & mask
        return h
    t = basis
    for w in inp.ws:
        t = ((t ^ (w["index"] & 0xFFFFFFFF)) * prime) & mask
        t = ((t ^ fnv(address(inp, w) or b"")) * prime) & mask
    return b"%016x" % t


def topology_json(inp):
    ns, hps, own, _, _ = slices_of(inp)
    s = inp.sl
    sl = None
    if s is not None:
        sl = Obj([("acceleratorType", s["accelerator_type"] or None), ("topology", s["topology"] or None),
                  ("chips", s["chips"]), ("hosts", s["hosts"]), ("chipsPerHost", s["chips_per_host"]),
                  ("coresPerChip", s["cores_per_chip"]), ("devicesPerHost", s["devices_per_host"]),
                  ("meshShape", list(s["mesh_shape"]))])
    coord = address(inp, inp.ws[0]) if inp.ws and inp.ws[0]["index"] == 0 else None
    known = inp.expected_source is not None
    doc = Obj([
        ("generation", inp.generation),
        ("complete", inp.complete and not inp.slice_only),
        ("slice", sl),
        ("slices", Obj([("count", ns), ("id", own if own >= 0 else None), ("hostsPerSlice", hps)])),
        ("jobName", job_name(inp)),
        ("clientId", inp.self_index if inp.self_index >= 0 else None),
        ("numClients", inp.total()),
        ("expectedWorkers", inp.total() if known else None),
        ("presentWorkers", inp.present),
        ("expectedWorkersSource", inp.expected_source),
        ("coordinator", coord),
        ("workersDigest", workers_digest(inp)),
        ("workers", [Obj([("index", w["index"]), ("pod", w["pod"] or None), ("host", w["host"] or None),
                          ("ip", w["ip"] or None), ("address", address(inp, w)), ("ready", w["ready"])])
                     for w in inp.ws]),
    ])
    return j_print(doc) + b"\n"


def dtensor_env(inp):
    return (env("DTENSOR_JOBS", b",".join(address(inp, w) for w in inp.ws)) +
            env("DTENSOR_CLIENT_ID", inp.self_index) + env("DTENSOR_JOB_NAME", job_name(inp)) +
            env("DTENSOR_NUM_CLIENTS", inp.n))


def tf_config(inp):
    doc = Obj([("cluster", Obj([("worker", [address(inp, w) for w in inp.ws])])),
               ("task", Obj([("type", b"worker"), ("index", inp.self_index)]))])
    return j_compact(doc) + b"\n"


def slice0_host(inp):
    """The host of slice 0 worker 0: MEGASCALE_COORDINATOR_ADDRESS when one slice is listed
    and it is given, else the first worker's."""
    if inp.slice_only and inp.megascale_coordinator:
        return inp.megascale_coordinator
    return bare(inp, inp.ws[0])[0]


def tpu_env(inp):
    ns, hps, own, base, pos = slices_of(inp)
    hosts = [bare(inp, w)[0] for w in inp.ws[pos:pos + hps]]
    out = env("TPU_WORKER_ID", inp.self_index - base) + env("TPU_WORKER_HOSTNAMES", b",".join(hosts))
    s = inp.sl
    if s is not None:
        out += env("TPU_ACCELERATOR_TYPE", s["accelerator_type"]) + env("TPU_TOPOLOGY", s["topology"])
        out += env("TPU_HOST_BOUNDS", b",".join(b"%d" % v for v in s["host_bounds"]))
        out += env("TPU_CHIPS_PER_HOST_BOUNDS", b",".join(b"%d" % v for v in s["chips_per_host_bounds"]))
    if ns > 1:
        out += env("MEGASCALE_COORDINATOR_ADDRESS", slice0_host(inp)) + env("MEGASCALE_NUM_SLICES", ns)
        out += env("MEGASCALE_SLICE_ID", own)
        out += env("MEGASCALE_PORT", inp.megascale_port or MEGASCALE_PORT)
    return out


def jax_env(inp):
    host = slice0_host(inp)  # process 0: JAX starts its coordination service there
    return (env("JAX_COORDINATOR_ADDRESS", with_port(host, ip_family(host) == 6, JAX_PORT)) +
            env("JAX_NUM_PROCESSES", inp.total()) + env("JAX_PROCESS_ID", inp.self_index))


FILES = {"topology.json": topology_json, "dtensor.env": dtensor_env, "tf_config.json": tf_config,
         "tpu.env": tpu_env, "jax.env": jax_env}

# ---- judging -------------------------------------------------------------------


def first_diff(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def check(case):
    d = dict(case["in"])
    d["mode_"] = d.pop("mode")
    inp = In(d)
    problems = []

    def judge(what, got_rc, faults, render):
        codes = {E[x] for x in faults}
        if codes and got_rc == 0:
            problems.append("%s rendered, the reference refuses it (%s)" % (what, "/".join(sorted(faults))))
            return False
        if not codes and got_rc != 0:
            problems.append("%s refused with code %d, the reference renders it" % (what, got_rc))
            return False
        if codes and got_rc not in codes:
            problems.append("%s refused with code %d, the reference wants one of %s" %
                            (what, got_rc, "/".join(sorted(faults))))
            return False
        return not codes

    def same(what, got, want):
        if got != want:
            i = first_diff(got, want)
            problems.append("%s differs at byte %d (%d bytes, reference %d):\n  got:  %r\n  want: %r" %
                            (what, i, len(got), len(want), got[max(0, i - 40):i + 60],
                             want[max(0, i - 40):i + 60]))

    al = case["all"]
    if judge("mesh_render_all", al["rc"], faults_of(inp, "all"), True):
        files = {k: lat(v) for k, v in al["files"].items()}
        want_names = sorted(k for k in FILES if renders(inp, k))
        if sorted(files) != want_names:
            problems.append("mesh_render_all rendered %s, the reference %s" % (sorted(files), want_names))
        for k in want_names:
            if k in files:
                same("mesh_render_all %s" % k, files[k], FILES[k](inp))
    for name, fn in FILES.items():
        r = case[name]
        if judge(name, r["rc"], faults_of(inp, name), True):
            same(name, lat(r["data"]), fn(inp))
    return problems


def main():
    import os
    root = os.environ.get("ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
    load_codes(root)
    bad = 0
    n = 0
    with open(sys.argv[1], encoding="ascii") as f:
        for line in f:
            case = json.loads(line)
            n += 1
            problems = check(case)
            if problems:
                bad += 1
                if bad <= 20:
                    print("reference: case %r:" % case["label"], file=sys.stderr)
                    for p in problems:
                        print("  " + p, file=sys.stderr)
    print("reference: %d cases, %d disagree" % (n, bad), file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
