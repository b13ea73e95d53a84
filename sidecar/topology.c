/*
 * topology.c - the sidecar's core loop step: informer store -> worker list
 * (workers.c) -> rendered files (render.c) -> atomic publish (publish.c),
 * only when an output actually changes (docs/DESIGN.md §4-§5), plus the
 * transition log lines and the status the HTTP thread serves.
 *
 * An event costs the event: the informer callbacks (informer thread) only
 * count it, noting whether it changed nothing but a pod's readiness. A
 * recompute (main thread) of nothing but readiness changes of a complete,
 * published topology is held back by the pacing (core/pace.h) before any
 * work; everything else builds the worker list from the store, renders the
 * files (render.h, straight from the list) and compares them with the
 * current version on disk: only when a file differs is the set published at
 * generation + 1 (files whose bytes did not change are hard-linked, same
 * inode and mtime).
 *
 * Publishes are paced (core/pace.h): the first one, every change of
 * "complete" and every address or membership change of a complete topology
 * go out at once; the routine ones (an incomplete topology after an
 * incomplete one, which changes only topology.json, and readiness-only
 * changes of a complete one) wait 1 s after the first publish, and twice as
 * long after each further one, up to 16 s, until a change comes 16 s or more
 * after the last publish. What is held back is counted and folded into the
 * next publish.
 *
 * The worker list of the last publish is kept (ctx->w, with the input it was
 * rendered from) for the gRPC Topology service, which builds its message
 * from it only when someone asks (grpc.c).
 */
