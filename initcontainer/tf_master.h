/*
 * tf_master.h - a client for TensorFlow's distributed-master gRPC service on
 * a legacy Cloud TPU Node (grpc://<ip>:8470), on the gRPC C core API, and
 * the TPU system initialization built on it.
 *
 * Facts: the server registers "/tensorflow.MasterService/<Method>", not the
 * proto package's "tensorflow.grpc"; errors come back as gRPC status or in
 * the response body; requests and deadlines follow TF's own client. The
 * messages are built and decoded by common/core/tf_graph.h.
 *
 * Thread use: one struct mesh_tf_master is used by one thread at a time.
 */
#ifndef MESH_TF_MASTER_H
#define MESH_TF_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define MESH_TF_METHOD_CREATE_SESSION "/tensorflow.MasterService/CreateSession"
#define MESH_TF_METHOD_RUN_STEP "/tensorflow.MasterService/RunStep"
#define MESH_TF_METHOD_CLOSE_SESSION "/tensorflow.MasterService/CloseSession"
#define MESH_TF_METHOD_LIST_DEVICES "/tensorflow.MasterService/ListDevices"

#define MESH_TF_STATUS_MSG_MAX 1024

/* One gRPC channel to a TensorFlow server. Opaque. */
struct mesh_tf_master;

/* Open an insecure channel to target ("host:port", "[v6]:port"; borrowed,
 * copied). Nothing is sent yet. Returns a handle owned by the caller
 * (mesh_tf_master_free) or NULL with err set (-MESH_E_INVAL for an empty
 * target, -MESH_E_API when gRPC refuses to create the channel). */
struct mesh_tf_master *mesh_tf_master_new(const char *target, struct mesh_err *err);

/* Close the channel and release everything. NULL does nothing. */
void mesh_tf_master_free(struct mesh_tf_master *m);

/* Wait until the channel is connected, at most until deadline_ms
 * (CLOCK_MONOTONIC milliseconds, see mesh_sys_now_ms), logging a
 * progress line every 10 s. Returns 0, or -MESH_E_NOTREADY naming the target,
 * the last connectivity state and how long we waited. */
int mesh_tf_master_wait_connected(struct mesh_tf_master *m, int64_t deadline_ms,
                                  struct mesh_err *err);

/* The outcome of one unary call. */
struct mesh_tf_call_result {
    int status;                           /* gRPC status code (== tensorflow.error.Code) */
    char message[MESH_TF_STATUS_MSG_MAX]; /* status details, NUL-terminated, maybe cut */
    uint8_t *response;                    /* owned by caller (mesh_free) when status == 0 */
    size_t response_len;
};

/* One unary call of method (e.g. MESH_TF_METHOD_RUN_STEP) with the
 * serialized request req (borrowed) and the absolute deadline deadline_ms.
 * The call waits for the channel to become ready (TF's fail_fast=false)
 * and logs a progress line every 10 s while it waits.
 * Returns 0 when the call completed (whatever its gRPC status: look at
 * out->status; out->response is set only for status 0) and -MESH_E_API when
 * gRPC could not start the call or an OK reply carried no message. */
int mesh_tf_master_call(struct mesh_tf_master *m, const char *method, const uint8_t *req,
                        size_t req_len, int64_t deadline_ms, struct mesh_tf_call_result *out,
                        struct mesh_err *err);

/* Release what a call result owns (the response). */
void mesh_tf_call_result_cleanup(struct mesh_tf_call_result *r);

/* TPU system initialization as `sess.run(tpu.initialize_system())` against
 * the TPU's TensorFlow server: connect to tasks[0], CreateSession with the
 * ConfigureDistributedTPU graph (tf_graph.h; TF's option B, and once option A
 * when the server rejects the address we reached it by), RunStep fetching
 * "ConfigureDistributedTPU:0", CloseSession (always, once a session exists;
 * never Reset).
 *   tasks/ntasks  TPU task addresses "host:port" in task order (borrowed)
 *   timeout_ms    overall budget; every call gets a deadline within it
 * On success *out_topology (owned by caller, mesh_free) holds the serialized
 * tensorflow.tpu.TopologyProto exactly as the TPU returned it (not
 * validated here). Errors (the message says what to do):
 *   -MESH_E_NOTREADY  server unreachable by the deadline, UNAVAILABLE, or a
 *                     TPU runtime failure; -MESH_E_TIMEOUT  connected but no
 *                     answer in time (or the server's own DEADLINE_EXCEEDED);
 *   -MESH_E_NOTFOUND  "TPUs not found in the cluster. Failed in
 *                     initialization: ..." (InvalidArgument/NotFound);
 *   -MESH_E_AUTH (UNAUTHENTICATED/PERMISSION_DENIED), -MESH_E_API (a reply
 *                     we cannot decode, UNIMPLEMENTED, ...), -MESH_E_INVAL (bad tasks). */
int mesh_tf_master_configure_tpu(const char *const *tasks, size_t ntasks, int64_t timeout_ms,
                                 uint8_t **out_topology, size_t *out_len, struct mesh_err *err);

#endif
