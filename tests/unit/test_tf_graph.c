/*
 * test_tf_graph.c - the TensorFlow master messages of TPU Node initialization
 * (common/core/tf_graph.c): encodings against protoc-encoded test
 * vectors, request validation, RunStep and
 * CreateSession response decoding, and the status -> error mapping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "tensorflow/core/protobuf/master.pb-c.h"

#include "core/err.h"
#include "core/mem.h"
#include "core/tf_graph.h"

/* Hex string -> owned bytes. */
static uint8_t *unhex(const char *hex, size_t *out_len)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = mesh_malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = hex[2 * i + (size_t)k];
            v = v * 16 + (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
        }
        b[i] = (uint8_t)v;
    }
    *out_len = n;
    return b;
}

/* CreateSessionRequest with a cluster_def, encoded by protoc (170 bytes,
 * with the map key 0 written explicitly as 08 00). */
static const char *const spec_create_session_hex =
    "0a6b0a640a17436f6e66696775726544697374726962757465645450551217436f6e666967757265446973747269"
    "627574656454505522302f6a6f623a776f726b65722f7265706c6963613a302f7461736b3a302f6465766963653a"
    "5450555f53595354454d3a30220308f20a1225380158e0a712721d0a1b0a06776f726b657212110800120d31302e"
    "302e302e323a383437301a14677270633a2f2f31302e302e302e323a38343730";

/* RunStepRequest (handle HANDLE, fetch, timeout 300000, store errors). */
static const char *const spec_run_step_hex =
    "0a0648414e444c451a19436f6e66696775726544697374726962757465645450553a302a0410e0a7123801";

static void test_create_session_matches_spec_vector(void **state)
{
    (void)state;
    const char *tasks[] = {"10.0.0.2:8470"};
    struct mesh_tf_session_spec spec = {tasks, 1, 300000, false};
    uint8_t *ours = NULL;
    size_t ours_len = 0;
    assert_int_equal(mesh_tf_graph_create_session_request(&spec, &ours, &ours_len, NULL), 0);

    /* protobuf-c omits the zero map key that protoc wrote; both mean the
     * same message. Normalise the protoc vector through protobuf-c and
     * compare bytes, then check the 2-byte difference is exactly that. */
    size_t vlen = 0;
    uint8_t *vec = unhex(spec_create_session_hex, &vlen);
    assert_int_equal(vlen, 170);
    Tensorflow__CreateSessionRequest *r =
        tensorflow__create_session_request__unpack(NULL, vlen, vec);
    assert_non_null(r);
    size_t nlen = tensorflow__create_session_request__get_packed_size(r);
    uint8_t *norm = mesh_malloc(nlen);
    tensorflow__create_session_request__pack(r, norm);
    assert_int_equal(ours_len, nlen);
    assert_int_equal(ours_len, vlen - 2);
    assert_memory_equal(ours, norm, nlen);

    /* And the decoded fields are the ones TF's client sends. */
    assert_string_equal(r->target, "grpc://10.0.0.2:8470");
    assert_int_equal(r->graph_def->n_node, 1);
    assert_string_equal(r->graph_def->node[0]->op, "ConfigureDistributedTPU");
    assert_int_equal(r->graph_def->node[0]->n_attr, 0);
    assert_string_equal(r->config->cluster_def->job[0]->name, "worker");
    tensorflow__create_session_request__free_unpacked(r, NULL);
    mesh_free(norm);
    mesh_free(vec);
    mesh_free(ours);
}

