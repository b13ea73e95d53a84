/*
 * kubeconfig.c - loads one context of a kubeconfig with libyaml's document
 * API, decodes *-data fields, parses ExecCredential replies. Field names
 * and meanings: client-go tools/clientcmd/api/v1/types.go. Only the named paths are visited, so
 * YAML aliases cannot make the walk explode.
 */
#include "kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "core/base64.h"
#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "io/sys.h"

#define MAX_ENTRIES 4096 /* clusters/users/contexts/args/env entries */

/* Parsing context: the document and the names used in messages. */
struct kc {
    yaml_document_t *doc;
    const char *path; /* for messages */
    char *dir;        /* owned: directory for relative paths */
};

static int cfg_err(const struct kc *k, struct mesh_err *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int cfg_err(const struct kc *k, struct mesh_err *err, const char *key, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return mesh_err_set(err, MESH_E_CONFIG, 0, "kubeconfig %s: %s%s%s", k->path, key ? key : "",
                        key ? ": " : "", what);
}

/* ---- YAML navigation ----------------------------------------------------- */

static yaml_node_t *node_at(const struct kc *k, int idx)
{
    return yaml_document_get_node(k->doc, idx);
}

static const char *scalar(const yaml_node_t *n)
{
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        return NULL;
    }
    return (const char *)n->data.scalar.value;
}

/* Value node of key in mapping n, or NULL. */
static yaml_node_t *map_get(const struct kc *k, const yaml_node_t *n, const char *key)
{
    if (n == NULL || n->type != YAML_MAPPING_NODE) {
        return NULL;
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *s = scalar(node_at(k, p->key));
        if (s != NULL && strcmp(s, key) == 0) {
            return node_at(k, p->value);
        }
    }
    return NULL;
}

/* The string at key of mapping n: NULL when absent or null (~, empty);
 * -MESH_E_CONFIG when present but not a scalar. */
static int get_str(const struct kc *k, const yaml_node_t *n, const char *key, const char *where,
                   const char **out, struct mesh_err *err)
{
    const yaml_node_t *v = map_get(k, n, key);
    *out = NULL;
    if (v == NULL) {
        return 0;
    }
    const char *s = scalar(v);
    if (s == NULL) {
        char kp[160];
        snprintf(kp, sizeof(kp), "%s.%s", where, key);
        return cfg_err(k, err, kp, "must be a string");
    }
    if (s[0] == '\0' || (v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                         (strcmp(s, "~") == 0 || strcmp(s, "null") == 0))) {
        return 0;
    }
    *out = s;
    return 0;
}

static int get_bool(const struct kc *k, const yaml_node_t *n, const char *key, const char *where,
                    bool *out, struct mesh_err *err)
{
    const char *s;
    int rc = get_str(k, n, key, where, &s, err);
    *out = false;
    if (rc < 0 || s == NULL) {
        return rc;
    }
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0) {
        return 0;
    }
    char kp[160];
    snprintf(kp, sizeof(kp), "%s.%s", where, key);
    return cfg_err(k, err, kp, "must be true or false, not \"%.40s\"", s);
}

/* Find the entry {name: <name>, <inner>: {...}} of sequence `list` at
 * root and return its inner mapping. */
static int find_named(const struct kc *k, const yaml_node_t *root, const char *list,
                      const char *inner, const char *name, yaml_node_t **out, struct mesh_err *err)
{
    const yaml_node_t *seq = map_get(k, root, list);
    *out = NULL;
    if (seq == NULL || (seq->type == YAML_SCALAR_NODE && scalar(seq)[0] == '\0')) {
        return cfg_err(k, err, list, "no entry named \"%s\" (the list is missing)", name);
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return cfg_err(k, err, list, "must be a list of {name, %s} entries", inner);
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > MAX_ENTRIES) {
        return cfg_err(k, err, list, "too many entries (%zu > %d)", n, MAX_ENTRIES);
    }
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        const yaml_node_t *e = node_at(k, *it);
        const char *s = scalar(map_get(k, e, "name"));
        if (s != NULL && strcmp(s, name) == 0) {
            yaml_node_t *v = map_get(k, e, inner);
            if (v == NULL || v->type != YAML_MAPPING_NODE) {
                char kp[200];
                snprintf(kp, sizeof(kp), "%s[%s].%s", list, name, inner);
                return cfg_err(k, err, kp, "missing or not a mapping");
            }
            *out = v;
            return 0;
        }
    }
    return cfg_err(k, err, list,
                   "no entry named \"%s\"; fix the context or add the entry "
                   "(kubectl config view lists them)",
                   name);
}

