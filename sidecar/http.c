/*
 * http.c - the sidecar's HTTP endpoints (docs/DESIGN.md §6) on the hardened
 * server of io/httpd.h (connection, header, time and transfer limits;
 * WebSocket upgrades refused; GET and HEAD only):
 *
 *   GET /healthz   200 "ok" while the main loop ticks (every second; 30 s
 *                  without a tick fails) and the Kubernetes API made progress
 *                  within --stuck-limit; else 503 + the reason
 *   GET /readyz    200 only while a complete topology is published, else 503
 *                  with a one-line reason ("missing 3,7; no address 5";
 *                  "waiting for the first list of pods" before the first LIST)
 *   GET /metrics   Prometheus text format 0.0.4
 *   GET /topology  the published topology.json (503 before the first publish)
 *   GET /watch     WebSocket: topology.json as one text message, first the
 *                  current one, then each published generation; a client
 *                  that falls behind gets the latest, never a backlog; at
 *                  most --watch-max-clients at once (503 beyond)
 *   anything else  404 naming the paths served
 *
 * These answer kubelet probes (User-Agent kube-probe/<v>: success is any
 * 200..399, the body is read up to 10 KiB, no keep-alive). Handlers run on
 * the server thread and copy what they send from ctx->st under ctx->mu, so
 * a response never waits for a recompute. /topology is served from one
 * shared copy of the file per generation (a reference-counted body): slow
 * readers share it instead of holding a copy each, and at most
 * MESH_SIDECAR_TOPOLOGY_TRANSFERS transfers run at once. /watch sends the
 * same shared copy.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/mem.h"
#include "core/prom.h"
#include "io/httpd.h"
#include "io/log.h"
#include "sidecar.h"

#define MOD "http"
/* topology.json is about 190 bytes per worker; 64 MiB is far beyond any slice. */
#define TOPOLOGY_MAX (64u << 20)

struct mesh_sidecar_http {
    struct mesh_sidecar *ctx;
    /* Set once the server runs; its first requests may come before. */
    struct mesh_httpd *_Atomic srv;
    /* Server thread only: topology.json of generation topo_gen, shared by
     * every transfer of it (each holds a reference). */
    struct mesh_httpd_body *topo;
    uint64_t topo_gen;
};

static void healthz(struct mesh_sidecar *ctx, struct mesh_httpd_resp *r)
{
    char why[256];
    r->status = mesh_sidecar_is_live(ctx, why, sizeof(why)) ? 200 : 503;
    r->text = mesh_asprintf("%s\n", why);
}

static void readyz(struct mesh_sidecar *ctx, struct mesh_httpd_resp *r)
{
    char why[sizeof(ctx->st.reason) + 320]; /* the reason and the source of pod updates */
    r->status = mesh_sidecar_is_ready(ctx, why, sizeof(why)) ? 200 : 503;
    r->text = mesh_asprintf("%s\n", why);
}

/* The shared copy of the published topology.json (-1: none published yet,
 * -2: the file cannot be read). Server thread. */
static int load_topology(struct mesh_sidecar_http *h)
{
    struct mesh_sidecar *ctx = h->ctx;
    pthread_mutex_lock(&ctx->mu);
    bool have = ctx->st.have_topology;
    uint64_t gen = ctx->st.generation;
    pthread_mutex_unlock(&ctx->mu);
    if (!have) {
        return -1;
    }
    if (h->topo == NULL || h->topo_gen != gen) {
        /* The file itself: renames replace it whole, so one open sees one
         * version. Transfers of the previous generation keep their
         * reference until they end. */
        char path[4096];
        snprintf(path, sizeof(path), "%s/topology.json", ctx->opts.out_dir);
        struct mesh_err err = {0};
        struct mesh_httpd_body *b = mesh_httpd_body_from_file(path, TOPOLOGY_MAX, &err);
        if (b == NULL) {
            mesh_debug(MOD, "topology.json: %s", err.msg);
            return -2;
        }
        mesh_httpd_body_unref(h->topo);
        h->topo = b;
        h->topo_gen = gen;
    }
    return 0;
}

static void topology(struct mesh_sidecar_http *h, struct mesh_httpd_resp *r)
{
    int rc = load_topology(h);
    if (rc < 0) {
        r->status = 503;
        r->text = mesh_strdup(rc == -1 ? "no topology published yet\n"
                                       : "cannot read topology.json; retry\n");
        return;
    }
    r->status = 200;
    r->type = "application/json";
    r->body = mesh_httpd_body_ref(h->topo);
    r->bulk = true;
}

