/*
 * grpc_util.h - what the gRPC server (grpc_server.c), the relay client
 * (relay_client.c) and the TensorFlow master client (tf_master.c) do alike
 * on the gRPC C core API: copy one received message (a grpc_byte_buffer,
 * possibly in several slices, possibly compressed) into one contiguous
 * allocation for protobuf-c, with a bound on its size; and write integer
 * channel arguments.
 */
#ifndef MESH_GRPC_UTIL_H
#define MESH_GRPC_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "core/err.h"

/* The message in bb (borrowed; left as it is) as max bytes at the most.
 * Returns an allocation owned by the caller (mesh_free; at least one byte
 * even for an empty message) with its length in *out_len, or NULL with err
 * set: -MESH_E_TOOBIG when the message is longer than max, -MESH_E_PARSE
 * when there is no message (bb NULL) or gRPC cannot read it (a compressed
 * message it cannot decompress).
 * *out_len is 0 on failure. */
uint8_t *mesh_grpc_util_copy_message(grpc_byte_buffer *bb, size_t max, size_t *out_len,
                                     struct mesh_err *err);

/* The integer channel argument key = value (key: one of gRPC's static
 * GRPC_ARG_* names, borrowed for the argument's life). */
grpc_arg mesh_grpc_util_int_arg(const char *key, int value);

#endif
