#!/bin/bash
# test_init_static.sh - tpumesh-init end to end on GKE's static TPU VM path
# (TPU_WORKER_ID / TPU_WORKER_HOSTNAMES, --skip-init): the files against the
# golden fixtures, generation continuity, unchanged files, flag/env
# precedence, --help/--version, and the exit codes for bad flags (2),
# invalid worker values (2) and an unwritable --out-dir (6).
. "$(dirname "$0")/lib.sh"
INIT=$BIN/tpumesh-init
FIX=$ROOT/tests/fixtures/render
NOANN=(--annotations-file /dev/null)

# Everything that could steer resolve from outside the test is cleared.
unset KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS TPU_NAME TPU_CONFIG TPU_ACCELERATOR_TYPE TPU_TOPOLOGY \
    TPU_WORKER_ID TPU_WORKER_HOSTNAMES TPU_HOST_BOUNDS TPU_CHIPS_PER_HOST_BOUNDS \
    GCE_METADATA_HOST GCE_METADATA_IP TPU_API_DISCOVERY_URL
for v in $(env | sed -n 's/^\(TPUMESH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

v4() { # v4 DIR [extra args...]: the issue's first runnable command
    local d=$1; shift
    TPU_WORKER_ID=${WID:-1} TPU_WORKER_HOSTNAMES=${HOSTS:-a.svc,b.svc,c.svc,d.svc} \
        "$INIT" --skip-init --accelerator-type v4-32 --topology 2x2x4 --out-dir "$d" \
        "${NOANN[@]}" "$@"
}
last_line() { tail -n 1 "$1"; }
same_files() { # same_files DIR FIXDIR: every text file equals its golden
    local f
    for f in dtensor.env tf_config.json tpu.env jax.env topology.json; do
        cmp -s "$1/$f" "$2/$f" || { diff -u "$2/$f" "$1/$f" | head -20 >&2; return 1; }
    done
}
gen_of() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["generation"])' "$1"; }
hidden() { ls -A "$1" | grep -c -v -e '^[^.]' -e '^\.\.data$'; } # hidden DIR: version dirs and leftovers

# --version / --help
out=$("$INIT" --version); rc=$?
check_eq "--version exits 0" 0 "$rc"
check "--version prints the version" grep -qx "tpumesh-init $(cat "$ROOT/VERSION")" <<<"$out"
help=$("$INIT" --help); rc=$?
check_eq "--help exits 0" 0 "$rc"
missing=""
for f in out-dir log-format log-level tpu zone project accelerator-type topology \
    annotations-file dev-dir timeout metadata-host tpu-api-endpoint skip-init port version help; do
    grep -q -- "--$f\b" <<<"$help" || missing="$missing --$f"
    [ "$f" = version ] || [ "$f" = help ] && continue
    env=TPUMESH_$(tr 'a-z-' 'A-Z_' <<<"$f")
    grep -q "$env" <<<"$help" || missing="$missing $env"
done
check_eq "--help documents every flag and its TPUMESH_ variable" "" "$missing"
check "--help documents the exit codes" grep -q "6  cannot publish" <<<"$help"
check "--help documents the defaults" grep -q "default /var/run/tpumesh" <<<"$help"