/* ---- helpers ------------------------------------------------------------- */

static char *resolve_path(const struct kc *k, const char *p)
{
    if (p[0] == '/' || k->dir == NULL) {
        return mesh_strdup(p);
    }
    if (p[0] == '~' && p[1] == '/' && getenv("HOME") != NULL) {
        return mesh_asprintf("%s/%s", getenv("HOME"), p + 2);
    }
    return mesh_asprintf("%s/%s", k->dir, p);
}

/* A string field; a path (path true) is resolved against the kubeconfig's directory. */
static int take_str(const struct kc *k, const yaml_node_t *n, const char *key, const char *where,
                    bool path, char **out, struct mesh_err *err)
{
    const char *s;
    int rc = get_str(k, n, key, where, &s, err);
    if (rc == 0 && s != NULL) {
        *out = path ? resolve_path(k, s) : mesh_strdup(s);
    }
    return rc;
}

/* A *-data field: base64 of PEM. */
static int take_data(const struct kc *k, const yaml_node_t *n, const char *key, const char *where,
                     unsigned char **out, size_t *out_len, struct mesh_err *err)
{
    const char *s;
    int rc = get_str(k, n, key, where, &s, err);
    if (rc < 0 || s == NULL) {
        return rc;
    }
    struct mesh_err e2;
    if (mesh_base64_decode(s, strlen(s), out, out_len, &e2) < 0) {
        char kp[200];
        snprintf(kp, sizeof(kp), "%s.%s", where, key);
        return cfg_err(k, err, kp, "%s; it must be the base64 of the PEM file (base64 -w0 FILE)",
                       e2.msg);
    }
    return 0;
}

/* ---- sections ------------------------------------------------------------ */

static int load_cluster(const struct kc *k, const yaml_node_t *c, struct mesh_kubeconfig *kc,
                        struct mesh_err *err)
{
    char where[160];
    snprintf(where, sizeof(where), "clusters[%s].cluster", kc->cluster_name);
    int rc = take_str(k, c, "server", where, false, &kc->server, err);
    if (rc == 0 && kc->server == NULL) {
        char kp[200];
        snprintf(kp, sizeof(kp), "%s.server", where);
        return cfg_err(k, err, kp, "missing; set the API server URL (https://host:port)");
    }
    if (rc == 0) {
        rc = take_str(k, c, "tls-server-name", where, false, &kc->tls_server_name, err);
    }
    if (rc == 0) {
        rc = take_str(k, c, "certificate-authority", where, true, &kc->ca_file, err);
    }
    if (rc == 0) {
        rc = take_data(k, c, "certificate-authority-data", where, &kc->ca_data, &kc->ca_data_len,
                       err);
    }
    if (rc == 0) {
        rc = get_bool(k, c, "insecure-skip-tls-verify", where, &kc->insecure_skip_tls_verify, err);
    }
    if (rc == 0 && map_get(k, c, "proxy-url") != NULL && scalar(map_get(k, c, "proxy-url")) &&
        scalar(map_get(k, c, "proxy-url"))[0] != '\0') {
        char kp[200];
        snprintf(kp, sizeof(kp), "%s.proxy-url", where);
        return cfg_err(k, err, kp, "proxies are not supported; remove it");
    }
    return rc;
}

