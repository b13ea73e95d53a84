#!/usr/bin/env bash
# tests/integration/test_build_openssl.sh - scripts/build-openssl.sh --fetch-only against a fake
# Debian mirror with its two archives, debian and debian-security (python3 http.server on
# 127.0.0.1, a free port): the pinned version from the bookworm pool or (OPENSSL_PIN_SUITE) the
# bookworm-security pool, then from the cache with the mirror gone; a tampered tarball in the
# pool or the cache refused; a newer revision, and a newer 3.0.x upstream, resolved from the
# gpgv-verified bookworm-security InRelease -> Sources.xz and kept for offline use; the
# bookworm index as the last resort when bookworm-security has no openssl or no 3.0.x;
# refusals of a bad or unknown signature and another codename on either index (never passing
# to the next index), hashes that differ from the signed index or the pin, and a new upstream
# series (3.1). Also: build-curl.sh refuses to build without this OpenSSL.
# The signing key is made here in a temporary GNUPGHOME; nothing is compiled.
# shellcheck disable=SC2016 # the checks are single-quoted for eval in expect()
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPT=$ROOT/scripts/build-openssl.sh
UP=3.0.20
PIN=1~deb12u2
NEWUP=3.0.99

for t in gpg gpgv xz; do
    if ! command -v $t >/dev/null 2>&1; then
        fail "tools" "$t is missing (scripts/deps.sh: gnupg, gpgv, xz-utils)"
        done_testing
        exit
    fi
done

export GNUPGHOME=$TMP/gnupg
mkdir -m 700 "$GNUPGHOME"
on_exit "gpgconf --kill gpg-agent"
gpg_q() { gpg --batch --quiet --pinentry-mode loopback --passphrase '' "$@"; }
gpg_q --quick-gen-key "tpumesh test archive <test@invalid>" ed25519 sign never 2>"$TMP/gpg.log"
gpg_q --quick-gen-key "untrusted <other@invalid>" ed25519 sign never 2>>"$TMP/gpg.log"
gpg_q --export "test@invalid" >"$TMP/keyring.gpg"
check "test key made and exported" test -s "$TMP/keyring.gpg"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# Tiny orig tarballs (the pinned upstream and a newer 3.0.x) and .debian.tar.xz files with an
# empty series (what --fetch-only needs).
mkdir -p "$TMP/src/openssl-$UP" "$TMP/src/openssl-$NEWUP" "$TMP/src/debian/patches"
echo "fake openssl source" >"$TMP/src/openssl-$UP/README"
echo "fake newer openssl source" >"$TMP/src/openssl-$NEWUP/README"
: >"$TMP/src/debian/patches/series"
tar -czf "$TMP/orig.tar.gz" -C "$TMP/src" "openssl-$UP"
tar -czf "$TMP/orig-new.tar.gz" -C "$TMP/src" "openssl-$NEWUP"
tar -cJf "$TMP/deb-pin.tar.xz" -C "$TMP/src" debian
echo "# deb12u9" >>"$TMP/src/debian/patches/series"
tar -cJf "$TMP/deb-new.tar.xz" -C "$TMP/src" debian
export OPENSSL_ORIG_SHA256 OPENSSL_DEB_SHA256 OPENSSL_DEB_REV=$PIN OPENSSL_UPSTREAM=$UP
OPENSSL_ORIG_SHA256=$(sha "$TMP/orig.tar.gz")
OPENSSL_DEB_SHA256=$(sha "$TMP/deb-pin.tar.xz")
NEW_SHA=$(sha "$TMP/deb-new.tar.xz")
NEWORIG_SHA=$(sha "$TMP/orig-new.tar.gz")

