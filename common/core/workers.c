/*
 * workers.c - order pods into workers, decide completeness, explain what is
 * missing (docs/DESIGN.md §5; the rules are listed in workers.h). Pure.
 */
#include "workers.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/mem.h"

int mesh_workers_name_cmp(const char *a, const char *b)
{
    while (*a != '\0' && *b != '\0') {
        bool da = *a >= '0' && *a <= '9', db = *b >= '0' && *b <= '9';
        if (da && db) {
            /* Compare the digit runs as numbers: skip leading zeros, then a
             * longer run is larger, then the first differing digit decides. */
            while (*a == '0') {
                a++;
            }
            while (*b == '0') {
                b++;
            }
            size_t la = 0, lb = 0;
            while (a[la] >= '0' && a[la] <= '9') {
                la++;
            }
            while (b[lb] >= '0' && b[lb] <= '9') {
                lb++;
            }
            if (la != lb) {
                return la < lb ? -1 : 1;
            }
            int c = memcmp(a, b, la);
            if (c != 0) {
                return c;
            }
            a += la;
            b += lb;
            continue;
        }
        if (*a != *b) {
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        }
        a++;
        b++;
    }
    return (unsigned char)*a - (unsigned char)*b;
}

static const char *name_of(const struct mesh_k8s_pod_rec *p)
{
    return mesh_k8s_pod_rec_name(p);
}

/* Natural name order, then bytes: a total order on distinct names. */
static int pod_cmp(const struct mesh_k8s_pod_rec *a, const struct mesh_k8s_pod_rec *b)
{
    int c = mesh_workers_name_cmp(name_of(a), name_of(b));
    return c != 0 ? c : strcmp(name_of(a), name_of(b));
}

static int pod_ptr_cmp(const void *x, const void *y)
{
    return pod_cmp(*(const struct mesh_k8s_pod_rec *const *)x,
                   *(const struct mesh_k8s_pod_rec *const *)y);
}

static void sort_by_name(const struct mesh_k8s_pod_rec **v, size_t n)
{
    if (n > 1) {
        qsort(v, n, sizeof(*v), pod_ptr_cmp);
    }
}

static bool is_leaving(const struct mesh_k8s_pod_rec *p)
{
    return mesh_k8s_pod_rec_has(p, MESH_K8S_REC_TERMINATING | MESH_K8S_REC_FINISHED);
}

static void add_problem(struct mesh_workers *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add_problem(struct mesh_workers *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = mesh_vasprintf(fmt, ap);
    va_end(ap);
    w->problems = mesh_reallocarray(w->problems, w->nproblems + 1, sizeof(*w->problems));
    w->problems[w->nproblems++] = s;
}

/* A growable list of records (the few pods a problem line names). */
struct podlist {
    const struct mesh_k8s_pod_rec **v;
    size_t n, cap;
};

static void podlist_add(struct podlist *l, const struct mesh_k8s_pod_rec *p)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = mesh_reallocarray(l->v, l->cap, sizeof(*l->v));
    }
    l->v[l->n++] = p;
}

/* Per-slot state while assigning indices. */
struct slot {
    const struct mesh_k8s_pod_rec *live;    /* first live claimant (name order) */
    const struct mesh_k8s_pod_rec *leaving; /* first terminating/finished claimant (name order) */
    int nlive;                              /* live claimants */
};

/* The worker index a pod claims from its labels, or -1 (none). */
static int local_index(const struct mesh_k8s_pod_rec *p)
{
    return p->completion_index >= 0 ? p->completion_index : p->pod_index;
}

static bool is_sliced(const struct mesh_k8s_pod_rec *p)
{
    return p->job_global_index >= 0 || p->job_index >= 0;
}

static int slice_of(const struct mesh_k8s_pod_rec *p)
{
    if (p->job_global_index >= 0) {
        return p->job_global_index;
    }
    return p->job_index >= 0 ? p->job_index : 0;
}

/* Indices from labels (valid[] in any order): out_idx[i] = the slot pod i
 * claims, or -1 when it is left out (reported, in name order). Returns the
 * number of slots needed when opts->expected is 0 (max(live pods, max
 * index + 1)). */
