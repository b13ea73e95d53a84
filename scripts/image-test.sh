#!/bin/bash
# scripts/image-test.sh - prove the Dockerfile's runtime stage without a Docker engine.
#
#   make image-test                     (builds the programs first)
#   BUILD=build-x scripts/image-test.sh [--static]
#
# The programs are every $BUILD/bin/tpumesh-* the Makefile builds (BINS); the
# Dockerfile must copy each of them.
# 1. Parses the runtime stage of ./Dockerfile (base image, the `apt-get install`
#    package list, USER, ENTRYPOINT, the COPY of the programs); checks it installs
#    no build tools and runs as 65532:65532.
# 2. Maps every shared library the built programs load (`ldd`) to the Debian
#    package that ships it (`dpkg -S`). A library the programs link directly
#    (DT_NEEDED) must come from a package the runtime stage lists; one loaded
#    indirectly must come from a listed package or from the dependency closure
#    of the list (`apt-cache depends --recurse`), which apt installs with it.
#    No program embeds a private copy of OpenSSL, libcurl, zlib, libwebsockets
#    or gRPC: none defines their entry points (symbol table and dynamic symbols)
#    or carries their version banners (the bytes of the file).
# 3. (skipped with --static) Runs the build stage: debootstrap of its base suite
#    plus its package list, the source tree copied in, its RUN (`make`) in a
#    chroot. Then builds the runtime root file system with
#    `debootstrap --variant=minbase` (what debian:<suite>-slim is made of) plus
#    exactly the parsed package list, from the Debian mirror configured in
#    /etc/apt/sources.list*, caching the result as a tarball under
#    $BUILD/image-cache keyed by suite, mirror and package list. Copies the
#    build stage's programs in where the Dockerfile puts them, runs `ldd` on
#    them inside the root and `dpkg -S` (the root's package database) on every
#    path it names: each belongs to a package installed in the image. Then runs,
#    through the image's ENTRYPOINT and as the image's USER, `--version` of
#    every program and `tpumesh-sidecar --help` with chroot.
#
# Prints TAP lines (`ok N - ...`), timings as `# time` comments, and exits
# non-zero when a check failed. Needs root for step 3 (debootstrap, chroot).
# Env: BUILD (default build), DEBIAN_MIRROR (override the mirror), DOCKERFILE,
#      IMAGE_CACHE (cache directory, default $BUILD/image-cache),
#      IMAGE_TEST_BUILD=0 (skip the build stage; use $BUILD/bin's programs),
#      IMAGE_TEST_TREE=HEAD (build the committed tree instead of the working tree).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
STATIC=0
if [ "${1:-}" = "--static" ]; then
    STATIC=1
fi
PY=/usr/bin/python3
DOCKERFILE=${DOCKERFILE:-$ROOT/Dockerfile}
CACHE=${IMAGE_CACHE:-$BUILD/image-cache}
# Every program the build makes (the Makefile's BINS: tpumesh-init, tpumesh-sidecar, ...).
PROGS=$(cd "$BUILD/bin" 2>/dev/null && for f in tpumesh-*; do [ -x "$f" ] && echo "$f"; done | tr '\n' ' ')
PROGS=${PROGS% }

