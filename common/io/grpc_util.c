/*
 * grpc_util.c - the gRPC C core helpers of grpc_util.h.
 */
#include "io/grpc_util.h"

#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "core/mem.h"

uint8_t *mesh_grpc_util_copy_message(grpc_byte_buffer *bb, size_t max, size_t *out_len,
                                     struct mesh_err *err)
{
    *out_len = 0;
    grpc_byte_buffer_reader r;
    if (bb == NULL || !grpc_byte_buffer_reader_init(&r, bb)) {
        mesh_err_set(err, MESH_E_PARSE, 0,
                     "no readable gRPC message (none, or one gRPC cannot decompress)");
        return NULL;
    }
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(all);
    if (n > max) {
        grpc_slice_unref(all);
        mesh_err_set(err, MESH_E_TOOBIG, 0,
                     "the gRPC message has %zu bytes, more than the %zu allowed", n, max);
        return NULL;
    }
    uint8_t *p = mesh_malloc(n > 0 ? n : 1);
    if (n > 0) {
        memcpy(p, GRPC_SLICE_START_PTR(all), n);
    }
    grpc_slice_unref(all);
    *out_len = n;
    return p;
}

grpc_arg mesh_grpc_util_int_arg(const char *key, int value)
{
    grpc_arg a;
    memset(&a, 0, sizeof(a));
    a.type = GRPC_ARG_INTEGER;
    a.key = (char *)key;
    a.value.integer = value;
    return a;
}
