#!/bin/bash
# tpumesh-init over a file size limit (ulimit -f, RLIMIT_FSIZE; issue 13): a write fails with
# EFBIG instead of SIGXFSZ killing the process, and that is a publish failure: exit 6, the
# message names the file and the cause, no temp file is left, a previous version stays whole.
. "$(dirname "$0")/lib.sh"

H=$(for i in 0 1 2 3 4 5 6 7; do printf 'worker-number-%d.a-long-subdomain-name.default.svc.cluster.local,' $i; done)
H=${H%,}
OUT=$TMP/out
mkdir -p "$OUT"
run_init() { # ulimit-blocks [worker-id]
    (ulimit -f "$1"; TPU_WORKER_ID=${2:-1} TPU_WORKER_HOSTNAMES=$H exec "$BIN/tpumesh-init" --skip-init \
        --accelerator-type v4-64 --topology 2x4x4 --out-dir "$OUT") >"$TMP/log" 2>&1
}

run_init 1
rc=$?
check_eq "exit 6 (publish failure) under ulimit -f 1, not killed by SIGXFSZ" 6 "$rc"
check "the error names the file and 'File too large'" grep -q "topology.json.*File too large" "$TMP/log"
left=$(find "$OUT" -mindepth 1 | wc -l)
check_eq "no file and no temp file left in the out dir" 0 "$left"

run_init unlimited
check_eq "without the limit the same run publishes (exit 0)" 0 "$?"
before=$(cat "$OUT/topology.json")
run_init 1 2
check_eq "a re-publish of changed files over the limit fails with exit 6" 6 "$?"
check_eq "the previous topology.json stays whole" "$before" "$(cat "$OUT/topology.json")"
tmpfiles=$(find "$OUT" -mindepth 1 -name '.*' -newer "$OUT/jax.env" | wc -l)
check_eq "no temp file left after the failed re-publish" 0 "$tmpfiles"
done_testing
