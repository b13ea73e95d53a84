#!/bin/bash
# test_init_resolve.sh - tpumesh-init's resolve step without network: the GKE
# TPU VM environment, grpc:// endpoint lists, the tpu source precedence
# (TensorFlow's order), pod annotations, and every
# configuration failure with its exit code and last log line.
# Runs build/bin/tpumesh-init --skip-init with a clean environment.
. "$(dirname "$0")/lib.sh"

INIT=$BIN/tpumesh-init
# A loopback port nothing listens on: bind port 0, note it, close it.
CLOSED_PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
NOMD=127.0.0.1:$CLOSED_PORT # metadata host that refuses connections

# run_init NAME [VAR=value ...] -- [flags ...]: runs in a fresh out dir,
# sets RC, OUT (dir) and LAST (last log line).
run_init() {
    local name=$1; shift
    local vars=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    OUT=$TMP/$name
    mkdir -p "$OUT"
    # Defaults as variables, so a test's own variables and flags override them.
    env -i PATH="$PATH" TPUMESH_ANNOTATIONS_FILE=/dev/null TPUMESH_METADATA_HOST="$NOMD" \
        "${vars[@]+"${vars[@]}"}" "$INIT" --skip-init --out-dir "$OUT" "$@" >"$OUT.log" 2>&1
    RC=$?
    LAST=$(tail -n 1 "$OUT.log")
}

# expect NAME RC SUBSTRING: checks the exit code and the last log line
expect() {
    if [ "$RC" -ne "$2" ]; then
        fail "$1" "exit $RC, want $2" "last: $LAST"
    elif [[ "$LAST" != *"$3"* ]]; then
        fail "$1" "last line lacks: $3" "last: $LAST"
    else
        ok "$1"
    fi
}

GKE_V4_32=(TPU_WORKER_ID=1 TPU_WORKER_HOSTNAMES=w-0.s,w-1.s,w-2.s,w-3.s TPU_ACCELERATOR_TYPE=v4-32
    TPU_TOPOLOGY=2x2x4 TPU_HOST_BOUNDS=1,1,4 TPU_CHIPS_PER_HOST_BOUNDS=2,2,1)

# ---- GKE TPU VM environment ----------------------------------------------
run_init gke "${GKE_V4_32[@]}"
expect "gke v4-32: exit 0" 0 "complete"
check "gke: source logged" grep -q "tpu 'local' from GKE TPU VM environment" "$OUT.log"
check_eq "gke: tpu.env" "TPU_WORKER_ID='1'
TPU_WORKER_HOSTNAMES='w-0.s,w-1.s,w-2.s,w-3.s'
TPU_ACCELERATOR_TYPE='v4-32'
TPU_TOPOLOGY='2x2x4'
TPU_HOST_BOUNDS='1,1,4'
TPU_CHIPS_PER_HOST_BOUNDS='2,2,1'" "$(cat "$OUT/tpu.env" 2>/dev/null)"
check_eq "gke: DTENSOR_JOBS in TPU_WORKER_HOSTNAMES order" \
    "DTENSOR_JOBS='w-0.s:10000,w-1.s:10000,w-2.s:10000,w-3.s:10000'" \
    "$(grep DTENSOR_JOBS "$OUT/dtensor.env" 2>/dev/null)"
check_eq "gke: topology.json complete, client 1 of 4" "True 1 4 v4-32" \
    "$($PY -c 'import json,sys; t=json.load(open(sys.argv[1])); print(t["complete"], t["clientId"], t["numClients"], t["slice"]["acceleratorType"])' "$OUT/topology.json" 2>&1)"

run_init single TPU_WORKER_HOSTNAMES=localhost TPU_ACCELERATOR_TYPE=v5litepod-4 TPU_TOPOLOGY=2x2
expect "single host: no TPU_WORKER_ID needed" 0 "complete"
check_eq "single host: client 0" "DTENSOR_CLIENT_ID='0'" "$(grep CLIENT_ID "$OUT/dtensor.env" 2>/dev/null)"

run_init flags TPU_WORKER_HOSTNAMES=a.s,b.s TPU_WORKER_ID=0 -- --accelerator-type v4-16 --topology 2x2x2
expect "flags give the accelerator model" 0 "complete"
check "flags: v4-16 host bounds derived" grep -q "TPU_HOST_BOUNDS='1,1,2'" "$OUT/tpu.env"

