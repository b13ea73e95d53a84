#!/bin/bash
# scripts/demo.sh - `make demo`: the whole tpumesh flow on this machine, in
# sections. Each section runs the real binaries and prints the files a
# training container would read from the shared volume.
#
#   1. tpumesh-init, GKE TPU VM path, v4-32 (2x2x4, 4 hosts), worker 1
#   2. tpumesh-init, GKE TPU VM path, v5litepod-16 (4x4, 4 hosts), worker 3,
#      pod IPs in TPU_WORKER_HOSTNAMES
#   3. a hostile worker name is refused (exit 2) and the volume keeps its
#      last good files (an intentional failure, announced as such)
#   4. legacy TPU Node: ConfigureDistributedTPU against the simulated TPU's
#      TensorFlow server (tests/sim/tf-master), then a TPU-less server (exit 3,
#      intentional)
#   5. tpumesh-init + tpumesh-sidecar on a simulated 4-host slice: a pod is
#      deleted, recreated without an IP, given one; files and /readyz follow
#   6. the injector path: label -> admission -> injected pod -> files
#      (scripts/demo_injector.py: k8s/injector.yaml and k8s/first-job.yaml
#      through the simulator's admission)
#
# Env: BUILD (build dir, default build), PY (python with protobuf).
# tpumesh-init checks that its TPU_WORKER_HOSTNAMES entry matches the pod's host
# name; the demo runs it in a UTS namespace with that pod's host name (unshare -u,
# as root, or with a user namespace), as a pod's containers would have it.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PY:-/usr/bin/python3}
INIT=$BUILD/bin/tpumesh-init
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tpumesh-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Nothing from the caller's environment steers the demo.
unset KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS TPU_NAME TPU_CONFIG TPU_ACCELERATOR_TYPE TPU_TOPOLOGY \
    TPU_WORKER_ID TPU_WORKER_HOSTNAMES TPU_HOST_BOUNDS TPU_CHIPS_PER_HOST_BOUNDS
for v in $(env | sed -n 's/^\(TPUMESH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

# Waits below are bounds on a hang, stretched by TPUMESH_TEST_SLOWDOWN when the programs run
# slowed down (tests/integration/test_demo.sh under ASan or valgrind).
SLOW=${TPUMESH_TEST_SLOWDOWN:-1}
case "$SLOW" in '' | *[!0-9]* | 0) SLOW=1 ;; esac
section() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
intentional() { printf '\033[33m(intentional failure: %s)\033[0m\n' "$*"; }
# as_pod HOST cmd...: cmd with the host name HOST (its own UTS namespace), like a pod's container.
UTS=
if unshare -u true 2>/dev/null; then UTS="unshare -u"
elif unshare -Ur -u true 2>/dev/null; then UTS="unshare -Ur -u"; fi
as_pod() {
    local host=$1; shift
    if [ -n "$UTS" ]; then $UTS sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
    else echo "(no UTS namespace here: tpumesh-init will warn that this machine's host name is not $host)"; "$@"; fi
}

# Print every file of a volume: env files as they are, JSON pretty-printed,
# topology.pb decoded by Google's protobuf library when its module is built.
show_volume() {
    local d=$1 f
    for f in dtensor.env tpu.env jax.env tf_config.json; do
        [ -f "$d/$f" ] || continue
        printf -- '--- %s\n' "$f"
        if [ "${f##*.}" = json ]; then "$PY" -m json.tool --compact "$d/$f"; else cat "$d/$f"; fi
    done
    printf -- '--- topology.json\n'
    "$PY" - "$d/topology.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
s = t["slice"] or {}
print("generation %s, complete %s, job %s, client %s of %s, coordinator %s" % (
    t["generation"], t["complete"], t["jobName"], t["clientId"], t["numClients"], t["coordinator"]))
if s:
    print("slice %s topology %s: %d chips, %d hosts x %d chips, %d cores/chip, "
          "%d TF devices/host, mesh %s" % (s["acceleratorType"], s["topology"], s["chips"],
          s["hosts"], s["chipsPerHost"], s["coresPerChip"], s["devicesPerHost"], s["meshShape"]))
for w in t["workers"]:
    print("  worker %-2d %-28s ip=%-15s ready=%s" % (w["index"], w["address"], w["ip"], w["ready"]))
EOF
    if [ -f "$d/topology.pb" ]; then
        printf -- '--- topology.pb (%d bytes)\n' "$(stat -c %s "$d/topology.pb")"
        PYTHONPATH=$BUILD/gen/py "$PY" - "$d/topology.pb" <<'EOF' 2>/dev/null ||
import sys
from tensorflow.core.protobuf.tpu import topology_pb2
t = topology_pb2.TopologyProto()
t.ParseFromString(open(sys.argv[1], "rb").read())
c = list(t.device_coordinates)
print("mesh_shape %s, %d tasks x %d devices; task 0 devices %s" % (
    list(t.mesh_shape), t.num_tasks, t.num_tpu_devices_per_task,
    [tuple(c[i:i + 4]) for i in range(0, 4 * t.num_tpu_devices_per_task, 4)]))
EOF
            echo "(decode with 'make gen-py' to see its fields)"
    fi
}

