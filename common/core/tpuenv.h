/*
 * tpuenv.h - parsers for the TPU values that arrive as text: the GKE TPU VM
 * environment (TPU_WORKER_HOSTNAMES, TPU_HOST_BOUNDS, ...), legacy TPU Node
 * gRPC endpoint lists (KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, --tpu grpc://...),
 * and the GCE metadata attributes `tpu-env` and `worker-network-endpoints`.
 * Names and addresses are validated with names.h.
 *
 * Pure (docs/STYLE.md R8): no I/O. Every parser takes (buf, len), never needs a
 * NUL terminator and has limits (R9). Formats: TensorFlow's
 * TPUClusterResolver (endpoint lists), GKE's TPU VM variables, the GCE
 * metadata attributes of a TPU VM.
 */
#ifndef MESH_TPUENV_H
#define MESH_TPUENV_H

#include <stdbool.h>
#include <stddef.h>

#include "core/annotations.h"
#include "core/err.h"
#include "core/model.h"

/* TensorFlow's default TPU Node port (cloud_tpu_client's _DEFAULT_ENDPOINT_PORT). */
#define MESH_TPUENV_DEFAULT_PORT 8470
/* Largest value any of these parsers accepts (bytes). */
#define MESH_TPUENV_MAX_INPUT (256 * 1024)
/* Most keys a tpu-env document may hold. */
#define MESH_TPUENV_MAX_KEYS 256

/* Parse a comma list of worker host names or IPs (TPU_WORKER_HOSTNAMES:
 * ordered and zero-indexed by TPU_WORKER_ID). Each entry must
 * pass mesh_names_is_host; no spaces are trimmed. At most max
 * entries. On success *out_workers is an array of *out_n workers (owned by
 * caller: one block holding the array and its strings, one mesh_free) with
 * index = position and host = the entry; an IP entry is also the ip. Errors: -MESH_E_CONFIG naming
 * the bad entry (its position and text), -MESH_E_TOOBIG above max entries. */
int mesh_tpuenv_parse_hostnames(const char *s, size_t len, size_t max,
                                struct mesh_worker **out_workers, size_t *out_n,
                                struct mesh_err *err);

/* Parse bounds "x,y,z" (TPU_HOST_BOUNDS, TPU_CHIPS_PER_HOST_BOUNDS): exactly
 * three positive decimal integers <= 4096. name is used in messages
 * ("TPU_HOST_BOUNDS"). -MESH_E_CONFIG on anything else. */
int mesh_tpuenv_parse_bounds(const char *name, const char *s, size_t len, int out_bounds[3],
                             struct mesh_err *err);

/* One TPU Node gRPC endpoint. */
struct mesh_tpuenv_endpoint {
    char ip[MESH_IP_MAX]; /* IPv4 literal or host name as given */
    int port;
};

/* Parse an endpoint list with TensorFlow's rules: split on
 * ',', strip a leading "grpc://" per item, split on ':', host = part 0, port
 * = part 1 or 8470; order = task index; no trimming. Beyond TensorFlow each
 * host must be a valid IPv4 literal or host name that fits MESH_IP_MAX, the
 * port an integer 1-65535, and an item may have at most one ':' (IPv6 is
 * not expressible in this format). At most max items. *out_eps is owned by
 * caller (mesh_free). Errors: -MESH_E_CONFIG naming the item, -MESH_E_TOOBIG. */
int mesh_tpuenv_parse_endpoints(const char *s, size_t len, size_t max,
                                struct mesh_tpuenv_endpoint **out_eps, size_t *out_n,
                                struct mesh_err *err);

/* True when s[0..len) starts with "grpc://" (TensorFlow's _use_api test). */
bool mesh_tpuenv_is_grpc(const char *s, size_t len);

/* A `tpu-env` metadata value: YAML-ish lines `KEY: 'value'`. Values may be
 * single-quoted ('' is a quote), double-quoted (\\, \", \n, \t escapes) or
 * bare (trailing spaces dropped). Blank lines and lines starting with '#'
 * are skipped. Parse buf[0..len) into out_env, the key/value list the pod's
 * annotations use too (written only on success, then owned by the caller:
 * mesh_annotations_get reads it, mesh_annotations_cleanup frees it). Keys
 * must be [A-Za-z0-9_]+, unique; at most MESH_TPUENV_MAX_KEYS; input at most
 * MESH_TPUENV_MAX_INPUT bytes; NUL bytes are rejected. Errors: -MESH_E_PARSE naming the line,
 * -MESH_E_TOOBIG. */
int mesh_tpuenv_parse(const char *buf, size_t len, struct mesh_annotations *out_env,
                      struct mesh_err *err);

/* Parse the metadata attribute `worker-network-endpoints`: a comma list of
 * `hostname:uid:ip` where consumers take field [2]; list order =
 * worker order. Each ip must be an IP literal. *out_workers (owned by caller:
 * one block holding the array and its strings, one mesh_free) get index =
 * position, ip and host = field [2]. Errors:
 * -MESH_E_PARSE naming the entry, -MESH_E_TOOBIG above max entries. */
int mesh_tpuenv_parse_worker_endpoints(const char *s, size_t len, size_t max,
                                       struct mesh_worker **out_workers, size_t *out_n,
                                       struct mesh_err *err);

#endif
