/*
 * render.c - renderers for the files of the shared volume (docs/DESIGN.md §4-§5)
 * and the validation and shell quoting that make them safe to source.
 *
 * Scope: pure transforms from struct mesh_render_input to bytes. Every value
 * that reaches a file has been checked against a strict grammar first; the
 * env files additionally single-quote every value. Output is deterministic:
 * same input, same bytes (stable key order, no clocks), so the publisher can
 * skip unchanged files and the sidecar can diff inputs.
 *
 * Cost: the sidecar re-renders on every relevant pod change, so a render is
 * one validation pass over the workers (facts kept per worker) and then
 * writers that copy known lengths into one pre-sized block per file; no
 * JSON tree, no per-entry printf. Linear in the workers.
 */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/cleanup.h"
#include "core/mem.h"
#include "core/names.h"
#include "render.h"

/* What the one validation pass of a render learns about a worker, so the
 * writers copy known lengths instead of measuring and checking every string
 * again for every file. */
struct wfacts {
    uint16_t pod_len;  /* < MESH_POD_MAX */
    uint16_t host_len; /* < MESH_HOST_MAX */
    uint8_t ip_len;    /* < MESH_IP_MAX */
    bool host_v6;      /* host is an IPv6 literal: "[host]:port" */
    bool ip_v6;
};

/* A checked input, ready for the writers. */
struct prep {
    const struct mesh_render_input *in;
    struct wfacts *f;         /* owned; one per worker, NULL when there are none */
    enum mesh_addr_mode mode; /* effective: dns or ip */
    size_t text_bytes;        /* sum of every worker's pod, host and ip lengths */
    size_t addr_bytes;        /* sum of the bare addresses in mode */
    char port[8];             /* ":<port>" of in->port */
    size_t port_len;
    /* Slices (render.h): derived by prep_slices. */
    int nslices;     /* >= 1 */
    int total;       /* workers of the whole job (expected_of) */
    int hps;         /* hosts per slice */
    int self_slice;  /* this pod's slice, -1 = unknown */
    int base_idx;    /* global index of this pod's slice's worker 0 (0 when unknown) */
    size_t base_pos; /* its position in workers[] */
    uint64_t digest; /* workersDigest, set by prep_digest */
};

struct wr {
    char *data; /* owned */
    size_t len;
    size_t cap; /* > len: room for the NUL */
};

/* Each text file as a prefix, one fragment per worker (its separator
 * included) and a suffix (topology.pb is binary, not rendered here; jax.env
 * names worker 0 only: it is all prefix). */
struct parts {
    size_t (*hint)(const struct prep *p);
    void (*prefix)(struct wr *w, const struct prep *p);
    void (*frag)(struct wr *w, const struct prep *p, size_t i); /* NULL: no list */
    void (*suffix)(struct wr *w, const struct prep *p);         /* NULL: none */
};

static void write_file(enum mesh_render_file_id id, const struct prep *p, char **out_data,
                       size_t *out_len);

/* "[" + IPv6 + "]:" + port, or a 253-byte host name + ":65535". */
#define ADDR_MAX (MESH_HOST_MAX + 16)

static const char *const file_names[MESH_FILE__COUNT] = {
    [MESH_FILE_DTENSOR_ENV] = "dtensor.env", [MESH_FILE_TF_CONFIG] = "tf_config.json",
    [MESH_FILE_TPU_ENV] = "tpu.env",         [MESH_FILE_JAX_ENV] = "jax.env",
    [MESH_FILE_TOPOLOGY_PB] = "topology.pb", [MESH_FILE_TOPOLOGY_JSON] = "topology.json",
};

const char *mesh_render_file_name(enum mesh_render_file_id id)
{
    if ((int)id < 0 || id >= MESH_FILE__COUNT) {
        return NULL;
    }
    return file_names[id];
}

void mesh_render_out_init(struct mesh_render_out *out)
{
    memset(out, 0, sizeof(*out));
}

void mesh_render_out_cleanup(struct mesh_render_out *out)
{
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        mesh_free(out->data[i]);
        out->data[i] = NULL;
        out->len[i] = 0;
    }
}

/* ---- validation -------------------------------------------------------- */

/* C-string forms of the names.h checks, as workers and slices hold their
 * values: each reads at most its field's bound. A dotted-digits host name is
 * syntactically fine here: every character is safe in an env file, and
 * tpumesh-init refuses such host names earlier. */
static bool is_hostname(const char *s)
{
    return s != NULL && mesh_names_is_dns_name(s, strnlen(s, MESH_HOST_MAX), false, false);
}

static bool is_ip(const char *s, bool *out_v6)
{
    return s != NULL && mesh_names_is_ip(s, strnlen(s, MESH_IP_MAX), out_v6);
}

static bool is_pod_name(const char *s)
{
    return s != NULL && mesh_names_is_k8s_name(s, strnlen(s, MESH_POD_MAX));
}

/* A printable, bounded rendition of an untrusted value for error messages:
 * control characters, quotes and backslashes become \xNN, long values are
 * cut with "...". */
static void escape_for_msg(const char *s, size_t max_in, char *out, size_t out_size)
{
    size_t o = 0;
    size_t i = 0;
    for (; i < max_in && s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 5 >= out_size) {
            break;
        }
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\'' || c == '\\') {
            o += (size_t)snprintf(out + o, out_size - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    /* Stopped early (output full), or s goes on beyond max_in bytes. When
     * i == max_in, s is a NUL-terminated string (fields stop earlier). */
    bool more = i < max_in ? s[i] != '\0' : strnlen(s, max_in + 1) > max_in;
    if (more && o + 4 < out_size) {
        memcpy(out + o, "...", 4);
    }
}

static int bad_field(struct mesh_err *err, int index, const char *field, const char *value,
                     size_t cap, const char *want)
{
    char shown[96];
    escape_for_msg(value, cap, shown, sizeof(shown));
    return mesh_err_set(err, MESH_E_INVAL, 0, "worker %d: %s \"%s\" is not %s", index, field, shown,
                        want);
}

int mesh_render_check_worker(const struct mesh_worker *w, struct mesh_err *err)
{
    /* Each field must end within its bound before anything reads it (right
     * whether the fields are arrays of that size or pointers to strings). */
    if (strnlen(w->host, MESH_HOST_MAX) >= MESH_HOST_MAX ||
        strnlen(w->ip, MESH_IP_MAX) >= MESH_IP_MAX ||
        strnlen(w->pod, MESH_POD_MAX) >= MESH_POD_MAX) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "worker %d: a field is not terminated", w->index);
    }
    if (w->host[0] != '\0' && !is_hostname(w->host) && !is_ip(w->host, NULL)) {
        return bad_field(err, w->index, "host", w->host, MESH_HOST_MAX,
                         "a valid RFC 1123 host name or IP address; fix the pod's "
                         "hostname/subdomain or TPU_WORKER_HOSTNAMES");
    }
    if (w->ip[0] != '\0' && !is_ip(w->ip, NULL)) {
        return bad_field(err, w->index, "ip", w->ip, MESH_IP_MAX, "an IPv4 or IPv6 address");
    }
    if (w->pod[0] != '\0' && !is_pod_name(w->pod)) {
        return bad_field(err, w->index, "pod", w->pod, MESH_POD_MAX,
                         "a valid Kubernetes pod name (RFC 1123 subdomain)");
    }
    return 0;
}

