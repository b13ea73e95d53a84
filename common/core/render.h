/*
 * render.h - the exact bytes of every text file on the shared volume
 * (docs/DESIGN.md §4-§5): topology.json, dtensor.env, tf_config.json, tpu.env,
 * jax.env, and TensorFlow's cluster_spec for the legacy TPU Node path.
 *
 * Pure: no I/O, no clock, no logging. Everything a worker carries is
 * validated before it is written (RFC 1123 host names, IP literals, pod
 * names, integers) and every env value is single-quoted for sh, so sourcing
 * a published env file can never execute anything.
 *
 * Formats are the ones their readers define: DTensor's DTENSOR_* variables
 * and defaults, TensorFlow's TF_CONFIG and TPUClusterResolver.cluster_spec(),
 * GKE's TPU_WORKER_* identity, JAX's coordinator (worker 0, port 8482).
 * docs/shared-volume.md shows every file.
 */
#ifndef MESH_RENDER_H
#define MESH_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/model.h"

/* Largest worker list a renderer accepts (one entry per TPU VM host; a
 * multi-slice JobSet lists the hosts of every slice, hence above 4096). */
#define MESH_RENDER_MAX_WORKERS 16384
/* JAX's coordinator port on Cloud TPU: the port JAX's own Cloud TPU cluster
 * detection (jax/_src/clusters/cloud_tpu_cluster.py) uses since jax 0.8.1;
 * 8476 before. tests/trainers/test_jax_detect.py runs the pinned JAX's
 * detection on every pod's tpu.env and compares it with jax.env. */
#define MESH_RENDER_JAX_PORT 8482
/* TensorFlow's TPU Node gRPC port. */
#define MESH_RENDER_TPU_NODE_PORT 8470
/* MEGASCALE_PORT when nothing overrides it: the multi-slice (DCN)
 * coordinator port GKE and JAX use. */
#define MESH_RENDER_MEGASCALE_PORT 8080
/* Bytes of an expected-count source name, NUL included. */
#define MESH_RENDER_SOURCE_MAX 32
/* Largest generation we write: JSON numbers are exact up to 2^53. */
#define MESH_RENDER_GENERATION_MAX ((uint64_t)9007199254740991ULL)

/* The files of docs/DESIGN.md §4. The publisher switches all files of a
 * version at once (io/publish.h), so their order here is only the order of
 * the arrays that carry them. */
enum mesh_render_file_id {
    MESH_FILE_DTENSOR_ENV = 0,
    MESH_FILE_TF_CONFIG,
    MESH_FILE_TPU_ENV,
    MESH_FILE_JAX_ENV,
    MESH_FILE_TOPOLOGY_PB,
    MESH_FILE_TOPOLOGY_JSON,
    MESH_FILE__COUNT
};

/* The on-disk name of a file ("dtensor.env"). Static string; NULL for an
 * out-of-range id. */
const char *mesh_render_file_name(enum mesh_render_file_id id);

/* What the renderers need. All pointers borrowed.
 *   slice      derived slice, or NULL when unknown (tpu.env then carries
 *              only the worker variables; topology.json has "slice": null)
 *   workers    nworkers entries in index order; when complete, entry i must
 *              have index i and there must be exactly `expected` of them
 *   expected   the job's worker count; 0 = nworkers
 *   self_index this pod's worker index (DTENSOR_CLIENT_ID = TPU_WORKER_ID =
 *              JAX process id); -1 = unknown (only allowed while incomplete)
 *   job_name   DTENSOR_JOB_NAME; NULL or "" = DTensor's default
 *              ("localhost" for exactly one client, else "worker")
 *   port       DTensor port of every worker, 1..65535
 *   mode       address mode (docs/DESIGN.md §5); auto = dns for the whole job when
 *              every worker has a host name, else ip
 *   generation topology.json "generation", <= MESH_RENDER_GENERATION_MAX
 *   complete   the worker list is the whole job; env files are rendered only
 *              then
 *   expected_source  where `expected` came from (topology.json
 *              "expectedWorkersSource": "flag", "annotation", "job", "jobset",
 *              "statefulset", "slice", "worker-list"); NULL = the count is
 *              unknown ("expectedWorkers": null); < MESH_RENDER_SOURCE_MAX bytes
 *   present    workers present: live pods in their slots (sidecar), listed
 *              workers (tpumesh-init); topology.json "presentWorkers" */
