#!/bin/sh
# scripts/build-openssl.sh - a minimal static OpenSSL (libssl.a, libcrypto.a) for tpumesh-init,
# tpumesh-sidecar and the minimal libcurl of build-curl.sh.
#
#   scripts/build-openssl.sh [--fetch-only] OUT_DIR [CACHE_DIR]   (the Makefile runs it once per BUILD)
#
# OpenSSL 3's default provider references every algorithm it has, so a static link of Debian's
# libcrypto.a pulls all of it in: 2.2 MiB of the sidecar's 3.2 MiB text was libcrypto, and over
# HTTPS the kernel maps the whole text segment into memory in large page-cache folios. This
# builds OpenSSL from Debian's own source of the bookworm version (the upstream tarball plus
# every patch in debian/patches/series: the same security fixes, the same debian-<arch> target
# flags and default security level 2 as the installed libssl3, the same OPENSSLDIR, so the
# system's openssl.cnf and /usr/lib/ssl/certs are found as before) with only what a TLS 1.2/1.3
# client of kube-apiserver and Google APIs, and the libwebsockets server, meet:
#   kept: TLS 1.2 and 1.3; ECDHE with X25519, P-256, P-384 (and P-521, the same code); RSA
#   (PKCS#1 v1.5 and PSS), ECDSA and Ed25519 certificates and keys in PEM/DER, PKCS#8, PKCS#12
#   (curl's API); AES-GCM, AES-CBC (TLS 1.2 suites some servers still pick), ChaCha20-Poly1305;
#   SHA-1 (old certificate chains), SHA-2, SHA-3 and MD5 (TLS 1.2's MD5+SHA-1 for RSA key
#   exchange with old peers; OpenSSL 3.0 cannot configure them out); HMAC, HKDF and the TLS PRF;
#   the CTR DRBG seeded from getrandom; X.509 verification (name and IP checks, CRLs); ALPN and
#   SNI; the error strings curl and lws print; threads, sockets, stdio; the ENGINE API and NPN
#   (gRPC's TLS code in tpumesh-init calls them).
#   dropped: see NO_FEATURES below, each line says why.
# Only the two libraries are built (`make build_libs`: no apps, tests or documents): ~2 minutes
# on 2 cores. Both programs link it (tpumesh-init's gRPC too), never next to Debian's.
#
# Output: OUT_DIR/openssl/lib/{libssl,libcrypto}.a and OUT_DIR/openssl/include/openssl/*.h (the
# headers of this configuration: opensslconf.h says OPENSSL_NO_OCSP, OPENSSL_NO_DH, ... so
# libcurl compiled against them leaves those out). Link `libssl.a libcrypto.a -lpthread`.
# Cached: nothing is rebuilt when OUT_DIR/openssl/.stamp holds this script's key (its own and
# debian-source.sh's checksums, the pins and the compiler; the stamp also names the Debian
# version built); the downloaded files are kept in CACHE_DIR (default OUT_DIR) and reused when
# their SHA-256 matches. --fetch-only stops once both source tarballs are downloaded and verified.
#
# Sources: the pinned revision from the pool of its suite (PIN_SUITE: bookworm, pool/main/o/openssl
# of http://deb.debian.org/debian, or bookworm-security, pool/updates/main/o/openssl of
# http://deb.debian.org/debian-security), every file checked by SHA-256. When it has left the
# pool (every security or point release moves OpenSSL to a newer revision or 3.0.x), the
# version named by the gpgv-verified bookworm-security index, else (no openssl there, or no
# 3.0.x) by the bookworm index (scripts/debian-source.sh says how; the archive keyring holds
# the security archive's keys). That may be a newer 3.0.x upstream, its tarball verified with
# the hash of the signed index: OpenSSL keeps the ABI within 3.0, which Debian's
# libwebsockets.a was built for. A 3.1 or later is refused.
# The pin is bookworm's 3.0.20-1~deb12u2, not bookworm-security's newer 3.0.22-1~deb12u2: the
# signed bookworm-security index (2026-11-21) lists openssl_3.0.22-1~deb12u2.debian.tar.xz
# (SHA-256 48971306c5df8124daea7f2bd0de2be7d711e18f2f53711c11327293732e42aa) but
# deb.debian.org/debian-security answers 404 for it and for the .dsc (the .orig.tar.gz,
# 67ebca7e...ef81, and the binary packages download); a pin must be downloaded and checked.
# To pin a new Debian version: take the .orig.tar.gz and .debian.tar.xz SHA-256 from the signed
# Sources entry of its suite (or the .dsc), download both from that pool and check them, and
# update UPSTREAM, ORIG_SHA256, DEB_REV, DEB_SHA256 and PIN_SUITE.
#
# Needs: cc, make, perl, tar, gzip, xz, patch, sha256sum, dpkg, curl or wget, and (for a
# superseded pin) gpgv and debian-archive-keyring (scripts/deps.sh).
# Env: CC (default cc; gcc when CC rejects Debian's target flags), JOBS (parallel make, default
# 2), DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security; either derived from OPENSSL_MIRROR when that ends in
# the pin's pool directory), OPENSSL_MIRROR (the pin's pool directory, default its archive's
# pool/main/o/openssl or pool/updates/main/o/openssl), DEBIAN_KEYRING (default
# /usr/share/keyrings/debian-archive-keyring.gpg), and OPENSSL_PIN_SUITE, OPENSSL_UPSTREAM,
# OPENSSL_DEB_REV, OPENSSL_DEB_SHA256, OPENSSL_ORIG_SHA256 to override the pins (tests, or
# trying a version before pinning it). CFLAGS, CPPFLAGS, LDFLAGS and LIBS of the caller are
# ignored.
set -eu

