/*
 * metrics.c - the sidecar's /metrics document (Prometheus text exposition
 * format 0.0.4) from the informer's counters and the status the loop
 * publishes, and the ring of publish latencies its summary is computed from.
 * Called from the HTTP thread; reads shared state under ctx->mu or through
 * atomics only.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/prom.h"
#include "k8s_informer.h"
#include "io/sys.h"
#include "sidecar.h"

void mesh_sidecar_note_latency(struct mesh_sidecar *ctx, int64_t usec)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->st.lat_us[ctx->st.nlat % MESH_SIDECAR_LAT_RING] =
        usec > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)(usec < 0 ? 0 : usec);
    ctx->st.nlat++;
    pthread_mutex_unlock(&ctx->mu);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* The informer's counters: LISTs, WATCHes and their restarts, API errors, events. */
static void put_api(struct mesh_buf *b, const struct mesh_k8s_informer_stats *s)
{
    mesh_prom_counter(b, "tpumesh_api_lists_total",
                      "Complete LISTs applied (first sync and relists).", s->lists);
    mesh_prom_counter(
        b, "tpumesh_api_relists_total",
        "LISTs forced by 410 Gone, malformed or oversized events, or resourceVersions going back.",
        s->relists);
    mesh_prom_counter(b, "tpumesh_watch_starts_total",
                      "WATCH requests started; every start after the first is a restart.",
                      s->watches);
    mesh_prom_family(b, "tpumesh_watch_restarts_total", "counter",
                     "WATCH requests after the first, by how the previous one ended (timeout, "
                     "cut, stalled, expired, error_event, http_error, connect, malformed, "
                     "oversized, rv_backwards).");
    for (int r = 0; r < MESH_K8S_WATCH_REASONS; r++) {
        if (r != MESH_K8S_WATCH_INITIAL) {
            mesh_prom_u64(b, "tpumesh_watch_restarts_total", "reason",
                          mesh_k8s_informer_reason_name((enum mesh_k8s_watch_reason)r),
                          s->watch_starts[r]);
        }
    }
    mesh_prom_family(b, "tpumesh_api_errors_total", "counter",
                     "Failed LIST pages and WATCHes by HTTP status or in-stream ERROR code "
                     "(\"503\") or class (connect, tls, timeout, protocol, oversized, malformed, "
                     "auth, other).");
    for (size_t i = 0; i < s->api_error_rows && i < MESH_K8S_API_ERROR_ROWS; i++) {
        char label[sizeof(s->api_errors[i].label) + 1];
        snprintf(label, sizeof(label), "%.*s", (int)sizeof(s->api_errors[i].label),
                 s->api_errors[i].label);
        mesh_prom_u64(b, "tpumesh_api_errors_total", "code", label, s->api_errors[i].count);
    }
    mesh_prom_family(b, "tpumesh_watch_events_total", "counter",
                     "Watch events received: BOOKMARK, and object events (ADDED/MODIFIED/DELETED, "
                     "split by effect in tpumesh_store_changes_total).");
    mesh_prom_u64(b, "tpumesh_watch_events_total", "type", "BOOKMARK", s->bookmarks);
    mesh_prom_u64(b, "tpumesh_watch_events_total", "type", "object", s->events);
}

