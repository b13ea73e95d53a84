/*
 * tf_graph.c - build and decode the TensorFlow master messages of TPU Node
 * initialization (tf_graph.h). Pure: protobuf-c packing and unpacking only,
 * no I/O, no clock, no logging.
 *
 * Wire facts: field numbers are TensorFlow's (the generated code comes from
 * our proto/tensorflow/... files); requests are what TF's own graph-mode
 * client sends; tests/unit/test_tf_graph.c checks them against protoc.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tensorflow/core/protobuf/master.pb-c.h"

#include "core/mem.h"
#include "tf_graph.h"

/* Pack any message into a fresh buffer (owned by the caller). */
static void pack_message(const ProtobufCMessage *m, uint8_t **out_buf, size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    /* protobuf-c packs an empty message to 0 bytes; keep a valid pointer. */
    uint8_t *buf = mesh_malloc(n > 0 ? n : 1);
    size_t w = protobuf_c_message_pack(m, buf);
    *out_buf = buf;
    *out_len = w;
}

/* Task addresses end up in the cluster_def and in the target string, which
 * the server compares byte for byte: allow host names, IPv4,
 * bracketed IPv6 and the port. */
static bool task_addr_ok(const char *s)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 300) {
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == ':' || c == '-' || c == '_' || c == '[' || c == ']';
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* The task list a CreateSession may name: 1..MESH_TF_MAX_TASKS host:port. */
static int check_tasks(const struct mesh_tf_session_spec *spec, struct mesh_err *err)
{
    if (spec == NULL || spec->ntasks == 0 || spec->tasks == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "no TPU task address to initialize (need at least one host:port)");
    }
    if (spec->ntasks > MESH_TF_MAX_TASKS) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "%zu TPU task addresses, more than the %u allowed", spec->ntasks,
                            MESH_TF_MAX_TASKS);
    }
    for (size_t i = 0; i < spec->ntasks; i++) {
        if (!task_addr_ok(spec->tasks[i])) {
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "TPU task %zu address '%.64s' is not a host:port", i,
                                spec->tasks[i] != NULL ? spec->tasks[i] : "");
        }
    }
    return 0;
}

int mesh_tf_graph_create_session_request(const struct mesh_tf_session_spec *spec, uint8_t **out_buf,
                                         size_t *out_len, struct mesh_err *err)
{
    int rc = check_tasks(spec, err);
    if (rc < 0) {
        return rc;
    }
    /* ClusterDef {job {name: "worker" tasks {key: i value: "host:port"}}}:
     * what TPUClusterResolver.cluster_spec().as_cluster_def() produces. */
    Tensorflow__JobDef__TasksEntry *entries =
        mesh_calloc(spec->ntasks, sizeof(Tensorflow__JobDef__TasksEntry));
    Tensorflow__JobDef__TasksEntry **entry_ptrs =
        mesh_calloc(spec->ntasks, sizeof(Tensorflow__JobDef__TasksEntry *));
    for (size_t i = 0; i < spec->ntasks; i++) {
        tensorflow__job_def__tasks_entry__init(&entries[i]);
        entries[i].key = (int32_t)i;
        entries[i].value = (char *)spec->tasks[i];
        entry_ptrs[i] = &entries[i];
    }
    Tensorflow__JobDef job = TENSORFLOW__JOB_DEF__INIT;
    job.name = (char *)MESH_TF_CLIENT_JOB;
    job.n_tasks = spec->ntasks;
    job.tasks = entry_ptrs;
    Tensorflow__JobDef *jobs[1] = {&job};
    Tensorflow__ClusterDef cluster = TENSORFLOW__CLUSTER_DEF__INIT;
    cluster.n_job = 1;
    cluster.job = jobs;

    Tensorflow__ConfigProto config = TENSORFLOW__CONFIG_PROTO__INIT;
    config.allow_soft_placement = true;
    config.operation_timeout_in_ms =
        spec->operation_timeout_ms > 0 ? spec->operation_timeout_ms : 0;
    config.cluster_def = spec->server_cluster ? NULL : &cluster;

    /* One NodeDef without attrs: the server fills its own defaults, and an
     * attr its OpDef lacks would be rejected. */
    Tensorflow__NodeDef node = TENSORFLOW__NODE_DEF__INIT;
    node.name = (char *)MESH_TF_CONFIGURE_OP;
    node.op = (char *)MESH_TF_CONFIGURE_OP;
    node.device = spec->server_cluster
                      ? (char *)"/job:" MESH_TF_SERVER_JOB "/replica:0/task:0/device:TPU_SYSTEM:0"
                      : (char *)"/job:" MESH_TF_CLIENT_JOB "/replica:0/task:0/device:TPU_SYSTEM:0";
    Tensorflow__NodeDef *nodes[1] = {&node};
    Tensorflow__VersionDef versions = TENSORFLOW__VERSION_DEF__INIT;
    versions.producer = MESH_TF_GRAPH_PRODUCER;
    versions.min_consumer = 0;
    Tensorflow__GraphDef graph = TENSORFLOW__GRAPH_DEF__INIT;
    graph.n_node = 1;
    graph.node = nodes;
    graph.versions = &versions;

    /* target minus "grpc://" must equal exactly one task address of the
     * cluster_def: that task is the master. */
    char *target = mesh_asprintf("grpc://%s", spec->tasks[0]);
    Tensorflow__CreateSessionRequest req = TENSORFLOW__CREATE_SESSION_REQUEST__INIT;
    req.graph_def = &graph;
    req.config = &config;
    /* target is only consulted together with a cluster_def. */
    req.target = spec->server_cluster ? (char *)"" : target;

    pack_message(&req.base, out_buf, out_len);
    mesh_free(target);
    mesh_free(entry_ptrs);
    mesh_free(entries);
    return 0;
}

