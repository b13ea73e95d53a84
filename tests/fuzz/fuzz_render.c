/*
 * fuzz_render.c - the renderers over arbitrary worker lists.
 *
 * Input: byte 0 = own index (signed), byte 1 = flags (bits 0-1 address
 * mode, bit 2 complete, bit 3 with slice, bit 4 explicit job name), byte 2
 * = expected count, bytes 3-4 = port (big endian); then lines
 * "host|ip|pod[|job]" (one worker per line, index = line number, the job
 * name taken from the first line that has a fourth field).
 *
 * Never crashes, and whatever renders keeps the promises of render.h: an
 * env file is KEY='value' lines whose values carry no quote, newline or
 * shell metacharacter, JSON files parse, and the incremental renderer gives
 * the full renderer's bytes and errors. A broken promise aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "core/render.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORKERS 64

static void copy_field(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
    }
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

static void check_env(const char *s, size_t len)
{
    if (len == 0 || s[len - 1] != '\n' || strlen(s) != len) {
        abort();
    }
    const char *line = s;
    while (*line != '\0') {
        const char *nl = strchr(line, '\n');
        const char *eq = memchr(line, '=', (size_t)(nl - line));
        if (eq == NULL || eq == line || eq[1] != '\'' || nl[-1] != '\'' || nl - eq < 3) {
            abort();
        }
        for (const char *k = line; k < eq; k++) {
            if (!((*k >= 'A' && *k <= 'Z') || *k == '_')) {
                abort();
            }
        }
        /* Validated values never need the '\'' escape or contain
         * anything sh would interpret even unquoted. */
        for (const char *v = eq + 2; v < nl - 1; v++) {
            if (strchr("'\"`$\\;&|<>(){}*?! \t\r", *v) != NULL) {
                abort();
            }
        }
        line = nl + 1;
    }
}

static void check_json(const char *s, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(s, len);
    if (j == NULL) {
        abort();
    }
    cJSON_Delete(j);
}

/* The incremental renderer (mesh_render_cache_*) agrees with the full one,
 * bytes and errors: the input, then derived changes (a worker takes another
 * one's ip, host or pod name, readiness flips, the generation moves), each
 * rendered both ways, half of them with the cache told which worker
 * changed. Changes w's pointers (into the same buffers). */
