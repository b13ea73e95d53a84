#!/bin/bash
# tests/integration/test_image.sh - the fast, offline half of scripts/image-test.sh
# (--static: parse the Dockerfile's runtime stage, map every library the programs load to
# its Debian package) on the real Dockerfile, and proof that the check fails when the
# Dockerfile is wrong. The debootstrap + chroot half runs in `make image-test` (CI).
. "$(dirname "$0")/lib.sh"
IT=$ROOT/scripts/image-test.sh

# The real programs and the real Dockerfile.
if [ -x "$BIN/tpumesh-init" ] && [ -x "$BIN/tpumesh-sidecar" ]; then
    if BUILD=$BUILD "$IT" --static >"$TMP/real.out" 2>&1; then
        ok "image-test --static passes for the built programs ($(grep -c '^ok' "$TMP/real.out") checks)"
    else
        fail "image-test --static passes for the built programs" "$(grep -A3 '^not ok' "$TMP/real.out")"
    fi
else
    fail "programs are built in $BIN" "run: make BUILD=${BUILD#"$ROOT"/} all"
fi

# A probe linked (without --as-needed) the way the Makefile links the programs (libcurl,
# libwebsockets, OpenSSL, zlib, gRPC and its dependencies static, everything else shared),
# standing in for the finished programs: every shared library it loads must map to a
# runtime package, and every runtime library package must be loaded.
mkdir -p "$TMP/probe/bin"
printf 'int main(void){return 0;}\n' >"$TMP/probe.c"
# shellcheck disable=SC2046
if gcc "$TMP/probe.c" -o "$TMP/probe/bin/tpumesh-init" -Wl,--no-as-needed \
    -Wl,-Bstatic -lwebsockets -lcap $(pkg-config --static --libs grpc) -lssl -lcrypto -lz \
    -Wl,-Bdynamic -l:libstdc++.so.6 -lpthread -lprotobuf-c -lcjson -lyaml -lm 2>"$TMP/cc.err"; then
    cp "$TMP/probe/bin/tpumesh-init" "$TMP/probe/bin/tpumesh-sidecar"
    BUILD=$TMP/probe "$IT" --static >"$TMP/probe.out" 2>&1
    check_eq "the runtime stage provides exactly the shared libraries of the programs' link line" \
        "0" "$(grep -c '^not ok' "$TMP/probe.out")"
else
    fail "probe program links" "$(cat "$TMP/cc.err")"
fi

# expect_fail NAME SED-EXPR TEXT: a mutated Dockerfile must fail, and say TEXT.
expect_fail() {
    local name=$1 expr=$2 text=$3
    sed -e "$expr" "$ROOT/Dockerfile" >"$TMP/Dockerfile.bad"
    if cmp -s "$ROOT/Dockerfile" "$TMP/Dockerfile.bad"; then
        fail "$name" "the mutation '$expr' changed nothing"
        return
    fi
    if DOCKERFILE=$TMP/Dockerfile.bad BUILD=$TMP/probe "$IT" --static >"$TMP/bad.out" 2>&1; then
        fail "$name" "image-test passed a bad Dockerfile"
    elif grep -qF -- "$text" "$TMP/bad.out"; then
        ok "$name"
    else
        fail "$name" "failed, but without '$text':" "$(grep -A2 '^not ok' "$TMP/bad.out" | head -n 6)"
    fi
}
expect_fail "rejects a runtime stage without libcjson1" '/^        libcjson1 \\$/d' "add 'libcjson1'"
expect_fail "rejects a library package the programs do not load (libcurl4: linked statically)" \
    's/^        libcjson1 \\$/        libcjson1 libcurl4 \\/' "remove libcurl4"
expect_fail "rejects a runtime stage without libstdc++6" '/^        libstdc++6 \\$/d' "add 'libstdc++6'"
expect_fail "rejects build tools in the runtime stage" 's/^        tini \\$/        tini gcc make \\/' "installs no build tools"
expect_fail "rejects a runtime stage running as root" 's/^USER 65532:65532$/USER 0:0/' "runs as USER 65532:65532"
expect_fail "rejects an image without tini" 's|^ENTRYPOINT .*|ENTRYPOINT ["/usr/local/bin/tpumesh-sidecar"]|' "ENTRYPOINT is tini"
expect_fail "rejects a Dockerfile without a runtime stage" 's/ AS runtime$/ AS final/' "no stage named 'runtime'"
done_testing
