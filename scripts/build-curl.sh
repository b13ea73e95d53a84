#!/bin/sh
# scripts/build-curl.sh - a minimal static libcurl for tpumesh-init and tpumesh-sidecar.
#
#   scripts/build-curl.sh [--fetch-only] OUT_DIR [CACHE_DIR]   (the Makefile runs it once per BUILD)
#
# Debian's libcurl4 links LDAP, RTMP (-> GnuTLS, p11-kit, nettle, gmp), SSH, GSS-API/Kerberos,
# PSL, IDN, nghttp2, brotli and zstd: 30-odd shared libraries that cost ~4 MB of resident
# pages in every process and ~5 ms at every start, for features the programs never use. This
# builds libcurl.a from Debian's own source of the same version (the upstream tarball plus
# every patch in debian/patches/series, so it carries the same security fixes as the
# installed package) with only what the programs need: HTTP/1.1 and HTTPS (OpenSSL), gzip
# (zlib), proxies (also from the environment), IPv6, the threaded resolver, the headers API,
# socketpair (curl_multi_wakeup) and verbose error strings (curl_easy_strerror).
#
# TLS is the minimal static OpenSSL of scripts/build-openssl.sh, built first into the same
# OUT_DIR (OUT_DIR/openssl): curl's configure then compiles out what that OpenSSL lacks
# (OCSP stapling checks), and the programs link libcurl.a with it.
#
# Output: OUT_DIR/curl/lib/libcurl.a and OUT_DIR/curl/include/curl/*.h. Link with
# `libssl.a libcrypto.a -lz -lpthread` after it.
# Cached: nothing is rebuilt when OUT_DIR/curl/.stamp holds this script's key (its own and
# debian-source.sh's checksums, the pins, the compiler and the OpenSSL build's stamp; the
# stamp also names the Debian revision built); the
# downloaded files are kept in CACHE_DIR (default OUT_DIR) and reused when their SHA-256
# matches. --fetch-only stops once both source tarballs are downloaded and verified.
#
# Sources: Debian's pool, every file checked by SHA-256; when the pinned revision has left the
# pool, the revision named by the gpgv-verified bookworm index (scripts/debian-source.sh, shared
# with build-openssl.sh, says how). The upstream version must stay UPSTREAM: the programs
# compile against the system's curl headers of that version.
# To pin a new Debian revision: take its .debian.tar.xz SHA-256 from the bookworm Sources
# entry (or the .dsc) and update DEB_REV and DEB_SHA256.
#
# Needs: cc, make, tar, gzip, xz, patch, sha256sum, curl or wget, and (for a superseded pin) gpgv and
# debian-archive-keyring (scripts/deps.sh).
# Env: CC (default cc), JOBS (parallel make, default 2), DEBIAN_MIRROR (default
# http://deb.debian.org/debian; derived from CURL_MIRROR when that ends in /pool/main/c/curl),
# CURL_MIRROR (the pool directory, default DEBIAN_MIRROR/pool/main/c/curl), DEBIAN_KEYRING
# (default /usr/share/keyrings/debian-archive-keyring.gpg), and CURL_DEB_REV, CURL_DEB_SHA256,
# CURL_ORIG_SHA256 to override the pins (tests, or trying a revision before pinning it).
# CFLAGS, CPPFLAGS, LDFLAGS and LIBS of the caller are ignored.
set -eu

TAG=build-curl
PKG=curl
POOL=pool/main/c/curl
SUITE=bookworm
UPSTREAM=7.88.1
UPSTREAM_MATCH=$UPSTREAM
UPSTREAM_WHY="the programs compile against the system's curl headers of $UPSTREAM (update them together with the system libcurl)"
DEB_REV=${CURL_DEB_REV:-10+deb12u15}
ORIG_SHA256=${CURL_ORIG_SHA256:-cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7}
DEB_SHA256=${CURL_DEB_SHA256:-961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b}
MIRROR_ENV=${CURL_MIRROR:-}

# The features, each named: `curl_version_info()` and `tpumesh-* --version` show the result.
# Debian's own CA locations (debian/rules), so the system bundle is the default.
CONFIGURE_ARGS="--disable-shared --enable-static --with-pic --disable-dependency-tracking
 --with-zlib --enable-ipv6 --enable-threaded-resolver --enable-http --enable-proxy
 --enable-headers-api --enable-socketpair --enable-verbose --enable-http-auth
 --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt --with-ca-path=/etc/ssl/certs
 --disable-ftp --disable-file --disable-ldap --disable-ldaps --disable-rtsp --disable-dict
 --disable-telnet --disable-tftp --disable-pop3 --disable-imap --disable-smb --disable-smtp
 --disable-gopher --disable-mqtt --disable-websockets --disable-manual --disable-libcurl-option
 --disable-ntlm --disable-ntlm-wb --disable-crypto-auth --disable-tls-srp --disable-unix-sockets
 --disable-cookies --disable-doh --disable-mime --disable-dateparse --disable-netrc
 --disable-progress-meter --disable-dnsshuffle --disable-get-easy-options --disable-alt-svc
 --disable-hsts --without-brotli --without-zstd --without-libpsl --without-libidn2
 --without-librtmp --without-libssh2 --without-libssh --without-nghttp2 --without-nghttp3
 --without-ngtcp2 --without-gssapi --without-libgsasl --without-hyper
 --without-zsh-functions-dir --without-fish-functions-dir"
