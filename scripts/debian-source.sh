# scripts/debian-source.sh - fetch and verify a Debian source package; sourced (never run) by
# scripts/build-curl.sh and scripts/build-openssl.sh, which build static libraries from Debian's
# own source of the library (the upstream tarball plus every patch in debian/patches/series).
#
# Sources, every file checked by SHA-256, in this order:
#  1. the pinned revision: CACHE, then the package's directory in the pool of the pin's suite
#     (PIN_SUITE) on deb.debian.org.
#  2. when Debian has superseded it (a bookworm point or security release removes the old
#     .debian.tar.xz from the pool; snapshot.debian.org is not reachable from CI): a revision
#     resolved earlier from a signed index and kept in CACHE (PKG-debian.resolved).
#  3. the signed indexes of SOURCES, in order: dists/SUITE/InRelease, verified with gpgv against
#     the Debian archive keyring (it holds the security archive's keys too), must say
#     `Codename: SUITE` and, when it has a Valid-Until, not be past it; its SHA256 list gives
#     the hash of main/source/Sources.xz; the
#     `Package: PKG` entry there gives the current version and, in Checksums-Sha256, the names
#     and hashes of its .orig.tar.gz and .debian.tar.xz. The upstream version must match
#     UPSTREAM_MATCH; when it is UPSTREAM itself, the .orig.tar.gz hash must be ORIG_SHA256 (the
#     upstream tarball of a version never changes); a newer upstream (allowed only where
#     UPSTREAM_MATCH is a pattern such as 3.0.*) is taken with the hash the signed index gives.
#     An index without a PKG entry, or whose version does not match, passes to the next one;
#     the last one's mismatch is an error. A signature, codename or hash that does not verify
#     is an error wherever it is met: an altered index never passes to the next one.
#
# The caller sets, before ds_fetch:
#   TAG            message prefix (build-curl)
#   PKG            Debian source package (curl)
#   POOL           its pool directory under the mirror (pool/main/c/curl)
#   SUITE          bookworm
#   SOURCES        optional, the signed indexes to resolve from, in order: triplets
#                  "ARCHIVE SUITE POOL", ARCHIVE being debian (DEBIAN_MIRROR) or debian-security
#                  (DEBIAN_SECURITY_MIRROR); default "debian SUITE POOL"
#   PIN_SUITE      optional, the SOURCES suite whose pool holds the pinned revision (default SUITE)
#   UPSTREAM       pinned upstream version; DEB_REV, DEB_SHA256, ORIG_SHA256 the pins
#   UPSTREAM_MATCH a shell pattern the upstream version must match (UPSTREAM for "exactly")
#   UPSTREAM_WHY   why, for the error when Debian has moved past it
#   MIRROR_ENV     the caller's pool override (CURL_MIRROR), may be empty
#   CACHE          download directory (absolute)
# and gets DEBIAN_MIRROR, MIRROR, KEYRING (ds_init), then UP, REV, ORIG, DEBTAR (ds_fetch):
# CACHE/ORIG and CACHE/DEBTAR are the verified tarballs of upstream UP, Debian revision REV.
# Needs: tar, xz, sha256sum, curl or wget, and for step 3 gpgv and debian-archive-keyring.
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security); the pin's archive is derived from MIRROR_ENV when that
# ends in /(the pin's pool). DEBIAN_KEYRING (default
# /usr/share/keyrings/debian-archive-keyring.gpg).

ds_die() {
    echo "$TAG: $*" >&2
    exit 1
}

# ds_source SUITE: sets S_ARCHIVE (debian or debian-security) and S_POOL of SUITE in SOURCES;
# false when SOURCES does not name it.
ds_source() {
    want=$1
    # shellcheck disable=SC2086 # SOURCES is a word list on purpose
    set -- $SOURCES
    while [ $# -ge 3 ]; do
        if [ "$2" = "$want" ]; then
            S_ARCHIVE=$1
            S_POOL=$3
            return 0
        fi
        shift 3
    done
    return 1
}

# ds_archive_url ARCHIVE: the mirror URL of a Debian archive.
ds_archive_url() {
    case "$1" in
    debian) echo "$DEBIAN_MIRROR" ;;
    debian-security) echo "$DEBIAN_SECURITY_MIRROR" ;;
    *) ds_die "unknown Debian archive '$1' in SOURCES (debian or debian-security)" ;;
    esac
}

