/*
 * test_k8s_pod.c - Pod JSON -> record, against recorded fixtures in
 * tests/fixtures/k8s/ (one row per fixture), plus the RFC 1123 checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/k8s_pod.h"
#include "tests/pod_parse.h"
#include "core/mem.h"

/* Read a fixture relative to $ROOT (tests/run.sh exports it) or the cwd. */
static char *read_fixture(const char *name, size_t *out_len)
{
    const char *root = getenv("ROOT");
    mesh_autofree char *path = mesh_asprintf("%s/tests/fixtures/k8s/%s", root ? root : ".", name);
    mesh_autofclose FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = mesh_malloc(1 << 16);
    size_t n = fread(buf, 1, 1 << 16, f);
    assert_true(n < (1 << 16));
    *out_len = n;
    return buf;
}

static const struct row {
    const char *fixture;
    int rc;
    const char *name, *hostname, *subdomain, *ip, *job, *jobset, *owner_kind;
    int completion_index, pod_index, job_global_index, expected;
    bool ip_v6, ready, terminating, finished, invalid;
    const char *reason; /* substring, when invalid */
} rows[] = {
    {"indexed-job-running.json", 0, "trainer-3-x7k2q", "trainer-3", "trainer", "10.1.2.3",
     "trainer", "", "Job", 3, -1, -1, 4, false, true, false, false, false, NULL},
    {"indexed-job-pending.json", 0, "trainer-1-abcde", "trainer-1", "trainer", "", "trainer", "",
     "Job", 1, -1, -1, -1, false, false, false, false, false, NULL},
    {"indexed-job-terminating.json", 0, "trainer-3-x7k2q", "trainer-3", "trainer", "10.1.2.3",
     "trainer", "", "Job", 3, -1, -1, 4, false, false, true, false, false, NULL},
    {"indexed-job-failed.json", 0, "trainer-3-x7k2q", "trainer-3", "trainer", "10.1.2.3", "trainer",
     "", "Job", 3, -1, -1, 4, false, true, false, true, false, NULL},
    {"statefulset-ipv6.json", 0, "w-10", "w-10", "w", "fd00:10:1::a", "", "", "StatefulSet", -1, 10,
     -1, -1, true, false, false, false, false, NULL},
    {"jobset-multislice.json", 0, "ms-slice-1-2-zz9qp", "ms-slice-1-2", "ms", "10.1.2.3",
     "ms-slice-1", "ms", "Job", 2, -1, 1, -1, false, true, false, false, false, NULL},
    {"podips-only.json", 0, "trainer-3-x7k2q", "trainer-3", "trainer", "10.1.2.3", "trainer", "",
     "Job", 3, -1, -1, 4, false, true, false, false, false, NULL},
    {"hostile-name.json", 0, ". dtensor.env", NULL, NULL, NULL, NULL, NULL, NULL, 3, -1, -1, 4,
     false, true, false, false, true, "metadata.name '. dtensor.env' is not an RFC 1123"},
    {"hostile-hostname.json", 0, "trainer-3-x7k2q", "", "trainer", "10.1.2.3", NULL, NULL, NULL, 3,
     -1, -1, 4, false, true, false, false, true, "spec.hostname 'x;reboot'"},
    {"bad-index.json", 0, "trainer-3-x7k2q", NULL, NULL, NULL, NULL, NULL, NULL, 3, -1, -1, 4,
     false, true, false, false, true, "'three' is not an integer"},
    {"index-disagree.json", 0, "trainer-3-x7k2q", NULL, NULL, NULL, NULL, NULL, NULL, 3, -1, -1, 4,
     false, true, false, false, true, "'3/2' annotation/label disagree"},
    {"bad-ip.json", 0, "trainer-3-x7k2q", NULL, NULL, "", NULL, NULL, NULL, 3, -1, -1, 4, false,
     true, false, false, true, "status.podIP '10.1.2.300' is not an IP"},
    {"bad-expected.json", 0, "trainer-3-x7k2q", NULL, NULL, NULL, NULL, NULL, NULL, 3, -1, -1, -1,
     false, true, false, false, true,
     "annotation tpumesh.dev/expected-workers=\"0\" is not an integer"},
    {"bookmark.json", -MESH_E_INVAL, "", NULL, NULL, NULL, NULL, NULL, NULL, -1, -1, -1, -1, false,
     false, false, false, true, "no metadata.name"},
};

