/*
 * k8s_informer.h - a reflector + local store for one kind of object (Pods),
 * in the manner of client-go's informer:
 *
 *   LIST (paginated, limit/continue; an expired continue token restarts
 *   the list; each page is streamed item by item, so memory holds one
 *   object's JSON tree at a time, never a page) -> diff against the
 *   store -> callbacks -> "synced"
 *   WATCH from the list's resourceVersion, allowWatchBookmarks=true,
 *   timeoutSeconds uniform in [watch_timeout_min_s, watch_timeout_max_s)
 *     normal end, or the connection cut (even mid-event: the partial
 *       event is dropped)   -> re-watch from the last RV (no relist); a
 *       watch that ends within 1 s without any event backs off first
 *       (client-go "very short watch")
 *     BOOKMARK              -> advances the RV
 *     ERROR 410 / HTTP 410  -> relist
 *     in-stream ERROR 504 "Too large resource version" -> relist
 *     other in-stream ERROR -> backoff, then relist (429: wait, re-watch)
 *     malformed event line / oversized event -> logged as an error, relist
 *     stall (no byte for stall_timeout_s) -> reconnect (relist if it
 *                              happens twice in a row without an event)
 *     RV going backwards (apiserver restarted with lost history) -> relist
 *     429                   -> wait Retry-After (capped), then re-watch
 *     other failures        -> backoff 0.8 s doubling to 30 s, jitter
 *                              x[1,2), reset after 2 min healthy
 *     401                   -> the client re-reads its token and retries once
 *
 * The store keeps, per object, its key "namespace/name", its
 * resourceVersion and a caller-owned record made by opts.extract from the
 * object's JSON (e.g. a compact pod record): the JSON itself is never
 * kept, so memory per object is ~100 bytes plus the record.
 *
 * A relist diffs the complete new list against the store and emits
 * exactly the missing changes: on_delete for keys that disappeared,
 * on_add for new keys, on_update for keys whose resourceVersion changed
 * (and, if opts.equal is set, whose records differ). Then on_synced.
 *
 * Threads and event loops. mesh_k8s_informer_run() blocks and calls the
 * callbacks on its own thread, with the store lock held. Other threads may:
 *   - call mesh_k8s_informer_stop() (returns at once; run returns within
 *     ~100 ms),
 *   - read the store between mesh_k8s_informer_lock()/_unlock()
 *     (mesh_k8s_informer_foreach, _count),
 *   - poll mesh_k8s_informer_notify_fd(): it becomes readable after every
 *     batch of changes (the events of one block read from the connection:
 *     one write per batch, not per event) and after every sync (read 8
 *     bytes to clear it),
 *     so an event loop (epoll, libwebsockets foreign fd) can react without
 *     callbacks: on readable, lock, walk the store, unlock.
 * Callbacks must not call stop+free or run; they may call foreach
 * (the lock is recursive). Keep callbacks short: the watch waits.
 */
#ifndef MESH_K8S_INFORMER_H
#define MESH_K8S_INFORMER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "io/k8s_client.h"

/* Make a caller-owned record from one object (borrowed, valid for the
 * call only). Called on run's thread without the store lock. Return NULL to leave the object out of
 * the store (it is then treated as absent: a previously stored record gets on_delete). */
typedef void *(*mesh_k8s_extract_fn)(void *ctx, const cJSON *obj);
/* Free a record made by extract. */
typedef void (*mesh_k8s_record_free_fn)(void *ctx, void *rec);
/* Optional: true when two records are the same for the caller (suppresses
 * on_update for changes the caller does not store). */
typedef bool (*mesh_k8s_record_equal_fn)(void *ctx, const void *a, const void *b);

/* Callbacks (each may be NULL). key and records are borrowed for the call:
 * old records are freed right after on_update/on_delete return. */
struct mesh_k8s_informer_callbacks {
    void (*on_add)(void *ctx, const char *key, const void *rec);
    void (*on_update)(void *ctx, const char *key, const void *old_rec, const void *new_rec);
    void (*on_delete)(void *ctx, const char *key, const void *old_rec);
    /* After every complete LIST has been applied; count = objects stored. */
    void (*on_synced)(void *ctx, size_t count);
};