static long indexed_span(const struct mesh_k8s_pod_rec **valid, size_t n, int per_slice,
                         struct mesh_workers *w, long *out_idx)
{
    long span = 0, live = 0;
    struct podlist out = {0};
    for (size_t i = 0; i < n; i++) {
        const struct mesh_k8s_pod_rec *p = valid[i];
        int li = local_index(p);
        out_idx[i] = -1;
        if (li < 0 || (is_sliced(p) && li >= per_slice)) {
            podlist_add(&out, p);
            continue;
        }
        out_idx[i] = (long)slice_of(p) * per_slice + li;
        if (!is_leaving(p)) {
            live++;
            if (out_idx[i] + 1 > span) {
                span = out_idx[i] + 1;
            }
        }
    }
    sort_by_name(out.v, out.n);
    for (size_t i = 0; i < out.n; i++) {
        const struct mesh_k8s_pod_rec *p = out.v[i];
        if (local_index(p) < 0) {
            add_problem(w, "pod %s left out: no %s or %s label while other pods have one",
                        name_of(p), MESH_K8S_KEY_COMPLETION_INDEX, MESH_K8S_KEY_POD_INDEX);
        } else {
            add_problem(w, "pod %s left out: worker index %d is not below %d hosts per slice",
                        name_of(p), local_index(p), per_slice);
        }
    }
    mesh_free(out.v);
    return span > live ? span : live;
}

/* Append "3,5-9,12" for the indices i with mark[i] set, bounded: the reason
 * line ends in "..." rather than growing without limit. */
static void append_list(struct mesh_buf *b, const char *label, const bool *mark, size_t n)
{
    bool any = false;
    for (size_t i = 0; i < n && !any; i++) {
        any = mark[i];
    }
    if (!any) {
        return;
    }
    if (b->len > 0) {
        (void)mesh_buf_puts(b, "; ", NULL);
    }
    (void)mesh_buf_printf(b, NULL, "%s ", label);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (!mark[i]) {
            continue;
        }
        size_t j = i;
        while (j + 1 < n && mark[j + 1]) {
            j++;
        }
        int rc = j > i ? mesh_buf_printf(b, NULL, "%s%zu-%zu", first ? "" : ",", i, j)
                       : mesh_buf_printf(b, NULL, "%s%zu", first ? "" : ",", i);
        if (rc < 0) {
            return;
        }
        first = false;
        i = j;
    }
}

/* n bytes of the block's string area. The caller sized the block: running
 * out is a programming error, so abort rather than write past it. */
static char *block_reserve(struct mesh_workers_block *b, size_t n)
{
    if (n > (size_t)(b->end - b->next)) {
        abort();
    }
    char *d = b->next;
    b->next += n;
    return d;
}

/* The claimant a slot publishes: a terminating pod yields its index to a
 * live one; two live pods on one index publish neither (incomplete, not
 * wrong). NULL = empty slot. */
static const struct mesh_k8s_pod_rec *chosen(const struct slot *s)
{
    if (s->nlive > 1) {
        return NULL;
    }
    return s->live != NULL ? s->live : s->leaving;
}

static bool has_host(const struct mesh_k8s_pod_rec *p)
{
    return mesh_k8s_pod_rec_hostname_len(p) > 0 && mesh_k8s_pod_rec_subdomain_len(p) > 0;
}

/* String bytes fill_worker puts in the block for p. */
static size_t worker_bytes(const struct mesh_k8s_pod_rec *p)
{
    size_t n = mesh_k8s_pod_rec_name_len(p) + 1 + mesh_k8s_pod_rec_ip_len(p) + 1;
    if (has_host(p)) {
        n += mesh_k8s_pod_rec_hostname_len(p) + 1 + mesh_k8s_pod_rec_subdomain_len(p) + 1;
    }
    return n;
}

