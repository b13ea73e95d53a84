/*
 * render_oracle.h - the reference renderer for the differential test
 * (tests/unit/test_render_json.c) and fuzz target
 * (tests/fuzz/fuzz_render_json.c): the renderer tpumesh shipped before the
 * direct writers, kept verbatim in behaviour, with validity rules of its own
 * (not core/names.c's). It checks every worker in
 * every renderer, builds topology.json and tf_config.json as cJSON trees
 * printed with cJSON_Print / cJSON_PrintUnformatted, and assembles the env
 * files in a mesh_buf with mesh_render_shell_quote. Same signatures and
 * ownership as the mesh_render_* functions of core/render.h (o_render_all
 * as mesh_render_all). Static functions: include it from one .c file, which
 * must use o_render_all and the five renderers.
 */
#ifndef MESH_TEST_RENDER_ORACLE_H
#define MESH_TEST_RENDER_ORACLE_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/mem.h"
#include "core/render.h"

#define ORACLE_MAX_BYTES ((size_t)16 << 20)
#define ORACLE_ADDR_MAX (MESH_HOST_MAX + 16)

static void oracle_escape(const char *s, size_t max_in, char *out, size_t out_size)
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
    bool more = i < max_in ? s[i] != '\0' : strnlen(s, max_in + 1) > max_in;
    if (more && o + 4 < out_size) {
        memcpy(out + o, "...", 4);
    }
}

/* The oracle's own validity rules, written from RFC 1123 and TensorFlow's
 * job-name rule byte by byte, independent of core/names.c: the renderer's
 * verdicts are checked against these, not against themselves. */
static bool oracle_is_dns_name(const char *s, size_t max, bool lower_only)
{
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > 253) {
        return false;
    }
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        char c = i < n ? s[i] : '.';
        if (c == '.') {
            if (label == 0 || label > 63 || s[i - 1] == '-' || s[i - label] == '-') {
                return false;
            }
            label = 0;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                  (!lower_only && c >= 'A' && c <= 'Z');
        if (!ok) {
            return false;
        }
        label++;
    }
    return true;
}

static bool render_oracle_is_hostname(const char *s)
{
    return oracle_is_dns_name(s, MESH_HOST_MAX - 1, false);
}

static bool oracle_is_ip(const char *s)
{
    unsigned char bin[16];
    return strnlen(s, MESH_IP_MAX) < MESH_IP_MAX &&
           (inet_pton(AF_INET, s, bin) == 1 || inet_pton(AF_INET6, s, bin) == 1);
}

static bool oracle_is_job_name(const char *s)
{
    size_t n = strnlen(s, MESH_JOB_NAME_MAX);
    if (n == 0 || n >= MESH_JOB_NAME_MAX || !((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z')) {
        return false;
    }
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_')) {
            return false;
        }
    }
    return true;
}

/* A worker's verdict by the oracle's rules. The wording of the error is the
 * renderer's (mesh_render_check_worker), but only when both agree that the
 * worker is invalid; a disagreement is an error whose message no renderer
 * produces, so the differential comparison fails on it. */
static int o_check_worker(const struct mesh_worker *w, struct mesh_err *err)
{
    bool ok = strnlen(w->host, MESH_HOST_MAX) < MESH_HOST_MAX &&
              strnlen(w->pod, MESH_POD_MAX) < MESH_POD_MAX;
    ok = ok && (w->host[0] == '\0' || render_oracle_is_hostname(w->host) || oracle_is_ip(w->host));
    ok = ok && (w->ip[0] == '\0' || oracle_is_ip(w->ip));
    ok = ok && (w->pod[0] == '\0' || oracle_is_dns_name(w->pod, MESH_POD_MAX - 1, true));
    int rc = mesh_render_check_worker(w, err);
    if (ok != (rc == 0)) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "oracle and renderer disagree on worker %d",
                            w->index);
    }
    return rc;
}

static int o_expected(const struct mesh_render_input *in)
{
    if (in->slice_only) {
        long long t = (long long)(in->slices > 1 ? in->slices : 1) * (long long)in->nworkers;
        return t > MESH_RENDER_MAX_WORKERS ? MESH_RENDER_MAX_WORKERS : (int)t;
    }
    return in->expected > 0 ? in->expected : (int)in->nworkers;
}

