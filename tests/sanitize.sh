#!/bin/bash
# tests/sanitize.sh - the unit tests, corpus replays and integration tests with every program
# checked for memory errors (`make asan`, `make valgrind`, CI).
#
#   BUILD=build-asan tests/sanitize.sh asan      programs built with -fsanitize=address,undefined
#   BUILD=build tests/sanitize.sh valgrind       programs run under valgrind's memcheck
#
# asan: tests/run.sh on the sanitizer build, with ASan/UBSan reports written to
# $BUILD/sanitizer-logs/ (log_path) as well as failing the program (exit code, abort): a report
# from a process whose exit status no test looks at (a sidecar stopped with SIGTERM, a helper
# in the background) still fails the run.
# valgrind: the unit tests and replays under valgrind (tests/run.sh WRAP), then the integration
# tests against $BUILD/valgrind/, a build directory whose bin/, tests/ and tests/tools/ hold
# scripts that exec the real programs under valgrind (each process logs to
# $BUILD/valgrind/logs/<pid>.log; any error there fails the run) and whose other entries link
# to $BUILD's.
# Not run here (SAN_SKIP): test_image.sh, which only inspects the built files; and under
# valgrind (20-50x slower) the two whose checks are wall-clock bounds by design:
# test_init_tpunode.py (which phase of tpumesh-init's one --timeout runs out, and its
# message) and test_injector.py (200 concurrent TLS reviews answered within 10 s). Both run
# under ASan + UBSan.
# Slowdown: the checked programs run about 3x (ASan) or 10-50x (valgrind) slower than the plain
# build, and on a loaded CI machine slower still. TPUMESH_TEST_SLOWDOWN (default 3 for asan, 10
# for valgrind) is exported to every test (see tests/run.sh): each bound a test puts on waiting
# for a program is multiplied by it, and a check about how the program behaves over time is
# made so that it holds for a slowed-down program too (the test driver is made faster than the
# program by construction, or the bound is scaled) while still failing a program that misbehaves.
# Which integration tests valgrind runs (VALGRIND_INTEGRATION): valgrind finds what ASan cannot
# (reads of uninitialised memory) on code paths, not on test shapes, so it runs the unit tests,
# every corpus replay and one integration test per program path: tpumesh-init's static, resolve
# and multi-slice paths, the sidecar's command line, its Pod shapes, its WebSocket and gRPC
# servers, the Kubernetes client, the injector's configuration and the TopologyProto writer.
# Everything else runs under ASan + UBSan only: in three rounds valgrind's integration runs
# found timing flakes, not memory errors, and they took 32 of CI's minutes.
# Env: BUILD, PY, FILTER (as tests/run.sh), SAN_SKIP (space-separated test file names),
# VALGRIND_INTEGRATION (space-separated test file names; "all" for every one),
# TPUMESH_TEST_SLOWDOWN (a whole number, see above).
# Prints tests/run.sh's "N passed, N failed, N skipped" lines and, last, "sanitizer-reports: 1
# passed, 0 failed" (or "0 passed, 1 failed" with the reports).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
MODE=${1:-}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=${PY:-/usr/bin/python3}
case "$MODE" in
valgrind) SAN_SKIP=${SAN_SKIP:-test_image.sh test_init_tpunode.py test_injector.py} ;;
*) SAN_SKIP=${SAN_SKIP:-test_image.sh} ;;
esac
VALGRIND_INTEGRATION=${VALGRIND_INTEGRATION:-test_init_static.sh test_init_resolve.sh
test_init_multislice.sh test_sidecar_cli.sh test_sidecar_shapes.py test_watch.py test_grpc.py
test_k8s_client.py test_injector_config.py test_topology_pb.py}
case "$MODE" in
valgrind) TPUMESH_TEST_SLOWDOWN=${TPUMESH_TEST_SLOWDOWN:-10} ;;
*) TPUMESH_TEST_SLOWDOWN=${TPUMESH_TEST_SLOWDOWN:-3} ;;
esac
export PY TPUMESH_TEST_SLOWDOWN
rc=0