static void test_create_session_multi_task(void **state)
{
    (void)state;
    const char *tasks[] = {"10.0.0.2:8470", "10.0.0.3:8470", "tpu-host-2.example:8470"};
    struct mesh_tf_session_spec spec = {tasks, 3, 0, false};
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(mesh_tf_graph_create_session_request(&spec, &buf, &len, NULL), 0);
    Tensorflow__CreateSessionRequest *r =
        tensorflow__create_session_request__unpack(NULL, len, buf);
    assert_non_null(r);
    const Tensorflow__JobDef *job = r->config->cluster_def->job[0];
    assert_int_equal(r->config->cluster_def->n_job, 1);
    assert_int_equal(job->n_tasks, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(job->tasks[i]->key, (int)i);
        assert_string_equal(job->tasks[i]->value, tasks[i]);
    }
    assert_string_equal(r->target, "grpc://10.0.0.2:8470");
    assert_string_equal(r->graph_def->node[0]->device,
                        "/job:worker/replica:0/task:0/device:TPU_SYSTEM:0");
    assert_int_equal(r->config->operation_timeout_in_ms, 0);
    assert_true(r->config->allow_soft_placement);
    assert_int_equal(r->graph_def->versions->producer, MESH_TF_GRAPH_PRODUCER);
    tensorflow__create_session_request__free_unpacked(r, NULL);
    mesh_free(buf);
}

static void test_create_session_option_a(void **state)
{
    (void)state;
    const char *tasks[] = {"127.0.0.1:40000"};
    struct mesh_tf_session_spec spec = {tasks, 1, 5000, true};
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(mesh_tf_graph_create_session_request(&spec, &buf, &len, NULL), 0);
    Tensorflow__CreateSessionRequest *r =
        tensorflow__create_session_request__unpack(NULL, len, buf);
    assert_non_null(r);
    assert_null(r->config->cluster_def);
    assert_string_equal(r->target, "");
    assert_string_equal(r->graph_def->node[0]->device,
                        "/job:tpu_worker/replica:0/task:0/device:TPU_SYSTEM:0");
    assert_int_equal(r->config->operation_timeout_in_ms, 5000);
    tensorflow__create_session_request__free_unpacked(r, NULL);
    mesh_free(buf);
}

static void test_create_session_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *task;
        const char *needle;
    } rows[] = {
        {"", "is not a host:port"},
        {"10.0.0.2:8470 ", "is not a host:port"},
        {"grpc://10.0.0.2:8470", "is not a host:port"},
        {"10.0.0.2:8470,10.0.0.3:8470", "is not a host:port"},
        {"host\n:1", "is not a host:port"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *tasks[] = {rows[i].task};
        struct mesh_tf_session_spec spec = {tasks, 1, 0, false};
        struct mesh_err err;
        mesh_err_clear(&err);
        uint8_t *buf = NULL;
        size_t len = 0;
        assert_int_equal(mesh_tf_graph_create_session_request(&spec, &buf, &len, &err),
                         -MESH_E_INVAL);
        assert_null(buf);
        assert_non_null(strstr(err.msg, rows[i].needle));
    }
    struct mesh_tf_session_spec none = {NULL, 0, 0, false};
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(mesh_tf_graph_create_session_request(&none, &buf, &len, NULL), -MESH_E_INVAL);
}

static void test_run_step_and_close_requests(void **state)
{
    (void)state;
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(
        mesh_tf_graph_run_step_request("HANDLE", MESH_TF_CONFIGURE_FETCH, 300000, &buf, &len, NULL),
        0);
    size_t vlen = 0;
    uint8_t *vec = unhex(spec_run_step_hex, &vlen);
    assert_int_equal(len, 43);
    assert_int_equal(len, vlen);
    assert_memory_equal(buf, vec, len);
    mesh_free(vec);
    mesh_free(buf);

    assert_int_equal(mesh_tf_graph_close_session_request("abc123", &buf, &len, NULL), 0);
    static const uint8_t close_bytes[] = {0x0a, 0x06, 'a', 'b', 'c', '1', '2', '3'};
    assert_int_equal(len, sizeof(close_bytes));
    assert_memory_equal(buf, close_bytes, len);
    mesh_free(buf);

    buf = NULL;
    assert_int_equal(mesh_tf_graph_run_step_request("", "x:0", 0, &buf, &len, NULL), -MESH_E_INVAL);
    assert_int_equal(mesh_tf_graph_run_step_request("h", "", 0, &buf, &len, NULL), -MESH_E_INVAL);
    assert_int_equal(mesh_tf_graph_close_session_request(NULL, &buf, &len, NULL), -MESH_E_INVAL);
    assert_null(buf);
}

