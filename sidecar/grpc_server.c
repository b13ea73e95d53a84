/*
 * grpc_server.c - grpc.health.v1.Health and tpumesh.v1.Topology on the gRPC
 * C core server API (grpc_server.h).
 *
 * One completion queue, one thread. Every call is a struct call; each
 * batch started on it is tagged with one of its struct tag members, so a
 * completion names the call and the operation. A call is freed when none
 * of its batches is outstanding. Streams (Health/Watch, Topology/Watch)
 * are on a list the thread walks every tick (opts.tick_ms; no tick while
 * the list is empty, the thread then sleeps until a call comes): that walk
 * sends what changed since a stream's last message, at most one message in
 * flight per stream, and cancels streams whose message has been in flight
 * longer than opts.send_timeout_ms. Nothing is queued per stream: a stream
 * remembers only what it last got (a health status, a topology version, a
 * reference to the pod set it last got), so a slow reader costs one
 * message and one reference, whatever happens meanwhile.
 *
 * Wire formats: grpc.health.v1 (proto/grpc/health/v1/health.proto) and
 * tpumesh.v1 (proto/tpumesh/v1/topology.proto), packed and unpacked with
 * protobuf-c. VIEW_PODS sends, per message, the records added or changed
 * and the names removed since the stream's last message (a full set with
 * `reset` first), plus synced / resourceVersion / source age / depth.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "core/mem.h"
#include "core/topo_msg.h"
#include "grpc/health/v1/health.pb-c.h"
#include "io/grpc_util.h"
#include "grpc_server.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "grpc"
#define REQUEST_MAX 4096
#define SERVICE_MAX 128
#define PEER_MAX 64         /* an IP address as text */
#define PODS_PER_PEER_MAX 4 /* VIEW_PODS streams per peer address (a pod needs one) */
#define READY_BATCH_MS 1000 /* a stream gets readiness-only changes at most this often */

#define M_HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define M_HEALTH_WATCH "/grpc.health.v1.Health/Watch"
#define M_TOPO_GET "/tpumesh.v1.Topology/Get"
#define M_TOPO_WATCH "/tpumesh.v1.Topology/Watch"

enum op { OP_NEW, OP_RECV, OP_CLOSE, OP_SEND, OP_STATUS, OP_SHUTDOWN };
enum kind { K_NONE, K_HEALTH_CHECK, K_HEALTH_WATCH, K_TOPO_GET, K_TOPO_WATCH, K_UNKNOWN };

struct call;
struct tag {
    enum op op;
    struct call *c;
};

/* A shared, immutable blob (the current topology in two encodings). */
struct blob {
    int refs;
    uint64_t version;
    uint8_t *get; /* TopologySnapshot */
    size_t get_len;
    uint8_t *watch; /* WatchResponse{topology} */
    size_t watch_len;
};

/* A shared, immutable pod set, sorted by name. */
struct podset {
    int refs;
    uint64_t version;
    uint64_t shape; /* the version of the last set that changed more than Ready flags */
    struct mesh_k8s_pod_rec **recs;
    size_t n;
    char rv[MESH_TOPO_MSG_RV_MAX];
    bool synced;
    int depth;
};

struct call {
    struct mesh_grpc_server *s;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    grpc_byte_buffer *send;
    int close_cancelled;
    enum kind kind;
    int pending;    /* batches outstanding */
    bool closed;    /* RECV_CLOSE_ON_SERVER completed */
    bool finishing; /* a status was sent or the call was cancelled */
    bool md_sent;   /* initial metadata sent */
    bool listed;    /* on the stream list */
    bool pods_view;
    bool held; /* VIEW_PODS admitted before this relay had its pods: judged when synced */
    bool sending;
    int64_t send_since, last_msg;
    int health_last;
    char service[SERVICE_MAX];
    char subscriber[64];
    char peer[PEER_MAX]; /* VIEW_PODS: the peer's IP address, canonical text */
    uint64_t topo_sent;
    struct podset *pods_sent;
    bool synced_sent;
    grpc_slice status_details;
    bool have_details;
    struct tag t_new, t_recv, t_close, t_send, t_status;
    struct call *prev, *next;
};

struct mesh_grpc_server {
    struct mesh_grpc_server_opts o;
    char *ns, *selector;
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    atomic_int stop;
    struct call *streams; /* list head (server thread) */
    size_t live_calls;    /* server thread */
    pthread_mutex_t mu;   /* guards topo, topo_stale, topo_wanters, pods, progress_ms, st */
    struct blob *topo;
    bool topo_stale;  /* the owner published since topo was set (it builds on demand) */
    int topo_wanters; /* listed calls that want the topology: Watch VIEW_TOPOLOGY, waiting Gets */
    struct podset *pods;
    uint64_t versions;
    int64_t progress_ms;
    struct mesh_grpc_server_stats st;
    struct tag shut;             /* {OP_SHUTDOWN}: the server has shut down */
    char refused_peer[PEER_MAX]; /* server thread: the last address refused, for the log */
};