TAP_N=0
TAP_FAILED=0
# The plan and the summary line CI reads ("image-test: N passed, N failed").
finish() {
    echo "1..$TAP_N"
    echo "image-test: $((TAP_N - TAP_FAILED)) passed, $TAP_FAILED failed"
    [ "$TAP_FAILED" -eq 0 ]
    exit
}
ok() { TAP_N=$((TAP_N + 1)); echo "ok $TAP_N - $1"; }
fail() {
    TAP_N=$((TAP_N + 1)); TAP_FAILED=$((TAP_FAILED + 1))
    echo "not ok $TAP_N - $1"
    shift
    local l
    for l in "$@"; do printf '#   %s\n' "$l"; done
    return 0
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
T_START=$(now_ms)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tpumesh-image.XXXXXX")
cleanup() {
    # The root file system may hold a proc mount if debootstrap was interrupted.
    local d
    for d in "$WORK/rootfs" "$WORK/buildfs"; do
        if [ -d "$d/proc" ] && mountpoint -q "$d/proc" 2>/dev/null; then
            umount "$d/proc" 2>/dev/null || true
        fi
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

for p in tpumesh-init tpumesh-sidecar; do
    if [ ! -x "$BUILD/bin/$p" ]; then
        fail "built program $BUILD/bin/$p exists" "run: make BUILD=${BUILD#"$ROOT"/} all"
        finish
    fi
done

# ---- 1. parse the runtime stage --------------------------------------------
# The parser understands the subset of Dockerfile syntax our Dockerfile uses:
# ARG defaults, line continuations, FROM ... AS <stage>, RUN with one
# `apt-get install`, COPY --from, USER and an exec-form ENTRYPOINT. Anything
# it cannot find is reported as a failed check, never guessed.
# shellcheck disable=SC2086 # one argument per program
if ! "$PY" - "$DOCKERFILE" $PROGS VERSION >"$WORK/stage.env" 2>"$WORK/stage.err" <<'EOF'
import json, re, shlex, sys

text = open(sys.argv[1], encoding="utf-8").read()
# Join continuation lines, drop comments, keep instruction order.
lines, cur = [], ""
for raw in text.splitlines():
    s = raw.strip()
    if not cur and (not s or s.startswith("#")):
        continue
    if cur and s.startswith("#"):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    lines.append(cur + s)
    cur = ""
if cur:
    lines.append(cur)

args, stage, stages = {}, None, {}
for ln in lines:
    op, _, rest = ln.partition(" ")
    op = op.upper()
    if op == "ARG" and stage is None:
        k, _, v = rest.strip().partition("=")
        args[k] = v
        continue
    if op == "FROM":
        m = re.match(r"(\S+)\s+AS\s+(\S+)", rest.strip(), re.I)
        if not m:
            sys.exit("FROM without 'AS <stage>': " + ln)
        base = re.sub(r"\$\{(\w+)\}", lambda g: args.get(g.group(1), ""), m.group(1))
        stage = m.group(2)
        stages[stage] = {"base": base, "ins": []}
        continue
    if stage is None:
        sys.exit("instruction before the first FROM: " + ln)
    stages[stage]["ins"].append((op, rest.strip()))

if "runtime" not in stages:
    sys.exit("no stage named 'runtime' (FROM ... AS runtime)")


def apt_packages(st, name):
    """The package list of the stage's one `apt-get install`."""
    found = []
    for op, rest in st["ins"]:
        if op == "RUN" and "apt-get install" in rest:
            if found:
                sys.exit("more than one apt-get install in the %s stage" % name)
            toks = shlex.split(rest)
            i = toks.index("install") + 1
            while i < len(toks) and toks[i] not in ("&&", ";", "||"):
                if not toks[i].startswith("-"):
                    found.append(toks[i])
                i += 1
    return found


rt = stages["runtime"]
pkgs = apt_packages(rt, "runtime")
user, entry, copies = "", [], []
for op, rest in rt["ins"]:
    if op == "USER":
        user = rest
    elif op == "ENTRYPOINT":
        entry = json.loads(rest)
    elif op == "COPY" and rest.startswith("--from="):
        toks = shlex.split(rest)
        copies.append(toks[1:])
if not pkgs:
    sys.exit("the runtime stage installs no packages (RUN apt-get install ...)")
m = re.match(r"debian:([a-z]+)(-slim)?$", rt["base"])
if not m:
    sys.exit("runtime base image is not debian:<suite>[-slim]: " + rt["base"])
# Where each program (and VERSION) comes from in the build stage and goes in the image:
# `COPY --from=build <file>... <dir>/`, or a directory `<dir>/` copied with all its files.
dest, srcs = {}, {}
for name in sys.argv[2:]:
    for c in copies:
        for src in c[:-1]:
            if src.rsplit("/", 1)[-1] == name:
                srcs[name], dest[name] = src, c[-1].rstrip("/")
            elif src.endswith("/") and name != "VERSION":
                srcs[name], dest[name] = src + name, c[-1].rstrip("/")
# The build stage: base image, packages, WORKDIR, COPY . <dir>, and the RUN commands after
# the apt-get one (what `docker build` would run there).
bs = stages.get("build")
if bs:
    bm = re.match(r"debian:([a-z]+)$", bs["base"])
    bpkgs = apt_packages(bs, "build")
    workdir, runs, copied = "/", [], False
    for op, rest in bs["ins"]:
        if op == "WORKDIR":
            workdir = rest
        elif op == "COPY" and shlex.split(rest)[0] == ".":
            copied = True
        elif op == "RUN" and "apt-get install" not in rest:
            runs.append(rest)
    print("BS_SUITE=" + shlex.quote(bm.group(1) if bm else ""))
    print("BS_BASE=" + shlex.quote(bs["base"]))
    print("BS_PKGS=" + shlex.quote(" ".join(bpkgs)))
    print("BS_WORKDIR=" + shlex.quote(workdir))
    print("BS_COPIES_TREE=" + ("1" if copied else "0"))
    print("BS_RUN=" + shlex.quote(" && ".join("(%s)" % r for r in runs)))
for name in sys.argv[2:]:
    print("SRC[%s]=%s" % (name, shlex.quote(srcs.get(name, ""))))
    print("DEST[%s]=%s" % (name, shlex.quote(dest.get(name, ""))))
print("RT_BASE=" + shlex.quote(rt["base"]))
print("RT_SUITE=" + shlex.quote(m.group(1)))
print("RT_PKGS=" + shlex.quote(" ".join(pkgs)))
print("RT_USER=" + shlex.quote(user))
print("RT_ENTRY=" + shlex.quote(" ".join(shlex.quote(e) for e in entry)))
EOF
then
    fail "Dockerfile runtime stage parses" "$(cat "$WORK/stage.err")"
    finish
fi
declare -A SRC=() DEST=()
# shellcheck disable=SC1091
. "$WORK/stage.env"
ok "Dockerfile runtime stage parses: $RT_BASE, packages: $RT_PKGS"

if [ "$RT_USER" = "65532:65532" ]; then
    ok "runtime stage runs as USER 65532:65532"
else
    fail "runtime stage runs as USER 65532:65532" "USER is '$RT_USER'"
fi
case "$RT_ENTRY" in
*tini*) ok "ENTRYPOINT is tini ($RT_ENTRY)" ;;
*) fail "ENTRYPOINT is tini" "ENTRYPOINT is '$RT_ENTRY' (docs/STYLE.md R18: tini or shareProcessNamespace)" ;;
esac
BIN_DEST=${DEST[tpumesh-init]}
dests=""
for p in $PROGS; do
    [ "${DEST[$p]}" = "$BIN_DEST" ] || dests="$dests $p->'${DEST[$p]}'"