/* How a test RunStepResponse is built. */
enum content_kind {
    CONTENT_PREFIXED, /* tensor_content = varint(len) || value */
    CONTENT_STRING_VAL,
    CONTENT_RAW, /* tensor_content = value, no prefix */
    CONTENT_NONE,
};

struct rs_row {
    const char *name;
    int status_code;
    const char *status_msg;
    const char *tensor_name; /* NULL: no tensor at all */
    int dtype;
    int ndims;
    int dim_size;
    enum content_kind content;
    const char *value;
    int want_rc;
    const char *want_msg; /* substring of err.msg, or the value on success */
};

static uint8_t *build_run_step_response(const struct rs_row *row, size_t *out_len)
{
    Tensorflow__RunStepResponse resp = TENSORFLOW__RUN_STEP_RESPONSE__INIT;
    Tensorflow__NamedTensorProto nt = TENSORFLOW__NAMED_TENSOR_PROTO__INIT;
    Tensorflow__NamedTensorProto *nts[1] = {&nt};
    Tensorflow__TensorProto t = TENSORFLOW__TENSOR_PROTO__INIT;
    Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
    Tensorflow__TensorShapeProto__Dim dim = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
    Tensorflow__TensorShapeProto__Dim *dims[1] = {&dim};
    uint8_t content[512];
    ProtobufCBinaryData sv;
    size_t vlen = strlen(row->value);

    resp.status_code = (Tensorflow__Error__Code)row->status_code;
    resp.status_error_message = (char *)row->status_msg;
    if (row->tensor_name != NULL) {
        resp.n_tensor = 1;
        resp.tensor = nts;
        nt.name = (char *)row->tensor_name;
        nt.tensor = &t;
        t.dtype = (Tensorflow__DataType)row->dtype;
        t.tensor_shape = &shape;
        if (row->ndims > 0) {
            dim.size = row->dim_size;
            shape.n_dim = 1;
            shape.dim = dims;
        }
        switch (row->content) {
        case CONTENT_PREFIXED:
            content[0] = (uint8_t)vlen; /* test values are < 128 bytes */
            memcpy(content + 1, row->value, vlen);
            t.tensor_content.data = content;
            t.tensor_content.len = vlen + 1;
            break;
        case CONTENT_RAW:
            memcpy(content, row->value, vlen);
            t.tensor_content.data = content;
            t.tensor_content.len = vlen;
            break;
        case CONTENT_STRING_VAL:
            sv.data = (uint8_t *)row->value;
            sv.len = vlen;
            t.n_string_val = 1;
            t.string_val = &sv;
            break;
        case CONTENT_NONE:
            break;
        }
    }
    size_t n = tensorflow__run_step_response__get_packed_size(&resp);
    uint8_t *buf = mesh_malloc(n + 1);
    tensorflow__run_step_response__pack(&resp, buf);
    *out_len = n;
    return buf;
}

