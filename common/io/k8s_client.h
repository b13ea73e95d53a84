/*
 * k8s_client.h - Kubernetes API client over libcurl: configuration
 * (flags, in-cluster, kubeconfig), authentication (bearer token, token
 * file with reload, exec credential plugin, client certificates), and the
 * three calls tpumesh needs: GET one object, LIST one page, WATCH.
 *
 * Configuration order (issue 3):
 *   1. opts.apiserver (--apiserver) with opts.token_file / opts.ca_file;
 *   2. in-cluster: KUBERNETES_SERVICE_HOST + KUBERNETES_SERVICE_PORT set
 *      -> https://host:port, token/ca.crt/namespace from opts.sa_dir
 *      (default /var/run/secrets/kubernetes.io/serviceaccount);
 *   3. kubeconfig: opts.kubeconfig, else the FIRST path of $KUBECONFIG
 *      (a colon list is not merged), else ~/.kube/config if it exists
 *      (see kubeconfig.h). An explicit opts.kubeconfig wins over the
 *      in-cluster variables ($KUBECONFIG does not).
 * TLS verification is always on unless a kubeconfig cluster says
 * insecure-skip-tls-verify: true (or opts.insecure_skip_tls_verify).
 *
 * Tokens: a token file is re-read when older than
 * opts.token_reload_s (default 60 s) and immediately after a 401, and the
 * request is retried once. An exec plugin's token is cached until its
 * expirationTimestamp (minus 10 s) and re-run after a 401. Tokens and the
 * Authorization header are never logged; curl verbose is never enabled.
 *
 * Threads: a client is used by ONE thread at a time (it owns curl
 * handles and the token cache). mesh_k8s_client_cancel() is the only call
 * that may come from another thread. Creating a client does no network
 * I/O, so give each thread its own (the informer borrows one for its
 * thread; the sidecar's main thread can GET its own pod with another).
 * curl_global_init is done once, thread-safely, by mesh_k8s_client_new.
 */
#ifndef MESH_K8S_CLIENT_H
#define MESH_K8S_CLIENT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "core/k8s_watch.h"

#define MESH_K8S_SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"

/* Options; every pointer borrowed for the call, NULL = not given. */
struct mesh_k8s_client_opts {
    const char *apiserver;         /* --apiserver URL (http:// or https://) */
    const char *token_file;        /* --token-file (used with apiserver) */
    const char *ca_file;           /* --ca-file (used with apiserver) */
    const char *kubeconfig;        /* --kubeconfig; NULL = $KUBECONFIG, then ~/.kube/config */
    const char *context;           /* kubeconfig context; NULL = current-context */
    const char *sa_dir;            /* service-account directory; NULL = MESH_K8S_SA_DIR_DEFAULT
                                      (also read from $TPUMESH_SA_DIR, for tests) */
    bool insecure_skip_tls_verify; /* only for tests; never the default */
    long connect_timeout_ms;       /* 0 = 10000 */
    long request_timeout_ms;       /* GET/LIST total time, 0 = 60000 (apiserver's own limit) */
    int token_reload_s;            /* 0 = 60 */
    const char *user_agent;        /* NULL = "tpumesh/<version>" */
};

struct mesh_k8s_client;

/* Resolve the configuration and build a client (no network I/O; a token
 * file or exec plugin is first used on the first request). Errors:
 * -MESH_E_CONFIG naming the file, the key and what to do (no source at
 * all, unreadable CA, bad kubeconfig, ...). Returns an owned client
 * (mesh_k8s_client_free) or NULL. */
struct mesh_k8s_client *mesh_k8s_client_new(const struct mesh_k8s_client_opts *opts,
                                            struct mesh_err *err);
/* Free a client; NULL does nothing. */
void mesh_k8s_client_free(struct mesh_k8s_client *c);

/* Base URL ("https://10.0.0.1:443"), borrowed, valid for the client's life. */
const char *mesh_k8s_client_server(const struct mesh_k8s_client *c);
/* Default namespace: in-cluster namespace file ($POD_NAMESPACE first), or the
 * kubeconfig context's namespace, else "default". Borrowed. */
