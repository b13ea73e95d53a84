/*
 * relay.c - relay mode (docs/DESIGN.md §9, docs/scale.md): which source the
 * worker list comes from, and the subscriber side of the relay tree.
 *
 * The tree: pods are ranked by their index (completion index; slice-major
 * across the slices of a JobSet; the StatefulSet ordinal). Rank 0 watches
 * the API itself; rank r > 0 follows rank (r - 1) / F (F = --relay-fanout),
 * so no sidecar serves more than F subscribers and the API sees one watch
 * per job however large it is, plus those of sidecars that fell back.
 * A subscriber finds its relay's pod IP with one LIST whose label selector
 * matches only that pod and the coordinator (the job's selector plus the
 * index labels), never through DNS, and resolves it again after every
 * failed session, so a replaced relay pod (new IP) is found.
 *
 * Threads: one relay thread per subscriber sidecar resolves and runs the
 * gRPC sessions (relay_client.h), writing the received records into a
 * store and waking the main loop through ctx->wake_fd. The main thread
 * decides the source (mesh_sidecar_relay_tick):
 *   following the relay  while its messages arrive (a heartbeat every 2 s)
 *                        from a synced relay that is not lagging;
 *   falling back         once no such message came for a delay drawn in
 *                        [F/2, F] (F = --relay-fallback; jittered so a dead
 *                        relay does not become F simultaneous LISTs), or at
 *                        once when the relay sent a record the API rules
 *                        refuse: the own watch starts, and is used once it
 *                        has synced (until then the last relayed state stays);
 *   returning            when the relay is good again: the own watch stops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/mem.h"
#include "grpc_server.h"
#include "io/k8s_client.h"
#include "k8s_informer.h"
#include "io/log.h"
#include "relay_client.h"
#include "io/sys.h"
#include "sidecar.h"

#define MOD "relay"

/* What the relay thread last found of the relay pod. */
enum { POD_UNKNOWN, POD_WAITING, POD_RUNNING };

struct mesh_sidecar_relay {
    struct mesh_sidecar *ctx;
    atomic_int pod_state;               /* POD_*: only a running relay pod's silence counts */
    atomic_int_fast64_t running_since;  /* CLOCK_MONOTONIC ms it was first seen running */
    uint64_t ready_applied_seen;        /* relay thread: store's ready_applied at the last notify */
    char refused_why[MESH_ERR_MSG_MAX]; /* relay thread: last refusal logged */
    struct mesh_sidecar_verify verify;  /* relay thread: records checked against the API */
    struct mesh_k8s_pod relay_pod;      /* relay thread: the relay pod as the API last gave it */
    struct mesh_k8s_pod coord; /* relay thread: the coordinator pod, running, as the LIST or */
    bool have_coord; /* the wait's watch last showed it (when the relay is not the coordinator) */
    struct mesh_relay_store *store;
    pthread_t thread;
    bool running;
    atomic_int stop;
    struct mesh_k8s_client *client;                 /* the relay thread's, for resolving */
    char selector[MESH_SIDECAR_SELECTOR_MAX + 160]; /* the relay pod and the coordinator */
    int grpc_port;
    long rank;           /* the relay's rank: (own rank - 1) / fan-out */
    int64_t fallback_ms; /* this sidecar's jittered delay */
    /* main thread */
    int64_t waiting_since;      /* when the relay stopped being good (or start-up) */
    int64_t seen_running_since; /* running_since the flags below are about */
    bool good_once;             /* the relay pod was good since it was seen running */
    bool force;                 /* a refusal: fall back now */
    uint64_t refused_seen;
    bool fallback_logged;
    pthread_mutex_t mu; /* guards pod_name, ip */
    char pod_name[MESH_POD_MAX];
    char ip[MESH_IP_MAX];
};

/* ---- planning ---- */

static long rank_of(const struct mesh_sidecar *ctx, int per_slice, char *label_fmt, size_t cap)
{
    const struct mesh_k8s_pod *p = &ctx->self;
    if (p->completion_index >= 0 && p->job_global_index >= 0) {
        if (per_slice <= 0) {
            return -1;
        }
        snprintf(label_fmt, cap, "jobset");
        return (long)p->job_global_index * per_slice + p->completion_index;
    }
    if (p->completion_index >= 0) {
        snprintf(label_fmt, cap, "job");
        return p->completion_index;
    }
    if (p->pod_index >= 0) {
        snprintf(label_fmt, cap, "sts");
        return p->pod_index;
    }
    return -1;
}

