/*
 * identity.c - who this pod is, which pods are its peers, and what
 * tpumesh-init already published.
 *
 * Selector derivation (docs/worker-order.md, labels as the Job, JobSet and
 * StatefulSet controllers set them), first match wins:
 *   JobSet       jobset.sigs.k8s.io/jobset-name=<n>   (all slices, multi-slice)
 *   Indexed Job  batch.kubernetes.io/job-name=<n>
 *   StatefulSet  the pod's template labels (its labels minus the per-pod
 *                ones the controller adds), and only pods whose controller
 *                is the same StatefulSet are kept
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "core/accel.h"
#include "io/k8s_client.h"
#include "io/log.h"
#include "io/sys.h"
#include "io/publish.h"
#include "sidecar.h"

#define MOD "sidecar"

/* Labels a StatefulSet controller puts on each pod: they differ per pod, so
 * they cannot be part of a selector for all of them. */
static const char *const per_pod_labels[] = {
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "controller-revision-hash",
    "pod-template-hash",
};

static bool is_per_pod(const char *key)
{
    for (size_t i = 0; i < sizeof(per_pod_labels) / sizeof(per_pod_labels[0]); i++) {
        if (strcmp(key, per_pod_labels[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* Label keys and values reaching a selector: [A-Za-z0-9._/-] only, so the
 * selector needs no quoting and cannot smuggle selector syntax. */
static bool is_selector_safe(const char *s)
{
    if (s[0] == '\0' || strlen(s) > 316) {
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || c == '/';
        if (!ok) {
            return false;
        }
    }
    return true;
}

static int statefulset_selector(struct mesh_sidecar *ctx, const cJSON *pod, struct mesh_err *err)
{
    const cJSON *labels = mesh_json_path(pod, "metadata.labels");
    struct mesh_buf b;
    mesh_buf_init(&b, sizeof(ctx->selector) - 1);
    const cJSON *l = NULL;
    int rc = 0;
    if (!cJSON_IsObject(labels)) {
        labels = NULL;
    }
    cJSON_ArrayForEach(l, labels)
    {
        if (!cJSON_IsString(l) || is_per_pod(l->string)) {
            continue;
        }
        if (!is_selector_safe(l->string) || !is_selector_safe(l->valuestring)) {
            continue;
        }
        rc = mesh_buf_printf(&b, err, "%s%s=%s", b.len ? "," : "", l->string, l->valuestring);
        if (rc < 0) {
            break;
        }
    }
    if (rc == 0 && b.len == 0) {
        rc = mesh_err_set(err, MESH_E_CONFIG, 0,
                          "StatefulSet pod %s has no template labels to select its peers by; "
                          "pass --selector",
                          ctx->pod_name);
    }
    if (rc == 0) {
        snprintf(ctx->selector, sizeof(ctx->selector), "%s", mesh_buf_str(&b));
        snprintf(ctx->owner_filter, sizeof(ctx->owner_filter), "%s", ctx->self.owner_name);
    }
    mesh_buf_cleanup(&b);
    return rc;
}

static int derive_selector(struct mesh_sidecar *ctx, const cJSON *pod, struct mesh_err *err)
{
    if (ctx->opts.selector != NULL) {
        snprintf(ctx->selector, sizeof(ctx->selector), "%s", ctx->opts.selector);
        mesh_info(MOD, "peers: selector %s (from --selector)", ctx->selector);
        return 0;
    }
    const struct mesh_k8s_pod *s = &ctx->self;
    /* Own labels: the JobSet's or Job's name label (not the legacy job-name
     * alone, which the selector does not name), or a StatefulSet's. */
    ctx->selector_own = s->jobset_name[0] != '\0' || strcmp(s->owner_kind, "StatefulSet") == 0 ||
                        cJSON_GetObjectItemCaseSensitive(mesh_json_path(pod, "metadata.labels"),
                                                         MESH_K8S_KEY_JOB_NAME) != NULL;
    if (s->jobset_name[0] != '\0') {
        snprintf(ctx->selector, sizeof(ctx->selector), "%s=%s", MESH_K8S_KEY_JOBSET_NAME,
                 s->jobset_name);
        mesh_info(MOD, "peers: selector %s (this pod belongs to JobSet %s: every slice)",
                  ctx->selector, s->jobset_name);
        return 0;
    }
    if (s->job_name[0] != '\0') {
        snprintf(ctx->selector, sizeof(ctx->selector), "%s=%s", MESH_K8S_KEY_JOB_NAME, s->job_name);
        mesh_info(MOD, "peers: selector %s (this pod belongs to Indexed Job %s)", ctx->selector,
                  s->job_name);
        return 0;
    }
    if (strcmp(s->owner_kind, "StatefulSet") == 0) {
        int rc = statefulset_selector(ctx, pod, err);
        if (rc == 0) {
            mesh_info(MOD,
                      "peers: selector %s (template labels of StatefulSet %s; pods owned by "
                      "another controller are ignored)",
                      ctx->selector, ctx->owner_filter);
        }
        return rc;
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0,
                        "cannot tell which pods are this pod's peers: pod %s has no %s or %s "
                        "label and no StatefulSet owner; pass --selector",
                        ctx->pod_name, MESH_K8S_KEY_JOBSET_NAME, MESH_K8S_KEY_JOB_NAME);
}

/* A start-up request that failed with rc (message in e): log each distinct
 * failure once (last holds the previous one) and put it in the status line,
 * then wait *delay ms (doubled for the next time, at most 5 s) unless stop is
 * set. 0 to retry; -MESH_E_IO once stop is set. */
static int retry_later(struct mesh_sidecar *ctx, const char *what, const char *status, int rc,
                       const struct mesh_err *e, char *last, int64_t *delay, volatile int *stop,
                       struct mesh_err *err)
{
    if (strcmp(e->msg, last) != 0) {
        mesh_warn(MOD, "%s failed (%s), retrying: %s", what, mesh_strerror(rc), e->msg);
        snprintf(last, MESH_ERR_MSG_MAX, "%s", e->msg);
        mesh_sidecar_status_reason(ctx, "%s failed: %s", status, e->msg);
    }
    for (int64_t waited = 0; waited < *delay && !*stop; waited += 50) {
        mesh_sys_sleep_ms(50);
    }
    if (*stop) {
        return mesh_err_set(err, MESH_E_IO, 0, "stopped while retrying: %s", what);
    }
    *delay = *delay * 2 > 5000 ? 5000 : *delay * 2;
    return 0;
}

int mesh_sidecar_identify(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          volatile int *stop, struct mesh_err *err)
{
    if (ctx->opts.pod_name == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "this pod's name is unknown: pass --pod-name or set POD_NAME from "
                            "the downward API (fieldRef metadata.name)");
    }
    snprintf(ctx->pod_name, sizeof(ctx->pod_name), "%s", ctx->opts.pod_name);
    const char *ns = ctx->opts.ns ? ctx->opts.ns : mesh_k8s_client_namespace(client);
    if (!mesh_names_is_dns_label(ns, strlen(ns))) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "namespace '%s' is not an RFC 1123 label", ns);
    }
    snprintf(ctx->ns, sizeof(ctx->ns), "%s", ns);

    struct mesh_k8s_query q = {.ns = ctx->ns, .resource = "pods"};
    mesh_autocjson cJSON *pod = NULL;
    int64_t delay = 500;
    char last[MESH_ERR_MSG_MAX] = "";
    char what[MESH_K8S_NS_MAX + MESH_POD_MAX + 16];
    snprintf(what, sizeof(what), "GET own pod %s/%s", ctx->ns, ctx->pod_name);
    for (;;) {
        struct mesh_err e;
        mesh_err_clear(&e);
        int rc = mesh_k8s_client_get(client, &q, ctx->pod_name, &pod, &e);
        if (rc == 0) {
            break;
        }
        /* Transient until proven otherwise: the pod may not be visible yet
         * and the API may be restarting. */
        if (retry_later(ctx, what, "reading this pod", rc, &e, last, &delay, stop, err) < 0) {
            return -MESH_E_IO;
        }
    }
    if (mesh_k8s_pod_extract(pod, &ctx->self, err) < 0 || ctx->self.invalid) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "own pod %s cannot be used: %s", ctx->pod_name,
                            ctx->self.reason);
    }
    mesh_info(MOD, "this pod: %s/%s uid=%s ip=%s", ctx->ns, ctx->pod_name, ctx->self.uid,
              ctx->self.ip[0] ? ctx->self.ip : "(none yet)");
    /* Relays are found by their index label: before Kubernetes 1.28 a Job
     * pod has the completion index only as an annotation. */
    const cJSON *labels = mesh_json_path(pod, "metadata.labels");
    ctx->index_labeled =
        cJSON_IsObject(labels) &&
        (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(labels, MESH_K8S_KEY_COMPLETION_INDEX)) ||
         cJSON_IsString(cJSON_GetObjectItemCaseSensitive(labels, MESH_K8S_KEY_POD_INDEX)));
    return derive_selector(ctx, pod, err);
}