done
if [ -n "$BIN_DEST" ] && [ -z "$dests" ]; then
    ok "runtime stage copies every program ($PROGS) to $BIN_DEST"
else
    fail "runtime stage copies every program to one directory" \
        "tpumesh-init -> '$BIN_DEST',$dests" "add a COPY --from=build of each program in Dockerfile"
fi
tools=""
for p in $RT_PKGS; do
    case "$p" in
    *-dev | gcc* | g++* | clang* | make | cmake | pkg-config | pkgconf | binutils* | \
        protobuf-compiler | protobuf-c-compiler | build-essential | libc-dev-bin) tools="$tools $p" ;;
    esac
done
if [ -z "$tools" ]; then
    ok "runtime stage installs no build tools"
else
    fail "runtime stage installs no build tools" "found:$tools"
fi

# ---- 2. every loaded library comes from a listed package -------------------
# dpkg -S knows a file by the path its package ships; with merged /usr the
# loader may report /lib/... for a file shipped as /usr/lib/... (or the
# reverse), and ldd may show a symlink: ask for every spelling at once (one
# dpkg -S call; each call reads the whole file database) and take the first
# spelling dpkg knows.
spellings() {
    local f=$1 r
    r=$(readlink -f "$f")
    printf '%s\n' "$f" "$r" "/usr$f" "${f#/usr}" "/usr$r" "${r#/usr}"
}
declare -A OWNER=()
load_owners() { # paths...
    local f line
    # shellcheck disable=SC2046
    while IFS= read -r line; do
        case "$line" in *": /"*) OWNER[${line#*: }]=${line%%:*} ;; esac
    done < <(for f in "$@"; do spellings "$f"; done | sort -u | xargs dpkg -S 2>/dev/null)
}
owner_of() {
    local c
    while IFS= read -r c; do
        if [ -n "${OWNER[$c]+x}" ]; then
            echo "${OWNER[$c]}"
            return 0
        fi
    done < <(spellings "$1")
    return 1
}
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

T1=$(now_ms)
# apt-cache needs the package lists; a fresh machine may not have them yet.
# shellcheck disable=SC2086
if ! apt-cache show $RT_PKGS >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
fi
# shellcheck disable=SC2086 # the package list is meant to split into words
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $RT_PKGS 2>/dev/null |
    awk '/^[a-z0-9]/ { print $1 } /Depends: [a-z0-9]/ { print $2 }' | sed 's/:.*//' | sort -u |
    tr '\n' ' ')
if [ -z "$closure" ]; then
    fail "apt-cache knows the runtime packages" "run apt-get update"
