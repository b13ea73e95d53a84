#!/bin/bash
# tests/run.sh - runs every test tpumesh has and ends with "N passed, N failed".
#
#   unit         build/tests/test_*            cmocka; its summary lines are counted
#   fuzz         build/fuzz/fuzz_<t>           replays tests/fuzz/corpus/<t>/ (1 test each)
#   integration  tests/integration/test_*.sh|py  TAP lines "ok ..." / "not ok ..." are counted;
#                                              a script that prints none counts by exit code
# Env: BUILD (build dir), PY (python), ONLY ("unit fuzz integration"), WRAP (e.g. valgrind; also
#      exported to integration tests, which start the programs under it when they support it),
#      FILTER (substring of test names to run), INTEGRATION_ONLY (space-separated substrings: run
#      only the integration tests matching one), TEST_TIMEOUT (seconds per program, default
#      600, 1200 when TPUMESH_TEST_SLOWDOWN > 1: the slowest file takes ~5 min under valgrind, and
#      a hang must not eat CI's 90 minutes), TPUMESH_TEST_SLOWDOWN (a whole number, default
#      1: how many times slower than the plain build the programs under test run; tests/sanitize.sh
#      sets it for valgrind and ASan. Exported: every bound a test waits on a program is scaled by
#      it - tests/integration/tap.py's wait/scaled, lib.sh's wait_for/scaled, the unit tests' own
#      waits - so a slowed-down program is waited for and only a hang fails).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
ONLY=${ONLY:-unit fuzz integration}
WRAP=${WRAP:-}
FILTER=${FILTER:-}
INTEGRATION_ONLY=${INTEGRATION_ONLY:-}
TPUMESH_TEST_SLOWDOWN=${TPUMESH_TEST_SLOWDOWN:-1}
case "$TPUMESH_TEST_SLOWDOWN" in
'' | *[!0-9]* | 0)
    echo "TPUMESH_TEST_SLOWDOWN=$TPUMESH_TEST_SLOWDOWN: expected a whole number >= 1 (e.g. 10 under valgrind)" >&2
    exit 2
    ;;
esac
TEST_TIMEOUT=${TEST_TIMEOUT:-$((TPUMESH_TEST_SLOWDOWN > 1 ? 1200 : 600))}
export ROOT BUILD PY WRAP TPUMESH_TEST_SLOWDOWN
LOGDIR=$BUILD/test-logs
mkdir -p "$LOGDIR"

passed=0
failed=0
failed_names=()

want() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
matches() { [ -z "$FILTER" ] || [[ "$1" == *"$FILTER"* ]]; }

report() { # name pass fail log
    local name=$1 p=$2 f=$3 log=$4
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name")
        printf 'FAIL %-40s %d passed, %d failed (log: %s)\n' "$name" "$p" "$f" "$log"
        tail -n 40 "$log" | sed 's/^/    | /'
    else
        printf 'ok   %-40s %d passed\n' "$name" "$p"
    fi
}

if want unit; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        name=unit/$(basename "$t")
        matches "$name" || continue
        log=$LOGDIR/$(basename "$t").log
        # shellcheck disable=SC2086
        timeout "$TEST_TIMEOUT" $WRAP "$t" >"$log" 2>&1
        rc=$?
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1 # crashed, timed out or leaked (valgrind) without a cmocka failure
        fi
        report "$name" "$p" "$f" "$log"
    done
fi

if want fuzz; then
    for t in "$BUILD"/fuzz/fuzz_*; do
        [ -x "$t" ] || continue
        tgt=${t##*/fuzz_}
        name=fuzz/$tgt
        matches "$name" || continue
        log=$LOGDIR/fuzz_$tgt.log
        corpus=tests/fuzz/corpus/$tgt
        if [ ! -d "$corpus" ]; then
            echo "no corpus at $corpus" >"$log"
            report "$name" 0 1 "$log"
            continue
        fi
        # shellcheck disable=SC2086
        if timeout "$TEST_TIMEOUT" $WRAP "$t" "$corpus" >"$log" 2>&1; then
            report "$name" 1 0 "$log"
        else
            report "$name" 0 1 "$log"
        fi
    done
fi

if want integration; then
    for t in tests/integration/test_*.sh tests/integration/test_*.py; do
        [ -f "$t" ] || continue
        name=integration/$(basename "$t")
        matches "$name" || continue
        if [ -n "$INTEGRATION_ONLY" ]; then
            hit=0
            for pat in $INTEGRATION_ONLY; do [[ "$name" == *"$pat"* ]] && hit=1; done
            [ "$hit" -eq 1 ] || continue
        fi
        log=$LOGDIR/$(basename "$t").log
        case "$t" in
        *.py) timeout "$TEST_TIMEOUT" "$PY" "$t" >"$log" 2>&1 ;;
        *) timeout "$TEST_TIMEOUT" bash "$t" >"$log" 2>&1 ;;
        esac
        rc=$?
        p=$(grep -c '^ok ' "$log")
        f=$(grep -c '^not ok ' "$log")
        if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
            if [ "$rc" -eq 0 ]; then p=1; else f=1; fi
        elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "script exited $rc after its checks" >>"$log"
            f=1
        fi
        report "$name" "$p" "$f" "$log"
    done
fi

echo
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
