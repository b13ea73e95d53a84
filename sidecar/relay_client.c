/*
 * relay_client.c - Topology/Watch (VIEW_PODS) subscriber and its record
 * store (relay_client.h).
 *
 * The store is a name-sorted array of packed records. A message is applied
 * in two steps: every upsert is checked and converted first (nothing is
 * changed yet), then the new array is built by merging, so a refused
 * message leaves the store exactly as it was.
 *
 * The session is one server-streaming call on a pluck completion queue:
 * batch 1 sends the request and half-closes, batch 2 receives the initial
 * metadata and the first message, every later batch one message. The
 * thread plucks each with the silence limit as its deadline; ending early
 * (silent, or a stop: mesh_relay_store_cancel) is grpc_call_cancel and
 * then the status.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "core/mem.h"
#include "io/grpc_util.h"
#include "relay_client.h"
#include "io/sys.h"

struct mesh_relay_store {
    pthread_mutex_t mu;
    struct mesh_k8s_pod_rec **recs; /* sorted by name, owned */
    size_t n;
    struct mesh_relay_status st;
    size_t max_records; /* per message (mesh_relay_store_set_limits) */
    mesh_relay_check_fn check;
    void *check_ctx;
    grpc_call *call; /* the running session's, for mesh_relay_store_cancel */
};

size_t mesh_relay_max_records(int expected)
{
    /* Every worker, each possibly twice (an old pod and its replacement),
     * plus slack for pods that linger. */
    if (expected <= 0 || expected > MESH_TOPO_MSG_PODS_MAX / 2) {
        return MESH_TOPO_MSG_PODS_MAX;
    }
    return 2 * (size_t)expected + 64;
}

size_t mesh_relay_max_message(int expected)
{
    size_t n = mesh_relay_max_records(expected) * (MESH_TOPO_MSG_POD_WIRE_MAX + 8) + 4096;
    return n < MESH_TOPO_MSG_MAX ? n : MESH_TOPO_MSG_MAX;
}

void mesh_relay_store_set_limits(struct mesh_relay_store *s, int max_pods,
                                 mesh_relay_check_fn check, void *check_ctx)
{
    pthread_mutex_lock(&s->mu);
    s->max_records = mesh_relay_max_records(max_pods);
    s->check = check;
    s->check_ctx = check_ctx;
    pthread_mutex_unlock(&s->mu);
}

struct mesh_relay_store *mesh_relay_store_new(void)
{
    struct mesh_relay_store *s = mesh_calloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->max_records = MESH_TOPO_MSG_PODS_MAX;
    return s;
}

static void free_recs(struct mesh_k8s_pod_rec **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mesh_free(v[i]);
    }
    mesh_free(v);
}

void mesh_relay_store_free(struct mesh_relay_store *s)
{
    if (s == NULL) {
        return;
    }
    free_recs(s->recs, s->n);
    pthread_mutex_destroy(&s->mu);
    mesh_free(s);
}

void mesh_relay_store_lock(struct mesh_relay_store *s)
{
    pthread_mutex_lock(&s->mu);
}

void mesh_relay_store_unlock(struct mesh_relay_store *s)
{
    pthread_mutex_unlock(&s->mu);
}

size_t mesh_relay_store_count(const struct mesh_relay_store *s)
{
    return s->n;
}

const struct mesh_k8s_pod_rec *mesh_relay_store_at(const struct mesh_relay_store *s, size_t i)
{
    return i < s->n ? s->recs[i] : NULL;
}

void mesh_relay_store_cancel(struct mesh_relay_store *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->call != NULL) {
        grpc_call_cancel(s->call, NULL);
    }
    pthread_mutex_unlock(&s->mu);
}