static int load_string_list(const struct kc *k, const yaml_node_t *seq, const char *where,
                            char ***out, size_t *out_n, struct mesh_err *err)
{
    if (seq == NULL || (seq->type == YAML_SCALAR_NODE && scalar(seq)[0] == '\0')) {
        return 0;
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return cfg_err(k, err, where, "must be a list of strings");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > MAX_ENTRIES) {
        return cfg_err(k, err, where, "too many entries (%zu)", n);
    }
    char **v = mesh_calloc(n + 1, sizeof(char *));
    *out = v;
    for (size_t i = 0; i < n; i++) {
        const char *s = scalar(node_at(k, seq->data.sequence.items.start[i]));
        if (s == NULL) {
            return cfg_err(k, err, where, "entry %zu is not a string", i);
        }
        v[i] = mesh_strdup(s);
        *out_n = i + 1;
    }
    return 0;
}

static int load_exec_env(const struct kc *k, const yaml_node_t *seq, const char *where,
                         struct mesh_kubeconfig_exec *ex, struct mesh_err *err)
{
    if (seq == NULL || (seq->type == YAML_SCALAR_NODE && scalar(seq)[0] == '\0')) {
        return 0;
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return cfg_err(k, err, where, "must be a list of {name, value}");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > MAX_ENTRIES) {
        return cfg_err(k, err, where, "too many entries (%zu)", n);
    }
    ex->env_names = mesh_calloc(n + 1, sizeof(char *));
    ex->env_values = mesh_calloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *e = node_at(k, seq->data.sequence.items.start[i]);
        const char *name = scalar(map_get(k, e, "name"));
        const char *value = scalar(map_get(k, e, "value"));
        if (name == NULL || name[0] == '\0' || strchr(name, '=') != NULL) {
            return cfg_err(k, err, where, "entry %zu needs a name (without '=')", i);
        }
        ex->env_names[i] = mesh_strdup(name);
        ex->env_values[i] = mesh_strdup(value ? value : "");
        ex->nenv = i + 1;
    }
    return 0;
}

static void exec_free(struct mesh_kubeconfig_exec *ex)
{
    if (ex == NULL) {
        return;
    }
    mesh_free(ex->api_version);
    mesh_free(ex->command);
    for (size_t i = 0; i < ex->nargs; i++) {
        mesh_free(ex->args[i]);
    }
    mesh_free(ex->args);
    for (size_t i = 0; i < ex->nenv; i++) {
        mesh_free(ex->env_names[i]);
        mesh_free(ex->env_values[i]);
    }
    mesh_free(ex->env_names);
    mesh_free(ex->env_values);
    mesh_free(ex);
}