static void check_str(const char *want, const char *got)
{
    if (want != NULL) {
        assert_string_equal(got, want);
    }
}

static void test_fixtures(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        size_t len = 0;
        mesh_autofree char *buf = read_fixture(r->fixture, &len);
        struct mesh_k8s_pod p;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = test_pod_parse(buf, len, &p, &err);
        print_message("fixture %s: rc=%d invalid=%d reason=%s\n", r->fixture, rc, p.invalid,
                      p.reason);
        assert_int_equal(rc, r->rc);
        assert_string_equal(p.name, r->name);
        check_str(r->hostname, p.hostname);
        check_str(r->subdomain, p.subdomain);
        check_str(r->ip, p.ip);
        check_str(r->job, p.job_name);
        check_str(r->jobset, p.jobset_name);
        check_str(r->owner_kind, p.owner_kind);
        assert_int_equal(p.completion_index, r->completion_index);
        assert_int_equal(p.pod_index, r->pod_index);
        assert_int_equal(p.job_global_index, r->job_global_index);
        assert_int_equal(p.expected_workers, r->expected);
        assert_int_equal(p.ip_v6, r->ip_v6);
        assert_int_equal(p.ready, r->ready);
        assert_int_equal(p.terminating, r->terminating);
        assert_int_equal(p.finished, r->finished);
        assert_int_equal(p.invalid, r->invalid);
        if (r->reason != NULL) {
            assert_non_null(strstr(p.reason, r->reason));
        }
        /* Extraction is deterministic: the same bytes give an equal record. */
        struct mesh_k8s_pod q;
        (void)test_pod_parse(buf, len, &q, NULL);
        assert_memory_equal(&p, &q, sizeof(p));
    }
}

/* An update that changes only fields we do not keep gives an equal record;
 * one that changes a kept field does not. */
static void test_equal_ignores_irrelevant(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        bool equal;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\",\"labels\":{\"x\":\"1\"}}}",
         "{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\",\"labels\":{\"x\":\"2\"}}}",
         true},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.2\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"conditions\":[{\"type\":\"Ready\","
         "\"status\":\"True\"}]}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"conditions\":[{\"type\":\"Ready\","
         "\"status\":\"False\"}]}}",
         false},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"phase\":\"Pending\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"phase\":\"Running\"}}", true},
        /* Canonical IP text: the same address written twice compares equal. */
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"fd00:0::1\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"fd00::1\"}}", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mesh_k8s_pod a, b;
        assert_int_equal(test_pod_parse(cases[i].a, strlen(cases[i].a), &a, NULL), 0);
        assert_int_equal(test_pod_parse(cases[i].b, strlen(cases[i].b), &b, NULL), 0);
        assert_int_equal(memcmp(&a, &b, sizeof(a)) == 0, cases[i].equal);
    }
}

/* Packed records (what the sidecar's store keeps): every kept field
 * survives pack -> accessors -> unpack -> pack byte for byte, a typical pod
 * fits the 200-byte budget, and packed equality follows full equality on
 * the kept fields. */
static void test_pack_fixtures(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        size_t len = 0;
        mesh_autofree char *buf = read_fixture(rows[i].fixture, &len);
        struct mesh_k8s_pod p;
        (void)test_pod_parse(buf, len, &p, NULL);
        mesh_autofree struct mesh_k8s_pod_rec *r = mesh_k8s_pod_pack(&p);
        print_message("fixture %s: packed %u bytes\n", rows[i].fixture, r->size);
        assert_string_equal(mesh_k8s_pod_rec_name(r), p.name);
        assert_string_equal(mesh_k8s_pod_rec_hostname(r), p.hostname);
        assert_string_equal(mesh_k8s_pod_rec_subdomain(r), p.subdomain);
        assert_string_equal(mesh_k8s_pod_rec_ip(r), p.ip);
        assert_string_equal(mesh_k8s_pod_rec_reason(r), p.reason);
        assert_int_equal(mesh_k8s_pod_rec_name_len(r), strlen(p.name));
        assert_int_equal(mesh_k8s_pod_rec_hostname_len(r), strlen(p.hostname));
        assert_int_equal(mesh_k8s_pod_rec_subdomain_len(r), strlen(p.subdomain));
        assert_int_equal(mesh_k8s_pod_rec_ip_len(r), strlen(p.ip));
        assert_int_equal(r->completion_index, p.completion_index);
        assert_int_equal(r->pod_index, p.pod_index);
        assert_int_equal(r->job_index, p.job_index);
        assert_int_equal(r->job_global_index, p.job_global_index);
        assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_READY), p.ready);
        assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_TERMINATING), p.terminating);
        assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_FINISHED), p.finished);
        assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_INVALID), p.invalid);
        assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_IP_V6), p.ip_v6);
        struct mesh_k8s_pod back;
        mesh_k8s_pod_unpack(r, &back);
        assert_string_equal(back.name, p.name);
        assert_string_equal(back.ip, p.ip);
        assert_string_equal(back.ns, ""); /* not kept */
        assert_int_equal(back.port, -1);
        mesh_autofree struct mesh_k8s_pod_rec *again = mesh_k8s_pod_pack(&back);
        assert_true(mesh_k8s_pod_rec_equal(r, again));
        if (!p.invalid) {
            /* The record itself plus malloc's 8-byte header, rounded to 16. */
            size_t cost = ((size_t)r->size + 8 + 15) / 16 * 16;
            assert_true(cost <= 200);
        }
    }
}

