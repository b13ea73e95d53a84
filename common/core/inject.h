/*
 * inject.h - the pure part of tpumesh-injector (docs/DESIGN.md §8): parse an
 * admission.k8s.io/v1 AdmissionReview, decide what to do with the Pod in it,
 * build the RFC 6902 JSON Patch that adds tpumesh, and write the
 * AdmissionReview response. No I/O (docs/STYLE.md R8): the server hands over
 * (buf, len) and sends back what comes out.
 *
 * What is injected comes from a config (struct mesh_inject_config): the
 * tpumesh-init container, the tpumesh-sidecar container, the pod volumes and
 * the volume mounts of the training containers, exactly as the chart's named
 * templates (tpumesh.initContainer, tpumesh.sidecar, tpumesh.volumes,
 * tpumesh.volumeMounts) render them. The chart renders those templates into
 * the injector's --config file; without one the built-in default below, equal
 * to the chart's defaults, is used. Config file format (YAML, at most
 * MESH_INJECT_CONFIG_MAX bytes, nesting at most MESH_INJECT_DEPTH_MAX):
 *
 *   initContainer: {Container}   # name must be set (tpumesh-init)
 *   sidecar: {Container}         # name must be set (tpumesh-sidecar)
 *   volumes: [Volume, ...]
 *   volumeMounts: [VolumeMount, ...]
 *
 * Decision for a Pod CREATE (request.object):
 *   - label tpumesh.dev/inject is not "true", or the pod already has a
 *     container or init container with the name of the injected init
 *     container or sidecar: allowed, no patch;
 *   - invalid tpumesh.dev/ annotations (the rules of tpumesh-init,
 *     mesh_annotations_config; plus tpumesh.dev/containers must name regular
 *     containers of the pod), or a name clash with what would be added:
 *     denied, the message names the key and the rule;
 *   - otherwise allowed with a patch that appends the volumes, appends
 *     tpumesh-init and then the sidecar after the user's init containers
 *     (their order is kept), and adds the mounts (read-only) to every regular
 *     container or to those listed in tpumesh.dev/containers. tpumesh-init
 *     requests the TPU resource the regular containers request: google.com/tpu
 *     (the largest count of any container), or cloud-tpus.google.com/<type>
 *     on a legacy TPU Node pod, where no sidecar is added (the TPU's own
 *     servers are the workers; tpumesh-init publishes them once).
 * Any other request (not a Pod, not CREATE) is allowed without a patch.
 */
#ifndef MESH_INJECT_H
#define MESH_INJECT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "err.h"

/* Largest AdmissionReview body accepted (a Pod is at most ~1.5 MiB in etcd;
 * the review wraps it once for CREATE). */
#define MESH_INJECT_REVIEW_MAX (4u << 20)
/* Deepest nesting of the --config YAML's sequences and mappings. */
#define MESH_INJECT_DEPTH_MAX 64
/* Largest --config file, and most YAML nodes converted from it. */
#define MESH_INJECT_CONFIG_MAX (256u * 1024)
#define MESH_INJECT_CONFIG_NODES_MAX 20000
/* Most regular containers and init containers of a pod we handle. */
#define MESH_INJECT_CONTAINERS_MAX 256
/* Most volumes and volume mounts in the config. */
#define MESH_INJECT_LIST_MAX 64

/* The pod label that asks for injection, and the annotation that restricts
 * the mounts to some regular containers (comma-separated names). */
#define MESH_INJECT_LABEL "tpumesh.dev/inject"
#define MESH_INJECT_ANNOTATION_CONTAINERS "tpumesh.dev/containers"

/* What gets injected. Every member is an owned cJSON tree. */
struct mesh_inject_config {
    cJSON *init;    /* Container object */
    cJSON *sidecar; /* Container object (restartPolicy: Always) */
    cJSON *volumes; /* array of Volume */
    cJSON *mounts;  /* array of VolumeMount for the regular containers */
    /* The members above as compact JSON text (owned), printed once by parse and
     * set_image so that a patch is assembled from text, not copied trees. */
    char *text_init, *text_sidecar;
    char **text_volumes; /* one per volume */
    char **text_mounts;  /* one per mount */
};

/* The built-in config: the chart's default rendering of its named templates,
 * with image "tpumesh:<version>" (YAML text, NUL-terminated). */
extern const char mesh_inject_default_config[];