int mesh_tf_graph_run_step_request(const char *handle, const char *fetch, int64_t timeout_ms,
                                   uint8_t **out_buf, size_t *out_len, struct mesh_err *err)
{
    if (handle == NULL || handle[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "RunStep needs a session handle");
    }
    if (fetch == NULL || fetch[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "RunStep needs a tensor to fetch");
    }
    Tensorflow__RunOptions options = TENSORFLOW__RUN_OPTIONS__INIT;
    options.timeout_in_ms = timeout_ms > 0 ? timeout_ms : 0;
    char *fetches[1] = {(char *)fetch};
    Tensorflow__RunStepRequest req = TENSORFLOW__RUN_STEP_REQUEST__INIT;
    req.session_handle = (char *)handle;
    req.n_fetch = 1;
    req.fetch = fetches;
    req.options = &options;
    /* Errors come back as gRPC OK + status_code in the body, so long
     * messages are not cut by metadata limits. */
    req.store_errors_in_response_body = true;
    pack_message(&req.base, out_buf, out_len);
    return 0;
}

int mesh_tf_graph_close_session_request(const char *handle, uint8_t **out_buf, size_t *out_len,
                                        struct mesh_err *err)
{
    if (handle == NULL || handle[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "CloseSession needs a session handle");
    }
    Tensorflow__CloseSessionRequest req = TENSORFLOW__CLOSE_SESSION_REQUEST__INIT;
    req.session_handle = (char *)handle;
    pack_message(&req.base, out_buf, out_len);
    return 0;
}

int mesh_tf_graph_parse_create_session_response(const uint8_t *buf, size_t len, char **out_handle,
                                                struct mesh_err *err)
{
    if (len > MESH_TF_MAX_RESPONSE) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "CreateSession response of %zu bytes exceeds the %u byte limit", len,
                            MESH_TF_MAX_RESPONSE);
    }
    Tensorflow__CreateSessionResponse *resp =
        tensorflow__create_session_response__unpack(NULL, len, buf);
    if (resp == NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "CreateSession response (%zu bytes) is not a valid "
                            "tensorflow.CreateSessionResponse",
                            len);
    }
    const char *h = resp->session_handle != NULL ? resp->session_handle : "";
    size_t hl = strlen(h);
    int rc = 0;
    if (hl == 0) {
        rc = mesh_err_set(err, MESH_E_PARSE, 0, "CreateSession response has no session handle");
    } else if (hl > MESH_TF_MAX_HANDLE) {
        rc = mesh_err_set(err, MESH_E_PARSE, 0,
                          "CreateSession response has a %zu byte session handle (limit %d)", hl,
                          MESH_TF_MAX_HANDLE);
    } else {
        for (size_t i = 0; i < hl; i++) {
            unsigned char c = (unsigned char)h[i];
            if (c < 0x20 || c == 0x7f) {
                rc = mesh_err_set(err, MESH_E_PARSE, 0,
                                  "CreateSession response has a session handle with control "
                                  "characters");
                break;
            }
        }
    }
    if (rc == 0) {
        *out_handle = mesh_strndup(h, hl);
    }
    tensorflow__create_session_response__free_unpacked(resp, NULL);
    return rc;
}

