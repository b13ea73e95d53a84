#!/bin/sh
# scripts/trainer-deps.sh - the virtual environments the real-runtime tests
# (tests/trainers/) run TensorFlow and JAX in: $BUILD/venv-tf and $BUILD/venv-jax,
# made with Debian's python3 (-m venv, package python3-venv) from the
# hash-pinned tests/trainers/requirements-{tf,jax}.txt.
#
# Cached: each venv carries a stamp with the sha256 of its requirements file and
# of the interpreter; it is rebuilt only when one of them changes (or the venv is
# incomplete: the stamp is written last). Installs with --require-hashes --no-deps
# --only-binary=:all:, so exactly the pinned wheels are installed and nothing is
# built or resolved here. Run by `make deps` (so `make test` and CI always have
# them); `make trainer-deps` runs it alone.
set -eu
VENVS=${TRAINER_VENVS:-build}
PY=${TRAINER_PY:-/usr/bin/python3}

venv() { # name requirements
    dir=$VENVS/venv-$1
    req=$2
    want="$(sha256sum "$req" | cut -d' ' -f1) $(sha256sum "$(readlink -f "$PY")" | cut -d' ' -f1)"
    if [ -f "$dir/.tpumesh-stamp" ] && [ "$(cat "$dir/.tpumesh-stamp")" = "$want" ]; then
        return 0
    fi
    echo "trainer-deps: creating $dir from $req (one-time; a few minutes)"
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    start=$(date +%s)
    nice -n 10 "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-input \
        --require-hashes --no-deps --only-binary=:all: -r "$req"
    echo "trainer-deps: $dir ready in $(($(date +%s) - start)) s ($(du -sh "$dir" | cut -f1))"
    echo "$want" >"$dir/.tpumesh-stamp"
}

mkdir -p "$VENVS"
venv tf tests/trainers/requirements-tf.txt
venv jax tests/trainers/requirements-jax.txt
