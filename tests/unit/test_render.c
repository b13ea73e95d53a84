/*
 * test_render.c - the renderers of the shared-volume files (core/render.h):
 * golden bytes for each file, DTensor's defaults, address modes, hostile
 * worker values, incomplete jobs, the TPU Node tf_config.json and the diff.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/mem.h"
#include "core/render.h"

/* ---- fixtures ---------------------------------------------------------- */

/* A v4-32 slice as accel.c derives it. */
static struct mesh_slice slice_v4_32(void)
{
    struct mesh_slice s;
    memset(&s, 0, sizeof(s));
    s.gen = MESH_GEN_V4;
    snprintf(s.accelerator_type, sizeof(s.accelerator_type), "v4-32");
    snprintf(s.topology, sizeof(s.topology), "2x2x4");
    s.ndims = 3;
    s.dims[0] = 2, s.dims[1] = 2, s.dims[2] = 4;
    s.chips = 16, s.hosts = 4, s.chips_per_host = 4, s.cores_per_chip = 2;
    s.devices_per_host = 4;
    s.host_bounds[0] = 1, s.host_bounds[1] = 1, s.host_bounds[2] = 4;
    s.chips_per_host_bounds[0] = 2, s.chips_per_host_bounds[1] = 2;
    s.chips_per_host_bounds[2] = 1;
    s.mesh_shape[0] = 2, s.mesh_shape[1] = 2, s.mesh_shape[2] = 4, s.mesh_shape[3] = 1;
    return s;
}

/* n workers with host hosts[i] (NULL = none) and ip ips[i] (NULL = none).
 * The strings are borrowed from the callers' (static) tables; a test that
 * changes a field points it at another string. */
static struct mesh_worker *workers_of(const char *const *hosts, const char *const *ips,
                                      const char *const *pods, size_t n)
{
    struct mesh_worker *w = mesh_calloc(n, sizeof(*w));
    for (size_t i = 0; i < n; i++) {
        w[i].index = (int)i;
        w[i].host = hosts != NULL && hosts[i] != NULL ? hosts[i] : "";
        w[i].ip = ips != NULL && ips[i] != NULL ? ips[i] : "";
        w[i].pod = pods != NULL && pods[i] != NULL ? pods[i] : "";
        w[i].ready = i % 2 == 0;
    }
    return w;
}

static const char *const hosts4[] = {"w-0.job.ns.svc", "w-1.job.ns.svc", "w-2.job.ns.svc",
                                     "w-3.job.ns.svc"};
static const char *const ips4[] = {"10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13"};
static const char *const pods4[] = {"w-0", "w-1", "w-2", "w-3"};

static struct mesh_render_input input_of(const struct mesh_worker *w, size_t n, int self,
                                         const struct mesh_slice *s)
{
    struct mesh_render_input in;
    memset(&in, 0, sizeof(in));
    in.slice = s;
    in.workers = w;
    in.nworkers = n;
    in.self_index = self;
    in.port = 10000;
    in.mode = MESH_ADDR_AUTO;
    in.generation = 7;
    in.complete = true;
    return in;
}

static void expect_render(enum mesh_render_file_id id, const struct mesh_render_input *in,
                          const char *want)
{
    char *out = NULL;
    size_t len = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    int rc = mesh_render_file(id, in, &out, &len, &err);
    if (rc != 0) {
        fail_msg("render failed: %s", err.msg);
    }
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    mesh_free(out);
}

static void expect_fail(enum mesh_render_file_id id, const struct mesh_render_input *in, int code,
                        const char *needle)
{
    char *out = NULL;
    size_t len = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    int rc = mesh_render_file(id, in, &out, &len, &err);
    if (rc == 0) {
        mesh_free(out);
        fail_msg("render of a bad input succeeded (wanted \"%s\")", needle);
    }
    assert_int_equal(rc, -code);
    assert_null(out);
    if (strstr(err.msg, needle) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    }
}

/* ---- golden files --------------------------------------------------------- */

static void test_golden_v4_32_dns(void **state)
{
    (void)state;
    struct mesh_slice s = slice_v4_32();
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_render_input in = input_of(w, 4, 1, &s);
    expect_render(MESH_FILE_DTENSOR_ENV, &in,
                  "DTENSOR_JOBS='w-0.job.ns.svc:10000,w-1.job.ns.svc:10000,w-2.job.ns.svc:10000,"
                  "w-3.job.ns.svc:10000'\n"
                  "DTENSOR_CLIENT_ID='1'\n"
                  "DTENSOR_JOB_NAME='worker'\n"
                  "DTENSOR_NUM_CLIENTS='4'\n");
    expect_render(MESH_FILE_TF_CONFIG, &in,
                  "{\"cluster\":{\"worker\":[\"w-0.job.ns.svc:10000\",\"w-1.job.ns.svc:10000\","
                  "\"w-2.job.ns.svc:10000\",\"w-3.job.ns.svc:10000\"]},"
                  "\"task\":{\"type\":\"worker\",\"index\":1}}\n");
    expect_render(MESH_FILE_TPU_ENV, &in,
                  "TPU_WORKER_ID='1'\n"
                  "TPU_WORKER_HOSTNAMES='w-0.job.ns.svc,w-1.job.ns.svc,w-2.job.ns.svc,"
                  "w-3.job.ns.svc'\n"
                  "TPU_ACCELERATOR_TYPE='v4-32'\n"
                  "TPU_TOPOLOGY='2x2x4'\n"
                  "TPU_HOST_BOUNDS='1,1,4'\n"
                  "TPU_CHIPS_PER_HOST_BOUNDS='2,2,1'\n");
    expect_render(MESH_FILE_JAX_ENV, &in,
                  "JAX_COORDINATOR_ADDRESS='w-0.job.ns.svc:8482'\n"
                  "JAX_NUM_PROCESSES='4'\n"
                  "JAX_PROCESS_ID='1'\n");
    /* The pod's JAX_COORDINATOR_PORT replaces 8482, as in JAX's detection;
     * out of range is refused. */
    in.jax_port = 9123;
    expect_render(MESH_FILE_JAX_ENV, &in,
                  "JAX_COORDINATOR_ADDRESS='w-0.job.ns.svc:9123'\n"
                  "JAX_NUM_PROCESSES='4'\n"
                  "JAX_PROCESS_ID='1'\n");
    char *bad = NULL;
    size_t bad_len = 0;
    struct mesh_err e = {0};
    in.jax_port = 65536;
    assert_int_equal(mesh_render_file(MESH_FILE_JAX_ENV, &in, &bad, &bad_len, &e), -MESH_E_RANGE);
    assert_null(bad);
    mesh_free(w);
}