/* The record of a Pod's JSON (which must parse), and the Pod in *p. */
static struct mesh_k8s_pod_rec *pack_json(const char *json, struct mesh_k8s_pod *p)
{
    assert_int_equal(test_pod_parse(json, strlen(json), p, NULL), 0);
    return mesh_k8s_pod_pack(p);
}

/* Packed equality on update pairs: a kept field differs -> not equal; only
 * fields the packed form leaves out differ -> equal (they never reach a
 * peer's worker entry, so no output can change). */
static void test_pack_equal(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        bool equal;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.2\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.10\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"phase\":\"Running\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"phase\":\"Failed\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"}}",
         "{\"metadata\":{\"name\":\"a\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"}}", false},
        {"{\"metadata\":{\"name\":\"a\",\"labels\":{\"apps.kubernetes.io/pod-index\":\"1\"}}}",
         "{\"metadata\":{\"name\":\"a\",\"labels\":{\"apps.kubernetes.io/pod-index\":\"2\"}}}",
         false},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"hostname\":\"a\",\"subdomain\":\"s\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"spec\":{\"hostname\":\"as\"}}", false},
        {"{\"metadata\":{\"name\":\"a\",\"annotations\":{\"tpumesh.dev/port\":\"0\"}}}",
         "{\"metadata\":{\"name\":\"a\",\"annotations\":{\"tpumesh.dev/port\":\"x\"}}}",
         false}, /* both invalid, different reasons */
        {"{\"metadata\":{\"name\":\"a\",\"labels\":{\"batch.kubernetes.io/job-name\":\"j1\"}}}",
         "{\"metadata\":{\"name\":\"a\",\"labels\":{\"batch.kubernetes.io/job-name\":\"j2\"}}}",
         true},
        {"{\"metadata\":{\"name\":\"a\",\"uid\":\"1\"}}",
         "{\"metadata\":{\"name\":\"a\",\"uid\":\"2\"}}", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mesh_k8s_pod a, b;
        mesh_autofree struct mesh_k8s_pod_rec *ra = pack_json(cases[i].a, &a);
        mesh_autofree struct mesh_k8s_pod_rec *rb = pack_json(cases[i].b, &b);
        print_message("case %zu: want equal=%d\n", i, cases[i].equal);
        assert_int_equal(mesh_k8s_pod_rec_equal(ra, rb), cases[i].equal);
        assert_true(mesh_k8s_pod_rec_equal(ra, ra));
        /* Full equality implies packed equality. */
        assert_true(memcmp(&a, &b, sizeof(a)) != 0 || mesh_k8s_pod_rec_equal(ra, rb));
    }
}

/* A record pair differing in Ready alone is a flip; Ready plus anything
 * else, or anything else alone, or nothing, is not. */
static void test_ready_flip(void **state)
{
    (void)state;
#define READY(v) "{\"type\":\"Ready\",\"status\":\"" v "\"}"
    static const struct {
        const char *a, *b;
        bool flip;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"conditions\":[" READY("False") "]}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"conditions\":[" READY("True") "]}}", true},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\",\"conditions\":[" READY(
             "True") "]}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\"}}", true},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\",\"conditions\":[" READY(
             "True") "]}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.2\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.1\"}}",
         "{\"metadata\":{\"name\":\"a\"},\"status\":{\"podIP\":\"10.0.0.2\"}}", false},
        {"{\"metadata\":{\"name\":\"a\"}}", "{\"metadata\":{\"name\":\"a\"}}", false},
    };