TAG=build-openssl
PKG=openssl
POOL=pool/main/o/openssl
SUITE=bookworm
# The security suite first: Debian's OpenSSL security releases reach it weeks before a point
# release folds them into bookworm (bookworm-security had 3.0.22-1~deb12u2 when bookworm had
# 3.0.20-1~deb12u2); bookworm when it has no openssl or no 3.0.x.
SOURCES="debian-security bookworm-security pool/updates/main/o/openssl debian bookworm $POOL"
PIN_SUITE=${OPENSSL_PIN_SUITE:-bookworm}
UPSTREAM=${OPENSSL_UPSTREAM:-3.0.20}
UPSTREAM_MATCH='3.0.*'
UPSTREAM_WHY="Debian's libwebsockets.a is built for the OpenSSL 3.0 ABI (move to the new series together with the system libssl-dev)"
DEB_REV=${OPENSSL_DEB_REV:-1~deb12u2}
ORIG_SHA256=${OPENSSL_ORIG_SHA256:-c80a01dfc70ece4dc21168932c37739042d404d46ccc81a5986dd75314ecda6f}
DEB_SHA256=${OPENSSL_DEB_SHA256:-7279efe85c359500c95aa88347e3395dd303d7566e2bb818d80d96e0c3bb9629}
MIRROR_ENV=${OPENSSL_MIRROR:-}

# What a TLS 1.2/1.3 client of kube-apiserver and Google APIs, and the libwebsockets HTTP
# server, never meet. Everything here was checked: libcurl configures without it,
# Debian's libwebsockets.a and libgrpc.a link, the TLS integration tests pass.
NO_FEATURES="
 no-shared no-module no-dso no-afalgeng no-padlockeng no-ui-console no-async
 no-ssl3 no-tls1 no-tls1_1 no-dtls no-dgram no-srtp no-sctp no-ktls no-psk no-srp
 no-ssl-trace no-weak-ssl-ciphers no-multiblock
 no-dh no-dsa no-ec2m no-gost no-sm2 no-sm3 no-sm4
 no-aria no-camellia no-seed no-idea no-cast no-bf no-des no-rc2 no-rc4 no-rc5
 no-md2 no-md4 no-mdc2 no-rmd160 no-whirlpool no-blake2 no-siphash
 no-cmac no-siv no-ocb no-scrypt
 no-cms no-ts no-cmp no-ct no-ocsp no-rfc3779
 no-comp no-zlib no-legacy no-rdrand no-filenames no-tests no-unit-test"