/* gRPC's own log lines go through our logger (one line per event). */
static void grpc_log_fn(gpr_log_func_args *args)
{
    if (args->severity == GPR_LOG_SEVERITY_ERROR) {
        mesh_warn("grpc", "%s (%s:%d)", args->message, args->file, args->line);
    } else {
        mesh_debug("grpc", "%s (%s:%d)", args->message, args->file, args->line);
    }
}

/* ---- shared state ---- */

static void blob_unref(struct blob *b)
{
    if (b != NULL && --b->refs == 0) {
        mesh_free(b->get);
        mesh_free(b->watch);
        mesh_free(b);
    }
}

static void podset_unref(struct podset *p)
{
    if (p != NULL && --p->refs == 0) {
        for (size_t i = 0; i < p->n; i++) {
            mesh_free(p->recs[i]);
        }
        mesh_free(p->recs);
        mesh_free(p);
    }
}

/* WatchResponse{topology = pb}: field 1, length-delimited, is the tag byte
 * 0x0a, the length as a varint, then the snapshot's bytes as they are. */
void mesh_grpc_server_set_topology(struct mesh_grpc_server *s, const uint8_t *pb, size_t len)
{
    struct blob *b = mesh_calloc(1, sizeof(*b));
    b->refs = 1;
    b->get = mesh_malloc(len ? len : 1);
    memcpy(b->get, pb, len);
    b->get_len = len;
    b->watch = mesh_malloc(len + 11);
    size_t n = 0;
    b->watch[n++] = 0x0a;
    size_t v = len;
    do {
        uint8_t low = (uint8_t)(v & 0x7f);
        v >>= 7;
        b->watch[n++] = (uint8_t)(low | (v != 0 ? 0x80 : 0));
    } while (v != 0);
    memcpy(b->watch + n, pb, len);
    b->watch_len = n + len;
    pthread_mutex_lock(&s->mu);
    b->version = ++s->versions;
    blob_unref(s->topo);
    s->topo = b;
    s->topo_stale = false;
    pthread_mutex_unlock(&s->mu);
}

void mesh_grpc_server_topology_changed(struct mesh_grpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->topo_stale = true;
    pthread_mutex_unlock(&s->mu);
}

bool mesh_grpc_server_topology_wanted(struct mesh_grpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    bool wanted = s->topo_stale && s->topo_wanters > 0;
    pthread_mutex_unlock(&s->mu);
    return wanted;
}

static int rec_cmp(const void *a, const void *b)
{
    const struct mesh_k8s_pod_rec *x = *(const struct mesh_k8s_pod_rec *const *)a;
    const struct mesh_k8s_pod_rec *y = *(const struct mesh_k8s_pod_rec *const *)b;
    return strcmp(mesh_k8s_pod_rec_name(x), mesh_k8s_pod_rec_name(y));
}

void mesh_grpc_server_set_pods(struct mesh_grpc_server *s,
                               const struct mesh_k8s_pod_rec *const *recs, size_t n, const char *rv,
                               bool synced, int depth)
{
    struct podset *p = mesh_calloc(1, sizeof(*p));
    p->refs = 1;
    p->recs = mesh_calloc(n ? n : 1, sizeof(*p->recs));
    for (size_t i = 0; i < n; i++) {
        if (recs[i] != NULL) {
            p->recs[p->n] = mesh_malloc(recs[i]->size);
            memcpy(p->recs[p->n], recs[i], recs[i]->size);
            p->n++;
        }
    }
    qsort(p->recs, p->n, sizeof(*p->recs), rec_cmp);
    snprintf(p->rv, sizeof(p->rv), "%s", rv != NULL ? rv : "");
    p->synced = synced;
    p->depth = depth;
    pthread_mutex_lock(&s->mu);
    p->version = ++s->versions;
    const struct podset *o = s->pods;
    bool ready_only = o != NULL && o->n == p->n && o->synced == p->synced;
    for (size_t i = 0; ready_only && i < p->n; i++) {
        ready_only = mesh_k8s_pod_rec_equal(o->recs[i], p->recs[i]) ||
                     mesh_k8s_pod_rec_ready_flip(o->recs[i], p->recs[i]);
    }
    p->shape = ready_only ? o->shape : p->version;
    podset_unref(s->pods);
    s->pods = p;
    pthread_mutex_unlock(&s->mu);
}

void mesh_grpc_server_note_progress(struct mesh_grpc_server *s, int64_t mono_ms)
{
    pthread_mutex_lock(&s->mu);
    s->progress_ms = mono_ms;
    pthread_mutex_unlock(&s->mu);
}

void mesh_grpc_server_set_scope(struct mesh_grpc_server *s, const char *ns, const char *selector)
{
    pthread_mutex_lock(&s->mu);
    mesh_free(s->ns);
    mesh_free(s->selector);
    s->ns = mesh_strdup(ns);
    s->selector = mesh_strdup(selector);
    pthread_mutex_unlock(&s->mu);
}

