/*
 * test_annotation_parity.c - one rule for every annotation (issue 23):
 * every annotation value the unit, fixture and integration tests use is fed
 * to the three places that read pod annotations, and all must agree:
 *
 *   init      the downward-API file parsed and validated as tpumesh-init's
 *             annotation layer does (mesh_annotations_parse +
 *             mesh_annotations_config, initcontainer/opts.c);
 *   injector  an AdmissionReview of a labelled pod carrying the annotation,
 *             decided by mesh_inject_decide (tpumesh-injector);
 *   sidecar   the pod JSON read by mesh_k8s_pod_extract (tpumesh-sidecar's
 *             own pod), for the keys the sidecar reads.
 *
 * Same verdict, and a refusal in the same words: what init or the sidecar
 * would refuse after the pod started is denied at admission instead.
 * tpumesh.dev/containers names the pod's containers, which only the
 * injector sees: there a refusal by init implies the injector's, in the same
 * words, and the injector may refuse more (a name that is not a container).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/annotations.h"
#include "core/inject.h"
#include "core/k8s_pod.h"
#include "tests/pod_parse.h"
#include "core/mem.h"

struct row {
    const char *key, *value;
};

/* The values of tests/unit, tests/fixtures and tests/integration (grep for
 * the keys), plus the edges of each rule. */
static const struct row rows[] = {
    {"tpumesh.dev/tpu", "local"},
    {"tpumesh.dev/tpu", "grpc://10.5.5.5:8470"},
    {"tpumesh.dev/tpu", "grpc://10.8.8.8"},
    {"tpumesh.dev/tpu", "grpc://127.0.0.1:9999"},
    {"tpumesh.dev/tpu", ""},
    {"tpumesh.dev/tpu", "a b"},
    {"tpumesh.dev/zone", "us-central2-b"},
    {"tpumesh.dev/zone", "US"},
    {"tpumesh.dev/project", "my-proj-1"},
    {"tpumesh.dev/project", "a/b"},
    {"tpumesh.dev/job-name", "trainer"},
    {"tpumesh.dev/job-name", "1x"},
    {"tpumesh.dev/job-name", "tpu_worker"},
    {"tpumesh.dev/port", "1"},
    {"tpumesh.dev/port", "10001"},
    {"tpumesh.dev/port", "12000"},
    {"tpumesh.dev/port", "0"},
    {"tpumesh.dev/port", "10k"},
    {"tpumesh.dev/port", "x"},
    {"tpumesh.dev/port", "80a"},
    {"tpumesh.dev/port", "65536"},
    {"tpumesh.dev/port", "70000"},
    {"tpumesh.dev/port", "99999"},
    {"tpumesh.dev/port", "8080"},
    {"tpumesh.dev/port", "8470"},
    {"tpumesh.dev/port", "8476"},
    {"tpumesh.dev/port", "9470"},
    {"tpumesh.dev/port", "9476"},
    {"tpumesh.dev/port", "8477"},
    {"tpumesh.dev/address-mode", "auto"},
    {"tpumesh.dev/address-mode", "dns"},
    {"tpumesh.dev/address-mode", "ip"},
    {"tpumesh.dev/address-mode", "IP"},
    {"tpumesh.dev/address-mode", "DNS"},
    {"tpumesh.dev/address-mode", "fast"},
    {"tpumesh.dev/expected-workers", "4"},
    {"tpumesh.dev/expected-workers", "65536"},
    {"tpumesh.dev/expected-workers", "65537"},
    {"tpumesh.dev/expected-workers", "0"},
    {"tpumesh.dev/expected-workers", "-1"},
    {"tpumesh.dev/timeout", "30"},
    {"tpumesh.dev/timeout", "10m"},
    {"tpumesh.dev/megascale-port", "8081"},
    {"tpumesh.dev/megascale-port", "0"},
    {"tpumesh.dev/megascale-port", "65536"},
    {"tpumesh.dev/megascale-port", "80 80"},
    {"tpumesh.dev/megascale-port", "80a"},
    {"tpumesh.dev/inject", "true"},
    {"tpumesh.dev/containers", "b, c"},
    {"tpumesh.dev/containers", "train"},
    {"tpumesh.dev/containers", "nope"},
    {"tpumesh.dev/containers", "train,,b"},
    {"tpumesh.dev/bogus", "1"},
    {"tpumesh.dev/prot", "1"},
    {"tpumesh.dev/adress-mode", "ip"},
    {"tf-version.cloud-tpus.google.com", "2.11.0"},
    {"tf-version.cloud-tpus.google.com", "2.12.0"},
    {"tf-version.cloud-tpus.google.com", ""},
    {"jobset.sigs.k8s.io/coordinator",
     "js-d-0-0.js"}, /* JobSet's: not read (jax.env names process 0) */
    {"jobset.sigs.k8s.io/coordinator", "a b;rm"},
    {"other.example.com/x", "anything \" goes"},
};