static void test_golden_topology_json(void **state)
{
    (void)state;
    struct mesh_slice s = slice_v4_32();
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 2);
    struct mesh_render_input in = input_of(w, 2, 0, &s);
    in.expected = 2;
    in.expected_source = "jobset";
    in.present = 2;
    expect_render(MESH_FILE_TOPOLOGY_JSON, &in,
                  "{\n"
                  "\t\"generation\":\t7,\n"
                  "\t\"complete\":\ttrue,\n"
                  "\t\"slice\":\t{\n"
                  "\t\t\"acceleratorType\":\t\"v4-32\",\n"
                  "\t\t\"topology\":\t\"2x2x4\",\n"
                  "\t\t\"chips\":\t16,\n"
                  "\t\t\"hosts\":\t4,\n"
                  "\t\t\"chipsPerHost\":\t4,\n"
                  "\t\t\"coresPerChip\":\t2,\n"
                  "\t\t\"devicesPerHost\":\t4,\n"
                  "\t\t\"meshShape\":\t[2, 2, 4, 1]\n"
                  "\t},\n"
                  "\t\"slices\":\t{\n"
                  "\t\t\"count\":\t1,\n"
                  "\t\t\"id\":\t0,\n"
                  "\t\t\"hostsPerSlice\":\t2\n"
                  "\t},\n"
                  "\t\"jobName\":\t\"worker\",\n"
                  "\t\"clientId\":\t0,\n"
                  "\t\"numClients\":\t2,\n"
                  "\t\"expectedWorkers\":\t2,\n"
                  "\t\"presentWorkers\":\t2,\n"
                  "\t\"expectedWorkersSource\":\t\"jobset\",\n"
                  "\t\"coordinator\":\t\"w-0.job.ns.svc:10000\",\n"
                  /* render.h's fold over (0, w-0.job.ns.svc:10000), (1, w-1...),
                   * computed independently (python3) */
                  "\t\"workersDigest\":\t\"aba7585a9fea8197\",\n"
                  "\t\"workers\":\t[{\n"
                  "\t\t\t\"index\":\t0,\n"
                  "\t\t\t\"pod\":\t\"w-0\",\n"
                  "\t\t\t\"host\":\t\"w-0.job.ns.svc\",\n"
                  "\t\t\t\"ip\":\t\"10.0.0.10\",\n"
                  "\t\t\t\"address\":\t\"w-0.job.ns.svc:10000\",\n"
                  "\t\t\t\"ready\":\ttrue\n"
                  "\t\t}, {\n"
                  "\t\t\t\"index\":\t1,\n"
                  "\t\t\t\"pod\":\t\"w-1\",\n"
                  "\t\t\t\"host\":\t\"w-1.job.ns.svc\",\n"
                  "\t\t\t\"ip\":\t\"10.0.0.11\",\n"
                  "\t\t\t\"address\":\t\"w-1.job.ns.svc:10000\",\n"
                  "\t\t\t\"ready\":\tfalse\n"
                  "\t\t}]\n"
                  "}\n");
    mesh_free(w);
}