int mesh_sidecar_relay_plan(struct mesh_sidecar *ctx)
{
    const struct mesh_sidecar_opts *o = &ctx->opts;
    ctx->rank = -1;
    ctx->relay_mode = false;
    if (o->watch_mode == MESH_SIDECAR_WATCH_DIRECT) {
        mesh_info(MOD, "watch mode direct: this sidecar watches the API itself");
        return 0;
    }
    if (o->watch_mode == MESH_SIDECAR_WATCH_AUTO && ctx->expected < MESH_SIDECAR_RELAY_AUTO_MIN) {
        mesh_info(MOD, "watch mode auto: direct (%d expected workers; relays are used from %d on)",
                  ctx->expected, MESH_SIDECAR_RELAY_AUTO_MIN);
        return 0;
    }
    int per_slice = ctx->per_slice > 0 ? ctx->per_slice : (ctx->have_slice ? ctx->slice.hosts : 0);
    char kind[sizeof(ctx->relay_kind)];
    long rank = rank_of(ctx, per_slice, kind, sizeof(kind));
    if (rank < 0) {
        mesh_warn(MOD,
                  "watch mode %s: this pod has no index a relay tree can be built on "
                  "(no completion index or pod index, or a JobSet whose hosts per slice "
                  "are unknown); watching the API directly",
                  o->watch_mode == MESH_SIDECAR_WATCH_RELAY ? "relay" : "auto");
        return 0;
    }
    if (rank > 0 && (!ctx->index_labeled || !ctx->job.known)) {
        mesh_warn(MOD, "watch mode %s: %s; watching the API directly",
                  o->watch_mode == MESH_SIDECAR_WATCH_RELAY ? "relay" : "auto",
                  !ctx->index_labeled
                      ? "this pod's index is not a label (Kubernetes before 1.28 sets only the "
                        "annotation), so its relay pod cannot be selected"
                      : "this pod has no controller, so no relay can be checked to be of its job");
        return 0;
    }
    ctx->relay_mode = true;
    ctx->rank = rank;
    ctx->relay_per_slice = per_slice;
    snprintf(ctx->relay_kind, sizeof(ctx->relay_kind), "%s", kind);
    if (rank == 0) {
        mesh_info(MOD,
                  "relay mode: rank 0, the root relay: watches the API and serves up to %d "
                  "subscribers on gRPC",
                  o->relay_fanout);
    } else {
        mesh_info(MOD, "relay mode: rank %ld follows rank %ld (fan-out %d, fallback %d s)", rank,
                  (rank - 1) / o->relay_fanout, o->relay_fanout, o->relay_fallback_s);
    }
    return 0;
}

/* The label selector of the pod of rank r and, when r > 0, of the
 * coordinator ("in" sets: at most the two pods, four for a JobSet's two
 * labels): what a subscriber lists and, while it waits, watches, so that
 * the coordinator's record is known from the API by the time the relay
 * sends it, without a GET from every subscriber at the moment the relays
 * start. */
static void relay_selector(const struct mesh_sidecar *ctx, long r, char *out, size_t cap)
{
    bool in = r > 0;
    const char *key = strcmp(ctx->relay_kind, "sts") == 0 ? MESH_K8S_KEY_POD_INDEX
                                                          : MESH_K8S_KEY_COMPLETION_INDEX;
    char head[MESH_SIDECAR_SELECTOR_MAX + 64];
    snprintf(head, sizeof(head), "%s", ctx->selector);
    if (strcmp(ctx->relay_kind, "jobset") == 0) {
        snprintf(head, sizeof(head), in ? "%s,%s in (0,%ld)" : "%s,%s=%ld", ctx->selector,
                 MESH_K8S_KEY_JOB_GLOBAL_INDEX, r / ctx->relay_per_slice);
        r %= ctx->relay_per_slice;
    }
    snprintf(out, cap, in ? "%s,%s in (0,%ld)" : "%s,%s=%ld", head, key, r);
}

static void nap(struct mesh_sidecar_relay *r, int64_t ms)
{
    int64_t until = mesh_sys_now_ms() + ms;
    while (!atomic_load(&r->stop) && mesh_sys_now_ms() < until) {
        mesh_sys_sleep_ms(50);
    }
}

/* ---- resolving the relay pod ----
 *
 * The relay is the pod at the relay's index that belongs to this job (the
 * same top-level controller, jobid.c); a pod that merely carries the
 * labels is refused and logged. While that pod is not running with an IP
 * the subscriber WAITS: the topology cannot be complete without it, so its
 * own API watch would buy nothing. It watches that one pod (the relay's
 * label selector, plus a metadata.name field selector once the pod exists:
 * O(1) events, no polling LIST) and subscribes the moment it runs. */

/* A pod with these indexes is at rank `want` of the tree (rank_of). */
static bool at_rank(const struct mesh_sidecar *ctx, long want, long ci, long pi, long jgi)
{
    if (strcmp(ctx->relay_kind, "sts") == 0) {
        return pi == want;
    }
    if (strcmp(ctx->relay_kind, "jobset") == 0) {
        return jgi == want / ctx->relay_per_slice && ci == want % ctx->relay_per_slice;
    }
    return ci == want;
}

#define PICK_MAX 8 /* a handful at most: the old and the new pod of a replaced relay */

struct pick {
    struct mesh_k8s_pod pods[PICK_MAX];
    int n, seen;
};

static int pick_item(void *vp, const cJSON *item, struct mesh_err *err)
{
    struct pick *pk = vp;
    pk->seen++;
    if (pk->n < PICK_MAX && mesh_k8s_pod_extract(item, &pk->pods[pk->n], err) == 0) {
        pk->n++;
    }
    return 0;
}