# index DIR SUITE CODENAME KEY [VERSION] : DIR/dists/SUITE (InRelease signed by KEY, saying
# CODENAME) whose Sources lists openssl VERSION (hashes: ORIG_IN_INDEX, DEB_IN_INDEX, else the
# real ones), or no openssl without VERSION.
index() {
    local d=$1 suite=$2 codename=$3 key=$4 ver=${5:-} src=$1/dists/$2/main/source up origsha
    mkdir -p "$src"
    {
        printf 'Package: openssh\nVersion: 1:9.2p1-2\nChecksums-Sha256:\n %s 1 openssh_9.2p1.orig.tar.gz\n\n' "$NEW_SHA"
        if [ -n "$ver" ]; then
            up=${ver%-*}
            origsha=$OPENSSL_ORIG_SHA256
            [ "$up" = "$UP" ] || origsha=$NEWORIG_SHA
            printf 'Package: openssl\nBinary: openssl, libssl3\nVersion: %s\nMaintainer: x\n' "$ver"
            printf 'Checksums-Sha256:\n %s %s openssl_%s.dsc\n' "$NEW_SHA" 10 "$ver"
            printf ' %s %s openssl_%s.orig.tar.gz\n' "${ORIG_IN_INDEX:-$origsha}" 20 "$up"
            printf ' %s %s openssl_%s.debian.tar.xz\n' "${DEB_IN_INDEX:-$NEW_SHA}" 30 "$ver"
            printf 'Directory: pool/main/o/openssl\n\n'
        fi
        printf 'Package: openssl-extra\nVersion: 1.0-1\n'
    } >"$src/Sources"
    xz -k "$src/Sources"
    {
        printf 'Origin: Debian\nSuite: stable\nCodename: %s\nComponents: main\nSHA256:\n' "$codename"
        printf ' %s %s main/binary-amd64/Packages.xz\n' "$NEW_SHA" 5
        printf ' %s %s main/source/Sources.xz\n' "$(sha "$src/Sources.xz")" "$(stat -c %s "$src/Sources.xz")"
    } >"$d/dists/$suite/Release"
    gpg_q --local-user "$key" --clearsign --output "$d/dists/$suite/InRelease" "$d/dists/$suite/Release"
}

# mirror NAME VERSION [sign-key] : $TMP/www/NAME/debian and NAME/debian-security, whose pools
# (pool/main/o/openssl, pool/updates/main/o/openssl) hold the pinned upstream's orig tarball,
# 3.0.99's, and both 1~deb12u9 .debian.tar.xz files. The bookworm index lists openssl VERSION
# (codename CODENAME, default bookworm); the bookworm-security one lists openssl SEC, or none
# when SEC is unset (codename SEC_CODENAME, signed by SEC_KEY, defaults bookworm-security and
# sign-key).
MAINPOOL=debian/pool/main/o/openssl
SECPOOL=debian-security/pool/updates/main/o/openssl
mirror() {
    local d=$TMP/www/$1 key=${3:-test@invalid} pool
    for pool in "$d/$MAINPOOL" "$d/$SECPOOL"; do
        mkdir -p "$pool"
        cp "$TMP/orig.tar.gz" "$pool/openssl_$UP.orig.tar.gz"
        cp "$TMP/orig-new.tar.gz" "$pool/openssl_$NEWUP.orig.tar.gz"
        cp "$TMP/deb-new.tar.xz" "$pool/openssl_$UP-1~deb12u9.debian.tar.xz"
        cp "$TMP/deb-new.tar.xz" "$pool/openssl_$NEWUP-1~deb12u9.debian.tar.xz"
    done
    index "$d/debian" bookworm "${CODENAME:-bookworm}" "$key" "$2"
    index "$d/debian-security" bookworm-security "${SEC_CODENAME:-bookworm-security}" "${SEC_KEY:-$key}" "${SEC:-}"
}

