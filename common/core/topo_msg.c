/*
 * topo_msg.c - tpumesh.v1 messages from and to the sidecar's data
 * (topo_msg.h). Pure: no I/O.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "json.h"
#include "mem.h"
#include "render.h"
#include "topo_msg.h"

/* The address strings of the workers, one block (ADDR bytes each at most). */
#define ADDR (MESH_HOST_MAX + 16)

int mesh_topo_msg_snapshot(const struct mesh_render_input *in, const char *rv, uint8_t **out,
                           size_t *out_len, struct mesh_err *err)
{
    struct mesh_render_facts f;
    int rc = mesh_render_facts(in, &f, err);
    if (rc < 0) {
        return rc;
    }
    /* topology.json's nulls are "" and -1 here (proto3 has no null). */
    Tpumesh__V1__TopologySnapshot m = TPUMESH__V1__TOPOLOGY_SNAPSHOT__INIT;
    m.generation = in->generation;
    m.complete = in->complete && !in->slice_only;
    m.job_name = (char *)f.job_name;
    m.client_id = in->self_index >= 0 ? in->self_index : -1;
    m.num_clients = f.num_clients;
    m.expected_workers = in->expected_source != NULL ? f.num_clients : -1;
    m.present_workers = in->present;
    m.expected_workers_source = (char *)(in->expected_source != NULL ? in->expected_source : "");
    m.resource_version = (char *)(rv != NULL ? rv : "");
    m.workers_digest = f.digest;
    Tpumesh__V1__Slices slices = TPUMESH__V1__SLICES__INIT;
    slices.count = f.slices;
    slices.id = f.slice_id;
    slices.hosts_per_slice = f.hosts_per_slice;
    m.slices = &slices;
    Tpumesh__V1__Slice slice = TPUMESH__V1__SLICE__INIT;
    int32_t shape[4];
    if (in->slice != NULL) {
        const struct mesh_slice *s = in->slice;
        slice.accelerator_type = (char *)s->accelerator_type;
        slice.topology = (char *)s->topology;
        slice.chips = s->chips;
        slice.hosts = s->hosts;
        slice.chips_per_host = s->chips_per_host;
        slice.cores_per_chip = s->cores_per_chip;
        slice.devices_per_host = s->devices_per_host;
        memcpy(shape, s->mesh_shape, sizeof(shape));
        slice.n_mesh_shape = 4;
        slice.mesh_shape = shape;
        m.slice = &slice;
    }
    size_t n = in->nworkers;
    Tpumesh__V1__Worker *ws = mesh_calloc(n ? n : 1, sizeof(*ws));
    Tpumesh__V1__Worker **wp = mesh_calloc(n ? n : 1, sizeof(*wp));
    char *addr = mesh_malloc((n ? n : 1) * ADDR);
    for (size_t i = 0; i < n; i++) {
        const struct mesh_worker *w = &in->workers[i];
        tpumesh__v1__worker__init(&ws[i]);
        ws[i].index = w->index;
        ws[i].pod = (char *)w->pod;
        ws[i].host = (char *)w->host;
        ws[i].ip = (char *)w->ip;
        ws[i].address = addr + i * ADDR;
        if (mesh_render_worker_address(w, f.mode, in->port, ws[i].address, ADDR, NULL) < 0) {
            ws[i].address[0] = '\0'; /* no address yet: null in topology.json */
        }
        ws[i].ready = w->ready;
        wp[i] = &ws[i];
    }
    m.coordinator = (char *)(n > 0 && in->workers[0].index == 0 ? ws[0].address : "");
    m.n_workers = n;
    m.workers = wp;
    size_t size = tpumesh__v1__topology_snapshot__get_packed_size(&m);
    if (size > MESH_TOPO_MSG_MAX) {
        rc = mesh_err_set(err, MESH_E_TOOBIG, 0, "topology message of %zu bytes (limit %u)", size,
                          MESH_TOPO_MSG_MAX);
    } else {
        *out = mesh_malloc(size ? size : 1);
        *out_len = tpumesh__v1__topology_snapshot__pack(&m, *out);
    }
    mesh_free(addr);
    mesh_free(ws);
    mesh_free(wp);
    return rc;
}

