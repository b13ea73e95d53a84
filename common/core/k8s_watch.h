/*
 * k8s_watch.h - pure pieces of the Kubernetes list/watch protocol: the
 * newline framer of a watch stream, the watch-event / PodList / Status
 * decoders, resourceVersion comparison and the reflector's backoff
 * arithmetic. No I/O, no clock, no randomness: callers pass `now_ms` and a
 * random number in.
 *
 * Wire facts (../shared/spec/kubernetes-api.md):
 * - §2.2: a watch body is a sequence of compact JSON objects
 *   {"type":...,"object":{...}} each followed by exactly one '\n'; HTTP
 *   chunk boundaries are NOT event boundaries (several events per chunk,
 *   one event over several chunks).
 * - §2.3: types ADDED, MODIFIED, DELETED, BOOKMARK, ERROR; ERROR carries a
 *   Status; BOOKMARK objects carry only metadata.resourceVersion.
 * - §1.2: PodList = {kind, apiVersion, metadata{resourceVersion, continue,
 *   remainingItemCount}, items[]}.
 * - §1.4/§4.4: Status = {kind:"Status", status, message, reason, code}.
 * - §2.9: client-go backoff 0.8 s doubling to 30 s, jitter x[1,2), reset
 *   after 2 min without backoff.
 */
#ifndef MESH_K8S_WATCH_H
#define MESH_K8S_WATCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* Default bound of one watch event / one list page. An etcd object is at
 * most 1.5 MB (spec §7); the event envelope adds little. */
#define MESH_K8S_EVENT_MAX_DEFAULT ((size_t)4 << 20)
#define MESH_K8S_LIST_MAX_DEFAULT ((size_t)256 << 20)

/* resourceVersion text (opaque; etcd revisions are decimal int64). */
#define MESH_K8S_RV_MAX 64
/* "namespace/name": namespace <= 63, name <= 253 (RFC 1123). */
#define MESH_K8S_KEY_MAX 320

/* ---- framer ---------------------------------------------------------- */

/* Splits a byte stream into lines. Holds at most `max` bytes of one
 * incomplete line; complete lines inside a fed block are handed out
 * without copying. */
struct mesh_k8s_watch_framer {
    struct mesh_buf partial; /* owned: bytes of the current incomplete line */
    size_t max;              /* bound of one line, excluding '\n' */
};

/* Called once per complete line, without its '\n' (a trailing '\r' is
 * removed too; blank lines are skipped). line is borrowed for the call
 * only and is NOT NUL-terminated. Return 0 to continue or a negative
 * -MESH_E_* to stop feeding (that code is returned by feed). */
typedef int (*mesh_k8s_watch_line_fn)(void *ctx, const char *line, size_t len,
                                      struct mesh_err *err);

/* Initialise an empty framer bounding one line to max bytes (0 = default
 * MESH_K8S_EVENT_MAX_DEFAULT). */
void mesh_k8s_watch_framer_init(struct mesh_k8s_watch_framer *f, size_t max);
/* Release memory; the framer is empty and reusable afterwards. */
void mesh_k8s_watch_framer_cleanup(struct mesh_k8s_watch_framer *f);
/* Drop any partial line (start of a new stream). Keeps the bound. */
void mesh_k8s_watch_framer_reset(struct mesh_k8s_watch_framer *f);

/* Feed len bytes (any split of the stream: 1 byte, many events, half an
 * event). Calls fn for each line completed by this block, in order.
 * Returns 0, fn's negative code, or -MESH_E_TOOBIG when a line grows past
 * max (the stream must then be abandoned; memory stays bounded by max).
 * After an error call reset before reuse. data borrowed. */
int mesh_k8s_watch_framer_feed(struct mesh_k8s_watch_framer *f, const char *data, size_t len,
                               mesh_k8s_watch_line_fn fn, void *ctx, struct mesh_err *err);

/* Bytes of the incomplete line currently held (0 at an event boundary). */
size_t mesh_k8s_watch_framer_pending(const struct mesh_k8s_watch_framer *f);

/* ---- decoders -------------------------------------------------------- */

enum mesh_k8s_event_type {
    MESH_K8S_EV_ADDED = 1,
    MESH_K8S_EV_MODIFIED,
    MESH_K8S_EV_DELETED,
    MESH_K8S_EV_BOOKMARK,
    MESH_K8S_EV_ERROR,
};

/* A decoded metav1.Status (spec §1.4, §2.7, §4.4). code 0 = absent. */
struct mesh_k8s_watch_status {
    int code;           /* HTTP-like code: 410, 401, 500, ... */
    char reason[64];    /* "Expired", "Gone", "Unauthorized", ... ("" if absent) */
    char message[256];  /* truncated if longer */
    long retry_after_s; /* details.retryAfterSeconds, 0 if absent */
};

/* One decoded watch event. */
struct mesh_k8s_watch_event {
    enum mesh_k8s_event_type type;
    cJSON *root;                         /* owned: the parsed event line */
    const cJSON *object;                 /* borrowed from root: the "object" member */
    char rv[MESH_K8S_RV_MAX];            /* object.metadata.resourceVersion ("" for ERROR) */
    char key[MESH_K8S_KEY_MAX];          /* "namespace/name" ("" for BOOKMARK/ERROR; "/name"
                                            for cluster-scoped objects) */
    bool initial_events_end;             /* BOOKMARK with k8s.io/initial-events-end=true (§2.6) */
    struct mesh_k8s_watch_status status; /* ERROR only */
};