struct mesh_render_input {
    const struct mesh_slice *slice;
    const struct mesh_worker *workers;
    size_t nworkers;
    int expected;
    int self_index;
    const char *job_name;
    int port;
    enum mesh_addr_mode mode;
    uint64_t generation;
    bool complete;
    /* Multi-slice jobs (docs/DESIGN.md §4-§5). slices: 0 or 1 = one slice; > 1 =
     * that many equal slices, workers slice-major (global index = slice id x
     * hosts per slice + index within the slice), hosts per slice = the
     * expected count / slices (it must divide). tpu.env then names this
     * pod's slice only and carries MEGASCALE_*; DTENSOR_JOBS, TF_CONFIG and
     * jax.env stay global.
     *   megascale_port  MEGASCALE_PORT, 1..65535; 0 = MESH_RENDER_MEGASCALE_PORT
     *   jax_port        the port of JAX_COORDINATOR_ADDRESS, 1..65535 (the pod's
     *                   JAX_COORDINATOR_PORT, which JAX's detection uses too);
     *                   0 = MESH_RENDER_JAX_PORT. Any job, not only multi-slice.
     *                   The coordinator host is always process 0's (slice 0
     *                   worker 0): JAX starts its coordination service there.
     * slice_only: workers[] is this pod's slice alone, not the whole job
     * (tpumesh-init on a multi-slice TPU VM: GKE's TPU_WORKER_HOSTNAMES names
     * one slice). Then slices > 1, slice_id is this pod's slice, workers[i]
     * must have index slice_id x nworkers + i, self_index is global,
     * `expected` is ignored (the job has slices x nworkers workers), and
     * `complete` means the slice is complete: only tpu.env and jax.env are
     * rendered besides topology.json (which says "complete": false: the
     * job's worker list is not known). megascale_coordinator is
     * MEGASCALE_COORDINATOR_ADDRESS as the environment gave it (host, no
     * port); NULL or "" = workers[0] when slice_id is 0, else unknown
     * (tpu.env and jax.env are then not rendered: -MESH_E_INCOMPLETE). */
    int slices;
    int megascale_port;
    int jax_port;
    bool slice_only;
    int slice_id;
    const char *megascale_coordinator;
    const char *expected_source;
    int present;
};

/* A rendered set. data[i] is owned (mesh_free via mesh_render_out_cleanup)
 * or NULL when that file was not rendered (kept at its last version on
 * disk); len[i] is its length in bytes. */
struct mesh_render_out {
    char *data[MESH_FILE__COUNT];
    size_t len[MESH_FILE__COUNT];
};

/* Zero an output set. */
void mesh_render_out_init(struct mesh_render_out *out);
/* Free every rendered file; the set is empty (and reusable) afterwards. */
void mesh_render_out_cleanup(struct mesh_render_out *out);

/* ---- validation (used by the renderers; exported for resolve and the
 * sidecar, which reject or leave out bad input before rendering) ---- */

/* Check one worker: host (a host name or an IP literal, GKE's
 * TPU_WORKER_HOSTNAMES may carry either), ip and pod, each when
 * non-empty. Each string must end within its bound (MESH_HOST_MAX,
 * MESH_IP_MAX, MESH_POD_MAX, NUL included): only that many bytes are read.
 * On failure returns -MESH_E_INVAL with a message naming the worker index,
 * the field and the (escaped, truncated) bad value. */
int mesh_render_check_worker(const struct mesh_worker *w, struct mesh_err *err);

/* Append s single-quoted for sh ('it'\''s'). Returns 0 or -MESH_E_TOOBIG. */
int mesh_render_shell_quote(struct mesh_buf *out, const char *s, struct mesh_err *err);

/* Write "<addr>:<port>" for worker w in mode (dns or ip) into out
 * (IPv6 as "[addr]:port"). -MESH_E_INCOMPLETE when w lacks the address
 * that mode needs, -MESH_E_TOOBIG when out is too small. */
int mesh_render_worker_address(const struct mesh_worker *w, enum mesh_addr_mode mode, int port,
                               char *out, size_t out_size, struct mesh_err *err);

