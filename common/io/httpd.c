/*
 * httpd.c - the hardened HTTP/1.1 server of httpd.h on libwebsockets.
 *
 * libwebsockets does the parsing, the per-connection buffers and the I/O;
 * this file decides who gets a connection, for how long, and what is sent.
 * State per connection lives in `conns` (found through the wsi's opaque
 * user data), never in lws's per-session allocation, which lws leaves NULL
 * on paths such as connect-and-close, refused upgrades and parse errors.
 *
 * Capacity. lws stops accepting once its fd table is full, and a connection
 * waiting in the kernel's accept queue is a probe that times out. So the
 * table is sized at twice max_conns and this file enforces max_conns
 * itself when lws offers a new connection (LWS_CALLBACK_FILTER_NETWORK_
 * CONNECTION): at the limit it closes the oldest connection that has not
 * sent a complete request (slowloris), else the oldest idle one, else the
 * oldest one still sending. The newcomer gets the slot; its request is
 * normally complete within a millisecond, after which only max_conns newer
 * connections can displace it. The other half of the table holds the
 * connections being closed (lws closes them on its next service pass).
 *
 * Time. A 1 s timer (lws_sul) closes connections whose request headers are
 * not complete header_timeout_s after the accept or the previous response,
 * and responses that made no progress for send_timeout_s.
 *
 * Memory. A response is either a small owned string or a reference to a
 * shared body; each writable callback copies at most CHUNK bytes into one
 * buffer of the server, and lws keeps at most the unsent rest of that chunk
 * per connection. Bulk responses (large documents) are capped at max_bulk.
 *
 * Stream. An upgrade on ws_path becomes a C_WS connection (never evicted,
 * at most max_ws). The server keeps one reference to the latest document
 * (ws_body, version ws_ver); a client sends it as one text message in
 * CHUNK fragments, each written only when lws says the socket is writable,
 * and when it finishes sends ws_body again if the version moved meanwhile.
 * So a client holds one document reference and at most one chunk in lws,
 * whatever the publish rate: intermediate versions are skipped, not queued.
 *
 * POST. A request on post_path with an acceptable Content-Length reserves
 * that many bytes (h->held, h->held_small) and gets a buffer of that size;
 * a large one is mapped, so only the bytes that arrived are resident and
 * all of it goes back to the kernel at once. Each piece lws hands over is
 * pre-scanned (post_json) before it is kept. A refusal while a body is
 * pending is written at once with "Connection: close" and the connection
 * is closed: the rest of the body is never read. The connection stays in
 * C_WAIT until the body is complete, so the header timeout bounds the whole
 * request and a half-sent body is the first candidate for eviction.
 *
 * Pipelining. lws 4.1 keeps the bytes a client sent beyond the request it
 * is serving in a per-connection buffer and parses them once the
 * transaction completes. A POST parsed from that buffer is read twice: its
 * headers by the outer read, its body by a nested one inside lws_http_action
 * that starts again at the buffer's head; when either refuses, the nested
 * read frees the connection and the outer one closes it again (a use after
 * free in lws_service_do_ripe_rxflow), and when neither does, the nested
 * loop may never end. So no request is ever parsed from that buffer here:
 *   - only a POST on post_path keeps its connection: every other answer
 *     carries "Connection: close" and the connection ends with it (lws
 *     gives no sign of bytes buffered behind a GET), and any other request
 *     with a body is answered and closed at once, its body unread (lws would
 *     complete the transaction itself after discarding the body);
 *   - a POST's transaction completes only on the writable callback, never
 *     inside BODY_COMPLETION: before that, in the same service pass, lws
 *     offers BODY_COMPLETION again when bytes follow the body, which marks
 *     the connection to end with the answer;
 *   - a stream upgrade refused for capacity is answered and closed.
 * Real clients do not pipeline (Go's, which the API server and the kubelet
 * use, does not); one that does gets its first answer, then a close.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libwebsockets.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/json.h"
#include "core/mem.h"
#include "io/httpd.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "http"
#define CHUNK 16384
#define PATH_MAX_LEN 255
#define HDR_BUF 1024

struct mesh_httpd_body {
    atomic_int refs;
    size_t len;
    size_t map_len; /* bytes mapped at data; 0 = nothing mapped (empty body) */
    char *data;
};

enum conn_state {
    C_FREE = 0,
    C_WAIT,  /* accepted or kept alive: waiting for a complete request */
    C_SEND,  /* a response is being written */
    C_WS,    /* a WebSocket stream client */
    C_DYING, /* closed by us; lws frees it on its next pass */
};

struct conn {
    enum conn_state state;
    struct lws *wsi;
    int64_t since_ms;       /* entered the state, or last progress while sending */
    unsigned char peer[17]; /* family byte + address (IPv4-mapped IPv6 as IPv4) */
    bool bulk;
    char *text;                   /* owned response text, or */
    struct mesh_httpd_body *body; /* a shared body reference */
    const char *data;
    size_t len, off;
    /* C_WS: the version of the last document begun (valid when ws_any),
     * and a close (1001) requested. */
    uint64_t ws_ver;
    bool ws_any, ws_closing;
    /* A POST body being read (posting): req_cap bytes reserved (from the
     * small reserve when req_small), req_len arrived. */
    bool posting, req_small, req_mapped;
    /* C_SEND: the answer has no body to write (HEAD); the connection ends
     * with the answer (see "Pipelining" above); BODY_COMPLETION calls
     * meanwhile. */
    bool no_body, close_after;
    unsigned recalls;
    char *req;
    size_t req_len, req_cap;
    struct mesh_json_scan scan;
};

struct mesh_httpd {
    struct mesh_httpd_limits lim;
    mesh_httpd_handler_fn handler;
    void *arg;
    char iface[64];
    struct lws_context *lws;
    struct lws_protocols protocols[2];
    pthread_t thread;
    volatile int stop;
    lws_sorted_usec_list_t sweep;
    char ws_path[PATH_MAX_LEN + 1]; /* "" = no stream */
    char ws_name[64];
    mesh_httpd_doc_fn ws_doc;
    lws_retry_bo_t idle_policy;
    atomic_int draining;              /* stop: close the streams (1001) */
    char post_path[PATH_MAX_LEN + 1]; /* "" = no POST */
    mesh_httpd_post_fn post;
    bool post_json;
    char *tls_cert, *tls_key; /* owned; NULL = plain HTTP */
    int tls_check_s;
    int64_t tls_next_ms;
    struct tls_file_id {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
    } cert_id, key_id, bad_cert_id, bad_key_id;