struct mesh_k8s_informer_opts {
    struct mesh_k8s_query query; /* strings copied by _new */
    long page_limit;             /* LIST limit, 0 = 500 (client-go pager) */
    int watch_timeout_min_s;     /* 0 = 300 (client-go) */
    int watch_timeout_max_s;     /* 0 = 2 x min */
    int stall_timeout_s;         /* 0 = 90 (bookmarks come every ~60 s) */
    size_t max_event_bytes;      /* one watch event or list item, 0 = MESH_K8S_EVENT_MAX_DEFAULT */
    size_t max_list_bytes;       /* one page, 0 = MESH_K8S_LIST_MAX_DEFAULT */
    int backoff_initial_ms;      /* 0 = 800 */
    int backoff_max_ms;          /* 0 = 30000 */
    int backoff_reset_ms;        /* 0 = 120000 */
    int retry_after_cap_s;       /* 0 = 30 */
    /* Sync with a streaming list (sendInitialEvents) instead of LIST; falls back
     * to LIST for good when the server rejects it (HTTP 4xx, e.g. 422 WatchList off). */
    bool streaming_list;
    /* false (default): metadata.managedFields (server-side-apply bookkeeping, often half
     * of a Pod's JSON) is cut from every watch event's text before it is parsed, which
     * then costs half as much. A LIST item is parsed whole, once (the splitter's parse
     * checks it), so extract may see it there. true: events as sent. */
    bool keep_managed_fields;
    mesh_k8s_extract_fn extract;         /* required */
    mesh_k8s_record_free_fn record_free; /* required */
    mesh_k8s_record_equal_fn equal;      /* optional */
    struct mesh_k8s_informer_callbacks cb;
    void *ctx; /* passed to extract, record_free, equal and callbacks */
};

/* Why a WATCH was started: how the previous one ended (or "initial").
 * Every WATCH request counts once, so the counts sum to stats.watches.
 * Names (mesh_k8s_informer_reason_name, for a Prometheus label):
 *   initial       the first watch after the first sync (with
 *                 streaming_list: the first streaming list itself)
 *   timeout       the previous watch ended normally: the server closed it
 *                 at timeoutSeconds, or a clean end of the body at an event
 *                 boundary (re-watch from the last RV, no relist)
 *   cut           the previous watch's connection broke after its 200
 *                 (abrupt close, or EOF inside an event): re-watch
 *   stalled       no byte (not even a bookmark) for stall_timeout_s:
 *                 reconnect (relist on the second stall in a row)
 *   expired       410 Gone / Expired, in-stream ERROR or HTTP 410 at the
 *                 start: relisted
 *   error_event   an in-stream ERROR other than 410 (429, 500, 504 ...)
 *   http_error    the watch request was answered with a non-2xx status
 *                 other than 410 (401 after the token retry, 403, 429, 5xx)
 *   connect       the watch request got no HTTP response (refused, reset,
 *                 DNS, TLS, unusable credentials)
 *   malformed     an event line that is not a valid watch event: relisted
 *   oversized     an event over max_event_bytes: relisted
 *   rv_backwards  a resourceVersion lower than the last one (the API server
 *                 lost its history): relisted */
enum mesh_k8s_watch_reason {
    MESH_K8S_WATCH_INITIAL = 0,
    MESH_K8S_WATCH_TIMEOUT,
    MESH_K8S_WATCH_CUT,
    MESH_K8S_WATCH_STALLED,
    MESH_K8S_WATCH_EXPIRED,
    MESH_K8S_WATCH_ERROR_EVENT,
    MESH_K8S_WATCH_HTTP_ERROR,
    MESH_K8S_WATCH_CONNECT,
    MESH_K8S_WATCH_MALFORMED,
    MESH_K8S_WATCH_OVERSIZED,
    MESH_K8S_WATCH_RV_BACKWARDS,
    MESH_K8S_WATCH_REASONS /* number of reasons */
};

/* Label of a reason ("initial", "timeout", ... as above); "unknown" out of
 * range. Static string. */
const char *mesh_k8s_informer_reason_name(enum mesh_k8s_watch_reason r);

/* API errors by label. A LIST page or a WATCH that fails counts once,
 * with what ended it: the HTTP status of a non-2xx answer ("401", "403",
 * "404", "410", "422", "429", "500", "503", ... any code gets its own row),
 * the status code of an in-stream ERROR event ("410", "500", ...), or a
 * class from mesh_k8s_client_last_error: "connect", "tls", "timeout"
 * (request deadline or watch stall), "protocol" (connection broke in a
 * body or an event), "oversized", "malformed", "auth" (no usable
 * credentials). A 401 answered successfully after the token retry, a
 * normal end of a watch, a cancelled request and a resourceVersion going
 * backwards are not errors. Rows appear in first-seen order; once
 * MESH_K8S_API_ERROR_ROWS - 1 labels exist, further new labels count in a
 * last row labelled "other". */
