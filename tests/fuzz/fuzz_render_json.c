/*
 * fuzz_render_json.c - the renderers against their reference
 * (tests/unit/render_oracle.h: the cJSON renderer they replaced) on
 * fuzzer-built worker lists. Any difference in return code, error code,
 * error message or a single byte of any file aborts.
 *
 * Input (the layout of fuzz_render.c, so its corpus seeds this one too):
 * byte 0 = own index (signed), byte 1 = flags (bits 0-1 address mode, bit 2
 * complete, bit 3 with slice, bit 4 explicit job name, bit 5 a large
 * generation, bit 6 slice strings from the first two pod fields, bit 7
 * indices = 2 x line number), byte 2 = expected count, bytes 3-4 = port (big
 * endian); then lines "host|ip|pod[|job]", one worker per line. Fields may
 * be longer than the model's bounds (the checks must refuse them alike).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/render_oracle.h"
#include "core/mem.h"
#include "core/render.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORKERS 128
#define FIELD_MAX 300

struct fields {
    char host[FIELD_MAX];
    char ip[FIELD_MAX];
    char pod[FIELD_MAX];
};

static void copy_field(char *dst, const char *src, size_t n)
{
    if (n >= FIELD_MAX) {
        n = FIELD_MAX - 1;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* A C string cut to fit cap bytes with its NUL. */
static void copy_bounded(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Split one line into up to 4 '|'-separated fields. */
static size_t split_fields(const char *p, size_t n, const char *f[4], size_t fl[4])
{
    size_t k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n && k < 4; i++) {
        if (i == n || p[i] == '|') {
            f[k] = p + start;
            fl[k] = i - start;
            k++;
            start = i + 1;
        }
    }
    return k;
}

static void same(int rc1, const struct mesh_err *e1, int rc2, const struct mesh_err *e2,
                 const char *d1, size_t l1, const char *d2, size_t l2)
{
    if (rc1 != rc2) {
        abort();
    }
    if (rc1 < 0) {
        if (e1->code != e2->code || strcmp(e1->msg, e2->msg) != 0) {
            abort();
        }
        return;
    }
    if ((d1 == NULL) != (d2 == NULL)) {
        abort();
    }
    if (d1 != NULL && (l1 != l2 || memcmp(d1, d2, l1) != 0 || d1[l1] != '\0')) {
        abort();
    }
}