void mesh_sidecar_status_reason(struct mesh_sidecar *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&ctx->mu);
    vsnprintf(ctx->st.reason, sizeof(ctx->st.reason), fmt, ap);
    pthread_mutex_unlock(&ctx->mu);
    va_end(ap);
}

static int count_item(void *arg, const cJSON *item, struct mesh_err *err)
{
    (void)item;
    (void)err;
    ++*(size_t *)arg;
    return 0;
}

int mesh_sidecar_check_selector(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                                volatile int *stop, struct mesh_err *err)
{
    /* A selector made of this pod's own labels (key=value pairs of safe
     * characters) selects it by construction: no LIST, one less per
     * sidecar per start and one step off a late relay's way to serving.
     * Any other is asked of the API, which evaluates it exactly as the
     * watch will: LIST with this pod's name as a field selector. */
    if (ctx->selector_own) {
        return 0;
    }
    char field[MESH_POD_MAX + 32];
    snprintf(field, sizeof(field), "metadata.name=%s", ctx->pod_name);
    struct mesh_k8s_query q = {
        .ns = ctx->ns, .label_selector = ctx->selector, .field_selector = field};
    char last[MESH_ERR_MSG_MAX] = "";
    int64_t delay = 500;
    for (;;) {
        struct mesh_err e;
        mesh_err_clear(&e);
        size_t n = 0;
        struct mesh_k8s_list_meta meta;
        memset(&meta, 0, sizeof(meta));
        int rc = mesh_k8s_client_list(client, &q, 0, NULL, NULL, 0, 0, count_item, &n, &meta, &e);
        mesh_k8s_list_meta_cleanup(&meta);
        if (rc == 0 && n > 0) {
            return 0;
        }
        if (rc == 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "this pod (%s/%s) does not match its own peer selector '%s': the "
                                "sidecar would wait forever for a job it is not part of; pass a "
                                "--selector that selects this pod (or leave it out to derive it)",
                                ctx->ns, ctx->pod_name, ctx->selector);
        }
        if (rc == -MESH_E_API && mesh_k8s_client_last_status(client) == 400) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "the API rejects the peer selector '%s' (check --selector): %s",
                                ctx->selector, e.msg);
        }
        if (retry_later(ctx, "checking the peer selector", "listing pods", rc, &e, last, &delay,
                        stop, err) < 0) {
            return -MESH_E_IO;
        }
    }
}