static bool is_running(const struct mesh_k8s_pod *p)
{
    return !p->invalid && !p->terminating && !p->finished && p->ip[0] != '\0';
}

/* Log a refused relay candidate once per distinct reason. */
static void refuse_candidate(struct mesh_sidecar_relay *r, const char *why)
{
    if (strcmp(why, r->refused_why) != 0) {
        mesh_warn(MOD, "not following a pod as relay: %s (only a pod of this job is a relay)", why);
        snprintf(r->refused_why, sizeof(r->refused_why), "%s", why);
    }
}

/* Follow p, a running pod of this job the API just gave (a LIST or the
 * wait's watch event): its target, and what the API says of it, which
 * the checks below need not GET again. */
static void take(struct mesh_sidecar_relay *r, const struct mesh_k8s_pod *p, char *target,
                 size_t cap)
{
    r->relay_pod = *p;
    pthread_mutex_lock(&r->mu);
    snprintf(r->pod_name, sizeof(r->pod_name), "%s", p->name);
    snprintf(r->ip, sizeof(r->ip), "%s", p->ip);
    pthread_mutex_unlock(&r->mu);
    snprintf(target, cap, p->ip_v6 ? "[%s]:%d" : "%s:%d", p->ip, r->grpc_port);
}

/* One LIST of the relay's selector, with the coordinator's index when the
 * relay is not the coordinator. 0 with the running relay's target, or
 * MESH_E_NOTREADY with *waiting = the name of the job's pod at that index
 * that does not run yet ("" = none), *rv = the LIST's resourceVersion. */
static int resolve(struct mesh_sidecar_relay *r, char *target, size_t cap, char *waiting, char *rv,
                   struct mesh_err *err)
{
    struct mesh_sidecar *ctx = r->ctx;
    struct mesh_k8s_query q = {.ns = ctx->ns, .resource = "pods", .label_selector = r->selector};
    struct pick *pk = mesh_calloc(1, sizeof(*pk));
    struct mesh_k8s_list_meta meta;
    memset(&meta, 0, sizeof(meta));
    waiting[0] = '\0';
    int rc = mesh_k8s_client_list(r->client, &q, PICK_MAX, NULL, NULL, 1 << 20, 0, pick_item, pk,
                                  &meta, err);
    snprintf(rv, MESH_K8S_RV_MAX, "%s", meta.rv);
    mesh_k8s_list_meta_cleanup(&meta);
    if (rc < 0) {
        mesh_free(pk);
        return mesh_err_prefix(err, "cannot list the relay pod");
    }
    const struct mesh_k8s_pod *run = NULL;
    r->have_coord = false;
    for (int i = 0; i < pk->n; i++) {
        const struct mesh_k8s_pod *p = &pk->pods[i];
        if (!at_rank(ctx, r->rank, p->completion_index, p->pod_index, p->job_global_index)) {
            /* The coordinator, listed along: what the API says of it is
             * what check_one compares the relay's record with. */
            if (at_rank(ctx, 0, p->completion_index, p->pod_index, p->job_global_index) &&
                is_running(p)) {
                r->coord = *p;
                r->have_coord = true;
            }
            continue;
        }
        if (run != NULL) {
            continue;
        }
        char why[MESH_ERR_MSG_MAX];
        int same = mesh_sidecar_job_same(ctx, r->client, p, why, sizeof(why));
        if (same == -MESH_E_INVAL) {
            refuse_candidate(r, why);
            continue;
        }
        if (same < 0) {
            mesh_free(pk);
            return mesh_err_set(err, MESH_E_API, 0, "cannot check relay pod %s: %s", p->name, why);
        }
        if (is_running(p)) {
            run = p;
        } else if (!p->terminating && !p->finished && waiting[0] == '\0') {
            snprintf(waiting, MESH_POD_MAX, "%s", p->name);
        }
    }
    if (run == NULL) {
        rc = mesh_err_set(err, MESH_E_NOTREADY, 0,
                          "the relay pod (%s) is not running with an IP yet (%d listed)",
                          waiting[0] ? waiting : r->selector, pk->seen);
        mesh_free(pk);
        return rc;
    }
    take(r, run, target, cap);
    mesh_free(pk);
    return 0;
}

struct waiter {
    struct mesh_sidecar_relay *r;
    const char *name; /* the relay pod waited for, or "" (none yet) */
    bool running;     /* pod is the event's pod, running with an IP */
    struct mesh_k8s_pod *pod;
};

/* A watch event of the relay pod: end the watch when the pod may now run
 * (the caller follows it from the event itself: the API just said it, and
 * a LIST from each of the relay's subscribers at that moment is what a
 * relay pod that starts late would cost the API), went away or another
 * one appeared (the caller lists again). */
