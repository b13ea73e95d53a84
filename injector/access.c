/*
 * access.c - does the pod's service account have what tpumesh-sidecar needs
 * (get, list and watch on pods in its namespace)? Asked with
 * SubjectAccessReviews (authorization.k8s.io/v1; the injector needs only
 * `create` on subjectaccessreviews), one per verb, for the user
 * system:serviceaccount:<ns>:<sa> with the groups the API server gives
 * service accounts.
 *
 * The reviews run on a thread of their own, never on the admission thread:
 * mesh_injector_access_lookup answers from the cache or starts a check and
 * returns at once; the server parks the review and answers it when the
 * check is done (the notify callback wakes it) or when
 * --access-check-timeout has passed, then with a warning that the
 * permission could not be verified and how to check it. Answers are cached
 * per namespace/account for a minute (a 4,096-pod job costs three reviews,
 * not 12,288); an expired answer is still used while it is asked again in
 * the background, so only an account's first pod can wait. A check that
 * failed (API unreachable, slow, 403) is retried after ten seconds, and
 * until then its pods get the "could not be verified" warning at once. A
 * failure is logged once until a check succeeds again. The warning is
 * advice; the decision is the pod's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "injector.h"
#include "io/k8s_client.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "access"
#define CACHE_MAX 256
#define TTL_MS 60000        /* an answer is fresh this long */
#define RETRY_MS 10000      /* a failed check is asked again after this */
#define SAR_TIMEOUT_MS 2000 /* one SubjectAccessReview round trip, at most */
#define SAR_PATH "/apis/authorization.k8s.io/v1/subjectaccessreviews"

enum state {
    ST_EMPTY,
    ST_PENDING,  /* asked, never answered */
    ST_ANSWERED, /* warning (NULL = allowed) */
    ST_FAILED,   /* the check failed: reason */
};

struct entry {
    char *key; /* "<ns>/<sa>" (owned) */
    char *ns, *sa;
    enum state state;
    bool queued;   /* waiting for (or in) the worker */
    char *warning; /* owned, ST_ANSWERED: NULL = allowed */
    char *reason;  /* owned, ST_FAILED: why the check failed */
    int64_t at_ms; /* when the answer or failure came */
    uint64_t used; /* last lookup (LRU eviction) */
};

struct mesh_injector_access {
    struct mesh_k8s_client *client; /* the worker's only */
    int timeout_ms;                 /* --access-check-timeout */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work for the worker, or stop */
    bool stop;
    bool failing; /* the last check failed (log the next failure only after a success) */
    uint64_t clock;
    struct entry cache[CACHE_MAX];
    void (*notify)(void *);
    void *notify_arg;
};

/* One SubjectAccessReview: 1 allowed, 0 not, <0 the check failed. */
static int allowed(struct mesh_k8s_client *c, const char *ns, const char *sa, const char *verb,
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
    int rc = mesh_k8s_client_create(c, SAR_PATH, text, &reply, err);
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

/* The three reviews for one account (worker thread, no lock held). Returns
 * 0 with *out_warning (NULL = allowed) or <0 with err set. */
static int ask(struct mesh_k8s_client *c, const char *ns, const char *sa, char **out_warning,
               struct mesh_err *err)
{
    static const char *const verbs[] = {"get", "list", "watch"};
    char missing[32] = "";
    for (size_t i = 0; i < 3; i++) {
        int rc = allowed(c, ns, sa, verbs[i], err);
        if (rc < 0) {
            return rc;
        }
        if (rc == 0) {
            size_t n = strlen(missing);
            snprintf(missing + n, sizeof(missing) - n, "%s%s", n ? "," : "", verbs[i]);
        }
    }
    *out_warning = NULL;
    if (missing[0] != '\0') {
        *out_warning = mesh_asprintf(
            "tpumesh: service account %s/%s cannot %s pods, which tpumesh-sidecar needs: kubectl "
            "-n %s create role tpumesh-pods --verb=get,list,watch --resource=pods; kubectl -n %s "
            "create rolebinding tpumesh-pods --role=tpumesh-pods --serviceaccount=%s:%s",
            ns, sa, missing, ns, ns, ns, sa);
    }
    return 0;
}

static struct entry *next_queued(struct mesh_injector_access *a)
{
    struct entry *best = NULL;
    for (size_t i = 0; i < CACHE_MAX; i++) {
        struct entry *e = &a->cache[i];
        /* The oldest request first (a never-answered account before a refresh). */
        if (e->state != ST_EMPTY && e->queued && (best == NULL || e->used < best->used)) {
            best = e;
        }
    }
    return best;
}

static void *worker(void *arg)
{
    struct mesh_injector_access *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        struct entry *e = NULL;
        while (!a->stop && (e = next_queued(a)) == NULL) {
            pthread_cond_wait(&a->cv, &a->mu);
        }
        if (a->stop) {
            break;
        }
        /* The entry stays in the cache while asked (a queued entry is never evicted). */
        mesh_autofree char *ns = mesh_strdup(e->ns);
        mesh_autofree char *sa = mesh_strdup(e->sa);
        pthread_mutex_unlock(&a->mu);
        char *warning = NULL;
        struct mesh_err err = {0};
        int rc = ask(a->client, ns, sa, &warning, &err);
        pthread_mutex_lock(&a->mu);
        e->queued = false;
        e->at_ms = mesh_sys_now_ms();
        mesh_free(e->warning);
        mesh_free(e->reason);
        e->warning = e->reason = NULL;
        if (rc < 0) {
            if (!a->failing) {
                mesh_warn(MOD,
                          "cannot check %s/%s's access to pods: %s; grant the injector create on "
                          "subjectaccessreviews (the chart's ClusterRole does) and check that "
                          "the API server answers",
                          ns, sa, err.msg);
            }
            a->failing = true;
            e->state = ST_FAILED;
            e->reason = mesh_strdup(err.msg);
        } else {
            if (a->failing) {
                mesh_info(MOD, "service-account checks work again (%s/%s)", ns, sa);
            }
            a->failing = false;
            e->state = ST_ANSWERED;
            e->warning = warning;
        }
        /* Under the lock: mesh_injector_access_set_notify(NULL) returns only after it. */
        if (a->notify != NULL) {
            a->notify(a->notify_arg);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

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
        .connect_timeout_ms = SAR_TIMEOUT_MS / 2,
        .request_timeout_ms = SAR_TIMEOUT_MS,
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
    a->timeout_ms = o->access_timeout_ms;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, worker, a) != 0) {
        mesh_warn(MOD, "cannot start the service-account check's thread: the check is skipped");
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
        mesh_k8s_client_free(c);
        mesh_free(a);
        return NULL;
    }
    mesh_info(MOD, "service-account check through %s (%s); a review waits for it at most %d ms",
              mesh_k8s_client_server(c), mesh_k8s_client_source(c), a->timeout_ms);
    return a;
}

