#!/bin/bash
# tests/integration/test_chart_scope.sh - which namespaces a chart install's injector serves, and
# that a second install cannot add a second webhook for the same pods. The chart's webhook
# serves the release namespace unless injector.namespaceSelector says otherwise; its
# templates/validate.yaml looks up (Helm's lookup, here against the kube-apiserver simulator
# with `helm template --dry-run=server`) the tpumesh webhooks already in the cluster and refuses
# an install that overlaps one. Needs $BUILD/helm (make deps).
. "$(dirname "$0")/lib.sh"
CHART=$ROOT/charts/tpumesh
helms=()
for v in 3.17.2 4.1.4; do [ -x "$BUILD/helm/$v/helm" ] && helms+=("$BUILD/helm/$v/helm"); done
if [ ${#helms[@]} -eq 0 ]; then
    fail "Helm 3 and 4 are under $BUILD/helm" "run: make deps"
    done_testing
    exit
fi
export KUBECONFIG=/dev/null HELM_CACHE_HOME=$TMP/helm-cache HELM_CONFIG_HOME=$TMP/helm-config

"$PY" "$ROOT/tests/sim/kube-apiserver/kube_apiserver_sim.py" >"$TMP/sim.out" 2>"$TMP/sim.err" &
SIM_PID=$!
on_exit "kill $SIM_PID"
wait_for 30 grep -q '^READY' "$TMP/sim.out" || { fail "simulator starts" "$(cat "$TMP/sim.err")"; done_testing; exit; }
URL=$(sed -n 's/^READY .*url=\([^ ]*\).*/\1/p' "$TMP/sim.out")

# webhook NAME-OF-DOC: the MutatingWebhookConfiguration of `helm template` with the given args, as JSON
webhook_json() {
    "${helms[0]}" template "$@" --show-only templates/injector-webhook.yaml | "$PY" -c '
import json, sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["kind"] == "MutatingWebhookConfiguration":
        print(json.dumps(d))'
}
create() { curl -sf -H 'Content-Type: application/json' -X POST --data-binary @- \
    "$URL/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations" >/dev/null; }
delete() { curl -sf -X DELETE "$URL/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/$1" >/dev/null; }

sel=$(webhook_json tpumesh "$CHART" -n training | "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["webhooks"][0]["namespaceSelector"], sort_keys=True))')
check_eq "default: the webhook serves the release namespace only" \
    '{"matchLabels": {"kubernetes.io/metadata.name": "training"}}' "$sel"

for H in "${helms[@]}"; do
    v=$(basename "$(dirname "$H")")
    # install RELEASE NS [args]: helm template --dry-run=server against the simulator (lookup sees it)
    # Helm 4 also maps every rendered object to the server's API resources, which the
    # simulator has only for pods, workloads and webhooks: "resource mapping not found" comes
    # after the templates (and their lookups) rendered, so it counts as accepted here.
    install() { local r=$1 ns=$2; shift 2
        "$H" template "$r" "$CHART" -n "$ns" --dry-run=server --disable-openapi-validation --kube-apiserver "$URL" "$@" >/dev/null 2>"$TMP/err" && return 0
        ! grep -q "execution error" "$TMP/err" && grep -q "resource mapping not found" "$TMP/err"; }
    check "helm $v: a first install in namespace training" install tpumesh training
    webhook_json tpumesh "$CHART" -n training | create
    check "helm $v: the same release again (an upgrade) is not refused" install tpumesh training
    check "helm $v: an install in another namespace (team-b) is not refused" install tpumesh team-b
    if install other training; then
        fail "helm $v: a second release in namespace training is refused"
    else
        check "helm $v: a second release in namespace training is refused, naming the webhook and what to do" \
            grep -q "tpumesh's injector is already installed for these pods: the webhook tpumesh-injector-training (service training/tpumesh-injector) serves namespaces matching .*--set injector.enabled=false" "$TMP/err"
    fi
    check "helm $v: a second release in namespace training with injector.enabled=false (ServiceAccount and Role only)" \
        install other training --set injector.enabled=false
    if install shared tpumesh-system --set injector.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=training; then
        fail "helm $v: an install whose namespaceSelector selects training is refused"
    else
        ok "helm $v: an install whose namespaceSelector selects training is refused"
    fi
    delete tpumesh-injector-training
    # A webhook with no namespaceSelector serves every namespace (what this chart rendered by default before).
    webhook_json tpumesh "$CHART" -n legacy | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
d["webhooks"][0].pop("namespaceSelector")
print(json.dumps(d))' | create
    if install tpumesh team-b; then
        fail "helm $v: with a webhook for every namespace already there, an install is refused"
    else
        check "helm $v: with a webhook for every namespace already there, an install is refused (saying so)" \
            grep -q "serves every namespace" "$TMP/err"
    fi
    delete tpumesh-injector-legacy
done
done_testing
