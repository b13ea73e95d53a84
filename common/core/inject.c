/*
 * inject.c - AdmissionReview parsing, the injection decision, the RFC 6902
 * JSON Patch and the AdmissionReview response of tpumesh-injector, plus the
 * YAML config of the injected containers. Pure: no I/O (see inject.h).
 */
#include "inject.h"

#include <yaml.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "annotations.h"
#include "base64.h"
#include "buf.h"
#include "cleanup.h"
#include "json.h"
#include "k8s_pod.h"
#include "mem.h"
#include "names.h"

/* ---- built-in config --------------------------------------------------------
 * The chart's default values rendered through its named templates
 * (tests/integration/test_injector_config.py renders the chart with Helm and
 * compares). The image tag is the program's version, as the chart's is its
 * appVersion. */
/* clang-format off */
/* The chart's tpumesh.image, its log settings and tpumesh.securityContext
 * (restricted Pod Security profile), the same in both containers. */
#define IMAGE \
    "  image: \"tpumesh:" MESH_VERSION "\"\n" \
    "  imagePullPolicy: IfNotPresent\n"
#define LOG_ENV \
    "    - name: TPUMESH_LOG_FORMAT\n" \
    "      value: \"text\"\n" \
    "    - name: TPUMESH_LOG_LEVEL\n" \
    "      value: \"info\"\n"
#define SECURITY_CONTEXT \
    "  securityContext:\n" \
    "    runAsNonRoot: true\n" \
    "    runAsUser: 65532\n" \
    "    runAsGroup: 65532\n" \
    "    allowPrivilegeEscalation: false\n" \
    "    readOnlyRootFilesystem: true\n" \
    "    capabilities:\n" \
    "      drop:\n" \
    "        - ALL\n" \
    "    seccompProfile:\n" \
    "      type: RuntimeDefault\n"
const char mesh_inject_default_config[] =
    "initContainer:\n"
    "  name: tpumesh-init\n"
    IMAGE
    "  args:\n"
    "    - tpumesh-init\n"
    "  env:\n"
    "    - name: TPUMESH_OUT_DIR\n"
    "      value: \"/var/run/tpumesh\"\n"
    "    - name: TPUMESH_ANNOTATIONS_FILE\n"
    "      value: \"/etc/podinfo/annotations\"\n"
    LOG_ENV
    "  resources:\n"
    "    requests:\n"
    "      cpu: 50m\n"
    "      memory: 32Mi\n"
    "    limits:\n"
    "      cpu: 500m\n"
    "      memory: 128Mi\n"
    SECURITY_CONTEXT
    "  volumeMounts:\n"
    "    - name: tpumesh\n"
    "      mountPath: /var/run/tpumesh\n"
    "    - name: tpumesh-podinfo\n"
    "      mountPath: /etc/podinfo\n"
    "      readOnly: true\n"
    "sidecar:\n"
    "  name: tpumesh-sidecar\n"
    IMAGE
    "  restartPolicy: Always\n"
    "  args:\n"
    "    - tpumesh-sidecar\n"
    "  env:\n"
    "    - name: POD_NAME\n"
    "      valueFrom:\n"
    "        fieldRef:\n"
    "          fieldPath: metadata.name\n"
    "    - name: TPUMESH_NAMESPACE\n"
    "      valueFrom:\n"
    "        fieldRef:\n"
    "          fieldPath: metadata.namespace\n"
    "    - name: TPUMESH_OUT_DIR\n"
    "      value: \"/var/run/tpumesh\"\n"
    "    - name: TPUMESH_HTTP_ADDR\n"
    "      value: \":9431\"\n"
    "    - name: TPUMESH_GRPC_ADDR\n"
    "      value: \":9432\"\n"
    LOG_ENV
    "  ports:\n"
    "    - name: tpumesh-http\n"
    "      containerPort: 9431\n"
    "      protocol: TCP\n"
    "    - name: tpumesh-grpc\n"
    "      containerPort: 9432\n"
    "      protocol: TCP\n"
    "  startupProbe:\n"
    "    httpGet:\n"
    "      path: /readyz\n"
    "      port: tpumesh-http\n"
    "    periodSeconds: 2\n"
    "    timeoutSeconds: 2\n"
    "    failureThreshold: 1800\n"
    "  readinessProbe:\n"
    "    httpGet:\n"
    "      path: /readyz\n"
    "      port: tpumesh-http\n"
    "    periodSeconds: 5\n"
    "    timeoutSeconds: 2\n"
    "    failureThreshold: 2\n"
    "  livenessProbe:\n"
    "    httpGet:\n"
    "      path: /healthz\n"
    "      port: tpumesh-http\n"
    "    periodSeconds: 10\n"
    "    timeoutSeconds: 2\n"
    "    failureThreshold: 3\n"
    "  resources:\n"
    "    limits:\n"
    "      cpu: 200m\n"
    "      memory: 128Mi\n"
    "    requests:\n"
    "      cpu: 10m\n"
    "      memory: 32Mi\n"
    SECURITY_CONTEXT
    "  volumeMounts:\n"
    "    - name: tpumesh\n"
    "      mountPath: /var/run/tpumesh\n"
    "volumes:\n"
    "  - name: tpumesh\n"
    "    emptyDir:\n"
    "      medium: Memory\n"
    "      sizeLimit: 16Mi\n"
    "  - name: tpumesh-podinfo\n"
    "    downwardAPI:\n"
    "      items:\n"
    "        - path: annotations\n"
    "          fieldRef:\n"
    "            fieldPath: metadata.annotations\n"
    "        - path: labels\n"
    "          fieldRef:\n"
    "            fieldPath: metadata.labels\n"
    "volumeMounts:\n"
    "  - name: tpumesh\n"
    "    mountPath: /var/run/tpumesh\n"
    "    readOnly: true\n";
