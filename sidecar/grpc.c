/*
 * grpc.c - what the sidecar hands its gRPC server (grpc_server.h):
 * the published topology as a TopologySnapshot, built from the published
 * worker list when someone asks for it, and, while relay subscribers are
 * connected, the pod records it follows.
 * Main thread.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/mem.h"
#include "core/prom.h"
#include "core/topo_msg.h"
#include "grpc_server.h"
#include "k8s_informer.h"
#include "io/log.h"
#include "io/sys.h"
#include "relay_client.h"
#include "sidecar.h"

#define MOD "grpc"

/* The Topology message is built from the published list (topology.c keeps
 * it) only while someone wants it: a Get or a VIEW_TOPOLOGY watcher after a
 * publish. The server keeps the last one. */
static void update_topology(struct mesh_sidecar *ctx, const char *rv)
{
    if (!ctx->have_pub || ctx->grpc_gen == ctx->pub_in.generation) {
        return;
    }
    if (ctx->grpc_told != ctx->pub_in.generation) {
        mesh_grpc_server_topology_changed(ctx->grpc);
        ctx->grpc_told = ctx->pub_in.generation;
    }
    if (!mesh_grpc_server_topology_wanted(ctx->grpc)) {
        return;
    }
    uint8_t *pb = NULL;
    size_t len = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_topo_msg_snapshot(&ctx->pub_in, rv, &pb, &len, &err) < 0) {
        mesh_warn(MOD, "cannot serve generation %llu over gRPC: %s",
                  (unsigned long long)ctx->pub_in.generation, err.msg);
    } else {
        mesh_grpc_server_set_topology(ctx->grpc, pb, len);
    }
    mesh_free(pb);
    ctx->grpc_gen = ctx->pub_in.generation;
}

void mesh_sidecar_grpc_update(struct mesh_sidecar *ctx)
{
    if (ctx->grpc == NULL) {
        return;
    }
    char rv[MESH_K8S_RV_MAX] = "";
    struct mesh_relay_status rs;
    bool have_relay = false;
    mesh_sidecar_relay_status(ctx, &rs, &have_relay);
    if (ctx->following) {
        snprintf(rv, sizeof(rv), "%s", rs.rv);
    } else if (ctx->inf != NULL) {
        struct mesh_k8s_informer_stats ist;
        mesh_k8s_informer_stats(ctx->inf, &ist);
        snprintf(rv, sizeof(rv), "%s", ist.rv);
    }
    update_topology(ctx, rv);

    struct mesh_grpc_server_stats gs;
    mesh_grpc_server_stats(ctx->grpc, &gs);
    uint64_t changes = atomic_load(&ctx->changes);
    bool synced = mesh_sidecar_source_synced(ctx);
    if (gs.pod_streams == 0 || (ctx->grpc_pods_set && changes == ctx->grpc_pods_changes)) {
        return;
    }
    struct mesh_sidecar_recs r = {0};
    if (ctx->following) {
        struct mesh_relay_store *st = mesh_sidecar_relay_store(ctx);
        mesh_relay_store_lock(st);
        size_t n = mesh_relay_store_count(st);
        for (size_t i = 0; i < n; i++) {
            (void)mesh_sidecar_recs_add(&r, NULL, NULL, mesh_relay_store_at(st, i));
        }
        mesh_grpc_server_set_pods(ctx->grpc, r.v, r.n, rv, synced, rs.depth + 1);
        mesh_relay_store_unlock(st);
    } else if (ctx->inf != NULL) {
        mesh_k8s_informer_lock(ctx->inf);
        (void)mesh_k8s_informer_foreach(ctx->inf, mesh_sidecar_recs_add, &r);
        mesh_grpc_server_set_pods(ctx->grpc, r.v, r.n, rv, synced, 0);
        mesh_k8s_informer_unlock(ctx->inf);
    } else {
        mesh_grpc_server_set_pods(ctx->grpc, NULL, 0, "", false, 0);
        synced = false;
    }
    mesh_free(r.v);
    ctx->grpc_pods_changes = changes;
    ctx->grpc_pods_set = synced;
}

void mesh_sidecar_grpc_wake(void *vctx)
{
    struct mesh_sidecar *ctx = vctx;
    uint64_t one = 1;
    (void)!write(ctx->wake_fd, &one, sizeof(one));
}

void mesh_sidecar_grpc_metrics(struct mesh_sidecar *ctx, struct mesh_buf *b)
{
    if (ctx->grpc == NULL) {
        return;
    }
    struct mesh_grpc_server_stats g;
    mesh_grpc_server_stats(ctx->grpc, &g);
    mesh_prom_counter(b, "tpumesh_grpc_calls_total", "gRPC calls accepted (health, topology).",
                      g.calls);
    mesh_prom_gauge(b, "tpumesh_grpc_streams", "Watch streams open (health and topology).",
                    (double)g.streams);
    mesh_prom_gauge(b, "tpumesh_grpc_relay_subscribers",
                    "Sidecars following this one (Watch VIEW_PODS).", (double)g.pod_streams);
    mesh_prom_counter(b, "tpumesh_grpc_streams_refused_total",
                      "Streams refused at the stream or fan-out limit.", g.refused);
    mesh_prom_counter(b, "tpumesh_grpc_streams_dropped_total",
                      "Streams cancelled because the peer did not read.", g.dropped);
    mesh_prom_counter(b, "tpumesh_grpc_messages_sent_total",
                      "Messages sent (replies and stream messages).", g.messages);
    mesh_prom_counter(b, "tpumesh_grpc_sent_bytes_total",
                      "Message bytes sent (before HTTP/2 framing).", g.bytes);
    struct mesh_relay_status rs;
    bool have = false;
    mesh_sidecar_relay_status(ctx, &rs, &have);
    pthread_mutex_lock(&ctx->mu);
    uint64_t fallbacks = ctx->fallbacks;
    pthread_mutex_unlock(&ctx->mu);
    bool following = ctx->following;
    int64_t now = mesh_sys_now_ms();
    mesh_prom_family(b, "tpumesh_source", "gauge",
                     "Where the worker list comes from (1 on the current one).");
    mesh_prom_u64(b, "tpumesh_source", "source", "api", following ? 0 : 1);
    mesh_prom_u64(b, "tpumesh_source", "source", "relay", following ? 1 : 0);
    mesh_prom_gauge(b, "tpumesh_relay_depth",
                    "Relay hops between this pod and the API (0: own watch).",
                    following ? rs.depth + 1 : 0);
    mesh_prom_gauge(b, "tpumesh_relay_last_message_age_seconds",
                    "Since the relay's last message (-1: none).",
                    have && rs.last_msg_ms ? (double)(now - rs.last_msg_ms) / 1000.0 : -1.0);
    mesh_prom_gauge(b, "tpumesh_relay_source_age_seconds",
                    "The relay's own source age in its last message.",
                    (double)rs.source_age_ms / 1000.0);
    mesh_prom_counter(b, "tpumesh_relay_fallbacks_total",
                      "API watches started because the relay was not usable.", fallbacks);
    mesh_prom_counter(b, "tpumesh_relay_refused_total",
                      "Relay messages refused (a value the API rules refuse).", rs.refused);
    mesh_prom_counter(b, "tpumesh_relay_sessions_total", "Relay subscriptions started.",
                      rs.sessions);
    mesh_prom_counter(b, "tpumesh_relay_received_messages_total",
                      "Messages received from the relay.", rs.messages);
    mesh_prom_counter(b, "tpumesh_relay_received_bytes_total",
                      "Message bytes received from the relay.", rs.bytes);
}
