/*
 * k8s_client.c - the Kubernetes API over libcurl: configuration sources,
 * bearer tokens (static, file with reload, exec plugin), TLS, and the
 * GET / LIST / WATCH calls. Every transfer runs through one curl multi
 * handle so that mesh_k8s_client_cancel() (curl_multi_wakeup) can
 * interrupt it from another thread, and so that a watch that delivers no
 * byte for stall_ms can be declared dead. Protocol facts
 * (Kubernetes API conventions, client-go behaviour) are noted where they matter.
 */
#include "k8s_client.h"

#include <curl/curl.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/base64.h"
#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "io/kubeconfig.h"
#include "io/log.h"
#include "io/secret.h"
#include "io/sys.h"

extern char **environ;

#define MOD "k8s"
#define ERR_BODY_MAX ((size_t)64 << 10)
#define TOKEN_MAX ((size_t)64 << 10)
#define EXEC_OUT_MAX ((size_t)1 << 20)
#define EXEC_TIMEOUT_MS 30000
#define RETRY_AFTER_CAP_S 60

enum auth_kind {
    AUTH_NONE = 0,
    AUTH_STATIC, /* kubeconfig token */
    AUTH_FILE,   /* token file: --token-file, in-cluster, tokenFile */
    AUTH_EXEC,   /* credential plugin */
};

struct mesh_k8s_client {
    char *server; /* base URL without trailing '/' */
    char *ns;
    char *source;
    /* TLS */
    char *ca_file;
    unsigned char *ca_data;
    size_t ca_data_len;
    char *cert_file;
    unsigned char *cert_data;
    size_t cert_data_len;
    char *key_file;
    unsigned char *key_data;
    size_t key_data_len;
    char *connect_to; /* CURLOPT_CONNECT_TO entry for tls-server-name, or NULL */
    char *url_base;   /* server with the host replaced by tls-server-name, or server */
    bool insecure;
    /* auth */
    enum auth_kind auth;
    char *token;
    char *token_file;
    int64_t token_read_ms;  /* monotonic time of the last file read / plugin run */
    int64_t token_expiry_s; /* exec: expirationTimestamp (epoch s), 0 = none */
    int token_reload_s;
    struct mesh_kubeconfig_exec *exec; /* borrowed from kc */
    struct mesh_kubeconfig kc;         /* owned: keeps exec config alive */
    /* transfers */
    CURLM *multi;
    CURL *easy;
    long connect_timeout_ms;
    long request_timeout_ms;
    char *user_agent;
    atomic_bool cancelled;
    long last_status;
    long retry_after;
    char last_error[16]; /* mesh_k8s_client_last_error */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- small file helpers --------------------------------------------------- */

/* Read a whole small file (<= max bytes) into an owned string. */
static char *read_small_file(const char *path, size_t max, struct mesh_err *err)
{
    struct mesh_buf b;
    mesh_buf_init(&b, max);
    if (mesh_sys_read_file(path, max, &b, err) < 0) {
        mesh_buf_cleanup(&b);
        return NULL;
    }
    return mesh_buf_steal(&b, NULL);
}

/* Trim surrounding whitespace in place; returns s. */
static char *trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) {
        s[--n] = '\0';
    }
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
        i++;
    }
    if (i > 0) {
        memmove(s, s + i, n - i + 1);
        explicit_bzero(s + n - i + 1, i); /* no stale tail of a token behind the NUL */
    }
    return s;
}

static bool file_readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* ---- tokens --------------------------------------------------------------- */

/* Re-read the token file. On failure keep the previous token (the kubelet
 * swaps the file atomically, so a failure is transient) unless
 * there is none. */
static int token_file_read(struct mesh_k8s_client *c, struct mesh_err *err)
{
    struct mesh_err e2;
    char *t = read_small_file(c->token_file, TOKEN_MAX, &e2);
    c->token_read_ms = mesh_sys_now_ms();
    if (t == NULL || trim(t)[0] == '\0') {
        mesh_secret_free(t);
        if (c->token != NULL) {
            mesh_warn(MOD, "token file %s unreadable or empty, keeping the previous token: %s",
                      c->token_file, t ? "empty" : e2.msg);
            return 0;
        }
        return mesh_err_set(err, MESH_E_AUTH, 0,
                            "token file %s: %s; mount the service-account token or pass "
                            "--token-file",
                            c->token_file, t ? "empty" : e2.msg);
    }
    /* trim() moved the token to the start of t; only t is kept. */
    mesh_secret_replace(&c->token, t);
    return 0;
}

/* KUBERNETES_EXEC_INFO: the ExecCredential input of client-go's exec
 * plugin runner (plugin/pkg/client/auth/exec/exec.go), with spec.cluster
 * when the kubeconfig says provideClusterInfo: true. */
static char *exec_info(const struct mesh_k8s_client *c)
{
    const struct mesh_kubeconfig_exec *ex = c->exec;
    mesh_autocjson cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "apiVersion", ex->api_version);
    cJSON_AddStringToObject(j, "kind", "ExecCredential");
    cJSON *spec = cJSON_AddObjectToObject(j, "spec");
    cJSON_AddBoolToObject(spec, "interactive", false);
    if (ex->provide_cluster_info) {
        cJSON *cl = cJSON_AddObjectToObject(spec, "cluster");
        cJSON_AddStringToObject(cl, "server", c->server);
        if (c->kc.tls_server_name != NULL) {
            cJSON_AddStringToObject(cl, "tls-server-name", c->kc.tls_server_name);
        }
        if (c->insecure) {
            cJSON_AddBoolToObject(cl, "insecure-skip-tls-verify", true);
        }
        if (c->ca_data != NULL) {
            mesh_autofree char *b64 = mesh_base64_encode(c->ca_data, c->ca_data_len, NULL);
            cJSON_AddStringToObject(cl, "certificate-authority-data", b64);
        }
    }
    char *txt = cJSON_PrintUnformatted(j);
    char *out = mesh_asprintf("KUBERNETES_EXEC_INFO=%s", txt ? txt : "{}");
    cJSON_free(txt);
    return out;
}

