/*
 * test_tpu_api.c - Cloud TPU API node parsing and endpoint selection, and
 * the GCE metadata host selection (no network: the cases that need a server
 * are in tests/integration/test_init_resolve_api.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "initcontainer/gce_metadata.h"
#include "initcontainer/tpu_api.h"

static void test_parse_node(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int rc;
        const char *st, *health, *type;
        size_t n;
        const char *ip_last;
        int port_last;
        const char *msg;
    } rows[] = {
        {"{\"state\":\"READY\",\"health\":\"HEALTHY\",\"acceleratorType\":\"v3-8\","
         "\"networkEndpoints\":[{\"ipAddress\":\"10.0.0.1\",\"port\":8470},"
         "{\"ipAddress\":\"10.0.0.2\",\"port\":8471}]}",
         0, "READY", "HEALTHY", "v3-8", 2, "10.0.0.2", 8471, NULL},
        /* port as a string, missing port = 8470 */
        {"{\"state\":\"READY\",\"networkEndpoints\":[{\"ipAddress\":\"10.0.0.1\",\"port\":\"9000\"}"
         ","
         "{\"ipAddress\":\"10.0.0.3\"}]}",
         0, "READY", "", "", 2, "10.0.0.3", 8470, NULL},
        /* deprecated top-level ipAddress/port */
        {"{\"state\":\"READY\",\"ipAddress\":\"10.1.1.1\",\"port\":\"8470\"}", 0, "READY", "", "",
         1, "10.1.1.1", 8470, NULL},
        {"{\"state\":\"CREATING\"}", 0, "CREATING", "", "", 0, NULL, 0, NULL},
        {"{}", 0, "", "", "", 0, NULL, 0, NULL},
        {"[]", -MESH_E_PARSE, NULL, NULL, NULL, 0, NULL, 0, "not a JSON object"},
        {"{\"state\":", -MESH_E_PARSE, NULL, NULL, NULL, 0, NULL, 0, "not a JSON object"},
        {"{\"networkEndpoints\":{}}", -MESH_E_PARSE, NULL, NULL, NULL, 0, NULL, 0, "not an array"},
        {"{\"networkEndpoints\":[{\"ipAddress\":\"a b\"}]}", -MESH_E_PARSE, NULL, NULL, NULL, 0,
         NULL, 0, "networkEndpoints[0].ipAddress"},
        {"{\"networkEndpoints\":[{\"ipAddress\":\"10.0.0.1\",\"port\":0}]}", -MESH_E_PARSE, NULL,
         NULL, NULL, 0, NULL, 0, "networkEndpoints[0].port"},
        {"{\"networkEndpoints\":[7]}", -MESH_E_PARSE, NULL, NULL, NULL, 0, NULL, 0,
         "networkEndpoints[0].ipAddress"},
        {"{\"ipAddress\":\"10.0.0.1\",\"port\":\"x\"}", -MESH_E_PARSE, NULL, NULL, NULL, 0, NULL, 0,
         "top-level"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_tpu_api_node node;
        struct mesh_err err = {0};
        int rc = mesh_tpu_api_parse_node(rows[i].json, strlen(rows[i].json), &node, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc < 0) {
            if (strstr(err.msg, rows[i].msg) == NULL) {
                fail_msg("row %zu: '%s' lacks '%s'", i, err.msg, rows[i].msg);
            }
            continue;
        }
        assert_string_equal(node.state, rows[i].st);
        assert_string_equal(node.health, rows[i].health);
        assert_string_equal(node.accelerator_type, rows[i].type);
        assert_int_equal(node.nendpoints, rows[i].n);
        if (rows[i].n > 0) {
            assert_string_equal(node.endpoints[rows[i].n - 1].ip, rows[i].ip_last);
            assert_int_equal(node.endpoints[rows[i].n - 1].port, rows[i].port_last);
        }
        mesh_tpu_api_node_cleanup(&node);
    }
}

static void test_endpoint_choice(void **state)
{
    (void)state;
    static const struct {
        const char *flag, *disco;
        int rc;
        const char *want;
    } rows[] = {
        {NULL, NULL, 0, "https://tpu.googleapis.com"},
        {"", "", 0, "https://tpu.googleapis.com"},
        {"http://127.0.0.1:8080/", NULL, 0, "http://127.0.0.1:8080"},
        {"https://tpu.example", "http://x/{api}/{apiVersion}", 0, "https://tpu.example"},
        {"ftp://x", NULL, -MESH_E_CONFIG, NULL},
        {NULL, "http://x/discovery", -MESH_E_CONFIG, NULL},
        {NULL, "file:///{api}/{apiVersion}", -MESH_E_CONFIG, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *out = NULL;
        struct mesh_err err = {0};
        int rc = mesh_tpu_api_endpoint(rows[i].flag, rows[i].disco, &out, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
        if (rc == 0) {
            assert_string_equal(out, rows[i].want);
            mesh_free(out);
        }
    }
}

static void test_metadata_host(void **state)
{
    (void)state;
    static const struct {
        const char *flag, *host_env, *ip_env;
        int rc;
        const char *want;
    } rows[] = {
        {NULL, NULL, NULL, 0, "http://metadata.google.internal/computeMetadata/v1/"},
        {NULL, NULL, "169.254.169.254", 0, "http://169.254.169.254/computeMetadata/v1/"},
        {NULL, "md.local:8080", "169.254.169.254", 0, "http://md.local:8080/computeMetadata/v1/"},
        {"127.0.0.1:1234", "md.local", NULL, 0, "http://127.0.0.1:1234/computeMetadata/v1/"},
        {"[::1]:80", NULL, NULL, 0, "http://[::1]:80/computeMetadata/v1/"},
        {"a/b", NULL, NULL, -MESH_E_CONFIG, NULL},
        {NULL, "x y", NULL, -MESH_E_CONFIG, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].host_env) {
            setenv("GCE_METADATA_HOST", rows[i].host_env, 1);
        } else {
            unsetenv("GCE_METADATA_HOST");
        }
        if (rows[i].ip_env) {
            setenv("GCE_METADATA_IP", rows[i].ip_env, 1);
        } else {
            unsetenv("GCE_METADATA_IP");
        }
        struct mesh_gce_metadata md = {0};
        struct mesh_err err = {0};
        int rc = mesh_gce_metadata_init(&md, rows[i].flag, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
        if (rc == 0) {
            assert_string_equal(md.base, rows[i].want);
            mesh_gce_metadata_cleanup(&md);
        }
    }
    unsetenv("GCE_METADATA_HOST");
    unsetenv("GCE_METADATA_IP");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_node),
        cmocka_unit_test(test_endpoint_choice),
        cmocka_unit_test(test_metadata_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
