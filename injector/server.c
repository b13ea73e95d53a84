/*
 * server.c - tpumesh-injector's two servers, both common/io/httpd (docs/DESIGN.md §8):
 *
 *   --listen (HTTPS)     POST /mutate  admission.k8s.io/v1 AdmissionReview in,
 *                                      AdmissionReview out (200); a body that
 *                                      is not one: 400 with the reason
 *   --http-addr (HTTP)   GET /healthz /readyz /metrics (Prometheus text 0.0.4)
 *
 * httpd does the connections, TLS with certificate reload, and the bounds on
 * every request before this file sees it: a Content-Length above
 * MESH_INJECT_REVIEW_MAX is refused (413) before the body is read, bodies are
 * reserved against ADMISSION_INFLIGHT bytes in all (small ones, which real
 * reviews are, from a reserve of their own, so a flood of large bodies never
 * starves them), and each body is pre-scanned while it arrives (nesting,
 * number of values, string length: 400 naming the cap) so no cJSON tree is
 * built for a hostile body; the whole request must arrive within
 * ADMISSION_REQUEST_S. A review takes about a tenth of a millisecond of CPU
 * (parse, decide, print) on the admission server's one thread. The probes
 * are a second httpd on a thread of its own, so a flood of admission
 * connections never takes the kubelet's probes with it; /healthz fails when
 * the admission thread stopped ticking.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/mem.h"
#include "core/prom.h"
#include "injector.h"
#include "io/httpd.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "server"
/* Request body bytes reserved over all admission connections, and the share
 * set aside for bodies up to ADMISSION_SMALL (a pod's review is 5-50 KiB). */
#define ADMISSION_INFLIGHT (32u << 20)
#define ADMISSION_SMALL (256u << 10)
#define ADMISSION_SMALL_RESERVE (16u << 20)
/* Pre-scan caps: a pod is a few thousand values, its JSON a dozen levels
 * deep (managedFields included); these are far beyond any real review. */
#define ADMISSION_MAX_DEPTH 64
#define ADMISSION_MAX_VALUES 100000
#define ADMISSION_MAX_STRING (1u << 20)
/* The whole request within this many seconds (the API server gives a
 * webhook at most 30 s, the chart 5 s). */
#define ADMISSION_REQUEST_S 10

static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 5};
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

enum outcome { OUT_PATCHED, OUT_SKIPPED, OUT_DENIED, OUT_BAD, OUT_ERROR, OUT__N };
static const char *const outcome_names[] = {"patched", "skipped", "denied", "bad_request", "error"};

struct mesh_injector_server {
    const struct mesh_injector_opts *o;
    const struct mesh_inject_config *cfg;
    struct mesh_httpd *admission; /* --listen: TLS, POST /mutate */
    struct mesh_httpd *probes;    /* --http-addr, its own thread */
    /* Written by the admission thread, read by the probe thread. */
    atomic_uint_fast64_t reviews[OUT__N];
    atomic_uint_fast64_t lat_count, lat_bucket[NBUCKETS], lat_sum_us;
};

/* ---- POST /mutate ------------------------------------------------------------- */

static void observe(struct mesh_injector_server *srv, enum outcome o, int64_t start_us)
{
    atomic_fetch_add(&srv->reviews[o], 1);
    int64_t us = mesh_sys_now_us() - start_us;
    double secs = (double)us / 1e6;
    atomic_fetch_add(&srv->lat_count, 1);
    atomic_fetch_add(&srv->lat_sum_us, (uint_fast64_t)(us > 0 ? us : 0));
    for (size_t i = 0; i < NBUCKETS; i++) {
        if (secs <= buckets[i]) {
            atomic_fetch_add(&srv->lat_bucket[i], 1);
        }
    }
}

static const char *pod_name(const struct mesh_inject_review *rv)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(rv->pod, "metadata");
    const char *n = mesh_json_str(meta, "name");
    if (n == NULL || *n == '\0') {
        n = mesh_json_str(meta, "generateName");
    }
    return n ? n : "";
}

