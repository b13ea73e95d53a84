/*
 * test_render_json.c - differential test of the renderers (core/render.h)
 * against an independent reference: tests/unit/render_ref.py, a Python
 * renderer written from the file formats of docs/shared-volume.md and the
 * input rules of render.h (its own RFC 1123 and job-name checks, Python's
 * ipaddress for IP literals, its own cJSON_Print layout), sharing no code
 * with render.c.
 *
 * Each case (fixed tables: sizes, incomplete lists, IPv6, hostile but valid
 * values, slices, generations, bad input; and seeded random worker lists)
 * is rendered here with mesh_render_all and each renderer alone; the input
 * and every result (the error code, or the bytes of each file) go to one
 * JSON line. At the end of each test the reference reads the lines, renders
 * every input itself and wants: a refusal exactly where it finds a rule
 * broken, an error code among those of the rules broken, and byte-identical
 * files otherwise. Error messages are not compared (they are render.c's
 * own words). Strings travel as JSON with every byte outside printable
 * ASCII escaped as \u00XX (the reference reads them back as Latin-1 bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/render.h"

/* ==== cases out, reference run ============================================= */

static const struct {
    const char *name;
    enum mesh_render_file_id id;
} renderers[] = {
    {"topology.json", MESH_FILE_TOPOLOGY_JSON},
    {"dtensor.env", MESH_FILE_DTENSOR_ENV},
    {"tf_config.json", MESH_FILE_TF_CONFIG},
    {"tpu.env", MESH_FILE_TPU_ENV},
    {"jax.env", MESH_FILE_JAX_ENV},
};

/* What the cases exercised, so a table can assert it reached what it claims
 * (not only errors, not only incomplete lists). */
struct tally {
    int rendered; /* mesh_render_all succeeded */
    int complete; /* ... with the env files */
    int failed;   /* mesh_render_all refused the input */
};

/* The case file of the running test (one per test function). */
static FILE *cases;
static char cases_path[64];
static int ncases;

static void open_cases(void)
{
    snprintf(cases_path, sizeof(cases_path), "/tmp/render-cases-%d.jsonl", (int)getpid());
    cases = fopen(cases_path, "we");
    assert_non_null(cases);
    ncases = 0;
}

/* Hand every case of this test to the reference; it must agree on all. */
static void judge_cases(void)
{
    assert_int_equal(fclose(cases), 0);
    cases = NULL;
    const char *py = getenv("PY");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s tests/unit/render_ref.py %s",
             py != NULL && py[0] ? py : "/usr/bin/python3", cases_path);
    int rc = system(cmd);
    unlink(cases_path);
    if (rc != 0) {
        fail_msg("the reference renderer disagrees on some of %d cases (see above)", ncases);
    }
}

/* s (n bytes) as a JSON string, every byte outside printable ASCII (and
 * quote, backslash) as \u00XX. */
static void put_bytes(const char *s, size_t n)
{
    fputc('"', cases);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            fprintf(cases, "\\u%04x", c);
        } else {
            fputc(c, cases);
        }
    }
    fputc('"', cases);
}

static void put_str(const char *key, const char *s)
{
    fprintf(cases, ",\"%s\":", key);
    if (s == NULL) {
        fputs("null", cases);
    } else {
        put_bytes(s, strlen(s));
    }
}

/* A fixed-size field that may lack its NUL: its bytes up to the NUL or the
 * end, and whether it ended. */
static void put_field(const char *key, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    fprintf(cases, ",\"%s\":", key);
    put_bytes(s, n);
    fprintf(cases, ",\"%s_terminated\":%s", key, n < cap ? "true" : "false");
}

static void put_ints(const char *key, const int *v, size_t n)
{
    fprintf(cases, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        fprintf(cases, "%s%d", i ? "," : "", v[i]);
    }
    fputc(']', cases);
}