int mesh_render_shell_quote(struct mesh_buf *out, const char *s, struct mesh_err *err)
{
    int rc = mesh_buf_puts(out, "'", err);
    for (const char *p = s; rc == 0 && *p != '\0'; p++) {
        /* Inside single quotes sh takes every byte literally except the
         * closing quote: end the quoting, add an escaped quote, reopen. */
        if (*p == '\'') {
            rc = mesh_buf_puts(out, "'\\''", err);
        } else {
            rc = mesh_buf_append(out, p, 1, err);
        }
    }
    if (rc == 0) {
        rc = mesh_buf_puts(out, "'", err);
    }
    return rc;
}

/* ---- addresses ---------------------------------------------------------- */

/* The bare address (no port) of w in mode, or NULL when it has none. */
static const char *worker_bare(const struct mesh_worker *w, enum mesh_addr_mode mode)
{
    const char *a = mode == MESH_ADDR_DNS ? w->host : w->ip;
    return a[0] != '\0' ? a : NULL;
}

static int host_port(const char *host, int port, char *out, size_t out_size, struct mesh_err *err)
{
    bool v6 = false;
    int n;
    if (is_ip(host, &v6) && v6) {
        n = snprintf(out, out_size, "[%s]:%d", host, port);
    } else {
        n = snprintf(out, out_size, "%s:%d", host, port);
    }
    if (n < 0 || (size_t)n >= out_size) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "address of '%.64s' is too long", host);
    }
    return 0;
}

int mesh_render_worker_address(const struct mesh_worker *w, enum mesh_addr_mode mode, int port,
                               char *out, size_t out_size, struct mesh_err *err)
{
    const char *bare = worker_bare(w, mode);
    if (bare == NULL) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", w->index,
                            mode == MESH_ADDR_DNS ? "host name" : "pod IP");
    }
    return host_port(bare, port, out, out_size, err);
}

/* ---- input checks -------------------------------------------------------- */

static int expected_of(const struct mesh_render_input *in)
{
    if (in->slice_only) {
        /* Checked in check_common: 2 <= slices, nworkers <= the limit. */
        long long total = (long long)(in->slices > 1 ? in->slices : 1) * (long long)in->nworkers;
        return total > MESH_RENDER_MAX_WORKERS ? MESH_RENDER_MAX_WORKERS : (int)total;
    }
    return in->expected > 0 ? in->expected : (int)in->nworkers;
}

static const char *job_name_of(const struct mesh_render_input *in)
{
    if (in->job_name != NULL && in->job_name[0] != '\0') {
        return in->job_name;
    }
    /* DTensor's own default, "localhost" for exactly one
     * client, else "worker"; every client must agree, so derive it from
     * the job size, which all pods share. */
    return expected_of(in) == 1 ? "localhost" : "worker";
}

/* The slice facts of a checked input (check_common has ruled out the
 * inconsistent ones). */
static void prep_slices(struct prep *p)
{
    const struct mesh_render_input *in = p->in;
    p->nslices = in->slices > 1 ? in->slices : 1;
    p->total = expected_of(in);
    p->hps = in->slice_only ? (int)in->nworkers : p->total / p->nslices;
    if (in->slice_only) {
        p->self_slice = in->slice_id;
    } else {
        p->self_slice = in->self_index >= 0 && p->hps > 0 ? in->self_index / p->hps : -1;
    }
    p->base_idx = p->self_slice > 0 ? p->self_slice * p->hps : 0;
    p->base_pos = in->slice_only ? 0 : (size_t)p->base_idx;
}

static void prep_cleanup(struct prep *p)
{
    mesh_free(p->f);
    p->f = NULL;
}

/* mesh_render_check_worker's verdict plus the worker's facts. The common
 * case (a pod name, an RFC 1123 host name, a dotted-quad IP) is settled by
 * the same name checker on lengths measured once; anything else goes to
 * mesh_render_check_worker, which decides and words the error. */
static int check_worker_facts(const struct mesh_worker *w, struct wfacts *f, struct mesh_err *err)
{
    size_t hl = strnlen(w->host, MESH_HOST_MAX);
    size_t il = strnlen(w->ip, MESH_IP_MAX);
    size_t pl = strnlen(w->pod, MESH_POD_MAX);
    bool ok = hl < MESH_HOST_MAX && il < MESH_IP_MAX && pl < MESH_POD_MAX;
    if (ok && hl > 0) {
        ok = mesh_names_is_dns_name(w->host, hl, false, false) ||
             mesh_names_is_plain_ipv4(w->host, hl);
    }
    if (ok && il > 0) {
        ok = mesh_names_is_plain_ipv4(w->ip, il);
    }
    if (ok && pl > 0) {
        ok = mesh_names_is_dns_name(w->pod, pl, true, false);
    }
    f->pod_len = (uint16_t)pl;
    f->host_len = (uint16_t)hl;
    f->ip_len = (uint8_t)il;
    f->host_v6 = false;
    f->ip_v6 = false;
    if (!ok) {
        int rc = mesh_render_check_worker(w, err);
        if (rc < 0) {
            return rc;
        }
        /* Valid: a host name has no ':', an IPv4 literal neither, an IPv6
         * literal always. (On the fast path above host and ip passed a
         * name or dotted-quad check: no ':' in either.) */
        f->host_v6 = hl > 0 && memchr(w->host, ':', hl) != NULL;
        f->ip_v6 = il > 0 && memchr(w->ip, ':', il) != NULL;
    }
    return 0;
}

/* A coordinator host given by the caller: "" or NULL (none), else a host
 * name or an IP literal. */
static int check_coordinator(const char *what, const char *s, struct mesh_err *err)
{
    if (s == NULL || s[0] == '\0' || is_hostname(s) || is_ip(s, NULL)) {
        return 0;
    }
    char shown[96];
    escape_for_msg(s, MESH_HOST_MAX, shown, sizeof(shown));
    return mesh_err_set(err, MESH_E_INVAL, 0,
                        "%s \"%s\" is not a host name or IP address (no port, no scheme)", what,
                        shown);
}

