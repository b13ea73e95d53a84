/*
 * http.c - the sidecar's HTTP server on libwebsockets (docs/DESIGN.md §6):
 *
 *   GET /healthz   200 "ok" while the main loop ticks (every second; 30 s
 *                  without a tick fails) and the Kubernetes API made progress
 *                  within --stuck-limit; else 503 + reason
 *   GET /readyz    200 only while a complete topology is published, else 503
 *                  with a one-line reason ("missing 3,7; no address 5")
 *   GET /metrics   Prometheus text format 0.0.4
 *   GET /topology  the published topology.json (503 before the first publish)
 *
 * These answer kubelet probes (User-Agent kube-probe/<v>: success is any
 * 200..399, the body is read up to 10 KiB, no keep-alive).
 * lws_service runs on its own thread; handlers
 * copy what they send from ctx->st under ctx->mu, so a response never
 * waits for a recompute. Room for the WebSocket /watch stream of a later
 * issue: it becomes a second entry in `protocols`.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <libwebsockets.h>

#include "core/json.h"
#include "core/mem.h"
#include "io/publish.h"
#include "io/log.h"
#include "sidecar.h"

#define MOD "http"
#define CHUNK 16384

struct mesh_sidecar_http {
    struct mesh_sidecar *ctx;
    struct lws_context *lws;
    pthread_t thread;
    bool started;
    volatile int stop;
    char iface[MESH_IP_MAX];
};

/* Per-connection state: the response being sent. */
struct session {
    char *body; /* owned */
    size_t len, off;
};

/* Build the response for a path: *out_body owned, returns the status. */
static unsigned route(struct mesh_sidecar *ctx, const char *path, char **out_body,
                      const char **out_type)
{
    *out_type = "text/plain; charset=utf-8";
    if (strcmp(path, "/metrics") == 0) {
        size_t n = 0;
        *out_body = mesh_sidecar_metrics_text(ctx, &n);
        *out_type = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    pthread_mutex_lock(&ctx->mu);
    unsigned code;
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/livez") == 0) {
        pthread_mutex_unlock(&ctx->mu);
        char why[256];
        bool live = mesh_sidecar_is_live(ctx, why, sizeof(why));
        *out_body = mesh_asprintf("%s\n", why);
        return live ? 200 : 503;
    } else if (strcmp(path, "/readyz") == 0) {
        pthread_mutex_unlock(&ctx->mu);
        char why[sizeof(ctx->st.reason) + 320];
        bool ready = mesh_sidecar_is_ready(ctx, why, sizeof(why));
        *out_body = mesh_asprintf("%s\n", why);
        return ready ? 200 : 503;
    } else if (strcmp(path, "/topology") == 0) {
        bool have = ctx->st.have_topology;
        pthread_mutex_unlock(&ctx->mu);
        /* The file itself: renames replace it whole, so one open sees one
         * version, and the process keeps no copy of its bytes. */
        size_t len = 0;
        *out_body = NULL;
        if (have &&
            mesh_publish_read_file(ctx->opts.out_dir, "topology.json", out_body, &len) < 0) {
            *out_body = NULL;
        }
        if (*out_body != NULL) {
            *out_type = "application/json";
            return 200;
        }
        *out_body =
            mesh_strdup(have ? "cannot read topology.json\n" : "no topology published yet\n");
        return 503;
    } else {
        *out_body = mesh_strdup("not found: try /healthz /readyz /metrics /topology\n");
        code = 404;
    }
    pthread_mutex_unlock(&ctx->mu);
    return code;
}

static int send_headers(struct lws *wsi, unsigned code, const char *type, size_t len)
{
    unsigned char buf[LWS_PRE + 512];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (lws_add_http_common_headers(wsi, code, type, len, &p, end) != 0 ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-store", 8, &p, end) != 0 ||
        lws_finalize_write_http_header(wsi, start, &p, end) != 0) {
        return -1;
    }
    return 0;
}

