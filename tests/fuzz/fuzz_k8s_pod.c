/*
 * fuzz_k8s_pod.c - Pod JSON -> record extraction and the worker ordering
 * built on top of it never crash, leak or read out of bounds, whatever the
 * bytes. The input is split on newlines into up to 8 Pod documents; every
 * record (valid or not) is packed (pack/unpack/pack must give the same bytes)
 * and then ordered into workers in each address mode.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/k8s_pod.h"
#include "tests/pod_parse.h"
#include "core/mem.h"
#include "core/workers.h"

#define MAX_PODS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_k8s_pod recs[MAX_PODS];
    struct mesh_k8s_pod_rec *packed[MAX_PODS];
    const struct mesh_k8s_pod_rec *ptrs[MAX_PODS];
    size_t n = 0;
    const char *p = (const char *)data, *end = p + size;
    while (p < end && n < MAX_PODS) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        struct mesh_err err;
        if (test_pod_parse(p, len, &recs[n], &err) == 0) {
            /* Packing keeps what ordering reads: unpack, pack again and
             * get the same bytes; equal records stay equal. */
            packed[n] = mesh_k8s_pod_pack(&recs[n]);
            struct mesh_k8s_pod back;
            mesh_k8s_pod_unpack(packed[n], &back);
            struct mesh_k8s_pod_rec *again = mesh_k8s_pod_pack(&back);
            if (!mesh_k8s_pod_rec_equal(packed[n], again) ||
                (n > 0 && memcmp(&recs[n], &recs[n - 1], sizeof(recs[n])) == 0 &&
                 !mesh_k8s_pod_rec_equal(packed[n], packed[n - 1]))) {
                abort();
            }
            mesh_free(again);
            ptrs[n] = packed[n];
            n++;
        }
        p += len + 1;
    }
    static const enum mesh_addr_mode modes[] = {MESH_ADDR_AUTO, MESH_ADDR_DNS, MESH_ADDR_IP};
    for (size_t m = 0; m < 3; m++) {
        for (int expected = 0; expected <= 3; expected += 3) {
            struct mesh_workers_opts o = {.mode = modes[m], .expected = expected, .per_slice = 0};
            struct mesh_workers w;
            struct mesh_err err;
            (void)mesh_workers_build(ptrs, n, &o, &w, &err);
            (void)mesh_workers_index_of(&w, n > 0 ? recs[0].name : "x");
            mesh_workers_cleanup(&w);
        }
    }
    for (size_t i = 0; i < n; i++) {
        mesh_free(packed[i]);
    }
    return 0;
}