static void fill_worker(struct mesh_worker *dst, int index, const struct mesh_k8s_pod_rec *p,
                        struct mesh_workers_block *b)
{
    dst->index = index;
    dst->pod = mesh_workers_block_put(b, name_of(p), mesh_k8s_pod_rec_name_len(p));
    if (has_host(p)) {
        /* <hostname>.<subdomain>: two DNS labels, < MESH_HOST_MAX. */
        size_t hl = mesh_k8s_pod_rec_hostname_len(p), sl = mesh_k8s_pod_rec_subdomain_len(p);
        char *h = block_reserve(b, hl + 1 + sl + 1);
        memcpy(h, mesh_k8s_pod_rec_hostname(p), hl);
        h[hl] = '.';
        memcpy(h + hl + 1, mesh_k8s_pod_rec_subdomain(p), sl);
        h[hl + 1 + sl] = '\0';
        dst->host = h;
    }
    dst->ip = mesh_workers_block_put(b, mesh_k8s_pod_rec_ip(p), mesh_k8s_pod_rec_ip_len(p));
    dst->ready = mesh_k8s_pod_rec_has(p, MESH_K8S_REC_READY);
    dst->terminating = is_leaving(p);
}

/* Why a slot keeps the worker list from being complete (judge's marks). */
enum mark { DUP, MISSING, TERM, NOADDR, NOHOST, NOTREADY, NMARK };

/* Counts present, addressed and ready workers into w and marks each slot
 * that is not a ready worker in m[<mark>][i]. True when every slot holds one
 * live, addressed worker (readiness does not count against completeness). */
static bool mark_slots(struct mesh_workers *w, const struct slot *slots, bool *m[NMARK])
{
    bool ok = true;
    for (size_t i = 0; i < w->nworkers; i++) {
        const struct mesh_worker *wk = &w->workers[i];
        if (slots[i].nlive > 1) {
            m[DUP][i] = true;
            ok = false;
            continue;
        }
        if (wk->pod[0] == '\0') {
            m[MISSING][i] = true;
            ok = false;
            continue;
        }
        if (wk->terminating) {
            m[TERM][i] = true;
            ok = false;
        } else {
            w->present++;
        }
        bool addr = wk->ip[0] != '\0' && (w->mode != MESH_ADDR_DNS || wk->host[0] != '\0');
        if (!addr) {
            /* dns mode: an IP but no spec.hostname/spec.subdomain is a
             * configuration problem, not a pod that is still starting. */
            m[wk->ip[0] != '\0' ? NOHOST : NOADDR][i] = true;
            ok = false;
        } else if (!wk->terminating) {
            w->addressed++;
        }
        if (wk->ready) {
            w->ready++;
        } else {
            m[NOTREADY][i] = true;
        }
    }
    return ok;
}

/* w->reason from the marks, the blocking reason and whether the count is known. */
static void write_reason(struct mesh_workers *w, bool *m[NMARK], bool blocked,
                         const char *blocked_why, bool count_known)
{
    size_t n = w->nworkers;
    struct mesh_buf b;
    mesh_buf_init(&b, sizeof(w->reason) - 4);
    if (!count_known) {
        /* Never "whatever pods exist" (docs/DESIGN.md §5): without a count a
         * missing pod could not be told from a smaller job. The same
         * line however many pods come and go (it is logged once). */
        (void)mesh_buf_puts(&b, MESH_WORKERS_UNKNOWN_COUNT, NULL);
    } else {
        append_list(&b, "missing", m[MISSING], n);
        append_list(&b, "duplicate index", m[DUP], n);
        append_list(&b, "terminating", m[TERM], n);
        append_list(&b, "no address", m[NOADDR], n);
        size_t before = b.len;
        append_list(&b, "dns mode: no spec.hostname/spec.subdomain on", m[NOHOST], n);
        if (b.len > before) {
            (void)mesh_buf_puts(&b,
                                " (they have an IP): use address mode ip "
                                "(tpumesh.dev/address-mode: ip) or give the pods a headless "
                                "Service (spec.hostname + spec.subdomain)",
                                NULL);
        }
        if (blocked && blocked_why != NULL) {
            (void)mesh_buf_printf(&b, NULL, "%s%s", b.len > 0 ? "; " : "", blocked_why);
        }
        append_list(&b, "not ready", m[NOTREADY], n);
    }
    bool cut = b.len + 1 >= b.max;
    snprintf(w->reason, sizeof(w->reason), "%s%s", mesh_buf_str(&b), cut ? "..." : "");
    mesh_buf_cleanup(&b);
}