static int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    struct session *s = user;
    struct mesh_sidecar_http *h = lws_context_user(lws_get_context(wsi));
    switch (reason) {
    case LWS_CALLBACK_HTTP: {
        const char *type = NULL;
        char *body = NULL;
        unsigned code;
        if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0) {
            body = mesh_strdup("only GET is served\n");
            type = "text/plain; charset=utf-8";
            code = 405;
        } else {
            /* `in` is the URI path without the query string. */
            char path[128];
            snprintf(path, sizeof(path), "%.*s", (int)(len < sizeof(path) ? len : 0),
                     (const char *)in);
            if (len >= sizeof(path)) {
                path[0] = '\0';
            }
            code = route(h->ctx, path, &body, &type);
        }
        s->body = body;
        s->len = strlen(body);
        s->off = 0;
        if (send_headers(wsi, code, type, s->len) < 0) {
            return 1;
        }
        lws_callback_on_writable(wsi);
        return 0;
    }
    case LWS_CALLBACK_HTTP_WRITEABLE: {
        if (s->body == NULL) {
            return 0;
        }
        static unsigned char buf[LWS_PRE + CHUNK]; /* lws_service is single-threaded */
        size_t n = s->len - s->off < CHUNK ? s->len - s->off : CHUNK;
        bool last = s->off + n == s->len;
        memcpy(buf + LWS_PRE, s->body + s->off, n);
        if (lws_write(wsi, buf + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) <
            (int)n) {
            return 1;
        }
        s->off += n;
        if (!last) {
            lws_callback_on_writable(wsi);
            return 0;
        }
        mesh_free(s->body);
        s->body = NULL;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    case LWS_CALLBACK_CLOSED_HTTP:
        mesh_free(s->body);
        s->body = NULL;
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"http", http_callback, sizeof(struct session), 0, 0, NULL, 0},
    /* the WebSocket /watch protocol of a later issue goes here */
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_log(int level, const char *line)
{
    /* lws lines end in '\n'; the log module adds its own. */
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
        n--;
    }
    if (level & LLL_ERR) {
        mesh_warn(MOD, "libwebsockets: %.*s", (int)n, line);
    } else {
        mesh_debug(MOD, "libwebsockets: %.*s", (int)n, line);
    }
}

static void *serve(void *arg)
{
    struct mesh_sidecar_http *h = arg;
    while (!h->stop) {
        if (lws_service(h->lws, 0) < 0) {
            break;
        }
    }
    return NULL;
}

/* "[::1]:9431", "127.0.0.1:9431", ":9431" -> iface ("" = all) and port. */
static int parse_addr(const char *addr, char *iface, size_t cap, int *port, struct mesh_err *err)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "--http-addr '%s' is not [HOST]:PORT (e.g. :9431, 127.0.0.1:9431)",
                            addr);
    }
    size_t hl = (size_t)(colon - addr);
    const char *host = addr;
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
        host++;
        hl -= 2;
    }
    if (hl >= cap) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "--http-addr '%s': host too long", addr);
    }
    memcpy(iface, host, hl);
    iface[hl] = '\0';
    long long p = 0;
    if (mesh_parse_ll(colon + 1, strlen(colon + 1), 0, 65535, &p, NULL) < 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "--http-addr '%s': port must be 0..65535", addr);
    }
    *port = (int)p;
    return 0;
}

struct mesh_sidecar_http *mesh_sidecar_http_start(struct mesh_sidecar *ctx, const char *addr,
                                                  int *out_port, struct mesh_err *err)
{
    struct mesh_sidecar_http *h = mesh_calloc(1, sizeof(*h));
    h->ctx = ctx;
    int port = 0;
    if (parse_addr(addr, h->iface, sizeof(h->iface), &port, err) < 0) {
        mesh_free(h);
        return NULL;
    }
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = port;
    info.iface = h->iface[0] ? h->iface : NULL;
    info.protocols = protocols;
    info.user = h;
    info.options = LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE;
    if (h->iface[0] != '\0' && strchr(h->iface, ':') == NULL) {
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    }
    info.timeout_secs = 10;
    /* Probes and scrapes need a handful of connections. Without a limit
     * lws sizes its fd tables by RLIMIT_NOFILE and zeroes them: 320 KiB at
     * 20,000 fds, 16 MiB at the 1,048,576 many container runtimes set. */
    info.fd_limit_per_thread = 64;
    h->lws = lws_create_context(&info);
    if (h->lws == NULL) {
        mesh_free(h);
        mesh_err_set(err, MESH_E_IO, 0,
                     "cannot serve HTTP on %s (address in use or not local?); choose another "
                     "--http-addr",
                     addr);
        return NULL;
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(h->lws, "default");
    *out_port = vh != NULL ? lws_get_vhost_listen_port(vh) : port;
    if (pthread_create(&h->thread, NULL, serve, h) != 0) {
        lws_context_destroy(h->lws);
        mesh_free(h);
        mesh_err_set(err, MESH_E_IO, 0, "cannot start the HTTP thread");
        return NULL;
    }
    h->started = true;
    return h;
}

void mesh_sidecar_http_stop(struct mesh_sidecar_http *h)
{
    if (h == NULL) {
        return;
    }
    h->stop = 1;
    if (h->started) {
        lws_cancel_service(h->lws);
        pthread_join(h->thread, NULL);
    }
    lws_context_destroy(h->lws);
    mesh_free(h);
}
