/*
 * k8s_pod.h - Pod JSON -> a small fixed-size record holding only what the
 * sidecar needs to order workers and address them (docs/STYLE.md R8: pure).
 *
 * Field paths read (Kubernetes core/v1 Pod; labels and annotations as the Job,
 * JobSet and StatefulSet controllers set them):
 *   metadata.name, .namespace, .uid, .deletionTimestamp (non-null = leaving)
 *   metadata.labels / metadata.annotations:
 *     batch.kubernetes.io/job-completion-index   (annotation, or label since 1.28)
 *     apps.kubernetes.io/pod-index               (StatefulSet label)
 *     batch.kubernetes.io/job-name               (Indexed Job; legacy "job-name" too)
 *     jobset.sigs.k8s.io/jobset-name, replicatedjob-name, job-index, job-global-index
 *     jobset.sigs.k8s.io/global-replicas, replicatedjob-replicas (label or
 *                                                 annotation; a bad value is
 *                                                 ignored, never fatal)
 *     tpumesh.dev/expected-workers               (annotation)
 *     tpumesh.dev/port, tpumesh.dev/address-mode, tpumesh.dev/megascale-port
 *                                                (annotations; the sidecar
 *                                                 reads them from its own pod)
 *   metadata.ownerReferences[] (the one with controller: true: kind, name, uid)
 *   spec.hostname, spec.subdomain
 *   spec.containers[].env[name=JAX_COORDINATOR_PORT].value (the port JAX's
 *                                                 Cloud TPU detection then uses;
 *                                                 the sidecar reads it from its
 *                                                 own pod for jax.env)
 *   status.podIP (else status.podIPs[0].ip), status.phase,
 *   status.conditions[type=Ready].status
 *
 * A record is a plain value: copy it, compare it with memcmp (it is zeroed
 * before it is filled, padding and the bytes after each string included).
 * A pod with a value we cannot use safely (a name that is not RFC 1123, an
 * index that is not a non-negative integer, an IP that does not parse) is
 * still returned, with `invalid` set and a reason, so the caller can leave it
 * out and log it; nothing here crashes on hostile input.
 */
#ifndef MESH_K8S_POD_H
#define MESH_K8S_POD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/err.h"
#include "core/model.h"

#define MESH_K8S_NS_MAX 64         /* RFC 1123 label (63) + NUL */
#define MESH_K8S_LABEL_MAX 64      /* label values and DNS labels: <= 63 + NUL */
#define MESH_K8S_UID_MAX 40        /* UUID text (36) + NUL */
#define MESH_K8S_REASON_MAX 256    /* why a pod is invalid */
#define MESH_K8S_KIND_MAX 24       /* owner kind ("StatefulSet") */
#define MESH_K8S_INDEX_MAX 1048575 /* largest index accepted (far above any slice) */

/* Label and annotation keys (exact strings). */
#define MESH_K8S_KEY_COMPLETION_INDEX "batch.kubernetes.io/job-completion-index"
#define MESH_K8S_KEY_POD_INDEX "apps.kubernetes.io/pod-index"
#define MESH_K8S_KEY_JOB_NAME "batch.kubernetes.io/job-name"
#define MESH_K8S_KEY_JOB_NAME_LEGACY "job-name"
#define MESH_K8S_KEY_JOBSET_NAME "jobset.sigs.k8s.io/jobset-name"
#define MESH_K8S_KEY_REPLICATED_JOB "jobset.sigs.k8s.io/replicatedjob-name"
#define MESH_K8S_KEY_JOB_INDEX "jobset.sigs.k8s.io/job-index"
#define MESH_K8S_KEY_JOB_GLOBAL_INDEX "jobset.sigs.k8s.io/job-global-index"
#define MESH_K8S_KEY_GLOBAL_REPLICAS "jobset.sigs.k8s.io/global-replicas"
#define MESH_K8S_KEY_RJOB_REPLICAS "jobset.sigs.k8s.io/replicatedjob-replicas"
#define MESH_K8S_KEY_EXPECTED "tpumesh.dev/expected-workers"
#define MESH_K8S_KEY_PORT "tpumesh.dev/port"
#define MESH_K8S_KEY_ADDR_MODE "tpumesh.dev/address-mode"
#define MESH_K8S_KEY_MEGASCALE_PORT "tpumesh.dev/megascale-port"