run_init nameok TPU_WORKER_HOSTNAMES=a.s,b.s TPU_WORKER_ID=1 TPU_ACCELERATOR_TYPE=v4-16 TPU_NAME=lws-pod-0
expect "TPU_NAME ignored on a TPU VM" 0 "complete"
check "TPU_NAME ignored: logged" grep -q "TPU_NAME is ignored" "$OUT.log"

run_init unknownslice TPU_WORKER_HOSTNAMES=a.s,b.s TPU_WORKER_ID=1
expect "no accelerator model: still published" 0 "worker(s)"
check "no accelerator model: warned" grep -q "slice stays unknown" "$OUT.log"

# ---- TPU VM failures (exit 2) -----------------------------------------------
run_init badhost TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=w-0.s,w_1.s TPU_ACCELERATOR_TYPE=v4-16
expect "invalid host name entry -> 2" 2 "TPU_WORKER_HOSTNAMES: entry 1 'w_1.s' is not a valid RFC 1123 host name or IP address"
check "invalid host name: nothing published" test ! -e "$OUT/tpu.env"

run_init emptyentry TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=a.s,,c.s
expect "empty host entry -> 2" 2 "entry 1 is empty"

run_init idrange TPU_WORKER_ID=4 TPU_WORKER_HOSTNAMES=w-0.s,w-1.s,w-2.s,w-3.s
expect "TPU_WORKER_ID out of range -> 2" 2 "TPU_WORKER_ID=4 is out of range: TPU_WORKER_HOSTNAMES lists 4 workers (want 0..3)"

run_init idbad TPU_WORKER_ID=x TPU_WORKER_HOSTNAMES=w-0.s,w-1.s
expect "TPU_WORKER_ID not an integer -> 2" 2 "TPU_WORKER_ID='x' is not an integer"

run_init noid TPU_WORKER_HOSTNAMES=w-0.s,w-1.s
expect "TPU_WORKER_ID missing with 2 workers -> 2" 2 "TPU_WORKER_ID is not set"

run_init jci TPU_WORKER_HOSTNAMES=w-0.s,w-1.s JOB_COMPLETION_INDEX=1
expect "JOB_COMPLETION_INDEX stands in for a missing TPU_WORKER_ID" 0 "complete"
check_eq "jci: client id from the completion index" "DTENSOR_CLIENT_ID='1'" "$(grep CLIENT_ID "$OUT/dtensor.env" 2>/dev/null)"

run_init jcimismatch TPU_WORKER_HOSTNAMES=w-0.s,w-1.s TPU_WORKER_ID=0 JOB_COMPLETION_INDEX=1
check "TPU_WORKER_ID vs JOB_COMPLETION_INDEX mismatch warned" grep -q "TPU_WORKER_ID=0 but JOB_COMPLETION_INDEX=1" "$OUT.log"

ME=$(hostname | cut -d. -f1)
run_init selfok TPU_WORKER_HOSTNAMES="other.s,$ME.svc" TPU_WORKER_ID=1
check "own host name at TPU_WORKER_ID: no warning" bash -c "! grep -q \"this pod's host name\" '$OUT.log'"
run_init selfbad TPU_WORKER_HOSTNAMES="$ME.svc,other.s" TPU_WORKER_ID=1
check "own host name elsewhere: warned" grep -q "entry 1 is 'other.s' but this pod's host name is" "$OUT.log"

run_init count TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=w-0.s,w-1.s TPU_ACCELERATOR_TYPE=v4-32 \
    TPU_TOPOLOGY=2x2x4 TPU_HOST_BOUNDS=1,1,4
expect "worker count != slice hosts -> 2" 2 "TPU_WORKER_HOSTNAMES lists 2 workers but v4-32 2x2x4 has 4 hosts"

run_init hb TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=w-0.s,w-1.s,w-2.s,w-3.s TPU_ACCELERATOR_TYPE=v4-32 \
    TPU_TOPOLOGY=2x2x4 TPU_HOST_BOUNDS=1,2,2
expect "host bounds inconsistent with topology -> 2" 2 "TPU_HOST_BOUNDS=1,2,2 does not match v4-32 2x2x4 (host bounds 1,1,4)"