/* clang-format on */
#undef IMAGE
#undef LOG_ENV
#undef SECURITY_CONTEXT

/* ---- YAML -> cJSON ------------------------------------------------------------ */

struct yconv {
    yaml_document_t *doc;
    size_t nodes; /* converted so far (aliases count each time they expand) */
    struct mesh_err *err;
};

static bool str_in(const char *s, const char *const *set)
{
    for (; *set != NULL; set++) {
        if (strcmp(s, *set) == 0) {
            return true;
        }
    }
    return false;
}

/* Whole decimal integer with an optional sign (YAML 1.2 core schema). */
static bool is_yaml_int(const char *s)
{
    if (*s == '-' || *s == '+') {
        s++;
    }
    if (*s == '\0') {
        return false;
    }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            return false;
        }
    }
    return true;
}

/* [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
static bool is_yaml_float(const char *s)
{
    if (*s == '-' || *s == '+') {
        s++;
    }
    size_t digits = 0;
    while (*s >= '0' && *s <= '9') {
        s++;
        digits++;
    }
    if (*s == '.') {
        s++;
        while (*s >= '0' && *s <= '9') {
            s++;
            digits++;
        }
    }
    if (digits == 0) {
        return false;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '-' || *s == '+') {
            s++;
        }
        if (*s < '0' || *s > '9') {
            return false;
        }
        while (*s >= '0' && *s <= '9') {
            s++;
        }
    }
    return *s == '\0';
}

static cJSON *scalar_to_json(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    /* Quoted and block scalars are strings; plain ones are typed. */
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
        static const char *const trues[] = {"true", "True", "TRUE", NULL};
        static const char *const falses[] = {"false", "False", "FALSE", NULL};
        if (str_in(s, nulls)) {
            return cJSON_CreateNull();
        }
        if (str_in(s, trues)) {
            return cJSON_CreateTrue();
        }
        if (str_in(s, falses)) {
            return cJSON_CreateFalse();
        }
        if (is_yaml_int(s) || is_yaml_float(s)) {
            return cJSON_CreateNumber(strtod(s, NULL));
        }
    }
    return cJSON_CreateString(s);
}

static cJSON *node_to_json(struct yconv *y, const yaml_node_t *n, int depth)
{
    if (n == NULL) {
        mesh_err_set(y->err, MESH_E_PARSE, 0, "dangling YAML node");
        return NULL;
    }
    if (depth > MESH_INJECT_DEPTH_MAX || ++y->nodes > MESH_INJECT_CONFIG_NODES_MAX) {
        mesh_err_set(y->err, MESH_E_TOOBIG, 0,
                     "YAML nested deeper than %d or with more than %d nodes (aliases count each "
                     "time they are used)",
                     MESH_INJECT_DEPTH_MAX, MESH_INJECT_CONFIG_NODES_MAX);
        return NULL;
    }
    if (n->type == YAML_SCALAR_NODE) {
        return scalar_to_json(n);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        cJSON *a = cJSON_CreateArray();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            cJSON *v = node_to_json(y, yaml_document_get_node(y->doc, *it), depth + 1);
            if (v == NULL) {
                cJSON_Delete(a);
                return NULL;
            }
            cJSON_AddItemToArray(a, v);
        }
        return a;
    }
    if (n->type != YAML_MAPPING_NODE) {
        mesh_err_set(y->err, MESH_E_PARSE, 0, "empty YAML node");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(y->doc, p->key);
        if (k == NULL || k->type != YAML_SCALAR_NODE) {
            mesh_err_set(y->err, MESH_E_PARSE, 0, "YAML mapping key at line %zu is not a string",
                         k ? k->start_mark.line + 1 : 0);
            cJSON_Delete(o);
            return NULL;
        }
        const char *key = (const char *)k->data.scalar.value;
        if (cJSON_GetObjectItemCaseSensitive(o, key) != NULL) {
            mesh_err_set(y->err, MESH_E_PARSE, 0, "duplicate key '%.64s' at line %zu", key,
                         k->start_mark.line + 1);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON *v = node_to_json(y, yaml_document_get_node(y->doc, p->value), depth + 1);
        if (v == NULL) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, key, v);
    }
    return o;
}

