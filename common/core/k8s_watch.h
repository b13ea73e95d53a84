/*
 * k8s_watch.h - pure pieces of the Kubernetes list/watch protocol: the
 * newline framer of a watch stream, the watch-event / Status decoders, the
 * splitter of list pages, resourceVersion comparison and the reflector's backoff
 * arithmetic. No I/O, no clock, no randomness: callers pass `now_ms` and a
 * random number in.
 *
 * Wire facts (Kubernetes API):
 * - a watch body is a sequence of compact JSON objects
 *   {"type":...,"object":{...}} each followed by exactly one '\n'; HTTP
 *   chunk boundaries are NOT event boundaries (several events per chunk,
 *   one event over several chunks).
 * - types ADDED, MODIFIED, DELETED, BOOKMARK, ERROR; ERROR carries a
 *   Status; BOOKMARK objects carry only metadata.resourceVersion.
 * - PodList = {kind, apiVersion, metadata{resourceVersion, continue,
 *   remainingItemCount}, items[]}; the streaming encoder writes the keys in
 *   that order, but a client must not rely on it (items before metadata is
 *   valid JSON and handled).
 * - Status = {kind:"Status", status, message, reason, code}.
 * - client-go backoff 0.8 s doubling to 30 s, jitter x[1,2), reset
 *   after 2 min without backoff.
 */
#ifndef MESH_K8S_WATCH_H
#define MESH_K8S_WATCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/json.h"

/* Default bound of one watch event / one list page. An etcd object is at
 * most 1.5 MB; the event envelope adds little. */
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

/* A decoded metav1.Status. code 0 = absent. */
struct mesh_k8s_watch_status {
    int code;           /* HTTP-like code: 410, 401, 500, ... */
    char reason[64];    /* "Expired", "Gone", "Unauthorized", ... ("" if absent) */
    char message[256];  /* truncated if longer */
    long retry_after_s; /* details.retryAfterSeconds, 0 if absent */
};

/* One decoded watch event. */
struct mesh_k8s_watch_event {
    enum mesh_k8s_event_type type;
    cJSON *root;                         /* the parsed event line, in arena */
    const cJSON *object;                 /* borrowed from root: the "object" member */
    struct mesh_json_arena arena;        /* owned: holds the tree (core/json.h) */
    char rv[MESH_K8S_RV_MAX];            /* object.metadata.resourceVersion ("" for ERROR) */
    char key[MESH_K8S_KEY_MAX];          /* "namespace/name" ("" for BOOKMARK/ERROR; "/name"
                                            for cluster-scoped objects) */
    bool initial_events_end;             /* BOOKMARK with k8s.io/initial-events-end=true */
    struct mesh_k8s_watch_status status; /* ERROR only */
    int64_t recv_us; /* set by the I/O layer: CLOCK_MONOTONIC us at which the event's last
                        byte was read (0 from the decoder) */
};

/* Decode one event line of at most max bytes (0 = default). Checks: a
 * JSON object, a known "type", an object "object"; for ADDED/MODIFIED/
 * DELETED a metadata.name and metadata.resourceVersion; for BOOKMARK a
 * resourceVersion (the object is otherwise not validated); for
 * ERROR a Status. On success *out is filled (release with
 * mesh_k8s_watch_event_cleanup); on failure *out is untouched and
 * -MESH_E_PARSE / -MESH_E_TOOBIG / -MESH_E_INVAL names the problem. */
int mesh_k8s_watch_decode_event(const char *line, size_t len, size_t max,
                                struct mesh_k8s_watch_event *out, struct mesh_err *err);
/* Release an event's tree (its arena); safe on a zeroed event. */
void mesh_k8s_watch_event_cleanup(struct mesh_k8s_watch_event *ev);

/* Decode a Status JSON body (HTTP error replies, ERROR events). Returns 0,
 * or -MESH_E_PARSE when the body is not a Status (e.g. APF's plain-text
 * 429). body borrowed, need not be NUL-terminated. */
int mesh_k8s_watch_decode_status(const char *body, size_t len, struct mesh_k8s_watch_status *out,
                                 struct mesh_err *err);
/* The same from a parsed object (borrowed). */
int mesh_k8s_watch_status_from_json(const cJSON *obj, struct mesh_k8s_watch_status *out,
                                    struct mesh_err *err);

/* True for a Status meaning "resourceVersion too old": code 410 or reason
 * Expired/Gone (client-go isExpiredError). */
bool mesh_k8s_watch_status_is_expired(const struct mesh_k8s_watch_status *st);

/* ---- list splitter ---------------------------------------------------------- */

