# tests/integration/lib.sh - TAP helpers for shell integration tests.
# Source it; then `check "name" cmd...`, `ok name`, `fail name why`, `skip name why`,
# `skip_needs name tool why` and `done_testing`.
# Every check prints "ok N - name" or "not ok N - name"; tests/run.sh counts them. A check that
# does not run prints "ok N - name # SKIP why", which tests/run.sh counts as skipped; one that
# cannot run for want of a tool `make deps` installs says `skip_needs` ("# SKIP needs TOOL: why"),
# which fails under CI (tests/run.sh, TPUMESH_REQUIRE_TOOLS). Never return early after `ok`.
# SLOWDOWN is TPUMESH_TEST_SLOWDOWN (a whole number; tests/sanitize.sh sets about 10 under
# valgrind, 3 under ASan; 1 otherwise): `scaled SECONDS` prints SECONDS stretched by it, and
# wait_for's bound is scaled, so a bound on a hang never fails a program that is only slowed down.
set -u
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PY:-/usr/bin/python3}
BIN=$BUILD/bin
SLOWDOWN=${TPUMESH_TEST_SLOWDOWN:-1}
case "$SLOWDOWN" in '' | *[!0-9]* | 0) SLOWDOWN=1 ;; esac
TAP_N=0
TAP_FAILED=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tpumesh-test.XXXXXX")
_cleanup_fns=()
on_exit() { _cleanup_fns+=("$1"); }
_run_cleanup() {
    local f
    for f in "${_cleanup_fns[@]+"${_cleanup_fns[@]}"}"; do eval "$f" >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap _run_cleanup EXIT

ok() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N - $1"; }
fail() {
    TAP_N=$((TAP_N + 1)); TAP_FAILED=$((TAP_FAILED + 1))
    echo "not ok $TAP_N - $1"
    [ $# -gt 1 ] && printf '#   %s\n' "${@:2}"
    return 0
}
# skip NAME WHY : NAME was not checked, because WHY
skip() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N - $1 # SKIP $2"; }
# skip_needs NAME TOOL WHY : NAME was not checked: TOOL (something `make deps` installs) is missing
skip_needs() { skip "$1" "needs $2: $3"; }
# check NAME CMD... : ok when CMD exits 0
check() {
    local name=$1; shift
    if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi
}
# check_eq NAME EXPECTED ACTUAL
check_eq() {
    if [ "$2" == "$3" ]; then ok "$1"; else fail "$1" "expected: $2" "actual:   $3"; fi
}
# scaled SECONDS : SECONDS of the plain build's time, stretched by SLOWDOWN
scaled() { echo $(($1 * SLOWDOWN)); }
# wait_for SECONDS CMD... : poll CMD every 50 ms until it succeeds, for up to `scaled SECONDS`
wait_for() {
    local deadline=$(( $(date +%s%N) / 1000000 + $1 * SLOWDOWN * 1000 )); shift
    while ! "$@" 2>/dev/null; do
        [ $(( $(date +%s%N) / 1000000 )) -ge $deadline ] && return 1
        sleep 0.05
    done
}
done_testing() { echo "1..$TAP_N"; [ "$TAP_FAILED" -eq 0 ]; }