/* Decode one event line of at most max bytes (0 = default). Checks: a
 * JSON object, a known "type", an object "object"; for ADDED/MODIFIED/
 * DELETED a metadata.name and metadata.resourceVersion; for BOOKMARK a
 * resourceVersion (the object is otherwise not validated, §2.3); for
 * ERROR a Status. On success *out is filled (release with
 * mesh_k8s_watch_event_cleanup); on failure *out is untouched and
 * -MESH_E_PARSE / -MESH_E_TOOBIG / -MESH_E_INVAL names the problem. */
int mesh_k8s_watch_decode_event(const char *line, size_t len, size_t max,
                                struct mesh_k8s_watch_event *out, struct mesh_err *err);
/* Release an event's tree; safe on a zeroed event. */
void mesh_k8s_watch_event_cleanup(struct mesh_k8s_watch_event *ev);

/* Decode a Status JSON body (HTTP error replies, ERROR events). Returns 0,
 * or -MESH_E_PARSE when the body is not a Status (e.g. APF's plain-text
 * 429, spec §4.4). body borrowed, need not be NUL-terminated. */
int mesh_k8s_watch_decode_status(const char *body, size_t len, struct mesh_k8s_watch_status *out,
                                 struct mesh_err *err);
/* The same from a parsed object (borrowed). */
int mesh_k8s_watch_status_from_json(const cJSON *obj, struct mesh_k8s_watch_status *out,
                                    struct mesh_err *err);

/* True for a Status meaning "resourceVersion too old": code 410 or reason
 * Expired/Gone (client-go isExpiredError, spec §2.7). */
bool mesh_k8s_watch_status_is_expired(const struct mesh_k8s_watch_status *st);

/* One decoded list page (spec §1.2-1.3). */
struct mesh_k8s_watch_list {
    cJSON *root;              /* owned: the whole page */
    const cJSON *items;       /* borrowed from root: the items array (never NULL on success) */
    char rv[MESH_K8S_RV_MAX]; /* metadata.resourceVersion of the list */
    char *cont;               /* owned: metadata.continue, or NULL on the last page */
    long long remaining;      /* remainingItemCount, -1 when absent */
};

/* Decode a list body of at most max bytes (0 = MESH_K8S_LIST_MAX_DEFAULT).
 * Requires items (an array, possibly empty) and metadata.resourceVersion.
 * Release with mesh_k8s_watch_list_cleanup. */
int mesh_k8s_watch_decode_list(const char *body, size_t len, size_t max,
                               struct mesh_k8s_watch_list *out, struct mesh_err *err);
void mesh_k8s_watch_list_cleanup(struct mesh_k8s_watch_list *l);

/* "namespace/name" and resourceVersion of an object (borrowed). Either
 * out may be NULL. -MESH_E_PARSE when name or resourceVersion is missing
 * or too long. */
int mesh_k8s_watch_object_key(const cJSON *obj, char out_key[MESH_K8S_KEY_MAX],
                              char out_rv[MESH_K8S_RV_MAX], struct mesh_err *err);

/* Compare two resourceVersions. RVs are opaque (spec §3.1), but etcd
 * revisions are decimal integers; when both are, returns -1/0/1 as
 * numbers; otherwise 0 when equal as strings and 2 ("incomparable").
 * Used only to detect an apiserver whose RVs went backwards (§6). */
int mesh_k8s_watch_rv_cmp(const char *a, const char *b);

/* ---- backoff (client-go reflector numbers, spec §2.9 / §6) ------------ */

struct mesh_k8s_watch_backoff {
    int64_t initial_ms;   /* 800 */
    int64_t max_ms;       /* 30000 */
    int64_t reset_ms;     /* 120000: a failure this long after the previous one starts over */
    int64_t current_ms;   /* base delay of the next failure; 0 = start at initial */
    int64_t last_fail_ms; /* now_ms of the previous failure, or -1 */
};

/* Initialise with the given numbers (0 = client-go default for each). */
void mesh_k8s_watch_backoff_init(struct mesh_k8s_watch_backoff *b, int64_t initial_ms,
                                 int64_t max_ms, int64_t reset_ms);
/* Delay before the next attempt after a failure at now_ms. rnd01 in
 * [0,1) supplies the jitter: the base d becomes d * (1 + rnd01), i.e.
 * uniform [d, 2d) (wait.Jitter with factor 1.0); the base then doubles up
 * to max_ms. If the previous failure was more than reset_ms ago the base
 * restarts at initial_ms. */
int64_t mesh_k8s_watch_backoff_next(struct mesh_k8s_watch_backoff *b, int64_t now_ms, double rnd01);
/* Forget the history (a long healthy period). */
void mesh_k8s_watch_backoff_reset(struct mesh_k8s_watch_backoff *b);

/* Parse a Retry-After header value: delta-seconds only (what the
 * apiserver sends, spec §4.4), clamped to [0, cap_s]. Returns seconds or
 * -MESH_E_INVAL for an HTTP-date or junk. value borrowed (len bytes). */
long mesh_k8s_watch_parse_retry_after(const char *value, size_t len, long cap_s);

#endif
