#!/bin/bash
# test_init_tpunode_vmpreflight.sh - tpumesh-init's TPU VM preflight (initialize.c):
# fake device directories (--dev-dir), libtpu lock files held by another process
# (TPUMESH_LOCK_DIR and $HOME), exit codes and last lines.
# The devices are FIFOs: opening one would block, so a run that finishes proves we never
# open a device. The lock is tested with F_GETLK and never created when absent.
. "$(dirname "$0")/lib.sh"

INIT=$BIN/tpumesh-init
HOLDERS=()
on_exit 'for p in "${HOLDERS[@]+"${HOLDERS[@]}"}"; do kill "$p"; done'

# run NAME ARGS... : runs tpumesh-init with a clean env; sets RC and LAST (last stderr line)
run() {
    local name=$1; shift
    mkdir -p "$TMP/$name/out"
    env -i PATH="$PATH" HOME="${RUN_HOME:-$TMP/home}" TPUMESH_LOCK_DIR="$TMP/lock" \
        TPUMESH_SYS_DIR="${RUN_SYS:-$TMP/sys-empty}" \
        timeout "$(scaled 20)" "$INIT" --out-dir "$TMP/$name/out" --annotations-file /dev/null "$@" \
        2>"$TMP/$name/err"
    RC=$?
    LAST=$(grep -v '^$' "$TMP/$name/err" | tail -n 1)
}

# expect NAME RC NEEDLE
expect() {
    check_eq "$1: exit $2" "$2" "$RC"
    case "$LAST" in
    *"$3"*) ok "$1: last line names the problem" ;;
    *) fail "$1: last line names the problem" "last: $LAST" "want: $3" ;;
    esac
}

# devices DIR KIND N : N fake device FIFOs accel0.. or vfio/0.. under DIR
devices() {
    local d=$1 kind=$2 n=$3 i
    mkdir -p "$d"
    for ((i = 0; i < n; i++)); do
        if [ "$kind" = accel ]; then mkfifo "$d/accel$i"; else mkdir -p "$d/vfio" && mkfifo "$d/vfio/$i"; fi
    done
}

# hold FILE : a process that holds libtpu's lockf() lock on FILE; sets HOLDER
hold() {
    local out=$TMP/holder.$RANDOM.out
    mkdir -p "$(dirname "$1")"
    "$PY" -c '
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(60)' "$1" >"$out" &
    HOLDER=$!
    HOLDERS+=("$HOLDER")
    wait_for 5 grep -q held "$out" || fail "lock holder started"
}

mkdir -p "$TMP/home" "$TMP/lock"
V4=(--tpu local --accelerator-type v4-8)

run nodev "${V4[@]}" --dev-dir "$TMP/nodev"
expect "no device directory" 3 "TPUs not found in the cluster. Failed in initialization: no TPU device"

# The host has TPU chips on its PCI bus (sysfs) but the container got none.
for i in 0 1 2 3; do
    mkdir -p "$TMP/sys/bus/pci/devices/0000:00:0$i.0"
    echo 0x1ae0 >"$TMP/sys/bus/pci/devices/0000:00:0$i.0/vendor"
    echo 0x005e >"$TMP/sys/bus/pci/devices/0000:00:0$i.0/device"
done
mkdir -p "$TMP/sys/bus/pci/devices/0000:00:1f.0"
echo 0x8086 >"$TMP/sys/bus/pci/devices/0000:00:1f.0/vendor"
echo 0x005e >"$TMP/sys/bus/pci/devices/0000:00:1f.0/device"
RUN_SYS=$TMP/sys run nodevpci "${V4[@]}" --dev-dir "$TMP/nodev"
expect "TPUs on the PCI bus, none in the container" 3 \
    "the host has 4 TPU chip(s) on its PCI bus but none is visible under '$TMP/nodev'"

devices "$TMP/two" accel 2
run two "${V4[@]}" --dev-dir "$TMP/two"
expect "2 of 4 chips" 3 "2 TPU device(s) under '$TMP/two' but v4-8 has 4 chips per host"

devices "$TMP/eight" accel 8
run eight "${V4[@]}" --dev-dir "$TMP/eight"
expect "8 devices for a 4-chip host" 3 "8 TPU devices under '$TMP/eight' but v4-8 has 4 chips per host"

devices "$TMP/four" accel 4
mkfifo "$TMP/four/accelerator" # not accel<N>: ignored
run four "${V4[@]}" --dev-dir "$TMP/four"
check_eq "4 accel FIFOs: exit 0 (devices never opened)" 0 "$RC"
grep -q "TPU VM preflight ok: 4 accel device(s)" "$TMP/four/err" &&
    ok "4 accel: preflight logged" || fail "4 accel: preflight logged" "$(cat "$TMP/four/err")"
[ ! -e "$TMP/lock/libtpu_lockfile" ] && ok "no lock file created" || fail "no lock file created"

devices "$TMP/vfio" vfio 4
mkfifo "$TMP/vfio/vfio/vfio" # the VFIO container node is not a TPU
run vfio "${V4[@]}" --dev-dir "$TMP/vfio"
check_eq "vfio/<n> devices: exit 0" 0 "$RC"

run skip "${V4[@]}" --dev-dir "$TMP/nodev" --skip-init
check_eq "--skip-init skips the preflight" 0 "$RC"

# A stale lock file (no holder) is fine, and we leave it unlocked.
: >"$TMP/lock/libtpu_lockfile"
run stale "${V4[@]}" --dev-dir "$TMP/four"
check_eq "stale lock file: exit 0" 0 "$RC"

hold "$TMP/lock/libtpu_lockfile"
run held "${V4[@]}" --dev-dir "$TMP/four"
expect "/tmp/libtpu_lockfile held" 4 "The TPU is already in use by process with pid $HOLDER"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null
rm -f "$TMP/lock/libtpu_lockfile"

hold "$TMP/lock/libtpu_lock_1234/libtpu_lockfile"
run peruser "${V4[@]}" --dev-dir "$TMP/four"
expect "per-user lock held" 4 "libtpu_lock_1234/libtpu_lockfile"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null

hold "$TMP/home2/.libtpu_lockfile"
RUN_HOME=$TMP/home2 run home "${V4[@]}" --dev-dir "$TMP/four"
expect "\$HOME/.libtpu_lockfile held" 4 "pid $HOLDER"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null

done_testing
