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
# Output: OUT_DIR/curl/lib/libcurl.a and OUT_DIR/curl/include/curl/*.h. Link with
# `-lssl -lcrypto -lz -lpthread` after it (bin/curl-config of the build says so too).
# Cached: nothing is rebuilt when OUT_DIR/curl/.stamp holds this script's key (its own
# checksum, the pins and the compiler; the stamp also names the Debian revision built); the
# downloaded files are kept in CACHE_DIR (default OUT_DIR) and reused when their SHA-256
# matches. --fetch-only stops once both source tarballs are downloaded and verified.
#
# Sources, every file checked by SHA-256, in this order:
#  1. the pinned revision below: CACHE_DIR, then the pool of deb.debian.org.
#  2. when Debian has superseded it (a bookworm point or security release removes the old
#     .debian.tar.xz from the pool; snapshot.debian.org is not reachable from CI): a revision
#     resolved earlier from the signed index and kept in CACHE_DIR (curl-debian.resolved).
#  3. the signed index: dists/bookworm/InRelease, verified with gpgv against the Debian
#     archive keyring; its SHA256 list gives the hash of main/source/Sources.xz; the
#     `Package: curl` entry there gives the current version and, in Checksums-Sha256, the
#     name and hash of its .debian.tar.xz. The upstream version must still be UPSTREAM (the
#     programs compile against the system's curl headers of that version) and the entry's
#     .orig.tar.gz hash must be ORIG_SHA256; otherwise this fails and says to update the pins.
# To pin a new Debian revision: take its .debian.tar.xz SHA-256 from that Sources entry (or
# the .dsc) and update DEB_REV and DEB_SHA256.
#
# Needs: cc, make, tar, gzip, xz, patch, sha256sum, curl or wget, and for step 3 gpgv and
# debian-archive-keyring (scripts/deps.sh).
# Env: CC (default cc), JOBS (parallel make, default 2), DEBIAN_MIRROR (default
# http://deb.debian.org/debian; derived from CURL_MIRROR when that ends in /pool/main/c/curl),
# CURL_MIRROR (the pool directory, default DEBIAN_MIRROR/pool/main/c/curl), DEBIAN_KEYRING
# (default /usr/share/keyrings/debian-archive-keyring.gpg), and CURL_DEB_REV, CURL_DEB_SHA256,
# CURL_ORIG_SHA256 to override the pins (tests, or trying a revision before pinning it).
# CFLAGS, CPPFLAGS, LDFLAGS and LIBS of the caller are ignored.
set -eu

UPSTREAM=7.88.1
SUITE=bookworm
DEB_REV=${CURL_DEB_REV:-10+deb12u15}
ORIG_SHA256=${CURL_ORIG_SHA256:-cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7}
DEB_SHA256=${CURL_DEB_SHA256:-961b78bc48492c5693e4decb352ddd176f343260a8956f48b2887874048ef23b}
if [ -z "${DEBIAN_MIRROR:-}" ]; then
    case "${CURL_MIRROR:-}" in
    */pool/main/c/curl | */pool/main/c/curl/) DEBIAN_MIRROR=${CURL_MIRROR%/}; DEBIAN_MIRROR=${DEBIAN_MIRROR%/pool/main/c/curl} ;;
    *) DEBIAN_MIRROR=http://deb.debian.org/debian ;;
    esac
fi
DEBIAN_MIRROR=${DEBIAN_MIRROR%/}
MIRROR=${CURL_MIRROR:-$DEBIAN_MIRROR/pool/main/c/curl}
MIRROR=${MIRROR%/}
KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}

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
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
DEST=$OUT/curl
PINS=$(printf '%s %s %s' "$DEB_REV" "$DEB_SHA256" "$ORIG_SHA256" | sha256sum | cut -c1-8)
KEY="$(sha256sum "$0" | cut -c1-16) pins=$PINS $($CC -dumpfullversion -dumpversion 2>/dev/null | head -n 1) $CC"