static void put_input(const struct mesh_render_input *in)
{
    fprintf(cases, "\"in\":{\"nworkers\":%zu,\"workers_null\":%s", in->nworkers,
            in->workers == NULL ? "true" : "false");
    fprintf(cases, ",\"expected\":%d,\"self_index\":%d,\"port\":%d,\"mode\":%d", in->expected,
            in->self_index, in->port, (int)in->mode);
    fprintf(cases, ",\"generation\":%llu,\"complete\":%s,\"slices\":%d",
            (unsigned long long)in->generation, in->complete ? "true" : "false", in->slices);
    fprintf(cases, ",\"megascale_port\":%d,\"slice_only\":%s,\"slice_id\":%d,\"present\":%d",
            in->megascale_port, in->slice_only ? "true" : "false", in->slice_id, in->present);
    put_str("job_name", in->job_name);
    put_str("megascale_coordinator", in->megascale_coordinator);
    put_str("expected_source", in->expected_source);
    fputs(",\"slice\":", cases);
    if (in->slice == NULL) {
        fputs("null", cases);
    } else {
        const struct mesh_slice *s = in->slice;
        fprintf(cases, "{\"chips\":%d,\"hosts\":%d,\"chips_per_host\":%d", s->chips, s->hosts,
                s->chips_per_host);
        fprintf(cases, ",\"cores_per_chip\":%d,\"devices_per_host\":%d", s->cores_per_chip,
                s->devices_per_host);
        put_field("accelerator_type", s->accelerator_type, sizeof(s->accelerator_type));
        put_field("topology", s->topology, sizeof(s->topology));
        put_ints("mesh_shape", s->mesh_shape, 4);
        put_ints("host_bounds", s->host_bounds, 3);
        put_ints("chips_per_host_bounds", s->chips_per_host_bounds, 3);
        fputc('}', cases);
    }
    fputs(",\"workers\":[", cases);
    for (size_t i = 0; in->workers != NULL && i < in->nworkers; i++) {
        const struct mesh_worker *w = &in->workers[i];
        fprintf(cases, "%s{\"index\":%d,\"ready\":%s", i ? "," : "", w->index,
                w->ready ? "true" : "false");
        put_str("pod", w->pod);
        put_str("host", w->host);
        put_str("ip", w->ip);
        fputc('}', cases);
    }
    fputs("]}", cases);
}

/* One result: {"rc": code} or {"rc": 0, "data": bytes}. */
static void put_result(const char *key, int rc, const char *data, size_t len)
{
    fprintf(cases, ",\"%s\":{\"rc\":%d", key, rc < 0 ? -rc : 0);
    if (rc == 0 && data != NULL) {
        fputs(",\"data\":", cases);
        put_bytes(data, len);
    }
    fputc('}', cases);
}

static void compare(const struct mesh_render_input *in, const char *label, struct tally *t)
{
    assert_non_null(cases);
    fputs("{\"label\":", cases);
    put_bytes(label, strlen(label));
    fputc(',', cases);
    put_input(in);
    struct mesh_render_out a;
    struct mesh_err e;
    mesh_render_out_init(&a);
    memset(&e, 0, sizeof(e));
    int rc = mesh_render_all(in, &a, &e);
    fprintf(cases, ",\"all\":{\"rc\":%d,\"files\":{", rc < 0 ? -rc : 0);
    bool first = true;
    for (int f = 0; rc == 0 && f < MESH_FILE__COUNT; f++) {
        if (a.data[f] != NULL) {
            assert_int_equal(a.data[f][a.len[f]], '\0');
            fprintf(cases, "%s\"%s\":", first ? "" : ",", mesh_render_file_name(f));
            put_bytes(a.data[f], a.len[f]);
            first = false;
        }
    }
    fputs("}}", cases);
    if (rc == 0) {
        t->rendered++;
        t->complete += a.data[MESH_FILE_DTENSOR_ENV] != NULL;
    } else {
        t->failed++;
    }
    mesh_render_out_cleanup(&a);
    for (size_t p = 0; p < sizeof(renderers) / sizeof(renderers[0]); p++) {
        char *d = NULL;
        size_t l = 0;
        rc = mesh_render_file(renderers[p].id, in, &d, &l, &e);
        if (rc == 0) {
            assert_int_equal(d[l], '\0');
        }
        put_result(renderers[p].name, rc, d, l);
        mesh_free(d);
    }
    fputs("}\n", cases);
    ncases++;
}

/* ==== inputs ================================================================ */

/* Worker strings live here; struct mesh_worker borrows them. */
struct wstrings {
    char pod[300];
    char host[300];
    char ip[64];
};

/* The one place that knows how a worker holds its strings. */
static void set_worker(struct mesh_worker *w, int index, const struct wstrings *s, bool ready)
{
    memset(w, 0, sizeof(*w));
    w->index = index;
    w->pod = s->pod;
    w->host = s->host;
    w->ip = s->ip;
    w->ready = ready;
}

/* A worker list of up to MAX_CASE workers plus its strings. */
#define MAX_CASE 320

struct wcase {
    struct wstrings s[MAX_CASE];
    struct mesh_worker w[MAX_CASE];
    struct mesh_slice slice;
};

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

/* Worker i of a fixed table: pod, host, ip (NULL = ""), ready. */
struct wrow {
    int index;
    const char *pod;
    const char *host;
    const char *ip;
    bool ready;
};

