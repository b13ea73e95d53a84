/*
 * server.c - tpumesh-injector's servers on libwebsockets (docs/DESIGN.md §6, §8):
 *
 *   --listen (HTTPS)     POST /mutate  admission.k8s.io/v1 AdmissionReview in,
 *                                      AdmissionReview out (200); a body that
 *                                      is not one: 400 with the reason; above
 *                                      MESH_INJECT_REVIEW_MAX: 413
 *   --http-addr (HTTP)   GET /healthz /readyz /metrics (Prometheus text 0.0.4)
 *
 * The admission server is one lws context on one service thread: a review
 * takes about a tenth of a millisecond of CPU (parse, decide, print), so one
 * thread serves thousands a second. A review whose service account is not in
 * access.c's cache is parked (the thread goes on serving the others) until
 * the check's thread has the answer or --access-check-timeout has passed,
 * then answered with a warning that the permission could not be verified;
 * a parked review holds its connection, nothing else. The probes are served by
 * common/io/httpd on a thread of their own, with its connection limits and
 * eviction, so a flood of admission connections never takes the kubelet's
 * probes with it; /healthz fails when the admission thread stopped ticking. Every connection has
 * lws's idle timeout; the request bodies of all connections together are capped (INFLIGHT_MAX), so
 * many slow senders cost bounded memory. The certificate and key are looked
 * at every --cert-check-interval seconds (a timer on the service thread);
 * when either file changed (a Secret volume swaps both at once) and the pair
 * is a valid certificate with its key, the vhost's TLS context loads them:
 * new connections get the new certificate, open ones keep theirs.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <libwebsockets.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "core/prom.h"
#include "injector.h"
#include "io/httpd.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "server"
#define CHUNK 16384
#define INFLIGHT_MAX (64u << 20) /* request bytes buffered over all connections */
#define CERT_MAX (1u << 20)

static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 5};
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

enum outcome { OUT_PATCHED, OUT_SKIPPED, OUT_DENIED, OUT_BAD, OUT_ERROR, OUT__N };
static const char *const outcome_names[] = {"patched", "skipped", "denied", "bad_request", "error"};

struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct mesh_injector_server {
    const struct mesh_injector_opts *o;
    const struct mesh_inject_config *cfg;
    struct mesh_injector_access *access;
    struct lws_context *lws;
    struct mesh_httpd *probes; /* --http-addr, its own thread */
    pthread_t thread;
    bool started;
    volatile int stop;
    lws_sorted_usec_list_t sul; /* certificate check timer, also the liveness tick */
    struct file_id cert_id, key_id, bad_cert_id, bad_key_id;
    char https_iface[128];
    size_t inflight;        /* request body bytes held by all sessions (service thread) */
    struct session *parked; /* reviews waiting for the service-account check (service thread) */
    /* Written by the service thread, read by the probe thread. */
    atomic_int_fast64_t tick_ms; /* last run of the timer (CLOCK_MONOTONIC ms) */
    atomic_uint_fast64_t reviews[OUT__N];
    atomic_uint_fast64_t warnings, cert_reloads, cert_reload_failures, too_big;
    atomic_uint_fast64_t access_waits, access_unverified, access_wait_us;
    atomic_uint_fast64_t lat_count, lat_bucket[NBUCKETS], lat_sum_us;
};

/* Per-connection state; reset at every request (keep-alive reuses it). */
struct session {
    struct mesh_buf body; /* request body */
    bool post;
    bool closing; /* answer, then close (the rest of the body is not read) */
    int64_t start_us;
    char *out; /* owned: LWS_PRE bytes, then the response body */
    size_t out_len, out_off;
    /* Headers not yet sent (a parked review answered outside a callback of its own). */
    bool hdr_pending;
    unsigned hdr_code;
    const char *hdr_type;
    /* A review parked while its service account is checked (access.c). */
    bool parked;
    int64_t parked_us;
    struct mesh_inject_review rv;
    struct mesh_inject_decision d;
    struct lws *wsi;
    lws_sorted_usec_list_t deadline;
    struct session *pnext, *pprev;
};

