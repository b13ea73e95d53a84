/*
 * topo_msg.h - the tpumesh.v1 messages (proto/tpumesh/v1/topology.proto)
 * built from and checked against the sidecar's own data (docs/STYLE.md R8: pure,
 * no I/O).
 *
 *   render input         -> TopologySnapshot (Topology/Get, Watch VIEW_TOPOLOGY):
 *                           the values topology.json shows for the same input
 *   packed pod record    -> Pod (Watch VIEW_PODS, the relay protocol)
 *   Pod from a relay     -> packed pod record, validated exactly as a Pod
 *                           object from the Kubernetes API is (k8s_pod.h): the
 *                           message is turned back into Pod JSON and goes
 *                           through mesh_k8s_pod_extract. A relay is a peer,
 *                           not an authority: a value the API rules refuse
 *                           makes the whole message refused.
 *   WatchResponse bytes  -> a checked, unpacked message (size limits first)
 */
#ifndef MESH_TOPO_MSG_H
#define MESH_TOPO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "k8s_pod.h"
#include "render.h"
#include "tpumesh/v1/topology.pb-c.h"

/* Largest WatchResponse / TopologySnapshot accepted (a 65,536-pod snapshot
 * of long DNS names stays below it). */
#define MESH_TOPO_MSG_MAX (32u << 20)
/* Most pod records (upserts + deleted) in one message. */
#define MESH_TOPO_MSG_PODS_MAX 65536
/* Bytes of a resourceVersion we keep. */
#define MESH_TOPO_MSG_RV_MAX 64

/* The topology in (borrowed; what the files of generation in->generation
 * were rendered from) -> a packed TopologySnapshot with the values
 * topology.json shows (its nulls as "" or -1), carrying resource_version rv
 * (borrowed; NULL = ""). *out owned by caller (mesh_free). Errors: the
 * renderer's input errors (render.h), -MESH_E_TOOBIG over
 * MESH_TOPO_MSG_MAX. */
int mesh_topo_msg_snapshot(const struct mesh_render_input *in, const char *rv, uint8_t **out,
                           size_t *out_len, struct mesh_err *err);

/* Fill *m (initialised here) from r: strings are borrowed from r, so m
 * lives no longer than r and is never freed with protobuf-c. */
void mesh_topo_msg_pod_from_rec(Tpumesh__V1__Pod *m, const struct mesh_k8s_pod_rec *r);

/* A Pod received from a relay (borrowed) -> a packed record, owned by
 * caller (mesh_free), equal to what mesh_k8s_pod_pack makes of the same pod
 * read from the API. NULL with -MESH_E_INVAL when the relay calls the pod
 * valid but a value breaks the API rules (the message says which and how),
 * or when a value is not in the canonical form the API reading produces. A
 * pod the relay marks invalid is kept, invalid, with the relay's reason. */
struct mesh_k8s_pod_rec *mesh_topo_msg_pod_to_rec(const Tpumesh__V1__Pod *m, struct mesh_err *err);

/* Most bytes one Pod record takes on the wire: its strings are bounded
 * (name 253, host names 63, IP 45, reason 127) and its numbers small. */
#define MESH_TOPO_MSG_POD_WIRE_MAX 1024
/* Most fields one Pod record may carry (it has 13; unknown ones count). */
#define MESH_TOPO_MSG_POD_FIELDS_MAX 16

/* Walk a VIEW_PODS WatchResponse's wire format (len bytes, borrowed)
 * without decoding it, so that a hostile message cannot make the decoder
 * allocate more than the job needs: at most max_records pod records
 * (upserts + deleted names), each at most MESH_TOPO_MSG_POD_WIRE_MAX bytes
 * and MESH_TOPO_MSG_POD_FIELDS_MAX fields, a deleted name shorter than
 * MESH_POD_MAX, a resource_version shorter than MESH_TOPO_MSG_RV_MAX, no
 * topology (a pod stream never carries one), and at most
 * MESH_TOPO_MSG_POD_FIELDS_MAX x max_records + 64 fields in all (unknown
 * fields are kept by the decoder, one allocation each). 0, or
 * -MESH_E_TOOBIG / -MESH_E_PARSE / -MESH_E_INVAL naming the first excess. */
int mesh_topo_msg_scan_pods(const uint8_t *buf, size_t len, size_t max_records,
                            struct mesh_err *err);

/* Unpack a WatchResponse (len bytes) with limits: at most MESH_TOPO_MSG_MAX
 * bytes, MESH_TOPO_MSG_PODS_MAX records, a resource_version of at most
 * MESH_TOPO_MSG_RV_MAX - 1 bytes. Owned by caller
 * (tpumesh__v1__watch_response__free_unpacked(m, NULL)), or NULL with
 * -MESH_E_PARSE / -MESH_E_TOOBIG. */
Tpumesh__V1__WatchResponse *mesh_topo_msg_unpack_watch(const uint8_t *buf, size_t len,
                                                       struct mesh_err *err);

#endif