static void load_rows(struct wcase *c, const struct wrow *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(c->s[i].pod, sizeof(c->s[i].pod), "%s", rows[i].pod ? rows[i].pod : "");
        snprintf(c->s[i].host, sizeof(c->s[i].host), "%s", rows[i].host ? rows[i].host : "");
        snprintf(c->s[i].ip, sizeof(c->s[i].ip), "%s", rows[i].ip ? rows[i].ip : "");
        set_worker(&c->w[i], rows[i].index, &c->s[i], rows[i].ready);
    }
}

/* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters, the RFC 1123 maximum. */
#define L63 "abcdefghijklmnopqrstuvwxyz0123456789-abcdefghijklmnopqrstuvwxyz"
#define L61 "abcdefghijklmnopqrstuvwxyz0123456789-abcdefghijklmnopqrstuvwx"
#define HOST253 L63 "." L63 "." L63 "." L61
#define UHOST253                                                                                   \
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ." L63 "." L63 "." L61

static const struct wrow rows_basic[] = {
    {0, "trainer-0-abcde", "trainer-0.trainer", "10.0.0.1", true},
    {1, "trainer-1-fghij", "trainer-1.trainer", "10.0.0.2", false},
    {2, "trainer-2-klmno", "trainer-2.trainer", "fd00::2", true},
    {3, "trainer-3-pqrst", "trainer-3.trainer", "10.255.255.254", true},
};

static const struct wrow rows_missing[] = {
    {0, NULL, "w-0.sub", NULL, false},          {2, "w-2", NULL, "10.1.0.2", true},
    {5, "w-5", "w-5.sub", "fd00:1::5", false},  {6, NULL, NULL, NULL, false},
    {-7, "w-minus", "w.sub", "10.0.0.7", true},
};

/* Valid, but as awkward as the grammar allows. */
static const struct wrow rows_hostile[] = {
    {0, HOST253, HOST253, "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", true},
    {1, "0", UHOST253, "::ffff:10.0.0.1", false},
    {2, "a-b.c-d.e", "10.0.0.3", "::", true},
    {3, "9-9", "fd00::abcd:EF01", "0.0.0.0", false},
    {4, "x.y", "1.2.3", "255.255.255.255", true},
    {5, "p", "A", "1:2:3:4:5:6:7:8", true},
    {6, "q", "::1", "::1", false},
    {7, "r", "Z-9.a0", "fe80::1", true},
};

/* ip all IPv6, hosts IPv6 literals too: every address is bracketed. */
static const struct wrow rows_v6[] = {
    {0, "a", "fd00::a", "fd00::a", true},
    {1, "b", "fd00::b", "fd00::b", true},
};

struct fixed {
    const char *label;
    const struct wrow *rows;
    size_t n;
    int expected;
    int self_index;
    const char *job_name;
    int port;
    enum mesh_addr_mode mode;
    uint64_t generation;
    bool complete;
    bool with_slice;
};

