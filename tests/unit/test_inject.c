/*
 * test_inject.c - AdmissionReview parsing, the injection decision, the JSON
 * Patch (its ops, applied here by a minimal RFC 6902 "add" to check the
 * resulting pod) and the response, plus the YAML config.
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
#include "core/inject.h"
#include "core/json.h"
#include "core/mem.h"

static char *review_of(const char *pod)
{
    return mesh_asprintf("{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                         "\"request\":{\"uid\":\"u-1\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
                         "\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"namespace\":\"ml\","
                         "\"object\":%s}}",
                         pod);
}

/* RFC 6902 "add" for the paths our patches use: /a/b (object member or new
 * member), /a/N (insert before index N) and /a/- (append). Enough to check
 * the patched pod; the simulator applies patches with python3-jsonpatch. */
static void apply_add(cJSON *doc, const char *path, const cJSON *value)
{
    cJSON *cur = doc;
    const char *seg = path + 1;
    for (;;) {
        const char *slash = strchr(seg, '/');
        char name[128];
        size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
        assert_true(n < sizeof(name));
        memcpy(name, seg, n);
        name[n] = '\0';
        long idx = strtol(name, NULL, 10);
        if (slash == NULL) {
            cJSON *v = cJSON_Duplicate(value, true);
            if (cJSON_IsArray(cur)) {
                if (strcmp(name, "-") == 0) {
                    cJSON_AddItemToArray(cur, v);
                } else {
                    assert_true(cJSON_InsertItemInArray(cur, (int)idx, v));
                }
            } else {
                assert_null(cJSON_GetObjectItemCaseSensitive(cur, name));
                cJSON_AddItemToObject(cur, name, v);
            }
            return;
        }
        cur = cJSON_IsArray(cur) ? cJSON_GetArrayItem(cur, (int)idx)
                                 : cJSON_GetObjectItemCaseSensitive(cur, name);
        assert_non_null(cur);
        seg = slash + 1;
    }
}

static cJSON *apply_patch(const char *pod, const char *patch)
{
    cJSON *doc = cJSON_Parse(pod);
    cJSON *ops = cJSON_Parse(patch);
    assert_non_null(doc);
    assert_true(cJSON_IsArray(ops));
    const cJSON *op;
    cJSON_ArrayForEach(op, ops)
    {
        assert_string_equal(mesh_json_str(op, "op"), "add");
        apply_add(doc, mesh_json_str(op, "path"), cJSON_GetObjectItemCaseSensitive(op, "value"));
    }
    cJSON_Delete(ops);
    return doc;
}

/* "name1,name2" of the array at dotted path of doc (e.g. spec.initContainers). */
static void names_at(const cJSON *doc, const char *dotted, char *out, size_t n)
{
    out[0] = '\0';
    const cJSON *a = mesh_json_path(doc, dotted);
    const cJSON *e;
    size_t len = 0;
    cJSON_ArrayForEach(e, a)
    {
        len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "," : "",
                                mesh_json_str(e, "name") ? mesh_json_str(e, "name") : "?");
    }
}

struct row {
    const char *name;
    const char *pod;
    enum mesh_inject_verdict verdict;
    const char *reason;  /* substring of the reason, or NULL */
    const char *inits;   /* init container names after patching */
    const char *volumes; /* volume names after patching */
    const char *mounted; /* "1,0": whether containers[i] mounts tpumesh */
    const char *tpu;     /* "resource=count" of tpumesh-init, or "" */
};

#define LBL "\"labels\":{\"tpumesh.dev/inject\":\"true\"}"
#define TRAINER "{\"name\":\"train\",\"image\":\"t\"}"
#define TPU4                                                                                       \
    "{\"name\":\"train\",\"image\":\"t\",\"resources\":{\"limits\":{\"google.com/tpu\":\"4\"}}}"

