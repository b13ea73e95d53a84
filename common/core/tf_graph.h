/*
 * tf_graph.h - the TensorFlow master messages tpumesh-init sends and reads to
 * initialize a legacy TPU Node, as pure functions (no I/O): build the
 * serialized CreateSessionRequest / RunStepRequest / CloseSessionRequest and
 * decode CreateSessionResponse / RunStepResponse with protobuf-c.
 *
 * Facts: TensorFlow's master protocol (tensorflow/core/protobuf/master.proto,
 * the TPU ops ConfigureDistributedTPU / ShutdownDistributedTPU, the
 * CreateSession -> RunStep -> CloseSession sequence of tpu_strategy_util.py).
 * The transport (gRPC) lives in initcontainer/tf_master.{c,h}.
 */
#ifndef MESH_TF_GRAPH_H
#define MESH_TF_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* The node (and op type) of the init graph; the fetch is "<node>:0". */
#define MESH_TF_CONFIGURE_OP "ConfigureDistributedTPU"
#define MESH_TF_CONFIGURE_FETCH "ConfigureDistributedTPU:0"

/* The job TensorFlow's TPUClusterResolver names the TPU tasks in the
 * cluster_def it sends. Never "tpu_worker": that is the
 * server's own boot job and CreateSession rejects a cluster_def naming it. */
#define MESH_TF_CLIENT_JOB "worker"
#define MESH_TF_SERVER_JOB "tpu_worker"

/* GraphDef versions.producer we claim (TF 2.12's TF_GRAPH_DEF_VERSION; the
 * server accepts any producer >= 0). */
#define MESH_TF_GRAPH_PRODUCER 1394

/* Limits on what we decode. */
#define MESH_TF_MAX_RESPONSE (16u * 1024u * 1024u)
#define MESH_TF_MAX_TOPOLOGY (4u * 1024u * 1024u)
#define MESH_TF_MAX_HANDLE 1024
#define MESH_TF_MAX_TASKS 1024

/* tensorflow.error.Code == gRPC status codes. */
enum mesh_tf_code {
    MESH_TF_OK = 0,
    MESH_TF_CANCELLED = 1,
    MESH_TF_UNKNOWN = 2,
    MESH_TF_INVALID_ARGUMENT = 3,
    MESH_TF_DEADLINE_EXCEEDED = 4,
    MESH_TF_NOT_FOUND = 5,
    MESH_TF_ALREADY_EXISTS = 6,
    MESH_TF_PERMISSION_DENIED = 7,
    MESH_TF_RESOURCE_EXHAUSTED = 8,
    MESH_TF_FAILED_PRECONDITION = 9,
    MESH_TF_ABORTED = 10,
    MESH_TF_OUT_OF_RANGE = 11,
    MESH_TF_UNIMPLEMENTED = 12,
    MESH_TF_INTERNAL = 13,
    MESH_TF_UNAVAILABLE = 14,
    MESH_TF_DATA_LOSS = 15,
    MESH_TF_UNAUTHENTICATED = 16,
};

/* What the init session looks like. All strings borrowed.
 *   tasks/ntasks  the TPU's task addresses "host:port" in task order (the
 *                 grpc:// endpoints without the scheme). Task 0 is the master
 *                 the client talks to and owns the TPU_SYSTEM device.
 *   operation_timeout_ms  ConfigProto.operation_timeout_in_ms (0 = unset).
 * The request follows TensorFlow's graph-mode client
 * (tpu_strategy_util.py): ConfigProto{allow_soft_placement, cluster_def
 * {job "worker": tasks}}, target "grpc://<task 0>", one attr-less NodeDef
 * ConfigureDistributedTPU on /job:worker/replica:0/task:0/device:TPU_SYSTEM:0.
 *   server_cluster  when true, option A instead: no cluster_def
 *                 and no target; the node goes to the server's own boot job,
 *                 /job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0. This
 *                 works when the address we dial is not the one the server
 *                 knows itself by (a port-forward or proxy), where option B
 *                 fails with "Requested port ... differs" or "The master
 *                 (current machine) is not included in the provided
 *                 cluster_def". tasks[0] is still required (validated). */
