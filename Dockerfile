# syntax=docker/dockerfile:1
#
# tpumesh container image: every tpumesh program (tpumesh-init, tpumesh-sidecar,
# ...) in one image.
#
#   docker build -t tpumesh:$(cat VERSION) .
#
# The pod spec picks the program with `args:` (never `command:`), so tini stays
# PID 1 (docs/STYLE.md R18): it forwards SIGTERM to the program, which drains and
# exits 0 (docs/DESIGN.md §6), and it reaps any zombie, so neither program has to
# act as an init.
#
# scripts/image-test.sh (`make image-test`) proves both stages without a Docker
# engine: it parses each stage's `apt-get install` package list (the words up to
# the `&&` that ends it), checks that every shared library the programs load
# comes from a runtime package and that no program embeds a private copy of a
# library, builds each stage's root file system with debootstrap, runs this
# file's `make` in the build one and the programs in the runtime one as UID
# 65532. Keep one `apt-get install` per stage so it can.

ARG DEBIAN_SUITE=bookworm

# ---- build stage: the same `make` every developer and CI runs -------------
# The compiler, make, protoc-c and the -dev packages of the libraries the
# programs link (Makefile: CORE_LIBS, IO_LIBS). Nothing is downloaded during
# the build: every library comes from Debian's packages.
FROM debian:${DEBIAN_SUITE} AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        gcc \
        libc6-dev \
        libcjson-dev \
        libcurl4-openssl-dev \
        libgrpc-dev \
        libprotobuf-c-dev \
        libssl-dev \
        libwebsockets-dev \
        libyaml-dev \
        make \
        protobuf-c-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make \
    && for p in build/bin/tpumesh-*; do "$p" --version || exit 1; done

# ---- runtime stage: the Debian packages whose libraries the programs load --
# bookworm-slim is Debian's minbase root file system with documentation
# removed; libc6 is already in it and is listed anyway so the list names every
# package the programs link directly (scripts/image-test.sh checks this list
# against `ldd` of the programs and `dpkg -S` of every library). apt installs
# what these need (gRPC's abseil, c-ares, re2; libcurl's nghttp2, zlib, ...),
# so security updates to any of them reach the image through Debian, and image
# scanners, which read the package database, see every library. libssl3 is
# the TLS of libcurl and libwebsockets (and tpumesh-injector's certificate
# check); ca-certificates gives it the CA bundle.
FROM debian:${DEBIAN_SUITE}-slim AS runtime
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates \
        libc6 \
        libcjson1 \
        libcurl4 \
        libgrpc29 \
        libprotobuf-c1 \
        libssl3 \
        libwebsockets17 \
        libyaml-0-2 \
        tini \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
# Every program the build stage made (tpumesh-init, tpumesh-sidecar, ...).
COPY --from=build /src/build/bin/ /usr/local/bin/
COPY --from=build /src/VERSION /usr/share/tpumesh/VERSION
# 65532 is the conventional "nonroot" UID/GID of distroless images; the
# chart's securityContext sets the same numbers (runAsNonRoot needs a
# numeric user to verify).
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["tpumesh-sidecar", "--help"]
LABEL org.opencontainers.image.title="tpumesh" \
      org.opencontainers.image.description="TPU slice topology init container and native sidecar for GKE"