static int wait_event(void *vw, const struct mesh_k8s_watch_event *ev, struct mesh_err *err)
{
    struct waiter *w = vw;
    if (ev->type == MESH_K8S_EV_BOOKMARK) {
        return 0;
    }
    if (ev->type == MESH_K8S_EV_ERROR) {
        return mesh_err_set(err, MESH_E_GONE, 0, "the relay pod's watch ended (status %d)",
                            ev->status.code);
    }
    struct mesh_sidecar_relay *r = w->r;
    const struct mesh_k8s_pod *p = w->pod;
    if (mesh_k8s_pod_extract(ev->object, w->pod, NULL) == 0 &&
        !at_rank(r->ctx, r->rank, p->completion_index, p->pod_index, p->job_global_index)) {
        /* The coordinator (watched along when it is not the relay): kept
         * while it runs; checked to be of this job when it is used. */
        if (at_rank(r->ctx, 0, p->completion_index, p->pod_index, p->job_global_index)) {
            r->have_coord = ev->type != MESH_K8S_EV_DELETED && is_running(w->pod);
            if (r->have_coord) {
                r->coord = *w->pod;
            }
        }
        return 0;
    }
    if (w->name[0] != '\0' && strcmp(w->pod->name, w->name) != 0 && ev->type != MESH_K8S_EV_ADDED) {
        return 0; /* another pod at the relay's index, not new: not the one waited for */
    }
    if (ev->type != MESH_K8S_EV_DELETED) {
        if (!is_running(w->pod)) {
            return 0; /* still not running: keep waiting, O(1) */
        }
        w->running = true;
    }
    return -MESH_E_INCOMPLETE; /* sentinel: the wait is over */
}

/* Wait for the relay pod to run: one watch from the LIST's rv. Returns
 * when an event may have changed the answer, the watch ended, or stop;
 * true with *out = the relay pod when an event showed it running. */
static bool wait_for_pod(struct mesh_sidecar_relay *r, const char *name, const char *rv,
                         struct mesh_k8s_pod *out)
{
    char field[MESH_POD_MAX + 32] = "";
    bool with_coord = r->rank > 0;
    if (name[0] != '\0' && !with_coord) {
        snprintf(field, sizeof(field), "metadata.name=%s", name);
    }
    struct mesh_k8s_query q = {.ns = r->ctx->ns,
                               .resource = "pods",
                               .label_selector = r->selector,
                               .field_selector = field[0] ? field : NULL};
    struct mesh_k8s_watch_opts wo = {
        .rv = rv, .timeout_s = 120, .stall_ms = 150000, .bookmarks = true};
    struct waiter w = {.r = r, .name = name, .pod = out};
    struct mesh_err err;
    mesh_err_clear(&err);
    int rc = mesh_k8s_client_watch(r->client, &q, &wo, wait_event, &w, &err);
    if (rc < 0 && rc != -MESH_E_INCOMPLETE && !atomic_load(&r->stop)) {
        mesh_debug(MOD, "watching the relay pod: %s", err.msg);
        nap(r, 1000); /* an API failure: do not spin on LISTs */
    }
    return rc == -MESH_E_INCOMPLETE && w.running;
}

/* The pod a wait's event showed running: followed when it is of this job
 * (0, *target set); else (a pod that merely carries the labels, refused
 * and logged, or its job cannot be checked now) the caller lists again. */
static int take_event_pod(struct mesh_sidecar_relay *r, const struct mesh_k8s_pod *p, char *target,
                          size_t cap)
{
    char why[MESH_ERR_MSG_MAX];
    int same = mesh_sidecar_job_same(r->ctx, r->client, p, why, sizeof(why));
    if (same == -MESH_E_INVAL) {
        refuse_candidate(r, why);
    }
    if (same < 0) {
        return same;
    }
    take(r, p, target, cap);
    return 0;
}

/* ---- checking what cannot be got wrong ----
 *
 * Before a message is applied, every record it upserts at rank 0 (the
 * coordinator every worker dials) or under this pod's own name is compared
 * with the API (one GET per record that changed since it was last found
 * right). Fields a relay may legitimately lag on (ready, terminating, an IP
 * not yet seen) may differ; fields that never change for a pod (host name,
 * subdomain, the indexes, an IP once assigned) and its job (the
 * controller) must not. A pod the API does not have is refused unless the
 * relay itself says it is leaving. */

/* x was found right before, or differs from a record found right only in
 * what may change without a new GET proving anything (ready, terminating,
 * finished): the fields compared with the API are the same. */
static bool verified(struct mesh_sidecar_verify *v, const struct mesh_k8s_pod_rec *x)
{
    for (size_t i = 0; i < v->n; i++) {
        const struct mesh_k8s_pod_rec *y = v->ok[i];
        if (mesh_k8s_pod_rec_equal(y, x)) {
            return true;
        }
        if (strcmp(mesh_k8s_pod_rec_name(y), mesh_k8s_pod_rec_name(x)) == 0 &&
            y->completion_index == x->completion_index && y->pod_index == x->pod_index &&
            y->job_index == x->job_index && y->job_global_index == x->job_global_index &&
            (y->flags & MESH_K8S_REC_INVALID) == (x->flags & MESH_K8S_REC_INVALID) &&
            strcmp(mesh_k8s_pod_rec_hostname(y), mesh_k8s_pod_rec_hostname(x)) == 0 &&
            strcmp(mesh_k8s_pod_rec_subdomain(y), mesh_k8s_pod_rec_subdomain(x)) == 0 &&
            strcmp(mesh_k8s_pod_rec_ip(y), mesh_k8s_pod_rec_ip(x)) == 0) {
            return true;
        }
    }
    return false;
}

