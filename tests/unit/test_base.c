/*
 * test_base.c - err, buf, json and logfmt (the foundation modules).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/err.h"
#include "core/json.h"
#include "core/logfmt.h"

static void test_err_set_prefix(void **state)
{
    (void)state;
    struct mesh_err err;
    mesh_err_clear(&err);
    assert_int_equal(mesh_err_set(&err, MESH_E_PARSE, 0, "bad %s", "thing"), -MESH_E_PARSE);
    assert_string_equal(err.msg, "bad thing");
    assert_int_equal(mesh_err_prefix(&err, "load %d", 7), -MESH_E_PARSE);
    assert_string_equal(err.msg, "load 7: bad thing");
    assert_int_equal(mesh_err_set(&err, MESH_E_IO, 2, "open 'x'"), -MESH_E_IO);
    assert_string_equal(err.msg, "open 'x': No such file or directory");
    assert_int_equal(mesh_err_set(NULL, MESH_E_IO, 0, "x"), -MESH_E_IO);
    assert_string_equal(mesh_strerror(-MESH_E_TOOBIG), "too big");
    assert_string_equal(mesh_strerror(999), "unknown error");
}

static void test_buf_limits(void **state)
{
    (void)state;
    struct mesh_buf b;
    mesh_buf_init(&b, 8);
    assert_int_equal(mesh_buf_puts(&b, "abcd", NULL), 0);
    assert_int_equal(mesh_buf_printf(&b, NULL, "%d", 1234), 0);
    assert_string_equal(mesh_buf_str(&b), "abcd1234");
    assert_int_equal(mesh_buf_puts(&b, "x", NULL), -MESH_E_TOOBIG);
    assert_string_equal(mesh_buf_str(&b), "abcd1234");
    size_t n = 0;
    char *s = mesh_buf_steal(&b, &n);
    assert_int_equal(n, 8);
    assert_string_equal(s, "abcd1234");
    mesh_free(s);
    assert_string_equal(mesh_buf_str(&b), "");
    mesh_buf_cleanup(&b);
}

static void test_parse_ll(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        long long min, max;
        int rc;
        long long want;
    } rows[] = {
        {"0", 0, 10, 0, 0},
        {"10", 0, 10, 0, 10},
        {"11", 0, 10, -MESH_E_RANGE, 0},
        {"-1", 0, 10, -MESH_E_RANGE, 0},
        {"-5", -10, 10, 0, -5},
        {"007", 0, 10, -MESH_E_INVAL, 0},
        {"", 0, 10, -MESH_E_INVAL, 0},
        {"1a", 0, 10, -MESH_E_INVAL, 0},
        {" 1", 0, 10, -MESH_E_INVAL, 0},
        {"+1", 0, 10, -MESH_E_INVAL, 0},
        {"99999999999999999999", 0, 10, -MESH_E_RANGE, 0},
        {"-", -10, 10, -MESH_E_INVAL, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        long long v = -77;
        int rc = mesh_parse_ll(rows[i].in, strlen(rows[i].in), rows[i].min, rows[i].max, &v, NULL);
        assert_int_equal(rc, rows[i].rc);
        if (rc == 0) {
            assert_int_equal(v, rows[i].want);
        } else {
            assert_int_equal(v, -77);
        }
    }
}

static void test_json_getters(void **state)
{
    (void)state;
    struct mesh_err err;
    const char *doc = "{\"a\":{\"b\":\"x\",\"n\":3,\"f\":1.5,\"s\":\"42\"}} ";
    mesh_autocjson cJSON *j = mesh_json_parse(doc, strlen(doc), 1024, &err);
    assert_non_null(j);
    assert_string_equal(mesh_json_str(mesh_json_path(j, "a"), "b"), "x");
    assert_null(mesh_json_str(mesh_json_path(j, "a"), "n"));
    assert_null(mesh_json_path(j, "a.b.c"));
    long long v = 0;
    assert_int_equal(mesh_json_int(mesh_json_path(j, "a"), "n", 0, 5, false, &v, &err), 0);
    assert_int_equal(v, 3);
    assert_int_equal(mesh_json_int(mesh_json_path(j, "a"), "f", 0, 5, false, &v, &err),
                     -MESH_E_INVAL);
    assert_int_equal(mesh_json_int(mesh_json_path(j, "a"), "s", 0, 50, true, &v, &err), 0);
    assert_int_equal(v, 42);
    assert_int_equal(mesh_json_int(mesh_json_path(j, "a"), "zz", 0, 50, true, &v, &err),
                     -MESH_E_NOTFOUND);
    assert_null(mesh_json_parse("{} x", 4, 1024, &err));
    assert_int_equal(err.code, MESH_E_PARSE);
    assert_null(mesh_json_parse("{\"a\":1}", 7, 3, &err));
    assert_int_equal(err.code, MESH_E_TOOBIG);
    /* No NUL terminator is needed: parse a prefix of a longer buffer. */
    cJSON *k = mesh_json_parse("[1]garbage", 3, 1024, &err);
    assert_non_null(k);
    cJSON_Delete(k);
}