static void test_topology_json_incomplete(void **state)
{
    (void)state;
    /* Worker 0 unknown, worker 1 has only an IP: no slice, no own index. */
    struct mesh_worker w[1] = {{.index = 1, .pod = "", .host = "", .ip = "fd00::b"}};
    struct mesh_render_input in = input_of(w, 1, -1, NULL);
    in.complete = false;
    in.expected = 2;
    in.generation = 1;
    in.present = 1;
    expect_render(MESH_FILE_TOPOLOGY_JSON, &in,
                  "{\n"
                  "\t\"generation\":\t1,\n"
                  "\t\"complete\":\tfalse,\n"
                  "\t\"slice\":\tnull,\n"
                  "\t\"slices\":\t{\n"
                  "\t\t\"count\":\t1,\n"
                  "\t\t\"id\":\tnull,\n"
                  "\t\t\"hostsPerSlice\":\t2\n"
                  "\t},\n"
                  "\t\"jobName\":\t\"worker\",\n"
                  "\t\"clientId\":\tnull,\n"
                  "\t\"numClients\":\t2,\n"
                  "\t\"expectedWorkers\":\tnull,\n"
                  "\t\"presentWorkers\":\t1,\n"
                  "\t\"expectedWorkersSource\":\tnull,\n"
                  "\t\"coordinator\":\tnull,\n"
                  /* the fold over (1, [fd00::b]:10000), computed independently */
                  "\t\"workersDigest\":\t\"3d99290f7f977a38\",\n"
                  "\t\"workers\":\t[{\n"
                  "\t\t\t\"index\":\t1,\n"
                  "\t\t\t\"pod\":\tnull,\n"
                  "\t\t\t\"host\":\tnull,\n"
                  "\t\t\t\"ip\":\t\"fd00::b\",\n"
                  "\t\t\t\"address\":\t\"[fd00::b]:10000\",\n"
                  "\t\t\t\"ready\":\tfalse\n"
                  "\t\t}]\n"
                  "}\n");
    /* The env files are never rendered for an incomplete job. */
    expect_fail(MESH_FILE_DTENSOR_ENV, &in, MESH_E_INCOMPLETE, "incomplete");
    expect_fail(MESH_FILE_TF_CONFIG, &in, MESH_E_INCOMPLETE, "incomplete");
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    assert_int_equal(mesh_render_all(&in, &out, NULL), 0);
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (i == MESH_FILE_TOPOLOGY_JSON) {
            assert_non_null(out.data[i]);
        } else {
            assert_null(out.data[i]);
        }
    }
    mesh_render_out_cleanup(&out);
}

/* ---- DTensor rules, address modes (table) --------------------------------- */

static const char *const hosts_gap[] = {"a.x", NULL, "c.x"};
static const char *const ips_mixed[] = {"10.1.0.1", "fd00::2", "10.1.0.3"};
static const char *const hosts_ips[] = {"10.2.0.1", "2001:db8::7"};

static void test_dtensor_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t n;
        const char *const *hosts;
        const char *const *ips;
        enum mesh_addr_mode mode;
        int self;
        const char *job;
        int port;
        const char *want;
    } rows[] = {
        {"one client defaults to localhost", 1, hosts4, NULL, MESH_ADDR_AUTO, 0, NULL, 10000,
         "DTENSOR_JOBS='w-0.job.ns.svc:10000'\nDTENSOR_CLIENT_ID='0'\n"
         "DTENSOR_JOB_NAME='localhost'\nDTENSOR_NUM_CLIENTS='1'\n"},
        {"explicit job name and port", 2, hosts4, ips4, MESH_ADDR_AUTO, 1, "trainer", 8000,
         "DTENSOR_JOBS='w-0.job.ns.svc:8000,w-1.job.ns.svc:8000'\nDTENSOR_CLIENT_ID='1'\n"
         "DTENSOR_JOB_NAME='trainer'\nDTENSOR_NUM_CLIENTS='2'\n"},
        {"ip mode uses pod IPs", 2, hosts4, ips4, MESH_ADDR_IP, 0, NULL, 10000,
         "DTENSOR_JOBS='10.0.0.10:10000,10.0.0.11:10000'\nDTENSOR_CLIENT_ID='0'\n"
         "DTENSOR_JOB_NAME='worker'\nDTENSOR_NUM_CLIENTS='2'\n"},
        {"auto falls back to ip when a host is missing", 3, hosts_gap, ips_mixed, MESH_ADDR_AUTO, 2,
         NULL, 10000,
         "DTENSOR_JOBS='10.1.0.1:10000,[fd00::2]:10000,10.1.0.3:10000'\nDTENSOR_CLIENT_ID='2'\n"
         "DTENSOR_JOB_NAME='worker'\nDTENSOR_NUM_CLIENTS='3'\n"},
        {"IP literals from TPU_WORKER_HOSTNAMES in dns mode", 2, hosts_ips, NULL, MESH_ADDR_AUTO, 0,
         NULL, 10000,
         "DTENSOR_JOBS='10.2.0.1:10000,[2001:db8::7]:10000'\nDTENSOR_CLIENT_ID='0'\n"
         "DTENSOR_JOB_NAME='worker'\nDTENSOR_NUM_CLIENTS='2'\n"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        print_message("row: %s\n", rows[r].name);
        struct mesh_worker *w = workers_of(rows[r].hosts, rows[r].ips, NULL, rows[r].n);
        struct mesh_render_input in = input_of(w, rows[r].n, rows[r].self, NULL);
        in.mode = rows[r].mode;
        in.job_name = rows[r].job;
        in.port = rows[r].port;
        expect_render(MESH_FILE_DTENSOR_ENV, &in, rows[r].want);
        mesh_free(w);
    }
}