/* One pod. Strings are NUL-terminated, "" = absent. Integers are -1 when
 * absent. When `invalid` is true the other fields hold what could be read
 * (name possibly truncated) and must not be published. */
struct mesh_k8s_pod {
    char ns[MESH_K8S_NS_MAX];
    char name[MESH_POD_MAX];
    char uid[MESH_K8S_UID_MAX];
    char hostname[MESH_K8S_LABEL_MAX];  /* spec.hostname (DNS label) */
    char subdomain[MESH_K8S_LABEL_MAX]; /* spec.subdomain (DNS label) */
    char ip[MESH_IP_MAX];               /* status.podIP, canonical text, or "" */
    char job_name[MESH_K8S_LABEL_MAX];  /* batch.kubernetes.io/job-name */
    char jobset_name[MESH_K8S_LABEL_MAX];
    char replicated_job[MESH_K8S_LABEL_MAX];
    char owner_kind[MESH_K8S_KIND_MAX]; /* controller ownerReference kind, or "" */
    char owner_name[MESH_K8S_LABEL_MAX];
    char owner_uid[MESH_K8S_UID_MAX]; /* its uid: which object, not just which name */
    int completion_index; /* job-completion-index (annotation wins; must agree with label) */
    int pod_index;        /* apps.kubernetes.io/pod-index */
    int job_index;        /* jobset job-index (slice within the replicated job) */
    int job_global_index; /* jobset job-global-index (slice within the JobSet) */
    int expected_workers; /* tpumesh.dev/expected-workers, or -1 */
    int global_replicas;  /* jobset global-replicas (Jobs in the JobSet), or -1 */
    int rjob_replicas;    /* jobset replicatedjob-replicas, or -1 */
    int port;             /* tpumesh.dev/port (1..65535), or -1 */
    int address_mode;     /* tpumesh.dev/address-mode as enum mesh_addr_mode, or -1 */
    int megascale_port;   /* tpumesh.dev/megascale-port (1..65535), or -1 */
    int jax_port;         /* JAX_COORDINATOR_PORT of the regular containers, or -1 */
    bool ip_v6;           /* ip is an IPv6 address (render as [ip]:port) */
    bool ready;           /* condition Ready == "True" */
    bool terminating;     /* metadata.deletionTimestamp set */
    bool finished;        /* status.phase Succeeded or Failed: no process behind the IP */
    bool invalid;
    char reason[MESH_K8S_REASON_MAX]; /* why invalid, e.g. "spec.hostname 'a b' is not ..." */
};

/* Fill *out from a parsed Pod object (borrowed). Returns 0 on success,
 * including pods marked invalid. Fails with -MESH_E_INVAL only when pod is not
 * a JSON object or has no string metadata.name (nothing to key or log it by);
 * *out is then left zeroed with invalid set. */
int mesh_k8s_pod_extract(const cJSON *pod, struct mesh_k8s_pod *out, struct mesh_err *err);

/* ---- compact records (what a store keeps per pod) ----
 *
 * struct mesh_k8s_pod is 968 B of fixed arrays: fine as extraction scratch
 * on the stack, too big to keep 16,384 of. A store keeps the packed form:
 * ONE allocation holding the numbers and flags worker ordering reads
 * (workers.h) and only its strings, back to back:
 *
 *     name NUL hostname NUL subdomain NUL ip NUL reason NUL
 *
 * (each bounded as in struct mesh_k8s_pod; a typical pod is ~110 B with
 * the allocator's header). Fields left out (ns, uid, job/jobset/replicated
 * job names, owner, expected_workers, replica counts, port, address_mode,
 * megascale_port, jax_port, coordinator) feed only the
 * sidecar's own-pod identity, which uses the full struct; they never reach
 * a peer's worker entry. Validation is unchanged: a pod whose left-out
 * field is bad is still packed with invalid set and its reason. A packed
 * record is immutable; compare two with mesh_k8s_pod_rec_equal. */