void mesh_grpc_server_stats(struct mesh_grpc_server *s, struct mesh_grpc_server_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

static void bump(struct mesh_grpc_server *s, uint64_t *field, int64_t by)
{
    pthread_mutex_lock(&s->mu);
    *field = (uint64_t)((int64_t)*field + by);
    pthread_mutex_unlock(&s->mu);
}

/* ---- calls ---- */

static void request_new(struct mesh_grpc_server *s);

static void call_free(struct call *c)
{
    struct mesh_grpc_server *s = c->s;
    if (c->listed) {
        if (c->prev != NULL) {
            c->prev->next = c->next;
        } else {
            s->streams = c->next;
        }
        if (c->next != NULL) {
            c->next->prev = c->prev;
        }
        bump(s, &s->st.streams, -1);
        if (c->pods_view) {
            bump(s, &s->st.pod_streams, -1);
        }
        if (c->kind == K_TOPO_GET || (c->kind == K_TOPO_WATCH && !c->pods_view)) {
            pthread_mutex_lock(&s->mu);
            s->topo_wanters--;
            pthread_mutex_unlock(&s->mu);
        }
    }
    if (c->call != NULL) {
        grpc_call_unref(c->call);
    }
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->recv != NULL) {
        grpc_byte_buffer_destroy(c->recv);
    }
    if (c->send != NULL) {
        grpc_byte_buffer_destroy(c->send);
    }
    if (c->have_details) {
        grpc_slice_unref(c->status_details);
    }
    podset_unref(c->pods_sent);
    s->live_calls--;
    mesh_free(c);
}

static void start_batch(struct call *c, grpc_op *ops, size_t n, struct tag *t)
{
    c->pending++;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, t, NULL);
    if (e != GRPC_CALL_OK) {
        /* Only a misuse on our side gets here; the call is given up. */
        mesh_warn(MOD, "start_batch: error %d on %s", (int)e, c->subscriber);
        c->pending--;
        c->finishing = true;
        grpc_call_cancel(c->call, NULL);
    }
}

static void finish(struct call *c, grpc_status_code code, const char *msg)
{
    if (c->finishing) {
        return;
    }
    c->finishing = true;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->md_sent = true;
    }
    c->status_details = grpc_slice_from_copied_string(msg != NULL ? msg : "");
    c->have_details = true;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    n++;
    start_batch(c, ops, n, &c->t_status);
}

static grpc_byte_buffer *buffer_of(const uint8_t *data, size_t len)
{
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* Send one message; unary calls also send the OK status in the same batch. */
static void send_msg(struct call *c, const uint8_t *data, size_t len, bool last)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    c->send = buffer_of(data, len);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->send;
    n++;
    if (last) {
        c->finishing = true;
        c->status_details = grpc_slice_from_static_string("");
        c->have_details = true;
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[n].data.send_status_from_server.status_details = &c->status_details;
        n++;
    }
    c->sending = true;
    c->send_since = c->last_msg = mesh_sys_now_ms();
    pthread_mutex_lock(&c->s->mu);
    c->s->st.messages++;
    c->s->st.bytes += len;
    pthread_mutex_unlock(&c->s->mu);
    start_batch(c, ops, n, last ? &c->t_status : &c->t_send);
}

/* ---- streams ---- */

static void send_health(struct call *c, int status)
{
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    uint8_t buf[16];
    size_t n = grpc__health__v1__health_check_response__pack(&r, buf);
    send_msg(c, buf, n, c->kind == K_HEALTH_CHECK);
}

/* VIEW_PODS: what changed between the set a stream last got (old, may be
 * NULL) and cur, as one WatchResponse. Returns false when there is nothing
 * to say (no record changed, same synced state) and no heartbeat is due. */
