/*
 * k8s_pod.c - extract the few Pod fields the sidecar uses into a fixed-size
 * record, validating every value that may later reach a published file
 * (docs/DESIGN.md §4: nothing is ever written raw). Pure: no I/O, no logging.
 */
#include "k8s_pod.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/annotations.h"
#include "core/json.h"
#include "core/mem.h"
#include "core/names.h"

/* Mark the record invalid with the reason "<what> '<val>' <tail>"; the first
 * reason found is kept. what and tail are ours, val comes from the pod. */
static void set_invalid(struct mesh_k8s_pod *p, const char *what, const char *val, const char *tail)
{
    if (p->invalid) {
        return;
    }
    p->invalid = true;
    /* Hostile values are cut short and their control bytes replaced: the
     * reason is logged, so it must stay one short line. */
    char shown[40];
    size_t n = 0;
    for (const char *s = val ? val : ""; *s != '\0' && n + 1 < sizeof(shown); s++) {
        unsigned char c = (unsigned char)*s;
        shown[n++] = (c < 0x20 || c == 0x7f || c == '\'') ? '?' : (char)c;
    }
    shown[n] = '\0';
    snprintf(p->reason, sizeof(p->reason), "%s '%s' %s", what, shown, tail);
}

/* Copy a string that has already been validated to fit. */
static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

/* Read a non-negative integer from a label/annotation string value into
 * *out (left at -1 when the key is absent). */
static void read_index(struct mesh_k8s_pod *p, const cJSON *map, const char *key, int *out)
{
    const cJSON *v = cJSON_IsObject(map) ? cJSON_GetObjectItemCaseSensitive(map, key) : NULL;
    if (v == NULL) {
        return;
    }
    if (!cJSON_IsString(v)) {
        set_invalid(p, key, "(not a string)", "must be a string");
        return;
    }
    long long n = 0;
    if (mesh_parse_ll(v->valuestring, strlen(v->valuestring), 0, MESH_K8S_INDEX_MAX, &n, NULL) <
        0) {
        set_invalid(p, key, v->valuestring, "is not an integer in 0..1048575");
        return;
    }
    *out = (int)n;
}

/* A count the JobSet controller stamps as label and annotation: 1..the
 * index limit, else -1. Only the own pod's values are used (for a fallback
 * worker count), so a bad one is ignored rather than invalidating the pod. */
static int read_count(const cJSON *labels, const cJSON *annos, const char *key)
{
    const char *v = mesh_json_str(labels, key);
    if (v == NULL) {
        v = mesh_json_str(annos, key);
    }
    long long n = 0;
    if (v == NULL || mesh_parse_ll(v, strlen(v), 1, MESH_K8S_INDEX_MAX, &n, NULL) < 0) {
        return -1;
    }
    return (int)n;
}

/* A label value we keep for selectors and ordering: must be a valid label
 * value; anything else makes the pod invalid. */
static void read_label(struct mesh_k8s_pod *p, const cJSON *labels, const char *key, char *dst,
                       size_t cap)
{
    const char *v = mesh_json_str(labels, key);
    if (v == NULL) {
        return;
    }
    if (!mesh_names_is_label_value(v, strlen(v))) {
        set_invalid(p, key, v, "is not a valid label value");
        return;
    }
    copy_str(dst, cap, v);
}

/* Mark the record invalid with a rule's own message (core/annotations.h). */
static void set_invalid_msg(struct mesh_k8s_pod *p, const char *msg)
{
    if (!p->invalid) {
        p->invalid = true;
        copy_str(p->reason, sizeof(p->reason), msg);
    }
}

/* A number-valued tpumesh.dev annotation through its rule (the one
 * tpumesh-init and tpumesh-injector apply): into *dst; a value the rule
 * refuses makes the pod invalid with the rule's message; none leaves *dst. */