/* Parse one YAML document into a cJSON tree (owned) or NULL with err. */
static cJSON *yaml_to_json(const char *buf, size_t len, struct mesh_err *err)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        mesh_err_set(err, MESH_E_PARSE, 0, "cannot initialise the YAML parser");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        mesh_err_set(err, MESH_E_PARSE, 0, "not valid YAML: %s at line %zu column %zu",
                     parser.problem ? parser.problem : "error", parser.problem_mark.line + 1,
                     parser.problem_mark.column + 1);
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_parser_delete(&parser);
    struct yconv y = {.doc = &doc, .nodes = 0, .err = err};
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    cJSON *j = NULL;
    if (root == NULL) {
        mesh_err_set(err, MESH_E_CONFIG, 0, "the config is empty");
    } else {
        j = node_to_json(&y, root, 0);
    }
    yaml_document_delete(&doc);
    return j;
}

/* ---- config ------------------------------------------------------------------- */

static char *print_json(const cJSON *j)
{
    char *t = cJSON_PrintUnformatted(j);
    if (t == NULL) {
        /* cJSON prints NULL only when malloc failed: the OOM policy of mem.h. */
        abort();
    }
    char *o = mesh_strdup(t);
    cJSON_free(t);
    return o;
}

static void free_list(char **v, int n)
{
    for (int i = 0; v != NULL && i < n; i++) {
        mesh_free(v[i]);
    }
    mesh_free(v);
}

static void free_texts(struct mesh_inject_config *c)
{
    mesh_free(c->text_init);
    mesh_free(c->text_sidecar);
    free_list(c->text_volumes, cJSON_GetArraySize(c->volumes));
    free_list(c->text_mounts, cJSON_GetArraySize(c->mounts));
    c->text_init = c->text_sidecar = NULL;
    c->text_volumes = c->text_mounts = NULL;
}

static char **print_list(const cJSON *a)
{
    int n = cJSON_GetArraySize(a);
    char **v = mesh_calloc((size_t)n + 1, sizeof(*v));
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        v[i++] = print_json(e);
    }
    return v;
}

static void render_texts(struct mesh_inject_config *c)
{
    free_texts(c);
    c->text_init = print_json(c->init);
    c->text_sidecar = print_json(c->sidecar);
    c->text_volumes = print_list(c->volumes);
    c->text_mounts = print_list(c->mounts);
}

/* The text of a config member (borrowed), or of anything else printed into
 * *tmp (owned by the caller). */
static const char *text_of(const struct mesh_inject_config *c, const cJSON *item, char **tmp)
{
    if (item == c->init) {
        return c->text_init;
    }
    if (item == c->sidecar) {
        return c->text_sidecar;
    }
    const cJSON *lists[2] = {c->volumes, c->mounts};
    char **texts[2] = {c->text_volumes, c->text_mounts};
    for (int k = 0; k < 2; k++) {
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lists[k])
        {
            if (e == item) {
                return texts[k][i];
            }
            i++;
        }
    }
    *tmp = print_json(item);
    return *tmp;
}

void mesh_inject_config_cleanup(struct mesh_inject_config *c)
{
    if (c == NULL) {
        return;
    }
    free_texts(c);
    cJSON_Delete(c->init);
    cJSON_Delete(c->sidecar);
    cJSON_Delete(c->volumes);
    cJSON_Delete(c->mounts);
    memset(c, 0, sizeof(*c));
}

static bool has_name(const cJSON *o)
{
    const char *n = mesh_json_str(o, "name");
    return n != NULL && mesh_names_is_dns_label(n, strlen(n));
}

/* A container: a mapping with a DNS-label name, or (what the named templates
 * render) a list holding exactly one such mapping. Detached from root. */
static int take_container(cJSON *root, const char *key, cJSON **out, struct mesh_err *err)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) {
        v = cJSON_GetArrayItem(v, 0);
    }
    if (!cJSON_IsObject(v) || !has_name(v)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "config key '%s' must be a container (a mapping, or a list of one) "
                            "whose name is a DNS label",
                            key);
    }
    *out = cJSON_Duplicate(v, true);
    return 0;
}

static int take_list(cJSON *root, const char *key, cJSON **out, struct mesh_err *err)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > MESH_INJECT_LIST_MAX) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "config key '%s' must be a list of at most %d",
                            key, MESH_INJECT_LIST_MAX);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsObject(e) || !has_name(e)) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "every entry of config key '%s' must be a mapping whose name is "
                                "a DNS label",
                                key);
        }
    }
    *out = cJSON_Duplicate(v, true);
    return 0;
}

