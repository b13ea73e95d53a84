/*
 * model.h - the data model shared by the topology core (accel.c, topo.c),
 * the renderers (render.c), the publisher, tpumesh-init and tpumesh-sidecar.
 *
 * The slice structs are plain values with fixed-size strings. A worker
 * borrows its strings (see struct mesh_worker for who owns them), so a
 * worker list of 16,384 entries costs its string bytes plus 40 B a worker.
 * The files built from it: docs/DESIGN.md §4-§5.
 */
#ifndef MESH_MODEL_H
#define MESH_MODEL_H

#include <stdbool.h>
#include <stddef.h>

/* TPU generations. */
enum mesh_tpu_gen {
    MESH_GEN_UNKNOWN = 0,
    MESH_GEN_V2,
    MESH_GEN_V3,
    MESH_GEN_V4,
    MESH_GEN_V5P,
    MESH_GEN_V5E, /* accelerator type prefix "v5litepod" */
    MESH_GEN_V6E,
    MESH_GEN_TPU7X,
};

/* What is known about a slice before derivation. Every pointer may be NULL
 * (unknown); chips_per_host 0 = unknown (derive the default), hosts 0 =
 * unknown. All strings borrowed. */
struct mesh_slice_spec {
    const char *accelerator_type; /* "v4-32", "v5litepod-16" (TPU_ACCELERATOR_TYPE) */
    const char *gke_accelerator;  /* node label value "tpu-v4-podslice" */
    const char *topology;         /* "2x2x4", "4x4" (TPU_TOPOLOGY / gke-tpu-topology) */
    int chips_per_host;           /* google.com/tpu per pod, or 0 */
    int hosts;                    /* number of TPU VMs (pods) if known, or 0 */
};

#define MESH_ACCEL_TYPE_MAX 32
#define MESH_TOPOLOGY_MAX 32

/* A fully derived, self-consistent slice (accel.c: mesh_slice_derive). */
struct mesh_slice {
    enum mesh_tpu_gen gen;
    char accelerator_type[MESH_ACCEL_TYPE_MAX]; /* canonical, e.g. "v4-32" */
    char topology[MESH_TOPOLOGY_MAX];           /* canonical, e.g. "2x2x4" or "4x4" */
    int ndims;                                  /* 2 or 3: how the topology is written */
    int dims[3];                                /* chips per axis (z = 1 for 2-D) */
    int chips;                                  /* product of dims */
    int hosts;                                  /* TPU VMs = Kubernetes pods of one slice */
    int chips_per_host;
    int cores_per_chip;           /* TensorCores per chip (2 for v2/v3/v4/v5p/tpu7x) */
    int devices_per_host;         /* TensorFlow TPU devices per host */
    int host_bounds[3];           /* TPU_HOST_BOUNDS "x,y,z" */
    int chips_per_host_bounds[3]; /* TPU_CHIPS_PER_HOST_BOUNDS "x,y,z" */
    int mesh_shape[4];            /* TopologyProto mesh_shape [x, y, z, devices per chip] */
};

/* Address modes of docs/DESIGN.md §5. */
enum mesh_addr_mode {
    MESH_ADDR_AUTO = 0,
    MESH_ADDR_DNS,
    MESH_ADDR_IP,
};

#define MESH_HOST_MAX 254 /* DNS name (RFC 1123, <= 253) + NUL */
#define MESH_IP_MAX 46    /* INET6_ADDRSTRLEN */
#define MESH_POD_MAX 254
#define MESH_JOB_NAME_MAX 64

/* One worker (one pod / one TPU VM host) in index order. The strings are
 * borrowed, never NULL, "" = not known. Whoever hands out an owned
 * `struct mesh_worker *` array allocates ONE block: the array followed by
 * the string bytes it points into (mesh_workers_block_alloc in workers.h),
 * so a single mesh_free(array) releases everything. Each string stays within
 * the bounds below (including the NUL). */
struct mesh_worker {
    int index;        /* task index = DTENSOR_CLIENT_ID = TPU_WORKER_ID */
    const char *pod;  /* pod name; "" on the env-only TPU VM path (< MESH_POD_MAX) */
    const char *host; /* DNS name: <spec.hostname>.<spec.subdomain>, or a
                         TPU_WORKER_HOSTNAMES entry (< MESH_HOST_MAX) */
    const char *ip;   /* status.podIP (IPv4 or IPv6 text), or "" (< MESH_IP_MAX) */
    bool ready;       /* the pod's Ready condition (reported, never required) */
    bool terminating; /* deletionTimestamp set */
};

#endif
