/*
 * gce_metadata.c - GCE metadata server client over libcurl (see
 * gce_metadata.h): bounded GETs with `Metadata-Flavor: Google`, a response
 * header check, short timeouts and a few retries.
 */
#include <curl/curl.h>

#include "gce_metadata.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "core/mem.h"
#include "io/sys.h"

#define DEFAULT_HOST "metadata.google.internal"

/* host[:port] with host a DNS name or IPv4 literal, or [IPv6][:port]: the
 * text goes into a URL, so nothing else may pass. */
static bool is_host_port(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > 260) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
        if (!ok) {
            return false;
        }
    }
    return true;
}

int mesh_gce_metadata_init(struct mesh_gce_metadata *md, const char *host, struct mesh_err *err)
{
    const char *h = host;
    const char *what = "--metadata-host";
    if (h == NULL || *h == '\0') {
        h = getenv("GCE_METADATA_HOST");
        what = "GCE_METADATA_HOST";
    }
    if (h == NULL || *h == '\0') {
        h = getenv("GCE_METADATA_IP");
        what = "GCE_METADATA_IP";
    }
    if (h == NULL || *h == '\0') {
        h = DEFAULT_HOST;
        what = "default";
    }
    if (!is_host_port(h)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "metadata host '%.64s' (%s) is not HOST[:PORT]; fix or unset it", h,
                            what);
    }
    memset(md, 0, sizeof(*md));
    md->base = mesh_asprintf("http://%s/computeMetadata/v1/", h);
    md->timeout_ms = 2000;
    md->attempts = 3;
    md->retry_delay_ms = 300;
    return 0;
}

void mesh_gce_metadata_cleanup(struct mesh_gce_metadata *md)
{
    if (md == NULL) {
        return;
    }
    mesh_free(md->base);
    md->base = NULL;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct mesh_buf *b = ud;
    if (mesh_buf_append(b, p, size * n, NULL) < 0) {
        return 0; /* abort the transfer: the body is too big */
    }
    return size * n;
}

CURLcode mesh_gce_metadata_http_get(CURL *c, const char *url, struct curl_slist *hdrs,
                                    long timeout_ms, const char *protocols, struct mesh_buf *body)
{
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, protocols);
    return curl_easy_perform(c);
}

/* One GET. Returns 0 with *out_status set, or -MESH_E_API (transport) /
 * -MESH_E_TOOBIG. */
static int get_once(const struct mesh_gce_metadata *md, const char *url, struct mesh_buf *body,
                    long *out_status, bool *out_flavor, struct mesh_err *err)
{
    mesh_autocurl CURL *c = curl_easy_init();
    mesh_autoslist struct curl_slist *hdrs = NULL;
    if (c == NULL) {
        return mesh_err_set(err, MESH_E_API, 0, "curl_easy_init failed");
    }
    hdrs = curl_slist_append(hdrs, "Metadata-Flavor: Google");
    /* The metadata server is link-local: never go through a proxy. */
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    CURLcode rc = mesh_gce_metadata_http_get(c, url, hdrs, md->timeout_ms, "http", body);
    if (rc == CURLE_WRITE_ERROR) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "metadata %s: reply larger than %d bytes", url,
                            MESH_GCE_METADATA_MAX);
    }
    if (rc != CURLE_OK) {
        return mesh_err_set(err, MESH_E_API, 0, "metadata server unreachable at %s: %s", url,
                            curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, out_status);
    struct curl_header *h = NULL;
    *out_flavor = curl_easy_header(c, "Metadata-Flavor", 0, CURLH_HEADER, -1, &h) == CURLHE_OK &&
                  h != NULL && strcasecmp(h->value, "Google") == 0;
    return 0;
}

int mesh_gce_metadata_get(const struct mesh_gce_metadata *md, const char *path, char **out_value,
                          struct mesh_err *err)
{
    mesh_autofree char *url = mesh_asprintf("%s%s", md->base, path);
    int attempts = md->attempts > 0 ? md->attempts : 1;
    int rc = 0;
    for (int i = 0; i < attempts; i++) {
        struct mesh_buf body;
        long status = 0;
        bool flavor = false;
        mesh_buf_init(&body, MESH_GCE_METADATA_MAX);
        if (i > 0) {
            mesh_sys_sleep_ms(md->retry_delay_ms);
        }
        rc = get_once(md, url, &body, &status, &flavor, err);
        if (rc == -MESH_E_TOOBIG) {
            mesh_buf_cleanup(&body);
            return rc;
        }
        if (rc == 0 && status == 200 && !flavor) {
            mesh_buf_cleanup(&body);
            return mesh_err_set(err, MESH_E_API, 0,
                                "%s answered without 'Metadata-Flavor: Google': not a GCE "
                                "metadata server (check --metadata-host / GCE_METADATA_HOST)",
                                url);
        }
        if (rc == 0 && status == 200) {
            *out_value = mesh_buf_steal(&body, NULL);
            return 0;
        }
        mesh_buf_cleanup(&body);
        if (rc == 0 && status == 404) {
            return mesh_err_set(err, MESH_E_NOTFOUND, 0, "metadata %s: not found (404)", url);
        }
        if (rc == 0 && status < 500) {
            return mesh_err_set(err, MESH_E_API, 0, "metadata %s: HTTP %ld", url, status);
        }
        if (rc == 0) {
            rc = mesh_err_set(err, MESH_E_API, 0, "metadata %s: HTTP %ld after %d attempts", url,
                              status, i + 1);
        }
    }
    return rc;
}