/* \u0000 never truncates a string: the value becomes invalid (U+FFFD) instead. */
static void test_json_nul_escape(void **state)
{
    (void)state;
    static const struct {
        const char *doc;
        const char *want; /* value of "a" */
    } rows[] = {
        {"{\"a\":\"trainer-2\\u0000$(touch x)\"}", "trainer-2\xef\xbf\xbd"
                                                   "$(touch x)"},
        {"{\"a\":\"\\u0000\"}", "\xef\xbf\xbd"},
        {"{\"a\":\"x\\\\u0000\"}", "x\\u0000"}, /* escaped backslash: literal text */
        {"{\"a\":\"x\\\\\\u0000y\"}", "x\\\xef\xbf\xbd"
                                      "y"}, /* \\ then a real escape */
        {"{\"a\":\"plain\"}", "plain"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_err err;
        mesh_err_clear(&err);
        mesh_autocjson cJSON *j = mesh_json_parse(rows[i].doc, strlen(rows[i].doc), 1024, &err);
        assert_non_null(j);
        assert_string_equal(mesh_json_str(j, "a"), rows[i].want);
    }
}

/* Trees parsed into an arena: one spanning many chunks (an array of empty
 * arrays is ~20x its text), a second one in the same arena beside it, a
 * failed parse and trailing data (cJSON frees what it built: inside the
 * arena, nothing), then heap parses again (the hooks are the heap's outside
 * an arena parse: ASan and valgrind see a mismatch). */
static void test_json_arena(void **state)
{
    (void)state;
    struct mesh_buf doc;
    mesh_buf_init(&doc, 1 << 20);
    mesh_buf_puts(&doc, "[", NULL);
    for (int i = 0; i < 2000; i++) {
        mesh_buf_printf(&doc, NULL, "%s[\"w%d\"]", i ? "," : "", i);
    }
    mesh_buf_puts(&doc, "]", NULL);
    struct mesh_json_arena a = {0};
    struct mesh_err err;
    cJSON *big = mesh_json_parse_arena(doc.data, doc.len, doc.len, &a, &err);
    assert_non_null(big);
    assert_non_null(a.chunks);
    cJSON *small = mesh_json_parse_arena("{\"k\":\"v\"}", 9, 64, &a, &err);
    assert_non_null(small);
    assert_int_equal(cJSON_GetArraySize(big), 2000);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetArrayItem(big, 1999), 0)->valuestring, "w1999");
    assert_string_equal(mesh_json_str(small, "k"), "v");
    assert_null(mesh_json_parse_arena("[1,2,", 5, 64, &a, &err));
    assert_null(mesh_json_parse_arena("{\"k\":1} x", 10, 64, &a, &err));
    assert_int_equal(err.code, MESH_E_PARSE);
    mesh_json_arena_free(&a);
    assert_null(a.chunks);
    mesh_json_arena_free(&a); /* safe on an empty arena */
    cJSON *heap = mesh_json_parse(doc.data, doc.len, doc.len, &err);
    assert_non_null(heap);
    char *printed = cJSON_PrintUnformatted(heap);
    assert_string_equal(printed, mesh_buf_str(&doc));
    mesh_free(printed);
    cJSON_Delete(heap);
    mesh_buf_cleanup(&doc);
}

/* Text logs escape C0/C1 controls, bidi controls and bytes that are not UTF-8. */
static void test_logfmt_escapes(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        const char *want;
    } rows[] = {
        {"pod \xe2\x80\xae"
         "exe.txt",
         "pod \\u202eexe.txt"},
        {"a\xe2\x81\xa6"
         "b\xe2\x81\xa9"
         "c",
         "a\\u2066b\\u2069c"},
        {"rlm\xe2\x80\x8f", "rlm\\u200f"},
        {"c1\xc2\x9b[31m", "c1\\u009b[31m"},
        {"esc\x1b[2J", "esc\\x1b[2J"},
        {"bad\xff\xc3", "bad\\xff\\xc3"},
        {"ok \xc3\xa9\xe6\x97\xa5", "ok \xc3\xa9\xe6\x97\xa5"},
        {"sep\xe2\x80\xa8x", "sep\\u2028x"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_buf b;
        mesh_buf_init(&b, 4096);
        assert_int_equal(
            mesh_logfmt_line(&b, MESH_LOG_TEXT, 0, MESH_LOG_INFO, "t", rows[i].msg, NULL, 0), 0);
        assert_non_null(strstr(b.data, rows[i].want));
        mesh_buf_cleanup(&b);
    }
}

