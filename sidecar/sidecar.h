/*
 * sidecar.h - tpumesh-sidecar's context and the contracts between its files
 * (docs/DESIGN.md §1, §4-§7; issue 5):
 *
 *   main.c      flags -> context, identity, threads, the event loop, SIGTERM
 *   opts.c      command line + TPUMESH_* variables -> struct mesh_sidecar_opts
 *   identity.c  own pod (GET), selector derivation, the init container's
 *               topology.json (slice, job name, generation)
 *   expected.c  the expected worker count: flag, annotation, the owning
 *               Job / JobSet / StatefulSet (one GET each), the slice
 *   topology.c  store -> workers -> render -> publish, only when outputs change;
 *               transition logs; the status the HTTP server serves
 *   metrics.c   the /metrics text and the publish-latency ring behind it
 *   http.c      /healthz /readyz /metrics /topology on the hardened
 *               libwebsockets server of io/httpd.h
 *
 * Threads: the informer runs on its own thread (k8s_informer.h); its
 * callbacks only bump counters and note when the change arrived (chg_mu);
 * the HTTP server runs lws_service on a second thread and only reads
 * `struct mesh_sidecar_status` under its mutex;
 * everything else (recompute, publish, logging of transitions) happens on
 * the main thread, woken by the informer's notify fd or by signalfd.
 */
#ifndef MESH_SIDECAR_H
#define MESH_SIDECAR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/k8s_pod.h"
#include "core/logfmt.h"
#include "core/model.h"
#include "core/pace.h"
#include "core/render.h"
#include "core/workers.h"

#define MESH_SIDECAR_SELECTOR_MAX 1024
#define MESH_SIDECAR_LAT_RING 1024

/* --watch-mode (docs/DESIGN.md §9). */
#define MESH_SIDECAR_WATCH_AUTO 0
#define MESH_SIDECAR_WATCH_DIRECT 1
#define MESH_SIDECAR_WATCH_RELAY 2
/* --watch-mode auto uses relays from this many expected workers on
 * (docs/scale.md explains the choice). */
#define MESH_SIDECAR_RELAY_AUTO_MIN 33

/* Options after merging flags > TPUMESH_* variables > defaults. Strings
 * owned (mesh_sidecar_opts_cleanup); NULL = not given. */
struct mesh_sidecar_opts {
    char *out_dir;    /* default /var/run/tpumesh */
    char *apiserver;  /* --apiserver URL */
    char *kubeconfig; /* --kubeconfig (else $KUBECONFIG) */
    char *token_file;
    char *ca_file;
    char *ns;             /* --namespace */
    char *selector;       /* --selector */
    char *pod_name;       /* --pod-name, else $POD_NAME */
    char *http_addr;      /* default ":9431" */
    char *grpc_addr;      /* default ":9432": grpc.health.v1 + tpumesh.v1.Topology */
    char *job_name;       /* DTENSOR_JOB_NAME override */
    int port;             /* DTensor port, default 10000 */
    int expected_workers; /* 0 = not given */
    int stall_timeout_s;  /* watch with no byte for this long is reconnected, default 90 */
    int stuck_limit_s;    /* /healthz fails after this long without API progress, default 900 */
    enum mesh_addr_mode address_mode;
    int watch_mode;        /* MESH_SIDECAR_WATCH_*, default auto */
    int relay_fanout;      /* default 64 */
    int relay_fallback_s;  /* default 10 */
    int watch_max_clients; /* WebSocket /watch clients at once, default 16 */
    bool verify_dns;
    /* Given by flag or TPUMESH_* variable (not the default): then the own
     * pod's tpumesh.dev/port / tpumesh.dev/address-mode annotations do not
     * apply. */
    bool port_given;
    bool address_mode_given;
    enum mesh_log_level log_level;
    enum mesh_log_format log_format;
};

/* Parse argv and the environment into *out (initialised here; release with
 * mesh_sidecar_opts_cleanup even after a failure). Returns 0, 1 when --help
 * or --version printed its text to stdout (exit 0), or -MESH_E_CONFIG naming
 * the flag or variable and the accepted values (exit 2). */
int mesh_sidecar_opts_parse(int argc, char **argv, struct mesh_sidecar_opts *out,
                            struct mesh_err *err);