static const struct fixed fixed_cases[] = {
    {"0 workers", NULL, 0, 0, -1, NULL, 9991, MESH_ADDR_AUTO, 0, false, false},
    {"0 workers, expected 4", NULL, 0, 4, -1, NULL, 9991, MESH_ADDR_IP, 1, false, true},
    {"0 workers complete", NULL, 0, 0, 0, NULL, 9991, MESH_ADDR_AUTO, 1, true, true},
    {"1 worker ip", rows_basic, 1, 1, 0, NULL, 9991, MESH_ADDR_IP, 7, true, true},
    {"1 worker dns", rows_basic, 1, 0, 0, "", 1, MESH_ADDR_DNS, 7, true, false},
    {"2 workers auto", rows_basic, 2, 2, 1, "trainer", 65535, MESH_ADDR_AUTO, 2, true, true},
    {"4 workers ip", rows_basic, 4, 4, 3, "worker", 8470, MESH_ADDR_IP, 99, true, true},
    {"4 workers dns", rows_basic, 4, 4, 2, "J_9", 8470, MESH_ADDR_DNS, 99, true, true},
    {"4 workers incomplete", rows_basic, 4, 8, 2, NULL, 8470, MESH_ADDR_AUTO, 3, false, true},
    {"4 workers complete=false", rows_basic, 4, 4, -1, NULL, 8470, MESH_ADDR_IP, 3, false, true},
    {"missing slots ip", rows_missing, 5, 8, -1, NULL, 9991, MESH_ADDR_IP, 5, false, false},
    {"missing slots dns", rows_missing, 5, 8, 4, NULL, 9991, MESH_ADDR_DNS, 5, false, true},
    {"missing slots auto", rows_missing, 5, 0, -1, NULL, 9991, MESH_ADDR_AUTO, 5, false, true},
    {"missing slots 'complete'", rows_missing, 5, 5, 0, NULL, 9991, MESH_ADDR_IP, 5, true, true},
    {"hostile ip", rows_hostile, 8, 8, 7, NULL, 9991, MESH_ADDR_IP, 11, true, true},
    {"hostile dns", rows_hostile, 8, 8, 0, NULL, 65535, MESH_ADDR_DNS, 11, true, true},
    {"hostile auto", rows_hostile, 8, 0, 4, NULL, 1, MESH_ADDR_AUTO, 11, true, false},
    {"v6 dns", rows_v6, 2, 2, 1, NULL, 9991, MESH_ADDR_DNS, 12, true, true},
    {"v6 ip", rows_v6, 2, 2, 0, NULL, 9991, MESH_ADDR_IP, 12, true, true},
    {"generation max", rows_basic, 4, 4, 0, NULL, 9991, MESH_ADDR_IP, MESH_RENDER_GENERATION_MAX,
     true, true},
    {"self -1 complete", rows_basic, 4, 4, -1, NULL, 9991, MESH_ADDR_IP, 1, true, true},
    {"self 4 of 4", rows_basic, 4, 4, 4, NULL, 9991, MESH_ADDR_IP, 1, true, true},
    {"self -2", rows_basic, 4, 4, -2, NULL, 9991, MESH_ADDR_IP, 1, false, true},
    {"indices not dense", rows_missing, 2, 2, 0, NULL, 9991, MESH_ADDR_DNS, 1, true, true},
    {"no ip for ip mode", rows_missing, 2, 2, 0, NULL, 9991, MESH_ADDR_IP, 1, true, true},
    {"port 0", rows_basic, 4, 4, 0, NULL, 0, MESH_ADDR_IP, 1, true, true},
    {"port 65536", rows_basic, 4, 4, 0, NULL, 65536, MESH_ADDR_IP, 1, true, true},
    {"expected -1", rows_basic, 4, -1, 0, NULL, 9991, MESH_ADDR_IP, 1, true, true},
    {"expected over", rows_basic, 4, MESH_RENDER_MAX_WORKERS + 1, 0, NULL, 9991, MESH_ADDR_IP, 1,
     true, true},
    {"generation over", rows_basic, 4, 4, 0, NULL, 9991, MESH_ADDR_IP,
     MESH_RENDER_GENERATION_MAX + 1, true, true},
    {"mode 9", rows_basic, 4, 4, 0, NULL, 9991, (enum mesh_addr_mode)9, 1, true, true},
    {"job name bad", rows_basic, 4, 4, 0, "9lives", 9991, MESH_ADDR_IP, 1, true, true},
    {"job name quote", rows_basic, 4, 4, 0, "a'b", 9991, MESH_ADDR_IP, 1, true, true},
    {"job name long", rows_basic, 4, 4, 0,
     "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklm", 9991, MESH_ADDR_IP, 1,
     true, true},
    {"self over limit", rows_basic, 4, 4, MESH_RENDER_MAX_WORKERS, NULL, 9991, MESH_ADDR_IP, 1,
     true, true},
};

static struct mesh_render_input input_of(struct wcase *c, const struct fixed *f)
{
    struct mesh_render_input in;
    memset(&in, 0, sizeof(in));
    c->slice = slice_v4_32();
    load_rows(c, f->rows, f->n);
    in.slice = f->with_slice ? &c->slice : NULL;
    in.workers = f->n > 0 ? c->w : NULL;
    in.nworkers = f->n;
    in.expected = f->expected;
    in.self_index = f->self_index;
    in.job_name = f->job_name;
    in.port = f->port;
    in.mode = f->mode;
    in.generation = f->generation;
    in.complete = f->complete;
    return in;
}

static void test_fixed_tables(void **state)
{
    (void)state;
    open_cases();
    struct wcase *c = mesh_calloc(1, sizeof(*c));
    struct tally t = {0, 0, 0};
    for (size_t i = 0; i < sizeof(fixed_cases) / sizeof(fixed_cases[0]); i++) {
        struct mesh_render_input in = input_of(c, &fixed_cases[i]);
        compare(&in, fixed_cases[i].label, &t);
    }
    /* The table renders complete jobs, incomplete ones and refuses some. */
    assert_true(t.complete >= 10);
    assert_true(t.rendered - t.complete >= 6);
    assert_true(t.failed >= 10);
    judge_cases();
    mesh_free(c);
}