static void test_logfmt_lines(void **state)
{
    (void)state;
    struct mesh_buf b;
    mesh_buf_init(&b, 4096);
    /* 2026-01-02T03:04:05.678Z */
    int64_t t = 1767323045678LL;
    struct mesh_log_field f[] = {{"rv", "123"}, {"why", "a b"}};
    assert_int_equal(
        mesh_logfmt_line(&b, MESH_LOG_TEXT, t, MESH_LOG_INFO, "k8s", "watch restarted", f, 1), 0);
    assert_string_equal(mesh_buf_str(&b),
                        "2026-01-02T03:04:05.678Z INFO  k8s  watch restarted rv=123\n");
    mesh_buf_reset(&b);
    assert_int_equal(
        mesh_logfmt_line(&b, MESH_LOG_TEXT, t, MESH_LOG_WARN, "pub", "two\nlines", f, 2), 0);
    assert_string_equal(mesh_buf_str(&b),
                        "2026-01-02T03:04:05.678Z WARN  pub  two\\nlines rv=123 why=\"a b\"\n");
    mesh_buf_reset(&b);
    assert_int_equal(
        mesh_logfmt_line(&b, MESH_LOG_JSON, t, MESH_LOG_ERROR, "init", "say \"hi\"", f, 1), 0);
    assert_string_equal(
        mesh_buf_str(&b),
        "{\"time\":\"2026-01-02T03:04:05.678Z\",\"level\":\"error\",\"mod\":\"init\","
        "\"msg\":\"say \\\"hi\\\"\",\"rv\":\"123\"}\n");
    mesh_buf_cleanup(&b);
    enum mesh_log_level l;
    assert_int_equal(mesh_logfmt_parse_level("WARNING", &l), 0);
    assert_int_equal(l, MESH_LOG_WARN);
    assert_int_equal(mesh_logfmt_parse_level("loud", &l), -MESH_E_INVAL);
}

/* The pre-scan: every cap, fed whole and byte by byte (the verdict must not
 * depend on how the text is split). */
static void test_json_scan(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
        const char *msg;
    } rows[] = {
        {"{\"a\":[1,{\"b\":\"x\"}],\"c\":true}", 0, NULL}, /* 9 values, keys included */
        {"[1,2,3,4,5,6,7,8]", 0, NULL},                    /* 9 values */
        {"[1,2,3,4,5,6,7,8,9]", -MESH_E_TOOBIG, "more than 9 JSON values"},
        {"{\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5}", -MESH_E_TOOBIG, "more than 9"},
        {"[[[[1]]]]", 0, NULL},
        {"[[[[[1]]]]]", -MESH_E_TOOBIG, "JSON nested deeper than 4 levels"},
        {"[\"0123456789\"]", 0, NULL},
        {"[\"0123456789a\"]", -MESH_E_TOOBIG, "a JSON string longer than 10 bytes"},
        {"[\"\\\"\\\"\\\"\\\"\\\"]", 0, NULL}, /* escapes: ten bytes, no early end */
        {"[\"[[[[[[[[[[[\"]", -MESH_E_TOOBIG, "longer than 10"},
        {"[\"[[[[[[[[[\"]", 0, NULL}, /* brackets inside a string do not nest */
        {"[-1.5e+10,true,false,null]", 0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            struct mesh_json_scan sc;
            mesh_json_scan_init(&sc, 4, 9, 10);
            struct mesh_err err = {0};
            size_t n = strlen(rows[i].text);
            int rc = 0;
            if (bytewise) {
                for (size_t k = 0; k < n && rc == 0; k++) {
                    rc = mesh_json_scan_feed(&sc, rows[i].text + k, 1, &err);
                }
            } else {
                rc = mesh_json_scan_feed(&sc, rows[i].text, n, &err);
            }
            if (rc != rows[i].rc || (rows[i].msg != NULL && strstr(err.msg, rows[i].msg) == NULL)) {
                fail_msg("%s (bytewise %d): rc %d '%s'", rows[i].text, bytewise, rc, err.msg);
            }
            if (rc < 0) {
                /* A failed scan stays failed. */
                assert_int_equal(mesh_json_scan_feed(&sc, "1", 1, NULL), -MESH_E_TOOBIG);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_set_prefix), cmocka_unit_test(test_buf_limits),
        cmocka_unit_test(test_parse_ll),       cmocka_unit_test(test_json_getters),
        cmocka_unit_test(test_logfmt_lines),   cmocka_unit_test(test_json_nul_escape),
        cmocka_unit_test(test_logfmt_escapes), cmocka_unit_test(test_json_scan),
        cmocka_unit_test(test_json_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