/* Slice and job name from an existing topology.json (docs/DESIGN.md §4). */
static void load_topology(struct mesh_sidecar *ctx, const char *path)
{
    /* Through "..data", never another symlink (publish.h). */
    mesh_autofree char *data = NULL;
    size_t len = 0;
    int rc = mesh_publish_read_file(ctx->opts.out_dir, "topology.json", &data, &len);
    if (rc < 0) {
        if (rc != -ENOENT) {
            mesh_warn(MOD, "cannot read %s: %s; starting without the init container's slice", path,
                      rc == -EINVAL ? "not a file the publisher wrote" : strerror(-rc));
        }
        return;
    }
    struct mesh_err e;
    mesh_autocjson cJSON *j = mesh_json_parse(data, len, MESH_PUBLISH_MAX_FILE, &e);
    if (j == NULL) {
        mesh_warn(MOD, "%s is not usable (%s); starting without its slice", path, e.msg);
        return;
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "slice");
    if (cJSON_IsObject(s)) {
        long long cph = 0, hosts = 0;
        (void)mesh_json_int(s, "chipsPerHost", 0, 64, false, &cph, NULL);
        (void)mesh_json_int(s, "hosts", 0, MESH_WORKERS_MAX, false, &hosts, NULL);
        struct mesh_slice_spec spec = {
            .accelerator_type = mesh_json_str(s, "acceleratorType"),
            .topology = mesh_json_str(s, "topology"),
            .chips_per_host = (int)cph,
            .hosts = (int)hosts,
        };
        if (mesh_slice_derive(&spec, &ctx->slice, &e) == 0) {
            ctx->have_slice = true;
            mesh_info(MOD, "slice from %s: %s topology %s, %d hosts of %d chips", path,
                      ctx->slice.accelerator_type, ctx->slice.topology, ctx->slice.hosts,
                      ctx->slice.chips_per_host);
        } else {
            mesh_warn(MOD, "slice in %s ignored: %s", path, e.msg);
        }
    }
    /* DTensor's defaults ("localhost" for one client, "worker" otherwise)
     * are not a choice worth keeping: the worker count may differ now. */
    const char *jn = mesh_json_str(j, "jobName");
    if (ctx->opts.job_name == NULL && jn != NULL && mesh_names_is_job_name(jn) &&
        strcmp(jn, "localhost") != 0 && strcmp(jn, "worker") != 0) {
        snprintf(ctx->job_name, sizeof(ctx->job_name), "%s", jn);
    }
}