/* The multi-slice fields of render.h. */
static int check_slices(const struct mesh_render_input *in, struct mesh_err *err)
{
    if (in->slices < 0 || in->slices > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "slice count %d is outside 0..%d", in->slices,
                            MESH_RENDER_MAX_WORKERS);
    }
    if (in->megascale_port < 0 || in->megascale_port > 65535) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "MEGASCALE_PORT %d is outside 1..65535 (0 = the default %d)",
                            in->megascale_port, MESH_RENDER_MEGASCALE_PORT);
    }
    if (in->jax_port < 0 || in->jax_port > 65535) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "JAX_COORDINATOR_PORT %d is outside 1..65535 (0 = the default %d)",
                            in->jax_port, MESH_RENDER_JAX_PORT);
    }
    int rc = check_coordinator("MEGASCALE_COORDINATOR_ADDRESS", in->megascale_coordinator, err);
    if (rc < 0) {
        return rc;
    }
    if (in->slice_only) {
        if (in->slices < 2 || in->slice_id < 0 || in->slice_id >= in->slices) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "slice id %d is outside 0..%d (one slice of %d listed)",
                                in->slice_id, in->slices - 1, in->slices);
        }
        if ((long long)in->slices * (long long)in->nworkers > MESH_RENDER_MAX_WORKERS) {
            return mesh_err_set(err, MESH_E_RANGE, 0,
                                "%d slices of %zu workers exceed the limit of %d", in->slices,
                                in->nworkers, MESH_RENDER_MAX_WORKERS);
        }
        return 0;
    }
    int total = expected_of(in);
    if (in->slices > 1 && total % in->slices != 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "%d workers do not split into %d equal slices: check the expected "
                            "worker count (the total over all slices)",
                            total, in->slices);
    }
    return 0;
}

/* Everything that holds for any render: sizes, port, job name, every
 * worker's fields (each checked once, its facts kept in p). On success p
 * owns memory: prep_cleanup. */
static int check_common(const struct mesh_render_input *in, struct prep *p, struct mesh_err *err)
{
    memset(p, 0, sizeof(*p));
    p->in = in;
    if (in->nworkers > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "%zu workers exceed the limit of %d",
                            in->nworkers, MESH_RENDER_MAX_WORKERS);
    }
    if (in->nworkers > 0 && in->workers == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "worker list missing");
    }
    if (in->expected < 0 || in->expected > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "expected worker count %d is outside 1..%d (0 = the list size)",
                            in->expected, MESH_RENDER_MAX_WORKERS);
    }
    if (in->port < 1 || in->port > 65535) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "port %d is outside 1..65535", in->port);
    }
    if (in->present < 0 || in->present > MESH_RENDER_MAX_WORKERS ||
        (in->expected_source != NULL &&
         strnlen(in->expected_source, MESH_RENDER_SOURCE_MAX) >= MESH_RENDER_SOURCE_MAX)) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "present worker count %d or expected-count source out of range",
                            in->present);
    }
    if (in->generation > MESH_RENDER_GENERATION_MAX) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "generation %llu is too large",
                            (unsigned long long)in->generation);
    }
    if (in->mode != MESH_ADDR_AUTO && in->mode != MESH_ADDR_DNS && in->mode != MESH_ADDR_IP) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "unknown address mode %d", (int)in->mode);
    }
    if (in->job_name != NULL && in->job_name[0] != '\0' && !mesh_names_is_job_name(in->job_name)) {
        char shown[96];
        escape_for_msg(in->job_name, MESH_JOB_NAME_MAX, shown, sizeof(shown));
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "job name \"%s\" is not a TensorFlow job name "
                            "(a letter, then letters, digits or '_', at most %d)",
                            shown, MESH_JOB_NAME_MAX - 1);
    }
    if (in->self_index < -1 || in->self_index >= MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "own worker index %d is out of range",
                            in->self_index);
    }
    int rc = check_slices(in, err);
    if (rc < 0) {
        return rc;
    }
    if (in->nworkers > 0) {
        p->f = mesh_malloc(in->nworkers * sizeof(*p->f));
    }
    bool every_host = in->nworkers > 0;
    size_t host_bytes = 0;
    size_t ip_bytes = 0;
    size_t text_bytes = 0;
    for (size_t i = 0; i < in->nworkers; i++) {
        struct wfacts *f = &p->f[i];
        rc = check_worker_facts(&in->workers[i], f, err);
        if (rc < 0) {
            prep_cleanup(p);
            return rc;
        }
        every_host = every_host && f->host_len > 0;
        host_bytes += f->host_len + 2u * f->host_v6;
        ip_bytes += f->ip_len + 2u * f->ip_v6;
        text_bytes += (size_t)f->pod_len + f->host_len + f->ip_len;
    }
    /* The effective address mode (auto -> dns only when every worker has a name), from the facts.
     */
    p->mode = in->mode;
    if (p->mode == MESH_ADDR_AUTO) {
        p->mode = every_host ? MESH_ADDR_DNS : MESH_ADDR_IP;
    }
    p->addr_bytes = p->mode == MESH_ADDR_DNS ? host_bytes : ip_bytes;
    p->text_bytes = text_bytes;
    p->port_len = (size_t)snprintf(p->port, sizeof(p->port), ":%d", in->port);
    prep_slices(p);
    return 0;
}

/* The bare address (no port) of worker i in the effective mode: its length,
 * 0 when it has none. */
static size_t bare_of(const struct prep *p, size_t i, const char **out, bool *out_v6)
{
    const struct mesh_worker *w = &p->in->workers[i];
    const struct wfacts *f = &p->f[i];
    if (p->mode == MESH_ADDR_DNS) {
        *out = w->host;
        *out_v6 = f->host_v6;
        return f->host_len;
    }
    *out = w->ip;
    *out_v6 = f->ip_v6;
    return f->ip_len;
}

/* What the env files and TF_CONFIG additionally need: the whole job, dense
 * indices, our own index in range, an address for every worker. */
static int check_complete_slice(const struct prep *p, struct mesh_err *err);

static int check_complete(const struct prep *p, struct mesh_err *err)
{
    const struct mesh_render_input *in = p->in;
    int n = expected_of(in);
    if (!in->complete) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "the worker list is incomplete: env files keep their last version");
    }
    if (in->slice_only) {
        return check_complete_slice(p, err);
    }
    if (n == 0 || (size_t)n != in->nworkers) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "%zu of %d workers known", in->nworkers, n);
    }
    /* DTensor: DTENSOR_CLIENT_ID must satisfy 0 <= id < num_clients. */
    if (in->self_index < 0 || in->self_index >= n) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "own worker index %d is outside 0..%d: check TPU_WORKER_ID or the "
                            "pod's completion index",
                            in->self_index, n - 1);
    }
    for (int i = 0; i < n; i++) {
        const struct mesh_worker *w = &in->workers[i];
        const struct wfacts *f = &p->f[i];
        if (w->index != i) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "worker at position %d has index %d: the list must be dense "
                                "and in index order",
                                i, w->index);
        }
        if ((p->mode == MESH_ADDR_DNS ? f->host_len : f->ip_len) == 0) {
            return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", i,
                                p->mode == MESH_ADDR_DNS ? "host name" : "pod IP");
        }
    }
    return 0;
}

/* One slice listed (render.h, slice_only): dense global indices from the
 * slice's first, our own index among them, an address for each, and a
 * known host for slice 0 worker 0. */