/* ---- renderers: each returns 0 and an owned NUL-terminated string in
 * *out_data (mesh_free) with its length in *out_len, or a negative
 * -MESH_E_* (INVAL: a bad worker, job name, port or index, named in the
 * message; INCOMPLETE: the env files were asked for an incomplete job).
 * Cost: each call checks every worker once and writes the file directly
 * (no JSON tree), linear in the worker count (tests/tools/render_bench
 * measures it). ---- */

int mesh_render_topology_json(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                              struct mesh_err *err);
/* One of dtensor.env, tf_config.json, tpu.env, jax.env (the env files
 * and tf_config.json only for a complete job) or topology.json, by id;
 * -MESH_E_INVAL for topology.pb (mesh_render_all writes it). */
int mesh_render_file(enum mesh_render_file_id id, const struct mesh_render_input *in,
                     char **out_data, size_t *out_len, struct mesh_err *err);

/* Linux's limit for one environment string, "KEY=value" plus its NUL
 * (MAX_ARG_STRLEN, 32 pages): a trainer that exports a longer one cannot
 * exec anything (E2BIG). */
#define MESH_RENDER_ENV_STRING_MAX (32 * 4096)

/* The size a rendered env file's longest line takes once exported:
 * "KEY=value" without the quotes, plus the NUL (values are validated, so no
 * quote needs unescaping). *out_key / *out_key_len (may be NULL) receive that
 * line's key, borrowed from data. 0 for an empty file. Compare with
 * MESH_RENDER_ENV_STRING_MAX. */
size_t mesh_render_env_longest(const char *data, size_t len, const char **out_key,
                               size_t *out_key_len);

/* Render the set: topology.json always; dtensor.env, tf_config.json, tpu.env
 * and jax.env only when in->complete (docs/DESIGN.md §5: an incomplete job keeps
 * the last complete versions). topology.pb is binary and not rendered here.
 * out must be initialised; on failure it is left empty. The bytes and the
 * errors (first failure wins) are those of calling the five renderers in
 * turn, but every worker is checked once for the whole set. */
int mesh_render_all(const struct mesh_render_input *in, struct mesh_render_out *out,
                    struct mesh_err *err);

/* Legacy TPU Node path (docs/DESIGN.md §6): tf_config.json, a
 * TF_CONFIG whose cluster is TensorFlow's cluster_spec for the TPU's gRPC
 * endpoints in task order, {"cluster":{"worker":["ip:port", ...]}}, and no
 * task (the pod is TensorFlow's client, not one of the workers); compact
 * JSON plus a newline. hosts[i] is an IP literal or host name (borrowed),
 * ports[i] 1..65535 (NULL = 8470 for all). */
int mesh_render_node_tf_config(const char *const *hosts, const int *ports, size_t n,
                               char **out_data, size_t *out_len, struct mesh_err *err);

/* The workersDigest of topology.json, with 64-bit FNV-1a's offset basis B =
 * 14695981039346656037 and prime P = 1099511628211, arithmetic mod 2^64:
 *   t = B; for each listed worker in list order:
 *     h = FNV-1a-64 of its address's bytes as topology.json shows it
 *         ("host:port", "[v6]:port"; no bytes when null: h = B)
 *     t = (t XOR index) * P;  t = (t XOR h) * P
 * written as 16 lower-case hex digits. It reads nothing else (not the pod
 * names, the generation, readiness or this pod's own index), so every pod
 * that sees the same workers at the same addresses - what DTENSOR_JOBS and
 * TF_CONFIG list - gets the same digest, and a peer replaced at the same
 * address (dns mode) does not change it. A consistency check, not a
 * security measure. */

/* What topology.json shows besides each worker's own fields, for writers of
 * the same topology in another form (the gRPC TopologySnapshot, topo_msg.h). */
struct mesh_render_facts {
    enum mesh_addr_mode mode; /* effective address mode: dns or ip */
    const char *job_name;     /* jobName: in->job_name (borrowed) or DTensor's default */
    int num_clients;          /* numClients (= expectedWorkers when that is known) */
    int slices;               /* slices.count, >= 1 */
    int slice_id;             /* slices.id; -1 = null */
    int hosts_per_slice;      /* slices.hostsPerSlice */
    char digest[17];          /* workersDigest */
};

/* Fill *out from in (borrowed). Returns 0, or mesh_render_topology_json's
 * input errors (the same checks). */
int mesh_render_facts(const struct mesh_render_input *in, struct mesh_render_facts *out,
                      struct mesh_err *err);

#endif