void mesh_relay_store_status(struct mesh_relay_store *s, struct mesh_relay_status *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

static int rec_cmp(const void *a, const void *b)
{
    const struct mesh_k8s_pod_rec *x = *(const struct mesh_k8s_pod_rec *const *)a;
    const struct mesh_k8s_pod_rec *y = *(const struct mesh_k8s_pod_rec *const *)b;
    return strcmp(mesh_k8s_pod_rec_name(x), mesh_k8s_pod_rec_name(y));
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checked records of d's upserts, sorted (owned), or NULL with err. */
static struct mesh_k8s_pod_rec **check_upserts(const Tpumesh__V1__PodDelta *d, struct mesh_err *err)
{
    size_t n = d->n_upserts;
    struct mesh_k8s_pod_rec **v = mesh_calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        v[i] = mesh_topo_msg_pod_to_rec(d->upserts[i], err);
        if (v[i] == NULL) {
            mesh_err_prefix(err, "relay sent a pod the API rules refuse");
            free_recs(v, i);
            return NULL;
        }
    }
    if (n > 1) {
        qsort(v, n, sizeof(*v), rec_cmp);
    }
    for (size_t i = 1; i < n; i++) {
        if (rec_cmp(&v[i - 1], &v[i]) == 0) {
            mesh_err_set(err, MESH_E_INVAL, 0, "relay sent pod '%.80s' twice in one message",
                         mesh_k8s_pod_rec_name(v[i]));
            free_recs(v, n);
            return NULL;
        }
    }
    return v;
}

/* Everything a message's delta must pass before the store changes: the
 * relay is synced, a delta follows a full set, every upsert passes the
 * API rules once, and the caller's check. The checked upserts (sorted,
 * owned) or NULL with err; d's deleted names are sorted. */
static struct mesh_k8s_pod_rec **check_delta(struct mesh_relay_store *s,
                                             const Tpumesh__V1__WatchResponse *m, bool first,
                                             struct mesh_err *err)
{
    Tpumesh__V1__PodDelta *d = m->pods;
    if (!m->synced || (!d->reset && first)) {
        mesh_err_set(err, MESH_E_INVAL, 0, "relay sent %s",
                     !m->synced ? "pod records while not synced" : "a delta before the full set");
        return NULL;
    }
    struct mesh_k8s_pod_rec **up = check_upserts(d, err);
    if (up != NULL && s->check != NULL && s->check(s->check_ctx, up, d->n_upserts, err) < 0) {
        free_recs(up, d->n_upserts);
        return NULL;
    }
    if (d->n_deleted > 0) {
        qsort(d->deleted, d->n_deleted, sizeof(char *), str_cmp);
    }
    return up;
}

/* old (sorted) + upserts (sorted, taken) - deleted (sorted names) -> new
 * array (owned); a full set (reset) deletes every old record it does not
 * carry. The records of old that are kept move over, the others are
 * freed. *changed: the records differ; *other: by more than Ready flags
 * (an add, a delete, any other field). */
static struct mesh_k8s_pod_rec **merge(struct mesh_k8s_pod_rec **old, size_t nold,
                                       struct mesh_k8s_pod_rec **up, size_t nup,
                                       const Tpumesh__V1__PodDelta *d, size_t *out_n, bool *changed,
                                       bool *other)
{
    struct mesh_k8s_pod_rec **v = mesh_calloc(nold + nup + 1, sizeof(*v));
    size_t i = 0, j = 0, k = 0, n = 0;
    while (i < nold || j < nup) {
        int c = i >= nold ? 1 : (j >= nup ? -1 : rec_cmp(&old[i], &up[j]));
        if (c < 0) {
            const char *name = mesh_k8s_pod_rec_name(old[i]);
            while (k < d->n_deleted && strcmp(d->deleted[k], name) < 0) {
                k++;
            }
            if (d->reset || (k < d->n_deleted && strcmp(d->deleted[k], name) == 0)) {
                mesh_free(old[i]);
                *changed = *other = true;
            } else {
                v[n++] = old[i];
            }
            i++;
            continue;
        }
        if (c > 0) {
            *changed = *other = true;
        } else if (!mesh_k8s_pod_rec_equal(old[i], up[j])) {
            *changed = true;
            *other = *other || !mesh_k8s_pod_rec_ready_flip(old[i], up[j]);
        }
        if (c == 0) {
            mesh_free(old[i++]);
        }
        v[n++] = up[j++];
    }
    *out_n = n;
    return v;
}

/* Apply d's checked upserts (taken) to the records (s->mu held). */
static int commit(struct mesh_relay_store *s, const Tpumesh__V1__PodDelta *d,
                  struct mesh_k8s_pod_rec **up, bool *out_changed, struct mesh_err *err)
{
    size_t n = 0;
    bool changed = false, other = false;
    struct mesh_k8s_pod_rec **v = merge(s->recs, s->n, up, d->n_upserts, d, &n, &changed, &other);
    mesh_free(s->recs);
    mesh_free(up);
    int rc = 0;
    s->st.synced = n <= MESH_TOPO_MSG_PODS_MAX;
    if (!s->st.synced) {
        free_recs(v, n);
        v = NULL;
        n = 0;
        changed = other = true;
        rc = mesh_err_set(err, MESH_E_TOOBIG, 0, "relay's pod set exceeds %d records",
                          MESH_TOPO_MSG_PODS_MAX);
    }
    s->recs = v;
    s->n = n;
    *out_changed = changed;
    s->st.applied += changed ? 1 : 0;
    s->st.ready_applied += changed && !other ? 1 : 0;
    return rc;
}

int mesh_relay_store_apply(struct mesh_relay_store *s, const uint8_t *buf, size_t len, bool first,
                           int lag_ms, bool *out_changed, struct mesh_err *err)
{
    *out_changed = false;
    /* The limits are set by the session's thread, the only one applying. */
    if (mesh_topo_msg_scan_pods(buf, len, s->max_records, err) < 0) {
        return -err->code;
    }
    Tpumesh__V1__WatchResponse *m = mesh_topo_msg_unpack_watch(buf, len, err);
    if (m == NULL) {
        return -err->code;
    }
    struct mesh_k8s_pod_rec **up = m->pods != NULL ? check_delta(s, m, first, err) : NULL;
    int rc = m->pods != NULL && up == NULL ? -err->code : 0;
    if (rc == 0) {
        int64_t now = mesh_sys_now_ms();
        pthread_mutex_lock(&s->mu);
        if (m->pods != NULL) {
            rc = commit(s, m->pods, up, out_changed, err);
        }
        s->st.last_msg_ms = now;
        s->st.source_age_ms = m->source_age_ms;
        s->st.depth = m->depth;
        snprintf(s->st.rv, sizeof(s->st.rv), "%s", m->resource_version);
        bool lagging = lag_ms > 0 && m->source_age_ms > lag_ms;
        if (rc == 0 && m->synced && s->st.synced && !lagging) {
            s->st.last_good_ms = now;
        }
        pthread_mutex_unlock(&s->mu);
    }
    tpumesh__v1__watch_response__free_unpacked(m, NULL);
    return rc;
}

/* ---- the session ---- */

static gpr_timespec in_ms(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

struct session {
    const struct mesh_relay_client_opts *o;
    struct mesh_relay_store *s;
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_byte_buffer *req, *msg;
    grpc_metadata_array md, trailing;
    int tag_send, tag_recv, tag_status;
    bool recv_pending, send_pending;
    bool status_done; /* the call's status was received (finish_call ran) */
};

/* Wait for tag until the relay has been silent for silence_ms since
 * `since`: 0 with *out_success, or -MESH_E_TIMEOUT (the call is then
 * cancelled and the tag still has to be plucked). A stop cancels the call
 * (mesh_relay_store_cancel), which completes the tag: no polling. */
static int wait_tag(struct session *se, void *tag, int64_t since, bool *out_success,
                    struct mesh_err *err)
{
    int silence = se->o->silence_ms > 0 ? se->o->silence_ms : 6000;
    grpc_event ev =
        grpc_completion_queue_pluck(se->cq, tag, in_ms(since + silence - mesh_sys_now_ms()), NULL);
    if (ev.type == GRPC_OP_COMPLETE) {
        *out_success = ev.success != 0;
        return 0;
    }
    return mesh_err_set(err, MESH_E_TIMEOUT, 0,
                        "relay %s sent nothing for %d ms (it heartbeats every 2 s)", se->o->target,
                        silence);
}

/* Receive the call's status (cancel: end it first, when it may still be
 * running; a call whose receive failed has ended and keeps its own). */
static void finish_call(struct session *se, bool cancel, char *why, size_t cap)
{
    se->status_done = true;
    if (cancel) {
        grpc_call_cancel(se->call, NULL);
    }
    if (se->send_pending) {
        grpc_completion_queue_pluck(se->cq, &se->tag_send, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                    NULL);
        se->send_pending = false;
    }
    if (se->recv_pending) {
        grpc_completion_queue_pluck(se->cq, &se->tag_recv, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                    NULL);
        se->recv_pending = false;
        if (se->msg != NULL) {
            grpc_byte_buffer_destroy(se->msg);
            se->msg = NULL;
        }
    }
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &se->trailing;
    op.data.recv_status_on_client.status = &status;
    op.data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(se->call, &op, 1, &se->tag_status, NULL) == GRPC_CALL_OK) {
        grpc_completion_queue_pluck(se->cq, &se->tag_status, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                    NULL);
    }
    if (why != NULL) {
        snprintf(why, cap, "status %d: %.*s", (int)status, (int)GRPC_SLICE_LENGTH(details),
                 (const char *)GRPC_SLICE_START_PTR(details));
    }
    grpc_slice_unref(details);
}

/* Batch 1: the WatchRequest (VIEW_PODS of the subscriber's namespace and
 * selector) and the half-close. */
static int send_request(struct session *se, struct mesh_err *err)
{
    const struct mesh_relay_client_opts *o = se->o;
    Tpumesh__V1__WatchRequest wr = TPUMESH__V1__WATCH_REQUEST__INIT;
    wr.view = TPUMESH__V1__VIEW__VIEW_PODS;
    wr.namespace_ = (char *)o->ns;
    wr.selector = (char *)o->selector;
    wr.subscriber = (char *)(o->subscriber != NULL ? o->subscriber : "");
    grpc_slice sl = grpc_slice_malloc(tpumesh__v1__watch_request__get_packed_size(&wr));
    tpumesh__v1__watch_request__pack(&wr, GRPC_SLICE_START_PTR(sl));
    se->req = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    grpc_op ops[3];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = o->wait_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = se->req;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(se->call, ops, 3, &se->tag_send, NULL) != GRPC_CALL_OK) {
        return mesh_err_set(err, MESH_E_API, 0, "gRPC refused to start the call to %s", o->target);
    }
    se->send_pending = true;
    return 0;
}

