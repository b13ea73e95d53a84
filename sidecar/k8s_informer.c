/*
 * k8s_informer.c - reflector (LIST then WATCH, with client-go's recovery
 * rules) feeding a compact store:
 * an open-addressing hash table of entries {record, hash, "key\0rv\0"}.
 * The JSON of an object is handed to the caller's extract function and
 * dropped; only the small record stays. The loop, the store and every
 * callback run on the thread that calls mesh_k8s_informer_run.
 */
#include "k8s_informer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "k8s"

/* ---- store --------------------------------------------------------------- */

/* How many store slots ahead foreach prefetches. */
#define MESH_INF_PREFETCH 16

struct entry {
    void *rec;
    uint32_t hash;
    uint16_t keylen;
    char data[]; /* key '\0' rv '\0' */
};

struct table {
    struct entry **slots;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

static uint32_t hash_key(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static const char *entry_rv(const struct entry *e)
{
    return e->data + e->keylen + 1;
}

static struct entry *entry_new(const char *key, const char *rv, void *rec)
{
    size_t kl = strlen(key), rl = strlen(rv);
    struct entry *e = mesh_malloc(sizeof(*e) + kl + rl + 2);
    e->rec = rec;
    e->keylen = (uint16_t)kl;
    e->hash = hash_key(key, kl);
    memcpy(e->data, key, kl + 1);
    memcpy(e->data + kl + 1, rv, rl + 1);
    return e;
}

/* Slot of key, or of the empty slot where it would go. cap must be > 0. */
static size_t tbl_slot(const struct table *t, const char *key, size_t kl, uint32_t h)
{
    size_t mask = t->cap - 1, i = h & mask;
    while (t->slots[i] != NULL) {
        const struct entry *e = t->slots[i];
        if (e->hash == h && e->keylen == kl && memcmp(e->data, key, kl) == 0) {
            return i;
        }
        i = (i + 1) & mask;
    }
    return i;
}

static struct entry *tbl_get(const struct table *t, const char *key, size_t *out_slot)
{
    if (t->cap == 0) {
        return NULL;
    }
    size_t kl = strlen(key);
    size_t i = tbl_slot(t, key, kl, hash_key(key, kl));
    if (out_slot != NULL) {
        *out_slot = i;
    }
    return t->slots[i];
}

static void tbl_grow(struct table *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    struct entry **old = t->slots;
    size_t ocap = t->cap;
    t->slots = mesh_calloc(ncap, sizeof(*t->slots));
    t->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i] != NULL) {
            size_t j = old[i]->hash & (ncap - 1);
            while (t->slots[j] != NULL) {
                j = (j + 1) & (ncap - 1);
            }
            t->slots[j] = old[i];
        }
    }
    mesh_free(old);
}

/* Insert or replace; returns the replaced entry (caller frees) or NULL. */
static struct entry *tbl_put(struct table *t, struct entry *e)
{
    if ((t->n + 1) * 10 > t->cap * 7) {
        tbl_grow(t);
    }
    size_t i = tbl_slot(t, e->data, e->keylen, e->hash);
    struct entry *old = t->slots[i];
    t->slots[i] = e;
    if (old == NULL) {
        t->n++;
    }
    return old;
}

/* Remove the entry at slot i (linear probing: shift the cluster back). */
static struct entry *tbl_del_at(struct table *t, size_t i)
{
    size_t mask = t->cap - 1;
    struct entry *gone = t->slots[i];
    t->slots[i] = NULL;
    t->n--;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        struct entry *e = t->slots[j];
        if (e == NULL) {
            break;
        }
        size_t home = e->hash & mask;
        /* Move e to the hole when the hole lies cyclically in [home, j). */
        bool move = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (move) {
            t->slots[i] = e;
            t->slots[j] = NULL;
            i = j;
        }
    }
    return gone;
}

/* ---- informer -------------------------------------------------------------- */

struct mesh_k8s_informer {
    struct mesh_k8s_client *client; /* borrowed */
    struct mesh_k8s_informer_opts o;
    char *ns, *resource, *label_selector, *field_selector; /* owned copies */
    pthread_mutex_t lock;                                  /* recursive */
    struct table store;
    char rv[MESH_K8S_RV_MAX];
    struct mesh_k8s_informer_stats stats;
    atomic_bool synced;
    atomic_bool stop;
    atomic_bool running;
    int notify_fd; /* eventfd, readable after changes */
    int wake_fd;   /* eventfd, interrupts sleeps on stop */
    uint64_t rng;
    struct mesh_k8s_watch_backoff backoff;
    _Atomic int64_t event_us;               /* mesh_k8s_informer_event_time_us */
    enum mesh_k8s_watch_reason next_reason; /* why the next watch starts */
    /* per-watch state */
    uint64_t watch_events;
    bool notify_pending; /* changes applied since the last notify */
    bool rv_went_back;
    struct mesh_k8s_watch_status stream_error; /* the in-stream ERROR that ended the watch */
    /* streaming list (sendInitialEvents) */
    bool initial;       /* collecting the initial events into `fresh` */
    bool streaming_off; /* the server rejected sendInitialEvents: use LIST */
    struct table fresh;
};

