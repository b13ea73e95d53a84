#!/bin/bash
# tests/integration/test_demo.sh - `make demo`'s script (scripts/demo.sh) does what the README
# says: every section runs, the injector path (section 6) ends with the smoke trainer's output,
# the only ERROR lines are the two announced intentional failures, and nothing warns.
. "$(dirname "$0")/lib.sh"
OUT=$TMP/demo.out
BUILD=$BUILD PY=$PY timeout "$(scaled 240)" "$ROOT/scripts/demo.sh" >"$OUT" 2>&1
rc=$?
check_eq "scripts/demo.sh exits 0" 0 "$rc"
check "it runs to the end" grep -q '^demo finished$' "$OUT"
for n in 1 2 3 4 5 6; do
    check "section $n runs" grep -q "== $n\. " "$OUT"
done
check "no section is skipped" sh -c "! grep -q '(skipped' '$OUT'"
warns=$(grep -E ' WARN |Warning:' "$OUT")
check_eq "nothing on the happy path warns" "" "$warns"
check_eq "two intentional failures are announced" 2 "$(grep -c '(intentional failure:' "$OUT")"
check_eq "the only ERROR lines are those two (exit 2 hostile name, exit 3 no TPU)" \
    "$(printf '%s\n' 'exit 2, configuration error' 'exit 3, not found')" \
    "$(grep ' ERROR ' "$OUT" | sed -n 's/.*(\(exit [0-9], [a-z ]*\)).*/\1/p')"
check "section 5: /readyz follows the pods (200, 503, 200)" \
    sh -c "grep -o '/readyz -> [0-9]*' '$OUT' | head -4 | tr '\n' ' ' | grep -q '200 /readyz -> 503 /readyz -> 503 /readyz -> 200'"
check "section 6: the label-only pods came back injected" \
    grep -q 'initContainers: tpumesh-init, tpumesh-sidecar (native sidecar)' "$OUT"
check "section 6: every labelled pod went through the webhook and was patched" \
    grep -q 'admission: 4 x inject.tpumesh.dev patched' "$OUT"
check "section 6: the injected sidecar became ready" grep -q 'tpumesh-sidecar: /readyz -> 200' "$OUT"
check "section 6: the smoke trainer printed its rank, DTENSOR_JOBS and workersDigest" \
    sh -c "grep -q 'tpumesh smoke: rank 0 of 4' '$OUT' && grep -q 'tpumesh smoke: DTENSOR_JOBS=first-job-0.first-job:10000,' '$OUT' && grep -Eq 'tpumesh smoke: workersDigest=[0-9a-f]{16}$' '$OUT'"
[ "$TAP_FAILED" -eq 0 ] || sed 's/^/#   /' "$OUT" | tail -60
done_testing
