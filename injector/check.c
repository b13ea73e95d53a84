/*
 * check.c - `tpumesh-injector --check-namespace NS`: is injection working
 * end to end? Creates a pod labelled tpumesh.dev/inject=true in NS as a dry
 * run (POST .../pods?dryRun=All: the API server runs the admission webhooks
 * and stores nothing) and checks that the pod it returns has the injected
 * init container, the sidecar (or, for the config's legacy shape, at least
 * tpumesh-init) and the mounts. The chart's `helm test` runs this; it needs
 * `create` on pods in NS and proves the API server, the webhook
 * configuration, its caBundle, the Service and the injector work together.
 */
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "injector.h"
#include "io/k8s_client.h"
#include "io/log.h"

#define MOD "check"

static cJSON *check_pod(const struct mesh_inject_config *cfg)
{
    cJSON *pod = cJSON_CreateObject();
    cJSON_AddStringToObject(pod, "apiVersion", "v1");
    cJSON_AddStringToObject(pod, "kind", "Pod");
    cJSON *md = cJSON_AddObjectToObject(pod, "metadata");
    cJSON_AddStringToObject(md, "generateName", "tpumesh-injection-check-");
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(labels, MESH_INJECT_LABEL, "true");
    cJSON *spec = cJSON_AddObjectToObject(pod, "spec");
    cJSON_AddStringToObject(spec, "restartPolicy", "Never");
    cJSON_AddFalseToObject(spec, "automountServiceAccountToken");
    cJSON *psc = cJSON_AddObjectToObject(spec, "securityContext");
    cJSON_AddTrueToObject(psc, "runAsNonRoot");
    cJSON_AddObjectToObject(psc, "seccompProfile");
    cJSON_AddStringToObject(cJSON_GetObjectItem(psc, "seccompProfile"), "type", "RuntimeDefault");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", "check");
    const char *image = mesh_json_str(cfg->sidecar, "image");
    cJSON_AddStringToObject(c, "image", image ? image : "tpumesh:" MESH_VERSION);
    cJSON *args = cJSON_AddArrayToObject(c, "args");
    cJSON_AddItemToArray(args, cJSON_CreateString("tpumesh-injector"));
    cJSON_AddItemToArray(args, cJSON_CreateString("--version"));
    /* The injected containers' securityContext satisfies the restricted profile; the
     * check container borrows it so that a namespace enforcing it admits the pod. */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(cfg->sidecar, "securityContext");
    if (sc != NULL) {
        cJSON_AddItemToObject(c, "securityContext", cJSON_Duplicate(sc, true));
    }
    cJSON *containers = cJSON_AddArrayToObject(spec, "containers");
    cJSON_AddItemToArray(containers, c);
    return pod;
}

static bool has_named(const cJSON *list, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, (cJSON_IsArray(list) ? list : NULL))
    {
        const char *n = mesh_json_str(e, "name");
        if (n != NULL && name != NULL && strcmp(n, name) == 0) {
            return true;
        }
    }
    return false;
}

int mesh_injector_check(const struct mesh_injector_opts *o, const struct mesh_inject_config *cfg)
{
    struct mesh_k8s_client_opts co = {
        .apiserver = o->apiserver,
        .token_file = o->token_file,
        .ca_file = o->ca_file,
        .user_agent = "tpumesh-injector/" MESH_VERSION,
    };
    struct mesh_err err = {0};
    struct mesh_k8s_client *client = mesh_k8s_client_new(&co, &err);
    if (client == NULL) {
        mesh_error(MOD, "no API access: %s", err.msg);
        return 2;
    }
    mesh_autocjson cJSON *pod = check_pod(cfg);
    char *body = cJSON_PrintUnformatted(pod);
    /* check_ns is a DNS label (opts.c), safe in a path as it is. */
    mesh_autofree char *path = mesh_asprintf("/api/v1/namespaces/%s/pods?dryRun=All", o->check_ns);
    cJSON *reply = NULL;
    int rc = mesh_k8s_client_create(client, path, body, &reply, &err);
    cJSON_free(body);
    mesh_k8s_client_free(client);
    if (rc < 0) {
        mesh_error(MOD,
                   "creating a labelled pod in %s (dry run) failed: %s; with failurePolicy Fail "
                   "this is what users see when the injector cannot be reached",
                   o->check_ns, err.msg);
        return 1;
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(reply, "spec");
    const cJSON *inits = cJSON_GetObjectItemCaseSensitive(spec, "initContainers");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(spec, "containers"), 0);
    const char *init = mesh_json_str(cfg->init, "name");
    const char *side = mesh_json_str(cfg->sidecar, "name");
    const char *mount = mesh_json_str(cJSON_GetArrayItem(cfg->mounts, 0), "name");
    bool ok =
        has_named(inits, init) && has_named(inits, side) &&
        (mount == NULL || has_named(cJSON_GetObjectItemCaseSensitive(c0, "volumeMounts"), mount));
    cJSON_Delete(reply);
    if (!ok) {
        mesh_error(MOD,
                   "a pod labelled " MESH_INJECT_LABEL "=true in %s was admitted without %s, %s "
                   "and the %s mount: is the MutatingWebhookConfiguration installed, and does its "
                   "namespaceSelector select %s?",
                   o->check_ns, init, side, mount ? mount : "volume", o->check_ns);
        return 1;
    }
    mesh_info(MOD, "injection works in namespace %s: a labelled pod gets %s, %s and the %s mount",
              o->check_ns, init, side, mount ? mount : "volume");
    return 0;
}