# The first runnable program (issue 2) against the golden files.
D=$TMP/v4; mkdir -p "$D"
v4 "$D" 2>"$TMP/log1"; rc=$?
check_eq "static v4-32 exits 0" 0 "$rc"
check "static v4-32 files equal the golden files" same_files "$D" "$FIX/v4-32"
check "topology.pb written" test -s "$D/topology.pb"
# Decoded by Google's protobuf library (module from `make gen-py`), not ours.
if [ -d "$BUILD/gen/py/tensorflow" ]; then
    pb=$(PYTHONPATH=$BUILD/gen/py "$PY" -c '
import sys
from tensorflow.core.protobuf.tpu import topology_pb2
t = topology_pb2.TopologyProto()
t.ParseFromString(open(sys.argv[1], "rb").read())
print(list(t.mesh_shape), t.num_tasks, t.num_tpu_devices_per_task, len(t.device_coordinates))
' "$D/topology.pb" 2>&1)
    check_eq "topology.pb decodes as the v4-32 TopologyProto" "[2, 2, 4, 1] 4 4 64" "$pb"
else
    echo "# $BUILD/gen/py missing (make gen-py): topology.pb not decoded"
fi
# The kubelet's layout: ..data -> one version directory, each name a symlink into ..data.
check_eq "one version directory, nothing else hidden" 1 "$(hidden "$D")"
check_eq "dtensor.env is a symlink into ..data" "..data/dtensor.env" "$(readlink "$D/dtensor.env")"
check_eq "files are 0644" "644" "$(stat -L -c %a "$D/dtensor.env")"
check "the log ends with the done line" grep -q "done: 4 worker(s), complete" <(last_line "$TMP/log1")

ino=$(stat -L -c %i:%Y.%y "$D/dtensor.env" "$D/topology.json")
sleep 0.05
v4 "$D" 2>"$TMP/log2"
check_eq "a second identical run rewrites nothing (inode+mtime)" "$ino" \
    "$(stat -L -c %i:%Y.%y "$D/dtensor.env" "$D/topology.json")"
check_eq "a second identical run keeps generation 1" 1 "$(gen_of "$D/topology.json")"
WID=2 v4 "$D" 2>/dev/null
check_eq "a changed input continues the generation" 2 "$(gen_of "$D/topology.json")"
check "the changed input is in dtensor.env" grep -qx "DTENSOR_CLIENT_ID='2'" "$D/dtensor.env"
echo 'garbage{' >"$D/topology.json"
v4 "$D" 2>"$TMP/log3"; rc=$?
check_eq "a garbage topology.json is tolerated" 0 "$rc"
check "... with a warning" grep -q "WARN .*ignoring the previous" "$TMP/log3"
check_eq "... and the generation restarts at 1" 1 "$(gen_of "$D/topology.json")"

D5=$TMP/v5e; mkdir -p "$D5"
TPU_WORKER_ID=3 TPU_WORKER_HOSTNAMES=10.8.0.2,10.8.0.3,10.8.0.4,10.8.0.5 "$INIT" --skip-init \
    --accelerator-type=v5litepod-16 --topology=4x4 --port=10001 --out-dir="$D5" "${NOANN[@]}" \
    2>/dev/null
check "static v5litepod-16 (--flag=value form) equals the golden files" same_files "$D5" \
    "$FIX/v5litepod-16"

# Every worker of the job, as its own pod: all get the identical DTENSOR_JOBS
# and cluster, and DTENSOR_CLIENT_ID == TPU_WORKER_ID ==
# task.index == JAX_PROCESS_ID == its index; the values parse
# as DTensor and TF read them.
for id in 0 1 2 3; do
    mkdir -p "$TMP/pod$id"
    WID=$id v4 "$TMP/pod$id" 2>/dev/null
done
consistency=$("$PY" - "$TMP" <<'EOF_PY'
import json, shlex, sys
def env(path):
    out = {}
    for line in open(path):
        k, v = line.rstrip("\n").split("=", 1)
        out[k] = shlex.split(v)[0]
    return out
problems, jobs, clusters = [], set(), set()
for i in range(4):
    d = "%s/pod%d/" % (sys.argv[1], i)
    dt, tpu, jax = env(d + "dtensor.env"), env(d + "tpu.env"), env(d + "jax.env")
    tf = json.load(open(d + "tf_config.json"))
    jobs.add(dt["DTENSOR_JOBS"]); clusters.add(json.dumps(tf["cluster"]))
    n = len(dt["DTENSOR_JOBS"].split(","))            # DTensor: num_clients = len(jobs)
    cid = int(dt["DTENSOR_CLIENT_ID"])                 # DTensor: int(); 0 <= id < n
    if not 0 <= cid < n: problems.append("client id %d out of range" % cid)
    ids = {cid, int(tpu["TPU_WORKER_ID"]), int(tf["task"]["index"]), int(jax["JAX_PROCESS_ID"])}
    if ids != {i}: problems.append("pod %d: ids %s" % (i, ids))
    if str(tf["task"]["type"]) != "worker": problems.append("task type")
    if tf["cluster"]["worker"] != dt["DTENSOR_JOBS"].split(","): problems.append("cluster")
    if int(dt["DTENSOR_NUM_CLIENTS"]) != n or int(jax["JAX_NUM_PROCESSES"]) != n:
        problems.append("counts")
    if jax["JAX_COORDINATOR_ADDRESS"] != tpu["TPU_WORKER_HOSTNAMES"].split(",")[0] + ":8482":
        problems.append("coordinator")
if len(jobs) != 1 or len(clusters) != 1: problems.append("workers disagree")
print("; ".join(problems) or "consistent")
EOF_PY
)
check_eq "4 pods of one job: identical DTENSOR_JOBS/cluster, ids == worker index" \
    consistent "$consistency"

# Incomplete worker list (no TPU_WORKER_HOSTNAMES): only topology.json says
# what is known; env files keep the last complete version (docs/DESIGN.md §5).
DI=$TMP/incomplete; mkdir -p "$DI"
incomplete() {
    TPU_WORKER_ID=1 TPU_ACCELERATOR_TYPE=v4-32 TPU_TOPOLOGY=2x2x4 "$INIT" --skip-init \
        --out-dir "$DI" "${NOANN[@]}" 2>/dev/null
}
incomplete; rc=$?
check_eq "incomplete worker list exits 0" 0 "$rc"
check "incomplete: no env files" test ! -e "$DI/dtensor.env" -a ! -e "$DI/tf_config.json"
check_eq "incomplete: topology.json says complete=false, 4 expected" "False 4 0" \
    "$("$PY" -c 'import json,sys; t=json.load(open(sys.argv[1]))
print(t["complete"], t["numClients"], len(t["workers"]))' "$DI/topology.json")"
v4 "$DI" 2>/dev/null
good=$(cat "$DI/dtensor.env" "$DI/tf_config.json")
incomplete
check_eq "incomplete after complete: env files keep the last complete version" "$good" \
    "$(cat "$DI/dtensor.env" "$DI/tf_config.json")"
check_eq "incomplete after complete: generation 3" 3 "$(gen_of "$DI/topology.json")"

# A DTENSOR_JOBS longer than Linux's 128 KiB limit for one environment
# string is published, with a warning (exporting it would fail exec).
DL=$TMP/long; mkdir -p "$DL"
long_hosts() { # long_hosts N: N 86-byte host names
    local i
    for i in $(seq 0 $(($1 - 1))); do
        printf 'worker-%04d-abcdefghijklmnopqrstuvwxyz0123456789.jobset-name.default.svc.cluster.local,' "$i"
    done
}
H=$(long_hosts 1420)
TPU_WORKER_ID=5 TPU_WORKER_HOSTNAMES=${H%,} "$INIT" --skip-init --out-dir "$DL" "${NOANN[@]}" \
    2>"$TMP/long.log"
rc=$?
check_eq "1420 long host names publish" 0 "$rc"
check "... with a warning about the 128 KiB environment limit" \
    grep -q "WARN .*DTENSOR_JOBS is 132073 bytes exported, above Linux's 131072-byte limit" \
    "$TMP/long.log"
H=$(long_hosts 1400)
TPU_WORKER_ID=5 TPU_WORKER_HOSTNAMES=${H%,} "$INIT" --skip-init --out-dir "$DL" "${NOANN[@]}" \
    2>"$TMP/long.log"
check "1400 long host names: no warning" test -z "$(grep 'WARN .*environment string' "$TMP/long.log")"

# Flag > TPUMESH_* environment.
DP=$TMP/prec; mkdir -p "$DP"
TPUMESH_PORT=2000 v4 "$DP" --port 3000 2>/dev/null
check "--port wins over TPUMESH_PORT" grep -q "^DTENSOR_JOBS='a.svc:3000," "$DP/dtensor.env"
TPUMESH_PORT=2000 TPUMESH_JOB_NAME=trainer v4 "$DP" 2>/dev/null
check "TPUMESH_PORT applies without the flag" grep -q "^DTENSOR_JOBS='a.svc:2000," "$DP/dtensor.env"
check "TPUMESH_JOB_NAME applies" grep -qx "DTENSOR_JOB_NAME='trainer'" "$DP/dtensor.env"
TPUMESH_OUT_DIR=$DP TPUMESH_SKIP_INIT=true TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=x.svc \
    TPUMESH_ACCELERATOR_TYPE=v4-8 TPUMESH_TOPOLOGY=2x2x1 "$INIT" "${NOANN[@]}" 2>/dev/null
rc=$?
check_eq "every option from TPUMESH_* alone (v4-8, one worker)" 0 "$rc"
check "one worker gets DTensor's default job name localhost" \
    grep -qx "DTENSOR_JOB_NAME='localhost'" "$DP/dtensor.env"

# Every valued flag in its three forms: "--flag value", "--flag=value" and
# TPUMESH_<FLAG>; the debug log names the value and where it came from. A bad
# --expected-workers (parsed last) stops each run right after the parse.
while read -r flag value; do
    env=TPUMESH_$(tr 'a-z-' 'A-Z_' <<<"$flag")
    for form in space equals env; do
        # A boolean flag takes no separate value: "--skip-init true" is a
        # stray argument (tested below as the bare form).
        [ "$flag" = skip-init ] && [ $form = space ] && continue
        case $form in
        space) args=("--$flag" "$value"); src="--$flag"; envset=() ;;
        equals) args=("--$flag=$value"); src="--$flag"; envset=() ;;
        env) args=(); src=$env; envset=("$env=$value") ;;
        esac
        env "${envset[@]+"${envset[@]}"}" "$INIT" --log-level=debug "${args[@]}" \
            --expected-workers 0 >/dev/null 2>"$TMP/opt.log"
        rc=$?
        if [ $rc -eq 2 ] && grep -qF -- "--$flag = '$value' (from $src)" "$TMP/opt.log"; then
            ok "option --$flag ($form form)"
        else
            fail "option --$flag ($form form)" "exit $rc" "$(grep -F -- "--$flag =" "$TMP/opt.log")"
        fi
    done