int mesh_inject_config_parse(const char *buf, size_t len, struct mesh_inject_config *out_config,
                             struct mesh_err *err)
{
    struct mesh_err local;
    if (err == NULL) {
        err = &local;
    }
    if (len > MESH_INJECT_CONFIG_MAX) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "config of %zu bytes exceeds the limit of %u",
                            len, MESH_INJECT_CONFIG_MAX);
    }
    mesh_autocjson cJSON *root = yaml_to_json(buf, len, err);
    if (root == NULL) {
        return -err->code;
    }
    if (!cJSON_IsObject(root)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "the config must be a mapping with initContainer, sidecar, volumes "
                            "and volumeMounts");
    }
    static const char *const known[] = {"initContainer", "sidecar", "volumes", "volumeMounts",
                                        NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, root)
    {
        if (!str_in(k->string, known)) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "unknown config key '%.64s' (known: initContainer, sidecar, "
                                "volumes, volumeMounts)",
                                k->string);
        }
    }
    struct mesh_inject_config c = {0};
    int rc = take_container(root, "initContainer", &c.init, err);
    if (rc == 0) {
        rc = take_container(root, "sidecar", &c.sidecar, err);
    }
    if (rc == 0) {
        rc = take_list(root, "volumes", &c.volumes, err);
    }
    if (rc == 0) {
        rc = take_list(root, "volumeMounts", &c.mounts, err);
    }
    if (rc == 0 && strcmp(mesh_json_str(c.init, "name"), mesh_json_str(c.sidecar, "name")) == 0) {
        rc = mesh_err_set(err, MESH_E_CONFIG, 0,
                          "initContainer and sidecar must have different names");
    }
    if (rc < 0) {
        mesh_inject_config_cleanup(&c);
        return rc;
    }
    render_texts(&c);
    *out_config = c;
    return 0;
}

int mesh_inject_config_default(struct mesh_inject_config *out_config, struct mesh_err *err)
{
    return mesh_inject_config_parse(mesh_inject_default_config,
                                    sizeof(mesh_inject_default_config) - 1, out_config, err);
}

static void set_string(cJSON *o, const char *key, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddStringToObject(o, key, v);
}

int mesh_inject_config_set_image(struct mesh_inject_config *c, const char *image,
                                 struct mesh_err *err)
{
    if (image == NULL || *image == '\0' || strlen(image) > 1024 ||
        strpbrk(image, " \t\r\n\f\v") != NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "--image must be an image reference (registry/repository:tag or "
                            "@sha256:...) without spaces");
    }
    /* A digest the kubelet cannot resolve would fail every injected pod's
     * pull (InvalidImageName): refuse it here, by name. */
    const char *at = strchr(image, '@');
    if (at != NULL && (strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64 ||
                       strspn(at + 8, "0123456789abcdef") != 64 || at == image)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "--image '%.200s': a digest must be REPOSITORY@sha256: followed by 64 "
                            "lowercase hex digits (as `crane digest` or the registry prints it)",
                            image);
    }
    set_string(c->init, "image", image);
    set_string(c->sidecar, "image", image);
    render_texts(c);
    return 0;
}

/* ---- AdmissionReview ------------------------------------------------------------ */

void mesh_inject_review_cleanup(struct mesh_inject_review *r)
{
    if (r == NULL) {
        return;
    }
    cJSON_Delete(r->root);
    memset(r, 0, sizeof(*r));
}

static bool is_pod_request(const cJSON *req)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(req, "kind");
    const char *g = mesh_json_str(kind, "group");
    const char *k = mesh_json_str(kind, "kind");
    return k != NULL && strcmp(k, "Pod") == 0 && (g == NULL || *g == '\0');
}

