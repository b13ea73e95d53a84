/*
 * topology.c - the sidecar's core loop step: informer store -> worker list
 * (workers.c) -> rendered files (render.c) -> atomic publish (publish.c),
 * only when an output actually changes (docs/DESIGN.md §4-§5), plus the
 * transition log lines and the status the HTTP thread serves.
 *
 * "Changed" is decided on bytes: the render cache (core/render.h) is brought
 * to the new input at the current generation, re-rendering only the workers
 * that changed, and tells which files' bytes differ from what was last
 * published (right after start-up, the files are compared with the disk).
 * Only when something differs is it moved to generation + 1 and published;
 * files with unchanged bytes are left untouched (same inode and mtime).
 *
 * Publishes are paced (core/pace.h): the first one, every change of
 * "complete" and every address or membership change of a complete topology
 * go out at once; the routine ones (an incomplete topology after an
 * incomplete one, which changes only topology.json, and readiness-only
 * changes of a complete one) wait 1 s after the first publish, and twice as
 * long after each further one, up to 16 s, until a change comes 16 s or more
 * after the last publish. What is held back is counted and folded into the
 * next publish. A held-back readiness change leaves topology.json out of
 * ctx->known, so the next recompute compares it with the disk.
 *
 * The worker list is kept between recomputes. The informer callbacks note
 * which pods were updated (with the record the list was built from); when
 * only a few were, the recompute patches them in (mesh_workers_patch) and
 * tells the render cache which slots changed, instead of walking the whole
 * store. Adds, deletes, relists, bursts and anything a patch cannot apply
 * (an index or liveness change, a complete job becoming incomplete) rebuild
 * it from the store.
 */
#include <netdb.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/mem.h"
#include "io/k8s_informer.h"
#include "io/log.h"
#include "io/publish.h"
#include "io/relay_client.h"
#include "io/sys.h"
#include "sidecar.h"

#define MOD "topo"

/* ---- informer callbacks (informer thread: counters only) ---- */

void *mesh_sidecar_extract(void *vctx, const cJSON *obj)
{
    struct mesh_sidecar *ctx = vctx;
    /* The full record is scratch (968 B on this thread's stack); the store
     * keeps the packed form (~110 B, k8s_pod.h). */
    struct mesh_k8s_pod p;
    if (mesh_k8s_pod_extract(obj, &p, NULL) < 0) {
        return NULL;
    }
    /* StatefulSet selectors are template labels: keep only pods that the
     * same StatefulSet controls. Every stored record then has the same
     * owner, so the packed form need not carry it. */
    if (ctx->owner_filter[0] != '\0' && strcmp(p.owner_name, ctx->owner_filter) != 0) {
        return NULL;
    }
    /* A pod that carries the job's labels but another controller (or none)
     * is not a worker (jobid.c). Another slice's Job of the same JobSet is
     * taken on its labels here: checking it costs a GET per slice, which
     * the relay side pays only for its relay. */
    char why[256];
    if (ctx->opts.selector == NULL && ctx->job.known &&
        mesh_sidecar_job_same_quick(ctx, &p, why, sizeof(why)) < 0) {
        mesh_debug(MOD, "not a worker: %s", why);
        return NULL;
    }
    return mesh_k8s_pod_pack(&p);
}

void mesh_sidecar_record_free(void *vctx, void *rec)
{
    (void)vctx;
    mesh_free(rec);
}

bool mesh_sidecar_record_equal(void *vctx, const void *a, const void *b)
{
    (void)vctx;
    return mesh_k8s_pod_rec_equal(a, b);
}

/* One change that may alter the output: remember when its bytes arrived
 * (the earliest such time until a recompute takes it), then count it. */
static void note_change(struct mesh_sidecar *ctx)
{
    int64_t t = mesh_k8s_informer_event_time_us(ctx->inf);
    pthread_mutex_lock(&ctx->chg_mu);
    if (t > 0 && (ctx->pending_since_us == 0 || t < ctx->pending_since_us)) {
        ctx->pending_since_us = t;
    }
    atomic_fetch_add(&ctx->changes, 1);
    pthread_mutex_unlock(&ctx->chg_mu);
}

/* Remember an update for the next recompute's patch (store lock held: the
 * callbacks run under it). A key already listed keeps its first old
 * record, the one the worker list was built from. */