    /* Server thread only. */
    struct conn *conns;
    int nconns; /* table size (2 * max_conns) */
    int live;   /* entries in C_WAIT or C_SEND */
    int dying;  /* entries in C_DYING */
    int bulk_active;
    int ws_count;                    /* entries in C_WS */
    struct mesh_httpd_body *ws_body; /* latest stream document (one reference) */
    uint64_t ws_ver;
    unsigned char pending_peer[17]; /* the address FILTER_NETWORK_CONNECTION admitted */
    unsigned char buf[LWS_PRE + CHUNK];
    size_t held, held_small; /* POST bytes reserved: in all, from the small reserve */

    atomic_uint_fast64_t n_post_too_large, n_post_refused, n_post_busy;
    atomic_uint_fast64_t n_tls_reloads, n_tls_reload_failures;
    atomic_int_fast64_t tick_ms;
    atomic_uint_fast64_t n_accepted, n_evicted, n_refused, n_timed_out, n_upgrades, n_bulk_busy;
    atomic_uint_fast64_t n_ws_busy, n_ws_sent, n_ws_dropped;
    atomic_int n_open, n_ws_open;
};

/* ---- bodies ---------------------------------------------------------------- */

/* n bytes of new anonymous pages; out of memory aborts, as core/mem.h does. */
static void *map_pages(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        mesh_error(MOD, "out of memory mapping %zu bytes", n);
        abort();
    }
    return p;
}

/* Bodies are mapped, not malloc'ed: a large one would otherwise stay in the
 * heap after its last reader left (glibc raises its mmap threshold after
 * the first large free), and "the memory comes back" is part of the
 * contract. */
static struct mesh_httpd_body *body_alloc(size_t len)
{
    struct mesh_httpd_body *b = mesh_calloc(1, sizeof(*b));
    atomic_init(&b->refs, 1);
    b->len = len;
    if (len > 0) {
        b->data = map_pages(len);
        b->map_len = len;
    }
    return b;
}

struct mesh_httpd_body *mesh_httpd_body_from_bytes(const void *bytes, size_t len)
{
    struct mesh_httpd_body *b = body_alloc(len);
    if (len > 0) {
        memcpy(b->data, bytes, len);
    }
    return b;
}

struct mesh_httpd_body *mesh_httpd_body_from_file(const char *path, size_t max_len,
                                                  struct mesh_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        mesh_err_set(err, MESH_E_IO, errno, "cannot open %s", path);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        mesh_err_set(err, MESH_E_IO, errno, "%s is not a readable regular file", path);
        close(fd);
        return NULL;
    }
    if ((uintmax_t)st.st_size > max_len) {
        mesh_err_set(err, MESH_E_TOOBIG, 0, "%s is %lld bytes, more than the %zu served", path,
                     (long long)st.st_size, max_len);
        close(fd);
        return NULL;
    }
    struct mesh_httpd_body *b = body_alloc((size_t)st.st_size);
    size_t got = 0;
    while (got < b->len) {
        ssize_t n = mesh_sys_read(fd, b->data + got, b->len - got);
        if (n < 0) {
            mesh_err_set(err, MESH_E_IO, errno, "cannot read %s", path);
            close(fd);
            mesh_httpd_body_unref(b);
            return NULL;
        }
        if (n == 0) {
            break; /* truncated under us: serve what is there */
        }
        got += (size_t)n;
    }
    b->len = got;
    close(fd);
    return b;
}

struct mesh_httpd_body *mesh_httpd_body_ref(struct mesh_httpd_body *b)
{
    if (b != NULL) {
        atomic_fetch_add(&b->refs, 1);
    }
    return b;
}

void mesh_httpd_body_unref(struct mesh_httpd_body *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1) {
        return;
    }
    if (b->map_len > 0) {
        munmap(b->data, b->map_len);
    }
    mesh_free(b);
}

/* b's bytes: never NULL, also for an empty body (none are mapped). */
static const char *body_data(const struct mesh_httpd_body *b)
{
    return b->data != NULL ? b->data : "";
}

/* ---- connection table ----------------------------------------------------- */

static void peer_key(const struct sockaddr_storage *ss, unsigned char key[17])
{
    memset(key, 0, 17);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        key[0] = 4;
        memcpy(key + 1, &in->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            key[0] = 4;
            memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            key[0] = 6;
            memcpy(key + 1, in6->sin6_addr.s6_addr, 16);
        }
    }
}

/* Give back c's POST body and its reservation. */
static void release_request(struct mesh_httpd *h, struct conn *c)
{
    if (c->req != NULL) {
        if (c->req_mapped) {
            munmap(c->req, c->req_cap);
        } else {
            mesh_free(c->req);
        }
    }
    if (c->posting || c->req != NULL) {
        h->held -= c->req_cap <= h->held ? c->req_cap : h->held;
        if (c->req_small) {
            h->held_small -= c->req_cap <= h->held_small ? c->req_cap : h->held_small;
        }
    }
    c->req = NULL;
    c->req_len = c->req_cap = 0;
    c->posting = c->req_small = c->req_mapped = false;
}

static void release_response(struct mesh_httpd *h, struct conn *c)
{
    release_request(h, c);
    mesh_free(c->text);
    c->text = NULL;
    mesh_httpd_body_unref(c->body);
    c->body = NULL;
    c->data = NULL;
    c->len = c->off = 0;
    if (c->bulk) {
        c->bulk = false;
        h->bulk_active--;
    }
}

static bool is_live(enum conn_state st)
{
    return st == C_WAIT || st == C_SEND || st == C_WS;
}

static void set_state(struct mesh_httpd *h, struct conn *c, enum conn_state st)
{
    if (is_live(c->state)) {
        h->live--;
    } else if (c->state == C_DYING) {
        h->dying--;
    }
    if (c->state == C_WS) {
        h->ws_count--;
        atomic_fetch_sub(&h->n_ws_open, 1);
    }
    if (is_live(st)) {
        h->live++;
    } else if (st == C_DYING) {
        h->dying++;
    }
    if (st == C_WS) {
        h->ws_count++;
        atomic_fetch_add(&h->n_ws_open, 1);
    }
    c->state = st;
    c->since_ms = mesh_sys_now_ms();
}