static void test_bad_inputs_table(void **state)
{
    (void)state;
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    static const struct {
        const char *name;
        int self, port, expected;
        const char *job;
        enum mesh_addr_mode mode;
        int code;
        const char *needle;
    } rows[] = {
        {"client id above range", 4, 10000, 0, NULL, MESH_ADDR_AUTO, MESH_E_INVAL, "outside 0..3"},
        {"unknown own index", -1, 10000, 0, NULL, MESH_ADDR_AUTO, MESH_E_INVAL, "outside 0..3"},
        {"port 0", 0, 0, 0, NULL, MESH_ADDR_AUTO, MESH_E_RANGE, "port 0"},
        {"port 70000", 0, 70000, 0, NULL, MESH_ADDR_AUTO, MESH_E_RANGE, "port 70000"},
        {"job name with a quote", 0, 10000, 0, "w'x", MESH_ADDR_AUTO, MESH_E_INVAL,
         "job name \"w\\x27x\""},
        {"job name with slash", 0, 10000, 0, "job/x", MESH_ADDR_AUTO, MESH_E_INVAL, "job name"},
        {"fewer workers than expected", 0, 10000, 5, NULL, MESH_ADDR_AUTO, MESH_E_INCOMPLETE,
         "4 of 5 workers"},
        {"bad address mode", 0, 10000, 0, NULL, (enum mesh_addr_mode)9, MESH_E_INVAL,
         "address mode"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        print_message("row: %s\n", rows[r].name);
        struct mesh_render_input in = input_of(w, 4, rows[r].self, NULL);
        in.port = rows[r].port;
        in.expected = rows[r].expected;
        in.job_name = rows[r].job;
        in.mode = rows[r].mode;
        expect_fail(MESH_FILE_DTENSOR_ENV, &in, rows[r].code, rows[r].needle);
    }
    /* Never an empty DTENSOR_JOBS ("" would mean one client with
     * an empty address in some DTensor versions). */
    struct mesh_render_input empty = input_of(NULL, 0, 0, NULL);
    expect_fail(MESH_FILE_DTENSOR_ENV, &empty, MESH_E_INCOMPLETE, "0 of 0 workers");
    expect_fail(MESH_FILE_TF_CONFIG, &empty, MESH_E_INCOMPLETE, "0 of 0 workers");
    /* A dns-mode job whose worker lost its host name is incomplete. */
    w[2].host = "";
    struct mesh_render_input in = input_of(w, 4, 0, NULL);
    in.mode = MESH_ADDR_DNS;
    expect_fail(MESH_FILE_TF_CONFIG, &in, MESH_E_INCOMPLETE, "worker 2 has no host name");
    /* Dense indices in order. */
    w[2].host = "x";
    w[3].index = 7;
    in.mode = MESH_ADDR_AUTO;
    expect_fail(MESH_FILE_JAX_ENV, &in, MESH_E_INVAL, "position 3 has index 7");
    mesh_free(w);
}

/* ---- hostile values: each must be rejected, naming worker and value ------ */

static void test_hostile_table(void **state)
{
    (void)state;
    static const struct {
        const char *field; /* host, ip or pod */
        const char *value;
        const char *needle; /* expected in the message */
    } rows[] = {
        {"host", "$(touch /tmp/x)", "worker 1: host \"$(touch /tmp/x)\""},
        {"host", "`id`", "worker 1: host"},
        {"host", "a.svc'; touch /tmp/x; '", "\\x27"},
        {"host", "a.svc\"", "\\x22"},
        {"host", "a.svc\ntouch /tmp/x", "\\x0a"},
        {"host", "a svc", "host \"a svc\""},
        {"host", "a.svc;id", "worker 1: host"},
        {"host", "a.svc,b.svc", "worker 1: host"},
        {"host", "a.svc:10000", "worker 1: host"},
        {"host", "-a.svc", "worker 1: host"},
        {"host", "a-.svc", "worker 1: host"},
        {"host", "a..svc", "worker 1: host"},
        {"host", "a.svc.", "worker 1: host"},
        {"host", "a_b.svc", "worker 1: host"},
        {"host", "[fd00::1]", "worker 1: host"},
        {"host", "1234567890123456789012345678901234567890123456789012345678901234.svc",
         "worker 1: host"},
        {"host", "caf\xc3\xa9.svc", "\\xc3\\xa9"},
        {"host", "a\\b", "\\x5c"},
        {"ip", "10.0.0.256", "worker 1: ip \"10.0.0.256\""},
        {"ip", "10.0.0.1; id", "worker 1: ip"},
        {"ip", "fe80::1%eth0", "worker 1: ip"},
        {"ip", "w-1.svc", "worker 1: ip"},
        {"pod", "W-1", "worker 1: pod \"W-1\""},
        {"pod", "w_1", "worker 1: pod"},
        {"pod", "$(reboot)", "worker 1: pod"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        print_message("row: %s=%s\n", rows[r].field, rows[r].value);
        struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
        const char **dst = strcmp(rows[r].field, "host") == 0 ? &w[1].host
                           : strcmp(rows[r].field, "ip") == 0 ? &w[1].ip
                                                              : &w[1].pod;
        *dst = rows[r].value;
        struct mesh_render_input in = input_of(w, 4, 0, NULL);
        in.mode = MESH_ADDR_IP; /* even a field the mode does not use is checked */
        expect_fail(MESH_FILE_DTENSOR_ENV, &in, MESH_E_INVAL, rows[r].needle);
        expect_fail(MESH_FILE_TOPOLOGY_JSON, &in, MESH_E_INVAL, rows[r].needle);
        struct mesh_render_out out;
        mesh_render_out_init(&out);
        assert_int_equal(mesh_render_all(&in, &out, NULL), -MESH_E_INVAL);
        for (int i = 0; i < MESH_FILE__COUNT; i++) {
            assert_null(out.data[i]);
        }
        mesh_free(w);
    }
}

static void test_hostile_long_value(void **state)
{
    (void)state;
    /* A 250-byte hostile value: the message shows a bounded, escaped prefix
     * and marks the cut with "...". */
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    char hostile[251];
    memset(hostile, '$', 250);
    hostile[250] = '\0';
    w[3].host = hostile;
    struct mesh_err err;
    assert_int_equal(mesh_render_check_worker(&w[3], &err), -MESH_E_INVAL);
    assert_non_null(strstr(err.msg, "worker 3: host \"$$$$"));
    assert_non_null(strstr(err.msg, "...\" is not"));
    assert_true(strlen(err.msg) < sizeof(err.msg) - 1);
    mesh_free(w);
}

static void test_shell_quote(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } rows[] = {
        {"plain", "'plain'"},   {"", "''"},
        {"it's", "'it'\\''s'"}, {"$(id) `id` \"x\" \\", "'$(id) `id` \"x\" \\'"},
        {"''", "''\\'''\\'''"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        struct mesh_buf b;
        mesh_buf_init(&b, 1024);
        assert_int_equal(mesh_render_shell_quote(&b, rows[r].in, NULL), 0);
        assert_string_equal(mesh_buf_str(&b), rows[r].want);
        mesh_buf_cleanup(&b);
    }
    struct mesh_buf small;
    mesh_buf_init(&small, 4);
    assert_int_equal(mesh_render_shell_quote(&small, "abcdef", NULL), -MESH_E_TOOBIG);
    mesh_buf_cleanup(&small);
}

/* ---- TPU Node tf_config.json ---------------------------------------------- */

/* A TF_CONFIG with TensorFlow's cluster_spec as its cluster and no task. */
static void test_node_tf_config(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        const char *hosts[3];
        int ports[3];
        bool default_ports;
        int rc;
        const char *want; /* output, or a needle of the message */
    } rows[] = {
        {1, {"10.120.27.5"}, {0}, true, 0, "{\"cluster\":{\"worker\":[\"10.120.27.5:8470\"]}}\n"},
        {3,
         {"10.120.27.5", "10.120.27.6", "fd00::9"},
         {8470, 8471, 8470},
         false,
         0,
         "{\"cluster\":{\"worker\":[\"10.120.27.5:8470\",\"10.120.27.6:8471\",\"[fd00::9]:"
         "8470\"]}}\n"},
        {1,
         {"tpu-host.internal"},
         {0},
         true,
         0,
         "{\"cluster\":{\"worker\":[\"tpu-host.internal:8470\"]}}\n"},
        {0, {NULL}, {0}, true, -MESH_E_INVAL, "no TPU endpoints"},
        {2, {"10.0.0.1", "10.0.0.2\"]}"}, {0}, true, -MESH_E_INVAL, "TPU endpoint 1"},
        {1, {"10.0.0.1"}, {0}, false, -MESH_E_RANGE, "port 0"},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char *out = NULL;
        size_t len = 0;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc =
            mesh_render_node_tf_config(rows[r].hosts, rows[r].default_ports ? NULL : rows[r].ports,
                                       rows[r].n, &out, &len, &err);
        assert_int_equal(rc, rows[r].rc);
        if (rc == 0) {
            assert_string_equal(out, rows[r].want);
            assert_int_equal(len, strlen(rows[r].want));
            mesh_free(out);
        } else {
            assert_null(out);
            assert_non_null(strstr(err.msg, rows[r].want));
        }
    }
}

/* ---- multi-slice ------------------------------------------------------------ */

/* Every pod of an S x H JobSet (workers slice-major, global index s*H + w):
 * tpu.env names its own slice only, with the index within the slice and
 * MEGASCALE_*; jax.env and dtensor.env stay global. */
static void check_multislice_pod(int slices, int hps, int self, int mport)
{
    int n = slices * hps;
    char(*hosts)[32] = mesh_calloc((size_t)n, sizeof(*hosts));
    char(*pods)[32] = mesh_calloc((size_t)n, sizeof(*pods));
    struct mesh_worker *w = mesh_calloc((size_t)n, sizeof(*w));
    for (int i = 0; i < n; i++) {
        snprintf(pods[i], sizeof(pods[i]), "js-slice-%d-%d", i / hps, i % hps);
        snprintf(hosts[i], sizeof(hosts[i]), "%s.js", pods[i]);
        w[i] = (struct mesh_worker){.index = i, .pod = pods[i], .host = hosts[i], .ip = ""};
    }
    struct mesh_render_input in = input_of(w, (size_t)n, self, NULL);
    in.slices = slices;
    in.megascale_port = mport;
    int sid = self / hps, wid = self % hps;
    struct mesh_buf want;
    mesh_buf_init(&want, 1 << 16);
    (void)mesh_buf_printf(&want, NULL, "TPU_WORKER_ID='%d'\nTPU_WORKER_HOSTNAMES='", wid);
    for (int k = 0; k < hps; k++) {
        (void)mesh_buf_printf(&want, NULL, "%s%s", k ? "," : "", hosts[sid * hps + k]);
    }
    (void)mesh_buf_printf(&want, NULL,
                          "'\nMEGASCALE_COORDINATOR_ADDRESS='js-slice-0-0.js'\n"
                          "MEGASCALE_NUM_SLICES='%d'\nMEGASCALE_SLICE_ID='%d'\n"
                          "MEGASCALE_PORT='%d'\n",
                          slices, sid, mport > 0 ? mport : 8080);
    expect_render(MESH_FILE_TPU_ENV, &in, mesh_buf_str(&want));
    mesh_buf_reset(&want);
    (void)mesh_buf_printf(&want, NULL,
                          "JAX_COORDINATOR_ADDRESS='js-slice-0-0.js:8482'\n"
                          "JAX_NUM_PROCESSES='%d'\nJAX_PROCESS_ID='%d'\n",
                          n, sid * hps + wid);
    expect_render(MESH_FILE_JAX_ENV, &in, mesh_buf_str(&want));
    /* DTENSOR_JOBS stays global and slice-major; the client id is global. */
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(mesh_render_file(MESH_FILE_DTENSOR_ENV, &in, &out, &len, NULL), 0);
    char needle[64];
    snprintf(needle, sizeof(needle), "DTENSOR_CLIENT_ID='%d'", self);
    assert_non_null(strstr(out, needle));
    assert_non_null(strstr(out, "DTENSOR_JOBS='js-slice-0-0.js:10000,"));
    snprintf(needle, sizeof(needle), "DTENSOR_NUM_CLIENTS='%d'", n);
    assert_non_null(strstr(out, needle));
    mesh_free(out);
    assert_int_equal(mesh_render_topology_json(&in, &out, &len, NULL), 0);
    snprintf(needle, sizeof(needle),
             "\"slices\":\t{\n\t\t\"count\":\t%d,\n\t\t\"id\":\t%d,\n\t\t\"hostsPerSlice\":\t%d\n",
             slices, sid, hps);
    assert_non_null(strstr(out, needle));
    mesh_free(out);
    mesh_buf_cleanup(&want);
    mesh_free(w);
    mesh_free(pods);
    mesh_free(hosts);
}

static void test_multislice_every_pod(void **state)
{
    (void)state;
    for (int self = 0; self < 4; self++) {
        check_multislice_pod(2, 2, self, 0);
    }
    for (int self = 0; self < 16; self++) {
        check_multislice_pod(4, 4, self, self % 2 ? 8081 : 0);
    }
}

/* Pod 3 of a 2 x 2 JobSet, byte for byte; a JobSet coordinator moves JAX's
 * coordinator only. */
static void test_multislice_golden(void **state)
{
    (void)state;
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_slice s = slice_v4_32();
    s.hosts = 2;
    struct mesh_render_input in = input_of(w, 4, 3, &s);
    in.slices = 2;
    in.megascale_port = 9090;
    expect_render(MESH_FILE_TPU_ENV, &in,
                  "TPU_WORKER_ID='1'\n"
                  "TPU_WORKER_HOSTNAMES='w-2.job.ns.svc,w-3.job.ns.svc'\n"
                  "TPU_ACCELERATOR_TYPE='v4-32'\n"
                  "TPU_TOPOLOGY='2x2x4'\n"
                  "TPU_HOST_BOUNDS='1,1,4'\n"
                  "TPU_CHIPS_PER_HOST_BOUNDS='2,2,1'\n"
                  "MEGASCALE_COORDINATOR_ADDRESS='w-0.job.ns.svc'\n"
                  "MEGASCALE_NUM_SLICES='2'\n"
                  "MEGASCALE_SLICE_ID='1'\n"
                  "MEGASCALE_PORT='9090'\n");
    /* JAX's coordinator is process 0 (slice 0 worker 0), where JAX starts
     * its coordination service. */
    expect_render(MESH_FILE_JAX_ENV, &in,
                  "JAX_COORDINATOR_ADDRESS='w-0.job.ns.svc:8482'\n"
                  "JAX_NUM_PROCESSES='4'\n"
                  "JAX_PROCESS_ID='3'\n");
    /* Refusals name the problem. */
    in.slices = 3;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_INVAL, "do not split into 3 equal slices");
    in.slices = 2;
    in.megascale_port = 70000;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_RANGE, "MEGASCALE_PORT 70000");
    mesh_free(w);
}