/* Completeness and the reason line, from the filled slots. */
static void judge(struct mesh_workers *w, const struct slot *slots, bool blocked,
                  const char *blocked_why, bool count_known)
{
    size_t n = w->nworkers;
    bool *m[NMARK];
    for (int k = 0; k < NMARK; k++) {
        m[k] = mesh_calloc(n > 0 ? n : 1, sizeof(bool));
    }
    bool ok = mark_slots(w, slots, m);
    w->complete = ok && n > 0 && !blocked && count_known;
    if (!w->complete) {
        write_reason(w, m, blocked, blocked_why, count_known);
    }
    for (int k = 0; k < NMARK; k++) {
        mesh_free(m[k]);
    }
}

/* A live pod on a slot that more than one live pod claims. */
struct claim {
    long slot;
    const struct mesh_k8s_pod_rec *p;
};

static int claim_cmp(const void *x, const void *y)
{
    const struct claim *a = x, *b = y;
    if (a->slot != b->slot) {
        return a->slot < b->slot ? -1 : 1;
    }
    return pod_cmp(a->p, b->p);
}

static int claim_name_cmp(const void *x, const void *y)
{
    const struct claim *a = x, *b = y;
    return pod_cmp(a->p, b->p);
}

/* Report every index claimed by more than one live pod, naming them all
 * (slot order, names in name order). Only those claimants are sorted. */
static void report_duplicates(struct mesh_workers *w, const struct mesh_k8s_pod_rec **valid,
                              const long *idx, size_t n, const struct slot *slots)
{
    struct claim *c = NULL;
    size_t nc = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= (long)w->nworkers || slots[idx[i]].nlive < 2 ||
            is_leaving(valid[i])) {
            continue;
        }
        if (nc == cap) {
            cap = cap ? cap * 2 : 8;
            c = mesh_reallocarray(c, cap, sizeof(*c));
        }
        c[nc++] = (struct claim){idx[i], valid[i]};
    }
    if (nc > 1) {
        qsort(c, nc, sizeof(*c), claim_cmp);
    }
    for (size_t i = 0; i < nc;) {
        struct mesh_buf b;
        mesh_buf_init(&b, 1024);
        size_t j = i;
        for (; j < nc && c[j].slot == c[i].slot; j++) {
            (void)mesh_buf_printf(&b, NULL, "%s%s", b.len > 0 ? ", " : "", name_of(c[j].p));
        }
        add_problem(w, "index %zu claimed by %d pods (%s): topology stays incomplete",
                    (size_t)c[i].slot, slots[c[i].slot].nlive, mesh_buf_str(&b));
        mesh_buf_cleanup(&b);
        i = j;
    }
    mesh_free(c);
}

/* Natural order (valid[] sorted by name): live pods first, then leaving
 * ones to show what is known about the remaining slots. Live pods beyond
 * `want` are ignored. */
static void place_natural(struct mesh_workers *w, const struct mesh_k8s_pod_rec **valid, size_t n,
                          long want, struct slot *slots)
{
    long next = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const struct mesh_k8s_pod_rec *p = valid[i];
            if (is_leaving(p) != (pass == 1)) {
                continue;
            }
            if (next >= want) {
                if (pass == 0) {
                    add_problem(w, "pod %s ignored: beyond the %ld expected workers", name_of(p),
                                want);
                }
                continue;
            }
            if (pass == 0) {
                slots[next].live = p;
                slots[next].nlive = 1;
            } else {
                slots[next].leaving = p;
            }
            next++;
        }
    }
}

/* Indices from labels, valid[] in any order: each slot keeps its first
 * claimant by name (a compare, not a sort). A live pod beyond `want`
 * blocks completeness (*blocked, with why naming the first by name). */