void mesh_sidecar_opts_cleanup(struct mesh_sidecar_opts *o);
/* Before the parse: the log format and level asked for (mesh_cliopts_log_setup). */
void mesh_sidecar_log_setup(int argc, char **argv);

/* The port rules (core/ports.h) for the DTensor port (named port_what in
 * the message: where it came from), --http-addr and --grpc-addr: 0 or
 * -MESH_E_CONFIG naming the rule (exit 2). */
int mesh_sidecar_check_ports(const struct mesh_sidecar_opts *o, const char *port_what,
                             struct mesh_err *err);

/* What the HTTP thread serves; guarded by mesh_sidecar.mu. */
struct mesh_sidecar_status {
    bool synced;        /* first LIST applied */
    bool have_topology; /* out_dir/topology.json is what this process published
                           (or found current): /topology may serve it */
    bool ready;         /* a complete topology is published and current */
    char reason[MESH_WORKERS_REASON_MAX + 64]; /* one line: why not ready, or a summary */
    uint64_t generation;
    uint64_t publishes; /* publishes that replaced at least one file */
    uint64_t publish_errors;
    uint64_t publishes_coalesced;       /* recomputes whose publish was held back (core/pace.h) */
    uint64_t publishes_coalesced_ready; /* of them, readiness-only changes of a complete
                                           topology */
    struct mesh_pace pace;              /* the pacing of routine publishes (CLOCK_MONOTONIC ms) */
    double last_publish_time;           /* seconds since the epoch, 0 = never */
    int expected, present, ready_workers, addressed;
    int64_t last_progress_ms; /* CLOCK_MONOTONIC ms of the last API progress seen */
    int64_t loop_tick_ms;     /* CLOCK_MONOTONIC ms of the main loop's last tick */
    /* Event-arrival to files-renamed durations of the last
     * MESH_SIDECAR_LAT_RING publishes, in microseconds (/metrics quantiles). */
    uint32_t lat_us[MESH_SIDECAR_LAT_RING];
    size_t nlat;
};

struct mesh_publish_dir;

/* Slices' Jobs remembered as checked (jobid.c). */
#define MESH_SIDECAR_JOB_SLICES_MAX 64

/* Which job this pod belongs to: its top-level controller (jobid.c). */
struct mesh_sidecar_job {
    bool inited, known;                /* known: the own pod has a controller */
    char kind[MESH_K8S_KIND_MAX];      /* "Job", "StatefulSet", "JobSet", ... */
    char owner_uid[MESH_K8S_UID_MAX];  /* the own pod's controller */
    char jobset_uid[MESH_K8S_UID_MAX]; /* its Job's JobSet, "" = none or unknown */
    pthread_mutex_t mu;                /* guards slices and others */
    char slices[MESH_SIDECAR_JOB_SLICES_MAX][MESH_K8S_UID_MAX]; /* Jobs checked to be the
                                                                   JobSet's */
    size_t nslices;
    char others[MESH_SIDECAR_JOB_SLICES_MAX][MESH_K8S_UID_MAX]; /* Jobs checked NOT to be */
    size_t nothers, next_other;
    struct mesh_k8s_client *client; /* JobSet pods: the informer thread's checks (owned) */
};

/* Records a subscriber checked against the API (relay.c): the coordinator
 * (rank 0) and its own, by name and packed bytes, so that an unchanged
 * record costs no second GET. */
#define MESH_SIDECAR_VERIFY_MAX 8
struct mesh_sidecar_verify {
    struct mesh_k8s_pod_rec *ok[MESH_SIDECAR_VERIFY_MAX]; /* owned */
    size_t n, next;
};

/* Process context (docs/STYLE.md R7): one per process, created by main. */
struct mesh_sidecar {
    struct mesh_sidecar_opts opts;