[ -x "$INIT" ] || { echo "demo: $INIT is missing; run make first" >&2; exit 1; }

section "1. tpumesh-init on GKE's TPU VM path: v4-32, topology 2x2x4, this pod is worker 1"
V4=$WORK/v4-32
mkdir -p "$V4"
echo "(run as pod job-1: host name job-1, as entry 1 of TPU_WORKER_HOSTNAMES says)"
run as_pod job-1 env TPU_WORKER_ID=1 \
    TPU_WORKER_HOSTNAMES=job-0.job.default.svc,job-1.job.default.svc,job-2.job.default.svc,job-3.job.default.svc \
    "$INIT" --skip-init --accelerator-type v4-32 --topology 2x2x4 --out-dir "$V4" \
    --annotations-file /dev/null
echo "exit $?"
show_volume "$V4"

section "2. tpumesh-init: v5litepod-16, topology 4x4, worker 3, pod IPs, DTensor port 10001"
V5=$WORK/v5litepod-16
mkdir -p "$V5"
run env TPU_WORKER_ID=3 TPU_WORKER_HOSTNAMES=10.8.0.2,10.8.0.3,10.8.0.4,10.8.0.5 \
    "$INIT" --skip-init --accelerator-type v5litepod-16 --topology 4x4 --port 10001 \
    --out-dir "$V5" --annotations-file /dev/null
echo "exit $?"
show_volume "$V5"

section "3. a hostile worker name is refused; the volume keeps its last good files"
intentional "a worker named '\$(touch /tmp/pwned)' must be refused with exit 2 and an ERROR line"
run env TPU_WORKER_ID=1 'TPU_WORKER_HOSTNAMES=a.svc,$(touch /tmp/pwned),c.svc,d.svc' \
    "$INIT" --skip-init --accelerator-type v4-32 --topology 2x2x4 --out-dir "$V4" \
    --annotations-file /dev/null
echo "exit $? (2 = configuration error, as intended; /tmp/pwned $([ -e /tmp/pwned ] && echo EXISTS || echo 'was not created'))"
printf -- '--- dtensor.env still\n'
cat "$V4/dtensor.env"

section "4. legacy TPU Node: ConfigureDistributedTPU over TensorFlow's master gRPC (simulated v3-8)"
# tests/sim/tf-master answers as a Cloud TPU Node's TensorFlow server at grpc://<ip>:8470 does.
if [ -d "$BUILD/gen/py/tensorflow" ]; then
    NODE=$WORK/tpu-node
    mkdir -p "$NODE"
    tfsim() { # start the simulator with the given flags; sets SIM_PID and SIM_PORT
        "$PY" tests/sim/tf-master/tf_master_sim.py --gen-py "$BUILD/gen/py" --max-seconds 60 \
            "$@" >"$WORK/tfsim.out" 2>&1 &
        SIM_PID=$!
        trap 'kill "$SIM_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
        for _ in $(seq $((100 * SLOW))); do grep -q '^READY' "$WORK/tfsim.out" && break; sleep 0.05; done
        SIM_PORT=$(sed -n 's/^READY port=//p' "$WORK/tfsim.out")
    }
    tfsim --accelerator-type v3-8
    run env KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS="grpc://127.0.0.1:$SIM_PORT" \
        "$INIT" --timeout 30 --out-dir "$NODE" --annotations-file /dev/null
    echo "exit $?"
    show_volume "$NODE"
    printf -- '--- what the TPU server saw\n'
    grep '^CALL' "$WORK/tfsim.out"
    kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null

    tfsim --fail no-tpu
    intentional "this TensorFlow server has no TPU: tpumesh-init must say so in an ERROR line and exit 3"
    run "$INIT" --tpu "grpc://127.0.0.1:$SIM_PORT" --timeout 30 --out-dir "$NODE" \
        --annotations-file /dev/null
    echo "exit $? (3 = no TPU found, as intended)"
    kill "$SIM_PID"; wait "$SIM_PID" 2>/dev/null