/* The message just received: applied to the store, counted, and the
 * caller told when the records changed. 0 or the refusal's code. */
static int take_message(struct session *se, bool first, struct mesh_err *err)
{
    const struct mesh_relay_client_opts *o = se->o;
    size_t len = 0;
    uint8_t *buf =
        mesh_grpc_util_copy_message(se->msg, mesh_relay_max_message(o->max_pods), &len, NULL);
    grpc_byte_buffer_destroy(se->msg);
    se->msg = NULL;
    bool changed = false;
    int rc = buf != NULL ? mesh_relay_store_apply(se->s, buf, len, first, o->lag_ms, &changed, err)
                         : mesh_err_set(err, MESH_E_PARSE, 0, "unreadable message");
    mesh_free(buf);
    pthread_mutex_lock(&se->s->mu);
    se->s->st.messages++;
    se->s->st.bytes += len;
    se->s->st.refused += rc < 0 ? 1 : 0;
    se->s->st.connected = se->s->st.connected || rc == 0;
    pthread_mutex_unlock(&se->s->mu);
    if (rc == 0 && changed && o->notify != NULL) {
        o->notify(o->ctx);
    }
    return rc;
}

static int stream(struct session *se, struct mesh_err *err)
{
    if (send_request(se, err) < 0) {
        return -MESH_E_API;
    }
    int64_t since = mesh_sys_now_ms();
    for (bool first = true;; first = false) {
        grpc_op r[2];
        memset(r, 0, sizeof(r));
        size_t n = 0;
        if (first) {
            r[n].op = GRPC_OP_RECV_INITIAL_METADATA;
            r[n++].data.recv_initial_metadata.recv_initial_metadata = &se->md;
        }
        r[n].op = GRPC_OP_RECV_MESSAGE;
        r[n++].data.recv_message.recv_message = &se->msg;
        if (grpc_call_start_batch(se->call, r, n, &se->tag_recv, NULL) != GRPC_CALL_OK) {
            return mesh_err_set(err, MESH_E_API, 0, "gRPC refused to receive from %s",
                                se->o->target);
        }
        se->recv_pending = true;
        bool ok = false;
        if (wait_tag(se, &se->tag_recv, since, &ok, err) < 0) {
            return -MESH_E_TIMEOUT;
        }
        se->recv_pending = false;
        if (atomic_load(se->o->stop)) {
            return 0;
        }
        if (se->send_pending) {
            grpc_event e = grpc_completion_queue_pluck(se->cq, &se->tag_send, in_ms(0), NULL);
            se->send_pending = e.type != GRPC_OP_COMPLETE;
        }
        if (!ok || se->msg == NULL) {
            char why[512];
            finish_call(se, false, why, sizeof(why));
            return mesh_err_set(err, MESH_E_API, 0, "relay %s ended the stream (%s)", se->o->target,
                                why);
        }
        int rc = take_message(se, first, err);
        if (rc < 0) {
            return rc;
        }
        since = mesh_sys_now_ms();
    }
}