/* xorshift64*: jitter and watch timeouts only, not security. */
static double rnd01(struct mesh_k8s_informer *inf)
{
    uint64_t x = inf->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    inf->rng = x;
    return (double)((x * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void notify(struct mesh_k8s_informer *inf)
{
    uint64_t one = 1;
    ssize_t w = write(inf->notify_fd, &one, sizeof(one));
    (void)w; /* EAGAIN: the counter is already non-zero, readers will wake */
}

static int check_opts(const struct mesh_k8s_informer_opts *o, struct mesh_err *err)
{
    if (o->extract == NULL || o->record_free == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "informer: extract and record_free are required");
    }
    if (o->page_limit < 0 || o->watch_timeout_min_s < 0 || o->watch_timeout_max_s < 0 ||
        o->stall_timeout_s < 0 || o->backoff_initial_ms < 0 || o->backoff_max_ms < 0 ||
        o->backoff_reset_ms < 0 || o->retry_after_cap_s < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "informer: negative limit or timeout");
    }
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s ? mesh_strdup(s) : NULL;
}

struct mesh_k8s_informer *mesh_k8s_informer_new(struct mesh_k8s_client *client,
                                                const struct mesh_k8s_informer_opts *opts,
                                                struct mesh_err *err)
{
    if (check_opts(opts, err) < 0) {
        return NULL;
    }
    struct mesh_k8s_informer *inf = mesh_calloc(1, sizeof(*inf));
    inf->client = client;
    inf->o = *opts;
    inf->ns = dup_or_null(opts->query.ns);
    inf->resource = dup_or_null(opts->query.resource);
    inf->label_selector = dup_or_null(opts->query.label_selector);
    inf->field_selector = dup_or_null(opts->query.field_selector);
    inf->o.query.ns = inf->ns;
    inf->o.query.resource = inf->resource;
    inf->o.query.label_selector = inf->label_selector;
    inf->o.query.field_selector = inf->field_selector;
    struct mesh_k8s_informer_opts *o = &inf->o;
    o->page_limit = o->page_limit ? o->page_limit : 500;
    o->watch_timeout_min_s = o->watch_timeout_min_s ? o->watch_timeout_min_s : 300;
    if (o->watch_timeout_max_s < o->watch_timeout_min_s) {
        o->watch_timeout_max_s = o->watch_timeout_min_s * 2;
    }
    o->stall_timeout_s = o->stall_timeout_s ? o->stall_timeout_s : 90;
    o->retry_after_cap_s = o->retry_after_cap_s ? o->retry_after_cap_s : 30;
    mesh_k8s_watch_backoff_init(&inf->backoff, o->backoff_initial_ms, o->backoff_max_ms,
                                o->backoff_reset_ms);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&inf->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    inf->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    inf->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    inf->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() ^
               (uint64_t)(uintptr_t)inf;
    if (inf->rng == 0) {
        inf->rng = 88172645463325252ull;
    }
    if (inf->notify_fd < 0 || inf->wake_fd < 0) {
        mesh_err_set(err, MESH_E_IO, errno, "informer: eventfd");
        mesh_k8s_informer_free(inf);
        return NULL;
    }
    return inf;
}

static void table_free(struct mesh_k8s_informer *inf, struct table *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i] != NULL) {
            inf->o.record_free(inf->o.ctx, t->slots[i]->rec);
            mesh_free(t->slots[i]);
        }
    }
    mesh_free(t->slots);
    memset(t, 0, sizeof(*t));
}

void mesh_k8s_informer_free(struct mesh_k8s_informer *inf)
{
    if (inf == NULL) {
        return;
    }
    table_free(inf, &inf->store);
    table_free(inf, &inf->fresh);
    if (inf->notify_fd >= 0) {
        close(inf->notify_fd);
    }
    if (inf->wake_fd >= 0) {
        close(inf->wake_fd);
    }
    pthread_mutex_destroy(&inf->lock);
    mesh_free(inf->ns);
    mesh_free(inf->resource);
    mesh_free(inf->label_selector);
    mesh_free(inf->field_selector);
    mesh_free(inf);
}