#undef READY
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mesh_k8s_pod a, b;
        mesh_autofree struct mesh_k8s_pod_rec *ra = pack_json(cases[i].a, &a);
        mesh_autofree struct mesh_k8s_pod_rec *rb = pack_json(cases[i].b, &b);
        print_message("case %zu: want flip=%d\n", i, cases[i].flip);
        assert_int_equal(mesh_k8s_pod_rec_ready_flip(ra, rb), cases[i].flip);
        assert_int_equal(mesh_k8s_pod_rec_ready_flip(rb, ra), cases[i].flip);
    }
}

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
    } cases[] = {
        {"", -MESH_E_PARSE},
        {"{\"metadata\":", -MESH_E_PARSE},
        {"[1,2,3]", -MESH_E_INVAL},
        {"{\"metadata\":{\"name\":7}}", -MESH_E_INVAL},
        {"{\"metadata\":{\"name\":\"a\"}} x", -MESH_E_PARSE},
        {"{\"metadata\":{\"name\":\"a\",\"labels\":{\"apps.kubernetes.io/pod-index\":5}}}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mesh_k8s_pod p;
        struct mesh_err err;
        assert_int_equal(test_pod_parse(cases[i].in, strlen(cases[i].in), &p, &err), cases[i].rc);
        assert_true(cases[i].rc != 0 || p.invalid); /* the numeric label is rejected */
    }
}

/* tpumesh.dev/port and tpumesh.dev/address-mode: the sidecar's fallback for
 * --port / --address-mode, with the values tpumesh-init accepts. */
static void test_tpumesh_annotations(void **state)
{
    (void)state;
    static const struct {
        const char *annos; /* JSON object text */
        int port, mode;
        bool invalid;
    } cases[] = {
        {"{}", -1, -1, false},
        {"{\"tpumesh.dev/port\":\"12000\"}", 12000, -1, false},
        {"{\"tpumesh.dev/address-mode\":\"ip\"}", -1, MESH_ADDR_IP, false},
        {"{\"tpumesh.dev/address-mode\":\"dns\",\"tpumesh.dev/port\":\"1\"}", 1, MESH_ADDR_DNS,
         false},
        {"{\"tpumesh.dev/address-mode\":\"auto\"}", -1, MESH_ADDR_AUTO, false},
        {"{\"tpumesh.dev/port\":\"0\"}", -1, -1, true},
        {"{\"tpumesh.dev/port\":\"65536\"}", -1, -1, true},
        {"{\"tpumesh.dev/port\":\"80a\"}", -1, -1, true},
        {"{\"tpumesh.dev/port\":\"8470\"}", -1, -1, true}, /* reserved, as for tpumesh-init */
        {"{\"tpumesh.dev/port\":8080}", -1, -1, false},    /* annotations are strings: ignored */
        {"{\"tpumesh.dev/address-mode\":\"IP\"}", -1, -1, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[512];
        snprintf(doc, sizeof(doc), "{\"metadata\":{\"name\":\"w-0\",\"annotations\":%s}}",
                 cases[i].annos);
        struct mesh_k8s_pod p;
        assert_int_equal(test_pod_parse(doc, strlen(doc), &p, NULL), 0);
        assert_int_equal(p.invalid, cases[i].invalid);
        if (!cases[i].invalid) {
            assert_int_equal(p.port, cases[i].port);
            assert_int_equal(p.address_mode, cases[i].mode);
        }
    }
}

/* Multi-slice keys of the own pod: tpumesh.dev/megascale-port (validated
 * as tpumesh-init does). JobSet's coordinator is not read: whatever it
 * holds, the pod stays valid (jax.env names process 0). */
static void test_multislice_keys(void **state)
{
    (void)state;
    static const struct {
        const char *labels, *annos; /* JSON object texts */
        int mport;
        bool invalid;
    } cases[] = {
        {"{}", "{}", -1, false},
        {"{}", "{\"tpumesh.dev/megascale-port\":\"8081\"}", 8081, false},
        {"{}", "{\"tpumesh.dev/megascale-port\":\"0\"}", -1, true},
        {"{}", "{\"tpumesh.dev/megascale-port\":\"65536\"}", -1, true},
        {"{}", "{\"tpumesh.dev/megascale-port\":\"80 80\"}", -1, true},
        {"{\"jobset.sigs.k8s.io/coordinator\":\"js-d-0-0.js\"}", "{}", -1, false},
        {"{}", "{\"jobset.sigs.k8s.io/coordinator\":\"a b;rm\"}", -1, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[512];
        snprintf(doc, sizeof(doc),
                 "{\"metadata\":{\"name\":\"w-0\",\"labels\":%s,\"annotations\":%s}}",
                 cases[i].labels, cases[i].annos);
        struct mesh_k8s_pod p;
        assert_int_equal(test_pod_parse(doc, strlen(doc), &p, NULL), 0);
        assert_int_equal(p.invalid, cases[i].invalid);
        if (!cases[i].invalid) {
            assert_int_equal(p.megascale_port, cases[i].mport);
        }
    }
}

/* JAX_COORDINATOR_PORT in the regular containers' env: a literal port is
 * taken (jax.env then names it), valueFrom is not resolved, a bad value or
 * two containers that disagree make the pod invalid. */
static void test_jax_port(void **state)
{
    (void)state;
    static const struct {
        const char *containers; /* JSON array text */
        int port;
        bool invalid;
    } cases[] = {
        {"[]", -1, false},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"A\",\"value\":\"1\"}]}]", -1, false},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"value\":\"9123\"}]}]",
         9123, false},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"valueFrom\":{}}]}]", -1,
         false},
        {"[{\"name\":\"t\"},{\"name\":\"u\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\","
         "\"value\":\"9123\"}]},{\"name\":\"v\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\","
         "\"value\":\"9123\"}]}]",
         9123, false},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"value\":\"0\"}]}]", -1,
         true},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"value\":\"9 1\"}]}]", -1,
         true},
        {"[{\"name\":\"t\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"value\":\"9123\"}]},"
         "{\"name\":\"u\",\"env\":[{\"name\":\"JAX_COORDINATOR_PORT\",\"value\":\"9124\"}]}]",
         -1, true},
        {"{\"env\":7}", -1, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[768];
        snprintf(doc, sizeof(doc), "{\"metadata\":{\"name\":\"w-0\"},\"spec\":{\"containers\":%s}}",
                 cases[i].containers);
        struct mesh_k8s_pod p;
        assert_int_equal(test_pod_parse(doc, strlen(doc), &p, NULL), 0);
        print_message("row %zu: invalid %d port %d reason '%s'\n", i, p.invalid, p.jax_port,
                      p.reason);
        assert_int_equal(p.invalid, cases[i].invalid);
        if (!cases[i].invalid) {
            assert_int_equal(p.jax_port, cases[i].port);
        }
    }
}