# Why each group goes (OpenSSL's INSTALL.md names them):
#  - shared, module, dso, the AF_ALG and VIA PadLock engines, ui-console, async: a static
#    library; no loadable providers or engines (Debian ships none the programs use), no console
#    password prompts (keys are never encrypted), no async crypto jobs (they need an engine).
#  - SSLv3, TLS 1.0/1.1, DTLS and datagram BIOs, SRTP, SCTP, kernel TLS, PSK, SRP, the trace,
#    export and RC4 suites, multiblock (TLS 1.0-1.2 CBC write pipelining): protocols neither
#    kube-apiserver (Go's crypto/tls: TLS 1.2+) nor Google's front ends speak with us.
# Kept although the sidecar never calls them: the ENGINE API and NPN, which gRPC's TLS code in
# tpumesh-init calls (Debian compiled it against the full headers); 47 KiB of the sidecar's
# text, against two OpenSSL builds or tpumesh-init on Debian's full one (0.7 MiB more text).
#  - finite-field DH (Go never negotiates DHE; X25519/P-256 ECDHE instead), DSA, binary curves,
#    GOST, SM2/3/4: key types no Kubernetes or Google certificate uses.
#  - ARIA, Camellia, SEED, IDEA, CAST, Blowfish, DES/3DES, RC2/4/5, MD2/4, MDC2, RIPEMD-160,
#    Whirlpool, BLAKE2, SipHash, CMAC, SIV, OCB, scrypt: no TLS 1.2/1.3 suite we offer uses
#    them (3DES and RC2 only decrypt legacy PKCS#12 files, which the programs never read).
#  - CMS, time stamps, CMP, certificate transparency, OCSP (curl checks OCSP only when asked,
#    CURLOPT_SSL_VERIFYSTATUS, which the programs never set), RFC 3779 IP delegation.
#  - compression (TLS compression is CRIME), the legacy provider, RDRAND as a seed source
#    (Debian disables it too), source file names in error records, test hooks.
# Debian's hardening flags (dpkg-buildflags), with -Os for -O2 (as Alpine builds OpenSSL): the
# hot paths (AES-GCM, ChaCha20-Poly1305, SHA, P-256, X25519, bignum multiplication) are
# assembly either way; the C code (ASN.1, X.509, providers, the TLS state machine) shrinks by a
# fifth, 0.3 MiB of the sidecar's text (-O2: 1,946 KiB of libcrypto + libssl text, -Os:
# 1,620), with handshakes and bulk transfer within the noise of a 2-core machine.
SSL_CFLAGS="-Os -g0 -fstack-protector-strong -D_FORTIFY_SOURCE=2"

FETCH_ONLY=0
if [ "${1:-}" = --fetch-only ]; then
    FETCH_ONLY=1
    shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 [--fetch-only] OUT_DIR [CACHE_DIR]" >&2
    exit 2
fi
OUT=$1
CACHE=${2:-$1}
CC=${CC:-cc}
# Debian's target flags include -fzero-call-used-regs (GCC 11, clang 15): with a compiler that
# rejects it (clang 14 of `make asan`), OpenSSL is built with gcc, as Debian builds it; it was
# never instrumented (Debian's libcrypto.a before it, and the caller's CFLAGS are dropped).
SSL_CC=$CC
if ! printf 'int main(void) { return 0; }\n' |
    "$CC" -x c -fzero-call-used-regs=used-gpr -o /dev/null - >/dev/null 2>&1; then
    SSL_CC=gcc
fi
LIB=$(dirname "$0")/debian-source.sh
# shellcheck source=scripts/debian-source.sh
. "$LIB"
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
DEST=$OUT/openssl
PINS=$(printf '%s %s %s %s %s' "$PIN_SUITE" "$UPSTREAM" "$DEB_REV" "$DEB_SHA256" "$ORIG_SHA256" | sha256sum | cut -c1-8)
KEY="$(cat "$0" "$LIB" | sha256sum | cut -c1-16) pins=$PINS $($SSL_CC -dumpfullversion -dumpversion 2>/dev/null | head -n 1) $SSL_CC"