# The stamp is "KEY curl=UPSTREAM-REVISION": any revision verified by one of the paths above.
if [ "$FETCH_ONLY" = 0 ] && [ -f "$DEST/.stamp" ] && [ -f "$DEST/lib/libcurl.a" ]; then
    case "$(cat "$DEST/.stamp")" in "$KEY curl=$UPSTREAM-"*) exit 0 ;; esac
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

die() {
    echo "build-curl: $*" >&2
    exit 1
}

fetch() { # url file
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 2 --connect-timeout 20 -o "$2" "$1"
    else
        wget -q -T 20 -O "$2" "$1"
    fi
}

sha_ok() { # file sha256
    [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status
}

# get FILE SHA256: CACHE/FILE verified, else downloaded from the pool and verified.
# Returns 1 (after saying why) when neither gives the file with that hash.
get() {
    f=$CACHE/$1
    if sha_ok "$f" "$2"; then
        return 0
    fi
    rm -f "$f" "$f.part.$$"
    echo "build-curl: fetching $MIRROR/$1"
    if ! fetch "$MIRROR/$1" "$f.part.$$"; then
        rm -f "$f.part.$$"
        echo "build-curl: $MIRROR/$1 could not be downloaded" >&2
        return 1
    fi
    if ! sha_ok "$f.part.$$" "$2"; then
        echo "build-curl: $MIRROR/$1: SHA-256 is $(sha256sum "$f.part.$$" | cut -d' ' -f1), expected $2" >&2
        rm -f "$f.part.$$"
        return 1
    fi
    mv "$f.part.$$" "$f"
}

IDX=""
trap 'rm -rf "$IDX"; rm -f "$CACHE"/*.part.$$' EXIT
trap 'exit 130' INT TERM HUP

# resolve_from_index: sets REV and DEBTAR to the current bookworm revision of curl, its
# .debian.tar.xz downloaded into CACHE and verified through the signed index; exits otherwise.
resolve_from_index() {
    command -v gpgv >/dev/null 2>&1 || die "gpgv is needed to verify the Debian index (run: make deps)"
    [ -r "$KEYRING" ] || die "keyring $KEYRING is not readable (install debian-archive-keyring or set DEBIAN_KEYRING)"
    IDX=$(mktemp -d "$CACHE/index.XXXXXX")
    url=$DEBIAN_MIRROR/dists/$SUITE/InRelease
    echo "build-curl: the pinned $UPSTREAM-$DEB_REV is not available; resolving the current revision from $url"
    fetch "$url" "$IDX/InRelease" || die "could not download $url; pin a revision that is in the pool (see the header of $0)"
    # --output writes only the signed text: anything outside the signature is never read.
    if ! gpgv --keyring "$KEYRING" --output "$IDX/Release" "$IDX/InRelease" >"$IDX/gpgv.log" 2>&1; then
        sed 's/^/  /' "$IDX/gpgv.log" >&2
        die "$url: the signature does not verify with $KEYRING; refusing the index"
    fi
    grep -qx "Codename: $SUITE" "$IDX/Release" || die "$url is signed but is not the $SUITE index (no 'Codename: $SUITE')"
    line=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
        s && $3 == "main/source/Sources.xz" { print $1; exit }' "$IDX/Release")
    [ -n "$line" ] || die "$url has no SHA256 entry for main/source/Sources.xz"
    src=$DEBIAN_MIRROR/dists/$SUITE/main/source/Sources.xz
    fetch "$src" "$IDX/Sources.xz" || die "could not download $src"
    sha_ok "$IDX/Sources.xz" "$line" ||
        die "$src: SHA-256 is $(sha256sum "$IDX/Sources.xz" | cut -d' ' -f1), the signed index says $line"
    # Sources is RFC 822 stanzas separated by blank lines; print the curl one's Version and
    # the continuation lines of its Checksums-Sha256 field.
    xz -dc "$IDX/Sources.xz" | awk 'BEGIN { RS = ""; FS = "\n" }
        {
            pkg = ""; ver = ""; cs = 0; sums = ""
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^[^ \t]/) { cs = 0 }
                if ($i ~ /^Package:/) { pkg = $i; sub(/^Package:[ \t]*/, "", pkg) }
                if ($i ~ /^Version:/) { ver = $i; sub(/^Version:[ \t]*/, "", ver) }
                if (cs) { sums = sums $i "\n" }
                if ($i ~ /^Checksums-Sha256:/) { cs = 1 }
            }
            if (pkg == "curl") { printf "%s\n%s", ver, sums; exit }
        }' >"$IDX/curl" || die "$src does not decompress"
    ver=$(head -n 1 "$IDX/curl")
    [ -n "$ver" ] || die "$src (verified) has no 'Package: curl' entry with a Version"
    ver=${ver#*:}
    up=${ver%-*}
    REV=${ver##*-}
    if [ "$up" != "$UPSTREAM" ] || [ "$REV" = "$ver" ]; then
        die "Debian $SUITE now has curl $ver, not upstream $UPSTREAM: the programs compile against" \
            "the system's curl headers of $UPSTREAM, so update UPSTREAM and the pins" \
            "(ORIG_SHA256, DEB_REV, DEB_SHA256) in $0 together with the system libcurl"
    fi
    case "$REV" in *[!A-Za-z0-9.+~]*) die "$src: curl revision '$REV' is not a Debian revision" ;; esac
    DEBTAR=curl_$UPSTREAM-$REV.debian.tar.xz
    orig=$(awk -v n="$ORIG" 'NR > 1 && $3 == n { print $1 }' "$IDX/curl")
    [ "$orig" = "$ORIG_SHA256" ] ||
        die "$src: curl $ver lists $ORIG with SHA-256 '${orig:-none}', pinned $ORIG_SHA256; update ORIG_SHA256 only after checking why"
    sha=$(awk -v n="$DEBTAR" 'NR > 1 && $3 == n { print $1 }' "$IDX/curl")
    [ -n "$sha" ] || die "$src: curl $ver lists no $DEBTAR in Checksums-Sha256"
    get "$DEBTAR" "$sha" ||
        die "could not get $DEBTAR with the SHA-256 $sha of the signed $SUITE index; pin a revision by hand (see the header of $0)"
    printf '%s %s\n' "$REV" "$sha" >"$CACHE/curl-debian.resolved"
    echo "build-curl: using Debian revision $UPSTREAM-$REV ($DEBTAR, SHA-256 $sha) from the gpgv-verified $SUITE index (the pinned $DEB_REV is not available)"
}