else
    echo "(skipped: run 'make gen-py' to build the simulator's protobuf modules)"
fi

section "5. tpumesh-init + tpumesh-sidecar on a simulated 4-host v4-32 slice; a pod restarts"
# Self-contained: its own kube-apiserver simulator (tests/sim/kube-apiserver), an Indexed Job of
# 4 pods, tpumesh-init publishing generation 1 for worker 0, then the sidecar watching the pods.
SIDECAR=$BUILD/bin/tpumesh-sidecar
if [ -x "$SIDECAR" ]; then
    SC=$WORK/sidecar
    mkdir -p "$SC"
    KS="$PY tests/sim/kube-apiserver/kube_apiserver_sim.py"
    $KS >"$WORK/kubesim.out" 2>"$WORK/kubesim.err" &
    KS_PID=$!
    SC_PID=
    trap 'kill $SC_PID $KS_PID 2>/dev/null; rm -rf "$WORK"' EXIT
    for _ in $(seq $((200 * SLOW))); do grep -q '^READY' "$WORK/kubesim.out" && break; sleep 0.05; done
    KURL=$(sed -n 's/^READY .*url=\([^ ]*\).*/\1/p' "$WORK/kubesim.out")
    ctl() { $KS ctl --url "$KURL" "$@" >/dev/null; }
    ctl make-job --name trainer --completions 4
    for i in 0 1 2 3; do ctl make --name "trainer-$i-demo0" --index "$i"; done
    echo "simulated apiserver $KURL: Indexed Job 'trainer' (4 completions), pods trainer-{0..3}-demo0"
    run as_pod trainer-0 env TPU_WORKER_ID=0 \
        TPU_WORKER_HOSTNAMES=trainer-0.trainer,trainer-1.trainer,trainer-2.trainer,trainer-3.trainer \
        "$INIT" --skip-init --accelerator-type v4-32 --topology 2x2x4 --out-dir "$SC" \
        --annotations-file /dev/null 2>&1 | tail -1
    printf '$ %s\n' "$SIDECAR --apiserver $KURL --pod-name trainer-0-demo0 --namespace default --out-dir $SC --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 &"
    "$SIDECAR" --apiserver "$KURL" --pod-name trainer-0-demo0 --namespace default --out-dir "$SC" \
        --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 2>"$WORK/sidecar.log" &
    SC_PID=$!
    for _ in $(seq $((200 * SLOW))); do grep -q '(port ' "$WORK/sidecar.log" && break; sleep 0.05; done
    HPORT=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$WORK/sidecar.log" | head -1)
    readyz() { # print /readyz once it answers $1
        local code
        for _ in $(seq $((200 * SLOW))); do
            code=$(curl -s -o "$WORK/readyz" -w '%{http_code}' "http://127.0.0.1:$HPORT/readyz")
            [ "$code" = "$1" ] && break
            sleep 0.05
        done
        echo "/readyz -> $code $(cat "$WORK/readyz")"
    }
    readyz 200
    show_volume "$SC"
    echo
    echo "-- pod trainer-2 is deleted (its node went away) --"
    ctl delete --name trainer-2-demo0 --grace 0
    readyz 503
    echo "-- the Job controller recreates it; it has no IP yet --"
    ctl make --name trainer-2-demo1 --index 2 --ip ""
    readyz 503
    echo "-- the new pod gets IP 10.64.9.77 --"
    ctl ip --name trainer-2-demo1 --ip 10.64.9.77
    readyz 200
    show_volume "$SC"
    printf -- '--- what the sidecar logged\n'
    sed 's/^/  /' "$WORK/sidecar.log"
    kill -TERM "$SC_PID"; wait "$SC_PID"; echo "sidecar exit $? after SIGTERM"
    kill "$KS_PID"; wait "$KS_PID" 2>/dev/null
else
    echo "(skipped: $SIDECAR is missing)"
fi

section "6. the injector: a pod template with only the label, admitted, injected, run"
if [ -x "$BUILD/bin/tpumesh-injector" ]; then
    BUILD=$BUILD "$PY" scripts/demo_injector.py || echo "demo: the injector section failed (exit $?)"
else
    echo "(skipped: $BUILD/bin/tpumesh-injector is missing)"
fi

echo
echo "demo finished"