static int load_exec(const struct kc *k, const yaml_node_t *e, const char *where,
                     struct mesh_kubeconfig *kc, struct mesh_err *err)
{
    char w[200];
    snprintf(w, sizeof(w), "%s.exec", where);
    if (e->type != YAML_MAPPING_NODE) {
        return cfg_err(k, err, w, "must be a mapping with apiVersion and command");
    }
    struct mesh_kubeconfig_exec *ex = mesh_calloc(1, sizeof(*ex));
    kc->exec = ex;
    const char *api, *cmd;
    int rc = get_str(k, e, "apiVersion", w, &api, err);
    if (rc == 0) {
        rc = get_str(k, e, "command", w, &cmd, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (api == NULL || (strcmp(api, "client.authentication.k8s.io/v1") != 0 &&
                        strcmp(api, "client.authentication.k8s.io/v1beta1") != 0)) {
        return cfg_err(k, err, w,
                       "apiVersion \"%.60s\" is not supported; use "
                       "client.authentication.k8s.io/v1",
                       api ? api : "");
    }
    if (cmd == NULL) {
        return cfg_err(k, err, w, "command is missing; name the credential plugin to run");
    }
    ex->api_version = mesh_strdup(api);
    /* client-go: a command containing a path separator is relative to the
     * kubeconfig's directory; a bare name is looked up in PATH. */
    ex->command = strchr(cmd, '/') != NULL ? resolve_path(k, cmd) : mesh_strdup(cmd);
    char aw[220];
    snprintf(aw, sizeof(aw), "%s.args", w);
    rc = load_string_list(k, map_get(k, e, "args"), aw, &ex->args, &ex->nargs, err);
    if (rc == 0) {
        snprintf(aw, sizeof(aw), "%s.env", w);
        rc = load_exec_env(k, map_get(k, e, "env"), aw, ex, err);
    }
    if (rc == 0) {
        rc = get_bool(k, e, "provideClusterInfo", w, &ex->provide_cluster_info, err);
    }
    /* A pod has no terminal: a plugin that insists on one can never run
     * (client-go refuses interactiveMode Always without a TTY too). */
    const char *mode = NULL;
    if (rc == 0) {
        rc = get_str(k, e, "interactiveMode", w, &mode, err);
    }
    if (rc == 0 && mode != NULL && strcmp(mode, "Always") == 0) {
        return cfg_err(k, err, w,
                       "interactiveMode Always needs a terminal, which a pod does not have; set "
                       "interactiveMode: Never");
    }
    return rc;
}

static int load_user(const struct kc *k, const yaml_node_t *u, struct mesh_kubeconfig *kc,
                     struct mesh_err *err)
{
    char where[160];
    snprintf(where, sizeof(where), "users[%s].user", kc->user_name);
    if (map_get(k, u, "auth-provider") != NULL) {
        return cfg_err(k, err, where,
                       "auth-provider plugins are not supported; use an exec plugin "
                       "(gke-gcloud-auth-plugin) or a token");
    }
    if (map_get(k, u, "username") != NULL || map_get(k, u, "password") != NULL) {
        return cfg_err(k, err, where,
                       "basic auth (username/password) is not supported; use a token, a "
                       "client certificate or an exec plugin");
    }
    int rc = take_str(k, u, "token", where, false, &kc->token, err);
    if (rc == 0) {
        rc = take_str(k, u, "tokenFile", where, true, &kc->token_file, err);
    }
    if (rc == 0) {
        rc = take_str(k, u, "client-certificate", where, true, &kc->client_cert_file, err);
    }
    if (rc == 0) {
        rc = take_data(k, u, "client-certificate-data", where, &kc->client_cert_data,
                       &kc->client_cert_data_len, err);
    }
    if (rc == 0) {
        rc = take_str(k, u, "client-key", where, true, &kc->client_key_file, err);
    }
    if (rc == 0) {
        rc = take_data(k, u, "client-key-data", where, &kc->client_key_data,
                       &kc->client_key_data_len, err);
    }
    const yaml_node_t *e = map_get(k, u, "exec");
    if (rc == 0 && e != NULL && !(e->type == YAML_SCALAR_NODE && scalar(e)[0] == '\0')) {
        rc = load_exec(k, e, where, kc, err);
    }
    if (rc == 0 && (kc->client_cert_file || kc->client_cert_data) !=
                       (kc->client_key_file || kc->client_key_data)) {
        return cfg_err(k, err, where,
                       "a client certificate needs both client-certificate(-data) and "
                       "client-key(-data)");
    }
    return rc;
}

static int load_context(const struct kc *k, const yaml_node_t *root, const char *context,
                        struct mesh_kubeconfig *kc, struct mesh_err *err)
{
    const char *name = context;
    int rc = 0;
    if (name == NULL || name[0] == '\0') {
        rc = get_str(k, root, "current-context", "", &name, err);
        if (rc < 0) {
            return rc;
        }
        if (name == NULL) {
            return cfg_err(k, err, "current-context",
                           "not set; run `kubectl config use-context NAME` or name a context");
        }
    }
    kc->context = mesh_strdup(name);
    yaml_node_t *ctx, *cl, *us = NULL;
    rc = find_named(k, root, "contexts", "context", name, &ctx, err);
    if (rc < 0) {
        return rc;
    }
    char where[160];
    snprintf(where, sizeof(where), "contexts[%s].context", name);
    const char *cluster, *user, *ns;
    rc = get_str(k, ctx, "cluster", where, &cluster, err);
    if (rc == 0) {
        rc = get_str(k, ctx, "user", where, &user, err);
    }
    if (rc == 0) {
        rc = get_str(k, ctx, "namespace", where, &ns, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (cluster == NULL) {
        return cfg_err(k, err, where, "names no cluster; set its \"cluster\" key");
    }
    kc->cluster_name = mesh_strdup(cluster);
    kc->ns = ns ? mesh_strdup(ns) : NULL;
    rc = find_named(k, root, "clusters", "cluster", cluster, &cl, err);
    if (rc == 0) {
        rc = load_cluster(k, cl, kc, err);
    }
    if (rc == 0 && user != NULL) {
        kc->user_name = mesh_strdup(user);
        rc = find_named(k, root, "users", "user", user, &us, err);
        if (rc == 0) {
            rc = load_user(k, us, kc, err);
        }
    }
    return rc;
}

/* ---- entry points -------------------------------------------------------- */

static char *dir_of(const char *path)
{
    if (path == NULL) {
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        return mesh_strdup(".");
    }
    if (slash == path) {
        return mesh_strdup("/");
    }
    return mesh_strndup(path, (size_t)(slash - path));
}

int mesh_kubeconfig_parse(const char *buf, size_t len, const char *path, const char *context,
                          struct mesh_kubeconfig *out, struct mesh_err *err)
{
    struct kc k = {.path = path ? path : "(inline)", .dir = NULL};
    memset(out, 0, sizeof(*out));
    if (len > MESH_KUBECONFIG_MAX_BYTES) {
        return cfg_err(&k, err, NULL, "file is larger than %zu bytes", MESH_KUBECONFIG_MAX_BYTES);
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        return cfg_err(&k, err, NULL, "cannot initialise the YAML parser");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        int rc = cfg_err(&k, err, NULL, "not valid YAML: %s at line %zu column %zu",
                         parser.problem ? parser.problem : "error", parser.problem_mark.line + 1,
                         parser.problem_mark.column + 1);
        yaml_parser_delete(&parser);
        return rc;
    }
    yaml_parser_delete(&parser);
    k.doc = &doc;
    k.dir = dir_of(path);
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc;
    if (root == NULL || root->type != YAML_MAPPING_NODE) {
        rc = cfg_err(&k, err, NULL,
                     "not a kubeconfig (expected a mapping with clusters, users, "
                     "contexts)");
    } else {
        out->path = mesh_strdup(k.path);
        rc = load_context(&k, root, context, out, err);
    }
    yaml_document_delete(&doc);
    mesh_free(k.dir);
    if (rc < 0) {
        mesh_kubeconfig_cleanup(out);
    }
    return rc;
}

int mesh_kubeconfig_load(const char *path, const char *context, struct mesh_kubeconfig *out,
                         struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    struct mesh_buf b;
    mesh_buf_init(&b, MESH_KUBECONFIG_MAX_BYTES);
    struct mesh_err rerr;
    if (mesh_sys_read_file(path, MESH_KUBECONFIG_MAX_BYTES, &b, &rerr) < 0) {
        mesh_buf_cleanup(&b);
        if (rerr.code == MESH_E_TOOBIG) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "kubeconfig %s: larger than %zu bytes", path,
                                MESH_KUBECONFIG_MAX_BYTES);
        }
        return mesh_err_set(err, MESH_E_CONFIG, rerr.sys_errno,
                            "kubeconfig %s: cannot open it; pass --kubeconfig or set KUBECONFIG "
                            "to a readable file",
                            path);
    }
    int rc = mesh_kubeconfig_parse(b.data ? b.data : "", b.len, path, context, out, err);
    mesh_buf_cleanup(&b);
    return rc;
}

void mesh_kubeconfig_cleanup(struct mesh_kubeconfig *kc)
{
    char **strs[] = {&kc->path,
                     &kc->context,
                     &kc->cluster_name,
                     &kc->user_name,
                     &kc->ns,
                     &kc->server,
                     &kc->tls_server_name,
                     &kc->ca_file,
                     &kc->client_cert_file,
                     &kc->client_key_file,
                     &kc->token,
                     &kc->token_file};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        mesh_free(*strs[i]);
    }
    mesh_free(kc->ca_data);
    mesh_free(kc->client_cert_data);
    mesh_free(kc->client_key_data);
    exec_free(kc->exec);
    memset(kc, 0, sizeof(*kc));
}

char *mesh_kubeconfig_default_path(void)
{
    const char *env = getenv("KUBECONFIG");
    if (env != NULL) {
        /* First non-empty entry of the colon list (no merging). */
        const char *p = env;
        while (*p != '\0') {
            const char *colon = strchr(p, ':');
            size_t n = colon ? (size_t)(colon - p) : strlen(p);
            if (n > 0) {
                return mesh_strndup(p, n);
            }
            p += n + (colon ? 1 : 0);
        }
    }
    const char *home = getenv("HOME");
    if (home == NULL || home[0] == '\0') {
        return NULL;
    }
    char *path = mesh_asprintf("%s/.kube/config", home);
    struct stat st;
    if (stat(path, &st) != 0) {
        mesh_free(path);
        return NULL;
    }
    return path;
}

/* ---- ExecCredential and time ----------------------------------------------- */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? (unsigned)-3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* "YYYY-MM-DDTHH:MM:SS" at s (19 bytes known to exist) -> epoch seconds (UTC). */
static bool parse_date_time(const char *s, int64_t *out)
{
    int y, mo, d, h, mi, se;
    if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
        !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) ||
        s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &se)) {
        return false;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) {
        return false;
    }
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se;
    return true;
}