const char *mesh_k8s_client_namespace(const struct mesh_k8s_client *c);
/* Where the configuration came from, for one log line at start-up, e.g.
 * "flags", "in-cluster", "kubeconfig /root/.kube/config context gke_x".
 * Never contains secrets. Borrowed. */
const char *mesh_k8s_client_source(const struct mesh_k8s_client *c);

/* Make every blocking call of c return promptly (curl_multi_wakeup), now
 * and later, with -MESH_E_IO "cancelled". A credential plugin that is
 * running is not interrupted (it is bounded to 30 s). Thread-safe (may be
 * called from any thread, not from a signal handler). */
void mesh_k8s_client_cancel(struct mesh_k8s_client *c);

/* HTTP status of the last response (0 = no response: connection failed)
 * and its Retry-After in seconds (0 = none; clamped to 60). */
long mesh_k8s_client_last_status(const struct mesh_k8s_client *c);
long mesh_k8s_client_retry_after(const struct mesh_k8s_client *c);

/* Why the last GET / LIST / WATCH failed, as a short label for metrics
 * (borrowed, valid until the next call on c):
 *   ""          it did not fail, it was cancelled, or a callback's own
 *               code ended it (the caller knows why)
 *   "401", ...  the HTTP status of a non-2xx answer (after the 401 retry)
 *   "connect"   no response at all: refused, reset, DNS, connect timeout
 *   "tls"       TLS handshake or certificate verification failed
 *   "timeout"   the request deadline passed, or a watch stalled
 *   "protocol"  the response broke off after its status line (connection
 *               cut in the middle of a body or an event)
 *   "oversized" a body, list item or event over its limit
 *   "malformed" a 2xx body, list item or event that is not what the API
 *               documents
 *   "auth"      no usable credentials before any request (token file,
 *               credential plugin) */
const char *mesh_k8s_client_last_error(const struct mesh_k8s_client *c);

/* Which objects: /api/v1/namespaces/{ns}/{resource} (core group), or
 * /apis/{group_version}/namespaces/{ns}/{resource}; all namespaces when ns
 * is NULL or "". Strings borrowed; selectors NULL = none. */
struct mesh_k8s_query {
    const char *ns;
    const char *group_version;  /* "batch/v1", "apps/v1", ...; NULL = core "v1" */
    const char *resource;       /* NULL = "pods" */
    const char *label_selector; /* "app=x,tier!=db" */
    const char *field_selector; /* "status.phase=Running" */
};

/* Errors of GET/LIST/WATCH, after one retry with a fresh token on 401:
 *   -MESH_E_AUTH     401 (authentication: message names the credential to check)
 *   -MESH_E_FORBIDDEN 403 (authorization: message names the verb, the
 *                    resource and its API group the Role must grant)
 *   -MESH_E_NOTFOUND 404
 *   -MESH_E_GONE     410 (expired continue token or resourceVersion)
 *   -MESH_E_API      429/5xx/other status, connection or TLS failure
 *                    (see last_status / retry_after; TLS failures say
 *                    "TLS: certificate verify failed ..." and name the CA)
 *   -MESH_E_PARSE    a 2xx body that is not what the API documents
 *   -MESH_E_TOOBIG   a body over the limit
 *   -MESH_E_IO       cancelled */

/* GET one object: name in q->ns. *out_obj = owned parsed object
 * (cJSON_Delete) on success. */
int mesh_k8s_client_get(struct mesh_k8s_client *c, const struct mesh_k8s_query *q, const char *name,
                        cJSON **out_obj, struct mesh_err *err);

/* POST body (a JSON object, borrowed) to path under the server's base URL
 * ("/api/v1/namespaces/NS/pods?dryRun=All", tpumesh-injector --check-namespace) to create an
 * object. *out_obj = the owned reply (cJSON_Delete) on 200/201. Errors as
 * above (403 says what was refused). */
int mesh_k8s_client_create(struct mesh_k8s_client *c, const char *path, const char *body,
                           cJSON **out_obj, struct mesh_err *err);

