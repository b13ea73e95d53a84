#!/bin/bash
# test_init_multislice.sh - tpumesh-init on a multi-slice TPU VM job, GKE's static path:
# every pod of a 2 x 2 (v4-16) and a 4 x 4 (v5litepod-16) JobSet gets GKE's per-slice
# TPU_WORKER_ID / TPU_WORKER_HOSTNAMES plus MEGASCALE_*; each must publish a per-slice tpu.env
# with MEGASCALE_*, a global jax.env (what JAX's multislice detection computes), topology.json
# with the slices and complete=false, and no dtensor.env / tf_config.json (they need every
# slice's hosts: the sidecar writes them). MEGASCALE_PORT: annotation > variable > 8080, a bad
# annotation exits 2; a JobSet coordinator annotation naming another pod does not move JAX's
# coordinator (JAX starts its coordination service in process 0, slice 0 worker 0).
. "$(dirname "$0")/lib.sh"
INIT=$BIN/tpumesh-init
unset KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS TPU_NAME TPU_CONFIG TPU_ACCELERATOR_TYPE TPU_TOPOLOGY \
    TPU_WORKER_ID TPU_WORKER_HOSTNAMES TPU_HOST_BOUNDS TPU_CHIPS_PER_HOST_BOUNDS \
    GCE_METADATA_HOST GCE_METADATA_IP TPU_API_DISCOVERY_URL MEGASCALE_NUM_SLICES \
    MEGASCALE_SLICE_ID MEGASCALE_COORDINATOR_ADDRESS MEGASCALE_PORT
for v in $(env | sed -n 's/^\(TPUMESH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
: >"$TMP/no-annotations"

# pod TYPE TOPO SLICES HPS S W DIR [annotations-file] [NAME=value | -NAME ...]: one pod of the job
# as GKE/JobSet would start it: hosts js-slice-<s>-<w>.js, coordinator slice 0 worker 0.
pod() {
    local type=$1 topo=$2 slices=$3 hps=$4 s=$5 w=$6 dir=$7 ann=${8:-$TMP/no-annotations}
    shift 8 2>/dev/null || shift $#
    local hosts="" k a sets=() unsets=()
    for ((k = 0; k < hps; k++)); do hosts="$hosts${hosts:+,}js-slice-$s-$k.js"; done
    for a in "$@"; do # NAME=value sets, -NAME unsets
        case $a in -*) unsets+=(-u "${a#-}") ;; *) sets+=("$a") ;; esac
    done
    mkdir -p "$dir"
    env TPU_WORKER_ID="$w" TPU_WORKER_HOSTNAMES="$hosts" TPU_ACCELERATOR_TYPE="$type" \
        TPU_TOPOLOGY="$topo" MEGASCALE_NUM_SLICES="$slices" MEGASCALE_SLICE_ID="$s" \
        MEGASCALE_COORDINATOR_ADDRESS="js-slice-0-0.js:8080" "${sets[@]+"${sets[@]}"}" \
        env "${unsets[@]+"${unsets[@]}"}" "$INIT" --skip-init --out-dir "$dir" --annotations-file "$ann"
}

# check_job NAME SLICES HPS MPORT JAXHOST: every pod's files, parsed as sh and JSON.
check_job() {
    local res
    res=$("$PY" - "$TMP/$1" "$2" "$3" "$4" "$5" <<'EOF_PY'
import json, os, shlex, sys
root, slices, hps, mport, jaxhost = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def env(path):
    out = {}
    for line in open(path):
        k, v = line.rstrip("\n").split("=", 1)
        out[k] = shlex.split(v)[0]
    return out
problems, digests = [], set()
for s in range(slices):
    for w in range(hps):
        d = os.path.join(root, "pod-%d-%d" % (s, w))
        tpu, jax = env(d + "/tpu.env"), env(d + "/jax.env")
        topo = json.load(open(d + "/topology.json"))
        want = {
            "TPU_WORKER_ID": str(w),
            "TPU_WORKER_HOSTNAMES": ",".join("js-slice-%d-%d.js" % (s, k) for k in range(hps)),
            "MEGASCALE_COORDINATOR_ADDRESS": "js-slice-0-0.js",
            "MEGASCALE_NUM_SLICES": str(slices),
            "MEGASCALE_SLICE_ID": str(s),
            "MEGASCALE_PORT": mport,
        }
        for k, v in want.items():
            if tpu.get(k) != v:
                problems.append("pod %d/%d %s=%r, want %r" % (s, w, k, tpu.get(k), v))
        # JAX's multislice detection: coordinator = slice 0 worker 0 on JAX's port,
        # processes = hosts per slice x slices, id = slice id x hosts per slice + worker id.
        jwant = {"JAX_COORDINATOR_ADDRESS": jaxhost + ":8482",
                 "JAX_NUM_PROCESSES": str(slices * hps), "JAX_PROCESS_ID": str(s * hps + w)}
        if jax != jwant:
            problems.append("pod %d/%d jax.env %r" % (s, w, jax))
        for f in ("dtensor.env", "tf_config.json"):
            if os.path.exists(os.path.join(d, f)):
                problems.append("pod %d/%d wrote %s" % (s, w, f))
        sl = topo["slices"]
        if (topo["complete"], sl["count"], sl["id"], sl["hostsPerSlice"], topo["clientId"],
                topo["numClients"]) != (False, slices, s, hps, s * hps + w, slices * hps):
            problems.append("pod %d/%d topology %r" % (s, w, {k: topo[k] for k in
                            ("complete", "slices", "clientId", "numClients")}))
        if [x["index"] for x in topo["workers"]] != list(range(s * hps, s * hps + hps)):
            problems.append("pod %d/%d worker indices" % (s, w))
print("; ".join(problems[:6]) or "ok")
EOF_PY
)
    check_eq "$1: every pod's tpu.env, MEGASCALE_*, jax.env and topology.json" ok "$res"
}