static void conn_free(struct mesh_httpd *h, struct lws *wsi)
{
    struct conn *c = lws_get_opaque_user_data(wsi);
    if (c == NULL) {
        return;
    }
    lws_set_opaque_user_data(wsi, NULL);
    release_response(h, c);
    set_state(h, c, C_FREE);
    c->wsi = NULL;
    atomic_fetch_sub(&h->n_open, 1);
}

/* Close c on lws's next pass (never synchronously: lws may be iterating
 * its fd table). */
static void conn_kill(struct mesh_httpd *h, struct conn *c)
{
    release_response(h, c);
    set_state(h, c, C_DYING);
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* The connection to close for a newcomer (peer == NULL: any peer): the
 * oldest waiting for its request, else the oldest sending; never a stream
 * client (max_ws of them leave most of the table to probes). NULL = none. */
static struct conn *pick_victim(struct mesh_httpd *h, const unsigned char *peer)
{
    struct conn *best = NULL;
    for (int i = 0; i < h->nconns; i++) {
        struct conn *c = &h->conns[i];
        if (c->state != C_WAIT && c->state != C_SEND) {
            continue;
        }
        if (peer != NULL && memcmp(c->peer, peer, sizeof(c->peer)) != 0) {
            continue;
        }
        if (best == NULL || (c->state == C_WAIT && best->state == C_SEND) ||
            (c->state == best->state && c->since_ms < best->since_ms)) {
            best = c;
        }
    }
    return best;
}

/* A new TCP connection from ss: 0 admits it (possibly closing another), 1
 * refuses it. */
static int admit(struct mesh_httpd *h, const struct sockaddr_storage *ss)
{
    unsigned char key[17];
    peer_key(ss, key);
    int from_peer = 0;
    for (int i = 0; i < h->nconns; i++) {
        const struct conn *c = &h->conns[i];
        if (is_live(c->state) && memcmp(c->peer, key, sizeof(key)) == 0) {
            from_peer++;
        }
    }
    if (h->live + h->dying >= h->nconns) {
        atomic_fetch_add(&h->n_refused, 1);
        return 1;
    }
    struct conn *victim = NULL;
    if (from_peer >= h->lim.max_per_peer) {
        victim = pick_victim(h, key);
    } else if (h->live >= h->lim.max_conns) {
        victim = pick_victim(h, NULL);
    } else {
        memcpy(h->pending_peer, key, sizeof(key));
        return 0;
    }
    if (victim == NULL) {
        atomic_fetch_add(&h->n_refused, 1);
        return 1;
    }
    conn_kill(h, victim);
    atomic_fetch_add(&h->n_evicted, 1);
    memcpy(h->pending_peer, key, sizeof(key));
    return 0;
}

static int attach(struct mesh_httpd *h, struct lws *wsi)
{
    for (int i = 0; i < h->nconns; i++) {
        struct conn *c = &h->conns[i];
        if (c->state != C_FREE) {
            continue;
        }
        memset(c, 0, sizeof(*c));
        c->wsi = wsi;
        memcpy(c->peer, h->pending_peer, sizeof(c->peer));
        set_state(h, c, C_WAIT);
        lws_set_opaque_user_data(wsi, c);
        atomic_fetch_add(&h->n_accepted, 1);
        atomic_fetch_add(&h->n_open, 1);
        return 0;
    }
    atomic_fetch_add(&h->n_refused, 1);
    return -1;
}

/* ---- responses ------------------------------------------------------------ */

enum method { M_GET, M_HEAD, M_POST, M_OTHER };

static enum method request_method(struct lws *wsi)
{
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) > 0) {
        return M_GET;
    }
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0) {
        return M_HEAD;
    }
    if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0) {
        return M_POST;
    }
    return M_OTHER;
}

static int write_headers(struct lws *wsi, const struct mesh_httpd_resp *r, size_t len,
                         const char *allow, bool retry, bool close)
{
    unsigned char buf[LWS_PRE + HDR_BUF];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    const char *type = r->type != NULL ? r->type : "text/plain; charset=utf-8";
    if (lws_add_http_common_headers(wsi, r->status, type, len, &p, end) != 0 ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-store", 8, &p, end) != 0) {
        return -1;
    }
    if (allow != NULL && lws_add_http_header_by_name(
                             wsi, (const unsigned char *)"allow:", (const unsigned char *)allow,
                             (int)strlen(allow), &p, end) != 0) {
        return -1;
    }
    if (close && lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION,
                                              (const unsigned char *)"close", 5, &p, end) != 0) {
        return -1;
    }
    if (retry && lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_RETRY_AFTER,
                                              (const unsigned char *)"1", 1, &p, end) != 0) {
        return -1;
    }
    return lws_finalize_write_http_header(wsi, start, &p, end) != 0 ? -1 : 0;
}

static void set_text(struct mesh_httpd_resp *r, unsigned status, const char *text)
{
    mesh_free(r->text);
    mesh_httpd_body_unref(r->body);
    memset(r, 0, sizeof(*r));
    r->status = status;
    r->text = mesh_strdup(text);
}

/* The path lws hands over (`in`, len): printable ASCII only. */
static bool path_ok(const char *in, size_t len, char *out, size_t cap)
{
    if (in == NULL || len == 0 || len >= cap) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch <= 0x20 || ch >= 0x7f) {
            return false;
        }
    }
    memcpy(out, in, len);
    out[len] = '\0';
    return true;
}

/* Take r as c's response and send its headers; the body (none for HEAD:
 * RFC 9110 §9.3.2) and the end of the transaction follow on the writable
 * callback, never now (see "Pipelining" above). */