static void test_parse_run_step_response(void **state)
{
    (void)state;
    const char *F = MESH_TF_CONFIGURE_FETCH;
    static const struct rs_row rows[] = {
        {"prefixed content", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 0, 0, CONTENT_PREFIXED,
         "\x0a\x04\x02\x02\x01\x02", 0, "\x0a\x04\x02\x02\x01\x02"},
        {"string_val fallback", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 0, 0, CONTENT_STRING_VAL, "topo",
         0, "topo"},
        {"shape [1] accepted", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 1, 1, CONTENT_PREFIXED, "ab", 0,
         "ab"},
        {"body status InvalidArgument", 3, "No matching devices found for '/job:worker'", NULL, 0,
         0, 0, CONTENT_NONE, "", -MESH_E_NOTFOUND,
         "TPUs not found in the cluster. Failed in initialization: No matching devices"},
        {"body status Internal", 13, "TPU chip failure", NULL, 0, 0, 0, CONTENT_NONE, "",
         -MESH_E_NOTREADY, "INTERNAL"},
        {"body status DeadlineExceeded", 4, "Timed out", NULL, 0, 0, 0, CONTENT_NONE, "",
         -MESH_E_TIMEOUT, "timed out"},
        {"unknown body status", 77, "odd", NULL, 0, 0, 0, CONTENT_NONE, "", -MESH_E_API,
         "UNKNOWN_CODE"},
        {"no tensor", 0, "", NULL, 0, 0, 0, CONTENT_NONE, "", -MESH_E_PARSE, "no value"},
        {"unrequested fetch", 0, "", "Other:0", 7, 0, 0, CONTENT_PREFIXED, "x", -MESH_E_PARSE,
         "not requested"},
        {"wrong dtype", 0, "", MESH_TF_CONFIGURE_FETCH, 9, 0, 0, CONTENT_PREFIXED, "x",
         -MESH_E_PARSE, "DT_STRING"},
        {"not a scalar", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 1, 2, CONTENT_PREFIXED, "x",
         -MESH_E_PARSE, "not a scalar"},
        {"length prefix mismatch", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 0, 0, CONTENT_RAW, "\x05xy",
         -MESH_E_PARSE, "length-prefixed"},
        {"truncated varint", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 0, 0, CONTENT_RAW, "\x80",
         -MESH_E_PARSE, "length-prefixed"},
        {"no string value", 0, "", MESH_TF_CONFIGURE_FETCH, 7, 0, 0, CONTENT_NONE, "",
         -MESH_E_PARSE, "exactly one"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t len = 0;
        uint8_t *buf = build_run_step_response(&rows[i], &len);
        struct mesh_err err;
        mesh_err_clear(&err);
        uint8_t *val = NULL;
        size_t vlen = 0;
        int rc = mesh_tf_graph_parse_run_step_response(buf, len, F, &val, &vlen, &err);
        if (rc != rows[i].want_rc) {
            fail_msg("row '%s': rc %d, want %d (%s)", rows[i].name, rc, rows[i].want_rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(vlen, strlen(rows[i].want_msg));
            assert_memory_equal(val, rows[i].want_msg, vlen);
            mesh_free(val);
        } else {
            assert_null(val);
            if (strstr(err.msg, rows[i].want_msg) == NULL) {
                fail_msg("row '%s': message '%s' lacks '%s'", rows[i].name, err.msg,
                         rows[i].want_msg);
            }
        }
        mesh_free(buf);
    }
}

static void test_parse_run_step_garbage(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
    } rows[] = {
        {"\x0a\x05\x0a\x01", 4},     /* truncated nested message */
        {"\xff\xff\xff\xff\xff", 5}, /* bad tag varint */
        {"\x0b", 1},                 /* start group (not allowed) */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        uint8_t *val = NULL;
        size_t vlen = 0;
        struct mesh_err err;
        mesh_err_clear(&err);
        assert_int_equal(mesh_tf_graph_parse_run_step_response(
                             (const uint8_t *)rows[i].bytes, rows[i].len, "x:0", &val, &vlen, &err),
                         -MESH_E_PARSE);
        assert_null(val);
    }
    uint8_t *val = NULL;
    size_t vlen = 0;
    assert_int_equal(
        mesh_tf_graph_parse_run_step_response((const uint8_t *)"", 0, "x:0", &val, &vlen, NULL),
        -MESH_E_PARSE);
    assert_int_equal(mesh_tf_graph_parse_run_step_response(
                         (const uint8_t *)"", MESH_TF_MAX_RESPONSE + 1u, "x:0", &val, &vlen, NULL),
                     -MESH_E_TOOBIG);
}

static void test_parse_create_session_response(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
        int rc;
        const char *want;
    } rows[] = {
        {"\x0a\x10"
         "8f1c0a6e3b2d4c5a",
         18, 0, "8f1c0a6e3b2d4c5a"},
        {"\x0a\x01h\x10\x00", 5, 0, "h"}, /* graph_version 0 written explicitly */
        {"", 0, -MESH_E_PARSE, "no session handle"},
        {"\x10\x05", 2, -MESH_E_PARSE, "no session handle"},
        {"\x0a\x02h\x01", 4, -MESH_E_PARSE, "control characters"},
        {"\x0a\x05h", 3, -MESH_E_PARSE, "not a valid"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *h = NULL;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_tf_graph_parse_create_session_response((const uint8_t *)rows[i].bytes,
                                                             rows[i].len, &h, &err);
        assert_int_equal(rc, rows[i].rc);
        if (rc == 0) {
            assert_string_equal(h, rows[i].want);
            mesh_free(h);
        } else {
            assert_null(h);
            assert_non_null(strstr(err.msg, rows[i].want));
        }
    }
}

static void test_status_error_mapping(void **state)
{
    (void)state;
    static const struct {
        int code;
        int rc;
        const char *needle;
    } rows[] = {
        {MESH_TF_INVALID_ARGUMENT, -MESH_E_NOTFOUND,
         "TPUs not found in the cluster. Failed in "
         "initialization: m (INVALID_ARGUMENT on w)"},
        {MESH_TF_NOT_FOUND, -MESH_E_NOTFOUND, "TPUs not found in the cluster"},
        {MESH_TF_DEADLINE_EXCEEDED, -MESH_E_TIMEOUT, "DEADLINE_EXCEEDED"},
        {MESH_TF_UNAVAILABLE, -MESH_E_NOTREADY, "UNAVAILABLE"},
        {MESH_TF_ABORTED, -MESH_E_NOTREADY, "ABORTED"},
        {MESH_TF_INTERNAL, -MESH_E_NOTREADY, "INTERNAL"},
        {MESH_TF_PERMISSION_DENIED, -MESH_E_AUTH, "PERMISSION_DENIED"},
        {MESH_TF_UNAUTHENTICATED, -MESH_E_AUTH, "UNAUTHENTICATED"},
        {MESH_TF_UNIMPLEMENTED, -MESH_E_API, "UNIMPLEMENTED (12)"},
        {MESH_TF_UNKNOWN, -MESH_E_API, "UNKNOWN (2)"},
        {-1, -MESH_E_API, "UNKNOWN_CODE"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_err err;
        mesh_err_clear(&err);
        assert_int_equal(mesh_tf_graph_status_error(rows[i].code, "m", "w", &err), rows[i].rc);
        if (strstr(err.msg, rows[i].needle) == NULL) {
            fail_msg("code %d: '%s' lacks '%s'", rows[i].code, err.msg, rows[i].needle);
        }
    }
    /* A long TF message is shortened so the code, the call and the advice survive. */
    char longmsg[400];
    memset(longmsg, 'x', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    struct mesh_err err;
    mesh_err_clear(&err);
    assert_int_equal(mesh_tf_graph_status_error(3, longmsg, "CreateSession", &err),
                     -MESH_E_NOTFOUND);
    assert_non_null(strstr(err.msg, "xxx... (INVALID_ARGUMENT on CreateSession); is this"));
    assert_int_equal(
        strncmp(err.msg, "TPUs not found in the cluster. Failed in initialization: ", 57), 0);
    assert_string_equal(mesh_tf_graph_code_name(16), "UNAUTHENTICATED");
    assert_string_equal(mesh_tf_graph_code_name(17), "UNKNOWN_CODE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_session_matches_spec_vector),
        cmocka_unit_test(test_create_session_multi_task),
        cmocka_unit_test(test_create_session_option_a),
        cmocka_unit_test(test_create_session_rejects),
        cmocka_unit_test(test_run_step_and_close_requests),
        cmocka_unit_test(test_parse_run_step_response),
        cmocka_unit_test(test_parse_run_step_garbage),
        cmocka_unit_test(test_parse_create_session_response),
        cmocka_unit_test(test_status_error_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