static bool env_overridden(const struct mesh_kubeconfig_exec *ex, const char *entry)
{
    size_t n = strcspn(entry, "=");
    if (n == 20 && strncmp(entry, "KUBERNETES_EXEC_INFO", 20) == 0) {
        return true;
    }
    for (size_t i = 0; i < ex->nenv; i++) {
        if (strlen(ex->env_names[i]) == n && strncmp(ex->env_names[i], entry, n) == 0) {
            return true;
        }
    }
    return false;
}

/* Build the plugin's environment: ours, with the kubeconfig's env entries
 * and KUBERNETES_EXEC_INFO replacing variables of the same name. */
static char **exec_envp(const struct mesh_k8s_client *c)
{
    size_t n = 0;
    while (environ[n] != NULL) {
        n++;
    }
    const struct mesh_kubeconfig_exec *ex = c->exec;
    char **envp = mesh_calloc(n + ex->nenv + 2, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!env_overridden(ex, environ[i])) {
            envp[k++] = mesh_strdup(environ[i]);
        }
    }
    for (size_t i = 0; i < ex->nenv; i++) {
        envp[k++] = mesh_asprintf("%s=%s", ex->env_names[i], ex->env_values[i]);
    }
    envp[k++] = exec_info(c);
    return envp;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        mesh_free(v[i]);
    }
    mesh_free(v);
}

/* Read the plugin's stdout until EOF, bounded in size and time. */
static int exec_collect(int fd, pid_t pid, const char *cmd, struct mesh_buf *out,
                        struct mesh_err *err)
{
    int64_t deadline = mesh_sys_now_ms() + EXEC_TIMEOUT_MS;
    for (;;) {
        int64_t left = deadline - mesh_sys_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0) {
            kill(pid, SIGKILL);
            return mesh_err_set(err, MESH_E_AUTH, 0,
                                "credential plugin %s did not finish within %d s", cmd,
                                EXEC_TIMEOUT_MS / 1000);
        }
        int pr = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno != EINTR) {
            return mesh_err_set(err, MESH_E_AUTH, errno, "credential plugin %s: poll", cmd);
        }
        if (pr <= 0) {
            continue;
        }
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return 0;
        }
        if (mesh_buf_append(out, chunk, (size_t)n, NULL) < 0) {
            kill(pid, SIGKILL);
            return mesh_err_set(err, MESH_E_AUTH, 0,
                                "credential plugin %s printed more than %zu bytes", cmd,
                                EXEC_OUT_MAX);
        }
    }
}

static int exec_wait(pid_t pid, const char *cmd, struct mesh_err *err)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            return mesh_err_set(err, MESH_E_AUTH, errno, "credential plugin %s: waitpid", cmd);
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        return 0;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        /* Where posix_spawn cannot report the exec failure itself, the child exits 127. */
        return mesh_err_set(err, MESH_E_AUTH, 0,
                            "credential plugin %s could not be started (exit status 127); install "
                            "it or fix users[].user.exec.command",
                            cmd);
    }
    return mesh_err_set(err, MESH_E_AUTH, 0,
                        "credential plugin %s failed (%s %d); run it by hand to see why", cmd,
                        WIFEXITED(status) ? "exit status" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* Run the exec credential plugin and take its token. */
static int exec_run(struct mesh_k8s_client *c, struct mesh_err *err)
{
    const struct mesh_kubeconfig_exec *ex = c->exec;
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        return mesh_err_set(err, MESH_E_AUTH, errno, "credential plugin %s: pipe", ex->command);
    }
    char **argv = mesh_calloc(ex->nargs + 2, sizeof(char *));
    argv[0] = ex->command;
    for (size_t i = 0; i < ex->nargs; i++) {
        argv[i + 1] = ex->args[i];
    }
    char **envp = exec_envp(c);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int src = posix_spawnp(&pid, ex->command, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free_strv(envp);
    mesh_free(argv);
    close(pfd[1]);
    if (src != 0) {
        close(pfd[0]);
        return mesh_err_set(err, MESH_E_AUTH, src,
                            "credential plugin %s (kubeconfig %s, user %s) could not be started; "
                            "install it or fix users[].user.exec.command",
                            ex->command, c->kc.path, c->kc.user_name);
    }
    struct mesh_buf out;
    mesh_buf_init(&out, EXEC_OUT_MAX);
    int rc = exec_collect(pfd[0], pid, ex->command, &out, err);
    close(pfd[0]);
    int wrc = exec_wait(pid, ex->command, rc < 0 ? NULL : err);
    if (rc == 0) {
        rc = wrc;
    }
    char *tok = NULL;
    int64_t exp = 0;
    if (rc == 0) {
        rc = mesh_kubeconfig_parse_exec_credential(out.data ? out.data : "", out.len, ex->command,
                                                   &tok, &exp, err);
    }
    if (out.data != NULL) {
        explicit_bzero(out.data, out.len); /* the plugin's reply carries the token */
    }
    mesh_buf_cleanup(&out);
    if (rc < 0) {
        return rc;
    }
    mesh_secret_replace(&c->token, tok);
    c->token_expiry_s = exp;
    c->token_read_ms = mesh_sys_now_ms();
    mesh_info(MOD, "credential plugin %s returned a token%s", ex->command,
              exp ? " with an expiry" : "");
    return 0;
}

/* Make sure c->token is current. force: after a 401. */
static int token_refresh(struct mesh_k8s_client *c, bool force, struct mesh_err *err)
{
    switch (c->auth) {
    case AUTH_FILE:
        if (force || c->token == NULL ||
            mesh_sys_now_ms() - c->token_read_ms >= (int64_t)c->token_reload_s * 1000) {
            return token_file_read(c, err);
        }
        return 0;
    case AUTH_EXEC:
        if (force || c->token == NULL ||
            (c->token_expiry_s > 0 && (int64_t)time(NULL) >= c->token_expiry_s - 10)) {
            return exec_run(c, err);
        }
        return 0;
    default:
        return 0;
    }
}

/* ---- configuration ---------------------------------------------------------- */

static char *default_namespace(const char *sa_dir, const char *fallback)
{
    const char *env = getenv("POD_NAMESPACE");
    if (env != NULL && env[0] != '\0') {
        return mesh_strdup(env);
    }
    if (sa_dir != NULL) {
        mesh_autofree char *p = mesh_asprintf("%s/namespace", sa_dir);
        char *ns = read_small_file(p, 256, NULL);
        if (ns != NULL && trim(ns)[0] != '\0') {
            return ns;
        }
        mesh_free(ns);
    }
    return mesh_strdup(fallback ? fallback : "default");
}

static const char *sa_dir_of(const struct mesh_k8s_client_opts *o)
{
    if (o->sa_dir != NULL) {
        return o->sa_dir;
    }
    const char *env = getenv("TPUMESH_SA_DIR");
    return (env != NULL && env[0] != '\0') ? env : MESH_K8S_SA_DIR_DEFAULT;
}

static int check_url(const char *url, const char *what, struct mesh_err *err)
{
    if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s \"%.100s\" is not an http:// or https:// URL", what, url);
    }
    return 0;
}

