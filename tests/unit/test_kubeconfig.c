/*
 * test_kubeconfig.c - kubeconfig resolution (contexts, clusters, users,
 * *-data decoding, relative paths, exec plugins), its error messages
 * (file, key, what to do), ExecCredential replies and RFC 3339.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mem.h"
#include "io/kubeconfig.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==" = "-----BEGIN CERTIFICATE-----\n" */
#define PEM_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
#define PEM_TXT "-----BEGIN CERTIFICATE-----\n"

static const char *BASE = "apiVersion: v1\n"
                          "kind: Config\n"
                          "current-context: ctx\n"
                          "clusters:\n"
                          "- name: c1\n"
                          "  cluster:\n"
                          "    server: https://10.0.0.1:6443\n"
                          "    certificate-authority-data: " PEM_B64 "\n"
                          "    tls-server-name: kubernetes\n"
                          "- name: c2\n"
                          "  cluster:\n"
                          "    server: http://127.0.0.1:8080\n"
                          "    certificate-authority: certs/ca.pem\n"
                          "    insecure-skip-tls-verify: true\n"
                          "users:\n"
                          "- name: u1\n"
                          "  user:\n"
                          "    token: abc.def\n"
                          "- name: u2\n"
                          "  user:\n"
                          "    tokenFile: tok\n"
                          "    client-certificate: /abs/cert.pem\n"
                          "    client-key-data: " PEM_B64 "\n"
                          "- name: gke\n"
                          "  user:\n"
                          "    exec:\n"
                          "      apiVersion: client.authentication.k8s.io/v1\n"
                          "      command: gke-gcloud-auth-plugin\n"
                          "      args: [\"--a\", \"b c\"]\n"
                          "      env: [{name: FOO, value: bar}, {name: E}]\n"
                          "      provideClusterInfo: true\n"
                          "      interactiveMode: Never\n"
                          "contexts:\n"
                          "- name: ctx\n"
                          "  context: {cluster: c1, user: u1, namespace: ml}\n"
                          "- name: two\n"
                          "  context: {cluster: c2, user: u2}\n"
                          "- name: g\n"
                          "  context: {cluster: c1, user: gke}\n"
                          "- name: nouser\n"
                          "  context: {cluster: c2}\n"
                          "- name: badcluster\n"
                          "  context: {cluster: zz, user: u1}\n"
                          "- name: baduser\n"
                          "  context: {cluster: c1, user: zz}\n";

