/*
 * fuzz_annotations.c - the downward-API annotations parser and the
 * tpumesh.dev key validation never crash, leak or read out of bounds.
 */
#include <stdint.h>
#include <stddef.h>

#include "core/annotations.h"
#include "core/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    struct mesh_annotations a;
    if (mesh_annotations_parse((const char *)data, size, &a, &err) == 0) {
        struct mesh_annotations_config c;
        if (mesh_annotations_config(&a, &c, &err) == 0) {
            mesh_annotations_config_cleanup(&c);
        }
        (void)mesh_annotations_get(&a, "tpumesh.dev/tpu");
        mesh_annotations_cleanup(&a);
    }
    char *v = NULL;
    if (mesh_annotations_unquote((const char *)data, size, &v, &err) == 0) {
        mesh_free(v);
    }
    return 0;
}
