#!/bin/bash
# test_sidecar_cli.sh - tpumesh-sidecar's command line (docs/DESIGN.md §6): --help, --version,
# TPUMESH_* variables, and configuration errors that exit 2 with a message naming the flag.
. "$(dirname "$0")/lib.sh"
SC=$BIN/tpumesh-sidecar
unset POD_NAME KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT
for v in $(env | sed -n 's/^\(TPUMESH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

out=$("$SC" --version); rc=$?
check_eq "--version exits 0" 0 "$rc"
check "--version prints the version" grep -q "^tpumesh-sidecar $(cat "$ROOT/VERSION")$" <<<"$out"
out=$("$SC" --help); rc=$?
check_eq "--help exits 0" 0 "$rc"
missing=
for f in --out-dir --apiserver --kubeconfig --token-file --ca-file --namespace --selector \
    --pod-name --port --address-mode --expected-workers --http-addr --grpc-addr --verify-dns \
    --stall-timeout --stuck-limit --log-format --log-level --job-name; do
    grep -q -- "$f " <<<"$out" || missing="$missing $f"
done
check_eq "--help lists every flag of docs/DESIGN.md §6 plus --verify-dns and the stuck/stall limits" \
    "" "$missing"
check "--help names the TPUMESH_ variables" grep -q TPUMESH_EXPECTED_WORKERS <<<"$out"
check "--help lists the exit codes" grep -q "^  2  usage or configuration error" <<<"$out"
check "--help says which boolean spellings are accepted" grep -q "BOOL is true|false (also 1|0, yes|no, on|off)" <<<"$out"

# expect_config NAME 'message substring' args... : exit 2, message on stderr
expect_config() {
    local name=$1 want=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" -eq 2 ] && grep -qF -- "$want" <<<"$err"; then ok "$name"; else
        fail "$name" "rc=$rc" "stderr: $err"; fi
}
expect_config "unknown flag" "unknown option '--nope'" "$SC" --nope
expect_config "bad --port" "--port: '0' is not an integer in 1..65535" "$SC" --port 0
expect_config "bad --address-mode" "--address-mode: 'fqdn' is not auto|dns|ip" "$SC" --address-mode fqdn
expect_config "bad TPUMESH_EXPECTED_WORKERS names the variable" \
    "TPUMESH_EXPECTED_WORKERS: 'many'" env TPUMESH_EXPECTED_WORKERS=many "$SC"
expect_config "flag wins over variable (bad flag reported, not the good variable)" \
    "--expected-workers: '-1'" env TPUMESH_EXPECTED_WORKERS=4 "$SC" --expected-workers -1
expect_config "missing value" "--selector needs a value" "$SC" --selector
expect_config "a command-line error is one log line in the format all three programs use" \
    "command line failed (exit 2, configuration error): unknown option '--nope'" "$SC" --nope
expect_config "... in JSON when asked for" \
    '"msg":"command line failed (exit 2, configuration error): --verify-dns: '"'"'maybe'"'"' is not a boolean' \
    "$SC" --log-format=json --verify-dns=maybe
# Port rules: not 8470-8476, 8482, 8080, 9470, 9476; DTensor, probe and gRPC ports distinct.
expect_config "reserved --port names the rule" \
    "DTensor port (--port / TPUMESH_PORT) 8476 is reserved: TPU software uses ports 8470-8476, 8482, 8080, 9470 and 9476" \
    "$SC" --port 8476
expect_config "reserved TPUMESH_PORT" "DTensor port (--port / TPUMESH_PORT) 8080 is reserved" \
    env TPUMESH_PORT=8080 "$SC"
expect_config "reserved probe port" "probe port (--http-addr) 9476 is reserved" "$SC" --http-addr 127.0.0.1:9476
expect_config "reserved gRPC port" "gRPC port (--grpc-addr) 8470 is reserved" "$SC" --grpc-addr :8470
expect_config "JAX's coordinator port (jax 0.8.1+) is reserved" \
    "gRPC port (--grpc-addr) 8482 is reserved: TPU software uses ports 8470-8476, 8482, 8080, 9470 and 9476 in the pod's network namespace (JAX's coordinator 8482" \
    "$SC" --grpc-addr :8482
expect_config "DTensor and probe ports must differ" \
    "DTensor port (--port / TPUMESH_PORT) and probe port (--http-addr) are both 9431: the DTensor, probe and gRPC ports must be distinct" \
    "$SC" --port 9431
expect_config "probe and gRPC ports must differ" \
    "probe port (--http-addr) and gRPC port (--grpc-addr) are both 9500" "$SC" --http-addr :9500 --grpc-addr :9500
expect_config "bad --http-addr" "--http-addr 'nonsense' is not [HOST]:PORT" \
    "$SC" --http-addr nonsense --apiserver http://127.0.0.1:9 --pod-name p
expect_config "bad --grpc-addr" "--grpc-addr 'nonsense' is not [HOST]:PORT" \
    "$SC" --grpc-addr nonsense --http-addr 127.0.0.1:0 --apiserver http://127.0.0.1:9 --pod-name p
expect_config "no pod name" "pass --pod-name or set POD_NAME" \
    "$SC" --apiserver http://127.0.0.1:9 --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0
expect_config "bad namespace" "namespace 'Bad_NS' is not an RFC 1123 label" \
    "$SC" --apiserver http://127.0.0.1:9 --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 --pod-name p --namespace Bad_NS

# JSON log format: every line is one JSON object.
err=$(POD_NAME=p TPUMESH_LOG_FORMAT=json "$SC" --apiserver http://127.0.0.1:9 --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 \
    --namespace Bad_NS 2>&1 >/dev/null)
check "json log lines parse as JSON with level/mod/msg" "$PY" -c '
import json, sys
lines = [l for l in sys.stdin.read().splitlines() if l]
assert lines
for l in lines:
    o = json.loads(l)
    assert {"time", "level", "mod", "msg"} <= set(o), o
' <<<"$err"

# SIGTERM while the API server is unreachable (still retrying GET own pod): exits 0 quickly.
"$SC" --apiserver http://127.0.0.1:9 --http-addr 127.0.0.1:0 --grpc-addr 127.0.0.1:0 --pod-name p --namespace ns \
    --out-dir "$TMP" 2>"$TMP/log" &
pid=$!
on_exit "kill $pid"
wait_for 5 grep -q "GET own pod" "$TMP/log"
# /readyz says why it is not ready, even before the own pod was read (never an empty 503).
port=$(sed -n 's/.*serving .*(port \([0-9]*\)).*/\1/p' "$TMP/log" | head -1)
body=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$port/readyz")
case "$body" in
"reading this pod failed: cannot reach the API server"*" 503") ok "/readyz while the API is unreachable: 503 saying why" ;;
*) fail "/readyz while the API is unreachable: 503 saying why" "got: $body" ;;
esac
kill -TERM "$pid"
t0=$(date +%s%N)
wait "$pid"; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check_eq "SIGTERM during start-up retries: exit 0" 0 "$rc"
check "SIGTERM during start-up retries: within a second (${ms} ms; x$SLOWDOWN slowdown)" test "$ms" -lt $((1000 * SLOWDOWN))
done_testing
