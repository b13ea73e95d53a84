#!/bin/sh
# Build the pinned control plane the end-to-end tests run (tests/e2e, docs/e2e.md) into
# $BUILD/e2e/:
#
#   e2e-cluster              etcd, kube-apiserver, kube-controller-manager and kubectl in one binary
#   bin/<program>            symlinks to it, one per program
#   jobset-controller        the JobSet controller (sigs.k8s.io/jobset's main package)
#   jobset-config/           its CRDs and webhook configurations, copied from the same module
#
#   BUILD=build scripts/e2e-deps.sh                (`make e2e-deps`, `make e2e`)
#   BUILD=build scripts/e2e-deps.sh --background   (`make test`: start it under nice, log to
#                                                   $BUILD/e2e-deps.log, return at once)
#   BUILD=build scripts/e2e-deps.sh --wait         (tests/run.sh, before the e2e tests: wait for
#                                                   a background build; its log tail on failure)
#
# Pins: tests/e2e/cluster/go.mod and go.sum. Everything comes from the Go module proxy, checked
# against go.sum; nothing else is downloaded. A stamp keyed on the pins (and this script) skips the
# build when nothing changed, so a second run costs a checksum.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=$(pwd)/$BUILD/e2e
SRC=tests/e2e/cluster
K8S_VERSION=v1.35.4
BG=$BUILD/e2e-deps.bg

case "${1:-}" in
--background)
    mkdir -p "$BUILD"
    # One build at a time: .ci/run starts one before the sanitizer runs, and make test's own
    # start then finds it running (and --wait waits for that one).
    if [ -f "$BG.pid" ] && kill -0 "$(cat "$BG.pid")" 2>/dev/null; then
        echo "e2e-deps: a background build is already running (pid $(cat "$BG.pid"), log: $BG.log)"
        exit 0
    fi
    rm -f "$BG.rc"
    # setsid: the build is not in make's process group, so it survives the recipe's shell.
    setsid sh -c 'nice -n 10 "$0" >"$1.log" 2>&1; echo $? >"$1.rc"' "$0" "$BG" </dev/null >/dev/null 2>&1 &
    echo $! >"$BG.pid"
    echo "e2e-deps: building the pinned control plane in the background (log: $BG.log)"
    exit 0
    ;;
--wait)
    [ -f "$BG.pid" ] || exit 0 # nothing started in the background
    start=$(date +%s)
    while [ ! -f "$BG.rc" ] && kill -0 "$(cat "$BG.pid")" 2>/dev/null; do sleep 2; done
    rm -f "$BG.pid"
    rc=$(cat "$BG.rc" 2>/dev/null || echo 1)
    echo "e2e-deps: background build finished (exit $rc), waited $(($(date +%s) - start)) s"
    if [ "$rc" -ne 0 ]; then
        tail -n 20 "$BG.log" >&2
    fi
    exit 0 # the e2e tests report what is missing as skipped
    ;;
'') ;;
*)
    echo "usage: $0 [--background|--wait]" >&2
    exit 2
    ;;
esac

if ! command -v go >/dev/null 2>&1; then
    echo "e2e-deps: go is missing; run make deps (installs Debian's golang-go) or put Go >= 1.25 on PATH" >&2
    exit 1
fi
stamp=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$stamp" ] &&
    [ -x "$OUT/e2e-cluster" ] && [ -x "$OUT/jobset-controller" ]; then
    echo "e2e-deps: up to date ($OUT)"
    exit 0
fi
mkdir -p "$OUT/bin"
rm -f "$OUT/.stamp"

# The module proxy the machine's Go is set up with, without the fallback to version control
# ("direct"): every module comes from the proxy, and go.sum must already hold each one.
proxy=$(go env GOPROXY | tr ',|' '\n\n' | grep -v -x -e direct -e off -e '' | paste -sd, -)
if [ -z "$proxy" ]; then
    echo "e2e-deps: GOPROXY ($(go env GOPROXY)) names no module proxy; set it to the Go module proxy this machine reaches" >&2
    exit 1
fi
export GOPROXY="$proxy" GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
major=${K8S_VERSION#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=$major -X $V.gitMinor=$minor \
-X $V.gitTreeState=clean -X $V.buildDate=1970-01-01T00:00:00Z"

start=$(date +%s)
echo "e2e-deps: downloading modules (cached after the first run)"
(cd "$SRC" && go mod download)
echo "e2e-deps: building e2e-cluster (kubernetes $K8S_VERSION, etcd, kubectl) and jobset-controller"
(cd "$SRC" && go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/e2e-cluster.new" . &&
    go build -trimpath -ldflags "-s -w" -o "$OUT/jobset-controller.new" sigs.k8s.io/jobset)
mv "$OUT/e2e-cluster.new" "$OUT/e2e-cluster"
mv "$OUT/jobset-controller.new" "$OUT/jobset-controller"
for p in etcd kube-apiserver kube-controller-manager kubectl; do
    ln -sfn ../e2e-cluster "$OUT/bin/$p"
done
# The JobSet CRD from the module the controller was built from.
jobset_dir=$(cd "$SRC" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
rm -rf "$OUT/jobset-config"
mkdir -p "$OUT/jobset-config"
cp "$jobset_dir"/config/components/crd/bases/*.yaml "$OUT/jobset-config/"
cp "$jobset_dir"/config/components/webhook/manifests.yaml "$OUT/jobset-config/webhook-manifests.yaml"
chmod -R u+w "$OUT/jobset-config"
echo "$stamp" > "$OUT/.stamp"
echo "e2e-deps: built in $(($(date +%s) - start)) s into $OUT"
