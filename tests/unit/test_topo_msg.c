/*
 * test_topo_msg.c - tpumesh.v1 messages (topo_msg.h): Pods from a relay are
 * accepted or refused exactly by the API rules (a table), a relayed record
 * equals the direct one, a TopologySnapshot shows the values topology.json
 * rendered from the same input shows, and WatchResponse limits hold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "core/render.h"
#include "core/topo_msg.h"
#include "tests/pod_parse.h"

static void pod_init(Tpumesh__V1__Pod *m, const char *name, const char *ip, int ci)
{
    tpumesh__v1__pod__init(m);
    m->name = (char *)name;
    m->ip = (char *)ip;
    m->completion_index = ci;
    m->pod_index = m->job_index = m->job_global_index = -1;
}

static void test_pod_rules(void **state)
{
    (void)state;
    static const struct {
        const char *name, *host, *sub, *ip;
        int ci;
        bool invalid; /* the relay marks it invalid */
        bool accepted;
        const char *why; /* part of the error when refused */
    } rows[] = {
        {"w-0", "w-0", "w", "10.0.0.1", 0, false, true, NULL},
        {"w-1", "", "", "fd00::1", 1, false, true, NULL},
        {"w-2", "", "", "", -1, false, true, NULL},
        {"$(touch /tmp/x)", "", "", "10.0.0.1", 0, false, false, "metadata.name"},
        {"W-0", "", "", "10.0.0.1", 0, false, false, "metadata.name"},
        {"w-0", "a b", "", "10.0.0.1", 0, false, false, "spec.hostname"},
        {"w-0", "", "x.y", "10.0.0.1", 0, false, false, "spec.subdomain"},
        {"w-0", "", "", "10.0.0.256", 0, false, false, "status.podIP"},
        {"w-0", "", "", "010.0.0.1", 0, false, false, "IP"},
        {"w-0", "", "", "FD00::1", 0, false, false, "canonical"},
        {"w-0", "", "", "10.0.0.1", 1048576, false, false, "job-completion-index"},
        {"w-0", "", "", "10.0.0.1", -2, false, false, "job-completion-index"},
        {"w 0", "", "", "", 0, true, true, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        Tpumesh__V1__Pod m;
        pod_init(&m, rows[i].name, rows[i].ip, rows[i].ci);
        m.hostname = (char *)rows[i].host;
        m.subdomain = (char *)rows[i].sub;
        m.invalid = rows[i].invalid;
        m.invalid_reason = (char *)"metadata.name 'w 0' is not an RFC 1123 subdomain";
        struct mesh_err err;
        mesh_err_clear(&err);
        struct mesh_k8s_pod_rec *r = mesh_topo_msg_pod_to_rec(&m, &err);
        if (rows[i].accepted) {
            assert_non_null(r);
            assert_int_equal(mesh_k8s_pod_rec_has(r, MESH_K8S_REC_INVALID), rows[i].invalid);
            assert_string_equal(mesh_k8s_pod_rec_ip(r), rows[i].ip);
            assert_int_equal(r->completion_index, rows[i].ci);
            if (rows[i].invalid) {
                assert_string_equal(mesh_k8s_pod_rec_reason(r), m.invalid_reason);
            }
        } else {
            assert_null(r);
            assert_int_equal(err.code, MESH_E_INVAL);
            assert_non_null(strstr(err.msg, rows[i].why));
        }
        mesh_free(r);
    }
}

static void test_too_long(void **state)
{
    (void)state;
    char name[400];
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    Tpumesh__V1__Pod m;
    pod_init(&m, name, "10.0.0.1", 0);
    struct mesh_err err;
    assert_null(mesh_topo_msg_pod_to_rec(&m, &err));
    assert_non_null(strstr(err.msg, "limit"));
}