static void unpark(struct mesh_injector_server *srv, struct session *s)
{
    if (!s->parked) {
        return;
    }
    lws_sul_cancel(&s->deadline);
    if (s->pprev != NULL) {
        s->pprev->pnext = s->pnext;
    } else if (srv != NULL) {
        srv->parked = s->pnext;
    }
    if (s->pnext != NULL) {
        s->pnext->pprev = s->pprev;
    }
    s->pnext = s->pprev = NULL;
    s->parked = false;
}

static void session_reset(struct mesh_injector_server *srv, struct session *s)
{
    if (s->parked) {
        unpark(srv, s);
        mesh_inject_decision_cleanup(&s->d);
        mesh_inject_review_cleanup(&s->rv);
    }
    s->hdr_pending = false;
    if (srv != NULL) {
        srv->inflight -= s->body.len <= srv->inflight ? s->body.len : srv->inflight;
    }
    mesh_buf_cleanup(&s->body);
    mesh_free(s->out);
    s->out = NULL;
    s->out_len = s->out_off = 0;
    s->post = s->closing = false;
}

static void set_body(struct session *s, char *text)
{
    size_t n = strlen(text);
    s->out = mesh_malloc(LWS_PRE + n + 1);
    memcpy(s->out + LWS_PRE, text, n + 1);
    mesh_free(text);
    s->out_len = n;
    s->out_off = 0;
}

