#!/bin/bash
# test_env_hostile.sh - hostile worker names, job names and slice strings
# can never make `. dtensor.env` (or tpu.env / jax.env) run anything.
#
# 1. A good v4-32 publish, then tpumesh-init is fed each hostile value in
#    each place a value enters (TPU_WORKER_HOSTNAMES, --job-name,
#    TPUMESH_JOB_NAME, --accelerator-type, --topology): every run must fail
#    with exit 2, and whatever is on the volume afterwards is sourced by sh
#    (dash) and bash: no payload runs and the variables still hold the good
#    values.
# 2. The quoting itself: each hostile string, single-quoted by
#    mesh_render_shell_quote (tests/tools/render_shquote), sourced by sh,
#    comes back byte-for-byte and runs nothing.
. "$(dirname "$0")/lib.sh"
INIT=$BIN/tpumesh-init
QUOTE=$BUILD/tests/tools/render_shquote
MARK=$TMP/marks
SANDBOX=$TMP/sandbox
mkdir -p "$MARK" "$SANDBOX"
unset KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS TPU_NAME TPU_CONFIG TPU_ACCELERATOR_TYPE TPU_TOPOLOGY \
    TPU_WORKER_ID TPU_WORKER_HOSTNAMES TPU_HOST_BOUNDS TPU_CHIPS_PER_HOST_BOUNDS
for v in $(env | sed -n 's/^\(TPUMESH_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

GOOD_HOSTS=a.svc,b.svc,c.svc,d.svc
GOOD_JOBS="a.svc:10000,b.svc:10000,c.svc:10000,d.svc:10000"
D=$TMP/vol
mkdir -p "$D"
run_init() { # run_init HOSTS [args...]
    local hosts=$1; shift
    TPU_WORKER_ID=1 TPU_WORKER_HOSTNAMES=$hosts "$INIT" --skip-init --accelerator-type v4-32 \
        --topology 2x2x4 --out-dir "$D" --annotations-file /dev/null "$@" 2>>"$TMP/log"
}
run_init "$GOOD_HOSTS"
check_eq "good publish" "0" "$?"

# Payloads: each tries to create a file in $MARK (by any shell mechanism).
payloads=(
    "\$(touch $MARK/p1)"
    "\`touch $MARK/p2\`"
    "'; touch $MARK/p3; '"
    "\"; touch $MARK/p4; \""
    "x;touch $MARK/p5"
    "x&&touch $MARK/p6"
    "x|touch $MARK/p7"
    $'x\ntouch '"$MARK/p8"
    "x > $MARK/p9"
    "\${IFS}touch\${IFS}$MARK/p10"
    "x\\'; touch $MARK/p11 #"
    "x.svc'\$(touch $MARK/p12)'"
    "$(printf 'x\rtouch %s/p13' "$MARK")"
    "\$(IFS=_;cmd=touch_$MARK/p14;\$cmd)"
)

source_all() { # source_all SHELL: source every env file, print the variables
    (cd "$SANDBOX" && "$1" -c 'set -a; for f in "$0"/dtensor.env "$0"/tpu.env "$0"/jax.env; do
        . "$f" || exit 1; done; printf "%s|%s|%s|%s\n" "$DTENSOR_JOBS" "$DTENSOR_JOB_NAME" \
        "$TPU_WORKER_HOSTNAMES" "$JAX_COORDINATOR_ADDRESS"' "$D")
}
want_vars="$GOOD_JOBS|worker|$GOOD_HOSTS|a.svc:8482"

n=0
for p in "${payloads[@]}"; do
    n=$((n + 1))
    fails=""
    # Every place a value can enter; each run must be refused with exit 2.
    run_init "a.svc,$p,c.svc,d.svc"; rc=$?; [ $rc -eq 2 ] || fails="$fails hostnames:$rc"
    run_init "$GOOD_HOSTS" --job-name "$p"; rc=$?; [ $rc -eq 2 ] || fails="$fails job-flag:$rc"
    TPUMESH_JOB_NAME=$p run_init "$GOOD_HOSTS"; rc=$?; [ $rc -eq 2 ] || fails="$fails job-env:$rc"
    run_init "$GOOD_HOSTS" --accelerator-type "$p"; rc=$?
    [ $rc -eq 2 ] || fails="$fails accel:$rc"
    run_init "$GOOD_HOSTS" --topology "$p"; rc=$?; [ $rc -eq 2 ] || fails="$fails topo:$rc"
    check_eq "payload $n: every input path refused with exit 2" "" "$fails"
    for sh in sh bash; do
        got=$(source_all "$sh")
        check_eq "payload $n: $sh sources the volume and sees the good values" "$want_vars" "$got"
    done
    check_eq "payload $n: nothing executed" "" "$(ls -A "$MARK")"
done

# The quoting on its own: round trip through sh, nothing executed.
n=0
for p in "${payloads[@]}" "plain" "" "it's" "''''" "\\" "a'b'c"; do
    n=$((n + 1))
    "$QUOTE" "$p" >"$SANDBOX/q.env"
    for sh in sh bash; do
        got=$(cd "$SANDBOX" && "$sh" -c '. ./q.env; printf "%s" "$V"'; printf x)
        check_eq "quote $n: $sh gets the value back byte-for-byte" "${p}x" "$got"
    done
done
check_eq "quoting: nothing executed" "" "$(ls -A "$MARK")"
check "the rejections named the bad value" grep -q "is not a valid RFC 1123 host name" "$TMP/log"
done_testing
