#!/bin/bash
# tests/integration/test_image.sh - the fast, offline half of scripts/image-test.sh
# (--static: parse the Dockerfile's runtime stage, map every library the programs load to
# its Debian package, look for private copies of libraries inside the programs) on the real
# Dockerfile and programs, and proof that each check fails when the Dockerfile or a program
# is wrong. The debootstrap + chroot half runs in `make image-test` (CI).
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

# Probes linked (without --as-needed) with the Makefile's library list, all shared, standing
# in for the programs: every library they load must map to a runtime package, and every
# runtime library package must be loaded. A third program stands in for the next one
# (tpumesh-injector): the Dockerfile must copy it too.
LIBS="-lcurl -lwebsockets -lgrpc -lgpr -lpthread -lprotobuf-c -lcjson -lyaml -lm"
mkdir -p "$TMP/probe/bin"
printf 'int main(void){return 0;}\n' >"$TMP/probe.c"
# shellcheck disable=SC2086 # one word per library
if gcc "$TMP/probe.c" -o "$TMP/probe/bin/tpumesh-init" -Wl,--no-as-needed $LIBS 2>"$TMP/cc.err"; then
    cp "$TMP/probe/bin/tpumesh-init" "$TMP/probe/bin/tpumesh-sidecar"
    cp "$TMP/probe/bin/tpumesh-init" "$TMP/probe/bin/tpumesh-injector"
    BUILD=$TMP/probe "$IT" --static >"$TMP/probe.out" 2>&1
    check_eq "the runtime stage provides exactly the shared libraries of the Makefile's link line" \
        "0" "$(grep -c '^not ok' "$TMP/probe.out")"
    check "every program in the build directory is checked (tpumesh-injector too)" \
        grep -q "tpumesh-injector: libgrpc.so.29 (libgrpc29) is installed" "$TMP/probe.out"
else
    fail "probe program links" "$(cat "$TMP/cc.err")"
fi

# A program with a private copy of a library inside must fail, with symbols and stripped.
# (The probes are only inspected, never run: the libcurl one leaves libcurl's own
# dependencies unresolved, as Debian ships no static archives of several of them.)
# static_probe NAME SOURCE LINK-ARGS TEXT
static_probe() {
    local name=$1 src=$2 link=$3 text=$4 d=$TMP/static-$RANDOM
    mkdir -p "$d/bin"
    printf '%s\n' "$src" >"$d/p.c"
    # shellcheck disable=SC2086
    if ! gcc "$d/p.c" -o "$d/bin/tpumesh-init" $link 2>"$d/cc.err"; then
        fail "$name: probe links" "$(head -n 5 "$d/cc.err")"
        return
    fi
    strip -o "$d/bin/tpumesh-sidecar" "$d/bin/tpumesh-init"
    BUILD=$d "$IT" --static >"$d/out" 2>&1
    if grep -q "^not ok .* tpumesh-init embeds no private" "$d/out" &&
        grep -q "^not ok .* tpumesh-sidecar embeds no private" "$d/out" &&
        grep -qF -- "$text" "$d/out"; then
        ok "$name (with and without a symbol table)"
    else
        fail "$name (with and without a symbol table)" "$(grep -A2 'embeds no private' "$d/out")"
    fi
}
static_probe "rejects a program with zlib linked in statically" \
    '#include <zlib.h>
#include <stdio.h>
int main(int c, char **v) { z_stream z = {0}; deflateInit(&z, 6); puts(zlibVersion()); (void)c; (void)v; return 0; }' \
    "-Wl,-Bstatic -lz -Wl,-Bdynamic" "zlib (defines"
static_probe "rejects a program with OpenSSL linked in statically" \
    '#include <openssl/ssl.h>
#include <stdio.h>
int main(void) { OPENSSL_init_ssl(0, NULL); puts(OpenSSL_version(OPENSSL_VERSION)); return 0; }' \
    "-Wl,-Bstatic -lssl -lcrypto -Wl,-Bdynamic -lpthread" "OpenSSL (defines"
static_probe "rejects a program with libcurl linked in statically" \
    '#include <curl/curl.h>
#include <stdio.h>
int main(void) { puts(curl_version()); return 0; }' \
    "-Wl,-Bstatic -lcurl -Wl,-Bdynamic -Wl,--unresolved-symbols=ignore-all" "libcurl (defines"

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
expect_fail "rejects a runtime stage without libgrpc29" '/^        libgrpc29 \\$/d' "add 'libgrpc29'"
expect_fail "rejects a library package the programs do not load (libsqlite3-0)" \
    's/^        libcjson1 \\$/        libcjson1 libsqlite3-0 \\/' "remove libsqlite3-0"
expect_fail "rejects build tools in the runtime stage" 's/^        tini \\$/        tini gcc make \\/' "installs no build tools"
expect_fail "rejects a runtime stage running as root" 's/^USER 65532:65532$/USER 0:0/' "runs as USER 65532:65532"
expect_fail "rejects an image without tini" 's|^ENTRYPOINT .*|ENTRYPOINT ["/usr/local/bin/tpumesh-sidecar"]|' "ENTRYPOINT is tini"
expect_fail "rejects a Dockerfile without a runtime stage" 's/ AS runtime$/ AS final/' "no stage named 'runtime'"
expect_fail "rejects a runtime stage that leaves a program out (tpumesh-injector)" \
    's|^COPY --from=build /src/build/bin/ /usr/local/bin/$|COPY --from=build /src/build/bin/tpumesh-init /src/build/bin/tpumesh-sidecar /usr/local/bin/|' \
    "copies every program"
done_testing