static void remember(struct mesh_sidecar_verify *v, const struct mesh_k8s_pod_rec *x)
{
    struct mesh_k8s_pod_rec *c = mesh_malloc(x->size);
    memcpy(c, x, x->size);
    if (v->n < MESH_SIDECAR_VERIFY_MAX) {
        v->ok[v->n++] = c;
        return;
    }
    mesh_free(v->ok[v->next]);
    v->ok[v->next] = c;
    v->next = (v->next + 1) % MESH_SIDECAR_VERIFY_MAX;
}

#define DIFF(field, fmt, a, b)                                                                     \
    do {                                                                                           \
        if ((a) != (b)) {                                                                          \
            return mesh_err_set(err, MESH_E_INVAL, 0,                                              \
                                "relay's record of %s differs from the API: " field " " fmt        \
                                " (relay) vs " fmt " (API)",                                       \
                                name, a, b);                                                       \
        }                                                                                          \
    } while (0)

static int compare(const char *name, const struct mesh_k8s_pod_rec *x, const struct mesh_k8s_pod *a,
                   struct mesh_err *err)
{
    DIFF("completion index", "%d", (int)x->completion_index, a->completion_index);
    DIFF("pod index", "%d", (int)x->pod_index, a->pod_index);
    DIFF("job index", "%d", (int)x->job_index, a->job_index);
    DIFF("job global index", "%d", (int)x->job_global_index, a->job_global_index);
    const char *xs[] = {mesh_k8s_pod_rec_hostname(x), mesh_k8s_pod_rec_subdomain(x)};
    const char *as[] = {a->hostname, a->subdomain};
    const char *what[] = {"spec.hostname", "spec.subdomain"};
    for (int i = 0; i < 2; i++) {
        if (strcmp(xs[i], as[i]) != 0) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "relay's record of %s differs from the API: %s '%s' (relay) vs "
                                "'%s' (API)",
                                name, what[i], xs[i], as[i]);
        }
    }
    const char *ip = mesh_k8s_pod_rec_ip(x);
    if (ip[0] != '\0' && strcmp(ip, a->ip) != 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "relay's record of %s differs from the API: IP %s (relay) vs %s (API)",
                            name, ip, a->ip[0] ? a->ip : "none");
    }
    return 0;
}

/* GET pod name into *a: 0, 1 when the API does not have it and the relay's
 * record says it is leaving (nothing to check), or an error. */
static int get_pod(struct mesh_sidecar_relay *r, const struct mesh_k8s_pod_rec *x, const char *name,
                   struct mesh_k8s_pod *a, struct mesh_err *err)
{
    struct mesh_sidecar *ctx = r->ctx;
    struct mesh_k8s_query q = {.ns = ctx->ns, .resource = "pods"};
    cJSON *obj = NULL;
    struct mesh_err e;
    mesh_err_clear(&e);
    int rc = mesh_k8s_client_get(r->client, &q, name, &obj, &e);
    if (rc == -MESH_E_NOTFOUND) {
        if ((x->flags & (MESH_K8S_REC_TERMINATING | MESH_K8S_REC_FINISHED)) != 0) {
            return 1; /* leaving: the relay lags behind its deletion */
        }
        return mesh_err_set(err, MESH_E_INVAL, 0, "relay sent pod %s, which the API does not have",
                            name);
    }
    if (rc < 0) {
        /* The API cannot answer now: not the relay's fault, but nothing
         * unchecked is applied; the session ends and is tried again. */
        return mesh_err_set(err, MESH_E_API, 0, "cannot check relay's record of %s: %s", name,
                            e.msg);
    }
    rc = mesh_k8s_pod_extract(obj, a, NULL);
    cJSON_Delete(obj);
    if (rc < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "the API's pod %s is unreadable", name);
    }
    return 0;
}