static void note_delta(struct mesh_sidecar *ctx, const char *key,
                       const struct mesh_k8s_pod_rec *old)
{
    if (ctx->delta_overflow) {
        return;
    }
    for (size_t i = 0; i < ctx->ndelta; i++) {
        if (strcmp(ctx->delta[i].key, key) == 0) {
            return;
        }
    }
    if (ctx->ndelta == MESH_SIDECAR_DELTA_MAX) {
        ctx->delta_overflow = true;
        return;
    }
    struct mesh_sidecar_delta *d = &ctx->delta[ctx->ndelta++];
    d->key = mesh_strdup(key);
    d->old = mesh_malloc(old->size);
    memcpy(d->old, old, old->size);
}

/* Forget the remembered updates (store lock held). */
static void drop_deltas(struct mesh_sidecar *ctx)
{
    for (size_t i = 0; i < ctx->ndelta; i++) {
        mesh_free(ctx->delta[i].key);
        mesh_free(ctx->delta[i].old);
    }
    ctx->ndelta = 0;
    ctx->delta_overflow = false;
}

void mesh_sidecar_on_add(void *vctx, const char *key, const void *rec)
{
    struct mesh_sidecar *ctx = vctx;
    (void)key;
    (void)rec;
    atomic_fetch_add(&ctx->ev_added, 1);
    ctx->delta_overflow = true;
    note_change(ctx);
}

void mesh_sidecar_on_update(void *vctx, const char *key, const void *old_rec, const void *new_rec)
{
    struct mesh_sidecar *ctx = vctx;
    atomic_fetch_add(&ctx->ev_modified, 1);
    if (!mesh_k8s_pod_rec_equal(old_rec, new_rec)) {
        note_delta(ctx, key, old_rec);
        note_change(ctx);
    }
}

void mesh_sidecar_on_delete(void *vctx, const char *key, const void *old_rec)
{
    struct mesh_sidecar *ctx = vctx;
    (void)key;
    (void)old_rec;
    atomic_fetch_add(&ctx->ev_deleted, 1);
    ctx->delta_overflow = true;
    note_change(ctx);
}

void mesh_sidecar_on_synced(void *vctx, size_t count)
{
    struct mesh_sidecar *ctx = vctx;
    (void)count;
    atomic_fetch_add(&ctx->syncs, 1);
    ctx->delta_overflow = true;
    note_change(ctx);
}

/* ---- helpers ---- */

struct collect {
    const struct mesh_k8s_pod_rec **v;
    size_t n, cap;
};

static int collect_fn(void *c, const char *key, const char *rv, const void *rec)
{
    struct collect *col = c;
    (void)key;
    (void)rv;
    if (col->n == col->cap) {
        col->cap = col->cap ? col->cap * 2 : 64;
        col->v = mesh_reallocarray(col->v, col->cap, sizeof(*col->v));
    }
    col->v[col->n++] = rec;
    return 0;
}

/* Log each problem line once for as long as it persists; a line that went
 * away and comes back is logged again. */
static void log_problems(struct mesh_sidecar *ctx, const struct mesh_workers *w)
{
    for (size_t i = 0; i < w->nproblems; i++) {
        bool seen = false;
        for (size_t j = 0; j < ctx->nlogged && !seen; j++) {
            seen = strcmp(ctx->logged[j], w->problems[i]) == 0;
        }
        if (!seen) {
            mesh_warn(MOD, "%s", w->problems[i]);
        }
    }
    for (size_t j = 0; j < ctx->nlogged; j++) {
        mesh_free(ctx->logged[j]);
    }
    mesh_free(ctx->logged);
    ctx->logged = mesh_calloc(w->nproblems ? w->nproblems : 1, sizeof(char *));
    for (size_t i = 0; i < w->nproblems; i++) {
        ctx->logged[i] = mesh_strdup(w->problems[i]);
    }
    ctx->nlogged = w->nproblems;
}

/* --verify-dns: a worker counts only once <host> resolves to its pod IP
 * (getaddrinfo uses the pod's resolv.conf search path, so the short
 * <hostname>.<subdomain> works in-cluster).
 * Appends the unresolved indices to *unresolved. */
static bool dns_matches(const char *host, const char *ip)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) {
        return false;
    }
    bool ok = false;
    for (struct addrinfo *a = res; a != NULL && !ok; a = a->ai_next) {
        char txt[MESH_IP_MAX];
        const void *addr = a->ai_family == AF_INET
                               ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                               : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if (inet_ntop(a->ai_family, addr, txt, sizeof(txt)) != NULL) {
            ok = strcmp(txt, ip) == 0;
        }
    }
    freeaddrinfo(res);
    return ok;
}