# a: the pinned version is in the pool (no index at all).
mirror a "$UP-$PIN"
cp "$TMP/deb-pin.tar.xz" "$TMP/www/a/$MAINPOOL/openssl_$UP-$PIN.debian.tar.xz"
rm -rf "$TMP/www/a/debian/dists" "$TMP/www/a/debian-security/dists"
# as: the pinned version is in the bookworm-security pool only (no index at all).
mirror as "$UP-$PIN"
cp "$TMP/deb-pin.tar.xz" "$TMP/www/as/$SECPOOL/openssl_$UP-$PIN.debian.tar.xz"
rm -rf "$TMP/www/as/debian" "$TMP/www/as/debian-security/dists"
# p: the pinned orig tarball in the pool was altered, no index to fall back to.
mirror p "$UP-$PIN"
cp "$TMP/deb-pin.tar.xz" "$TMP/www/p/$MAINPOOL/openssl_$UP-$PIN.debian.tar.xz"
echo tampered >>"$TMP/www/p/$MAINPOOL/openssl_$UP.orig.tar.gz"
rm -rf "$TMP/www/p/debian/dists" "$TMP/www/p/debian-security/dists"
# b: the pinned revision left the pool; bookworm-security has no openssl, bookworm 1~deb12u9.
mirror b "$UP-1~deb12u9"
# s: a security release: bookworm-security has 3.0.99-1~deb12u9, bookworm still the pinned
# upstream with 1~deb12u9; the pinned files left both pools.
SEC="$NEWUP-1~deb12u9" mirror s "$UP-1~deb12u9"
rm "$TMP/www/s/$MAINPOOL/openssl_$UP.orig.tar.gz" "$TMP/www/s/$SECPOOL/openssl_$UP.orig.tar.gz"
rm "$TMP/www/s/$MAINPOOL/openssl_$NEWUP.orig.tar.gz"
# s3: bookworm-security moved to 3.1 (no 3.0.x): bookworm's 1~deb12u9 instead.
SEC="3.1.4-1" mirror s3 "$UP-1~deb12u9"
# sc, sk, st: bookworm-security's InRelease altered after signing, signed by an unknown key,
# of another codename (bookworm's index would do: it must never be read).
SEC="$NEWUP-1~deb12u9" mirror sc "$UP-1~deb12u9"
sed -i 's/^Suite: stable$/Suite: stab1e/' "$TMP/www/sc/debian-security/dists/bookworm-security/InRelease"
SEC="$NEWUP-1~deb12u9" SEC_KEY=other@invalid mirror sk "$UP-1~deb12u9"
SEC="$NEWUP-1~deb12u9" SEC_CODENAME=bookworm mirror st "$UP-1~deb12u9"
# n: a point release moved bookworm to 3.0.99; the pinned 3.0.20 files left the pool.
mirror n "$NEWUP-1~deb12u9"
rm "$TMP/www/n/$MAINPOOL/openssl_$UP.orig.tar.gz"
# q: as n, but the pool's 3.0.99 orig tarball is not the one the signed index names.
mirror q "$NEWUP-1~deb12u9"
rm "$TMP/www/q/$MAINPOOL/openssl_$UP.orig.tar.gz"
echo tampered >>"$TMP/www/q/$MAINPOOL/openssl_$NEWUP.orig.tar.gz"
mirror c "$UP-1~deb12u9"
sed -i 's/^Suite: stable$/Suite: stab1e/' "$TMP/www/c/debian/dists/bookworm/InRelease"
SEC_KEY=test@invalid mirror k "$UP-1~deb12u9" other@invalid
CODENAME=trixie mirror t "$UP-1~deb12u9"
DEB_IN_INDEX=$OPENSSL_DEB_SHA256 mirror d "$UP-1~deb12u9"
mirror u "3.1.4-1"
ORIG_IN_INDEX=$NEW_SHA mirror o "$UP-1~deb12u9"

"$PY" -u -m http.server 0 --bind 127.0.0.1 --directory "$TMP/www" >"$TMP/http.log" 2>&1 &
HTTP_PID=$!
on_exit "kill $HTTP_PID"
if ! wait_for 10 grep -q '^Serving HTTP on' "$TMP/http.log"; then
    fail "http server started" "$(cat "$TMP/http.log")"
    done_testing
    exit
fi
PORT=$(sed -n 's/^Serving HTTP on .* port \([0-9]*\) .*/\1/p' "$TMP/http.log")
ok "http server on 127.0.0.1:$PORT"

