#!/bin/bash
# bench/sidecar/check.sh - `make bench-check`: the sidecar's cost per pod event against the budget
# in bench/sidecar/budget.json, on issue 21's stream at CI size (1,024 pods of an Indexed Job,
# 5,000 MODIFIED events in bursts of 100, 2 % of them IP changes). Two runs of check.py:
#   1. the sidecar under callgrind: instructions per event (does not depend on the machine's load);
#   2. the sidecar and the in-repo Python client (py_sidecar.py) on the same stream: their CPU
#      ratio (both slowed alike by a busy machine), and the sidecar's memory.
# Each figure is printed with its limit; exits 1 when one is over. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
export BUILD
budget=bench/sidecar/budget.json
args=(--pods 1024 --events 5000 --ip-share 0.02 --burst 100 --budget "$budget")
pass=0
fail=0
run() { # label args...
    local label=$1
    shift
    echo "== bench-check: $label"
    if "$PY" bench/sidecar/check.py "${args[@]}" "$@"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
    fi
}
run "instructions per event (callgrind)" --callgrind --only instructions_per_event
run "CPU against the Python client, memory" --python --only cpu_ratio_vs_python,rss_anon_peak_kib,vmhwm_kib
echo "bench-check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