static uint64_t pair_hash(const char *host, const char *ip)
{
    uint64_t h = 14695981039346656037ULL;
    for (const char *p = host; *p != '\0'; p++) {
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    }
    h = (h ^ '|') * 1099511628211ULL;
    for (const char *p = ip; *p != '\0'; p++) {
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    }
    return h;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Resolved (host, ip) pairs are remembered (a sorted set of hashes) and not
 * looked up again; lookups stop after DNS_BUDGET_MS per call so a slow
 * resolver cannot stall the loop (the rest count as unresolved and are
 * retried on the next one-second tick). */
#define DNS_BUDGET_MS 2000

static bool verify_dns(struct mesh_sidecar *ctx, const struct mesh_workers *w, char *reason,
                       size_t cap)
{
    struct mesh_buf b;
    mesh_buf_init(&b, cap - 1);
    int64_t t0 = mesh_sys_now_ms();
    size_t added = 0;
    if (ctx->ndns_ok > 4 * w->nworkers + 64) {
        ctx->ndns_ok = 0; /* pods came and went: forget, re-resolve the current ones */
    }
    for (size_t i = 0; i < w->nworkers; i++) {
        const struct mesh_worker *wk = &w->workers[i];
        uint64_t h = pair_hash(wk->host, wk->ip);
        if (ctx->dns_ok != NULL &&
            bsearch(&h, ctx->dns_ok, ctx->ndns_ok, sizeof(h), cmp_u64) != NULL) {
            continue;
        }
        int64_t spent = mesh_sys_now_ms() - t0;
        if (spent < DNS_BUDGET_MS && dns_matches(wk->host, wk->ip)) {
            ctx->dns_ok = mesh_reallocarray(ctx->dns_ok, ctx->ndns_ok + 1, sizeof(h));
            ctx->dns_ok[ctx->ndns_ok++] = h;
            added++;
            continue;
        }
        (void)mesh_buf_printf(&b, NULL, "%s%zu", b.len ? "," : "dns not resolved ", i);
    }
    if (added > 0) {
        qsort(ctx->dns_ok, ctx->ndns_ok, sizeof(ctx->dns_ok[0]), cmp_u64);
    }
    bool ok = b.len == 0;
    if (!ok) {
        snprintf(reason, cap, "%s", mesh_buf_str(&b));
    }
    mesh_buf_cleanup(&b);
    return ok;
}

/* The files on disk are this process's now: /topology may serve them.
 * Once true it stays true, so later calls take no lock. */
static void remember(struct mesh_sidecar *ctx)
{
    if (ctx->have_last) {
        return;
    }
    ctx->have_last = true;
    pthread_mutex_lock(&ctx->mu);
    ctx->st.have_topology = true;
    pthread_mutex_unlock(&ctx->mu);
}

/* Publish the files of out in mask as a new version; a file whose
 * previous bytes this process published (ctx->known) is known to differ and
 * is written without a comparison, the others are compared with the
 * current version first (equal ones are hard-linked), and files not in
 * mask are carried over from it. The publisher is opened on the first
 * publish (that removes what a killed predecessor left) and kept. */
static int publish(struct mesh_sidecar *ctx, const struct mesh_render_out *out, unsigned mask,
                   size_t *written, struct mesh_err *err)
{
    struct mesh_publish_file files[MESH_FILE__COUNT];
    size_t n = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (out->data[i] != NULL && (mask & (1u << i)) != 0) {
            files[n].name = mesh_render_file_name(i);
            files[n].data = out->data[i];
            files[n].len = out->len[i];
            files[n].differs = (ctx->known & (1u << i)) != 0;
            n++;
        }
    }
    if (ctx->pub == NULL) {
        ctx->pub = mesh_publish_dir_open(ctx->opts.out_dir, err);
        if (ctx->pub == NULL) {
            return err->code != 0 ? -err->code : -MESH_E_PUBLISH;
        }
    }
    return mesh_publish_dir_commit(ctx->pub, files, n, written, err);
}