skip_filter() { # prints the integration test files that are not skipped, as a FILTER list
    local t n
    for t in tests/integration/test_*.sh tests/integration/test_*.py; do
        n=$(basename "$t")
        case " $SAN_SKIP " in *" $n "*) continue ;; esac
        if [ "$MODE" = valgrind ] && [ "$VALGRIND_INTEGRATION" != all ]; then
            case " $(echo $VALGRIND_INTEGRATION) " in *" $n "*) ;; *) continue ;; esac
        fi
        echo "$n"
    done
}
# Runs the integration tests one file at a time (tests/run.sh's FILTER takes one substring).
# A test that starts the programs under $WRAP itself (and adapts to it) gets the real build
# and WRAP (valgrind mode: the second and third arguments); the others get the build directory.
run_integration() { # build-dir [real-build wrap]
    local b=$1 real=${2:-$1} wrap=${3:-} n out sums dp df ds p=0 f=0 s=0
    for n in $(skip_filter); do
        [ -z "${FILTER:-}" ] || [[ "integration/$n" == *"$FILTER"* ]] || continue
        if [ -n "$wrap" ] && grep -q 'environ.get("WRAP"' "tests/integration/$n"; then
            out=$(BUILD=$real WRAP=$wrap ONLY=integration FILTER="integration/$n" tests/run.sh 2>&1)
        else
            out=$(BUILD=$b WRAP='' ONLY=integration FILTER="integration/$n" tests/run.sh 2>&1)
        fi
        echo "$out" | grep -E '^(ok|FAIL) |^    \|' || true
        sums=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p')
        if [ -z "$sums" ]; then
            echo "FAIL integration/$n: tests/run.sh printed no summary line"
            sums="0 1 0"
        fi
        read -r dp df ds <<<"$sums"
        p=$((p + dp)) f=$((f + df)) s=$((s + ds))
    done
    echo "$p passed, $f failed, $s skipped"
    [ "$f" -eq 0 ]
}

echo "== not run with $MODE (see the header): $SAN_SKIP; TPUMESH_TEST_SLOWDOWN=$TPUMESH_TEST_SLOWDOWN"
if [ "$MODE" = valgrind ] && [ "$VALGRIND_INTEGRATION" != all ]; then
    echo "== integration tests under valgrind:" $VALGRIND_INTEGRATION "(the others run under ASan)"
fi
case "$MODE" in
asan)
    LOGS=$BUILD/sanitizer-logs
    rm -rf "$LOGS"
    mkdir -p "$LOGS"
    export ASAN_OPTIONS="log_path=$LOGS/asan:detect_leaks=1:abort_on_error=0"
    export UBSAN_OPTIONS="log_path=$LOGS/ubsan:print_stacktrace=1:halt_on_error=1"
    echo "== unit tests and corpus replays (ASan + UBSan)"
    BUILD=$BUILD ONLY="unit fuzz" FILTER=${FILTER:-} tests/run.sh | grep -E '^(FAIL|failed:)|^    \||passed, [0-9]+ failed, [0-9]+ skipped$'
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    echo "== integration tests (ASan + UBSan programs)"
    run_integration "$BUILD" || rc=1
    reports=$(find "$LOGS" -type f | sort)
    ;;
valgrind)
    VG=$BUILD/valgrind
    LOGS=$VG/logs
    rm -rf "$VG"
    mkdir -p "$LOGS" "$VG/bin" "$VG/tests/tools"
    OPTS="-q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect"
    for e in "$BUILD"/*; do
        case "$(basename "$e")" in bin | tests | valgrind | test-logs) continue ;; esac
        ln -s "$e" "$VG/$(basename "$e")"
    done
    for p in "$BUILD"/bin/* "$BUILD"/tests/test_* "$BUILD"/tests/tools/*; do
        if [ ! -f "$p" ] || [ ! -x "$p" ]; then continue; fi
        w=$VG/${p#"$BUILD"/}
        printf '#!/bin/sh\nexec valgrind %s --log-file=%s/%%p.log %s "$@"\n' "$OPTS" "$LOGS" "$p" >"$w"
        chmod 0755 "$w"
    done
    echo "== unit tests and corpus replays (valgrind)"
    BUILD=$BUILD ONLY="unit fuzz" FILTER=${FILTER:-} WRAP="valgrind $OPTS" tests/run.sh |
        grep -E '^(FAIL|failed:)|^    \||passed, [0-9]+ failed, [0-9]+ skipped$'
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    echo "== integration tests (programs under valgrind)"
    run_integration "$VG" "$BUILD" "valgrind $OPTS --log-file=$LOGS/%p.log" || rc=1
    # With -q a log holds only errors and warnings; these lines start an error report.
    reports=$(grep -lE 'Invalid (read|write|free)|uninitialised|are (definitely|indirectly) lost|Mismatched free|Syscall param|overlap in' \
        "$LOGS"/*.log 2>/dev/null | sort)
    ;;
*)
    echo "usage: BUILD=<dir> tests/sanitize.sh asan|valgrind" >&2
    exit 2
    ;;
esac

if [ -z "$reports" ]; then
    echo "sanitizer-reports: 1 passed, 0 failed"
else
    for r in $reports; do
        echo "== report $r"
        head -n 40 "$r" | sed 's/^/    | /'
    done
    echo "sanitizer-reports: 0 passed, 1 failed ($(echo "$reports" | wc -l) processes reported errors)"
    rc=1
fi
exit $rc
