/*
 * accel.c - the accelerator model: parse accelerator types, GKE accelerator
 * labels and topology strings, and derive a complete struct mesh_slice.
 *
 * Pure: no I/O, no clocks, no logging; every message goes into struct
 * mesh_err. The per-generation facts are one table (gens[]), from TensorFlow,
 * xpk and GKE's machine types; TensorFlow's v2/v3 host-bounds table is tf_hosts[].
 * When no topology is given for v4+ the default shape is computed (the most
 * compact shape that divides into host blocks), never looked up, so every
 * size gets either a derivation or a message listing the possible shapes.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "accel.h"
#include "core/json.h"

/* Per-generation facts. */
struct gen_info {
    enum mesh_tpu_gen gen;
    const char *prefix;     /* accelerator type prefix before '-' */
    const char *label;      /* GKE label written for this generation, or NULL */
    int cores_per_chip;     /* TensorCores per chip */
    int devices_per_chip;   /* TF/JAX devices per chip (mesh_shape[3]) */
    bool suffix_is_cores;   /* type suffix counts TensorCores (else chips) */
    int ndims;              /* how topologies are written: 2 (AxB) or 3 */
    bool tf_table;          /* sizes and host bounds come from tf_hosts[] */
    int cph_allowed[4];     /* chips per VM that exist, 0-terminated */
    const char *vm_example; /* machine type that says so, for messages */
};

/*
 * v2/v3: 2 TensorCores per chip, one TF device each (8 devices per 4-chip
 * host, mesh core dimension 2).
 * v4/v5p: 2 TensorCores fused into one megacore device.
 * v5e/v6e: 1 TensorCore per chip; VMs of 1, 4 or 8 chips (ct5lp-hightpu-1t/
 * 4t/8t, ct6e-standard-1t/4t/8t: GKE's machine types).
 * tpu7x: 2 TensorCores per chip (xpk) and no megacore, so each
 * TensorCore is a device (jax-ml/jax pallas ChipVersion "7x": 2 physical
 * TensorCores, megacore unsupported; pytorch/xla PR #9586 appends a core
 * dimension of 2 to TPU_PROCESS_BOUNDS for v7). VMs of 1 or 4 chips
 * (tpu7x-standard-1t/4t). TensorFlow does not support TPU7x at all
 * (cloud.google.com/tpu/docs/tpu7x), so its "TF devices" are JAX's.
 */
static const struct gen_info gens[] = {
    {MESH_GEN_V2, "v2", NULL, 2, 2, true, 2, true, {4, 0, 0, 0}, "TPU v2 hosts"},
    {MESH_GEN_V3, "v3", "tpu-v3-slice", 2, 2, true, 2, true, {4, 0, 0, 0}, "TPU v3 hosts"},
    {MESH_GEN_V4, "v4", "tpu-v4-podslice", 2, 1, true, 3, false, {4, 0, 0, 0}, "ct4p-hightpu-4t"},
    {MESH_GEN_V5P, "v5p", "tpu-v5p-slice", 2, 1, true, 3, false, {4, 0, 0, 0}, "ct5p-hightpu-4t"},
    {MESH_GEN_V5E,
     "v5litepod",
     "tpu-v5-lite-podslice",
     1,
     1,
     false,
     2,
     false,
     {1, 4, 8, 0},
     "ct5lp-hightpu-1t/4t/8t"},
    {MESH_GEN_V6E,
     "v6e",
     "tpu-v6e-slice",
     1,
     1,
     false,
     2,
     false,
     {1, 4, 8, 0},
     "ct6e-standard-1t/4t/8t"},
    {MESH_GEN_TPU7X, "tpu7x", "tpu7x", 2, 2, true, 3, false, {1, 4, 0, 0}, "tpu7x-standard-1t/4t"},
};

/* GKE accelerator label values. */
static const struct {
    const char *label;
    enum mesh_tpu_gen gen;
} labels[] = {
    {"tpu-v4-podslice", MESH_GEN_V4}, {"tpu-v5-lite-podslice", MESH_GEN_V5E},
    {"tpu-v5p-slice", MESH_GEN_V5P},  {"tpu-v6e-slice", MESH_GEN_V6E},
    {"tpu7x", MESH_GEN_TPU7X},        {"tpu-v3-slice", MESH_GEN_V3},
    {"tpu-v3-device", MESH_GEN_V3},
};

/* TensorFlow's v2/v3 host bounds table (from
 * tensorflow/python/tools/grpc_tpu_worker.py). Chips per host bounds are
 * 2,2,1, so the chip topology is host bounds * 2,2,1. */