/* Bad worker values: both sides must refuse with the same words. */
static const struct {
    const char *label;
    const char *pod;
    const char *host;
    const char *ip;
} bad_workers[] = {
    {"host underscore", "p", "a_b", "10.0.0.1"},
    {"host trailing dot", "p", "a.b.", "10.0.0.1"},
    {"host dash start", "p", "-a", "10.0.0.1"},
    {"host label 64", "p", L63 "x", "10.0.0.1"},
    {"host 254", "p", HOST253 "x", "10.0.0.1"},
    {"host space", "p", "a b", "10.0.0.1"},
    {"host quote", "p", "a'b", "10.0.0.1"},
    {"host control", "p", "a\nb", "10.0.0.1"},
    {"host high byte", "p", "a\xc3\xa9", "10.0.0.1"},
    {"host v6 zone", "p", "fe80::1%eth0", "10.0.0.1"},
    {"host bracketed", "p", "[fd00::1]", "10.0.0.1"},
    {"ip leading zero", "p", "h", "010.0.0.1"},
    {"ip five parts", "p", "h", "1.2.3.4.5"},
    {"ip 256", "p", "h", "256.1.1.1"},
    {"ip three parts", "p", "h", "1.2.3"},
    {"ip name", "p", "h", "localhost"},
    {"ip empty part", "p", "h", "1..2.3"},
    {"ip trailing dot", "p", "h", "1.2.3.4."},
    {"ip v6 bad", "p", "h", "fd00:::1"},
    {"ip 46", "p", "h", "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.2555"},
    {"pod upper", "Pod", "h", "10.0.0.1"},
    {"pod underscore", "p_1", "h", "10.0.0.1"},
    {"pod 254", HOST253 "x", "h", "10.0.0.1"},
    {"pod dash end", "p-", "h", "10.0.0.1"},
    {"pod dollar", "$(reboot)", "h", "10.0.0.1"},
};

static void test_bad_workers(void **state)
{
    (void)state;
    open_cases();
    struct wcase *c = mesh_calloc(1, sizeof(*c));
    struct tally t = {0, 0, 0};
    for (size_t i = 0; i < sizeof(bad_workers) / sizeof(bad_workers[0]); i++) {
        struct wrow rows[3] = {
            {0, "w-0", "w-0.s", "10.0.0.1", true},
            {1, bad_workers[i].pod, bad_workers[i].host, bad_workers[i].ip, true},
            {2, "w-2", "w-2.s", "10.0.0.3", true},
        };
        struct fixed f = {bad_workers[i].label, rows, 3,    3,   0, NULL, 9991,
                          MESH_ADDR_AUTO,       1,    true, true};
        struct mesh_render_input in = input_of(c, &f);
        compare(&in, bad_workers[i].label, &t);
        /* The same as the only worker of an incomplete list. */
        in.workers = &c->w[1];
        in.nworkers = 1;
        in.complete = false;
        compare(&in, bad_workers[i].label, &t);
    }
    assert_int_equal(t.rendered, 0);
    judge_cases();
    mesh_free(c);
}

/* Slices: every field, odd strings (topology.json escapes them; tpu.env
 * refuses what is not a plain token), extreme integers, unterminated
 * strings. */
static void test_slices(void **state)
{
    (void)state;
    open_cases();
    static const char *const strings[] = {
        "v5litepod-256",
        "",
        "quote\"back\\slash",
        "\b\f\n\r\t",
        "\x01\x02\x1f\x7f",
        "slash/and space",
        "\xc3\xa9t\xc3\xa9 \xff\x80",
        "0123456789012345678901234567890",
        "4x4x4",
        "v4-8.x",
    };
    static const int ints[] = {0, 1, -1, 7, INT_MAX, INT_MIN, 1 << 30, -65536};
    struct wcase *c = mesh_calloc(1, sizeof(*c));
    struct tally t = {0, 0, 0};
    size_t ns = sizeof(strings) / sizeof(strings[0]);
    size_t ni = sizeof(ints) / sizeof(ints[0]);
    for (size_t i = 0; i < ns * ns; i++) {
        struct fixed f = {"slice", rows_basic, 4, 4, 1, NULL, 9991, MESH_ADDR_IP, 5, true, true};
        struct mesh_render_input in = input_of(c, &f);
        snprintf(c->slice.accelerator_type, sizeof(c->slice.accelerator_type), "%s",
                 strings[i % ns]);
        snprintf(c->slice.topology, sizeof(c->slice.topology), "%s", strings[i / ns]);
        int *fields[] = {&c->slice.chips, &c->slice.hosts, &c->slice.chips_per_host,
                         &c->slice.cores_per_chip, &c->slice.devices_per_host};
        for (size_t k = 0; k < 5; k++) {
            *fields[k] = ints[(i + k) % ni];
        }
        for (size_t k = 0; k < 4; k++) {
            c->slice.mesh_shape[k] = ints[(i * 3 + k) % ni];
        }
        for (size_t k = 0; k < 3; k++) {
            c->slice.host_bounds[k] = ints[(i * 5 + k) % ni];
            c->slice.chips_per_host_bounds[k] = ints[(i * 7 + k) % ni];
        }
        char label[64];
        snprintf(label, sizeof(label), "slice %zu/%zu", i % ns, i / ns);
        compare(&in, label, &t);
        in.complete = false;
        compare(&in, label, &t);
    }
    /* Unterminated slice strings: topology.json refuses them. */
    struct fixed f = {"slice", rows_basic, 4, 4, 1, NULL, 9991, MESH_ADDR_IP, 5, false, true};
    struct mesh_render_input in = input_of(c, &f);
    memset(c->slice.topology, 'x', sizeof(c->slice.topology));
    compare(&in, "unterminated topology", &t);
    memset(c->slice.accelerator_type, 'x', sizeof(c->slice.accelerator_type));
    compare(&in, "unterminated accelerator type", &t);
    assert_true(t.complete >= 4);
    assert_true(t.failed >= 2);
    judge_cases();
    mesh_free(c);
}