done <<'EOF_OPTS'
out-dir /tmp/tpumesh-opt-test
log-format json
tpu grpc://10.0.0.1:8470
zone us-central2-b
project my-project
accelerator-type v5litepod-16
topology 4x4
annotations-file /dev/null
dev-dir /tmp/tpumesh-dev
timeout 45
metadata-host 127.0.0.1:8080
tpu-api-endpoint http://127.0.0.1:9999
skip-init true
port 12345
job-name trainer
address-mode ip
EOF_OPTS
v4 "$TMP/v4" --expected-workers 4 --log-level debug 2>"$TMP/opt.log"
check "option --expected-workers" grep -qF -- "--expected-workers = '4' (from --expected-workers)" \
    "$TMP/opt.log"
TPUMESH_LOG_LEVEL=debug "$INIT" --expected-workers 0 2>"$TMP/opt.log"
check "option --log-level (env form)" grep -qF -- "--log-level = 'debug' (from TPUMESH_LOG_LEVEL)" \
    "$TMP/opt.log"
"$INIT" --skip-init --log-level debug --expected-workers 0 2>"$TMP/opt.log"
check "a bare --skip-init means true" grep -qF -- "--skip-init = 'true' (from --skip-init)" \
    "$TMP/opt.log"

# Exit 2: usage and configuration.
expect_exit() { # expect_exit NAME CODE PATTERN-OF-LAST-LINE cmd...
    local name=$1 code=$2 pat=$3; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    if [ "$rc" -ne "$code" ]; then fail "$name" "exit $rc, wanted $code" "$(tail -2 "$TMP/err")"
    elif ! tail -n 1 "$TMP/err" | grep -q -- "$pat"; then
        fail "$name" "last line: $(tail -n 1 "$TMP/err")" "wanted: $pat"
    else ok "$name"; fi
}
DE=$TMP/err-dir; mkdir -p "$DE"
expect_exit "unknown flag: exit 2" 2 "unknown option '--bogus'" v4 "$DE" --bogus
# A named annotations file that is missing is the downward-API volume missing: every
# tpumesh.dev/* annotation would vanish, so it is an error; the default path may be absent.
expect_exit "--annotations-file missing: exit 2 naming the file and the downward-API volume" 2 \
    "annotations file '$TMP/gone' does not exist: is the pod's downward-API volume (podinfo) mounted?" \
    v4 "$DE" --annotations-file "$TMP/gone"