static const struct {
    enum mesh_tpu_gen gen;
    int cores;
    int hb[3];
} tf_hosts[] = {
    {MESH_GEN_V2, 8, {1, 1, 1}},      {MESH_GEN_V2, 32, {2, 2, 1}},
    {MESH_GEN_V2, 128, {4, 4, 1}},    {MESH_GEN_V2, 256, {4, 8, 1}},
    {MESH_GEN_V2, 512, {8, 8, 1}},    {MESH_GEN_V3, 8, {1, 1, 1}},
    {MESH_GEN_V3, 32, {2, 2, 1}},     {MESH_GEN_V3, 64, {2, 4, 1}},
    {MESH_GEN_V3, 128, {4, 4, 1}},    {MESH_GEN_V3, 256, {4, 8, 1}},
    {MESH_GEN_V3, 512, {8, 8, 1}},    {MESH_GEN_V3, 1024, {8, 16, 1}},
    {MESH_GEN_V3, 2048, {16, 16, 1}},
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Most candidate shapes a message lists before "...". */
#define SHAPES_MAX 8

static const struct gen_info *gen_find(enum mesh_tpu_gen g)
{
    for (size_t i = 0; i < N_ELEMS(gens); i++) {
        if (gens[i].gen == g) {
            return &gens[i];
        }
    }
    return NULL;
}

/* Copy at most 40 bytes of untrusted text for a message, replacing anything
 * that is not printable ASCII with '?', so a hostile value cannot inject
 * newlines or escapes into a log line. */
static const char *shown(const char *s, char out[48])
{
    size_t i = 0;
    for (; i < 40 && s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s[i] != '\0') {
        out[i++] = '.';
        out[i++] = '.';
        out[i++] = '.';
    }
    out[i] = '\0';
    return out;
}

/* strlen bounded by MESH_ACCEL_INPUT_MAX + 1. */
static size_t bounded_len(const char *s)
{
    size_t n = 0;
    while (n <= MESH_ACCEL_INPUT_MAX && s[n] != '\0') {
        n++;
    }
    return n;
}

int mesh_accel_parse_type(const char *s, enum mesh_tpu_gen *out_gen, int *out_suffix,
                          struct mesh_err *err)
{
    static const char forms[] = "expected v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N or "
                                "tpu7x-N with N a positive integer (e.g. v4-32)";
    char show[48], num[48];
    if (s == NULL || s[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "accelerator type is empty: %s", forms);
    }
    size_t len = bounded_len(s);
    if (len > MESH_ACCEL_INPUT_MAX) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "accelerator type '%s' is too long: %s",
                            shown(s, show), forms);
    }
    const char *dash = memchr(s, '-', len);
    if (dash == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "accelerator type '%s' has no '-N' suffix: %s",
                            shown(s, show), forms);
    }
    size_t plen = (size_t)(dash - s);
    const struct gen_info *gi = NULL;
    for (size_t i = 0; i < N_ELEMS(gens); i++) {
        if (strlen(gens[i].prefix) == plen && memcmp(gens[i].prefix, s, plen) == 0) {
            gi = &gens[i];
            break;
        }
    }
    if (gi == NULL && plen == 3 && memcmp(s, "v5e", 3) == 0) {
        /* Cloud docs call the chip "v5e" but its accelerator types are
         * v5litepod-N: point there instead of listing forms. */
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "accelerator type '%s': TPU v5e types are written v5litepod-N "
                            "(e.g. v5litepod-%s)",
                            shown(s, show), shown(dash + 1, num));
    }
    if (gi == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "accelerator type '%s' has an unknown prefix: %s",
                            shown(s, show), forms);
    }
    long long n = 0;
    struct mesh_err sub;
    if (mesh_parse_ll(dash + 1, len - plen - 1, 1, MESH_ACCEL_SUFFIX_MAX, &n, &sub) != 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "accelerator type '%s': suffix is not an integer in 1..%d: %s",
                            shown(s, show), MESH_ACCEL_SUFFIX_MAX, forms);
    }
    *out_gen = gi->gen;
    *out_suffix = (int)n;
    return 0;
}

int mesh_accel_gen_from_gke_label(const char *label, enum mesh_tpu_gen *out_gen,
                                  struct mesh_err *err)
{
    char show[48];
    if (label == NULL || label[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "GKE accelerator label is empty");
    }
    for (size_t i = 0; i < N_ELEMS(labels); i++) {
        if (strcmp(labels[i].label, label) == 0) {
            *out_gen = labels[i].gen;
            return 0;
        }
    }
    return mesh_err_set(err, MESH_E_INVAL, 0,
                        "unknown GKE accelerator label '%s': expected tpu-v4-podslice, "
                        "tpu-v5-lite-podslice, tpu-v5p-slice, tpu-v6e-slice, tpu7x, tpu-v3-slice "
                        "or tpu-v3-device",
                        shown(label, show));
}

