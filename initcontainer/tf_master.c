/*
 * tf_master.c - TensorFlow master gRPC client on the gRPC C core API, and
 * TPU Node system initialization (tf_master.h).
 *
 * One channel, one pluck completion queue, one unary call at a time: each
 * call is a single batch of the six client ops (send metadata, message and
 * close; receive metadata, message and status), plucked in 10 s slices so
 * the init container can log that it is still waiting. Every call has a
 * deadline; the overall budget is the caller's --timeout.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "core/mem.h"
#include "core/tf_graph.h"
#include "io/grpc_util.h"
#include "io/log.h"
#include "io/sys.h"
#include "tf_master.h"

#define MOD "tfmaster"

/* Log a "still waiting" line this often. TF's own master logs
 * "CreateSession still waiting for response from worker" every 10 s. */
#define PROGRESS_MS 10000
/* After the deadline, how long we wait for gRPC to deliver the (cancelled)
 * completion before giving up on the call object. */
#define CANCEL_GRACE_MS 5000
/* CloseSession always gets its own short budget, even after the overall
 * deadline passed: an abandoned session lives until the server restarts
 * (the gRPC master runs with session GC disabled). */
#define CLOSE_TIMEOUT_MS 5000
/* RunOptions.timeout_in_ms is this much below our gRPC deadline so that the
 * server's clean DEADLINE_EXCEEDED body status wins. */
#define RUN_STEP_SLACK_MS 2000

#define METHOD_CREATE_SESSION "/tensorflow.MasterService/CreateSession"
#define METHOD_RUN_STEP "/tensorflow.MasterService/RunStep"
#define METHOD_CLOSE_SESSION "/tensorflow.MasterService/CloseSession"

/* The outcome of one unary call. */
struct call_result {
    int status;         /* gRPC status code (== tensorflow.error.Code) */
    char message[1024]; /* status details, NUL-terminated, maybe cut */
    uint8_t *response;  /* owned (mesh_free) when status == 0 */
    size_t response_len;
};

struct master {
    char *target;
    grpc_channel *channel;
    grpc_completion_queue *cq;
};

/* Absolute monotonic ms -> gRPC deadline. */
static gpr_timespec deadline_ts(int64_t deadline_ms)
{
    int64_t left = deadline_ms - mesh_sys_now_ms();
    if (left < 0) {
        left = 0;
    }
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(left, GPR_TIMESPAN));
}

static const char *state_name(grpc_connectivity_state s)
{
    switch (s) {
    case GRPC_CHANNEL_IDLE:
        return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
        return "CONNECTING";
    case GRPC_CHANNEL_READY:
        return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
        return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
        return "SHUTDOWN";
    }
    return "?";
}

/* gRPC's own log lines (GRPC_VERBOSITY, GRPC_TRACE) go through our logger,
 * so `--log-format json` stays one JSON object per line and the last line
 * stays ours. Called from gRPC's threads: mesh_log_emit writes each line with
 * one write(2) from a local buffer. */
static void grpc_log_to_mesh(gpr_log_func_args *args)
{
    if (args->severity == GPR_LOG_SEVERITY_ERROR) {
        mesh_warn("grpc", "%s (%s:%d)", args->message, args->file, args->line);
    } else {
        mesh_debug("grpc", "%s (%s:%d)", args->message, args->file, args->line);
    }
}

static void master_free(struct master *m);

/* An insecure channel to target ("host:port", "[v6]:port"; copied); nothing
 * is sent yet. NULL with err set: -MESH_E_INVAL for an empty target,
 * -MESH_E_API when gRPC refuses to create the channel. */
static struct master *master_new(const char *target, struct mesh_err *err)
{
    if (target == NULL || target[0] == '\0') {
        mesh_err_set(err, MESH_E_INVAL, 0, "no TPU server address to connect to");
        return NULL;
    }
    gpr_set_log_function(grpc_log_to_mesh);
    grpc_init();
    /* Channel settings of TF's own client: reconnect backoff
     * capped at 1 s, no keepalive. We cap received messages at the size
     * tf_graph accepts instead of INT32_MAX (STYLE R9: limits on everything). */
    grpc_arg args[] = {
        mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)MESH_TF_MAX_RESPONSE),
        mesh_grpc_util_int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000),
        mesh_grpc_util_int_arg(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100),
    };
    grpc_channel_args cargs = {sizeof(args) / sizeof(args[0]), args};

    struct master *m = mesh_calloc(1, sizeof(*m));
    m->target = mesh_strdup(target);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    m->channel = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    m->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (m->channel == NULL || m->cq == NULL) {
        mesh_err_set(err, MESH_E_API, 0, "gRPC could not create a channel to '%s'", target);
        master_free(m);
        return NULL;
    }
    return m;
}

