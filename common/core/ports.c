/*
 * ports.c - the port rules of ports.h.
 */
#include "ports.h"

bool mesh_ports_is_reserved(int p)
{
    return (p >= 8470 && p <= 8476) || p == 8482 || p == 8080 || p == 9470 || p == 9476;
}

int mesh_ports_check(const struct mesh_port_use *u, size_t n, struct mesh_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (u[i].port != 0 && mesh_ports_is_reserved(u[i].port)) {
            return mesh_err_set(
                err, MESH_E_CONFIG, 0,
                "%s %d is reserved: TPU software uses ports " MESH_PORTS_RESERVED_TEXT
                " in the pod's network namespace (JAX's coordinator 8482, 8476 before jax "
                "0.8.1, the TPU runtime 8470-8475, multislice 8080); choose another port",
                u[i].what, u[i].port);
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            if (u[i].port != 0 && u[i].port == u[j].port) {
                return mesh_err_set(err, MESH_E_CONFIG, 0,
                                    "%s and %s are both %d: the DTensor, probe and gRPC ports "
                                    "must be distinct (they share the pod's network namespace)",
                                    u[i].what, u[j].what, u[i].port);
            }
        }
    }
    return 0;
}

int mesh_ports_of_addr(const char *addr, size_t len, int *out, struct mesh_err *err)
{
    size_t c = len;
    while (c > 0 && addr[c - 1] != ':') {
        c--;
    }
    if (c == 0 || c == len || len - c > 5) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "address has no :PORT suffix");
    }
    int p = 0;
    for (size_t i = c; i < len; i++) {
        if (addr[i] < '0' || addr[i] > '9') {
            return mesh_err_set(err, MESH_E_PARSE, 0, "port is not a number");
        }
        p = p * 10 + (addr[i] - '0');
    }
    if (p > 65535) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "port %d is above 65535", p);
    }
    *out = p;
    return 0;
}
