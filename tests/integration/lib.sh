# tests/integration/lib.sh - TAP helpers for shell integration tests.
# Source it; then `check "name" cmd...`, `ok name`, `fail name why`, and `done_testing`.
# Every check prints "ok N - name" or "not ok N - name"; tests/run.sh counts them.
set -u
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PY:-/usr/bin/python3}
BIN=$BUILD/bin
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
# check NAME CMD... : ok when CMD exits 0
check() {
    local name=$1; shift
    if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi
}
# check_eq NAME EXPECTED ACTUAL
check_eq() {
    if [ "$2" == "$3" ]; then ok "$1"; else fail "$1" "expected: $2" "actual:   $3"; fi
}
# wait_for SECONDS CMD... : poll CMD every 50 ms until it succeeds
wait_for() {
    local deadline=$(( $(date +%s%N) / 1000000 + $1 * 1000 )); shift
    while ! "$@" 2>/dev/null; do
        [ $(( $(date +%s%N) / 1000000 )) -ge $deadline ] && return 1
        sleep 0.05
    done
}
done_testing() { echo "1..$TAP_N"; [ "$TAP_FAILED" -eq 0 ]; }