/* A LIST page is one JSON object whose "items" array may be megabytes long.
 * The splitter reads it as it arrives, in chunks split anywhere, following
 * only strings, escapes and nesting, and hands out each element of the
 * top-level "items" array the moment its last byte arrives, as cJSON's
 * tree of it (parsed once, into the splitter's arena, freed when the
 * caller's function returns): memory is bounded by one item's text and tree
 * (and the text outside items, up to MESH_K8S_LIST_OUTSIDE_MAX), never the
 * page. At the end cJSON parses the text outside items (the page with
 * `"items":[]`) for kind, metadata.resourceVersion, metadata.continue and
 * metadata.remainingItemCount, wherever they appear (before or after
 * items). JSON is cJSON's grammar (which also takes leading zeros and a
 * bare trailing '.' in numbers, as on the watch path), except that a raw
 * control character in a string and a \u escape without four hex digits
 * are refused (RFC 8259; cJSON reads the latter as U+0000); UTF-8 is not
 * checked.
 *
 * Why not cJSON on the whole page (measured 2026-11-28, cJSON 1.7.15, glibc malloc): its tree
 * of a Pod is ~5.7x the Pod's JSON, 19.4 KB for the simulator's 3.4 KB Pod and 40.2 KB for a
 * 6.8 KB one with managedFields. A page of 500 (client-go's limit, ours) is then a 9.7 or
 * 20.1 MB tree plus its 1.7 or 3.4 MB of text, where the sidecar's goal is 8 MiB of anonymous
 * memory in all at 4,096 pods (~4 MiB used without the page). Pages small enough to fit (~50
 * real Pods) would be 82 LISTs per sidecar at 4,096 pods instead of 9, from every pod of the
 * job, and the unpaginated LIST after expired continue tokens (client-go's FullListIfExpired)
 * would be one tree of the whole list (~165 MB at 4,096 real Pods). Here one item's tree
 * exists at a time, and it is the only parse of the item: LIST of 4,096 Pods, the informer's
 * mesh_k8s_client_list under callgrind (tests/tools/k8s_event_bench), 229M -> 157M
 * instructions for a 1 KB Pod, 1,365M -> 874M for the simulator's 3.4 KB Pod, 2,300M ->
 * 1,717M for its 6.8 KB one with managedFields, when the splitter's check and the caller's
 * parse were two. */

#define MESH_K8S_LIST_DEPTH_MAX 512                  /* containers open at once, whole document */
#define MESH_K8S_LIST_KIND_MAX 64                    /* "PodList" */
#define MESH_K8S_LIST_CONT_MAX 4096                  /* bytes of metadata.continue */
#define MESH_K8S_LIST_OUTSIDE_MAX ((size_t)64 << 10) /* the page without its items */

/* What a list page says about itself. */
struct mesh_k8s_list_meta {
    char kind[MESH_K8S_LIST_KIND_MAX]; /* "PodList"; "" when absent */
    char rv[MESH_K8S_RV_MAX];          /* metadata.resourceVersion (never "" on success) */
    char *cont;                        /* owned: metadata.continue; NULL when absent or "" */
    long long remaining;               /* metadata.remainingItemCount, -1 when absent */
    size_t items;                      /* elements of "items" handed out */
    int64_t recv_us;                   /* set by the I/O layer: CLOCK_MONOTONIC us of the
                                          page's last byte (0 from the scanner) */
};

/* Called once per element of the top-level "items" array, in order, with
 * cJSON's tree of it, borrowed for the call: it lives in the splitter's
 * arena, which is freed when fn returns (never cJSON_Delete it or keep a
 * pointer into it; copy what outlives the call). Return 0 to go on or a
 * negative -MESH_E_* to stop (that code is returned by feed). */
typedef int (*mesh_k8s_list_item_fn)(void *ctx, const cJSON *item, struct mesh_err *err);

/* Splitter state; the fields are private to k8s_watch.c. */
struct mesh_k8s_list_scanner {
    mesh_k8s_list_item_fn fn;
    void *ctx;
    size_t max_item, max_total;
    size_t off;        /* bytes fed so far (absolute offset of the next chunk) */
    int state;         /* what the next byte is */
    int depth;         /* containers open */
    bool in_str;       /* inside a string */
    unsigned char esc; /* 1 after a backslash, 2-5 in the hex digits of \u */
    bool key_next;     /* the next string of the list object is a member name */
    bool scalar;       /* the item is a number or a literal */
    bool items_seen;
    size_t doc_start_abs, item_start_abs; /* absolute offsets of the '{' and the item */
    size_t items_at;                      /* outside.len just after items' '[' */
    size_t items_end_abs;                 /* absolute offset of items' ']' */
    size_t key_at;                  /* outside.len just after the quote of a member name, or 0 */
    struct mesh_buf item;           /* owned: bytes of an item spanning chunks */
    struct mesh_buf outside;        /* owned: the page without the elements of items */
    struct mesh_json_arena arena;   /* owned: the tree of the item being handed out */
    struct mesh_k8s_list_meta meta; /* filled by finish; moved out on success */
};

/* Start scanning a new document. max_item bounds one element of items (0 =
 * MESH_K8S_EVENT_MAX_DEFAULT), max_total the whole page (0 =
 * MESH_K8S_LIST_MAX_DEFAULT). fn (required) and ctx are borrowed. */
