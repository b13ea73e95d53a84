# tpumesh - build, test and demo. `make help` lists the targets.
#
# Layout (DESIGN.md §2): common/core -> libmeshcore.a (pure; links without
# curl, lws or grpc), common/io -> libmeshio.a, initcontainer/ and sidecar/ ->
# build/bin/. Sources are discovered with wildcards: adding a module is adding
# its .c/.h pair; adding a test is adding tests/unit/test_<mod>.c,
# tests/fuzz/fuzz_<target>.c (+ tests/fuzz/corpus/<target>/) or
# tests/integration/test_*.{sh,py}.

BUILD    ?= build
CC       ?= gcc
PY       ?= /usr/bin/python3
SAN      ?=
VERSION  ?= $(shell cat VERSION 2>/dev/null || echo 0.0.0)

WARN     := -std=c11 -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Wvla
ifeq ($(SAN),1)
OPT      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LDSAN    := -fsanitize=address,undefined
else
OPT      := -O2 -g -D_FORTIFY_SOURCE=2 -fstack-protector-strong
LDSAN    :=
endif
CPPFLAGS += -D_GNU_SOURCE -DMESH_VERSION='"$(VERSION)"' -Icommon -I$(BUILD)/gen
CFLAGS   += $(WARN) $(OPT) -MMD -MP
# pack-relative-relocs (DT_RELR, glibc >= 2.36): the statically linked
# OpenSSL's pointer tables need ~19,800 relative relocations; as RELA entries
# they filled a 464 KiB segment that the loader reads in full at every start
# (resident for the sidecar's whole life); packed they take 6 KiB.
LDFLAGS  += -Wl,-z,relro,-z,now,-z,pack-relative-relocs $(LDSAN)

CORE_LIBS := -lprotobuf-c -lcjson -lyaml -lm
IO_LIBS   := -lcurl -lwebsockets -lgrpc -lgpr -lpthread
# The two programs link gRPC C core and its dependencies (abseil, re2, c-ares,
# upb, OpenSSL) statically: loading those ~55 shared libraries cost ~8 ms at
# every start (bench/init) and ~9 MiB of mapped pages in the sidecar. libcurl
# then binds to the same OpenSSL copy (the executable exports the symbols it
# references). libstdc++ is named by soname: the runtime library is all gRPC's
# C++ internals need, so the build needs no libstdc++-dev. Tests and tools keep
# the faster dynamic link.
#
# libcurl, libwebsockets and OpenSSL are static in the two programs too. Debian's
# libcurl4 loads 30-odd libraries (LDAP, RTMP -> GnuTLS, SSH, Kerberos, PSL, IDN,
# nghttp2, ...) we never use: scripts/build-curl.sh builds a minimal libcurl.a from
# Debian's source of the installed version (its patches applied), once per BUILD
# into $(BUILD)/third_party (downloads cached in THIRD_PARTY_CACHE). The sidecar's
# peak RSS fell by ~5 MB, tpumesh-init's start-up from 8.6 to 2.8 ms (bench/init).
# The objects compile against the system's curl headers (libcurl4-openssl-dev, the
# same 7.88.1 API); tests, fuzz replays and tools keep linking the shared system
# libcurl (faster links, ASan builds need no third_party build), while the
# integration tests run the real programs and so exercise the static one.
#
# OpenSSL 3's default provider references every algorithm, so a static link of
# Debian's libcrypto.a pulls all of it in (2.2 MiB of the sidecar's 3.2 MiB text,
# all resident over HTTPS). scripts/build-openssl.sh builds a minimal libssl.a and
# libcrypto.a the same way (Debian's source and patches of the bookworm OpenSSL
# 3.0, what TLS 1.2/1.3 clients and the libwebsockets server need) before
# libcurl, which is compiled against it. Both programs link it in place of the
# -lssl -lcrypto of gRPC's pkg-config list (never next to Debian's: two copies of
# libcrypto's internals would mix); tests and tools keep the system's shared one.
THIRD_PARTY       := $(BUILD)/third_party
THIRD_PARTY_CACHE ?= $(THIRD_PARTY)
CURL_A      := $(THIRD_PARTY)/curl/lib/libcurl.a
OPENSSL_A   := $(THIRD_PARTY)/openssl/lib/libssl.a $(THIRD_PARTY)/openssl/lib/libcrypto.a
GRPC_STATIC := $(filter-out -lssl -lcrypto,$(shell pkg-config --static --libs grpc))
BIN_LIBS  := $(CURL_A) -Wl,-Bstatic -lwebsockets -lcap $(GRPC_STATIC) $(OPENSSL_A) -lz \
             -Wl,-Bdynamic -l:libstdc++.so.6 -lpthread

