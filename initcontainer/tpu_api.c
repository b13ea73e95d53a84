/*
 * tpu_api.c - Cloud TPU REST API client (see tpu_api.h): endpoint discovery,
 * one bounded GET of a node, node JSON parsing, and the wait for READY and
 * HEALTHY with backoff, progress lines and a deadline.
 */
#include <curl/curl.h>

#include "tpu_api.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "core/mem.h"
#include "gce_metadata.h"
#include "io/log.h"
#include "io/secret.h"
#include "io/sys.h"

#define MOD "tpu-api"
#define URL_MAX 2048

/* GET url into body. 0 with *out_status, or -MESH_E_API / -MESH_E_TOOBIG. */
static int http_get(const char *url, const char *token, long timeout_ms, struct mesh_buf *body,
                    long *out_status, struct mesh_err *err)
{
    mesh_autocurl CURL *c = curl_easy_init();
    mesh_autosecretslist struct curl_slist *hdrs = NULL;
    if (c == NULL) {
        return mesh_err_set(err, MESH_E_API, 0, "curl_easy_init failed");
    }
    if (token != NULL) {
        char *auth = mesh_asprintf("Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, auth);
        /* curl copied the header (the list is wiped when freed); wipe ours. */
        mesh_secret_free(auth);
    }
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    CURLcode rc = mesh_gce_metadata_http_get(c, url, hdrs, timeout_ms, "http,https", body);
    if (rc == CURLE_WRITE_ERROR) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "reply larger than %d bytes",
                            MESH_TPU_API_MAX_REPLY);
    }
    if (rc != CURLE_OK) {
        return mesh_err_set(err, MESH_E_API, 0, "%s", curl_easy_strerror(rc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, out_status);
    return 0;
}

static bool is_http_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* Replace every {api} and {apiVersion} in tmpl. */
static char *expand_discovery(const char *tmpl)
{
    struct mesh_buf b;
    mesh_buf_init(&b, URL_MAX);
    for (const char *p = tmpl; *p;) {
        int rc;
        if (strncmp(p, "{api}", 5) == 0) {
            rc = mesh_buf_puts(&b, "tpu", NULL);
            p += 5;
        } else if (strncmp(p, "{apiVersion}", 12) == 0) {
            rc = mesh_buf_puts(&b, "v1", NULL);
            p += 12;
        } else {
            rc = mesh_buf_append(&b, p, 1, NULL);
            p++;
        }
        if (rc < 0) {
            mesh_buf_cleanup(&b);
            return NULL;
        }
    }
    return mesh_buf_steal(&b, NULL);
}

static char *strip_slash(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/') {
        s[--n] = '\0';
    }
    return s;
}

int mesh_tpu_api_endpoint(const char *flag, const char *discovery_url, char **out_endpoint,
                          struct mesh_err *err)
{
    if (flag != NULL && *flag != '\0') {
        if (!is_http_url(flag) || strlen(flag) > URL_MAX) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "--tpu-api-endpoint '%.64s' is not an http(s):// URL", flag);
        }
        *out_endpoint = strip_slash(mesh_strdup(flag));
        return 0;
    }
    if (discovery_url == NULL || *discovery_url == '\0') {
        *out_endpoint = mesh_strdup(MESH_TPU_API_DEFAULT_ENDPOINT);
        return 0;
    }
    if (strstr(discovery_url, "{api}") == NULL || strstr(discovery_url, "{apiVersion}") == NULL ||
        !is_http_url(discovery_url)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_API_DISCOVERY_URL '%.80s' must be an http(s) URL containing {api} "
                            "and {apiVersion}",
                            discovery_url);
    }
    mesh_autofree char *url = expand_discovery(discovery_url);
    if (url == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "TPU_API_DISCOVERY_URL is too long");
    }
    struct mesh_buf body;
    long status = 0;
    mesh_buf_init(&body, MESH_TPU_API_MAX_REPLY);
    int rc = http_get(url, NULL, 10000, &body, &status, err);
    if (rc == 0 && status != 200) {
        rc = mesh_err_set(err, MESH_E_API, 0, "HTTP %ld", status);
    }
    if (rc < 0) {
        mesh_buf_cleanup(&body);
        return mesh_err_prefix(err, "discovery document %.120s", url);
    }
    struct mesh_err jerr;
    mesh_autocjson cJSON *doc =
        mesh_json_parse(body.data ? body.data : "", body.len, MESH_TPU_API_MAX_REPLY, &jerr);
    mesh_buf_cleanup(&body);
    const char *root = doc ? mesh_json_str(doc, "rootUrl") : NULL;
    const char *svc = doc ? mesh_json_str(doc, "servicePath") : NULL;
    if (root == NULL || !is_http_url(root)) {
        return mesh_err_set(err, MESH_E_API, 0,
                            "discovery document %.120s has no http(s) rootUrl%s%s", url,
                            doc ? "" : ": ", doc ? "" : jerr.msg);
    }
    mesh_autofree char *joined = mesh_asprintf("%s%s", root, svc ? svc : "");
    *out_endpoint = strip_slash(MESH_STEAL(joined));
    return 0;
}