ds_init() {
    SOURCES=${SOURCES:-debian $SUITE $POOL}
    PIN_SUITE=${PIN_SUITE:-$SUITE}
    ds_source "$PIN_SUITE" || ds_die "PIN_SUITE $PIN_SUITE is not in SOURCES ($SOURCES)"
    PIN_ARCHIVE=$S_ARCHIVE
    PIN_POOL=$S_POOL
    # A pool override ending in the pin's pool directory names the pin's archive too.
    case "$MIRROR_ENV" in
    */"$PIN_POOL" | */"$PIN_POOL"/)
        derived=${MIRROR_ENV%/}
        derived=${derived%/"$PIN_POOL"}
        if [ "$PIN_ARCHIVE" = debian-security ]; then
            DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$derived}
        else
            DEBIAN_MIRROR=${DEBIAN_MIRROR:-$derived}
        fi
        ;;
    esac
    DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    DEBIAN_MIRROR=${DEBIAN_MIRROR%/}
    DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR%/}
    MIRROR=${MIRROR_ENV:-$(ds_archive_url "$PIN_ARCHIVE")/$PIN_POOL}
    MIRROR=${MIRROR%/}
    KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
    IDX=""
    trap 'rm -rf "$IDX"; rm -f "$CACHE"/*.part.$$' EXIT
    trap 'exit 130' INT TERM HUP
}

# ds_need TOOL... : exits naming the tools (and curl-or-wget) that are missing.
ds_need() {
    need=""
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || need="$need $t"
    done
    if ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; then
        need="$need curl-or-wget"
    fi
    if [ -n "$need" ]; then
        echo "$TAG: missing tools:$need (run: make deps)" >&2
        exit 1
    fi
}

ds_download() { # url file
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 2 --connect-timeout 20 -o "$2" "$1"
    else
        wget -q -T 20 -O "$2" "$1"
    fi
}

ds_sha_ok() { # file sha256
    [ -f "$1" ] && [ -n "$2" ] && echo "$2  $1" | sha256sum -c --status
}

# ds_get FILE SHA256 [POOL_URL]: CACHE/FILE verified, else downloaded from the pool (default
# MIRROR, the pin's) and verified. Returns 1 (after saying why) when neither gives the file
# with that hash.
ds_get() {
    f=$CACHE/$1
    from=${3:-$MIRROR}
    if ds_sha_ok "$f" "$2"; then
        return 0
    fi
    rm -f "$f" "$f.part.$$"
    echo "$TAG: fetching $from/$1"
    if ! ds_download "$from/$1" "$f.part.$$"; then
        rm -f "$f.part.$$"
        echo "$TAG: $from/$1 could not be downloaded" >&2
        return 1
    fi
    if ! ds_sha_ok "$f.part.$$" "$2"; then
        echo "$TAG: $from/$1: SHA-256 is $(sha256sum "$f.part.$$" | cut -d' ' -f1), expected $2" >&2
        rm -f "$f.part.$$"
        return 1
    fi
    mv "$f.part.$$" "$f"
}

# ds_safe_version STRING: true when STRING is made of Debian version characters only.
ds_safe_version() {
    case "$1" in '' | *[!A-Za-z0-9.+~]*) return 1 ;; esac
    return 0
}

# ds_index ARCHIVE SUITE: IDX/entry holds the Version of PKG in the gpgv-verified SUITE index
# of ARCHIVE and the lines of its Checksums-Sha256 (empty when the index has no PKG); exits
# when the index cannot be had or does not verify.
ds_index() {
    base=$(ds_archive_url "$1")
    url=$base/dists/$2/InRelease
    rm -f "$IDX/InRelease" "$IDX/Release" "$IDX/Sources.xz" "$IDX/entry"
    echo "$TAG: reading the $2 index $url"
    ds_download "$url" "$IDX/InRelease" || ds_die "could not download $url; pin a revision that is in the pool (see the header of $0)"
    # --output writes only the signed text: anything outside the signature is never read.
    if ! gpgv --keyring "$KEYRING" --output "$IDX/Release" "$IDX/InRelease" >"$IDX/gpgv.log" 2>&1; then
        sed 's/^/  /' "$IDX/gpgv.log" >&2
        ds_die "$url: the signature does not verify with $KEYRING; refusing the index"
    fi
    grep -qx "Codename: $2" "$IDX/Release" || ds_die "$url is signed but is not the $2 index (no 'Codename: $2')"
    # A signed index past its Valid-Until (the security archive sets one; bookworm's has none)
    # may be an old one replayed to hide a newer fix: refused, as apt refuses it.
    until=$(sed -n 's/^Valid-Until: *//p' "$IDX/Release" | head -n 1)
    if [ -n "$until" ]; then
        until_s=$(date -u -d "$until" +%s 2>/dev/null) || ds_die "$url: Valid-Until '$until' is not a date; refusing the index"
        [ "$(date -u +%s)" -le "$until_s" ] ||
            ds_die "$url expired at $until (Valid-Until): a stale or replayed index; check the mirror (DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR) or pin a revision that is in the pool"
    fi
    line=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
        s && $3 == "main/source/Sources.xz" { print $1; exit }' "$IDX/Release")
    [ -n "$line" ] || ds_die "$url has no SHA256 entry for main/source/Sources.xz"
    src=$base/dists/$2/main/source/Sources.xz
    ds_download "$src" "$IDX/Sources.xz" || ds_die "could not download $src"
    ds_sha_ok "$IDX/Sources.xz" "$line" ||
        ds_die "$src: SHA-256 is $(sha256sum "$IDX/Sources.xz" | cut -d' ' -f1), the signed index says $line"
    # Sources is RFC 822 stanzas separated by blank lines; print the PKG one's Version and
    # the continuation lines of its Checksums-Sha256 field.
    xz -dc "$IDX/Sources.xz" | awk -v want="$PKG" 'BEGIN { RS = ""; FS = "\n" }
        {
            pkg = ""; ver = ""; cs = 0; sums = ""
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^[^ \t]/) { cs = 0 }
                if ($i ~ /^Package:/) { pkg = $i; sub(/^Package:[ \t]*/, "", pkg) }
                if ($i ~ /^Version:/) { ver = $i; sub(/^Version:[ \t]*/, "", ver) }
                if (cs) { sums = sums $i "\n" }
                if ($i ~ /^Checksums-Sha256:/) { cs = 1 }
            }
            if (pkg == want) { printf "%s\n%s", ver, sums; exit }
        }' >"$IDX/entry" || ds_die "$src does not decompress"
}