# A 2 x 2 v4-16 JobSet (v4-16 = 2x2x2: 2 hosts of 4 chips).
for s in 0 1; do for w in 0 1; do
    pod v4-16 2x2x2 2 2 $s $w "$TMP/j22/pod-$s-$w" 2>>"$TMP/j22.log" || fail "2x2 pod $s/$w exit $?"
done; done
check_job j22 2 2 8080 js-slice-0-0.js
check "2x2: the log says what the sidecar completes" \
    grep -q "tpu.env and jax.env written for slice 1 of 2" "$TMP/j22.log"

# A 4 x 4 v5litepod-16 JobSet with MEGASCALE_PORT from the environment (GKE sets it).
for s in 0 1 2 3; do for w in 0 1 2 3; do
    pod v5litepod-16 4x4 4 4 $s $w "$TMP/j44/pod-$s-$w" "" MEGASCALE_PORT=8090 2>/dev/null \
        || fail "4x4 pod $s/$w exit $?"
done; done
check_job j44 4 4 8090 js-slice-0-0.js

# The annotation wins: tpumesh.dev/megascale-port over MEGASCALE_PORT. JobSet's coordinator
# (here another pod) is not followed: jax.env and MEGASCALE_* name slice 0 worker 0.
printf '%s\n' 'jobset.sigs.k8s.io/coordinator="js-leader-0-0.js"' \
    'tpumesh.dev/megascale-port="8081"' >"$TMP/ann-ok"
for s in 0 1; do for w in 0 1; do
    pod v4-16 2x2x2 2 2 $s $w "$TMP/jann/pod-$s-$w" "$TMP/ann-ok" MEGASCALE_PORT=8090 \
        2>/dev/null || fail "annotated pod $s/$w exit $?"
done; done
check_job jann 2 2 8081 js-slice-0-0.js

# Refusals: exit 2 and a last line that names the key.
expect_exit() { # expect_exit NAME CODE NEEDLE CMD...
    local name=$1 code=$2 needle=$3; shift 3
    "$@" 2>"$TMP/err" >/dev/null
    local rc=$?
    check_eq "$name" "$code" "$rc"
    check "$name: the last line says why" grep -q -- "$needle" <(tail -n 1 "$TMP/err")
}
printf '%s\n' 'tpumesh.dev/megascale-port="80a"' >"$TMP/ann-bad"
expect_exit "bad tpumesh.dev/megascale-port: exit 2" 2 "tpumesh.dev/megascale-port" \
    pod v4-16 2x2x2 2 2 1 0 "$TMP/bad1" "$TMP/ann-bad"
expect_exit "bad MEGASCALE_PORT: exit 2" 2 "MEGASCALE_PORT" \
    pod v4-16 2x2x2 2 2 1 0 "$TMP/bad3" "" MEGASCALE_PORT=0
expect_exit "bad MEGASCALE_COORDINATOR_ADDRESS: exit 2" 2 "MEGASCALE_COORDINATOR_ADDRESS" \
    pod v4-16 2x2x2 2 2 1 0 "$TMP/bad4" "" MEGASCALE_COORDINATOR_ADDRESS='x;y'
expect_exit "MEGASCALE_NUM_SLICES without MEGASCALE_SLICE_ID: exit 2" 2 "MEGASCALE_SLICE_ID" \
    pod v4-16 2x2x2 2 2 1 0 "$TMP/bad5" "" -MEGASCALE_SLICE_ID

# Slice 1 without MEGASCALE_COORDINATOR_ADDRESS cannot name slice 0's worker 0: only
# topology.json, and a warning saying so.
pod v4-16 2x2x2 2 2 1 0 "$TMP/nocoord" "" -MEGASCALE_COORDINATOR_ADDRESS 2>"$TMP/nocoord.log"
check_eq "no coordinator: exit 0" 0 "$?"
check "no coordinator: no tpu.env or jax.env" test ! -e "$TMP/nocoord/tpu.env" -a \
    ! -e "$TMP/nocoord/jax.env" -a -s "$TMP/nocoord/topology.json"
check "no coordinator: the warning says why" grep -q "MEGASCALE_COORDINATOR_ADDRESS is not set" \
    "$TMP/nocoord.log"
done_testing