/* Parse, decide and answer one review (body: len bytes, borrowed). */
static enum outcome review(struct mesh_injector_server *srv, const char *body, size_t len,
                           struct mesh_httpd_resp *r)
{
    struct mesh_err err = {0};
    struct mesh_inject_review rv;
    if (mesh_inject_review_parse(body, len, &rv, &err) < 0) {
        mesh_debug(MOD, "400 to a body that is not an AdmissionReview: %s", err.msg);
        r->status = 400;
        r->text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        return OUT_BAD;
    }
    struct mesh_inject_decision d;
    if (mesh_inject_decide(srv->cfg, &rv, &d, &err) < 0) {
        mesh_error(MOD, "review %s: %s", rv.uid, err.msg);
        r->status = 500;
        r->text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        mesh_inject_review_cleanup(&rv);
        return OUT_ERROR;
    }
    size_t n = 0;
    char *text = mesh_inject_response(rv.uid, &d, NULL, 0, &n, &err);
    enum outcome o = d.verdict == MESH_INJECT_PATCH  ? OUT_PATCHED
                     : d.verdict == MESH_INJECT_DENY ? OUT_DENIED
                                                     : OUT_SKIPPED;
    if (text == NULL) {
        mesh_error(MOD, "review %s: %s", rv.uid, err.msg);
        r->status = 500;
        r->text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        o = OUT_ERROR;
    } else {
        r->type = "application/json";
        r->text = text;
    }
    if (o == OUT_PATCHED) {
        mesh_info(MOD, "injected pod %s/%s (sa %s, %s%s%s, %zu container(s) mounted)", rv.ns,
                  pod_name(&rv), d.service_account, d.sidecar ? "init+sidecar" : "init only",
                  d.tpu_resource ? ", " : "", d.tpu_resource ? d.tpu_resource : "", d.mounted);
    } else if (o == OUT_DENIED) {
        mesh_info(MOD, "denied pod %s/%s: %s", rv.ns, pod_name(&rv), d.reason);
    } else {
        mesh_debug(MOD, "allowed %s without a patch: %s", rv.uid, d.reason);
    }
    mesh_inject_decision_cleanup(&d);
    mesh_inject_review_cleanup(&rv);
    return o;
}

static void mutate(void *arg, const char *path, const char *body, size_t len,
                   struct mesh_httpd_resp *r)
{
    (void)path;
    struct mesh_injector_server *srv = arg;
    int64_t start = mesh_sys_now_us();
    observe(srv, review(srv, body, len, r), start);
}

/* GET and HEAD on the admission port. */
static void admission_get(void *arg, const char *path, struct mesh_httpd_resp *r)
{
    (void)arg;
    if (strcmp(path, "/mutate") == 0) {
        r->status = 405;
        r->text = mesh_strdup("use POST /mutate\n");
        return;
    }
    r->status = 404;
    r->text = mesh_strdup("not found: POST /mutate\n");
}

/* ---- probes and metrics ---------------------------------------------------------- */

static unsigned long long ld(atomic_uint_fast64_t *v)
{
    return (unsigned long long)atomic_load_explicit(v, memory_order_relaxed);
}

static char *metrics_text(struct mesh_injector_server *srv)
{
    struct mesh_httpd_stats as, hs;
    mesh_httpd_get_stats(srv->admission, &as);
    mesh_httpd_get_stats(srv->probes, &hs);
    struct mesh_buf b;
    mesh_buf_init(&b, 1 << 20);
    mesh_prom_family(&b, "tpumesh_injector_reviews_total", "counter",
                     "AdmissionReviews answered, by outcome.");
    for (int i = 0; i < OUT__N; i++) {
        mesh_prom_u64(&b, "tpumesh_injector_reviews_total", "outcome", outcome_names[i],
                      ld(&srv->reviews[i]));
    }
    mesh_prom_counter(&b, "tpumesh_injector_request_too_large_total",
                      "Requests refused with 413 before their body was read.", as.post_too_large);
    mesh_prom_family(&b, "tpumesh_injector_requests_refused_total", "counter",
                     "Requests refused before a review was parsed, by reason: no Content-Length "
                     "or a pre-scan cap passed (400/411), request bodies at their memory limit "
                     "(503).");
    mesh_prom_u64(&b, "tpumesh_injector_requests_refused_total", "reason", "limits",
                  as.post_refused);
    mesh_prom_u64(&b, "tpumesh_injector_requests_refused_total", "reason", "busy", as.post_busy);
    mesh_prom_counter(&b, "tpumesh_injector_cert_reloads_total", "Serving certificate reloads.",
                      as.tls_reloads);
    mesh_prom_counter(&b, "tpumesh_injector_cert_reload_failures_total",
                      "Changed certificate files that were not a valid pair (the previous pair "
                      "stays).",
                      as.tls_reload_failures);
    uint64_t cum[NBUCKETS];
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum[i] = ld(&srv->lat_bucket[i]);
    }
    mesh_prom_histogram(&b, "tpumesh_injector_review_seconds", "Time from request body to answer.",
                        buckets, cum, NBUCKETS, (double)ld(&srv->lat_sum_us) / 1e6,
                        ld(&srv->lat_count));
    static const char *const servers[] = {"admission", "probe"};
    const struct mesh_httpd_stats *st[] = {&as, &hs};
    mesh_prom_family(&b, "tpumesh_injector_connections_total", "counter",
                     "Connections to the admission and probe servers, by what became of them.");
    for (int i = 0; i < 2; i++) {
        mesh_buf_printf(
            &b, NULL,
            "tpumesh_injector_connections_total{server=\"%s\",event=\"accepted\"} %llu\n"
            "tpumesh_injector_connections_total{server=\"%s\",event=\"evicted\"} %llu\n"
            "tpumesh_injector_connections_total{server=\"%s\",event=\"timed_out\"} "
            "%llu\n",
            servers[i], (unsigned long long)st[i]->accepted, servers[i],
            (unsigned long long)st[i]->evicted, servers[i], (unsigned long long)st[i]->timed_out);
    }
    return mesh_buf_steal(&b, NULL);
}

