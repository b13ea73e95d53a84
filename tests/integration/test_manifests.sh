#!/bin/bash
# tests/integration/test_manifests.sh - validates k8s/ and charts/tpumesh without a
# kube-apiserver: tests/validate/validate.js (Kubernetes OpenAPI schemas with strict fields,
# JobSet CRD schema, restricted Pod Security, RBAC, values.schema.json; `helm lint --strict`
# and `helm template` with the real Helm 3 and Helm 4 over a matrix of values and with a chart
# that has tpumesh as a dependency; k8s/ = helm template). Needs node,
# tests/validate/node_modules and $BUILD/helm (`make deps` installs all three).
. "$(dirname "$0")/lib.sh"
V=$ROOT/tests/validate

if ! command -v node >/dev/null 2>&1; then
    skip_needs "$(basename "$0")" node "node is not installed (run: make deps: Debian's nodejs and npm)"
    done_testing
    exit
fi
if [ ! -d "$V/node_modules/kubernetes-models" ] || [ ! -d "$V/node_modules/ajv" ]; then
    skip_needs "$(basename "$0")" node "tests/validate/node_modules is not installed (run: make deps: npm install in tests/validate)"
    done_testing
    exit
fi

# It prints its own TAP lines; tests/run.sh counts every "ok"/"not ok" line.
BUILD=$BUILD node "$V/validate.js"