static int check_complete_slice(const struct prep *p, struct mesh_err *err)
{
    const struct mesh_render_input *in = p->in;
    int m = (int)in->nworkers;
    if (m == 0) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "no worker of slice %d is known",
                            in->slice_id);
    }
    if (in->self_index < p->base_idx || in->self_index >= p->base_idx + m) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "own worker index %d is outside slice %d's %d..%d: check "
                            "TPU_WORKER_ID and MEGASCALE_SLICE_ID",
                            in->self_index, in->slice_id, p->base_idx, p->base_idx + m - 1);
    }
    for (int i = 0; i < m; i++) {
        const struct mesh_worker *w = &in->workers[i];
        const struct wfacts *f = &p->f[i];
        if (w->index != p->base_idx + i) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "worker at position %d of slice %d has index %d, not %d", i,
                                in->slice_id, w->index, p->base_idx + i);
        }
        if ((p->mode == MESH_ADDR_DNS ? f->host_len : f->ip_len) == 0) {
            return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", w->index,
                                p->mode == MESH_ADDR_DNS ? "host name" : "pod IP");
        }
    }
    if (in->slice_id != 0 &&
        (in->megascale_coordinator == NULL || in->megascale_coordinator[0] == '\0')) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "slice %d cannot name slice 0's worker 0: "
                            "MEGASCALE_COORDINATOR_ADDRESS is not set",
                            in->slice_id);
    }
    return 0;
}

/* Whether file id is rendered for in (render.h): topology.json always; the
 * others only when complete; for one slice alone only tpu.env and jax.env. */
static bool renders(const struct mesh_render_input *in, int id)
{
    if (id == MESH_FILE_TOPOLOGY_JSON) {
        return true;
    }
    if (id == MESH_FILE_TOPOLOGY_PB || !in->complete) {
        return false;
    }
    return !in->slice_only || id == MESH_FILE_TPU_ENV || id == MESH_FILE_JAX_ENV;
}

static int prepare_complete(const struct mesh_render_input *in, enum mesh_render_file_id id,
                            struct prep *p, struct mesh_err *err)
{
    if (in->slice_only && in->complete && !renders(in, id)) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "%s needs every slice's workers; only slice %d is listed",
                            mesh_render_file_name(id), in->slice_id);
    }
    int rc = check_common(in, p, err);
    if (rc == 0) {
        rc = check_complete(p, err);
        if (rc < 0) {
            prep_cleanup(p);
        }
    }
    return rc;
}

/* tpu.env writes the slice's strings unquoted-safe: they must be plain
 * tokens. */
static int check_slice_tokens(const struct mesh_slice *s, struct mesh_err *err)
{
    if (!is_hostname(s->accelerator_type) || !is_hostname(s->topology)) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "slice accelerator type or topology is "
                            "not a plain token");
    }
    return 0;
}

/* ---- output writer ---------------------------------------------------------
 *
 * The files are written straight into one block, sized up front from the
 * worker facts so a render allocates once. Every write checks the room left
 * (one comparison) and grows the block if an estimate was short, so a wrong
 * estimate costs a copy, never memory safety. The largest file is bounded
 * by the worker limit: 16,384 workers with 253-byte pod and host names make
 * a topology.json under 16 MiB. */

static void wr_init(struct wr *w, size_t hint)
{
    w->cap = hint + 1;
    w->len = 0;
    w->data = mesh_malloc(w->cap);
}

static void wr_grow(struct wr *w, size_t n)
{
    size_t cap = w->cap * 2;
    if (cap < w->len + n + 1) {
        cap = w->len + n + 1;
    }
    w->data = mesh_realloc(w->data, cap);
    w->cap = cap;
}

/* Make room for n more bytes and return where they go (commit with
 * wr_done). */
static inline char *wr_room(struct wr *w, size_t n)
{
    if (__builtin_expect(w->cap - w->len <= n, 0)) {
        wr_grow(w, n);
    }
    return w->data + w->len;
}

static inline void wr_done(struct wr *w, const char *end)
{
    w->len = (size_t)(end - w->data);
}

static inline void wr_mem(struct wr *w, const void *src, size_t n)
{
    char *o = wr_room(w, n);
    memcpy(o, src, n);
    w->len += n;
}

/* A string literal. */
#define WR_LIT(w, lit) wr_mem((w), (lit), sizeof(lit) - 1)

static inline void wr_ch(struct wr *w, char c)
{
    char *o = wr_room(w, 1);
    *o = c;
    w->len++;
}

/* Decimal, like printf's %lld. */
static void wr_int(struct wr *w, long long v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) {
        tmp[--i] = '-';
    }
    wr_mem(w, tmp + i, sizeof(tmp) - i);
}

static char *wr_take(struct wr *w, size_t *out_len)
{
    w->data[w->len] = '\0';
    *out_len = w->len;
    char *d = w->data;
    w->data = NULL;
    w->len = 0;
    w->cap = 0;
    return d;
}

/* "<bare>:<port>" of worker i, "[bare]:<port>" for IPv6. */
static inline void wr_address(struct wr *w, const struct prep *p, const char *bare, size_t len,
                              bool v6)
{
    char *o = wr_room(w, len + 2 + p->port_len);
    if (v6) {
        *o++ = '[';
    }
    memcpy(o, bare, len);
    o += len;
    if (v6) {
        *o++ = ']';
    }
    memcpy(o, p->port, p->port_len);
    wr_done(w, o + p->port_len);
}

/* ---- env files ------------------------------------------------------------ */

/* KEY='value'\n with value single-quoted for sh, byte for byte what
 * mesh_render_shell_quote writes. Every value the renderers pass has been
 * validated and holds no quote; the loop keeps the quoting right anyway. */
static void env_line(struct wr *w, const char *key, const char *value)
{
    wr_mem(w, key, strlen(key));
    WR_LIT(w, "='");
    size_t n = strlen(value);
    const char *q;
    while ((q = memchr(value, '\'', n)) != NULL) {
        wr_mem(w, value, (size_t)(q - value));
        WR_LIT(w, "'\\''");
        n -= (size_t)(q - value) + 1;
        value = q + 1;
    }
    wr_mem(w, value, n);
    WR_LIT(w, "'\n");
}

static void env_line_int(struct wr *w, const char *key, long long v)
{
    wr_mem(w, key, strlen(key));
    WR_LIT(w, "='");
    wr_int(w, v);
    WR_LIT(w, "'\n");
}

/* Every file that lists the workers is written as three parts (struct
 * parts): a prefix, one fragment per worker (its separator included) and a
 * suffix. A list of addresses (KEY='<addr>,<addr>,...') needs no quoting: addresses
 * are validated host names and IP literals. */

/* dtensor.env:
 *   DTENSOR_JOBS        host:port per client in index order, never empty
 *   DTENSOR_CLIENT_ID   0 <= id < len(DTENSOR_JOBS)
 *   DTENSOR_JOB_NAME    explicit, else DTensor's default
 *   DTENSOR_NUM_CLIENTS for old DTensor versions that still read it */
