#!/bin/bash
# tests/integration/test_chart_run.sh - runs tpumesh-init and tpumesh-sidecar exactly as
# k8s/job-v5litepod-16.yaml, k8s/first-job-cpu.yaml, k8s/jobset-multislice.yaml and the chart's helm test pod
# declare them (args, env, downward API, volumes) against the kube-apiserver simulator, and
# tpumesh-init as k8s/legacy-tpu-node.yaml declares it against the tf-master simulator, and
# checks what the kubelet would see: init exits 0, the startup/readiness/liveness probe
# paths, the published worker list, readiness dropping when a peer goes, SIGTERM -> 0.
# See tests/validate/podrun.js. Needs node, tests/validate/node_modules and the programs.
. "$(dirname "$0")/lib.sh"
V=$ROOT/tests/validate
if ! command -v node >/dev/null 2>&1 || [ ! -d "$V/node_modules/yaml" ]; then
    skip_needs "$(basename "$0")" node "node and tests/validate/node_modules are not installed (run: make deps)"
    done_testing
    exit
fi
BUILD=$BUILD PY=$PY timeout "$(scaled 300)" node "$V/podrun.js"