static bool pods_message(struct call *c, const struct podset *old, const struct podset *cur,
                         int64_t age_ms, bool heartbeat, uint8_t **out, size_t *out_len)
{
    size_t cap = cur->n + (old != NULL ? old->n : 0) + 1;
    Tpumesh__V1__Pod *pods = mesh_calloc(cap, sizeof(*pods));
    Tpumesh__V1__Pod **up = mesh_calloc(cap, sizeof(*up));
    char **del = mesh_calloc(cap, sizeof(*del));
    size_t nup = 0, ndel = 0;
    bool reset = old == NULL || !old->synced;
    if (cur->synced) {
        size_t i = 0, j = 0;
        while (i < cur->n || (!reset && j < old->n)) {
            int cmp;
            if (reset || j >= old->n) {
                cmp = -1;
            } else if (i >= cur->n) {
                cmp = 1;
            } else {
                cmp = strcmp(mesh_k8s_pod_rec_name(cur->recs[i]),
                             mesh_k8s_pod_rec_name(old->recs[j]));
            }
            if (cmp < 0) {
                mesh_topo_msg_pod_from_rec(&pods[nup], cur->recs[i++]);
                up[nup] = &pods[nup];
                nup++;
            } else if (cmp > 0) {
                del[ndel++] = (char *)mesh_k8s_pod_rec_name(old->recs[j++]);
            } else {
                if (!mesh_k8s_pod_rec_equal(cur->recs[i], old->recs[j])) {
                    mesh_topo_msg_pod_from_rec(&pods[nup], cur->recs[i]);
                    up[nup] = &pods[nup];
                    nup++;
                }
                i++;
                j++;
            }
        }
    }
    bool changed = nup > 0 || ndel > 0 || (cur->synced && reset) || cur->synced != c->synced_sent;
    bool ok = changed || heartbeat;
    if (ok) {
        Tpumesh__V1__PodDelta d = TPUMESH__V1__POD_DELTA__INIT;
        d.reset = cur->synced && reset;
        d.n_upserts = nup;
        d.upserts = up;
        d.n_deleted = ndel;
        d.deleted = del;
        Tpumesh__V1__WatchResponse w = TPUMESH__V1__WATCH_RESPONSE__INIT;
        if (cur->synced && (changed || reset)) {
            w.pods = &d;
        }
        w.synced = cur->synced;
        w.resource_version = (char *)cur->rv;
        w.source_age_ms = age_ms;
        w.depth = cur->depth;
        *out_len = tpumesh__v1__watch_response__get_packed_size(&w);
        *out = mesh_malloc(*out_len ? *out_len : 1);
        tpumesh__v1__watch_response__pack(&w, *out);
    }
    mesh_free(pods);
    mesh_free(up);
    mesh_free(del);
    return ok;
}

/* How long a Get waits for the owner to build the topology it published. */
#define GET_WAIT_MS 5000

static bool peer_in_job(const struct podset *p, const char *ip);
static void refuse_peer(struct call *c, bool in_job);

static void pump_one(struct call *c, struct blob *topo, bool stale, struct podset *pods,
                     int64_t age_ms, int64_t now)
{
    struct mesh_grpc_server *s = c->s;
    if (c->finishing || c->closed) {
        return;
    }
    if (c->sending) {
        if (now - c->send_since > s->o.send_timeout_ms) {
            mesh_warn(MOD,
                      "dropping subscriber %s: its last message was not taken for %lld ms "
                      "(it does not read; it may reconnect)",
                      c->subscriber, (long long)(now - c->send_since));
            c->finishing = true;
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                         "subscriber does not read: dropped", NULL);
            bump(s, &s->st.dropped, 1);
        }
        return;
    }
    if (c->kind == K_HEALTH_WATCH) {
        char why[256];
        int st = s->o.health(s->o.ctx, c->service, why, sizeof(why));
        if (!c->md_sent || st != c->health_last) {
            c->health_last = st;
            send_health(c, st);
        }
        return;
    }
    if (c->kind == K_TOPO_GET) {
        /* A Get waiting for the topology of the last publish. */
        if (topo != NULL && !stale) {
            send_msg(c, topo->get, topo->get_len, true);
        } else if (now - c->last_msg > GET_WAIT_MS) {
            finish(c, GRPC_STATUS_UNAVAILABLE, "the topology message could not be built; retry");
        }
        return;
    }
    if (!c->pods_view) {
        if (topo != NULL && topo->version != c->topo_sent) {
            c->topo_sent = topo->version;
            send_msg(c, topo->watch, topo->watch_len, false);
        }
        return;
    }
    if (pods == NULL) {
        return;
    }
    if (c->held && pods->synced) { /* before, its messages carry no record */
        c->held = false;
        if (!peer_in_job(pods, c->peer)) {
            refuse_peer(c, false);
            return;
        }
    }
    /* Readiness-only changes (peers turning Ready as their sidecars
     * complete: a burst of up to N at every start) wait until
     * READY_BATCH_MS after the stream's last message; subscribers pace
     * such publishes to 1 s and more anyway. Anything else goes out at the
     * next tick, with the readiness changes held so far. */
    bool hb = !c->md_sent || now - c->last_msg >= s->o.heartbeat_ms;
    if (c->pods_sent != NULL && !hb &&
        (c->pods_sent->version == pods->version ||
         (c->pods_sent->shape == pods->shape && now - c->last_msg < READY_BATCH_MS))) {
        return;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    if (pods_message(c, c->pods_sent, pods, age_ms, hb, &buf, &len)) {
        send_msg(c, buf, len, false);
        mesh_free(buf);
        c->synced_sent = pods->synced;
    }
    if (c->pods_sent != pods) {
        pthread_mutex_lock(&s->mu);
        podset_unref(c->pods_sent);
        pods->refs++;
        c->pods_sent = pods;
        pthread_mutex_unlock(&s->mu);
    }
}