/* LIST one page, streamed: every element of the page's "items" goes to fn
 * as its parsed tree (mesh_k8s_list_item_fn, borrowed for the call) while
 * the body arrives, so memory holds one item, not the page. limit 0
 * = no limit; cont = continue token or NULL; rv = resourceVersion ("0" =
 * any, NULL = most recent), only sent when cont is NULL.
 * max_bytes bounds the page (0 = MESH_K8S_LIST_MAX_DEFAULT), max_item_bytes
 * one item (0 = MESH_K8S_EVENT_MAX_DEFAULT). On success *out_meta is
 * filled (kind, resourceVersion, continue, remainingItemCount, items
 * count, recv_us = when the last byte was read; release with
 * mesh_k8s_list_meta_cleanup). On failure items may already have been
 * handed to fn: the caller must drop what it collected from this page.
 * Errors as above; a cut in the middle of the body is -MESH_E_API
 * (last_error "protocol"); a malformed page -MESH_E_PARSE naming the byte
 * offset; fn's negative code stops the transfer and is returned. */
int mesh_k8s_client_list(struct mesh_k8s_client *c, const struct mesh_k8s_query *q, long limit,
                         const char *cont, const char *rv, size_t max_bytes, size_t max_item_bytes,
                         mesh_k8s_list_item_fn fn, void *ctx, struct mesh_k8s_list_meta *out_meta,
                         struct mesh_err *err);

/* Called for every decoded event of a watch, in stream order. ev is
 * borrowed for the call (its tree is released afterwards); ev->recv_us is
 * the CLOCK_MONOTONIC microsecond at which the block of bytes that
 * completed the event was read. Return 0 to
 * go on, or a negative -MESH_E_* to end the watch with that code. */
typedef int (*mesh_k8s_event_fn)(void *ctx, const struct mesh_k8s_watch_event *ev,
                                 struct mesh_err *err);

struct mesh_k8s_watch_opts {
    const char *rv;         /* resourceVersion to start after (required) */
    long timeout_s;         /* timeoutSeconds sent to the server (0 = none) */
    long stall_ms;          /* no byte at all for this long -> dead (0 = off) */
    size_t max_event_bytes; /* bound of one event (0 = MESH_K8S_EVENT_MAX_DEFAULT) */
    bool bookmarks;         /* allowWatchBookmarks=true */
    /* Streaming list: sendInitialEvents=true&resourceVersionMatch=NotOlderThan;
     * rv "" or NULL = consistent read. The server replies with ADDED for every object,
     * then a BOOKMARK with initial_events_end, then live events. A server without the
     * WatchList feature answers HTTP 422 (-MESH_E_API, last_status 422). */
    bool send_initial_events;
    /* false (default): metadata.managedFields is cut out of each event's text before it
     * is parsed (mesh_k8s_watch_strip_managed_fields): ev->object lacks it, and a Pod
     * costs half as much to parse. true: events are parsed as sent. */
    bool keep_managed_fields;
    /* Optional: called after each block of bytes read from the connection that
     * completed at least one event, once fn has seen all of them (e.g. to wake a reader
     * once per batch instead of once per event). ctx is fn's. */
    void (*on_block)(void *ctx);
};

/* WATCH from wo->rv, framing events on newlines whatever the chunking
 * and calling fn for each. Blocks until the stream ends. Returns:
 *   0                the server ended the stream normally (timeoutSeconds,
 *                    EOF at an event boundary): re-watch from the last RV
 *   -MESH_E_API with mesh_k8s_client_last_status() == 200: the stream was
 *                    cut (connection lost, possibly in the middle of an
 *                    event; the partial event is dropped): re-watch from
 *                    the last RV, as client-go does on an unexpected EOF
 *   -MESH_E_TIMEOUT  stall: no byte for stall_ms
 *   -MESH_E_TOOBIG   one event exceeded max_event_bytes
 *   -MESH_E_PARSE    a malformed event line
 *   fn's code        (e.g. -MESH_E_GONE for an in-stream ERROR 410)
 *   the HTTP errors above for a non-200 start (HTTP 410 -> -MESH_E_GONE). */
int mesh_k8s_client_watch(struct mesh_k8s_client *c, const struct mesh_k8s_query *q,
                          const struct mesh_k8s_watch_opts *wo, mesh_k8s_event_fn fn, void *ctx,
                          struct mesh_err *err);

#endif