void mesh_k8s_informer_stop(struct mesh_k8s_informer *inf)
{
    atomic_store(&inf->stop, true);
    uint64_t one = 1;
    ssize_t w = write(inf->wake_fd, &one, sizeof(one));
    (void)w;
    mesh_k8s_client_cancel(inf->client);
}

int mesh_k8s_informer_notify_fd(const struct mesh_k8s_informer *inf)
{
    return inf->notify_fd;
}

void mesh_k8s_informer_lock(struct mesh_k8s_informer *inf)
{
    pthread_mutex_lock(&inf->lock);
}

void mesh_k8s_informer_unlock(struct mesh_k8s_informer *inf)
{
    pthread_mutex_unlock(&inf->lock);
}

int mesh_k8s_informer_foreach(const struct mesh_k8s_informer *inf,
                              int (*fn)(void *ctx, const char *key, const char *rv,
                                        const void *rec),
                              void *ctx)
{
    /* Entries and records are separate allocations, cold after a render:
     * ask for the entry MESH_INF_PREFETCH slots ahead, and for each
     * record before the callback (callers read it next), so the cache
     * misses overlap instead of costing one each (~40 ns a pod at 4,096
     * pods). */
    for (size_t i = 0; i < inf->store.cap; i++) {
        const struct entry *e = inf->store.slots[i];
        if (i + MESH_INF_PREFETCH < inf->store.cap &&
            inf->store.slots[i + MESH_INF_PREFETCH] != NULL) {
            __builtin_prefetch(inf->store.slots[i + MESH_INF_PREFETCH]);
        }
        if (e != NULL) {
            __builtin_prefetch(e->rec);
            int rc = fn(ctx, e->data, entry_rv(e), e->rec);
            if (rc != 0) {
                return rc;
            }
        }
    }
    return 0;
}

size_t mesh_k8s_informer_count(const struct mesh_k8s_informer *inf)
{
    return inf->store.n;
}

bool mesh_k8s_informer_has_synced(const struct mesh_k8s_informer *inf)
{
    return atomic_load(&inf->synced);
}

void mesh_k8s_informer_stats(struct mesh_k8s_informer *inf, struct mesh_k8s_informer_stats *out)
{
    pthread_mutex_lock(&inf->lock);
    *out = inf->stats;
    pthread_mutex_unlock(&inf->lock);
}

int64_t mesh_k8s_informer_event_time_us(const struct mesh_k8s_informer *inf)
{
    return atomic_load(&inf->event_us);
}

static const char *const reason_names[MESH_K8S_WATCH_REASONS] = {
    [MESH_K8S_WATCH_INITIAL] = "initial",
    [MESH_K8S_WATCH_TIMEOUT] = "timeout",
    [MESH_K8S_WATCH_CUT] = "cut",
    [MESH_K8S_WATCH_STALLED] = "stalled",
    [MESH_K8S_WATCH_EXPIRED] = "expired",
    [MESH_K8S_WATCH_ERROR_EVENT] = "error_event",
    [MESH_K8S_WATCH_HTTP_ERROR] = "http_error",
    [MESH_K8S_WATCH_CONNECT] = "connect",
    [MESH_K8S_WATCH_MALFORMED] = "malformed",
    [MESH_K8S_WATCH_OVERSIZED] = "oversized",
    [MESH_K8S_WATCH_RV_BACKWARDS] = "rv_backwards",
};

const char *mesh_k8s_informer_reason_name(enum mesh_k8s_watch_reason r)
{
    return (unsigned)r < MESH_K8S_WATCH_REASONS ? reason_names[r] : "unknown";
}

/* Count one failed request under label ("" = not an API error). */
static void count_api_error(struct mesh_k8s_informer *inf, const char *label)
{
    if (label[0] == '\0' || atomic_load(&inf->stop)) {
        return;
    }
    pthread_mutex_lock(&inf->lock);
    struct mesh_k8s_informer_stats *st = &inf->stats;
    size_t i = 0;
    while (i < st->api_error_rows && strcmp(st->api_errors[i].label, label) != 0) {
        i++;
    }
    if (i == st->api_error_rows) {
        if (i == MESH_K8S_API_ERROR_ROWS - 1 || i == MESH_K8S_API_ERROR_ROWS) {
            i = MESH_K8S_API_ERROR_ROWS - 1;
            label = "other";
        }
        snprintf(st->api_errors[i].label, sizeof(st->api_errors[i].label), "%s", label);
        st->api_error_rows = i + 1;
    }
    st->api_errors[i].count++;
    pthread_mutex_unlock(&inf->lock);
}

/* ---- applying changes (lock held) ---------------------------------------------- */