run_init hbsyntax TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=a.s TPU_ACCELERATOR_TYPE=v4-8 TPU_HOST_BOUNDS=1x1x1
expect "host bounds syntax -> 2" 2 "TPU_HOST_BOUNDS '1x1x1' is not three positive integers"

run_init cb TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=a.s TPU_ACCELERATOR_TYPE=v4-8 TPU_CHIPS_PER_HOST_BOUNDS=2,2,2
expect "chips-per-host bounds inconsistent -> 2" 2 "accelerator model"

run_init typebad TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=a.s TPU_ACCELERATOR_TYPE=v9-8
expect "unknown accelerator type -> 2" 2 "accelerator model (type v9-8"

run_init mega "${GKE_V4_32[@]}" MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=2
expect "MEGASCALE_SLICE_ID out of range -> 2" 2 "MEGASCALE_SLICE_ID=2 is out of range for MEGASCALE_NUM_SLICES=2"

run_init megaok "${GKE_V4_32[@]}" MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=1 MEGASCALE_COORDINATOR_ADDRESS=w-0.s
expect "multislice: published, worker list left to the sidecar" 0 "incomplete"
check "multislice: reason logged" grep -q "names this slice only" "$OUT.log"

run_init expected "${GKE_V4_32[@]}" -- --expected-workers 8
expect "--expected-workers disagrees with the list -> 2" 2 "expected 8 workers"

# ---- the tpu value: sources and precedence ----------------------
run_init nosource
expect "no source: TensorFlow's message -> 2" 2 "Please provide a TPU Name to connect to. Set --tpu"

KUBE=KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS=grpc://10.120.27.5:8470,grpc://10.120.27.6:8470,grpc://10.120.27.7
run_init kube "$KUBE"
expect "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS -> TPU Node" 0 "complete"
check_eq "kube: TF_CONFIG cluster in env order, default port 8470, no task" \
    '{"cluster":{"worker":["10.120.27.5:8470","10.120.27.6:8470","10.120.27.7:8470"]}}' "$(cat "$OUT/tf_config.json" 2>/dev/null)"
check "kube: source logged" grep -q "from env KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" "$OUT.log"

run_init kubetype "$KUBE" -- --accelerator-type v3-32
check "TPU Node + --accelerator-type: slice published" grep -q '"acceleratorType":.*"v3-32"' "$OUT/topology.json"

run_init kubetypebad "$KUBE" -- --accelerator-type v3-33
expect "TPU Node + bad --accelerator-type -> 2" 2 "--accelerator-type/--topology"

run_init kubeempty KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS= TPU_NAME=mytpu
expect "empty KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS wins over TPU_NAME and fails -> 2" 2 \
    "env KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS is set but empty"

run_init kubespace "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS=grpc://10.0.0.1:8470, grpc://10.0.0.2:8470"
expect "endpoint with a space (no trimming) -> 2" 2 "endpoint 1 ' grpc://10.0.0.2:8470'"

run_init kubeport KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS=grpc://10.0.0.1:99999
expect "endpoint port out of range -> 2" 2 "invalid port"

run_init flagwins "$KUBE" -- --tpu grpc://10.9.9.9:8471
expect "--tpu beats KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" 0 "complete"
check_eq "flag wins: its endpoint" '{"cluster":{"worker":["10.9.9.9:8471"]}}' "$(cat "$OUT/tf_config.json" 2>/dev/null)"
check "flag wins: source logged" grep -q "from flag --tpu" "$OUT.log"

printf 'kubernetes.io/config.seen="2026-01-01T00:00:00Z"\ntpumesh.dev/tpu="grpc://10.8.8.8"\ntpumesh.dev/port="10001"' >"$TMP/ann"
run_init annwins "$KUBE" TPUMESH_TPU=grpc://10.7.7.7 -- --annotations-file "$TMP/ann"
expect "annotation beats TPUMESH_TPU and KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" 0 "complete"
check_eq "annotation wins: its endpoint" '{"cluster":{"worker":["10.8.8.8:8470"]}}' "$(cat "$OUT/tf_config.json" 2>/dev/null)"
check "annotation wins: source logged" grep -q "from annotation tpumesh.dev/tpu" "$OUT.log"

run_init flagoverann -- --annotations-file "$TMP/ann" --tpu grpc://10.6.6.6
check_eq "flag beats annotation" '{"cluster":{"worker":["10.6.6.6:8470"]}}' "$(cat "$OUT/tf_config.json" 2>/dev/null)"