# [OUTNAME=O] run NAME [ENV...] : build-openssl --fetch-only with mirror NAME ("dead": a port
# nothing listens on), out/cache $TMP/out-O (O defaults to NAME); output in $TMP/O.log, exit
# status in RC.
run() {
    local name=$1 out=${OUTNAME:-$1} url
    shift
    url="http://127.0.0.1:$PORT/$name"
    [ "$name" != dead ] || url="http://127.0.0.1:1"
    RC=0
    env -u http_proxy -u HTTP_PROXY DEBIAN_KEYRING="$TMP/keyring.gpg" DEBIAN_MIRROR="$url/debian" \
        DEBIAN_SECURITY_MIRROR="$url/debian-security" "$@" \
        timeout 60 "$SCRIPT" --fetch-only "$TMP/out-$out" >"$TMP/$out.log" 2>&1 || RC=$?
}
has() { grep -q -- "$2" "$TMP/$1.log"; }
show() { sed 's/^/# /' "$TMP/$1.log"; }
# expect NAME LOG CMD... : ok when CMD (a check of RC and the log, in single quotes for eval)
# succeeds after a run; else the log is shown.
expect() {
    local name=$1 log=$2
    shift 2
    if "$@"; then ok "$name"; else fail "$name" "rc=$RC" "$(show "$log")"; fi
}

# (a) the pinned version is in the pool: used, no index read.
run a
expect "pinned version from the pool, index untouched" a eval \
    '[ $RC = 0 ] && has a "(version $UP-$PIN)" && ! grep -q InRelease "$TMP/http.log" &&
     [ "$(sha "$TMP/out-a/openssl_$UP-$PIN.debian.tar.xz")" = "$OPENSSL_DEB_SHA256" ] &&
     [ "$(sha "$TMP/out-a/openssl_$UP.orig.tar.gz")" = "$OPENSSL_ORIG_SHA256" ]'

# (a2) the same again with the mirror gone: both files come from the cache.
OUTNAME=a run dead
expect "pinned version reused from the cache offline" a eval \
    '[ $RC = 0 ] && has a "(version $UP-$PIN)" && ! has a fetching'

# (a3) a cached tarball altered since: refused (no pool, no index to replace it).
echo tampered >>"$TMP/out-a/openssl_$UP-$PIN.debian.tar.xz"
OUTNAME=a run dead
expect "tampered cached tarball refused" a eval \
    '[ $RC != 0 ] && has a "could not download http://127.0.0.1:1/debian-security/dists/bookworm-security/InRelease"'

# (as) a pin from the bookworm-security pool (OPENSSL_PIN_SUITE): fetched from there, no index.
run as OPENSSL_PIN_SUITE=bookworm-security
expect "pinned version from the bookworm-security pool, index untouched" as eval \
    '[ $RC = 0 ] && has as "(version $UP-$PIN)" && ! grep -q "/as/.*InRelease" "$TMP/http.log" &&
     has as "fetching http://127.0.0.1:$PORT/as/$SECPOOL/openssl_$UP-$PIN.debian.tar.xz" &&
     [ "$(sha "$TMP/out-as/openssl_$UP-$PIN.debian.tar.xz")" = "$OPENSSL_DEB_SHA256" ]'

# (p) the pool's orig tarball does not have the pinned SHA-256: refused, not kept.
run p
expect "tampered orig tarball in the pool refused" p eval \
    '[ $RC != 0 ] && has p "openssl_$UP.orig.tar.gz: SHA-256 is .*, expected $OPENSSL_ORIG_SHA256" &&
     [ ! -e "$TMP/out-p/openssl_$UP.orig.tar.gz" ]'