int mesh_inject_review_parse(const char *buf, size_t len, struct mesh_inject_review *out_review,
                             struct mesh_err *err)
{
    struct mesh_err local;
    if (err == NULL) {
        err = &local;
    }
    if (len > MESH_INJECT_REVIEW_MAX) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "AdmissionReview of %zu bytes exceeds the limit of %u", len,
                            MESH_INJECT_REVIEW_MAX);
    }
    cJSON *root = mesh_json_parse(buf, len, MESH_INJECT_REVIEW_MAX, err);
    if (root == NULL) {
        return -err->code;
    }
    const char *api = mesh_json_str(root, "apiVersion");
    const char *kind = mesh_json_str(root, "kind");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(root, "request");
    const char *uid = mesh_json_str(req, "uid");
    const char *why = NULL;
    if (api == NULL || strcmp(api, "admission.k8s.io/v1") != 0) {
        why = "apiVersion is not admission.k8s.io/v1 (the webhook must list "
              "admissionReviewVersions: [v1])";
    } else if (kind == NULL || strcmp(kind, "AdmissionReview") != 0) {
        why = "kind is not AdmissionReview";
    } else if (!cJSON_IsObject(req)) {
        why = "the AdmissionReview has no request object";
    } else if (uid == NULL || *uid == '\0' || strlen(uid) > 128) {
        why = "request.uid is missing, empty or longer than 128 bytes";
    }
    if (why != NULL) {
        cJSON_Delete(root);
        return mesh_err_set(err, MESH_E_INVAL, 0, "%s", why);
    }
    struct mesh_inject_review r = {.root = root, .uid = uid};
    r.op = mesh_json_str(req, "operation");
    r.op = r.op ? r.op : "";
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(req, "object");
    r.pod = is_pod_request(req) && cJSON_IsObject(obj) ? obj : NULL;
    r.ns = mesh_json_str(req, "namespace");
    if (r.ns == NULL || *r.ns == '\0') {
        r.ns = r.pod
                   ? mesh_json_str(cJSON_GetObjectItemCaseSensitive(r.pod, "metadata"), "namespace")
                   : NULL;
    }
    r.ns = r.ns ? r.ns : "";
    *out_review = r;
    return 0;
}

/* ---- decision ------------------------------------------------------------------- */

void mesh_inject_decision_cleanup(struct mesh_inject_decision *d)
{
    if (d == NULL) {
        return;
    }
    mesh_free(d->patch);
    mesh_free(d->service_account);
    mesh_free(d->tpu_resource);
    memset(d, 0, sizeof(*d));
}

__attribute__((format(printf, 3, 4))) static int
verdict(struct mesh_inject_decision *d, enum mesh_inject_verdict v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    d->verdict = v;
    vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
    va_end(ap);
    return 0;
}

/* The pod's tpumesh annotations as mesh_annotations (values borrowed from
 * the JSON: the struct's strings are not freed, only its array). */
static int annotations_of(const cJSON *meta, struct mesh_annotations *out)
{
    const cJSON *ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
    out->n = 0;
    out->items = NULL;
    int n = cJSON_IsObject(ann) ? cJSON_GetArraySize(ann) : 0;
    if (n <= 0) {
        return 0;
    }
    out->items = mesh_calloc((size_t)n, sizeof(*out->items));
    const cJSON *e;
    cJSON_ArrayForEach(e, ann)
    {
        if (cJSON_IsString(e)) {
            out->items[out->n].key = e->string;
            out->items[out->n].value = e->valuestring;
            out->n++;
        }
    }
    return 0;
}

/* Containers named in tpumesh.dev/containers ("a,b,c", its syntax already
 * checked by mesh_annotations_check): every name must be a regular
 * container; mark[i] is set for containers[i]. */
static int select_containers(const char *list, const cJSON *containers, bool *mark,
                             struct mesh_inject_decision *d)
{
    const char *cursor = list;
    const char *p;
    size_t n;
    while (mesh_annotations_list_next(&cursor, &p, &n)) {
        bool found = false;
        int i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, containers)
        {
            const char *name = mesh_json_str(c, "name");
            if (name != NULL && strlen(name) == n && memcmp(name, p, n) == 0) {
                mark[i] = true;
                found = true;
            }
            i++;
        }
        if (!found) {
            return verdict(d, MESH_INJECT_DENY,
                           "annotation " MESH_INJECT_ANNOTATION_CONTAINERS
                           " names container '%.*s', which is not one of the pod's containers",
                           (int)(n > 64 ? 64 : n), p);
        }
    }
    return 0;
}

/* A resource quantity of a TPU: a whole number, as a JSON number or string. */
static long long tpu_count_of(const cJSON *v)
{
    long long x = 0;
    if (cJSON_IsString(v)) {
        if (mesh_parse_ll(v->valuestring, strlen(v->valuestring), 0, 1 << 20, &x, NULL) != 0) {
            return -1;
        }
    } else if (cJSON_IsNumber(v)) {
        double dv = v->valuedouble;
        if (dv < 0 || dv > (1 << 20) || dv != (double)(long long)dv) {
            return -1;
        }
        x = (long long)dv;
    } else {
        return -1;
    }
    return x;
}

struct tpu {
    char resource[128];
    long long count;
};

/* TPU resources of one container (limits first: extended resources must have
 * requests equal to limits, and limits alone imply the requests). */