static int check_one(struct mesh_sidecar_relay *r, const struct mesh_k8s_pod_rec *x,
                     struct mesh_err *err)
{
    struct mesh_sidecar *ctx = r->ctx;
    const char *name = mesh_k8s_pod_rec_name(x);
    /* What the API already said needs no GET when the record agrees with
     * it: this pod (read at start, running: it has its IP), the relay pod
     * (running, just listed or watched; the coordinator for the
     * coordinator's own subscribers) and the coordinator as the wait's
     * watch showed it running. Anything else, and a record that differs
     * from what was known (a pod replaced under the same name), is a GET. */
    const struct mesh_k8s_pod *known = NULL;
    if (strcmp(name, ctx->self.name) == 0) {
        known = ctx->self.ip[0] != '\0' ? &ctx->self : NULL;
    } else if (strcmp(name, r->relay_pod.name) == 0) {
        known = &r->relay_pod;
    } else if (r->have_coord && strcmp(name, r->coord.name) == 0) {
        known = &r->coord;
    }
    char why[MESH_ERR_MSG_MAX];
    if (known != NULL && compare(name, x, known, err) == 0 &&
        (known == &ctx->self ||
         mesh_sidecar_job_same(ctx, r->client, known, why, sizeof(why)) == 0)) {
        remember(&r->verify, x);
        return 0;
    }
    mesh_err_clear(err);
    struct mesh_k8s_pod a;
    int rc = get_pod(r, x, name, &a, err);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    rc = mesh_sidecar_job_same(ctx, r->client, &a, why, sizeof(why));
    if (rc < 0) {
        return mesh_err_set(err, rc == -MESH_E_INVAL ? MESH_E_INVAL : MESH_E_API, 0,
                            "relay sent pod %s, which is not of this job: %s", name, why);
    }
    rc = compare(name, x, &a, err);
    if (rc == 0) {
        remember(&r->verify, x);
    }
    return rc;
}

/* The store's check (relay_client.h): the records a message upserts, before
 * anything is applied. Relay thread. */
int mesh_sidecar_relay_check(void *vr, struct mesh_k8s_pod_rec *const *up, size_t n,
                             struct mesh_err *err)
{
    struct mesh_sidecar_relay *r = vr;
    struct mesh_sidecar *ctx = r->ctx;
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        const struct mesh_k8s_pod_rec *x = up[i];
        bool own = strcmp(mesh_k8s_pod_rec_name(x), ctx->pod_name) == 0;
        if ((x->flags & MESH_K8S_REC_INVALID) != 0 ||
            (!own && !at_rank(ctx, 0, x->completion_index, x->pod_index, x->job_global_index)) ||
            verified(&r->verify, x)) {
            continue;
        }
        if (++checked > 4) {
            /* A job has one coordinator, briefly two while it is replaced. */
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "relay sent more than 4 records at rank 0 in one message");
        }
        int rc = check_one(r, x, err);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* ---- the relay thread ---- */

static void notify(void *vctx)
{
    struct mesh_sidecar *ctx = vctx;
    struct mesh_sidecar_relay *r = ctx->relay;
    /* A message that changed only peers' Ready flags is a readiness-only
     * change, paced as routine like one from the API (topology.c). */
    struct mesh_relay_status st;
    mesh_relay_store_status(r->store, &st);
    bool ready_only = st.ready_applied != r->ready_applied_seen;
    r->ready_applied_seen = st.ready_applied;
    pthread_mutex_lock(&ctx->chg_mu);
    if (ctx->pending_since_us == 0) {
        ctx->pending_since_us = mesh_sys_now_us();
    }
    atomic_fetch_add(&ctx->changes, 1);
    if (ready_only) {
        atomic_fetch_add(&ctx->ready_changes, 1);
    }
    pthread_mutex_unlock(&ctx->chg_mu);
    uint64_t one = 1;
    (void)!write(ctx->wake_fd, &one, sizeof(one));
}

static void log_once(char *last, size_t cap, int rc, const char *msg)
{
    if (strcmp(msg, last) != 0) {
        mesh_log(rc == -MESH_E_INVAL ? MESH_LOG_ERROR : MESH_LOG_WARN, MOD, "%s%s", msg,
                 rc == -MESH_E_INVAL ? " (refused; using the API watch)" : "");
        snprintf(last, cap, "%s", msg);
    }
}

/* No message from the relay pod since it was seen running (relay
 * thread). */
static bool st_before_good(struct mesh_sidecar_relay *r)
{
    struct mesh_relay_status st;
    mesh_relay_store_status(r->store, &st);
    return st.last_good_ms < atomic_load(&r->running_since);
}

static int session(struct mesh_sidecar_relay *r, const char *target, struct mesh_err *err)
{
    struct mesh_sidecar *ctx = r->ctx;
    struct mesh_relay_client_opts co = {
        .target = target,
        .ns = ctx->ns,
        .selector = ctx->selector,
        .subscriber = ctx->pod_name,
        .silence_ms = 6000,
        .lag_ms = 2 * ctx->opts.stall_timeout_s * 1000,
        .max_pods = ctx->expected,
        .wait_ready = st_before_good(r),
        .check = mesh_sidecar_relay_check,
        .check_ctx = r,
        .stop = &r->stop,
        .notify = notify,
        .ctx = ctx,
    };
    mesh_debug(MOD, "subscribing to %s", target);
    return mesh_relay_client_run(&co, r->store, err);
}

