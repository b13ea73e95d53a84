/*
 * init.h - tpumesh-init's context and its three steps (docs/DESIGN.md §1, §6):
 *   main.c        flags/env/annotations -> struct mesh_init_opts, runs the steps,
 *                 maps errors to exit codes, logs one clear last line
 *   resolve.c     mesh_init_resolve: which TPU, which slice, which workers
 *   initialize.c  mesh_init_initialize: TPU Node ConfigureDistributedTPU over gRPC,
 *                 or TPU VM device/lock preflight
 *   publish.c     mesh_init_publish: the first version of every file of docs/DESIGN.md §4
 *
 * Exit codes (docs/DESIGN.md §6) come from the error code a step returns:
 *   MESH_E_CONFIG/INVAL/PARSE/RANGE -> 2, MESH_E_NOTFOUND -> 3,
 *   MESH_E_NOTREADY/TIMEOUT/BUSY -> 4, MESH_E_AUTH/API -> 5, MESH_E_PUBLISH/IO -> 6.
 */
#ifndef MESH_INIT_H
#define MESH_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/logfmt.h"
#include "core/model.h"

#define MESH_INIT_MAX_WORKERS 4096
#define MESH_INIT_MAX_ENDPOINTS 1024

/* Options after merging flags > pod annotations > environment (main.c).
 * Strings are owned by the context (freed by mesh_init_cleanup); NULL = not set. */
struct mesh_init_opts {
    char *tpu; /* --tpu / tpumesh.dev/tpu (NULL: fall back to env, TF's order) */
    char *zone;
    char *project;
    char *accelerator_type;
    char *topology;
    char *annotations_file; /* default /etc/podinfo/annotations */
    char *dev_dir;          /* default /dev */
    char *out_dir;          /* default /var/run/tpumesh */
    char *metadata_host;
    char *tpu_api_endpoint;
    char *job_name; /* tpumesh.dev/job-name; NULL = DTensor's default */
    int port;       /* DTensor port, default 10000 */
    enum mesh_addr_mode address_mode;
    int expected_workers; /* 0 = unknown */
    int timeout_s;        /* default 600 */
    bool skip_init;
    enum mesh_log_level log_level;
    enum mesh_log_format log_format;
    char *tf_version;   /* tf-version.cloud-tpus.google.com annotation, or NULL */
    int megascale_port; /* tpumesh.dev/megascale-port annotation, 0 = not given */
    /* Where opts.tpu came from, for the log: a static string such as "flag --tpu",
     * "env TPUMESH_TPU" or "annotation tpumesh.dev/tpu"; NULL = "flag --tpu". */
    const char *tpu_origin;
    /* Where expected_workers came from, for topology.json's
     * expectedWorkersSource: "flag" (--expected-workers or
     * TPUMESH_EXPECTED_WORKERS) or "annotation"; NULL = not given. */
    const char *expected_origin;
};

/* How the TPU was found. */
enum mesh_tpu_kind {
    MESH_TPU_NONE = 0,
    MESH_TPU_VM_LOCAL,  /* TPU VM: tpu='local' or GKE TPU_* env (the trainer loads libtpu) */
    MESH_TPU_NODE_GRPC, /* legacy TPU Node: grpc:// endpoints (KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS) */
    MESH_TPU_NODE_API,  /* TPU name(s) resolved through the Cloud TPU API to grpc endpoints */
};

struct mesh_endpoint {
    char ip[MESH_IP_MAX];
    int port; /* default 8470 */
};

struct mesh_init {
    struct mesh_init_opts opts;

    /* Filled by mesh_init_resolve. */
    enum mesh_tpu_kind kind;
    char *tpu_source; /* human-readable: "flag --tpu", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", ... */
    bool have_slice;
    struct mesh_slice slice;
    struct mesh_worker *workers; /* owned, index order; may be fewer than expected;
                                    one block with its strings (model.h) */
    size_t nworkers;
    int self_index; /* this pod's worker index, -1 if unknown; on a
                       multi-slice TPU VM the index within the slice */
    bool complete;  /* the whole worker list is known */
    /* Multi-slice TPU VM (MEGASCALE_* from GKE/JobSet): workers lists this
     * slice only, with global indices slice_id x nworkers + i. */
    int num_slices;                  /* MEGASCALE_NUM_SLICES, 1 = one slice */
    int slice_id;                    /* MEGASCALE_SLICE_ID */
    bool slice_complete;             /* this slice's workers are all known */
    char *megascale_coordinator;     /* MEGASCALE_COORDINATOR_ADDRESS host, owned, or NULL */
    int megascale_port;              /* annotation > MEGASCALE_PORT > 0 (= 8080) */
    struct mesh_endpoint *endpoints; /* TPU Node gRPC endpoints, owned, task order */
    size_t nendpoints;

    /* Filled by mesh_init_initialize (TPU Node path): the TopologyProto bytes
     * the TPU returned, owned. */
    uint8_t *topology_pb;
    size_t topology_pb_len;

    /* CLOCK_MONOTONIC milliseconds by which resolve and initialize together
     * must be done: --timeout counts from the start of the run, once, not per
     * step (set by main.c; 0 = each step uses opts.timeout_s on its own). */
    int64_t deadline_ms;
};

void mesh_init_init(struct mesh_init *ctx);
void mesh_init_cleanup(struct mesh_init *ctx);

/* Each step returns 0 or a negative -MESH_E_* and fills err with a message
 * that names the problem and what to do about it. */
int mesh_init_resolve(struct mesh_init *ctx, struct mesh_err *err);
int mesh_init_initialize(struct mesh_init *ctx, struct mesh_err *err);
int mesh_init_publish(struct mesh_init *ctx, struct mesh_err *err);

/* The exit code for an error code (table above). */
int mesh_init_exit_code(int code);

/* opts.c: parse argv (io/cliopts.h: "--flag value" and "--flag=value"), the
 * pod annotations file (tpumesh.dev/ keys, --annotations-file) and the
 * TPUMESH_<FLAG_UPPER_SNAKE> environment into ctx->opts (flag > annotation >
 * environment > default, docs/DESIGN.md §6; empty environment values count
 * as unset). argv is borrowed; strings stored in ctx->opts are owned by ctx.
 * Returns 0 (run), 1 (--help or --version printed: exit 0) or
 * -MESH_E_CONFIG with a message naming the flag, annotation or variable and
 * the accepted values (exit 2). */
int mesh_init_opts_parse(struct mesh_init *ctx, int argc, char **argv, struct mesh_err *err);

/* Before the parse: the log format and level the command line or the
 * variables ask for (mesh_cliopts_log_setup). Never fails. */
void mesh_init_log_setup(int argc, char **argv);

#endif