static int start_response(struct mesh_httpd *h, struct lws *wsi, struct conn *c,
                          struct mesh_httpd_resp *r, enum method m, const char *allow, bool retry)
{
    if (r->bulk) {
        c->bulk = true;
        h->bulk_active++;
    }
    c->text = r->text;
    c->body = r->body;
    c->data = c->body != NULL ? body_data(c->body) : (c->text != NULL ? c->text : "");
    c->len = c->body != NULL ? c->body->len : (c->text ? strlen(c->text) : 0);
    c->off = 0;
    c->no_body = m == M_HEAD;
    c->close_after = m != M_POST;
    c->recalls = 0;
    set_state(h, c, C_SEND);
    if (write_headers(wsi, r, c->len, allow, retry, c->close_after) < 0) {
        return -1;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* Answer status and text (at most CHUNK bytes) with "Connection: close",
 * then -1 so lws closes the connection: what the client sent after the
 * request's headers (its body, or a request behind it) is never read. */
static int close_with(struct mesh_httpd *h, struct lws *wsi, struct conn *c, unsigned status,
                      const char *text, const char *allow, bool retry)
{
    struct mesh_httpd_resp r = {.status = status};
    size_t len = text != NULL ? strlen(text) : 0;
    len = len < CHUNK ? len : CHUNK;
    if (write_headers(wsi, &r, len, allow, retry, true) == 0 && len > 0) {
        memcpy(h->buf + LWS_PRE, text, len);
        (void)lws_write(wsi, h->buf + LWS_PRE, len, LWS_WRITE_HTTP_FINAL);
    }
    conn_kill(h, c);
    return -1;
}

/* Refuse a POST whose body is (or may be) still on its way, counted in
 * *counter; a 503 asks the client to retry. */
static int refuse_post(struct mesh_httpd *h, struct lws *wsi, struct conn *c,
                       atomic_uint_fast64_t *counter, unsigned status, const char *text)
{
    atomic_fetch_add(counter, 1);
    return close_with(h, wsi, c, status, text, NULL, status == 503);
}

/* The Content-Length of a POST: 0..max, -1 absent, -2 malformed. */
static long long content_length(struct lws *wsi)
{
    char v[32];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    if (n <= 0) {
        return -1;
    }
    if (n >= (int)sizeof(v) ||
        lws_hdr_copy(wsi, v, sizeof(v), WSI_TOKEN_HTTP_CONTENT_LENGTH) != n) {
        return -2;
    }
    long long x = 0;
    if (mesh_parse_ll(v, (size_t)n, 0, 1LL << 40, &x, NULL) < 0) {
        return -2;
    }
    return x;
}

/* A POST on post_path: check its length, reserve its bytes, make its buffer. */
static int post_begin(struct mesh_httpd *h, struct lws *wsi, struct conn *c)
{
    long long cl = content_length(wsi);
    char msg[200];
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
        /* lws 4.1 reads Content-Length bytes whatever the encoding: a
         * chunked body beside a length would be read as the wrong bytes. */
        return refuse_post(h, wsi, c, &h->n_post_refused, 400,
                           "bad request: Transfer-Encoding is not taken; send the body with a "
                           "Content-Length\n");
    }
    if (cl == -1) {
        return refuse_post(h, wsi, c, &h->n_post_refused, 411,
                           "length required: send the body with a Content-Length\n");
    }
    if (cl <= 0) {
        return refuse_post(h, wsi, c, &h->n_post_refused, 400,
                           "bad request: empty body or bad Content-Length\n");
    }
    if ((unsigned long long)cl > h->lim.max_body) {
        snprintf(msg, sizeof(msg), "request body of %lld bytes is above the limit of %zu bytes\n",
                 cl, h->lim.max_body);
        return refuse_post(h, wsi, c, &h->n_post_too_large, 413, msg);
    }
    size_t n = (size_t)cl;
    bool small = n <= h->lim.small_body && h->held_small + n <= h->lim.small_reserve;
    if (!small && h->held - h->held_small + n > h->lim.max_inflight) {
        snprintf(msg, sizeof(msg),
                 "busy: %zu bytes of request bodies are being received, the most held at once; "
                 "retry\n",
                 h->held);
        return refuse_post(h, wsi, c, &h->n_post_busy, 503, msg);
    }
    /* Large bodies are mapped: untouched pages cost nothing, and all of it
     * goes back at once (a freed heap block may stay resident). */
    c->req_mapped = n >= 65536;
    c->req = c->req_mapped ? map_pages(n) : mesh_malloc(n);
    c->req_cap = n;
    c->req_len = 0;
    c->req_small = small;
    c->posting = true;
    h->held += n;
    if (small) {
        h->held_small += n;
    }
    mesh_json_scan_init(&c->scan, (size_t)h->lim.json_max_depth, (size_t)h->lim.json_max_values,
                        h->lim.json_max_string);
    return 0;
}

static int on_body(struct mesh_httpd *h, struct lws *wsi, struct conn *c, const char *in,
                   size_t len)
{
    if (c == NULL || c->state != C_WAIT || !c->posting) {
        return 0; /* a refused request's body: discarded */
    }
    if (len > c->req_cap - c->req_len) {
        return refuse_post(h, wsi, c, &h->n_post_refused, 400,
                           "bad request: body longer than its Content-Length\n");
    }
    struct mesh_err err = {0};
    if (h->post_json && mesh_json_scan_feed(&c->scan, in, len, &err) < 0) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "request body refused before parsing: %.256s (a limit of this server; a "
                 "real request is far below it)\n",
                 err.msg);
        mesh_debug(MOD, "POST %s: %s", h->post_path, err.msg);
        return refuse_post(h, wsi, c, &h->n_post_refused, 400, msg);
    }
    memcpy(c->req + c->req_len, in, len);
    c->req_len += len;
    return 0;
}

static int on_body_done(struct mesh_httpd *h, struct lws *wsi, struct conn *c)
{
    if (c != NULL && c->state == C_SEND) {
        /* Offered again while the answer is being written: the client
         * sent bytes behind this POST (lws offers the ended body on every
         * service pass until the transaction ends). The connection ends
         * with the answer; one whose answer takes more than 1000 passes
         * ends now. */
        c->close_after = true;
        if (++c->recalls > 1000) {
            conn_kill(h, c);
            return -1;
        }
        return 0;
    }
    if (c == NULL || c->state != C_WAIT || !c->posting) {
        return 0;
    }
    if (c->req_len != c->req_cap) {
        return refuse_post(h, wsi, c, &h->n_post_refused, 400,
                           "bad request: body shorter than its Content-Length\n");
    }
    struct mesh_httpd_resp r;
    memset(&r, 0, sizeof(r));
    h->post(h->arg, h->post_path, c->req, c->req_len, &r);
    release_request(h, c);
    if (r.status == 0) {
        r.status = 200;
    }
    r.bulk = false;
    return start_response(h, wsi, c, &r, M_POST, NULL, false);
}