static size_t dtensor_hint(const struct prep *p)
{
    return 256 + p->addr_bytes + p->in->nworkers * (1 + p->port_len);
}

static void dtensor_prefix(struct wr *w, const struct prep *p)
{
    (void)p;
    WR_LIT(w, "DTENSOR_JOBS='");
}

static void dtensor_frag(struct wr *w, const struct prep *p, size_t i)
{
    const char *bare;
    bool v6;
    size_t len = bare_of(p, i, &bare, &v6);
    if (i > 0) {
        wr_ch(w, ',');
    }
    wr_address(w, p, bare, len, v6);
}

static void dtensor_suffix(struct wr *w, const struct prep *p)
{
    const struct mesh_render_input *in = p->in;
    WR_LIT(w, "'\n");
    env_line_int(w, "DTENSOR_CLIENT_ID", in->self_index);
    env_line(w, "DTENSOR_JOB_NAME", job_name_of(in));
    env_line_int(w, "DTENSOR_NUM_CLIENTS", (long long)in->nworkers);
}

static void env_line_bounds(struct wr *w, const char *key, const int v[3])
{
    wr_mem(w, key, strlen(key));
    WR_LIT(w, "='");
    for (int i = 0; i < 3; i++) {
        if (i > 0) {
            wr_ch(w, ',');
        }
        wr_int(w, v[i]);
    }
    WR_LIT(w, "'\n");
}

/* tpu.env: what GKE's TPU webhook injects and libtpu/JAX/torch_xla read:
 * the worker id indexes the host name list. The slice's
 * tokens have passed check_slice_tokens. */
static size_t tpu_hint(const struct prep *p)
{
    return 512 + p->addr_bytes + p->in->nworkers;
}

static void tpu_prefix(struct wr *w, const struct prep *p)
{
    /* libtpu reads both as this ICI slice's: the index within the slice and
     * the slice's own hosts, as GKE sets them for an Indexed Job. */
    env_line_int(w, "TPU_WORKER_ID", p->in->self_index - p->base_idx);
    WR_LIT(w, "TPU_WORKER_HOSTNAMES='");
}

/* Only the workers of this pod's slice (positions base_pos..+hps) are
 * listed; the others' fragments are empty. */
static void tpu_frag(struct wr *w, const struct prep *p, size_t i)
{
    if (i < p->base_pos || i >= p->base_pos + (size_t)p->hps) {
        return;
    }
    const char *bare;
    bool v6;
    size_t len = bare_of(p, i, &bare, &v6);
    if (i > p->base_pos) {
        wr_ch(w, ',');
    }
    wr_mem(w, bare, len);
}

/* The host (no port) of slice 0 worker 0: MEGASCALE_COORDINATOR_ADDRESS as
 * the environment gave it when only one slice is listed, else the first
 * worker's address in the effective mode. */
static size_t slice0_host(const struct prep *p, const char **out, bool *out_v6)
{
    const char *mc = p->in->megascale_coordinator;
    if (p->in->slice_only && mc != NULL && mc[0] != '\0') {
        *out = mc;
        *out_v6 = false;
        (void)is_ip(mc, out_v6);
        return strlen(mc);
    }
    return bare_of(p, 0, out, out_v6);
}

static void tpu_suffix(struct wr *w, const struct prep *p)
{
    const struct mesh_render_input *in = p->in;
    WR_LIT(w, "'\n");
    if (in->slice != NULL) {
        env_line(w, "TPU_ACCELERATOR_TYPE", in->slice->accelerator_type);
        env_line(w, "TPU_TOPOLOGY", in->slice->topology);
        env_line_bounds(w, "TPU_HOST_BOUNDS", in->slice->host_bounds);
        env_line_bounds(w, "TPU_CHIPS_PER_HOST_BOUNDS", in->slice->chips_per_host_bounds);
    }
    if (p->nslices > 1) {
        /* What GKE sets for a multi-slice JobSet and libtpu's megascale
         * (DCN) runtime and JAX read: the host of slice 0 worker 0 without a
         * port, the slice count, this pod's slice, the coordinator port. */
        const char *host;
        bool v6;
        size_t len = slice0_host(p, &host, &v6);
        WR_LIT(w, "MEGASCALE_COORDINATOR_ADDRESS='");
        wr_mem(w, host, len);
        WR_LIT(w, "'\n");
        env_line_int(w, "MEGASCALE_NUM_SLICES", p->nslices);
        env_line_int(w, "MEGASCALE_SLICE_ID", p->self_slice);
        env_line_int(w, "MEGASCALE_PORT",
                     in->megascale_port > 0 ? in->megascale_port : MESH_RENDER_MEGASCALE_PORT);
    }
}

/* jax.env: JAX reads JAX_COORDINATOR_ADDRESS itself; on GKE its Cloud TPU
 * detection takes worker 0 on port 8482 (MESH_RENDER_JAX_PORT; the pod's
 * JAX_COORDINATOR_PORT when it sets one) as coordinator and TPU_WORKER_ID as
 * process id.
 * JAX_NUM_PROCESSES / JAX_PROCESS_ID are the
 * conventional names for jax.distributed.initialize(num_processes=,
 * process_id=) that launchers pass; we write the same values GKE implies.
 * Multi-slice, what JAX's own multislice detection computes: slice 0 worker
 * 0 as coordinator, hosts per slice x slices processes, process id = slice
 * id x hosts per slice + worker id (= the global index). A JobSet's
 * coordinator (jobset.sigs.k8s.io/coordinator) is not used: JAX starts its
 * coordination service in process 0, so any other pod would leave every
 * process waiting for a coordinator that is not there, and JAX's own
 * detection does not read it either. */
static size_t jax_hint(const struct prep *p)
{
    (void)p;
    return 160 + ADDR_MAX;
}

static void jax_prefix(struct wr *w, const struct prep *p)
{
    const struct mesh_render_input *in = p->in;
    struct prep jax = *p;
    jax.port_len = (size_t)snprintf(jax.port, sizeof(jax.port), ":%d",
                                    in->jax_port > 0 ? in->jax_port : MESH_RENDER_JAX_PORT);
    const char *bare;
    bool v6 = false;
    size_t len = slice0_host(p, &bare, &v6);
    WR_LIT(w, "JAX_COORDINATOR_ADDRESS='");
    wr_address(w, &jax, bare, len, v6);
    WR_LIT(w, "'\n");
    env_line_int(w, "JAX_NUM_PROCESSES", p->total);
    env_line_int(w, "JAX_PROCESS_ID", in->self_index);
}