static int container_tpu(const cJSON *c, struct tpu *t, struct mesh_inject_decision *d)
{
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "resources");
    static const char *const kinds[] = {"limits", "requests"};
    for (size_t k = 0; k < 2; k++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(res, kinds[k]);
        const cJSON *e;
        cJSON_ArrayForEach(e, (cJSON_IsObject(m) ? m : NULL))
        {
            bool tpu = strcmp(e->string, "google.com/tpu") == 0;
            bool legacy = strncmp(e->string, "cloud-tpus.google.com/", 22) == 0;
            if (!tpu && !legacy) {
                continue;
            }
            long long n = tpu_count_of(e);
            if (n < 0 || strlen(e->string) >= sizeof(t->resource)) {
                return verdict(d, MESH_INJECT_DENY,
                               "container '%.64s' requests %.64s that is not a whole number",
                               mesh_json_str(c, "name") ? mesh_json_str(c, "name") : "", e->string);
            }
            if (t->resource[0] != '\0' && strcmp(t->resource, e->string) != 0) {
                return verdict(d, MESH_INJECT_DENY,
                               "the pod's containers request two TPU resources (%.64s and %.64s); "
                               "a pod uses one kind of TPU",
                               t->resource, e->string);
            }
            snprintf(t->resource, sizeof(t->resource), "%s", e->string);
            if (n > t->count) {
                t->count = n;
            }
        }
    }
    return 0;
}

static bool list_has_name(const cJSON *list, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, (cJSON_IsArray(list) ? list : NULL))
    {
        const char *n = mesh_json_str(e, "name");
        if (n != NULL && strcmp(n, name) == 0) {
            return true;
        }
    }
    return false;
}

/* The patch under construction: a JSON array of "add" operations. Paths are
 * fixed segments and indices, so they need no JSON or JSON-pointer escaping. */
struct ops {
    struct mesh_buf b;
    const struct mesh_inject_config *c;
    bool first;
    bool toobig; /* an append hit the buffer's limit: the text is incomplete */
};

static void put(struct ops *o, const char *text)
{
    if (mesh_buf_puts(&o->b, text, NULL) < 0) {
        o->toobig = true;
    }
}

static void op_begin(struct ops *o, const char *path)
{
    if (mesh_buf_printf(&o->b, NULL, "%s{\"op\":\"add\",\"path\":\"%s\",\"value\":",
                        o->first ? "" : ",", path) < 0) {
        o->toobig = true;
    }
    o->first = false;
}

static void put_value(struct ops *o, const cJSON *item)
{
    char *tmp = NULL;
    put(o, text_of(o->c, item, &tmp));
    mesh_free(tmp);
}

/* Append the items to the array at path ("/spec/volumes"): one add of the
 * whole array when it is absent (RFC 6902 does not create parents), else one
 * add per item at "<path>/-". */
static void append_ops(struct ops *o, const cJSON *parent, const char *key, const char *path,
                       const cJSON *const *items, size_t n)
{
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(parent, key);
    if (!cJSON_IsArray(cur)) {
        op_begin(o, path);
        put(o, "[");
        for (size_t i = 0; i < n; i++) {
            if (i > 0) {
                put(o, ",");
            }
            put_value(o, items[i]);
        }
        put(o, "]}");
        return;
    }
    char p[256];
    snprintf(p, sizeof(p), "%s/-", path);
    for (size_t i = 0; i < n; i++) {
        op_begin(o, p);
        put_value(o, items[i]);
        put(o, "}");
    }
}

/* tpumesh-init with the pod's TPU added to its requests and limits. */
static cJSON *init_with_tpu(const cJSON *init, const struct tpu *t)
{
    cJSON *c = cJSON_Duplicate(init, true);
    if (t->count <= 0) {
        return c;
    }
    cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "resources");
    if (!cJSON_IsObject(res)) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "resources");
        res = cJSON_AddObjectToObject(c, "resources");
    }
    static const char *const kinds[] = {"requests", "limits"};
    for (size_t k = 0; k < 2; k++) {
        cJSON *m = cJSON_GetObjectItemCaseSensitive(res, kinds[k]);
        if (!cJSON_IsObject(m)) {
            cJSON_DeleteItemFromObjectCaseSensitive(res, kinds[k]);
            m = cJSON_AddObjectToObject(res, kinds[k]);
        }
        char num[32];
        snprintf(num, sizeof(num), "%lld", t->count);
        set_string(m, t->resource, num);
    }
    return c;
}