void mesh_topo_msg_pod_from_rec(Tpumesh__V1__Pod *m, const struct mesh_k8s_pod_rec *r)
{
    tpumesh__v1__pod__init(m);
    m->name = (char *)mesh_k8s_pod_rec_name(r);
    m->hostname = (char *)mesh_k8s_pod_rec_hostname(r);
    m->subdomain = (char *)mesh_k8s_pod_rec_subdomain(r);
    m->ip = (char *)mesh_k8s_pod_rec_ip(r);
    m->completion_index = r->completion_index;
    m->pod_index = r->pod_index;
    m->job_index = r->job_index;
    m->job_global_index = r->job_global_index;
    m->ready = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_READY);
    m->terminating = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_TERMINATING);
    m->finished = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_FINISHED);
    m->invalid = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_INVALID);
    m->invalid_reason = (char *)mesh_k8s_pod_rec_reason(r);
}

/* An index as the API writes it: a decimal string label or annotation.
 * Negative values other than -1 ("absent") are written as they are, so the
 * API rules refuse them. */
static void put_index(cJSON *map, const char *key, int32_t v)
{
    if (v == -1) {
        return;
    }
    char num[16];
    snprintf(num, sizeof(num), "%d", (int)v);
    cJSON_AddStringToObject(map, key, num);
}

/* The Pod object an API server would have sent for m: only the fields
 * k8s_pod.c reads for a peer. */
static cJSON *pod_json(const Tpumesh__V1__Pod *m)
{
    cJSON *pod = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(pod, "metadata");
    cJSON_AddStringToObject(md, "name", m->name != NULL ? m->name : "");
    if (m->terminating) {
        cJSON_AddStringToObject(md, "deletionTimestamp", "1970-01-01T00:00:00Z");
    }
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    cJSON *annos = cJSON_AddObjectToObject(md, "annotations");
    put_index(annos, MESH_K8S_KEY_COMPLETION_INDEX, m->completion_index);
    put_index(labels, MESH_K8S_KEY_POD_INDEX, m->pod_index);
    put_index(labels, MESH_K8S_KEY_JOB_INDEX, m->job_index);
    put_index(labels, MESH_K8S_KEY_JOB_GLOBAL_INDEX, m->job_global_index);
    cJSON *spec = cJSON_AddObjectToObject(pod, "spec");
    if (m->hostname != NULL && m->hostname[0] != '\0') {
        cJSON_AddStringToObject(spec, "hostname", m->hostname);
    }
    if (m->subdomain != NULL && m->subdomain[0] != '\0') {
        cJSON_AddStringToObject(spec, "subdomain", m->subdomain);
    }
    cJSON *st = cJSON_AddObjectToObject(pod, "status");
    if (m->ip != NULL && m->ip[0] != '\0') {
        cJSON_AddStringToObject(st, "podIP", m->ip);
    }
    cJSON_AddStringToObject(st, "phase", m->finished ? "Succeeded" : "Running");
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "Ready");
    cJSON_AddStringToObject(c, "status", m->ready ? "True" : "False");
    cJSON_AddItemToArray(conds, c);
    return pod;
}

static bool same_str(const char *got, const char *sent)
{
    return strcmp(got, sent != NULL ? sent : "") == 0;
}

