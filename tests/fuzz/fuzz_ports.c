/*
 * fuzz_ports.c - the ":PORT" suffix of a listen address (--http-addr,
 * --grpc-addr) never crashes and, when accepted, gives 0..65535 that the
 * port rules then judge without crashing either.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/ports.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int port = -1;
    if (mesh_ports_of_addr((const char *)data, size, &port, NULL) == 0) {
        if (port < 0 || port > 65535) {
            abort();
        }
        struct mesh_port_use u[2] = {{"a", port}, {"b", 10000}};
        (void)mesh_ports_check(u, 2, NULL);
    }
    return 0;
}
