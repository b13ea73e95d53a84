/*
 * test_names.c - validation of names and addresses (names.h): host names,
 * DNS labels, Kubernetes names and label values, IP literals, TensorFlow job
 * names, each against a table and the DNS-name checker against a plain
 * byte-by-byte reading of RFC 1123 on generated strings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/model.h"
#include "core/names.h"

/* C-string forms, as the renderers hold their values. */
static bool hostname(const char *s)
{
    return mesh_names_is_dns_name(s, strnlen(s, MESH_HOST_MAX), false, false);
}

static bool pod_name(const char *s)
{
    return mesh_names_is_k8s_name(s, strnlen(s, MESH_POD_MAX));
}

static bool ip_str(const char *s, bool *out_v6)
{
    return mesh_names_is_ip(s, strnlen(s, MESH_IP_MAX), out_v6);
}

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
        if (mesh_names_is_host(rows[i].in, n) != rows[i].host ||
            mesh_names_is_ip(rows[i].in, n, NULL) != rows[i].ip) {
            fail_msg("row %zu '%s'", i, rows[i].in);
        }
    }
}

/* The straightforward reading of RFC 1123 (names.h), byte by byte: the
 * oracle the table-driven mesh_names_is_dns_name must agree with. */
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
        if (mesh_names_is_dns_name(rows[i].in, n, false, false) != rows[i].any ||
            mesh_names_is_dns_name(rows[i].in, n, true, false) != rows[i].lower ||
            mesh_names_is_dns_name(rows[i].in, n, false, true) != rows[i].host) {
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
            if (mesh_names_is_dns_name(buf, len, lo, num) != want) {
                fail_msg("round %d mode %d len %zu: '%.*s' should be %s", round, mode, len,
                         (int)len, buf, want ? "valid" : "invalid");
            }
            agree_true += want;
        }
    }
    /* The generator must reach both verdicts often, or the test proves little. */
    assert_true(agree_true > 20000);
    assert_true(agree_true < 700000);
    assert_false(mesh_names_is_dns_name(NULL, 3, false, false));
}

static void test_validators_table(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool host, ip, pod, job;
    } rows[] = {
        {"w-0.job.ns.svc.cluster.local", true, false, true, false},
        {"W-0.Job", true, false, false, false},
        {"10.0.0.1", true, true, true, false},
        {"::1", false, true, false, false},
        {"2001:db8::1", false, true, false, false},
        {"worker", true, false, true, true},
        {"worker_2", false, false, false, true},
        {"2worker", true, false, true, false},
        {"", false, false, false, false},
        {"a", true, false, true, true},
        {"a.", false, false, false, false},
        {".a", false, false, false, false},
        {"a-b-c", true, false, true, false},
        {"1.2.3", true, false, true, false},
        {"a b", false, false, false, false},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        print_message("row: \"%s\"\n", rows[r].s);
        assert_int_equal(hostname(rows[r].s), rows[r].host);
        assert_int_equal(ip_str(rows[r].s, NULL), rows[r].ip);
        assert_int_equal(pod_name(rows[r].s), rows[r].pod);
        assert_int_equal(mesh_names_is_job_name(rows[r].s), rows[r].job);
    }
    /* Length limits: 63-byte label ok, 64 not; 253 total ok, 254 not. */
    char name[300];
    memset(name, 'a', 63);
    name[63] = '\0';
    assert_true(hostname(name));
    memset(name, 'a', 64);
    name[64] = '\0';
    assert_false(hostname(name));
    for (int i = 0; i < 253; i++) {
        name[i] = i % 2 == 1 ? '.' : 'a';
    }
    name[253] = '\0';
    assert_true(hostname(name));
    name[253] = 'a';
    name[254] = '\0';
    assert_false(hostname(name));
    bool v6 = false;
    assert_true(ip_str("fd00::1", &v6));
    assert_true(v6);
    assert_true(ip_str("10.0.0.1", &v6));
    assert_false(v6);
}

static void test_dns_names(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool label, subdomain;
    } cases[] = {
        {"a", true, true},
        {"trainer-3", true, true},
        {"w-10.svc", false, true},
        {"-a", false, false},
        {"a-", false, false},
        {"A", false, false},
        {"a..b", false, false},
        {"a.", false, false},
        {"", false, false},
        {"a_b", false, false},
        {". dtensor.env", false, false},
        {"$(reboot)", false, false},
        {"0123456789012345678901234567890123456789012345678901234567890123", false, false},
        {"012345678901234567890123456789012345678901234567890123456789012", true, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *s = cases[i].s;
        assert_int_equal(mesh_names_is_dns_label(s, strlen(s)), cases[i].label);
        assert_int_equal(mesh_names_is_k8s_name(s, strlen(s)), cases[i].subdomain);
    }
}

static void test_label_values_and_ipv4(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool label_value, plain_v4;
    } rows[] = {
        {"v5litepod-16", true, false},
        {"Trainer_2.a", true, false},
        {"-a", false, false},
        {"a.", false, false},
        {"", false, false},
        {"a b", false, false},
        {"10.0.0.1", true, true},
        {"255.255.255.255", true, true},
        {"256.0.0.1", true, false},
        {"01.2.3.4", true, false},
        {"1.2.3", true, false},
        {"1.2.3.4.5", true, false},
        {"0123456789012345678901234567890123456789012345678901234567890123", false, false},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const char *s = rows[r].s;
        print_message("row: \"%s\"\n", s);
        assert_int_equal(mesh_names_is_label_value(s, strlen(s)), rows[r].label_value);
        assert_int_equal(mesh_names_is_plain_ipv4(s, strlen(s)), rows[r].plain_v4);
        if (rows[r].plain_v4) {
            assert_true(mesh_names_is_ip(s, strlen(s), NULL));
        }
    }
}

/* A NUL inside the measured range never passes, whatever precedes it. */
static void test_embedded_nul(void **state)
{
    (void)state;
    static const char v[] = "trainer-2\0x";
    size_t n = sizeof(v) - 1;
    assert_false(mesh_names_is_dns_name(v, n, false, false));
    assert_false(mesh_names_is_dns_label(v, n));
    assert_false(mesh_names_is_k8s_name(v, n));
    assert_false(mesh_names_is_label_value(v, n));
    assert_false(mesh_names_is_host(v, n));
    static const char ip[] = "10.0.0.1\0";
    assert_false(mesh_names_is_ip(ip, sizeof(ip) - 1, NULL));
    assert_false(mesh_names_is_plain_ipv4(ip, sizeof(ip) - 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_host),
        cmocka_unit_test(test_dns_name_differential),
        cmocka_unit_test(test_validators_table),
        cmocka_unit_test(test_dns_names),
        cmocka_unit_test(test_label_values_and_ipv4),
        cmocka_unit_test(test_embedded_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
