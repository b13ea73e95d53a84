/*
 * ports.h - the port rules both programs and the chart's values schema
 * enforce (README "Ports"): the trainer, tpumesh-sidecar and TPU software
 * share the pod's network namespace, so
 *   - no tpumesh port is one TPU software uses: 8470-8475 (TPU runtime),
 *     8482 (JAX's Cloud TPU coordinator since jax 0.8.1, jax.env's port) and
 *     8476 (the same before 0.8.1: an older JAX's own detection still binds
 *     it), 8080 (multislice MEGASCALE_PORT), 9470 and 9476;
 *   - the DTensor, probe (--http-addr) and gRPC (--grpc-addr) ports differ.
 *
 * Pure: no I/O.
 */
#ifndef MESH_PORTS_H
#define MESH_PORTS_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* The reserved ports as the messages list them. */
#define MESH_PORTS_RESERVED_TEXT "8470-8476, 8482, 8080, 9470 and 9476"

/* True when TPU software uses port p in the pod's network namespace. */
bool mesh_ports_is_reserved(int p);

/* One port a program uses: what names it in a message ("DTensor port
 * (--port)"), port its number (0 = any free port: exempt from the rules). */
struct mesh_port_use {
    const char *what;
    int port;
};

/* Check n ports against both rules. Returns 0, or -MESH_E_CONFIG with a
 * message naming the port, where it came from, and the rule it breaks. */
int mesh_ports_check(const struct mesh_port_use *u, size_t n, struct mesh_err *err);

/* The port of "[host]:port", "host:port" or ":port" (len bytes, no NUL
 * needed): *out 0..65535. -MESH_E_PARSE when there is no ":port" suffix of
 * digits. */
int mesh_ports_of_addr(const char *addr, size_t len, int *out, struct mesh_err *err);

#endif