/* A pod read from the API, forwarded, checked: the same record. */
static void test_round_trip(void **state)
{
    (void)state;
    static const char *pods[] = {
        ("{\"metadata\":{\"name\":\"t-1\",\"labels\":{\"batch.kubernetes.io/"
         "job-completion-index\":\"1\"}},\"spec\":{\"hostname\":\"t-1\",\"subdomain\":\"t\"},"
         "\"status\":{\"podIP\":\"10.1.2.3\",\"phase\":\"Running\",\"conditions\":[{\"type\":"
         "\"Ready\",\"status\":\"True\"}]}}"),
        ("{\"metadata\":{\"name\":\"s-3\",\"deletionTimestamp\":\"x\",\"labels\":{\"apps."
         "kubernetes.io/pod-index\":\"3\"}},\"status\":{\"podIPs\":[{\"ip\":\"fd00::3\"}],"
         "\"phase\":\"Failed\"}}"),
        ("{\"metadata\":{\"name\":\"bad\",\"annotations\":{\"batch.kubernetes.io/"
         "job-completion-index\":\"x\"}},\"status\":{\"podIP\":\"1.2.3\"}}"),
    };
    for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
        struct mesh_k8s_pod p;
        assert_int_equal(test_pod_parse(pods[i], strlen(pods[i]), &p, NULL), 0);
        struct mesh_k8s_pod_rec *direct = mesh_k8s_pod_pack(&p);
        Tpumesh__V1__Pod m;
        mesh_topo_msg_pod_from_rec(&m, direct);
        struct mesh_err err;
        struct mesh_k8s_pod_rec *relayed = mesh_topo_msg_pod_to_rec(&m, &err);
        assert_non_null(relayed);
        assert_true(mesh_k8s_pod_rec_equal(direct, relayed));
        mesh_free(direct);
        mesh_free(relayed);
    }
}

