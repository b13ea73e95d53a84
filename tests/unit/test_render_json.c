/*
 * test_render_json.c - differential test of the renderers (core/render.h).
 *
 * The oracle is the renderer tpumesh shipped before the direct writers: the
 * worker checks of every renderer, topology.json and tf_config.json built as
 * cJSON trees and printed with cJSON_Print / cJSON_PrintUnformatted, the env
 * files assembled in a mesh_buf with mesh_render_shell_quote. Each case runs
 * both on the same input and wants the same return code, the same error
 * code and message, and the same bytes for every file, for mesh_render_all
 * and for each renderer alone. Cases: fixed tables (sizes, incomplete lists,
 * IPv6, hostile but valid values, slices, generations, bad input) and
 * seeded random worker lists.
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

#include "core/mem.h"
#include "core/render.h"
#include "render_oracle.h"

/* ==== comparison ========================================================== */

typedef int (*render_fn)(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                         struct mesh_err *err);

static const struct {
    const char *name;
    render_fn now;
    render_fn oracle;
} pairs[] = {
    {"topology.json", mesh_render_topology_json, o_topology_json},
    {"dtensor.env", mesh_render_dtensor_env, o_dtensor_env},
    {"tf_config.json", mesh_render_tf_config, o_tf_config},
    {"tpu.env", mesh_render_tpu_env, o_tpu_env},
    {"jax.env", mesh_render_jax_env, o_jax_env},
};

/* What the comparisons saw, so a table can assert it exercised what it
 * claims (not only errors, not only incomplete lists). */
struct tally {
    int rendered; /* mesh_render_all succeeded */
    int complete; /* ... with the env files */
    int failed;   /* both refused the input */
};

static void show_diff(const char *what, const char *label, const char *a, size_t alen,
                      const char *b, size_t blen)
{
    size_t i = 0;
    while (i < alen && i < blen && a[i] == b[i]) {
        i++;
    }
    size_t from = i > 40 ? i - 40 : 0;
    print_error("%s: %s differs at byte %zu (new %zu bytes, oracle %zu bytes)\n"
                "  new:    \"%.*s\"\n  oracle: \"%.*s\"\n",
                label, what, i, alen, blen, (int)((alen > from + 80 ? 80 : alen - from)), a + from,
                (int)((blen > from + 80 ? 80 : blen - from)), b + from);
}

static void same_bytes(const char *what, const char *label, const char *a, size_t alen,
                       const char *b, size_t blen)
{
    if (alen != blen || memcmp(a, b, alen) != 0) {
        show_diff(what, label, a, alen, b, blen);
        fail_msg("%s: %s is not byte-identical to the oracle", label, what);
    }
    assert_int_equal(a[alen], '\0');
}

static void same_error(const char *what, const char *label, int rc_new, const struct mesh_err *e1,
                       int rc_old, const struct mesh_err *e2)
{
    if (rc_new != rc_old) {
        fail_msg("%s: %s returned %d, oracle %d (%s / %s)", label, what, rc_new, rc_old,
                 rc_new < 0 ? e1->msg : "-", rc_old < 0 ? e2->msg : "-");
    }
    if (rc_new < 0) {
        assert_int_equal(e1->code, e2->code);
        assert_string_equal(e1->msg, e2->msg);
    }
}

/* Run everything on in, both ways, and compare. */
static void compare(const struct mesh_render_input *in, const char *label, struct tally *t)
{
    struct mesh_render_out a;
    struct mesh_render_out b;
    struct mesh_err e1;
    struct mesh_err e2;
    mesh_render_out_init(&a);
    mesh_render_out_init(&b);
    memset(&e1, 0, sizeof(e1));
    memset(&e2, 0, sizeof(e2));
    int rc1 = mesh_render_all(in, &a, &e1);
    int rc2 = o_render_all(in, &b, &e2);
    same_error("mesh_render_all", label, rc1, &e1, rc2, &e2);
    if (rc1 == 0) {
        for (int f = 0; f < MESH_FILE__COUNT; f++) {
            assert_true((a.data[f] == NULL) == (b.data[f] == NULL));
            if (a.data[f] != NULL) {
                same_bytes(mesh_render_file_name(f), label, a.data[f], a.len[f], b.data[f],
                           b.len[f]);
            }
        }
        if (getenv("RENDER_JSON_VERBOSE") != NULL) {
            print_message("rendered: %s\n", label);
        }
        t->rendered++;
        t->complete += a.data[MESH_FILE_DTENSOR_ENV] != NULL;
    } else {
        t->failed++;
    }
    mesh_render_out_cleanup(&a);
    mesh_render_out_cleanup(&b);
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        char *d1 = NULL;
        char *d2 = NULL;
        size_t l1 = 0;
        size_t l2 = 0;
        rc1 = pairs[p].now(in, &d1, &l1, &e1);
        rc2 = pairs[p].oracle(in, &d2, &l2, &e2);
        same_error(pairs[p].name, label, rc1, &e1, rc2, &e2);
        if (rc1 == 0) {
            same_bytes(pairs[p].name, label, d1, l1, d2, l2);
        }
        mesh_free(d1);
        mesh_free(d2);
    }
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
    mesh_free(c);
}

/* Slices: every field, odd strings (topology.json escapes them; tpu.env
 * refuses what is not a plain token), extreme integers, unterminated
 * strings. */
static void test_slices(void **state)
{
    (void)state;
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
    mesh_free(c);
}

/* cJSON prints a double: exact digits, "%1.15g" or "%1.17g". */
static void test_generations(void **state)
{
    (void)state;
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
    in->jax_coordinator = coords[rnd(s, 6)];
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
    mesh_free(c);
}

/* Sizes around the limit: the largest list, one more. */
static void test_limits(void **state)
{
    (void)state;
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