# The stamp is "KEY openssl=UPSTREAM-REVISION": any version verified by debian-source.sh.
if [ "$FETCH_ONLY" = 0 ] && [ -f "$DEST/.stamp" ] && [ -f "$DEST/lib/libssl.a" ] && [ -f "$DEST/lib/libcrypto.a" ]; then
    case "$(cat "$DEST/.stamp")" in "$KEY openssl="*) exit 0 ;; esac
fi

ds_need "$SSL_CC" make perl tar gzip xz patch sha256sum
ds_init
ds_fetch
if [ "$FETCH_ONLY" = 1 ]; then
    echo "$TAG: fetched and verified $CACHE/$ORIG and $CACHE/$DEBTAR (version $UP-$REV)"
    exit 0
fi

# Debian's per-architecture targets (debian/patches/debian-targets.patch) carry its flags.
ARCH=$(dpkg --print-architecture 2>/dev/null) || ds_die "dpkg --print-architecture failed (a Debian system is needed for the debian-<arch> target)"

WORK=$OUT/openssl-build
rm -rf "$WORK" "$DEST"
mkdir -p "$WORK"
START=$(date +%s)
SRC=$WORK/openssl-$UP
tar -xzf "$CACHE/$ORIG" -C "$WORK"
[ -d "$SRC" ] || ds_die "$ORIG does not unpack into openssl-$UP"
xz -dc "$CACHE/$DEBTAR" | tar -xf - -C "$SRC"
ds_apply_patches "$SRC" "$WORK/patch.log"
echo "$TAG: openssl $UP-$REV, $NPATCHES Debian patches applied; configuring debian-$ARCH with $SSL_CC"

# Configure reads CC, CFLAGS, CPPFLAGS, LDFLAGS and LDLIBS from the environment: the calling
# make's flags (tpumesh's -I/-D, sanitizers, libFuzzer) are not OpenSSL's, and the inner make
# is not part of the caller's jobserver. --prefix and --openssldir as Debian's (debian/rules):
# OPENSSLDIR is where openssl.cnf and the default CA directory are looked up.
unset CFLAGS CPPFLAGS LDFLAGS LDLIBS LIBS MAKEFLAGS MFLAGS MAKELEVEL
# shellcheck disable=SC2086
if ! (cd "$WORK" && mkdir -p obj && cd obj &&
    CC="$SSL_CC" perl "$SRC/Configure" $NO_FEATURES --prefix=/usr --openssldir=/usr/lib/ssl \
        --libdir=lib "debian-$ARCH" $SSL_CFLAGS >"$WORK/configure.log" 2>&1); then
    echo "$TAG: Configure failed; last lines of $WORK/configure.log:" >&2
    tail -n 15 "$WORK/configure.log" >&2
    exit 1
fi
if ! make -C "$WORK/obj" -j"${JOBS:-2}" build_libs >"$WORK/make.log" 2>&1; then
    echo "$TAG: make failed; last lines of $WORK/make.log:" >&2
    tail -n 20 "$WORK/make.log" >&2
    exit 1
fi
mkdir -p "$DEST/lib" "$DEST/include/openssl"
cp "$WORK/obj/libssl.a" "$WORK/obj/libcrypto.a" "$DEST/lib/"
# The source tree's headers, then the ones Configure generated for this configuration.
cp "$SRC"/include/openssl/*.h "$DEST/include/openssl/"
cp "$WORK"/obj/include/openssl/*.h "$DEST/include/openssl/"
(cd "$WORK/obj" && perl configdata.pm -o) >"$DEST/features.txt"
rm -rf "$WORK"
printf '%s\n' "$KEY openssl=$UP-$REV" >"$DEST/.stamp"
echo "$TAG: $DEST/lib/libssl.a, libcrypto.a (OpenSSL $UP-$REV) in $(($(date +%s) - START)) s"