static int config_flags(struct mesh_k8s_client *c, const struct mesh_k8s_client_opts *o,
                        struct mesh_err *err)
{
    if (check_url(o->apiserver, "--apiserver", err) < 0) {
        return -MESH_E_CONFIG;
    }
    c->server = mesh_strdup(o->apiserver);
    c->source = mesh_strdup("flags");
    if (o->token_file != NULL) {
        c->token_file = mesh_strdup(o->token_file);
        c->auth = AUTH_FILE;
    }
    if (o->ca_file != NULL) {
        c->ca_file = mesh_strdup(o->ca_file);
    }
    c->ns = default_namespace(sa_dir_of(o), NULL);
    return 0;
}

static int config_in_cluster(struct mesh_k8s_client *c, const struct mesh_k8s_client_opts *o,
                             const char *host, const char *port, struct mesh_err *err)
{
    const char *dir = sa_dir_of(o);
    /* rest.InClusterConfig: "https://" + net.JoinHostPort(host, port). */
    bool v6 = strchr(host, ':') != NULL;
    c->server = mesh_asprintf("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    c->source = mesh_strdup("in-cluster");
    c->token_file = mesh_asprintf("%s/token", dir);
    c->ca_file = mesh_asprintf("%s/ca.crt", dir);
    c->auth = AUTH_FILE;
    if (!file_readable(c->ca_file)) {
        return mesh_err_set(err, MESH_E_CONFIG, errno,
                            "in-cluster configuration: cannot read the CA %s; mount the "
                            "service-account volume (automountServiceAccountToken) or pass "
                            "--apiserver/--ca-file",
                            c->ca_file);
    }
    c->ns = default_namespace(dir, NULL);
    return 0;
}

static int config_kubeconfig(struct mesh_k8s_client *c, const struct mesh_k8s_client_opts *o,
                             const char *path, struct mesh_err *err)
{
    struct mesh_kubeconfig *kc = &c->kc;
    int rc = mesh_kubeconfig_load(path, o->context, kc, err);
    if (rc < 0) {
        return rc;
    }
    if (check_url(kc->server, "kubeconfig server", err) < 0) {
        return mesh_err_prefix(err, "kubeconfig %s: clusters[%s].cluster.server", path,
                               kc->cluster_name);
    }
    c->server = mesh_strdup(kc->server);
    c->source = mesh_asprintf("kubeconfig %s context %s", path, kc->context);
    c->ca_file = kc->ca_file ? mesh_strdup(kc->ca_file) : NULL;
    c->cert_file = kc->client_cert_file ? mesh_strdup(kc->client_cert_file) : NULL;
    c->key_file = kc->client_key_file ? mesh_strdup(kc->client_key_file) : NULL;
    c->insecure = kc->insecure_skip_tls_verify;
    if (kc->ca_data != NULL) {
        c->ca_data = MESH_STEAL(kc->ca_data);
        c->ca_data_len = kc->ca_data_len;
    }
    if (kc->client_cert_data != NULL) {
        c->cert_data = MESH_STEAL(kc->client_cert_data);
        c->cert_data_len = kc->client_cert_data_len;
    }
    if (kc->client_key_data != NULL) {
        c->key_data = MESH_STEAL(kc->client_key_data);
        c->key_data_len = kc->client_key_data_len;
    }
    /* Precedence as client-go: exec plugin, then tokenFile, then token. */
    if (kc->exec != NULL) {
        c->auth = AUTH_EXEC;
        c->exec = kc->exec;
    } else if (kc->token_file != NULL) {
        c->auth = AUTH_FILE;
        c->token_file = mesh_strdup(kc->token_file);
    } else if (kc->token != NULL) {
        c->auth = AUTH_STATIC;
        c->token = MESH_STEAL(kc->token); /* one copy, owned here */
    }
    c->ns = mesh_strdup(kc->ns ? kc->ns : "default");
    if (kc->tls_server_name != NULL) {
        /* Verify the certificate against tls-server-name: put that name in
         * the URL and connect to the real host with CONNECT_TO. */
        CURLU *u = curl_url();
        char *host = NULL, *port = NULL;
        if (curl_url_set(u, CURLUPART_URL, c->server, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
            curl_url_set(u, CURLUPART_HOST, kc->tls_server_name, 0) == CURLUE_OK) {
            char *nu = NULL;
            if (curl_url_get(u, CURLUPART_URL, &nu, 0) == CURLUE_OK) {
                c->url_base = mesh_strdup(nu);
                curl_free(nu);
                c->connect_to = mesh_asprintf("%s:%s:%s:%s", kc->tls_server_name, port, host, port);
            }
        }
        curl_free(host);
        curl_free(port);
        curl_url_cleanup(u);
    }
    return 0;
}

static int config_resolve(struct mesh_k8s_client *c, const struct mesh_k8s_client_opts *o,
                          struct mesh_err *err)
{
    if (o->apiserver != NULL && o->apiserver[0] != '\0') {
        return config_flags(c, o, err);
    }
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (o->kubeconfig == NULL && host != NULL && host[0] != '\0' && port != NULL &&
        port[0] != '\0') {
        return config_in_cluster(c, o, host, port, err);
    }
    mesh_autofree char *path =
        o->kubeconfig ? mesh_strdup(o->kubeconfig) : mesh_kubeconfig_default_path();
    if (path == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "no Kubernetes API configuration: pass --apiserver URL (with "
                            "--token-file/--ca-file), run in a pod (KUBERNETES_SERVICE_HOST), "
                            "or pass --kubeconfig / set KUBECONFIG");
    }
    return config_kubeconfig(c, o, path, err);
}

/* Check files named by the configuration now, so a typo is a start-up
 * error that names the file rather than a TLS failure later. */
static int config_check_files(struct mesh_k8s_client *c, struct mesh_err *err)
{
    const struct {
        const char *path;
        const char *what;
    } files[] = {
        {c->ca_file, "CA file (--ca-file / certificate-authority)"},
        {c->cert_file, "client certificate (client-certificate)"},
        {c->key_file, "client key (client-key)"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i].path != NULL && !file_readable(files[i].path)) {
            return mesh_err_set(err, MESH_E_CONFIG, errno, "%s %s cannot be read", files[i].what,
                                files[i].path);
        }
    }
    if (c->auth == AUTH_FILE) {
        struct mesh_err e2;
        if (token_file_read(c, &e2) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s", e2.msg);
        }
    }
    return 0;
}