struct mesh_k8s_pod_rec {
    uint32_t size; /* bytes of the whole record, header and strings */
    int32_t completion_index, pod_index, job_index, job_global_index; /* -1 = absent */
    uint16_t off_hostname, off_subdomain, off_ip, off_reason;         /* offsets into s */
    uint8_t flags;                                                    /* MESH_K8S_REC_* */
    char s[];                                                         /* name first */
};

#define MESH_K8S_REC_READY 0x01u       /* condition Ready == "True" */
#define MESH_K8S_REC_TERMINATING 0x02u /* deletionTimestamp set */
#define MESH_K8S_REC_FINISHED 0x04u    /* phase Succeeded or Failed */
#define MESH_K8S_REC_INVALID 0x08u     /* must not be published; see reason */
#define MESH_K8S_REC_IP_V6 0x10u       /* ip is IPv6 */

/* Pack p (borrowed) into a new record: owned by caller, free with
 * mesh_free (one block). Never fails (allocation aborts, docs/STYLE.md R6). */
struct mesh_k8s_pod_rec *mesh_k8s_pod_pack(const struct mesh_k8s_pod *p);

/* Fill *out (zeroed first) from r (borrowed): the kept fields exactly, the
 * left-out ones as "absent" ("" / -1). pack(unpack(pack(p))) == pack(p). */
void mesh_k8s_pod_unpack(const struct mesh_k8s_pod_rec *r, struct mesh_k8s_pod *out);

/* True when a and b (borrowed) hold the same bytes: an update whose record
 * equals the stored one cannot change any output. */
bool mesh_k8s_pod_rec_equal(const struct mesh_k8s_pod_rec *a, const struct mesh_k8s_pod_rec *b);

/* True when a and b (borrowed) differ in the Ready flag alone: a change
 * that only readiness pacing cares about. */
bool mesh_k8s_pod_rec_ready_flip(const struct mesh_k8s_pod_rec *a,
                                 const struct mesh_k8s_pod_rec *b);

/* Accessors; strings borrowed from r, never NULL, "" = absent. */
static inline const char *mesh_k8s_pod_rec_name(const struct mesh_k8s_pod_rec *r)
{
    return r->s;
}
static inline const char *mesh_k8s_pod_rec_hostname(const struct mesh_k8s_pod_rec *r)
{
    return r->s + r->off_hostname;
}
static inline const char *mesh_k8s_pod_rec_subdomain(const struct mesh_k8s_pod_rec *r)
{
    return r->s + r->off_subdomain;
}
static inline const char *mesh_k8s_pod_rec_ip(const struct mesh_k8s_pod_rec *r)
{
    return r->s + r->off_ip;
}
static inline const char *mesh_k8s_pod_rec_reason(const struct mesh_k8s_pod_rec *r)
{
    return r->s + r->off_reason;
}
/* String lengths without strlen (the offsets say them). */
static inline size_t mesh_k8s_pod_rec_name_len(const struct mesh_k8s_pod_rec *r)
{
    return (size_t)r->off_hostname - 1;
}
static inline size_t mesh_k8s_pod_rec_hostname_len(const struct mesh_k8s_pod_rec *r)
{
    return (size_t)(r->off_subdomain - r->off_hostname) - 1;
}
static inline size_t mesh_k8s_pod_rec_subdomain_len(const struct mesh_k8s_pod_rec *r)
{
    return (size_t)(r->off_ip - r->off_subdomain) - 1;
}
static inline size_t mesh_k8s_pod_rec_ip_len(const struct mesh_k8s_pod_rec *r)
{
    return (size_t)(r->off_reason - r->off_ip) - 1;
}
static inline bool mesh_k8s_pod_rec_has(const struct mesh_k8s_pod_rec *r, unsigned flag)
{
    return (r->flags & flag) != 0;
}

#endif