    /* Identity and configuration resolved at start-up (identity.c). */
    char ns[MESH_K8S_NS_MAX];
    char pod_name[MESH_POD_MAX];
    struct mesh_k8s_pod self;                 /* own pod's record */
    char selector[MESH_SIDECAR_SELECTOR_MAX]; /* label selector used for peers */
    bool selector_own; /* made of labels this pod carries: it selects this pod */
    char owner_filter[MESH_K8S_LABEL_MAX]; /* StatefulSet name pods must be owned by, or "" */
    struct mesh_sidecar_job job;           /* the own job's controller (jobid.c) */
    bool index_labeled; /* the own index is a label (Kubernetes >= 1.28), not only an annotation */
    bool have_slice;
    struct mesh_slice slice;
    char job_name[MESH_JOB_NAME_MAX];             /* "" = DTensor's default */
    int expected;                                 /* 0 = unknown: never complete (expected.c) */
    char expected_source[MESH_RENDER_SOURCE_MAX]; /* "flag", "annotation", "job", "jobset",
                                                     "statefulset", "slice"; "" = unknown */
    int per_slice;                                /* multi-slice JobSets, 0 = derive */
    uint64_t generation;                          /* last generation on disk / published */

    /* Main-thread topology state (topology.c). */
    bool have_cur; /* a worker list was computed at least once */
    /* A set was published or found current on disk: /topology may serve
     * the file. */
    bool have_last;
    struct mesh_publish_dir *pub; /* the out-dir's publisher, opened on the first publish */
    bool last_complete;
    char last_reason[MESH_WORKERS_REASON_MAX + 64];
    char **logged; /* problem lines already logged once */
    size_t nlogged;
    bool publish_pending; /* the last publish failed: retry on the next tick */
    /* Coalescing (core/pace.h), main thread, CLOCK_MONOTONIC ms. */
    struct mesh_pace pace; /* when the next routine publish may go out */
    bool pub_complete;     /* the last publish was of a complete topology */
    int64_t hold_until_ms; /* a publish is held back until then: recompute; 0 = none */
    uint64_t held;         /* recomputes held back since the last publish */
    int64_t held_since_ms; /* when the first of them was */
    bool ready_held;       /* a readiness-only change of a complete topology is held back */
    bool flush;            /* publish whatever is held back (SIGTERM) */
    uint64_t *dns_ok;      /* --verify-dns: hashes of (host, ip) pairs seen resolving, sorted */
    size_t ndns_ok;

    /* Counters bumped by informer callbacks (informer thread). */
    atomic_uint_fast64_t ev_added, ev_modified, ev_deleted, syncs, changes;
    /* Of `changes`, the updates that changed nothing but a pod's Ready
     * condition (the relay's changes are never counted here). */
    atomic_uint_fast64_t ready_changes;
    uint64_t changes_seen, ready_seen; /* main thread: both at the last recompute */
    /* Main thread: what the last recompute spent, in microseconds (the
     * debug line of each publish): collecting the store and building the
     * worker list; rendering the set and comparing it with the disk, plus
     * topology.json for the next generation; writing and renaming. */
    int64_t cost_workers_us, cost_render_us, cost_write_us;
    int64_t publish_wall_ms; /* wall clock of the recompute publishing (metrics) */
    int64_t
        renamed_us; /* CLOCK_MONOTONIC us when the last publish became visible (..data swapped) */
    /* The recompute in progress measures its publish from here (CLOCK_MONOTONIC us): the
     * arrival of the earliest change it carries (the last byte of its watch event or
     * LIST), else, for a retry, the main loop's wake-up. */
    int64_t publish_from_us;
    bool publish_from_event;
    int self_hint; /* main thread: this pod's slot at the last recompute, -1 = none */
    /* Main thread: the worker list the files on disk show (w.workers ==
     * NULL: none yet) and the render input it was published with
     * (pub_in.workers = w.workers); grpc.c builds the Topology message from
     * them. */
    struct mesh_workers w;
    struct mesh_render_input pub_in;
    bool have_pub;
    atomic_uint_fast64_t w_built; /* recomputes that built the worker list */
    /* chg_mu makes "note the arrival time, bump `changes`" (callbacks) and
     * "read `changes`, take the arrival time" (recompute) atomic pairs, so
     * a recompute never takes a time whose change it will not see, nor
     * leaves behind a time whose change it saw. */
    pthread_mutex_t chg_mu;
    int64_t pending_since_us; /* earliest arrival (mesh_k8s_informer_event_time_us) of
                                 the changes not yet taken by a recompute; 0 = none */

