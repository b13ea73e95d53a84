/*
 * access.c - does the pod's service account have what tpumesh-sidecar needs
 * (get, list and watch on pods in its namespace)? Asked with
 * SubjectAccessReviews (authorization.k8s.io/v1; the injector needs only
 * `create` on subjectaccessreviews), one per verb, for the user
 * system:serviceaccount:<ns>:<sa> with the groups the API server gives
 * service accounts. Answers are cached per namespace/account for a minute,
 * so a 4,096-pod job costs three reviews, not 12,288.
 *
 * The check runs on the server thread and blocks it for the API's round
 * trip (a cache miss only, at most a second per request); a failed check is
 * logged once, cached like an answer (no warning) and never blocks
 * admission: the warning is advice, the decision is the pod's.
 */
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "injector.h"
#include "io/k8s_client.h"
#include "io/log.h"

#define MOD "access"
#define CACHE_MAX 256
#define TTL_MS 60000
#define SAR_PATH "/apis/authorization.k8s.io/v1/subjectaccessreviews"

struct entry {
    char *key;     /* "<ns>/<sa>" (owned) */
    char *warning; /* owned, NULL = allowed */
    int64_t at_ms; /* when it was asked */
};

struct mesh_injector_access {
    struct mesh_k8s_client *client;
    struct entry cache[CACHE_MAX];
    size_t next;  /* round-robin slot for a new entry */
    bool failing; /* the last check failed (log the next failure once more only after a success) */
};

struct mesh_injector_access *mesh_injector_access_new(const struct mesh_injector_opts *o)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (o->apiserver == NULL && (host == NULL || *host == '\0')) {
        mesh_info(MOD, "not in a cluster and no --apiserver: the service-account check "
                       "(get/list/watch pods) is skipped");
        return NULL;
    }
    struct mesh_k8s_client_opts co = {
        .apiserver = o->apiserver,
        .token_file = o->token_file,
        .ca_file = o->ca_file,
        .connect_timeout_ms = 1000,
        .request_timeout_ms = 1000,
        .user_agent = "tpumesh-injector/" MESH_VERSION,
    };
    struct mesh_err err = {0};
    struct mesh_k8s_client *c = mesh_k8s_client_new(&co, &err);
    if (c == NULL) {
        mesh_warn(MOD, "no API access (%s): the service-account check is skipped", err.msg);
        return NULL;
    }
    struct mesh_injector_access *a = mesh_calloc(1, sizeof(*a));
    a->client = c;
    mesh_info(MOD, "service-account check through %s (%s)", mesh_k8s_client_server(c),
              mesh_k8s_client_source(c));
    return a;
}

void mesh_injector_access_free(struct mesh_injector_access *a)
{
    if (a == NULL) {
        return;
    }
    for (size_t i = 0; i < CACHE_MAX; i++) {
        mesh_free(a->cache[i].key);
        mesh_free(a->cache[i].warning);
    }
    mesh_k8s_client_free(a->client);
    mesh_free(a);
}