int mesh_accel_parse_topology(const char *s, int out_dims[3], int *out_ndims, struct mesh_err *err)
{
    char show[48];
    if (s == NULL || s[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "topology is empty: expected AxB or AxBxC (e.g. 2x2x4)");
    }
    size_t len = bounded_len(s);
    if (len > MESH_ACCEL_INPUT_MAX) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "topology '%s' is too long", shown(s, show));
    }
    int dims[3] = {1, 1, 1};
    int nd = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != 'x') {
            continue;
        }
        long long v = 0;
        struct mesh_err sub;
        if (nd == 3) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "topology '%s' has more than 3 dimensions: expected AxB or AxBxC",
                                shown(s, show));
        }
        int prc = mesh_parse_ll(s + start, i - start, -1000000000LL, 1000000000LL, &v, &sub);
        if (prc == -MESH_E_RANGE && s[start] != '-') {
            v = MESH_ACCEL_DIM_MAX + 1LL; /* a huge positive number: a range error below */
        } else if (prc != 0 || v < 1) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "topology '%s': dimension %d is not a positive integer: expected "
                                "AxB or AxBxC (e.g. 2x2x4)",
                                shown(s, show), nd + 1);
        }
        if (v > MESH_ACCEL_DIM_MAX) {
            return mesh_err_set(err, MESH_E_RANGE, 0,
                                "topology '%s': dimension %d is larger than %d", shown(s, show),
                                nd + 1, MESH_ACCEL_DIM_MAX);
        }
        dims[nd++] = (int)v;
        start = i + 1;
    }
    if (nd < 2) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "topology '%s' has one dimension: expected AxB or AxBxC (e.g. 2x2x4)",
                            shown(s, show));
    }
    long long prod = (long long)dims[0] * dims[1] * dims[2];
    if (prod > MESH_ACCEL_CHIPS_MAX) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "topology '%s' has %lld chips, more than %d",
                            shown(s, show), prod, MESH_ACCEL_CHIPS_MAX);
    }
    memcpy(out_dims, dims, sizeof(dims));
    *out_ndims = nd;
    return 0;
}

const char *mesh_accel_gen_name(enum mesh_tpu_gen g)
{
    const struct gen_info *gi = gen_find(g);
    return gi != NULL ? gi->prefix : "unknown";
}

const char *mesh_accel_gen_gke_label(enum mesh_tpu_gen g)
{
    const struct gen_info *gi = gen_find(g);
    return gi != NULL ? gi->label : NULL;
}

char *mesh_accel_format_bounds(const int bounds[3], char *out, size_t out_len)
{
    if (out_len > 0) {
        snprintf(out, out_len, "%d,%d,%d", bounds[0], bounds[1], bounds[2]);
    }
    return out;
}

/* ---- derivation ------------------------------------------------------------ */

/* A topology shape in chips per axis (z = 1 for a 2-D shape). */
struct shape {
    int d[3];
};

/* Everything known while deriving; filled step by step. */
struct derive {
    const struct gen_info *gi;
    int suffix;     /* from the type, or 0 */
    bool have_topo; /* topology given */
    int dims[3];    /* given topology */
    int chips;      /* 0 until known */
    int cph;        /* chips per host */
    int block[3];   /* chips per host bounds */
};

static void format_topology(const int d[3], int ndims, char *out, size_t out_len)
{
    if (ndims == 2) {
        snprintf(out, out_len, "%dx%d", d[0], d[1]);
    } else {
        snprintf(out, out_len, "%dx%dx%d", d[0], d[1], d[2]);
    }
}

static void format_type(const struct gen_info *gi, int chips, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s-%d", gi->prefix,
             chips * (gi->suffix_is_cores ? gi->cores_per_chip : 1));
}

static void block_for(int cph, int out_block[3])
{
    /* Host blocks: 1 chip 1x1x1, 4 chips 2x2x1 (bounds 2,2,1), 8
     * chips 2x4x1 (an 8-chip v5e/v6e VM is a 2x4 slice). */
    out_block[0] = cph == 1 ? 1 : 2;
    out_block[1] = cph == 1 ? 1 : (cph == 8 ? 4 : 2);
    out_block[2] = 1;
}

static bool divides(const int d[3], const int block[3])
{
    return d[0] % block[0] == 0 && d[1] % block[1] == 0 && d[2] % block[2] == 0;
}

static int shape_max(const int d[3], int ndims)
{
    int m = d[0];
    for (int i = 1; i < ndims; i++) {
        m = d[i] > m ? d[i] : m;
    }
    return m;
}

static int shape_min(const int d[3], int ndims)
{
    int m = d[0];
    for (int i = 1; i < ndims; i++) {
        m = d[i] < m ? d[i] : m;
    }
    return m;
}

/* The canonical shapes of a slice, the most compact first. */
struct shapes {
    struct shape top[SHAPES_MAX]; /* most compact first (ties: lexicographic) */
    int n;                        /* how many shapes exist in all */
};