/* What the loop did with them: store changes, worker-list updates, publishes. */
static void put_loop(struct mesh_buf *b, struct mesh_sidecar *ctx,
                     const struct mesh_sidecar_status *st)
{
    mesh_prom_family(b, "tpumesh_store_changes_total", "counter",
                     "Changes to the pod store by type (watch events and relist differences).");
    mesh_prom_u64(b, "tpumesh_store_changes_total", "type", "added", atomic_load(&ctx->ev_added));
    mesh_prom_u64(b, "tpumesh_store_changes_total", "type", "modified",
                  atomic_load(&ctx->ev_modified));
    mesh_prom_u64(b, "tpumesh_store_changes_total", "type", "deleted",
                  atomic_load(&ctx->ev_deleted));
    mesh_prom_counter(b, "tpumesh_worker_list_builds_total",
                      "Recomputes that built the worker list from the store (changes of a peer's "
                      "readiness held back by the pacing build nothing).",
                      atomic_load(&ctx->w_built));
    mesh_prom_counter(b, "tpumesh_publishes_total", "Publishes that replaced at least one file.",
                      st->publishes);
    mesh_prom_counter(b, "tpumesh_publishes_coalesced_total",
                      "Publishes held back and folded into the next one: routine changes (of an "
                      "incomplete topology, or only peers' readiness in a complete one) wait 1 s "
                      "after the first publish, then 2, 4, 8, up to 16 s with each further "
                      "publish of a burst.",
                      st->publishes_coalesced);
    mesh_prom_counter(b, "tpumesh_publishes_coalesced_readiness_total",
                      "Of tpumesh_publishes_coalesced_total, the readiness-only changes of a "
                      "complete topology.",
                      st->publishes_coalesced_ready);
    mesh_prom_gauge(b, "tpumesh_publish_wait_seconds",
                    "How long after the last publish a routine change waits now: 1 s after the "
                    "first publish and once 16 s passed without one, doubled by every publish in "
                    "between, up to 16 s (0 before the first publish).",
                    (double)mesh_pace_wait(&st->pace, mesh_sys_now_ms()) / 1000.0);
    mesh_prom_counter(b, "tpumesh_publish_errors_total", "Failed renders or publishes.",
                      st->publish_errors);
}

/* The published topology: generation, completeness, workers, publish latency. */
static void put_topology(struct mesh_buf *b, struct mesh_sidecar_status *st)
{
    mesh_prom_gauge(b, "tpumesh_generation", "Generation of the published topology.json.",
                    (double)st->generation);
    mesh_prom_gauge(b, "tpumesh_topology_complete", "1 while a complete topology is published.",
                    st->ready ? 1 : 0);
    mesh_prom_family(b, "tpumesh_workers", "gauge", "Workers by state.");
    mesh_prom_f64(b, "tpumesh_workers", "state", "expected", st->expected);
    mesh_prom_f64(b, "tpumesh_workers", "state", "present", st->present);
    mesh_prom_f64(b, "tpumesh_workers", "state", "addressed", st->addressed);
    mesh_prom_f64(b, "tpumesh_workers", "state", "ready", st->ready_workers);
    mesh_prom_gauge(b, "tpumesh_last_publish_timestamp_seconds",
                    "Unix time of the last publish (0 = none yet).", st->last_publish_time);
    mesh_prom_family(b, "tpumesh_publish_latency_seconds", "summary",
                     "From the arrival of the earliest change a publish carries (its watch "
                     "event's or LIST's last byte read) to the files renamed, over the last 1024 "
                     "publishes; a routine change held back by the pacing counts the time it "
                     "waited.");
    size_t n = st->nlat < MESH_SIDECAR_LAT_RING ? st->nlat : MESH_SIDECAR_LAT_RING;
    if (n > 0) {
        qsort(st->lat_us, n, sizeof(st->lat_us[0]), cmp_u32);
        static const char *const qname[] = {"0.5", "0.9", "0.99", "1"};
        static const double qs[] = {0.5, 0.9, 0.99, 1.0};
        for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
            size_t k = (size_t)(qs[i] * (double)(n - 1) + 0.5);
            mesh_prom_f64(b, "tpumesh_publish_latency_seconds", "quantile", qname[i],
                          (double)st->lat_us[k] / 1e6);
        }
    }
    mesh_prom_u64(b, "tpumesh_publish_latency_seconds_count", NULL, NULL, st->nlat);
}

void mesh_sidecar_metrics(struct mesh_sidecar *ctx, struct mesh_buf *b)
{
    struct mesh_k8s_informer_stats s;
    memset(&s, 0, sizeof(s));
    /* Under mu: a relay taking over swaps ctx->inf out and frees it. */
    pthread_mutex_lock(&ctx->mu);
    if (ctx->inf != NULL) {
        mesh_k8s_informer_stats(ctx->inf, &s);
    }
    struct mesh_sidecar_status st = ctx->st;
    pthread_mutex_unlock(&ctx->mu);
    put_api(b, &s);
    put_loop(b, ctx, &st);
    put_topology(b, &st);
    mesh_sidecar_grpc_metrics(ctx, b);
}
