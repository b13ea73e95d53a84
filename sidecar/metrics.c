/*
 * metrics.c - the sidecar's /metrics document (Prometheus text exposition
 * format 0.0.4) from the informer's counters and the status the loop
 * publishes, and the ring of publish latencies its summary is computed from.
 * Called from the HTTP thread; reads shared state under ctx->mu or through
 * atomics only.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "io/k8s_informer.h"
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

/* One sample `name{label="value"} n` (value: at most max bytes, up to a
 * NUL), the value escaped as the text
 * exposition format asks (backslash, double quote and newline). */
static void put_labelled(struct mesh_buf *b, const char *name, const char *label, const char *value,
                         size_t max, uint64_t n)
{
    (void)mesh_buf_printf(b, NULL, "%s{%s=\"", name, label);
    for (const char *c = value; c < value + max && *c != '\0'; c++) {
        const char *esc = *c == '\\' ? "\\\\" : *c == '"' ? "\\\"" : *c == '\n' ? "\\n" : NULL;
        if (esc != NULL) {
            (void)mesh_buf_puts(b, esc, NULL);
        } else {
            (void)mesh_buf_printf(b, NULL, "%c", *c);
        }
    }
    (void)mesh_buf_printf(b, NULL, "\"} %llu\n", (unsigned long long)n);
}