/* ---- JSON files ------------------------------------------------------------
 *
 * Written directly, byte for byte as cJSON 1.7 prints the same tree
 * (cJSON_Print for topology.json, cJSON_PrintUnformatted for
 * tf_config.json; tests/unit/render_ref.py renders the same layout
 * independently). Why not build a cJSON tree and print it: measured
 * 2026-11-28 on the 2-core machine (loaded), a tree of 4,096 workers and
 * cJSON_Print take ~70 ms (the print alone ~37 ms; 1,024 workers: ~11 ms),
 * against ~0.5 ms for these writers, and every IP change of a complete job
 * publishes at once. Formatted objects put each member on its own line, indented
 * with one tab per level, as "key":<TAB>value, and close at the parent's
 * indentation; formatted arrays separate elements with ", " on one line;
 * unformatted output has no whitespace at all. */

/* A JSON string as cJSON's print_string_ptr escapes it: \" \\ \b \f \n \r
 * \t, every other byte below 0x20 as \u00xx (lower-case hex), every other
 * byte (0x7f and UTF-8 or not above it) copied as is. */
static void wr_json_str(struct wr *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s);
    char *o = wr_room(w, 6 * n + 2);
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        default:
            memcpy(o, "u00", 3);
            o[3] = hex[c >> 4];
            o[4] = hex[c & 15];
            o += 5;
            break;
        }
    }
    *o++ = '"';
    wr_done(w, o);
}

/* A validated worker string (pod name, host name, IP literal, address): none
 * of its characters needs escaping. "" is null (unknown). */
static inline void wr_json_plain_or_null(struct wr *w, const char *s, size_t n)
{
    if (n == 0) {
        WR_LIT(w, "null");
        return;
    }
    char *o = wr_room(w, n + 2);
    *o++ = '"';
    memcpy(o, s, n);
    o[n] = '"';
    wr_done(w, o + n + 1);
}

/* A JSON number for the generation as cJSON prints a double: the int digits
 * when the value fits an int; otherwise "%1.15g" unless reading that back
 * misses by more than DBL_EPSILON relative, then "%1.17g" (cJSON 1.7
 * print_number and compare_double). Below 10^15 "%1.15g" of an integer is
 * its digits, so only larger generations take the printf path. */
static void wr_json_generation(struct wr *w, uint64_t v)
{
    if (v < 1000000000000000ULL) {
        wr_int(w, (long long)v);
        return;
    }
    char num[32];
    double d = (double)v;
    snprintf(num, sizeof(num), "%1.15g", d);
    double back = strtod(num, NULL);
    double diff = back > d ? back - d : d - back;
    double max = back > d ? back : d;
    if (!(diff <= max * DBL_EPSILON)) {
        snprintf(num, sizeof(num), "%1.17g", d);
    }
    wr_mem(w, num, strlen(num));
}

/* tf_config.json: the TF_CONFIG value,
 * {"cluster":{"worker":[...]},"task":{"type":"worker","index":N}}. */
static size_t tf_hint(const struct prep *p)
{
    return 128 + p->addr_bytes + p->in->nworkers * (3 + p->port_len);
}

static void tf_prefix(struct wr *w, const struct prep *p)
{
    (void)p;
    WR_LIT(w, "{\"cluster\":{\"worker\":[");
}

static void tf_frag(struct wr *w, const struct prep *p, size_t i)
{
    const char *bare;
    bool v6;
    size_t len = bare_of(p, i, &bare, &v6);
    if (i > 0) {
        wr_ch(w, ',');
    }
    wr_ch(w, '"');
    wr_address(w, p, bare, len, v6);
    wr_ch(w, '"');
}

static void tf_suffix(struct wr *w, const struct prep *p)
{
    WR_LIT(w, "]},\"task\":{\"type\":\"worker\",\"index\":");
    wr_int(w, p->in->self_index);
    WR_LIT(w, "}}\n");
}

/* A string, or null when it is empty (unknown). */
static void wr_json_str_or_null(struct wr *w, const char *s)
{
    if (s[0] == '\0') {
        WR_LIT(w, "null");
    } else {
        wr_json_str(w, s);
    }
}

/* "slice": {...} at depth 1, members at depth 2. An empty accelerator type
 * or topology is unknown (null): on the legacy TPU Node path the slice may
 * be known only from the TopologyProto the TPU returned. */
static void write_slice_json(struct wr *w, const struct mesh_slice *s)
{
    WR_LIT(w, "{\n\t\t\"acceleratorType\":\t");
    wr_json_str_or_null(w, s->accelerator_type);
    WR_LIT(w, ",\n\t\t\"topology\":\t");
    wr_json_str_or_null(w, s->topology);
    WR_LIT(w, ",\n\t\t\"chips\":\t");
    wr_int(w, s->chips);
    WR_LIT(w, ",\n\t\t\"hosts\":\t");
    wr_int(w, s->hosts);
    WR_LIT(w, ",\n\t\t\"chipsPerHost\":\t");
    wr_int(w, s->chips_per_host);
    WR_LIT(w, ",\n\t\t\"coresPerChip\":\t");
    wr_int(w, s->cores_per_chip);
    WR_LIT(w, ",\n\t\t\"devicesPerHost\":\t");
    wr_int(w, s->devices_per_host);
    WR_LIT(w, ",\n\t\t\"meshShape\":\t[");
    for (int i = 0; i < 4; i++) {
        if (i > 0) {
            WR_LIT(w, ", ");
        }
        wr_int(w, s->mesh_shape[i]);
    }
    WR_LIT(w, "]\n\t}");
}

/* One element of "workers" at depth 2, members at depth 3. */
static void write_worker_json(struct wr *w, const struct prep *p, size_t i)
{
    const struct mesh_worker *wk = &p->in->workers[i];
    const struct wfacts *f = &p->f[i];
    WR_LIT(w, "{\n\t\t\t\"index\":\t");
    wr_int(w, wk->index);
    WR_LIT(w, ",\n\t\t\t\"pod\":\t");
    wr_json_plain_or_null(w, wk->pod, f->pod_len);
    WR_LIT(w, ",\n\t\t\t\"host\":\t");
    wr_json_plain_or_null(w, wk->host, f->host_len);
    WR_LIT(w, ",\n\t\t\t\"ip\":\t");
    wr_json_plain_or_null(w, wk->ip, f->ip_len);
    WR_LIT(w, ",\n\t\t\t\"address\":\t");
    const char *bare;
    bool v6;
    size_t len = bare_of(p, i, &bare, &v6);
    if (len == 0) {
        WR_LIT(w, "null");
    } else {
        wr_ch(w, '"');
        wr_address(w, p, bare, len, v6);
        wr_ch(w, '"');
    }
    if (wk->ready) {
        WR_LIT(w, ",\n\t\t\t\"ready\":\ttrue\n\t\t}");
    } else {
        WR_LIT(w, ",\n\t\t\t\"ready\":\tfalse\n\t\t}");
    }
}

/* The fixed bytes of one worker element and its separator, an upper bound
 * used to size the block. */
#define WORKER_JSON_FIXED 160

/* 64-bit FNV-1a (render.h, mesh_render_workers_digest). */
#define FNV_BASIS 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