/* Checks that need the whole pod: annotations, clashes, TPU, targets. */
static int check_pod(const struct mesh_inject_config *c, const cJSON *meta, const cJSON *spec,
                     bool *mark, struct tpu *t, struct mesh_inject_decision *d)
{
    struct mesh_annotations a;
    annotations_of(meta, &a);
    struct mesh_annotations_config ac;
    struct mesh_err aerr = {0};
    int rc = mesh_annotations_config(&a, &ac, &aerr);
    const char *list = mesh_annotations_get(&a, MESH_INJECT_ANNOTATION_CONTAINERS);
    mesh_free(a.items);
    if (rc < 0) {
        return verdict(d, MESH_INJECT_DENY, "%s", aerr.msg);
    }
    mesh_annotations_config_cleanup(&ac);
    const cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    int nc = cJSON_IsArray(containers) ? cJSON_GetArraySize(containers) : 0;
    if (nc == 0 || nc > MESH_INJECT_CONTAINERS_MAX) {
        return verdict(d, MESH_INJECT_DENY, "the pod must have 1 to %d containers",
                       MESH_INJECT_CONTAINERS_MAX);
    }
    if (list != NULL) {
        select_containers(list, containers, mark, d);
        if (d->verdict == MESH_INJECT_DENY) {
            return 0;
        }
    } else {
        for (int i = 0; i < nc; i++) {
            mark[i] = true;
        }
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, containers)
    {
        container_tpu(e, t, d);
        if (d->verdict == MESH_INJECT_DENY) {
            return 0;
        }
    }
    const cJSON *vols = cJSON_GetObjectItemCaseSensitive(spec, "volumes");
    cJSON_ArrayForEach(e, c->volumes)
    {
        const char *name = mesh_json_str(e, "name");
        if (list_has_name(vols, name)) {
            return verdict(d, MESH_INJECT_DENY,
                           "the pod already has a volume named '%s', which tpumesh adds; rename "
                           "it",
                           name);
        }
    }
    return 0;
}

/* The mounts container ct gets: the configured ones it does not have yet.
 * A different mount at the same path is a clash (deny). */
static size_t mounts_for(const cJSON *ct, const cJSON *mounts, const cJSON **out, size_t max,
                         struct mesh_inject_decision *d)
{
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(ct, "volumeMounts");
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, mounts)
    {
        const char *name = mesh_json_str(m, "name");
        const char *path = mesh_json_str(m, "mountPath");
        bool present = false;
        const cJSON *h;
        cJSON_ArrayForEach(h, (cJSON_IsArray(have) ? have : NULL))
        {
            const char *hn = mesh_json_str(h, "name");
            const char *hp = mesh_json_str(h, "mountPath");
            if (hn != NULL && name != NULL && strcmp(hn, name) == 0) {
                present = true;
            } else if (hp != NULL && path != NULL && strcmp(hp, path) == 0) {
                verdict(d, MESH_INJECT_DENY,
                        "container '%.64s' already mounts something else at %.128s, where "
                        "tpumesh mounts its volume",
                        mesh_json_str(ct, "name") ? mesh_json_str(ct, "name") : "", path);
                return 0;
            }
        }
        if (!present && n < max) {
            out[n++] = m;
        }
    }
    return n;
}

static int build_patch(const struct mesh_inject_config *c, const cJSON *spec, const bool *mark,
                       const struct tpu *t, struct mesh_inject_decision *d, struct mesh_err *err)
{
    struct ops o = {.c = c, .first = true};
    /* Far above any real patch; a limit all the same. */
    mesh_buf_init(&o.b, MESH_INJECT_REVIEW_MAX);
    put(&o, "[");
    /* Volumes first, so that every later op refers to volumes that exist. */
    const cJSON *vitems[MESH_INJECT_LIST_MAX];
    size_t nv = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, c->volumes)
    {
        if (nv < MESH_INJECT_LIST_MAX) {
            vitems[nv++] = e;
        }
    }
    append_ops(&o, spec, "volumes", "/spec/volumes", vitems, nv);
    /* tpumesh-init, then (TPU VM) the sidecar, after the user's init containers. */
    mesh_autocjson cJSON *init = t->count > 0 ? init_with_tpu(c->init, t) : NULL;
    bool legacy = t->count > 0 && strncmp(t->resource, "cloud-tpus.google.com/", 22) == 0;
    const cJSON *inits[2] = {init ? init : c->init, c->sidecar};
    append_ops(&o, spec, "initContainers", "/spec/initContainers", inits, legacy ? 1 : 2);
    d->sidecar = !legacy;
    /* Mounts in the selected regular containers. */
    const cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    int i = 0;
    cJSON_ArrayForEach(e, containers)
    {
        if (mark[i]) {
            const cJSON *m[MESH_INJECT_LIST_MAX];
            size_t nm = mounts_for(e, c->mounts, m, MESH_INJECT_LIST_MAX, d);
            if (d->verdict == MESH_INJECT_DENY) {
                mesh_buf_cleanup(&o.b);
                return 0;
            }
            char path[64];
            snprintf(path, sizeof(path), "/spec/containers/%d/volumeMounts", i);
            append_ops(&o, e, "volumeMounts", path, m, nm);
            d->mounted++;
        }
        i++;
    }
    put(&o, "]");
    if (o.toobig) {
        mesh_buf_cleanup(&o.b);
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "the JSON patch would exceed %u bytes",
                            MESH_INJECT_REVIEW_MAX);
    }
    d->patch = mesh_buf_steal(&o.b, &d->patch_len);
    return 0;
}