char *mesh_sidecar_metrics_text(struct mesh_sidecar *ctx, size_t *out_len)
{
    struct mesh_k8s_informer_stats s;
    memset(&s, 0, sizeof(s));
    if (ctx->inf != NULL) {
        mesh_k8s_informer_stats(ctx->inf, &s);
    }
    struct mesh_buf b;
    mesh_buf_init(&b, 1 << 16);
    pthread_mutex_lock(&ctx->mu);
    struct mesh_sidecar_status st = ctx->st;
    pthread_mutex_unlock(&ctx->mu);
    /* Prometheus text exposition format 0.0.4: HELP, TYPE, samples. */
#define METRIC(name, type, help)                                                                   \
    (void)mesh_buf_printf(&b, NULL, "# HELP " name " " help "\n# TYPE " name " " type "\n")
    METRIC("tpumesh_api_lists_total", "counter",
           "Complete LISTs applied (first sync and relists).");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_api_lists_total %llu\n", (unsigned long long)s.lists);
    METRIC(
        "tpumesh_api_relists_total", "counter",
        "LISTs forced by 410 Gone, malformed or oversized events, or resourceVersions going back.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_api_relists_total %llu\n",
                          (unsigned long long)s.relists);
    METRIC("tpumesh_watch_starts_total", "counter",
           "WATCH requests started; every start after the first is a restart.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_watch_starts_total %llu\n",
                          (unsigned long long)s.watches);
    METRIC("tpumesh_watch_restarts_total", "counter",
           "WATCH requests after the first, by how the previous one ended (timeout, cut, "
           "stalled, expired, error_event, http_error, connect, malformed, oversized, "
           "rv_backwards).");
    for (int r = 0; r < MESH_K8S_WATCH_REASONS; r++) {
        if (r == MESH_K8S_WATCH_INITIAL) {
            continue;
        }
        put_labelled(&b, "tpumesh_watch_restarts_total", "reason",
                     mesh_k8s_informer_reason_name((enum mesh_k8s_watch_reason)r), 64,
                     s.watch_starts[r]);
    }
    METRIC("tpumesh_api_errors_total", "counter",
           "Failed LIST pages and WATCHes by HTTP status or in-stream ERROR code (\"503\") or "
           "class (connect, tls, timeout, protocol, oversized, malformed, auth, other).");
    for (size_t i = 0; i < s.api_error_rows && i < MESH_K8S_API_ERROR_ROWS; i++) {
        put_labelled(&b, "tpumesh_api_errors_total", "code", s.api_errors[i].label,
                     sizeof(s.api_errors[i].label), s.api_errors[i].count);
    }
    METRIC("tpumesh_watch_events_total", "counter",
           "Watch events received: BOOKMARK, and object events (ADDED/MODIFIED/DELETED, "
           "split by effect in tpumesh_store_changes_total).");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_watch_events_total{type=\"BOOKMARK\"} %llu\n",
                          (unsigned long long)s.bookmarks);
    (void)mesh_buf_printf(&b, NULL, "tpumesh_watch_events_total{type=\"object\"} %llu\n",
                          (unsigned long long)s.events);
    METRIC("tpumesh_store_changes_total", "counter",
           "Changes to the pod store by type (watch events and relist differences).");
    (void)mesh_buf_printf(&b, NULL,
                          "tpumesh_store_changes_total{type=\"added\"} %llu\n"
                          "tpumesh_store_changes_total{type=\"modified\"} %llu\n"
                          "tpumesh_store_changes_total{type=\"deleted\"} %llu\n",
                          (unsigned long long)atomic_load(&ctx->ev_added),
                          (unsigned long long)atomic_load(&ctx->ev_modified),
                          (unsigned long long)atomic_load(&ctx->ev_deleted));
    METRIC("tpumesh_worker_list_updates_total", "counter",
           "Recomputes of the worker list: patched (a few pod updates applied in place) or "
           "rebuilt from the whole store (start-up, adds, deletes, relists, bursts, and any "
           "change while the topology is incomplete).");
    (void)mesh_buf_printf(&b, NULL,
                          "tpumesh_worker_list_updates_total{how=\"patched\"} %llu\n"
                          "tpumesh_worker_list_updates_total{how=\"rebuilt\"} %llu\n",
                          (unsigned long long)atomic_load(&ctx->w_patched),
                          (unsigned long long)atomic_load(&ctx->w_rebuilt));
    METRIC("tpumesh_publishes_total", "counter", "Publishes that replaced at least one file.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publishes_total %llu\n",
                          (unsigned long long)st.publishes);
    METRIC("tpumesh_publishes_coalesced_total", "counter",
           "Publishes held back and folded into the next one: routine changes (of an "
           "incomplete topology, or only peers' readiness in a complete one) wait 1 s after "
           "the first publish, then 2, 4, 8, up to 16 s with each further publish of a burst.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publishes_coalesced_total %llu\n",
                          (unsigned long long)st.publishes_coalesced);
    METRIC("tpumesh_publishes_coalesced_readiness_total", "counter",
           "Of tpumesh_publishes_coalesced_total, the readiness-only changes of a complete "
           "topology.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publishes_coalesced_readiness_total %llu\n",
                          (unsigned long long)st.publishes_coalesced_ready);
    METRIC("tpumesh_publish_wait_seconds", "gauge",
           "How long after the last publish a routine change waits now: 1 s after the first "
           "publish and once 16 s passed without one, doubled by every publish in between, up "
           "to 16 s (0 before the first publish).");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publish_wait_seconds %g\n",
                          (double)mesh_pace_wait(&st.pace, mesh_sys_now_ms()) / 1000.0);
    METRIC("tpumesh_publish_errors_total", "counter", "Failed renders or publishes.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publish_errors_total %llu\n",
                          (unsigned long long)st.publish_errors);
    METRIC("tpumesh_generation", "gauge", "Generation of the published topology.json.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_generation %llu\n", (unsigned long long)st.generation);
    METRIC("tpumesh_topology_complete", "gauge", "1 while a complete topology is published.");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_topology_complete %d\n", st.ready ? 1 : 0);
    METRIC("tpumesh_workers", "gauge", "Workers by state.");
    (void)mesh_buf_printf(&b, NULL,
                          "tpumesh_workers{state=\"expected\"} %d\n"
                          "tpumesh_workers{state=\"present\"} %d\n"
                          "tpumesh_workers{state=\"addressed\"} %d\n"
                          "tpumesh_workers{state=\"ready\"} %d\n",
                          st.expected, st.present, st.addressed, st.ready_workers);
    METRIC("tpumesh_last_publish_timestamp_seconds", "gauge",
           "Unix time of the last publish (0 = none yet).");
    (void)mesh_buf_printf(&b, NULL, "tpumesh_last_publish_timestamp_seconds %.3f\n",
                          st.last_publish_time);
    METRIC("tpumesh_publish_latency_seconds", "summary",
           "From the arrival of the earliest change a publish carries (its watch event's or "
           "LIST's last byte read) to the files renamed, over the last 1024 publishes; a "
           "routine change held back by the pacing counts the time it waited.");
    size_t n = st.nlat < MESH_SIDECAR_LAT_RING ? st.nlat : MESH_SIDECAR_LAT_RING;
    if (n > 0) {
        qsort(st.lat_us, n, sizeof(st.lat_us[0]), cmp_u32);
        static const double qs[] = {0.5, 0.9, 0.99, 1.0};
        for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
            size_t k = (size_t)(qs[i] * (double)(n - 1) + 0.5);
            (void)mesh_buf_printf(&b, NULL,
                                  "tpumesh_publish_latency_seconds{quantile=\"%g\"} %.6f\n", qs[i],
                                  (double)st.lat_us[k] / 1e6);
        }
    }
    (void)mesh_buf_printf(&b, NULL, "tpumesh_publish_latency_seconds_count %llu\n",
                          (unsigned long long)st.nlat);
#undef METRIC
    mesh_sidecar_grpc_metrics(ctx, &b);
    return mesh_buf_steal(&b, out_len);
}