static int on_request(struct mesh_httpd *h, struct lws *wsi, struct conn *c, const char *in,
                      size_t len)
{
    struct mesh_httpd_resp r;
    memset(&r, 0, sizeof(r));
    enum method m = request_method(wsi);
    const char *allow = NULL;
    bool retry = false;
    char path[PATH_MAX_LEN + 1];
    bool path_good = in != NULL && len > 0 && memchr(in, '\0', len) == NULL &&
                     path_ok(in, len, path, sizeof(path));
    if (m == M_POST && path_good && h->post_path[0] != '\0' && strcmp(path, h->post_path) == 0) {
        return post_begin(h, wsi, c);
    }
    /* Does a body follow? (A Content-Length of 0 is none; a malformed one
     * may hide one.) */
    bool has_body = content_length(wsi) != -1 && content_length(wsi) != 0;
    has_body = has_body || lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
    if (m == M_POST && path_good && h->post_path[0] != '\0') {
        m = M_OTHER;
        char msg[PATH_MAX_LEN + 32];
        snprintf(msg, sizeof(msg), "not found: POST %s\n", h->post_path);
        set_text(&r, 404, msg);
    } else if (m == M_POST || m == M_OTHER) {
        m = M_OTHER;
        allow = h->post_path[0] != '\0' ? "GET, HEAD, POST" : "GET, HEAD";
        set_text(&r, 405,
                 h->post_path[0] != '\0' ? "method not allowed: GET and HEAD are served, and POST "
                                           "on the one path that takes it\n"
                                         : "method not allowed: only GET and HEAD are served\n");
    } else if (in != NULL && len > 0 && memchr(in, '\0', len) != NULL) {
        set_text(&r, 400, "bad request: the path contains a NUL byte\n");
    } else if (!path_good) {
        set_text(&r, len > PATH_MAX_LEN ? 414 : 400,
                 len > PATH_MAX_LEN ? "the path is too long\n"
                                    : "bad request: the path must be printable ASCII\n");
    } else {
        h->handler(h->arg, path, &r);
        if (r.status == 0) {
            r.status = 200;
        }
        if (r.bulk && h->bulk_active >= h->lim.max_bulk) {
            atomic_fetch_add(&h->n_bulk_busy, 1);
            char msg[128];
            snprintf(msg, sizeof(msg), "busy: %d transfers of large documents in flight; retry\n",
                     h->bulk_active);
            set_text(&r, 503, msg);
            retry = true;
        }
    }
    if (has_body) {
        /* Only a POST on post_path has its body read (see "Pipelining"):
         * answered with text only, then closed. */
        if (r.body != NULL) {
            set_text(&r, 400, "bad request: a GET or HEAD with a body\n");
        }
        int rc = close_with(h, wsi, c, r.status, m == M_HEAD ? NULL : r.text, allow, retry);
        mesh_free(r.text);
        mesh_httpd_body_unref(r.body);
        return rc;
    }
    return start_response(h, wsi, c, &r, m, allow, retry);
}