/* tpumesh-init's multi-slice case: only this pod's slice is listed (GKE's
 * TPU_WORKER_HOSTNAMES), with MEGASCALE_* from the environment. */
static void test_slice_only(void **state)
{
    (void)state;
    static const char *const h2[] = {"s1-0.js", "s1-1.js"};
    struct mesh_worker *w = workers_of(h2, NULL, NULL, 2);
    w[0].index = 2;
    w[1].index = 3;
    struct mesh_render_input in = input_of(w, 2, 3, NULL);
    in.slice_only = true;
    in.slices = 2;
    in.slice_id = 1;
    in.megascale_coordinator = "s0-0.js";
    expect_render(MESH_FILE_TPU_ENV, &in,
                  "TPU_WORKER_ID='1'\n"
                  "TPU_WORKER_HOSTNAMES='s1-0.js,s1-1.js'\n"
                  "MEGASCALE_COORDINATOR_ADDRESS='s0-0.js'\n"
                  "MEGASCALE_NUM_SLICES='2'\n"
                  "MEGASCALE_SLICE_ID='1'\n"
                  "MEGASCALE_PORT='8080'\n");
    expect_render(MESH_FILE_JAX_ENV, &in,
                  "JAX_COORDINATOR_ADDRESS='s0-0.js:8482'\n"
                  "JAX_NUM_PROCESSES='4'\n"
                  "JAX_PROCESS_ID='3'\n");
    /* The job's global lists are not known from one slice. */
    expect_fail(MESH_FILE_DTENSOR_ENV, &in, MESH_E_INCOMPLETE, "only slice 1 is listed");
    expect_fail(MESH_FILE_TF_CONFIG, &in, MESH_E_INCOMPLETE, "only slice 1 is listed");
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    assert_int_equal(mesh_render_all(&in, &out, NULL), 0);
    assert_null(out.data[MESH_FILE_DTENSOR_ENV]);
    assert_null(out.data[MESH_FILE_TF_CONFIG]);
    assert_non_null(out.data[MESH_FILE_TPU_ENV]);
    assert_non_null(out.data[MESH_FILE_JAX_ENV]);
    assert_non_null(strstr(out.data[MESH_FILE_TOPOLOGY_JSON], "\"complete\":\tfalse"));
    assert_non_null(strstr(out.data[MESH_FILE_TOPOLOGY_JSON], "\"numClients\":\t4"));
    assert_non_null(strstr(out.data[MESH_FILE_TOPOLOGY_JSON], "\"clientId\":\t3"));
    mesh_render_out_cleanup(&out);
    /* Without MEGASCALE_COORDINATOR_ADDRESS slice 1 cannot name slice 0's
     * worker 0: nothing but topology.json. */
    in.megascale_coordinator = NULL;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_INCOMPLETE, "MEGASCALE_COORDINATOR_ADDRESS");
    assert_int_equal(mesh_render_all(&in, &out, NULL), -MESH_E_INCOMPLETE);
    /* Slice 0 names its own first worker. */
    w[0].index = 0;
    w[1].index = 1;
    in.slice_id = 0;
    in.self_index = 0;
    char *t = NULL;
    size_t len = 0;
    assert_int_equal(mesh_render_file(MESH_FILE_TPU_ENV, &in, &t, &len, NULL), 0);
    assert_non_null(strstr(t, "MEGASCALE_COORDINATOR_ADDRESS='s1-0.js'\n"));
    mesh_free(t);
    /* Indices must be the slice's global ones, our own among them. */
    in.slice_id = 1;
    in.megascale_coordinator = "s0-0.js";
    in.self_index = 3;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_INVAL, "has index 0, not 2");
    w[0].index = 2;
    w[1].index = 3;
    in.self_index = 1;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_INVAL, "outside slice 1's 2..3");
    in.slice_id = 2;
    expect_fail(MESH_FILE_TPU_ENV, &in, MESH_E_INVAL, "slice id 2 is outside 0..1");
    mesh_free(w);
}