void mesh_tpu_api_node_cleanup(struct mesh_tpu_api_node *node)
{
    if (node == NULL) {
        return;
    }
    mesh_free(node->endpoints);
    memset(node, 0, sizeof(*node));
}

static void copy_str(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s ? s : "");
}

/* An endpoint object {ipAddress, port}; port may be a number or a string. */
static int parse_ep(const cJSON *o, size_t idx, struct mesh_tpuenv_endpoint *ep,
                    struct mesh_err *err)
{
    const char *ip = mesh_json_str(o, "ipAddress");
    long long port = MESH_TPUENV_DEFAULT_PORT;
    if (ip == NULL || strlen(ip) >= MESH_IP_MAX || !mesh_names_is_host(ip, strlen(ip))) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "networkEndpoints[%zu].ipAddress is missing or not an IP address", idx);
    }
    int rc = mesh_json_int(o, "port", 1, 65535, true, &port, NULL);
    if (rc < 0 && rc != -MESH_E_NOTFOUND) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "networkEndpoints[%zu].port is not an integer 1-65535", idx);
    }
    if (rc == -MESH_E_NOTFOUND) {
        port = MESH_TPUENV_DEFAULT_PORT;
    }
    copy_str(ep->ip, sizeof(ep->ip), ip);
    ep->port = (int)port;
    return 0;
}

int mesh_tpu_api_parse_node(const char *buf, size_t len, struct mesh_tpu_api_node *out_node,
                            struct mesh_err *err)
{
    struct mesh_err jerr;
    mesh_autocjson cJSON *j = mesh_json_parse(buf, len, MESH_TPU_API_MAX_REPLY, &jerr);
    if (j == NULL || !cJSON_IsObject(j)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "node reply is not a JSON object%s%s",
                            j ? "" : ": ", j ? "" : jerr.msg);
    }
    struct mesh_tpu_api_node node = {0};
    copy_str(node.state, sizeof(node.state), mesh_json_str(j, "state"));
    copy_str(node.health, sizeof(node.health), mesh_json_str(j, "health"));
    copy_str(node.accelerator_type, sizeof(node.accelerator_type),
             mesh_json_str(j, "acceleratorType"));
    copy_str(node.tensorflow_version, sizeof(node.tensorflow_version),
             mesh_json_str(j, "tensorflowVersion"));
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "networkEndpoints");
    if (eps != NULL && !cJSON_IsArray(eps)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "node networkEndpoints is not an array");
    }
    int n = eps ? cJSON_GetArraySize(eps) : 0;
    if (n > 4096) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "node lists %d networkEndpoints (max 4096)", n);
    }
    if (n > 0) {
        node.endpoints = mesh_calloc((size_t)n, sizeof(*node.endpoints));
        const cJSON *e;
        cJSON_ArrayForEach(e, eps)
        {
            int rc = parse_ep(e, node.nendpoints, &node.endpoints[node.nendpoints], err);
            if (rc < 0) {
                mesh_tpu_api_node_cleanup(&node);
                return rc;
            }
            node.nendpoints++;
        }
    } else if (mesh_json_str(j, "ipAddress") != NULL) {
        /* The deprecated top-level ipAddress/port. */
        node.endpoints = mesh_calloc(1, sizeof(*node.endpoints));
        int rc = parse_ep(j, 0, &node.endpoints[0], err);
        if (rc < 0) {
            mesh_tpu_api_node_cleanup(&node);
            return mesh_err_prefix(err, "top-level ipAddress/port");
        }
        node.nendpoints = 1;
    }
    *out_node = node;
    return 0;
}