static void pump(struct mesh_grpc_server *s)
{
    int64_t now = mesh_sys_now_ms();
    pthread_mutex_lock(&s->mu);
    struct blob *topo = s->topo;
    struct podset *pods = s->pods;
    if (topo != NULL) {
        topo->refs++;
    }
    if (pods != NULL) {
        pods->refs++;
    }
    int64_t age = s->progress_ms > 0 ? now - s->progress_ms : -1;
    bool stale = s->topo_stale;
    pthread_mutex_unlock(&s->mu);
    for (struct call *c = s->streams; c != NULL; c = c->next) {
        pump_one(c, topo, stale, pods, age, now);
    }
    pthread_mutex_lock(&s->mu);
    blob_unref(topo);
    podset_unref(pods);
    pthread_mutex_unlock(&s->mu);
}

/* The peer's IP address as canonical text ("10.0.0.5", "fd00::5") from
 * gRPC's peer string ("ipv4:10.0.0.5:4321", "ipv6:[fd00::5]:4321"); false
 * for anything else (a Unix socket). */
static bool peer_ip(grpc_call *call, char *out, size_t cap)
{
    char *peer = grpc_call_get_peer(call);
    bool v4 = peer != NULL && strncmp(peer, "ipv4:", 5) == 0;
    bool v6 = peer != NULL && strncmp(peer, "ipv6:[", 6) == 0;
    const char *host = v4 ? peer + 5 : (v6 ? peer + 6 : NULL);
    const char *end = v4 ? strrchr(host, ':') : (v6 ? strchr(host, ']') : NULL);
    size_t n = end != NULL ? (size_t)(end - host) : 0;
    char txt[PEER_MAX];
    unsigned char addr[sizeof(struct in6_addr)];
    bool ok = n > 0 && n < sizeof(txt);
    if (ok) {
        memcpy(txt, host, n);
        txt[n] = '\0';
        ok = inet_pton(v6 ? AF_INET6 : AF_INET, txt, addr) == 1 &&
             inet_ntop(v6 ? AF_INET6 : AF_INET, addr, out, cap) != NULL;
    }
    gpr_free(peer);
    return ok;
}

/* A relay serves only its own job: a VIEW_PODS peer must connect from the
 * IP of a pod in the set it serves, p (pods outside the job never are: the
 * set holds what the job's selector and controller select), or from this
 * pod itself (loopback). */
static bool peer_in_job(const struct podset *p, const char *ip)
{
    if (strcmp(ip, "127.0.0.1") == 0 || strcmp(ip, "::1") == 0) {
        return true;
    }
    for (size_t i = 0; p != NULL && i < p->n; i++) {
        if (strcmp(mesh_k8s_pod_rec_ip(p->recs[i]), ip) == 0) {
            return true;
        }
    }
    return false;
}

/* VIEW_PODS streams open from ip now (loopback is this pod: not counted). */
static int streams_from(const struct mesh_grpc_server *s, const char *ip)
{
    int n = 0;
    if (strcmp(ip, "127.0.0.1") == 0 || strcmp(ip, "::1") == 0) {
        return 0;
    }
    for (const struct call *x = s->streams; x != NULL; x = x->next) {
        n += x->pods_view && strcmp(x->peer, ip) == 0 ? 1 : 0;
    }
    return n;
}

/* Refuse a VIEW_PODS stream whose peer is not of this job (in_job false)
 * or has too many streams open: one log line per burst from one address. */
static void refuse_peer(struct call *c, bool in_job)
{
    struct mesh_grpc_server *s = c->s;
    pthread_mutex_lock(&s->mu);
    uint64_t nrefused = ++s->st.refused;
    pthread_mutex_unlock(&s->mu);
    bool say = strcmp(s->refused_peer, c->peer) != 0 || nrefused % 64 == 0;
    snprintf(s->refused_peer, sizeof(s->refused_peer), "%s", c->peer);
    if (!in_job) {
        if (say) {
            mesh_warn(MOD, "refusing a relay stream from %s (%s): not the IP of a pod of this job",
                      c->peer, c->subscriber);
        }
        finish(c, GRPC_STATUS_PERMISSION_DENIED,
               "this relay serves only pods of its own job (by pod IP)");
        return;
    }
    if (say) {
        mesh_warn(MOD, "refusing a relay stream from %s (%s): %d streams from that address",
                  c->peer, c->subscriber, PODS_PER_PEER_MAX);
    }
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many relay streams from this address");
}

/* Admission of a VIEW_PODS stream by its peer address: true, or the call
 * was finished with the reason. Before this relay has all its pods (it is
 * starting), the stream is held (its heartbeats carry no record) and its
 * address judged when the set is synced (pump_one): a subscriber that connects early is served
 * the moment the relay can, instead of being refused and trying again. */
static bool admit_peer(struct call *c)
{
    struct mesh_grpc_server *s = c->s;
    if (!peer_ip(c->call, c->peer, sizeof(c->peer))) {
        finish(c, GRPC_STATUS_PERMISSION_DENIED, "relay subscribers connect over TCP");
        return false;
    }
    pthread_mutex_lock(&s->mu);
    c->held = s->pods == NULL || !s->pods->synced;
    bool in_job = c->held || peer_in_job(s->pods, c->peer);
    bool over = in_job && streams_from(s, c->peer) >= PODS_PER_PEER_MAX;
    pthread_mutex_unlock(&s->mu);
    if (!in_job || over) {
        refuse_peer(c, in_job);
        return false;
    }
    return true;
}

