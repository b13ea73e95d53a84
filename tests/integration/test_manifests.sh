#!/bin/bash
# tests/integration/test_manifests.sh - validates k8s/ and charts/tpumesh offline (no
# kube-apiserver, no helm): tests/validate/validate.js (Kubernetes OpenAPI schemas with
# strict fields, JobSet CRD schema, restricted Pod Security, RBAC, values.schema.json,
# chart rendering, k8s/ = chart) and the unit tests of its Go-template renderer.
# Needs node and tests/validate/node_modules (`make deps` runs npm install there).
. "$(dirname "$0")/lib.sh"
V=$ROOT/tests/validate

if ! command -v node >/dev/null 2>&1; then
    fail "node is installed" "run: make deps (installs Debian's nodejs and npm)"
    done_testing
    exit
fi
if [ ! -d "$V/node_modules/kubernetes-models" ] || [ ! -d "$V/node_modules/ajv" ]; then
    fail "tests/validate/node_modules is installed" "run: make deps (npm install in tests/validate)"
    done_testing
    exit
fi

# Both print their own TAP lines; tests/run.sh counts every "ok"/"not ok" line.
status=0
node "$V/validate.js" || status=1
node --test --test-reporter=tap "$V/test/gotemplate.test.js" >"$TMP/renderer.tap" 2>&1 || status=1
grep -E '^(not )?ok |^# (pass|fail)' "$TMP/renderer.tap"
exit $status
