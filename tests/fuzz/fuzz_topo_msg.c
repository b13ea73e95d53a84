/*
 * fuzz_topo_msg.c - the tpumesh.v1 message code (core/topo_msg.h) on any
 * bytes. Byte 0 picks the mode, the rest is the input:
 *   '0'  (was topology.json -> TopologySnapshot; the snapshot is built from
 *        the render input now, fuzz_render checks it): nothing
 *   '1'  WatchResponse bytes from a relay -> every Pod checked as if from
 *        the API (accepted records must survive a second round trip)
 *   '2'  one Pod JSON object as the API sends it: extract, pack, forward as
 *        a relay does, check as a subscriber does; the subscriber must get
 *        exactly the record direct mode stores (else abort)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/k8s_pod.h"
#include "tests/pod_parse.h"
#include "core/mem.h"
#include "core/topo_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Forward r as a relay does and check it as a subscriber does. */
static struct mesh_k8s_pod_rec *forward(const struct mesh_k8s_pod_rec *r)
{
    Tpumesh__V1__Pod m;
    mesh_topo_msg_pod_from_rec(&m, r);
    size_t len = tpumesh__v1__pod__get_packed_size(&m);
    uint8_t *buf = mesh_malloc(len + 1);
    tpumesh__v1__pod__pack(&m, buf);
    Tpumesh__V1__Pod *back = tpumesh__v1__pod__unpack(NULL, len, buf);
    mesh_free(buf);
    if (back == NULL) {
        abort();
    }
    struct mesh_err err;
    struct mesh_k8s_pod_rec *got = mesh_topo_msg_pod_to_rec(back, &err);
    tpumesh__v1__pod__free_unpacked(back, NULL);
    return got;
}

static void relay_message(const uint8_t *d, size_t n)
{
    struct mesh_err err;
    Tpumesh__V1__WatchResponse *m = mesh_topo_msg_unpack_watch(d, n, &err);
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; m->pods != NULL && i < m->pods->n_upserts; i++) {
        struct mesh_k8s_pod_rec *r = mesh_topo_msg_pod_to_rec(m->pods->upserts[i], &err);
        if (r != NULL) {
            struct mesh_k8s_pod_rec *again = forward(r);
            if (again == NULL || !mesh_k8s_pod_rec_equal(r, again)) {
                abort();
            }
            mesh_free(again);
            mesh_free(r);
        }
    }
    tpumesh__v1__watch_response__free_unpacked(m, NULL);
}

static void round_trip(const uint8_t *d, size_t n)
{
    struct mesh_k8s_pod p;
    struct mesh_err err;
    if (test_pod_parse((const char *)d, n, &p, &err) < 0) {
        return;
    }
    struct mesh_k8s_pod_rec *direct = mesh_k8s_pod_pack(&p);
    struct mesh_k8s_pod_rec *relayed = forward(direct);
    if (relayed == NULL || !mesh_k8s_pod_rec_equal(direct, relayed)) {
        abort();
    }
    mesh_free(relayed);
    mesh_free(direct);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    switch (data[0] % 3) {
    case 0:
        break;
    case 1:
        relay_message(data + 1, size - 1);
        break;
    default:
        round_trip(data + 1, size - 1);
        break;
    }
    return 0;
}
