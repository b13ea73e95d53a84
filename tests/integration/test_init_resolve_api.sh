#!/bin/bash
# test_init_resolve_api.sh - tpumesh-init's resolve step against the GCE
# metadata and Cloud TPU API simulators (tests/sim/gce-metadata, tests/sim/tpu-api):
# project/zone/token from metadata, node states and health, 401/403/404/5xx,
# malformed replies, the deadline, discovery documents, TPU_CONFIG, and the
# TPU VM attributes path. Every simulator is killed on exit.
. "$(dirname "$0")/lib.sh"

INIT=$BIN/tpumesh-init
# A loopback port nothing listens on: bind port 0, note it, close it.
CLOSED_PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
MDSIM=$ROOT/tests/sim/gce-metadata/gce_metadata_sim.py
APISIM=$ROOT/tests/sim/tpu-api/tpu_api_sim.py

# start_sim VAR_PREFIX script args...: starts a simulator, sets <P>_PID and <P>_PORT
start_sim() {
    local p=$1; shift
    local out=$TMP/sim-$p-$RANDOM.out
    "$PY" "$@" >"$out" 2>&1 &
    local pid=$!
    on_exit "kill $pid"
    if ! wait_for 10 grep -q '^READY port=' "$out"; then
        echo "# simulator did not start: $(cat "$out")"
        exit 1
    fi
    eval "${p}_PID=$pid"
    eval "${p}_PORT=$(sed -n 's/^READY port=\([0-9]*\).*/\1/p' "$out")"
}

stop_sim() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

run_init() {
    local name=$1; shift
    local vars=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    OUT=$TMP/$name
    mkdir -p "$OUT"
    local t0; t0=$(date +%s%N)
    env -i PATH="$PATH" TPUMESH_ANNOTATIONS_FILE=/dev/null TPUMESH_METADATA_HOST="127.0.0.1:$MD_PORT" \
        TPUMESH_TPU_API_ENDPOINT="http://127.0.0.1:$API_PORT" "${vars[@]+"${vars[@]}"}" \
        "$INIT" --skip-init --out-dir "$OUT" "$@" >"$OUT.log" 2>&1
    RC=$?
    ELAPSED_MS=$((($(date +%s%N) - t0) / 1000000))
    LAST=$(tail -n 1 "$OUT.log")
}

expect() {
    if [ "$RC" -ne "$2" ]; then
        fail "$1" "exit $RC, want $2" "last: $LAST"
    elif [[ "$LAST" != *"$3"* ]]; then
        fail "$1" "last line lacks: $3" "last: $LAST"
    else
        ok "$1"
    fi
}

EPS='"networkEndpoints":[{"ipAddress":"10.0.0.1","port":8470},{"ipAddress":"10.0.0.2","port":8470}]'
start_sim MD "$MDSIM" --project sim-proj --zone us-central2-b --token tok-1
start_sim API "$APISIM" --token tok-1 --project sim-proj --zone us-central2-b \
    --node "ready={$EPS,\"acceleratorType\":\"v3-32\"}" \
    --node 'later={"_ready_after":2}' \
    --node 'creating={"state":"CREATING"}' \
    --node 'preempted={"state":"PREEMPTED"}' \
    --node 'unhealthy={"health":"UNHEALTHY_MAINTENANCE"}' \
    --node 'denied={"_status":403}' \
    --node 'broken={"_status":500}' \
    --node 'flaky={"_fail_first":2}' \
    --node 'garbage={"_raw":"{\"state\": \"READY\", "}' \
    --node 'noeps={"networkEndpoints":[]}' \
    --node 'badip={"networkEndpoints":[{"ipAddress":"not an ip","port":8470}]}' \
    --node 'legacy={"_legacy":true,"networkEndpoints":[{"ipAddress":"10.1.1.1","port":8471}]}' \
    --node 'second={"networkEndpoints":[{"ipAddress":"10.3.3.3","port":8470}]}' \
    --node 'slow={"_delay":0.3}' \
    --node 'timed={"_ready_after_s":1.5,"_initial":"STARTING"}' \
    --node 'hang={"_delay":10}' \
    --node 'huge={"_pad":1100000}' \
    --node 'timed2={"_ready_after_s":1.5}'