    /* The API watch (main.c: mesh_sidecar_direct_start/stop). NULL while
     * the sidecar follows its relay; swapped under mu (the HTTP thread
     * reads its counters). */
    struct mesh_k8s_informer *inf;
    struct mesh_k8s_client *wclient; /* the informer's client */
    pthread_t inf_thread;
    bool inf_running;
    uint64_t api_progress; /* main loop: informer counters at the last tick */
    int64_t relay_src_ms;  /* main loop: when the followed relay's source last moved (mono ms) */
    uint64_t api_watches, api_failures; /* main loop: watches started, requests failed */

    /* Relay mode (relay.c). */
    bool relay_mode;                  /* resolved from --watch-mode at start-up */
    long rank;                        /* place in the relay tree, -1 = none */
    int relay_per_slice;              /* JobSets: hosts per slice the rank uses */
    char relay_kind[8];               /* "job", "jobset", "sts": which index label ranks pods */
    struct mesh_sidecar_relay *relay; /* subscriber side; NULL for the root and direct mode */
    atomic_bool following; /* the worker list comes from the relay (main thread writes) */
    int wake_fd;           /* eventfd the relay thread writes after a change */
    uint64_t fallbacks;    /* times the API watch was started as a fallback (under mu) */

    /* gRPC server (grpc.c; NULL until started) and what it was last given. */
    struct mesh_grpc_server *grpc;
    struct mesh_sidecar_http *http; /* HTTP server (NULL until started) */
    uint64_t http_gen;              /* generation /watch was last told about */
    uint64_t grpc_gen;              /* generation of the topology it serves, 0 = none */
    uint64_t grpc_told;             /* generation it was told is published */
    uint64_t grpc_pods_changes;     /* `changes` when the pod set was last handed over */
    bool grpc_pods_set;

    pthread_mutex_t mu;
    struct mesh_sidecar_status st;
};

/* ---- identity.c ---- */

/* GET the own pod (retrying transient API errors until *stop becomes
 * non-zero), fill ctx->self, ns and pod_name, and derive the selector when
 * --selector is not given. -MESH_E_CONFIG when there is no pod name, the pod
 * record is invalid, or no selector can be derived (message says which flag
 * to pass); -MESH_E_IO when stopped. client borrowed. */
struct mesh_k8s_client;
int mesh_sidecar_identify(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          volatile int *stop, struct mesh_err *err);

/* Read out_dir/topology.json left by tpumesh-init (or a previous run):
 * generation, slice (re-derived with mesh_slice_derive) and job name. A
 * missing file is fine (returns 0, nothing set); an unusable one is logged
 * and ignored. Then settle the port and address mode (flag > own pod's
 * annotation > default). */
int mesh_sidecar_load_state(struct mesh_sidecar *ctx, struct mesh_err *err);

/* The peer selector must be valid for the API and select this pod (one
 * LIST with a metadata.name field selector; none when it is made of this
 * pod's own labels, selector_own). 0, or -MESH_E_CONFIG (exit 2)
 * with the API's message for a 400 or naming the selector when it does not
 * select this pod; other failures are retried until *stop (-MESH_E_IO). */
int mesh_sidecar_check_selector(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                                volatile int *stop, struct mesh_err *err);