/* Store (key, rv, rec) and tell the caller: add, update (unless equal), or
 * nothing. Takes ownership of rec. */
static void apply_upsert(struct mesh_k8s_informer *inf, const char *key, const char *rv, void *rec)
{
    const struct mesh_k8s_informer_opts *o = &inf->o;
    struct entry *old = tbl_put(&inf->store, entry_new(key, rv, rec));
    if (old == NULL) {
        if (o->cb.on_add != NULL) {
            o->cb.on_add(o->ctx, key, rec);
        }
        return;
    }
    bool same = o->equal != NULL && o->equal(o->ctx, old->rec, rec);
    if (!same && o->cb.on_update != NULL) {
        o->cb.on_update(o->ctx, key, old->rec, rec);
    }
    o->record_free(o->ctx, old->rec);
    mesh_free(old);
}

static void apply_delete(struct mesh_k8s_informer *inf, const char *key)
{
    const struct mesh_k8s_informer_opts *o = &inf->o;
    size_t slot;
    struct entry *e = tbl_get(&inf->store, key, &slot);
    if (e == NULL) {
        return;
    }
    tbl_del_at(&inf->store, slot);
    if (o->cb.on_delete != NULL) {
        o->cb.on_delete(o->ctx, e->data, e->rec);
    }
    o->record_free(o->ctx, e->rec);
    mesh_free(e);
}

/* Replace the store by `fresh` (the result of a complete LIST), emitting
 * exactly the differences: deletes, then adds and updates. Consumes fresh. */
static void apply_list(struct mesh_k8s_informer *inf, struct table *fresh)
{
    const struct mesh_k8s_informer_opts *o = &inf->o;
    /* Deletes: stored keys absent from the new list. Collect first, since
     * removing while walking would move entries under the cursor. */
    size_t ndel = 0;
    struct entry **del = mesh_calloc(inf->store.n + 1, sizeof(*del));
    for (size_t i = 0; i < inf->store.cap; i++) {
        struct entry *e = inf->store.slots[i];
        if (e != NULL && tbl_get(fresh, e->data, NULL) == NULL) {
            del[ndel++] = e;
        }
    }
    for (size_t i = 0; i < ndel; i++) {
        apply_delete(inf, del[i]->data);
    }
    mesh_free(del);
    for (size_t i = 0; i < fresh->cap; i++) {
        struct entry *n = fresh->slots[i];
        if (n == NULL) {
            continue;
        }
        fresh->slots[i] = NULL;
        const struct entry *cur = tbl_get(&inf->store, n->data, NULL);
        if (cur != NULL && strcmp(entry_rv(cur), entry_rv(n)) == 0) {
            /* Unchanged since we saw it: keep ours, no callback. */
            o->record_free(o->ctx, n->rec);
            mesh_free(n);
            continue;
        }
        struct entry *old = tbl_put(&inf->store, n);
        if (old == NULL) {
            if (o->cb.on_add != NULL) {
                o->cb.on_add(o->ctx, n->data, n->rec);
            }
            continue;
        }
        bool same = o->equal != NULL && o->equal(o->ctx, old->rec, n->rec);
        if (!same && o->cb.on_update != NULL) {
            o->cb.on_update(o->ctx, n->data, old->rec, n->rec);
        }
        o->record_free(o->ctx, old->rec);
        mesh_free(old);
    }
    mesh_free(fresh->slots);
    memset(fresh, 0, sizeof(*fresh));
}

/* ---- LIST ------------------------------------------------------------------------ */

/* One LIST item (parsed by the splitter, borrowed for the call): extract the
 * caller's record and keep it in `fresh`. */
struct list_ctx {
    struct mesh_k8s_informer *inf;
    struct table *fresh;
};

static int list_item(void *ctx, const cJSON *obj, struct mesh_err *err)
{
    (void)err;
    struct list_ctx *lc = ctx;
    struct mesh_k8s_informer *inf = lc->inf;
    char key[MESH_K8S_KEY_MAX], rv[MESH_K8S_RV_MAX];
    struct mesh_err e2;
    void *rec = NULL;
    if (mesh_k8s_watch_object_key(obj, key, rv, &e2) < 0) {
        mesh_warn(MOD, "list: skipping an item: %s", e2.msg);
    } else {
        rec = inf->o.extract(inf->o.ctx, obj);
    }
    if (rec == NULL) {
        return 0;
    }
    struct entry *old = tbl_put(lc->fresh, entry_new(key, rv, rec));
    if (old != NULL) {
        inf->o.record_free(inf->o.ctx, old->rec);
        mesh_free(old);
    }
    return 0;
}

