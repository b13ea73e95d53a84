#!/bin/bash
# make fuzz: build every tests/fuzz/fuzz_*.c with libFuzzer + ASan + UBSan (clang 14)
# and run each for FUZZ_SECONDS on a copy of its seed corpus.
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build-fuzz}
SECS=${FUZZ_SECONDS:-30}
# The libraries must carry libFuzzer's coverage instrumentation too, or the
# fuzzer only sees the target file (cov: 3) and explores nothing. CFLAGS from
# the environment is kept by the Makefile's `CFLAGS +=`; a build dir made
# without it is rebuilt once.
if [ ! -e "$B/.fuzz-coverage" ]; then rm -rf "$B/obj" "$B/lib"; fi
CFLAGS="${CFLAGS:-} -fsanitize=fuzzer-no-link" \
    make --no-print-directory BUILD="$B" CC=clang SAN=1 "$B/lib/libmeshcore.a" "$B/lib/libmeshio.a" \
        "$B/lib/libinit.a" "$B/lib/libsidecar.a" "$B/lib/libinjector.a"
mkdir -p "$B" && touch "$B/.fuzz-coverage"
FLAGS="-D_GNU_SOURCE -Icommon -I. -I$B/gen -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
LIBS="-lcurl -lyaml -lwebsockets -lgrpc -lgpr -lpthread -lprotobuf-c -lcjson -lm"
rc=0
for src in tests/fuzz/fuzz_*.c; do
    t=$(basename "$src" .c); t=${t#fuzz_}
    exe=$B/libfuzzer/fuzz_$t
    mkdir -p "$B/libfuzzer" "$B/corpus/$t"
    # shellcheck disable=SC2086
    clang $FLAGS "$src" -o "$exe" "$B"/lib/lib{init,sidecar,injector}.a "$B/lib/libmeshio.a" \
        "$B/lib/libmeshcore.a" $LIBS
    cp -n tests/fuzz/corpus/"$t"/* "$B/corpus/$t/" 2>/dev/null || true
    echo "fuzz: $t for ${SECS}s"
    if ! "$exe" -max_total_time="$SECS" -max_len=65536 "$B/corpus/$t" >"$B/libfuzzer/$t.log" 2>&1; then
        echo "fuzz: $t FAILED, see $B/libfuzzer/$t.log"; tail -30 "$B/libfuzzer/$t.log"; rc=1
    else
        tail -1 "$B/libfuzzer/$t.log"
    fi
done
exit $rc