struct mesh_k8s_client *mesh_k8s_client_new(const struct mesh_k8s_client_opts *opts,
                                            struct mesh_err *err)
{
    pthread_once(&curl_once, curl_init_once);
    struct mesh_k8s_client *c = mesh_calloc(1, sizeof(*c));
    atomic_init(&c->cancelled, false);
    c->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 10000;
    c->request_timeout_ms = opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 60000;
    c->token_reload_s = opts->token_reload_s > 0 ? opts->token_reload_s : 60;
    c->user_agent = opts->user_agent ? mesh_strdup(opts->user_agent)
                                     : mesh_asprintf("tpumesh/%s", MESH_VERSION);
    if (config_resolve(c, opts, err) < 0 || config_check_files(c, err) < 0) {
        mesh_k8s_client_free(c);
        return NULL;
    }
    c->insecure = c->insecure || opts->insecure_skip_tls_verify;
    size_t n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/') {
        c->server[--n] = '\0';
    }
    if (c->url_base == NULL) {
        c->url_base = mesh_strdup(c->server);
    }
    n = strlen(c->url_base);
    while (n > 0 && c->url_base[n - 1] == '/') {
        c->url_base[--n] = '\0';
    }
    c->multi = curl_multi_init();
    c->easy = curl_easy_init();
    if (c->multi == NULL || c->easy == NULL) {
        mesh_err_set(err, MESH_E_IO, 0, "libcurl initialisation failed");
        mesh_k8s_client_free(c);
        return NULL;
    }
    return c;
}

void mesh_k8s_client_free(struct mesh_k8s_client *c)
{
    if (c == NULL) {
        return;
    }
    if (c->easy != NULL) {
        curl_easy_cleanup(c->easy);
    }
    if (c->multi != NULL) {
        curl_multi_cleanup(c->multi);
    }
    mesh_secret_free(c->token);
    char *strs[] = {c->server,   c->ns,         c->source,     c->ca_file,    c->cert_file,
                    c->key_file, c->token_file, c->user_agent, c->connect_to, c->url_base};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        mesh_free(strs[i]);
    }
    mesh_free(c->ca_data);
    mesh_free(c->cert_data);
    mesh_free(c->key_data);
    mesh_kubeconfig_cleanup(&c->kc);
    mesh_free(c);
}

const char *mesh_k8s_client_server(const struct mesh_k8s_client *c)
{
    return c->server;
}

const char *mesh_k8s_client_namespace(const struct mesh_k8s_client *c)
{
    return c->ns;
}

const char *mesh_k8s_client_source(const struct mesh_k8s_client *c)
{
    return c->source;
}

void mesh_k8s_client_cancel(struct mesh_k8s_client *c)
{
    atomic_store(&c->cancelled, true);
    curl_multi_wakeup(c->multi);
}

long mesh_k8s_client_last_status(const struct mesh_k8s_client *c)
{
    return c->last_status;
}

long mesh_k8s_client_retry_after(const struct mesh_k8s_client *c)
{
    return c->retry_after;
}

const char *mesh_k8s_client_last_error(const struct mesh_k8s_client *c)
{
    return c->last_error;
}

static void set_last_error(struct mesh_k8s_client *c, const char *label)
{
    snprintf(c->last_error, sizeof(c->last_error), "%s", label);
}

/* The class of a parse-level failure code (list splitter, framer, decoders). */
static const char *parse_class(int rc)
{
    return rc == -MESH_E_TOOBIG ? "oversized" : (rc == -MESH_E_PARSE ? "malformed" : "");
}

/* ---- transfers ---------------------------------------------------------------- */

/* One transfer's state, shared by the write and header callbacks. */
struct xfer {
    struct mesh_k8s_client *c;
    CURL *easy;
    struct mesh_buf body; /* GET body, or a LIST / WATCH non-2xx body (truncated) */
    int64_t last_byte_ms;
    int64_t now_us; /* CLOCK_MONOTONIC us of the latest block of body bytes */
    long retry_after;
    /* list only: a 2xx body goes through the splitter, item by item */
    struct mesh_k8s_list_scanner *scanner;
    /* watch only */
    bool watch;
    struct mesh_k8s_watch_framer framer;
    size_t max_event;
    mesh_k8s_event_fn fn;
    void *ctx;
    bool strip;              /* drop metadata.managedFields before decoding */
    struct mesh_buf scratch; /* owned: an event without its managedFields */
    uint64_t events;         /* events handed to fn */
    void (*on_block)(void *ctx);
    int cb_rc; /* set when a callback stopped the transfer */
    struct mesh_err cb_err;
    const char *post; /* create only: the JSON body POSTed (borrowed) */
};