/* Replace the /readyz reason (takes mu), printf-style. */
void mesh_sidecar_status_reason(struct mesh_sidecar *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- jobid.c ---- */

/* Fill ctx->job from ctx->self (after identify): the own controller, and
 * for a JobSet's pod its JobSet (one GET of the own Job; a failure is
 * logged and leaves only the own Job as this job). Returns 0. */
int mesh_sidecar_job_identify(struct mesh_sidecar *ctx, struct mesh_k8s_client *client);
void mesh_sidecar_job_cleanup(struct mesh_sidecar *ctx);
/* Is pod p (borrowed) of this pod's job, from its ownerReferences alone?
 * 0 yes; -MESH_E_INVAL no (why says what differed); 1 = maybe: p's
 * controller is another Job and this pod is in a JobSet (ask
 * mesh_sidecar_job_same). No I/O; any thread. */
int mesh_sidecar_job_same_quick(const struct mesh_sidecar *ctx, const struct mesh_k8s_pod *p,
                                char *why, size_t cap);
/* As above, answering "maybe" with one GET of p's Job (client borrowed;
 * the caller's thread), remembered when it is the JobSet's. 0 yes;
 * -MESH_E_INVAL no (why); another negative code when the API could not
 * tell (why). Thread-safe. */
int mesh_sidecar_job_same(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          const struct mesh_k8s_pod *p, char *why, size_t cap);
/* As mesh_sidecar_job_same for the informer thread (direct mode), on
 * ctx->job.client; a Job found not to be the JobSet's is remembered too,
 * so a stranger's pods cost one GET per Job, not one per event. */
int mesh_sidecar_job_same_direct(struct mesh_sidecar *ctx, const struct mesh_k8s_pod *p, char *why,
                                 size_t cap);

/* ---- expected.c ---- */

/* Choose ctx->expected and ctx->expected_source (after identify and
 * load_state): --expected-workers, the own pod's annotation, the owning
 * controller (one GET each on the own pod's owners; transient failures
 * retried until *stop), else, when the API refuses or the owner is gone,
 * the slice's host count x slices; else 0 (unknown: never complete, logged
 * once). May set ctx->per_slice. Returns 0. client borrowed. */
int mesh_sidecar_expected(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          volatile int *stop, struct mesh_err *err);

/* ---- topology.c ---- */

/* Recompute from the informer's store and publish when an output changed
 * (generation + 1); update ctx->st. now_ms = wall clock ms (for the
 * last-publish metric); woke_us = CLOCK_MONOTONIC us when the main loop woke
 * up. A publish records its latency from the arrival of the earliest change
 * it carries (mesh_k8s_informer_event_time_us), or from woke_us when no
 * arrival is known (a retry). Publish failures are logged once and retried
 * by the next call, keeping the arrival time. Returns 0, or a negative code
 * after a failure already logged. Main thread. */
int mesh_sidecar_recompute(struct mesh_sidecar *ctx, int64_t now_ms, int64_t woke_us);

/* Record one publish latency in microseconds (main thread; takes mu). */
void mesh_sidecar_note_latency(struct mesh_sidecar *ctx, int64_t usec);

/* Store extraction callbacks for the informer (ctx = struct mesh_sidecar).
 * A stored record is a packed struct mesh_k8s_pod_rec (k8s_pod.h, one
 * allocation, mesh_free); extract returns NULL for a pod another owner
 * controls (--selector derived from a StatefulSet). */
void *mesh_sidecar_extract(void *ctx, const cJSON *obj);
void mesh_sidecar_record_free(void *ctx, void *rec);
bool mesh_sidecar_record_equal(void *ctx, const void *a, const void *b);
void mesh_sidecar_on_add(void *ctx, const char *key, const void *rec);
void mesh_sidecar_on_update(void *ctx, const char *key, const void *old_rec, const void *new_rec);
void mesh_sidecar_on_delete(void *ctx, const char *key, const void *old_rec);
void mesh_sidecar_on_synced(void *ctx, size_t count);

/* Free the main-thread topology state. */
void mesh_sidecar_topology_cleanup(struct mesh_sidecar *ctx);

/* The records of the current source (informer or relay store), borrowed
 * while its lock is held; v itself is owned (mesh_free). */
struct mesh_sidecar_recs {
    const struct mesh_k8s_pod_rec **v;
    size_t n, cap;
};
/* mesh_k8s_informer_foreach callback (c = struct mesh_sidecar_recs): append rec. */
int mesh_sidecar_recs_add(void *c, const char *key, const char *rv, const void *rec);

/* ---- health.c ---- */

/* The gRPC health service name whose status is readiness. */
#define MESH_SIDECAR_GRPC_SERVICE "tpumesh.v1.Topology"

/* Liveness (/healthz, gRPC service ""): true when alive; why receives "ok"
 * or the one-line reason. Takes ctx->mu. Any thread. */
bool mesh_sidecar_is_live(struct mesh_sidecar *ctx, char *why, size_t cap);
/* Readiness (/readyz, gRPC service "tpumesh.v1.Topology"): true while a
 * complete topology is published; why receives the status line. */
bool mesh_sidecar_is_ready(struct mesh_sidecar *ctx, char *why, size_t cap);
/* grpc_server.h health function (ctx = struct mesh_sidecar). */
int mesh_sidecar_grpc_health(void *ctx, const char *service, char *why, size_t cap);

/* ---- grpc.c ---- */

/* After a recompute (main thread): hand the gRPC server the topology
 * when its generation changed, and the pod set when relay subscribers
 * exist and the pods changed. No-op without a server. */
void mesh_sidecar_grpc_update(struct mesh_sidecar *ctx);
/* grpc_server.h on_subscriber: wake the main loop (ctx->wake_fd), which
 * then hands the server the pod set. Any thread. */
void mesh_sidecar_grpc_wake(void *ctx);
/* Append the gRPC server's metrics (Prometheus text) to b. Any thread. */
struct mesh_buf;
void mesh_sidecar_grpc_metrics(struct mesh_sidecar *ctx, struct mesh_buf *b);

/* ---- relay.c ---- */

struct mesh_sidecar_relay;
struct mesh_relay_status;
struct mesh_relay_store;
/* Decide direct or relay mode and this pod's rank (after identity and the
 * expected count are known); logs the choice. */
int mesh_sidecar_relay_plan(struct mesh_sidecar *ctx);
/* Subscribers (rank > 0): start the relay thread. grpc_port: the port
 * relays listen on (this sidecar's own). No-op otherwise. */
int mesh_sidecar_relay_start(struct mesh_sidecar *ctx, int grpc_port, struct mesh_err *err);
void mesh_sidecar_relay_stop(struct mesh_sidecar *ctx);
/* Main loop, every iteration: follow the relay, fall back, return. */
void mesh_sidecar_relay_tick(struct mesh_sidecar *ctx);
/* The relay store's check (relay_client.h mesh_relay_check_fn): the
 * coordinator's and the own record a message upserts, against the API.
 * vr = the struct mesh_sidecar_relay. Relay thread. */
int mesh_sidecar_relay_check(void *vr, struct mesh_k8s_pod_rec *const *up, size_t n,
                             struct mesh_err *err);
/* The current source has a full set of pods (main thread). */
bool mesh_sidecar_source_synced(struct mesh_sidecar *ctx);
/* One line: which source this pod follows and how far behind it is. */
void mesh_sidecar_source_describe(struct mesh_sidecar *ctx, char *out, size_t cap);
/* Copy of the relay session status; *out_have false without a relay. */
void mesh_sidecar_relay_status(struct mesh_sidecar *ctx, struct mesh_relay_status *out,
                               bool *out_have);
/* The relay's record store, or NULL. */
struct mesh_relay_store *mesh_sidecar_relay_store(struct mesh_sidecar *ctx);

/* ---- main.c ---- */

/* A Kubernetes client from the options (owned, mesh_k8s_client_free), or
 * NULL with err. */
struct mesh_k8s_client *mesh_sidecar_client_new(const struct mesh_sidecar_opts *o,
                                                struct mesh_err *err);
/* Start / stop the API watch (informer thread). Main thread. */
int mesh_sidecar_direct_start(struct mesh_sidecar *ctx, struct mesh_err *err);
void mesh_sidecar_direct_stop(struct mesh_sidecar *ctx);

/* ---- http.c ---- */

struct mesh_sidecar_http;

/* /topology transfers in flight at once; more are answered 503 + Retry-After. */
#define MESH_SIDECAR_TOPOLOGY_TRANSFERS 8

/* Start the HTTP server on addr ("[host]:port", ":port", "host:port"; port 0
 * = any free port) on its own thread. *out_port receives the bound port.
 * Owned (mesh_sidecar_http_stop) or NULL with -MESH_E_CONFIG (bad address)
 * or -MESH_E_IO (cannot listen). ctx borrowed for the server's life. */
struct mesh_sidecar_http *mesh_sidecar_http_start(struct mesh_sidecar *ctx, const char *addr,
                                                  int *out_port, struct mesh_err *err);
/* Stop the server thread (closing /watch clients with 1001) and free it.
 * NULL does nothing. */
void mesh_sidecar_http_stop(struct mesh_sidecar_http *h);
/* A new generation may be published: /watch clients get it now instead of
 * at the server's next one-second check. Any thread; NULL does nothing. */
void mesh_sidecar_http_notify(struct mesh_sidecar_http *h);

/* Append the sidecar's /metrics samples (Prometheus text, core/prom.h) to b:
 * the informer, the loop, the published topology and the gRPC server. Takes
 * ctx->mu itself. */
void mesh_sidecar_metrics(struct mesh_sidecar *ctx, struct mesh_buf *b);

#endif
