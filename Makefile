# tpumesh - build, test and demo. `make help` lists the targets.
#
# Layout (docs/DESIGN.md §2): common/core -> libmeshcore.a (pure; links without
# curl, lws or grpc), common/io -> libmeshio.a, initcontainer/, sidecar/ and injector/ ->
# build/bin/ (their modules besides main.c also -> lib<program>.a, which the tests link). Sources are discovered with wildcards: adding a module is adding
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
CPPFLAGS += -D_GNU_SOURCE -DMESH_VERSION='"$(VERSION)"' -Icommon -I. -I$(BUILD)/gen
CFLAGS   += $(WARN) $(OPT) -MMD -MP
LDFLAGS  += -Wl,-z,relro,-z,now $(LDSAN)

# Every program links Debian's shared libraries (libcurl4, libwebsockets17,
# libgrpc29, libssl3, libprotobuf-c1, libcjson1, libyaml-0-2): security fixes
# reach the image through Debian's packages, and image scanners, which read the
# package database, see every library the programs load. Never link a private
# or static copy of a library (scripts/image-test.sh checks the binaries).
CORE_LIBS := -lprotobuf-c -lcjson -lyaml -lm
IO_LIBS   := -lcurl -lwebsockets -lssl -lcrypto -lgrpc -lgpr -lpthread
BIN_LIBS  := $(IO_LIBS)

PROTOS     := $(shell find proto -name '*.proto' 2>/dev/null | sort)
GEN_C      := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
GEN_H      := $(GEN_C:.c=.h)
GEN_PY     := $(BUILD)/gen/py/.stamp