struct mesh_k8s_pod_rec *mesh_topo_msg_pod_to_rec(const Tpumesh__V1__Pod *m, struct mesh_err *err)
{
    /* Lengths first: the API's own limits, before any copy could cut a
     * value short and make a bad one look good. */
    const char *strs[4] = {m->name, m->hostname, m->subdomain, m->ip};
    const size_t caps[4] = {MESH_POD_MAX, MESH_K8S_LABEL_MAX, MESH_K8S_LABEL_MAX, MESH_IP_MAX};
    for (int i = 0; i < 4; i++) {
        if (strs[i] != NULL && strlen(strs[i]) >= caps[i] && !m->invalid) {
            mesh_err_set(err, MESH_E_INVAL, 0, "pod record with a value of %zu bytes (limit %zu)",
                         strlen(strs[i]), caps[i] - 1);
            return NULL;
        }
    }
    mesh_autocjson cJSON *j = pod_json(m);
    struct mesh_k8s_pod p;
    if (mesh_k8s_pod_extract(j, &p, err) < 0) {
        return NULL;
    }
    if (m->invalid) {
        /* The relay could not use it either: keep it out, as direct mode
         * would, with the relay's reason (bounded, and logged escaped). */
        p.invalid = true;
        snprintf(p.reason, sizeof(p.reason), "%s", m->invalid_reason ? m->invalid_reason : "");
        return mesh_k8s_pod_pack(&p);
    }
    if (p.invalid) {
        mesh_err_set(err, MESH_E_INVAL, 0, "pod '%.80s': %s", p.name, p.reason);
        return NULL;
    }
    /* The API reading writes IPs in canonical form; a relay that sends
     * another spelling of the same address did not read it from the API. */
    if (!same_str(p.ip, m->ip)) {
        mesh_err_set(err, MESH_E_INVAL, 0, "pod '%.80s': IP '%.60s' is not in canonical form",
                     p.name, m->ip);
        return NULL;
    }
    if (m->completion_index < -1 || m->pod_index < -1 || m->job_index < -1 ||
        m->job_global_index < -1) {
        mesh_err_set(err, MESH_E_INVAL, 0, "pod '%.80s': a negative index", p.name);
        return NULL;
    }
    return mesh_k8s_pod_pack(&p);
}

/* ---- the wire-format scan (protobuf encoding: a field is a varint key
 * number << 3 | wire type, then a varint (0), 8 bytes (1), a varint
 * length and that many bytes (2), or 4 bytes (5); 3 and 4 are groups,
 * which proto3 does not use) ---- */

struct scan {
    const uint8_t *p, *end;
};

