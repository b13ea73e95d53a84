#!/bin/bash
# tests/integration/test_kubesim_kubectl.sh - runs the real kubectl (client-go) against the
# kube-apiserver simulator over HTTPS with a bearer token: get -o json against the simulator's
# truth, table output, get -w -o json seeing add/modify/delete made through the control API,
# label and field selectors, --chunk-size pagination, 401/403/404 error texts. Prints TAP.
. "$(dirname "$0")/lib.sh"
trap 'exit 143' TERM INT # run lib.sh's EXIT cleanup (kills the simulator and watchers) on a timeout too

SIM=$ROOT/tests/sim/kube-apiserver/kube_apiserver_sim.py
TOKEN=kubectl-token-1
NS=ml

if ! command -v kubectl >/dev/null 2>&1; then
    skip_needs "$(basename "$0")" kubectl "kubectl is not on PATH (run: make deps)"
    done_testing
    exit
fi

echo "# $(kubectl version --client 2>/dev/null | head -1)"
export HOME=$TMP/home # kubectl's discovery cache goes under $HOME/.kube
mkdir -p "$HOME"

"$PY" "$SIM" --tls --token "$TOKEN" --state-dir "$TMP/sim" --seed 9 >"$TMP/sim.out" 2>"$TMP/sim.err" &
SIM_PID=$!
on_exit "kill $SIM_PID"
if ! wait_for 30 grep -q '^READY ' "$TMP/sim.out"; then
    fail "simulator starts" "$(cat "$TMP/sim.err")"
    done_testing
    exit 1
fi
URL=$(sed -n 's/^READY .*url=\([^ ]*\).*/\1/p' "$TMP/sim.out")
CA=$(sed -n 's/^READY .*ca=\([^ ]*\).*/\1/p' "$TMP/sim.out")
check_eq "READY line names the CA in --state-dir" "$TMP/sim/ca.crt" "$CA"
check "ready.json written" "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['url']==sys.argv[2]" \
    "$TMP/sim/ready.json" "$URL"

ctl() { "$PY" "$SIM" ctl --url "$URL" "$@"; }

write_kubeconfig() { # file token [ca]
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster:
    server: $URL
${3:+    certificate-authority: $3}
users:
- name: tester
  user:
    token: $2
contexts:
- name: sim
  context: {cluster: sim, user: tester, namespace: $NS}
current-context: sim
EOF
}
write_kubeconfig "$TMP/kubeconfig" "$TOKEN" "$CA"
write_kubeconfig "$TMP/kubeconfig-bad" "not-the-token" "$CA"
write_kubeconfig "$TMP/kubeconfig-noca" "$TOKEN"
export KUBECONFIG=$TMP/kubeconfig
K() { timeout 60 kubectl --request-timeout=20s "$@"; }

# 8 Indexed-Job workers (3 and 6 not ready), one Pending without an IP, one other job, one pod
# in another namespace.
ops='['
for i in 0 1 2 3 4 5 6 7; do
    r=true
    [ "$i" = 3 ] || [ "$i" = 6 ] && r=false
    ops="$ops{\"verb\":\"make\",\"namespace\":\"$NS\",\"index\":$i,\"name\":\"trainer-$i-k$i$i$i$i\",\"ready\":$r},"
done
ops="$ops{\"verb\":\"make\",\"namespace\":\"$NS\",\"index\":8,\"name\":\"trainer-8-k8888\",\"ip\":\"\",\"phase\":\"Pending\",\"ready\":false},"
ops="$ops{\"verb\":\"make\",\"namespace\":\"$NS\",\"job\":\"etl\",\"index\":0,\"name\":\"etl-0-aaaaa\",\"labels\":{\"tier\":\"data\"}},"
ops="$ops{\"verb\":\"make\",\"namespace\":\"other\",\"index\":0,\"name\":\"trainer-0-zzzzz\"}]"
ctlq() { ctl "$@" >/dev/null; }
check "control: batch-create 11 pods" ctlq batch --ops "$ops"