/* The keys the sidecar reads from its own pod (core/k8s_pod.c). */
static bool sidecar_reads(const char *key)
{
    static const char *const keys[] = {MESH_ANNOTATION_PORT, MESH_ANNOTATION_ADDRESS_MODE,
                                       MESH_ANNOTATION_EXPECTED_WORKERS,
                                       MESH_ANNOTATION_MEGASCALE_PORT};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (strcmp(key, keys[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* v as the inside of a double-quoted string: JSON and Go's %q both read
 * \" \\ and \u00XX. */
static void quote(const char *v, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = v; *p != '\0' && n + 8 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
}

/* init: 0 accepted, else the message in msg. */
static int init_verdict(const struct row *r, char *msg, size_t cap)
{
    char q[256], file[512];
    quote(r->value, q, sizeof(q));
    snprintf(file, sizeof(file), "%s=\"%s\"", r->key, q);
    struct mesh_annotations a;
    struct mesh_err err = {0};
    int rc = mesh_annotations_parse(file, strlen(file), &a, &err);
    assert_int_equal(rc, 0); /* every row is a well-formed file line */
    struct mesh_annotations_config c;
    rc = mesh_annotations_config(&a, &c, &err);
    mesh_annotations_cleanup(&a);
    if (rc == 0) {
        mesh_annotations_config_cleanup(&c);
        return 0;
    }
    snprintf(msg, cap, "%s", err.msg);
    return rc;
}

static const char *pod_json(const struct row *r, char *out, size_t cap)
{
    char q[256];
    quote(r->value, q, sizeof(q));
    snprintf(out, cap,
             "{\"metadata\":{\"name\":\"w-0\",\"labels\":{\"tpumesh.dev/inject\":\"true\"},"
             "\"annotations\":{\"%s\":\"%s\"}},\"spec\":{\"containers\":["
             "{\"name\":\"train\",\"image\":\"t\"},{\"name\":\"b\"},{\"name\":\"c\"}]}}",
             r->key, q);
    return out;
}

/* injector: the decision's verdict, reason in msg. */
static enum mesh_inject_verdict injector_verdict(const struct mesh_inject_config *cfg,
                                                 const struct row *r, char *msg, size_t cap)
{
    char pod[1024], review[1400];
    snprintf(review, sizeof(review),
             "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
             "\"uid\":\"u-1\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
             "\"operation\":\"CREATE\",\"namespace\":\"ml\",\"object\":%s}}",
             pod_json(r, pod, sizeof(pod)));
    struct mesh_inject_review rv;
    struct mesh_err err = {0};
    assert_int_equal(mesh_inject_review_parse(review, strlen(review), &rv, &err), 0);
    struct mesh_inject_decision d;
    assert_int_equal(mesh_inject_decide(cfg, &rv, &d, &err), 0);
    enum mesh_inject_verdict v = d.verdict;
    snprintf(msg, cap, "%s", d.reason);
    mesh_inject_decision_cleanup(&d);
    mesh_inject_review_cleanup(&rv);
    return v;
}

/* sidecar: invalid (reason in msg) or not. */
static bool sidecar_refuses(const struct row *r, char *msg, size_t cap)
{
    char pod[1024];
    pod_json(r, pod, sizeof(pod));
    struct mesh_k8s_pod p;
    assert_int_equal(test_pod_parse(pod, strlen(pod), &p, NULL), 0);
    snprintf(msg, cap, "%s", p.reason);
    return p.invalid;
}

static void test_parity(void **state)
{
    (void)state;
    struct mesh_inject_config cfg;
    assert_int_equal(mesh_inject_config_default(&cfg, NULL), 0);
    int refused = 0, accepted = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        char im[512] = "", jm[512] = "", sm[512] = "";
        int irc = init_verdict(r, im, sizeof(im));
        enum mesh_inject_verdict jv = injector_verdict(&cfg, r, jm, sizeof(jm));
        bool pod_dependent = strcmp(r->key, MESH_ANNOTATION_CONTAINERS) == 0;
        if (irc < 0) {
            refused++;
            if (jv != MESH_INJECT_DENY || strcmp(im, jm) != 0) {
                fail_msg("%s=\"%s\": init refuses (%s) but the injector %s (%s)", r->key, r->value,
                         im, jv == MESH_INJECT_DENY ? "denies otherwise" : "admits", jm);
            }
        } else {
            accepted++;
            if (jv != MESH_INJECT_PATCH && !pod_dependent) {
                fail_msg("%s=\"%s\": init accepts it but the injector says %d: %s", r->key,
                         r->value, jv, jm);
            }
        }
        if (sidecar_reads(r->key)) {
            bool srf = sidecar_refuses(r, sm, sizeof(sm));
            if (srf != (irc < 0) || (srf && strcmp(sm, im) != 0)) {
                fail_msg("%s=\"%s\": init %s (%s), the sidecar %s (%s)", r->key, r->value,
                         irc < 0 ? "refuses" : "accepts", im, srf ? "refuses" : "accepts", sm);
            }
        }
    }
    /* The table exercises both outcomes. */
    assert_true(refused > 20);
    assert_true(accepted > 20);
    mesh_inject_config_cleanup(&cfg);
}

/* The example: the injector's denial names the annotation and the
 * rule, as tpumesh-init's exit 2 would. */
static void test_reserved_port_words(void **state)
{
    (void)state;
    struct mesh_err err = {0};
    int port = 0;
    assert_int_equal(mesh_annotations_port("8470", &port, &err), -MESH_E_CONFIG);
    assert_non_null(strstr(err.msg,
                           "annotation tpumesh.dev/port=\"8470\" is reserved: TPU software "
                           "uses ports 8470-8476, 8482, 8080, 9470 and 9476"));
    assert_int_equal(port, 0);
    assert_int_equal(mesh_annotations_port("10000", &port, &err), 0);
    assert_int_equal(port, 10000);
    /* A hostile value is shown short, its control bytes and quotes as '?'. */
    assert_int_equal(mesh_annotations_check("tpumesh.dev/zone", "a\"b\nc", &err), -MESH_E_CONFIG);
    assert_non_null(strstr(err.msg, "annotation tpumesh.dev/zone=\"a?b?c\" is not a zone"));
    assert_int_equal(mesh_annotations_check("tpumesh.dev/x\n", "1", &err), -MESH_E_CONFIG);
    assert_non_null(strstr(err.msg, "unknown annotation tpumesh.dev/x?:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_reserved_port_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