#include <netdb.h>
#include <stddef.h>
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
#include "k8s_informer.h"
#include "io/log.h"
#include "io/publish.h"
#include "relay_client.h"
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
     * is not a worker (jobid.c), whether the selector was derived or given
     * (the manifests give the derived one: a pod with the job's name label
     * and no owner is what anyone who may create pods can make). Another
     * slice's Job is checked to be the same JobSet's with one GET per Job
     * (remembered either way). An API failure keeps the pod: the API
     * cannot tell now, and a peer's pod must not vanish from the job for
     * it. */
    char why[256];
    if (ctx->job.known &&
        mesh_sidecar_job_same_direct(ctx, &p, why, sizeof(why)) == -MESH_E_INVAL) {
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
 * (the earliest such time until a recompute takes it), then count it, and
 * count it again as a readiness-only change when it is one. */
static void note_change(struct mesh_sidecar *ctx, bool readiness_only)
{
    int64_t t = mesh_k8s_informer_event_time_us(ctx->inf);
    pthread_mutex_lock(&ctx->chg_mu);
    if (t > 0 && (ctx->pending_since_us == 0 || t < ctx->pending_since_us)) {
        ctx->pending_since_us = t;
    }
    atomic_fetch_add(&ctx->changes, 1);
    if (readiness_only) {
        atomic_fetch_add(&ctx->ready_changes, 1);
    }
    pthread_mutex_unlock(&ctx->chg_mu);
}

void mesh_sidecar_on_add(void *vctx, const char *key, const void *rec)
{
    struct mesh_sidecar *ctx = vctx;
    (void)key;
    (void)rec;
    atomic_fetch_add(&ctx->ev_added, 1);
    note_change(ctx, false);
}

void mesh_sidecar_on_update(void *vctx, const char *key, const void *old_rec, const void *new_rec)
{
    struct mesh_sidecar *ctx = vctx;
    (void)key;
    atomic_fetch_add(&ctx->ev_modified, 1);
    if (!mesh_k8s_pod_rec_equal(old_rec, new_rec)) {
        note_change(ctx, mesh_k8s_pod_rec_ready_flip(old_rec, new_rec));
    }
}

void mesh_sidecar_on_delete(void *vctx, const char *key, const void *old_rec)
{
    struct mesh_sidecar *ctx = vctx;
    (void)key;
    (void)old_rec;
    atomic_fetch_add(&ctx->ev_deleted, 1);
    note_change(ctx, false);
}

void mesh_sidecar_on_synced(void *vctx, size_t count)
{
    struct mesh_sidecar *ctx = vctx;
    (void)count;
    atomic_fetch_add(&ctx->syncs, 1);
    note_change(ctx, false);
}

/* ---- helpers ---- */

int mesh_sidecar_recs_add(void *c, const char *key, const char *rv, const void *rec)
{
    struct mesh_sidecar_recs *col = c;
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

/* The publish is counted while the lock that /metrics reads under is held
 * around the swap of "..data": a reader that saw the new files sees the
 * count (tidying up after the swap can take a while on a busy machine). */
static void count_publish(void *vctx, enum mesh_publish_swap at)
{
    struct mesh_sidecar *ctx = vctx;
    if (at == MESH_PUBLISH_SWAP_BEGIN) {
        pthread_mutex_lock(&ctx->mu);
        return;
    }
    if (at == MESH_PUBLISH_SWAP_DONE) {
        ctx->st.publishes++;
        ctx->st.last_publish_time = (double)ctx->publish_wall_ms / 1000.0;
    }
    pthread_mutex_unlock(&ctx->mu);
}

/* Publish every file of out as a new version: those in `differ` are
 * written without a comparison (they were just compared), the others are
 * hard-linked when equal to the current version's; files not rendered are
 * carried over from it. The publisher is opened on the first publish (that
 * removes what a killed predecessor left) and kept. */
static int publish(struct mesh_sidecar *ctx, const struct mesh_render_out *out, unsigned differ,
                   size_t *written, struct mesh_err *err)
{
    struct mesh_publish_file files[MESH_FILE__COUNT];
    size_t n = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (out->data[i] != NULL) {
            files[n].name = mesh_render_file_name(i);
            files[n].data = out->data[i];
            files[n].len = out->len[i];
            files[n].differs = (differ & (1u << i)) != 0;
            n++;
        }
    }
    if (ctx->pub == NULL) {
        ctx->pub = mesh_publish_dir_open(ctx->opts.out_dir, err);
        if (ctx->pub == NULL) {
            return err->code != 0 ? -err->code : -MESH_E_PUBLISH;
        }
        mesh_publish_dir_on_swap(ctx->pub, count_publish, ctx);
    }
    return mesh_publish_dir_commit(ctx->pub, files, n, written, err);
}

static void set_status(struct mesh_sidecar *ctx, bool ready, const char *reason,
                       const struct mesh_workers *w)
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

/* A recompute failed: logged once for as long as the reason stays. */
static void failed(struct mesh_sidecar *ctx, const char *why)
{
    if (strcmp(why, ctx->last_reason) != 0) {
        mesh_error(MOD, "%s", why);
        snprintf(ctx->last_reason, sizeof(ctx->last_reason), "%s", why);
    }
    fail_status(ctx, why);
}

/* Publish out (rendered at generation + 1; `differ`: the files whose bytes
 * are not on disk) as the next version. */
static int publish_next(struct mesh_sidecar *ctx, const struct mesh_render_out *out,
                        unsigned differ, size_t *written, int64_t now_ms)
{
    struct mesh_err err;
    mesh_err_clear(&err);
    int64_t t1 = mesh_sys_now_us();
    ctx->publish_wall_ms = now_ms; /* count_publish's timestamp */
    int rc = publish(ctx, out, differ, written, &err);
    ctx->renamed_us = mesh_sys_now_us();
    if (rc == 0 && *written > 0) {
        /* The files are visible from the swap of "..data" on; the commit
         * then tidied up (symlinks, the version before last). */
        int64_t swapped = mesh_publish_dir_swapped_us(ctx->pub);
        if (swapped > 0 && swapped <= ctx->renamed_us) {
            ctx->renamed_us = swapped;
        }
    }
    ctx->cost_write_us = ctx->renamed_us - t1;
    if (rc < 0) {
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
    ctx->generation++;
    return 0;
}

/* Which files of out (rendered at generation + 1) differ from the current
 * version on disk. topology.json always does by its generation: it counts
 * when another file differs, else when its rendering at the current
 * generation is not what is on disk (a readiness change touches it alone). */
static int files_differ(struct mesh_sidecar *ctx, struct mesh_render_input *in,
                        const struct mesh_render_out *out, unsigned *differ, struct mesh_err *err)
{
    const int topo = MESH_FILE_TOPOLOGY_JSON;
    *differ = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (i != topo && out->data[i] != NULL &&
            !mesh_publish_is_current(ctx->opts.out_dir, mesh_render_file_name(i), out->data[i],
                                     out->len[i])) {
            *differ |= 1u << i;
        }
    }
    if (*differ == 0) {
        in->generation = ctx->generation;
        char *cur = NULL;
        size_t len = 0;
        int rc = mesh_render_topology_json(in, &cur, &len, err);
        in->generation = ctx->generation + 1;
        if (rc < 0) {
            return rc;
        }
        if (mesh_publish_is_current(ctx->opts.out_dir, mesh_render_file_name(topo), cur, len)) {
            mesh_free(cur);
            return 0;
        }
        mesh_free(cur);
    }
    *differ |= 1u << topo;
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

/* Hold this recompute back, before any work (true), when every change it
 * carries is a peer's readiness (or it is the due time of such changes held
 * back), the topology built last and the last publish are both complete,
 * and the pacing (core/pace.h) says it must wait. Readiness is never
 * required (docs/DESIGN.md §5), so such changes cannot change completeness
 * and touch topology.json alone. */
static bool hold_ready(struct mesh_sidecar *ctx, bool ready_only)
{
    int64_t now = mesh_sys_now_us() / 1000, until = 0;
    if (!ready_only || ctx->flush || !ctx->have_cur || !ctx->last_complete || !ctx->pub_complete ||
        ctx->publish_pending || !mesh_pace_hold(&ctx->pace, now, &until)) {
        ctx->ready_held = false;
        return false;
    }
    ctx->ready_held = true;
    hold(ctx, now, until, true);
    return true;
}

/* The line of a publish just made; a readiness-only publish is routine:
 * debug level, not one info line per flip. */
static void log_publish(const struct mesh_sidecar *ctx, size_t written, bool complete,
                        bool ready_only)
{
    char held[96] = "";
    if (ctx->held > 0) {
        snprintf(held, sizeof(held), "; %llu recompute%s over %lld ms coalesced into it",
                 (unsigned long long)ctx->held, ctx->held == 1 ? "" : "s",
                 (long long)(mesh_sys_now_us() / 1000 - ctx->held_since_ms));
    }
    mesh_log(ready_only && ctx->held == 0 ? MESH_LOG_DEBUG : MESH_LOG_INFO, MOD,
             "published generation %llu (%zu file%s rewritten, %.1f ms after the %s%s): %s",
             (unsigned long long)ctx->generation, written, written == 1 ? "" : "s",
             (double)(ctx->renamed_us - ctx->publish_from_us) / 1000.0,
             ctx->publish_from_event ? "change arrived" : "retry began", held,
             complete ? "complete" : "incomplete, env files keep the last complete version");
}

/* Render the set for w at the current generation and compare each file
 * with the current version on disk; when one differs, publish the set at
 * generation + 1. On a publish, w moves into ctx->w (the published list)
 * and in into ctx->pub_in. */
static int render_and_publish(struct mesh_sidecar *ctx, struct mesh_workers *w, int self,
                              bool complete, const char *reason, int64_t now_ms, bool ready_only)
{
    struct mesh_render_input in = {
        .slice = ctx->have_slice ? &ctx->slice : NULL,
        .workers = w->workers,
        .nworkers = w->nworkers,
        .expected = (int)w->nworkers,
        .self_index = self,
        .job_name = ctx->job_name[0] ? ctx->job_name : NULL,
        .port = ctx->opts.port,
        .mode = w->mode,
        .generation = ctx->generation + 1, /* what a publish would be */
        .complete = complete,
        .slices = slice_count(ctx, w),
        .megascale_port = ctx->self.megascale_port > 0 ? ctx->self.megascale_port : 0,
        .jax_port = ctx->self.jax_port > 0 ? ctx->self.jax_port : 0,
        .expected_source = ctx->expected_source[0] ? ctx->expected_source : NULL,
        .present = w->present,
    };
    struct mesh_err err;
    mesh_err_clear(&err);
    int64_t t0 = mesh_sys_now_us();
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    unsigned differ = 0;
    int rc = mesh_render_all(&in, &out, &err);
    if (rc == 0) {
        rc = files_differ(ctx, &in, &out, &differ, &err);
    }
    if (rc < 0) {
        mesh_render_out_cleanup(&out);
        char why[MESH_ERR_MSG_MAX + 32];
        snprintf(why, sizeof(why), "cannot render the topology: %s", err.msg);
        failed(ctx, why);
        return rc;
    }
    ctx->cost_render_us = mesh_sys_now_us() - t0;
    bool published = false;
    size_t written = 0;
    if (differ != 0) {
        rc = publish_next(ctx, &out, differ, &written, now_ms);
        published = rc == 0;
    }
    if (!published) {
        in.generation = ctx->generation;
    }
    mesh_render_out_cleanup(&out);
    if (rc < 0) {
        return rc;
    }
    remember(ctx);
    if (published || !ctx->have_pub) {
        /* The list the files on disk show (grpc.c builds from it). */
        mesh_workers_cleanup(&ctx->w);
        ctx->w = *w;
        memset(w, 0, sizeof(*w));
        ctx->pub_in = in;
        ctx->pub_in.workers = ctx->w.workers;
        ctx->have_pub = true;
    }
    if (published) {
        log_publish(ctx, written, complete, ready_only);
    }

    const struct mesh_workers *shown = w->workers != NULL ? w : &ctx->w;
    char line[sizeof(ctx->st.reason)];
    if (complete) {
        snprintf(line, sizeof(line), "ok: generation %llu, %zu workers, %d ready",
                 (unsigned long long)ctx->generation, shown->nworkers, shown->ready);
    } else {
        snprintf(line, sizeof(line), "%s", reason);
    }
    set_status(ctx, complete, line, shown);
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

static int recompute(struct mesh_sidecar *ctx, int64_t now_ms, bool ready_only);

int mesh_sidecar_recompute(struct mesh_sidecar *ctx, int64_t now_ms, int64_t woke_us)
{
    /* Every change counted so far is in the store, so this recompute sees
     * it: take its arrival time with it (note_change's pair, reversed). */
    pthread_mutex_lock(&ctx->chg_mu);
    uint64_t changes = atomic_load(&ctx->changes);
    uint64_t ready = atomic_load(&ctx->ready_changes);
    int64_t since = ctx->pending_since_us;
    ctx->pending_since_us = 0;
    pthread_mutex_unlock(&ctx->chg_mu);
    uint64_t n = changes - ctx->changes_seen;
    /* Only readiness changed since the last recompute, or this is the due
     * time of readiness changes held back. */
    bool ready_only = n > 0 ? n == ready - ctx->ready_seen : ctx->ready_held;
    ctx->changes_seen = changes;
    ctx->ready_seen = ready;

    uint64_t gen = ctx->generation;
    ctx->publish_from_us = since > 0 ? since : woke_us;
    ctx->publish_from_event = since > 0;
    int rc = recompute(ctx, now_ms, ready_only);
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

/* The worker list from the current source's records (borrowed under its
 * lock: the list copies what it needs). */
static int build_workers(struct mesh_sidecar *ctx, struct mesh_workers *w, struct mesh_err *err)
{
    struct mesh_workers_opts o = {ctx->opts.address_mode, ctx->expected, ctx->per_slice};
    struct mesh_sidecar_recs col = {0};
    int rc;
    atomic_fetch_add(&ctx->w_built, 1);
    if (ctx->following) {
        /* Records relayed by a peer, checked as if from the API (relay.c). */
        struct mesh_relay_store *rs = mesh_sidecar_relay_store(ctx);
        mesh_relay_store_lock(rs);
        size_t n = mesh_relay_store_count(rs);
        col.v = mesh_reallocarray(NULL, n + 1, sizeof(*col.v));
        for (size_t i = 0; i < n; i++) {
            col.v[col.n++] = mesh_relay_store_at(rs, i);
        }
        rc = mesh_workers_build(col.v, col.n, &o, w, err);
        mesh_relay_store_unlock(rs);
    } else {
        mesh_k8s_informer_lock(ctx->inf);
        col.cap = mesh_k8s_informer_count(ctx->inf) + 1;
        col.v = mesh_reallocarray(NULL, col.cap, sizeof(*col.v));
        (void)mesh_k8s_informer_foreach(ctx->inf, mesh_sidecar_recs_add, &col);
        rc = mesh_workers_build(col.v, col.n, &o, w, err);
        mesh_k8s_informer_unlock(ctx->inf);
    }
    mesh_free(col.v);
    return rc;
}

static int recompute(struct mesh_sidecar *ctx, int64_t now_ms, bool ready_only)
{
    if (hold_ready(ctx, ready_only)) {
        return 0;
    }
    struct mesh_err err;
    mesh_err_clear(&err);
    int64_t t0 = mesh_sys_now_us();
    struct mesh_workers w;
    int rc = build_workers(ctx, &w, &err);
    ctx->cost_workers_us = mesh_sys_now_us() - t0;
    if (rc < 0) {
        failed(ctx, err.msg);
        mesh_workers_cleanup(&w);
        return rc;
    }
    log_problems(ctx, &w);

    /* Our slot rarely moves: check last time's before scanning them all. */
    int self = ctx->self_hint >= 0 && (size_t)ctx->self_hint < w.nworkers &&
                       ctx->pod_name[0] != '\0' &&
                       strcmp(w.workers[ctx->self_hint].pod, ctx->pod_name) == 0
                   ? ctx->self_hint
                   : mesh_workers_index_of(&w, ctx->pod_name);
    ctx->self_hint = self;
    bool complete = w.complete;
    char reason[sizeof(ctx->st.reason)];
    if (ctx->expected > 0 && !w.complete) {
        /* Expected vs present first: "3 of 4 workers present; missing 3". */
        snprintf(reason, sizeof(reason), "%d of %d workers present; %s", w.present, ctx->expected,
                 w.reason);
    } else {
        snprintf(reason, sizeof(reason), "%s", w.reason);
    }
    if (complete && self < 0) {
        complete = false;
        snprintf(reason, sizeof(reason), "this pod (%s) is not among the %zu workers",
                 ctx->pod_name, w.nworkers);
    }
    if (complete && ctx->opts.verify_dns && w.mode == MESH_ADDR_DNS) {
        complete = verify_dns(ctx, &w, reason, sizeof(reason));
    }
    log_transition(ctx, complete, reason, &w);

    if (w.nworkers == 0) {
        /* Nothing to publish (never an empty DTENSOR_JOBS, docs/DESIGN.md §5). */
        set_status(ctx, false, reason, &w);
    } else if (hold_back(ctx, complete)) {
        /* Not rendered; /readyz shows the current reason. */
        set_status(ctx, false, reason, &w);
    } else {
        uint64_t gen = ctx->generation;
        rc = render_and_publish(ctx, &w, self, complete, reason, now_ms, ready_only);
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
    mesh_workers_cleanup(&w);
    ctx->have_cur = true;
    return rc;
}

void mesh_sidecar_topology_cleanup(struct mesh_sidecar *ctx)
{
    mesh_workers_cleanup(&ctx->w);
    ctx->have_pub = false;
    mesh_publish_dir_close(ctx->pub);
    ctx->pub = NULL;
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