/* Slice facts: count, hosts per slice, own slice (-1), its first global
 * index and its first position in workers[]. */
struct o_slices {
    int count, hps, self, base_idx;
    size_t base_pos;
};

static struct o_slices o_slices_of(const struct mesh_render_input *in)
{
    struct o_slices r;
    r.count = in->slices > 1 ? in->slices : 1;
    r.hps = in->slice_only ? (int)in->nworkers : o_expected(in) / r.count;
    if (in->slice_only) {
        r.self = in->slice_id;
    } else if (in->self_index >= 0 && r.hps > 0) {
        r.self = in->self_index / r.hps;
    } else {
        r.self = -1;
    }
    r.base_idx = r.self > 0 ? r.self * r.hps : 0;
    r.base_pos = in->slice_only ? 0 : (size_t)r.base_idx;
    return r;
}

static bool o_is_host(const char *s)
{
    return s == NULL || s[0] == '\0' || render_oracle_is_hostname(s) || oracle_is_ip(s);
}

static const char *o_job_name(const struct mesh_render_input *in)
{
    if (in->job_name != NULL && in->job_name[0] != '\0') {
        return in->job_name;
    }
    return o_expected(in) == 1 ? "localhost" : "worker";
}

static int o_check_common(const struct mesh_render_input *in, struct mesh_err *err)
{
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
    if (in->job_name != NULL && in->job_name[0] != '\0' && !oracle_is_job_name(in->job_name)) {
        char shown[96];
        oracle_escape(in->job_name, MESH_JOB_NAME_MAX, shown, sizeof(shown));
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "job name \"%s\" is not a TensorFlow job name "
                            "(a letter, then letters, digits or '_', at most %d)",
                            shown, MESH_JOB_NAME_MAX - 1);
    }
    if (in->self_index < -1 || in->self_index >= MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "own worker index %d is out of range",
                            in->self_index);
    }
    if (in->slices < 0 || in->slices > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "slice count %d is outside 0..%d", in->slices,
                            MESH_RENDER_MAX_WORKERS);
    }
    if (in->megascale_port < 0 || in->megascale_port > 65535) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "MEGASCALE_PORT %d is outside 1..65535 (0 = the default %d)",
                            in->megascale_port, MESH_RENDER_MEGASCALE_PORT);
    }
    const char *names[2] = {"JAX coordinator", "MEGASCALE_COORDINATOR_ADDRESS"};
    const char *hosts[2] = {in->jax_coordinator, in->megascale_coordinator};
    for (int k = 0; k < 2; k++) {
        if (!o_is_host(hosts[k])) {
            char shown[96];
            oracle_escape(hosts[k], MESH_HOST_MAX, shown, sizeof(shown));
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "%s \"%s\" is not a host name or IP address (no port, no scheme)",
                                names[k], shown);
        }
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
    } else if (in->slices > 1 && o_expected(in) % in->slices != 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "%d workers do not split into %d equal slices: check the expected "
                            "worker count (the total over all slices)",
                            o_expected(in), in->slices);
    }
    for (size_t i = 0; i < in->nworkers; i++) {
        int rc = o_check_worker(&in->workers[i], err);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

static const char *o_bare(const struct mesh_worker *w, enum mesh_addr_mode mode)
{
    const char *a = mode == MESH_ADDR_DNS ? w->host : w->ip;
    return a[0] != '\0' ? a : NULL;
}

static int o_check_complete(const struct mesh_render_input *in, enum mesh_addr_mode mode,
                            struct mesh_err *err)
{
    int n = o_expected(in);
    if (!in->complete) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "the worker list is incomplete: env files keep their last version");
    }
    if (in->slice_only) {
        struct o_slices sl = o_slices_of(in);
        int m = (int)in->nworkers;
        if (m == 0) {
            return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "no worker of slice %d is known",
                                in->slice_id);
        }
        if (in->self_index < sl.base_idx || in->self_index >= sl.base_idx + m) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "own worker index %d is outside slice %d's %d..%d: check "
                                "TPU_WORKER_ID and MEGASCALE_SLICE_ID",
                                in->self_index, in->slice_id, sl.base_idx, sl.base_idx + m - 1);
        }
        for (int i = 0; i < m; i++) {
            const struct mesh_worker *w = &in->workers[i];
            if (w->index != sl.base_idx + i) {
                return mesh_err_set(err, MESH_E_INVAL, 0,
                                    "worker at position %d of slice %d has index %d, not %d", i,
                                    in->slice_id, w->index, sl.base_idx + i);
            }
            if (o_bare(w, mode) == NULL) {
                return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", w->index,
                                    mode == MESH_ADDR_DNS ? "host name" : "pod IP");
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
    if (n == 0 || (size_t)n != in->nworkers) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "%zu of %d workers known", in->nworkers, n);
    }
    if (in->self_index < 0 || in->self_index >= n) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "own worker index %d is outside 0..%d: check TPU_WORKER_ID or the "
                            "pod's completion index",
                            in->self_index, n - 1);
    }
    for (int i = 0; i < n; i++) {
        const struct mesh_worker *w = &in->workers[i];
        if (w->index != i) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "worker at position %d has index %d: the list must be dense "
                                "and in index order",
                                i, w->index);
        }
        if (o_bare(w, mode) == NULL) {
            return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", i,
                                mode == MESH_ADDR_DNS ? "host name" : "pod IP");
        }
    }
    return 0;
}