static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
    struct xfer *x = userp;
    size_t len = size * n;
    x->last_byte_ms = mesh_sys_now_ms();
    /* A new status line (e.g. after a 100 Continue) resets what we know. */
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        x->retry_after = 0;
    } else if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        long v = mesh_k8s_watch_parse_retry_after(data + 12, len - 12, RETRY_AFTER_CAP_S);
        x->retry_after = v > 0 ? v : 0;
    }
    return len;
}

static int on_line(void *ctx, const char *line, size_t len, struct mesh_err *err)
{
    struct xfer *x = ctx;
    struct mesh_k8s_watch_event ev;
    if (x->strip) {
        line = mesh_k8s_watch_strip_managed_fields(line, len, &x->scratch, &len);
    }
    int rc = mesh_k8s_watch_decode_event(line, len, x->max_event, &ev, err);
    if (rc < 0) {
        return rc;
    }
    /* Every line completed by this block was complete when it was read. */
    ev.recv_us = x->now_us;
    x->events++;
    rc = x->fn(x->ctx, &ev, err);
    mesh_k8s_watch_event_cleanup(&ev);
    return rc;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp)
{
    struct xfer *x = userp;
    size_t len = size * n;
    x->now_us = mesh_sys_now_us();
    x->last_byte_ms = x->now_us / 1000;
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    bool ok = code >= 200 && code < 300;
    if ((x->watch && code == 200) || (x->scanner != NULL && ok)) {
        uint64_t before = x->events;
        int rc = x->watch
                     ? mesh_k8s_watch_framer_feed(&x->framer, data, len, on_line, x, &x->cb_err)
                     : mesh_k8s_list_scanner_feed(x->scanner, data, len, &x->cb_err);
        if (x->on_block != NULL && x->events != before) {
            x->on_block(x->ctx);
        }
        if (rc < 0) {
            x->cb_rc = rc;
            return 0; /* abort: CURLE_WRITE_ERROR */
        }
        return len;
    }
    if (!ok && (x->watch || x->scanner != NULL)) {
        /* An error body (a Status): its start is enough to name the error. */
        size_t room = x->body.max - x->body.len;
        (void)mesh_buf_append(&x->body, data, len < room ? len : room, NULL);
        return len;
    }
    if (mesh_buf_append(&x->body, data, len, NULL) < 0) {
        x->cb_rc = mesh_err_set(&x->cb_err, MESH_E_TOOBIG, 0,
                                "response from %s is larger than the limit of %zu bytes",
                                x->c->server, x->body.max);
        return 0;
    }
    return len;
}

static void set_tls(struct mesh_k8s_client *c, CURL *e)
{
    if (c->ca_data != NULL) {
        struct curl_blob b = {.data = c->ca_data, .len = c->ca_data_len, .flags = 0};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
    } else if (c->ca_file != NULL) {
        curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    }
    if (c->cert_data != NULL) {
        struct curl_blob b = {.data = c->cert_data, .len = c->cert_data_len, .flags = 0};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
    } else if (c->cert_file != NULL) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert_file);
    }
    if (c->key_data != NULL) {
        struct curl_blob b = {.data = c->key_data, .len = c->key_data_len, .flags = 0};
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b);
    } else if (c->key_file != NULL) {
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->key_file);
    }
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
}

static void setup_easy(struct mesh_k8s_client *c, struct xfer *x, const char *url,
                       struct curl_slist *hdrs, char *errbuf, struct curl_slist *connect_to)
{
    CURL *e = x->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_VERBOSE, 0L); /* never: it would print the token */
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    if (!x->watch) {
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->request_timeout_ms);
        curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, ""); /* gzip for lists */
    }
    if (connect_to != NULL) {
        curl_easy_setopt(e, CURLOPT_CONNECT_TO, connect_to);
    }
    if (x->post != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->post);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(x->post));
    }
    set_tls(c, e);
}

/* Drive one transfer on the multi handle until it finishes, is cancelled
 * or stalls. Returns the curl result, or -1 cancelled, -2 stalled. */
static int drive(struct mesh_k8s_client *c, struct xfer *x, long stall_ms)
{
    curl_multi_add_handle(c->multi, x->easy);
    int result = CURLE_OK;
    for (;;) {
        int running = 0;
        curl_multi_perform(c->multi, &running);
        CURLMsg *m;
        int q;
        bool done = false;
        while ((m = curl_multi_info_read(c->multi, &q)) != NULL) {
            if (m->msg == CURLMSG_DONE && m->easy_handle == x->easy) {
                result = (int)m->data.result;
                done = true;
            }
        }
        if (done || running == 0) {
            break;
        }
        if (atomic_load(&c->cancelled)) {
            result = -1;
            break;
        }
        int64_t now = mesh_sys_now_ms();
        long wait = 1000;
        if (stall_ms > 0) {
            int64_t left = x->last_byte_ms + stall_ms - now;
            if (left <= 0) {
                result = -2;
                break;
            }
            wait = left < wait ? (long)left : wait;
        }
        curl_multi_poll(c->multi, NULL, 0, (int)wait, NULL);
    }
    curl_multi_remove_handle(c->multi, x->easy);
    return result;
}

/* Turn a curl failure into an error that says what to check. */
static int curl_failure(struct mesh_k8s_client *c, int result, const char *errbuf,
                        struct mesh_err *err)
{
    const char *detail = errbuf[0] ? errbuf : curl_easy_strerror((CURLcode)result);
    /* Metrics class: no response at all is "connect"; a response that broke
     * off is "protocol". */
    set_last_error(c, c->last_status == 0 ? "connect" : "protocol");
    switch (result) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
        set_last_error(c, "tls");
        return mesh_err_set(err, MESH_E_API, 0,
                            "TLS with %s failed: %s (CA: %s); check --ca-file / "
                            "certificate-authority(-data) and the client certificate",
                            c->server, detail,
                            c->ca_data ? "certificate-authority-data"
                                       : (c->ca_file ? c->ca_file : "system store"));
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
        if (result == CURLE_OPERATION_TIMEDOUT) {
            set_last_error(c, "timeout");
        }
        return mesh_err_set(err, MESH_E_API, 0, "cannot reach the API server %s: %s", c->server,
                            detail);
    default:
        return mesh_err_set(err, MESH_E_API, 0, "request to %s failed: %s", c->server, detail);
    }
}