void mesh_k8s_list_scanner_init(struct mesh_k8s_list_scanner *s, size_t max_item, size_t max_total,
                                mesh_k8s_list_item_fn fn, void *ctx);
/* Release memory (an item buffer, a continue token not yet handed out).
 * The scanner must be initialised again before reuse. */
void mesh_k8s_list_scanner_cleanup(struct mesh_k8s_list_scanner *s);

/* Feed the next len bytes (any split: 1 byte, many items, half an item).
 * Calls fn for every item completed by this block. Returns 0; fn's code;
 * -MESH_E_TOOBIG when an item exceeds max_item, the text outside items
 * MESH_K8S_LIST_OUTSIDE_MAX or the page max_total; -MESH_E_PARSE naming the byte offset for an item
 * cJSON refuses ("list response: byte 1290: item 3 (from byte 1234) is not
 * valid JSON"), bytes that cannot be split ("list response: byte 1234:
 * expected ',' or ']' after an array element, found 'x'"), an "items" that
 * is not an array or comes twice, a raw control character in a string, or
 * nesting deeper than MESH_K8S_LIST_DEPTH_MAX. After an error the scanner
 * only accepts cleanup. data borrowed. */
int mesh_k8s_list_scanner_feed(struct mesh_k8s_list_scanner *s, const char *data, size_t len,
                               struct mesh_err *err);
/* End of the body: checks the document is complete (else -MESH_E_PARSE
 * "truncated at byte N (...)"), that cJSON parses the text outside items
 * (else the byte offset where it stops), an "items" array, a "metadata"
 * object with a non-empty resourceVersion, no duplicate kind / metadata /
 * metadata.* member, kind / resourceVersion / continue strings that fit,
 * and that kind, when present, ends in "List" (a Status is not a list). On success *out_meta
 * is filled and owns the continue token (mesh_k8s_list_meta_cleanup). */
int mesh_k8s_list_scanner_finish(struct mesh_k8s_list_scanner *s,
                                 struct mesh_k8s_list_meta *out_meta, struct mesh_err *err);
/* Free a meta's continue token; safe on a zeroed meta. */
void mesh_k8s_list_meta_cleanup(struct mesh_k8s_list_meta *m);

/* ---- metadata.managedFields ------------------------------------------------ */

/* Server-side-apply bookkeeping (metadata.managedFields) is often half of a
 * Pod's JSON ("large; candidates for client-side stripping") and
 * nothing here reads it; client-go informers drop
 * it too (TransformStripManagedFields). This cuts it out of a watch event's
 * text before the full parse, which then costs half as much. Measured
 * 2026-11-28 (callgrind, tests/tools/k8s_event_bench, the simulator's Pod with
 * its managedFields, 6.8 KB, parsed into an arena): 168k instructions per
 * watch event from the line to the extracted record, the cut included (28k),
 * against 264k when the event is parsed as sent. (A LIST item is parsed whole:
 * the splitter's one parse is also its check.) */

/* json (len bytes, borrowed), a watch event line, without
 * object.metadata.managedFields. Returns json itself when there is none,
 * else scratch's data holding the copy without the member and its comma
 * (scratch is reset first; a copy larger than scratch's bound returns json
 * unchanged). *out_len receives the length of what is returned. The result
 * is valid JSON exactly when json is, apart from the dropped value. A light
 * scan (strings, escapes, nesting) of the first "object" and its first
 * "metadata" (those cJSON_GetObjectItem returns), stopping when it leaves
 * them; escaped member names are not matched; on text that is not valid JSON
 * it never reads outside json[0..len). */
const char *mesh_k8s_watch_strip_managed_fields(const char *json, size_t len,
                                                struct mesh_buf *scratch, size_t *out_len);

/* "namespace/name" and resourceVersion of an object (borrowed). Either
 * out may be NULL. -MESH_E_PARSE when name or resourceVersion is missing
 * or too long. */
int mesh_k8s_watch_object_key(const cJSON *obj, char out_key[MESH_K8S_KEY_MAX],
                              char out_rv[MESH_K8S_RV_MAX], struct mesh_err *err);

/* Compare two resourceVersions. RVs are opaque, but etcd
 * revisions are decimal integers; when both are, returns -1/0/1 as
 * numbers; otherwise 0 when equal as strings and 2 ("incomparable").
 * Used only to detect an apiserver whose RVs went backwards. */
int mesh_k8s_watch_rv_cmp(const char *a, const char *b);

/* ---- backoff (client-go reflector numbers) ------------ */

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
 * apiserver sends), clamped to [0, cap_s]. Returns seconds or
 * -MESH_E_INVAL for an HTTP-date or junk. value borrowed (len bytes). */
long mesh_k8s_watch_parse_retry_after(const char *value, size_t len, long cap_s);

#endif
