/*
 * httpd.h - a small HTTP/1.1 server on libwebsockets for probes, metrics and
 * read-only documents, built to keep answering while hostile or broken
 * clients hold its port (issue 13):
 *
 *   - every connection has a count, size and time limit: at most max_conns
 *     open (max_per_peer from one address), request headers of at most
 *     max_header_bytes, completed within header_timeout_s of the accept (or
 *     of the previous response on a kept-alive connection), and a response
 *     that makes progress at least every send_timeout_s;
 *   - a new connection is never turned away for capacity: when the server
 *     is full it closes the oldest connection that has not yet sent a
 *     complete request (then the oldest idle one, then the oldest slow
 *     reader), so the kubelet's probe, which sends its request at once,
 *     always gets a slot;
 *   - WebSocket upgrades are refused (the connection is closed), except on
 *     the one stream path a program may name (ws_path, e.g. /watch): there
 *     at most max_ws clients at once (the next gets 503 + Retry-After), each
 *     sent the current document and then the latest one after each change,
 *     never a queue: a client holds at most one reference to a shared
 *     document, and one that stops reading is dropped after send_timeout_s;
 *     idle clients are pinged and dropped when they stop answering; a
 *     client that sends a data frame is closed (1008); stopping the server
 *     closes every stream with 1001 (going away);
 *   - large documents are shared, reference-counted bodies
 *     (struct mesh_httpd_body) that connections read from in place, and at
 *     most max_bulk of them are in flight (503 + Retry-After beyond);
 *   - HTTP semantics of RFC 9110: GET and HEAD (headers only) are served,
 *     every other method gets a complete 405 with `Allow: GET, HEAD`, a
 *     request path with control bytes gets 400;
 *   - only a POST on post_path keeps its connection open for the next
 *     request: every other answer says "Connection: close" and ends it, and
 *     a client that pipelines (sends a request before the previous answer)
 *     gets that answer and then a closed connection (libwebsockets 4.1
 *     mishandles requests it buffered behind another; see httpd.c);
 *   - optionally POST on one path (post_path, e.g. /mutate), with bounded
 *     bodies: a Content-Length is required (411 without), one above max_body
 *     is refused (413) before a byte of the body is read, and the body's
 *     bytes are reserved against max_inflight (all connections together;
 *     bodies up to small_body draw on a reserve of their own, small_reserve,
 *     so a flood of large bodies never starves small ones): 503 with
 *     Retry-After when full. With post_json the body is pre-scanned as it
 *     arrives (core/json.h mesh_json_scan: nesting, number of values, string
 *     length) and refused with 400 naming the cap the moment one is passed,
 *     before any parse; the whole request (headers and body) must arrive
 *     within header_timeout_s. The handler gets the complete body;
 *   - optionally TLS (tls_cert, tls_key): the pair is checked at start and
 *     looked at every tls_check_s seconds; when either file changed (a
 *     Secret volume swaps both at once) and they are a valid pair, new
 *     connections get the new certificate; a broken pair is logged once and
 *     the previous one keeps serving.
 *
 * Every libwebsockets callback tolerates a missing per-session state and
 * every reason: connection state lives in the server's own table.
 * The handler runs on the server thread.
 */
#ifndef MESH_HTTPD_H
#define MESH_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Limits; a field left 0 takes the default in brackets. */
struct mesh_httpd_limits {
    int max_conns;        /* open connections [512; less if RLIMIT_NOFILE is low] */
    int max_per_peer;     /* open connections from one address [64] */
    int max_bulk;         /* concurrent responses marked bulk [8] */
    int header_timeout_s; /* request headers complete within [5] s */
    int send_timeout_s;   /* a response stalled this long is dropped [10] s */
    int max_header_bytes; /* request line + headers [4096] */
    int max_ws;           /* WebSocket stream clients at once [16; at most max_conns/4] */
    int ws_idle_s;        /* ping a stream idle this long, drop it after twice as long [30] */
    /* POST bodies (with post_path). */
    size_t max_body;        /* largest Content-Length accepted [1 MiB] */
    size_t max_inflight;    /* body bytes reserved over all connections [32 MiB] */
    size_t small_body;      /* bodies up to this size may draw on small_reserve [256 KiB] */
    size_t small_reserve;   /* bytes set aside for small bodies [8 MiB] */
    int json_max_depth;     /* post_json: deepest nesting [64] */
    int json_max_values;    /* post_json: most values, keys included [100000] */
    size_t json_max_string; /* post_json: longest string, in bytes of its JSON text [1 MiB] */
};

/* An immutable byte string shared by every connection sending it. Created
 * with one reference; the last mesh_httpd_body_unref frees it (its pages go
 * back to the kernel at once). Reference counting is atomic: bodies may be
 * made and dropped on any thread. */
struct mesh_httpd_body;

/* Read a whole regular file (at most max_len bytes) into a new body; owned
 * by caller (mesh_httpd_body_unref). NULL with -MESH_E_IO (cannot open or
 * read; err names the path) or -MESH_E_TOOBIG (larger than max_len). */
struct mesh_httpd_body *mesh_httpd_body_from_file(const char *path, size_t max_len,
                                                  struct mesh_err *err);
