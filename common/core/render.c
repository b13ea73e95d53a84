/*
 * render.c - renderers for the files of the shared volume (DESIGN.md §4-§5)
 * and the validation and shell quoting that make them safe to source.
 *
 * Scope: pure transforms from struct mesh_render_input to bytes. Every value
 * that reaches a file has been checked against a strict grammar first; the
 * env files additionally single-quote every value. Output is deterministic:
 * same input, same bytes (stable key order, no clocks), so the publisher can
 * skip unchanged files and the sidecar can diff inputs.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "mem.h"
#include "render.h"
#include "tpuenv.h"

/* Upper bound of one rendered file: 16384 workers x ~530 bytes of JSON
 * (MESH_PUBLISH_MAX_FILE is 16 MiB too). */
#define RENDER_MAX_BYTES ((size_t)16 << 20)
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

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* RFC 1123 names (tpuenv.h has the one checker; pod names are lower case).
 * Here a dotted-digits name is syntactically fine: every character is safe in
 * an env file, and tpumesh-init refuses such host names earlier. */
static bool is_dns_name(const char *s, bool lower_only)
{
    return s != NULL && mesh_tpuenv_is_dns_name(s, strnlen(s, 254), lower_only, false);
}

bool mesh_render_is_hostname(const char *s)
{
    return is_dns_name(s, false);
}

bool mesh_render_is_pod_name(const char *s)
{
    return is_dns_name(s, true);
}

bool mesh_render_is_ip(const char *s, bool *out_v6)
{
    unsigned char addr[16];
    if (s == NULL || strnlen(s, MESH_IP_MAX) >= MESH_IP_MAX) {
        return false;
    }
    if (inet_pton(AF_INET, s, addr) == 1) {
        if (out_v6 != NULL) {
            *out_v6 = false;
        }
        return true;
    }
    if (inet_pton(AF_INET6, s, addr) == 1) {
        if (out_v6 != NULL) {
            *out_v6 = true;
        }
        return true;
    }
    return false;
}

bool mesh_render_is_job_name(const char *s)
{
    if (s == NULL) {
        return false;
    }
    size_t n = strnlen(s, MESH_JOB_NAME_MAX);
    if (n == 0 || n >= MESH_JOB_NAME_MAX) {
        return false;
    }
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) {
        return false;
    }
    for (size_t i = 1; i < n; i++) {
        if (!is_alnum(s[i]) && s[i] != '_') {
            return false;
        }
    }
    return true;
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
    if (w->host[0] != '\0' && !mesh_render_is_hostname(w->host) &&
        !mesh_render_is_ip(w->host, NULL)) {
        return bad_field(err, w->index, "host", w->host, MESH_HOST_MAX,
                         "a valid RFC 1123 host name or IP address; fix the pod's "
                         "hostname/subdomain or TPU_WORKER_HOSTNAMES");
    }
    if (w->ip[0] != '\0' && !mesh_render_is_ip(w->ip, NULL)) {
        return bad_field(err, w->index, "ip", w->ip, MESH_IP_MAX, "an IPv4 or IPv6 address");
    }
    if (w->pod[0] != '\0' && !mesh_render_is_pod_name(w->pod)) {
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

enum mesh_addr_mode mesh_render_effective_mode(enum mesh_addr_mode mode,
                                               const struct mesh_worker *workers, size_t n)
{
    if (mode != MESH_ADDR_AUTO) {
        return mode;
    }
    /* DESIGN.md §5: dns for the whole job only when every worker has one. */
    for (size_t i = 0; i < n; i++) {
        if (workers[i].host[0] == '\0') {
            return MESH_ADDR_IP;
        }
    }
    return n > 0 ? MESH_ADDR_DNS : MESH_ADDR_IP;
}

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
    if (mesh_render_is_ip(host, &v6) && v6) {
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
    return in->expected > 0 ? in->expected : (int)in->nworkers;
}

static const char *job_name_of(const struct mesh_render_input *in)
{
    if (in->job_name != NULL && in->job_name[0] != '\0') {
        return in->job_name;
    }
    /* spec §6 / §10.10: DTensor's own default, "localhost" for exactly one
     * client, else "worker"; every client must agree, so derive it from
     * the job size, which all pods share. */
    return expected_of(in) == 1 ? "localhost" : "worker";
}

/* Everything that holds for any render: sizes, port, job name, every
 * worker's fields. */
static int check_common(const struct mesh_render_input *in, struct mesh_err *err)
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
    if (in->generation > MESH_RENDER_GENERATION_MAX) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "generation %llu is too large",
                            (unsigned long long)in->generation);
    }
    if (in->mode != MESH_ADDR_AUTO && in->mode != MESH_ADDR_DNS && in->mode != MESH_ADDR_IP) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "unknown address mode %d", (int)in->mode);
    }
    if (in->job_name != NULL && in->job_name[0] != '\0' && !mesh_render_is_job_name(in->job_name)) {
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
    for (size_t i = 0; i < in->nworkers; i++) {
        int rc = mesh_render_check_worker(&in->workers[i], err);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* What the env files and TF_CONFIG additionally need: the whole job, dense
 * indices, our own index in range, an address for every worker. */
static int check_complete(const struct mesh_render_input *in, enum mesh_addr_mode mode,
                          struct mesh_err *err)
{
    int n = expected_of(in);
    if (!in->complete) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0,
                            "the worker list is incomplete: env files keep their last version");
    }
    if (n == 0 || (size_t)n != in->nworkers) {
        return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "%zu of %d workers known", in->nworkers, n);
    }
    /* spec §6: DTENSOR_CLIENT_ID must satisfy 0 <= id < num_clients. */
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
        if (worker_bare(w, mode) == NULL) {
            return mesh_err_set(err, MESH_E_INCOMPLETE, 0, "worker %d has no %s yet", i,
                                mode == MESH_ADDR_DNS ? "host name" : "pod IP");
        }
    }
    return 0;
}