# (b) the pinned revision is gone, bookworm-security has no openssl: the signed bookworm index
# says 1~deb12u9 of the same upstream.
run b
expect "pinned revision missing, no openssl in bookworm-security: 1~deb12u9 from the verified bookworm index" b eval \
    '[ $RC = 0 ] && has b "the bookworm-security index has no openssl; trying the next one" &&
     has b "using Debian revision $UP-1~deb12u9 .*gpgv-verified bookworm index" &&
     has b "(version $UP-1~deb12u9)" && grep -qx "1~deb12u9 $NEW_SHA" "$TMP/out-b/openssl-debian.resolved" &&
     [ -z "$(ls -d "$TMP"/out-b/index.* 2>/dev/null)" ]'

# (s) a security release: bookworm-security's 3.0.99-1~deb12u9 from its pool, bookworm's index
# never read.
run s
expect "pinned revision missing: bookworm-security's 3.0.99 from its verified index and pool" s eval \
    '[ $RC = 0 ] && has s "using Debian revision $NEWUP-1~deb12u9 .*gpgv-verified bookworm-security index" &&
     has s "(version $NEWUP-1~deb12u9)" && ! grep -q "/s/debian/dists" "$TMP/http.log" &&
     has s "fetching http://127.0.0.1:$PORT/s/$SECPOOL/openssl_$NEWUP.orig.tar.gz" &&
     [ "$(sha "$TMP/out-s/openssl_$NEWUP.orig.tar.gz")" = "$NEWORIG_SHA" ] &&
     grep -qx "1~deb12u9 $NEW_SHA $NEWUP $NEWORIG_SHA bookworm-security" "$TMP/out-s/openssl-debian.resolved"'

# (s2) ... and reused from the cache without the network.
OUTNAME=s run dead
expect "bookworm-security revision reused from the cache offline" s eval \
    '[ $RC = 0 ] && has s "using Debian revision $NEWUP-1~deb12u9 from .*verified from the signed bookworm-security index earlier"'

# (s3) bookworm-security moved to 3.1: the last resort, bookworm's 3.0.x.
run s3
expect "no 3.0.x in bookworm-security: bookworm's from its verified index" s3 eval \
    '[ $RC = 0 ] && has s3 "the bookworm-security index has openssl 3.1.4-1, not upstream 3.0.\*; trying the next one" &&
     has s3 "using Debian revision $UP-1~deb12u9 .*gpgv-verified bookworm index" &&
     grep -qx "1~deb12u9 $NEW_SHA" "$TMP/out-s3/openssl-debian.resolved"'

# (sc, sk, st) a bookworm-security index altered, signed by an unknown key or of another
# codename: refused, and bookworm's index is not tried instead.
run sc
expect "bad signature on bookworm-security's InRelease refused" sc eval \
    '[ $RC != 0 ] && has sc "debian-security/dists/bookworm-security/InRelease: the signature does not verify" &&
     ! grep -q "/sc/debian/dists" "$TMP/http.log" && [ ! -e "$TMP/out-sc/openssl-debian.resolved" ]'
run sk
expect "bookworm-security's InRelease signed by an unknown key refused" sk eval \
    '[ $RC != 0 ] && has sk "signature does not verify" && ! grep -q "/sk/debian/dists" "$TMP/http.log"'
run st
expect "signed index of another codename as bookworm-security refused" st eval \
    '[ $RC != 0 ] && has st "is signed but is not the bookworm-security index" && ! grep -q "/st/debian/dists" "$TMP/http.log"'

# (n) a point release: bookworm now has 3.0.99, the pinned 3.0.20 left the pool entirely.
run n
expect "new 3.0.x upstream from the verified index, both hashes from it" n eval \
    '[ $RC = 0 ] && has n "using Debian revision $NEWUP-1~deb12u9 .*gpgv-verified bookworm index" &&
     has n "(version $NEWUP-1~deb12u9)" && [ "$(sha "$TMP/out-n/openssl_$NEWUP.orig.tar.gz")" = "$NEWORIG_SHA" ] &&
     grep -qx "1~deb12u9 $NEW_SHA $NEWUP $NEWORIG_SHA" "$TMP/out-n/openssl-debian.resolved"'