/* The RBAC view of a request, for a 403's message: verb ("get", "list",
 * "watch", "create"), resource ("jobs") and API group ("batch", "" = core). */
struct rbac_req {
    const char *verb;
    char resource[64];
    char group[128];
};

static void rbac_of_query(struct rbac_req *r, const char *verb, const struct mesh_k8s_query *q)
{
    r->verb = verb;
    snprintf(r->resource, sizeof(r->resource), "%s", q->resource ? q->resource : "pods");
    r->group[0] = '\0';
    if (q->group_version != NULL) {
        const char *slash = strchr(q->group_version, '/');
        size_t n = slash ? (size_t)(slash - q->group_version) : 0;
        snprintf(r->group, sizeof(r->group), "%.*s", (int)n, q->group_version);
    }
}

/* From a path "/apis/<group>/<version>/.../<resource>" or "/api/v1/.../<resource>". */
static void rbac_of_path(struct rbac_req *r, const char *verb, const char *path)
{
    r->verb = verb;
    r->group[0] = '\0';
    const char *last = strrchr(path, '/');
    snprintf(r->resource, sizeof(r->resource), "%s", last ? last + 1 : path);
    if (strncmp(path, "/apis/", 6) == 0) {
        size_t n = strcspn(path + 6, "/");
        snprintf(r->group, sizeof(r->group), "%.*s", (int)n, path + 6);
    }
}

/* Map a non-2xx status and its body to an error code and message. what
 * names the request ("GET jobs.batch ml/trainer"); rb says what a 403
 * must ask the Role for. */
static int http_failure(struct mesh_k8s_client *c, long code, const struct mesh_buf *body,
                        const char *what, const struct rbac_req *rb, struct mesh_err *err)
{
    struct mesh_k8s_watch_status st;
    const char *msg = "";
    char label[16];
    snprintf(label, sizeof(label), "%ld", code);
    set_last_error(c, label);
    if (body->len > 0 && mesh_k8s_watch_decode_status(body->data, body->len, &st, NULL) == 0) {
        msg = st.message;
    }
    switch (code) {
    case 401:
        return mesh_err_set(
            err, MESH_E_AUTH, 0, "%s: 401 Unauthorized from %s%s; check the %s", what, c->server,
            (c->auth == AUTH_FILE || c->auth == AUTH_EXEC) ? " even with a fresh token" : "",
            c->auth == AUTH_FILE   ? "token file"
            : c->auth == AUTH_EXEC ? "credential plugin"
            : c->auth == AUTH_NONE ? "missing credentials (no token configured)"
                                   : "kubeconfig user's token");
    case 403:
        /* Authenticated, not authorized: say which rule the Role lacks
         * first (the API's own text, which is long, last). */
        return mesh_err_set(err, MESH_E_FORBIDDEN, 0,
                            "%s: 403 Forbidden (authorization failed): the Role bound to this "
                            "ServiceAccount must allow verb \"%s\" on resource \"%s\" in API "
                            "group \"%s\" (RBAC); the API says: %s",
                            what, rb->verb, rb->resource, rb->group,
                            msg[0] ? msg : "access denied");
    case 404:
        return mesh_err_set(err, MESH_E_NOTFOUND, 0, "%s: 404 %s", what,
                            msg[0] ? msg : "not found");
    case 410:
        return mesh_err_set(err, MESH_E_GONE, 0, "%s: 410 %s", what, msg[0] ? msg : "Gone");
    case 429:
        return mesh_err_set(err, MESH_E_API, 0, "%s: 429 Too Many Requests (Retry-After %ld s)",
                            what, c->retry_after);
    default:
        return mesh_err_set(err, MESH_E_API, 0, "%s: HTTP %ld from %s%s%s", what, code, c->server,
                            msg[0] ? ": " : "", msg);
    }
}

/* http_failure for a GET / LIST / WATCH of q: "GET jobs.batch ml/trainer",
 * "LIST pods", "WATCH pods". */
static int query_failure(struct mesh_k8s_client *c, const struct mesh_buf *body, const char *verb,
                         const struct mesh_k8s_query *q, const char *name, struct mesh_err *err)
{
    struct rbac_req rb;
    rbac_of_query(&rb, verb, q);
    const char *method = strcmp(verb, "get") == 0    ? "GET"
                         : strcmp(verb, "list") == 0 ? "LIST"
                                                     : "WATCH";
    char what[400];
    if (name != NULL) {
        snprintf(what, sizeof(what), "%s %s%s%s %s/%s", method, rb.resource, rb.group[0] ? "." : "",
                 rb.group, q->ns ? q->ns : "", name);
    } else {
        snprintf(what, sizeof(what), "%s %s%s%s", method, rb.resource, rb.group[0] ? "." : "",
                 rb.group);
    }
    return http_failure(c, c->last_status, body, what, &rb, err);
}

/* Headers for one attempt: Accept and, when there is one, the bearer
 * token (never logged). */
static struct curl_slist *make_headers(const struct mesh_k8s_client *c, bool post)
{
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (post) {
        h = curl_slist_append(h, "Content-Type: application/json");
    }
    if (c->token != NULL) {
        char *auth = mesh_asprintf("Authorization: Bearer %s", c->token);
        h = curl_slist_append(h, auth);
        mesh_secret_free(auth);
    }
    return h;
}

/* Run one request (GET or WATCH), refreshing the token and retrying once
 * on 401 (client-go token_source.go + round_trippers.go).
 * Returns 0 with the HTTP status in c->last_status, or an error. */