int mesh_gce_metadata_project(const struct mesh_gce_metadata *md, char **out_value,
                              struct mesh_err *err)
{
    char *v = NULL;
    int rc = mesh_gce_metadata_get(md, "project/project-id", &v, err);
    if (rc < 0) {
        return rc;
    }
    if (*v == '\0') {
        mesh_free(v);
        return mesh_err_set(err, MESH_E_API, 0, "metadata project/project-id is empty");
    }
    *out_value = v;
    return 0;
}

int mesh_gce_metadata_zone(const struct mesh_gce_metadata *md, char **out_value,
                           struct mesh_err *err)
{
    mesh_autofree char *v = NULL;
    int rc = mesh_gce_metadata_get(md, "instance/zone", &v, err);
    if (rc < 0) {
        return rc;
    }
    /* "projects/<num>/zones/<zone>": TensorFlow keeps the text after the last '/'. */
    const char *slash = strrchr(v, '/');
    const char *zone = slash ? slash + 1 : v;
    if (*zone == '\0') {
        return mesh_err_set(err, MESH_E_API, 0, "metadata instance/zone '%.64s' has no zone", v);
    }
    *out_value = mesh_strdup(zone);
    return 0;
}

int mesh_gce_metadata_token(const struct mesh_gce_metadata *md, char **out_value,
                            struct mesh_err *err)
{
    mesh_autofree char *v = NULL;
    int rc = mesh_gce_metadata_get(md, "instance/service-accounts/default/token", &v, err);
    if (rc == -MESH_E_NOTFOUND) {
        return mesh_err_set(err, MESH_E_AUTH, 0,
                            "the pod has no default service account token on the metadata "
                            "server (404); use Workload Identity or a node service account");
    }
    if (rc < 0) {
        return rc;
    }
    /* {"access_token":"...","expires_in":3599,"token_type":"Bearer"} */
    struct mesh_err jerr;
    mesh_autocjson cJSON *j = mesh_json_parse(v, strlen(v), MESH_GCE_METADATA_MAX, &jerr);
    const char *tok = j ? mesh_json_str(j, "access_token") : NULL;
    if (tok == NULL || *tok == '\0') {
        return mesh_err_set(err, MESH_E_AUTH, 0,
                            "metadata token reply is not JSON with an access_token");
    }
    for (const char *p = tok; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
            return mesh_err_set(err, MESH_E_AUTH, 0,
                                "metadata access_token contains spaces or control characters");
        }
    }
    *out_value = mesh_strdup(tok);
    /* The reply and its parsed copy carry the token: wipe both. */
    explicit_bzero((char *)tok, strlen(tok));
    explicit_bzero(v, strlen(v));
    return 0;
}

/* One attribute; a 404 leaves *out NULL and returns 0. */
static int get_attr(const struct mesh_gce_metadata *md, const char *key, char **out, int *found,
                    struct mesh_err *err)
{
    char path[128];
    snprintf(path, sizeof(path), "instance/attributes/%s", key);
    *out = NULL;
    int rc = mesh_gce_metadata_get(md, path, out, err);
    if (rc == -MESH_E_NOTFOUND) {
        return 0;
    }
    if (rc == 0) {
        (*found)++;
    }
    return rc;
}

void mesh_gce_metadata_tpu_vm_cleanup(struct mesh_gce_tpu_vm *vm)
{
    if (vm == NULL) {
        return;
    }
    mesh_free(vm->accelerator_type);
    mesh_annotations_cleanup(&vm->env);
    mesh_free(vm->workers);
    memset(vm, 0, sizeof(*vm));
    vm->worker_number = -1;
}

int mesh_gce_metadata_tpu_vm(const struct mesh_gce_metadata *md, size_t max_workers,
                             struct mesh_gce_tpu_vm *out_vm, struct mesh_err *err)
{
    struct mesh_gce_tpu_vm vm = {.worker_number = -1};
    mesh_autofree char *env = NULL;
    mesh_autofree char *eps = NULL;
    mesh_autofree char *num = NULL;
    int found = 0;
    int rc = get_attr(md, "accelerator-type", &vm.accelerator_type, &found, err);
    if (rc == 0) {
        rc = get_attr(md, "tpu-env", &env, &found, err);
    }
    if (rc == 0) {
        rc = get_attr(md, "worker-network-endpoints", &eps, &found, err);
    }
    if (rc == 0) {
        rc = get_attr(md, "agent-worker-number", &num, &found, err);
    }
    if (rc == 0 && found == 0) {
        rc = mesh_err_set(err, MESH_E_NOTFOUND, 0,
                          "the metadata server has no TPU VM attributes (accelerator-type, "
                          "tpu-env, worker-network-endpoints, agent-worker-number)");
    }
    if (rc == 0 && env != NULL) {
        rc = mesh_tpuenv_parse(env, strlen(env), &vm.env, err);
        if (rc < 0) {
            mesh_err_prefix(err, "metadata attribute tpu-env");
        }
    }
    if (rc == 0 && eps != NULL && *eps != '\0') {
        rc = mesh_tpuenv_parse_worker_endpoints(eps, strlen(eps), max_workers, &vm.workers,
                                                &vm.nworkers, err);
        if (rc < 0) {
            mesh_err_prefix(err, "metadata attribute");
        }
    }
    if (rc == 0 && num != NULL) {
        long long v;
        if (mesh_parse_ll(num, strlen(num), 0, 1 << 20, &v, NULL) != 0) {
            rc = mesh_err_set(err, MESH_E_PARSE, 0,
                              "metadata attribute agent-worker-number '%.32s' is not an integer",
                              num);
        } else {
            vm.worker_number = (int)v;
        }
    }
    if (rc < 0) {
        mesh_gce_metadata_tpu_vm_cleanup(&vm);
        return rc;
    }
    *out_vm = vm;
    return 0;
}