/* Decode one varint32 (at most 5 bytes) as TensorFlow's core::GetVarint32. */
static bool get_varint32(const uint8_t *p, size_t len, size_t *pos, uint32_t *out)
{
    uint32_t v = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (*pos >= len) {
            return false;
        }
        uint8_t b = p[(*pos)++];
        if (shift == 28 && (b & 0xf0) != 0) {
            return false; /* more than 32 bits */
        }
        v |= (uint32_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* The scalar string of a fetched tensor: tensor_content is
 * varint32(len) || bytes for one element (port::EncodeStringList), else
 * string_val[0]. */
static int scalar_string(const Tensorflow__TensorProto *t, const char *name, uint8_t **out_value,
                         size_t *out_len, struct mesh_err *err)
{
    if (t == NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "RunStep result '%s' carries no tensor", name);
    }
    if (t->dtype != TENSORFLOW__DATA_TYPE__DT_STRING) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "RunStep result '%s' has dtype %d, expected DT_STRING (7)", name,
                            (int)t->dtype);
    }
    if (t->tensor_shape != NULL) {
        if (t->tensor_shape->unknown_rank) {
            return mesh_err_set(err, MESH_E_PARSE, 0, "RunStep result '%s' has unknown rank", name);
        }
        for (size_t i = 0; i < t->tensor_shape->n_dim; i++) {
            const Tensorflow__TensorShapeProto__Dim *d = t->tensor_shape->dim[i];
            if (d == NULL || d->size != 1) {
                return mesh_err_set(err, MESH_E_PARSE, 0,
                                    "RunStep result '%s' is not a scalar (dimension %zu has "
                                    "size %lld)",
                                    name, i, d != NULL ? (long long)d->size : -1LL);
            }
        }
    }
    const uint8_t *src = NULL;
    size_t n = 0;
    if (t->tensor_content.len > 0) {
        size_t pos = 0;
        uint32_t elen = 0;
        if (!get_varint32(t->tensor_content.data, t->tensor_content.len, &pos, &elen) ||
            (size_t)elen != t->tensor_content.len - pos) {
            return mesh_err_set(err, MESH_E_PARSE, 0,
                                "RunStep result '%s': tensor_content is not one length-prefixed "
                                "string (%zu bytes)",
                                name, t->tensor_content.len);
        }
        src = t->tensor_content.data + pos;
        n = elen;
    } else if (t->n_string_val == 1) {
        src = t->string_val[0].data;
        n = t->string_val[0].len;
    } else {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "RunStep result '%s' holds %zu string values, expected exactly one",
                            name, t->n_string_val);
    }
    if (n > MESH_TF_MAX_TOPOLOGY) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "RunStep result '%s' is %zu bytes, more than the %u byte limit", name,
                            n, MESH_TF_MAX_TOPOLOGY);
    }
    uint8_t *v = mesh_malloc(n > 0 ? n : 1);
    if (n > 0) {
        memcpy(v, src, n);
    }
    *out_value = v;
    *out_len = n;
    return 0;
}

