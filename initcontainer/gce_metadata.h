/*
 * gce_metadata.h - a small GCE metadata server client (libcurl), used by
 * tpumesh-init only when needed: for the Cloud TPU API path (project, zone,
 * access token) and for TPU VM attributes when the environment lacks them.
 *
 * Facts: base URL http://<host>/computeMetadata/v1/<path>; host from the caller's override
 * (--metadata-host), else GCE_METADATA_HOST, else GCE_METADATA_IP, else
 * metadata.google.internal; request header `Metadata-Flavor: Google` and the
 * same header is required on the response (a captive proxy or a wrong host
 * does not send it). Short per-attempt timeouts with a few retries (JAX's
 * reader retries 6 times 0.5 s apart; we default to 3 attempts).
 */
#ifndef MESH_GCE_METADATA_H
#define MESH_GCE_METADATA_H

#include <curl/curl.h>
#include <stddef.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/model.h"
#include "core/tpuenv.h"

/* Largest metadata value accepted (bytes). */
#define MESH_GCE_METADATA_MAX (256 * 1024)

struct mesh_gce_metadata {
    char *base;          /* "http://host/computeMetadata/v1/", owned */
    long timeout_ms;     /* per attempt (connect + transfer), default 2000 */
    int attempts;        /* tries per value on connection errors and 5xx, default 3 */
    long retry_delay_ms; /* pause between tries, default 300 */
};

/* One GET on c for tpumesh-init's Google clients (this module and the Cloud
 * TPU API, tpu_api.c): headers hdrs (borrowed), the reply into body (whose
 * limit aborts the transfer: CURLE_WRITE_ERROR), timeout_ms to connect and to
 * finish, only the protocols in protocols ("http", "http,https"). Options
 * set on c before the call stay. Returns curl's result. */
CURLcode mesh_gce_metadata_http_get(CURL *c, const char *url, struct curl_slist *hdrs,
                                    long timeout_ms, const char *protocols, struct mesh_buf *body);

/* Initialise md for host (borrowed; NULL = the environment / default, see
 * above). host is "name", "ip" or "name:port". Returns 0 or -MESH_E_CONFIG
 * when the host text is not a plain host[:port]. Free with
 * mesh_gce_metadata_cleanup. */
int mesh_gce_metadata_init(struct mesh_gce_metadata *md, const char *host, struct mesh_err *err);
/* Release what md owns. md may be zeroed or NULL. */
void mesh_gce_metadata_cleanup(struct mesh_gce_metadata *md);

/* GET <base><path>. On success *out_value (owned by caller, mesh_free; NUL
 * terminated) holds the body. Errors: -MESH_E_NOTFOUND (404), -MESH_E_API
 * (unreachable after the retries, other status, missing Metadata-Flavor
 * response header), -MESH_E_TOOBIG (body above MESH_GCE_METADATA_MAX).
 * Messages name the URL, never a token. */
int mesh_gce_metadata_get(const struct mesh_gce_metadata *md, const char *path, char **out_value,
                          struct mesh_err *err);

/* project/project-id. *out_value owned by caller. Errors as mesh_gce_metadata_get. */
int mesh_gce_metadata_project(const struct mesh_gce_metadata *md, char **out_value,
                              struct mesh_err *err);
/* instance/zone reduced to its last path segment ("projects/1/zones/us-central2-b"
 * -> "us-central2-b"). *out_value owned by caller. */
int mesh_gce_metadata_zone(const struct mesh_gce_metadata *md, char **out_value,
                           struct mesh_err *err);
/* The access_token of instance/service-accounts/default/token (JSON). *out_value
 * owned by caller; never log it. -MESH_E_AUTH when the reply has no token. */
int mesh_gce_metadata_token(const struct mesh_gce_metadata *md, char **out_value,
                            struct mesh_err *err);

/* TPU VM attributes (instance/attributes/<key>). Each member is
 * owned by the struct; a member that the server does not have (404) stays
 * NULL / empty. */
struct mesh_gce_tpu_vm {
    char *accelerator_type;      /* accelerator-type */
    struct mesh_annotations env; /* tpu-env, parsed */
    struct mesh_worker *workers; /* worker-network-endpoints field [2] per entry; one
                                    block with its strings (model.h) */
    size_t nworkers;
    int worker_number; /* agent-worker-number, -1 when absent */
};

/* Fetch and parse all four attributes. Errors: -MESH_E_NOTFOUND when none of
 * them exists (not a TPU VM), -MESH_E_API / -MESH_E_PARSE (a malformed
 * tpu-env or endpoint list, naming the attribute). out_vm is filled only on
 * success; free it with mesh_gce_metadata_tpu_vm_cleanup. */
int mesh_gce_metadata_tpu_vm(const struct mesh_gce_metadata *md, size_t max_workers,
                             struct mesh_gce_tpu_vm *out_vm, struct mesh_err *err);
void mesh_gce_metadata_tpu_vm_cleanup(struct mesh_gce_tpu_vm *vm);

#endif
