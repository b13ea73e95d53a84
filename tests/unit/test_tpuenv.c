/*
 * test_tpuenv.c - host validation, TPU_WORKER_HOSTNAMES, bounds, gRPC
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

static void test_valid_host(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        bool host, ip;
    } rows[] = {
        {"localhost", true, false},
        {"job-0.svc", true, false},
        {"w-10.headless.ns.svc.cluster.local", true, false},
        {"10.0.0.1", true, true},
        {"fd00::1", true, true},
        {"::1", true, true},
        {"10.0.0", false, false},
        {"10.0.0.256", false, false},
        {"", false, false},
        {"-a", false, false},
        {"a-", false, false},
        {"a..b", false, false},
        {"a.b.", false, false},
        {".a", false, false},
        {"a_b", false, false},
        {"a b", false, false},
        {"[fd00::1]", false, false},
        {"0123456789012345678901234567890123456789012345678901234567890123", false, false},
        {"a01234567890123456789012345678901234567890123456789012345678901", true, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t n = strlen(rows[i].in);
        if (mesh_tpuenv_is_valid_host(rows[i].in, n) != rows[i].host ||
            mesh_tpuenv_is_ip(rows[i].in, n) != rows[i].ip) {
            fail_msg("row %zu '%s'", i, rows[i].in);
        }
    }
}

/* The straightforward reading of RFC 1123 (tpuenv.h), byte by byte: the
 * oracle the table-driven mesh_tpuenv_is_dns_name must agree with. */
static bool ref_dns_name(const char *s, size_t len, bool lower_only, bool reject_numeric)
{
    if (s == NULL || len == 0 || len > 253) {
        return false;
    }
    size_t label = 0;
    bool all_digits = true;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-') {
                return false;
            }
            label = 0;
            continue;
        }
        bool digit = c >= '0' && c <= '9', lower = c >= 'a' && c <= 'z';
        bool upper = c >= 'A' && c <= 'Z';
        if (!(digit || lower || upper || c == '-') || (lower_only && upper)) {
            return false;
        }
        if (c == '-' && label == 0) {
            return false;
        }
        all_digits = all_digits && digit;
        if (++label > 63) {
            return false;
        }
    }
    if (label == 0 || s[len - 1] == '-') {
        return false;
    }
    return !(reject_numeric && all_digits);
}

/* Fixed cases for each mode, then random strings over an alphabet that
 * makes every rule bite (dots, hyphens, upper case, digits, NUL, bytes
 * >= 0x80) with lengths around the 63 and 253 limits. */
static void test_dns_name_differential(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        bool any, lower, host; /* (false,false) (true,false) (false,true) */
    } rows[] = {
        {"a", true, true, true},
        {"Trainer-0", true, false, true},
        {"trainer-0.svc", true, true, true},
        {"10.0.0", true, true, false},
        {"123", true, true, false},
        {"1-2", true, true, true},
        {"a.-b", false, false, false},
        {"a-.b", false, false, false},
        {"a.b.", false, false, false},
        {"é", false, false, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t n = strlen(rows[i].in);
        if (mesh_tpuenv_is_dns_name(rows[i].in, n, false, false) != rows[i].any ||
            mesh_tpuenv_is_dns_name(rows[i].in, n, true, false) != rows[i].lower ||
            mesh_tpuenv_is_dns_name(rows[i].in, n, false, true) != rows[i].host) {
            fail_msg("row %zu '%s'", i, rows[i].in);
        }
    }
    static const char alpha[] = "aaaazzZZ0099--..\0\x80 _";
    static const size_t lens[] = {0,  1,  2,  3,   5,   8,   13,  40, 62,
                                  63, 64, 65, 127, 252, 253, 254, 300};
    char buf[320];
    uint64_t x = 0x2545F4914F6CDD1DULL;
    size_t agree_true = 0;
    for (int round = 0; round < 200000; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t len = lens[x % (sizeof(lens) / sizeof(lens[0]))];
        /* Mostly one byte class per string so that long valid names occur. */
        int dot_every = (int)((x >> 8) % 70);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (dot_every > 0 && i > 0 && i % (size_t)dot_every == 0) {
                buf[i] = '.';
            } else if ((x >> 20) % 64 == 0) {
                buf[i] = alpha[(x >> 32) % (sizeof(alpha) - 1)];
            } else {
                buf[i] = "abz09Q"[(x >> 40) % ((x >> 50) % 2 == 0 ? 5 : 6)];
            }
        }
        for (int mode = 0; mode < 4; mode++) {
            bool lo = (mode & 1) != 0, num = (mode & 2) != 0;
            bool want = ref_dns_name(buf, len, lo, num);
            if (mesh_tpuenv_is_dns_name(buf, len, lo, num) != want) {
                fail_msg("round %d mode %d len %zu: '%.*s' should be %s", round, mode, len,
                         (int)len, buf, want ? "valid" : "invalid");
            }
            agree_true += want;
        }
    }
    /* The generator must reach both verdicts often, or the test proves little. */
    assert_true(agree_true > 20000);
    assert_true(agree_true < 700000);
    assert_false(mesh_tpuenv_is_dns_name(NULL, 3, false, false));
}

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
        /* spec §2.5 examples */
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
        struct mesh_tpuenv env = {0};
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
        const char *v = mesh_tpuenv_get(&env, rows[i].key);
        assert_non_null(v);
        assert_string_equal(v, rows[i].want);
        assert_null(mesh_tpuenv_get(&env, "NOPE"));
        mesh_tpuenv_cleanup(&env);
    }
    static const char nul[] = "A: 'x\0'";
    struct mesh_tpuenv env = {0};
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
        cmocka_unit_test(test_valid_host),
        cmocka_unit_test(test_hostnames),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_tpu_env_doc),
        cmocka_unit_test(test_worker_endpoints),
        cmocka_unit_test(test_dns_name_differential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