static void master_free(struct master *m)
{
    if (m == NULL) {
        return;
    }
    if (m->channel != NULL) {
        grpc_channel_destroy(m->channel);
    }
    if (m->cq != NULL) {
        grpc_completion_queue_shutdown(m->cq);
        /* Drain: a pluck queue delivers GRPC_QUEUE_SHUTDOWN once empty. */
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_pluck(m->cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN) {
                break;
            }
        }
        grpc_completion_queue_destroy(m->cq);
    }
    mesh_free(m->target);
    mesh_free(m);
    grpc_shutdown();
}

/* Wait until the channel is connected, at most until deadline_ms (monotonic),
 * with a progress line every PROGRESS_MS; -MESH_E_NOTREADY naming the target,
 * the last connectivity state and how long we waited. */
static int wait_connected(struct master *m, int64_t deadline_ms, struct mesh_err *err)
{
    int64_t start = mesh_sys_now_ms();
    int64_t next_log = start + PROGRESS_MS;
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(m->channel, 1);
    while (st != GRPC_CHANNEL_READY) {
        int64_t now = mesh_sys_now_ms();
        if (now >= deadline_ms) {
            return mesh_err_set(err, MESH_E_NOTREADY, 0,
                                "TPU server %s unreachable: no connection after %lld s (state "
                                "%s); check the TPU's IP and that it is READY, or raise --timeout",
                                m->target, (long long)((now - start + 500) / 1000), state_name(st));
        }
        if (now >= next_log) {
            mesh_info(MOD, "waiting for the TPU server %s to accept connections (%lld s, %s)",
                      m->target, (long long)((now - start + 500) / 1000), state_name(st));
            next_log = now + PROGRESS_MS;
        }
        int64_t until = deadline_ms < next_log ? deadline_ms : next_log;
        int watch_tag = 0; /* its address is the completion tag */
        grpc_channel_watch_connectivity_state(m->channel, st, deadline_ts(until), m->cq,
                                              &watch_tag);
        grpc_completion_queue_pluck(m->cq, &watch_tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        /* Ask again (and kick an IDLE channel into connecting). */
        st = grpc_channel_check_connectivity_state(m->channel, 1);
    }
    return 0;
}

static void result_cleanup(struct call_result *r)
{
    if (r != NULL) {
        mesh_free(r->response);
        r->response = NULL;
        r->response_len = 0;
    }
}

/* "/tensorflow.MasterService/RunStep" -> "MasterService/RunStep" for logs. */
static const char *short_method(const char *method)
{
    static const char prefix[] = "/tensorflow.";
    if (strncmp(method, prefix, sizeof(prefix) - 1) == 0) {
        return method + sizeof(prefix) - 1;
    }
    return method;
}

/* The six operations of a unary call and the buffers they fill. */
struct unary {
    grpc_op ops[6];
    grpc_byte_buffer *send, *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
};

static void unary_init(struct unary *u, const uint8_t *req, size_t req_len)
{
    memset(u, 0, sizeof(*u));
    grpc_slice req_slice = grpc_slice_from_copied_buffer((const char *)req, req_len);
    u->send = grpc_raw_byte_buffer_create(&req_slice, 1);
    grpc_slice_unref(req_slice);
    grpc_metadata_array_init(&u->initial_md);
    grpc_metadata_array_init(&u->trailing_md);
    u->status = GRPC_STATUS_UNKNOWN;
    u->details = grpc_empty_slice();
    grpc_op *ops = u->ops;
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    /* TF's client uses fail_fast=false: wait for the channel instead of
     * failing while the TPU server boots. */
    ops[0].flags =
        GRPC_INITIAL_METADATA_WAIT_FOR_READY | GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    ops[5].data.recv_status_on_client.error_string = &u->error_string;
}

static void unary_cleanup(struct unary *u)
{
    if (u->error_string != NULL) {
        gpr_free((void *)u->error_string);
    }
    grpc_slice_unref(u->details);
    grpc_metadata_array_destroy(&u->initial_md);
    grpc_metadata_array_destroy(&u->trailing_md);
    grpc_byte_buffer_destroy(u->send);
    if (u->recv != NULL) {
        grpc_byte_buffer_destroy(u->recv);
    }
}

/* Wait for the batch tagged tag to complete, saying every PROGRESS_MS that
 * we still wait, and cancelling the call once it is past its deadline. */
static void wait_batch(struct master *m, grpc_call *call, void *tag, const char *method,
                       int64_t deadline_ms)
{
    int64_t start = mesh_sys_now_ms();
    bool cancelled = false;
    for (;;) {
        int64_t now = mesh_sys_now_ms();
        grpc_event ev =
            grpc_completion_queue_pluck(m->cq, tag, deadline_ts(now + PROGRESS_MS), NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            return;
        }
        now = mesh_sys_now_ms();
        if (now > deadline_ms + CANCEL_GRACE_MS && !cancelled) {
            /* gRPC should have failed the call at its deadline; make sure. */
            grpc_call_cancel(call, NULL);
            cancelled = true;
            continue;
        }
        mesh_info(MOD, "still waiting for %s from %s (%lld s)", short_method(method), m->target,
                  (long long)((now - start) / 1000));
    }
}

/* The finished call's status, details and (when OK) reply into out. */
static int take_result(struct master *m, const char *method, const struct unary *u,
                       struct call_result *out, struct mesh_err *err)
{
    out->status = (int)u->status;
    size_t dl = GRPC_SLICE_LENGTH(u->details);
    if (dl >= sizeof(out->message)) {
        dl = sizeof(out->message) - 1;
    }
    memcpy(out->message, GRPC_SLICE_START_PTR(u->details), dl);
    out->message[dl] = '\0';
    if (u->status != GRPC_STATUS_OK) {
        if (u->error_string != NULL) {
            mesh_debug(MOD, "%s to %s: %s", method, m->target, u->error_string);
        }
        return 0;
    }
    if (u->recv == NULL) {
        return mesh_err_set(err, MESH_E_API, 0, "%s to %s returned OK without a message", method,
                            m->target);
    }
    out->response =
        mesh_grpc_util_copy_message(u->recv, MESH_TF_MAX_RESPONSE, &out->response_len, NULL);
    if (out->response == NULL) {
        return mesh_err_set(err, MESH_E_API, 0, "cannot read the %s reply from %s", method,
                            m->target);
    }
    return 0;
}

/* One unary call of method with the serialized request req and the absolute
 * deadline deadline_ms; waits for the channel to become ready (TF's
 * fail_fast=false). 0 when the call completed, whatever its gRPC status
 * (out->status; out->response only for status 0); -MESH_E_API when gRPC could
 * not start the call or an OK reply carried no message. */
static int unary_call(struct master *m, const char *method, const uint8_t *req, size_t req_len,
                      int64_t deadline_ms, struct call_result *out, struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    grpc_slice method_slice = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(m->channel, NULL, GRPC_PROPAGATE_DEFAULTS, m->cq,
                                               method_slice, NULL, deadline_ts(deadline_ms), NULL);
    if (call == NULL) {
        return mesh_err_set(err, MESH_E_API, 0, "gRPC could not create the call %s to %s", method,
                            m->target);
    }
    struct unary u;
    unary_init(&u, req, req_len);
    int rc;
    int call_tag = 0; /* its address is the completion tag */
    grpc_call_error ce = grpc_call_start_batch(call, u.ops, 6, &call_tag, NULL);
    if (ce != GRPC_CALL_OK) {
        rc = mesh_err_set(err, MESH_E_API, 0, "gRPC refused to start %s to %s (call error %d)",
                          method, m->target, (int)ce);
    } else {
        wait_batch(m, call, &call_tag, method, deadline_ms);
        rc = take_result(m, method, &u, out, err);
    }
    unary_cleanup(&u);
    grpc_call_unref(call);
    return rc;
}

/* UNAVAILABLE, and UNKNOWN "Stream removed" that TF's FromGrpcStatus means
 * to treat as UNAVAILABLE, are worth another try. */
static bool retryable(const struct call_result *r)
{
    return r->status == GRPC_STATUS_UNAVAILABLE ||
           (r->status == GRPC_STATUS_UNKNOWN && strstr(r->message, "Stream removed") != NULL);
}

/* A call whose failure is a deadline we set (ours, not the server's). */
static int deadline_error(struct master *m, const char *what, int64_t start_ms,
                          struct mesh_err *err)
{
    return mesh_err_set(err, MESH_E_TIMEOUT, 0,
                        "TPU server %s accepted the connection but did not answer %s within "
                        "%lld s; check the TPU's health or raise --timeout",
                        m->target, what, (long long)((mesh_sys_now_ms() - start_ms + 500) / 1000));
}

/* Retry UNAVAILABLE with TF's backoff (growing 1.3x; we start
 * at 100 ms and cap at 2 s). TF stops after 10 retries; an init container's
 * job is to wait for the TPU, so we keep trying until the deadline and log
 * the first retry and then one line every 10 s. */
static int call_with_retry(struct master *m, const char *method, const uint8_t *req, size_t req_len,
                           int64_t deadline_ms, struct call_result *out, struct mesh_err *err)
{
    int64_t backoff = 100;
    int64_t next_log = 0;
    for (;;) {
        int rc = unary_call(m, method, req, req_len, deadline_ms, out, err);
        if (rc < 0 || !retryable(out)) {
            return rc;
        }
        int64_t now = mesh_sys_now_ms();
        if (now + backoff >= deadline_ms) {
            return 0;
        }
        if (now >= next_log) {
            mesh_info(MOD, "%s to %s: %s (%s); retrying until the deadline", short_method(method),
                      m->target, mesh_tf_graph_code_name(out->status), out->message);
            next_log = now + PROGRESS_MS;
        }
        struct timespec ts = {(time_t)(backoff / 1000), (long)(backoff % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 13 / 10;
        if (backoff > 2000) {
            backoff = 2000;
        }
    }
}

/* Map a finished call's non-OK status, telling our own deadline apart. */
static int call_status_error(struct master *m, const struct call_result *r, const char *what,
                             int64_t start_ms, int64_t deadline_ms, struct mesh_err *err)
{
    /* The error below may shorten the server's text; keep all of it here. */
    mesh_debug(MOD, "%s on %s: %s: %s", what, m->target, mesh_tf_graph_code_name(r->status),
               r->message);
    if (r->status == GRPC_STATUS_DEADLINE_EXCEEDED && mesh_sys_now_ms() >= deadline_ms - 50) {
        return deadline_error(m, what, start_ms, err);
    }
    return mesh_tf_graph_status_error(r->status, r->message, what, err);
}

static void close_session(struct master *m, const char *handle)
{
    uint8_t *req = NULL;
    size_t len = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_tf_graph_close_session_request(handle, &req, &len, &err) < 0) {
        mesh_warn(MOD, "CloseSession not sent: %s", err.msg);
        return;
    }
    struct call_result r;
    int rc = unary_call(m, METHOD_CLOSE_SESSION, req, len, mesh_sys_now_ms() + CLOSE_TIMEOUT_MS, &r,
                        &err);
    mesh_free(req);
    if (rc < 0) {
        mesh_warn(MOD, "CloseSession on %s failed: %s", m->target, err.msg);
    } else if (r.status != GRPC_STATUS_OK) {
        mesh_warn(MOD, "CloseSession on %s failed: %s: %s", m->target,
                  mesh_tf_graph_code_name(r.status), r.message);
    } else {
        mesh_debug(MOD, "session %s closed", handle);
    }
    result_cleanup(&r);
}

/* A reply we could not decode is the server's failure, not a configuration
 * error of ours: report it as an API failure (exit 5) naming the server. */
static int bad_reply(struct master *m, int rc, struct mesh_err *err)
{
    if (rc != -MESH_E_PARSE && rc != -MESH_E_TOOBIG) {
        return rc;
    }
    if (err != NULL) {
        err->code = MESH_E_API;
        mesh_err_prefix(err, "bad reply from the TPU server %s", m->target);
    }
    return -MESH_E_API;
}

/* Option B's address checks failed: the address we dial is not the one the
 * server knows itself by (Master::CreateSession and
 * GrpcServer::WorkerCacheFactory texts). */
static bool address_mismatch(const struct call_result *r)
{
    return r->status == GRPC_STATUS_INVALID_ARGUMENT &&
           (strstr(r->message, "differs from expected port") != NULL ||
            strstr(r->message, "is not included in the provided cluster_def") != NULL);
}

/* CreateSession; on success *out_handle is owned by the caller. First as
 * TensorFlow's own client does (option B: cluster_def + target); when the
 * server rejects the address we reached it by (a port-forward, a proxy, a
 * NAT), once more with option A, on the server's own tpu_worker job. */
static int create_session(struct master *m, const char *const *tasks, size_t ntasks,
                          int64_t deadline_ms, char **out_handle, struct mesh_err *err)
{
    int64_t now = mesh_sys_now_ms();
    struct call_result r;
    memset(&r, 0, sizeof(r));
    int rc = 0;
    for (int option_a = 0; option_a <= 1; option_a++) {
        struct mesh_tf_session_spec spec = {tasks, ntasks, deadline_ms - mesh_sys_now_ms(),
                                            option_a != 0};
        uint8_t *req = NULL;
        size_t len = 0;
        rc = mesh_tf_graph_create_session_request(&spec, &req, &len, err);
        if (rc < 0) {
            return rc;
        }
        rc = call_with_retry(m, METHOD_CREATE_SESSION, req, len, deadline_ms, &r, err);
        mesh_free(req);
        if (rc < 0 || option_a || !address_mismatch(&r)) {
            break;
        }
        mesh_info(MOD,
                  "the TPU server at %s knows itself by another address (%s); creating the "
                  "session on its own job '%s' instead",
                  m->target, r.message, MESH_TF_SERVER_JOB);
        result_cleanup(&r);
    }
    if (rc == 0 && r.status != GRPC_STATUS_OK) {
        /* With several tasks the master first reaches every task of the
         * cluster_def and waits for them without a timeout of its own:
         * say so, it is the likely cause. */
        const char *what = ntasks > 1 ? "CreateSession (the TPU's master waits until every "
                                        "task of the cluster_def answers: check every endpoint)"
                                      : "CreateSession";
        rc = call_status_error(m, &r, what, now, deadline_ms, err);
    } else if (rc == 0) {
        rc = mesh_tf_graph_parse_create_session_response(r.response, r.response_len, out_handle,
                                                         err);
        rc = bad_reply(m, rc, err);
    }
    result_cleanup(&r);
    return rc;
}

static int run_configure(struct master *m, const char *handle, int64_t deadline_ms,
                         uint8_t **out_topology, size_t *out_len, struct mesh_err *err)
{
    int64_t now = mesh_sys_now_ms();
    int64_t step_ms = deadline_ms - now - RUN_STEP_SLACK_MS;
    if (step_ms < 1000) {
        step_ms = deadline_ms - now > 1 ? deadline_ms - now : 1;
    }
    uint8_t *req = NULL;
    size_t len = 0;
    int rc =
        mesh_tf_graph_run_step_request(handle, MESH_TF_CONFIGURE_FETCH, step_ms, &req, &len, err);
    if (rc < 0) {
        return rc;
    }
    struct call_result r;
    /* No retry: a second ConfigureDistributedTPU re-initializes the TPU. */
    rc = unary_call(m, METHOD_RUN_STEP, req, len, deadline_ms, &r, err);
    mesh_free(req);
    if (rc == 0 && r.status != GRPC_STATUS_OK) {
        /* Both places an error can come back in: here the gRPC
         * status; the body's status_code is checked by the parser below. */
        rc = call_status_error(m, &r, "RunStep(ConfigureDistributedTPU)", now, deadline_ms, err);
    } else if (rc == 0) {
        rc = mesh_tf_graph_parse_run_step_response(
            r.response, r.response_len, MESH_TF_CONFIGURE_FETCH, out_topology, out_len, err);
        rc = bad_reply(m, rc, err);
    }
    result_cleanup(&r);
    return rc;
}

int mesh_tf_master_configure_tpu(const char *const *tasks, size_t ntasks, int64_t timeout_ms,
                                 uint8_t **out_topology, size_t *out_len, struct mesh_err *err)
{
    if (tasks == NULL || ntasks == 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "no TPU task address to initialize");
    }
    int64_t start = mesh_sys_now_ms();
    int64_t deadline = start + (timeout_ms > 0 ? timeout_ms : 1);
    struct master *m = master_new(tasks[0], err);
    if (m == NULL) {
        return -MESH_E_API;
    }
    mesh_info(MOD, "initializing the TPU system through grpc://%s (%zu task%s, timeout %lld s)",
              tasks[0], ntasks, ntasks == 1 ? "" : "s", (long long)(timeout_ms / 1000));

    char *handle = NULL;
    int rc = wait_connected(m, deadline, err);
    if (rc == 0) {
        rc = create_session(m, tasks, ntasks, deadline, &handle, err);
    }
    if (rc == 0) {
        mesh_debug(MOD, "session %s created; running %s", handle, MESH_TF_CONFIGURE_OP);
        rc = run_configure(m, handle, deadline, out_topology, out_len, err);
        close_session(m, handle);
    }
    if (rc == 0) {
        mesh_info(MOD, "TPU system initialized through grpc://%s in %lld ms (topology %zu bytes)",
                  tasks[0], (long long)(mesh_sys_now_ms() - start), *out_len);
    }
    mesh_free(handle);
    master_free(m);
    return rc;
}