static int o_prepare_file(const struct mesh_render_input *in, const char *file,
                          enum mesh_addr_mode *out_mode, struct mesh_err *err);

static int o_prepare(const struct mesh_render_input *in, enum mesh_addr_mode *out_mode,
                     struct mesh_err *err)
{
    return o_prepare_file(in, NULL, out_mode, err);
}

/* file: a file that needs every slice (NULL: tpu.env, jax.env). */
static int o_prepare_file(const struct mesh_render_input *in, const char *file,
                          enum mesh_addr_mode *out_mode, struct mesh_err *err)
{
    if (file != NULL && in->slice_only && in->complete) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "%s needs every slice's workers; only slice %d is listed", file,
                            in->slice_id);
    }
    int rc = o_check_common(in, err);
    if (rc < 0) {
        return rc;
    }
    enum mesh_addr_mode mode = mesh_render_effective_mode(in->mode, in->workers, in->nworkers);
    rc = o_check_complete(in, mode, err);
    if (rc < 0) {
        return rc;
    }
    *out_mode = mode;
    return 0;
}

static int o_env_line(struct mesh_buf *b, const char *key, const char *value, struct mesh_err *err)
{
    int rc = mesh_buf_printf(b, err, "%s=", key);
    if (rc == 0) {
        rc = mesh_render_shell_quote(b, value, err);
    }
    if (rc == 0) {
        rc = mesh_buf_puts(b, "\n", err);
    }
    return rc;
}

static int o_env_line_int(struct mesh_buf *b, const char *key, long long v, struct mesh_err *err)
{
    char num[32];
    snprintf(num, sizeof(num), "%lld", v);
    return o_env_line(b, key, num, err);
}

