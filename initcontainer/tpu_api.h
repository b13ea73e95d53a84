/*
 * tpu_api.h - the Cloud TPU REST API client of tpumesh-init (libcurl + cJSON):
 * GET {endpoint}/v1/projects/{p}/locations/{z}/nodes/{name} with the metadata
 * server's access token, and a wait until the node is READY and HEALTHY.
 *
 * Facts: TensorFlow uses API version v1; a node must have state READY (else `TPU "<n>" is not yet
 * ready; state: "<s>"`); the TF1 resolver also required health HEALTHY when
 * the key is present (`TPU "<n>" is unhealthy: "<h>"`); endpoints come from
 * networkEndpoints[].ipAddress/port, else the deprecated top-level
 * ipAddress/port; lookup failures are wrapped as `Could not lookup TPU
 * metadata from name '<n>'. ...`. TERMINATED and PREEMPTED never recover.
 */
#ifndef MESH_TPU_API_H
#define MESH_TPU_API_H

#include <stddef.h>

#include "core/err.h"
#include "core/tpuenv.h"

/* Largest API / discovery reply accepted (bytes). */
#define MESH_TPU_API_MAX_REPLY (1024 * 1024)
#define MESH_TPU_API_DEFAULT_ENDPOINT "https://tpu.googleapis.com"

/* Where and how to call. All strings borrowed. */
struct mesh_tpu_api {
    const char *endpoint; /* scheme://host[:port][/path], no trailing '/' needed */
    const char *project;
    const char *zone;
    const char *token;       /* OAuth access token (Bearer); NULL = none; never logged */
    int timeout_s;           /* how long mesh_tpu_api_wait_ready waits in total */
    long long deadline_ms;   /* CLOCK_MONOTONIC ms to stop at (shared by several nodes);
                                0 = timeout_s from the call */
    long request_timeout_ms; /* per request; 0 = 10000 (wait_ready clamps it to the deadline) */
    long poll_initial_ms;    /* first pause between polls; 0 = 250, doubling up to 10 s */
};

/* A node as far as tpumesh cares. */
struct mesh_tpu_api_node {
    char state[32];                         /* "READY", "CREATING", ... ("" when absent) */
    char health[32];                        /* "HEALTHY", "UNHEALTHY", ... ("" when absent) */
    char accelerator_type[32];              /* "v3-8" ("" when absent) */
    char tensorflow_version[64];            /* "2.12.0" ("" when absent) */
    struct mesh_tpuenv_endpoint *endpoints; /* owned, task order */
    size_t nendpoints;
};

/* The API endpoint: flag (borrowed, may be NULL) if set; else the discovery
 * document named by discovery_url (TPU_API_DISCOVERY_URL: must contain {api}
 * and {apiVersion}, replaced by "tpu" and "v1"; its rootUrl + servicePath);
 * else MESH_TPU_API_DEFAULT_ENDPOINT. *out_endpoint owned by caller, without a
 * trailing '/'. Errors: -MESH_E_CONFIG (bad URL/template), -MESH_E_API
 * (discovery unreachable or malformed). */
int mesh_tpu_api_endpoint(const char *flag, const char *discovery_url, char **out_endpoint,
                          struct mesh_err *err);

/* Parse a node resource (JSON, buf[0..len), at most MESH_TPU_API_MAX_REPLY).
 * Endpoint IPs must be IPv4/IPv6 literals or host names and ports 1-65535
 * (missing port = 8470). On success out_node is filled (free with
 * mesh_tpu_api_node_cleanup). Errors: -MESH_E_PARSE naming the bad field. */
int mesh_tpu_api_parse_node(const char *buf, size_t len, struct mesh_tpu_api_node *out_node,
                            struct mesh_err *err);
void mesh_tpu_api_node_cleanup(struct mesh_tpu_api_node *node);

/* Poll the node until state READY and (when reported) health HEALTHY, with
 * exponential backoff and an info log line per poll showing state and
 * health, until api->deadline_ms (or api->timeout_s from now). Fails at once on 404
 * (-MESH_E_NOTFOUND), 401/403 (-MESH_E_AUTH), malformed replies (-MESH_E_API), TERMINATED or
 * PREEMPTED (-MESH_E_NOTREADY) and READY without endpoints (-MESH_E_API);
 * at the deadline returns -MESH_E_TIMEOUT saying what it saw last (or
 * -MESH_E_API if the last attempt was a transport error / 5xx). On success
 * out_node is filled (mesh_tpu_api_node_cleanup). */
int mesh_tpu_api_wait_ready(const struct mesh_tpu_api *api, const char *name,
                            struct mesh_tpu_api_node *out_node, struct mesh_err *err);

#endif