TPUMESH_ANNOTATIONS_FILE=$TMP/gone expect_exit \
    "TPUMESH_ANNOTATIONS_FILE missing: exit 2 naming the file" 2 "annotations file '$TMP/gone' does not exist" \
    env TPU_WORKER_ID=1 TPU_WORKER_HOSTNAMES=a.svc,b.svc,c.svc,d.svc "$INIT" --skip-init \
    --accelerator-type v4-32 --topology 2x2x4 --out-dir "$DE"
if [ -e /etc/podinfo/annotations ]; then
    skip "the default annotations file may be absent" "/etc/podinfo/annotations exists here"
else
    expect_exit "the default annotations file may be absent (no annotation layer): exit 0" 0 "done: 4 worker" \
        env TPU_WORKER_ID=1 TPU_WORKER_HOSTNAMES=a.svc,b.svc,c.svc,d.svc "$INIT" --skip-init \
        --accelerator-type v4-32 --topology 2x2x4 --out-dir "$(mkdir -p "$TMP/defann" && echo "$TMP/defann")"
fi
expect_exit "missing value: exit 2" 2 "--port needs a value" v4 "$DE" --port
expect_exit "bad --port: exit 2" 2 "--port: 'abc' is not an integer in 1..65535" \
    v4 "$DE" --port abc
TPUMESH_PORT=0 expect_exit "bad TPUMESH_PORT: exit 2 naming the variable" 2 \
    "TPUMESH_PORT: '0'" v4 "$DE"