/* The probe server's handler (its own thread). The admission server's 1 s
 * timer stamps tick_ms: no stamp for 30 s means its thread hangs, and the
 * kubelet should restart us. */
static void probe(void *arg, const char *path, struct mesh_httpd_resp *r)
{
    struct mesh_injector_server *srv = arg;
    if (strcmp(path, "/metrics") == 0) {
        r->type = "text/plain; version=0.0.4; charset=utf-8";
        r->text = metrics_text(srv);
        return;
    }
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/livez") == 0 ||
        strcmp(path, "/readyz") == 0) {
        struct mesh_httpd_stats as;
        mesh_httpd_get_stats(srv->admission, &as);
        int64_t idle = mesh_sys_now_us() / 1000 - as.tick_ms;
        if (idle > 30000) {
            r->status = 503;
            r->text = mesh_asprintf("stuck: the admission thread has not run for %llds\n",
                                    (long long)(idle / 1000));
            return;
        }
        r->text = mesh_strdup("ok\n");
        return;
    }
    r->status = 404;
    r->text = mesh_strdup("not found: try /healthz /readyz /metrics\n");
}

/* ---- life cycle ------------------------------------------------------------------------ */

struct mesh_injector_server *mesh_injector_server_start(const struct mesh_injector_opts *o,
                                                        const struct mesh_inject_config *cfg,
                                                        int *out_https_port, int *out_http_port,
                                                        struct mesh_err *err)
{
    struct mesh_injector_server *srv = mesh_calloc(1, sizeof(*srv));
    srv->o = o;
    srv->cfg = cfg;
    struct mesh_httpd_opts ao = {
        .addr = o->listen,
        .flag = "--listen",
        .handler = admission_get,
        .arg = srv,
        .post_path = "/mutate",
        .post = mutate,
        .post_json = true,
        .tls_cert = o->tls_cert,
        .tls_key = o->tls_key,
        .tls_check_s = o->cert_check_s,
        .limits =
            {
                /* The API server is one peer that may hold hundreds of
                 * connections: no per-peer cap below the total. */
                .max_per_peer = 512,
                .header_timeout_s = ADMISSION_REQUEST_S,
                .max_body = MESH_INJECT_REVIEW_MAX,
                .max_inflight = ADMISSION_INFLIGHT,
                .small_body = ADMISSION_SMALL,
                .small_reserve = ADMISSION_SMALL_RESERVE,
                .json_max_depth = ADMISSION_MAX_DEPTH,
                .json_max_values = ADMISSION_MAX_VALUES,
                .json_max_string = ADMISSION_MAX_STRING,
            },
    };
    srv->admission = mesh_httpd_start(&ao, out_https_port, err);
    if (srv->admission == NULL) {
        mesh_free(srv);
        return NULL;
    }
    struct mesh_httpd_opts po = {
        .addr = o->http_addr,
        .handler = probe,
        .arg = srv,
        .flag = "--http-addr",
    };
    srv->probes = mesh_httpd_start(&po, out_http_port, err);
    if (srv->probes == NULL) {
        mesh_injector_server_stop(srv);
        return NULL;
    }
    return srv;
}

void mesh_injector_server_stop(struct mesh_injector_server *srv)
{
    if (srv == NULL) {
        return;
    }
    /* The probe server first: its handler reads the admission server's stats. */
    mesh_httpd_stop(srv->probes);
    mesh_httpd_stop(srv->admission);
    mesh_free(srv);
}