/* Apply a complete list (LIST pages or a streaming list's initial events)
 * at resourceVersion rv, then "synced". Consumes fresh. Returns the count. */
static size_t finish_sync(struct mesh_k8s_informer *inf, struct table *fresh, const char *rv,
                          int pages, int64_t recv_us)
{
    atomic_store(&inf->event_us, recv_us);
    pthread_mutex_lock(&inf->lock);
    apply_list(inf, fresh);
    snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
    snprintf(inf->stats.rv, sizeof(inf->stats.rv), "%s", rv);
    inf->stats.lists++;
    if (inf->stats.lists > 1) {
        inf->stats.relists++;
    }
    inf->stats.pages += (uint64_t)pages;
    size_t count = inf->store.n;
    atomic_store(&inf->synced, true);
    if (inf->o.cb.on_synced != NULL) {
        inf->o.cb.on_synced(inf->o.ctx, count);
    }
    pthread_mutex_unlock(&inf->lock);
    notify(inf);
    return count;
}

/* One complete, consistent LIST (all pages). An expired continue token
 * restarts the list; after 3 expiries in a row the list is fetched in one
 * request without limit (client-go pager FullListIfExpired). */
static int do_list(struct mesh_k8s_informer *inf, struct mesh_err *err)
{
    struct table fresh = {0};
    struct list_ctx lc = {inf, &fresh};
    char *cont = NULL;
    char rv[MESH_K8S_RV_MAX] = "";
    int expired = 0, pages = 0, rc = 0;
    int64_t recv_us = 0;
    for (;;) {
        struct mesh_k8s_list_meta page;
        long limit = expired >= 3 ? 0 : inf->o.page_limit;
        rc = mesh_k8s_client_list(inf->client, &inf->o.query, limit, cont, NULL,
                                  inf->o.max_list_bytes, inf->o.max_event_bytes, list_item, &lc,
                                  &page, err);
        if (rc < 0) {
            count_api_error(inf, mesh_k8s_client_last_error(inf->client));
        }
        if (rc == -MESH_E_GONE && cont != NULL) {
            expired++;
            mesh_warn(MOD, "list: continue token expired after %d pages; restarting the list%s",
                      pages, expired >= 3 ? " without pagination" : "");
            mesh_free(cont);
            cont = NULL;
            table_free(inf, &fresh);
            pages = 0;
            continue;
        }
        if (rc < 0) {
            break;
        }
        pages++;
        snprintf(rv, sizeof(rv), "%s", page.rv);
        recv_us = page.recv_us;
        mesh_free(cont);
        cont = page.cont;
        page.cont = NULL;
        mesh_k8s_list_meta_cleanup(&page);
        if (cont == NULL) {
            break;
        }
    }
    mesh_free(cont);
    if (rc < 0) {
        table_free(inf, &fresh);
        return rc;
    }
    size_t count = finish_sync(inf, &fresh, rv, pages, recv_us);
    mesh_info(MOD, "listed %zu objects in %d page(s) at resourceVersion %s", count, pages, rv);
    return 0;
}

/* ---- WATCH ----------------------------------------------------------------------- */

/* Apply one event; lock held. Returns a negative code to end the watch. */
static int apply_event(struct mesh_k8s_informer *inf, const struct mesh_k8s_watch_event *ev,
                       void *rec, struct mesh_err *err)
{
    if (ev->type == MESH_K8S_EV_ERROR) {
        const struct mesh_k8s_watch_status *st = &ev->status;
        inf->stream_error = *st;
        if (mesh_k8s_watch_status_is_expired(st)) {
            return mesh_err_set(err, MESH_E_GONE, 0, "watch ERROR %d %s: %s", st->code, st->reason,
                                st->message);
        }
        return mesh_err_set(err, MESH_E_API, 0, "watch ERROR %d %s: %s", st->code, st->reason,
                            st->message);
    }
    /* An apiserver restored with lower revisions: our RV is in
     * its future, so only a relist gives a consistent picture. */
    if (mesh_k8s_watch_rv_cmp(ev->rv, inf->rv) == -1) {
        inf->rv_went_back = true;
        if (rec != NULL) {
            inf->o.record_free(inf->o.ctx, rec);
        }
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "resourceVersion went backwards (%s after %s): the API server lost "
                            "its history",
                            ev->rv, inf->rv);
    }
    if (ev->type == MESH_K8S_EV_BOOKMARK) {
        inf->stats.bookmarks++;
    } else if (ev->type == MESH_K8S_EV_DELETED || rec == NULL) {
        /* DELETED, or an object the caller's extract leaves out. */
        apply_delete(inf, ev->key);
        inf->stats.events++;
    } else {
        apply_upsert(inf, ev->key, ev->rv, rec);
        inf->stats.events++;
    }
    snprintf(inf->rv, sizeof(inf->rv), "%s", ev->rv);
    snprintf(inf->stats.rv, sizeof(inf->stats.rv), "%s", ev->rv);
    return 0;
}