/* cJSON prints a double: exact digits, "%1.15g" or "%1.17g". */
static void test_generations(void **state)
{
    (void)state;
    open_cases();
    static const uint64_t gens[] = {
        0,
        1,
        9,
        10,
        2147483646ULL,
        2147483647ULL,
        2147483648ULL,
        4294967296ULL,
        99999999999999ULL,
        999999999999999ULL,
        1000000000000000ULL,
        1000000000000001ULL,
        1234567890123456ULL,
        2000000000000000ULL,
        4503599627370495ULL,
        4503599627370496ULL,
        4503599627370497ULL,
        5000000000000001ULL,
        5000000000000005ULL,
        8999999999999999ULL,
        9000000000000000ULL,
        9007199254740990ULL,
        MESH_RENDER_GENERATION_MAX,
    };
    struct wcase *c = mesh_calloc(1, sizeof(*c));
    struct tally t = {0, 0, 0};
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]) + 400; i++) {
        struct fixed f = {"generation", rows_basic,   2, 4,     1,    NULL,
                          9991,         MESH_ADDR_IP, 0, false, false};
        struct mesh_render_input in = input_of(c, &f);
        if (i < sizeof(gens) / sizeof(gens[0])) {
            in.generation = gens[i];
        } else {
            /* Random values of every magnitude up to the maximum. */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            in.generation = (x >> (x % 53)) % (MESH_RENDER_GENERATION_MAX + 1);
        }
        char label[64];
        snprintf(label, sizeof(label), "generation %llu", (unsigned long long)in.generation);
        compare(&in, label, &t);
    }
    assert_int_equal(t.failed, 0);
    judge_cases();
    mesh_free(c);
}

/* ---- seeded random inputs ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static size_t rnd(uint64_t *s, size_t n)
{
    return (size_t)(rng_next(s) % n);
}

/* A random RFC 1123 name of about len characters (<= 253): labels of
 * [a-z0-9-] (upper case too when upper), never starting or ending with '-',
 * at most 63 long. */