static void place_indexed(struct mesh_workers *w, const struct mesh_k8s_pod_rec **valid, size_t n,
                          const long *idx, long want, struct slot *slots, bool *blocked, char *why,
                          size_t why_cap)
{
    struct claim *out = NULL;
    size_t nout = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        const struct mesh_k8s_pod_rec *p = valid[i];
        if (idx[i] < 0) {
            continue;
        }
        if (idx[i] >= want) {
            if (!is_leaving(p)) {
                if (nout == cap) {
                    cap = cap ? cap * 2 : 8;
                    out = mesh_reallocarray(out, cap, sizeof(*out));
                }
                out[nout++] = (struct claim){idx[i], p};
            }
            continue;
        }
        struct slot *s = &slots[idx[i]];
        if (is_leaving(p)) {
            if (s->leaving == NULL || pod_cmp(p, s->leaving) < 0) {
                s->leaving = p;
            }
        } else {
            if (s->live == NULL || pod_cmp(p, s->live) < 0) {
                s->live = p;
            }
            s->nlive++;
        }
    }
    if (nout > 1) {
        qsort(out, nout, sizeof(*out), claim_name_cmp);
    }
    for (size_t i = 0; i < nout; i++) {
        add_problem(w, "pod %s has index %ld, out of range for %ld workers", name_of(out[i].p),
                    out[i].slot, want);
    }
    if (nout > 0) {
        snprintf(why, why_cap, "index out of range %ld (pod %s)", out[0].slot, name_of(out[0].p));
        *blocked = true;
    }
    mesh_free(out);
    report_duplicates(w, valid, idx, n, slots);
}

/* dns for the whole job only when every placed pod has hostname and subdomain. */
static enum mesh_addr_mode resolve_mode(const struct mesh_workers *w, enum mesh_addr_mode mode)
{
    if (mode != MESH_ADDR_AUTO) {
        return mode;
    }
    bool all_dns = false;
    for (size_t i = 0; i < w->nworkers; i++) {
        if (w->workers[i].pod[0] == '\0') {
            continue;
        }
        all_dns = w->workers[i].host[0] != '\0';
        if (!all_dns) {
            break;
        }
    }
    return all_dns ? MESH_ADDR_DNS : MESH_ADDR_IP;
}

/* valid[]: the records that are not invalid, in store order. With indices
 * nothing is sorted but the pods a problem line names (O(n)); natural
 * order sorts by name (O(n log n)). */
static int place(struct mesh_workers *w, const struct mesh_k8s_pod_rec **valid, size_t n,
                 const struct mesh_workers_opts *opts, struct mesh_err *err)
{
    bool indexed = false;
    int max_li = -1;
    long live = 0;
    for (size_t i = 0; i < n; i++) {
        int li = local_index(valid[i]);
        indexed = indexed || li >= 0;
        max_li = li > max_li ? li : max_li;
        live += !is_leaving(valid[i]);
    }
    int per_slice = opts->per_slice > 0 ? opts->per_slice : max_li + 1;
    long *idx = mesh_calloc(n > 0 ? n : 1, sizeof(long));
    long want = indexed ? indexed_span(valid, n, per_slice, w, idx) : live;
    if (opts->expected > 0) {
        want = opts->expected;
    }
    if (want > MESH_WORKERS_MAX) {
        mesh_free(idx);
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "%ld workers expected, more than the limit of %d; check "
                            "--expected-workers and %s",
                            want, MESH_WORKERS_MAX, MESH_K8S_KEY_EXPECTED);
    }
    w->nworkers = (size_t)want;
    struct slot *slots = mesh_calloc(want > 0 ? (size_t)want : 1, sizeof(*slots));
    bool blocked = false;
    char why[320] = "";
    if (indexed) {
        place_indexed(w, valid, n, idx, want, slots, &blocked, why, sizeof(why));
    } else {
        sort_by_name(valid, n);
        place_natural(w, valid, n, want, slots);
    }
    /* One block: the workers, then the strings they point to (model.h). */
    size_t bytes = 0;
    for (long i = 0; i < want; i++) {
        const struct mesh_k8s_pod_rec *p = chosen(&slots[i]);
        bytes += p != NULL ? worker_bytes(p) : 0;
    }
    struct mesh_workers_block blk;
    w->workers = mesh_workers_block_alloc((size_t)want, bytes, &blk);
    for (long i = 0; i < want; i++) {
        const struct mesh_k8s_pod_rec *p = chosen(&slots[i]);
        w->workers[i].index = (int)i;
        if (p != NULL) {
            fill_worker(&w->workers[i], (int)i, p, &blk);
        }
    }
    w->mode = resolve_mode(w, opts->mode);
    w->indexed = indexed;
    w->per_slice = per_slice;
    judge(w, slots, blocked, why, opts->expected > 0);
    mesh_free(slots);
    mesh_free(idx);
    return 0;
}