static const struct row rows[] = {
    {"no label", "{\"metadata\":{},\"spec\":{\"containers\":[" TRAINER "]}}", MESH_INJECT_SKIP,
     "label", NULL, NULL, NULL, NULL},
    {"label false",
     "{\"metadata\":{\"labels\":{\"tpumesh.dev/"
     "inject\":\"false\"}},\"spec\":{\"containers\":[" TRAINER "]}}",
     MESH_INJECT_SKIP, "label", NULL, NULL, NULL, NULL},
    {"plain", "{\"metadata\":{" LBL "},\"spec\":{\"containers\":[" TRAINER "]}}", MESH_INJECT_PATCH,
     NULL, "tpumesh-init,tpumesh-sidecar", "tpumesh,tpumesh-podinfo", "1", ""},
    {"tpu vm",
     "{\"metadata\":{" LBL "},\"spec\":{\"initContainers\":[{\"name\":\"a\"},{\"name\":\"b\"}],"
     "\"volumes\":[{\"name\":\"data\"}],\"containers\":[" TPU4 ",{\"name\":\"log\",\"image\":\"l\","
     "\"volumeMounts\":[{\"name\":\"data\",\"mountPath\":\"/d\"}]}]}}",
     MESH_INJECT_PATCH, NULL, "a,b,tpumesh-init,tpumesh-sidecar", "data,tpumesh,tpumesh-podinfo",
     "1,1", "google.com/tpu=4"},
    {"largest count",
     "{\"metadata\":{" LBL
     "},\"spec\":{\"containers\":[{\"name\":\"x\",\"resources\":{\"requests\":"
     "{\"google.com/tpu\":2}}}," TPU4 "]}}",
     MESH_INJECT_PATCH, NULL, "tpumesh-init,tpumesh-sidecar", "tpumesh,tpumesh-podinfo", "1,1",
     "google.com/tpu=4"},
    {"legacy tpu node",
     "{\"metadata\":{" LBL
     "},\"spec\":{\"containers\":[{\"name\":\"tf\",\"resources\":{\"limits\":{"
     "\"cloud-tpus.google.com/v3\":8}}}]}}",
     MESH_INJECT_PATCH, NULL, "tpumesh-init", "tpumesh,tpumesh-podinfo", "1",
     "cloud-tpus.google.com/v3=8"},
    {"containers annotation",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/containers\":\"b, c\"}},\"spec\":{"
     "\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"c\"}]}}",
     MESH_INJECT_PATCH, NULL, "tpumesh-init,tpumesh-sidecar", "tpumesh,tpumesh-podinfo", "0,1,1",
     ""},
    {"already mounted",
     "{\"metadata\":{" LBL
     "},\"spec\":{\"containers\":[{\"name\":\"a\",\"volumeMounts\":[{\"name\":"
     "\"tpumesh\",\"mountPath\":\"/var/run/tpumesh\",\"readOnly\":true}]}]}}",
     MESH_INJECT_PATCH, NULL, "tpumesh-init,tpumesh-sidecar", "tpumesh,tpumesh-podinfo", "1", ""},
    {"valid annotations",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/port\":\"12000\",\"other\":\"x\"}},"
     "\"spec\":{\"containers\":[" TRAINER "]}}",
     MESH_INJECT_PATCH, NULL, "tpumesh-init,tpumesh-sidecar", "tpumesh,tpumesh-podinfo", "1", ""},
    {"already injected",
     "{\"metadata\":{" LBL "},\"spec\":{\"initContainers\":[{\"name\":\"tpumesh-init\"}],"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_SKIP, "already injected", NULL, NULL, NULL, NULL},
    {"bad port",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/port\":\"99999\"}},\"spec\":{"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "tpumesh.dev/port=\"99999\" is not an integer in 1..65535", NULL, NULL, NULL,
     NULL},
    {"reserved port (tpumesh-init would exit 2)",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/port\":\"8470\"}},\"spec\":{"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "annotation tpumesh.dev/port=\"8470\" is reserved", NULL, NULL, NULL, NULL},
    {"unknown key",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/prot\":\"1\"}},\"spec\":{"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "unknown annotation tpumesh.dev/prot", NULL, NULL, NULL, NULL},
    {"containers names unknown",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/containers\":\"nope\"}},\"spec\":{"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "names container 'nope'", NULL, NULL, NULL, NULL},
    {"containers bad syntax",
     "{\"metadata\":{" LBL ",\"annotations\":{\"tpumesh.dev/containers\":\"train,,b\"}},\"spec\":{"
     "\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "comma-separated list", NULL, NULL, NULL, NULL},
    {"volume clash",
     "{\"metadata\":{" LBL
     "},\"spec\":{\"volumes\":[{\"name\":\"tpumesh\"}],\"containers\":[" TRAINER "]}}",
     MESH_INJECT_DENY, "volume named 'tpumesh'", NULL, NULL, NULL, NULL},
    {"mount path clash",
     "{\"metadata\":{" LBL
     "},\"spec\":{\"containers\":[{\"name\":\"a\",\"volumeMounts\":[{\"name\":"
     "\"x\",\"mountPath\":\"/var/run/tpumesh\"}]}]}}",
     MESH_INJECT_DENY, "already mounts something else at /var/run/tpumesh", NULL, NULL, NULL, NULL},
    {"bad tpu count",
     "{\"metadata\":{" LBL "},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{"
     "\"google.com/tpu\":\"4.5\"}}}]}}",
     MESH_INJECT_DENY, "not a whole number", NULL, NULL, NULL, NULL},
    {"two tpu kinds",
     "{\"metadata\":{" LBL "},\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{"
     "\"google.com/tpu\":4,\"cloud-tpus.google.com/v2\":8}}}]}}",
     MESH_INJECT_DENY, "two TPU resources", NULL, NULL, NULL, NULL},
    {"no containers", "{\"metadata\":{" LBL "},\"spec\":{\"containers\":[]}}", MESH_INJECT_DENY,
     "1 to 256 containers", NULL, NULL, NULL, NULL},
    {"no spec", "{\"metadata\":{" LBL "}}", MESH_INJECT_DENY, "no spec", NULL, NULL, NULL, NULL},
};

static void check_row(const struct mesh_inject_config *cfg, const struct row *r)
{
    mesh_autofree char *body = review_of(r->pod);
    struct mesh_inject_review rv;
    struct mesh_err err = {0};
    if (mesh_inject_review_parse(body, strlen(body), &rv, &err) != 0) {
        fail_msg("%s: review_parse: %s", r->name, err.msg);
    }
    assert_string_equal(rv.uid, "u-1");
    assert_string_equal(rv.ns, "ml");
    struct mesh_inject_decision d;
    assert_int_equal(mesh_inject_decide(cfg, &rv, &d, &err), 0);
    if (d.verdict != r->verdict) {
        fail_msg("%s: verdict %d want %d (%s)", r->name, d.verdict, r->verdict, d.reason);
    }
    if (r->reason != NULL && strstr(d.reason, r->reason) == NULL) {
        fail_msg("%s: reason '%s' lacks '%s'", r->name, d.reason, r->reason);
    }
    if (r->verdict == MESH_INJECT_PATCH) {
        cJSON *pod = apply_patch(r->pod, d.patch);
        char got[512];
        names_at(pod, "spec.initContainers", got, sizeof(got));
        assert_string_equal(got, r->inits);
        names_at(pod, "spec.volumes", got, sizeof(got));
        assert_string_equal(got, r->volumes);
        /* Mounts: containers[i] mounts tpumesh read-only exactly once or not at all. */
        size_t len = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, mesh_json_path(pod, "spec.containers"))
        {
            int count = 0;
            const cJSON *m;
            cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(c, "volumeMounts"))
            {
                if (strcmp(mesh_json_str(m, "name"), "tpumesh") == 0) {
                    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "readOnly")));
                    count++;
                }
            }
            assert_true(count <= 1);
            len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%d", len ? "," : "", count);
        }
        assert_string_equal(got, r->mounted);
        const cJSON *init = cJSON_GetArrayItem(
            mesh_json_path(pod, "spec.initContainers"),
            cJSON_GetArraySize(mesh_json_path(pod, "spec.initContainers")) - (d.sidecar ? 2 : 1));
        assert_string_equal(mesh_json_str(init, "name"), "tpumesh-init");
        const cJSON *req = mesh_json_path(init, "resources.requests");
        const cJSON *lim = mesh_json_path(init, "resources.limits");
        assert_string_equal(mesh_json_str(req, "cpu"), "50m");
        got[0] = '\0';
        if (d.tpu_resource != NULL) {
            snprintf(got, sizeof(got), "%s=%s", d.tpu_resource, mesh_json_str(req, d.tpu_resource));
            assert_string_equal(mesh_json_str(lim, d.tpu_resource),
                                mesh_json_str(req, d.tpu_resource));
        }
        assert_string_equal(got, r->tpu);
        assert_string_equal(d.service_account, "default");
        cJSON_Delete(pod);
    } else {
        assert_null(d.patch);
    }
    size_t n = 0;
    const char *warn = "grant it";
    mesh_autofree char *resp = mesh_inject_response(rv.uid, &d, &warn, 1, &n, &err);
    assert_non_null(resp);
    cJSON *j = cJSON_Parse(resp);
    assert_string_equal(mesh_json_str(j, "kind"), "AdmissionReview");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "response");
    assert_string_equal(mesh_json_str(rs, "uid"), "u-1");
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rs, "allowed")),
                     r->verdict != MESH_INJECT_DENY);
    assert_int_equal(mesh_json_str(rs, "patch") != NULL, r->verdict == MESH_INJECT_PATCH);
    if (r->verdict == MESH_INJECT_DENY) {
        assert_non_null(strstr(mesh_json_str(mesh_json_path(rs, "status"), "message"), r->reason));
    }
    assert_string_equal(cJSON_GetArrayItem(mesh_json_path(rs, "warnings"), 0)->valuestring,
                        "grant it");
    cJSON_Delete(j);
    mesh_inject_decision_cleanup(&d);
    mesh_inject_review_cleanup(&rv);
}