static int send_headers(struct lws *wsi, struct session *s, unsigned code, const char *type)
{
    size_t n = s->out_len;
    unsigned char buf[LWS_PRE + 512];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (lws_add_http_common_headers(wsi, code, type, n, &p, end) != 0 ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-store", 8, &p, end) != 0 ||
        (s->closing &&
         lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5,
                                      &p, end) != 0) ||
        lws_finalize_write_http_header(wsi, start, &p, end) != 0) {
        return -1;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* Send status + headers now and the body (owned text) when writable. */
static int respond(struct lws *wsi, struct session *s, unsigned code, const char *type, char *text)
{
    set_body(s, text);
    return send_headers(wsi, s, code, type);
}

/* The same from outside the connection's own callbacks: everything when writable. */
static void respond_later(struct lws *wsi, struct session *s, unsigned code, const char *type,
                          char *text)
{
    set_body(s, text);
    s->hdr_pending = true;
    s->hdr_code = code;
    s->hdr_type = type;
    lws_callback_on_writable(wsi);
}

static int write_body(struct lws *wsi, struct session *s)
{
    if (s->out == NULL) {
        return 0;
    }
    if (s->hdr_pending) {
        s->hdr_pending = false;
        return send_headers(wsi, s, s->hdr_code, s->hdr_type);
    }
    size_t n = s->out_len - s->out_off < CHUNK ? s->out_len - s->out_off : CHUNK;
    bool last = s->out_off + n == s->out_len;
    unsigned char *p = (unsigned char *)s->out + LWS_PRE + s->out_off;
    /* lws needs LWS_PRE writable bytes before what it sends: the first chunk
     * has them in front of the body; later ones borrow the bytes already sent. */
    if (lws_write(wsi, p, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n) {
        return -1;
    }
    s->out_off += n;
    if (!last) {
        lws_callback_on_writable(wsi);
        return 0;
    }
    mesh_free(s->out);
    s->out = NULL;
    if (s->closing) {
        return -1;
    }
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

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

/* The answer to a decided review with warning (owned, may be NULL):
 * *out_code, *out_text (owned). Frees warning. */
static enum outcome finish(struct mesh_injector_server *srv, struct mesh_inject_review *rv,
                           struct mesh_inject_decision *d, char *warning, unsigned *out_code,
                           char **out_text)
{
    struct mesh_err err = {0};
    const char *w = warning;
    size_t n = 0;
    char *text = mesh_inject_response(rv->uid, d, &w, warning ? 1 : 0, &n, &err);
    enum outcome o = d->verdict == MESH_INJECT_PATCH  ? OUT_PATCHED
                     : d->verdict == MESH_INJECT_DENY ? OUT_DENIED
                                                      : OUT_SKIPPED;
    if (text == NULL) {
        mesh_error(MOD, "review %s: %s", rv->uid, err.msg);
        *out_code = 500;
        *out_text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        o = OUT_ERROR;
    } else {
        *out_code = 200;
        *out_text = text;
    }
    if (o == OUT_PATCHED) {
        mesh_info(MOD, "injected pod %s/%s (sa %s, %s%s%s, %zu container(s) mounted)%s", rv->ns,
                  pod_name(rv), d->service_account, d->sidecar ? "init+sidecar" : "init only",
                  d->tpu_resource ? ", " : "", d->tpu_resource ? d->tpu_resource : "", d->mounted,
                  !warning                              ? ""
                  : strstr(warning, "could not verify") ? "; warned: pod access not verified"
                                                        : "; warned: missing pod access");
    } else if (o == OUT_DENIED) {
        mesh_info(MOD, "denied pod %s/%s: %s", rv->ns, pod_name(rv), d->reason);
    } else {
        mesh_debug(MOD, "allowed %s without a patch: %s", rv->uid, d->reason);
    }
    if (warning != NULL) {
        atomic_fetch_add(&srv->warnings, 1);
    }
    mesh_free(warning);
    mesh_inject_decision_cleanup(d);
    mesh_inject_review_cleanup(rv);
    return o;
}

/* Parse and decide one review. Returns true with the answer in *out_code,
 * *out_text (owned), *out_o; false when the service-account check is under
 * way: *rv and *d are then the caller's, to finish later. */
static bool review(struct mesh_injector_server *srv, const char *buf, size_t len,
                   struct mesh_inject_review *rv, struct mesh_inject_decision *d,
                   unsigned *out_code, char **out_text, enum outcome *out_o)
{
    struct mesh_err err = {0};
    if (mesh_inject_review_parse(buf, len, rv, &err) < 0) {
        mesh_debug(MOD, "400 to a body that is not an AdmissionReview: %s", err.msg);
        *out_code = 400;
        *out_text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        *out_o = OUT_BAD;
        return true;
    }
    if (mesh_inject_decide(srv->cfg, rv, d, &err) < 0) {
        mesh_error(MOD, "review %s: %s", rv->uid, err.msg);
        *out_code = 500;
        *out_text = mesh_asprintf("tpumesh-injector: %s\n", err.msg);
        mesh_inject_review_cleanup(rv);
        *out_o = OUT_ERROR;
        return true;
    }
    char *warning = NULL;
    if (d->verdict == MESH_INJECT_PATCH && d->sidecar &&
        mesh_injector_access_lookup(srv->access, rv->ns, d->service_account, &warning) ==
            MESH_ACCESS_PENDING) {
        return false;
    }
    *out_o = finish(srv, rv, d, warning, out_code, out_text);
    return true;
}

/* Answer parked review s with warning (owned). */
static void answer_parked(struct mesh_injector_server *srv, struct session *s, char *warning)
{
    unpark(srv, s);
    atomic_fetch_add(&srv->access_wait_us, (uint_fast64_t)(mesh_sys_now_us() - s->parked_us));
    unsigned code = 500;
    char *text = NULL;
    enum outcome o = finish(srv, &s->rv, &s->d, warning, &code, &text);
    observe(srv, o, s->start_us);
    respond_later(s->wsi, s, code, code == 200 ? "application/json" : "text/plain", text);
}

/* --access-check-timeout passed: admitted with the "could not be verified" warning. */
static void parked_deadline(lws_sorted_usec_list_t *sul)
{
    struct session *s = lws_container_of(sul, struct session, deadline);
    struct mesh_injector_server *srv = lws_context_user(lws_get_context(s->wsi));
    atomic_fetch_add(&srv->access_unverified, 1);
    answer_parked(srv, s,
                  mesh_injector_access_unverified(srv->access, s->rv.ns, s->d.service_account));
}

/* A check finished (woken by access.c's thread): answer the reviews it decides. */
static void parked_wake(struct mesh_injector_server *srv)
{
    struct session *s = srv->parked;
    while (s != NULL) {
        struct session *next = s->pnext;
        char *warning = NULL;
        if (mesh_injector_access_lookup(srv->access, s->rv.ns, s->d.service_account, &warning) ==
            MESH_ACCESS_KNOWN) {
            answer_parked(srv, s, warning);
        }
        s = next;
    }
}

static void wake(void *arg)
{
    lws_cancel_service(arg);
}

static long content_length(struct lws *wsi)
{
    char v[32];
    if (lws_hdr_copy(wsi, v, sizeof(v), WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0) {
        return -1;
    }
    long long n = 0;
    if (mesh_parse_ll(v, strlen(v), 0, 1LL << 40, &n, NULL) < 0) {
        return -2;
    }
    return (long)n;
}

static int on_request(struct lws *wsi, struct mesh_injector_server *srv, struct session *s,
                      const char *in, size_t len)
{
    session_reset(srv, s);
    s->start_us = mesh_sys_now_us();
    bool post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
    if (len != 7 || memcmp(in, "/mutate", 7) != 0) {
        return respond(wsi, s, 404, "text/plain", mesh_strdup("not found: POST /mutate\n"));
    }
    if (!post) {
        return respond(wsi, s, 405, "text/plain", mesh_strdup("use POST /mutate\n"));
    }
    long cl = content_length(wsi);
    if (cl == 0 || cl == -2) {
        s->closing = true;
        atomic_fetch_add(&srv->reviews[OUT_BAD], 1);
        return respond(wsi, s, 400, "text/plain",
                       mesh_strdup("tpumesh-injector: empty body or bad Content-Length; send an "
                                   "AdmissionReview\n"));
    }
    if (cl > (long)MESH_INJECT_REVIEW_MAX) {
        s->closing = true;
        atomic_fetch_add(&srv->too_big, 1);
        return respond(
            wsi, s, 413, "text/plain",
            mesh_asprintf("tpumesh-injector: body above %u bytes\n", MESH_INJECT_REVIEW_MAX));
    }
    s->post = true;
    mesh_buf_init(&s->body, MESH_INJECT_REVIEW_MAX);
    return 0;
}

static int on_body(struct lws *wsi, struct mesh_injector_server *srv, struct session *s,
                   const char *in, size_t len)
{
    if (!s->post || s->closing) {
        return 0;
    }
    if (srv->inflight + len > INFLIGHT_MAX) {
        s->closing = true;
        return respond(wsi, s, 503, "text/plain",
                       mesh_strdup("tpumesh-injector: too many request bytes in flight; retry\n"));
    }
    if (mesh_buf_append(&s->body, in, len, NULL) < 0) {
        s->closing = true;
        atomic_fetch_add(&srv->too_big, 1);
        return respond(
            wsi, s, 413, "text/plain",
            mesh_asprintf("tpumesh-injector: body above %u bytes\n", MESH_INJECT_REVIEW_MAX));
    }
    srv->inflight += len;
    return 0;
}

static int on_body_done(struct lws *wsi, struct mesh_injector_server *srv, struct session *s)
{
    if (!s->post || s->closing) {
        return 0;
    }
    unsigned code = 500;
    char *text = NULL;
    enum outcome o = OUT_ERROR;
    bool done = review(srv, mesh_buf_str(&s->body), s->body.len, &s->rv, &s->d, &code, &text, &o);
    srv->inflight -= s->body.len <= srv->inflight ? s->body.len : srv->inflight;
    mesh_buf_cleanup(&s->body);
    s->post = false;
    if (!done) {
        /* Park it until the check's thread answers or the timeout passes. */
        s->parked = true;
        s->parked_us = mesh_sys_now_us();
        s->wsi = wsi;
        s->pprev = NULL;
        s->pnext = srv->parked;
        if (srv->parked != NULL) {
            srv->parked->pprev = s;
        }
        srv->parked = s;
        atomic_fetch_add(&srv->access_waits, 1);
        lws_sul_schedule(lws_get_context(wsi), 0, &s->deadline, parked_deadline,
                         (lws_usec_t)mesh_injector_access_timeout_ms(srv->access) * 1000);
        return 0;
    }
    observe(srv, o, s->start_us);
    return respond(wsi, s, code, code == 200 ? "application/json" : "text/plain", text);
}

static int admission_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len)
{
    struct session *s = user;
    struct mesh_injector_server *srv = lws_context_user(lws_get_context(wsi));
    switch (reason) {
    case LWS_CALLBACK_HTTP:
        return on_request(wsi, srv, s, in, len);
    case LWS_CALLBACK_HTTP_BODY:
        return on_body(wsi, srv, s, in, len);
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return on_body_done(wsi, srv, s);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return s != NULL ? write_body(wsi, s) : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (s != NULL) {
            session_reset(srv, s);
        }
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (srv != NULL && srv->parked != NULL) {
            parked_wake(srv);
        }
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

/* ---- probes and metrics ---------------------------------------------------------- */

static unsigned long long ld(atomic_uint_fast64_t *v)
{
    return (unsigned long long)atomic_load_explicit(v, memory_order_relaxed);
}

static char *metrics_text(struct mesh_injector_server *srv)
{
    struct mesh_buf b;
    mesh_buf_init(&b, 1 << 20);
    mesh_prom_family(&b, "tpumesh_injector_reviews_total", "counter",
                     "AdmissionReviews answered, by outcome.");
    for (int i = 0; i < OUT__N; i++) {
        mesh_prom_u64(&b, "tpumesh_injector_reviews_total", "outcome", outcome_names[i],
                      ld(&srv->reviews[i]));
    }
    mesh_prom_counter(&b, "tpumesh_injector_request_too_large_total", "Requests refused with 413.",
                      ld(&srv->too_big));
    mesh_prom_counter(&b, "tpumesh_injector_access_warnings_total",
                      "Patched pods warned that their service account lacks get/list/watch on "
                      "pods or that it could not be verified.",
                      ld(&srv->warnings));
    mesh_prom_counter(&b, "tpumesh_injector_access_waits_total",
                      "Reviews that waited for a service-account check (an account's first pod).",
                      ld(&srv->access_waits));
    mesh_prom_counter(&b, "tpumesh_injector_access_unverified_total",
                      "Of those, answered after --access-check-timeout without the check's answer.",
                      ld(&srv->access_unverified));
    mesh_prom_family(&b, "tpumesh_injector_access_wait_seconds_total", "counter",
                     "Time reviews waited for service-account checks.");
    mesh_prom_f64(&b, "tpumesh_injector_access_wait_seconds_total", NULL, NULL,
                  (double)ld(&srv->access_wait_us) / 1e6);
    mesh_prom_counter(&b, "tpumesh_injector_cert_reloads_total", "Serving certificate reloads.",
                      ld(&srv->cert_reloads));
    mesh_prom_counter(&b, "tpumesh_injector_cert_reload_failures_total",
                      "Changed certificate files that were not a valid pair (the previous pair "
                      "stays).",
                      ld(&srv->cert_reload_failures));
    uint64_t cum[NBUCKETS];
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum[i] = ld(&srv->lat_bucket[i]);
    }
    mesh_prom_histogram(&b, "tpumesh_injector_review_seconds", "Time from request to answer.",
                        buckets, cum, NBUCKETS, (double)ld(&srv->lat_sum_us) / 1e6,
                        ld(&srv->lat_count));
    struct mesh_httpd_stats hs;
    mesh_httpd_get_stats(srv->probes, &hs);
    mesh_prom_family(&b, "tpumesh_injector_probe_connections_total", "counter",
                     "Connections to the probe server, by what became of them.");
    mesh_prom_u64(&b, "tpumesh_injector_probe_connections_total", "event", "accepted", hs.accepted);
    mesh_prom_u64(&b, "tpumesh_injector_probe_connections_total", "event", "evicted", hs.evicted);
    mesh_prom_u64(&b, "tpumesh_injector_probe_connections_total", "event", "timed_out",
                  hs.timed_out);
    return mesh_buf_steal(&b, NULL);
}

/* The probe server's handler (its own thread). The admission thread's timer
 * stamps tick_ms every --cert-check-interval seconds: no stamp for three
 * intervals (at least 30 s) means it hangs, and the kubelet should restart us. */
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
        int64_t limit = 3000LL * srv->o->cert_check_s;
        limit = limit < 30000 ? 30000 : limit;
        int64_t idle = mesh_sys_now_us() / 1000 - atomic_load(&srv->tick_ms);
        if (idle > limit) {
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

static const struct lws_protocols admission_protocols[] = {
    {"tpumesh-admission", admission_cb, sizeof(struct session), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- certificate rotation ---------------------------------------------------------- */

static bool file_id_of(const char *path, struct file_id *out)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        return false;
    }
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->size = st.st_size;
    out->mtime = st.st_mtim;
    return true;
}

static bool file_id_eq(const struct file_id *a, const struct file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Is cert (first PEM certificate) + key a pair? Reason in why on failure. */
static bool pair_ok(const char *cert, const char *key, char *why, size_t cap)
{
    bool ok = false;
    BIO *cb = BIO_new_file(cert, "r"), *kb = BIO_new_file(key, "r");
    X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
    EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    if (x == NULL) {
        snprintf(why, cap, "%s holds no PEM certificate", cert);
    } else if (k == NULL) {
        snprintf(why, cap, "%s holds no PEM private key", key);
    } else if (X509_check_private_key(x, k) != 1) {
        snprintf(why, cap, "the key in %s does not belong to the certificate in %s", key, cert);
    } else {
        ok = true;
    }
    X509_free(x);
    EVP_PKEY_free(k);
    BIO_free(cb);
    BIO_free(kb);
    return ok;
}

static void cert_check(lws_sorted_usec_list_t *sul)
{
    struct mesh_injector_server *srv = lws_container_of(sul, struct mesh_injector_server, sul);
    const struct mesh_injector_opts *o = srv->o;
    atomic_store(&srv->tick_ms, mesh_sys_now_us() / 1000);
    struct file_id c, k;
    if (file_id_of(o->tls_cert, &c) && file_id_of(o->tls_key, &k) &&
        !(file_id_eq(&c, &srv->cert_id) && file_id_eq(&k, &srv->key_id))) {
        char why[512];
        if (pair_ok(o->tls_cert, o->tls_key, why, sizeof(why))) {
            lws_tls_cert_updated(srv->lws, o->tls_cert, o->tls_key, NULL, 0, NULL, 0);
            srv->cert_id = c;
            srv->key_id = k;
            atomic_fetch_add(&srv->cert_reloads, 1);
            mesh_info(MOD, "serving certificate reloaded from %s", o->tls_cert);
        } else if (!(file_id_eq(&c, &srv->bad_cert_id) && file_id_eq(&k, &srv->bad_key_id))) {
            /* Logged once per changed pair; the files may be mid-update. */
            srv->bad_cert_id = c;
            srv->bad_key_id = k;
            atomic_fetch_add(&srv->cert_reload_failures, 1);
            mesh_warn(MOD, "certificate files changed but %s; still serving the previous pair",
                      why);
        }
    }
    lws_sul_schedule(srv->lws, 0, &srv->sul, cert_check,
                     (lws_usec_t)o->cert_check_s * LWS_US_PER_SEC);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void *serve(void *arg)
{
    struct mesh_injector_server *srv = arg;
    while (!srv->stop) {
        if (lws_service(srv->lws, 0) < 0) {
            break;
        }
    }
    return NULL;
}

static struct lws_vhost *vhost(struct mesh_injector_server *srv, const char *iface, int port)
{
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.vhost_name = "https";
    info.port = port;
    info.iface = iface[0] ? iface : NULL;
    info.protocols = admission_protocols;
    info.options = LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE;
    if (iface[0] != '\0' && strchr(iface, ':') == NULL) {
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    }
    info.timeout_secs = 10;
    info.keepalive_timeout = 30;
    info.ssl_cert_filepath = srv->o->tls_cert;
    info.ssl_private_key_filepath = srv->o->tls_key;
    info.alpn = "http/1.1";
    info.ssl_options_set = SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1;
    /* lws turns TLS on for a vhost only with this option on the vhost too. */
    info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    return lws_create_vhost(srv->lws, &info);
}

struct mesh_injector_server *mesh_injector_server_start(const struct mesh_injector_opts *o,
                                                        const struct mesh_inject_config *cfg,
                                                        struct mesh_injector_access *access,
                                                        int *out_https_port, int *out_http_port,
                                                        struct mesh_err *err)
{
    struct mesh_injector_server *srv = mesh_calloc(1, sizeof(*srv));
    srv->o = o;
    srv->cfg = cfg;
    srv->access = access;
    int https_port = 0;
    char why[512];
    if (mesh_injector_parse_addr("--listen", o->listen, srv->https_iface, sizeof(srv->https_iface),
                                 &https_port, err) < 0) {
        mesh_free(srv);
        return NULL;
    }
    if (!pair_ok(o->tls_cert, o->tls_key, why, sizeof(why))) {
        mesh_free(srv);
        mesh_err_set(err, MESH_E_CONFIG, 0,
                     "TLS: %s; pass the webhook's serving certificate "
                     "and its key (PEM)",
                     why);
        return NULL;
    }
    file_id_of(o->tls_cert, &srv->cert_id);
    file_id_of(o->tls_key, &srv->key_id);
    lws_set_log_level(LLL_ERR | LLL_WARN, mesh_httpd_lws_log);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.user = srv;
    /* 200 concurrent reviews plus probes, with room; without a limit lws
     * sizes its tables by RLIMIT_NOFILE. */
    info.fd_limit_per_thread = 1024;
    srv->lws = lws_create_context(&info);
    struct lws_vhost *https = srv->lws ? vhost(srv, srv->https_iface, https_port) : NULL;
    if (https == NULL) {
        mesh_err_set(err, MESH_E_IO, 0,
                     "cannot serve on --listen %s (address in use, not local, or the "
                     "certificate was refused); choose another address",
                     o->listen);
        mesh_injector_server_stop(srv);
        return NULL;
    }
    *out_https_port = lws_get_vhost_listen_port(https);
    atomic_store(&srv->tick_ms, mesh_sys_now_us() / 1000);
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
    lws_sul_schedule(srv->lws, 0, &srv->sul, cert_check,
                     (lws_usec_t)o->cert_check_s * LWS_US_PER_SEC);
    mesh_injector_access_set_notify(access, wake, srv->lws);
    if (pthread_create(&srv->thread, NULL, serve, srv) != 0) {
        mesh_err_set(err, MESH_E_IO, 0, "cannot start the server thread");
        mesh_injector_server_stop(srv);
        return NULL;
    }
    srv->started = true;
    return srv;
}

void mesh_injector_server_stop(struct mesh_injector_server *srv)
{
    if (srv == NULL) {
        return;
    }
    /* The probe server first: its handler reads this server. The check's thread
     * wakes this context no more (set_notify waits for a call under way). */
    mesh_httpd_stop(srv->probes);
    mesh_injector_access_set_notify(srv->access, NULL, NULL);
    srv->stop = 1;
    if (srv->started) {
        lws_cancel_service(srv->lws);
        pthread_join(srv->thread, NULL);
    }
    if (srv->lws != NULL) {
        lws_context_destroy(srv->lws);
    }
    mesh_free(srv);
}
