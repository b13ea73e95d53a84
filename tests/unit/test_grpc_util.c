/*
 * test_grpc_util.c - a gRPC message in one or several slices copied into
 * one allocation: the bytes and their order, the empty message, the size
 * bound (at and above it) and no message at all; integer channel arguments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "core/mem.h"
#include "io/grpc_util.h"

#define PIECES_MAX 4

/* A byte buffer of the given pieces, one slice each (owned by the caller). */
static grpc_byte_buffer *buffer_of(const char *const *pieces)
{
    grpc_slice slices[PIECES_MAX];
    size_t n = 0;
    while (n < PIECES_MAX && pieces[n] != NULL) {
        slices[n] = grpc_slice_from_copied_string(pieces[n]);
        n++;
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, n);
    for (size_t i = 0; i < n; i++) {
        grpc_slice_unref(slices[i]);
    }
    return bb;
}

static void test_copy(void **state)
{
    (void)state;
    static const struct {
        const char *pieces[PIECES_MAX + 1];
        size_t max;
        int code; /* 0: copied */
        const char *want;
    } rows[] = {
        {{"abc", NULL}, 16, 0, "abc"},
        {{"ab", "", "cd", "e", NULL}, 16, 0, "abcde"},
        {{NULL}, 16, 0, ""},
        {{NULL}, 0, 0, ""},
        {{"abcd", "ef", NULL}, 6, 0, "abcdef"},
        {{"abcd", "efg", NULL}, 6, MESH_E_TOOBIG, NULL},
        {{"x", NULL}, 0, MESH_E_TOOBIG, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        grpc_byte_buffer *bb = buffer_of(rows[i].pieces);
        struct mesh_err err = {0};
        size_t len = 99;
        size_t before = grpc_byte_buffer_length(bb);
        uint8_t *p = mesh_grpc_util_copy_message(bb, rows[i].max, &len, &err);
        if (rows[i].code == 0) {
            assert_non_null(p);
            assert_int_equal(err.code, 0);
            assert_int_equal(len, strlen(rows[i].want));
            assert_memory_equal(p, rows[i].want, len);
        } else {
            assert_null(p);
            assert_int_equal(err.code, rows[i].code);
            assert_int_equal(len, 0);
            assert_true(strlen(err.msg) > 0);
        }
        mesh_free(p);
        /* The buffer is borrowed: still whole after the copy. */
        assert_int_equal(grpc_byte_buffer_length(bb), before);
        grpc_byte_buffer_destroy(bb);
    }
}

static void test_no_message(void **state)
{
    (void)state;
    struct mesh_err err = {0};
    size_t len = 7;
    assert_null(mesh_grpc_util_copy_message(NULL, 16, &len, &err));
    assert_int_equal(err.code, MESH_E_PARSE);
    assert_int_equal(len, 0);
}

static void test_int_arg(void **state)
{
    (void)state;
    grpc_arg a = mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 4096);
    assert_int_equal(a.type, GRPC_ARG_INTEGER);
    assert_string_equal(a.key, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH);
    assert_int_equal(a.value.integer, 4096);
}

int main(void)
{
    grpc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_no_message),
        cmocka_unit_test(test_int_arg),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    grpc_shutdown();
    return rc;
}