static void set_status(struct mesh_sidecar *ctx, bool ready, const char *reason,
                       const struct mesh_workers *w, bool published, int64_t now_ms)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->st.synced = true;
    ctx->st.ready = ready;
    /* /readyz never answers with an empty body. */
    snprintf(ctx->st.reason, sizeof(ctx->st.reason), "%s",
             reason[0] != '\0' ? reason : (ready ? "ok" : "topology incomplete"));
    ctx->st.expected = ctx->expected; /* 0 = unknown */
    ctx->st.present = w->present;
    ctx->st.addressed = w->addressed;
    ctx->st.ready_workers = w->ready;
    ctx->st.generation = ctx->generation;
    if (published) {
        ctx->st.publishes++;
        ctx->st.last_publish_time = (double)now_ms / 1000.0;
    }
    pthread_mutex_unlock(&ctx->mu);
}

static void fail_status(struct mesh_sidecar *ctx, const char *reason)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->st.ready = false;
    snprintf(ctx->st.reason, sizeof(ctx->st.reason), "%s",
             reason[0] != '\0' ? reason : "publishing failed");
    ctx->st.publish_errors++;
    pthread_mutex_unlock(&ctx->mu);
}

/* One info line when completeness or the reason changes, never per event. */
static void log_transition(struct mesh_sidecar *ctx, bool complete, const char *reason,
                           const struct mesh_workers *w)
{
    if (complete == ctx->last_complete && strcmp(reason, ctx->last_reason) == 0 && ctx->have_cur) {
        return;
    }
    if (complete) {
        mesh_info(MOD, "topology complete with %zu workers (%s mode, %d ready)", w->nworkers,
                  w->mode == MESH_ADDR_DNS ? "dns" : "ip", w->ready);
    } else {
        mesh_info(MOD, "topology incomplete: %s", reason);
    }
    ctx->last_complete = complete;
    snprintf(ctx->last_reason, sizeof(ctx->last_reason), "%s", reason);
}

static void render_failed(struct mesh_sidecar *ctx, const char *what, const struct mesh_err *err)
{
    char why[MESH_ERR_MSG_MAX + 32];
    snprintf(why, sizeof(why), "%s: %s", what, err->msg);
    if (strcmp(why, ctx->last_reason) != 0) {
        mesh_error(MOD, "%s", why);
        snprintf(ctx->last_reason, sizeof(ctx->last_reason), "%s", why);
    }
    fail_status(ctx, why);
}

#define TOPO_BIT (1u << MESH_FILE_TOPOLOGY_JSON)

static unsigned rendered_mask(const struct mesh_render_out *out)
{
    unsigned m = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (out->data[i] != NULL) {
            m |= 1u << i;
        }
    }
    return m;
}

/* Move the cache to generation + 1 (in is the input the cache was just
 * brought to; only topology.json's header changes) and publish the files in
 * mask plus topology.json. */
static int publish_next(struct mesh_sidecar *ctx, struct mesh_render_input *in, unsigned mask,
                        size_t *written)
{
    struct mesh_err err;
    mesh_err_clear(&err);
    in->generation = ctx->generation + 1;
    int64_t t0 = mesh_sys_now_us();
    int rc = mesh_render_cache_set_generation(ctx->cache, in, &err);
    if (rc < 0) {
        ctx->known = 0;
        ctx->ready_held = false;
        render_failed(ctx, "cannot render the topology", &err);
        return rc;
    }
    struct mesh_render_out out;
    mesh_render_cache_view(ctx->cache, &out);
    mask |= TOPO_BIT;
    int64_t t1 = mesh_sys_now_us();
    rc = publish(ctx, &out, mask, written, &err);
    ctx->renamed_us = mesh_sys_now_us();
    if (rc == 0 && *written > 0) {
        /* The files are visible from the swap of "..data" on; the commit
         * then tidied up (symlinks, the version before last). */
        int64_t swapped = mesh_publish_dir_swapped_us(ctx->pub);
        if (swapped > 0 && swapped <= ctx->renamed_us) {
            ctx->renamed_us = swapped;
        }
    }
    ctx->cost_render_us += t1 - t0;
    ctx->cost_write_us = ctx->renamed_us - t1;
    if (rc < 0) {
        /* Some files may have been renamed: compare with the disk next time. */
        ctx->known = 0;
        if (!ctx->publish_pending) {
            mesh_error(MOD, "cannot publish: %s (retrying every second)", err.msg);
        }
        ctx->publish_pending = true;
        char why[MESH_ERR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "cannot publish: %s", err.msg);
        fail_status(ctx, why);
        return rc;
    }
    if (ctx->publish_pending) {
        mesh_info(MOD, "publishing works again");
    }
    ctx->publish_pending = false;
    ctx->known |= rendered_mask(&out);
    ctx->generation++;
    return 0;
}