# (n2) ... and reused from the cache without the network.
OUTNAME=n run dead
expect "resolved 3.0.x upstream reused from the cache offline" n eval \
    '[ $RC = 0 ] && has n "using Debian revision $NEWUP-1~deb12u9 from .*verified from the signed bookworm index earlier"'

# (n3) a cached resolved orig tarball altered since: not used.
echo tampered >>"$TMP/out-n/openssl_$NEWUP.orig.tar.gz"
OUTNAME=n run dead
expect "tampered cached resolved tarball ignored" n eval \
    '[ $RC != 0 ] && has n "could not download http://127.0.0.1:1/debian-security/dists/bookworm-security/InRelease"'

# (q) the pool's 3.0.99 orig tarball is not the one the signed index names: refused.
run q
expect "orig tarball with a SHA-256 other than the index's refused" q eval \
    '[ $RC != 0 ] && has q "could not get openssl_$NEWUP.orig.tar.gz with the SHA-256 $NEWORIG_SHA of the signed bookworm index" &&
     [ ! -e "$TMP/out-q/openssl_$NEWUP.orig.tar.gz" ] && [ ! -e "$TMP/out-q/openssl-debian.resolved" ]'

# (c) an InRelease altered after signing; (k) signed by a key not in the keyring; (t) a validly
# signed index of another suite: all refused before anything is taken from the pool.
run c
expect "bad signature on InRelease refused" c eval \
    '[ $RC != 0 ] && has c "signature does not verify" && [ ! -e "$TMP/out-c/openssl_$UP-1~deb12u9.debian.tar.xz" ]'
run k
expect "InRelease signed by an unknown key refused" k eval '[ $RC != 0 ] && has k "signature does not verify"'
run t
expect "signed index of another codename refused" t eval '[ $RC != 0 ] && has t "is signed but is not the bookworm index"'

# (d) the pool's .debian.tar.xz does not have the SHA-256 of the signed index: refused.
run d
expect "debian tarball with a SHA-256 other than the index's refused" d eval \
    '[ $RC != 0 ] && has d "SHA-256 is $NEW_SHA, expected $OPENSSL_DEB_SHA256" &&
     [ ! -e "$TMP/out-d/openssl_$UP-1~deb12u9.debian.tar.xz" ] && [ ! -e "$TMP/out-d/openssl-debian.resolved" ]'

# (u) Debian moved to OpenSSL 3.1: refused with what to update.
run u
expect "new upstream series refused with instructions" u eval \
    '[ $RC != 0 ] && has u "now has openssl 3.1.4-1, not upstream 3.0.\*" && has u "update UPSTREAM and the pins"'

# (o) the index lists another orig tarball for the pinned upstream version: refused.
run o
expect "orig tarball hash differing from the pin refused" o eval \
    '[ $RC != 0 ] && has o "lists openssl_$UP.orig.tar.gz with SHA-256 .$NEW_SHA., pinned $OPENSSL_ORIG_SHA256"'

# build-curl.sh compiles against this OpenSSL: without its build it stops and says so.
RC=0
"$ROOT/scripts/build-curl.sh" "$TMP/out-curl" >"$TMP/curl.log" 2>&1 || RC=$?
expect "build-curl refuses to build without the OpenSSL build" curl eval \
    '[ $RC != 0 ] && has curl "no OpenSSL build in $TMP/out-curl/openssl: run scripts/build-openssl.sh"'

# ---- the OpenSSL this build made, through the libcurl built against it ---------------------
# A client linked exactly as the programs link them (libcurl.a, libssl.a, libcrypto.a, static)
# against `openssl s_server` (Debian's CLI): each kept feature once, each of a few dropped ones.
SSL_DIR=$BUILD/third_party/openssl
CURL_DIR=$BUILD/third_party/curl
if [ ! -f "$SSL_DIR/lib/libcrypto.a" ] || [ ! -f "$CURL_DIR/lib/libcurl.a" ] || ! command -v openssl >/dev/null 2>&1; then
    fail "the build's OpenSSL and libcurl (make all) and the openssl CLI are there" "$SSL_DIR, $CURL_DIR"
    done_testing
    exit
