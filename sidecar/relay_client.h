/*
 * relay_client.h - the subscriber side of relay mode (docs/DESIGN.md §9): a
 * tpumesh.v1.Topology/Watch (VIEW_PODS) stream from a relay sidecar on the
 * gRPC C core, applied to a local store of pod records.
 *
 * A message is bounded before it is decoded: gRPC's receive limit and a
 * memory quota follow the job's expected workers (mesh_relay_max_message),
 * and its wire format is scanned (mesh_topo_msg_scan_pods) for more
 * records than the job can need. Every record is then checked as if it
 * came from the API (core/topo_msg.h), and the caller's check (the
 * coordinator's and own record against the API) runs before anything is
 * applied; one record the API rules refuse, a duplicate name, a delta
 * before the first full set, or a failed check make the whole message
 * refused and end the session (the store keeps the last accepted state;
 * the caller falls back to its own watch). A relay is a peer, not an
 * authority.
 *
 * Threads: mesh_relay_client_run blocks on the calling thread; the store
 * may be read from any thread under its lock, and its status copied at any
 * time.
 */
#ifndef MESH_RELAY_CLIENT_H
#define MESH_RELAY_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/k8s_pod.h"
#include "core/topo_msg.h"

struct mesh_relay_store;

/* What a caller needs to decide whether to follow the relay. */
struct mesh_relay_status {
    bool connected;        /* a session is streaming now */
    bool synced;           /* the store holds a full set (from this or an earlier session) */
    int64_t last_good_ms;  /* CLOCK_MONOTONIC ms of the last message from a connected, synced,
                              not lagging relay; 0 = never */
    int64_t last_msg_ms;   /* last message of any kind, 0 = never */
    int64_t source_age_ms; /* the relay's own source age in its last message */
    int depth;             /* the relay's depth in its last message */
    char rv[MESH_TOPO_MSG_RV_MAX];
    uint64_t sessions, messages, bytes, applied, refused;
    uint64_t ready_applied; /* of `applied`, messages that changed only peers' Ready flags */
    char target[64];
    char error[MESH_ERR_MSG_MAX]; /* why the last session ended, "" = none yet */
};

/* A new, empty store. Owned (mesh_relay_store_free). */
struct mesh_relay_store *mesh_relay_store_new(void);
void mesh_relay_store_free(struct mesh_relay_store *s);
void mesh_relay_store_lock(struct mesh_relay_store *s);
void mesh_relay_store_unlock(struct mesh_relay_store *s);
/* Records (lock held; borrowed until the lock is released). */
size_t mesh_relay_store_count(const struct mesh_relay_store *s);
const struct mesh_k8s_pod_rec *mesh_relay_store_at(const struct mesh_relay_store *s, size_t i);
/* End the session running on s now (thread-safe; after setting its
 * opts' *stop): its call is cancelled. */
void mesh_relay_store_cancel(struct mesh_relay_store *s);
/* Copy of the status (thread-safe). */
void mesh_relay_store_status(struct mesh_relay_store *s, struct mesh_relay_status *out);
/* Apply one packed WatchResponse (buf borrowed) as a session does: 0, or
 * -MESH_E_INVAL / -MESH_E_PARSE / -MESH_E_TOOBIG when it is refused (the
 * store is unchanged). *out_changed tells whether the records changed.
 * Exposed for tests and the fuzz target. first = the session's first
 * message was not yet applied (a delta is then refused). */
int mesh_relay_store_apply(struct mesh_relay_store *s, const uint8_t *buf, size_t len, bool first,
                           int lag_ms, bool *out_changed, struct mesh_err *err);

/* Called with the checked records a message upserts (borrowed, sorted by
 * name) before anything is applied: 0 to apply, a negative code (err set)
 * to refuse the message. Runs on the session's thread, may block. */
typedef int (*mesh_relay_check_fn)(void *ctx, struct mesh_k8s_pod_rec *const *up, size_t n,
                                   struct mesh_err *err);

/* Bound what one message may hold (before it is unpacked: a message that
 * says it holds more records is refused without decoding them) and set the
 * check above (NULL = none). max_pods 0 = MESH_TOPO_MSG_PODS_MAX. */
void mesh_relay_store_set_limits(struct mesh_relay_store *s, int max_pods,
                                 mesh_relay_check_fn check, void *check_ctx);
/* The most records a message may carry for a job of `expected` workers
 * (0 = unknown), and the gRPC receive limit that follows from it. */
size_t mesh_relay_max_records(int expected);
size_t mesh_relay_max_message(int expected);

struct mesh_relay_client_opts {
    const char *target;        /* "ip:port" of the relay (borrowed) */
    const char *ns;            /* the subscriber's namespace and selector: the relay */
    const char *selector;      /* must follow the same pods */
    const char *subscriber;    /* this pod's name, for the relay's log */
    int silence_ms;            /* no message this long ends the session (0 = 6000) */
    int lag_ms;                /* a relay whose source_age_ms exceeds this is lagging (0 = off) */
    int max_pods;              /* the job's expected workers (0 = unknown): bounds messages */
    bool wait_ready;           /* the relay is starting: a refused connection is retried within
                                  the session (every 100-300 ms) until silence_ms, not an end */
    mesh_relay_check_fn check; /* optional, see mesh_relay_store_set_limits */
    void *check_ctx;
    atomic_int *stop;          /* non-zero: end the session (set it, then
                                  mesh_relay_store_cancel) */
    void (*notify)(void *ctx); /* after every message that changed the records */
    void *ctx;
};

/* One session: connect, subscribe, apply messages until the stream ends or
 * fails, a message is refused, the relay is silent for silence_ms, or
 * *stop. Returns 0 when stopped; else -MESH_E_API (unreachable, stream
 * ended: err names the gRPC status), -MESH_E_TIMEOUT (silent) or the
 * refusal's code (err says which record and rule). The store's status
 * records the outcome too. */
int mesh_relay_client_run(const struct mesh_relay_client_opts *o, struct mesh_relay_store *s,
                          struct mesh_err *err);

#endif
