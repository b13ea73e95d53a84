#!/bin/bash
# tests/run.sh - runs every test tpumesh has and ends with "N passed, N failed, N skipped".
#
#   unit         build/tests/test_*            cmocka; its PASSED/FAILED/SKIPPED lines are counted
#   fuzz         build/fuzz/fuzz_<t>           replays tests/fuzz/corpus/<t>/ (1 test each)
#   integration  tests/integration/test_*.sh|py  TAP lines "ok ..." / "not ok ..." are counted;
#                                              a script that prints none counts by exit code
#                                              (0 passed, 77 skipped, anything else failed)
# Skips: a TAP line "ok N - name # SKIP reason" counts as skipped, never as passed. A skip for
# want of something the test needs says so as "# SKIP needs TOOL: why" (lib.sh `skip_needs`,
# tap.py `skip_needs`); when TOOL is in TPUMESH_REQUIRE_TOOLS (space-separated names, or `all`;
# default `all` when CI=true, empty otherwise) that skip counts as a failure: CI installs every
# tool (`make deps`), so a test that did not run there is a test that failed. Other skips (a
# check that cannot mean anything under valgrind, a machine that writes no core files) stay
# skips.
#   trainers     tests/trainers/test_*.py      TAP, as integration: real TensorFlow/DTensor and JAX
#                                              (build/venv-tf, build/venv-jax) read the published files
#   e2e          tests/e2e/test_*.py           TAP, as integration, against the real Kubernetes
#                                              control plane scripts/e2e-deps.sh builds (waited for
#                                              first when `make test` started it in the
#                                              background; docs/e2e.md). E2E_PATTERN='slow_e2e_*.py'
#                                              runs the slow scenarios instead (`make e2e-slow`)
# Env: BUILD (build dir), PY (python), ONLY ("unit fuzz integration trainers e2e"), WRAP (e.g. valgrind; also
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
ONLY=${ONLY:-unit fuzz integration trainers e2e}
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
if [ "${CI:-}" = true ]; then
    TPUMESH_REQUIRE_TOOLS=${TPUMESH_REQUIRE_TOOLS-all}
else
    TPUMESH_REQUIRE_TOOLS=${TPUMESH_REQUIRE_TOOLS-}
fi
export ROOT BUILD PY WRAP TPUMESH_TEST_SLOWDOWN
LOGDIR=$BUILD/test-logs
mkdir -p "$LOGDIR"

passed=0
failed=0
skipped=0
failed_names=()

want() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
matches() { [ -z "$FILTER" ] || [[ "$1" == *"$FILTER"* ]]; }

report() { # name pass fail log [skip]
    local name=$1 p=$2 f=$3 log=$4 s=${5:-0}
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name")
        printf 'FAIL %-40s %d passed, %d failed, %d skipped (log: %s)\n' "$name" "$p" "$f" "$s" "$log"
        tail -n 40 "$log" | sed 's/^/    | /'
    elif [ "$s" -gt 0 ]; then
        printf 'ok   %-40s %d passed, %d skipped\n' "$name" "$p" "$s"
        grep -E "$SKIP_RE" "$log" | sed 's/^/    | /'
    else
        printf 'ok   %-40s %d passed\n' "$name" "$p"
    fi
}

# A TAP skip: "ok N - name # SKIP reason" (TAP 13: the directive is case-insensitive).
SKIP_RE='^ok .*#[[:space:]]*[Ss][Kk][Ii][Pp]([[:space:]]|$)'
# required_skips LOG: prints the skip lines of LOG whose "needs TOOL" names a required tool.
required_skips() {
    local line tool
    [ -n "$TPUMESH_REQUIRE_TOOLS" ] || return 0
    grep -E "$SKIP_RE" "$1" | while IFS= read -r line; do
        tool=$(sed -n 's/.*#[[:space:]]*[Ss][Kk][Ii][Pp][[:space:]]\{1,\}needs[[:space:]]\{1,\}\([^:[:space:]]*\).*/\1/p' <<<"$line")
        [ -n "$tool" ] || continue
        case " $TPUMESH_REQUIRE_TOOLS " in
        *" all "* | *" $tool "*) echo "$line" ;;
        esac
    done
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
        s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1 # crashed, timed out or leaked (valgrind) without a cmocka failure
        fi
        report "$name" "$p" "$f" "$log" "$s"
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

# TAP scripts: tests/integration/test_* and tests/trainers/test_* (real TensorFlow and JAX).
run_tap() { # section file...
    local section=$1 t name log rc s p f req n
    shift
    for t in "$@"; do
        [ -f "$t" ] || continue
        name=$section/$(basename "$t")
        matches "$name" || continue
        if [ "$section" = integration ] && [ -n "$INTEGRATION_ONLY" ]; then
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
        s=$(grep -cE "$SKIP_RE" "$log")
        p=$(($(grep -c '^ok ' "$log") - s))
        f=$(grep -c '^not ok ' "$log")
        if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
            case $rc in
            0) p=1 ;;
            77) s=1 ;;
            *) f=1 ;;
            esac
        elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ "$f" -eq 0 ]; then
            echo "script exited $rc after its checks" >>"$log"
            f=1
        fi
        req=$(required_skips "$log")
        if [ -n "$req" ]; then
            n=$(grep -c . <<<"$req")
            printf '%s\n' "required (TPUMESH_REQUIRE_TOOLS=$TPUMESH_REQUIRE_TOOLS), so counted as failed:" "$req" >>"$log"
            s=$((s - n))
            f=$((f + n))
        fi
        report "$name" "$p" "$f" "$log" "$s"
    done
}

if want integration; then
    run_tap integration tests/integration/test_*.sh tests/integration/test_*.py
fi
if want trainers; then
    run_tap trainers tests/trainers/test_*.py
fi
if want e2e; then
    # `make test` builds the pinned control plane in the background meanwhile; wait for it.
    BUILD=$BUILD scripts/e2e-deps.sh --wait
    run_tap e2e tests/e2e/${E2E_PATTERN:-test_*.py}
fi

echo
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
