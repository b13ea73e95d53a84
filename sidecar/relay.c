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
 * matches only that pod (the job's selector plus the index label), never
 * through DNS, and resolves it again after every failed session, so a
 * replaced relay pod (new IP) is found.
 *
 * Threads: one relay thread per subscriber sidecar resolves and runs the
 * gRPC sessions (io/relay_client.h), writing the received records into a
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
#include "io/grpc_server.h"
#include "io/k8s_client.h"
#include "io/k8s_informer.h"
#include "io/log.h"
#include "io/relay_client.h"
#include "io/sys.h"
#include "sidecar.h"

#define MOD "relay"

struct mesh_sidecar_relay {
    struct mesh_sidecar *ctx;
    struct mesh_relay_store *store;
    pthread_t thread;
    bool running;
    atomic_int stop;
    struct mesh_k8s_client *client;                 /* the relay thread's, for resolving */
    char selector[MESH_SIDECAR_SELECTOR_MAX + 128]; /* matches only the relay pod */
    int grpc_port;
    int64_t fallback_ms; /* this sidecar's jittered delay */
    /* main thread */
    int64_t waiting_since; /* when the relay stopped being good (or start-up) */
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

/* The label selector matching only the pod of rank r. */
static void relay_selector(const struct mesh_sidecar *ctx, long r, char *out, size_t cap)
{
    if (strcmp(ctx->relay_kind, "sts") == 0) {
        snprintf(out, cap, "%s,%s=%ld", ctx->selector, MESH_K8S_KEY_POD_INDEX, r);
    } else if (strcmp(ctx->relay_kind, "jobset") == 0) {
        snprintf(out, cap, "%s,%s=%ld,%s=%ld", ctx->selector, MESH_K8S_KEY_JOB_GLOBAL_INDEX,
                 r / ctx->relay_per_slice, MESH_K8S_KEY_COMPLETION_INDEX, r % ctx->relay_per_slice);
    } else {
        snprintf(out, cap, "%s,%s=%ld", ctx->selector, MESH_K8S_KEY_COMPLETION_INDEX, r);
    }
}

/* ---- resolving the relay pod ---- */

struct pick {
    char name[MESH_POD_MAX];
    char ip[MESH_IP_MAX];
    bool v6;
    int seen;
};

static int pick_item(void *vp, const char *item, size_t len, struct mesh_err *err)
{
    struct pick *pk = vp;
    struct mesh_k8s_pod p;
    pk->seen++;
    if (mesh_k8s_pod_parse(item, len, &p, err) < 0) {
        return 0;
    }
    if (!p.invalid && !p.terminating && !p.finished && p.ip[0] != '\0' && pk->ip[0] == '\0') {
        snprintf(pk->name, sizeof(pk->name), "%s", p.name);
        snprintf(pk->ip, sizeof(pk->ip), "%s", p.ip);
        pk->v6 = p.ip_v6;
    }
    return 0;
}

static int resolve(struct mesh_sidecar_relay *r, char *target, size_t cap, struct mesh_err *err)
{
    struct mesh_sidecar *ctx = r->ctx;
    struct mesh_k8s_query q = {.ns = ctx->ns, .resource = "pods", .label_selector = r->selector};
    struct pick pk = {0};
    struct mesh_k8s_list_meta meta;
    memset(&meta, 0, sizeof(meta));
    /* A handful at most: the old and the new pod of a replaced relay. */
    int rc =
        mesh_k8s_client_list(r->client, &q, 8, NULL, NULL, 1 << 20, 0, pick_item, &pk, &meta, err);
    mesh_k8s_list_meta_cleanup(&meta);
    if (rc < 0) {
        return mesh_err_prefix(err, "cannot list the relay pod");
    }
    if (pk.ip[0] == '\0') {
        return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                            "no running relay pod with an IP matches %s (%d listed)", r->selector,
                            pk.seen);
    }
    pthread_mutex_lock(&r->mu);
    snprintf(r->pod_name, sizeof(r->pod_name), "%s", pk.name);
    snprintf(r->ip, sizeof(r->ip), "%s", pk.ip);
    pthread_mutex_unlock(&r->mu);
    snprintf(target, cap, pk.v6 ? "[%s]:%d" : "%s:%d", pk.ip, r->grpc_port);
    return 0;
}

/* ---- the relay thread ---- */

static void notify(void *vctx)
{
    struct mesh_sidecar *ctx = vctx;
    pthread_mutex_lock(&ctx->chg_mu);
    if (ctx->pending_since_us == 0) {
        ctx->pending_since_us = mesh_sys_now_us();
    }
    atomic_fetch_add(&ctx->changes, 1);
    pthread_mutex_unlock(&ctx->chg_mu);
    uint64_t one = 1;
    (void)!write(ctx->wake_fd, &one, sizeof(one));
}

static void nap(struct mesh_sidecar_relay *r, int64_t ms)
{
    int64_t until = mesh_sys_now_ms() + ms;
    while (!atomic_load(&r->stop) && mesh_sys_now_ms() < until) {
        mesh_sys_sleep_ms(50);
    }
}

static void *relay_thread(void *arg)
{
    struct mesh_sidecar_relay *r = arg;
    struct mesh_sidecar *ctx = r->ctx;
    char last_err[MESH_ERR_MSG_MAX] = "";
    int64_t backoff = 200;
    while (!atomic_load(&r->stop)) {
        char target[MESH_IP_MAX + 16];
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = resolve(r, target, sizeof(target), &err);
        struct mesh_relay_status before;
        mesh_relay_store_status(r->store, &before);
        if (rc == 0) {
            struct mesh_relay_client_opts co = {
                .target = target,
                .ns = ctx->ns,
                .selector = ctx->selector,
                .subscriber = ctx->pod_name,
                .silence_ms = 6000,
                .lag_ms = 2 * ctx->opts.stall_timeout_s * 1000,
                .stop = &r->stop,
                .notify = notify,
                .ctx = ctx,
            };
            mesh_debug(MOD, "subscribing to %s", target);
            rc = mesh_relay_client_run(&co, r->store, &err);
            struct mesh_relay_status st;
            mesh_relay_store_status(r->store, &st);
            if (st.messages > before.messages && rc != -MESH_E_INVAL) {
                backoff = 200; /* this session worked for a while: retry soon */
            }
        }
        if (atomic_load(&r->stop)) {
            break;
        }
        if (strcmp(err.msg, last_err) != 0) {
            mesh_log(rc == -MESH_E_INVAL ? MESH_LOG_ERROR : MESH_LOG_WARN, MOD, "%s%s", err.msg,
                     rc == -MESH_E_INVAL ? " (refused; using the API watch)" : "");
            snprintf(last_err, sizeof(last_err), "%s", err.msg);
        }
        /* A refusing relay is tried again only after a long pause; an
         * unreachable one with a growing, jittered pause. */
        int64_t f = (int64_t)ctx->opts.relay_fallback_s * 1000;
        int64_t pause = rc == -MESH_E_INVAL ? 3 * f : backoff;
        nap(r, pause / 2 + (int64_t)(random() % (pause / 2 + 1)));
        backoff = backoff * 2 > f ? f : backoff * 2;
    }
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
    relay_selector(ctx, (ctx->rank - 1) / ctx->opts.relay_fanout, r->selector, sizeof(r->selector));
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
    if (r->running) {
        pthread_join(r->thread, NULL);
    }
    mesh_k8s_client_free(r->client);
    pthread_mutex_lock(&ctx->mu);
    ctx->relay = NULL;
    pthread_mutex_unlock(&ctx->mu);
    mesh_relay_store_free(r->store);
    pthread_mutex_destroy(&r->mu);
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
        r->waiting_since = now - r->fallback_ms;
    }
    bool good = relay_good(r, &st, now);
    if (good) {
        r->waiting_since = now;
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
    if (now - r->waiting_since >= r->fallback_ms && ctx->inf == NULL) {
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
        /* The list was built from relayed records: rebuild, never patch. */
        mesh_k8s_informer_lock(ctx->inf);
        ctx->delta_overflow = true;
        mesh_k8s_informer_unlock(ctx->inf);
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