/* Optional ".fraction", then "Z" or "+hh:mm"/"-hh:mm" -> offset seconds. */
static bool parse_zone(const char *p, int64_t *out_off)
{
    int oh, om;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
        }
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *out_off = 0;
        return true;
    }
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && digits(p + 1, 2, &oh) && p[3] == ':' &&
        digits(p + 4, 2, &om) && oh < 24 && om < 60) {
        *out_off = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
        return true;
    }
    return false;
}

int mesh_kubeconfig_parse_time(const char *s, int64_t *out_epoch_s, struct mesh_err *err)
{
    int64_t t, off;
    if (strlen(s) < 20 || !parse_date_time(s, &t)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "\"%.40s\" is not an RFC 3339 time", s);
    }
    if (!parse_zone(s + 19, &off)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "\"%.40s\" has no valid time zone", s);
    }
    *out_epoch_s = t - off;
    return 0;
}

int mesh_kubeconfig_parse_exec_credential(const char *buf, size_t len, const char *what,
                                          char **out_token, int64_t *out_expiry,
                                          struct mesh_err *err)
{
    mesh_autocjson cJSON *j = mesh_json_parse(buf, len, 1 << 20, err);
    if (j == NULL) {
        mesh_err_prefix(err, "credential plugin %s printed no ExecCredential JSON", what);
        return -MESH_E_AUTH;
    }
    const char *kind = mesh_json_str(j, "kind");
    const char *api = mesh_json_str(j, "apiVersion");
    if (kind == NULL || strcmp(kind, "ExecCredential") != 0 || api == NULL ||
        strncmp(api, "client.authentication.k8s.io/", 29) != 0) {
        return mesh_err_set(err, MESH_E_AUTH, 0,
                            "credential plugin %s: output is not a "
                            "client.authentication.k8s.io ExecCredential",
                            what);
    }
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
    const char *token = mesh_json_str(status, "token");
    if (token == NULL || token[0] == '\0') {
        bool cert = mesh_json_str(status, "clientCertificateData") != NULL;
        return mesh_err_set(err, MESH_E_AUTH, 0, "credential plugin %s: %s", what,
                            cert ? "client-certificate credentials are not supported; configure "
                                   "the plugin to return a token"
                                 : "status.token is missing or empty");
    }
    int64_t exp = 0;
    const char *ts = mesh_json_str(status, "expirationTimestamp");
    if (ts != NULL && ts[0] != '\0' && mesh_kubeconfig_parse_time(ts, &exp, err) < 0) {
        mesh_err_prefix(err, "credential plugin %s: status.expirationTimestamp", what);
        return -MESH_E_AUTH;
    }
    *out_token = mesh_strdup(token);
    *out_expiry = exp;
    return 0;
}
