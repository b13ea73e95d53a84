/*
 * test_base64.c - core/base64: RFC 4648 §10's test vectors both ways, the
 * decoder's leniency (no padding, whitespace, URL-safe alphabet) and its
 * refusals, and a round trip over every byte value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/base64.h"
#include "core/mem.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_encode_vectors(void **state)
{
    (void)state;
    static const char *const rows[][2] = {
        {"", ""},
        {"f", "Zg=="},
        {"fo", "Zm8="},
        {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        size_t n = 99;
        char *b = mesh_base64_encode(rows[i][0], strlen(rows[i][0]), &n);
        assert_string_equal(b, rows[i][1]);
        assert_int_equal(n, strlen(rows[i][1]));
        mesh_free(b);
    }
    /* High bytes use the whole alphabet, '+' and '/' included. */
    char *b = mesh_base64_encode("\xfb\xff\xbf", 3, NULL);
    assert_string_equal(b, "+/+/");
    mesh_free(b);
}

static void test_decode(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *want;
    } rows[] = {
        {"", 0, ""},
        {"Zg==", 0, "f"},
        {"Zm8=", 0, "fo"},
        {"Zm9v", 0, "foo"},
        {"Zm9vYg", 0, "foob"},
        {"Zm9v\nYmFy\n", 0, "foobar"},
        {"Zm9v YmE=", 0, "fooba"},
        {"-_-_", 0, "\xfb\xff\xbf"},
        {"Zm9v!", -MESH_E_PARSE, NULL},
        {"Zg==Zg", -MESH_E_PARSE, NULL},
        {"Z", -MESH_E_PARSE, NULL},
        {"Zg===", -MESH_E_PARSE, NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        unsigned char *out = NULL;
        size_t n = 0;
        struct mesh_err err;
        int rc = mesh_base64_decode(rows[i].in, strlen(rows[i].in), &out, &n, &err);
        assert_int_equal(rc, rows[i].rc);
        if (rc == 0) {
            assert_int_equal(n, strlen(rows[i].want));
            assert_memory_equal(out, rows[i].want, n);
            mesh_free(out);
        } else {
            assert_null(out);
            assert_non_null(strstr(err.msg, "not valid base64"));
        }
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    unsigned char all[256];
    for (size_t i = 0; i < sizeof(all); i++) {
        all[i] = (unsigned char)i;
    }
    for (size_t len = 0; len <= sizeof(all); len += 37) {
        char *b = mesh_base64_encode(all, len, NULL);
        unsigned char *back = NULL;
        size_t n = 0;
        assert_int_equal(mesh_base64_decode(b, strlen(b), &back, &n, NULL), 0);
        assert_int_equal(n, len);
        assert_memory_equal(back, all, len);
        mesh_free(back);
        mesh_free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_vectors),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