/* TensorFlow's wrapping of a lookup failure, shortened to fit. */
#define LOOKUP_FMT "Could not lookup TPU metadata from name '%s'. Please doublecheck the tpu "

/* One GET of node name (a valid Cloud TPU name; borrowed). Returns 0 with
 * out_node filled, or: -MESH_E_NOTFOUND (404), -MESH_E_AUTH (401/403), -MESH_E_API
 * (transport error, other status, malformed JSON, reply above
 * MESH_TPU_API_MAX_REPLY; *out_retry set true for
 * transport errors, 429 and 5xx). Messages carry TensorFlow's "Could not
 * lookup TPU metadata" wrapping. out_retry may be NULL. */
static int get_node(const struct mesh_tpu_api *api, const char *name,
                    struct mesh_tpu_api_node *out_node, int *out_retry, struct mesh_err *err)
{
    int dummy = 0;
    int *retry = out_retry ? out_retry : &dummy;
    *retry = 0;
    mesh_autofree char *url = mesh_asprintf("%s/v1/projects/%s/locations/%s/nodes/%s",
                                            api->endpoint, api->project, api->zone, name);
    struct mesh_buf body;
    long status = 0;
    mesh_buf_init(&body, MESH_TPU_API_MAX_REPLY);
    int rc =
        http_get(url, api->token, api->request_timeout_ms > 0 ? api->request_timeout_ms : 10000,
                 &body, &status, err);
    if (rc < 0) {
        mesh_buf_cleanup(&body);
        *retry = rc == -MESH_E_API; /* transport errors; an oversized reply is final */
        if (rc == -MESH_E_TOOBIG && err != NULL) {
            err->code = MESH_E_API;
        }
        return mesh_err_prefix(err, "Cloud TPU API %s", api->endpoint);
    }
    if (status == 404) {
        rc = mesh_err_set(err, MESH_E_NOTFOUND, 0,
                          LOOKUP_FMT "argument (project %s, zone %s). Exception: HTTP 404", name,
                          api->project, api->zone);
    } else if (status == 401 || status == 403) {
        rc = mesh_err_set(err, MESH_E_AUTH, 0,
                          LOOKUP_FMT "argument. Exception: HTTP %ld (grant roles/tpu.viewer)", name,
                          status);
    } else if (status != 200) {
        *retry = status == 429 || status >= 500;
        rc = mesh_err_set(err, MESH_E_API, 0, LOOKUP_FMT "argument. Exception: HTTP %ld", name,
                          status);
    } else {
        rc = mesh_tpu_api_parse_node(body.data ? body.data : "", body.len, out_node, err);
        if (rc < 0) {
            if (err != NULL) {
                err->code = MESH_E_API;
            }
            rc = mesh_err_prefix(err, "Cloud TPU API reply for '%s'", name);
        }
    }
    mesh_buf_cleanup(&body);
    return rc;
}

static bool is_ready(const struct mesh_tpu_api_node *n)
{
    return strcmp(n->state, "READY") == 0 &&
           (n->health[0] == '\0' || strcmp(n->health, "HEALTHY") == 0);
}

/* What one poll's node means: 1 with *out_node taken (READY and healthy),
 * 0 to keep waiting (the state and health kept in last), or an error (READY
 * without endpoints, or a state it will not recover from). */