/* a is more compact than b: smaller max/min ratio (compared without division). */
static int compactness_cmp(const struct shape *a, const struct shape *b, int ndims)
{
    long long am = shape_max(a->d, ndims), an = shape_min(a->d, ndims);
    long long bm = shape_max(b->d, ndims), bn = shape_min(b->d, ndims);
    long long l = am * bn, r = bm * an;
    return l < r ? -1 : (l > r ? 1 : 0);
}

static void shapes_add(struct shapes *sh, struct shape s, int ndims)
{
    int k = sh->n < SHAPES_MAX ? sh->n : SHAPES_MAX;
    sh->n++;
    /* insertion into the kept, compactness-ordered prefix; candidates come
     * in lexicographic order, so equal ratios stay lexicographic */
    while (k > 0 && compactness_cmp(&s, &sh->top[k - 1], ndims) < 0) {
        if (k < SHAPES_MAX) {
            sh->top[k] = sh->top[k - 1];
        }
        k--;
    }
    if (k < SHAPES_MAX) {
        sh->top[k] = s;
    }
}

/* 3-D slices of 64 chips or more are built from 4x4x4 cubes: every
 * dimension is a multiple of 4 (every v4, v5p and tpu7x topology in xpk's
 * table from 4x4x4 up, e.g. 4x4x12, 8x8x12, 16x20x28; AI-Hypercomputer/xpk
 * src/xpk/core/system_characteristics.py). */
#define CUBE 4
#define CUBE_MIN_CHIPS 64

static bool cube_sized(int chips, int ndims)
{
    return ndims == 3 && chips >= CUBE_MIN_CHIPS;
}

/* The canonical shapes of `chips` chips in host blocks `block`: dimensions
 * non-decreasing (GKE writes 2x2x4, 4x8), each a multiple of the block (of
 * 4 for cube-sized slices when `cube`); a single host is exactly its block
 * (2x2x1 for a 4-chip v4 VM). */
static void candidates(int chips, int ndims, int cph, const int block[3], bool cube,
                       struct shapes *out)
{
    memset(out, 0, sizeof(*out));
    if (chips == cph) {
        shapes_add(out, (struct shape){{block[0], block[1], block[2]}}, ndims);
        return;
    }
    int step[3] = {block[0], block[1], block[2]};
    if (cube && cube_sized(chips, ndims)) {
        step[0] = step[1] = step[2] = CUBE;
    }
    for (int x = step[0]; x <= chips; x += step[0]) {
        if (chips % x != 0) {
            continue;
        }
        int rest = chips / x;
        if (ndims == 2) {
            if (rest >= x && rest % step[1] == 0) {
                shapes_add(out, (struct shape){{x, rest, 1}}, ndims);
            }
            continue;
        }
        for (int y = x; (long long)y * y <= rest; y++) {
            if (y % step[1] != 0 || rest % y != 0 || (rest / y) % step[2] != 0) {
                continue;
            }
            shapes_add(out, (struct shape){{x, y, rest / y}}, ndims);
        }
    }
}

/* The default shape: the unique most compact one. Below cube size its
 * max/min ratio must also be at most 2 (2x2x4, 2x4x4, 4x8, 8x16: every
 * small shape in xpk's table), so an odd size is asked about, not guessed;
 * cube-sized shapes may be long (4x4x244 is a real v5p slice). */
static bool default_shape(const struct shapes *sh, int chips, int ndims, struct shape *out)
{
    if (sh->n == 0) {
        return false;
    }
    const struct shape *b = &sh->top[0];
    if (sh->n > 1 && compactness_cmp(b, &sh->top[1], ndims) == 0) {
        return false;
    }
    if (sh->n > 1 && !cube_sized(chips, ndims) &&
        shape_max(b->d, ndims) > 2 * shape_min(b->d, ndims)) {
        return false;
    }
    *out = *b;
    return true;
}

/* Candidates for a slice without a given topology: cube-aligned shapes when
 * the slice is cube-sized and has any, else every block-divisible shape
 * (then listed, never chosen: *out_may_default false). */
static void slice_shapes(int chips, int ndims, int cph, const int block[3], struct shapes *out,
                         bool *out_may_default)
{
    candidates(chips, ndims, cph, block, true, out);
    *out_may_default = true;
    if (out->n == 0 && cube_sized(chips, ndims)) {
        candidates(chips, ndims, cph, block, false, out);
        *out_may_default = false;
    }
}

static bool shape_less(const struct shape *a, const struct shape *b)
{
    for (int i = 0; i < 3; i++) {
        if (a->d[i] != b->d[i]) {
            return a->d[i] < b->d[i];
        }
    }
    return false;
}