fi
# ldd lines: "libx.so.1 => /path (0x...)", or the loader "/lib64/ld-linux... (0x...)".
ldd_pairs() { awk '/=> \// { print $1, $3; next } /^[ \t]*\/.*\(0x/ { print $1, $1 }'; }
# shellcheck disable=SC2046
load_owners $(for prog in $PROGS; do ldd "$BUILD/bin/$prog" 2>/dev/null | ldd_pairs | cut -d' ' -f2; done)
all_pkgs=""
for prog in $PROGS; do
    bin=$BUILD/bin/$prog
    needed=$(objdump -p "$bin" | awk '$1 == "NEEDED" { print $2 }' | tr '\n' ' ')
    ldd_out=$(ldd "$bin" 2>&1)
    if echo "$ldd_out" | grep -q "not found"; then
        fail "$prog: every library resolves on this machine" "$(echo "$ldd_out" | grep 'not found')"
    fi
    while read -r name path; do
        [ -n "$path" ] || continue
        pkg=$(owner_of "$path") || {
            fail "$prog: $name maps to a Debian package" "dpkg -S knows no package for $path"
            continue
        }
        all_pkgs="$all_pkgs $pkg"
        soname=${name##*/}
        if in_list "$soname" "$needed" || [ "$name" = "$path" ]; then
            # Linked directly (or the loader itself): the list must name it.
            if in_list "$pkg" "$RT_PKGS"; then
                ok "$prog: $soname ($pkg) is installed by the runtime stage"
            else
                fail "$prog: $soname ($pkg) is installed by the runtime stage" \
                    "add '$pkg' to the runtime stage's apt-get install list in Dockerfile"
            fi
        elif in_list "$pkg" "$RT_PKGS" || in_list "$pkg" "$closure"; then
            ok "$prog: $soname ($pkg) comes with the runtime packages"
        else
            fail "$prog: $soname ($pkg) comes with the runtime packages" \
                "$pkg is neither listed nor a dependency of the listed packages"
        fi
    done < <(echo "$ldd_out" | ldd_pairs)
done
all_pkgs=$(echo "$all_pkgs" | tr ' ' '\n' | sort -u | tr '\n' ' ')
# The other direction: a listed library package nothing loads is dead weight in the image
# (e.g. libcurl4 after the programs linked libcurl statically). Packages that ship no
# library the programs load but files or programs they use are named here.
unused=""
for p in $RT_PKGS; do
    case "$p" in
    ca-certificates | tini) continue ;; # the CA bundle; the ENTRYPOINT
    esac
    in_list "$p" "$all_pkgs" || unused="$unused $p"
done
if [ -z "$unused" ]; then
    ok "runtime stage lists no library package the programs do not load"
else
    fail "runtime stage lists no library package the programs do not load" \
        "remove$unused from the runtime stage's apt-get install list (ldd of both programs names none of its files)"
fi
echo "# time: library mapping $(( $(now_ms) - T1 )) ms; packages loaded:$all_pkgs"

# No private copy of a library inside a program: a static OpenSSL, libcurl, zlib,
# libwebsockets or gRPC defines its entry points in the program (its symbol table, or
# its dynamic symbols when the program is stripped) and carries its version banner
# ("OpenSSL 3.0.x", "libcurl/7.88.1", zlib's " deflate 1.2.13 Copyright", ...). The
# programs only call these libraries, so the names appear as undefined symbols at most.
EMBED_SYMS="OpenSSL:OPENSSL_init_ssl,OPENSSL_init_crypto,SSL_CTX_new,EVP_DigestInit_ex
libcurl:curl_easy_init,curl_version,Curl_open,curl_global_init
zlib:zlibVersion,deflateInit_,inflateInit2_,inflate
libwebsockets:lws_create_context,lws_service
gRPC:grpc_init,grpc_channel_create,gpr_now"
EMBED_TEXT='OpenSSL [0-9]+\.[0-9]+\.[0-9]+|libcurl/[0-9]+\.[0-9]+|(de|in)flate [0-9]+\.[0-9]+(\.[0-9]+)* Copyright|LWS_[0-9]+\.[0-9]+|grpc-c/[0-9]+\.[0-9]+'
for prog in $PROGS; do
    bin=$BUILD/bin/$prog
    defined=$( { nm --defined-only "$bin" 2>/dev/null; nm -D --defined-only "$bin" 2>/dev/null; } |
        awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u)
    found=""
    while IFS=: read -r lib syms; do
        hits=""
        for sym in ${syms//,/ }; do
            if grep -qx -- "$sym" <<<"$defined"; then hits="$hits $sym"; fi
        done
        [ -z "$hits" ] || found="$found $lib (defines$hits);"
    done <<<"$EMBED_SYMS"
    banners=$(grep -aoE -- "$EMBED_TEXT" "$bin" | sort -u | tr '\n' ';')
    [ -z "$banners" ] || found="$found version text: $banners"
    if [ -z "$found" ]; then
        ok "$prog embeds no private OpenSSL, libcurl, zlib, libwebsockets or gRPC"
    else
        fail "$prog embeds no private OpenSSL, libcurl, zlib, libwebsockets or gRPC" "found:$found" \
            "link Debian's shared library instead (Makefile: IO_LIBS, CORE_LIBS; no -Wl,-Bstatic, no lib*.a)"
    fi
done

if [ "$STATIC" = 1 ]; then
    echo "# time: total $(( $(now_ms) - T_START )) ms (static checks only)"
    finish
fi

# ---- 3. build the runtime root file system and run the programs -----------
if [ "$(id -u)" != 0 ]; then
    fail "debootstrap and chroot need root" "run as root (CI does), or use --static"
    finish
fi
# The mirror: DEBIAN_MIRROR, else the first source in /etc/apt/sources.list*
# (one-line or deb822 format) that serves the runtime suite itself.
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk -v s="$RT_SUITE" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) break;
            if ($(i + 1) == s) { print $i; exit } }')