/* workersDigest: equal for every pod that sees the same workers, whatever
 * its own index, generation or its peers' readiness; different when a
 * worker's address changes. */
static int digest_of(const struct mesh_render_input *in, char out[17])
{
    struct mesh_render_facts f;
    int rc = mesh_render_facts(in, &f, NULL);
    memcpy(out, f.digest, 17);
    return rc;
}

static void test_workers_digest(void **state)
{
    (void)state;
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_render_input a = input_of(w, 4, 0, NULL);
    struct mesh_render_input b = input_of(w, 4, 3, NULL);
    b.generation = 12345;
    char da[17], db[17];
    assert_int_equal(digest_of(&a, da), 0);
    w[2].ready = !w[2].ready;
    assert_int_equal(digest_of(&b, db), 0);
    assert_string_equal(da, db);
    /* render.h's definition, computed here from the addresses. */
    uint64_t t = 14695981039346656037ULL;
    for (int i = 0; i < 4; i++) {
        char addr[64];
        snprintf(addr, sizeof(addr), "%s:10000", hosts4[i]);
        uint64_t h = 14695981039346656037ULL;
        for (const char *c = addr; *c; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        }
        t = (t ^ (uint64_t)i) * 1099511628211ULL;
        t = (t ^ h) * 1099511628211ULL;
    }
    char want[17];
    snprintf(want, sizeof(want), "%016llx", (unsigned long long)t);
    assert_string_equal(da, want);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(mesh_render_topology_json(&b, &out, &len, NULL), 0);
    char needle[64];
    snprintf(needle, sizeof(needle), "\"workersDigest\":\t\"%s\"", want);
    assert_non_null(strstr(out, needle));
    mesh_free(out);
    /* Another pod at the same address (a replaced peer in dns mode): same. */
    w[2].pod = "w-2-replaced";
    assert_int_equal(digest_of(&b, db), 0);
    assert_string_equal(da, db);
    w[2].host = "w-9.job.ns.svc";
    assert_int_equal(digest_of(&b, db), 0);
    assert_string_not_equal(da, db);
    mesh_free(w);
}