static void read_number(struct mesh_k8s_pod *p, const cJSON *annos, const char *key,
                        int (*rule)(const char *, int *, struct mesh_err *), int *dst)
{
    const char *v = mesh_json_str(annos, key);
    if (v == NULL) {
        return;
    }
    struct mesh_err e = {0};
    int n = 0;
    if (rule(v, &n, &e) < 0) {
        set_invalid_msg(p, e.msg);
        return;
    }
    *dst = n;
}

/* Where the pod stands in its workload: the Indexed Job, StatefulSet and
 * JobSet indexes and counts, and the names of its Job and JobSet. */
static void read_workload(struct mesh_k8s_pod *p, const cJSON *labels, const cJSON *annos)
{
    /* Indexed Jobs: the annotation always, the label since 1.28.
     * Both present must agree. */
    int from_anno = -1, from_label = -1;
    read_index(p, annos, MESH_K8S_KEY_COMPLETION_INDEX, &from_anno);
    read_index(p, labels, MESH_K8S_KEY_COMPLETION_INDEX, &from_label);
    if (from_anno >= 0 && from_label >= 0 && from_anno != from_label) {
        char both[32];
        snprintf(both, sizeof(both), "%d/%d", from_anno, from_label);
        set_invalid(p, MESH_K8S_KEY_COMPLETION_INDEX, both, "annotation/label disagree");
    }
    p->completion_index = from_anno >= 0 ? from_anno : from_label;
    read_index(p, labels, MESH_K8S_KEY_POD_INDEX, &p->pod_index);
    read_index(p, labels, MESH_K8S_KEY_JOB_INDEX, &p->job_index);
    read_index(p, labels, MESH_K8S_KEY_JOB_GLOBAL_INDEX, &p->job_global_index);

    p->global_replicas = read_count(labels, annos, MESH_K8S_KEY_GLOBAL_REPLICAS);
    p->rjob_replicas = read_count(labels, annos, MESH_K8S_KEY_RJOB_REPLICAS);

    read_label(p, labels, MESH_K8S_KEY_JOB_NAME, p->job_name, sizeof(p->job_name));
    if (p->job_name[0] == '\0') {
        read_label(p, labels, MESH_K8S_KEY_JOB_NAME_LEGACY, p->job_name, sizeof(p->job_name));
    }
    read_label(p, labels, MESH_K8S_KEY_JOBSET_NAME, p->jobset_name, sizeof(p->jobset_name));
    read_label(p, labels, MESH_K8S_KEY_REPLICATED_JOB, p->replicated_job,
               sizeof(p->replicated_job));
}

/* The tpumesh.dev annotations the sidecar reads, through the same rules as
 * tpumesh-init's annotation layer and the injector's admission
 * (core/annotations.h), so all three refuse the same values with the same
 * words and init and sidecar publish the same addresses. */
static void read_annotations(struct mesh_k8s_pod *p, const cJSON *annos)
{
    read_number(p, annos, MESH_K8S_KEY_EXPECTED, mesh_annotations_expected_workers,
                &p->expected_workers);
    read_number(p, annos, MESH_K8S_KEY_PORT, mesh_annotations_port, &p->port);
    read_number(p, annos, MESH_K8S_KEY_MEGASCALE_PORT, mesh_annotations_megascale_port,
                &p->megascale_port);
    const char *mode = mesh_json_str(annos, MESH_K8S_KEY_ADDR_MODE);
    if (mode != NULL) {
        enum mesh_addr_mode m = MESH_ADDR_AUTO;
        struct mesh_err e = {0};
        if (mesh_annotations_address_mode(mode, &m, &e) < 0) {
            set_invalid_msg(p, e.msg);
        } else {
            p->address_mode = (int)m;
        }
    }
}

/* The controlling owner (at most one has controller: true). Only kinds and
 * names that fit are kept; they serve selector derivation and, with the
 * uid, the same-job check (a relay, a worker must share the controller). */