static int request(struct mesh_k8s_client *c, struct xfer *x, const char *url, long stall_ms,
                   struct mesh_err *err)
{
    set_last_error(c, "");
    if (atomic_load(&c->cancelled)) {
        return mesh_err_set(err, MESH_E_IO, 0, "cancelled");
    }
    int rc = token_refresh(c, false, err);
    if (rc < 0) {
        set_last_error(c, "auth");
        return rc;
    }
    struct curl_slist *cto = c->connect_to ? curl_slist_append(NULL, c->connect_to) : NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        char errbuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hdrs = make_headers(c, x->post != NULL);
        x->last_byte_ms = mesh_sys_now_ms();
        x->retry_after = 0;
        setup_easy(c, x, url, hdrs, errbuf, cto);
        int res = drive(c, x, stall_ms);
        mesh_secret_slist_free(hdrs);
        c->last_status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &c->last_status);
        c->retry_after = x->retry_after;
        set_last_error(c, "");
        if (res == -1) {
            rc = mesh_err_set(err, MESH_E_IO, 0, "cancelled");
        } else if (res == -2) {
            set_last_error(c, "timeout");
            rc = mesh_err_set(err, MESH_E_TIMEOUT, 0,
                              "no data from %s for %ld ms (not even a bookmark): connection "
                              "presumed dead",
                              c->server, stall_ms);
        } else if (x->cb_rc < 0) {
            /* Parse-level failures are ours to classify; a callback's own
             * code (an in-stream ERROR, ...) is classified by the caller. */
            set_last_error(c, parse_class(x->cb_rc));
            rc = x->cb_rc;
            if (err != NULL) {
                *err = x->cb_err;
            }
        } else if (res != CURLE_OK && !(x->watch && c->last_status == 200)) {
            rc = curl_failure(c, res, errbuf, err);
        } else if (c->last_status == 401 && attempt == 0 &&
                   (c->auth == AUTH_FILE || c->auth == AUTH_EXEC)) {
            mesh_info(MOD, "401 from %s: re-reading the token and retrying once", c->server);
            mesh_buf_reset(&x->body);
            rc = token_refresh(c, true, err);
            if (rc == 0) {
                continue;
            }
            set_last_error(c, "auth");
        } else {
            rc = res; /* CURLE_OK, or a watch cut after 200 (handled by the caller) */
        }
        break;
    }
    curl_slist_free_all(cto);
    return rc;
}

/* Build "<base>/api/v1[/namespaces/<ns>]/<resource>[/<name>]?<params>"
 * (/apis/<group_version>/... for a named API group). */
static char *make_url(struct mesh_k8s_client *c, const struct mesh_k8s_query *q, const char *name,
                      const char *params)
{
    struct mesh_buf b;
    mesh_buf_init(&b, 1 << 16);
    if (q->group_version != NULL) {
        mesh_buf_printf(&b, NULL, "%s/apis/%s", c->url_base, q->group_version);
    } else {
        mesh_buf_printf(&b, NULL, "%s/api/v1", c->url_base);
    }
    if (q->ns != NULL && q->ns[0] != '\0') {
        char *ns = curl_easy_escape(c->easy, q->ns, 0);
        mesh_buf_printf(&b, NULL, "/namespaces/%s", ns ? ns : "");
        curl_free(ns);
    }
    mesh_buf_printf(&b, NULL, "/%s", q->resource ? q->resource : "pods");
    if (name != NULL) {
        char *n = curl_easy_escape(c->easy, name, 0);
        mesh_buf_printf(&b, NULL, "/%s", n ? n : "");
        curl_free(n);
    }
    if (params != NULL && params[0] != '\0') {
        mesh_buf_printf(&b, NULL, "?%s", params);
    }
    return mesh_buf_steal(&b, NULL);
}

static void add_param(struct mesh_k8s_client *c, struct mesh_buf *p, const char *key,
                      const char *value)
{
    if (value == NULL) {
        return;
    }
    char *v = curl_easy_escape(c->easy, value, 0);
    mesh_buf_printf(p, NULL, "%s%s=%s", p->len ? "&" : "", key, v ? v : "");
    curl_free(v);
}

static void add_selectors(struct mesh_k8s_client *c, struct mesh_buf *p,
                          const struct mesh_k8s_query *q)
{
    if (q->label_selector != NULL && q->label_selector[0] != '\0') {
        add_param(c, p, "labelSelector", q->label_selector);
    }
    if (q->field_selector != NULL && q->field_selector[0] != '\0') {
        add_param(c, p, "fieldSelector", q->field_selector);
    }
}

static void xfer_init(struct xfer *x, struct mesh_k8s_client *c, size_t max_body)
{
    memset(x, 0, sizeof(*x));
    x->c = c;
    x->easy = c->easy;
    mesh_buf_init(&x->body, max_body);
}

/* A reply body that must be one JSON object: into *out_obj (owned by the
 * caller), else -MESH_E_PARSE with err prefixed "<method> <target>: reply". */
static int reply_object(struct mesh_k8s_client *c, const struct mesh_buf *body, const char *method,
                        const char *target, cJSON **out_obj, struct mesh_err *err)
{
    cJSON *j = mesh_json_parse(body->data ? body->data : "", body->len, body->max, err);
    if (j == NULL || !cJSON_IsObject(j)) {
        if (j != NULL) {
            mesh_err_set(err, MESH_E_PARSE, 0, "JSON but not an object");
        }
        cJSON_Delete(j);
        mesh_err_prefix(err, "%s %.300s: reply", method, target);
        set_last_error(c, "malformed");
        return -MESH_E_PARSE;
    }
    *out_obj = j;
    return 0;
}