static int o_join(const struct mesh_render_input *in, enum mesh_addr_mode mode, int port,
                  struct mesh_buf *b, struct mesh_err *err)
{
    for (size_t i = 0; i < in->nworkers; i++) {
        char addr[ORACLE_ADDR_MAX];
        int rc;
        if (port > 0) {
            rc = mesh_render_worker_address(&in->workers[i], mode, port, addr, sizeof(addr), err);
        } else {
            rc = snprintf(addr, sizeof(addr), "%s", o_bare(&in->workers[i], mode)) < 0
                     ? -MESH_E_INVAL
                     : 0;
        }
        if (rc == 0 && i > 0) {
            rc = mesh_buf_puts(b, ",", err);
        }
        if (rc == 0) {
            rc = mesh_buf_puts(b, addr, err);
        }
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

static int o_finish(struct mesh_buf *b, int rc, char **out_data, size_t *out_len)
{
    if (rc < 0) {
        mesh_buf_cleanup(b);
        return rc;
    }
    *out_data = mesh_buf_steal(b, out_len);
    return 0;
}

static int o_dtensor_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                         struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = o_prepare_file(in, "dtensor.env", &mode, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_buf jobs;
    struct mesh_buf b;
    mesh_buf_init(&jobs, ORACLE_MAX_BYTES);
    mesh_buf_init(&b, ORACLE_MAX_BYTES);
    rc = o_join(in, mode, in->port, &jobs, err);
    if (rc == 0) {
        rc = o_env_line(&b, "DTENSOR_JOBS", mesh_buf_str(&jobs), err);
    }
    if (rc == 0) {
        rc = o_env_line_int(&b, "DTENSOR_CLIENT_ID", in->self_index, err);
    }
    if (rc == 0) {
        rc = o_env_line(&b, "DTENSOR_JOB_NAME", o_job_name(in), err);
    }
    if (rc == 0) {
        rc = o_env_line_int(&b, "DTENSOR_NUM_CLIENTS", (long long)in->nworkers, err);
    }
    mesh_buf_cleanup(&jobs);
    return o_finish(&b, rc, out_data, out_len);
}

static int o_tpu_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                     struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = o_prepare(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_buf hosts;
    struct mesh_buf b;
    mesh_buf_init(&hosts, ORACLE_MAX_BYTES);
    mesh_buf_init(&b, ORACLE_MAX_BYTES);
    struct o_slices sl = o_slices_of(in);
    rc = o_env_line_int(&b, "TPU_WORKER_ID", in->self_index - sl.base_idx, err);
    if (rc == 0) {
        struct mesh_render_input own = *in;
        own.workers = in->workers + sl.base_pos;
        own.nworkers = (size_t)sl.hps;
        rc = o_join(&own, mode, -1, &hosts, err);
    }
    if (rc == 0) {
        rc = o_env_line(&b, "TPU_WORKER_HOSTNAMES", mesh_buf_str(&hosts), err);
    }
    if (rc == 0 && in->slice != NULL) {
        char hb[48];
        char cb[48];
        const int *h = in->slice->host_bounds;
        const int *c = in->slice->chips_per_host_bounds;
        snprintf(hb, sizeof(hb), "%d,%d,%d", h[0], h[1], h[2]);
        snprintf(cb, sizeof(cb), "%d,%d,%d", c[0], c[1], c[2]);
        if (!render_oracle_is_hostname(in->slice->accelerator_type) ||
            !render_oracle_is_hostname(in->slice->topology)) {
            rc = mesh_err_set(err, MESH_E_INVAL, 0,
                              "slice accelerator type or topology is "
                              "not a plain token");
        }
        if (rc == 0) {
            rc = o_env_line(&b, "TPU_ACCELERATOR_TYPE", in->slice->accelerator_type, err);
        }
        if (rc == 0) {
            rc = o_env_line(&b, "TPU_TOPOLOGY", in->slice->topology, err);
        }
        if (rc == 0) {
            rc = o_env_line(&b, "TPU_HOST_BOUNDS", hb, err);
        }
        if (rc == 0) {
            rc = o_env_line(&b, "TPU_CHIPS_PER_HOST_BOUNDS", cb, err);
        }
    }
    if (rc == 0 && sl.count > 1) {
        const char *mc = in->megascale_coordinator;
        const char *host =
            in->slice_only && mc != NULL && mc[0] != '\0' ? mc : o_bare(&in->workers[0], mode);
        rc = o_env_line(&b, "MEGASCALE_COORDINATOR_ADDRESS", host, err);
        if (rc == 0) {
            rc = o_env_line_int(&b, "MEGASCALE_NUM_SLICES", sl.count, err);
        }
        if (rc == 0) {
            rc = o_env_line_int(&b, "MEGASCALE_SLICE_ID", sl.self, err);
        }
        if (rc == 0) {
            rc = o_env_line_int(&b, "MEGASCALE_PORT",
                                in->megascale_port > 0 ? in->megascale_port : 8080, err);
        }
    }
    mesh_buf_cleanup(&hosts);
    return o_finish(&b, rc, out_data, out_len);
}

static int o_jax_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                     struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = o_prepare(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    char coord[ORACLE_ADDR_MAX];
    struct mesh_buf b;
    mesh_buf_init(&b, ORACLE_MAX_BYTES);
    const char *jc = in->jax_coordinator;
    const char *mc = in->megascale_coordinator;
    const char *host = NULL;
    if (jc != NULL && jc[0] != '\0') {
        host = jc;
    } else if (in->slice_only && mc != NULL && mc[0] != '\0') {
        host = mc;
    }
    if (host != NULL) {
        struct mesh_worker fake = {.index = 0, .pod = "", .host = host, .ip = host};
        rc = mesh_render_worker_address(&fake, MESH_ADDR_DNS, MESH_RENDER_JAX_PORT, coord,
                                        sizeof(coord), err);
    } else {
        rc = mesh_render_worker_address(&in->workers[0], mode, MESH_RENDER_JAX_PORT, coord,
                                        sizeof(coord), err);
    }
    if (rc == 0) {
        rc = o_env_line(&b, "JAX_COORDINATOR_ADDRESS", coord, err);
    }
    if (rc == 0) {
        rc = o_env_line_int(&b, "JAX_NUM_PROCESSES", o_expected(in), err);
    }
    if (rc == 0) {
        rc = o_env_line_int(&b, "JAX_PROCESS_ID", in->self_index, err);
    }
    return o_finish(&b, rc, out_data, out_len);
}

static int o_print(cJSON *root, bool formatted, char **out_data, size_t *out_len,
                   struct mesh_err *err)
{
    char *text = formatted ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
    if (text == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "cannot serialize JSON");
    }
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

static int o_tf_config(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                       struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = o_prepare_file(in, "tf_config.json", &mode, err);
    if (rc < 0) {
        return rc;
    }
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *list = cJSON_AddArrayToObject(cluster, "worker");
    for (size_t i = 0; i < in->nworkers; i++) {
        char addr[ORACLE_ADDR_MAX];
        rc = mesh_render_worker_address(&in->workers[i], mode, in->port, addr, sizeof(addr), err);
        if (rc < 0) {
            return rc;
        }
        cJSON_AddItemToArray(list, cJSON_CreateString(addr));
    }
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    cJSON_AddStringToObject(task, "type", "worker");
    cJSON_AddNumberToObject(task, "index", in->self_index);
    return o_print(root, false, out_data, out_len, err);
}

static void o_str_or_null(cJSON *o, const char *key, const char *v)
{
    if (v != NULL && v[0] != '\0') {
        cJSON_AddStringToObject(o, key, v);
    } else {
        cJSON_AddNullToObject(o, key);
    }
}

static cJSON *o_slice_json(const struct mesh_slice *s)
{
    cJSON *o = cJSON_CreateObject();
    o_str_or_null(o, "acceleratorType", s->accelerator_type);
    o_str_or_null(o, "topology", s->topology);
    cJSON_AddNumberToObject(o, "chips", s->chips);
    cJSON_AddNumberToObject(o, "hosts", s->hosts);
    cJSON_AddNumberToObject(o, "chipsPerHost", s->chips_per_host);
    cJSON_AddNumberToObject(o, "coresPerChip", s->cores_per_chip);
    cJSON_AddNumberToObject(o, "devicesPerHost", s->devices_per_host);
    cJSON_AddItemToObject(o, "meshShape", cJSON_CreateIntArray(s->mesh_shape, 4));
    return o;
}

static int o_topology_json(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                           struct mesh_err *err)
{
    int rc = o_check_common(in, err);
    if (rc < 0) {
        return rc;
    }
    if (in->slice != NULL &&
        (memchr(in->slice->accelerator_type, '\0', MESH_ACCEL_TYPE_MAX) == NULL ||
         memchr(in->slice->topology, '\0', MESH_TOPOLOGY_MAX) == NULL)) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "slice strings are not terminated");
    }
    enum mesh_addr_mode mode = mesh_render_effective_mode(in->mode, in->workers, in->nworkers);
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "generation", (double)in->generation);
    cJSON_AddBoolToObject(root, "complete", in->complete && !in->slice_only);
    if (in->slice != NULL) {
        cJSON_AddItemToObject(root, "slice", o_slice_json(in->slice));
    } else {
        cJSON_AddNullToObject(root, "slice");
    }
    struct o_slices sl = o_slices_of(in);
    cJSON *slices = cJSON_AddObjectToObject(root, "slices");
    cJSON_AddNumberToObject(slices, "count", sl.count);
    if (sl.self >= 0) {
        cJSON_AddNumberToObject(slices, "id", sl.self);
    } else {
        cJSON_AddNullToObject(slices, "id");
    }
    cJSON_AddNumberToObject(slices, "hostsPerSlice", sl.hps);
    cJSON_AddStringToObject(root, "jobName", o_job_name(in));
    if (in->self_index >= 0) {
        cJSON_AddNumberToObject(root, "clientId", in->self_index);
    } else {
        cJSON_AddNullToObject(root, "clientId");
    }
    cJSON_AddNumberToObject(root, "numClients", o_expected(in));
    if (in->expected_source != NULL) {
        cJSON_AddNumberToObject(root, "expectedWorkers", o_expected(in));
    } else {
        cJSON_AddNullToObject(root, "expectedWorkers");
    }
    cJSON_AddNumberToObject(root, "presentWorkers", in->present);
    if (in->expected_source != NULL) {
        cJSON_AddStringToObject(root, "expectedWorkersSource", in->expected_source);
    } else {
        cJSON_AddNullToObject(root, "expectedWorkersSource");
    }
    char coord[ORACLE_ADDR_MAX];
    coord[0] = '\0';
    if (in->nworkers > 0 && in->workers[0].index == 0) {
        (void)mesh_render_worker_address(&in->workers[0], mode, in->port, coord, sizeof(coord),
                                         NULL);
    }
    o_str_or_null(root, "coordinator", coord);
    /* workersDigest: t = FNV basis; per worker t = (t ^ index) * P, then
     * t = (t ^ FNV-1a-64(address)) * P (render.h). */
    uint64_t t = 14695981039346656037ULL;
    for (size_t i = 0; i < in->nworkers; i++) {
        const struct mesh_worker *w = &in->workers[i];
        char addr[ORACLE_ADDR_MAX];
        addr[0] = '\0';
        (void)mesh_render_worker_address(w, mode, in->port, addr, sizeof(addr), NULL);
        uint64_t h = 14695981039346656037ULL;
        for (const char *c = addr; *c != '\0'; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        }
        t = (t ^ (uint64_t)(uint32_t)w->index) * 1099511628211ULL;
        t = (t ^ h) * 1099511628211ULL;
    }
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)t);
    cJSON_AddStringToObject(root, "workersDigest", hex);
    cJSON *list = cJSON_AddArrayToObject(root, "workers");
    for (size_t i = 0; i < in->nworkers; i++) {
        const struct mesh_worker *w = &in->workers[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", w->index);
        o_str_or_null(o, "pod", w->pod);
        o_str_or_null(o, "host", w->host);
        o_str_or_null(o, "ip", w->ip);
        char addr[ORACLE_ADDR_MAX];
        addr[0] = '\0';
        (void)mesh_render_worker_address(w, mode, in->port, addr, sizeof(addr), NULL);
        o_str_or_null(o, "address", addr);
        cJSON_AddBoolToObject(o, "ready", w->ready);
        cJSON_AddItemToArray(list, o);
    }
    return o_print(root, true, out_data, out_len, err);
}