expect_exit "bad --address-mode: exit 2" 2 "is not auto|dns|ip" v4 "$DE" --address-mode x
expect_exit "bad --log-format: exit 2" 2 "is not text|json" v4 "$DE" --log-format xml
expect_exit "empty --tpu=: exit 2" 2 "--tpu needs a non-empty value" v4 "$DE" --tpu=
expect_exit "bad --skip-init: exit 2 naming every spelling" 2 \
    "--skip-init: 'maybe' is not a boolean (true|false, 1|0, yes|no, on|off)" v4 "$DE" --skip-init=maybe
expect_exit "positional argument: exit 2" 2 "unexpected argument 'extra'" v4 "$DE" extra
# Port rules (README: not 8470-8476, 8482, 8080, 9470, 9476), from any source.
expect_exit "reserved --port: exit 2 naming the rule" 2 \
    "DTensor port (--port) 8080 is reserved: TPU software uses ports 8470-8476, 8482, 8080, 9470 and 9476" \
    v4 "$DE" --port 8080
TPUMESH_PORT=9470 expect_exit "reserved TPUMESH_PORT: exit 2" 2 "DTensor port (TPUMESH_PORT) 9470 is reserved" \
    v4 "$DE"
printf 'tpumesh.dev/port="8476"\n' >"$TMP/ann-port"
expect_exit "reserved tpumesh.dev/port annotation: exit 2 naming it" 2 \
    "annotation tpumesh.dev/port=\"8476\" is reserved: TPU software uses ports 8470-8476" v4 "$DE" --annotations-file "$TMP/ann-port"
# The expected count is the job's total: a multislice slice lists its own hosts only.
DMS=$TMP/multislice; mkdir -p "$DMS"
MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=1 expect_exit "multislice: the total (hosts x slices) is accepted" 0 \
    "incomplete (the sidecar completes it)" v4 "$DMS" --expected-workers 8
check_eq "multislice: topology.json shows 8 expected (flag), 4 present" "False 8 4 flag" \
    "$("$PY" -c 'import json,sys; t=json.load(open(sys.argv[1])); print(t["complete"], t["expectedWorkers"], t["presentWorkers"], t["expectedWorkersSource"])' "$DMS/topology.json")"
MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=0 expect_exit "multislice: a per-slice count is refused, naming the total" 2 \
    "the total over all slices) but TPU_WORKER_HOSTNAMES lists 4 per slice x MEGASCALE_NUM_SLICES=2 = 8" \
    v4 "$DE" --expected-workers 4
HOSTS='a.svc,$(touch /tmp/tpumesh-pwned),c.svc,d.svc' \
    expect_exit "hostile worker host name: exit 2" 2 "not a valid RFC 1123 host name" v4 "$DE"
expect_exit "hostile job name: exit 2 from the renderer" 2 "job name" \
    v4 "$DE" --job-name "x';touch $TMP/pwned;'"
check "nothing was executed" test ! -e "$TMP/pwned" -a ! -e /tmp/tpumesh-pwned
check "nothing was published for rejected input" test -z "$(ls -A "$DE")"
expect_exit "json log format: the last line is JSON" 2 '"level":"error"' \
    v4 "$DE" --log-format json --job-name 'bad name'
TPUMESH_LOG_FORMAT=json expect_exit "json log format: also for a command-line error" 2 \
    '"msg":"command line failed (exit 2, configuration error): unknown option' v4 "$DE" --bogus

# Exit 6: cannot publish.
expect_exit "missing --out-dir: exit 6" 6 "does not exist: create it" v4 "$TMP/nope"
if mount -t tmpfs -o size=64k tmpfs "$DE" 2>/dev/null; then
    on_exit "umount -l '$DE'"
    v4 "$DE" 2>/dev/null
    before=$(cat "$DE/dtensor.env")
    mount -o remount,ro "$DE"
    expect_exit "read-only --out-dir: exit 6" 6 "read-only; mount the shared volume read-write" \
        v4 "$DE" --port 10002
    check_eq "read-only: the previous files are intact" "$before" "$(cat "$DE/dtensor.env")"
    mount -o remount,rw "$DE"
    # Fill the volume to the last block, then ask for a change.
    dd if=/dev/zero of="$DE/filler" bs=1k 2>/dev/null
    expect_exit "full --out-dir: exit 6" 6 "no space left" v4 "$DE" --port 10003
    check_eq "full: the previous files are intact" "$before" "$(cat "$DE/dtensor.env")"
    check_eq "full: no partial version left" 1 "$(hidden "$DE")"
else
    for n in "read-only --out-dir: exit 6" "full --out-dir: exit 6"; do
        skip_needs "$n" root "cannot mount a tmpfs here (run as root, as CI does)"
    done
fi
done_testing