/* Append text to a fixed buffer without overflowing (truncates). */
static void appendf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...)
{
    size_t used = strnlen(buf, cap);
    if (used + 1 >= cap) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

/* "2x2x4 (or 2x4x2, 4x2x2)" for a slice with a default shape (its
 * permutations that still divide into host blocks), else "one of 2x2x12,
 * 2x4x6". Written into out. Returns true when a default exists. */
static bool describe_shapes(int chips, int ndims, int cph, const int block[3], char *out,
                            size_t cap)
{
    struct shapes sh;
    struct shape def;
    char t[40];
    bool may_default = false;
    slice_shapes(chips, ndims, cph, block, &sh, &may_default);
    out[0] = '\0';
    if (sh.n == 0) {
        appendf(out, cap, "no topology (%d chips do not fill hosts of %dx%dx%d chips)", chips,
                block[0], block[1], block[2]);
        return false;
    }
    if (may_default && default_shape(&sh, chips, ndims, &def)) {
        const int *d = def.d;
        format_topology(d, ndims, t, sizeof(t));
        appendf(out, cap, "%s", t);
        /* its distinct permutations that still divide into host blocks, in
         * lexicographic order */
        struct shape perms[6], seen[6];
        int np = 0, ns = 0, others = 0;
        if (ndims == 2) {
            perms[np++] = (struct shape){{d[1], d[0], 1}};
        } else {
            static const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                           {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
            for (int p = 0; p < 6; p++) {
                perms[np++] = (struct shape){{d[perm[p][0]], d[perm[p][1]], d[perm[p][2]]}};
            }
        }
        for (int p = 0; p < np; p++) {
            bool skip =
                memcmp(perms[p].d, d, sizeof(perms[p].d)) == 0 || !divides(perms[p].d, block);
            for (int k = 0; k < ns && !skip; k++) {
                skip = memcmp(seen[k].d, perms[p].d, sizeof(perms[p].d)) == 0;
            }
            if (!skip) {
                seen[ns++] = perms[p];
            }
        }
        for (int i = 0; i < ns; i++) {
            for (int k = i + 1; k < ns; k++) {
                if (shape_less(&seen[k], &seen[i])) {
                    struct shape tmp = seen[i];
                    seen[i] = seen[k];
                    seen[k] = tmp;
                }
            }
        }
        for (int i = 0; i < ns; i++) {
            format_topology(seen[i].d, ndims, t, sizeof(t));
            appendf(out, cap, "%s%s", others++ == 0 ? " (or " : ", ", t);
        }
        if (others > 0) {
            appendf(out, cap, ")");
        }
        return true;
    }
    appendf(out, cap, "one of ");
    for (int i = 0; i < sh.n && i < SHAPES_MAX; i++) {
        format_topology(sh.top[i].d, ndims, t, sizeof(t));
        appendf(out, cap, "%s%s", i == 0 ? "" : ", ", t);
    }
    if (sh.n > SHAPES_MAX) {
        appendf(out, cap, ", ...");
    }
    return false;
}

static int default_cph(const struct gen_info *gi, int chips)
{
    if (gi->cph_allowed[1] == 0) {
        return gi->cph_allowed[0];
    }
    /* xpk's rule: 1 chip per VM for a 1-chip slice, else 4. */
    return chips == 1 ? 1 : 4;
}

static bool cph_allowed(const struct gen_info *gi, int cph)
{
    for (int i = 0; i < 4 && gi->cph_allowed[i] != 0; i++) {
        if (gi->cph_allowed[i] == cph) {
            return true;
        }
    }
    return false;
}

/* "4" or "1, 4 or 8". */
static void cph_list(const struct gen_info *gi, char *out, size_t cap)
{
    int n = 0;
    while (n < 4 && gi->cph_allowed[n] != 0) {
        n++;
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        appendf(out, cap, "%s%d", i == 0 ? "" : (i == n - 1 ? " or " : ", "), gi->cph_allowed[i]);
    }
}

static int tf_table_find(enum mesh_tpu_gen g, int cores)
{
    for (size_t i = 0; i < N_ELEMS(tf_hosts); i++) {
        if (tf_hosts[i].gen == g && tf_hosts[i].cores == cores) {
            return (int)i;
        }
    }
    return -1;
}

static void tf_table_sizes(enum mesh_tpu_gen g, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < N_ELEMS(tf_hosts); i++) {
        if (tf_hosts[i].gen == g) {
            appendf(out, cap, "%s%s-%d", out[0] == '\0' ? "" : ", ", mesh_accel_gen_name(g),
                    tf_hosts[i].cores);
        }
    }
}

/* The chip topology of a v2/v3 table row: host bounds * 2,2,1. */
static void tf_table_dims(int row, int out[3])
{
    out[0] = tf_hosts[row].hb[0] * 2;
    out[1] = tf_hosts[row].hb[1] * 2;
    out[2] = tf_hosts[row].hb[2];
}

/* What a slice of `chips` chips with `cph` chips per VM uses: "2x2x4 (or
 * 2x4x2, 4x2x2)", the v2/v3 table entry, or the list of possible shapes. */
static void describe_for(const struct gen_info *gi, int chips, int cph, char *out, size_t cap)
{
    int block[3];
    block_for(cph, block);
    if (gi->tf_table) {
        int row = tf_table_find(gi->gen, chips * gi->cores_per_chip);
        int d[3];
        if (row < 0) {
            snprintf(out, cap, "no topology TensorFlow knows");
            return;
        }
        tf_table_dims(row, d);
        format_topology(d, 2, out, cap);
        return;
    }
    if (!cph_allowed(gi, cph) || chips % cph != 0 || (cph == 1 && chips != 1)) {
        cph = default_cph(gi, chips);
        block_for(cph, block);
    }
    describe_shapes(chips, gi->ndims, cph, block, out, cap);
}

static int derive_gen(const struct mesh_slice_spec *in, struct derive *dv, struct mesh_err *err)
{
    enum mesh_tpu_gen gt = MESH_GEN_UNKNOWN, gl = MESH_GEN_UNKNOWN;
    char s1[48], s2[48];
    int rc;
    if (in->accelerator_type != NULL && in->accelerator_type[0] != '\0') {
        rc = mesh_accel_parse_type(in->accelerator_type, &gt, &dv->suffix, err);
        if (rc != 0) {
            return rc;
        }
    }
    if (in->gke_accelerator != NULL && in->gke_accelerator[0] != '\0') {
        rc = mesh_accel_gen_from_gke_label(in->gke_accelerator, &gl, err);
        if (rc != 0) {
            return rc;
        }
    }
    if (gt != MESH_GEN_UNKNOWN && gl != MESH_GEN_UNKNOWN && gt != gl) {
        const char *want = mesh_accel_gen_gke_label(gt);
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "GKE accelerator label '%s' is TPU %s but accelerator type '%s' is TPU "
                            "%s; a %s slice has label %s",
                            shown(in->gke_accelerator, s1), mesh_accel_gen_name(gl),
                            shown(in->accelerator_type, s2), mesh_accel_gen_name(gt),
                            mesh_accel_gen_name(gt), want != NULL ? want : "(none: not on GKE)");
    }
    if (gt == MESH_GEN_UNKNOWN && gl == MESH_GEN_UNKNOWN) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "cannot tell the TPU generation: set the accelerator type "
                            "(TPU_ACCELERATOR_TYPE, e.g. v4-32) or the GKE accelerator label "
                            "(cloud.google.com/gke-tpu-accelerator, e.g. tpu-v4-podslice)");
    }
    dv->gi = gen_find(gt != MESH_GEN_UNKNOWN ? gt : gl);
    return 0;
}