int mesh_inject_decide(const struct mesh_inject_config *c, const struct mesh_inject_review *r,
                       struct mesh_inject_decision *out_decision, struct mesh_err *err)
{
    struct mesh_inject_decision d = {0};
    const cJSON *meta = r->pod ? cJSON_GetObjectItemCaseSensitive(r->pod, "metadata") : NULL;
    const cJSON *spec = r->pod ? cJSON_GetObjectItemCaseSensitive(r->pod, "spec") : NULL;
    const char *label =
        mesh_json_str(cJSON_GetObjectItemCaseSensitive(meta, "labels"), MESH_INJECT_LABEL);
    const char *init_name = mesh_json_str(c->init, "name");
    const char *side_name = mesh_json_str(c->sidecar, "name");
    if (r->pod == NULL || strcmp(r->op, "CREATE") != 0) {
        verdict(&d, MESH_INJECT_SKIP, "not a pod creation");
    } else if (label == NULL || strcmp(label, "true") != 0) {
        verdict(&d, MESH_INJECT_SKIP, "label " MESH_INJECT_LABEL " is not \"true\"");
    } else if (!cJSON_IsObject(spec)) {
        verdict(&d, MESH_INJECT_DENY, "the pod has no spec");
    } else {
        const cJSON *ic = cJSON_GetObjectItemCaseSensitive(spec, "initContainers");
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, "containers");
        if (list_has_name(ic, init_name) || list_has_name(ic, side_name) ||
            list_has_name(cs, init_name) || list_has_name(cs, side_name)) {
            verdict(&d, MESH_INJECT_SKIP, "already injected (a container named %s or %s exists)",
                    init_name, side_name);
        }
    }
    if (d.verdict == MESH_INJECT_SKIP && d.reason[0] != '\0') {
        *out_decision = d;
        return 0;
    }
    if (d.verdict == MESH_INJECT_DENY) {
        *out_decision = d;
        return 0;
    }
    bool mark[MESH_INJECT_CONTAINERS_MAX] = {false};
    struct tpu t = {{0}, 0};
    check_pod(c, meta, spec, mark, &t, &d);
    if (d.verdict == MESH_INJECT_DENY) {
        *out_decision = d;
        return 0;
    }
    d.verdict = MESH_INJECT_PATCH;
    int rc = build_patch(c, spec, mark, &t, &d, err);
    if (rc < 0 || d.verdict == MESH_INJECT_DENY) {
        mesh_free(d.patch);
        d.patch = NULL;
        if (rc < 0) {
            return rc;
        }
        *out_decision = d;
        return 0;
    }
    const char *sa = mesh_json_str(spec, "serviceAccountName");
    d.service_account = mesh_strdup(sa != NULL && *sa != '\0' ? sa : "default");
    if (t.count > 0) {
        d.tpu_resource = mesh_strdup(t.resource);
        d.tpu_count = t.count;
    }
    snprintf(d.reason, sizeof(d.reason), "injected");
    *out_decision = d;
    return 0;
}

/* ---- response --------------------------------------------------------------------- */

char *mesh_inject_response(const char *uid, const struct mesh_inject_decision *d,
                           const char *const *warnings, size_t nwarn, size_t *out_len,
                           struct mesh_err *err)
{
    mesh_autocjson cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "apiVersion", "admission.k8s.io/v1");
    cJSON_AddStringToObject(root, "kind", "AdmissionReview");
    cJSON *resp = cJSON_AddObjectToObject(root, "response");
    cJSON_AddStringToObject(resp, "uid", uid);
    cJSON_AddBoolToObject(resp, "allowed", d->verdict != MESH_INJECT_DENY);
    if (d->verdict == MESH_INJECT_DENY) {
        cJSON *st = cJSON_AddObjectToObject(resp, "status");
        cJSON_AddNumberToObject(st, "code", 403);
        char msg[MESH_INJECT_REASON_MAX + 16];
        snprintf(msg, sizeof(msg), "tpumesh: %s", d->reason);
        cJSON_AddStringToObject(st, "message", msg);
    }
    if (d->verdict == MESH_INJECT_PATCH && d->patch != NULL) {
        mesh_autofree char *b64 = mesh_base64_encode(d->patch, d->patch_len, NULL);
        cJSON_AddStringToObject(resp, "patchType", "JSONPatch");
        cJSON_AddStringToObject(resp, "patch", b64);
    }
    if (nwarn > 0) {
        cJSON *w = cJSON_AddArrayToObject(resp, "warnings");
        for (size_t i = 0; i < nwarn; i++) {
            cJSON_AddItemToArray(w, cJSON_CreateString(warnings[i]));
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    if (text == NULL) {
        mesh_err_set(err, MESH_E_TOOBIG, 0, "cannot print the AdmissionReview response");
        return NULL;
    }
    char *out = mesh_strdup(text);
    cJSON_free(text);
    if (out_len != NULL) {
        *out_len = strlen(out);
    }
    return out;
}