static void random_name(uint64_t *s, char *out, size_t len, bool upper)
{
    static const char lower_set[] = "abcdefghijklmnopqrstuvwxyz0123456789-";
    static const char upper_set[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-";
    const char *set = upper ? upper_set : lower_set;
    size_t nset = strlen(set);
    size_t o = 0;
    size_t label = 0;
    if (len == 0) {
        len = 1;
    }
    while (o < len) {
        bool end_of_label = o + 1 == len || label == 63 || (label > 0 && rnd(s, 12) == 0);
        if (label > 0 && end_of_label && o + 2 < len && out[o - 1] != '-') {
            out[o++] = '.';
            label = 0;
            continue;
        }
        char ch = set[rnd(s, nset)];
        bool first = label == 0;
        bool last = o + 1 == len || label == 62;
        if (ch == '-' && (first || last)) {
            ch = 'a' + (char)rnd(s, 26);
        }
        out[o++] = ch;
        label++;
        if (label == 63 && o < len) {
            if (o + 2 < len) {
                out[o++] = '.';
                label = 0;
            } else {
                break;
            }
        }
    }
    out[o] = '\0';
}

static void random_ip(uint64_t *s, char *out, size_t size)
{
    switch (rnd(s, 8)) {
    case 0:
        snprintf(out, size, "fd00:%x::%x", (unsigned)rnd(s, 0x10000), (unsigned)rnd(s, 0x10000));
        break;
    case 1:
        snprintf(out, size, "%X:%x:%x:%x:%x:%x:%x:%x", (unsigned)rnd(s, 0x10000),
                 (unsigned)rnd(s, 0x10000), (unsigned)rnd(s, 0x10000), (unsigned)rnd(s, 0x10000),
                 (unsigned)rnd(s, 0x10000), (unsigned)rnd(s, 0x10000), (unsigned)rnd(s, 0x10000),
                 (unsigned)rnd(s, 0x10000));
        break;
    case 2:
        snprintf(out, size, "::ffff:%u.%u.%u.%u", (unsigned)rnd(s, 256), (unsigned)rnd(s, 256),
                 (unsigned)rnd(s, 256), (unsigned)rnd(s, 256));
        break;
    default:
        snprintf(out, size, "%u.%u.%u.%u", (unsigned)rnd(s, 256), (unsigned)rnd(s, 256),
                 (unsigned)rnd(s, 256), (unsigned)rnd(s, 256));
        break;
    }
}

/* Now and then a value the checks must refuse. */
static void maybe_break(uint64_t *s, char *v, size_t size)
{
    static const char bad[] = "_ '\"\\$`\n\t%:[]/\x7f\x80\xff";
    size_t n = strlen(v);
    if (rnd(s, 150) != 0 || n == 0 || n + 1 >= size) {
        return;
    }
    v[rnd(s, n)] = bad[rnd(s, sizeof(bad) - 1)];
}

static void random_worker(uint64_t *s, struct wstrings *w, int i, size_t max_len, bool holes)
{
    size_t kind = rnd(s, 10);
    /* pod */
    if (holes && rnd(s, 8) == 0) {
        w->pod[0] = '\0';
    } else if (kind == 0) {
        random_name(s, w->pod, 1 + rnd(s, 253), false);
    } else {
        char suffix[6];
        random_name(s, suffix, 5, false);
        snprintf(w->pod, sizeof(w->pod), "trainer-%d-%s", i, suffix);
        if (strlen(w->pod) > max_len) {
            w->pod[max_len] = '\0';
        }
    }
    /* host: a name, an IP literal, or nothing */
    size_t hk = rnd(s, 12);
    if (holes && hk == 0) {
        w->host[0] = '\0';
    } else if (hk == 1) {
        random_ip(s, w->host, sizeof(w->host));
    } else if (kind == 1) {
        random_name(s, w->host, 1 + rnd(s, 253), true);
    } else {
        random_name(s, w->host, 1 + rnd(s, max_len), rnd(s, 3) == 0);
    }
    /* ip */
    if (holes && rnd(s, 10) == 0) {
        w->ip[0] = '\0';
    } else {
        random_ip(s, w->ip, sizeof(w->ip));
    }
    maybe_break(s, w->pod, sizeof(w->pod));
    maybe_break(s, w->host, sizeof(w->host));
    maybe_break(s, w->ip, sizeof(w->ip));
}

static void random_case(uint64_t *s, struct wcase *c, struct mesh_render_input *in)
{
    memset(in, 0, sizeof(*in));
    size_t n = rnd(s, 6) == 0 ? rnd(s, MAX_CASE + 1) : rnd(s, 40);
    size_t max_len = rnd(s, 4) == 0 ? 253 : 30;
    bool holes = rnd(s, 2) == 0; /* some workers without pod, host or ip */
    for (size_t i = 0; i < n; i++) {
        random_worker(s, &c->s[i], (int)i, max_len, holes);
        set_worker(&c->w[i], (int)i, &c->s[i], rnd(s, 3) != 0);
    }
    bool complete = rnd(s, 3) != 0;
    if (!complete && n > 1) {
        /* Missing slots: drop some workers, keep index order. */
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (rnd(s, 4) != 0) {
                c->w[o++] = c->w[i];
            }
        }
        n = o;
    }
    if (rnd(s, 50) == 0 && n > 1) {
        c->w[rnd(s, n)].index += 1; /* not dense */
    }
    c->slice = slice_v4_32();
    if (rnd(s, 10) == 0) {
        random_name(s, c->slice.accelerator_type, 1 + rnd(s, MESH_ACCEL_TYPE_MAX - 1), true);
        random_name(s, c->slice.topology, 1 + rnd(s, MESH_TOPOLOGY_MAX - 1), false);
        maybe_break(s, c->slice.accelerator_type, sizeof(c->slice.accelerator_type));
    }
    in->slice = rnd(s, 5) == 0 ? NULL : &c->slice;
    in->workers = c->w;
    in->nworkers = n;
    in->complete = complete;
    in->expected = complete ? (rnd(s, 2) == 0 ? 0 : (int)n) : (int)(n + rnd(s, 5));
    in->self_index = n > 0 && rnd(s, 8) != 0 ? (int)rnd(s, n) : -1;
    static const char *const jobs[] = {NULL, "", "worker", "trainer", "J_0", "a"};
    in->job_name = jobs[rnd(s, sizeof(jobs) / sizeof(jobs[0]))];
    in->port = rnd(s, 40) == 0 ? (int)rnd(s, 70000) : 1 + (int)rnd(s, 65535);
    in->mode = (enum mesh_addr_mode)rnd(s, 3);
    in->generation = rng_next(s) >> (11 + rnd(s, 53));
    /* Multi-slice: mostly a count that splits the job, sometimes one slice
     * listed alone (tpumesh-init's case), sometimes nonsense. */
    static const char *const coords[] = {NULL, "", "c.js.ns", "10.1.2.3", "fd00::7", "no good"};
    in->slices = (int)rnd(s, 5);
    if (rnd(s, 4) != 0) {
        int total = in->expected > 0 ? in->expected : (int)n;
        while (in->slices > 1 && total % in->slices != 0) {
            in->slices--;
        }
    }
    in->megascale_port = rnd(s, 10) == 0 ? (int)rnd(s, 70000) : (rnd(s, 2) == 0 ? 0 : 9090);
    if (rnd(s, 6) == 0) {
        /* One slice alone: indices from slice_id x n, own index among them. */
        in->slice_only = true;
        in->slices = 2 + (int)rnd(s, 3);
        in->slice_id = rnd(s, 12) == 0 ? in->slices : (int)rnd(s, (uint64_t)in->slices);
        in->megascale_coordinator = coords[rnd(s, 6)];
        for (size_t i = 0; i < n; i++) {
            if (rnd(s, 40) != 0) {
                c->w[i].index = in->slice_id * (int)n + (int)i;
            }
        }
        if (in->self_index >= 0) {
            in->self_index += in->slice_id * (int)n;
        }
    }
}