int mesh_workers_build(const struct mesh_k8s_pod_rec *const *pods, size_t npods,
                       const struct mesh_workers_opts *opts, struct mesh_workers *out,
                       struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    out->mode = opts->mode == MESH_ADDR_DNS ? MESH_ADDR_DNS : MESH_ADDR_IP;
    const struct mesh_k8s_pod_rec **valid = mesh_calloc(npods > 0 ? npods : 1, sizeof(*valid));
    struct podlist bad = {0};
    size_t n = 0;
    for (size_t i = 0; i < npods; i++) {
        if (pods[i] == NULL) {
            continue;
        }
        if (mesh_k8s_pod_rec_has(pods[i], MESH_K8S_REC_INVALID)) {
            podlist_add(&bad, pods[i]);
        } else {
            valid[n++] = pods[i];
        }
    }
    /* The result (and the problem lines) must not depend on the order a
     * store hands pods over: every list of names is sorted. */
    sort_by_name(bad.v, bad.n);
    for (size_t i = 0; i < bad.n; i++) {
        add_problem(out, "pod %s left out: %s", name_of(bad.v[i]),
                    mesh_k8s_pod_rec_reason(bad.v[i]));
    }
    mesh_free(bad.v);
    int rc = place(out, valid, n, opts, err);
    mesh_free(valid);
    if (rc < 0) {
        snprintf(out->reason, sizeof(out->reason), "%s", "too many workers expected");
    }
    return rc;
}

void mesh_workers_cleanup(struct mesh_workers *w)
{
    if (w == NULL) {
        return;
    }
    for (size_t i = 0; i < w->nproblems; i++) {
        mesh_free(w->problems[i]);
    }
    mesh_free(w->problems);
    mesh_free(w->workers);
    memset(w, 0, sizeof(*w));
}

struct mesh_worker *mesh_workers_block_alloc(size_t n, size_t string_bytes,
                                             struct mesh_workers_block *b)
{
    if (string_bytes > SIZE_MAX / 2 || n > SIZE_MAX / 2 / sizeof(struct mesh_worker)) {
        abort(); /* no caller can hold that many workers */
    }
    size_t head = n * sizeof(struct mesh_worker);
    char *blk = mesh_malloc(head + string_bytes + 1);
    struct mesh_worker *w = (struct mesh_worker *)(void *)blk;
    for (size_t i = 0; i < n; i++) {
        w[i] = (struct mesh_worker){.index = 0, .pod = "", .host = "", .ip = ""};
    }
    b->next = blk + head;
    b->end = blk + head + string_bytes;
    return w;
}

const char *mesh_workers_block_put(struct mesh_workers_block *b, const char *s, size_t len)
{
    if (len == 0) {
        return "";
    }
    char *d = block_reserve(b, len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

struct mesh_worker *mesh_workers_copy(const struct mesh_worker *src, size_t n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += strlen(src[i].pod) + strlen(src[i].host) + strlen(src[i].ip) + 3;
    }
    struct mesh_workers_block b;
    struct mesh_worker *w = mesh_workers_block_alloc(n, bytes, &b);
    for (size_t i = 0; i < n; i++) {
        w[i] = src[i];
        w[i].pod = mesh_workers_block_put(&b, src[i].pod, strlen(src[i].pod));
        w[i].host = mesh_workers_block_put(&b, src[i].host, strlen(src[i].host));
        w[i].ip = mesh_workers_block_put(&b, src[i].ip, strlen(src[i].ip));
    }
    return w;
}

int mesh_workers_index_of(const struct mesh_workers *w, const char *name)
{
    for (size_t i = 0; i < w->nworkers; i++) {
        if (strcmp(w->workers[i].pod, name) == 0 && name[0] != '\0') {
            return (int)i;
        }
    }
    return -1;
}