ORIG=curl_$UPSTREAM.orig.tar.gz
get "$ORIG" "$ORIG_SHA256" || die "could not get $ORIG with SHA-256 $ORIG_SHA256 (the upstream tarball never changes for $UPSTREAM)"
REV=$DEB_REV
DEBTAR=curl_$UPSTREAM-$REV.debian.tar.xz
if ! get "$DEBTAR" "$DEB_SHA256"; then
    REV=""
    if [ -f "$CACHE/curl-debian.resolved" ]; then
        read -r r s <"$CACHE/curl-debian.resolved" || true
        case "${r:-}" in '' | *[!A-Za-z0-9.+~]*) ;; *)
            if sha_ok "$CACHE/curl_$UPSTREAM-$r.debian.tar.xz" "${s:-}"; then
                REV=$r
                DEBTAR=curl_$UPSTREAM-$REV.debian.tar.xz
                echo "build-curl: using Debian revision $UPSTREAM-$REV from $CACHE (verified from the signed $SUITE index earlier, SHA-256 $s)"
            fi ;;
        esac
    fi
    if [ -z "$REV" ]; then
        resolve_from_index
    fi
fi
if [ "$FETCH_ONLY" = 1 ]; then
    echo "build-curl: fetched and verified $CACHE/$ORIG and $CACHE/$DEBTAR (revision $REV)"
    exit 0
fi

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
echo "build-curl: curl $UPSTREAM-$REV, $n Debian patches applied; configuring"

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
printf '%s\n' "$KEY curl=$UPSTREAM-$REV" >"$DEST/.stamp"
echo "build-curl: $DEST/lib/libcurl.a in $(($(date +%s) - START)) s:" \
    "$(sed -n 's/^ *Protocols: *//p' "$DEST/features.txt");" \
    "$(sed -n 's/^ *Features: *//p' "$DEST/features.txt")"