/* MEGASCALE_PORT in the tpu.env tpumesh-init left (it read GKE's variable,
 * which this container may not have): 0 when absent or unusable. */
static int port_in_tpu_env(const char *out_dir)
{
    mesh_autofree char *path = mesh_asprintf("%s/tpu.env", out_dir);
    struct mesh_buf b;
    mesh_buf_init(&b, 1 << 20);
    int port = 0;
    if (mesh_sys_read_file(path, b.max, &b, NULL) == 0 && b.len > 0) {
        static const char key[] = "MEGASCALE_PORT='";
        for (const char *p = b.data; p != NULL && p < b.data + b.len;) {
            const char *end = b.data + b.len;
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
            long long v = 0;
            if (n > sizeof(key) && memcmp(p, key, sizeof(key) - 1) == 0 && p[n - 1] == '\'' &&
                mesh_parse_ll(p + sizeof(key) - 1, n - sizeof(key), 1, 65535, &v, NULL) == 0) {
                port = (int)v;
            }
            p = nl != NULL ? nl + 1 : NULL;
        }
    }
    mesh_buf_cleanup(&b);
    return port;
}

/* MEGASCALE_PORT for a multi-slice tpu.env, the same choice tpumesh-init
 * makes: the own pod's tpumesh.dev/megascale-port, else this container's
 * MEGASCALE_PORT, else the one tpumesh-init published (from its
 * container's MEGASCALE_PORT), else 0 (the default, 8080). Kept in
 * ctx->self.megascale_port; *out_src names the source. */