static int o_render_all(const struct mesh_render_input *in, struct mesh_render_out *out,
                        struct mesh_err *err)
{
    struct mesh_render_out tmp;
    mesh_render_out_init(&tmp);
    int rc = o_topology_json(in, &tmp.data[MESH_FILE_TOPOLOGY_JSON],
                             &tmp.len[MESH_FILE_TOPOLOGY_JSON], err);
    if (rc == 0 && in->complete && !in->slice_only) {
        rc = o_dtensor_env(in, &tmp.data[MESH_FILE_DTENSOR_ENV], &tmp.len[MESH_FILE_DTENSOR_ENV],
                           err);
        if (rc == 0) {
            rc =
                o_tf_config(in, &tmp.data[MESH_FILE_TF_CONFIG], &tmp.len[MESH_FILE_TF_CONFIG], err);
        }
    }
    if (rc == 0 && in->complete) {
        if (rc == 0) {
            rc = o_tpu_env(in, &tmp.data[MESH_FILE_TPU_ENV], &tmp.len[MESH_FILE_TPU_ENV], err);
        }
        if (rc == 0) {
            rc = o_jax_env(in, &tmp.data[MESH_FILE_JAX_ENV], &tmp.len[MESH_FILE_JAX_ENV], err);
        }
    }
    if (rc < 0) {
        mesh_render_out_cleanup(&tmp);
        return rc;
    }
    *out = tmp;
    return 0;
}

#endif