/* Parse the given topology and bring it to the generation's written form:
 * "AxBx1" is accepted for the 2-D generations, "AxB" is refused for the 3-D
 * ones (a v4 "2x2" might mean 2x2x1 or be a v5e label by mistake). */
static int derive_topo_input(const struct mesh_slice_spec *in, struct derive *dv,
                             struct mesh_err *err)
{
    char show[48], t[40];
    int nd = 0;
    if (in->topology == NULL || in->topology[0] == '\0') {
        return 0;
    }
    int rc = mesh_accel_parse_topology(in->topology, dv->dims, &nd, err);
    if (rc != 0) {
        return rc;
    }
    const struct gen_info *gi = dv->gi;
    if (gi->ndims == 2 && nd == 3 && dv->dims[2] != 1) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU %s topologies are 2-D (AxB, e.g. 4x4) but topology '%s' is 3-D",
                            gi->prefix, shown(in->topology, show));
    }
    if (gi->ndims == 3 && nd == 2) {
        format_topology((int[3]){dv->dims[0], dv->dims[1], 1}, 3, t, sizeof(t));
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU %s topologies are 3-D (AxBxC) but topology '%s' is 2-D; did you "
                            "mean %s?",
                            gi->prefix, shown(in->topology, show), t);
    }
    dv->have_topo = true;
    return 0;
}

