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
 * Every mesh_tf_master_configure_tpu call opens and closes its own channel.
 */
#ifndef MESH_TF_MASTER_H
#define MESH_TF_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

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