static bool add_stream(struct call *c, bool pods_view)
{
    struct mesh_grpc_server *s = c->s;
    pthread_mutex_lock(&s->mu);
    bool full = s->st.streams >= (uint64_t)s->o.max_streams ||
                (pods_view && s->st.pod_streams >= (uint64_t)s->o.max_pod_streams);
    if (full) {
        s->st.refused++;
    } else {
        s->st.streams++;
        s->st.pod_streams += pods_view ? 1 : 0;
        s->topo_wanters += c->kind == K_TOPO_GET || (c->kind == K_TOPO_WATCH && !pods_view);
    }
    pthread_mutex_unlock(&s->mu);
    if (full) {
        mesh_warn(MOD, "refusing a %s stream from %s: %s (limit reached)",
                  pods_view ? "relay" : "watch", c->subscriber,
                  pods_view ? "relay subscribers" : "streams");
        finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
               pods_view ? "relay fan-out reached: subscribe to another relay or watch directly"
                         : "too many streams");
        return false;
    }
    c->listed = true;
    c->pods_view = pods_view;
    c->next = s->streams;
    if (s->streams != NULL) {
        s->streams->prev = c;
    }
    s->streams = c;
    return true;
}

/* ---- requests ---- */

static enum kind kind_of(const grpc_slice *method)
{
    static const struct {
        const char *m;
        enum kind k;
    } table[] = {{M_HEALTH_CHECK, K_HEALTH_CHECK},
                 {M_HEALTH_WATCH, K_HEALTH_WATCH},
                 {M_TOPO_GET, K_TOPO_GET},
                 {M_TOPO_WATCH, K_TOPO_WATCH}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (grpc_slice_str_cmp(*method, table[i].m) == 0) {
            return table[i].k;
        }
    }
    return K_UNKNOWN;
}

static void handle_health(struct call *c, const uint8_t *req, size_t len)
{
    struct mesh_grpc_server *s = c->s;
    Grpc__Health__V1__HealthCheckRequest *r =
        grpc__health__v1__health_check_request__unpack(NULL, len, req);
    if (r == NULL || strlen(r->service) >= SERVICE_MAX) {
        if (r != NULL) {
            grpc__health__v1__health_check_request__free_unpacked(r, NULL);
        }
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "not a grpc.health.v1.HealthCheckRequest");
        return;
    }
    snprintf(c->service, sizeof(c->service), "%s", r->service);
    grpc__health__v1__health_check_request__free_unpacked(r, NULL);
    if (c->kind == K_HEALTH_WATCH) {
        if (add_stream(c, false)) {
            pump_one(c, NULL, false, NULL, 0, mesh_sys_now_ms());
        }
        return;
    }
    char why[256] = "";
    int st = s->o.health(s->o.ctx, c->service, why, sizeof(why));
    if (st == MESH_GRPC_HEALTH_SERVICE_UNKNOWN) {
        finish(c, GRPC_STATUS_NOT_FOUND, "unknown service: ask \"\" or \"tpumesh.v1.Topology\"");
        return;
    }
    send_health(c, st);
}

static void handle_topo(struct call *c, const uint8_t *req, size_t len)
{
    struct mesh_grpc_server *s = c->s;
    if (c->kind == K_TOPO_GET) {
        /* The owner builds the message only when someone asks: a Get after
         * a publish waits (on the stream list, answered by the tick) until
         * it is built. */
        pthread_mutex_lock(&s->mu);
        struct blob *b = s->topo;
        bool stale = s->topo_stale;
        if (b != NULL && !stale) {
            b->refs++;
        }
        pthread_mutex_unlock(&s->mu);
        if (stale) {
            c->last_msg = mesh_sys_now_ms();
            if (add_stream(c, false) && s->o.on_subscriber != NULL) {
                s->o.on_subscriber(s->o.ctx);
            }
            return;
        }
        if (b == NULL) {
            finish(c, GRPC_STATUS_UNAVAILABLE, "no topology published yet");
            return;
        }
        send_msg(c, b->get, b->get_len, true);
        pthread_mutex_lock(&s->mu);
        blob_unref(b);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    Tpumesh__V1__WatchRequest *r = tpumesh__v1__watch_request__unpack(NULL, len, req);
    if (r == NULL) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "not a tpumesh.v1.WatchRequest");
        return;
    }
    bool pods_view = r->view == TPUMESH__V1__VIEW__VIEW_PODS;
    snprintf(c->subscriber, sizeof(c->subscriber), "%.60s", r->subscriber[0] ? r->subscriber : "?");
    pthread_mutex_lock(&s->mu);
    bool known = s->ns != NULL;
    bool same = known && strcmp(r->namespace_, s->ns) == 0 && strcmp(r->selector, s->selector) == 0;
    pthread_mutex_unlock(&s->mu);
    tpumesh__v1__watch_request__free_unpacked(r, NULL);
    if (pods_view && !known) {
        finish(c, GRPC_STATUS_UNAVAILABLE, "this sidecar does not know its pods yet");
        return;
    }
    if (pods_view && !same) {
        finish(c, GRPC_STATUS_FAILED_PRECONDITION,
               "this relay follows another namespace or selector");
        return;
    }
    if (pods_view && !admit_peer(c)) {
        return;
    }
    if (add_stream(c, pods_view)) {
        if (s->o.on_subscriber != NULL) {
            s->o.on_subscriber(s->o.ctx); /* pods, or a topology it may not have built */
        }
        pump(s);
    }
}