static void test_resolve_contexts(void **state)
{
    (void)state;
    static const struct {
        const char *context;
        const char *server, *ns, *token, *token_file, *ca_file, *cert_file;
        bool ca_data, key_data, insecure, exec;
    } rows[] = {
        {NULL, "https://10.0.0.1:6443", "ml", "abc.def", NULL, NULL, NULL, true, false, false,
         false},
        {"two", "http://127.0.0.1:8080", NULL, NULL, "/etc/kube/tok", "/etc/kube/certs/ca.pem",
         "/abs/cert.pem", false, true, true, false},
        {"g", "https://10.0.0.1:6443", NULL, NULL, NULL, NULL, NULL, true, false, false, true},
        {"nouser", "http://127.0.0.1:8080", NULL, NULL, NULL, "/etc/kube/certs/ca.pem", NULL, false,
         false, true, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_kubeconfig kc;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_kubeconfig_parse(BASE, strlen(BASE), "/etc/kube/config", rows[i].context, &kc,
                                       &err);
        assert_int_equal(rc, 0);
        assert_string_equal(kc.server, rows[i].server);
#define EQ_OR_NULL(got, want)                                                                      \
    do {                                                                                           \
        if ((want) == NULL) {                                                                      \
            assert_null(got);                                                                      \
        } else {                                                                                   \
            assert_string_equal((got), (want));                                                    \
        }                                                                                          \
    } while (0)
        EQ_OR_NULL(kc.ns, rows[i].ns);
        EQ_OR_NULL(kc.token, rows[i].token);
        EQ_OR_NULL(kc.token_file, rows[i].token_file);
        EQ_OR_NULL(kc.ca_file, rows[i].ca_file);
        EQ_OR_NULL(kc.client_cert_file, rows[i].cert_file);
        assert_int_equal(kc.ca_data != NULL, rows[i].ca_data);
        if (kc.ca_data != NULL) {
            assert_int_equal(kc.ca_data_len, strlen(PEM_TXT));
            assert_memory_equal(kc.ca_data, PEM_TXT, strlen(PEM_TXT));
        }
        assert_int_equal(kc.client_key_data != NULL, rows[i].key_data);
        assert_int_equal(kc.insecure_skip_tls_verify, rows[i].insecure);
        assert_int_equal(kc.exec != NULL, rows[i].exec);
        mesh_kubeconfig_cleanup(&kc);
    }
}

static void test_exec_fields(void **state)
{
    (void)state;
    struct mesh_kubeconfig kc;
    assert_int_equal(mesh_kubeconfig_parse(BASE, strlen(BASE), "/k/config", "g", &kc, NULL), 0);
    assert_non_null(kc.exec);
    assert_string_equal(kc.exec->command, "gke-gcloud-auth-plugin");
    assert_int_equal(kc.exec->nargs, 2);
    assert_string_equal(kc.exec->args[1], "b c");
    assert_int_equal(kc.exec->nenv, 2);
    assert_string_equal(kc.exec->env_names[0], "FOO");
    assert_string_equal(kc.exec->env_values[0], "bar");
    assert_string_equal(kc.exec->env_values[1], "");
    assert_true(kc.exec->provide_cluster_info);
    assert_string_equal(kc.context, "g");
    assert_string_equal(kc.user_name, "gke");
    mesh_kubeconfig_cleanup(&kc);
}

/* Every error names the file and the key, and says what to do. */
static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *yaml;
        const char *context;
        const char *want; /* substring of the message */
    } rows[] = {
        {"", NULL, "not a kubeconfig"},
        {"a: [1, 2\n", NULL, "not valid YAML"},
        {"- 1\n- 2\n", NULL, "not a kubeconfig"},
        {"clusters: []\n", NULL, "current-context: not set; run `kubectl config use-context"},
        {"current-context: x\n", NULL, "contexts: no entry named \"x\" (the list is missing)"},
        {"current-context: x\ncontexts: 5\n", NULL, "contexts: must be a list"},
        {"current-context: x\ncontexts:\n- name: x\n", NULL,
         "contexts[x].context: missing or not a mapping"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {user: u}\n", NULL,
         "names no cluster"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- name: "
         "c\n  cluster: {}\n",
         NULL, "clusters[c].cluster.server: missing; set the API server URL"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- name: "
         "c\n  cluster: {server: [1]}\n",
         NULL, "clusters[c].cluster.server: must be a string"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- name: "
         "c\n  cluster: {server: s, insecure-skip-tls-verify: maybe}\n",
         NULL, "insecure-skip-tls-verify: must be true or false"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- name: "
         "c\n  cluster: {server: s, certificate-authority-data: \"!!!\"}\n",
         NULL, "certificate-authority-data: not valid base64 (bad character at byte 0); it must"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {auth-provider: {name: "
         "gcp}}\n",
         NULL, "users[u].user: auth-provider plugins are not supported"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {exec: {apiVersion: "
         "client.authentication.k8s.io/v1alpha1, command: x}}\n",
         NULL, "users[u].user.exec: apiVersion \"client.authentication.k8s.io/v1alpha1\" is not"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {exec: {apiVersion: "
         "client.authentication.k8s.io/v1}}\n",
         NULL, "command is missing"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {client-key: k}\n",
         NULL, "needs both client-certificate(-data) and client-key(-data)"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {username: a, password: "
         "b}\n",
         NULL, "basic auth"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {exec: {apiVersion: "
         "client.authentication.k8s.io/v1, command: c, env: [{value: 1}]}}\n",
         NULL, "exec.env: entry 0 needs a name"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n"
         "- name: c\n  cluster: {server: s}\nusers:\n- name: u\n  user: {exec: {apiVersion: "
         "client.authentication.k8s.io/v1, command: c, interactiveMode: Always}}\n",
         NULL, "users[u].user.exec: interactiveMode Always needs a terminal"},
        {NULL, "badcluster", "clusters: no entry named \"zz\"; fix the context or add the entry"},
        {NULL, "baduser", "users: no entry named \"zz\""},
        {NULL, "nosuch", "contexts: no entry named \"nosuch\""},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_kubeconfig kc;
        struct mesh_err err;
        mesh_err_clear(&err);
        const char *y = rows[i].yaml ? rows[i].yaml : BASE;
        int rc = mesh_kubeconfig_parse(y, strlen(y), "/home/me/.kube/config", rows[i].context, &kc,
                                       &err);
        assert_int_equal(rc, -MESH_E_CONFIG);
        if (strstr(err.msg, rows[i].want) == NULL ||
            strstr(err.msg, "/home/me/.kube/config") == NULL) {
            fail_msg("row %zu: message \"%s\" lacks \"%s\"", i, err.msg, rows[i].want);
        }
        assert_null(kc.server);
    }
}

static void test_load_file(void **state)
{
    (void)state;
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/test-kubeconfig-%d", (int)getpid());
    assert_int_equal(mkdir(dir, 0700), 0);
    char *path = mesh_asprintf("%s/config", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(BASE, f);
    fclose(f);
    struct mesh_kubeconfig kc;
    struct mesh_err err;
    assert_int_equal(mesh_kubeconfig_load(path, "two", &kc, &err), 0);
    char *want = mesh_asprintf("%s/tok", dir);
    assert_string_equal(kc.token_file, want);
    mesh_free(want);
    mesh_kubeconfig_cleanup(&kc);

    /* $KUBECONFIG: first non-empty entry of a colon list. */
    char *list = mesh_asprintf("::%s:/other", path);
    setenv("KUBECONFIG", list, 1);
    char *def = mesh_kubeconfig_default_path();
    assert_string_equal(def, path);
    mesh_free(def);
    mesh_free(list);
    unsetenv("KUBECONFIG");

    unlink(path);
    assert_int_equal(mesh_kubeconfig_load(path, NULL, &kc, &err), -MESH_E_CONFIG);
    assert_non_null(strstr(err.msg, "cannot open it; pass --kubeconfig"));
    mesh_free(path);
    rmdir(dir);
}

static void test_exec_credential(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rc;
        const char *token;
        int64_t exp;
        const char *want;
    } rows[] = {
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"t0k\",\"expirationTimestamp\":\"2026-07-01T12:00:00Z\"}}",
         0, "t0k", 1782907200, NULL},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"x\"}}",
         0, "x", 0, NULL},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"clientCertificateData\":\"x\"}}",
         -MESH_E_AUTH, NULL, 0, "client-certificate credentials are not supported"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"\"}}",
         -MESH_E_AUTH, NULL, 0, "status.token is missing"},
        {"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}", -MESH_E_AUTH, NULL, 0, "not a"},
        {"oops", -MESH_E_AUTH, NULL, 0, "printed no ExecCredential JSON"},
        {"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"soon\"}}",
         -MESH_E_AUTH, NULL, 0, "expirationTimestamp"},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        char *tok = NULL;
        int64_t exp = -1;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_kubeconfig_parse_exec_credential(rows[i].json, strlen(rows[i].json), "plug",
                                                       &tok, &exp, &err);
        assert_int_equal(rc, rows[i].rc);
        if (rc == 0) {
            assert_string_equal(tok, rows[i].token);
            assert_int_equal(exp, rows[i].exp);
            mesh_free(tok);
        } else {
            assert_null(tok);
            if (strstr(err.msg, rows[i].want) == NULL) {
                fail_msg("row %zu: \"%s\" lacks \"%s\"", i, err.msg, rows[i].want);
            }
        }
    }
}

static void test_time(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int rc;
        int64_t want;
    } rows[] = {
        {"1970-01-01T00:00:00Z", 0, 0},
        {"2026-07-01T12:00:00Z", 0, 1782907200},
        {"2026-07-01T12:00:00.123456Z", 0, 1782907200},
        {"2026-07-01T14:00:00+02:00", 0, 1782907200},
        {"2026-07-01T10:30:00-01:30", 0, 1782907200},
        {"2000-02-29T00:00:00Z", 0, 951782400},
        {"2026-07-01 12:00:00Z", -MESH_E_PARSE, 0},
        {"2026-13-01T12:00:00Z", -MESH_E_PARSE, 0},
        {"2026-07-01T12:00:00", -MESH_E_PARSE, 0},
        {"2026-07-01T12:00:00+0200", -MESH_E_PARSE, 0},
        {"", -MESH_E_PARSE, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        int64_t v = -1;
        assert_int_equal(mesh_kubeconfig_parse_time(rows[i].s, &v, NULL), rows[i].rc);
        if (rows[i].rc == 0) {
            assert_int_equal(v, rows[i].want);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_contexts), cmocka_unit_test(test_exec_fields),
        cmocka_unit_test(test_errors),           cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_exec_credential),  cmocka_unit_test(test_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