static void read_controller(struct mesh_k8s_pod *p, const cJSON *owners)
{
    const cJSON *list = cJSON_IsArray(owners) ? owners : NULL;
    const cJSON *o = NULL;
    cJSON_ArrayForEach(o, list)
    {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller"))) {
            continue;
        }
        const char *kind = mesh_json_str(o, "kind");
        const char *name = mesh_json_str(o, "name");
        const char *ouid = mesh_json_str(o, "uid");
        if (kind != NULL && name != NULL && strlen(kind) < sizeof(p->owner_kind) &&
            mesh_names_is_label_value(name, strlen(name))) {
            copy_str(p->owner_kind, sizeof(p->owner_kind), kind);
            copy_str(p->owner_name, sizeof(p->owner_name), name);
            /* A uid that does not fit is no uid: it then matches no job. */
            if (ouid != NULL && strlen(ouid) < sizeof(p->owner_uid)) {
                copy_str(p->owner_uid, sizeof(p->owner_uid), ouid);
            }
        }
        break;
    }
}

static void read_metadata(struct mesh_k8s_pod *p, const cJSON *md)
{
    const char *ns = mesh_json_str(md, "namespace");
    if (ns != NULL) {
        if (mesh_names_is_dns_label(ns, strlen(ns))) {
            copy_str(p->ns, sizeof(p->ns), ns);
        } else {
            set_invalid(p, "metadata.namespace", ns, "is not an RFC 1123 label");
        }
    }
    const char *uid = mesh_json_str(md, "uid");
    if (uid != NULL && strlen(uid) < sizeof(p->uid)) {
        copy_str(p->uid, sizeof(p->uid), uid);
    }
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(md, "deletionTimestamp");
    p->terminating = del != NULL && !cJSON_IsNull(del);
    const cJSON *annos = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    read_workload(p, cJSON_GetObjectItemCaseSensitive(md, "labels"), annos);
    read_annotations(p, annos);
    read_controller(p, cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"));
}

/* JAX_COORDINATOR_PORT as a literal value in a regular container's env
 * (valueFrom is not resolved here): the port JAX's Cloud TPU detection uses
 * instead of its default, which jax.env must then name too. Containers that
 * set different values, or a value that is not a port, make the pod invalid. */
static void read_jax_port(struct mesh_k8s_pod *p, const cJSON *spec)
{
    const cJSON *ctrs = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    if (!cJSON_IsArray(ctrs)) {
        return;
    }
    const cJSON *c = NULL;
    cJSON_ArrayForEach(c, ctrs)
    {
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(c, "env");
        if (!cJSON_IsArray(env)) {
            continue;
        }
        const cJSON *e = NULL;
        cJSON_ArrayForEach(e, env)
        {
            const char *name = mesh_json_str(e, "name");
            const char *v = mesh_json_str(e, "value");
            if (name == NULL || v == NULL || strcmp(name, "JAX_COORDINATOR_PORT") != 0) {
                continue;
            }
            long long port = 0;
            if (mesh_parse_ll(v, strlen(v), 1, 65535, &port, NULL) != 0) {
                set_invalid(p, "container env JAX_COORDINATOR_PORT", v,
                            "is not a port in 1..65535");
                return;
            }
            if (p->jax_port > 0 && p->jax_port != (int)port) {
                set_invalid(p, "container env JAX_COORDINATOR_PORT", v,
                            "differs between containers");
                return;
            }
            p->jax_port = (int)port;
        }
    }
}

static void read_spec(struct mesh_k8s_pod *p, const cJSON *spec)
{
    read_jax_port(p, spec);
    const char *fields[2] = {"hostname", "subdomain"};
    const char *paths[2] = {"spec.hostname", "spec.subdomain"};
    char *dst[2] = {p->hostname, p->subdomain};
    for (int i = 0; i < 2; i++) {
        const char *v = mesh_json_str(spec, fields[i]);
        if (v == NULL || v[0] == '\0') {
            continue;
        }
        if (!mesh_names_is_dns_label(v, strlen(v))) {
            set_invalid(p, paths[i], v, "is not an RFC 1123 DNS label");
            continue;
        }
        copy_str(dst[i], MESH_K8S_LABEL_MAX, v);
    }
}

/* Store an IP in canonical text form (inet_pton + inet_ntop), which also
 * rejects anything that is not an address. */
static void set_ip(struct mesh_k8s_pod *p, const char *ip)
{
    unsigned char bin[16];
    int af = strchr(ip, ':') != NULL ? AF_INET6 : AF_INET;
    if (strlen(ip) >= MESH_IP_MAX || inet_pton(af, ip, bin) != 1 ||
        inet_ntop(af, bin, p->ip, sizeof(p->ip)) == NULL) {
        p->ip[0] = '\0';
        set_invalid(p, "status.podIP", ip, "is not an IP address");
        return;
    }
    p->ip_v6 = af == AF_INET6;
}

static void read_status(struct mesh_k8s_pod *p, const cJSON *status)
{
    const char *ip = mesh_json_str(status, "podIP");
    if (ip == NULL || ip[0] == '\0') {
        /* podIPs[0] == podIP when both exist; use it when podIP is absent. */
        const cJSON *ips = cJSON_GetObjectItemCaseSensitive(status, "podIPs");
        ip = cJSON_IsArray(ips) ? mesh_json_str(cJSON_GetArrayItem(ips, 0), "ip") : NULL;
    }
    if (ip != NULL && ip[0] != '\0') {
        set_ip(p, ip);
    }
    const char *phase = mesh_json_str(status, "phase");
    p->finished =
        phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
    const cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    if (!cJSON_IsArray(conds)) {
        conds = NULL;
    }
    const cJSON *c = NULL;
    cJSON_ArrayForEach(c, conds)
    {
        const char *type = mesh_json_str(c, "type");
        if (type != NULL && strcmp(type, "Ready") == 0) {
            const char *st = mesh_json_str(c, "status");
            p->ready = st != NULL && strcmp(st, "True") == 0;
            break;
        }
    }
}

/* The own pod's settings that stay -1 ("not given") until an annotation or
 * label gives them; a packed peer record keeps none of them. */
static void unset_own_keys(struct mesh_k8s_pod *p)
{
    p->expected_workers = -1;
    p->global_replicas = -1;
    p->rjob_replicas = -1;
    p->port = -1;
    p->address_mode = -1;
    p->megascale_port = -1;
    p->jax_port = -1;
}

int mesh_k8s_pod_extract(const cJSON *pod, struct mesh_k8s_pod *out, struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    out->completion_index = -1;
    out->pod_index = -1;
    out->job_index = -1;
    out->job_global_index = -1;
    unset_own_keys(out);

    const cJSON *md =
        cJSON_IsObject(pod) ? cJSON_GetObjectItemCaseSensitive(pod, "metadata") : NULL;
    const char *name = mesh_json_str(md, "name");
    if (name == NULL) {
        out->invalid = true;
        copy_str(out->reason, sizeof(out->reason), "object has no metadata.name");
        return mesh_err_set(err, MESH_E_INVAL, 0, "Pod object has no string metadata.name");
    }
    /* Pod names are RFC 1123 subdomains (<= 253). Anything else is hostile
     * or corrupt: keep a truncated copy for the log and leave the pod out. */
    copy_str(out->name, sizeof(out->name), name);
    if (!mesh_names_is_k8s_name(name, strlen(name))) {
        set_invalid(out, "metadata.name", name, "is not an RFC 1123 subdomain");
    }
    read_metadata(out, md);
    read_spec(out, cJSON_GetObjectItemCaseSensitive(pod, "spec"));
    read_status(out, cJSON_GetObjectItemCaseSensitive(pod, "status"));
    return 0;
}

struct mesh_k8s_pod_rec *mesh_k8s_pod_pack(const struct mesh_k8s_pod *p)
{
    /* Each source string is NUL-terminated within its array, so every
     * length is below its bound and the offsets fit in 16 bits. */
    const char *str[5] = {p->name, p->hostname, p->subdomain, p->ip, p->reason};
    size_t len[5], total = 0;
    for (int i = 0; i < 5; i++) {
        len[i] = strlen(str[i]);
        total += len[i] + 1;
    }
    size_t size = offsetof(struct mesh_k8s_pod_rec, s) + total;
    /* calloc: the header's padding is zero, so equal records are equal bytes. */
    struct mesh_k8s_pod_rec *r = mesh_calloc(1, size);
    r->size = (uint32_t)size;
    r->completion_index = p->completion_index;
    r->pod_index = p->pod_index;
    r->job_index = p->job_index;
    r->job_global_index = p->job_global_index;
    r->flags =
        (uint8_t)((p->ready ? MESH_K8S_REC_READY : 0) |
                  (p->terminating ? MESH_K8S_REC_TERMINATING : 0) |
                  (p->finished ? MESH_K8S_REC_FINISHED : 0) |
                  (p->invalid ? MESH_K8S_REC_INVALID : 0) | (p->ip_v6 ? MESH_K8S_REC_IP_V6 : 0));
    uint16_t *offs[5] = {NULL, &r->off_hostname, &r->off_subdomain, &r->off_ip, &r->off_reason};
    size_t at = 0;
    for (int i = 0; i < 5; i++) {
        if (offs[i] != NULL) {
            *offs[i] = (uint16_t)at;
        }
        memcpy(r->s + at, str[i], len[i] + 1);
        at += len[i] + 1;
    }
    return r;
}

void mesh_k8s_pod_unpack(const struct mesh_k8s_pod_rec *r, struct mesh_k8s_pod *out)
{
    memset(out, 0, sizeof(*out));
    copy_str(out->name, sizeof(out->name), mesh_k8s_pod_rec_name(r));
    copy_str(out->hostname, sizeof(out->hostname), mesh_k8s_pod_rec_hostname(r));
    copy_str(out->subdomain, sizeof(out->subdomain), mesh_k8s_pod_rec_subdomain(r));
    copy_str(out->ip, sizeof(out->ip), mesh_k8s_pod_rec_ip(r));
    copy_str(out->reason, sizeof(out->reason), mesh_k8s_pod_rec_reason(r));
    out->completion_index = r->completion_index;
    out->pod_index = r->pod_index;
    out->job_index = r->job_index;
    out->job_global_index = r->job_global_index;
    unset_own_keys(out);
    out->ready = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_READY);
    out->terminating = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_TERMINATING);
    out->finished = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_FINISHED);
    out->invalid = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_INVALID);
    out->ip_v6 = mesh_k8s_pod_rec_has(r, MESH_K8S_REC_IP_V6);
}

bool mesh_k8s_pod_rec_equal(const struct mesh_k8s_pod_rec *a, const struct mesh_k8s_pod_rec *b)
{
    /* pack() callocs and writes every byte up to size: memcmp is exact. */
    return a->size == b->size && memcmp(a, b, a->size) == 0;
}

bool mesh_k8s_pod_rec_ready_flip(const struct mesh_k8s_pod_rec *a, const struct mesh_k8s_pod_rec *b)
{
    /* The header before flags, then the strings (the padding between is
     * zeroed by pack's calloc, but need not be compared). */
    size_t head = offsetof(struct mesh_k8s_pod_rec, flags);
    return a->size == b->size && (a->flags ^ b->flags) == MESH_K8S_REC_READY &&
           memcmp(a, b, head) == 0 &&
           memcmp(a->s, b->s, a->size - offsetof(struct mesh_k8s_pod_rec, s)) == 0;
}