/* The initial events of a streaming list: ADDED objects (their RVs are not
 * ordered, so they neither advance nor check the RV) go to `fresh` until
 * the BOOKMARK annotated k8s.io/initial-events-end, which makes them the
 * store exactly as a LIST would (client-go watch-list). */
static int on_initial_event(struct mesh_k8s_informer *inf, const struct mesh_k8s_watch_event *ev)
{
    const struct mesh_k8s_informer_opts *o = &inf->o;
    if (ev->type == MESH_K8S_EV_BOOKMARK) {
        if (ev->initial_events_end) {
            inf->initial = false;
            size_t n = finish_sync(inf, &inf->fresh, ev->rv, 0, ev->recv_us);
            mesh_info(MOD, "streamed %zu objects (sendInitialEvents) at resourceVersion %s", n,
                      ev->rv);
        }
        return 0;
    }
    size_t slot;
    struct entry *old = tbl_get(&inf->fresh, ev->key, &slot);
    if (old != NULL) {
        tbl_del_at(&inf->fresh, slot);
        o->record_free(o->ctx, old->rec);
        mesh_free(old);
    }
    if (ev->type != MESH_K8S_EV_DELETED) {
        void *rec = o->extract(o->ctx, ev->object);
        if (rec != NULL) {
            tbl_put(&inf->fresh, entry_new(ev->key, ev->rv, rec));
        }
    }
    return 0;
}

static int on_event(void *ctx, const struct mesh_k8s_watch_event *ev, struct mesh_err *err)
{
    struct mesh_k8s_informer *inf = ctx;
    atomic_store(&inf->event_us, ev->recv_us);
    if (inf->initial && ev->type != MESH_K8S_EV_ERROR) {
        inf->watch_events++;
        return on_initial_event(inf, ev);
    }
    /* Extract outside the lock: readers of the store wait only for the update. */
    void *rec = NULL;
    if (ev->type == MESH_K8S_EV_ADDED || ev->type == MESH_K8S_EV_MODIFIED) {
        rec = inf->o.extract(inf->o.ctx, ev->object);
    }
    pthread_mutex_lock(&inf->lock);
    int rc = apply_event(inf, ev, rec, err);
    pthread_mutex_unlock(&inf->lock);
    if (rc == 0) {
        inf->watch_events++;
        if (ev->type != MESH_K8S_EV_BOOKMARK) {
            inf->notify_pending = true; /* written once per block: on_block */
        }
    }
    return rc;
}

/* The events of one block read from the connection are applied: wake the
 * readers once for all of them. */
static void on_block(void *ctx)
{
    struct mesh_k8s_informer *inf = ctx;
    if (inf->notify_pending) {
        inf->notify_pending = false;
        notify(inf);
    }
}

/* Sleep up to ms, returning early on stop. */
static void nap(struct mesh_k8s_informer *inf, int64_t ms)
{
    int64_t end = mesh_sys_now_ms() + ms;
    while (!atomic_load(&inf->stop)) {
        int64_t left = end - mesh_sys_now_ms();
        if (left <= 0) {
            return;
        }
        struct pollfd p = {.fd = inf->wake_fd, .events = POLLIN};
        poll(&p, 1, (int)(left > 60000 ? 60000 : left));
    }
}

static void backoff_wait(struct mesh_k8s_informer *inf, const char *what, const char *why)
{
    int64_t d = mesh_k8s_watch_backoff_next(&inf->backoff, mesh_sys_now_ms(), rnd01(inf));
    pthread_mutex_lock(&inf->lock);
    inf->stats.failures++;
    pthread_mutex_unlock(&inf->lock);
    mesh_warn(MOD, "%s failed: %s; retrying in %lld ms", what, why, (long long)d);
    nap(inf, d);
}

/* 429: wait Retry-After (capped) when given, else back off. */
static void throttled_wait(struct mesh_k8s_informer *inf, const char *what, const char *why)
{
    long ra = mesh_k8s_client_retry_after(inf->client);
    if (ra <= 0) {
        backoff_wait(inf, what, why);
        return;
    }
    if (ra > inf->o.retry_after_cap_s) {
        ra = inf->o.retry_after_cap_s;
    }
    mesh_warn(MOD, "%s throttled: %s; retrying after %ld s (Retry-After)", what, why, ra);
    nap(inf, (int64_t)ra * 1000);
}