int mesh_tf_graph_parse_run_step_response(const uint8_t *buf, size_t len, const char *fetch,
                                          uint8_t **out_value, size_t *out_len,
                                          struct mesh_err *err)
{
    if (len > MESH_TF_MAX_RESPONSE) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "RunStep response of %zu bytes exceeds the %u byte limit", len,
                            MESH_TF_MAX_RESPONSE);
    }
    Tensorflow__RunStepResponse *resp = tensorflow__run_step_response__unpack(NULL, len, buf);
    if (resp == NULL) {
        return mesh_err_set(
            err, MESH_E_PARSE, 0,
            "RunStep response (%zu bytes) is not a valid tensorflow.RunStepResponse", len);
    }
    int rc = 0;
    const Tensorflow__NamedTensorProto *found = NULL;
    if ((int)resp->status_code != MESH_TF_OK) {
        /* The step failed and the server put the status in the body because
         * we asked it to (store_errors_in_response_body). */
        rc = mesh_tf_graph_status_error((int)resp->status_code, resp->status_error_message,
                                        "RunStep", err);
        goto out;
    }
    for (size_t i = 0; i < resp->n_tensor; i++) {
        const Tensorflow__NamedTensorProto *nt = resp->tensor[i];
        const char *name = nt != NULL && nt->name != NULL ? nt->name : "";
        if (strcmp(name, fetch) != 0) {
            /* TF's client rejects these too ("Received response for
             * unrequested fetch"). */
            rc = mesh_err_set(err, MESH_E_PARSE, 0,
                              "RunStep response holds tensor '%.80s' that was not requested", name);
            goto out;
        }
        if (found != NULL) {
            rc = mesh_err_set(err, MESH_E_PARSE, 0, "RunStep response holds '%.80s' twice", name);
            goto out;
        }
        found = nt;
    }
    if (found == NULL) {
        rc = mesh_err_set(err, MESH_E_PARSE, 0,
                          "RunStep succeeded but returned no value for '%.80s'", fetch);
        goto out;
    }
    rc = scalar_string(found->tensor, fetch, out_value, out_len, err);
out:
    tensorflow__run_step_response__free_unpacked(resp, NULL);
    return rc;
}

const char *mesh_tf_graph_code_name(int code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || (size_t)code >= sizeof(names) / sizeof(names[0])) {
        return "UNKNOWN_CODE";
    }
    return names[code];
}

/* How much of a server message goes into a "TPUs not found" error. */
#define MSG_KEEP 110

int mesh_tf_graph_status_error(int code, const char *msg, const char *what, struct mesh_err *err)
{
    const char *m = msg != NULL && msg[0] != '\0' ? msg : "(no message)";
    const char *w = what != NULL ? what : "call";
    const char *name = mesh_tf_graph_code_name(code);
    switch (code) {
    case MESH_TF_INVALID_ARGUMENT:
    case MESH_TF_NOT_FOUND:
        /* TensorFlow's initialize_tpu_system turns InvalidArgument into
         * NotFound with exactly this prefix. */
        /* TF's messages run long (a device or kernel list): keep the first
         * MSG_KEEP characters so the code, the call and the advice fit. */
        return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                            "TPUs not found in the cluster. Failed in initialization: %.*s%s (%s "
                            "on %s); is this a Cloud TPU's TensorFlow server?",
                            MSG_KEEP, m, strlen(m) > MSG_KEEP ? "..." : "", name, w);
    case MESH_TF_DEADLINE_EXCEEDED:
        return mesh_err_set(err, MESH_E_TIMEOUT, 0,
                            "TPU server: %s timed out (%s): %s; raise --timeout if the TPU is "
                            "still booting",
                            w, name, m);
    case MESH_TF_UNAVAILABLE:
    case MESH_TF_FAILED_PRECONDITION:
    case MESH_TF_RESOURCE_EXHAUSTED:
    case MESH_TF_INTERNAL:
    case MESH_TF_ABORTED:
    case MESH_TF_CANCELLED:
        return mesh_err_set(err, MESH_E_NOTREADY, 0,
                            "TPU server not ready: %s failed with %s: %s; check the TPU's state "
                            "and health",
                            w, name, m);
    case MESH_TF_UNAUTHENTICATED:
    case MESH_TF_PERMISSION_DENIED:
        return mesh_err_set(err, MESH_E_AUTH, 0, "TPU server refused %s (%s): %s", w, name, m);
    default:
        break;
    }
    return mesh_err_set(err, MESH_E_API, 0,
                        "TPU server: %s failed with %s (%d): %s; is this a TensorFlow TPU server?",
                        w, name, code, m);
}