void mesh_injector_access_set_notify(struct mesh_injector_access *a, void (*fn)(void *), void *arg)
{
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->mu);
    a->notify = fn;
    a->notify_arg = arg;
    pthread_mutex_unlock(&a->mu);
}

int mesh_injector_access_timeout_ms(const struct mesh_injector_access *a)
{
    return a ? a->timeout_ms : 0;
}

void mesh_injector_access_free(struct mesh_injector_access *a)
{
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    for (size_t i = 0; i < CACHE_MAX; i++) {
        struct entry *e = &a->cache[i];
        mesh_free(e->key);
        mesh_free(e->ns);
        mesh_free(e->sa);
        mesh_free(e->warning);
        mesh_free(e->reason);
    }
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    mesh_k8s_client_free(a->client);
    mesh_free(a);
}

/* A slot for a new key: an empty one, else the least recently used one that
 * the worker is not asking about; NULL when all are queued. */
static struct entry *slot_for(struct mesh_injector_access *a)
{
    struct entry *lru = NULL;
    for (size_t i = 0; i < CACHE_MAX; i++) {
        struct entry *e = &a->cache[i];
        if (e->state == ST_EMPTY) {
            return e;
        }
        if (!e->queued && (lru == NULL || e->used < lru->used)) {
            lru = e;
        }
    }
    return lru;
}

static char *unverified(const char *ns, const char *sa, const char *why)
{
    return mesh_asprintf("tpumesh: could not verify that service account %s/%s may get, list and "
                         "watch pods, which tpumesh-sidecar needs (%.100s); check: kubectl auth "
                         "can-i watch pods -n %s --as=system:serviceaccount:%s:%s",
                         ns, sa, why, ns, ns, sa);
}

int mesh_injector_access_lookup(struct mesh_injector_access *a, const char *ns, const char *sa,
                                char **out_warning)
{
    *out_warning = NULL;
    if (a == NULL) {
        return MESH_ACCESS_KNOWN;
    }
    mesh_autofree char *key = mesh_asprintf("%s/%s", ns, sa);
    int64_t now = mesh_sys_now_ms();
    pthread_mutex_lock(&a->mu);
    struct entry *e = NULL;
    for (size_t i = 0; i < CACHE_MAX && e == NULL; i++) {
        if (a->cache[i].state != ST_EMPTY && strcmp(a->cache[i].key, key) == 0) {
            e = &a->cache[i];
        }
    }
    int rc = MESH_ACCESS_KNOWN;
    if (e == NULL) {
        e = slot_for(a);
        if (e == NULL) {
            /* Every slot is being asked about: do not wait for a queue this long. */
            pthread_mutex_unlock(&a->mu);
            *out_warning = unverified(ns, sa, "too many accounts are being checked at once");
            return MESH_ACCESS_KNOWN;
        }
        mesh_free(e->key);
        mesh_free(e->ns);
        mesh_free(e->sa);
        mesh_free(e->warning);
        mesh_free(e->reason);
        memset(e, 0, sizeof(*e));
        e->key = MESH_STEAL(key);
        e->ns = mesh_strdup(ns);
        e->sa = mesh_strdup(sa);
        e->state = ST_PENDING;
        e->queued = true;
        pthread_cond_signal(&a->cv);
    } else if (!e->queued && ((e->state == ST_ANSWERED && now - e->at_ms >= TTL_MS) ||
                              (e->state == ST_FAILED && now - e->at_ms >= RETRY_MS))) {
        /* Ask again in the background; until then the last answer stands. */
        e->queued = true;
        pthread_cond_signal(&a->cv);
    }
    e->used = ++a->clock;
    if (e->state == ST_PENDING) {
        rc = MESH_ACCESS_PENDING;
    } else if (e->state == ST_ANSWERED) {
        *out_warning = e->warning ? mesh_strdup(e->warning) : NULL;
    } else {
        mesh_autofree char *why = mesh_asprintf("the check failed: %s", e->reason);
        *out_warning = unverified(ns, sa, why);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

char *mesh_injector_access_unverified(struct mesh_injector_access *a, const char *ns,
                                      const char *sa)
{
    char why[96];
    snprintf(why, sizeof(why), "the API server did not answer the SubjectAccessReview within %d ms",
             a ? a->timeout_ms : 0);
    return unverified(ns, sa, why);
}