CORE_SRC   := $(sort $(wildcard common/core/*.c))
IO_SRC     := $(sort $(wildcard common/io/*.c))
INIT_SRC   := $(sort $(wildcard initcontainer/*.c))
SIDE_SRC   := $(sort $(wildcard sidecar/*.c))
INJ_SRC    := $(sort $(wildcard injector/*.c))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
# tests/tools/podbind.c is a preload library (below), every other tool a program.
TOOL_SRC   := $(filter-out tests/tools/podbind.c,$(sort $(wildcard tests/tools/*.c)))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ   := $(call obj,$(CORE_SRC)) $(patsubst %.c,%.o,$(subst $(BUILD)/gen,$(BUILD)/obj/gen,$(GEN_C)))
IO_OBJ     := $(call obj,$(IO_SRC))
CORE_LIB   := $(BUILD)/lib/libmeshcore.a
IO_LIB     := $(BUILD)/lib/libmeshio.a
# A module only one program uses lives in that program's directory; the unit tests, fuzz
# targets and test tools reach it through the program's modules besides main.c.
INIT_LIB   := $(BUILD)/lib/libinit.a
SIDE_LIB   := $(BUILD)/lib/libsidecar.a
INJ_LIB    := $(BUILD)/lib/libinjector.a
PROG_LIBS  := $(INIT_LIB) $(SIDE_LIB) $(INJ_LIB)
BINS       := $(BUILD)/bin/tpumesh-init $(BUILD)/bin/tpumesh-sidecar $(BUILD)/bin/tpumesh-injector
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
TOOL_BINS  := $(patsubst tests/tools/%.c,$(BUILD)/tests/tools/%,$(TOOL_SRC))
PODBIND    := $(BUILD)/tests/podbind.so

.PHONY: all deps deps-base trainer-deps trainers test e2e e2e-deps e2e-slow test-unit test-fuzz test-integration asan valgrind fuzz lint \
        format format-check demo bench bench-check clean help check-core-pure gen-py image-test

# Keep intermediate objects (pattern chains would delete them and force rebuilds).
.SECONDARY:

all: $(BINS) check-core-pure

help:
	@echo "make deps        install the Debian packages the build and tests need, and Helm 3 and 4"
	@echo "                 for the chart tests into \$$(BUILD)/helm (idempotent; offline once there)"
	@echo "make             build build/bin/tpumesh-init, tpumesh-sidecar and tpumesh-injector"
	@echo "make test        deps + build + unit, fuzz-corpus replay, integration, trainer and e2e tests"
	@echo "make trainers    only the real TensorFlow/DTensor and JAX tests (tests/trainers/)"
	@echo "make trainer-deps  the pinned TensorFlow and JAX venvs in build/ (make deps runs it)"
	@echo "make e2e-deps    build the pinned Kubernetes control plane + JobSet into \$$(BUILD)/e2e (Go)"
	@echo "make e2e         the end-to-end scenarios alone, on that real control plane"
	@echo "make e2e-slow    the slow ones: API server faults, relay vs direct at 64 pods"
	@echo "make demo        deps (without the trainer venvs) + build + run the whole flow on the"
	@echo "                 simulators, the injector path included"
	@echo "make asan        unit, corpus replay and integration tests, AddressSanitizer + UBSan (clang)"
	@echo "make valgrind    unit, corpus replay and integration tests under valgrind"
	@echo "make fuzz        libFuzzer, FUZZ_SECONDS (default 30) per target"
	@echo "make lint        clang-format check, cppcheck, banned functions, complexity"
	@echo "make bench       benchmarks against peers (bench/)"
	@echo "make bench-check the sidecar's cost per event against its budget (~1 min, CI)"
	@echo "make image-test  prove the Dockerfile's runtime stage (debootstrap + chroot, root)"

deps: deps-base
	@scripts/trainer-deps.sh

# The Debian packages, node modules and Helm, without the TensorFlow/JAX venvs: all that
# `make demo` needs (it runs on the simulators, never a trainer).
deps-base:
	@BUILD=$(BUILD) scripts/deps.sh

# The hash-pinned TensorFlow and JAX virtual environments of the real-runtime tests
# (build/venv-tf, build/venv-jax; rebuilt only when tests/trainers/requirements-*.txt change).
trainer-deps:
	@scripts/trainer-deps.sh

# Only the real-runtime tests: real TensorFlow/DTensor and JAX processes read the files the
# real tpumesh-init and tpumesh-sidecar published (tests/trainers/).
trainers: trainer-deps
	@$(MAKE) --no-print-directory all test-unit
	@BUILD=$(BUILD) PY=$(PY) ONLY=trainers tests/run.sh

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

$(INIT_LIB): $(call obj,$(filter-out %/main.c,$(INIT_SRC)))
$(SIDE_LIB): $(call obj,$(filter-out %/main.c,$(SIDE_SRC)))
$(INJ_LIB): $(call obj,$(filter-out %/main.c,$(INJ_SRC)))
$(PROG_LIBS):
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The pure core must link with nothing but protobuf-c, cJSON, libyaml and libm
# (docs/DESIGN.md §2, docs/STYLE.md R8): a probe program that pulls in every core object.
check-core-pure: $(BUILD)/core-pure.ok
$(BUILD)/core-pure.ok: $(CORE_LIB)
	@printf 'int main(void){return 0;}\n' > $(BUILD)/core-probe.c
	@$(CC) $(BUILD)/core-probe.c -o $(BUILD)/core-probe $(LDSAN) -Wl,--whole-archive $(CORE_LIB) \
	    -Wl,--no-whole-archive $(CORE_LIBS) || \
	    { echo "common/core must not depend on curl, lws or grpc (see errors above)"; exit 1; }
	@touch $@

$(BUILD)/bin/tpumesh-init: $(call obj,$(INIT_SRC)) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(INIT_SRC)) $(IO_LIB) $(CORE_LIB) $(BIN_LIBS) $(CORE_LIBS)

$(BUILD)/bin/tpumesh-sidecar: $(call obj,$(SIDE_SRC)) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(SIDE_SRC)) $(IO_LIB) $(CORE_LIB) $(BIN_LIBS) $(CORE_LIBS)

# The injector checks its certificate/key pair with OpenSSL before handing
# it to libwebsockets (which links the same libssl3).
$(BUILD)/bin/tpumesh-injector: $(call obj,$(INJ_SRC)) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(call obj,$(INJ_SRC)) $(IO_LIB) $(CORE_LIB) $(BIN_LIBS) $(CORE_LIBS)

# ---- tests -----------------------------------------------------------------
$(BUILD)/tests/test_%: $(BUILD)/obj/tests/unit/test_%.o $(PROG_LIBS) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(PROG_LIBS) $(IO_LIB) $(CORE_LIB) -lcmocka $(IO_LIBS) $(CORE_LIBS)

# Replay build of a fuzz target: tests/fuzz/replay.c supplies main().
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o $(PROG_LIBS) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(IO_LIBS) $(CORE_LIBS)

# Test drivers used by integration tests (tests/tools/<name>.c -> $(BUILD)/tests/tools/<name>).
$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(PROG_LIBS) $(IO_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(PROG_LIBS) $(IO_LIB) $(CORE_LIB) $(IO_LIBS) $(CORE_LIBS)

# LD_PRELOAD library of the real-runtime and end-to-end tests: a wildcard bind becomes a bind on
# the process's pod IP (TPUMESH_POD_IP, 127.64.0.0/16) and connections leave from it, so
# processes on one host keep one IP per pod.
$(PODBIND): tests/tools/podbind.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) -O2 -g -fPIC -shared -o $@ $< -ldl

test-unit: $(UNIT_BINS) $(TOOL_BINS) $(PODBIND)
test-fuzz: $(FUZZ_BINS)

test: deps
	@BUILD=$(BUILD) scripts/e2e-deps.sh --background
	@$(MAKE) --no-print-directory all test-unit test-fuzz gen-py
	@BUILD=$(BUILD) PY=$(PY) tests/run.sh

# The pinned control plane of the end-to-end tests (tests/e2e/cluster/go.mod, docs/e2e.md):
# built from the Go module proxy into $(BUILD)/e2e, rebuilt only when the pins change.
e2e-deps:
	@BUILD=$(BUILD) nice -n 10 scripts/e2e-deps.sh

# The end-to-end scenarios alone, against the real control plane.
e2e: deps-base
	@$(MAKE) --no-print-directory all $(PODBIND)
	@BUILD=$(BUILD) nice -n 10 scripts/e2e-deps.sh
	@BUILD=$(BUILD) PY=$(PY) ONLY=e2e tests/run.sh

# The slow end-to-end scenarios (API server restart, etcd compaction and bookmarks; relay vs
# direct at 64 pods): not in `make test`, which keeps its e2e part under 8 minutes.
e2e-slow: deps-base
	@$(MAKE) --no-print-directory all $(PODBIND)
	@BUILD=$(BUILD) nice -n 10 scripts/e2e-deps.sh
	@BUILD=$(BUILD) PY=$(PY) ONLY=e2e E2E_PATTERN='slow_e2e_*.py' tests/run.sh

# Unit tests, corpus replays and integration tests with the programs built with ASan + UBSan
# (clang, build-asan/) or run under valgrind; any report fails the run (tests/sanitize.sh).
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan CC=clang SAN=1 all test-unit test-fuzz gen-py
	@BUILD=build-asan scripts/helm.sh
	@BUILD=build-asan PY=$(PY) tests/sanitize.sh asan

valgrind: deps
	@$(MAKE) --no-print-directory all test-unit test-fuzz gen-py
	@BUILD=$(BUILD) PY=$(PY) tests/sanitize.sh valgrind

FUZZ_SECONDS ?= 30
fuzz:
	@BUILD=build-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

lint:
	@scripts/lint.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	@clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

demo: deps-base
	@$(MAKE) --no-print-directory all gen-py
	@BUILD=$(BUILD) PY=$(PY) scripts/demo.sh

bench: all gen-py $(TOOL_BINS)
	@BUILD=$(BUILD) PY=$(PY) bench/run.sh

# The sidecar's cost per pod event against a committed budget (bench/sidecar/budget.json):
# instructions per event under callgrind, and CPU against the Python client on the same stream.
bench-check: all gen-py
	@BUILD=$(BUILD) PY=$(PY) bench/sidecar/check.sh

# Proves the Dockerfile's runtime stage without a Docker engine (debootstrap +
# chroot; needs root and the Debian mirror). Not in `make test`: 3-6 min cold, under 1.5 min cached.
image-test: all
	@BUILD=$(BUILD) scripts/image-test.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