fi
if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v s="$RT_SUITE" '
        /^$/ { if (uri != "" && suites ~ ("(^| )" s "( |$)")) { print uri; exit } uri = ""; suites = "" }
        /^URIs:/ { uri = $2 }
        /^Suites:/ { $1 = ""; suites = $0 }
        END { if (uri != "" && suites ~ ("(^| )" s "( |$)")) print uri }' | head -n 1)
fi
if [ -z "$mirror" ]; then
    fail "a Debian mirror for $RT_SUITE is configured" "set DEBIAN_MIRROR or add it to /etc/apt/sources.list"
    finish
fi
ok "Debian mirror for $RT_SUITE: $mirror"

# make_rootfs NAME SUITE "PKGS" DIR: debootstrap --variant=minbase SUITE plus PKGS into DIR,
# or restore it from the cache tarball made by an earlier run with the same inputs.
make_rootfs() {
    local name=$1 suite=$2 pkgs=$3 dir=$4 sorted key tarball t
    sorted=$(echo "$pkgs" | tr ' ' '\n' | sort -u | tr '\n' ',' | sed 's/,$//')
    key=$(printf '%s\n' "$suite" "$mirror" minbase "$sorted" | sha256sum | cut -c1-16)
    tarball=$CACHE/rootfs-$suite-$key.tar.gz
    mkdir -p "$CACHE" "$dir"
    t=$(now_ms)
    if [ -s "$tarball" ]; then
        if tar -xzf "$tarball" -C "$dir"; then
            ok "$name root file system restored from cache $(basename "$tarball")"
            echo "# time: $name: restore from cache $(( $(now_ms) - t )) ms"
            return 0
        fi
        fail "$name root file system restored from cache" "remove $tarball and rerun"
        return 1
    fi
    if ! debootstrap --variant=minbase --include="$sorted" "$suite" "$dir" "$mirror" \
        >"$WORK/debootstrap-$name.log" 2>&1; then
        fail "debootstrap --variant=minbase $suite + $name packages" \
            "$(tail -n 5 "$WORK/debootstrap-$name.log")"
        return 1
    fi
    ok "debootstrap --variant=minbase $suite + $name packages"
    echo "# time: $name: debootstrap $(( $(now_ms) - t )) ms"
    t=$(now_ms)
    # Save it for the next run; apt's downloaded .debs are not part of the image.
    rm -f "$dir"/var/cache/apt/archives/*.deb
    tar -C "$dir" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    echo "# time: $name: cache tarball $(( $(now_ms) - t )) ms"
}

# ---- 3a. the build stage: `make` in debian:<suite> + the build packages ----
# What `docker build` does there: the source tree (COPY . .; the tracked files, as
# a fresh clone has them) in WORKDIR, then the stage's RUN commands, as root.
# Its programs are what the runtime stage copies (COPY --from=build). Skip with
# IMAGE_TEST_BUILD=0; the runtime checks then use $BUILD/bin.
# Where each program comes from: this build, or the build stage's root once it ran.
declare -A FROM=()
for p in $PROGS; do FROM[$p]=$BUILD/bin/$p; done
if [ "${IMAGE_TEST_BUILD:-1}" != 0 ] && [ -n "${BS_PKGS:-}" ]; then
    buildfs=$WORK/buildfs
    if [ -z "$BS_SUITE" ] || [ "$BS_COPIES_TREE" != 1 ] || [ -z "$BS_RUN" ]; then
        fail "build stage is debian:<suite>, copies the tree and runs make" \
            "base $BS_BASE, COPY . .: $BS_COPIES_TREE, RUN: $BS_RUN"
    elif make_rootfs build "$BS_SUITE" "$BS_PKGS" "$buildfs"; then
        mkdir -p "$buildfs$BS_WORKDIR"
        if [ "${IMAGE_TEST_TREE:-worktree}" = HEAD ]; then
            git -C "$ROOT" archive HEAD | tar -C "$buildfs$BS_WORKDIR" -xf -
        elif git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
            git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 cp -a --parents -t "$buildfs$BS_WORKDIR/")
        else
            tar -C "$ROOT" --exclude='./build*' --exclude=./.git --exclude='*/node_modules' -cf - . |
                tar -C "$buildfs$BS_WORKDIR" -xf -
        fi
        t=$(now_ms)
        if timeout 900 chroot "$buildfs" /usr/bin/env -i \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            /bin/sh -c "cd '$BS_WORKDIR' && $BS_RUN" >"$WORK/build-stage.log" 2>&1; then
            ok "build stage: $BS_RUN (in $BS_BASE + build packages)"
            for p in $PROGS; do FROM[$p]=$buildfs${SRC[$p]}; done
        else
            fail "build stage: $BS_RUN (in $BS_BASE + build packages)" \
                "$(tail -n 8 "$WORK/build-stage.log")"
        fi
        echo "# time: build stage make $(( $(now_ms) - t )) ms"
    fi
fi
absent=""
for p in $PROGS; do
    [ -x "${FROM[$p]}" ] || absent="$absent ${SRC[$p]}"
done
if [ -z "$absent" ]; then
    ok "the runtime stage gets the programs ($PROGS) from ${FROM[tpumesh-init]%/*}"
else
    fail "the build stage produced every program" "missing under the build root:$absent"
    for p in $PROGS; do FROM[$p]=$BUILD/bin/$p; done
fi

# ---- 3b. the runtime stage -------------------------------------------------
rootfs=$WORK/rootfs
T3=$(now_ms)
if ! make_rootfs runtime "$RT_SUITE" "$RT_PKGS" "$rootfs"; then
    finish
fi
echo "# time: runtime root file system $(( $(now_ms) - T3 )) ms"

# Exactly the listed packages and what they depend on: each ldd package is installed.
installed=$(dpkg-query --admindir="$rootfs/var/lib/dpkg" -W -f '${Package} ${Status}\n' |
    awk '$NF == "installed" { print $1 }' | tr '\n' ' ')
missing=""
for p in $all_pkgs; do
    in_list "$p" "$installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    ok "root file system has every package the programs load from"
else
    fail "root file system has every package the programs load from" "missing:$missing"
fi
found_tools=""
for t in gcc cc make ld as clang pkg-config apt-get-build-dep; do
    [ -e "$rootfs/usr/bin/$t" ] && found_tools="$found_tools $t"
done
if [ -z "$found_tools" ]; then
    ok "root file system has no compiler, linker or make"
else
    fail "root file system has no compiler, linker or make" "found:$found_tools"
fi

# COPY --from=build ... as the Dockerfile does.
for p in $PROGS; do
    install -D -m 0755 "${FROM[$p]}" "$rootfs${DEST[$p]}/$p"
done
if [ -n "${DEST[VERSION]}" ]; then
    install -D -m 0644 VERSION "$rootfs${DEST[VERSION]}/VERSION"
fi

# Inside the image: ldd of every program, and dpkg -S (the image's own package
# database) on every path it names. dpkg -S answers only for files of installed
# packages, so every library the programs load belongs to a package in the image.
in_image_paths=""
for p in $PROGS; do
    chroot "$rootfs" /usr/bin/ldd "${DEST[$p]}/$p" >"$WORK/ldd-$p.out" 2>&1
    in_image_paths="$in_image_paths $(ldd_pairs <"$WORK/ldd-$p.out" | cut -d' ' -f2 | tr '\n' ' ')"
done
# Every spelling of each path inside the root (see spellings() above), then one
# dpkg-query -S on the image's database for all of them.
# shellcheck disable=SC2016 # expanded by the shell inside the root
chroot "$rootfs" /bin/sh -c 'for f in "$@"; do r=$(readlink -f "$f");
    printf "%s %s\n" "$f" "$f" "$f" "$r" "$f" "/usr$f" "$f" "${f#/usr}" "$f" "/usr$r" "$f" "${r#/usr}"; done' \
    sh $(echo "$in_image_paths" | tr ' ' '\n' | sed '/^$/d' | sort -u) >"$WORK/spellings" 2>/dev/null
declare -A IMG_OWNER=()
while IFS= read -r line; do
    case "$line" in *": /"*) IMG_OWNER[${line#*: }]=${line%%:*} ;; esac
done < <(cut -d' ' -f2 "$WORK/spellings" | sort -u |
    xargs dpkg-query --admindir="$rootfs/var/lib/dpkg" -S 2>/dev/null)
unowned=""
owners=""
for f in $(cut -d' ' -f1 "$WORK/spellings" | sort -u); do
    o=""
    while read -r _ c; do
        if [ -n "${IMG_OWNER[$c]+x}" ]; then o=${IMG_OWNER[$c]}; break; fi
    done < <(awk -v f="$f" '$1 == f' "$WORK/spellings")
    if [ -n "$o" ]; then owners="$owners $o"; else unowned="$unowned $f"; fi
done
owners=$(echo "$owners" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
n_paths=$(echo "$in_image_paths" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)
if [ -n "$in_image_paths" ] && [ -z "$unowned" ]; then
    ok "inside the image every library the programs load ($n_paths files) belongs to an installed package: $owners"
else
    fail "inside the image every library the programs load belongs to an installed package" \
        "dpkg -S in the image knows no package for:$unowned"
fi

# The environment a container runtime gives: the image's PATH and nothing else.
run_in_image() { # out-file prog args...
    local out=$1
    shift
    # shellcheck disable=SC2086
    eval "set -- $RT_ENTRY \"\$@\""
    timeout 30 chroot --userspec="$RT_USER" "$rootfs" /usr/bin/env -i \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/ \
        TINI_SUBREAPER=1 "$@" >"$out" 2>&1
}
T5=$(now_ms)
run_in_image "$WORK/id.out" id -u
check_uid=$(tail -n 1 "$WORK/id.out")
if [ "$check_uid" = "${RT_USER%%:*}" ]; then
    ok "chroot runs as UID $check_uid"
else
    fail "chroot runs as UID ${RT_USER%%:*}" "id -u said: $check_uid"
fi
if cat "$WORK"/ldd-*.out >"$WORK/ldd.out" && ! grep -q "not found" "$WORK/ldd.out"; then
    ok "every library resolves inside the image"
else
    fail "every library resolves inside the image" "$(grep 'not found' "$WORK/ldd.out")"
fi
version=$(cat VERSION)
for p in $PROGS; do
    run_in_image "$WORK/$p.version" "$p" --version
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "$version" "$WORK/$p.version"; then
        ok "$p --version in the image as ${RT_USER}: $(head -n 1 "$WORK/$p.version")"
    else
        fail "$p --version in the image as ${RT_USER}" "exit $rc" "$(head -n 5 "$WORK/$p.version")"
    fi
done
run_in_image "$WORK/sidecar.out" tpumesh-sidecar --help
rc=$?
if [ "$rc" -eq 0 ] && grep -qi "usage" "$WORK/sidecar.out"; then
    ok "tpumesh-sidecar --help in the image as ${RT_USER} ($(wc -l <"$WORK/sidecar.out") lines)"
else
    fail "tpumesh-sidecar --help in the image as ${RT_USER}" "exit $rc (expected 0 and a usage text)" \
        "$(head -n 5 "$WORK/sidecar.out")"
fi
# The pod's view: read-only root file system (securityContext), the shared volume an
# in-memory mount at /var/run/tpumesh (emptyDir medium: Memory), no TPU (--skip-init).
# /var/run is a symlink to /run inside the image: resolve it there, not on this host.
if [ -e "$rootfs/etc/ssl/certs/ca-certificates.crt" ]; then
    ok "CA bundle for the Cloud TPU API and metadata HTTPS calls is in the image"
else
    fail "CA bundle is in the image" "/etc/ssl/certs/ca-certificates.crt missing (ca-certificates)"
fi
vrun=$(chroot "$rootfs" /usr/bin/readlink -f /var/run)
case "$vrun" in
/*) ;;
*) vrun=/var/run ;;
esac
mkdir -p "$rootfs$vrun/tpumesh" "$rootfs$vrun/tpumesh-secrets"
# The sidecar talks to the kube-apiserver simulator over HTTPS with a token, as in a pod
# (the simulator runs on this host; the chroot shares its loopback network).
sim_dir=$WORK/sim
mkdir -p "$sim_dir/secrets"
printf 'image-test-token\n' >"$sim_dir/secrets/token"
SIM=$ROOT/tests/sim/kube-apiserver/kube_apiserver_sim.py
"$PY" "$SIM" --tls --token image-test-token --state-dir "$sim_dir" >"$sim_dir/out" 2>"$sim_dir/err" &
sim_pid=$!
on_exit_kill() { kill "$sim_pid" 2>/dev/null || true; }
trap 'on_exit_kill; cleanup' EXIT
for _ in $(seq 1 150); do
    grep -q '^READY ' "$sim_dir/out" 2>/dev/null && break
    sleep 0.1
done
sim_url=$(sed -n 's/^READY .*url=\([^ ]*\).*/\1/p' "$sim_dir/out")
if [ -n "$sim_url" ]; then
    cp "$sim_dir/ca.crt" "$sim_dir/secrets/ca.crt"
    "$PY" "$SIM" ctl --url "$sim_url" --ca "$sim_dir/ca.crt" make --name img-0-a1b2c --index 0 --job img \
        --annotations '{"tpumesh.dev/expected-workers": "1"}' >"$sim_dir/ctl.out" 2>&1 ||
        sim_url=""
fi
unshare -m /bin/sh -c '
    r=$1 out=$2 sec=$3 user=$4 res=$5 secrets=$6 url=$7
    mount --bind "$r" "$r" && mount -o remount,bind,ro "$r" || exit 10
    mount -t tmpfs -o mode=1777,size=16m tmpfs "$r$out" || exit 11
    mount --bind "$secrets" "$r$sec" && mount -o remount,bind,ro "$r$sec" || exit 12
    run() { chroot --userspec="$user" "$r" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
        TINI_SUBREAPER=1 "$@"; }
    run TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=img-0.img /usr/bin/tini -- tpumesh-init --skip-init \
        --tpu local --accelerator-type v5litepod-1 --topology 1x1 --annotations-file /dev/null \
        --out-dir /var/run/tpumesh >"$res/init.log" 2>&1
    echo $? >"$res/init.rc"
    ls "$r$out" >"$res/published"
    [ -n "$url" ] || exit 0
    # exec: chroot and env exec in turn, so $pid ends up being tini, the image entrypoint,
    # which is what the kubelet signals.
    (exec chroot --userspec="$user" "$r" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
        TINI_SUBREAPER=1 POD_NAME=img-0-a1b2c TPUMESH_NAMESPACE=default TPUMESH_APISERVER="$url" \
        TPUMESH_TOKEN_FILE=/var/run/tpumesh-secrets/token TPUMESH_CA_FILE=/var/run/tpumesh-secrets/ca.crt \
        TPUMESH_OUT_DIR=/var/run/tpumesh TPUMESH_HTTP_ADDR=127.0.0.1:0 TPUMESH_GRPC_ADDR=127.0.0.1:0 \
        /usr/bin/tini -- tpumesh-sidecar) >"$res/sidecar.log" 2>&1 &
    pid=$!
    port=""
    i=0
    while [ $i -lt 100 ] && [ -z "$port" ]; do
        port=$(sed -n "s/.*serving \/healthz.*(port \([0-9]*\)).*/\1/p" "$res/sidecar.log")
        i=$((i + 1))
        sleep 0.1
    done
    code=none
    i=0
    while [ -n "$port" ] && [ $i -lt 200 ]; do
        code=$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$port/readyz")
        [ "$code" = 200 ] && break
        i=$((i + 1))
        sleep 0.1
    done
    echo "$code" >"$res/readyz"
    kill -TERM $pid
    i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
    kill -KILL $pid 2>/dev/null
    wait $pid
    echo $? >"$res/sidecar.rc"
' sh "$rootfs" "$vrun/tpumesh" "$vrun/tpumesh-secrets" "$RT_USER" "$WORK" "$sim_dir/secrets" "$sim_url" \
    >"$WORK/unshare.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    fail "mount a read-only root and the pod's volumes (unshare -m)" "exit $rc" "$(tail -n 3 "$WORK/unshare.out")"
fi
if [ "$(cat "$WORK/init.rc" 2>/dev/null)" = 0 ] && grep -qx dtensor.env "$WORK/published"; then
    ok "tpumesh-init publishes in the image as ${RT_USER} with a read-only root ($(wc -l <"$WORK/published") files)"
else
    fail "tpumesh-init publishes in the image as ${RT_USER} with a read-only root" \
        "exit $(cat "$WORK/init.rc" 2>/dev/null)" "$(tail -n 3 "$WORK/init.log" 2>/dev/null)"
fi
if [ -z "$sim_url" ]; then
    fail "kube-apiserver simulator for the sidecar starts" "$(tail -n 3 "$sim_dir/err" "$sim_dir/ctl.out" 2>/dev/null)"
elif [ "$(cat "$WORK/readyz" 2>/dev/null)" = 200 ]; then
    ok "tpumesh-sidecar in the image (HTTPS + token to the API server, read-only root) becomes ready"
else
    fail "tpumesh-sidecar in the image becomes ready" "/readyz: $(cat "$WORK/readyz" 2>/dev/null)" \
        "$(tail -n 4 "$WORK/sidecar.log" 2>/dev/null)"
fi
if [ -n "$sim_url" ]; then
    if [ "$(cat "$WORK/sidecar.rc" 2>/dev/null)" = 0 ]; then
        ok "SIGTERM to the image's entrypoint (tini) ends tpumesh-sidecar with exit 0"
    else
        fail "SIGTERM to tini ends tpumesh-sidecar with exit 0" "exit $(cat "$WORK/sidecar.rc" 2>/dev/null)"
    fi
fi
kill "$sim_pid" 2>/dev/null || true
echo "# time: runs in the image $(( $(now_ms) - T5 )) ms"
echo "# image size (root file system + programs): $(du -sh "$rootfs" | cut -f1)"
echo "# time: total $(( $(now_ms) - T_START )) ms"
finish
