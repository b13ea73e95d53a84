/*
 * render_cache.c - incremental rendering (render.h, mesh_render_cache_*):
 * keeps the last rendered files with each worker's fragment offsets and
 * re-renders only the workers whose values changed, splicing their
 * fragments in. Pure: no I/O. Shares the checks and the writers of render.c
 * through render_int.h, so a patched file is byte-identical to a full
 * render of the same input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "render.h"
#include "render_int.h"

/* ---- incremental rendering ---------------------------------------------------
 *
 * The cache keeps every file it rendered in one buffer with the offset of
 * each worker's fragment, and per worker a 64-bit digest of what the
 * renderers read from it (index, pod, host, ip, ready) plus its facts. An
 * update digests the new list, re-renders the fragments of the workers whose
 * digest changed and splices them in (the tail moves when a length changes),
 * then re-renders every prefix and suffix (a few hundred bytes: generation,
 * completeness, own index, coordinator...). Anything that changes every
 * fragment or the file set (worker count, effective mode, port, completeness)
 * and any input a check rejects take the full render, which then also words
 * the error exactly as mesh_render_all does. Full and incremental renders run
 * the same part writers, and tests/unit/test_render_cache.c checks the bytes
 * against mesh_render_all after every step of long random change sequences.
 *
 * A digest collision (two different workers with equal 64-bit digests) would
 * leave that worker's old bytes in place; the sidecar's previous whole-input
 * hash had the same property. */

/* Above this share of changed workers a full render is cheaper than splicing
 * (each splice may move the tail). */
#define CACHE_SPLICE_MAX_DIV 8

struct cfile {
    char *data; /* owned, NUL-terminated; NULL = never rendered */
    size_t len;
    size_t cap;
    uint32_t *off; /* owned, n + 1 entries (listing files): fragment starts, then the suffix */
};

struct mesh_render_cache {
    struct cfile file[MESH_FILE__COUNT];
    bool valid;    /* the fields below describe the last successful update */
    bool complete; /* env files are current (rendered at the last update) */
    bool slice_only;
    size_t n;
    int nslices, hps; /* the slice facts tpu.env's fragments depend on */
    size_t base_pos;
    uint64_t wdigest;         /* workersDigest of the last update */
    uint64_t *ah;             /* owned, n entries: each worker's address hash */
    enum mesh_addr_mode mode; /* effective */
    int port;
    struct mesh_render_wfacts *f; /* owned, n entries */
    uint64_t *digest;             /* owned, n entries */
    struct mesh_render_wr scratch;
    size_t *changed; /* owned, indices of the changed workers (n / CACHE_SPLICE_MAX_DIV + 1) */
    uint64_t full, patched; /* updates by kind (mesh_render_cache_counts) */
    bool only_ready;        /* the last update changed workers' readiness alone */
};

struct mesh_render_cache *mesh_render_cache_new(void)
{
    struct mesh_render_cache *c = mesh_calloc(1, sizeof(*c));
    mesh_render_wr_init(&c->scratch, 1024);
    return c;
}

static void cache_drop_slots(struct mesh_render_cache *c)
{
    mesh_free(c->f);
    mesh_free(c->digest);
    mesh_free(c->changed);
    mesh_free(c->ah);
    c->ah = NULL;
    c->f = NULL;
    c->digest = NULL;
    c->changed = NULL;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        mesh_free(c->file[i].off);
        c->file[i].off = NULL;
    }
    c->valid = false;
}

void mesh_render_cache_free(struct mesh_render_cache *c)
{
    if (c == NULL) {
        return;
    }
    cache_drop_slots(c);
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        mesh_free(c->file[i].data);
    }
    mesh_free(c->scratch.data);
    mesh_free(c);
}