# Debian's hardening flags (dpkg-buildflags).
CURL_CFLAGS="-O2 -g0 -fstack-protector-strong -D_FORTIFY_SOURCE=2"

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
LIB=$(dirname "$0")/debian-source.sh
# shellcheck source=scripts/debian-source.sh
. "$LIB"
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
DEST=$OUT/curl
OSSL=$OUT/openssl
PINS=$(printf '%s %s %s' "$DEB_REV" "$DEB_SHA256" "$ORIG_SHA256" | sha256sum | cut -c1-8)
KEY="$(cat "$0" "$LIB" | sha256sum | cut -c1-16) pins=$PINS $($CC -dumpfullversion -dumpversion 2>/dev/null | head -n 1) $CC"

if [ "$FETCH_ONLY" = 0 ]; then
    if [ ! -f "$OSSL/lib/libssl.a" ] || [ ! -f "$OSSL/lib/libcrypto.a" ] || [ ! -f "$OSSL/.stamp" ]; then
        echo "$TAG: no OpenSSL build in $OSSL: run scripts/build-openssl.sh $OUT first" >&2
        exit 1
    fi
    KEY="$KEY ssl=$(sha256sum "$OSSL/.stamp" | cut -c1-8)"
    # The stamp is "KEY curl=UPSTREAM-REVISION": any revision verified by debian-source.sh.
    if [ -f "$DEST/.stamp" ] && [ -f "$DEST/lib/libcurl.a" ]; then
        case "$(cat "$DEST/.stamp")" in "$KEY curl=$UPSTREAM-"*) exit 0 ;; esac
    fi
fi

ds_need "$CC" make tar gzip xz patch sha256sum
ds_init
ds_fetch
if [ "$FETCH_ONLY" = 1 ]; then
    echo "$TAG: fetched and verified $CACHE/$ORIG and $CACHE/$DEBTAR (revision $REV)"
    exit 0
fi

WORK=$OUT/curl-build
rm -rf "$WORK" "$DEST"
mkdir -p "$WORK"
START=$(date +%s)
SRC=$WORK/curl-$UP
tar -xzf "$CACHE/$ORIG" -C "$WORK"
xz -dc "$CACHE/$DEBTAR" | tar -xf - -C "$SRC"

# Every patch of the series in order, except the two Debian itself pops before its OpenSSL
# build (debian/rules: 90_gnutls and 99_nss make the GnuTLS and NSS flavours). Patches to
# configure.ac or Makefile.am only matter to Debian's autoreconf; the shipped configure is
# used here (maintainer mode stays off, so make never tries to regenerate it).
ds_apply_patches "$SRC" "$WORK/patch.log" 90_gnutls.patch 99_nss.patch
echo "$TAG: curl $UP-$REV, $NPATCHES Debian patches applied; configuring"

# The flags of the calling make (tpumesh's -I/-D, sanitizers, libFuzzer) are not curl's, and
# the inner make is not part of the caller's jobserver. configure finds the static OpenSSL
# through --with-openssl=DIR (DIR/include, DIR/lib; no pkg-config file there).
unset CPPFLAGS LDFLAGS LIBS MAKEFLAGS MFLAGS MAKELEVEL PKG_CONFIG_PATH
# shellcheck disable=SC2086
if ! (cd "$WORK" && mkdir -p obj && cd obj &&
    CC="$CC" CFLAGS="$CURL_CFLAGS" PKG_CONFIG_LIBDIR="$OSSL/lib/pkgconfig" \
        "$SRC/configure" $CONFIGURE_ARGS --with-openssl="$OSSL" >"$WORK/configure.log" 2>&1); then
    echo "$TAG: configure failed; last lines of $WORK/configure.log and obj/config.log:" >&2
    tail -n 15 "$WORK/configure.log" >&2
    exit 1
fi
if ! make -C "$WORK/obj/lib" -j"${JOBS:-2}" libcurl.la >"$WORK/make.log" 2>&1; then
    echo "$TAG: make failed; last lines of $WORK/make.log:" >&2
    tail -n 20 "$WORK/make.log" >&2
    exit 1
fi
mkdir -p "$DEST/lib" "$DEST/include/curl"
cp "$WORK/obj/lib/.libs/libcurl.a" "$DEST/lib/libcurl.a"
cp "$SRC"/include/curl/*.h "$DEST/include/curl/"
sed -n '/^  curl version:/,/^  Features:/p' "$WORK/configure.log" >"$DEST/features.txt"
rm -rf "$WORK"
printf '%s\n' "$KEY curl=$UP-$REV" >"$DEST/.stamp"
echo "$TAG: $DEST/lib/libcurl.a in $(($(date +%s) - START)) s:" \
    "$(sed -n 's/^ *Protocols: *//p' "$DEST/features.txt");" \
    "$(sed -n 's/^ *Features: *//p' "$DEST/features.txt")"