static inline uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * FNV_PRIME;
    }
    return h;
}

/* FNV-1a of worker i's address as topology.json's workers[].address shows
 * it ("[v6]:port" or "host:port"); of no bytes (the basis) when it has none. */
static uint64_t addr_hash(const struct prep *p, size_t i)
{
    const char *bare;
    bool v6;
    size_t len = bare_of(p, i, &bare, &v6);
    uint64_t h = FNV_BASIS;
    if (len > 0) {
        if (v6) {
            h = fnv_bytes(h, "[", 1);
        }
        h = fnv_bytes(h, bare, len);
        if (v6) {
            h = fnv_bytes(h, "]", 1);
        }
        h = fnv_bytes(h, p->port, p->port_len);
    }
    return h;
}

/* workersDigest (render.h): fold each worker's index and address hash, in
 * list order, into one FNV-1a state, a 64-bit word at a time. */
static void prep_digest(struct prep *p)
{
    uint64_t t = FNV_BASIS;
    for (size_t i = 0; i < p->in->nworkers; i++) {
        t = (t ^ (uint64_t)(uint32_t)p->in->workers[i].index) * FNV_PRIME;
        t = (t ^ addr_hash(p, i)) * FNV_PRIME;
    }
    p->digest = t;
}

static void digest_hex(uint64_t h, char out[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = hex[h & 15];
        h >>= 4;
    }
    out[16] = '\0';
}

/* topology.json (docs/DESIGN.md §4): what is known, complete or not. Keys in this
 * order: generation, complete, slice, slices {count, id, hostsPerSlice},
 * jobName, clientId, numClients, expectedWorkers, presentWorkers,
 * expectedWorkersSource, coordinator, workersDigest,
 * workers[] {index, pod, host, ip, address, ready}. Unknown values are null.
 * "complete" is false while only one slice is listed (slice_only). */
static size_t topo_hint(const struct prep *p)
{
    return 1024 + p->text_bytes + p->addr_bytes +
           p->in->nworkers * (WORKER_JSON_FIXED + p->port_len);
}

static void topo_prefix(struct wr *w, const struct prep *p)
{
    const struct mesh_render_input *in = p->in;
    size_t n = in->nworkers;
    WR_LIT(w, "{\n\t\"generation\":\t");
    wr_json_generation(w, in->generation);
    if (in->complete && !in->slice_only) {
        WR_LIT(w, ",\n\t\"complete\":\ttrue,\n\t\"slice\":\t");
    } else {
        WR_LIT(w, ",\n\t\"complete\":\tfalse,\n\t\"slice\":\t");
    }
    if (in->slice != NULL) {
        write_slice_json(w, in->slice);
    } else {
        WR_LIT(w, "null");
    }
    WR_LIT(w, ",\n\t\"slices\":\t{\n\t\t\"count\":\t");
    wr_int(w, p->nslices);
    WR_LIT(w, ",\n\t\t\"id\":\t");
    if (p->self_slice >= 0) {
        wr_int(w, p->self_slice);
    } else {
        WR_LIT(w, "null");
    }
    WR_LIT(w, ",\n\t\t\"hostsPerSlice\":\t");
    wr_int(w, p->hps);
    WR_LIT(w, "\n\t}");
    WR_LIT(w, ",\n\t\"jobName\":\t");
    wr_json_str(w, job_name_of(in));
    WR_LIT(w, ",\n\t\"clientId\":\t");
    if (in->self_index >= 0) {
        wr_int(w, in->self_index);
    } else {
        WR_LIT(w, "null");
    }
    WR_LIT(w, ",\n\t\"numClients\":\t");
    wr_int(w, expected_of(in));
    /* The count "complete" is judged against, where it came from, and how
     * many workers are there: null count and source = unknown. */
    WR_LIT(w, ",\n\t\"expectedWorkers\":\t");
    if (in->expected_source != NULL) {
        wr_int(w, expected_of(in));
    } else {
        WR_LIT(w, "null");
    }
    WR_LIT(w, ",\n\t\"presentWorkers\":\t");
    wr_int(w, in->present);
    WR_LIT(w, ",\n\t\"expectedWorkersSource\":\t");
    if (in->expected_source != NULL) {
        wr_json_str(w, in->expected_source);
    } else {
        WR_LIT(w, "null");
    }
    /* The coordinator is DTENSOR_JOBS[0] (the coordination service
     * and collective leader are task 0), when worker 0 is known. */
    WR_LIT(w, ",\n\t\"coordinator\":\t");
    const char *bare = NULL;
    bool v6 = false;
    size_t len = n > 0 && in->workers[0].index == 0 ? bare_of(p, 0, &bare, &v6) : 0;
    if (len > 0) {
        wr_ch(w, '"');
        wr_address(w, p, bare, len, v6);
        wr_ch(w, '"');
    } else {
        WR_LIT(w, "null");
    }
    char hex[17];
    digest_hex(p->digest, hex);
    WR_LIT(w, ",\n\t\"workersDigest\":\t\"");
    wr_mem(w, hex, 16);
    WR_LIT(w, "\",\n\t\"workers\":\t[");
}

static void topo_frag(struct wr *w, const struct prep *p, size_t i)
{
    if (i > 0) {
        WR_LIT(w, ", ");
    }
    write_worker_json(w, p, i);
}

static void topo_suffix(struct wr *w, const struct prep *p)
{
    (void)p;
    WR_LIT(w, "]\n}\n");
}

/* topology.json's own check: the slice strings are read as C strings. */
static int check_slice_terminated(const struct mesh_slice *s, struct mesh_err *err)
{
    if (s != NULL && (memchr(s->accelerator_type, '\0', MESH_ACCEL_TYPE_MAX) == NULL ||
                      memchr(s->topology, '\0', MESH_TOPOLOGY_MAX) == NULL)) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "slice strings are not terminated");
    }
    return 0;
}

int mesh_render_topology_json(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                              struct mesh_err *err)
{
    struct prep p;
    int rc = check_common(in, &p, err);
    if (rc < 0) {
        return rc;
    }
    rc = check_slice_terminated(in->slice, err);
    if (rc == 0) {
        prep_digest(&p);
        write_file(MESH_FILE_TOPOLOGY_JSON, &p, out_data, out_len);
    }
    prep_cleanup(&p);
    return rc;
}

int mesh_render_file(enum mesh_render_file_id id, const struct mesh_render_input *in,
                     char **out_data, size_t *out_len, struct mesh_err *err)
{
    if (id == MESH_FILE_TOPOLOGY_JSON) {
        return mesh_render_topology_json(in, out_data, out_len, err);
    }
    if (id != MESH_FILE_DTENSOR_ENV && id != MESH_FILE_TF_CONFIG && id != MESH_FILE_TPU_ENV &&
        id != MESH_FILE_JAX_ENV) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "file %d is not rendered alone", (int)id);
    }
    struct prep p;
    int rc = prepare_complete(in, id, &p, err);
    if (rc == 0 && id == MESH_FILE_TPU_ENV && in->slice != NULL) {
        rc = check_slice_tokens(in->slice, err);
        if (rc < 0) {
            prep_cleanup(&p);
        }
    }
    if (rc == 0) {
        write_file(id, &p, out_data, out_len);
        prep_cleanup(&p);
    }
    return rc;
}