/* The slices of a multi-slice JobSet (docs/DESIGN.md §5): the worker list is
 * slice-major with w->per_slice hosts per slice, so tpu.env names this
 * pod's slice and carries MEGASCALE_* (render.h). 1 for every other job. A
 * count that does not split evenly is passed rounded up: the renderer then
 * refuses it and says why (the expected count is not slices x hosts). */
static int slice_count(const struct mesh_sidecar *ctx, const struct mesh_workers *w)
{
    bool multislice = ctx->self.job_global_index >= 0 || ctx->self.job_index >= 0;
    if (!multislice || !w->indexed || w->per_slice <= 0 || w->nworkers == 0) {
        return 1;
    }
    long n = (long)w->nworkers;
    return (int)((n + w->per_slice - 1) / w->per_slice);
}

/* Count a recompute held back until until_ms (the main loop recomputes
 * then, or earlier on the next change). */
static void hold(struct mesh_sidecar *ctx, int64_t now, int64_t until, bool readiness)
{
    if (ctx->held == 0) {
        ctx->held_since_ms = now;
    }
    ctx->held++;
    ctx->hold_until_ms = until;
    pthread_mutex_lock(&ctx->mu);
    ctx->st.publishes_coalesced++;
    if (readiness) {
        ctx->st.publishes_coalesced_ready++;
    }
    pthread_mutex_unlock(&ctx->mu);
}

/* Hold this publish back (true) when it is a readiness-only change of a
 * complete topology whose last publish was also complete, and the pacing
 * (core/pace.h) says it must wait: only topology.json differs, and this
 * update changed only "ready" values (or nothing, on top of a change
 * already held). */
static bool hold_ready(struct mesh_sidecar *ctx, unsigned todo, unsigned changed,
                       bool readiness_only, bool complete)
{
    int64_t now = mesh_sys_now_us() / 1000, until = 0;
    bool ready_change = readiness_only || (ctx->ready_held && changed == 0);
    if (ctx->flush || !complete || !ctx->pub_complete || ctx->publish_pending || todo != TOPO_BIT ||
        !ready_change || !mesh_pace_hold(&ctx->pace, now, &until)) {
        ctx->ready_held = false;
        return false;
    }
    ctx->ready_held = true;
    hold(ctx, now, until, true);
    return true;
}

/* "Changed" is decided by the render cache (core/render.h): it is brought to
 * the new input at the current generation, and reports which files' bytes
 * differ from the last ones it rendered. For files whose last bytes are on
 * disk (ctx->known) that is the answer; the others (start-up, after a
 * failure, env files first rendered) are compared with the disk. Only when
 * a file differs is the set published at generation + 1. */