static int choose_megascale_port(struct mesh_sidecar *ctx, const char **out_src,
                                 struct mesh_err *err)
{
    *out_src = "default";
    if (ctx->self.megascale_port > 0) {
        *out_src = "annotation " MESH_K8S_KEY_MEGASCALE_PORT;
        return 0;
    }
    const char *v = getenv("MEGASCALE_PORT");
    if (v != NULL && v[0] != '\0') {
        long long port = 0;
        if (mesh_parse_ll(v, strlen(v), 1, 65535, &port, NULL) != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "MEGASCALE_PORT='%.32s' is not a port in 1..65535; fix or unset "
                                "it, or set the pod annotation " MESH_K8S_KEY_MEGASCALE_PORT,
                                v);
        }
        ctx->self.megascale_port = (int)port;
        *out_src = "env MEGASCALE_PORT";
        return 0;
    }
    int port = port_in_tpu_env(ctx->opts.out_dir);
    if (port > 0) {
        ctx->self.megascale_port = port;
        *out_src = "the tpu.env tpumesh-init published";
    }
    return 0;
}

int mesh_sidecar_load_state(struct mesh_sidecar *ctx, struct mesh_err *err)
{
    if (ctx->opts.job_name != NULL) {
        if (!mesh_names_is_job_name(ctx->opts.job_name)) {
            return mesh_err_set(
                err, MESH_E_CONFIG, 0,
                "--job-name '%s' is not a TensorFlow job name ([A-Za-z][A-Za-z0-9_]*)",
                ctx->opts.job_name);
        }
        snprintf(ctx->job_name, sizeof(ctx->job_name), "%s", ctx->opts.job_name);
    }
    mesh_autofree char *path = mesh_asprintf("%s/topology.json", ctx->opts.out_dir);
    bool found = false;
    (void)mesh_publish_read_generation(ctx->opts.out_dir, &ctx->generation, &found, NULL);
    if (found) {
        mesh_info(MOD, "continuing from generation %llu in %s", (unsigned long long)ctx->generation,
                  path);
    }
    load_topology(ctx, path);

    bool multislice = ctx->self.job_global_index >= 0 || ctx->self.job_index >= 0;
    if (multislice && ctx->have_slice) {
        ctx->per_slice = ctx->slice.hosts;
    }
    /* Flag or TPUMESH_* variable > the own pod's annotation > default (the
     * README's rule; the chart sets the sidecar's variables only on request). */
    const char *port_src = ctx->opts.port_given ? "flag/TPUMESH_PORT" : "default";
    if (!ctx->opts.port_given && ctx->self.port > 0) {
        ctx->opts.port = ctx->self.port;
        port_src = "annotation " MESH_K8S_KEY_PORT;
    }
    const char *mode_src = ctx->opts.address_mode_given ? "flag/TPUMESH_ADDRESS_MODE" : "default";
    if (!ctx->opts.address_mode_given && ctx->self.address_mode >= 0) {
        ctx->opts.address_mode = (enum mesh_addr_mode)ctx->self.address_mode;
        mode_src = "annotation " MESH_K8S_KEY_ADDR_MODE;
    }
    if (!ctx->opts.port_given && ctx->self.port > 0) {
        int rc = mesh_sidecar_check_ports(&ctx->opts,
                                          "DTensor port (annotation " MESH_K8S_KEY_PORT ")", err);
        if (rc < 0) {
            return rc;
        }
    }
    mesh_info(MOD, "worker addresses: port %d (from %s), address mode %s (from %s)", ctx->opts.port,
              port_src,
              ctx->opts.address_mode == MESH_ADDR_DNS
                  ? "dns"
                  : (ctx->opts.address_mode == MESH_ADDR_IP ? "ip" : "auto"),
              mode_src);
    const char *mport_src = "default";
    int rc = choose_megascale_port(ctx, &mport_src, err);
    if (rc < 0) {
        return rc;
    }
    if (multislice) {
        mesh_info(MOD, "multi-slice: MEGASCALE_PORT %d (from %s), JAX coordinator slice 0 worker 0",
                  ctx->self.megascale_port > 0 ? ctx->self.megascale_port
                                               : MESH_RENDER_MEGASCALE_PORT,
                  mport_src);
    }
    if (ctx->self.jax_port > 0) {
        mesh_info(MOD,
                  "jax.env: coordinator port %d (from the pod's container env "
                  "JAX_COORDINATOR_PORT, which JAX's detection uses too)",
                  ctx->self.jax_port);
    }
    return 0;
}