static void on_recv(struct call *c, bool success)
{
    if (!success || c->recv == NULL) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
        return;
    }
    size_t len = 0;
    uint8_t *req = mesh_grpc_util_copy_message(c->recv, REQUEST_MAX, &len, NULL);
    grpc_byte_buffer_destroy(c->recv);
    c->recv = NULL;
    if (req == NULL) {
        finish(c, GRPC_STATUS_INVALID_ARGUMENT, "request too large");
        return;
    }
    if (c->kind == K_HEALTH_CHECK || c->kind == K_HEALTH_WATCH) {
        handle_health(c, req, len);
    } else {
        handle_topo(c, req, len);
    }
    mesh_free(req);
}

static void on_new(struct call *c, bool success)
{
    struct mesh_grpc_server *s = c->s;
    if (!success) {
        return; /* shutting down */
    }
    request_new(s);
    bump(s, &s->st.calls, 1);
    c->kind = kind_of(&c->details.method);
    snprintf(c->subscriber, sizeof(c->subscriber), "?");
    grpc_op close_op;
    memset(&close_op, 0, sizeof(close_op));
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    start_batch(c, &close_op, 1, &c->t_close);
    if (c->kind == K_UNKNOWN) {
        finish(c, GRPC_STATUS_UNIMPLEMENTED,
               "unknown method: this server has grpc.health.v1.Health and tpumesh.v1.Topology");
        return;
    }
    grpc_op recv_op;
    memset(&recv_op, 0, sizeof(recv_op));
    recv_op.op = GRPC_OP_RECV_MESSAGE;
    recv_op.data.recv_message.recv_message = &c->recv;
    start_batch(c, &recv_op, 1, &c->t_recv);
}

static void request_new(struct mesh_grpc_server *s)
{
    if (atomic_load(&s->stop)) {
        return;
    }
    struct call *c = mesh_calloc(1, sizeof(*c));
    c->s = s;
    struct tag *tags[] = {&c->t_new, &c->t_recv, &c->t_close, &c->t_send, &c->t_status};
    enum op ops[] = {OP_NEW, OP_RECV, OP_CLOSE, OP_SEND, OP_STATUS};
    for (int i = 0; i < 5; i++) {
        tags[i]->op = ops[i];
        tags[i]->c = c;
    }
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    s->live_calls++;
    c->pending = 1;
    grpc_call_error e =
        grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        mesh_warn(MOD, "cannot accept calls (error %d)", (int)e);
        c->pending = 0;
        call_free(c);
    }
}

static void on_event(struct mesh_grpc_server *s, struct tag *t, bool success)
{
    struct call *c = t->c;
    switch (t->op) {
    case OP_NEW:
        on_new(c, success);
        break;
    case OP_RECV:
        on_recv(c, success);
        break;
    case OP_CLOSE:
        c->closed = true;
        c->finishing = true;
        break;
    case OP_SEND:
        c->sending = false;
        if (c->send != NULL) {
            grpc_byte_buffer_destroy(c->send);
            c->send = NULL;
        }
        if (!success) {
            c->finishing = true;
        } else {
            pump_one(c, NULL, false, NULL, 0, mesh_sys_now_ms()); /* health: the next change */
        }
        break;
    case OP_STATUS:
        c->sending = false;
        break;
    case OP_SHUTDOWN:
        return;
    }
    (void)s;
    if (--c->pending == 0 && (c->closed || t->op == OP_NEW)) {
        call_free(c);
    }
}

/* ---- thread, start, stop ---- */

/* The thread: events as they come; every tick_ms, while a stream is listed,
 * a pump. With no stream (a subscriber sidecar, or any sidecar without
 * relay subscribers or watchers) there is nothing to pump, and the thread
 * sleeps until a call arrives: a tick there would be 20 wake-ups a second
 * in each of a job's sidecars for nothing. mesh_grpc_server_stop begins the
 * shutdown (its tag ends this loop once every call is freed). */