/* The session's channel: one connection of its own, bounded to what the
 * job can need. */
static grpc_channel *open_channel(const struct mesh_relay_client_opts *o)
{
    grpc_arg args[11];
    int n = 0;
    /* gRPC 1.51 buffers a whole message before its receive limit applies,
     * and opens the stream's flow-control window for whatever length a
     * message announces: without a memory quota (and without BDP probing,
     * which grows the window on its own) a relay could make this process
     * hold 32 MiB before the limit refuses it. The quota is twice the
     * largest message the job can need, at least 8 MiB. */
    size_t qbytes = 2 * mesh_relay_max_message(o->max_pods);
    grpc_resource_quota *quota = grpc_resource_quota_create("tpumesh-relay");
    grpc_resource_quota_resize(quota, qbytes > ((size_t)8 << 20) ? qbytes : ((size_t)8 << 20));
    /* Reads in chunks of at most 256 KiB: gRPC grows a busy connection's
     * read buffer up to 4 MiB, and a quota this small would then cancel a
     * healthy session (its reclaimer closes calls under pressure). */
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 256 << 10);
    args[n].type = GRPC_ARG_POINTER;
    args[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[n].value.pointer.p = quota;
    args[n++].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 65536);
    /* Nothing larger than the job can need is even received. */
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                                       (int)mesh_relay_max_message(o->max_pods));
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    /* One connection per session, never shared with another channel. */
    args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (o->wait_ready) {
        /* A relay that is starting listens within a second or so: its
         * subscribers (up to 64) reconnect on this one channel, not with a
         * new channel and call each time (what the start of a relay pod
         * that gets its IP last cost its machine). */
        args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
        args[n++] = mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 300);
    }
    grpc_channel_args cargs = {(size_t)n, args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(o->target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    grpc_resource_quota_unref(quota);
    return ch;
}

int mesh_relay_client_run(const struct mesh_relay_client_opts *o, struct mesh_relay_store *s,
                          struct mesh_err *err)
{
    grpc_init();
    pthread_mutex_lock(&s->mu);
    s->st.sessions++;
    snprintf(s->st.target, sizeof(s->st.target), "%s", o->target);
    pthread_mutex_unlock(&s->mu);
    mesh_relay_store_set_limits(s, o->max_pods, o->check, o->check_ctx);
    struct session se = {.o = o, .s = s, .ch = open_channel(o)};
    grpc_metadata_array_init(&se.md);
    grpc_metadata_array_init(&se.trailing);
    se.cq = grpc_completion_queue_create_for_pluck(NULL);
    se.call = grpc_channel_create_call(se.ch, NULL, GRPC_PROPAGATE_DEFAULTS, se.cq,
                                       grpc_slice_from_static_string("/tpumesh.v1.Topology/Watch"),
                                       NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    /* The call is published before *stop is read, and a stop is set before
     * the call is cancelled: a session never misses a stop. */
    pthread_mutex_lock(&s->mu);
    s->call = se.call;
    bool stopped = atomic_load(o->stop) != 0;
    pthread_mutex_unlock(&s->mu);
    int rc = se.call == NULL
                 ? mesh_err_set(err, MESH_E_API, 0, "gRPC could not create a call to %s", o->target)
             : stopped ? 0
                       : stream(&se, err);
    if (se.call != NULL && !se.status_done) {
        finish_call(&se, true, NULL, 0);
    }
    pthread_mutex_lock(&s->mu);
    s->call = NULL;
    s->st.connected = false;
    snprintf(s->st.error, sizeof(s->st.error), "%s", rc < 0 ? err->msg : "stopped");
    pthread_mutex_unlock(&s->mu);
    if (se.msg != NULL) {
        grpc_byte_buffer_destroy(se.msg);
    }
    if (se.req != NULL) {
        grpc_byte_buffer_destroy(se.req);
    }
    if (se.call != NULL) {
        grpc_call_unref(se.call);
    }
    grpc_metadata_array_destroy(&se.md);
    grpc_metadata_array_destroy(&se.trailing);
    grpc_channel_destroy(se.ch);
    grpc_completion_queue_shutdown(se.cq);
    grpc_event ev;
    do {
        ev = grpc_completion_queue_pluck(se.cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    } while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(se.cq);
    grpc_shutdown();
    return rc;
}