struct mesh_tf_session_spec {
    const char *const *tasks;
    size_t ntasks;
    int64_t operation_timeout_ms;
    bool server_cluster;
};

/* Serialize the CreateSessionRequest for spec. On success *out_buf (owned by
 * caller, mesh_free) holds *out_len bytes. Errors: -MESH_E_INVAL when there
 * are no tasks, too many, or a task address is empty or contains characters
 * outside [A-Za-z0-9.:_\-\[\]]. */
int mesh_tf_graph_create_session_request(const struct mesh_tf_session_spec *spec, uint8_t **out_buf,
                                         size_t *out_len, struct mesh_err *err);

/* Serialize RunStepRequest{session_handle, fetch, options.timeout_in_ms,
 * store_errors_in_response_body: true} (request_id 0 like TF's
 * C++ client). handle and fetch borrowed; timeout_ms <= 0 leaves the
 * server's default. *out_buf owned by caller. -MESH_E_INVAL on an empty
 * handle or fetch. */
int mesh_tf_graph_run_step_request(const char *handle, const char *fetch, int64_t timeout_ms,
                                   uint8_t **out_buf, size_t *out_len, struct mesh_err *err);

/* Serialize CloseSessionRequest{session_handle}. *out_buf owned by caller. */
int mesh_tf_graph_close_session_request(const char *handle, uint8_t **out_buf, size_t *out_len,
                                        struct mesh_err *err);

/* Decode a CreateSessionResponse (buf borrowed, need not be NUL-terminated).
 * On success *out_handle is the session handle (owned by caller, mesh_free).
 * Errors: -MESH_E_TOOBIG, -MESH_E_PARSE (not a CreateSessionResponse, empty
 * handle, or a handle with control characters or longer than
 * MESH_TF_MAX_HANDLE). */
int mesh_tf_graph_parse_create_session_response(const uint8_t *buf, size_t len, char **out_handle,
                                                struct mesh_err *err);

/* Decode a RunStepResponse and extract the scalar DT_STRING tensor named
 * fetch: tensor_content = varint32(n) || n bytes, string_val[0]
 * as fallback. On success *out_value (owned by caller, mesh_free; never NULL,
 * may be empty) holds *out_len bytes.
 * A non-OK status_code in the body is mapped with
 * mesh_tf_graph_status_error (what = "RunStep"). Other errors:
 * -MESH_E_TOOBIG, -MESH_E_PARSE (malformed message, fetch missing, a tensor
 * for a name we did not request, wrong dtype or shape, bad string
 * encoding, value larger than MESH_TF_MAX_TOPOLOGY). */
int mesh_tf_graph_parse_run_step_response(const uint8_t *buf, size_t len, const char *fetch,
                                          uint8_t **out_value, size_t *out_len,
                                          struct mesh_err *err);

/* Static name of a tensorflow.error.Code / gRPC status code, e.g.
 * "INVALID_ARGUMENT" for 3; a value outside 0..16 gives "UNKNOWN_CODE". */
const char *mesh_tf_graph_code_name(int code);

/* Map a non-OK TensorFlow/gRPC status of call `what` ("CreateSession") to a
 * tpumesh error, fill err and return the negative code:
 *   INVALID_ARGUMENT, NOT_FOUND -> MESH_E_NOTFOUND with TensorFlow's wording
 *       "TPUs not found in the cluster. Failed in initialization: <msg>"
 *       (tpu_strategy_util.py wraps InvalidArgument that way);
 *   UNAVAILABLE, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, INTERNAL,
 *   ABORTED, CANCELLED -> MESH_E_NOTREADY;  DEADLINE_EXCEEDED -> MESH_E_TIMEOUT;
 *   UNAUTHENTICATED, PERMISSION_DENIED -> MESH_E_AUTH;
 *   anything else (UNIMPLEMENTED, UNKNOWN, ...) -> MESH_E_API.
 * msg (borrowed, may be NULL) is TensorFlow's message. code 0 is a caller
 * bug and maps to MESH_E_API as well. */
int mesh_tf_graph_status_error(int code, const char *msg, const char *what, struct mesh_err *err);

#endif