static bool varint(struct scan *sc, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (sc->p >= sc->end) {
            return false;
        }
        uint8_t b = *sc->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* The next field: its number, wire type and, for a length-delimited one,
 * its bytes. false at a malformed field. */
static bool next_field(struct scan *sc, uint32_t *num, int *type, const uint8_t **body,
                       size_t *blen)
{
    uint64_t key = 0, v = 0;
    if (!varint(sc, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
        return false;
    }
    *num = (uint32_t)(key >> 3);
    *type = (int)(key & 7);
    *body = NULL;
    *blen = 0;
    switch (*type) {
    case 0:
        return varint(sc, &v);
    case 1:
    case 5: {
        size_t n = *type == 1 ? 8 : 4;
        if ((size_t)(sc->end - sc->p) < n) {
            return false;
        }
        sc->p += n;
        return true;
    }
    case 2:
        if (!varint(sc, &v) || v > (uint64_t)(sc->end - sc->p)) {
            return false;
        }
        *body = sc->p;
        *blen = (size_t)v;
        sc->p += v;
        return true;
    default:
        return false;
    }
}

/* One walk over a WatchResponse and the messages nested in it (the levels),
 * with the counts the limits apply to across the whole message. */
enum level { RESPONSE, DELTA, POD };
static const char *const level_name[] = {"WatchResponse", "PodDelta", "pod record"};

struct tally {
    const uint8_t *start; /* the message, for byte offsets */
    size_t records, max_records, fields, max_fields;
};

static int scan(struct tally *t, enum level lv, const uint8_t *b, size_t n, struct mesh_err *err)
{
    struct scan sc = {b, b + n};
    size_t here = 0;
    int rc = 0;
    while (rc == 0 && sc.p < sc.end) {
        uint32_t num;
        int type;
        const uint8_t *body;
        size_t blen;
        if (!next_field(&sc, &num, &type, &body, &blen)) {
            return mesh_err_set(err, MESH_E_PARSE, 0, "a malformed %s (at byte %zu)",
                                level_name[lv], (size_t)(sc.p - t->start));
        }
        if (++t->fields > t->max_fields) {
            return mesh_err_set(err, MESH_E_TOOBIG, 0, "more than %zu fields", t->max_fields);
        }
        if (lv == POD && ++here > MESH_TOPO_MSG_POD_FIELDS_MAX) {
            return mesh_err_set(err, MESH_E_TOOBIG, 0, "a pod record with more than %d fields",
                                MESH_TOPO_MSG_POD_FIELDS_MAX);
        }
        bool bytes = type == 2; /* length-delimited: a string or a message */
        bool record = lv == DELTA && bytes && (num == 2 || num == 3); /* an upsert, a deletion */
        if (lv == RESPONSE && num == 1) {
            rc = mesh_err_set(err, MESH_E_INVAL, 0, "a topology in a pod stream");
        } else if (lv == RESPONSE && num == 2 && bytes) {
            rc = scan(t, DELTA, body, blen, err);
        } else if (lv == RESPONSE && num == 4 && bytes && blen >= MESH_TOPO_MSG_RV_MAX) {
            rc = mesh_err_set(err, MESH_E_TOOBIG, 0, "resource_version of %zu bytes", blen);
        } else if (record && ++t->records > t->max_records) {
            rc = mesh_err_set(err, MESH_E_TOOBIG, 0,
                              "more than %zu pod records (the job cannot need more)",
                              t->max_records);
        } else if (record && num == 2 && blen > MESH_TOPO_MSG_POD_WIRE_MAX) {
            rc = mesh_err_set(err, MESH_E_TOOBIG, 0, "a pod record of %zu bytes (limit %d)", blen,
                              MESH_TOPO_MSG_POD_WIRE_MAX);
        } else if (record && num == 2) {
            rc = scan(t, POD, body, blen, err);
        } else if (record && blen >= MESH_POD_MAX) {
            rc = mesh_err_set(err, MESH_E_TOOBIG, 0, "a deleted name of %zu bytes", blen);
        }
    }
    return rc;
}

int mesh_topo_msg_scan_pods(const uint8_t *buf, size_t len, size_t max_records,
                            struct mesh_err *err)
{
    if (len > MESH_TOPO_MSG_MAX) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "message of %zu bytes (limit %u)", len,
                            MESH_TOPO_MSG_MAX);
    }
    struct tally t = {.start = buf,
                      .max_records = max_records,
                      .max_fields = MESH_TOPO_MSG_POD_FIELDS_MAX * max_records + 64};
    int rc = scan(&t, RESPONSE, buf, len, err);
    if (rc < 0) {
        mesh_err_prefix(err, "WatchResponse refused");
    }
    return rc;
}

Tpumesh__V1__WatchResponse *mesh_topo_msg_unpack_watch(const uint8_t *buf, size_t len,
                                                       struct mesh_err *err)
{
    if (len > MESH_TOPO_MSG_MAX) {
        mesh_err_set(err, MESH_E_TOOBIG, 0, "message of %zu bytes (limit %u)", len,
                     MESH_TOPO_MSG_MAX);
        return NULL;
    }
    Tpumesh__V1__WatchResponse *m = tpumesh__v1__watch_response__unpack(NULL, len, buf);
    if (m == NULL) {
        mesh_err_set(err, MESH_E_PARSE, 0, "not a tpumesh.v1.WatchResponse (%zu bytes)", len);
        return NULL;
    }
    size_t npods = m->pods != NULL ? m->pods->n_upserts + m->pods->n_deleted : 0;
    const char *why = NULL;
    if (npods > MESH_TOPO_MSG_PODS_MAX) {
        why = "too many pod records";
    } else if (m->resource_version != NULL && strlen(m->resource_version) >= MESH_TOPO_MSG_RV_MAX) {
        why = "resource_version too long";
    }
    for (size_t i = 0; why == NULL && m->pods != NULL && i < m->pods->n_deleted; i++) {
        if (strlen(m->pods->deleted[i]) >= MESH_POD_MAX) {
            why = "a deleted name is too long";
        }
    }
    if (why != NULL) {
        mesh_err_set(err, MESH_E_TOOBIG, 0, "WatchResponse refused: %s", why);
        tpumesh__v1__watch_response__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}