/* The legacy TPU Node slice may be known from the TopologyProto alone:
 * unknown accelerator type and topology are null. */
static void test_slice_unknown_strings(void **state)
{
    (void)state;
    struct mesh_slice s = slice_v4_32();
    s.accelerator_type[0] = '\0';
    s.topology[0] = '\0';
    struct mesh_render_input in = input_of(NULL, 0, 0, &s);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(mesh_render_topology_json(&in, &out, &len, NULL), 0);
    assert_non_null(strstr(out, "\"acceleratorType\":\tnull,\n\t\t\"topology\":\tnull,"));
    assert_non_null(strstr(out, "\"meshShape\":\t[2, 2, 4, 1]"));
    mesh_free(out);
}

/* ---- which files a change changes --------------------------------------- */

/* The text files whose bytes differ between two inputs, the generation
 * aside (1 << enum mesh_render_file_id; a file rendered on one side only
 * differs), or the first input error. */
static int diff(const struct mesh_render_input *a, const struct mesh_render_input *b,
                struct mesh_err *err)
{
    struct mesh_render_input a0 = *a, b0 = *b;
    a0.generation = b0.generation = 0;
    struct mesh_render_out ra, rb;
    mesh_render_out_init(&ra);
    mesh_render_out_init(&rb);
    int rc = mesh_render_all(&a0, &ra, err);
    if (rc == 0) {
        rc = mesh_render_all(&b0, &rb, err);
    }
    for (int i = 0; rc >= 0 && i < MESH_FILE__COUNT; i++) {
        bool same = ra.len[i] == rb.len[i] && (ra.data[i] == NULL) == (rb.data[i] == NULL) &&
                    (ra.data[i] == NULL || memcmp(ra.data[i], rb.data[i], ra.len[i]) == 0);
        rc |= same ? 0 : 1 << i;
    }
    mesh_render_out_cleanup(&ra);
    mesh_render_out_cleanup(&rb);
    return rc;
}