static int render_and_publish(struct mesh_sidecar *ctx, const struct mesh_workers *w,
                              const size_t *dirty, size_t ndirty, int self, bool complete,
                              const char *reason, int64_t now_ms)
{
    struct mesh_render_input in = {
        .dirty = dirty,
        .ndirty = ndirty,
        .slice = ctx->have_slice ? &ctx->slice : NULL,
        .workers = w->workers,
        .nworkers = w->nworkers,
        .expected = (int)w->nworkers,
        .self_index = self,
        .job_name = ctx->job_name[0] ? ctx->job_name : NULL,
        .port = ctx->opts.port,
        .mode = w->mode,
        .generation = ctx->generation,
        .complete = complete,
        .slices = slice_count(ctx, w),
        .megascale_port = ctx->self.megascale_port > 0 ? ctx->self.megascale_port : 0,
        .jax_coordinator = ctx->self.coordinator[0] ? ctx->self.coordinator : NULL,
        .expected_source = ctx->expected_source[0] ? ctx->expected_source : NULL,
        .present = w->present,
    };
    if (ctx->cache == NULL) {
        ctx->cache = mesh_render_cache_new();
    }
    struct mesh_err err;
    mesh_err_clear(&err);
    int64_t t0 = mesh_sys_now_us();
    unsigned changed = 0;
    int rc = mesh_render_cache_update(ctx->cache, &in, &changed, &err);
    if (rc < 0) {
        ctx->known = 0;
        ctx->ready_held = false;
        render_failed(ctx, "cannot render the topology", &err);
        return rc;
    }
    struct mesh_render_out out;
    mesh_render_cache_view(ctx->cache, &out);
    unsigned rendered = rendered_mask(&out);
    unsigned todo = rendered & ctx->known & changed;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        unsigned bit = 1u << i;
        if ((rendered & bit) != 0 && (ctx->known & bit) == 0) {
            if (mesh_publish_is_current(ctx->opts.out_dir, mesh_render_file_name(i), out.data[i],
                                        out.len[i])) {
                ctx->known |= bit;
            } else {
                todo |= bit;
            }
        }
    }
    ctx->cost_render_us = mesh_sys_now_us() - t0;
    bool readiness_only = mesh_render_cache_is_readiness_only(ctx->cache);
    if (hold_ready(ctx, todo, changed, readiness_only, complete)) {
        ctx->known &= ~TOPO_BIT;
        char line[sizeof(ctx->st.reason)];
        snprintf(line, sizeof(line), "ok: generation %llu, %zu workers, %d ready",
                 (unsigned long long)ctx->generation, w->nworkers, w->ready);
        set_status(ctx, true, line, w, false, now_ms);
        return 0;
    }
    bool published = false;
    size_t written = 0;
    if (todo != 0) {
        rc = publish_next(ctx, &in, todo, &written);
        if (rc < 0) {
            return rc;
        }
        published = true;
    }
    if ((ctx->known & TOPO_BIT) != 0) {
        remember(ctx);
        if (published) {
            /* A readiness-only publish is routine: debug level, not one
             * info line per flip. */
            char held[96] = "";
            if (ctx->held > 0) {
                snprintf(held, sizeof(held), "; %llu recompute%s over %lld ms coalesced into it",
                         (unsigned long long)ctx->held, ctx->held == 1 ? "" : "s",
                         (long long)(mesh_sys_now_us() / 1000 - ctx->held_since_ms));
            }
            mesh_log(readiness_only && ctx->held == 0 ? MESH_LOG_DEBUG : MESH_LOG_INFO, MOD,
                     "published generation %llu (%zu file%s rewritten, %.1f ms after the %s%s): %s",
                     (unsigned long long)ctx->generation, written, written == 1 ? "" : "s",
                     (double)(ctx->renamed_us - ctx->publish_from_us) / 1000.0,
                     ctx->publish_from_event ? "change arrived" : "retry began", held,
                     complete ? "complete"
                              : "incomplete, env files keep the last complete version");
        }
    }

    char line[sizeof(ctx->st.reason)];
    if (complete) {
        snprintf(line, sizeof(line), "ok: generation %llu, %zu workers, %d ready",
                 (unsigned long long)ctx->generation, w->nworkers, w->ready);
    } else {
        snprintf(line, sizeof(line), "%s", reason);
    }
    set_status(ctx, complete, line, w, published, now_ms);
    return 0;
}

/* Give an arrival time back (the publish it was taken for failed). */
static void keep_pending(struct mesh_sidecar *ctx, int64_t since)
{
    if (since <= 0) {
        return;
    }
    pthread_mutex_lock(&ctx->chg_mu);
    if (ctx->pending_since_us == 0 || since < ctx->pending_since_us) {
        ctx->pending_since_us = since;
    }
    pthread_mutex_unlock(&ctx->chg_mu);
}

static int recompute(struct mesh_sidecar *ctx, int64_t now_ms);

int mesh_sidecar_recompute(struct mesh_sidecar *ctx, int64_t now_ms, int64_t woke_us)
{
    /* Every change counted so far is in the store, so this recompute sees
     * it: take its arrival time with it (note_change's pair, reversed). */
    pthread_mutex_lock(&ctx->chg_mu);
    ctx->changes_seen = atomic_load(&ctx->changes);
    int64_t since = ctx->pending_since_us;
    ctx->pending_since_us = 0;
    pthread_mutex_unlock(&ctx->chg_mu);

    uint64_t gen = ctx->generation;
    ctx->publish_from_us = since > 0 ? since : woke_us;
    ctx->publish_from_event = since > 0;
    int rc = recompute(ctx, now_ms);
    if (ctx->generation != gen) {
        /* Event to file: until the renames, not until this call's cleanup. */
        int64_t from = ctx->publish_from_us, lat = ctx->renamed_us - from;
        mesh_sidecar_note_latency(ctx, lat);
        mesh_debug(MOD,
                   "generation %llu: %lld us from %s (wake-up after %lld us; workers %lld us, "
                   "render %lld us, write %lld us)",
                   (unsigned long long)ctx->generation, (long long)lat,
                   since > 0 ? "event arrival" : "wake-up", (long long)(woke_us - from),
                   (long long)ctx->cost_workers_us, (long long)ctx->cost_render_us,
                   (long long)ctx->cost_write_us);
    } else if (rc < 0 || ctx->publish_pending || ctx->hold_until_ms > 0) {
        keep_pending(ctx, since);
    }
    return rc;
}

