/*
 * fuzz_json.c - bounded JSON parsing and the typed getters never crash.
 */
#include <stdint.h>
#include <stddef.h>

#include "core/cleanup.h"
#include "core/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    mesh_autocjson cJSON *j = mesh_json_parse((const char *)data, size, 1 << 20, &err);
    if (j != NULL) {
        long long v;
        (void)mesh_json_str(mesh_json_path(j, "metadata"), "name");
        (void)mesh_json_int(j, "generation", 0, 1000, true, &v, &err);
    }
    long long v;
    (void)mesh_parse_ll((const char *)data, size, -5, 1000000, &v, &err);
    return 0;
}