static int on_writable(struct mesh_httpd *h, struct lws *wsi, struct conn *c)
{
    if (c == NULL || c->state != C_SEND || c->data == NULL) {
        return 0;
    }
    size_t n = c->no_body ? 0 : c->len - c->off < CHUNK ? c->len - c->off : CHUNK;
    bool last = c->no_body || c->off + n == c->len;
    if (n > 0) {
        memcpy(h->buf + LWS_PRE, c->data + c->off, n);
        if (lws_write(wsi, h->buf + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) <
            (int)n) {
            return -1;
        }
    }
    c->off += n;
    c->since_ms = mesh_sys_now_ms();
    if (!last) {
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (c->close_after) {
        /* What the client may have sent behind this request stays unread. */
        conn_kill(h, c);
        return -1;
    }
    release_response(h, c);
    set_state(h, c, C_WAIT);
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ---- stream ----------------------------------------------------------------- */

/* Take the stream's current document; wake the clients that are not in
 * the middle of one when its version moved. Server thread. */
static void ws_refresh(struct mesh_httpd *h)
{
    if (h->ws_doc == NULL || h->ws_path[0] == '\0') {
        return;
    }
    uint64_t ver = 0;
    struct mesh_httpd_body *b = h->ws_doc(h->arg, &ver);
    if (b == NULL) {
        return;
    }
    if (h->ws_body != NULL && ver == h->ws_ver) {
        mesh_httpd_body_unref(b);
        return;
    }
    mesh_httpd_body_unref(h->ws_body);
    h->ws_body = b;
    h->ws_ver = ver;
    for (int i = 0; i < h->nconns; i++) {
        struct conn *c = &h->conns[i];
        if (c->state == C_WS && c->body == NULL) {
            lws_callback_on_writable(c->wsi);
        }
    }
}

/* Stop: every stream gets a close frame (1001) on its next writable. */
static void ws_close_all(struct mesh_httpd *h)
{
    for (int i = 0; i < h->nconns; i++) {
        struct conn *c = &h->conns[i];
        if (c->state == C_WS && !c->ws_closing) {
            c->ws_closing = true;
            lws_close_reason(c->wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)"stopping", 8);
            lws_callback_on_writable(c->wsi);
        }
    }
}

static int ws_writable(struct mesh_httpd *h, struct lws *wsi, struct conn *c)
{
    if (c == NULL || c->state != C_WS) {
        return 0;
    }
    if (c->ws_closing) {
        return -1; /* lws sends the close frame set by lws_close_reason */
    }
    if (c->body == NULL) {
        if (h->ws_body == NULL || (c->ws_any && c->ws_ver == h->ws_ver)) {
            return 0;
        }
        c->body = mesh_httpd_body_ref(h->ws_body);
        c->ws_ver = h->ws_ver;
        c->ws_any = true;
        c->data = body_data(c->body);
        c->len = c->body->len;
        c->off = 0;
        c->since_ms = mesh_sys_now_ms();
    }
    size_t n = c->len - c->off < CHUNK ? c->len - c->off : CHUNK;
    bool first = c->off == 0, last = c->off + n == c->len;
    int flags = lws_write_ws_flags(LWS_WRITE_TEXT, first, last);
    memcpy(h->buf + LWS_PRE, c->data + c->off, n);
    if (lws_write(wsi, h->buf + LWS_PRE, n, (enum lws_write_protocol)flags) < (int)n) {
        return -1;
    }
    c->off += n;
    c->since_ms = mesh_sys_now_ms();
    if (last) {
        release_response(h, c);
        atomic_fetch_add(&h->n_ws_sent, 1);
        if (c->ws_ver == h->ws_ver) {
            return 0;
        }
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: -1 hangs up (after a 503 when the
 * stream is full: answered and closed, see "Pipelining"), 0 = the upgrade
 * proceeds (c becomes a stream client). */
static int ws_upgrade(struct mesh_httpd *h, struct lws *wsi, struct conn *c, const char *proto)
{
    char path[PATH_MAX_LEN + 1];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    if (c == NULL || c->state != C_WAIT || h->ws_path[0] == '\0' || proto == NULL ||
        strcmp(proto, "websocket") != 0 || n <= 0 || n > PATH_MAX_LEN ||
        lws_hdr_copy(wsi, path, sizeof(path), WSI_TOKEN_GET_URI) != n ||
        strcmp(path, h->ws_path) != 0 || atomic_load(&h->draining)) {
        /* Any other path, method or protocol (h2c): hang up. */
        atomic_fetch_add(&h->n_upgrades, 1);
        return -1;
    }
    if (h->ws_count >= h->lim.max_ws) {
        atomic_fetch_add(&h->n_ws_busy, 1);
        char msg[160];
        snprintf(msg, sizeof(msg), "busy: %d %s connected, the most served at once; retry later\n",
                 h->ws_count, h->ws_name);
        return close_with(h, wsi, c, 503, msg, NULL, true);
    }
    release_response(h, c);
    set_state(h, c, C_WS);
    c->ws_any = false;
    c->ws_closing = false;
    return 0;
}

/* ---- TLS certificate ----------------------------------------------------------- */

static bool file_id_of(const char *path, struct tls_file_id *out)
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

static bool file_id_eq(const struct tls_file_id *a, const struct tls_file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Is cert (its first PEM certificate) + key a pair? The reason in why when not. */
static bool tls_pair_ok(const char *cert, const char *key, char *why, size_t cap)
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

/* Every tls_check_s seconds (from the sweep): reload a changed, valid pair. */
static void tls_check(struct mesh_httpd *h, int64_t now)
{
    if (h->tls_cert == NULL || now < h->tls_next_ms) {
        return;
    }
    h->tls_next_ms = now + (int64_t)h->tls_check_s * 1000;
    struct tls_file_id c, k;
    if (!file_id_of(h->tls_cert, &c) || !file_id_of(h->tls_key, &k) ||
        (file_id_eq(&c, &h->cert_id) && file_id_eq(&k, &h->key_id))) {
        return;
    }
    char why[512];
    if (tls_pair_ok(h->tls_cert, h->tls_key, why, sizeof(why))) {
        lws_tls_cert_updated(h->lws, h->tls_cert, h->tls_key, NULL, 0, NULL, 0);
        h->cert_id = c;
        h->key_id = k;
        atomic_fetch_add(&h->n_tls_reloads, 1);
        mesh_info(MOD, "serving certificate reloaded from %s", h->tls_cert);
    } else if (!(file_id_eq(&c, &h->bad_cert_id) && file_id_eq(&k, &h->bad_key_id))) {
        /* Logged once per changed pair; the files may be mid-update. */
        h->bad_cert_id = c;
        h->bad_key_id = k;
        atomic_fetch_add(&h->n_tls_reload_failures, 1);
        mesh_warn(MOD, "certificate files changed but %s; still serving the previous pair", why);
    }
}

static void sweep(lws_sorted_usec_list_t *sul)
{
    struct mesh_httpd *h = lws_container_of(sul, struct mesh_httpd, sweep);
    int64_t now = mesh_sys_now_ms();
    atomic_store(&h->tick_ms, now);
    tls_check(h, now);
    for (int i = 0; i < h->nconns; i++) {
        struct conn *c = &h->conns[i];
        int64_t limit_ms = c->state == C_WAIT   ? (int64_t)h->lim.header_timeout_s * 1000
                           : c->state == C_SEND ? (int64_t)h->lim.send_timeout_s * 1000
                           : c->state == C_WS && c->body != NULL
                               ? (int64_t)h->lim.send_timeout_s * 1000
                               : -1;
        if (limit_ms >= 0 && now - c->since_ms > limit_ms) {
            if (c->state == C_WS) {
                mesh_debug(MOD, "%s: a client read nothing for %d s; closed", h->ws_name,
                           h->lim.send_timeout_s);
                atomic_fetch_add(&h->n_ws_dropped, 1);
            }
            conn_kill(h, c);
            atomic_fetch_add(&h->n_timed_out, 1);
        }
    }
    ws_refresh(h);
    lws_sul_schedule(h->lws, 0, &h->sweep, sweep, LWS_US_PER_SEC);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
    struct lws_context *ctx = wsi != NULL ? lws_get_context(wsi) : NULL;
    struct mesh_httpd *h = ctx != NULL ? lws_context_user(ctx) : NULL;
    if (h == NULL || h->conns == NULL) {
        return 0;
    }
    /* Our state of this connection: NULL before attach, after conn_free,
     * and on the listening socket. */
    struct conn *c = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: {
        const struct lws_filter_network_conn_args *a = user;
        if (a == NULL) {
            return 1;
        }
        return admit(h, &a->cli_addr);
    }
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        return attach(h, wsi);
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        /* A WebSocket on ws_path; anything else (h2c too): hang up. */
        return ws_upgrade(h, wsi, c, in);
    case LWS_CALLBACK_ESTABLISHED:
        if (c == NULL || c->state != C_WS) {
            return -1;
        }
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return ws_writable(h, wsi, c);
    case LWS_CALLBACK_RECEIVE:
        /* The stream is one-way: a client that sends a data frame (of any
         * size: lws hands over its first bytes) is closed. Pings, pongs and
         * close frames are answered by lws and never come here. */
        if (c != NULL && c->state == C_WS) {
            atomic_fetch_add(&h->n_ws_dropped, 1);
            mesh_debug(MOD, "%s: a client sent a data frame; closed", h->ws_name);
        }
        lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                         (unsigned char *)"this stream takes no messages", 29);
        return -1;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (atomic_load(&h->draining)) {
            ws_close_all(h);
        } else {
            ws_refresh(h);
        }
        return 0;
    case LWS_CALLBACK_HTTP:
        /* C_SEND: a request sent behind one whose answer is still being
         * written: closed, not served (see "Pipelining" above). */
        if (c == NULL || c->state == C_DYING || c->state == C_SEND) {
            return -1;
        }
        release_response(h, c);
        return on_request(h, wsi, c, in, len);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return on_writable(h, wsi, c);
    case LWS_CALLBACK_HTTP_BODY:
        /* A POST on post_path is kept (bounded, pre-scanned); other
         * requests with a body were answered and closed. The header
         * timeout bounds how long a client may keep sending one. */
        return on_body(h, wsi, c, in, len);
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return on_body_done(h, wsi, c);
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        conn_free(h, wsi);
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

/* ---- lifecycle -------------------------------------------------------------- */

/* libwebsockets' log lines: one log line each, errors as warnings and the
 * rest at debug. lws's logging is process-wide: every lws context of a
 * process (the injector's HTTPS server and its probe server) uses this. */
static void lws_log(int level, const char *line)
{
    /* lws lines end in '\n'; the log module adds its own (and escapes
     * what a client may have put into the line). */
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
    struct mesh_httpd *h = arg;
    while (!h->stop) {
        if (lws_service(h->lws, 0) < 0) {
            break;
        }
    }
    return NULL;
}

/* Split "[::1]:9431", "127.0.0.1:9431", ":9431" into iface ("" = all; cap
 * bytes) and port 0..65535; flag names the option in the message. */
static int parse_addr(const char *addr, const char *flag, char *iface, size_t cap, int *out_port,
                      struct mesh_err *err)
{
    const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
    if (colon == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s '%s' is not [HOST]:PORT (:PORT serves every address, "
                            "127.0.0.1:PORT one)",
                            flag, addr != NULL ? addr : "");
    }
    size_t hl = (size_t)(colon - addr);
    const char *host = addr;
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
        host++;
        hl -= 2;
    }
    if (hl >= cap) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s '%s': host too long", flag, addr);
    }
    memcpy(iface, host, hl);
    iface[hl] = '\0';
    long long p = 0;
    if (mesh_parse_ll(colon + 1, strlen(colon + 1), 0, 65535, &p, NULL) < 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s '%s': port must be 0..65535", flag, addr);
    }
    *out_port = (int)p;
    return 0;
}

static void limits_defaults(struct mesh_httpd_limits *l)
{
    l->max_conns = l->max_conns > 0 ? l->max_conns : 512;
    l->max_per_peer = l->max_per_peer > 0 ? l->max_per_peer : 64;
    l->max_bulk = l->max_bulk > 0 ? l->max_bulk : 8;
    l->header_timeout_s = l->header_timeout_s > 0 ? l->header_timeout_s : 5;
    l->send_timeout_s = l->send_timeout_s > 0 ? l->send_timeout_s : 10;
    l->max_header_bytes = l->max_header_bytes > 0 ? l->max_header_bytes : 4096;
    if (l->max_header_bytes > 65535) {
        l->max_header_bytes = 65535;
    }
    l->max_ws = l->max_ws > 0 ? l->max_ws : 16;
    l->ws_idle_s = l->ws_idle_s > 0 ? l->ws_idle_s : 30;
    if (l->ws_idle_s > 16000) {
        l->ws_idle_s = 16000;
    }
    l->max_body = l->max_body > 0 ? l->max_body : 1u << 20;
    l->max_inflight = l->max_inflight > 0 ? l->max_inflight : 32u << 20;
    l->small_body = l->small_body > 0 ? l->small_body : 256u << 10;
    l->small_reserve = l->small_reserve > 0 ? l->small_reserve : 8u << 20;
    l->json_max_depth = l->json_max_depth > 0 ? l->json_max_depth : 64;
    l->json_max_values = l->json_max_values > 0 ? l->json_max_values : 100000;
    l->json_max_string = l->json_max_string > 0 ? l->json_max_string : 1u << 20;
}

/* Connection counts the process can afford: the table (2 x max_conns) must
 * fit under RLIMIT_NOFILE with room for the rest of the process (API client,
 * gRPC, files), else lws would drop connections whose fd numbers exceed the
 * limit; stream clients are never evicted, so they get at most a quarter. */
static void fit_limits(struct mesh_httpd *h)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (rlim_t)(2 * h->lim.max_conns + 64) > rl.rlim_cur) {
        int fit = rl.rlim_cur > 96 ? (int)((rl.rlim_cur - 64) / 2) : 16;
        mesh_warn(MOD, "the open file limit (%llu) allows %d HTTP connections instead of %d",
                  (unsigned long long)rl.rlim_cur, fit, h->lim.max_conns);
        h->lim.max_conns = fit;
        if (h->lim.max_per_peer > fit) {
            h->lim.max_per_peer = fit;
        }
    }
    /* Stream clients: at most a quarter; the rest stays for probes and scrapes. */
    if (h->lim.max_ws > h->lim.max_conns / 4) {
        h->lim.max_ws = h->lim.max_conns / 4 > 0 ? h->lim.max_conns / 4 : 1;
    }
}

