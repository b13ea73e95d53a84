/*
 * test_annotations.c - the downward-API annotations file parser (Go %q
 * values) and the tpumesh.dev keys.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core/annotations.h"
#include "core/mem.h"

static void test_unquote(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *want;
    } rows[] = {
        {"\"\"", 0, ""},
        {"\"v4-32\"", 0, "v4-32"},
        {"\"a\\\"b\\\\c\"", 0, "a\"b\\c"},
        {"\"l1\\nl2\\tx\\r\\a\\b\\f\\v\"", 0, "l1\nl2\tx\r\a\b\f\v"},
        {"\"\\x41\\x7f\"", 0, "A\x7f"},
        {"\"\\101\\060\"", 0, "A0"},
        {"\"\\u00e9\\u20ac\"", 0, "\xc3\xa9\xe2\x82\xac"},
        {"\"\\U0001F600\"", 0, "\xf0\x9f\x98\x80"},
        {"\"caf\xc3\xa9\"", 0, "caf\xc3\xa9"},
        {"\"{\\\"a\\\":1}\"", 0, "{\"a\":1}"},
        {"noquotes", -MESH_E_PARSE, NULL},
        {"\"", -MESH_E_PARSE, NULL},
        {"\"abc", -MESH_E_PARSE, NULL},
        {"'abc'", -MESH_E_PARSE, NULL},
        {"\"a\"b\"", -MESH_E_PARSE, NULL},
        {"\"\\q\"", -MESH_E_PARSE, NULL},
        {"\"\\'\"", -MESH_E_PARSE, NULL},
        {"\"\\x4\"", -MESH_E_PARSE, NULL},
        {"\"\\xzz\"", -MESH_E_PARSE, NULL},
        {"\"\\x00\"", -MESH_E_PARSE, NULL},
        {"\"\\000\"", -MESH_E_PARSE, NULL},
        {"\"\\400\"", -MESH_E_PARSE, NULL},
        {"\"\\12\"", -MESH_E_PARSE, NULL},
        {"\"\\ud800\"", -MESH_E_PARSE, NULL},
        {"\"\\U00110000\"", -MESH_E_PARSE, NULL},
        {"\"abc\\\"", -MESH_E_PARSE, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *out = NULL;
        struct mesh_err err = {0};
        int rc = mesh_annotations_unquote(rows[i].in, strlen(rows[i].in), &out, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu (%s): rc %d want %d (%s)", i, rows[i].in, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            assert_string_equal(out, rows[i].want);
            mesh_free(out);
        } else {
            assert_true(err.msg[0] != '\0');
        }
    }
}

static void test_parse_file(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        size_t n;
        const char *key, *want; /* one key to look up */
        const char *msg;        /* substring of the error */
    } rows[] = {
        {"", 0, 0, "a", NULL, NULL},
        {"a=\"1\"", 0, 1, "a", "1", NULL},
        {"a=\"1\"\nb=\"2\"", 0, 2, "b", "2", NULL},
        {"a=\"1\"\nb=\"2\"\n", 0, 2, "b", "2", NULL},
        {"a=\"1\"\r\n\nb=\"x=y\"\r\n", 0, 2, "b", "x=y", NULL},
        {"kubernetes.io/config.seen=\"2026-01-01T00:00:00Z\"\ntpumesh.dev/tpu=\"local\"", 0, 2,
         "tpumesh.dev/tpu", "local", NULL},
        {"a=\"1\"\na=\"2\"", -MESH_E_PARSE, 0, NULL, NULL, "duplicate key 'a'"},
        {"a=1", -MESH_E_PARSE, 0, NULL, NULL, "line 1"},
        {"a=\"1\"\nnoequals", -MESH_E_PARSE, 0, NULL, NULL, "line 2 has no '='"},
        {"=\"1\"", -MESH_E_PARSE, 0, NULL, NULL, "not an annotation key"},
        {"a b=\"1\"", -MESH_E_PARSE, 0, NULL, NULL, "not an annotation key"},
        {"a/b/c=\"1\"", -MESH_E_PARSE, 0, NULL, NULL, "not an annotation key"},
        {"a=\"1\" ", -MESH_E_PARSE, 0, NULL, NULL, "double-quoted"},
        {"a=\"x\\z\"", -MESH_E_PARSE, 0, NULL, NULL, "unknown escape"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_annotations a;
        struct mesh_err err = {0};
        int rc = mesh_annotations_parse(rows[i].in, strlen(rows[i].in), &a, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(a.n, rows[i].n);
            const char *v = mesh_annotations_get(&a, rows[i].key);
            if (rows[i].want == NULL) {
                assert_null(v);
            } else {
                assert_non_null(v);
                assert_string_equal(v, rows[i].want);
            }
            mesh_annotations_cleanup(&a);
        } else if (strstr(err.msg, rows[i].msg) == NULL) {
            fail_msg("row %zu: message '%s' lacks '%s'", i, err.msg, rows[i].msg);
        }
    }
}

static void test_limits(void **state)
{
    (void)state;
    size_t big = MESH_ANNOTATIONS_MAX_INPUT + 1;
    char *buf = mesh_calloc(1, big);
    memset(buf, 'a', big);
    struct mesh_annotations a;
    struct mesh_err err = {0};
    assert_int_equal(mesh_annotations_parse(buf, big, &a, &err), -MESH_E_TOOBIG);
    /* Too many lines. */
    size_t n = 0;
    for (int i = 0; i <= MESH_ANNOTATIONS_MAX_ITEMS; i++) {
        n += (size_t)snprintf(buf + n, big - n, "k%d=\"v\"\n", i);
    }
    assert_int_equal(mesh_annotations_parse(buf, n, &a, &err), -MESH_E_TOOBIG);
    /* NUL inside a line is not a quote. */
    static const char nul[] = "a=\"x\0y\"";
    assert_int_equal(mesh_annotations_parse(nul, sizeof(nul) - 1, &a, &err), -MESH_E_PARSE);
    mesh_free(buf);
}