static int derive_chips(const struct mesh_slice_spec *in, struct derive *dv, struct mesh_err *err)
{
    const struct gen_info *gi = dv->gi;
    char t[40], want[160], other[40];
    int chips_type = 0, chips_topo = 0;
    if (dv->suffix > 0) {
        if (gi->suffix_is_cores && dv->suffix % gi->cores_per_chip != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "accelerator type %s-%d counts TensorCores, %d per chip, so the "
                                "suffix must be even (e.g. %s-%d or %s-%d)",
                                gi->prefix, dv->suffix, gi->cores_per_chip, gi->prefix,
                                dv->suffix - 1, gi->prefix, dv->suffix + 1);
        }
        chips_type = gi->suffix_is_cores ? dv->suffix / gi->cores_per_chip : dv->suffix;
        if (chips_type > MESH_ACCEL_CHIPS_MAX) {
            return mesh_err_set(err, MESH_E_RANGE, 0,
                                "accelerator type %s-%d has %d chips, more than %d", gi->prefix,
                                dv->suffix, chips_type, MESH_ACCEL_CHIPS_MAX);
        }
    }
    if (dv->have_topo) {
        chips_topo = dv->dims[0] * dv->dims[1] * dv->dims[2];
    }
    if (chips_type > 0 && chips_topo > 0 && chips_type != chips_topo) {
        format_topology(dv->dims, gi->ndims, t, sizeof(t));
        describe_for(gi, chips_type, in->chips_per_host, want, sizeof(want));
        format_type(gi, chips_topo, other, sizeof(other));
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s-%d has %d chips but topology %s has %d; %s-%d uses %s, topology %s "
                            "is %s",
                            gi->prefix, dv->suffix, chips_type, t, chips_topo, gi->prefix,
                            dv->suffix, want, t, other);
    }
    dv->chips = chips_type > 0 ? chips_type : chips_topo;
    if (dv->chips == 0 && in->hosts > 0 && in->chips_per_host > 0) {
        long long c = (long long)in->hosts * in->chips_per_host;
        if (c > MESH_ACCEL_CHIPS_MAX) {
            return mesh_err_set(err, MESH_E_RANGE, 0, "%d hosts of %d chips are more than %d chips",
                                in->hosts, in->chips_per_host, MESH_ACCEL_CHIPS_MAX);
        }
        dv->chips = (int)c;
    }
    if (dv->chips == 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "cannot tell the size of the TPU %s slice: set the accelerator type "
                            "(TPU_ACCELERATOR_TYPE, e.g. %s-%d) or the topology (TPU_TOPOLOGY)",
                            gi->prefix, gi->prefix, gi->suffix_is_cores ? 8 : 4);
    }
    return 0;
}

/* chips / each allowed VM size that divides it: "1, 2 or 4". */
static void host_options(const struct gen_info *gi, int chips, char *out, size_t cap)
{
    int opts[4], n = 0;
    for (int i = 3; i >= 0; i--) {
        int c = gi->cph_allowed[i];
        if (c != 0 && c <= chips && chips % c == 0 && (c != 1 || chips == 1)) {
            opts[n++] = chips / c;
        }
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        appendf(out, cap, "%s%d", i == 0 ? "" : (i == n - 1 ? " or " : ", "), opts[i]);
    }
    if (n == 0) {
        appendf(out, cap, "none");
    }
}

static int derive_cph(const struct mesh_slice_spec *in, struct derive *dv, struct mesh_err *err)
{
    const struct gen_info *gi = dv->gi;
    char list[40], opts[40], type[40];
    int chips = dv->chips;
    cph_list(gi, list, sizeof(list));
    format_type(gi, chips, type, sizeof(type));
    if (in->chips_per_host < 0 || in->hosts < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "chips per host (%d) and hosts (%d) must not be negative",
                            in->chips_per_host, in->hosts);
    }
    if (in->chips_per_host > 0) {
        if (!cph_allowed(gi, in->chips_per_host)) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "TPU %s VMs have %s chips (%s); %d chips per host is not possible",
                                gi->prefix, list, gi->vm_example, in->chips_per_host);
        }
        dv->cph = in->chips_per_host;
    } else if (in->hosts > 0) {
        if (chips % in->hosts != 0 || !cph_allowed(gi, chips / in->hosts)) {
            host_options(gi, chips, opts, sizeof(opts));
            return mesh_err_set(
                err, MESH_E_CONFIG, 0,
                "%s (%d chips) cannot run on %d hosts: TPU %s VMs have %s chips, so "
                "it runs on %s hosts",
                type, chips, in->hosts, gi->prefix, list, opts);
        }
        dv->cph = chips / in->hosts;
    } else {
        dv->cph = default_cph(gi, chips);
    }
    if (chips % dv->cph != 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s has %d chips, which do not fill whole %d-chip VMs; TPU %s VMs "
                            "have %s chips, so a slice has %s",
                            type, chips, dv->cph, gi->prefix, list,
                            gi->cph_allowed[1] == 0 ? "a multiple of 4 chips"
                                                    : "1 chip or a multiple of 4 chips");
    }
    /* 1-chip VMs (ct5lp-hightpu-1t, ct6e-standard-1t, tpu7x-standard-1t)
     * only run 1-chip slices: xpk's rule "1 chip per VM if the slice has 1
     * chip, else 4". 8-chip VMs are allowed for any multiple of
     * 8: GCE counts v5e/v6e hosts of 8 chips (a 4x4 is 2 hosts). */
    if (dv->cph == 1 && chips != 1) {
        host_options(gi, chips, opts, sizeof(opts));
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s has %d chips but 1-chip VMs (%.*s) only run 1x1 slices; it runs on "
                            "%s hosts",
                            type, chips, (int)strcspn(gi->vm_example, "/"), gi->vm_example, opts);
    }
    if (in->hosts > 0 && chips / dv->cph != in->hosts) {
        host_options(gi, chips, opts, sizeof(opts));
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s with %d chips per host has %d hosts, not %d (with %s chips per "
                            "VM it has %s hosts)",
                            type, dv->cph, chips / dv->cph, in->hosts, list, opts);
    }
    block_for(dv->cph, dv->block);
    return 0;
}