fi
cat >"$TMP/tlsget.c" <<'C'
#include <curl/curl.h>
#include <openssl/objects.h>
#include <openssl/ssl.h>
#include <stdio.h>
/* The SSL of a transfer is only reachable while it runs (CURLINFO_TLS_SSL_PTR): read it in
   the first write callback. */
static char info[256];
static size_t sink(char *p, size_t s, size_t n, void *u)
{
    struct curl_tlssessioninfo *ti = NULL;
    (void)p;
    if (info[0] == '\0' && curl_easy_getinfo((CURL *)u, CURLINFO_TLS_SSL_PTR, &ti) == CURLE_OK &&
        ti != NULL && ti->internals != NULL) {
        SSL *ssl = ti->internals;
        int group = SSL_get_negotiated_group(ssl);
        snprintf(info, sizeof(info), "%s %s %s", SSL_get_version(ssl),
                 SSL_CIPHER_get_name(SSL_get_current_cipher(ssl)),
                 group != 0 ? OBJ_nid2sn(group) : "none");
    }
    return s * n;
}
/* tlsget URL CAFILE [CERT KEY]: prints the protocol, cipher and key exchange group, or the
   error; with CERT and KEY (PEM files) it presents a client certificate. */
int main(int argc, char **argv)
{
    char err[CURL_ERROR_SIZE] = "";
    CURL *e = curl_easy_init();
    if ((argc != 3 && argc != 5) || e == NULL)
        return 2;
    if (argc == 5) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, argv[3]);
        curl_easy_setopt(e, CURLOPT_SSLKEY, argv[4]);
    }
    curl_easy_setopt(e, CURLOPT_URL, argv[1]);
    curl_easy_setopt(e, CURLOPT_CAINFO, argv[2]);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(e);
    curl_easy_cleanup(e);
    if (rc != CURLE_OK) {
        printf("error %d: %s\n", (int)rc, err);
        return 1;
    }
    printf("%s\n", info[0] != '\0' ? info : "no TLS session");
    return info[0] != '\0' ? 0 : 1;
}
C
if cc -o "$TMP/tlsget" -I"$CURL_DIR/include" -I"$SSL_DIR/include" "$TMP/tlsget.c" "$CURL_DIR/lib/libcurl.a" \
    "$SSL_DIR/lib/libssl.a" "$SSL_DIR/lib/libcrypto.a" -lz -lpthread 2>"$TMP/cc.log"; then
    ok "a client links libcurl.a with the minimal libssl.a/libcrypto.a"
else
    fail "a client links libcurl.a with the minimal libssl.a/libcrypto.a" "$(cat "$TMP/cc.log")"
    done_testing
    exit
fi
check "the headers say what is left out (libcurl was compiled against them)" \
    grep -q '# *define OPENSSL_NO_DH$' "$SSL_DIR/include/openssl/configuration.h"

