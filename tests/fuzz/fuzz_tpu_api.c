/*
 * fuzz_tpu_api.c - Cloud TPU API node replies (JSON) never crash the parser.
 */
#include <stdint.h>
#include <stddef.h>

#include "io/tpu_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    struct mesh_tpu_api_node node;
    if (mesh_tpu_api_parse_node((const char *)data, size, &node, &err) == 0) {
        mesh_tpu_api_node_cleanup(&node);
    }
    return 0;
}
