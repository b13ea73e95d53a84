/*
 * fuzz_tpuenv.c - every tpuenv parser (tpu-env documents, worker host lists,
 * bounds, gRPC endpoint lists, worker-network-endpoints) on the same bytes.
 */
#include <stdint.h>
#include <stddef.h>

#include "core/mem.h"
#include "core/names.h"
#include "core/tpuenv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct mesh_err err;
    struct mesh_tpuenv env = {0};
    if (mesh_tpuenv_parse(s, size, &env, &err) == 0) {
        (void)mesh_tpuenv_get(&env, "HOST_BOUNDS");
        mesh_tpuenv_cleanup(&env);
    }
    struct mesh_worker *w = NULL;
    size_t n = 0;
    if (mesh_tpuenv_parse_hostnames(s, size, 64, &w, &n, &err) == 0) {
        mesh_free(w);
    }
    if (mesh_tpuenv_parse_worker_endpoints(s, size, 64, &w, &n, &err) == 0) {
        mesh_free(w);
    }
    struct mesh_tpuenv_endpoint *eps = NULL;
    if (mesh_tpuenv_parse_endpoints(s, size, 64, &eps, &n, &err) == 0) {
        mesh_free(eps);
    }
    int b[3];
    (void)mesh_tpuenv_parse_bounds("B", s, size, b, &err);
    (void)mesh_names_is_host(s, size);
    return 0;
}