# A CA and server certificates for 127.0.0.1 of each key type a Kubernetes or Google endpoint
# presents: RSA (PKCS#1 v1.5 and PSS signatures), ECDSA P-256 and P-384.
mkdir -p "$TMP/pki"
cd "$TMP/pki" || exit 1
ossl() { openssl "$@" >>"$TMP/pki.log" 2>&1; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other-ca
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
leaf() { # NAME NEWKEY-ARGS...
    local n=$1
    shift
    ossl req -new -nodes "$@" -keyout "$n.key" -out "$n.csr" -subj /CN=127.0.0.1 &&
        ossl x509 -req -in "$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out "$n.pem"
}
leaf rsa -newkey rsa:2048
leaf pss -newkey rsa-pss -pkeyopt rsa_keygen_bits:2048
leaf p256 -newkey ec -pkeyopt ec_paramgen_curve:P-256
leaf p384 -newkey ec -pkeyopt ec_paramgen_curve:P-384
cd "$ROOT" || exit 1
check "test certificates made" test -s "$TMP/pki/p384.pem" -a -s "$TMP/pki/pss.pem" -a -s "$TMP/pki/rsa.pem"

# [CLIENT=NAME] tls NAME EXPECT CA CERT S_SERVER-ARGS... : one s_server connection; EXPECT is
# a pattern the client's line must match (negotiated "TLSv1.3 TLS_AES_... X25519", or
# "error ..."); CLIENT names the certificate the client presents.
tls() {
    local name=$1 want=$2 ca=$3 cert=$4 port out client=()
    [ -z "${CLIENT:-}" ] || client=("$TMP/pki/$CLIENT.pem" "$TMP/pki/$CLIENT.key")
    shift 4
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    openssl s_server -quiet -accept "127.0.0.1:$port" -cert "$TMP/pki/$cert.pem" -key "$TMP/pki/$cert.key" \
        -www "$@" >"$TMP/s_server.log" 2>&1 &
    local spid=$!
    # Listening once a plain connect succeeds (s_server drops that one and serves the next).
    wait_for 5 "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1).close()" || true
    out=$(timeout 20 "$TMP/tlsget" "https://127.0.0.1:$port/" "$TMP/pki/$ca.pem" "${client[@]}" 2>&1)
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    # shellcheck disable=SC2254 # a pattern on purpose
    case "$out" in
    $want) ok "$name: $out" ;;
    *) fail "$name" "want: $want" "got:  $out" "$(sed 's/^/s_server: /' "$TMP/s_server.log")" ;;
    esac
}
tls "TLS 1.3, RSA certificate, X25519, AES-128-GCM" "TLSv1.3 TLS_AES_128_GCM_SHA256 X25519" ca rsa \
    -tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256 -groups X25519
tls "TLS 1.3, RSA-PSS certificate, P-256, AES-256-GCM" "TLSv1.3 TLS_AES_256_GCM_SHA384 prime256v1" ca pss \
    -tls1_3 -ciphersuites TLS_AES_256_GCM_SHA384 -groups P-256
tls "TLS 1.3, ECDSA P-384 certificate, P-384, ChaCha20-Poly1305" "TLSv1.3 TLS_CHACHA20_POLY1305_SHA256 secp384r1" ca p384 \
    -tls1_3 -ciphersuites TLS_CHACHA20_POLY1305_SHA256 -groups P-384
tls "TLS 1.2, RSA certificate, ECDHE P-256, AES-128-GCM" "TLSv1.2 ECDHE-RSA-AES128-GCM-SHA256 prime256v1" ca rsa \
    -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256 -groups P-256
tls "TLS 1.2, ECDSA P-256 certificate, X25519, ChaCha20-Poly1305" "TLSv1.2 ECDHE-ECDSA-CHACHA20-POLY1305 X25519" ca p256 \
    -tls1_2 -cipher ECDHE-ECDSA-CHACHA20-POLY1305 -groups X25519
tls "TLS 1.2, ECDSA P-256 certificate, AES-256-CBC (still offered by old servers)" "TLSv1.2 ECDHE-ECDSA-AES256-SHA384 *" ca p256 \
    -tls1_2 -cipher ECDHE-ECDSA-AES256-SHA384
CLIENT=p256 tls "TLS 1.3, client certificate and key from PEM files (ECDSA P-256)" "TLSv1.3 *" ca rsa \
    -tls1_3 -Verify 1 -verify_return_error -CAfile "$TMP/pki/ca.pem"
tls "a certificate of another CA refused with the X.509 reason" "error 60: *unable to get local issuer certificate*" other rsa -tls1_3
tls "finite-field DHE only (dropped) refused" "error 35: *" ca rsa -tls1_2 -cipher DHE-RSA-AES128-GCM-SHA256
tls "TLS 1.1 only (dropped) refused" "error 35: *" ca rsa -tls1_1 -cipher 'DEFAULT:@SECLEVEL=0'

done_testing