/* The string topology.json shows for key in o ("" for null). */
static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int jint(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* The snapshot of in shows what topology.json rendered from in shows. */
static void same_as_topology_json(const struct mesh_render_input *in)
{
    char *json = NULL;
    size_t jlen = 0;
    assert_int_equal(mesh_render_topology_json(in, &json, &jlen, NULL), 0);
    cJSON *j = cJSON_ParseWithLength(json, jlen);
    assert_non_null(j);
    uint8_t *pb = NULL;
    size_t len = 0;
    assert_int_equal(mesh_topo_msg_snapshot(in, "99", &pb, &len, NULL), 0);
    Tpumesh__V1__TopologySnapshot *m = tpumesh__v1__topology_snapshot__unpack(NULL, len, pb);
    assert_non_null(m);
    assert_int_equal(m->generation, (uint64_t)cJSON_GetObjectItem(j, "generation")->valuedouble);
    assert_int_equal(m->complete, cJSON_IsTrue(cJSON_GetObjectItem(j, "complete")));
    assert_string_equal(m->resource_version, "99");
    assert_string_equal(m->job_name, jstr(j, "jobName"));
    assert_int_equal(m->client_id, jint(j, "clientId"));
    assert_int_equal(m->num_clients, jint(j, "numClients"));
    assert_int_equal(m->expected_workers, jint(j, "expectedWorkers"));
    assert_int_equal(m->present_workers, jint(j, "presentWorkers"));
    assert_string_equal(m->expected_workers_source, jstr(j, "expectedWorkersSource"));
    assert_string_equal(m->coordinator, jstr(j, "coordinator"));
    assert_string_equal(m->workers_digest, jstr(j, "workersDigest"));
    const cJSON *ss = cJSON_GetObjectItem(j, "slices");
    assert_int_equal(m->slices->count, jint(ss, "count"));
    assert_int_equal(m->slices->id, jint(ss, "id"));
    assert_int_equal(m->slices->hosts_per_slice, jint(ss, "hostsPerSlice"));
    const cJSON *sl = cJSON_GetObjectItem(j, "slice");
    assert_int_equal(m->slice != NULL, cJSON_IsObject(sl));
    if (m->slice != NULL) {
        assert_string_equal(m->slice->accelerator_type, jstr(sl, "acceleratorType"));
        assert_int_equal(m->slice->chips, jint(sl, "chips"));
        assert_int_equal(m->slice->n_mesh_shape,
                         cJSON_GetArraySize(cJSON_GetObjectItem(sl, "meshShape")));
    }
    const cJSON *ws = cJSON_GetObjectItem(j, "workers");
    assert_int_equal(m->n_workers, cJSON_GetArraySize(ws));
    for (size_t i = 0; i < m->n_workers; i++) {
        const cJSON *w = cJSON_GetArrayItem(ws, (int)i);
        assert_int_equal(m->workers[i]->index, jint(w, "index"));
        assert_string_equal(m->workers[i]->pod, jstr(w, "pod"));
        assert_string_equal(m->workers[i]->host, jstr(w, "host"));
        assert_string_equal(m->workers[i]->ip, jstr(w, "ip"));
        assert_string_equal(m->workers[i]->address, jstr(w, "address"));
        assert_int_equal(m->workers[i]->ready, cJSON_IsTrue(cJSON_GetObjectItem(w, "ready")));
    }
    tpumesh__v1__topology_snapshot__free_unpacked(m, NULL);
    mesh_free(pb);
    cJSON_Delete(j);
    mesh_free(json);
}

/* The snapshot is built from the render input, with topology.json's values. */
static void test_snapshot(void **state)
{
    (void)state;
    struct mesh_slice slice;
    memset(&slice, 0, sizeof(slice));
    snprintf(slice.accelerator_type, sizeof(slice.accelerator_type), "v4-16");
    snprintf(slice.topology, sizeof(slice.topology), "2x2x2");
    slice.chips = 8, slice.hosts = 2, slice.chips_per_host = 4, slice.cores_per_chip = 2;
    slice.mesh_shape[0] = 2, slice.mesh_shape[1] = 2, slice.mesh_shape[2] = 2;
    slice.mesh_shape[3] = 1;
    struct mesh_worker w[4] = {
        {.index = 0, .pod = "p0", .host = "a.s", .ip = "", .ready = true},
        {.index = 1, .pod = "", .host = "b.s", .ip = "10.0.0.2", .ready = false},
        {.index = 2, .pod = "p2", .host = "", .ip = "fd00::2", .ready = true},
        {.index = 3, .pod = "p3", .host = "d.s", .ip = "10.0.0.4", .ready = true},
    };
    struct mesh_render_input in = {
        .slice = &slice,
        .workers = w,
        .nworkers = 4,
        .expected = 4,
        .self_index = 2,
        .port = 1,
        .mode = MESH_ADDR_IP,
        .generation = 7,
        .complete = false,
        .slices = 2,
        .expected_source = "job",
        .present = 4,
    };
    same_as_topology_json(&in);
    in.mode = MESH_ADDR_DNS;
    in.self_index = -1;
    in.slice = NULL;
    in.expected_source = NULL;
    in.job_name = "J_1";
    same_as_topology_json(&in);
    in.mode = MESH_ADDR_AUTO;
    in.slices = 0;
    in.nworkers = 1;
    in.generation = 2147483648ULL; /* beyond an int: cJSON reads it back as a double */
    same_as_topology_json(&in);
    /* The renderer's input errors. */
    in.port = 0;
    uint8_t *pb = NULL;
    size_t len = 0;
    assert_int_equal(mesh_topo_msg_snapshot(&in, NULL, &pb, &len, NULL), -MESH_E_RANGE);
    in.port = 1;
    w[0].ip = "1.2.3";
    assert_int_equal(mesh_topo_msg_snapshot(&in, NULL, &pb, &len, NULL), -MESH_E_INVAL);
}

static void test_unpack_limits(void **state)
{
    (void)state;
    char rv[100];
    memset(rv, '7', sizeof(rv) - 1);
    rv[sizeof(rv) - 1] = '\0';
    Tpumesh__V1__WatchResponse w = TPUMESH__V1__WATCH_RESPONSE__INIT;
    w.resource_version = rv;
    uint8_t buf[256];
    size_t n = tpumesh__v1__watch_response__pack(&w, buf);
    struct mesh_err err;
    assert_null(mesh_topo_msg_unpack_watch(buf, n, &err));
    assert_int_equal(err.code, MESH_E_TOOBIG);
    w.resource_version = (char *)"12";
    w.synced = true;
    n = tpumesh__v1__watch_response__pack(&w, buf);
    Tpumesh__V1__WatchResponse *m = mesh_topo_msg_unpack_watch(buf, n, &err);
    assert_non_null(m);
    assert_true(m->synced);
    tpumesh__v1__watch_response__free_unpacked(m, NULL);
    static const uint8_t junk[] = {0xff, 0xff, 0xff};
    assert_null(mesh_topo_msg_unpack_watch(junk, sizeof(junk), &err));
    assert_int_equal(err.code, MESH_E_PARSE);
}

/* Append a varint to b at *n. */
static void put_varint(uint8_t *b, size_t *n, uint64_t v)
{
    while (v >= 0x80) {
        b[(*n)++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[(*n)++] = (uint8_t)v;
}

/* WatchResponse{synced, pods{upserts: `count` empty Pods}}: 2 bytes a
 * record on the wire, ~100 B each once decoded. Owned (mesh_free). */
static uint8_t *empty_records(size_t count, size_t *out_len)
{
    size_t inner = 2 * count;
    uint8_t *b = mesh_malloc(inner + 16);
    size_t n = 0;
    b[n++] = 0x18; /* synced = 1 */
    b[n++] = 0x01;
    b[n++] = 0x12; /* pods */
    put_varint(b, &n, inner);
    for (size_t i = 0; i < count; i++) {
        b[n++] = 0x12; /* upserts: an empty Pod */
        b[n++] = 0x00;
    }
    *out_len = n;
    return b;
}

static void test_scan_pods(void **state)
{
    (void)state;
    struct mesh_err err;
    size_t n = 0;
    /* The hostile message of issue 22: 32 MiB of empty records. */
    uint8_t *big = empty_records(((size_t)32 << 20) / 2 - 16, &n);
    assert_int_equal(mesh_topo_msg_scan_pods(big, n, 68, &err), -MESH_E_TOOBIG);
    assert_non_null(strstr(err.msg, "more than 68 pod records"));
    mesh_free(big);
    /* As many as allowed pass; one more does not. */
    uint8_t *ok = empty_records(68, &n);
    assert_int_equal(mesh_topo_msg_scan_pods(ok, n, 68, &err), 0);
    assert_int_equal(mesh_topo_msg_scan_pods(ok, n, 67, &err), -MESH_E_TOOBIG);
    mesh_free(ok);
    /* A real message scans clean with the limit it needs. */
    Tpumesh__V1__Pod p = TPUMESH__V1__POD__INIT, *pp[1] = {&p};
    p.name = (char *)"trainer-0-abcde";
    p.ip = (char *)"10.0.0.1";
    Tpumesh__V1__PodDelta d = TPUMESH__V1__POD_DELTA__INIT;
    d.reset = true;
    d.n_upserts = 1;
    d.upserts = pp;
    char *del[1] = {(char *)"trainer-1-abcde"};
    d.n_deleted = 1;
    d.deleted = del;
    Tpumesh__V1__WatchResponse w = TPUMESH__V1__WATCH_RESPONSE__INIT;
    w.pods = &d;
    w.synced = true;
    w.resource_version = (char *)"42";
    uint8_t buf[512];
    n = tpumesh__v1__watch_response__pack(&w, buf);
    assert_int_equal(mesh_topo_msg_scan_pods(buf, n, 2, &err), 0);
    assert_int_equal(mesh_topo_msg_scan_pods(buf, n, 1, &err), -MESH_E_TOOBIG);
    /* Unknown fields count: 200 varint fields #15 at the top level. */
    uint8_t unk[400];
    for (size_t i = 0; i < 200; i++) {
        unk[2 * i] = 15 << 3;
        unk[2 * i + 1] = 0;
    }
    assert_int_equal(mesh_topo_msg_scan_pods(unk, sizeof(unk), 4, &err), -MESH_E_TOOBIG);
    /* A topology has no place in a pod stream; truncation is malformed. */
    static const uint8_t topo[] = {0x0a, 0x00};
    assert_int_equal(mesh_topo_msg_scan_pods(topo, sizeof(topo), 4, &err), -MESH_E_INVAL);
    static const uint8_t cut[] = {0x12, 0x05, 0x12};
    assert_int_equal(mesh_topo_msg_scan_pods(cut, sizeof(cut), 4, &err), -MESH_E_PARSE);
    /* A record longer than any pod can be. */
    uint8_t *fat = mesh_calloc(1, 2048);
    n = 0;
    fat[n++] = 0x12;
    put_varint(fat, &n, 1203);
    fat[n++] = 0x12;
    put_varint(fat, &n, 1200);
    fat[n++] = 0x0a; /* name: 1197 bytes */
    put_varint(fat, &n, 1197);
    n += 1197;
    assert_int_equal(mesh_topo_msg_scan_pods(fat, n, 4, &err), -MESH_E_TOOBIG);
    mesh_free(fat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_rules),     cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_unpack_limits), cmocka_unit_test(test_scan_pods),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
