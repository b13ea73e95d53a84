/*
 * test_tpuenv.c - TPU_WORKER_HOSTNAMES, bounds, gRPC
 * endpoint lists (TensorFlow's parsing), tpu-env and
 * worker-network-endpoints.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/mem.h"
#include "core/tpuenv.h"

static void test_hostnames(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        size_t n;
        const char *last_host, *last_ip, *msg;
    } rows[] = {
        {"localhost", 0, 1, "localhost", "", NULL},
        {"w-0.s,w-1.s,w-2.s,w-3.s", 0, 4, "w-3.s", "", NULL},
        {"10.0.0.1,10.0.0.2", 0, 2, "10.0.0.2", "10.0.0.2", NULL},
        {"", -MESH_E_CONFIG, 0, NULL, NULL, "entry 0 is empty"},
        {"a,,b", -MESH_E_CONFIG, 0, NULL, NULL, "entry 1 is empty"},
        {"a,b,", -MESH_E_CONFIG, 0, NULL, NULL, "entry 2 is empty"},
        {"a, b", -MESH_E_CONFIG, 0, NULL, NULL, "entry 1 ' b' is not a valid RFC 1123"},
        {"a,b_c", -MESH_E_CONFIG, 0, NULL, NULL, "entry 1 'b_c'"},
        {"a,b,c,d,e", -MESH_E_TOOBIG, 0, NULL, NULL, "more than 4"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_worker *w = NULL;
        size_t n = 0;
        struct mesh_err err = {0};
        int rc = mesh_tpuenv_parse_hostnames(rows[i].in, strlen(rows[i].in), 4, &w, &n, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc < 0) {
            if (strstr(err.msg, rows[i].msg) == NULL) {
                fail_msg("row %zu: '%s' lacks '%s'", i, err.msg, rows[i].msg);
            }
            continue;
        }
        assert_int_equal(n, rows[i].n);
        assert_int_equal(w[n - 1].index, (int)n - 1);
        assert_string_equal(w[n - 1].host, rows[i].last_host);
        assert_string_equal(w[n - 1].ip, rows[i].last_ip);
        mesh_free(w);
    }
}

static void test_bounds(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        int b[3];
    } rows[] = {
        {"2,2,1", 0, {2, 2, 1}},          {"1,1,4", 0, {1, 1, 4}},
        {"4096,1,1", 0, {4096, 1, 1}},    {"2,2", -MESH_E_CONFIG, {0}},
        {"2,2,1,1", -MESH_E_CONFIG, {0}}, {"0,1,1", -MESH_E_CONFIG, {0}},
        {"2, 2,1", -MESH_E_CONFIG, {0}},  {"2x2x1", -MESH_E_CONFIG, {0}},
        {"", -MESH_E_CONFIG, {0}},        {"2,,1", -MESH_E_CONFIG, {0}},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int b[3] = {-1, -1, -1};
        struct mesh_err err = {0};
        int rc =
            mesh_tpuenv_parse_bounds("TPU_HOST_BOUNDS", rows[i].in, strlen(rows[i].in), b, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu '%s': rc %d", i, rows[i].in, rc);
        }
        if (rc == 0) {
            assert_memory_equal(b, rows[i].b, sizeof(b));
        } else {
            assert_non_null(strstr(err.msg, "TPU_HOST_BOUNDS"));
        }
    }
}

static void test_endpoints(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        size_t n;
        const char *ip0;
        int port0;
        const char *ipl;
        int portl;
    } rows[] = {
        /* TPUClusterResolver's endpoint forms */
        {"grpc://10.120.27.5:8470", 0, 1, "10.120.27.5", 8470, "10.120.27.5", 8470},
        {"grpc://10.120.27.5:8470,grpc://10.120.27.6:8470,grpc://10.120.27.7:8471", 0, 3,
         "10.120.27.5", 8470, "10.120.27.7", 8471},
        /* default port, prefix optional per item (TF strips it per item) */
        {"grpc://10.0.0.1,10.0.0.2:9000", 0, 2, "10.0.0.1", 8470, "10.0.0.2", 9000},
        {"grpc://tpu-host.example:8470", 0, 1, "tpu-host.example", 8470, "tpu-host.example", 8470},
        {"grpc://10.0.0.1:0", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://10.0.0.1:65536", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://10.0.0.1:", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://:8470", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://fd00::1", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://10.0.0.1:8470, grpc://10.0.0.2:8470", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://10.0.0.1:8470,", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"", -MESH_E_CONFIG, 0, NULL, 0, NULL, 0},
        {"grpc://a,grpc://b,grpc://c,grpc://d,grpc://e", -MESH_E_TOOBIG, 0, NULL, 0, NULL, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_tpuenv_endpoint *eps = NULL;
        size_t n = 0;
        struct mesh_err err = {0};
        int rc = mesh_tpuenv_parse_endpoints(rows[i].in, strlen(rows[i].in), 4, &eps, &n, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu '%s': rc %d (%s)", i, rows[i].in, rc, err.msg);
        }
        if (rc < 0) {
            assert_true(err.msg[0] != '\0');
            continue;
        }
        assert_int_equal(n, rows[i].n);
        assert_string_equal(eps[0].ip, rows[i].ip0);
        assert_int_equal(eps[0].port, rows[i].port0);
        assert_string_equal(eps[n - 1].ip, rows[i].ipl);
        assert_int_equal(eps[n - 1].port, rows[i].portl);
        mesh_free(eps);
    }
    assert_true(mesh_tpuenv_is_grpc("grpc://x", 8));
    assert_false(mesh_tpuenv_is_grpc("grpctpu", 7));
    assert_false(mesh_tpuenv_is_grpc("grpc:/", 6));
}

