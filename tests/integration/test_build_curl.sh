#!/usr/bin/env bash
# tests/integration/test_build_curl.sh - scripts/build-curl.sh --fetch-only against a fake
# Debian mirror (python3 http.server on 127.0.0.1, a free port): the pinned revision from the
# pool; a newer one resolved from a gpgv-verified InRelease (within its Valid-Until) -> Sources.xz; the same kept in
# the cache for offline use; and refusals of a bad signature, an unknown key, a Sources.xz or
# a .debian.tar.xz whose SHA-256 differs from the signed index, a new upstream version.
# The signing key is made here in a temporary GNUPGHOME; nothing is compiled.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPT=$ROOT/scripts/build-curl.sh
UP=7.88.1
PIN=10+deb12u15

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

# A tiny orig tarball and .debian.tar.xz with an empty series (what --fetch-only needs).
mkdir -p "$TMP/src/curl-$UP" "$TMP/src/debian/patches"
echo "fake curl source" >"$TMP/src/curl-$UP/README"
: >"$TMP/src/debian/patches/series"
tar -czf "$TMP/orig.tar.gz" -C "$TMP/src" "curl-$UP"
tar -cJf "$TMP/deb-pin.tar.xz" -C "$TMP/src" debian
echo "# deb12u99" >>"$TMP/src/debian/patches/series"
tar -cJf "$TMP/deb-new.tar.xz" -C "$TMP/src" debian
export CURL_ORIG_SHA256 CURL_DEB_SHA256 CURL_DEB_REV=$PIN
CURL_ORIG_SHA256=$(sha "$TMP/orig.tar.gz")
CURL_DEB_SHA256=$(sha "$TMP/deb-pin.tar.xz")
NEW_SHA=$(sha "$TMP/deb-new.tar.xz")

# mirror NAME VERSION DEBTAR_SHA256 [sign-key] : $TMP/www/NAME/debian with the orig tarball,
# the 10+deb12u99 .debian.tar.xz and a dists tree whose Sources lists curl VERSION.
mirror() {
    local d=$TMP/www/$1/debian key=${4:-test@invalid}
    local pool=$d/pool/main/c/curl src=$d/dists/bookworm/main/source
    mkdir -p "$pool" "$src"
    cp "$TMP/orig.tar.gz" "$pool/curl_$UP.orig.tar.gz"
    cp "$TMP/deb-new.tar.xz" "$pool/curl_$UP-10+deb12u99.debian.tar.xz"
    {
        printf 'Package: cups\nVersion: 2.4.2-3\nChecksums-Sha256:\n %s 1 cups_2.4.2.orig.tar.gz\n\n' "$NEW_SHA"
        printf 'Package: curl\nBinary: curl, libcurl4\nVersion: %s\nMaintainer: x\n' "$2"
        printf 'Checksums-Sha256:\n %s %s curl_%s.dsc\n' "$NEW_SHA" 10 "$2"
        printf ' %s %s curl_%s.orig.tar.gz\n' "${ORIG_IN_INDEX:-$CURL_ORIG_SHA256}" 20 "$UP"
        printf ' %s %s curl_%s.debian.tar.xz\n' "$3" 30 "$2"
        printf 'Directory: pool/main/c/curl\n\nPackage: curl-extra\nVersion: 1.0-1\n'
    } >"$src/Sources"
    xz -k "$src/Sources"
    {
        printf 'Origin: Debian\nSuite: stable\nCodename: %s\n' "${CODENAME:-bookworm}"
        [ -z "${VALID_UNTIL:-}" ] || printf 'Valid-Until: %s\n' "$VALID_UNTIL"
        printf 'Components: main\nSHA256:\n'
        printf ' %s %s main/binary-amd64/Packages.xz\n' "$NEW_SHA" 5
        printf ' %s %s main/source/Sources.xz\n' "$(sha "$src/Sources.xz")" "$(stat -c %s "$src/Sources.xz")"
    } >"$d/dists/bookworm/Release"
    gpg_q --local-user "$key" --clearsign --output "$d/dists/bookworm/InRelease" "$d/dists/bookworm/Release"
}

