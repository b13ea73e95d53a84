#!/bin/sh
# scripts/build-curl.sh - a minimal static libcurl for tpumesh-init and tpumesh-sidecar.
#
#   scripts/build-curl.sh OUT_DIR [CACHE_DIR]      (the Makefile runs it once per BUILD)
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
# Output: OUT_DIR/curl/lib/libcurl.a and OUT_DIR/curl/include/curl/*.h. Link with
# `-lssl -lcrypto -lz -lpthread` after it (bin/curl-config of the build says so too).
# Cached: nothing is rebuilt when OUT_DIR/curl/.stamp holds this script's key (its own
# checksum and the compiler); the downloaded files are kept in CACHE_DIR (default OUT_DIR)
# and reused when their SHA-256 matches the pins below.
#
# Sources: deb.debian.org (CURL_MIRROR overrides the pool directory), then
# snapshot.debian.org by SHA-1 (still there after Debian supersedes this revision). Every
# file is checked against the SHA-256 pinned here, which are the values of the signed
# bookworm Sources index (dists/bookworm/main/source/Sources.xz, Release/InRelease).
# To move to a new Debian revision: take its .debian.tar.xz SHA-256 and SHA-1 from that
# Sources entry (or the .dsc) and update DEB_REV, DEB_SHA256 and DEB_SHA1.
#
# Needs: cc, make, tar, gzip, xz, patch, sha256sum and curl or wget (scripts/deps.sh).
# Env: CC (default cc), CURL_MIRROR, JOBS (parallel make, default 2). CFLAGS, CPPFLAGS,
# LDFLAGS and LIBS of the caller are ignored.
set -eu

UPSTREAM=7.88.1
DEB_REV=10+deb12u15
ORIG_SHA256=cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7
ORIG_SHA1=6ae5229c36badb822641bb14958e7d227c57611d
DEB_SHA256=961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b
DEB_SHA1=03b665ea82b1f319f6944c9473c8c9fd9980838b
MIRROR=${CURL_MIRROR:-http://deb.debian.org/debian/pool/main/c/curl}
SNAPSHOT=http://snapshot.debian.org/file

# The features, each named: `curl_version_info()` and `tpumesh-* --version` show the result.
# Debian's own CA locations (debian/rules), so the system bundle is the default.
CONFIGURE_ARGS="--disable-shared --enable-static --with-pic --disable-dependency-tracking
 --with-openssl --with-zlib --enable-ipv6 --enable-threaded-resolver --enable-http --enable-proxy
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

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 OUT_DIR [CACHE_DIR]" >&2
    exit 2
fi
OUT=$1
CACHE=${2:-$1}
CC=${CC:-cc}
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
DEST=$OUT/curl
KEY="$(sha256sum "$0" | cut -c1-16) $($CC -dumpfullversion -dumpversion 2>/dev/null | head -n 1) $CC"

if [ -f "$DEST/.stamp" ] && [ "$(cat "$DEST/.stamp")" = "$KEY" ] && [ -f "$DEST/lib/libcurl.a" ]; then
    exit 0
fi

need=""
for t in "$CC" make tar gzip xz patch sha256sum; do
    command -v "$t" >/dev/null 2>&1 || need="$need $t"
done
if ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; then
    need="$need curl-or-wget"
fi
if [ -n "$need" ]; then
    echo "build-curl: missing tools:$need (run: make deps)" >&2
    exit 1
fi

fetch() { # url file
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 2 --connect-timeout 20 -o "$2" "$1"
    else
        wget -q -T 20 -O "$2" "$1"
    fi
}

# get FILE SHA256 SHA1: CACHE/FILE verified, downloaded when missing or wrong.
get() {
    f=$CACHE/$1
    if [ -f "$f" ] && echo "$2  $f" | sha256sum -c --status; then
        return 0
    fi
    rm -f "$f" "$f.part.$$"
    for url in "$MIRROR/$1" "$SNAPSHOT/$3"; do
        echo "build-curl: fetching $url"
        if fetch "$url" "$f.part.$$"; then
            if echo "$2  $f.part.$$" | sha256sum -c --status; then
                mv "$f.part.$$" "$f"
                return 0
            fi
            echo "build-curl: $url: SHA-256 is $(sha256sum "$f.part.$$" | cut -d' ' -f1), expected $2" >&2
        fi
        rm -f "$f.part.$$"
    done
    echo "build-curl: could not get $1 with SHA-256 $2; if Debian removed this revision," \
        "pin the current one (see the header of $0)" >&2
    exit 1
}

ORIG=curl_$UPSTREAM.orig.tar.gz
DEBTAR=curl_$UPSTREAM-$DEB_REV.debian.tar.xz
get "$ORIG" "$ORIG_SHA256" "$ORIG_SHA1"
get "$DEBTAR" "$DEB_SHA256" "$DEB_SHA1"

WORK=$OUT/curl-build
rm -rf "$WORK" "$DEST"
mkdir -p "$WORK"
START=$(date +%s)
SRC=$WORK/curl-$UPSTREAM
tar -xzf "$CACHE/$ORIG" -C "$WORK"
xz -dc "$CACHE/$DEBTAR" | tar -xf - -C "$SRC"

# Every patch of the series in order, except the two Debian itself pops before its OpenSSL
# build (debian/rules: 90_gnutls and 99_nss make the GnuTLS and NSS flavours). Patches to
# configure.ac or Makefile.am only matter to Debian's autoreconf; the shipped configure is
# used here (maintainer mode stays off, so make never tries to regenerate it).
n=0
while IFS= read -r p; do
    case "$p" in '' | '#'*) continue ;; esac
    case "$p" in 90_gnutls.patch | 99_nss.patch) continue ;; esac
    if ! patch -d "$SRC" -p1 -s -N --no-backup-if-mismatch <"$SRC/debian/patches/$p" >"$WORK/patch.log" 2>&1; then
        echo "build-curl: Debian patch $p does not apply:" >&2
        cat "$WORK/patch.log" >&2
        exit 1
    fi
    n=$((n + 1))