static void test_tpu_env_doc(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *key, *want;
    } rows[] = {
        {"CHIPS_PER_HOST_BOUNDS: '2,2,1'\nHOST_BOUNDS: '1,1,2'\nWORKER_ID: '0'\n", 0, "HOST_BOUNDS",
         "1,1,2"},
        {"ACCELERATOR_TYPE: 'v4-16'", 0, "ACCELERATOR_TYPE", "v4-16"},
        {"# comment\n\nA: 'it''s'\r\n", 0, "A", "it's"},
        {"A: \"x\\\"y\\n\"", 0, "A", "x\"y\n"},
        {"A: bare value  ", 0, "A", "bare value"},
        {"A: ''", 0, "A", ""},
        {"A: '2,2,1'  # host block", 0, "A", "2,2,1"},
        {"A: v4-8 # type", 0, "A", "v4-8"},
        {"A: a#b", 0, "A", "a#b"},
        {"  MEGASCALE_NUM_SLICES: '2'", 0, "MEGASCALE_NUM_SLICES", "2"},
        /* A multi-slice TPU VM's tpu-env: the keys tpumesh-init reads when the
         * environment lacks them. */
        {"MEGASCALE_COORDINATOR_ADDRESS: 'js-slice-0-0.js:8080'\nMEGASCALE_NUM_SLICES: '2'\n"
         "MEGASCALE_PORT: '8080'\nMEGASCALE_SLICE_ID: '1'\n",
         0, "MEGASCALE_COORDINATOR_ADDRESS", "js-slice-0-0.js:8080"},
        {"MEGASCALE_NUM_SLICES: '2'\nMEGASCALE_PORT: '8081'\n", 0, "MEGASCALE_PORT", "8081"},
        {"A: 'x", -MESH_E_PARSE, NULL, NULL},
        {"A: \"x", -MESH_E_PARSE, NULL, NULL},
        {"A: 'x' y", -MESH_E_PARSE, NULL, NULL},
        {"A: 'x'# no blank", -MESH_E_PARSE, NULL, NULL},
        {"A 'x'", -MESH_E_PARSE, NULL, NULL},
        {"A:'x'", -MESH_E_PARSE, NULL, NULL},
        {"A-B: 'x'", -MESH_E_PARSE, NULL, NULL},
        {"A: '1'\nA: '2'", -MESH_E_PARSE, NULL, NULL},
        {"A: \"\\q\"", -MESH_E_PARSE, NULL, NULL},
        {": 'x'", -MESH_E_PARSE, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_annotations env = {0};
        struct mesh_err err = {0};
        int rc = mesh_tpuenv_parse(rows[i].in, strlen(rows[i].in), &env, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
        if (rc < 0) {
            assert_non_null(strstr(err.msg, "tpu-env"));
            assert_int_equal(env.n, 0);
            continue;
        }
        const char *v = mesh_annotations_get(&env, rows[i].key);
        assert_non_null(v);
        assert_string_equal(v, rows[i].want);
        assert_null(mesh_annotations_get(&env, "NOPE"));
        mesh_annotations_cleanup(&env);
    }
    static const char nul[] = "A: 'x\0'";
    struct mesh_annotations env = {0};
    assert_int_equal(mesh_tpuenv_parse(nul, sizeof(nul) - 1, &env, NULL), -MESH_E_PARSE);
}

static void test_worker_endpoints(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        size_t n;
        const char *last;
    } rows[] = {
        {"t1k-w-0:uid0:10.130.0.2,t1k-w-1:uid1:10.130.0.3", 0, 2, "10.130.0.3"},
        {"h:u:fd00::5", 0, 1, "fd00::5"},
        {"h:u", -MESH_E_PARSE, 0, NULL},
        {"h:u:notanip", -MESH_E_PARSE, 0, NULL},
        {"h:u:10.0.0.1,", -MESH_E_PARSE, 0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_worker *w = NULL;
        size_t n = 0;
        struct mesh_err err = {0};
        int rc =
            mesh_tpuenv_parse_worker_endpoints(rows[i].in, strlen(rows[i].in), 8, &w, &n, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(n, rows[i].n);
            assert_string_equal(w[n - 1].ip, rows[i].last);
            mesh_free(w);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostnames),        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_endpoints),        cmocka_unit_test(test_tpu_env_doc),
        cmocka_unit_test(test_worker_endpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
