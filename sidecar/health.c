/*
 * health.c - liveness and readiness, one definition for every way they are
 * asked (HTTP /healthz and /readyz, gRPC grpc.health.v1.Health):
 *
 *   live   the main loop ticked within LOOP_STUCK_MS and the source of pod
 *          updates (the API watch, or the relay) showed progress within
 *          --stuck-limit
 *   ready  a complete topology is published and current
 */
#include <stdio.h>
#include <string.h>

#include "grpc_server.h"
#include "io/sys.h"
#include "sidecar.h"

#define LOOP_STUCK_MS 30000

bool mesh_sidecar_is_live(struct mesh_sidecar *ctx, char *why, size_t cap)
{
    int64_t now = mesh_sys_now_ms();
    pthread_mutex_lock(&ctx->mu);
    int64_t idle = now - ctx->st.last_progress_ms;
    int64_t loop_idle = now - ctx->st.loop_tick_ms;
    bool live = true;
    if (ctx->st.loop_tick_ms != 0 && loop_idle > LOOP_STUCK_MS) {
        /* The main loop ticks every second; 30 s without one means it
         * hangs (a deadlock or a blocked call): let the kubelet restart us. */
        snprintf(why, cap, "stuck: the main loop has not run for %llds",
                 (long long)(loop_idle / 1000));
        live = false;
    } else if (ctx->st.last_progress_ms != 0 && idle > (int64_t)ctx->opts.stuck_limit_s * 1000) {
        snprintf(why, cap, "stuck: no progress from the Kubernetes API for %llds (limit %ds)",
                 (long long)(idle / 1000), ctx->opts.stuck_limit_s);
        live = false;
    } else {
        snprintf(why, cap, "ok");
    }
    pthread_mutex_unlock(&ctx->mu);
    return live;
}

bool mesh_sidecar_is_ready(struct mesh_sidecar *ctx, char *why, size_t cap)
{
    pthread_mutex_lock(&ctx->mu);
    bool ready = ctx->st.ready;
    /* Empty only before the own pod is known and the informer started. */
    const char *reason = ctx->st.reason[0] != '\0' ? ctx->st.reason
                         : ready                   ? "ready"
                                                   : "waiting for the first list of pods";
    /* One line, whatever a reason might carry. */
    snprintf(why, cap, "%.*s", (int)strcspn(reason, "\r\n"), reason);
    pthread_mutex_unlock(&ctx->mu);
    if (ctx->relay_mode) {
        /* Relay mode: say which source this pod follows and how far behind. */
        char src[300];
        mesh_sidecar_source_describe(ctx, src, sizeof(src));
        size_t n = strlen(why);
        snprintf(why + n, cap - n, "; source %s", src);
    }
    return ready;
}

int mesh_sidecar_grpc_health(void *vctx, const char *service, char *why, size_t cap)
{
    struct mesh_sidecar *ctx = vctx;
    bool ok;
    if (service[0] == '\0') {
        ok = mesh_sidecar_is_live(ctx, why, cap);
    } else if (strcmp(service, MESH_SIDECAR_GRPC_SERVICE) == 0) {
        ok = mesh_sidecar_is_ready(ctx, why, cap);
    } else {
        snprintf(why, cap, "unknown service");
        return MESH_GRPC_HEALTH_SERVICE_UNKNOWN;
    }
    return ok ? MESH_GRPC_HEALTH_SERVING : MESH_GRPC_HEALTH_NOT_SERVING;
}
