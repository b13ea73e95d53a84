/*
 * grpc.c - what the sidecar hands its gRPC server (io/grpc_server.h):
 * the published topology.json as a TopologySnapshot after every publish,
 * and, while relay subscribers are connected, the pod records it follows.
 * Main thread.
 */
#include <string.h>

#include "core/buf.h"
#include "core/mem.h"
#include "core/topo_msg.h"
#include "io/grpc_server.h"
#include "io/k8s_informer.h"
#include "io/log.h"
#include "sidecar.h"

#define MOD "grpc"

struct recs {
    const struct mesh_k8s_pod_rec **v;
    size_t n, cap;
};

static int add_rec(void *c, const char *key, const char *rv, const void *rec)
{
    struct recs *r = c;
    (void)key;
    (void)rv;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->v = mesh_reallocarray(r->v, r->cap, sizeof(*r->v));
    }
    r->v[r->n++] = rec;
    return 0;
}

static void update_topology(struct mesh_sidecar *ctx, const char *rv)
{
    if (!ctx->have_last || ctx->cache == NULL || ctx->grpc_gen == ctx->generation) {
        return;
    }
    struct mesh_render_out out;
    mesh_render_cache_view(ctx->cache, &out);
    const char *json = out.data[MESH_FILE_TOPOLOGY_JSON];
    if (json == NULL) {
        return;
    }
    uint8_t *pb = NULL;
    size_t len = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_topo_msg_snapshot(json, out.len[MESH_FILE_TOPOLOGY_JSON], rv, &pb, &len, &err) < 0) {
        mesh_warn(MOD, "cannot serve generation %llu over gRPC: %s",
                  (unsigned long long)ctx->generation, err.msg);
    } else {
        mesh_grpc_server_set_topology(ctx->grpc, pb, len);
    }
    mesh_free(pb);
    ctx->grpc_gen = ctx->generation;
}

void mesh_sidecar_grpc_update(struct mesh_sidecar *ctx)
{
    if (ctx->grpc == NULL || ctx->inf == NULL) {
        return;
    }
    struct mesh_k8s_informer_stats ist;
    mesh_k8s_informer_stats(ctx->inf, &ist);
    update_topology(ctx, ist.rv);

    struct mesh_grpc_server_stats gs;
    mesh_grpc_server_stats(ctx->grpc, &gs);
    uint64_t changes = atomic_load(&ctx->changes);
    bool synced = mesh_k8s_informer_has_synced(ctx->inf);
    if (gs.pod_streams == 0 || (ctx->grpc_pods_set && changes == ctx->grpc_pods_changes)) {
        return;
    }
    struct recs r = {0};
    mesh_k8s_informer_lock(ctx->inf);
    (void)mesh_k8s_informer_foreach(ctx->inf, add_rec, &r);
    mesh_grpc_server_set_pods(ctx->grpc, r.v, r.n, ist.rv, synced, 0);
    mesh_k8s_informer_unlock(ctx->inf);
    mesh_free(r.v);
    ctx->grpc_pods_changes = changes;
    ctx->grpc_pods_set = synced;
}

void mesh_sidecar_grpc_metrics(struct mesh_sidecar *ctx, struct mesh_buf *b)
{
    if (ctx->grpc == NULL) {
        return;
    }
    struct mesh_grpc_server_stats g;
    mesh_grpc_server_stats(ctx->grpc, &g);
    (void)mesh_buf_printf(
        b, NULL,
        "# HELP tpumesh_grpc_calls_total gRPC calls accepted (health, topology).\n"
        "# TYPE tpumesh_grpc_calls_total counter\ntpumesh_grpc_calls_total %llu\n"
        "# HELP tpumesh_grpc_streams Watch streams open (health and topology).\n"
        "# TYPE tpumesh_grpc_streams gauge\ntpumesh_grpc_streams %llu\n"
        "# HELP tpumesh_grpc_relay_subscribers Sidecars following this one (Watch VIEW_PODS).\n"
        "# TYPE tpumesh_grpc_relay_subscribers gauge\ntpumesh_grpc_relay_subscribers %llu\n"
        "# HELP tpumesh_grpc_streams_refused_total Streams refused at the stream or fan-out "
        "limit.\n"
        "# TYPE tpumesh_grpc_streams_refused_total counter\n"
        "tpumesh_grpc_streams_refused_total %llu\n"
        "# HELP tpumesh_grpc_streams_dropped_total Streams cancelled because the peer did not "
        "read.\n"
        "# TYPE tpumesh_grpc_streams_dropped_total counter\n"
        "tpumesh_grpc_streams_dropped_total %llu\n"
        "# HELP tpumesh_grpc_messages_sent_total Messages sent (replies and stream messages).\n"
        "# TYPE tpumesh_grpc_messages_sent_total counter\ntpumesh_grpc_messages_sent_total "
        "%llu\n"
        "# HELP tpumesh_grpc_sent_bytes_total Message bytes sent (before HTTP/2 framing).\n"
        "# TYPE tpumesh_grpc_sent_bytes_total counter\ntpumesh_grpc_sent_bytes_total %llu\n",
        (unsigned long long)g.calls, (unsigned long long)g.streams,
        (unsigned long long)g.pod_streams, (unsigned long long)g.refused,
        (unsigned long long)g.dropped, (unsigned long long)g.messages, (unsigned long long)g.bytes);
}