# ---- the simulators against a real client (curl) ------------------------------
check "metadata sim --help" bash -c "\"$PY\" \"$MDSIM\" --help | grep -q Metadata-Flavor"
check "tpu-api sim --help" bash -c "\"$PY\" \"$APISIM\" --help | grep -q _ready_after"
check_eq "metadata sim: 403 without Metadata-Flavor" 403 \
    "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MD_PORT/computeMetadata/v1/project/project-id")"
check_eq "metadata sim: zone path and reply header" "projects/123456789012/zones/us-central2-b Google" \
    "$(curl -s -D "$TMP/h" -H 'Metadata-Flavor: Google' "http://127.0.0.1:$MD_PORT/computeMetadata/v1/instance/zone"; \
       tr -d '\r' <"$TMP/h" | sed -n 's/^Metadata-Flavor: / /p')"
check_eq "tpu-api sim: 401 without a token" 401 \
    "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$API_PORT/v1/projects/sim-proj/locations/us-central2-b/nodes/ready")"
check_eq "tpu-api sim: node resource" "READY HEALTHY projects/sim-proj/locations/us-central2-b/nodes/ready" \
    "$(curl -s -H 'Authorization: Bearer tok-1' "http://127.0.0.1:$API_PORT/v1/projects/sim-proj/locations/us-central2-b/nodes/ready" |
       "$PY" -c 'import json,sys; n=json.load(sys.stdin); print(n["state"], n["health"], n["name"])')"

run_init ready -- --tpu ready
expect "READY+HEALTHY node -> exit 0" 0 "complete"
check_eq "ready: TF_CONFIG cluster from networkEndpoints" \
    '{"cluster":{"worker":["10.0.0.1:8470","10.0.0.2:8470"]}}' \
    "$(cat "$OUT/tf_config.json" 2>/dev/null)"
check "ready: project and zone from metadata" grep -q "project sim-proj, zone us-central2-b" "$OUT.log"
check "ready: slice from acceleratorType" grep -q '"acceleratorType":.*"v3-32"' "$OUT/topology.json"
check "ready: the token is never logged" bash -c "! grep -q tok-1 '$OUT.log'"

run_init typeflag -- --tpu ready --accelerator-type v3-8
check "flag type beats the API's acceleratorType (warned)" grep -q 'is a v3-32 but --accelerator-type says v3-8' "$OUT.log"

run_init later -- --tpu later
expect "CREATING then READY -> exit 0" 0 "complete"
check "later: progress lines with state and health" grep -q 'Waiting for TPU "later" with state "CREATING"' "$OUT.log"

run_init notfound -- --tpu nosuch
expect "404 -> exit 3 with TensorFlow's wrapping" 3 "Could not lookup TPU metadata from name 'nosuch'"

run_init denied -- --tpu denied
expect "403 -> exit 5" 5 "HTTP 403"

run_init preempted -- --tpu preempted
expect "PREEMPTED -> exit 4 at once" 4 'TPU "preempted" is not yet ready; state: "PREEMPTED"'
# The deadline checks below bound a run's time; what a run costs besides waiting (start-up,
# the metadata and API round trips, exit: tens of ms, seconds under valgrind on a loaded
# machine) is measured here, on a run that ends at once, and added to each upper bound.
RUN_MS=$ELAPSED_MS
echo "# a run that ends at once took ${RUN_MS} ms"

run_init creating -- --tpu creating --timeout 2
expect "never READY -> exit 4 at the deadline, TF text + state" 4 'Timed out waiting for TPU "creating" to become healthy: TPU "creating" is not yet ready; state: "CREATING"'
check "deadline honoured (2 s timeout, < 5 s + a run's cost)" test "$ELAPSED_MS" -lt $((5000 + RUN_MS))
check "deadline: waited at least 2 s" test "$ELAPSED_MS" -ge 1900

run_init unhealthy -- --tpu unhealthy --timeout 1
expect "READY but unhealthy -> exit 4" 4 'TPU "unhealthy" is unhealthy: "UNHEALTHY_MAINTENANCE"'

run_init broken -- --tpu broken --timeout 1
expect "persistent 500 -> exit 5 after the deadline" 5 "HTTP 500"

run_init flaky -- --tpu flaky
expect "two 503s then READY -> exit 0" 0 "complete"

run_init garbage -- --tpu garbage
expect "malformed node JSON -> exit 5" 5 "node reply is not a JSON object"