# --- the ctl CLI itself ------------------------------------------------------------------------------
cat >"$TMP/pod.json" <<'EOF'
{"metadata": {"name": "from-file", "labels": {"src": "file"}}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running", "podIP": "10.9.0.1"}}
EOF
check "ctl create --pod @file" ctlq create --namespace "$NS" --pod @"$TMP/pod.json"
check "ctl delete" ctlq delete --namespace "$NS" --name from-file
ctl nosuchverb >/dev/null 2>"$TMP/ctl.err"
rc=$?
check_eq "ctl unknown verb: exit 1 naming the verbs" "1 yes" "$rc $(grep -q 'unknown control verb' "$TMP/ctl.err" && echo yes)"
"$PY" "$SIM" ctl state >/dev/null 2>&1
check_eq "ctl without --url: exit 2" "2" "$?"
check_eq "KUBESIM_URL works for ctl" "true" \
    "$(KUBESIM_URL=$URL "$PY" "$SIM" ctl state | "$PY" -c 'import json,sys; print(str(json.load(sys.stdin)["ok"]).lower())')"

# --- kubectl get pods -o json vs the simulator's truth ------------------------------------------
K get pods -o json >"$TMP/get.json" 2>"$TMP/get.err"
ctl pods --namespace "$NS" >"$TMP/truth.json"
cmp_truth() {
    "$PY" - "$TMP/get.json" "$TMP/truth.json" <<'EOF'
import json, sys
got = json.load(open(sys.argv[1]))
truth = json.load(open(sys.argv[2]))["items"]
g = {p["metadata"]["name"]: p for p in got["items"]}
t = {p["metadata"]["name"]: p for p in truth}
assert got["kind"] == "List" or got["kind"] == "PodList", got["kind"]
assert sorted(g) == sorted(t), (sorted(g), sorted(t))
for n, p in t.items():
    # kubectl re-adds kind/apiVersion to each item; everything else must be identical.
    assert g[n] == p, "pod %s differs" % n
print("ok-compare")
EOF
}
check "kubectl get pods -o json equals the simulator's truth" cmp_truth

K get pods --no-headers >"$TMP/table.txt" 2>"$TMP/table.err"
check_eq "kubectl get pods (server-side Table): 10 rows" "10" "$(wc -l <"$TMP/table.txt" | tr -d ' ')"
check_eq "Table READY/STATUS columns for a ready worker" "trainer-0-k0000 1/1 Running" \
    "$(awk '$1=="trainer-0-k0000"{print $1, $2, $3}' "$TMP/table.txt")"
check_eq "Table READY column for a not-ready worker" "0/1" "$(awk '$1=="trainer-3-k3333"{print $2}' "$TMP/table.txt")"
check_eq "Table STATUS Pending" "Pending" "$(awk '$1=="trainer-8-k8888"{print $3}' "$TMP/table.txt")"
ip4=$("$PY" -c "import json,sys; print([p for p in json.load(open(sys.argv[1]))['items'] if p['metadata']['name']=='trainer-4-k4444'][0]['status']['podIP'])" "$TMP/truth.json")
check_eq "kubectl get pods -o wide shows the IP" "$ip4" \
    "$(K get pods -o wide --no-headers | awk '$1=="trainer-4-k4444"{print $6}')"
check_eq "kubectl get pod NAME -o jsonpath podIP" "$ip4" "$(K get pod trainer-4-k4444 -o jsonpath='{.status.podIP}')"
check_eq "jsonpath hostname.subdomain" "trainer-4.trainer" \
    "$(K get pod trainer-4-k4444 -o jsonpath='{.spec.hostname}.{.spec.subdomain}')"
check_eq "kubectl get pods -A sees both namespaces" "2" \
    "$(K get pods -A --no-headers | awk '{print $1}' | sort -u | wc -l | tr -d ' ')"

# --- discovery: kubectl uses the aggregated document (no /api/v1 request) -------------------------
rm -rf "$HOME/.kube/cache"
K get pods -v=6 >/dev/null 2>"$TMP/disc.err"
check "aggregated discovery: kubectl fetched /api" grep -q 'GET https://127.0.0.1:[0-9]*/api?timeout' "$TMP/disc.err"
if grep -q 'GET https://127.0.0.1:[0-9]*/api/v1?timeout' "$TMP/disc.err"; then
    fail "aggregated discovery: no legacy /api/v1 fallback" "$(grep 'GET ' "$TMP/disc.err")"
else
    ok "aggregated discovery: no legacy /api/v1 fallback"
fi
check_eq "kubectl api-resources" "jobs jobsets mutatingwebhookconfigurations namespaces pods statefulsets subjectaccessreviews" \
    "$(K api-resources --no-headers | awk '{print $1}' | sort | tr '\n' ' ' | sed 's/ $//')"

# --- workloads: Jobs, JobSets, StatefulSets (what tpumesh-sidecar GETs for its worker count) --------
ctlq make-jobset --namespace "$NS" --name ms --replicas 2 --completions 4
ctlq make-job --namespace "$NS" --jobset ms --index 1 --completions 4
ctlq make-job --namespace "$NS" --name solo --completions 3
ctlq make-statefulset --namespace "$NS" --name db --replicas 5
check_eq "kubectl get job -o json: an Indexed Job with completions" "Job batch/v1 Indexed 3 3" \
    "$(K get job solo -o json | "$PY" -c 'import json,sys; j=json.load(sys.stdin); s=j["spec"]; print(j["kind"], j["apiVersion"], s["completionMode"], s["completions"], s["parallelism"])')"
check_eq "kubectl get jobset -o json: replicas x template completions" "JobSet jobset.x-k8s.io/v1alpha2 slice 2 4" \
    "$(K get jobset ms -o json | "$PY" -c 'import json,sys; j=json.load(sys.stdin); r=j["spec"]["replicatedJobs"][0]; print(j["kind"], j["apiVersion"], r["name"], r["replicas"], r["template"]["spec"]["completions"])')"
check_eq "a JobSet's child Job is owned by the JobSet" "JobSet ms true" \
    "$(K get job ms-slice-1 -o jsonpath='{.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller}')"
check_eq "kubectl get statefulset -o jsonpath spec.replicas" "5" "$(K get statefulset db -o jsonpath='{.spec.replicas}')"
check_eq "kubectl get sts (short name, server-side Table)" "db 0/5" "$(K get sts --no-headers | awk '{print $1, $2}')"
check_eq "kubectl get jobs (Table)" "ms-slice-1 solo" "$(K get jobs --no-headers | awk '{print $1}' | tr '\n' ' ' | sed 's/ $//')"
check_eq "kubectl get jobs -l (label selector)" "ms-slice-1" "$(K get jobs -l jobset.sigs.k8s.io/jobset-name=ms -o name | sed 's|.*/||')"
out=$(K get job gone 2>&1)
check_eq "missing Job: NotFound text" 'Error from server (NotFound): jobs.batch "gone" not found' "$out"
out=$(K get jobset gone 2>&1)
check_eq "missing JobSet: NotFound text" 'Error from server (NotFound): jobsets.jobset.x-k8s.io "gone" not found' "$out"
ctlq forbid --namespace "$NS" --verbs get --resources statefulsets
out=$(K get statefulset db 2>&1)
check_eq "forbidden StatefulSet GET: the apiserver's 403 message" \
    'Error from server (Forbidden): statefulsets.apps "db" is forbidden: User "system:serviceaccount:default:default" cannot get resource "statefulsets" in API group "apps" in the namespace "ml"' \
    "$out"
ctlq forbid --clear

# --- selectors ----------------------------------------------------------------------------------
check_eq "label selector in (...)" "pod/trainer-1-k1111 pod/trainer-2-k2222" \
    "$(K get pods -l 'batch.kubernetes.io/job-name=trainer,batch.kubernetes.io/job-completion-index in (1,2)' -o name | sort | tr '\n' ' ' | sed 's/ $//')"
check_eq "label selector notin + exists" "pod/etl-0-aaaaa" \
    "$(K get pods -l 'tier,job-name notin (trainer)' -o name | tr '\n' ' ' | sed 's/ $//')"
check_eq "label selector !key" "9" "$(K get pods -l '!tier' -o name | wc -l | tr -d ' ')"
check_eq "label selector !=" "1" "$(K get pods -l 'job-name!=trainer' -o name | wc -l | tr -d ' ')"
check_eq "field selector status.phase=Pending" "pod/trainer-8-k8888" \
    "$(K get pods --field-selector status.phase=Pending -o name)"
check_eq "field selector metadata.name" "pod/trainer-5-k5555" \
    "$(K get pods --field-selector metadata.name=trainer-5-k5555 -o name)"

# --- --chunk-size pagination ----------------------------------------------------------------------
before=$(ctl stats | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["requests"].get("list",0))')
K get pods --chunk-size=3 -o name -v=6 >"$TMP/chunk.out" 2>"$TMP/chunk.err"
after=$(ctl stats | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["requests"].get("list",0))')
check_eq "--chunk-size=3 lists all 10 pods" "10" "$(sort -u "$TMP/chunk.out" | wc -l | tr -d ' ')"
check_eq "--chunk-size=3 takes 4 list requests" "4" "$((after - before))"
check "--chunk-size=3 sends limit=3 and continue" grep -q 'limit=3&continue=\|continue=.*limit=3' "$TMP/chunk.err"

# --- watch: kubectl get pods -w -o json ----------------------------------------------------------
timeout 60 kubectl get pods -w -o json >"$TMP/watch.json" 2>"$TMP/watch.err" &
W_PID=$!
on_exit "kill $W_PID"
count_objs() { # prints the number of JSON objects kubectl has printed so far
    "$PY" - "$TMP/watch.json" <<'EOF'
import json, sys
s = open(sys.argv[1]).read()
d = json.JSONDecoder()
i, n = 0, 0
while True:
    while i < len(s) and s[i].isspace():
        i += 1
    if i >= len(s):
        break
    try:
        _, i = d.raw_decode(s, i)
    except ValueError:
        break
    n += 1
print(n)
EOF
}
objs_at_least() { [ "$(count_objs)" -ge "$1" ]; }
# kubectl -w -o json prints the initial list as one object per pod (10), then one per event.
check "kubectl -w -o json: initial list printed" wait_for 20 objs_at_least 10
ctl make --namespace "$NS" --index 9 --name trainer-9-k9999 >/dev/null
ctl ready --namespace "$NS" --name trainer-3-k3333 --ready true >/dev/null
ctl delete --namespace "$NS" --name trainer-6-k6666 >/dev/null
check "kubectl -w -o json: 3 more objects (add, modify, delete)" wait_for 20 objs_at_least 13
sleep 0.3
kill "$W_PID" 2>/dev/null
wait "$W_PID" 2>/dev/null
check_watch() {
    "$PY" - "$TMP/watch.json" <<'EOF'
import json, sys
s = open(sys.argv[1]).read()
d = json.JSONDecoder()
i, objs = 0, []
while True:
    while i < len(s) and s[i].isspace():
        i += 1
    if i >= len(s):
        break
    o, i = d.raw_decode(s, i)
    objs.append(o)
tail = objs[10:]
names = [o["metadata"]["name"] for o in tail]
assert names == ["trainer-9-k9999", "trainer-3-k3333", "trainer-6-k6666"], names
ready = [c["status"] for c in tail[1]["status"]["conditions"] if c["type"] == "Ready"]
assert ready == ["True"], ready
rvs = [int(o["metadata"]["resourceVersion"]) for o in tail]
assert rvs == sorted(rvs) and len(set(rvs)) == 3, rvs
print("ok-watch")
EOF
}
check "kubectl -w -o json: the added, modified (now Ready) and deleted pods, RVs increasing" check_watch

# table watch: kubectl get pods -w shows the Terminating row of a graceful delete
timeout 60 kubectl get pods -w >"$TMP/watch.txt" 2>"$TMP/watchtxt.err" &
WT_PID=$!
on_exit "kill $WT_PID"
rows_at_least() { [ "$(grep -c . "$TMP/watch.txt")" -ge "$1" ]; }
check "kubectl -w (Table): header + 10 rows" wait_for 20 rows_at_least 11
ctl delete --namespace "$NS" --name trainer-7-k7777 --grace 30 >/dev/null
check "kubectl -w (Table): graceful delete shows Terminating" wait_for 20 grep -q 'trainer-7-k7777 .*Terminating' "$TMP/watch.txt"
kill "$WT_PID" 2>/dev/null
wait "$WT_PID" 2>/dev/null

# kubectl get -w (watchtools.UntilWithoutRetry) ends with exit 0 when the server ends the body cleanly
timeout 60 kubectl get pods -w >"$TMP/watch4.txt" 2>"$TMP/watch4.err" &
W4_PID=$!
on_exit "kill $W4_PID"
w4_rows() { [ "$(grep -c . "$TMP/watch4.txt")" -ge 2 ]; }
wait_for 20 w4_rows
ctl cut --mode clean >/dev/null
w4_gone() { ! kill -0 "$W4_PID" 2>/dev/null; }
if wait_for 10 w4_gone; then
    wait "$W4_PID"
    check_eq "kubectl get -w exits 0 when the watch ends cleanly (cut clean)" "0" "$?"
else
    fail "kubectl get -w exits 0 when the watch ends cleanly (cut clean)" "still running"
fi

# --output-watch-events prints the event types
timeout 60 kubectl get pods -w -o json --output-watch-events >"$TMP/watch2.json" 2>"$TMP/watch2.err" &
W2_PID=$!
on_exit "kill $W2_PID"
check "--output-watch-events: initial events printed" wait_for 20 grep -q 'trainer-9-k9999' "$TMP/watch2.json"
ctl labels --namespace "$NS" --name trainer-0-k0000 --set phase=one >/dev/null
check "--output-watch-events: MODIFIED event" wait_for 20 grep -q '"type":"MODIFIED"' "$TMP/watch2.json"
kill "$W2_PID" 2>/dev/null
wait "$W2_PID" 2>/dev/null

# --- writes through the API: kubectl run / kubectl delete (graceful, waits for the DELETED) ----------
check_eq "kubectl run creates a pod" "pod/probe created" "$(K run probe --image=busybox 2>&1)"
check_eq "the created pod is in the simulator's truth" "Pending" \
    "$(ctl get --namespace "$NS" --name probe | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["pod"]["status"]["phase"])')"
out=$(K run probe --image=busybox 2>&1)
check_eq "kubectl run twice: AlreadyExists" 'Error from server (AlreadyExists): pods "probe" already exists' "$out"
timeout 60 kubectl get pods -w -o json --output-watch-events --field-selector metadata.name=trainer-5-k5555 \
    >"$TMP/watch3.json" 2>"$TMP/watch3.err" &
W3_PID=$!
on_exit "kill $W3_PID"
check "watch of one pod started" wait_for 20 grep -q 'trainer-5-k5555' "$TMP/watch3.json"
check_eq "kubectl delete waits for the simulated kubelet" 'pod "trainer-5-k5555" deleted' \
    "$(K delete pod trainer-5-k5555 2>&1)"
check "graceful delete seen as MODIFIED with deletionTimestamp, then DELETED" \
    wait_for 10 "$PY" -c '
import json, sys
s = open(sys.argv[1]).read(); d = json.JSONDecoder(); i = 0; evs = []
while True:
    while i < len(s) and s[i].isspace(): i += 1
    if i >= len(s): break
    o, i = d.raw_decode(s, i); evs.append(o)
t = [(e["type"], bool(e["object"]["metadata"].get("deletionTimestamp"))) for e in evs]
assert t == [("ADDED", False), ("MODIFIED", True), ("DELETED", True)], t
' "$TMP/watch3.json"
kill "$W3_PID" 2>/dev/null
wait "$W3_PID" 2>/dev/null
K delete pod probe --wait=false >/dev/null 2>&1

# --- errors: kubectl's texts ------------------------------------------------------------------------
out=$(KUBECONFIG=$TMP/kubeconfig-bad K get pods 2>&1)
check_eq "bad token: kubectl says Unauthorized" "error: You must be logged in to the server (Unauthorized)" "$out"
out=$(K get pod nope 2>&1)
check_eq "missing pod: NotFound text" 'Error from server (NotFound): pods "nope" not found' "$out"
ctl forbid --namespace secret --verbs list >/dev/null
out=$(K get pods -n secret 2>&1)
check_eq "forbidden: kubectl prints the apiserver's 403 message" \
    'Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:default:default" cannot list resource "pods" in API group "" in the namespace "secret"' \
    "$out"
out=$(KUBECONFIG=$TMP/kubeconfig-noca K get pods 2>&1)
case "$out" in
*"certificate signed by unknown authority"*) ok "TLS: without the sim CA kubectl refuses the certificate" ;;
*) fail "TLS: without the sim CA kubectl refuses the certificate" "$out" ;;
esac
ctl token --token rotated-2 >/dev/null
out=$(K get pods 2>&1)
check_eq "rotated token: the old one is refused" "error: You must be logged in to the server (Unauthorized)" "$out"
check_eq "rotated token: the new one works" "9" "$(K --token rotated-2 get pods --no-headers | wc -l | tr -d ' ')"

done_testing