static void test_decide(void **state)
{
    (void)state;
    struct mesh_inject_config cfg;
    struct mesh_err err = {0};
    assert_int_equal(mesh_inject_config_default(&cfg, &err), 0);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        check_row(&cfg, &rows[i]);
    }
    mesh_inject_config_cleanup(&cfg);
}

/* The sidecar is the native-sidecar form and the patch is an exact string
 * for the simplest pod (ops, order and paths). */
static void test_patch_shape(void **state)
{
    (void)state;
    struct mesh_inject_config cfg;
    assert_int_equal(mesh_inject_config_default(&cfg, NULL), 0);
    assert_int_equal(mesh_inject_config_set_image(&cfg, "reg/x/tpumesh:9", NULL), 0);
    mesh_autofree char *body =
        review_of("{\"metadata\":{" LBL "},\"spec\":{\"containers\":[" TRAINER "]}}");
    struct mesh_inject_review rv;
    assert_int_equal(mesh_inject_review_parse(body, strlen(body), &rv, NULL), 0);
    struct mesh_inject_decision d;
    assert_int_equal(mesh_inject_decide(&cfg, &rv, &d, NULL), 0);
    cJSON *ops = cJSON_Parse(d.patch);
    assert_int_equal(cJSON_GetArraySize(ops), 3);
    assert_string_equal(mesh_json_str(cJSON_GetArrayItem(ops, 0), "path"), "/spec/volumes");
    assert_string_equal(mesh_json_str(cJSON_GetArrayItem(ops, 1), "path"), "/spec/initContainers");
    assert_string_equal(mesh_json_str(cJSON_GetArrayItem(ops, 2), "path"),
                        "/spec/containers/0/volumeMounts");
    const cJSON *side =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ops, 1), "value"), 1);
    assert_string_equal(mesh_json_str(side, "restartPolicy"), "Always");
    assert_string_equal(mesh_json_str(side, "image"), "reg/x/tpumesh:9");
    assert_true(d.sidecar);
    cJSON_Delete(ops);
    mesh_inject_decision_cleanup(&d);
    mesh_inject_review_cleanup(&rv);
    assert_int_equal(mesh_inject_config_set_image(&cfg, "bad image", NULL), -MESH_E_CONFIG);
    assert_int_equal(mesh_inject_config_set_image(&cfg, "", NULL), -MESH_E_CONFIG);
    /* Digests: sha256 and 64 lowercase hex digits, else refused by name. */
    struct mesh_err e = {0};
    assert_int_equal(mesh_inject_config_set_image(&cfg, "reg/x@sha256:abc", &e), -MESH_E_CONFIG);
    assert_non_null(strstr(e.msg, "64 lowercase hex digits"));
    assert_int_equal(mesh_inject_config_set_image(&cfg, "reg/x@md5:0123", NULL), -MESH_E_CONFIG);
    assert_int_equal(
        mesh_inject_config_set_image(
            &cfg, "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", NULL),
        -MESH_E_CONFIG);
    assert_int_equal(
        mesh_inject_config_set_image(
            &cfg, "reg/x@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            NULL),
        -MESH_E_CONFIG);
    assert_int_equal(
        mesh_inject_config_set_image(
            &cfg, "reg/x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            NULL),
        0);
    mesh_inject_config_cleanup(&cfg);
}

static void test_review_parse(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *msg;
    } bad[] = {
        {"", -MESH_E_PARSE, NULL},
        {"{", -MESH_E_PARSE, NULL},
        {"[]", -MESH_E_INVAL, "apiVersion"},
        {"{\"apiVersion\":\"admission.k8s.io/v1beta1\",\"kind\":\"AdmissionReview\"}",
         -MESH_E_INVAL, "admission.k8s.io/v1"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"Pod\"}", -MESH_E_INVAL, "kind"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}", -MESH_E_INVAL,
         "no request"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{}}",
         -MESH_E_INVAL, "uid"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
         "\"uid\":\"\"}}",
         -MESH_E_INVAL, "uid"},
        {"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
         "\"uid\":\"x\"}} x",
         -MESH_E_PARSE, "trailing"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct mesh_inject_review rv;
        struct mesh_err err = {0};
        int rc = mesh_inject_review_parse(bad[i].in, strlen(bad[i].in), &rv, &err);
        if (rc != bad[i].rc || (bad[i].msg && strstr(err.msg, bad[i].msg) == NULL)) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
    }
    /* Nesting: the server's pre-scan bounds it at 64 levels as the body
     * arrives (test_injector.py); a caller without one still has cJSON's
     * limit of 1000, a clear error and no deep recursion. */
    static char deep[2 * 1001];
    memset(deep, '[', 1001);
    memset(deep + 1001, ']', 1001);
    struct mesh_err err = {0};
    struct mesh_inject_review rv;
    assert_int_equal(mesh_inject_review_parse(deep, sizeof(deep), &rv, &err), -MESH_E_PARSE);
    assert_non_null(strstr(err.msg, "malformed JSON"));
    assert_int_equal(mesh_inject_review_parse(deep + 1, sizeof(deep) - 2, &rv, &err),
                     -MESH_E_INVAL);
    /* Brackets inside strings are only text. */
    char s[300];
    int n =
        snprintf(s, sizeof(s),
                 "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\","
                 "\"request\":{\"uid\":\"%s\"}}",
                 "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"");
    assert_int_equal(mesh_inject_review_parse(s, (size_t)n, &rv, &err), 0);
    mesh_inject_review_cleanup(&rv);
    assert_int_equal(mesh_inject_review_parse(NULL, MESH_INJECT_REVIEW_MAX + 1, &rv, &err),
                     -MESH_E_TOOBIG);
    /* Not a pod, or not CREATE: allowed without a patch. */
    static const char *const skip[] = {
        ("{\"apiVersion\":\"admission.k8s.io/"
         "v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":"
         "\"a\",\"kind\":{\"group\":\"apps\",\"kind\":\"Pod\"},\"operation\":\"CREATE\",\"object\":"
         "{"
         "\"metadata\":{" LBL "},\"spec\":{}}}}"),
        ("{\"apiVersion\":\"admission.k8s.io/"
         "v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":"
         "\"a\",\"kind\":{\"group\":\"\",\"kind\":\"Pod\"},\"operation\":\"UPDATE\",\"object\":{"
         "\"metadata\":{" LBL "},\"spec\":{}}}}"),
        ("{\"apiVersion\":\"admission.k8s.io/"
         "v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":"
         "\"a\",\"kind\":{\"group\":\"\",\"kind\":\"Pod\"},\"operation\":\"CREATE\"}}"),
    };
    struct mesh_inject_config cfg;
    assert_int_equal(mesh_inject_config_default(&cfg, NULL), 0);
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
        assert_int_equal(mesh_inject_review_parse(skip[i], strlen(skip[i]), &rv, &err), 0);
        struct mesh_inject_decision d;
        assert_int_equal(mesh_inject_decide(&cfg, &rv, &d, &err), 0);
        assert_int_equal(d.verdict, MESH_INJECT_SKIP);
        mesh_inject_decision_cleanup(&d);
        mesh_inject_review_cleanup(&rv);
    }
    mesh_inject_config_cleanup(&cfg);
}