/* Apply the remembered updates to ctx->w (store lock held): true when
 * every one was patched in; dirty[] (MESH_SIDECAR_DELTA_MAX entries)
 * receives the slots that changed. False: the list must be rebuilt. */
static bool patch_workers(struct mesh_sidecar *ctx, const struct mesh_workers_opts *o,
                          size_t *dirty, size_t *ndirty)
{
    *ndirty = 0;
    if (ctx->w.workers == NULL || ctx->delta_overflow || o->mode != ctx->w_opts.mode ||
        o->expected != ctx->w_opts.expected || o->per_slice != ctx->w_opts.per_slice) {
        return false;
    }
    for (size_t i = 0; i < ctx->ndelta; i++) {
        const struct mesh_k8s_pod_rec *cur = mesh_k8s_informer_lookup(ctx->inf, ctx->delta[i].key);
        if (cur == NULL) {
            return false;
        }
        int slot = mesh_workers_patch(&ctx->w, o, ctx->delta[i].old, cur);
        if (slot == MESH_WORKERS_PATCH_REBUILD) {
            return false;
        }
        if (slot >= 0) {
            dirty[(*ndirty)++] = (size_t)slot;
        }
    }
    return true;
}

/* Hold this recompute's publish back (true) when it and the last publish
 * are both of an incomplete topology and the pacing (core/pace.h) says it
 * must wait. A complete topology, or one that stopped being complete, is
 * never held back here. */
static bool hold_back(struct mesh_sidecar *ctx, bool complete)
{
    int64_t now = mesh_sys_now_us() / 1000, until = 0;
    if (ctx->flush || complete || ctx->pub_complete || ctx->publish_pending ||
        !mesh_pace_hold(&ctx->pace, now, &until)) {
        return false;
    }
    hold(ctx, now, until, false);
    return true;
}