mirror a "$UP-$PIN" "$NEW_SHA"
cp "$TMP/deb-pin.tar.xz" "$TMP/www/a/debian/pool/main/c/curl/curl_$UP-$PIN.debian.tar.xz"
rm -rf "$TMP/www/a/debian/dists" # the pinned path must not need the index
mirror b "$UP-10+deb12u99" "$NEW_SHA"
mirror c "$UP-10+deb12u99" "$NEW_SHA"
sed -i 's/^Suite: stable$/Suite: stab1e/' "$TMP/www/c/debian/dists/bookworm/InRelease"
mirror k "$UP-10+deb12u99" "$NEW_SHA" other@invalid
mirror d "$UP-10+deb12u99" "$CURL_DEB_SHA256"
mirror s "$UP-10+deb12u99" "$NEW_SHA"
echo "junk" | xz >"$TMP/www/s/debian/dists/bookworm/main/source/Sources.xz"
mirror u "7.90.0-1" "$NEW_SHA"
CODENAME=trixie mirror t "$UP-10+deb12u99" "$NEW_SHA"
ORIG_IN_INDEX=$NEW_SHA mirror o "$UP-10+deb12u99" "$NEW_SHA"
VALID_UNTIL="Sat, 01 Jan 2000 00:00:00 UTC" mirror x "$UP-10+deb12u99" "$NEW_SHA"
VALID_UNTIL="Fri, 01 Jan 2100 00:00:00 UTC" mirror f "$UP-10+deb12u99" "$NEW_SHA"
VALID_UNTIL="soon" mirror g "$UP-10+deb12u99" "$NEW_SHA"

"$PY" -u -m http.server 0 --bind 127.0.0.1 --directory "$TMP/www" >"$TMP/http.log" 2>&1 &
HTTP_PID=$!
on_exit "kill $HTTP_PID"
port() { sed -n 's/^Serving HTTP on .* port \([0-9]*\) .*/\1/p' "$TMP/http.log"; }
if ! wait_for 10 grep -q '^Serving HTTP on' "$TMP/http.log"; then
    fail "http server started" "$(cat "$TMP/http.log")"
    done_testing
    exit
fi
PORT=$(port)
ok "http server on 127.0.0.1:$PORT"

# [OUTNAME=O] run NAME [ENV...] : build-curl --fetch-only with mirror NAME, out/cache
# $TMP/out-O (O defaults to NAME); output in $TMP/O.log, exit status in RC.
run() {
    local name=$1 out=${OUTNAME:-$1}
    shift
    RC=0
    env -u http_proxy -u HTTP_PROXY DEBIAN_KEYRING="$TMP/keyring.gpg" \
        DEBIAN_MIRROR="http://127.0.0.1:$PORT/$name/debian" "$@" \
        timeout 60 "$SCRIPT" --fetch-only "$TMP/out-$out" >"$TMP/$out.log" 2>&1 || RC=$?
}
has() { grep -q -- "$2" "$TMP/$1.log"; }
show() { sed 's/^/# /' "$TMP/$1.log"; }

# (a) the pinned revision is in the pool: used, no index read.
run a
if [ $RC = 0 ] && has a "(revision $PIN)" && ! grep -q InRelease "$TMP/http.log" &&
    [ "$(sha "$TMP/out-a/curl_$UP-$PIN.debian.tar.xz")" = "$CURL_DEB_SHA256" ]; then
    ok "pinned revision from the pool, index untouched"
else
    fail "pinned revision from the pool, index untouched" "rc=$RC" "$(show a)"
fi

# (b) the pinned revision is gone: the signed index says 10+deb12u99, that one is used.
run b
if [ $RC = 0 ] && has b "using Debian revision $UP-10+deb12u99 .*gpgv-verified bookworm index" &&
    has b "(revision 10+deb12u99)" && [ "$(sha "$TMP/out-b/curl_$UP-10+deb12u99.debian.tar.xz")" = "$NEW_SHA" ] &&
    grep -qx "10+deb12u99 $NEW_SHA" "$TMP/out-b/curl-debian.resolved" && [ -z "$(ls -d "$TMP"/out-b/index.* 2>/dev/null)" ]; then
    ok "pinned revision missing: 10+deb12u99 from the verified index, checksum checked"
else
    fail "pinned revision missing: 10+deb12u99 from the verified index, checksum checked" "rc=$RC" "$(show b)"
fi

# (b2) the resolved revision is reused from the cache without the network (dead mirror).
RC=0
env DEBIAN_KEYRING="$TMP/keyring.gpg" DEBIAN_MIRROR="http://127.0.0.1:1/debian" \
    timeout 60 "$SCRIPT" --fetch-only "$TMP/out-b" >"$TMP/b2.log" 2>&1 || RC=$?
if [ $RC = 0 ] && has b2 "using Debian revision $UP-10+deb12u99 from .*verified from the signed bookworm index earlier"; then
    ok "resolved revision reused from the cache offline"
else
    fail "resolved revision reused from the cache offline" "rc=$RC" "$(show b2)"
fi

# (b3) a cached resolved tarball that no longer matches its recorded hash is not used.
echo tampered >>"$TMP/out-b/curl_$UP-10+deb12u99.debian.tar.xz"
RC=0
env DEBIAN_KEYRING="$TMP/keyring.gpg" DEBIAN_MIRROR="http://127.0.0.1:1/debian" \
    timeout 60 "$SCRIPT" --fetch-only "$TMP/out-b" >"$TMP/b3.log" 2>&1 || RC=$?