/* lws's context for h listening on port: its limits and clocks. */
static void context_info(struct mesh_httpd *h, int port, struct lws_context_creation_info *info)
{
    memset(info, 0, sizeof(*info));
    info->port = port;
    info->iface = h->iface[0] ? h->iface : NULL;
    info->protocols = h->protocols;
    info->user = h;
    info->options = LWS_SERVER_OPTION_HTTP_HEADERS_SECURITY_BEST_PRACTICES_ENFORCE;
    if (h->iface[0] != '\0' && strchr(h->iface, ':') == NULL) {
        info->options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    }
    /* lws's own clocks: a backstop 2 s behind ours (the 1 s sweep), which
     * close and count first. */
    info->timeout_secs = (unsigned)h->lim.header_timeout_s + 2;
    info->timeout_secs_ah_idle = (unsigned)h->lim.header_timeout_s + 2;
    info->keepalive_timeout = h->lim.header_timeout_s + 2;
    info->max_http_header_data = (unsigned short)h->lim.max_header_bytes;
    /* One header buffer per table entry, so no connection waits for one
     * (lws stops accepting while its pool is exhausted); they are
     * allocated only while a request is being read. */
    info->max_http_header_pool = (unsigned short)h->nconns;
    /* The table plus the listen sockets and lws's cancel pipe. Without a
     * limit lws sizes its fd tables by RLIMIT_NOFILE and zeroes them
     * (16 MiB at the 1,048,576 many container runtimes set). */
    info->fd_limit_per_thread = (unsigned)h->nconns + 8;
    /* Stream clients: a ping after ws_idle_s without a pong (or other proof
     * that the peer reads), hung up after twice that. */
    h->idle_policy.secs_since_valid_ping = (uint16_t)h->lim.ws_idle_s;
    h->idle_policy.secs_since_valid_hangup = (uint16_t)(2 * h->lim.ws_idle_s);
    info->retry_and_idle_policy = &h->idle_policy;
}