/* A \u0000 in a JSON string never truncates the value: the pod is invalid
 * (or, for metadata.name, not extracted), never "trainer-2". */
static void test_nul_escape_rejected(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{\"metadata\":{\"name\":\"trainer-2\\u0000$(touch x)\",\"namespace\":\"d\"},"
        "\"spec\":{\"hostname\":\"trainer-2\",\"subdomain\":\"s\"},\"status\":{\"podIP\":\"10.0.0."
        "2\"}}",
        "{\"metadata\":{\"name\":\"trainer-2\",\"namespace\":\"d\"},"
        "\"spec\":{\"hostname\":\"trainer-2\\u0000x\",\"subdomain\":\"s\"},\"status\":{\"podIP\":"
        "\"10.0.0.2\"}}",
        "{\"metadata\":{\"name\":\"trainer-2\",\"namespace\":\"d\"},"
        "\"spec\":{\"hostname\":\"trainer-2\",\"subdomain\":\"s\"},\"status\":{\"podIP\":\"10.0.0."
        "2\\u0000\"}}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct mesh_k8s_pod p;
        memset(&p, 0, sizeof(p));
        int rc = test_pod_parse(docs[i], strlen(docs[i]), &p, NULL);
        print_message("row %zu: rc %d invalid %d name '%s' reason '%s'\n", i, rc, p.invalid, p.name,
                      p.reason);
        assert_true(rc < 0 || p.invalid);
        if (i == 0) {
            assert_string_not_equal(p.name, "trainer-2"); /* not cut at the NUL */
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),      cmocka_unit_test(test_equal_ignores_irrelevant),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_tpumesh_annotations),
        cmocka_unit_test(test_pack_fixtures), cmocka_unit_test(test_pack_equal),
        cmocka_unit_test(test_ready_flip),    cmocka_unit_test(test_multislice_keys),
        cmocka_unit_test(test_jax_port),      cmocka_unit_test(test_nul_escape_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
