# syntax=docker/dockerfile:1
#
# tpumesh container image: tpumesh-init and tpumesh-sidecar in one image.
#
#   docker build -t tpumesh:$(cat VERSION) .
#
# The pod spec picks the program with `args:` (never `command:`), so tini stays
# PID 1 (STYLE.md R18): it forwards SIGTERM to the program, which drains and
# exits 0 (DESIGN.md §6), and it reaps any zombie, so neither program has to
# act as an init.
#
# scripts/image-test.sh (`make image-test`) proves both stages without a Docker
# engine: it parses each stage's `apt-get install` package list (the words up to
# the `&&` that ends it), checks that every shared library the programs load
# comes from a runtime package, builds each stage's root file system with
# debootstrap, runs this file's `make` in the build one and both programs in the
# runtime one as UID 65532. Keep one `apt-get install` per stage so it can.

ARG DEBIAN_SUITE=bookworm

# ---- build stage: the same `make` every developer and CI runs -------------
# `make` also builds the minimal static OpenSSL and libcurl
# (scripts/build-openssl.sh, build-curl.sh): they download Debian's openssl and
# curl sources from deb.debian.org (SHA-256 pinned; when that revision has left
# the pool, the one named by the gpgv-verified bookworm index), hence curl,
# patch, xz-utils, gpgv and debian-archive-keyring here, and perl for
# OpenSSL's Configure.
FROM debian:${DEBIAN_SUITE} AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates \
        curl \
        debian-archive-keyring \
        gcc \
        gpgv \
        libc6-dev \
        libcap-dev \
        libcjson-dev \
        libcurl4-openssl-dev \
        libgrpc-dev \
        libprotobuf-c-dev \
        libssl-dev \
        libwebsockets-dev \
        libyaml-dev \
        make \
        patch \
        perl \
        pkg-config \
        protobuf-c-compiler \
        xz-utils \
        zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make \
    && build/bin/tpumesh-init --version \
    && build/bin/tpumesh-sidecar --version

# ---- runtime stage: only the libraries the two programs load --------------
# bookworm-slim is Debian's minbase root file system with documentation
# removed; libc6 is already in it and is listed anyway so the list names
# every package whose libraries the programs load (scripts/image-test.sh).
# libcurl, libwebsockets, OpenSSL, zlib and gRPC are linked into the programs
# (Makefile, BIN_LIBS); ca-certificates gives OpenSSL the CA bundle.
FROM debian:${DEBIAN_SUITE}-slim AS runtime
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates \
        libc6 \
        libcjson1 \
        libgcc-s1 \
        libprotobuf-c1 \
        libstdc++6 \
        libyaml-0-2 \
        tini \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=build /src/build/bin/tpumesh-init /src/build/bin/tpumesh-sidecar /usr/local/bin/
COPY --from=build /src/VERSION /usr/share/tpumesh/VERSION
# 65532 is the conventional "nonroot" UID/GID of distroless images; the
# chart's securityContext sets the same numbers (runAsNonRoot needs a
# numeric user to verify).
USER 65532:65532
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["tpumesh-sidecar", "--help"]
LABEL org.opencontainers.image.title="tpumesh" \
      org.opencontainers.image.description="TPU slice topology init container and native sidecar for GKE"