run_init huge -- --tpu huge
expect "node reply above 1 MiB -> 5" 5 "reply larger than 1048576 bytes"

run_init noeps -- --tpu noeps
expect "READY without endpoints -> exit 5" 5 "lists no networkEndpoints"

run_init badip -- --tpu badip
expect "endpoint that is not an IP -> exit 5" 5 "networkEndpoints[0].ipAddress"

run_init legacy -- --tpu legacy
check_eq "deprecated top-level ipAddress/port" '{"cluster":{"worker":["10.1.1.1:8471"]}}' "$(cat "$OUT/tf_config.json" 2>/dev/null)"

run_init multi -- --tpu ready,second
expect "comma list of TPU names" 0 "complete"
check_eq "multi: endpoints of every TPU in order" '{"cluster":{"worker":["10.0.0.1:8470","10.0.0.2:8470","10.3.3.3:8470"]}}' \
    "$(cat "$OUT/tf_config.json" 2>/dev/null)"

# timed2 is READY after 1.5 s; with one deadline for both TPUs the run ends
# near 2 s, with a deadline per TPU it would take 1.5 + 2 s.
run_init shared -- --tpu timed2,creating --timeout 2
echo "# shared took ${ELAPSED_MS} ms"
expect "several TPUs share one deadline" 4 'TPU "creating" is not yet ready'
check "shared deadline: < 3.3 s + a run's cost in total" test "$ELAPSED_MS" -lt $((3300 + RUN_MS))

printf 'tf-version.cloud-tpus.google.com="2.11.0"' >"$TMP/ann-tfv"
run_init tfversion -- --tpu ready --annotations-file "$TMP/ann-tfv"
expect "tf-version annotation differs: still resolves" 0 "complete"
check "tf-version mismatch warned" grep -q 'runs TensorFlow 2.12.0 but the pod asks for 2.11.0' "$OUT.log"

run_init timed -- --tpu timed
expect "STARTING for 1.5 s then READY -> exit 0" 0 "complete"
check "timed: saw STARTING" grep -q 'with state "STARTING"' "$OUT.log"

run_init hang -- --tpu hang --timeout 1
echo "# hang took ${ELAPSED_MS} ms"
expect "API that does not answer -> 5 by the deadline" 5 "gave up after 1 s"
check "hang: bounded by the deadline (< 9 s + a run's cost; the sim holds each reply 10 s)" test "$ELAPSED_MS" -lt $((9000 + RUN_MS))

run_init slow -- --tpu slow
expect "slow API reply" 0 "complete"

run_init tpuname TPU_NAME=ready
check "TPU_NAME -> API" grep -q "tpu 'ready' from env TPU_NAME" "$OUT.log"
expect "TPU_NAME resolves" 0 "complete"

run_init tpuconfig 'TPU_CONFIG={"tpu_node_name":"ready","project":"sim-proj","zone":"us-central2-b"}' \
    TPUMESH_METADATA_HOST=127.0.0.1:$CLOSED_PORT
expect "TPU_CONFIG gives name, project and zone (metadata only for the token)" 5 "access token"

run_init tpuconfigzone 'TPU_CONFIG={"tpu_node_name":"ready","zone":"europe-west4-a"}'
expect "TPU_CONFIG zone is used (node not in that zone -> 3)" 3 "zone europe-west4-a"

run_init flagzone -- --tpu ready --zone us-central1-f --project other
expect "--zone/--project beat metadata" 3 "project other, zone us-central1-f"

run_init badzone -- --tpu ready --zone 'us/../x'
expect "zone that is not a zone -> 2 before any API call" 2 "zone 'us/../x' is not a zone"

run_init badproject -- --tpu ready --project 'p?x=1'
expect "project that is not a project ID -> 2" 2 "project 'p?x=1' is not a project ID"

run_init disco TPUMESH_TPU_API_ENDPOINT= "TPU_API_DISCOVERY_URL=http://127.0.0.1:$API_PORT/discovery/{api}/{apiVersion}" -- --tpu ready
expect "endpoint from TPU_API_DISCOVERY_URL" 0 "complete"

run_init discobad TPUMESH_TPU_API_ENDPOINT= "TPU_API_DISCOVERY_URL=http://127.0.0.1:$API_PORT/discovery/tpu" -- --tpu ready
expect "discovery URL without {api} -> 2" 2 "must be an http(s) URL containing {api} and {apiVersion}"