static void test_diff(void **state)
{
    (void)state;
    struct mesh_slice s = slice_v4_32();
    struct mesh_worker *a = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_worker *b = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_render_input ia = input_of(a, 4, 1, &s);
    struct mesh_render_input ib = input_of(b, 4, 1, &s);
    ib.generation = 99;
    assert_int_equal(diff(&ia, &ib, NULL), 0);
    /* A peer's pod IP changes: only topology.json in dns mode. */
    b[2].ip = "10.9.9.9";
    assert_int_equal(diff(&ia, &ib, NULL), 1 << MESH_FILE_TOPOLOGY_JSON);
    /* ... but in ip mode every file that lists worker 2 (jax.env names
     * only worker 0, the coordinator). */
    ia.mode = ib.mode = MESH_ADDR_IP;
    assert_int_equal(diff(&ia, &ib, NULL),
                     (1 << MESH_FILE_DTENSOR_ENV) | (1 << MESH_FILE_TF_CONFIG) |
                         (1 << MESH_FILE_TPU_ENV) | (1 << MESH_FILE_TOPOLOGY_JSON));
    int all_text = (1 << MESH_FILE_DTENSOR_ENV) | (1 << MESH_FILE_TF_CONFIG) |
                   (1 << MESH_FILE_TPU_ENV) | (1 << MESH_FILE_JAX_ENV) |
                   (1 << MESH_FILE_TOPOLOGY_JSON);
    /* Readiness is reported in topology.json only. */
    ia.mode = ib.mode = MESH_ADDR_AUTO;
    memcpy(b, a, 4 * sizeof(*a));
    b[3].ready = !b[3].ready;
    assert_int_equal(diff(&ia, &ib, NULL), 1 << MESH_FILE_TOPOLOGY_JSON);
    /* Becoming incomplete: the env files disappear from the set. */
    ib.complete = false;
    assert_int_equal(diff(&ia, &ib, NULL), all_text);
    /* A hostile value is an error, not a difference. */
    ib.complete = true;
    b[0].host = "$(id)";
    struct mesh_err err;
    assert_int_equal(diff(&ia, &ib, &err), -MESH_E_INVAL);
    assert_non_null(strstr(err.msg, "worker 0"));
    mesh_free(a);
    mesh_free(b);
}

static void test_env_longest(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t want;
        const char *key;
    } rows[] = {
        {"", 0, NULL},
        {"A='1'\n", 4, "A"}, /* "A=1" + NUL */
        {"A='1'\nLONGER='12345'\nB='x'\n", 13, "LONGER"},
        {"A='1'", 4, "A"}, /* no final newline */
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const char *key = NULL;
        size_t key_len = 0;
        size_t n = mesh_render_env_longest(rows[r].in, strlen(rows[r].in), &key, &key_len);
        assert_int_equal(n, rows[r].want);
        if (rows[r].key == NULL) {
            assert_null(key);
        } else {
            assert_int_equal(key_len, strlen(rows[r].key));
            assert_memory_equal(key, rows[r].key, key_len);
        }
    }
    assert_int_equal(mesh_render_env_longest(NULL, 0, NULL, NULL), 0);
}

static void test_render_all_complete(void **state)
{
    (void)state;
    struct mesh_slice s = slice_v4_32();
    struct mesh_worker *w = workers_of(hosts4, ips4, pods4, 4);
    struct mesh_render_input in = input_of(w, 4, 3, &s);
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    assert_int_equal(mesh_render_all(&in, &out, NULL), 0);
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (i == MESH_FILE_TOPOLOGY_PB) {
            assert_null(out.data[i]);
            continue;
        }
        assert_non_null(out.data[i]);
        assert_int_equal(out.len[i], strlen(out.data[i]));
        assert_int_equal(out.data[i][out.len[i] - 1], '\n');
    }
    assert_string_equal(mesh_render_file_name(MESH_FILE_TF_CONFIG), "tf_config.json");
    assert_string_equal(mesh_render_file_name(MESH_FILE_TOPOLOGY_PB), "topology.pb");
    assert_null(mesh_render_file_name(MESH_FILE__COUNT));
    mesh_render_out_cleanup(&out);
    mesh_render_out_cleanup(&out); /* idempotent */
    mesh_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_v4_32_dns),
        cmocka_unit_test(test_golden_topology_json),
        cmocka_unit_test(test_topology_json_incomplete),
        cmocka_unit_test(test_dtensor_table),
        cmocka_unit_test(test_bad_inputs_table),
        cmocka_unit_test(test_hostile_table),
        cmocka_unit_test(test_hostile_long_value),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_node_tf_config),
        cmocka_unit_test(test_multislice_every_pod),
        cmocka_unit_test(test_multislice_golden),
        cmocka_unit_test(test_slice_only),
        cmocka_unit_test(test_workers_digest),
        cmocka_unit_test(test_slice_unknown_strings),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_env_longest),
        cmocka_unit_test(test_render_all_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
