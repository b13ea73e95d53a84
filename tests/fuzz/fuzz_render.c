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
 * shell metacharacter, JSON files parse, and the gRPC snapshot of the same
 * input (topo_msg.h) shows topology.json's workers. A broken promise aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "core/render.h"
#include "core/topo_msg.h"

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

/* The gRPC snapshot of a rendered input shows topology.json's workers:
 * the same count, addresses ("" for null) and digest. */
static void check_snapshot(const struct mesh_render_input *in, const char *json, size_t len)
{
    uint8_t *pb = NULL;
    size_t pb_len = 0;
    if (mesh_topo_msg_snapshot(in, "1", &pb, &pb_len, NULL) < 0) {
        abort(); /* topology.json rendered: the same checks passed */
    }
    Tpumesh__V1__TopologySnapshot *m = tpumesh__v1__topology_snapshot__unpack(NULL, pb_len, pb);
    cJSON *j = cJSON_ParseWithLength(json, len);
    const cJSON *ws = cJSON_GetObjectItem(j, "workers");
    const cJSON *dg = cJSON_GetObjectItem(j, "workersDigest");
    if (m == NULL || m->n_workers != in->nworkers || m->generation != in->generation ||
        (size_t)cJSON_GetArraySize(ws) != m->n_workers || !cJSON_IsString(dg) ||
        strcmp(dg->valuestring, m->workers_digest) != 0) {
        abort();
    }
    for (size_t i = 0; i < m->n_workers; i++) {
        const cJSON *a = cJSON_GetObjectItem(cJSON_GetArrayItem(ws, (int)i), "address");
        if (strcmp(cJSON_IsString(a) ? a->valuestring : "", m->workers[i]->address) != 0) {
            abort();
        }
    }
    cJSON_Delete(j);
    tpumesh__v1__topology_snapshot__free_unpacked(m, NULL);
    mesh_free(pb);
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
    in.megascale_port = size % 5 == 2 ? data[3] * 300 : 0;
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    if (mesh_render_all(&in, &out, NULL) == 0) {
        check_json(out.data[MESH_FILE_TOPOLOGY_JSON], out.len[MESH_FILE_TOPOLOGY_JSON]);
        check_snapshot(&in, out.data[MESH_FILE_TOPOLOGY_JSON], out.len[MESH_FILE_TOPOLOGY_JSON]);
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

    char *cs = NULL;
    size_t cs_len = 0;
    if (mesh_render_node_tf_config(hosts, NULL, n, &cs, &cs_len, NULL) == 0) {
        check_json(cs, cs_len);
        mesh_free(cs);
    }
    mesh_free(w);
    mesh_free(bufs);
    return 0;
}