static void *server_thread(void *arg)
{
    struct mesh_grpc_server *s = arg;
    int64_t last_pump = 0;
    bool shut_done = false;
    while (!shut_done || s->live_calls > 0) {
        gpr_timespec dl = s->streams == NULL
                              ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                              : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                             gpr_time_from_millis(s->o.tick_ms, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(s->cq, dl, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
        if (ev.type == GRPC_OP_COMPLETE) {
            struct tag *t = ev.tag;
            shut_done = shut_done || t->op == OP_SHUTDOWN;
            on_event(s, t, ev.success != 0);
        }
        int64_t now = mesh_sys_now_ms();
        if (!atomic_load(&s->stop) && now - last_pump >= s->o.tick_ms) {
            last_pump = now;
            pump(s);
        }
    }
    return NULL;
}

/* No new calls, cancel the open ones; the thread ends once every call has
 * completed its batches and is freed. */
static void begin_shutdown(struct mesh_grpc_server *s)
{
    atomic_store(&s->stop, 1);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shut);
    grpc_server_cancel_all_calls(s->server);
}

/* ":9432" listens on every interface ("[::]:9432", dual stack); other
 * forms go to gRPC as they are. */
static char *listen_addr(const char *addr)
{
    if (addr[0] == ':') {
        return mesh_asprintf("[::]%s", addr);
    }
    return mesh_strdup(addr);
}

static void fill_defaults(struct mesh_grpc_server_opts *o)
{
    o->max_streams = o->max_streams > 0 ? o->max_streams : 128;
    o->max_pod_streams = o->max_pod_streams > 0 ? o->max_pod_streams : 64;
    o->send_timeout_ms = o->send_timeout_ms > 0 ? o->send_timeout_ms : 10000;
    o->heartbeat_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : 2000;
    o->keepalive_ms = o->keepalive_ms > 0 ? o->keepalive_ms : 10000;
    o->tick_ms = o->tick_ms > 0 ? o->tick_ms : 50;
}

static void server_free(struct mesh_grpc_server *s)
{
    if (s->server != NULL) {
        grpc_server_destroy(s->server);
    }
    if (s->cq != NULL) {
        grpc_completion_queue_shutdown(s->cq);
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN) {
                break;
            }
        }
        grpc_completion_queue_destroy(s->cq);
    }
    blob_unref(s->topo);
    podset_unref(s->pods);
    pthread_mutex_destroy(&s->mu);
    mesh_free(s->ns);
    mesh_free(s->selector);
    mesh_free(s);
    grpc_shutdown();
}

struct mesh_grpc_server *mesh_grpc_server_start(const struct mesh_grpc_server_opts *opts,
                                                int *out_port, struct mesh_err *err)
{
    const char *colon = opts->addr != NULL ? strrchr(opts->addr, ':') : NULL;
    char *end = NULL;
    long port_num = colon != NULL ? strtol(colon + 1, &end, 10) : -1;
    if (colon == NULL || end == colon + 1 || *end != '\0' || port_num < 0 || port_num > 65535 ||
        opts->health == NULL) {
        mesh_err_set(err, MESH_E_CONFIG, 0,
                     "--grpc-addr '%s' is not [HOST]:PORT (e.g. :9432, 127.0.0.1:9432)",
                     opts->addr != NULL ? opts->addr : "");
        return NULL;
    }
    gpr_set_log_function(grpc_log_fn);
    grpc_init();
    struct mesh_grpc_server *s = mesh_calloc(1, sizeof(*s));
    s->o = *opts;
    s->shut.op = OP_SHUTDOWN;
    fill_defaults(&s->o);
    pthread_mutex_init(&s->mu, NULL);

    grpc_resource_quota *quota = grpc_resource_quota_create("tpumesh-grpc");
    grpc_resource_quota_resize(quota, (size_t)64 << 20);
    grpc_arg args[10];
    int n = 0;
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_CONCURRENT_STREAMS, 16);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, REQUEST_MAX);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)MESH_TOPO_MSG_MAX);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, s->o.keepalive_ms);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    /* Clients (relay subscribers) ping every few seconds; allow it. */
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 300000);
    /* One listener per address: a second process on the same port must
     * fail, not share it. */
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0);
    args[n].type = GRPC_ARG_POINTER;
    args[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[n].value.pointer.p = quota;
    args[n].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    n++;
    grpc_channel_args cargs = {(size_t)n, args};
    s->server = grpc_server_create(&cargs, NULL);
    grpc_resource_quota_unref(quota);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    char *addr = listen_addr(opts->addr);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0) {
        mesh_err_set(err, MESH_E_IO, 0,
                     "gRPC cannot listen on '%s': the address is in use or not an address of "
                     "this host; pick another --grpc-addr",
                     opts->addr);
        mesh_free(addr);
        server_free(s);
        return NULL;
    }
    mesh_free(addr);
    grpc_server_start(s->server);
    request_new(s);
    if (pthread_create(&s->thread, NULL, server_thread, s) != 0) {
        mesh_err_set(err, MESH_E_IO, 0, "cannot start the gRPC thread");
        begin_shutdown(s);
        server_thread(s);
        server_free(s);
        return NULL;
    }
    *out_port = port;
    return s;
}

void mesh_grpc_server_stop(struct mesh_grpc_server *s)
{
    if (s == NULL) {
        return;
    }
    begin_shutdown(s);
    pthread_join(s->thread, NULL);
    server_free(s);
}