static int recompute(struct mesh_sidecar *ctx, int64_t now_ms)
{
    struct mesh_workers_opts o = {ctx->opts.address_mode, ctx->expected, ctx->per_slice};
    struct mesh_err err;
    mesh_err_clear(&err);

    /* Records are borrowed from the store: patch or build under its lock
     * (the worker list copies what it needs). */
    int64_t t0 = mesh_sys_now_us();
    size_t dirty[MESH_SIDECAR_DELTA_MAX], ndirty = 0;
    int rc = 0;
    bool patched = false;
    if (ctx->following) {
        /* Records relayed by a peer, checked as if from the API (relay.c):
         * the list is rebuilt from them, exactly as from an API store. */
        struct mesh_relay_store *rs = mesh_sidecar_relay_store(ctx);
        mesh_relay_store_lock(rs);
        if (ctx->inf == NULL) {
            drop_deltas(ctx); /* else the API watch, starting as a fallback, owns them */
        }
        mesh_workers_cleanup(&ctx->w);
        atomic_fetch_add(&ctx->w_rebuilt, 1);
        size_t n = mesh_relay_store_count(rs);
        const struct mesh_k8s_pod_rec **v = mesh_reallocarray(NULL, n + 1, sizeof(*v));
        for (size_t i = 0; i < n; i++) {
            v[i] = mesh_relay_store_at(rs, i);
        }
        rc = mesh_workers_build(v, n, &o, &ctx->w, &err);
        mesh_free(v);
        mesh_relay_store_unlock(rs);
    } else {
        mesh_k8s_informer_lock(ctx->inf);
        patched = patch_workers(ctx, &o, dirty, &ndirty);
        drop_deltas(ctx);
        if (patched) {
            atomic_fetch_add(&ctx->w_patched, 1);
        } else {
            /* The old list goes first: the peak holds one list, not two. */
            mesh_workers_cleanup(&ctx->w);
            atomic_fetch_add(&ctx->w_rebuilt, 1);
            struct collect col = {0};
            col.cap = mesh_k8s_informer_count(ctx->inf) + 1;
            col.v = mesh_reallocarray(NULL, col.cap, sizeof(*col.v));
            (void)mesh_k8s_informer_foreach(ctx->inf, collect_fn, &col);
            rc = mesh_workers_build(col.v, col.n, &o, &ctx->w, &err);
            mesh_free(col.v);
        }
        mesh_k8s_informer_unlock(ctx->inf);
    }
    ctx->cost_workers_us = mesh_sys_now_us() - t0;
    if (rc < 0) {
        if (strcmp(err.msg, ctx->last_reason) != 0) {
            mesh_error(MOD, "%s", err.msg);
            snprintf(ctx->last_reason, sizeof(ctx->last_reason), "%s", err.msg);
        }
        fail_status(ctx, err.msg);
        mesh_workers_cleanup(&ctx->w);
        return rc;
    }
    /* The render cache may compare only the patched slots when its last
     * input was this list before the patch. */
    bool hint = patched && ctx->w_rendered;
    ctx->w_opts = o;
    ctx->w_rendered = false;
    const struct mesh_workers *w = &ctx->w;
    log_problems(ctx, w);

    /* Our slot rarely moves: check last time's before scanning them all. */
    int self = ctx->self_hint >= 0 && (size_t)ctx->self_hint < w->nworkers &&
                       ctx->pod_name[0] != '\0' &&
                       strcmp(w->workers[ctx->self_hint].pod, ctx->pod_name) == 0
                   ? ctx->self_hint
                   : mesh_workers_index_of(w, ctx->pod_name);
    ctx->self_hint = self;
    bool complete = w->complete;
    char reason[sizeof(ctx->st.reason)];
    if (ctx->expected > 0 && !w->complete) {
        /* Expected vs present first: "3 of 4 workers present; missing 3". */
        snprintf(reason, sizeof(reason), "%d of %d workers present; %s", w->present, ctx->expected,
                 w->reason);
    } else {
        snprintf(reason, sizeof(reason), "%s", w->reason);
    }
    if (complete && self < 0) {
        complete = false;
        snprintf(reason, sizeof(reason), "this pod (%s) is not among the %zu workers",
                 ctx->pod_name, w->nworkers);
    }
    if (complete && ctx->opts.verify_dns && w->mode == MESH_ADDR_DNS) {
        complete = verify_dns(ctx, w, reason, sizeof(reason));
    }
    log_transition(ctx, complete, reason, w);

    if (w->nworkers == 0) {
        /* Nothing to publish (never an empty DTENSOR_JOBS, docs/DESIGN.md §5). */
        set_status(ctx, false, reason, w, false, now_ms);
    } else if (hold_back(ctx, complete)) {
        /* Not rendered: the cache's input stays the last list it saw
         * (w_rendered false), and /readyz shows the current reason. */
        set_status(ctx, false, reason, w, false, now_ms);
    } else {
        uint64_t gen = ctx->generation;
        rc =
            render_and_publish(ctx, w, hint ? dirty : NULL, ndirty, self, complete, reason, now_ms);
        ctx->w_rendered = true; /* after a failure the cache is empty: a full render next */
        if (ctx->generation != gen) {
            int64_t now = mesh_sys_now_us() / 1000;
            mesh_pace_note(&ctx->pace, now, ctx->held > 0 ? ctx->held_since_ms : now);
            ctx->pub_complete = complete;
            pthread_mutex_lock(&ctx->mu);
            ctx->st.pace = ctx->pace;
            pthread_mutex_unlock(&ctx->mu);
        }
        if (!ctx->ready_held) {
            ctx->held = 0;
            ctx->hold_until_ms = 0;
        }
    }
    ctx->have_cur = true;
    return rc;
}

void mesh_sidecar_drop_deltas(struct mesh_sidecar *ctx)
{
    drop_deltas(ctx);
}

void mesh_sidecar_topology_cleanup(struct mesh_sidecar *ctx)
{
    mesh_workers_cleanup(&ctx->w);
    drop_deltas(ctx);
    mesh_render_cache_free(ctx->cache);
    ctx->cache = NULL;
    mesh_publish_dir_close(ctx->pub);
    ctx->pub = NULL;
    ctx->known = 0;
    mesh_free(ctx->dns_ok);
    ctx->dns_ok = NULL;
    ctx->ndns_ok = 0;
    for (size_t j = 0; j < ctx->nlogged; j++) {
        mesh_free(ctx->logged[j]);
    }
    mesh_free(ctx->logged);
    ctx->logged = NULL;
    ctx->nlogged = 0;
}
