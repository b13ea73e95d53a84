/*
 * fuzz_topoproto.c - mesh_topo_parse (TopologyProto bytes from a TPU or a
 * file) never crashes, and what it accepts satisfies TensorFlow's Topology
 * rules; mesh_topo_check_slice on it never crashes either.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/accel.h"
#include "core/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_topo_info info;
    struct mesh_err err;
    if (mesh_topo_parse(data, size, &info, &err) != 0) {
        return 0;
    }
    if (info.n_coords != (size_t)info.num_tasks * (size_t)info.devices_per_task * 4) {
        abort();
    }
    for (size_t i = 0; i < info.n_coords; i++) {
        if (info.coords[i] < 0 || info.coords[i] >= info.mesh_shape[i % 4]) {
            abort();
        }
    }
    static const char *const types[] = {"v3-8", "v4-16", "v5litepod-16"};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        struct mesh_slice_spec in = {types[k], NULL, NULL, 0, 0};
        struct mesh_slice s;
        if (mesh_slice_derive(&in, &s, &err) == 0) {
            (void)mesh_topo_check_slice(&info, &s, &err);
        }
    }
    mesh_topo_info_cleanup(&info);
    return 0;
}