static int prepare_complete(const struct mesh_render_input *in, enum mesh_addr_mode *out_mode,
                            struct mesh_err *err)
{
    int rc = check_common(in, err);
    if (rc < 0) {
        return rc;
    }
    enum mesh_addr_mode mode = mesh_render_effective_mode(in->mode, in->workers, in->nworkers);
    rc = check_complete(in, mode, err);
    if (rc < 0) {
        return rc;
    }
    *out_mode = mode;
    return 0;
}

/* ---- env files ------------------------------------------------------------ */

static int env_line(struct mesh_buf *b, const char *key, const char *value, struct mesh_err *err)
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

static int env_line_int(struct mesh_buf *b, const char *key, long long v, struct mesh_err *err)
{
    char num[32];
    snprintf(num, sizeof(num), "%lld", v);
    return env_line(b, key, num, err);
}

/* Join every worker's "<addr>:<port>" (port < 0: the bare address) with
 * commas into b. */
static int join_addresses(const struct mesh_render_input *in, enum mesh_addr_mode mode, int port,
                          struct mesh_buf *b, struct mesh_err *err)
{
    for (size_t i = 0; i < in->nworkers; i++) {
        char addr[ADDR_MAX];
        int rc;
        if (port > 0) {
            rc = mesh_render_worker_address(&in->workers[i], mode, port, addr, sizeof(addr), err);
        } else {
            rc = snprintf(addr, sizeof(addr), "%s", worker_bare(&in->workers[i], mode)) < 0
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

static int finish(struct mesh_buf *b, int rc, char **out_data, size_t *out_len)
{
    if (rc < 0) {
        mesh_buf_cleanup(b);
        return rc;
    }
    *out_data = mesh_buf_steal(b, out_len);
    return 0;
}

/* dtensor.env (spec §6, §10.9-10.10):
 *   DTENSOR_JOBS        host:port per client in index order, never empty
 *   DTENSOR_CLIENT_ID   0 <= id < len(DTENSOR_JOBS)
 *   DTENSOR_JOB_NAME    explicit, else DTensor's default
 *   DTENSOR_NUM_CLIENTS for old DTensor versions that still read it */
int mesh_render_dtensor_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                            struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = prepare_complete(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_buf jobs;
    struct mesh_buf b;
    mesh_buf_init(&jobs, RENDER_MAX_BYTES);
    mesh_buf_init(&b, RENDER_MAX_BYTES);
    rc = join_addresses(in, mode, in->port, &jobs, err);
    if (rc == 0) {
        rc = env_line(&b, "DTENSOR_JOBS", mesh_buf_str(&jobs), err);
    }
    if (rc == 0) {
        rc = env_line_int(&b, "DTENSOR_CLIENT_ID", in->self_index, err);
    }
    if (rc == 0) {
        rc = env_line(&b, "DTENSOR_JOB_NAME", job_name_of(in), err);
    }
    if (rc == 0) {
        rc = env_line_int(&b, "DTENSOR_NUM_CLIENTS", (long long)in->nworkers, err);
    }
    mesh_buf_cleanup(&jobs);
    return finish(&b, rc, out_data, out_len);
}

static void bounds_text(const int v[3], char out[48])
{
    snprintf(out, 48, "%d,%d,%d", v[0], v[1], v[2]);
}

/* tpu.env: what GKE's TPU webhook injects and libtpu/JAX/torch_xla read
 * (spec §4.5, §4.6): the worker id indexes the host name list. */
int mesh_render_tpu_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                        struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = prepare_complete(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_buf hosts;
    struct mesh_buf b;
    mesh_buf_init(&hosts, RENDER_MAX_BYTES);
    mesh_buf_init(&b, RENDER_MAX_BYTES);
    rc = env_line_int(&b, "TPU_WORKER_ID", in->self_index, err);
    if (rc == 0) {
        rc = join_addresses(in, mode, -1, &hosts, err);
    }
    if (rc == 0) {
        rc = env_line(&b, "TPU_WORKER_HOSTNAMES", mesh_buf_str(&hosts), err);
    }
    if (rc == 0 && in->slice != NULL) {
        char hb[48];
        char cb[48];
        bounds_text(in->slice->host_bounds, hb);
        bounds_text(in->slice->chips_per_host_bounds, cb);
        if (!mesh_render_is_hostname(in->slice->accelerator_type) ||
            !mesh_render_is_hostname(in->slice->topology)) {
            rc = mesh_err_set(err, MESH_E_INVAL, 0,
                              "slice accelerator type or topology is "
                              "not a plain token");
        }
        if (rc == 0) {
            rc = env_line(&b, "TPU_ACCELERATOR_TYPE", in->slice->accelerator_type, err);
        }
        if (rc == 0) {
            rc = env_line(&b, "TPU_TOPOLOGY", in->slice->topology, err);
        }
        if (rc == 0) {
            rc = env_line(&b, "TPU_HOST_BOUNDS", hb, err);
        }
        if (rc == 0) {
            rc = env_line(&b, "TPU_CHIPS_PER_HOST_BOUNDS", cb, err);
        }
    }
    mesh_buf_cleanup(&hosts);
    return finish(&b, rc, out_data, out_len);
}

/* jax.env: JAX reads JAX_COORDINATOR_ADDRESS itself; on GKE it takes worker 0
 * on port 8476 as coordinator and TPU_WORKER_ID as process id (spec §4.5,
 * §10.13; gke-and-peers.md §3.2). JAX_NUM_PROCESSES / JAX_PROCESS_ID are the
 * conventional names for jax.distributed.initialize(num_processes=,
 * process_id=) that launchers pass; we write the same values GKE implies. */
int mesh_render_jax_env(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                        struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = prepare_complete(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    char coord[ADDR_MAX];
    struct mesh_buf b;
    mesh_buf_init(&b, RENDER_MAX_BYTES);
    rc = mesh_render_worker_address(&in->workers[0], mode, MESH_RENDER_JAX_PORT, coord,
                                    sizeof(coord), err);
    if (rc == 0) {
        rc = env_line(&b, "JAX_COORDINATOR_ADDRESS", coord, err);
    }
    if (rc == 0) {
        rc = env_line_int(&b, "JAX_NUM_PROCESSES", (long long)in->nworkers, err);
    }
    if (rc == 0) {
        rc = env_line_int(&b, "JAX_PROCESS_ID", in->self_index, err);
    }
    return finish(&b, rc, out_data, out_len);
}

/* ---- JSON files ------------------------------------------------------------ */

static int print_json(cJSON *root, bool formatted, char **out_data, size_t *out_len,
                      struct mesh_err *err)
{
    char *text = formatted ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
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

/* tf_config.json (spec §7.1, §10.14): the TF_CONFIG value,
 * {"cluster":{"worker":[...]},"task":{"type":"worker","index":N}}. */
int mesh_render_tf_config(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                          struct mesh_err *err)
{
    enum mesh_addr_mode mode;
    int rc = prepare_complete(in, &mode, err);
    if (rc < 0) {
        return rc;
    }
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
    cJSON *list = cJSON_AddArrayToObject(cluster, "worker");
    for (size_t i = 0; i < in->nworkers; i++) {
        char addr[ADDR_MAX];
        rc = mesh_render_worker_address(&in->workers[i], mode, in->port, addr, sizeof(addr), err);
        if (rc < 0) {
            return rc;
        }
        cJSON_AddItemToArray(list, cJSON_CreateString(addr));
    }
    cJSON *task = cJSON_AddObjectToObject(root, "task");
    cJSON_AddStringToObject(task, "type", "worker");
    cJSON_AddNumberToObject(task, "index", in->self_index);
    return print_json(root, false, out_data, out_len, err);
}

static void add_str_or_null(cJSON *o, const char *key, const char *v)
{
    if (v != NULL && v[0] != '\0') {
        cJSON_AddStringToObject(o, key, v);
    } else {
        cJSON_AddNullToObject(o, key);
    }
}

static cJSON *slice_json(const struct mesh_slice *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "acceleratorType", s->accelerator_type);
    cJSON_AddStringToObject(o, "topology", s->topology);
    cJSON_AddNumberToObject(o, "chips", s->chips);
    cJSON_AddNumberToObject(o, "hosts", s->hosts);
    cJSON_AddNumberToObject(o, "chipsPerHost", s->chips_per_host);
    cJSON_AddNumberToObject(o, "coresPerChip", s->cores_per_chip);
    cJSON_AddNumberToObject(o, "devicesPerHost", s->devices_per_host);
    cJSON_AddItemToObject(o, "meshShape", cJSON_CreateIntArray(s->mesh_shape, 4));
    return o;
}

/* topology.json (DESIGN.md §4): what is known, complete or not. Keys in this
 * order: generation, complete, slice, jobName, clientId, numClients,
 * coordinator, workers[] {index, pod, host, ip, address, ready}. Unknown
 * values are null. */
int mesh_render_topology_json(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                              struct mesh_err *err)
{
    int rc = check_common(in, err);
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
    cJSON_AddBoolToObject(root, "complete", in->complete);
    if (in->slice != NULL) {
        cJSON_AddItemToObject(root, "slice", slice_json(in->slice));
    } else {
        cJSON_AddNullToObject(root, "slice");
    }
    cJSON_AddStringToObject(root, "jobName", job_name_of(in));
    if (in->self_index >= 0) {
        cJSON_AddNumberToObject(root, "clientId", in->self_index);
    } else {
        cJSON_AddNullToObject(root, "clientId");
    }
    cJSON_AddNumberToObject(root, "numClients", expected_of(in));

    /* The coordinator is DTENSOR_JOBS[0] (spec §6: the coordination service
     * and collective leader are task 0), when worker 0 is known. */
    char coord[ADDR_MAX];
    coord[0] = '\0';
    if (in->nworkers > 0 && in->workers[0].index == 0) {
        (void)mesh_render_worker_address(&in->workers[0], mode, in->port, coord, sizeof(coord),
                                         NULL);
    }
    add_str_or_null(root, "coordinator", coord);

    cJSON *list = cJSON_AddArrayToObject(root, "workers");
    for (size_t i = 0; i < in->nworkers; i++) {
        const struct mesh_worker *w = &in->workers[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", w->index);
        add_str_or_null(o, "pod", w->pod);
        add_str_or_null(o, "host", w->host);
        add_str_or_null(o, "ip", w->ip);
        char addr[ADDR_MAX];
        addr[0] = '\0';
        (void)mesh_render_worker_address(w, mode, in->port, addr, sizeof(addr), NULL);
        add_str_or_null(o, "address", addr);
        cJSON_AddBoolToObject(o, "ready", w->ready);
        cJSON_AddItemToArray(list, o);
    }
    return print_json(root, true, out_data, out_len, err);
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

int mesh_render_all(const struct mesh_render_input *in, struct mesh_render_out *out,
                    struct mesh_err *err)
{
    struct mesh_render_out tmp;
    mesh_render_out_init(&tmp);
    int rc = mesh_render_topology_json(in, &tmp.data[MESH_FILE_TOPOLOGY_JSON],
                                       &tmp.len[MESH_FILE_TOPOLOGY_JSON], err);
    if (rc == 0 && in->complete) {
        rc = mesh_render_dtensor_env(in, &tmp.data[MESH_FILE_DTENSOR_ENV],
                                     &tmp.len[MESH_FILE_DTENSOR_ENV], err);
        if (rc == 0) {
            rc = mesh_render_tf_config(in, &tmp.data[MESH_FILE_TF_CONFIG],
                                       &tmp.len[MESH_FILE_TF_CONFIG], err);
        }
        if (rc == 0) {
            rc = mesh_render_tpu_env(in, &tmp.data[MESH_FILE_TPU_ENV], &tmp.len[MESH_FILE_TPU_ENV],
                                     err);
        }
        if (rc == 0) {
            rc = mesh_render_jax_env(in, &tmp.data[MESH_FILE_JAX_ENV], &tmp.len[MESH_FILE_JAX_ENV],
                                     err);
        }
    }
    if (rc < 0) {
        mesh_render_out_cleanup(&tmp);
        return rc;
    }
    *out = tmp;
    return 0;
}

/* cluster_spec() of the legacy TPU Node path (spec §2.5-§2.6, §10.5):
 * job "worker", tasks 0..n-1 = the endpoints in order, dense list. */
int mesh_render_cluster_spec(const char *const *hosts, const int *ports, size_t n, char **out_data,
                             size_t *out_len, struct mesh_err *err)
{
    if (n == 0 || hosts == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "no TPU endpoints to write a cluster_spec for");
    }
    if (n > MESH_RENDER_MAX_WORKERS) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "%zu TPU endpoints exceed the limit of %d", n,
                            MESH_RENDER_MAX_WORKERS);
    }
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "worker");
    for (size_t i = 0; i < n; i++) {
        const char *h = hosts[i];
        int port = ports != NULL ? ports[i] : MESH_RENDER_TPU_NODE_PORT;
        if (h == NULL) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "TPU endpoint %zu has no address", i);
        }
        if (!mesh_render_is_ip(h, NULL) && !mesh_render_is_hostname(h)) {
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
    return print_json(root, false, out_data, out_len, err);
}

int mesh_render_diff(const struct mesh_render_input *a, const struct mesh_render_input *b,
                     struct mesh_err *err)
{
    struct mesh_render_input a0 = *a;
    struct mesh_render_input b0 = *b;
    a0.generation = 0;
    b0.generation = 0;
    struct mesh_render_out ra;
    struct mesh_render_out rb;
    mesh_render_out_init(&ra);
    mesh_render_out_init(&rb);
    int rc = mesh_render_all(&a0, &ra, err);
    if (rc == 0) {
        rc = mesh_render_all(&b0, &rb, err);
    }
    if (rc == 0) {
        for (int i = 0; i < MESH_FILE__COUNT; i++) {
            bool same = ra.data[i] == NULL && rb.data[i] == NULL;
            if (ra.data[i] != NULL && rb.data[i] != NULL) {
                same = ra.len[i] == rb.len[i] && memcmp(ra.data[i], rb.data[i], ra.len[i]) == 0;
            }
            if (!same) {
                rc |= 1 << i;
            }
        }
    }
    mesh_render_out_cleanup(&ra);
    mesh_render_out_cleanup(&rb);
    return rc;
}