static void *relay_thread(void *arg)
{
    struct mesh_sidecar_relay *r = arg;
    struct mesh_sidecar *ctx = r->ctx;
    char last_err[MESH_ERR_MSG_MAX] = "";
    char target[MESH_IP_MAX + 16] = "";
    int64_t f = (int64_t)ctx->opts.relay_fallback_s * 1000;
    int64_t backoff = 200, resolved_at = 0;
    struct mesh_k8s_pod *pod = mesh_malloc(sizeof(*pod)); /* a wait's event */
    while (!atomic_load(&r->stop)) {
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = 0;
        /* List again when the target is unknown, a session that worked
         * ended (the relay may have been replaced), or every F otherwise:
         * a relay that runs but does not answer costs no LIST per retry. */
        if (target[0] == '\0' || mesh_sys_now_ms() - resolved_at >= f) {
            char waiting[MESH_POD_MAX], rv[MESH_K8S_RV_MAX];
            rc = resolve(r, target, sizeof(target), waiting, rv, &err);
            resolved_at = mesh_sys_now_ms();
            if (rc == -MESH_E_NOTREADY) {
                atomic_store(&r->pod_state, POD_WAITING);
                target[0] = '\0';
                log_once(last_err, sizeof(last_err), rc, err.msg);
                if (!wait_for_pod(r, waiting, rv, pod) ||
                    take_event_pod(r, pod, target, sizeof(target)) < 0) {
                    continue; /* list again */
                }
                rc = 0;
                resolved_at = mesh_sys_now_ms();
            }
            if (rc < 0) {
                target[0] = '\0';
            } else if (atomic_load(&r->pod_state) != POD_RUNNING) {
                atomic_store(&r->running_since, mesh_sys_now_ms());
                atomic_store(&r->pod_state, POD_RUNNING);
                backoff = 200;
            }
        }
        struct mesh_relay_status before;
        mesh_relay_store_status(r->store, &before);
        if (rc == 0) {
            rc = session(r, target, &err);
            struct mesh_relay_status st;
            mesh_relay_store_status(r->store, &st);
            if (st.messages > before.messages && rc != -MESH_E_INVAL) {
                backoff = 200;    /* this session worked for a while: retry soon */
                target[0] = '\0'; /* and find the relay again: it may be a new pod */
            }
        }
        if (atomic_load(&r->stop)) {
            break;
        }
        log_once(last_err, sizeof(last_err), rc, err.msg);
        /* A refusing relay is tried again only after a long pause; an
         * unreachable one with a growing, jittered pause of at most 1 s
         * (a reconnect costs the API nothing), and one whose pod just got
         * its IP and never answered yet every 300 ms at most: it is
         * starting, and its subscribers should follow it as soon as it
         * serves. */
        int64_t pause = rc == -MESH_E_INVAL ? 3 * f : backoff;
        bool starting =
            st_before_good(r) && mesh_sys_now_ms() - atomic_load(&r->running_since) < 3 * f;
        if (rc != -MESH_E_INVAL && starting && pause > 300) {
            pause = 300;
        }
        if (rc == -MESH_E_INVAL) {
            target[0] = '\0';
        }
        nap(r, pause / 2 + (int64_t)(random() % (pause / 2 + 1)));
        int64_t cap = f < 1000 ? f : 1000;
        backoff = backoff * 2 > cap ? cap : backoff * 2;
    }
    mesh_free(pod);
    return NULL;
}

int mesh_sidecar_relay_start(struct mesh_sidecar *ctx, int grpc_port, struct mesh_err *err)
{
    if (!ctx->relay_mode || ctx->rank <= 0) {
        return 0;
    }
    struct mesh_sidecar_relay *r = mesh_calloc(1, sizeof(*r));
    r->ctx = ctx;
    r->grpc_port = grpc_port;
    pthread_mutex_init(&r->mu, NULL);
    r->store = mesh_relay_store_new();
    r->rank = (ctx->rank - 1) / ctx->opts.relay_fanout;
    relay_selector(ctx, r->rank, r->selector, sizeof(r->selector));
    int64_t f = (int64_t)ctx->opts.relay_fallback_s * 1000;
    r->fallback_ms = f / 2 + (int64_t)(random() % (f / 2 + 1));
    r->waiting_since = mesh_sys_now_ms();
    r->client = mesh_sidecar_client_new(&ctx->opts, err);
    if (r->client == NULL) {
        mesh_relay_store_free(r->store);
        mesh_free(r);
        return -MESH_E_CONFIG;
    }
    ctx->relay = r;
    if (pthread_create(&r->thread, NULL, relay_thread, r) != 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "cannot start the relay thread");
    }
    r->running = true;
    mesh_info(MOD,
              "finding the relay with selector %s (port %d); falling back after %lld ms "
              "without it",
              r->selector, grpc_port, (long long)r->fallback_ms);
    return 0;
}

void mesh_sidecar_relay_stop(struct mesh_sidecar *ctx)
{
    struct mesh_sidecar_relay *r = ctx->relay;
    if (r == NULL) {
        return;
    }
    atomic_store(&r->stop, 1);
    mesh_k8s_client_cancel(r->client);
    mesh_relay_store_cancel(r->store);
    if (r->running) {
        pthread_join(r->thread, NULL);
    }
    mesh_k8s_client_free(r->client);
    pthread_mutex_lock(&ctx->mu);
    ctx->relay = NULL;
    pthread_mutex_unlock(&ctx->mu);
    mesh_relay_store_free(r->store);
    pthread_mutex_destroy(&r->mu);
    for (size_t i = 0; i < r->verify.n; i++) {
        mesh_free(r->verify.ok[i]);
    }
    mesh_free(r);
}