static int derive_topology(struct derive *dv, struct mesh_err *err)
{
    const struct gen_info *gi = dv->gi;
    char t[40], want[160], type[40], hb[MESH_ACCEL_BOUNDS_MAX];
    format_type(gi, dv->chips, type, sizeof(type));
    if (gi->tf_table) {
        int row = tf_table_find(gi->gen, dv->chips * gi->cores_per_chip);
        int d[3];
        if (row < 0) {
            tf_table_sizes(gi->gen, want, sizeof(want));
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s is not a TPU %s slice size TensorFlow knows host bounds for; "
                                "use one of %s",
                                type, gi->prefix, want);
        }
        tf_table_dims(row, d);
        if (dv->have_topo && memcmp(d, dv->dims, sizeof(d)) != 0) {
            format_topology(dv->dims, 2, t, sizeof(t));
            format_topology(d, 2, want, sizeof(want));
            return mesh_err_set(
                err, MESH_E_CONFIG, 0, "%s uses topology %s (TensorFlow host bounds %s), not %s",
                type, want, mesh_accel_format_bounds(tf_hosts[row].hb, hb, sizeof(hb)), t);
        }
        memcpy(dv->dims, d, sizeof(d));
        return 0;
    }
    if (dv->have_topo) {
        if (!divides(dv->dims, dv->block)) {
            format_topology(dv->dims, gi->ndims, t, sizeof(t));
            describe_shapes(dv->chips, gi->ndims, dv->cph, dv->block, want, sizeof(want));
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "topology %s does not divide into %d-chip hosts of %dx%dx%d chips; "
                                "%s with %d chips per host uses %s",
                                t, dv->cph, dv->block[0], dv->block[1], dv->block[2], type, dv->cph,
                                want);
        }
        return 0;
    }
    struct shapes sh;
    struct shape def;
    bool may_default = false;
    slice_shapes(dv->chips, gi->ndims, dv->cph, dv->block, &sh, &may_default);
    if (!may_default || !default_shape(&sh, dv->chips, gi->ndims, &def)) {
        describe_shapes(dv->chips, gi->ndims, dv->cph, dv->block, want, sizeof(want));
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s (%d chips, %d per host) has no single default topology; it could "
                            "be %s: set TPU_TOPOLOGY (the cloud.google.com/gke-tpu-topology label)",
                            type, dv->chips, dv->cph, want);
    }
    memcpy(dv->dims, def.d, sizeof(dv->dims));
    return 0;
}

int mesh_slice_derive(const struct mesh_slice_spec *in, struct mesh_slice *out,
                      struct mesh_err *err)
{
    if (in == NULL || out == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "mesh_slice_derive: NULL argument");
    }
    struct derive dv;
    memset(&dv, 0, sizeof(dv));
    int rc = derive_gen(in, &dv, err);
    if (rc == 0) {
        rc = derive_topo_input(in, &dv, err);
    }
    if (rc == 0) {
        rc = derive_chips(in, &dv, err);
    }
    if (rc == 0) {
        rc = derive_cph(in, &dv, err);
    }
    if (rc == 0) {
        rc = derive_topology(&dv, err);
    }
    if (rc != 0) {
        return rc;
    }
    const struct gen_info *gi = dv.gi;
    struct mesh_slice s;
    memset(&s, 0, sizeof(s));
    s.gen = gi->gen;
    format_type(gi, dv.chips, s.accelerator_type, sizeof(s.accelerator_type));
    format_topology(dv.dims, gi->ndims, s.topology, sizeof(s.topology));
    s.ndims = gi->ndims;
    memcpy(s.dims, dv.dims, sizeof(s.dims));
    s.chips = dv.chips;
    s.hosts = dv.chips / dv.cph;
    s.chips_per_host = dv.cph;
    s.cores_per_chip = gi->cores_per_chip;
    s.devices_per_host = dv.cph * gi->devices_per_chip;
    for (int i = 0; i < 3; i++) {
        s.chips_per_host_bounds[i] = dv.block[i];
        s.host_bounds[i] = dv.dims[i] / dv.block[i];
        s.mesh_shape[i] = dv.dims[i];
    }
    s.mesh_shape[3] = gi->devices_per_chip;
    *out = s;
    return 0;
}