static void test_random(void **state)
{
    (void)state;
    open_cases();
    struct wcase *c = mesh_calloc(1, sizeof(*c));
    struct tally t = {0, 0, 0};
    for (uint64_t seed = 1; seed <= 400; seed++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ULL;
        struct mesh_render_input in;
        random_case(&s, c, &in);
        char label[64];
        snprintf(label, sizeof(label), "random seed %llu (%zu workers)", (unsigned long long)seed,
                 in.nworkers);
        compare(&in, label, &t);
    }
    /* The generator reaches every outcome. */
    print_message("random: %d rendered, %d of them complete, %d refused\n", t.rendered, t.complete,
                  t.failed);
    assert_true(t.complete >= 50);
    assert_true(t.rendered - t.complete >= 50);
    assert_true(t.failed >= 50);
    judge_cases();
    mesh_free(c);
}

/* Sizes around the limit: the largest list, one more. */
static void test_limits(void **state)
{
    (void)state;
    open_cases();
    size_t n = MESH_RENDER_MAX_WORKERS + 1;
    struct wstrings *s = mesh_calloc(n, sizeof(*s));
    struct mesh_worker *w = mesh_calloc(n, sizeof(*w));
    for (size_t i = 0; i < n; i++) {
        snprintf(s[i].pod, sizeof(s[i].pod), "%s", HOST253);
        snprintf(s[i].host, sizeof(s[i].host), "%s", UHOST253);
        snprintf(s[i].ip, sizeof(s[i].ip), "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.%zu",
                 i % 256);
        set_worker(&w[i], (int)i, &s[i], i % 2 == 0);
    }
    struct mesh_slice slice = slice_v4_32();
    struct mesh_render_input in = {
        .slice = &slice,
        .workers = w,
        .nworkers = MESH_RENDER_MAX_WORKERS,
        .expected = 0,
        .self_index = MESH_RENDER_MAX_WORKERS - 1,
        .job_name = NULL,
        .port = 65535,
        .mode = MESH_ADDR_DNS,
        .generation = MESH_RENDER_GENERATION_MAX,
        .complete = true,
    };
    struct tally t = {0, 0, 0};
    compare(&in, "16384 longest workers", &t);
    in.nworkers = n;
    compare(&in, "16385 workers", &t);
    in.nworkers = 3;
    in.workers = NULL;
    compare(&in, "NULL worker list", &t);
    assert_int_equal(t.rendered, 1);
    assert_int_equal(t.failed, 2);
    judge_cases();
    mesh_free(w);
    mesh_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_tables), cmocka_unit_test(test_bad_workers),
        cmocka_unit_test(test_slices),       cmocka_unit_test(test_generations),
        cmocka_unit_test(test_random),       cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