enum next {
    NEXT_WATCH,  /* re-watch from the current RV now */
    NEXT_RELIST, /* relist now */
};

/* An in-stream ERROR other than 410: 429 -> wait and
 * re-watch; 504 "Too large resource version" (a lagging or restored
 * apiserver) -> relist now; anything else -> back off, then
 * relist. */
static enum next after_stream_error(struct mesh_k8s_informer *inf, const struct mesh_err *err)
{
    const struct mesh_k8s_watch_status *st = &inf->stream_error;
    if (st->code == 429) {
        if (st->retry_after_s > 0) {
            long ra = st->retry_after_s > inf->o.retry_after_cap_s ? inf->o.retry_after_cap_s
                                                                   : st->retry_after_s;
            mesh_warn(MOD, "%s; re-watching after %ld s", err->msg, ra);
            nap(inf, (int64_t)ra * 1000);
        } else {
            backoff_wait(inf, "watch", err->msg);
        }
        return NEXT_WATCH;
    }
    if (st->code == 504 && strstr(st->message, "Too large resource version") != NULL) {
        mesh_warn(MOD, "%s; relisting from the latest state", err->msg);
        return NEXT_RELIST;
    }
    backoff_wait(inf, "watch", err->msg);
    return NEXT_RELIST;
}

/* Decide what follows a watch that returned rc. */
static enum next after_watch(struct mesh_k8s_informer *inf, int rc, int64_t started_ms, int *stalls,
                             const struct mesh_err *err)
{
    if (rc == -MESH_E_API && inf->stream_error.code != 0) {
        return after_stream_error(inf, err);
    }
    long status = mesh_k8s_client_last_status(inf->client);
    bool very_short = inf->watch_events == 0 && mesh_sys_now_ms() - started_ms < 1000;
    if (inf->watch_events > 0) {
        *stalls = 0;
    }
    switch (rc) {
    case 0:
    case -MESH_E_API:
        if (rc == 0 || status == 200) {
            if (very_short) {
                /* client-go VeryShortWatchError: closed at once with no event. */
                backoff_wait(inf, "watch", "very short watch (closed at once, no event)");
            } else if (rc < 0) {
                mesh_info(MOD, "%s; re-watching from resourceVersion %s", err->msg, inf->rv);
            } else {
                mesh_debug(MOD, "watch ended; re-watching from resourceVersion %s", inf->rv);
            }
            return NEXT_WATCH;
        }
        if (status == 429) {
            throttled_wait(inf, "watch", err->msg);
        } else {
            backoff_wait(inf, "watch", err->msg);
        }
        return NEXT_WATCH;
    case -MESH_E_GONE:
        mesh_info(MOD, "%s; relisting", err->msg);
        return NEXT_RELIST;
    case -MESH_E_RANGE:
        mesh_warn(MOD, "%s; relisting", err->msg);
        return NEXT_RELIST;
    case -MESH_E_TIMEOUT:
        ++*stalls;
        mesh_warn(MOD, "%s; %s", err->msg,
                  *stalls >= 2 ? "relisting (second stall in a row)" : "reconnecting");
        return *stalls >= 2 ? NEXT_RELIST : NEXT_WATCH;
    case -MESH_E_TOOBIG:
    case -MESH_E_PARSE:
        mesh_error(MOD, "%s; dropping the stream and relisting", err->msg);
        return NEXT_RELIST;
    default:
        backoff_wait(inf, "watch", err->msg);
        return NEXT_WATCH;
    }
}

/* Book-keeping when a watch returned rc: the reason for the next start and
 * the API error, if any (an in-stream ERROR counts with its own code). */
static void watch_ended(struct mesh_k8s_informer *inf, int rc)
{
    long status = mesh_k8s_client_last_status(inf->client);
    const char *label = mesh_k8s_client_last_error(inf->client);
    char code[MESH_K8S_API_ERROR_LABEL_MAX];
    enum mesh_k8s_watch_reason r;
    if (inf->stream_error.code != 0 && (rc == -MESH_E_GONE || rc == -MESH_E_API)) {
        snprintf(code, sizeof(code), "%d", inf->stream_error.code);
        label = code;
        r = rc == -MESH_E_GONE ? MESH_K8S_WATCH_EXPIRED : MESH_K8S_WATCH_ERROR_EVENT;
    } else if (rc == 0) {
        r = MESH_K8S_WATCH_TIMEOUT;
    } else if (rc == -MESH_E_GONE) {
        r = MESH_K8S_WATCH_EXPIRED;
    } else if (rc == -MESH_E_TIMEOUT) {
        r = MESH_K8S_WATCH_STALLED;
    } else if (rc == -MESH_E_TOOBIG) {
        r = MESH_K8S_WATCH_OVERSIZED;
    } else if (rc == -MESH_E_PARSE) {
        r = MESH_K8S_WATCH_MALFORMED;
    } else if (rc == -MESH_E_RANGE) {
        r = MESH_K8S_WATCH_RV_BACKWARDS;
    } else if (status == 200) {
        r = MESH_K8S_WATCH_CUT;
    } else {
        r = status >= 300 ? MESH_K8S_WATCH_HTTP_ERROR : MESH_K8S_WATCH_CONNECT;
    }
    inf->next_reason = r;
    count_api_error(inf, label);
    on_block(inf); /* changes of a block cut short by the error */
}