int mesh_render_facts(const struct mesh_render_input *in, struct mesh_render_facts *out,
                      struct mesh_err *err)
{
    struct prep p;
    int rc = check_common(in, &p, err);
    if (rc < 0) {
        return rc;
    }
    prep_digest(&p);
    out->mode = p.mode;
    out->job_name = job_name_of(in);
    out->num_clients = expected_of(in);
    out->slices = p.nslices;
    out->slice_id = p.self_slice;
    out->hosts_per_slice = p.hps;
    digest_hex(p.digest, out->digest);
    prep_cleanup(&p);
    return 0;
}

static const struct parts file_parts[MESH_FILE__COUNT] = {
    [MESH_FILE_DTENSOR_ENV] = {dtensor_hint, dtensor_prefix, dtensor_frag, dtensor_suffix},
    [MESH_FILE_TF_CONFIG] = {tf_hint, tf_prefix, tf_frag, tf_suffix},
    [MESH_FILE_TPU_ENV] = {tpu_hint, tpu_prefix, tpu_frag, tpu_suffix},
    [MESH_FILE_JAX_ENV] = {jax_hint, jax_prefix, NULL, NULL},
    [MESH_FILE_TOPOLOGY_JSON] = {topo_hint, topo_prefix, topo_frag, topo_suffix},
};

/* One whole file: prefix, every worker's fragment, suffix. */
static void write_file(enum mesh_render_file_id id, const struct prep *p, char **out_data,
                       size_t *out_len)
{
    const struct parts *fp = &file_parts[id];
    struct wr w;
    wr_init(&w, fp->hint(p));
    fp->prefix(&w, p);
    for (size_t i = 0; fp->frag != NULL && i < p->in->nworkers; i++) {
        fp->frag(&w, p, i);
    }
    if (fp->suffix != NULL) {
        fp->suffix(&w, p);
    }
    *out_data = wr_take(&w, out_len);
}

size_t mesh_render_env_longest(const char *data, size_t len, const char **out_key,
                               size_t *out_key_len)
{
    size_t best = 0;
    const char *best_key = NULL;
    size_t best_key_len = 0;
    const char *p = data;
    const char *end = data != NULL ? data + len : NULL;
    while (p != NULL && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        /* KEY='value' -> KEY=value + NUL: two bytes less, one more. */
        size_t exported = n >= 2 ? n - 1 : n + 1;
        if (n > 0 && exported > best) {
            const char *eq = memchr(p, '=', n);
            best = exported;
            best_key = p;
            best_key_len = eq != NULL ? (size_t)(eq - p) : 0;
        }
        p = nl != NULL ? nl + 1 : end;
    }
    if (out_key != NULL) {
        *out_key = best_key;
    }
    if (out_key_len != NULL) {
        *out_key_len = best_key_len;
    }
    return best;
}

/* Every check of the set, in the order the five renderers ran them one
 * after the other (the first failure wins), each worker checked once. On
 * success *p is ready for the writers (prep_cleanup it); on failure it has
 * been released. */
static int check_all(const struct mesh_render_input *in, struct prep *p, struct mesh_err *err)
{
    int rc = check_common(in, p, err);
    if (rc < 0) {
        return rc;
    }
    rc = check_slice_terminated(in->slice, err);
    if (rc == 0 && in->complete) {
        rc = check_complete(p, err);
        if (rc == 0 && in->slice != NULL) {
            rc = check_slice_tokens(in->slice, err);
        }
    }
    if (rc < 0) {
        prep_cleanup(p);
        return rc;
    }
    prep_digest(p);
    return 0;
}

int mesh_render_all(const struct mesh_render_input *in, struct mesh_render_out *out,
                    struct mesh_err *err)
{
    /* The checks, then writers that cannot fail. */
    struct prep p;
    int rc = check_all(in, &p, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_render_out tmp;
    mesh_render_out_init(&tmp);
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (file_parts[i].prefix != NULL && renders(in, i)) {
            write_file((enum mesh_render_file_id)i, &p, &tmp.data[i], &tmp.len[i]);
        }
    }
    prep_cleanup(&p);
    *out = tmp;
    return 0;
}

/* cJSON's compact print plus a newline, in our allocation (the TPU Node
 * tf_config.json). */
static int print_json(cJSON *root, char **out_data, size_t *out_len, struct mesh_err *err)
{
    char *text = cJSON_PrintUnformatted(root);
    if (text == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "cannot serialize JSON");
    }
    /* cJSON allocates with its own hooks: copy into ours, adding '\n'. */
    size_t n = strlen(text);
    char *out = mesh_malloc(n + 2);
    memcpy(out, text, n);
    out[n] = '\n';
    out[n + 1] = '\0';
    cJSON_free(text);
    *out_data = out;
    *out_len = n + 1;
    return 0;
}

/* tf_config.json of the legacy TPU Node path (docs/DESIGN.md §6): cluster =
 * TensorFlow's cluster_spec(), job "worker", tasks 0..n-1 = the endpoints in
 * order; no task: TFConfigClusterResolver then reads the cluster and leaves
 * the task unset, which is right for the TPU's client. */
int mesh_render_node_tf_config(const char *const *hosts, const int *ports, size_t n,
                               char **out_data, size_t *out_len, struct mesh_err *err)
{
    if (n == 0 || hosts == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "no TPU endpoints to write a cluster_spec for");
    }
    if (n > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "%zu TPU endpoints exceed the limit of %d", n,
                            MESH_RENDER_MAX_WORKERS);
    }
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *list = cJSON_AddArrayToObject(cluster, "worker");
    for (size_t i = 0; i < n; i++) {
        const char *h = hosts[i];
        int port = ports != NULL ? ports[i] : MESH_RENDER_TPU_NODE_PORT;
        if (h == NULL) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "TPU endpoint %zu has no address", i);
        }
        if (!is_ip(h, NULL) && !is_hostname(h)) {
            char shown[96];
            escape_for_msg(h, strnlen(h, MESH_HOST_MAX), shown, sizeof(shown));
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "TPU endpoint %zu: \"%s\" is not an IP address or host name", i,
                                shown);
        }
        if (port < 1 || port > 65535) {
            return mesh_err_set(err, MESH_E_RANGE, 0,
                                "TPU endpoint %zu: port %d is outside 1..65535", i, port);
        }
        char addr[ADDR_MAX];
        int rc = host_port(h, port, addr, sizeof(addr), err);
        if (rc < 0) {
            return rc;
        }
        cJSON_AddItemToArray(list, cJSON_CreateString(addr));
    }
    return print_json(root, out_data, out_len, err);
}