done <"$SRC/debian/patches/series"
echo "build-curl: curl $UPSTREAM-$DEB_REV, $n Debian patches applied; configuring"

# The flags of the calling make (tpumesh's -I/-D, sanitizers, libFuzzer) are not curl's, and
# the inner make is not part of the caller's jobserver.
unset CPPFLAGS LDFLAGS LIBS MAKEFLAGS MFLAGS MAKELEVEL
# shellcheck disable=SC2086
if ! (cd "$WORK" && mkdir -p obj && cd obj &&
    CC="$CC" CFLAGS="$CURL_CFLAGS" "$SRC/configure" $CONFIGURE_ARGS >"$WORK/configure.log" 2>&1); then
    echo "build-curl: configure failed; last lines of $WORK/configure.log and obj/config.log:" >&2
    tail -n 15 "$WORK/configure.log" >&2
    exit 1
fi
if ! make -C "$WORK/obj/lib" -j"${JOBS:-2}" libcurl.la >"$WORK/make.log" 2>&1; then
    echo "build-curl: make failed; last lines of $WORK/make.log:" >&2
    tail -n 20 "$WORK/make.log" >&2
    exit 1
fi
mkdir -p "$DEST/lib" "$DEST/include/curl"
cp "$WORK/obj/lib/.libs/libcurl.a" "$DEST/lib/libcurl.a"
cp "$SRC"/include/curl/*.h "$DEST/include/curl/"
sed -n '/^  curl version:/,/^  Features:/p' "$WORK/configure.log" >"$DEST/features.txt"
rm -rf "$WORK"
printf '%s\n' "$KEY" >"$DEST/.stamp"
echo "build-curl: $DEST/lib/libcurl.a in $(($(date +%s) - START)) s:" \
    "$(sed -n 's/^ *Protocols: *//p' "$DEST/features.txt");" \
    "$(sed -n 's/^ *Features: *//p' "$DEST/features.txt")"