# ds_resolve_from_index: sets UP, REV, ORIG and DEBTAR to the version of PKG in the first
# SOURCES index that has one matching UPSTREAM_MATCH, both tarballs downloaded into CACHE and
# verified through that signed index; exits otherwise.
ds_resolve_from_index() {
    command -v gpgv >/dev/null 2>&1 || ds_die "gpgv is needed to verify the Debian index (run: make deps)"
    [ -r "$KEYRING" ] || ds_die "keyring $KEYRING is not readable (install debian-archive-keyring or set DEBIAN_KEYRING)"
    IDX=$(mktemp -d "$CACHE/index.XXXXXX")
    echo "$TAG: the pinned $UPSTREAM-$DEB_REV is not available; resolving the current revision from the signed index"
    # shellcheck disable=SC2086 # SOURCES is a word list on purpose
    set -- $SOURCES
    while [ $# -ge 3 ]; do
        archive=$1 suite=$2 pool=$3
        shift 3
        ds_index "$archive" "$suite"
        ver=$(head -n 1 "$IDX/entry")
        if [ -z "$ver" ]; then
            [ $# -ge 3 ] || ds_die "$src (verified) has no 'Package: $PKG' entry with a Version"
            echo "$TAG: the $suite index has no $PKG; trying the next one"
            continue
        fi
        ver=${ver#*:}
        up=${ver%-*}
        REV=${ver##*-}
        # shellcheck disable=SC2254 # UPSTREAM_MATCH is a pattern on purpose
        case "$up" in $UPSTREAM_MATCH) matched=1 ;; *) matched=0 ;; esac
        [ "$REV" != "$ver" ] || matched=0
        [ "$matched" = 0 ] || break
        if [ $# -lt 3 ]; then
            ds_die "Debian $suite now has $PKG $ver, not upstream $UPSTREAM_MATCH: $UPSTREAM_WHY," \
                "so update UPSTREAM and the pins (ORIG_SHA256, DEB_REV, DEB_SHA256) in $0"
        fi
        echo "$TAG: the $suite index has $PKG $ver, not upstream $UPSTREAM_MATCH; trying the next one"
    done
    if [ "$suite" = "$PIN_SUITE" ]; then
        from=$MIRROR
    else
        from=$(ds_archive_url "$archive")/$pool
    fi
    ds_safe_version "$up" || ds_die "$src: $PKG upstream version '$up' is not a Debian version"
    ds_safe_version "$REV" || ds_die "$src: $PKG revision '$REV' is not a Debian revision"
    UP=$up
    ORIG=${PKG}_$UP.orig.tar.gz
    DEBTAR=${PKG}_$UP-$REV.debian.tar.xz
    orig=$(awk -v n="$ORIG" 'NR > 1 && $3 == n { print $1 }' "$IDX/entry")
    if [ "$UP" = "$UPSTREAM" ]; then
        [ "$orig" = "$ORIG_SHA256" ] ||
            ds_die "$src: $PKG $ver lists $ORIG with SHA-256 '${orig:-none}', pinned $ORIG_SHA256; update ORIG_SHA256 only after checking why"
    else
        [ -n "$orig" ] || ds_die "$src: $PKG $ver lists no $ORIG in Checksums-Sha256"
    fi
    ds_get "$ORIG" "$orig" "$from" ||
        ds_die "could not get $ORIG with the SHA-256 $orig of the signed $suite index; pin a revision by hand (see the header of $0)"
    sha=$(awk -v n="$DEBTAR" 'NR > 1 && $3 == n { print $1 }' "$IDX/entry")
    [ -n "$sha" ] || ds_die "$src: $PKG $ver lists no $DEBTAR in Checksums-Sha256"
    ds_get "$DEBTAR" "$sha" "$from" ||
        ds_die "could not get $DEBTAR with the SHA-256 $sha of the signed $suite index; pin a revision by hand (see the header of $0)"
    # "REV SHA", all from the signed index; another upstream adds "UP ORIG-SHA", a suite other
    # than SUITE adds "UP ORIG-SHA SUITE".
    if [ "$suite" != "$SUITE" ]; then
        printf '%s %s %s %s %s\n' "$REV" "$sha" "$UP" "$orig" "$suite"
    elif [ "$UP" != "$UPSTREAM" ]; then
        printf '%s %s %s %s\n' "$REV" "$sha" "$UP" "$orig"
    else
        printf '%s %s\n' "$REV" "$sha"
    fi >"$CACHE/$PKG-debian.resolved"
    echo "$TAG: using Debian revision $UP-$REV ($DEBTAR, SHA-256 $sha) from the gpgv-verified $suite index (the pinned $UPSTREAM-$DEB_REV is not available)"
}

# ds_from_resolved: true (UP, REV, ORIG, DEBTAR set) when CACHE holds a revision resolved
# from the signed index earlier whose tarballs still have the recorded hashes.
ds_from_resolved() {
    [ -f "$CACHE/$PKG-debian.resolved" ] || return 1
    r="" s="" u="" o="" from=""
    read -r r s u o from <"$CACHE/$PKG-debian.resolved" || true
    u=${u:-$UPSTREAM}
    o=${o:-$ORIG_SHA256}
    ds_safe_version "$r" && ds_safe_version "$u" || return 1
    # shellcheck disable=SC2254
    case "$u" in $UPSTREAM_MATCH) ;; *) return 1 ;; esac
    if [ "$u" = "$UPSTREAM" ] && [ "$o" != "$ORIG_SHA256" ]; then
        return 1
    fi
    ds_sha_ok "$CACHE/${PKG}_$u.orig.tar.gz" "$o" || return 1
    ds_sha_ok "$CACHE/${PKG}_$u-$r.debian.tar.xz" "$s" || return 1
    UP=$u
    REV=$r
    ORIG=${PKG}_$UP.orig.tar.gz
    DEBTAR=${PKG}_$UP-$REV.debian.tar.xz
    echo "$TAG: using Debian revision $UP-$REV from $CACHE (verified from the signed ${from:-$SUITE} index earlier, SHA-256 $s)"
}

# ds_fetch: the pinned revision, else the one resolved earlier, else the signed index.
ds_fetch() {
    UP=$UPSTREAM
    REV=$DEB_REV
    ORIG=${PKG}_$UP.orig.tar.gz
    DEBTAR=${PKG}_$UP-$REV.debian.tar.xz
    if ! ds_get "$ORIG" "$ORIG_SHA256"; then
        # An upstream that may move on (a pattern) can leave the pool with its revision.
        [ "$UPSTREAM_MATCH" != "$UPSTREAM" ] ||
            ds_die "could not get $ORIG with SHA-256 $ORIG_SHA256 (the upstream tarball never changes for $UPSTREAM)"
    elif ds_get "$DEBTAR" "$DEB_SHA256"; then
        return 0
    fi
    ds_from_resolved || ds_resolve_from_index
}

# ds_apply_patches SRC LOG SKIP... : every patch of SRC/debian/patches/series in order, except
# the named ones; exits with the patch output when one does not apply. Sets NPATCHES.
ds_apply_patches() {
    dir=$1
    log=$2
    shift 2
    NPATCHES=0
    while IFS= read -r p; do
        case "$p" in '' | '#'*) continue ;; esac
        skip=0
        for s in "$@"; do
            [ "$p" = "$s" ] && skip=1
        done
        [ "$skip" = 0 ] || continue
        if ! patch -d "$dir" -p1 -s -N --no-backup-if-mismatch <"$dir/debian/patches/$p" >"$log" 2>&1; then
            echo "$TAG: Debian patch $p does not apply:" >&2
            cat "$log" >&2
            exit 1
        fi
        NPATCHES=$((NPATCHES + 1))
    done <"$dir/debian/patches/series"
}