if [ $RC != 0 ] && has b3 "could not download http://127.0.0.1:1/debian/dists/bookworm/InRelease"; then
    ok "tampered cached revision ignored"
else
    fail "tampered cached revision ignored" "rc=$RC" "$(show b3)"
fi

# (c) an InRelease altered after signing: refused, nothing downloaded from the pool.
run c
if [ $RC != 0 ] && has c "signature does not verify" && has c "BAD signature" &&
    [ ! -e "$TMP/out-c/curl_$UP-10+deb12u99.debian.tar.xz" ]; then
    ok "bad signature on InRelease refused"
else
    fail "bad signature on InRelease refused" "rc=$RC" "$(show c)"
fi

# (c2) signed by a key that is not in the keyring: refused.
run k
if [ $RC != 0 ] && has k "signature does not verify"; then
    ok "InRelease signed by an unknown key refused"
else
    fail "InRelease signed by an unknown key refused" "rc=$RC" "$(show k)"
fi

# (c3) without any keyring file: a clear error.
OUTNAME=c3 run b DEBIAN_KEYRING="$TMP/none.gpg"
if [ $RC != 0 ] && has c3 "keyring $TMP/none.gpg is not readable"; then
    ok "missing keyring named"
else
    fail "missing keyring named" "rc=$RC" "$(show c3)"
fi

# (c4) a validly signed index of another suite: refused.
run t
if [ $RC != 0 ] && has t "is signed but is not the bookworm index"; then
    ok "signed index of another codename refused"
else
    fail "signed index of another codename refused" "rc=$RC" "$(show t)"
fi

# (c5) Valid-Until: an expired index is refused, one still valid is used, a garbled one refused.
run x
if [ $RC != 0 ] && has x "expired at Sat, 01 Jan 2000 00:00:00 UTC (Valid-Until)" &&
    [ ! -e "$TMP/out-x/curl_$UP-10+deb12u99.debian.tar.xz" ]; then
    ok "signed index past its Valid-Until refused"
else
    fail "signed index past its Valid-Until refused" "rc=$RC" "$(show x)"
fi
run f
if [ $RC = 0 ] && has f "using Debian revision $UP-10+deb12u99 .*gpgv-verified bookworm index"; then
    ok "signed index within its Valid-Until used"
else
    fail "signed index within its Valid-Until used" "rc=$RC" "$(show f)"
fi
run g
if [ $RC != 0 ] && has g "Valid-Until 'soon' is not a date"; then
    ok "signed index with a Valid-Until that is not a date refused"
else
    fail "signed index with a Valid-Until that is not a date refused" "rc=$RC" "$(show g)"
fi

# (d) the pool's .debian.tar.xz does not have the SHA-256 of the signed index: refused.
run d
if [ $RC != 0 ] && has d "SHA-256 is $NEW_SHA, expected $CURL_DEB_SHA256" &&
    has d "could not get curl_$UP-10+deb12u99.debian.tar.xz with the SHA-256 $CURL_DEB_SHA256 of the signed bookworm index" &&
    [ ! -e "$TMP/out-d/curl_$UP-10+deb12u99.debian.tar.xz" ] && [ ! -e "$TMP/out-d/curl-debian.resolved" ]; then
    ok "debian tarball with a SHA-256 other than the index's refused"
else
    fail "debian tarball with a SHA-256 other than the index's refused" "rc=$RC" "$(show d)"
fi

# (d2) Sources.xz that does not match the signed InRelease: refused.
run s
if [ $RC != 0 ] && has s "Sources.xz: SHA-256 is .*, the signed index says"; then
    ok "Sources.xz with a SHA-256 other than InRelease's refused"
else
    fail "Sources.xz with a SHA-256 other than InRelease's refused" "rc=$RC" "$(show s)"
fi

# (e) Debian moved to a new upstream version: refused with what to update.
run u
if [ $RC != 0 ] && has u "now has curl 7.90.0-1, not upstream $UP" && has u "update UPSTREAM and the pins"; then
    ok "new upstream version refused with instructions"
else
    fail "new upstream version refused with instructions" "rc=$RC" "$(show u)"
fi

# (e2) the index lists another orig tarball for the same upstream version: refused.
run o
if [ $RC != 0 ] && has o "lists curl_$UP.orig.tar.gz with SHA-256 '$NEW_SHA', pinned $CURL_ORIG_SHA256"; then
    ok "orig tarball hash differing from the pin refused"
else
    fail "orig tarball hash differing from the pin refused" "rc=$RC" "$(show o)"
fi

done_testing