run_init envtpu "$KUBE" TPUMESH_TPU=grpc://10.7.7.7
check_eq "TPUMESH_TPU beats KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" '{"cluster":{"worker":["10.7.7.7:8470"]}}' \
    "$(cat "$OUT/tf_config.json" 2>/dev/null)"

run_init kubeovername "$KUBE" "TPU_NAME=not a name"
expect "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS beats TPU_NAME" 0 "complete"

run_init kubeovervm "$KUBE" "${GKE_V4_32[@]}"
check "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS beats the TPU VM env" grep -q "from env KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" "$OUT.log"

run_init localflag TPU_WORKER_HOSTNAMES=a.s TPU_ACCELERATOR_TYPE=v5litepod-1 "$KUBE" -- --tpu local
expect "--tpu local beats KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS" 0 "complete"

run_init emptyflagenv "$KUBE" TPUMESH_TPU=
expect "empty TPUMESH_TPU counts as unset" 0 "complete"

run_init nameempty TPU_NAME= 'TPU_CONFIG={"tpu_node_name":"x"}'
expect "empty TPU_NAME is present: wins over TPU_CONFIG and fails -> 2" 2 "env TPU_NAME is set but empty"

run_init badname "TPU_NAME=My_TPU"
expect "TPU_NAME that is not a Cloud TPU name -> 2" 2 "env TPU_NAME: 'My_TPU' is not 'local', grpc://IP:PORT or a Cloud TPU name"

run_init tpuconfigbad 'TPU_CONFIG={"tpu_node_name": '
expect "TPU_CONFIG malformed JSON -> 2" 2 "TPU_CONFIG is not valid JSON"

run_init tpuconfigarr 'TPU_CONFIG=[1]'
expect "TPU_CONFIG not an object -> 2" 2 "TPU_CONFIG is not a JSON object"

run_init tpuconfigempty 'TPU_CONFIG={"project":"p"}'
expect "TPU_CONFIG without tpu_node_name -> no source (2)" 2 "Please provide a TPU Name"

# ---- the annotations file -----------------------------------------------------
printf 'tpumesh.dev/tpu="local"\ntpumesh.dev/adress-mode="ip"' >"$TMP/ann-unknown"
run_init annunknown -- --annotations-file "$TMP/ann-unknown"
expect "unknown tpumesh.dev key -> 2" 2 "unknown annotation tpumesh.dev/adress-mode: accepted tpumesh.dev/ keys are tpu, zone"

printf 'tpumesh.dev/address-mode="fast"' >"$TMP/ann-badval"
run_init annbadval -- --annotations-file "$TMP/ann-badval"
expect "bad annotation value -> 2" 2 "annotation tpumesh.dev/address-mode=\"fast\" is not one of the accepted values auto, dns, ip"

printf 'tpumesh.dev/port="70000"' >"$TMP/ann-port"
run_init annport -- --annotations-file "$TMP/ann-port"
expect "annotation port out of range -> 2" 2 "tpumesh.dev/port"

printf 'a="ok"\ntpumesh.dev/tpu=local' >"$TMP/ann-malformed"
run_init annmalformed -- --annotations-file "$TMP/ann-malformed"
expect "malformed annotations file -> 2" 2 "line 2 (tpumesh.dev/tpu): value is not a \"double-quoted\" string"

printf 'a="\\q"' >"$TMP/ann-escape"
run_init annescape -- --annotations-file "$TMP/ann-escape"
expect "bad escape in annotations file -> 2" 2 "unknown escape"

mkdir -p "$TMP/ann-dir"
run_init anndir -- --annotations-file "$TMP/ann-dir"
expect "unreadable annotations file -> 2" 2 "ann-dir"

printf 'tpumesh.dev/tpu="grpc://10.5.5.5:8470"\ntpumesh.dev/inject="true"\ntf-version.cloud-tpus.google.com="2.12.0"\nother.io/x="\\u00e9 \\"q\\""' >"$TMP/ann-ok"
run_init annok -- --annotations-file "$TMP/ann-ok"
expect "Go-quoted annotations, inject and tf-version accepted" 0 "complete"

run_init annenv TPUMESH_ANNOTATIONS_FILE="$TMP/ann-ok"
expect "TPUMESH_ANNOTATIONS_FILE names the file" 0 "complete"

done_testing