run_init discodown TPUMESH_TPU_API_ENDPOINT= "TPU_API_DISCOVERY_URL=http://127.0.0.1:$CLOSED_PORT/{api}/{apiVersion}" -- --tpu ready
expect "discovery unreachable -> 5" 5 "discovery document"

run_init apiflagbad -- --tpu ready --tpu-api-endpoint ftp://x
expect "--tpu-api-endpoint not http(s) -> 2" 2 "is not an http(s):// URL"

# ---- metadata failures --------------------------------------------------------
run_init mddown TPUMESH_METADATA_HOST=127.0.0.1:$CLOSED_PORT -- --tpu ready
expect "metadata unreachable when needed -> 5" 5 "metadata server unreachable"

run_init mdhost TPUMESH_METADATA_HOST= GCE_METADATA_HOST=127.0.0.1:$MD_PORT GCE_METADATA_IP=127.0.0.1:$CLOSED_PORT -- --tpu ready
expect "GCE_METADATA_HOST beats GCE_METADATA_IP" 0 "complete"

run_init mdip TPUMESH_METADATA_HOST= GCE_METADATA_IP=127.0.0.1:$MD_PORT -- --tpu ready
expect "GCE_METADATA_IP used" 0 "complete"

run_init mdbadhost -- --tpu ready --metadata-host 'x/y'
expect "bad metadata host -> 2" 2 "is not HOST[:PORT]"

start_sim MDF "$MDSIM" --no-flavor
run_init mdflavor TPUMESH_METADATA_HOST=127.0.0.1:$MDF_PORT -- --tpu ready
expect "reply without Metadata-Flavor -> 5" 5 "without 'Metadata-Flavor: Google'"
stop_sim "$MDF_PID"

start_sim MDT "$MDSIM" --project sim-proj --zone us-central2-b --no-token
run_init mdtoken TPUMESH_METADATA_HOST=127.0.0.1:$MDT_PORT -- --tpu ready
expect "no service-account token -> 5" 5 "no default service account token"
stop_sim "$MDT_PID"

start_sim MDW "$MDSIM" --project sim-proj --zone us-central2-b --token wrong
run_init wrongtoken TPUMESH_METADATA_HOST=127.0.0.1:$MDW_PORT -- --tpu ready
expect "API rejects the token -> 5" 5 "HTTP 403"
stop_sim "$MDW_PID"

start_sim MDK "$MDSIM" --project sim-proj --zone us-central2-b --tokens expired,tok-1
run_init refresh TPUMESH_METADATA_HOST=127.0.0.1:$MDK_PORT -- --tpu ready
expect "refused token -> one refresh from metadata -> exit 0" 0 "complete"
check "refresh: logged" grep -q "access token refused; retrying with a fresh token" "$OUT.log"
stop_sim "$MDK_PID"

start_sim MDR "$MDSIM" --project sim-proj --zone us-central2-b --token tok-1 --fail-first 2
run_init mdretry TPUMESH_METADATA_HOST=127.0.0.1:$MDR_PORT -- --tpu ready
expect "metadata 500s are retried" 0 "complete"
stop_sim "$MDR_PID"

start_sim MD5 "$MDSIM" --status 503
run_init md503 TPUMESH_METADATA_HOST=127.0.0.1:$MD5_PORT -- --tpu ready
expect "metadata answering 503 every time -> 5 after the retries" 5 "HTTP 503 after 3 attempts"
stop_sim "$MD5_PID"

start_sim MDH "$MDSIM" --hang-up
run_init mdhangup TPUMESH_METADATA_HOST=127.0.0.1:$MDH_PORT -- --tpu ready
expect "metadata server closing connections -> 5" 5 "metadata server unreachable"
stop_sim "$MDH_PID"

start_sim MDS "$MDSIM" --delay 3
run_init mdslow TPUMESH_METADATA_HOST=127.0.0.1:$MDS_PORT -- --tpu ready
expect "slow metadata server times out -> 5" 5 "metadata server unreachable"
# 3 attempts x 2 s + 2 pauses of 0.3 s; each attempt's own work (a new connection, curl's
# timer) took about 1 s more under valgrind on a loaded machine: the 2.4 s margin is scaled.
echo "# slow metadata took ${ELAPSED_MS} ms"
check "slow metadata: bounded (3 attempts x 2 s)" test "$ELAPSED_MS" -lt $((6600 + 2400 * SLOWDOWN + RUN_MS))
stop_sim "$MDS_PID"

