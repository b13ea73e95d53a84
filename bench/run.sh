#!/bin/bash
# bench/run.sh - `make bench`: every benchmark, each printing ratios against the peers it
# measures in the same run (never asserted in tests). BENCH=init|k8s_client|sidecar|injector runs one.
# The full set takes several minutes on a 2-core machine.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
export BUILD
run() { case " ${BENCH:-init k8s_client sidecar injector} " in *" $1 "*) return 0 ;; esac; return 1; }
if run init; then
    echo "== bench/init: tpumesh-init start-up (static GKE path, gRPC path, API path)"
    "$PY" bench/init/bench_init.py --build "$BUILD" --runs "${RUNS:-100}"
fi
if run k8s_client; then
    echo "== bench/k8s_client: LIST + watch ingestion vs python3-kubernetes and kubectl"
    "$PY" bench/k8s_client/bench.py --build "$BUILD"
fi
if run sidecar; then
    echo "== bench/sidecar: sidecar vs a Python sidecar and kubectl get pods -w"
    "$PY" bench/sidecar/bench.py
fi
if run injector; then
    echo "== bench/injector: admission latency at 200 connections vs the same webhook in Python"
    "$PY" bench/injector/bench.py --build "$BUILD"
fi