static void compare(const struct mesh_render_input *in)
{
    typedef int (*render_fn)(const struct mesh_render_input *, char **, size_t *,
                             struct mesh_err *);
    static const render_fn now[] = {mesh_render_topology_json, mesh_render_dtensor_env,
                                    mesh_render_tf_config, mesh_render_tpu_env,
                                    mesh_render_jax_env};
    static const render_fn old[] = {o_topology_json, o_dtensor_env, o_tf_config, o_tpu_env,
                                    o_jax_env};
    struct mesh_err e1;
    struct mesh_err e2;
    memset(&e1, 0, sizeof(e1));
    memset(&e2, 0, sizeof(e2));
    struct mesh_render_out a;
    struct mesh_render_out b;
    mesh_render_out_init(&a);
    mesh_render_out_init(&b);
    int rc1 = mesh_render_all(in, &a, &e1);
    int rc2 = o_render_all(in, &b, &e2);
    same(rc1, &e1, rc2, &e2, NULL, 0, NULL, 0);
    for (int f = 0; rc1 == 0 && f < MESH_FILE__COUNT; f++) {
        same(0, &e1, 0, &e2, a.data[f], a.len[f], b.data[f], b.len[f]);
    }
    mesh_render_out_cleanup(&a);
    mesh_render_out_cleanup(&b);
    for (size_t i = 0; i < sizeof(now) / sizeof(now[0]); i++) {
        char *d1 = NULL;
        char *d2 = NULL;
        size_t l1 = 0;
        size_t l2 = 0;
        rc1 = now[i](in, &d1, &l1, &e1);
        rc2 = old[i](in, &d2, &l2, &e2);
        same(rc1, &e1, rc2, &e2, d1, l1, d2, l2);
        mesh_free(d1);
        mesh_free(d2);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) {
        return 0;
    }
    uint8_t flags = data[1];
    struct mesh_slice slice;
    memset(&slice, 0, sizeof(slice));
    memcpy(slice.accelerator_type, "v4-32", 6);
    memcpy(slice.topology, "2x2x4", 6);
    slice.chips = 16;
    slice.hosts = (int8_t)data[2];
    slice.chips_per_host = 4;
    slice.cores_per_chip = 2;
    slice.devices_per_host = 4;
    slice.host_bounds[2] = 4;
    slice.chips_per_host_bounds[0] = data[3];
    slice.mesh_shape[3] = -(int)data[4];

    struct mesh_worker *w = mesh_calloc(MAX_WORKERS, sizeof(*w));
    struct fields *bufs = mesh_calloc(MAX_WORKERS, sizeof(*bufs));
    char job[FIELD_MAX] = "";
    size_t n = 0;
    const char *p = (const char *)data + 5;
    size_t left = size - 5;
    while (left > 0 && n < MAX_WORKERS) {
        const char *nl = memchr(p, '\n', left);
        size_t ll = nl != NULL ? (size_t)(nl - p) : left;
        const char *f[4] = {0};
        size_t fl[4] = {0};
        size_t k = split_fields(p, ll, f, fl);
        w[n].index = (flags & 128) != 0 ? (int)(2 * n) : (int)n;
        w[n].ready = (ll & 1) != 0;
        copy_field(bufs[n].host, f[0], fl[0]);
        if (k > 1) {
            copy_field(bufs[n].ip, f[1], fl[1]);
        }
        if (k > 2) {
            copy_field(bufs[n].pod, f[2], fl[2]);
        }
        if (k > 3 && job[0] == '\0') {
            copy_field(job, f[3], fl[3]);
        }
        w[n].host = bufs[n].host;
        w[n].ip = bufs[n].ip;
        w[n].pod = bufs[n].pod;
        n++;
        p += ll + (nl != NULL ? 1 : 0);
        left -= ll + (nl != NULL ? 1 : 0);
    }
    if ((flags & 64) != 0 && n >= 2) {
        /* Arbitrary bytes in the slice strings: topology.json escapes them. */
        copy_bounded(slice.accelerator_type, sizeof(slice.accelerator_type), bufs[0].pod);
        copy_bounded(slice.topology, sizeof(slice.topology), bufs[1].pod);
    }

    struct mesh_render_input in;
    memset(&in, 0, sizeof(in));
    in.workers = w;
    in.nworkers = n;
    in.self_index = (int8_t)data[0];
    in.mode = (enum mesh_addr_mode)(flags & 3);
    in.complete = (flags & 4) != 0;
    in.slice = (flags & 8) != 0 ? &slice : NULL;
    in.job_name = (flags & 16) != 0 ? job : NULL;
    in.expected = data[2];
    in.port = (data[3] << 8) | data[4];
    in.generation = size;
    if ((flags & 32) != 0) {
        /* Every magnitude up to one past the limit. */
        uint64_t g = (uint64_t)size * 0x9e3779b97f4a7c15ULL;
        in.generation = (g >> (data[2] % 11)) % (MESH_RENDER_GENERATION_MAX + 2);
    }
    /* Multi-slice fields from the input's length (the corpus format stays):
     * a few slice counts, one slice listed alone, MEGASCALE_PORT, and
     * coordinators taken from the input's bytes (validated or refused). */
    unsigned ms = (unsigned)(size % 13);
    in.slices = ms <= 4 ? (int)ms : 0;
    in.slice_only = in.slices >= 2 && size % 3 == 0;
    in.slice_id = data[4] % (in.slices + 1);
    in.megascale_coordinator = n > 0 && size % 2 == 0 ? w[0].pod : NULL;
    in.jax_coordinator = size % 4 == 1 ? job : NULL;
    in.megascale_port = size % 5 == 2 ? data[3] * 300 : 0;
    compare(&in);
    mesh_free(w);
    mesh_free(bufs);
    return 0;
}