static void check_cache(struct mesh_render_input *in, struct mesh_worker *w, size_t n)
{
    struct mesh_render_cache *c = mesh_render_cache_new();
    for (size_t step = 0; step < 4 + n; step++) {
        if (step > 0 && n > 0) {
            struct mesh_worker *a = &w[step % n];
            const struct mesh_worker *b = &w[(step * 7 + 1) % n];
            if (step % 3 == 0) {
                a->ip = b->ip;
            } else if (step % 3 == 1) {
                a->host = b->host;
            } else {
                a->pod = b->pod;
                a->ready = !a->ready;
            }
            in->generation++;
        }
        struct mesh_render_out full;
        struct mesh_render_out view;
        struct mesh_err e1;
        struct mesh_err e2;
        mesh_err_clear(&e1);
        mesh_err_clear(&e2);
        mesh_render_out_init(&full);
        int r1 = mesh_render_all(in, &full, &e1);
        /* On every other step tell the cache which worker changed (the
         * sidecar's patched updates do): the one a took its values into. */
        size_t dirty = n > 0 ? step % n : 0;
        in->dirty = step > 0 && n > 0 && step % 2 == 0 ? &dirty : NULL;
        in->ndirty = in->dirty != NULL ? 1 : 0;
        int r2 = mesh_render_cache_update(c, in, NULL, &e2);
        in->dirty = NULL;
        in->ndirty = 0;
        if (r1 != r2 || (r1 < 0 && strcmp(e1.msg, e2.msg) != 0)) {
            abort();
        }
        mesh_render_cache_view(c, &view);
        for (int i = 0; i < MESH_FILE__COUNT; i++) {
            if (full.len[i] != view.len[i] || (full.data[i] == NULL) != (view.data[i] == NULL) ||
                (full.data[i] != NULL && memcmp(full.data[i], view.data[i], full.len[i]) != 0)) {
                abort();
            }
        }
        mesh_render_out_cleanup(&full);
    }
    mesh_render_cache_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) {
        return 0;
    }
    struct mesh_slice slice;
    memset(&slice, 0, sizeof(slice));
    memcpy(slice.accelerator_type, "v4-32", 6);
    memcpy(slice.topology, "2x2x4", 6);
    slice.hosts = 4;
    slice.host_bounds[2] = 4;

    struct mesh_worker *w = mesh_calloc(MAX_WORKERS, sizeof(*w));
    /* The workers borrow their strings from these buffers (model.h). */
    struct {
        char host[MESH_HOST_MAX], ip[MESH_IP_MAX], pod[MESH_POD_MAX];
    } *bufs = mesh_calloc(MAX_WORKERS, sizeof(*bufs));
    const char *hosts[MAX_WORKERS];
    char job[MESH_JOB_NAME_MAX + 8] = "";
    size_t n = 0;
    const char *p = (const char *)data + 5;
    size_t left = size - 5;
    while (left > 0 && n < MAX_WORKERS) {
        const char *nl = memchr(p, '\n', left);
        size_t ll = nl != NULL ? (size_t)(nl - p) : left;
        const char *f[4] = {0};
        size_t fl[4] = {0};
        size_t k = split_fields(p, ll, f, fl);
        w[n].index = (int)n;
        w[n].ready = (ll & 1) != 0;
        copy_field(bufs[n].host, sizeof(bufs[n].host), f[0], fl[0]);
        if (k > 1) {
            copy_field(bufs[n].ip, sizeof(bufs[n].ip), f[1], fl[1]);
        }
        if (k > 2) {
            copy_field(bufs[n].pod, sizeof(bufs[n].pod), f[2], fl[2]);
        }
        w[n].host = bufs[n].host;
        w[n].ip = bufs[n].ip;
        w[n].pod = bufs[n].pod;
        if (k > 3 && job[0] == '\0') {
            copy_field(job, sizeof(job), f[3], fl[3]);
        }
        hosts[n] = w[n].host;
        n++;
        p += ll + (nl != NULL ? 1 : 0);
        left -= ll + (nl != NULL ? 1 : 0);
    }

    struct mesh_render_input in;
    memset(&in, 0, sizeof(in));
    in.workers = w;
    in.nworkers = n;
    in.self_index = (int8_t)data[0];
    in.mode = (enum mesh_addr_mode)(data[1] & 3);
    in.complete = (data[1] & 4) != 0;
    in.slice = (data[1] & 8) != 0 ? &slice : NULL;
    in.job_name = (data[1] & 16) != 0 ? job : NULL;
    in.expected = data[2];
    in.port = (data[3] << 8) | data[4];
    in.generation = size;

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
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    if (mesh_render_all(&in, &out, NULL) == 0) {
        check_json(out.data[MESH_FILE_TOPOLOGY_JSON], out.len[MESH_FILE_TOPOLOGY_JSON]);
        if (out.data[MESH_FILE_TF_CONFIG] != NULL) {
            check_json(out.data[MESH_FILE_TF_CONFIG], out.len[MESH_FILE_TF_CONFIG]);
        }
        static const enum mesh_render_file_id envs[] = {MESH_FILE_DTENSOR_ENV, MESH_FILE_TPU_ENV,
                                                        MESH_FILE_JAX_ENV};
        for (size_t i = 0; i < 3; i++) {
            if (out.data[envs[i]] != NULL) {
                check_env(out.data[envs[i]], out.len[envs[i]]);
                /* The exported size of a line never exceeds the file. */
                if (mesh_render_env_longest(out.data[envs[i]], out.len[envs[i]], NULL, NULL) >
                    out.len[envs[i]]) {
                    abort();
                }
            }
        }
    }
    mesh_render_out_cleanup(&out);

    /* The diff against the same list with one worker dropped. */
    struct mesh_render_input in2 = in;
    if (n > 0) {
        in2.nworkers = n - 1;
    }
    (void)mesh_render_diff(&in, &in2, NULL);

    char *cs = NULL;
    size_t cs_len = 0;
    if (mesh_render_node_tf_config(hosts, NULL, n, &cs, &cs_len, NULL) == 0) {
        check_json(cs, cs_len);
        mesh_free(cs);
    }
    check_cache(&in, w, n);
    mesh_free(w);
    mesh_free(bufs);
    return 0;
}