/* Take opts' certificate pair (both or neither) and check that it loads. */
static int tls_setup(struct mesh_httpd *h, const struct mesh_httpd_opts *opts, struct mesh_err *err)
{
    if (opts->tls_cert == NULL && opts->tls_key == NULL) {
        return 0;
    }
    char why[512] = "a certificate needs its key and a key its certificate";
    if (opts->tls_cert == NULL || opts->tls_key == NULL ||
        !tls_pair_ok(opts->tls_cert, opts->tls_key, why, sizeof(why))) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TLS: %s; pass the serving certificate and its key (PEM)", why);
    }
    h->tls_cert = mesh_strdup(opts->tls_cert);
    h->tls_key = mesh_strdup(opts->tls_key);
    h->tls_check_s = opts->tls_check_s > 0 ? opts->tls_check_s : 5;
    file_id_of(h->tls_cert, &h->cert_id);
    file_id_of(h->tls_key, &h->key_id);
    h->tls_next_ms = mesh_sys_now_ms() + (int64_t)h->tls_check_s * 1000;
    return 0;
}

/* Free h and what it holds (its thread, if any, has ended). */
static void destroy(struct mesh_httpd *h)
{
    if (h->lws != NULL) {
        lws_sul_cancel(&h->sweep);
        lws_context_destroy(h->lws);
    }
    for (int i = 0; i < h->nconns; i++) {
        release_response(h, &h->conns[i]);
    }
    mesh_httpd_body_unref(h->ws_body);
    mesh_free(h->tls_cert);
    mesh_free(h->tls_key);
    mesh_free(h->conns);
    mesh_free(h);
}

struct mesh_httpd *mesh_httpd_start(const struct mesh_httpd_opts *opts, int *out_port,
                                    struct mesh_err *err)
{
    struct mesh_httpd *h = mesh_calloc(1, sizeof(*h));
    h->lim = opts->limits;
    limits_defaults(&h->lim);
    h->handler = opts->handler;
    h->arg = opts->arg;
    int port = 0;
    const char *flag = opts->flag != NULL ? opts->flag : "address";
    if (parse_addr(opts->addr, flag, h->iface, sizeof(h->iface), &port, err) < 0 ||
        tls_setup(h, opts, err) < 0) {
        destroy(h);
        return NULL;
    }
    fit_limits(h);
    if (opts->ws_path != NULL && opts->ws_doc != NULL) {
        snprintf(h->ws_path, sizeof(h->ws_path), "%s", opts->ws_path);
        snprintf(h->ws_name, sizeof(h->ws_name), "%s",
                 opts->ws_name != NULL ? opts->ws_name : "stream clients");
        h->ws_doc = opts->ws_doc;
    }
    if (opts->post_path != NULL && opts->post != NULL) {
        snprintf(h->post_path, sizeof(h->post_path), "%s", opts->post_path);
        h->post = opts->post;
        h->post_json = opts->post_json;
    }
    atomic_store(&h->tick_ms, mesh_sys_now_ms());
    h->nconns = 2 * h->lim.max_conns;
    h->conns = mesh_calloc((size_t)h->nconns, sizeof(*h->conns));
    h->protocols[0] = (struct lws_protocols){"http", callback, 0, 0, 0, NULL, 0};
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log);

    struct lws_context_creation_info info;
    context_info(h, port, &info);
    if (h->tls_cert != NULL) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = h->tls_cert;
        info.ssl_private_key_filepath = h->tls_key;
        info.alpn = "http/1.1";
        info.ssl_options_set = SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1;
    }
    h->lws = lws_create_context(&info);
    if (h->lws == NULL) {
        mesh_err_set(err, MESH_E_IO, 0,
                     "cannot serve HTTP on %s (address in use or not local?); choose another %s",
                     opts->addr, flag);
        destroy(h);
        return NULL;
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(h->lws, "default");
    *out_port = vh != NULL ? lws_get_vhost_listen_port(vh) : port;
    lws_sul_schedule(h->lws, 0, &h->sweep, sweep, LWS_US_PER_SEC);
    if (pthread_create(&h->thread, NULL, serve, h) != 0) {
        mesh_err_set(err, MESH_E_IO, 0, "cannot start the HTTP thread");
        destroy(h);
        return NULL;
    }
    return h;
}

void mesh_httpd_stop(struct mesh_httpd *h)
{
    if (h == NULL) {
        return;
    }
    if (h->ws_path[0] != '\0') {
        /* Close the streams with 1001 and give their clients up to 2 s to
         * answer (lws waits for the client's close frame). */
        atomic_store(&h->draining, 1);
        lws_cancel_service(h->lws);
        for (int i = 0; i < 200 && atomic_load(&h->n_ws_open) > 0; i++) {
            usleep(10000);
        }
    }
    h->stop = 1;
    lws_cancel_service(h->lws);
    pthread_join(h->thread, NULL);
    destroy(h);
}

void mesh_httpd_notify(struct mesh_httpd *h)
{
    if (h != NULL && h->lws != NULL) {
        lws_cancel_service(h->lws);
    }
}

void mesh_httpd_get_stats(struct mesh_httpd *h, struct mesh_httpd_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (h == NULL) {
        return;
    }
    out->accepted = atomic_load(&h->n_accepted);
    out->evicted = atomic_load(&h->n_evicted);
    out->refused = atomic_load(&h->n_refused);
    out->timed_out = atomic_load(&h->n_timed_out);
    out->upgrades = atomic_load(&h->n_upgrades);
    out->bulk_busy = atomic_load(&h->n_bulk_busy);
    out->ws_busy = atomic_load(&h->n_ws_busy);
    out->ws_sent = atomic_load(&h->n_ws_sent);
    out->ws_dropped = atomic_load(&h->n_ws_dropped);
    out->post_too_large = atomic_load(&h->n_post_too_large);
    out->post_refused = atomic_load(&h->n_post_refused);
    out->post_busy = atomic_load(&h->n_post_busy);
    out->tls_reloads = atomic_load(&h->n_tls_reloads);
    out->tls_reload_failures = atomic_load(&h->n_tls_reload_failures);
    out->tick_ms = atomic_load(&h->tick_ms);
    out->open = atomic_load(&h->n_open);
    out->ws_open = atomic_load(&h->n_ws_open);
}