static void test_config(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *msg;
    } rows2[] = {
        {"", -MESH_E_CONFIG, "empty"},
        {"[1]", -MESH_E_CONFIG, "mapping"},
        {"a: [", -MESH_E_PARSE, "line"},
        {"initContainer: {name: a}\nsidecar: {name: b}\nvolumes: []\nvolumeMounts: []\nx: 1\n",
         -MESH_E_CONFIG, "unknown config key 'x'"},
        {"initContainer: {name: a}\nsidecar: {name: a}\nvolumes: []\nvolumeMounts: []\n",
         -MESH_E_CONFIG, "different names"},
        {"initContainer: {image: a}\nsidecar: {name: b}\nvolumes: []\nvolumeMounts: []\n",
         -MESH_E_CONFIG, "'initContainer'"},
        {"initContainer: {name: a}\nsidecar: {name: b}\nvolumes: {}\nvolumeMounts: []\n",
         -MESH_E_CONFIG, "'volumes'"},
        {"initContainer: {name: a}\nsidecar: {name: b}\nvolumes: [1]\nvolumeMounts: []\n",
         -MESH_E_CONFIG, "'volumes'"},
        {"initContainer: {name: a, name: b}\n", -MESH_E_PARSE, "duplicate key"},
        /* Billion laughs: aliases expand past the node limit. */
        {"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
         "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
         "e: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
         -MESH_E_TOOBIG, "nodes"},
        /* A list of one container, as the named templates render it. */
        {"initContainer:\n  - name: a\n    x: 'true'\nsidecar: [{name: b}]\nvolumes: []\n"
         "volumeMounts: []\n",
         0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows2) / sizeof(rows2[0]); i++) {
        struct mesh_inject_config c;
        struct mesh_err err = {0};
        int rc = mesh_inject_config_parse(rows2[i].in, strlen(rows2[i].in), &c, &err);
        if (rc != rows2[i].rc || (rows2[i].msg && strstr(err.msg, rows2[i].msg) == NULL)) {
            fail_msg("row %zu: rc %d (%s)", i, rc, err.msg);
        }
        if (rc == 0) {
            assert_true(cJSON_IsString(cJSON_GetObjectItem(c.init, "x")));
            mesh_inject_config_cleanup(&c);
        }
    }
    /* Scalar typing of the default config. */
    struct mesh_inject_config c;
    assert_int_equal(mesh_inject_config_default(&c, NULL), 0);
    const cJSON *port = cJSON_GetArrayItem(cJSON_GetObjectItem(c.sidecar, "ports"), 0);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(port, "containerPort")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(c.sidecar, "env"), 3), "value")));
    assert_true(cJSON_IsTrue(mesh_json_path(c.init, "securityContext.runAsNonRoot")));
    assert_true(cJSON_IsString(mesh_json_path(c.init, "resources.requests.cpu")));
    assert_string_equal(mesh_json_str(c.init, "image"), "tpumesh:" MESH_VERSION);
    mesh_inject_config_cleanup(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_patch_shape),
        cmocka_unit_test(test_review_parse),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