#define MESH_K8S_API_ERROR_ROWS 16
#define MESH_K8S_API_ERROR_LABEL_MAX 16

struct mesh_k8s_error_count {
    char label[MESH_K8S_API_ERROR_LABEL_MAX]; /* "503", "connect", "other" */
    uint64_t count;
};

/* Counters for /metrics and tests (monotonic). */
struct mesh_k8s_informer_stats {
    uint64_t lists;           /* complete LISTs applied */
    uint64_t pages;           /* LIST pages fetched */
    uint64_t watches;         /* WATCH requests started */
    uint64_t events;          /* ADDED/MODIFIED/DELETED applied */
    uint64_t bookmarks;       /* BOOKMARKs seen */
    uint64_t relists;         /* lists caused by 410, malformed input, RV going back, ... */
    uint64_t failures;        /* failed requests (backoff taken) */
    char rv[MESH_K8S_RV_MAX]; /* last resourceVersion seen */
    /* WATCH starts by reason, indexed by enum mesh_k8s_watch_reason. */
    uint64_t watch_starts[MESH_K8S_WATCH_REASONS];
    /* API errors: api_errors[0 .. api_error_rows) are in use. */
    struct mesh_k8s_error_count api_errors[MESH_K8S_API_ERROR_ROWS];
    size_t api_error_rows;
};

struct mesh_k8s_informer;

/* Create an informer on a borrowed client (which must outlive it and is
 * used only by run's thread). -MESH_E_INVAL for missing extract /
 * record_free or bad numbers. Owned (mesh_k8s_informer_free) or NULL. */
struct mesh_k8s_informer *mesh_k8s_informer_new(struct mesh_k8s_client *client,
                                                const struct mesh_k8s_informer_opts *opts,
                                                struct mesh_err *err);
/* Free the informer and every stored record (record_free). Call after run
 * returned (or if it never ran). NULL does nothing. */
void mesh_k8s_informer_free(struct mesh_k8s_informer *inf);

/* List, watch and keep the store current until mesh_k8s_informer_stop.
 * Failures are logged (module "k8s") and retried as described above; run
 * returns 0 after stop. Returns a negative code only for misuse (run
 * called twice). */
int mesh_k8s_informer_run(struct mesh_k8s_informer *inf, struct mesh_err *err);
/* Ask run to return (thread-safe; cancels the in-flight request). */
void mesh_k8s_informer_stop(struct mesh_k8s_informer *inf);

/* eventfd (O_CLOEXEC|O_NONBLOCK), readable after changes; owned by the
 * informer (do not close). */
int mesh_k8s_informer_notify_fd(const struct mesh_k8s_informer *inf);

/* Store access from any thread: hold the (recursive) lock around foreach
 * and count, and use records only while holding it. */
void mesh_k8s_informer_lock(struct mesh_k8s_informer *inf);
void mesh_k8s_informer_unlock(struct mesh_k8s_informer *inf);
/* Call fn for every stored object (unspecified order) with its key, its
 * resourceVersion and its record (all borrowed). A non-zero return stops
 * the walk and is returned. Lock held. */
int mesh_k8s_informer_foreach(const struct mesh_k8s_informer *inf,
                              int (*fn)(void *ctx, const char *key, const char *rv,
                                        const void *rec),
                              void *ctx);
/* Objects stored. Lock held. */
size_t mesh_k8s_informer_count(const struct mesh_k8s_informer *inf);

/* True once the first LIST has been applied (thread-safe, lock-free). */
bool mesh_k8s_informer_has_synced(const struct mesh_k8s_informer *inf);
/* Copy of the counters (thread-safe). */
void mesh_k8s_informer_stats(struct mesh_k8s_informer *inf, struct mesh_k8s_informer_stats *out);

/* When the change being delivered arrived: the CLOCK_MONOTONIC time in
 * microseconds at which the bytes of the event now in the callbacks were
 * complete (the block that held the event's last byte was read from the
 * connection), before it was parsed. Valid inside on_add / on_update /
 * on_delete / on_synced: for a watch event, that event's time; for the
 * changes of a LIST and its on_synced, the time the last page's last byte
 * was read; for a streaming list, the initial-events-end bookmark's. From
 * another thread it returns the time of the latest delivered event (an
 * atomic read); 0 before the first. Event-to-output latency = time of
 * output - this. */
int64_t mesh_k8s_informer_event_time_us(const struct mesh_k8s_informer *inf);

#endif