/* Parse a YAML config from buf[0..len) (format above) into out_config
 * (written only on success; owned by the caller: mesh_inject_config_cleanup).
 * Plain scalars are typed as YAML's core schema does (null, true/false,
 * integers and floats); quoted and block scalars are strings.
 * Errors: -MESH_E_TOOBIG (size, depth or node count above the limits),
 * -MESH_E_PARSE (not YAML, with line and column), -MESH_E_CONFIG (a key
 * missing or of the wrong type, named). */
int mesh_inject_config_parse(const char *buf, size_t len, struct mesh_inject_config *out_config,
                             struct mesh_err *err);
/* mesh_inject_config_parse of mesh_inject_default_config. */
int mesh_inject_config_default(struct mesh_inject_config *out_config, struct mesh_err *err);
/* Set the image of both injected containers (image borrowed, copied).
 * -MESH_E_CONFIG when image is empty or contains whitespace. */
int mesh_inject_config_set_image(struct mesh_inject_config *c, const char *image,
                                 struct mesh_err *err);
/* Free what c owns; c is empty afterwards. NULL is fine. */
void mesh_inject_config_cleanup(struct mesh_inject_config *c);

/* A parsed AdmissionReview request. */
struct mesh_inject_review {
    cJSON *root;      /* owned: the whole document */
    const char *uid;  /* borrowed from root: request.uid (never NULL) */
    const char *op;   /* borrowed: request.operation, "" when absent */
    const char *ns;   /* borrowed: request.namespace, else the pod's, else "" */
    const cJSON *pod; /* borrowed: request.object when the request is about a Pod, else NULL */
};

/* Parse buf[0..len) as an admission.k8s.io/v1 AdmissionReview with a
 * request that has a uid. out_review is written only on success (free with
 * mesh_inject_review_cleanup). Nesting and value counts are bounded by the
 * caller (the server pre-scans bodies: io/httpd.h post_json). Errors (HTTP
 * 400 with the message): -MESH_E_TOOBIG (above MESH_INJECT_REVIEW_MAX bytes),
 * -MESH_E_PARSE (not JSON, or nested deeper than cJSON's limit of 1000),
 * -MESH_E_INVAL (JSON, but not an admission.k8s.io/v1 AdmissionReview
 * request, named). */
int mesh_inject_review_parse(const char *buf, size_t len, struct mesh_inject_review *out_review,
                             struct mesh_err *err);
void mesh_inject_review_cleanup(struct mesh_inject_review *r);

enum mesh_inject_verdict {
    MESH_INJECT_SKIP = 0, /* allowed, no patch (reason says why) */
    MESH_INJECT_PATCH,    /* allowed with patch */
    MESH_INJECT_DENY,     /* denied (reason is the message for the user) */
};

#define MESH_INJECT_REASON_MAX 512

struct mesh_inject_decision {
    enum mesh_inject_verdict verdict;
    char reason[MESH_INJECT_REASON_MAX];
    char *patch; /* owned: the JSON Patch text (PATCH only), else NULL */
    size_t patch_len;
    bool sidecar;          /* the sidecar is added: its service account needs pod access */
    char *service_account; /* owned: spec.serviceAccountName or "default" (PATCH only) */
    char *tpu_resource;    /* owned: the TPU resource tpumesh-init requests, or NULL */
    long long tpu_count;   /* its count, 0 when none */
    size_t mounted;        /* regular containers that got the mounts */
};

/* Decide about review r with config c (both borrowed). out_decision is
 * always written on success; free with mesh_inject_decision_cleanup.
 * A denial is a decision, not an error; errors (-MESH_E_TOOBIG when the
 * patch would be absurdly large) are internal failures. */
int mesh_inject_decide(const struct mesh_inject_config *c, const struct mesh_inject_review *r,
                       struct mesh_inject_decision *out_decision, struct mesh_err *err);
void mesh_inject_decision_cleanup(struct mesh_inject_decision *d);

/* The AdmissionReview response for uid (borrowed) and decision d: uid,
 * allowed, patchType JSONPatch and base64 patch (PATCH), status {code 403,
 * message} (DENY), warnings (nwarn strings, borrowed; may be 0). Returns the
 * JSON text (owned, NUL-terminated, mesh_free) with its length in out_len,
 * or NULL with err set. */
char *mesh_inject_response(const char *uid, const struct mesh_inject_decision *d,
                           const char *const *warnings, size_t nwarn, size_t *out_len,
                           struct mesh_err *err);

#endif