PROTOS     := $(shell find proto -name '*.proto' 2>/dev/null | sort)
GEN_C      := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
GEN_H      := $(GEN_C:.c=.h)
GEN_PY     := $(BUILD)/gen/py/.stamp

CORE_SRC   := $(sort $(wildcard common/core/*.c))
IO_SRC     := $(sort $(wildcard common/io/*.c))
INIT_SRC   := $(sort $(wildcard initcontainer/*.c))
SIDE_SRC   := $(sort $(wildcard sidecar/*.c))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
TOOL_SRC   := $(sort $(wildcard tests/tools/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ   := $(call obj,$(CORE_SRC)) $(patsubst %.c,%.o,$(subst $(BUILD)/gen,$(BUILD)/obj/gen,$(GEN_C)))
IO_OBJ     := $(call obj,$(IO_SRC))
CORE_LIB   := $(BUILD)/lib/libmeshcore.a
IO_LIB     := $(BUILD)/lib/libmeshio.a
BINS       := $(BUILD)/bin/tpumesh-init $(BUILD)/bin/tpumesh-sidecar
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
TOOL_BINS  := $(patsubst tests/tools/%.c,$(BUILD)/tests/tools/%,$(TOOL_SRC))

.PHONY: all deps test test-unit test-fuzz test-integration asan valgrind fuzz lint \
        format format-check demo bench clean help check-core-pure gen-py image-test

# Keep intermediate objects (pattern chains would delete them and force rebuilds).
.SECONDARY:

all: $(BINS) check-core-pure

help:
	@echo "make deps        install the Debian packages the build and tests need (idempotent)"
	@echo "make             build build/bin/tpumesh-init and build/bin/tpumesh-sidecar"
	@echo "make test        deps + build + unit, fuzz-corpus replay and integration tests"
	@echo "make demo        deps + build + run the whole flow on the simulators"
	@echo "make asan        unit tests and corpus replay under AddressSanitizer + UBSan (clang)"
	@echo "make valgrind    unit tests and corpus replay under valgrind"
	@echo "make fuzz        libFuzzer, FUZZ_SECONDS (default 30) per target"
	@echo "make lint        clang-format check, cppcheck, banned functions, complexity"
	@echo "make bench       benchmarks against peers (bench/)"
	@echo "make image-test  prove the Dockerfile's runtime stage (debootstrap + chroot, root)"

deps:
	@scripts/deps.sh

# ---- protobuf-c code generation (never committed) -------------------------
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

$(GEN_PY): $(PROTOS)
	@mkdir -p $(BUILD)/gen/py
	protoc --proto_path=proto --python_out=$(BUILD)/gen/py $(PROTOS)
	@touch $@

gen-py: $(GEN_PY)

# ---- objects and libraries --------------------------------------------------
$(BUILD)/obj/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -std=c11 $(OPT) -w -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(CORE_LIB): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(IO_LIB): $(IO_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The pure core must link with nothing but protobuf-c, cJSON, libyaml and libm
# (DESIGN.md §2, STYLE.md R8): a probe program that pulls in every core object.
check-core-pure: $(BUILD)/core-pure.ok
$(BUILD)/core-pure.ok: $(CORE_LIB)
	@printf 'int main(void){return 0;}\n' > $(BUILD)/core-probe.c
	@$(CC) $(BUILD)/core-probe.c -o $(BUILD)/core-probe $(LDSAN) -Wl,--whole-archive $(CORE_LIB) \
	    -Wl,--no-whole-archive $(CORE_LIBS) || \
	    { echo "common/core must not depend on curl, lws or grpc (see errors above)"; exit 1; }
	@touch $@

# The minimal static OpenSSL and libcurl (see BIN_LIBS); OpenSSL first, libcurl compiles
# against it. Each script keeps its own cache key (its checksum, the pins, the compiler;
# libcurl's also the OpenSSL build's stamp): when it has nothing to do, only the timestamps
# move. A grouped target (&:): one run of build-openssl.sh makes both archives.
$(OPENSSL_A) &: scripts/build-openssl.sh scripts/debian-source.sh
	CC="$(CC)" scripts/build-openssl.sh $(THIRD_PARTY) $(THIRD_PARTY_CACHE)
	@touch $(OPENSSL_A)

$(CURL_A): scripts/build-curl.sh scripts/debian-source.sh $(OPENSSL_A)
	CC="$(CC)" scripts/build-curl.sh $(THIRD_PARTY) $(THIRD_PARTY_CACHE)
	@touch $@

$(BUILD)/bin/tpumesh-init: $(call obj,$(INIT_SRC)) $(IO_LIB) $(CORE_LIB) $(CURL_A) $(OPENSSL_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(INIT_SRC)) $(IO_LIB) $(CORE_LIB) $(BIN_LIBS) $(CORE_LIBS)

$(BUILD)/bin/tpumesh-sidecar: $(call obj,$(SIDE_SRC)) $(IO_LIB) $(CORE_LIB) $(CURL_A) $(OPENSSL_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(SIDE_SRC)) $(IO_LIB) $(CORE_LIB) $(BIN_LIBS) $(CORE_LIBS)

# ---- tests -----------------------------------------------------------------
$(BUILD)/tests/test_%: $(BUILD)/obj/tests/unit/test_%.o $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(IO_LIB) $(CORE_LIB) -lcmocka $(IO_LIBS) $(CORE_LIBS)

# Replay build of a fuzz target: tests/fuzz/replay.c supplies main().
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(IO_LIBS) $(CORE_LIBS)

# Test drivers used by integration tests (tests/tools/<name>.c -> $(BUILD)/tests/tools/<name>).
$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(IO_LIB) $(CORE_LIB) $(IO_LIBS) $(CORE_LIBS)

test-unit: $(UNIT_BINS) $(TOOL_BINS)
test-fuzz: $(FUZZ_BINS)

test: deps
	@$(MAKE) --no-print-directory all test-unit test-fuzz gen-py
	@BUILD=$(BUILD) PY=$(PY) tests/run.sh

asan:
	@$(MAKE) --no-print-directory BUILD=build-asan CC=clang SAN=1 all test-unit test-fuzz
	@BUILD=build-asan PY=$(PY) ONLY="unit fuzz" tests/run.sh

valgrind: test-unit test-fuzz
	@BUILD=$(BUILD) PY=$(PY) ONLY="unit fuzz" WRAP="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect" tests/run.sh

FUZZ_SECONDS ?= 30
fuzz:
	@BUILD=build-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

lint:
	@scripts/lint.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

demo: deps
	@$(MAKE) --no-print-directory all gen-py
	@BUILD=$(BUILD) PY=$(PY) scripts/demo.sh

bench: all gen-py
	@BUILD=$(BUILD) PY=$(PY) bench/run.sh

# Proves the Dockerfile's runtime stage without a Docker engine (debootstrap +
# chroot; needs root and the Debian mirror). Not in `make test`: 3-6 min cold, under 1.5 min cached.
image-test: all
	@BUILD=$(BUILD) scripts/image-test.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