static int do_watch(struct mesh_k8s_informer *inf, bool streaming, struct mesh_err *err)
{
    const struct mesh_k8s_informer_opts *o = &inf->o;
    long span = o->watch_timeout_max_s - o->watch_timeout_min_s;
    char rv[MESH_K8S_RV_MAX];
    pthread_mutex_lock(&inf->lock);
    snprintf(rv, sizeof(rv), "%s", inf->rv);
    inf->stats.watches++;
    inf->stats.watch_starts[inf->next_reason]++;
    pthread_mutex_unlock(&inf->lock);
    struct mesh_k8s_watch_opts wo = {
        .rv = rv,
        .timeout_s = o->watch_timeout_min_s + (long)(rnd01(inf) * (double)span),
        .stall_ms = (long)o->stall_timeout_s * 1000,
        .max_event_bytes = o->max_event_bytes,
        .bookmarks = true,
        .send_initial_events = streaming,
        .keep_managed_fields = o->keep_managed_fields,
        .on_block = on_block,
    };
    if (streaming) {
        wo.rv = ""; /* consistent read */
    }
    inf->watch_events = 0;
    inf->rv_went_back = false;
    memset(&inf->stream_error, 0, sizeof(inf->stream_error));
    int rc = mesh_k8s_client_watch(inf->client, &o->query, &wo, on_event, inf, err);
    watch_ended(inf, rc);
    return rc;
}

static void list_failed(struct mesh_k8s_informer *inf, int rc, const struct mesh_err *err)
{
    if (mesh_k8s_client_last_status(inf->client) == 429) {
        throttled_wait(inf, "list", err->msg);
    } else {
        (void)rc;
        backoff_wait(inf, "list", err->msg);
    }
}

/* A streaming list: one watch that first delivers the state, then goes on
 * as the live watch. Returns true when it synced; on a server that
 * rejects sendInitialEvents (HTTP 4xx) it switches to LIST for good. */
static bool stream_list(struct mesh_k8s_informer *inf, int *stalls, bool *need_list)
{
    struct mesh_err e;
    mesh_err_clear(&e);
    inf->initial = true;
    int64_t started = mesh_sys_now_ms();
    int rc = do_watch(inf, true, &e);
    bool synced = !inf->initial;
    if (inf->initial) {
        inf->initial = false;
        table_free(inf, &inf->fresh);
    }
    if (atomic_load(&inf->stop)) {
        return synced;
    }
    long st = mesh_k8s_client_last_status(inf->client);
    if (!synced && rc < 0 && st >= 400 && st < 500 && st != 401 && st != 403 && st != 429) {
        mesh_info(MOD, "the API server does not support streaming lists (%s); using LIST", e.msg);
        inf->streaming_off = true;
        return false;
    }
    enum next nx = after_watch(inf, rc, started, stalls, &e);
    *need_list = !synced || nx == NEXT_RELIST;
    return synced;
}

int mesh_k8s_informer_run(struct mesh_k8s_informer *inf, struct mesh_err *err)
{
    if (atomic_exchange(&inf->running, true)) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "informer: run called twice");
    }
    bool need_list = true;
    int stalls = 0;
    while (!atomic_load(&inf->stop)) {
        struct mesh_err e;
        mesh_err_clear(&e);
        if (need_list && inf->o.streaming_list && !inf->streaming_off) {
            (void)stream_list(inf, &stalls, &need_list);
            continue;
        }
        if (need_list) {
            int rc = do_list(inf, &e);
            if (rc < 0) {
                if (!atomic_load(&inf->stop)) {
                    list_failed(inf, rc, &e);
                }
                continue;
            }
            need_list = false;
            stalls = 0;
        }
        int64_t started = mesh_sys_now_ms();
        int rc = do_watch(inf, false, &e);
        if (atomic_load(&inf->stop)) {
            break;
        }
        need_list = after_watch(inf, rc, started, &stalls, &e) == NEXT_RELIST;
    }
    mesh_info(MOD, "informer stopped");
    return 0;
}