static int judge_node(const char *name, struct mesh_tpu_api_node *node, int attempt,
                      struct mesh_tpu_api_node *last, struct mesh_tpu_api_node *out_node,
                      struct mesh_err *err)
{
    if (is_ready(node)) {
        if (node->nendpoints == 0) {
            mesh_tpu_api_node_cleanup(node);
            return mesh_err_set(err, MESH_E_API, 0,
                                "TPU \"%s\" is READY but the API lists no networkEndpoints nor "
                                "ipAddress",
                                name);
        }
        mesh_info(MOD, "TPU \"%s\" is healthy.", name);
        *out_node = *node;
        return 1;
    }
    copy_str(last->state, sizeof(last->state), node->state);
    copy_str(last->health, sizeof(last->health), node->health);
    mesh_tpu_api_node_cleanup(node);
    if (strcmp(last->state, "PREEMPTED") == 0 || strcmp(last->state, "TERMINATED") == 0) {
        return mesh_err_set(err, MESH_E_NOTREADY, 0,
                            "TPU \"%s\" is not yet ready; state: \"%s\" (it will not recover: "
                            "recreate the TPU)",
                            name, last->state);
    }
    /* TensorFlow's wait_for_healthy progress text. */
    mesh_info(MOD,
              "Waiting for TPU \"%s\" with state \"%s\" and health \"%s\" to become healthy "
              "(poll %d)",
              name, last->state, last->health, attempt);
    return 0;
}

/* The deadline passed while the node was last seen as last: TensorFlow's
 * wait_for_healthy text, then what was seen. */
static int timed_out(const struct mesh_tpu_api *api, const char *name,
                     const struct mesh_tpu_api_node *last, struct mesh_err *err)
{
    if (strcmp(last->state, "READY") == 0) {
        return mesh_err_set(err, MESH_E_TIMEOUT, 0,
                            "Timed out waiting for TPU \"%s\" to become healthy: TPU \"%s\" is "
                            "unhealthy: \"%s\" (--timeout %d s)",
                            name, name, last->health, api->timeout_s);
    }
    return mesh_err_set(err, MESH_E_TIMEOUT, 0,
                        "Timed out waiting for TPU \"%s\" to become healthy: TPU \"%s\" is not yet "
                        "ready; state: \"%s\", health \"%s\" (--timeout %d s)",
                        name, name, last->state, last->health, api->timeout_s);
}

int mesh_tpu_api_wait_ready(const struct mesh_tpu_api *api, const char *name,
                            struct mesh_tpu_api_node *out_node, struct mesh_err *err)
{
    long long start = mesh_sys_now_ms();
    long long deadline = api->deadline_ms > 0
                             ? api->deadline_ms
                             : start + (long long)(api->timeout_s > 0 ? api->timeout_s : 1) * 1000;
    long long pause = api->poll_initial_ms > 0 ? api->poll_initial_ms : 250;
    struct mesh_tpu_api_node last = {0}; /* state and health only */
    bool last_transport = false;
    struct mesh_err lerr;
    for (int attempt = 1;; attempt++) {
        struct mesh_tpu_api_node node = {0};
        int retry = 0;
        /* No request may run past the deadline (but give each at least 1 s). */
        struct mesh_tpu_api call = *api;
        long long left = deadline - mesh_sys_now_ms();
        long long per = api->request_timeout_ms > 0 ? api->request_timeout_ms : 10000;
        call.request_timeout_ms = left < 1000 ? 1000 : (left < per ? left : per);
        int rc = get_node(&call, name, &node, &retry, &lerr);
        if (rc < 0 && !retry) {
            if (err != NULL) {
                *err = lerr;
            }
            return rc;
        }
        last_transport = rc < 0;
        if (rc == 0) {
            rc = judge_node(name, &node, attempt, &last, out_node, err);
            if (rc != 0) {
                return rc > 0 ? 0 : rc;
            }
        } else {
            mesh_warn(MOD, "TPU \"%s\": %s; retrying", name, lerr.msg);
        }
        long long now = mesh_sys_now_ms();
        if (now >= deadline) {
            break;
        }
        mesh_sys_sleep_ms(now + pause > deadline ? deadline - now : pause);
        pause = pause * 2 > 10000 ? 10000 : pause * 2;
    }
    if (last_transport) {
        if (err != NULL) {
            *err = lerr;
        }
        return mesh_err_prefix(err, "gave up after %d s", api->timeout_s);
    }
    return timed_out(api, name, &last, err);
}