static inline uint64_t dg_word(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

/* Eight bytes per step, the tail in a register, the length folded in last
 * (so field boundaries count). Reads at most max bytes. */
static inline uint64_t dg_str(uint64_t h, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    const char *b = s;
    size_t left = n;
    while (left >= 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        h = dg_word(h, v);
        b += 8;
        left -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < left; i++) {
        v |= (uint64_t)(unsigned char)b[i] << (8 * i);
    }
    return dg_word(h, v ^ ((uint64_t)n << 48));
}

/* The digest of what the renderers read from a worker; its lowest bit is
 * the readiness, so two digests that differ in that bit alone tell a
 * readiness flip. */
static uint64_t worker_digest(const struct mesh_worker *w)
{
    uint64_t h = dg_word(0x243F6A8885A308D3ULL, (uint64_t)(uint32_t)w->index);
    h = dg_str(h, w->pod, MESH_POD_MAX);
    h = dg_str(h, w->host, MESH_HOST_MAX);
    h = dg_str(h, w->ip, MESH_IP_MAX);
    return (h & ~(uint64_t)1) | (w->ready ? 1u : 0u);
}

/* Replace [a, b) of cf with s[0..m): returns whether the bytes changed.
 * Fragment offsets from first_off on move with the tail. */
static bool cf_splice(struct cfile *cf, size_t nparts, size_t first_off, size_t a, size_t b,
                      const char *s, size_t m)
{
    size_t old = b - a;
    if (m == old && memcmp(cf->data + a, s, m) == 0) {
        return false;
    }
    if (m != old) {
        size_t len = cf->len - old + m;
        if (len + 1 > cf->cap) {
            size_t cap = cf->cap + cf->cap / 4 + m + 1;
            cf->data = mesh_realloc(cf->data, cap);
            cf->cap = cap;
        }
        memmove(cf->data + a + m, cf->data + b, cf->len - b + 1); /* with the NUL */
        cf->len = len;
        if (cf->off != NULL) {
            for (size_t j = first_off; j < nparts; j++) {
                cf->off[j] = (uint32_t)((size_t)cf->off[j] - old + m);
            }
        }
    }
    memcpy(cf->data + a, s, m);
    return true;
}

/* Re-render the prefix, the fragments of the changed workers (ascending)
 * and the suffix of file id; returns PATCH_HEAD when the prefix or suffix
 * changed, plus PATCH_FRAG when a fragment did (0: no byte changed). */
#define PATCH_HEAD 1
#define PATCH_FRAG 2

static int cache_patch_file(struct mesh_render_cache *c, enum mesh_render_file_id id,
                            const struct mesh_render_prep *p, size_t nchanged)
{
    const struct mesh_render_parts *fp = &mesh_render_file_parts[id];
    struct cfile *cf = &c->file[id];
    size_t n = c->n;
    bool listing = fp->frag != NULL;
    size_t nparts = listing ? n + 1 : 0;
    int changed = 0;

    c->scratch.len = 0;
    fp->prefix(&c->scratch, p);
    size_t pre_end = listing ? cf->off[0] : cf->len;
    if (cf_splice(cf, nparts, 0, 0, pre_end, c->scratch.data, c->scratch.len)) {
        changed |= PATCH_HEAD;
    }
    if (listing) {
        for (size_t k = 0; k < nchanged; k++) {
            size_t i = c->changed[k];
            c->scratch.len = 0;
            fp->frag(&c->scratch, p, i);
            if (cf_splice(cf, nparts, i + 1, cf->off[i], cf->off[i + 1], c->scratch.data,
                          c->scratch.len)) {
                changed |= PATCH_FRAG;
            }
        }
    }
    if (fp->suffix != NULL) {
        c->scratch.len = 0;
        fp->suffix(&c->scratch, p);
        size_t suf = listing ? cf->off[n] : pre_end;
        if (cf_splice(cf, nparts, nparts, suf, cf->len, c->scratch.data, c->scratch.len)) {
            changed |= PATCH_HEAD;
        }
    }
    return changed;
}

/* The checks of mesh_render_all that do not read the workers. */
static int check_header(const struct mesh_render_input *in, struct mesh_err *err)
{
    struct mesh_render_input head = *in;
    head.nworkers = 0;
    struct mesh_render_prep p;
    int rc = mesh_render_check_common(&head, &p, err);
    mesh_render_prep_cleanup(&p);
    if (rc == 0) {
        rc = mesh_render_check_slice_terminated(in->slice, err);
    }
    if (rc == 0 && in->complete) {
        int n = mesh_render_expected_of(in);
        if (n == 0 || (size_t)n != in->nworkers || in->self_index < 0 || in->self_index >= n) {
            return -MESH_E_INCOMPLETE; /* the full render words it */
        }
        if (in->slice != NULL) {
            rc = mesh_render_check_slice_tokens(in->slice, err);
        }
    }
    return rc;
}

/* Can in->dirty stand in for comparing every worker? It must fit c->changed
 * (limit entries, the most a patch takes) and name only workers that exist. */
static bool dirty_usable(const struct mesh_render_input *in, size_t limit)
{
    if (in->dirty == NULL || in->ndirty > limit) {
        return false;
    }
    for (size_t k = 0; k < in->ndirty; k++) {
        if (in->dirty[k] >= in->nworkers) {
            return false;
        }
    }
    return true;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Copy src[0..n) to dst sorted, without repeats; returns how many are left. */
static size_t sort_unique(size_t *dst, const size_t *src, size_t n)
{
    if (n == 0) {
        return 0;
    }
    memcpy(dst, src, n * sizeof(*dst));
    qsort(dst, n, sizeof(*dst), cmp_size);
    size_t m = 1;
    for (size_t k = 1; k < n; k++) {
        if (dst[k] != dst[m - 1]) {
            dst[m++] = dst[k];
        }
    }
    return m;
}

/* Fill c->changed with the workers whose digest differs from the cache's
 * (in index order); *content is set when a change is more than readiness.
 * Returns how many, or -1 when more than a patch takes. */
static long find_changed(struct mesh_render_cache *c, const struct mesh_render_input *in,
                         bool *content)
{
    size_t n = in->nworkers, limit = n / CACHE_SPLICE_MAX_DIV + 1, nchanged = 0;
    if (dirty_usable(in, limit)) {
        /* Only the listed workers can differ: compare those, in index
         * order (the splices walk c->changed upwards), each once. */
        size_t m = sort_unique(c->changed, in->dirty, in->ndirty);
        for (size_t k = 0; k < m; k++) {
            size_t i = c->changed[k];
            uint64_t d = worker_digest(&in->workers[i]);
            if (d != c->digest[i]) {
                *content = *content || (d ^ c->digest[i]) != 1;
                c->changed[nchanged++] = i;
            }
        }
        return (long)nchanged;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t d = worker_digest(&in->workers[i]);
        if (d != c->digest[i]) {
            if (nchanged == limit) {
                return -1;
            }
            *content = *content || (d ^ c->digest[i]) != 1;
            c->changed[nchanged++] = i;
        }
    }
    return (long)nchanged;
}

/* check_header saw no workers: the slice split of the real count, and the
 * slice tpu.env lists, must be what the cached fragments assume. */
static bool slices_match(const struct mesh_render_cache *c, const struct mesh_render_input *in)
{
    if (in->slices > 1 && mesh_render_expected_of(in) % in->slices != 0) {
        return false;
    }
    struct mesh_render_prep sl = {.in = in};
    mesh_render_prep_slices(&sl);
    return sl.nslices == c->nslices && sl.hps == c->hps && sl.base_pos == c->base_pos;
}

/* The incremental update; -1 when it cannot apply (the caller renders in
 * full), else the mask of changed files. Touches nothing before it knows it
 * applies. */
static int cache_try_patch(struct mesh_render_cache *c, const struct mesh_render_input *in)
{
    if (!c->valid || in->nworkers != c->n || in->port != c->port || in->complete != c->complete ||
        in->slice_only || c->slice_only || (in->nworkers > 0 && in->workers == NULL)) {
        return -1;
    }
    if (check_header(in, NULL) < 0) {
        return -1;
    }
    if (!slices_match(c, in)) {
        return -1;
    }
    size_t n = in->nworkers;
    enum mesh_addr_mode mode = mesh_render_effective_mode(in->mode, in->workers, n);
    if (mode != c->mode) {
        return -1;
    }
    bool content = false; /* a change beyond readiness */
    long found = find_changed(c, in, &content);
    if (found < 0) {
        return -1;
    }
    size_t nchanged = (size_t)found;
    /* Check the changed workers as the full render would (the others passed
     * it with the same mode and completeness). */
    for (size_t k = 0; k < nchanged; k++) {
        size_t i = c->changed[k];
        const struct mesh_worker *w = &in->workers[i];
        struct mesh_render_wfacts f;
        if (mesh_render_check_worker_facts(w, &f, NULL) < 0) {
            return -1;
        }
        if (in->complete &&
            (w->index != (int)i || (mode == MESH_ADDR_DNS ? f.host_len : f.ip_len) == 0)) {
            return -1;
        }
    }
    for (size_t k = 0; k < nchanged; k++) {
        size_t i = c->changed[k];
        (void)mesh_render_check_worker_facts(&in->workers[i], &c->f[i], NULL);
        c->digest[i] = worker_digest(&in->workers[i]);
    }
    struct mesh_render_prep p = {.in = in, .f = c->f, .mode = mode};
    p.port_len = (size_t)snprintf(p.port, sizeof(p.port), ":%d", in->port);
    mesh_render_prep_slices(&p);
    /* The digest: the changed workers' address hashes, then, when one of
     * them differs (or an index may have moved: incomplete lists), one fold
     * of two multiplications per worker. A readiness flip, or a new IP in
     * dns mode, leaves it as it was. */
    bool refold = !in->complete;
    for (size_t k = 0; k < nchanged; k++) {
        uint64_t h = mesh_render_addr_hash(&p, c->changed[k]);
        refold = refold || h != c->ah[c->changed[k]];
        c->ah[c->changed[k]] = h;
    }
    if (refold) {
        c->wdigest = mesh_render_fold_digest(in->workers, c->ah, n);
    }
    p.digest = c->wdigest;
    int mask = 0;
    for (int id = 0; id < MESH_FILE__COUNT; id++) {
        if (mesh_render_file_parts[id].prefix == NULL || !mesh_render_renders(in, id)) {
            continue;
        }
        int how = cache_patch_file(c, (enum mesh_render_file_id)id, &p, nchanged);
        if (how != 0) {
            mask |= 1 << id;
        }
        if (how & PATCH_HEAD) {
            content = true;
        }
    }
    c->only_ready = mask != 0 && !content && mask == 1 << MESH_FILE_TOPOLOGY_JSON;
    return mask;
}

/* Full render into the cache; files not rendered (env files while
 * incomplete) keep their last bytes. */
static int cache_full(struct mesh_render_cache *c, const struct mesh_render_input *in,
                      struct mesh_err *err)
{
    struct mesh_render_prep p;
    int rc = mesh_render_check_all(in, &p, err);
    if (rc < 0) {
        return rc;
    }
    size_t n = in->nworkers;
    cache_drop_slots(c);
    int mask = 0;
    for (int id = 0; id < MESH_FILE__COUNT; id++) {
        const struct mesh_render_parts *fp = &mesh_render_file_parts[id];
        if (fp->prefix == NULL || !mesh_render_renders(in, id)) {
            continue;
        }
        struct cfile *cf = &c->file[id];
        uint32_t *off = fp->frag != NULL ? mesh_malloc((n + 1) * sizeof(*off)) : NULL;
        char *data;
        size_t len;
        mesh_render_write_file((enum mesh_render_file_id)id, &p, off, &data, &len);
        /* One file at a time: the old bytes are freed before the next file
         * is rendered, so a full render holds at most one extra file. */
        if (cf->data == NULL || cf->len != len || memcmp(cf->data, data, len) != 0) {
            mask |= 1 << id;
        }
        mesh_free(cf->data);
        cf->data = data;
        cf->len = len;
        cf->cap = len + 1;
        cf->off = off;
    }
    c->f = p.f; /* the facts of every worker, kept */
    p.f = NULL;
    c->ah = p.ah; /* and their address hashes */
    p.ah = NULL;
    c->digest = mesh_malloc((n > 0 ? n : 1) * sizeof(*c->digest));
    for (size_t i = 0; i < n; i++) {
        c->digest[i] = worker_digest(&in->workers[i]);
    }
    c->changed = mesh_malloc((n / CACHE_SPLICE_MAX_DIV + 1) * sizeof(*c->changed));
    c->n = n;
    c->mode = p.mode;
    c->port = in->port;
    c->complete = in->complete;
    c->slice_only = in->slice_only;
    c->nslices = p.nslices;
    c->hps = p.hps;
    c->base_pos = p.base_pos;
    c->wdigest = p.digest;
    c->valid = true;
    c->only_ready = false;
    return mask;
}

/* Before a full render: the prefix and suffix of the cached topology.json
 * (copied into one owned buffer, *head_len + *tail_len bytes) when the new
 * input differs from the cached one in workers' readiness alone (same count,
 * completeness and port, each worker's digest equal or different in the
 * readiness bit only, one at least different); NULL otherwise. A burst of
 * readiness flips too large to patch is thus still told a readiness flip,
 * once the full render shows the prefix and suffix unchanged. */
static char *readiness_only_frame(const struct mesh_render_cache *c,
                                  const struct mesh_render_input *in, size_t *head_len,
                                  size_t *tail_len)
{
    const struct cfile *cf = &c->file[MESH_FILE_TOPOLOGY_JSON];
    if (!c->valid || in->nworkers != c->n || in->complete != c->complete || in->port != c->port ||
        in->slice_only || c->slice_only || in->nworkers == 0 || in->workers == NULL ||
        cf->data == NULL || cf->off == NULL) {
        return NULL;
    }
    bool any = false;
    for (size_t i = 0; i < in->nworkers; i++) {
        uint64_t d = worker_digest(&in->workers[i]) ^ c->digest[i];
        if (d > 1) {
            return NULL;
        }
        any = any || d == 1;
    }
    if (!any) {
        return NULL;
    }
    *head_len = cf->off[0];
    *tail_len = cf->len - cf->off[c->n];
    char *frame = mesh_malloc(*head_len + *tail_len + 1);
    memcpy(frame, cf->data, *head_len);
    memcpy(frame + *head_len, cf->data + cf->off[c->n], *tail_len);
    return frame;
}

/* Whether topology.json's prefix and suffix are still those of frame. */
static bool frame_same(const struct mesh_render_cache *c, const char *frame, size_t head_len,
                       size_t tail_len)
{
    const struct cfile *cf = &c->file[MESH_FILE_TOPOLOGY_JSON];
    return cf->data != NULL && cf->off != NULL && cf->off[0] == head_len &&
           cf->len - cf->off[c->n] == tail_len && memcmp(cf->data, frame, head_len) == 0 &&
           memcmp(cf->data + cf->off[c->n], frame + head_len, tail_len) == 0;
}

int mesh_render_cache_update(struct mesh_render_cache *c, const struct mesh_render_input *in,
                             unsigned *out_changed, struct mesh_err *err)
{
    int mask = cache_try_patch(c, in);
    if (mask >= 0) {
        c->patched++;
    } else {
        c->full++;
        size_t head_len = 0, tail_len = 0;
        char *frame = readiness_only_frame(c, in, &head_len, &tail_len);
        mask = cache_full(c, in, err);
        if (mask >= 0 && frame != NULL) {
            c->only_ready =
                mask == 1 << MESH_FILE_TOPOLOGY_JSON && frame_same(c, frame, head_len, tail_len);
        }
        mesh_free(frame);
        if (mask < 0) {
            /* Forget everything: the next update renders in full and
             * reports every file it renders as changed. */
            cache_drop_slots(c);
            c->only_ready = false;
            for (int i = 0; i < MESH_FILE__COUNT; i++) {
                mesh_free(c->file[i].data);
                c->file[i].data = NULL;
                c->file[i].len = 0;
                c->file[i].cap = 0;
            }
            return mask;
        }
    }
    if (out_changed != NULL) {
        *out_changed = (unsigned)mask;
    }
    return 0;
}

void mesh_render_cache_view(const struct mesh_render_cache *c, struct mesh_render_out *out)
{
    mesh_render_out_init(out);
    if (!c->valid) {
        return;
    }
    for (int id = 0; id < MESH_FILE__COUNT; id++) {
        bool shown =
            id == MESH_FILE_TOPOLOGY_JSON ||
            (c->complete && (!c->slice_only || id == MESH_FILE_TPU_ENV || id == MESH_FILE_JAX_ENV));
        if (c->file[id].data != NULL && shown) {
            out->data[id] = c->file[id].data;
            out->len[id] = c->file[id].len;
        }
    }
}

void mesh_render_cache_counts(const struct mesh_render_cache *c, uint64_t *out_full,
                              uint64_t *out_patched)
{
    *out_full = c->full;
    *out_patched = c->patched;
}

bool mesh_render_cache_is_readiness_only(const struct mesh_render_cache *c)
{
    return c->only_ready;
}

int mesh_render_cache_set_generation(struct mesh_render_cache *c,
                                     const struct mesh_render_input *in, struct mesh_err *err)
{
    if (!c->valid) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "nothing rendered to move to a new generation");
    }
    if (in->generation > MESH_RENDER_GENERATION_MAX) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "generation %llu is too large",
                            (unsigned long long)in->generation);
    }
    /* Only topology.json shows the generation, in its prefix. */
    struct mesh_render_prep p = {.in = in, .f = c->f, .mode = c->mode};
    p.port_len = (size_t)snprintf(p.port, sizeof(p.port), ":%d", in->port);
    mesh_render_prep_slices(&p);
    p.digest = c->wdigest;
    (void)cache_patch_file(c, MESH_FILE_TOPOLOGY_JSON, &p, 0);
    return 0;
}
