/*
 * grpc_server.h - the sidecar's gRPC server on the gRPC C core API
 * (docs/DESIGN.md §6, §9): grpc.health.v1.Health (Check, Watch) and
 * tpumesh.v1.Topology (Get, Watch) on one plain-HTTP/2 port.
 *
 * One thread runs the completion queue. The owner publishes state with the
 * mesh_grpc_server_set_* calls from any thread (each takes a lock, copies,
 * and returns); the server thread never calls back into the owner except
 * for the health function.
 *
 * Bounds (docs/STYLE.md R21): at most opts.max_streams Watch streams at once
 * (more get RESOURCE_EXHAUSTED), of which at most opts.max_pod_streams
 * VIEW_PODS subscribers (the relay fan-out), only from the IP of a pod in
 * the set given to mesh_grpc_server_set_pods (or loopback: this pod), at
 * most 4 per address (PERMISSION_DENIED / RESOURCE_EXHAUSTED otherwise);
 * requests of at most 4 KiB;
 * per stream at most ONE message in flight and no queue: a stream that
 * falls behind is sent the latest state (for VIEW_PODS the difference
 * between what it last got and now), so a burst of changes costs one
 * message; a stream whose message is not taken within opts.send_timeout_ms
 * (a peer that does not read) is cancelled (it reconnects and gets a full
 * snapshot). HTTP/2 keepalive pings every opts.keepalive_ms; at most 16
 * streams per connection; a resource quota caps the server's buffers.
 */
#ifndef MESH_GRPC_SERVER_H
#define MESH_GRPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/k8s_pod.h"

/* grpc.health.v1 ServingStatus values. */
#define MESH_GRPC_HEALTH_SERVING 1
#define MESH_GRPC_HEALTH_NOT_SERVING 2
#define MESH_GRPC_HEALTH_SERVICE_UNKNOWN 3

struct mesh_grpc_server_opts {
    const char *addr;    /* "host:port", "[v6]:port" or ":port" (all interfaces); port 0 = any */
    int max_streams;     /* Watch streams at once; 0 = 128 */
    int max_pod_streams; /* of which VIEW_PODS subscribers; 0 = 64 */
    int send_timeout_ms; /* a message not taken by the peer within this drops it; 0 = 10000 */
    int heartbeat_ms;    /* VIEW_PODS: a message at least this often; 0 = 2000 */
    int keepalive_ms;    /* HTTP/2 PING interval; 0 = 10000 */
    int tick_ms;         /* coalescing window: streams are looked at this often; 0 = 50 */
    /* Health of `service` (borrowed): MESH_GRPC_HEALTH_*; called on the
     * server thread, must not block. why receives a one-line reason. */
    int (*health)(void *ctx, const char *service, char *why, size_t cap);
    /* Optional: a Watch subscriber or a Get waiting for the topology was
     * accepted (server thread; must not block): the owner should hand over
     * its pod set, or build the topology (mesh_grpc_server_topology_wanted),
     * soon. */
    void (*on_subscriber)(void *ctx);
    void *ctx;
};

struct mesh_grpc_server_stats {
    uint64_t calls;       /* calls accepted */
    uint64_t streams;     /* Watch streams open now */
    uint64_t pod_streams; /* VIEW_PODS subscribers now */
    uint64_t refused;     /* streams refused for the limits */
    uint64_t dropped;     /* streams cancelled for not reading */
    uint64_t messages;    /* stream messages sent */
    uint64_t bytes;       /* stream and reply payload bytes sent */
};

struct mesh_grpc_server;

/* Bind and start serving on a new thread. *out_port receives the bound
 * port. Owned (mesh_grpc_server_stop) or NULL: -MESH_E_CONFIG for an
 * address gRPC cannot parse, -MESH_E_IO when it cannot listen. */
struct mesh_grpc_server *mesh_grpc_server_start(const struct mesh_grpc_server_opts *opts,
                                                int *out_port, struct mesh_err *err);
/* Cancel every call, stop the thread, free. NULL does nothing. */
void mesh_grpc_server_stop(struct mesh_grpc_server *s);

/* The current TopologySnapshot, serialized (pb borrowed, copied; the owner
 * vouches that it is one); served by Get and sent to VIEW_TOPOLOGY watchers.
 * It is no longer out of date (below). */
void mesh_grpc_server_set_topology(struct mesh_grpc_server *s, const uint8_t *pb, size_t len);

/* The owner published a topology newer than the one set: building the
 * message is left until someone wants it. A Get waits (up to 5 s, then
 * UNAVAILABLE) until the next mesh_grpc_server_set_topology; watchers keep
 * the last one until then. */
void mesh_grpc_server_topology_changed(struct mesh_grpc_server *s);

/* True when the topology set is out of date and someone wants it: a Get
 * is waiting or a VIEW_TOPOLOGY watcher is open (thread-safe). */
bool mesh_grpc_server_topology_wanted(struct mesh_grpc_server *s);

/* The current pod set for VIEW_PODS: n packed records (borrowed, copied;
 * any order), the resourceVersion they reflect (borrowed), whether the
 * source is synced, its relay depth (0 = own API watch). Sent to
 * subscribers as the difference from what each last got. */
void mesh_grpc_server_set_pods(struct mesh_grpc_server *s,
                               const struct mesh_k8s_pod_rec *const *recs, size_t n, const char *rv,
                               bool synced, int depth);
/* The source showed progress at mono_ms (CLOCK_MONOTONIC ms): subscribers
 * see the age in every message. */
void mesh_grpc_server_note_progress(struct mesh_grpc_server *s, int64_t mono_ms);

/* Set the namespace and selector VIEW_PODS subscribers must match (both
 * borrowed, copied). Until called, VIEW_PODS streams are refused with
 * UNAVAILABLE (the server starts before the sidecar knows its pod). */
void mesh_grpc_server_set_scope(struct mesh_grpc_server *s, const char *ns, const char *selector);

/* Counters (thread-safe). */
void mesh_grpc_server_stats(struct mesh_grpc_server *s, struct mesh_grpc_server_stats *out);

#endif