/* /watch's document: the same shared copy, versioned by generation. */
static struct mesh_httpd_body *watch_doc(void *arg, uint64_t *out_version)
{
    struct mesh_sidecar_http *h = arg;
    if (load_topology(h) < 0) {
        return NULL;
    }
    *out_version = h->topo_gen;
    return mesh_httpd_body_ref(h->topo);
}

/* /metrics: the sidecar's document (metrics.c), then the HTTP server's own. */
static char *metrics(struct mesh_sidecar_http *h)
{
    struct mesh_buf b;
    mesh_buf_init(&b, (size_t)1 << 20);
    mesh_sidecar_metrics(h->ctx, &b);
    struct mesh_httpd_stats hs;
    mesh_httpd_get_stats(atomic_load(&h->srv), &hs);
    mesh_prom_gauge(&b, "tpumesh_http_connections", "Connections to the HTTP server open now.",
                    hs.open);
    mesh_prom_family(&b, "tpumesh_http_connections_closed_total", "counter",
                     "Connections the HTTP server closed early, by reason.");
    mesh_prom_u64(&b, "tpumesh_http_connections_closed_total", "reason", "evicted", hs.evicted);
    mesh_prom_u64(&b, "tpumesh_http_connections_closed_total", "reason", "refused", hs.refused);
    mesh_prom_u64(&b, "tpumesh_http_connections_closed_total", "reason", "timeout", hs.timed_out);
    mesh_prom_u64(&b, "tpumesh_http_connections_closed_total", "reason", "upgrade", hs.upgrades);
    char help[160];
    snprintf(help, sizeof(help),
             "/topology requests answered 503 because %d transfers were in flight.",
             MESH_SIDECAR_TOPOLOGY_TRANSFERS);
    mesh_prom_counter(&b, "tpumesh_http_busy_total", help, hs.bulk_busy);
    mesh_prom_gauge(&b, "tpumesh_watch_clients", "WebSocket /watch clients connected now.",
                    hs.ws_open);
    mesh_prom_counter(&b, "tpumesh_watch_busy_total",
                      "/watch upgrades answered 503 (--watch-max-clients reached).", hs.ws_busy);
    mesh_prom_counter(&b, "tpumesh_watch_messages_total",
                      "topology.json documents sent to /watch clients.", hs.ws_sent);
    mesh_prom_counter(&b, "tpumesh_watch_dropped_total",
                      "/watch clients closed for reading nothing while a document waited, or for "
                      "sending a message.",
                      hs.ws_dropped);
    return mesh_buf_steal(&b, NULL);
}

static void route(void *arg, const char *path, struct mesh_httpd_resp *r)
{
    struct mesh_sidecar_http *h = arg;
    struct mesh_sidecar *ctx = h->ctx;
    if (strcmp(path, "/metrics") == 0) {
        r->text = metrics(h);
        r->type = "text/plain; version=0.0.4; charset=utf-8";
        return;
    }
    if (strcmp(path, "/topology") == 0) {
        topology(h, r);
        return;
    }
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/livez") == 0) {
        healthz(ctx, r);
    } else if (strcmp(path, "/readyz") == 0) {
        readyz(ctx, r);
    } else {
        r->status = 404;
        r->text = mesh_strdup(strcmp(path, "/watch") == 0
                                  ? "/watch is a WebSocket: send Upgrade: websocket\n"
                                  : "not found: try /healthz /readyz /metrics /topology /watch\n");
    }
}

struct mesh_sidecar_http *mesh_sidecar_http_start(struct mesh_sidecar *ctx, const char *addr,
                                                  int *out_port, struct mesh_err *err)
{
    struct mesh_sidecar_http *h = mesh_calloc(1, sizeof(*h));
    h->ctx = ctx;
    struct mesh_httpd_opts o = {
        .addr = addr,
        .flag = "--http-addr",
        .handler = route,
        .arg = h,
        .limits = {.max_bulk = MESH_SIDECAR_TOPOLOGY_TRANSFERS,
                   .max_ws = ctx->opts.watch_max_clients},
        .ws_path = "/watch",
        .ws_doc = watch_doc,
        .ws_name = "/watch clients",
    };
    struct mesh_httpd *srv = mesh_httpd_start(&o, out_port, err);
    if (srv == NULL) {
        mesh_free(h);
        return NULL;
    }
    atomic_store(&h->srv, srv);
    return h;
}

void mesh_sidecar_http_notify(struct mesh_sidecar_http *h)
{
    if (h != NULL) {
        mesh_httpd_notify(atomic_load(&h->srv));
    }
}

void mesh_sidecar_http_stop(struct mesh_sidecar_http *h)
{
    if (h == NULL) {
        return;
    }
    mesh_httpd_stop(atomic_load(&h->srv));
    mesh_httpd_body_unref(h->topo);
    mesh_free(h);
}