# ---- TPU VM attributes from metadata (no GKE env) -----------------------------------
printf "ACCELERATOR_TYPE: 'v4-16'\nCHIPS_PER_HOST_BOUNDS: '2,2,1'\nHOST_BOUNDS: '1,1,2'\nTOPOLOGY: '2x2x2'\n" >"$TMP/tpu-env"
start_sim MDV "$MDSIM" --attr accelerator-type=v4-16 --attr-file "tpu-env=$TMP/tpu-env" \
    --attr worker-network-endpoints=h0:u0:10.130.0.2,h1:u1:10.130.0.3 --attr agent-worker-number=1
run_init vmmd TPUMESH_METADATA_HOST=127.0.0.1:$MDV_PORT -- --tpu local
expect "TPU VM attributes from metadata" 0 "complete"
check_eq "vmmd: tpu.env from metadata" "TPU_WORKER_ID='1'
TPU_WORKER_HOSTNAMES='10.130.0.2,10.130.0.3'
TPU_ACCELERATOR_TYPE='v4-16'
TPU_TOPOLOGY='2x2x2'
TPU_HOST_BOUNDS='1,1,2'
TPU_CHIPS_PER_HOST_BOUNDS='2,2,1'" "$(cat "$OUT/tpu.env" 2>/dev/null)"
MDGET=$BUILD/tests/tools/gce_metadata_get
check_eq "metadata client: every accessor" "sim-project
us-central2-b
13
type=v4-16 workers=2 number=1 first=10.130.0.2 HOST_BOUNDS=1,1,2" \
    "$(for w in project zone token-len tpu-vm; do "$MDGET" "127.0.0.1:$MDV_PORT" $w 2>&1; done)"
"$MDGET" "127.0.0.1:$MDV_PORT" raw instance/attributes/nope >/dev/null 2>"$TMP/nope.err"
check_eq "metadata client: 404 is not found (exit 1)" "1 not found" \
    "$? $(grep -o 'not found' "$TMP/nope.err" | head -1)"

run_init vmskip TPUMESH_METADATA_HOST=127.0.0.1:$MDV_PORT TPU_SKIP_MDS_QUERY=true -- --tpu local
expect "TPU_SKIP_MDS_QUERY=true: metadata not asked" 0 "incomplete"
check "vmskip: logged" grep -q "TPU_SKIP_MDS_QUERY is set" "$OUT.log"
stop_sim "$MDV_PID"

printf "ACCELERATOR_TYPE: 'v4-16\n" >"$TMP/tpu-env-bad"
start_sim MDB "$MDSIM" --attr-file "tpu-env=$TMP/tpu-env-bad"
head -c 300000 /dev/zero | tr '\0' 'A' | sed 's/^/K: /' >"$TMP/tpu-env-huge"
start_sim MDZ "$MDSIM" --attr-file "tpu-env=$TMP/tpu-env-huge"
run_init vmmdhuge TPUMESH_METADATA_HOST=127.0.0.1:$MDZ_PORT -- --tpu local
expect "tpu-env above 256 KiB -> 5" 5 "reply larger than 262144 bytes"
stop_sim "$MDZ_PID"

run_init vmmdbad TPUMESH_METADATA_HOST=127.0.0.1:$MDB_PORT -- --tpu local
expect "malformed tpu-env -> 5" 5 "tpu-env line 1: unterminated ' quote"
stop_sim "$MDB_PID"

start_sim MDE "$MDSIM" --attr worker-network-endpoints=h0:u0
run_init vmmdeps TPUMESH_METADATA_HOST=127.0.0.1:$MDE_PORT -- --tpu local
expect "malformed worker-network-endpoints -> 5" 5 "worker-network-endpoints entry 0 'h0:u0' is not hostname:uid:IP"
stop_sim "$MDE_PID"

run_init vmnomd TPUMESH_METADATA_HOST=127.0.0.1:$CLOSED_PORT -- --tpu local
expect "tpu local without env or metadata: incomplete, not an error" 0 "incomplete"

done_testing