int mesh_k8s_client_get(struct mesh_k8s_client *c, const struct mesh_k8s_query *q, const char *name,
                        cJSON **out_obj, struct mesh_err *err)
{
    mesh_autofree char *url = make_url(c, q, name, NULL);
    struct xfer x;
    xfer_init(&x, c, MESH_K8S_EVENT_MAX_DEFAULT);
    int rc = request(c, &x, url, 0, err);
    if (rc == 0 && c->last_status != 200) {
        rc = query_failure(c, &x.body, "get", q, name, err);
    }
    if (rc == 0) {
        rc = reply_object(c, &x.body, "GET", name, out_obj, err);
    }
    mesh_buf_cleanup(&x.body);
    return rc;
}

int mesh_k8s_client_create(struct mesh_k8s_client *c, const char *path, const char *body,
                           cJSON **out_obj, struct mesh_err *err)
{
    mesh_autofree char *url = mesh_asprintf("%s%s", c->url_base, path);
    struct xfer x;
    xfer_init(&x, c, MESH_K8S_EVENT_MAX_DEFAULT);
    x.post = body;
    int rc = request(c, &x, url, 0, err);
    if (rc == 0 && c->last_status != 200 && c->last_status != 201) {
        char what[320];
        snprintf(what, sizeof(what), "POST %.300s", path);
        struct rbac_req rb;
        rbac_of_path(&rb, "create", path);
        rc = http_failure(c, c->last_status, &x.body, what, &rb, err);
    }
    if (rc == 0) {
        rc = reply_object(c, &x.body, "POST", path, out_obj, err);
    }
    mesh_buf_cleanup(&x.body);
    return rc;
}

int mesh_k8s_client_list(struct mesh_k8s_client *c, const struct mesh_k8s_query *q, long limit,
                         const char *cont, const char *rv, size_t max_bytes, size_t max_item_bytes,
                         mesh_k8s_list_item_fn fn, void *ctx, struct mesh_k8s_list_meta *out_meta,
                         struct mesh_err *err)
{
    struct mesh_buf p;
    mesh_buf_init(&p, 1 << 16);
    add_selectors(c, &p, q);
    if (limit > 0) {
        mesh_buf_printf(&p, NULL, "%slimit=%ld", p.len ? "&" : "", limit);
    }
    if (cont != NULL) {
        add_param(c, &p, "continue", cont);
    } else {
        add_param(c, &p, "resourceVersion", rv);
    }
    mesh_autofree char *url = make_url(c, q, NULL, mesh_buf_str(&p));
    mesh_buf_cleanup(&p);
    /* The page streams through the splitter (curl has already undone any
     * gzip): one item is in memory at a time, never the page. */
    struct mesh_k8s_list_scanner sc;
    mesh_k8s_list_scanner_init(&sc, max_item_bytes, max_bytes, fn, ctx);
    struct xfer x;
    xfer_init(&x, c, ERR_BODY_MAX);
    x.scanner = &sc;
    int rc = request(c, &x, url, 0, err);
    if (rc == 0 && (c->last_status < 200 || c->last_status >= 300)) {
        rc = query_failure(c, &x.body, "list", q, NULL, err);
    }
    if (rc == 0) {
        rc = mesh_k8s_list_scanner_finish(&sc, out_meta, err);
        if (rc < 0) {
            set_last_error(c, parse_class(rc));
        } else {
            out_meta->recv_us = x.now_us;
        }
    }
    mesh_k8s_list_scanner_cleanup(&sc);
    mesh_buf_cleanup(&x.body);
    return rc;
}

int mesh_k8s_client_watch(struct mesh_k8s_client *c, const struct mesh_k8s_query *q,
                          const struct mesh_k8s_watch_opts *wo, mesh_k8s_event_fn fn, void *ctx,
                          struct mesh_err *err)
{
    struct mesh_buf p;
    mesh_buf_init(&p, 1 << 16);
    mesh_buf_puts(&p, "watch=1", NULL);
    add_selectors(c, &p, q);
    if (wo->bookmarks) {
        mesh_buf_puts(&p, "&allowWatchBookmarks=true", NULL);
    }
    if (wo->send_initial_events) {
        mesh_buf_puts(&p, "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", NULL);
        add_param(c, &p, "resourceVersion", wo->rv ? wo->rv : "");
    } else {
        add_param(c, &p, "resourceVersion", wo->rv);
    }
    if (wo->timeout_s > 0) {
        mesh_buf_printf(&p, NULL, "&timeoutSeconds=%ld", wo->timeout_s);
    }
    mesh_autofree char *url = make_url(c, q, NULL, mesh_buf_str(&p));
    mesh_buf_cleanup(&p);
    struct xfer x;
    xfer_init(&x, c, ERR_BODY_MAX);
    x.watch = true;
    x.fn = fn;
    x.ctx = ctx;
    x.max_event = wo->max_event_bytes ? wo->max_event_bytes : MESH_K8S_EVENT_MAX_DEFAULT;
    x.strip = !wo->keep_managed_fields;
    x.on_block = wo->on_block;
    mesh_buf_init(&x.scratch, x.max_event);
    mesh_k8s_watch_framer_init(&x.framer, x.max_event);
    int rc = request(c, &x, url, wo->stall_ms, err);
    if (rc >= 0 && c->last_status != 200) {
        rc = query_failure(c, &x.body, "watch", q, NULL, err);
    } else if (rc > 0) {
        /* 200 and then the connection broke (curl: partial file / recv error). */
        set_last_error(c, "protocol");
        rc = mesh_err_set(err, MESH_E_API, 0, "watch stream from %s cut%s: %s", c->server,
                          mesh_k8s_watch_framer_pending(&x.framer) ? " in the middle of an event"
                                                                   : "",
                          curl_easy_strerror((CURLcode)rc));
    } else if (rc == 0 && mesh_k8s_watch_framer_pending(&x.framer) > 0) {
        set_last_error(c, "protocol");
        rc = mesh_err_set(err, MESH_E_API, 0,
                          "watch stream from %s ended in the middle of an event (%zu bytes)",
                          c->server, mesh_k8s_watch_framer_pending(&x.framer));
    }
    mesh_k8s_watch_framer_cleanup(&x.framer);
    mesh_buf_cleanup(&x.scratch);
    mesh_buf_cleanup(&x.body);
    return rc;
}