/* ---- the source (main thread) ---- */

static bool relay_good(struct mesh_sidecar_relay *r, const struct mesh_relay_status *st,
                       int64_t now)
{
    /* A good message within the last 6 s (heartbeats come every 2 s). */
    return st->connected && st->synced && st->last_good_ms > 0 && now - st->last_good_ms < 6000 &&
           r->refused_seen == st->refused;
}

void mesh_sidecar_relay_tick(struct mesh_sidecar *ctx)
{
    struct mesh_sidecar_relay *r = ctx->relay;
    if (r == NULL) {
        return;
    }
    int64_t now = mesh_sys_now_ms();
    struct mesh_relay_status st;
    mesh_relay_store_status(r->store, &st);
    bool refused = st.refused != r->refused_seen;
    if (refused && !st.connected) {
        /* A refused session ended: fall back at once. */
        r->refused_seen = st.refused;
        r->force = true;
    }
    int64_t rs = atomic_load(&r->running_since);
    if (rs != r->seen_running_since) {
        r->seen_running_since = rs;
        r->good_once = false;
    }
    bool good = relay_good(r, &st, now);
    r->good_once = r->good_once || good;
    if (!good && atomic_load(&r->pod_state) != POD_RUNNING) {
        /* Waiting is not failing: the relay pod does not run yet, and the
         * topology cannot be complete without it. The fallback delay
         * counts from when it runs. */
        r->waiting_since = now;
    }
    if (good) {
        r->waiting_since = now;
        r->force = false;
        if (!ctx->following) {
            if (ctx->inf != NULL) {
                mesh_sidecar_direct_stop(ctx);
            }
            ctx->following = true;
            r->fallback_logged = false;
            atomic_fetch_add(&ctx->changes, 1);
            mesh_info(MOD, "source: relay %s (pod %s, depth %d)", st.target, r->pod_name,
                      st.depth + 1);
        }
        return;
    }
    /* A relay pod that just got its IP gets a start-up allowance of 3 x F
     * before the fallback delay counts: its sidecar may still be starting
     * (tpumesh-init, an image pull, its own first LIST), and 63 subscribers
     * falling back meanwhile would cost the API what relays save. */
    int64_t f = (int64_t)ctx->opts.relay_fallback_s * 1000;
    int64_t delay = r->fallback_ms + (r->good_once ? 0 : 3 * f);
    if ((r->force || now - r->waiting_since >= delay) && ctx->inf == NULL) {
        r->force = false;
        mesh_warn(MOD, "source: falling back to the API watch: %s",
                  st.error[0] ? st.error : "the relay is not answering yet");
        pthread_mutex_lock(&ctx->mu);
        ctx->fallbacks++;
        pthread_mutex_unlock(&ctx->mu);
        struct mesh_err err;
        mesh_err_clear(&err);
        if (mesh_sidecar_direct_start(ctx, &err) < 0) {
            mesh_error(MOD, "cannot start the API watch: %s", err.msg);
        }
    }
    if (ctx->following && ctx->inf != NULL && mesh_k8s_informer_has_synced(ctx->inf)) {
        ctx->following = false;
        atomic_fetch_add(&ctx->changes, 1);
        mesh_info(MOD, "source: API watch (synced; the relay comes back when it is good again)");
    }
}

bool mesh_sidecar_source_synced(struct mesh_sidecar *ctx)
{
    if (ctx->following) {
        return true;
    }
    return ctx->inf != NULL && mesh_k8s_informer_has_synced(ctx->inf);
}

void mesh_sidecar_source_describe(struct mesh_sidecar *ctx, char *out, size_t cap)
{
    struct mesh_sidecar_relay *r = ctx->relay;
    if (!ctx->relay_mode) {
        snprintf(out, cap, "api");
        return;
    }
    if (r == NULL) {
        snprintf(out, cap, "api (relay root, rank 0)");
        return;
    }
    struct mesh_relay_status st;
    mesh_relay_store_status(r->store, &st);
    int64_t now = mesh_sys_now_ms();
    if (ctx->following) {
        snprintf(out, cap, "relay %s depth %d, last message %lld ms ago, relay source age %lld ms",
                 st.target, st.depth + 1, (long long)(st.last_msg_ms ? now - st.last_msg_ms : -1),
                 (long long)st.source_age_ms);
    } else {
        snprintf(out, cap, "api (fallback: %s)", st.error[0] ? st.error : "relay not good yet");
    }
}

void mesh_sidecar_relay_status(struct mesh_sidecar *ctx, struct mesh_relay_status *out,
                               bool *out_have)
{
    *out_have = ctx->relay != NULL;
    if (ctx->relay != NULL) {
        mesh_relay_store_status(ctx->relay->store, out);
    } else {
        memset(out, 0, sizeof(*out));
    }
}

/* Records of the followed relay, for recompute and the gRPC server. */
struct mesh_relay_store *mesh_sidecar_relay_store(struct mesh_sidecar *ctx)
{
    return ctx->relay != NULL ? ctx->relay->store : NULL;
}