static void test_config(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int rc;
        const char *msg; /* error substring, or a field check below */
    } rows[] = {
        {"tpumesh.dev/tpu=\"local\"\ntpumesh.dev/zone=\"us-central2-b\"\n"
         "tpumesh.dev/project=\"my-proj-1\"\ntpumesh.dev/job-name=\"trainer\"\n"
         "tpumesh.dev/port=\"10001\"\ntpumesh.dev/address-mode=\"ip\"\n"
         "tpumesh.dev/expected-workers=\"4\"\ntpumesh.dev/timeout=\"30\"\n"
         "tpumesh.dev/inject=\"true\"\ntf-version.cloud-tpus.google.com=\"2.12.0\"\n"
         "tpumesh.dev/megascale-port=\"8081\"\n"
         "jobset.sigs.k8s.io/coordinator=\"js-d-0-0.js\"\n"
         "other.io/x=\"anything at all\"",
         0, NULL},
        {"tpumesh.dev/bogus=\"1\"", -MESH_E_CONFIG, "unknown annotation tpumesh.dev/bogus"},
        {"tpumesh.dev/port=\"0\"", -MESH_E_CONFIG,
         "tpumesh.dev/port=\"0\" is not an integer in 1..65535"},
        {"tpumesh.dev/port=\"10k\"", -MESH_E_CONFIG, "tpumesh.dev/port"},
        {"tpumesh.dev/address-mode=\"DNS\"", -MESH_E_CONFIG, "accepted values auto, dns, ip"},
        {"tpumesh.dev/expected-workers=\"-1\"", -MESH_E_CONFIG, "expected-workers"},
        {"tpumesh.dev/timeout=\"10m\"", -MESH_E_CONFIG, "timeout"},
        {"tpumesh.dev/tpu=\"\"", -MESH_E_CONFIG, "tpumesh.dev/tpu"},
        {"tpumesh.dev/tpu=\"a b\"", -MESH_E_CONFIG, "without spaces"},
        {"tpumesh.dev/zone=\"US\"", -MESH_E_CONFIG, "not a zone"},
        {"tpumesh.dev/project=\"a/b\"", -MESH_E_CONFIG, "not a project"},
        {"tpumesh.dev/job-name=\"1x\"", -MESH_E_CONFIG, "not a TensorFlow job name"},
        {"tpumesh.dev/job-name=\"tpu_worker\"", -MESH_E_CONFIG, "reserved"},
        {"tf-version.cloud-tpus.google.com=\"\"", -MESH_E_CONFIG, "TensorFlow version"},
        {"tpumesh.dev/megascale-port=\"65536\"", -MESH_E_CONFIG,
         "tpumesh.dev/megascale-port=\"65536\" is not an integer in 1..65535"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_annotations a;
        struct mesh_annotations_config c;
        struct mesh_err err = {0};
        assert_int_equal(mesh_annotations_parse(rows[i].file, strlen(rows[i].file), &a, &err), 0);
        int rc = mesh_annotations_config(&a, &c, &err);
        mesh_annotations_cleanup(&a);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc < 0) {
            if (strstr(err.msg, rows[i].msg) == NULL) {
                fail_msg("row %zu: message '%s' lacks '%s'", i, err.msg, rows[i].msg);
            }
            continue;
        }
        assert_string_equal(c.tpu, "local");
        assert_string_equal(c.zone, "us-central2-b");
        assert_string_equal(c.project, "my-proj-1");
        assert_string_equal(c.job_name, "trainer");
        assert_string_equal(c.tf_version, "2.12.0");
        assert_int_equal(c.port, 10001);
        assert_true(c.has_address_mode);
        assert_int_equal(c.address_mode, MESH_ADDR_IP);
        assert_int_equal(c.expected_workers, 4);
        assert_int_equal(c.timeout_s, 30);
        assert_int_equal(c.megascale_port, 8081);
        mesh_annotations_config_cleanup(&c);
    }
}

/* The list walk both the annotation check and the injector use: items in order, spaces around
 * them trimmed, empty items reported as empty, and nothing after the last one. */
static void test_list_next(void **state)
{
    (void)state;
    static const struct {
        const char *list;
        const char *items[5];
    } rows[] = {
        {"a", {"a"}},
        {" a , bb,c ", {"a", "bb", "c"}},
        {"", {""}},
        {"a,,b,", {"a", "", "b", ""}},
        {"  ,x y", {"", "x y"}},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *cursor = rows[i].list;
        const char *item;
        size_t n;
        size_t k = 0;
        while (mesh_annotations_list_next(&cursor, &item, &n)) {
            assert_non_null(rows[i].items[k]);
            assert_int_equal(n, strlen(rows[i].items[k]));
            assert_memory_equal(item, rows[i].items[k], n);
            k++;
        }
        assert_null(rows[i].items[k]);
        assert_false(mesh_annotations_list_next(&cursor, &item, &n));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unquote),   cmocka_unit_test(test_parse_file),
        cmocka_unit_test(test_limits),    cmocka_unit_test(test_config),
        cmocka_unit_test(test_list_next),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