/* Copy len bytes into a new body; owned by caller. */
struct mesh_httpd_body *mesh_httpd_body_from_bytes(const void *bytes, size_t len);
/* One more reference to b (returned); NULL gives NULL. */
struct mesh_httpd_body *mesh_httpd_body_ref(struct mesh_httpd_body *b);
/* Drop one reference; NULL does nothing. */
void mesh_httpd_body_unref(struct mesh_httpd_body *b);

/* What a handler answers. The server zeroes it before the call; status 0
 * means 200 and type NULL means "text/plain; charset=utf-8". Give either
 * text (owned: the server frees it) or body (one reference, taken by the
 * server); neither = an empty body. bulk: the response counts against
 * max_bulk; when max_bulk bulk responses are already in flight the server
 * drops this one and answers 503 with Retry-After. */
struct mesh_httpd_resp {
    unsigned status;
    const char *type; /* static string */
    char *text;
    struct mesh_httpd_body *body;
    bool bulk;
};

/* Called for GET and HEAD with the request path (no query string; printable
 * ASCII, at most 255 bytes; longer paths get 414, others 400, without a call).
 * Server thread. */
typedef void (*mesh_httpd_handler_fn)(void *arg, const char *path, struct mesh_httpd_resp *out);

/* The current document of the stream and its version (a new reference,
 * taken by the server), or NULL when there is none yet. The server asks at
 * every mesh_httpd_notify and once a second, and sends a document to the
 * stream clients whenever its version differs from the last one it sent.
 * Server thread. */
typedef struct mesh_httpd_body *(*mesh_httpd_doc_fn)(void *arg, uint64_t *out_version);

/* Called for a POST on post_path with its complete body (len bytes,
 * borrowed for the call; not NUL-terminated). Answers as the GET handler
 * does. Server thread. */
typedef void (*mesh_httpd_post_fn)(void *arg, const char *path, const char *body, size_t len,
                                   struct mesh_httpd_resp *out);

struct mesh_httpd_opts {
    const char *addr; /* "[host]:port", "host:port", ":port"; port 0 = any free */
    struct mesh_httpd_limits limits;
    mesh_httpd_handler_fn handler;
    void *arg;                /* borrowed, passed to handler */
    const char *flag;         /* the option that gave addr, for messages ("--http-addr") */
    const char *ws_path;      /* the WebSocket stream's path, NULL = every upgrade refused */
    mesh_httpd_doc_fn ws_doc; /* the stream's document (required with ws_path) */
    const char *ws_name;      /* how messages name the stream ("/watch clients") */
    const char *post_path;    /* the one path taking POST, NULL = none (405) */
    mesh_httpd_post_fn post;  /* required with post_path */
    bool post_json;           /* pre-scan POST bodies as JSON (limits json_*) */
    const char *tls_cert;     /* PEM certificate (chain allowed): serve HTTPS; NULL = HTTP */
    const char *tls_key;      /* its PEM private key */
    int tls_check_s;          /* look at both files every this many seconds [5] */
};

/* Counters (the /metrics of the program using it). */
struct mesh_httpd_stats {
    uint64_t accepted;            /* connections accepted */
    uint64_t evicted;             /* closed to make room for a new connection */
    uint64_t refused;             /* closed at accept: no connection could be evicted */
    uint64_t timed_out;           /* closed for a header, idle or send timeout */
    uint64_t upgrades;            /* WebSocket upgrades refused */
    uint64_t bulk_busy;           /* bulk responses answered 503 */
    uint64_t ws_busy;             /* stream upgrades answered 503 (max_ws reached) */
    uint64_t ws_sent;             /* documents sent to stream clients */
    uint64_t ws_dropped;          /* stream clients closed for stalling or sending data */
    uint64_t post_too_large;      /* POSTs refused 413 before their body was read */
    uint64_t post_refused;        /* POSTs refused 400/411: no length, or a JSON cap passed */
    uint64_t post_busy;           /* POSTs refused 503: max_inflight reserved */
    uint64_t tls_reloads;         /* certificate pairs loaded after a change */
    uint64_t tls_reload_failures; /* changed files that were not a valid pair */
    int open;                     /* connections open now */
    int ws_open;                  /* stream clients now */
    int64_t tick_ms;              /* CLOCK_MONOTONIC ms of the server thread's last 1 s timer: a
                                   * stamp older than a few seconds means the thread hangs */
};

struct mesh_httpd;

/* Listen on opts->addr and serve on a new thread; *out_port receives the
 * bound port. Owned by caller (mesh_httpd_stop). NULL with -MESH_E_CONFIG
 * (bad address, or tls_cert/tls_key not a readable certificate and its
 * key) or -MESH_E_IO (cannot listen or start the thread). */
struct mesh_httpd *mesh_httpd_start(const struct mesh_httpd_opts *opts, int *out_port,
                                    struct mesh_err *err);
/* Stop the thread, close every connection, free. NULL does nothing. */
void mesh_httpd_stop(struct mesh_httpd *h);
/* The stream's document may have changed: the server asks ws_doc again at
 * once (any thread; cheap; NULL does nothing). */
void mesh_httpd_notify(struct mesh_httpd *h);
/* A snapshot of the counters (any thread). */
void mesh_httpd_get_stats(struct mesh_httpd *h, struct mesh_httpd_stats *out);

#endif
