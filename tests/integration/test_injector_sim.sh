#!/bin/bash
# tests/integration/test_injector_sim.sh - tpumesh-injector behind the kube-apiserver
# simulator's mutating admission, driven by the real kubectl: the chart's webhook
# configuration and certificate, labelled JobSet pods injected on `kubectl create -f`, the
# injected pod validated (schema, restricted profile, wiring) and run (tpumesh-init and the
# sidecar, as podrun.js runs pods), denial, warning, reinvocation, timeout and failure
# policies. See tests/validate/injected.js. Needs node, tests/validate/node_modules, kubectl.
. "$(dirname "$0")/lib.sh"
V=$ROOT/tests/validate
if ! command -v node >/dev/null 2>&1 || [ ! -d "$V/node_modules/yaml" ]; then
    skip_needs "$(basename "$0")" node "node and tests/validate/node_modules are not installed (run: make deps)"
    done_testing
    exit
fi
if ! command -v kubectl >/dev/null 2>&1; then
    skip_needs "$(basename "$0")" kubectl "kubectl is not installed (run: make deps)"
    done_testing
    exit
fi
BUILD=$BUILD PY=$PY timeout "$(scaled 300)" node "$V/injected.js"