/* One SubjectAccessReview: 1 allowed, 0 not, <0 the check failed. */
static int allowed(struct mesh_injector_access *a, const char *ns, const char *sa, const char *verb,
                   struct mesh_err *err)
{
    mesh_autocjson cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "apiVersion", "authorization.k8s.io/v1");
    cJSON_AddStringToObject(body, "kind", "SubjectAccessReview");
    cJSON *spec = cJSON_AddObjectToObject(body, "spec");
    mesh_autofree char *user = mesh_asprintf("system:serviceaccount:%s:%s", ns, sa);
    mesh_autofree char *group = mesh_asprintf("system:serviceaccounts:%s", ns);
    cJSON_AddStringToObject(spec, "user", user);
    cJSON *groups = cJSON_AddArrayToObject(spec, "groups");
    cJSON_AddItemToArray(groups, cJSON_CreateString("system:serviceaccounts"));
    cJSON_AddItemToArray(groups, cJSON_CreateString(group));
    cJSON_AddItemToArray(groups, cJSON_CreateString("system:authenticated"));
    cJSON *ra = cJSON_AddObjectToObject(spec, "resourceAttributes");
    cJSON_AddStringToObject(ra, "namespace", ns);
    cJSON_AddStringToObject(ra, "verb", verb);
    cJSON_AddStringToObject(ra, "group", "");
    cJSON_AddStringToObject(ra, "resource", "pods");
    char *text = cJSON_PrintUnformatted(body);
    cJSON *reply = NULL;
    int rc = mesh_k8s_client_create(a->client, SAR_PATH, text, &reply, err);
    cJSON_free(text);
    if (rc < 0) {
        return rc;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(reply, "status");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(st, "allowed");
    int out = cJSON_IsTrue(al) ? 1 : 0;
    if (!cJSON_IsBool(al)) {
        out = mesh_err_set(err, MESH_E_PARSE, 0, "SubjectAccessReview reply has no status.allowed");
    }
    cJSON_Delete(reply);
    return out;
}

char *mesh_injector_access_check(struct mesh_injector_access *a, const char *ns, const char *sa,
                                 int64_t now_ms)
{
    if (a == NULL) {
        return NULL;
    }
    mesh_autofree char *key = mesh_asprintf("%s/%s", ns, sa);
    for (size_t i = 0; i < CACHE_MAX; i++) {
        struct entry *e = &a->cache[i];
        if (e->key != NULL && strcmp(e->key, key) == 0 && now_ms - e->at_ms < TTL_MS) {
            return e->warning ? mesh_strdup(e->warning) : NULL;
        }
    }
    static const char *const verbs[] = {"get", "list", "watch"};
    char missing[32] = "";
    bool failed = false;
    for (size_t i = 0; i < 3 && !failed; i++) {
        struct mesh_err err = {0};
        int rc = allowed(a, ns, sa, verbs[i], &err);
        if (rc < 0) {
            if (!a->failing) {
                mesh_warn(MOD,
                          "cannot check %s's access to pods: %s; grant the injector create on "
                          "subjectaccessreviews (the chart's ClusterRole does)",
                          key, err.msg);
            }
            failed = true;
            /* Remember the failure like an answer: while the API is slow or refuses, one
             * review per account and minute waits for it, not every review (the API
             * server's webhook timeout would fail them all). */
            missing[0] = '\0';
            continue;
        }
        if (rc == 0) {
            size_t n = strlen(missing);
            snprintf(missing + n, sizeof(missing) - n, "%s%s", n ? "," : "", verbs[i]);
        }
    }
    char *warning = NULL;
    if (missing[0] != '\0') {
        warning = mesh_asprintf(
            "tpumesh: service account %s/%s cannot %s pods, which tpumesh-sidecar needs: kubectl "
            "-n %s create role tpumesh-pods --verb=get,list,watch --resource=pods; kubectl -n %s "
            "create rolebinding tpumesh-pods --role=tpumesh-pods --serviceaccount=%s:%s",
            ns, sa, missing, ns, ns, ns, sa);
    }
    /* Replace an expired entry of the same key, else the next slot. */
    struct entry *slot = NULL;
    for (size_t i = 0; i < CACHE_MAX && slot == NULL; i++) {
        if (a->cache[i].key != NULL && strcmp(a->cache[i].key, key) == 0) {
            slot = &a->cache[i];
        }
    }
    if (slot == NULL) {
        slot = &a->cache[a->next];
        a->next = (a->next + 1) % CACHE_MAX;
    }
    mesh_free(slot->key);
    mesh_free(slot->warning);
    slot->key = MESH_STEAL(key);
    slot->warning = warning ? mesh_strdup(warning) : NULL;
    slot->at_ms = now_ms;
    a->failing = failed;
    return warning;
}
