/*
 * jobid.c - which job this pod belongs to, and whether another pod belongs
 * to the same one (docs/DESIGN.md §9, docs/scale.md "Trust").
 *
 * A job is identified by its top-level controller, read from
 * metadata.ownerReferences (the entry with controller: true), never from
 * labels, which any pod may carry:
 *   a pod of an Indexed Job or StatefulSet: that Job / StatefulSet (uid);
 *   a pod of a JobSet: its controller is one slice's Job, whose own
 *     controller is the JobSet; the job is the JobSet (uid), read with one
 *     GET of the own Job at start-up.
 * Another pod is of the same job when its controller has the own
 * controller's uid; in a JobSet, also when its controller is a Job whose
 * own controller is the same JobSet (one GET of that Job, remembered: a
 * JobSet has one Job per slice).
 */
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "io/k8s_client.h"
#include "io/log.h"
#include "sidecar.h"

#define MOD "sidecar"

/* The controller ownerReference of an object: kind, name, uid (borrowed
 * from obj) or false. */
static bool controller_of(const cJSON *obj, const char **kind, const char **name, const char **uid)
{
    const cJSON *owners = mesh_json_path(obj, "metadata.ownerReferences");
    const cJSON *o = NULL;
    if (!cJSON_IsArray(owners)) {
        return false;
    }
    cJSON_ArrayForEach(o, owners)
    {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller"))) {
            continue;
        }
        *kind = mesh_json_str(o, "kind");
        *name = mesh_json_str(o, "name");
        *uid = mesh_json_str(o, "uid");
        return *kind != NULL && *name != NULL && *uid != NULL;
    }
    return false;
}

/* GET Job `name` and check it is the Job with uid `uid` controlled by a
 * JobSet: *out_js_uid receives the JobSet's uid. 0, or a negative code
 * with why filled. */
static int job_parent(struct mesh_k8s_client *client, const char *ns, const char *name,
                      const char *uid, char *out_js_uid, size_t cap, char *why, size_t whycap)
{
    struct mesh_k8s_query q = {.ns = ns, .group_version = "batch/v1", .resource = "jobs"};
    mesh_autocjson cJSON *job = NULL;
    struct mesh_err e;
    mesh_err_clear(&e);
    int rc = mesh_k8s_client_get(client, &q, name, &job, &e);
    if (rc < 0) {
        snprintf(why, whycap, "GET Job %s: %s", name, e.msg);
        return rc;
    }
    const char *juid = mesh_json_str(mesh_json_path(job, "metadata"), "uid");
    const char *k = NULL, *n = NULL, *u = NULL;
    if (juid == NULL || strcmp(juid, uid) != 0) {
        snprintf(why, whycap, "Job %s has uid %.40s, the pod's owner reference says %.40s", name,
                 juid != NULL ? juid : "(none)", uid);
        return -MESH_E_INVAL;
    }
    if (!controller_of(job, &k, &n, &u) || strcmp(k, "JobSet") != 0 ||
        strlen(u) >= MESH_K8S_UID_MAX) {
        snprintf(why, whycap, "Job %s is not controlled by a JobSet", name);
        return -MESH_E_INVAL;
    }
    snprintf(out_js_uid, cap, "%s", u);
    return 0;
}

int mesh_sidecar_job_identify(struct mesh_sidecar *ctx, struct mesh_k8s_client *client)
{
    struct mesh_sidecar_job *j = &ctx->job;
    const struct mesh_k8s_pod *s = &ctx->self;
    pthread_mutex_init(&j->mu, NULL);
    j->inited = true;
    if (s->owner_uid[0] == '\0') {
        mesh_warn(MOD, "this pod has no controller owner: other pods cannot be checked to be of "
                       "the same job (no relay mode; peers are taken by the selector alone)");
        return 0;
    }
    snprintf(j->owner_uid, sizeof(j->owner_uid), "%s", s->owner_uid);
    if (strcmp(s->owner_kind, "Job") == 0 && s->jobset_name[0] != '\0') {
        char why[MESH_ERR_MSG_MAX];
        if (job_parent(client, ctx->ns, s->owner_name, s->owner_uid, j->jobset_uid,
                       sizeof(j->jobset_uid), why, sizeof(why)) < 0) {
            mesh_warn(MOD,
                      "cannot tell which JobSet this pod's Job belongs to (%s): only pods of "
                      "the same Job (slice) are taken as relays; other slices' pods are taken "
                      "as peers on their labels",
                      why);
        } else {
            mesh_info(MOD, "job identity: JobSet uid %s (via Job %s)", j->jobset_uid,
                      s->owner_name);
            struct mesh_err e;
            mesh_err_clear(&e);
            j->client = mesh_sidecar_client_new(&ctx->opts, &e);
            if (j->client == NULL) {
                mesh_warn(MOD, "no API client for checking other slices' Jobs: %s", e.msg);
            }
        }
    }
    snprintf(j->kind, sizeof(j->kind), "%s", j->jobset_uid[0] ? "JobSet" : s->owner_kind);
    j->known = true;
    return 0;
}

void mesh_sidecar_job_cleanup(struct mesh_sidecar *ctx)
{
    if (ctx->job.inited) {
        mesh_k8s_client_free(ctx->job.client);
        ctx->job.client = NULL;
        pthread_mutex_destroy(&ctx->job.mu);
        ctx->job.inited = false;
    }
}

int mesh_sidecar_job_same_quick(const struct mesh_sidecar *ctx, const struct mesh_k8s_pod *p,
                                char *why, size_t cap)
{
    const struct mesh_sidecar_job *j = &ctx->job;
    if (!j->known) {
        snprintf(why, cap, "this pod's own job is unknown (no controller owner)");
        return -MESH_E_INVAL;
    }
    if (p->owner_uid[0] == '\0') {
        snprintf(why, cap, "pod %s has no controller owner", p->name);
        return -MESH_E_INVAL;
    }
    if (strcmp(p->owner_uid, j->owner_uid) == 0) {
        return 0;
    }
    if (ctx->self.jobset_name[0] != '\0' && strcmp(ctx->self.owner_kind, "Job") == 0 &&
        strcmp(p->owner_kind, "Job") == 0) {
        return 1; /* another slice's Job, maybe: ask the API */
    }
    snprintf(why, cap, "pod %s is controlled by %s %s (uid %s), not by this pod's %s %s (uid %s)",
             p->name, p->owner_kind, p->owner_name, p->owner_uid, ctx->self.owner_kind,
             ctx->self.owner_name, j->owner_uid);
    return -MESH_E_INVAL;
}

int mesh_sidecar_job_same(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          const struct mesh_k8s_pod *p, char *why, size_t cap)
{
    int rc = mesh_sidecar_job_same_quick(ctx, p, why, cap);
    if (rc <= 0) {
        return rc;
    }
    struct mesh_sidecar_job *j = &ctx->job;
    if (j->jobset_uid[0] == '\0') {
        snprintf(why, cap,
                 "pod %s is controlled by Job %s, and this pod's own JobSet could not be read "
                 "to tell whether that Job is one of its slices",
                 p->name, p->owner_name);
        return -MESH_E_INVAL;
    }
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->nslices; i++) {
        if (strcmp(j->slices[i], p->owner_uid) == 0) {
            pthread_mutex_unlock(&j->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&j->mu);
    char js[MESH_K8S_UID_MAX] = "";
    rc = job_parent(client, ctx->ns, p->owner_name, p->owner_uid, js, sizeof(js), why, cap);
    if (rc < 0) {
        return rc == -MESH_E_NOTFOUND ? -MESH_E_INVAL : rc;
    }
    if (strcmp(js, j->jobset_uid) != 0) {
        snprintf(why, cap, "pod %s belongs to Job %s of JobSet uid %s, not to this JobSet (uid %s)",
                 p->name, p->owner_name, js, j->jobset_uid);
        return -MESH_E_INVAL;
    }
    pthread_mutex_lock(&j->mu);
    if (j->nslices < MESH_SIDECAR_JOB_SLICES_MAX) {
        snprintf(j->slices[j->nslices++], MESH_K8S_UID_MAX, "%s", p->owner_uid);
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

int mesh_sidecar_job_same_direct(struct mesh_sidecar *ctx, const struct mesh_k8s_pod *p, char *why,
                                 size_t cap)
{
    int rc = mesh_sidecar_job_same_quick(ctx, p, why, cap);
    if (rc <= 0) {
        return rc;
    }
    struct mesh_sidecar_job *j = &ctx->job;
    pthread_mutex_lock(&j->mu);
    for (size_t i = 0; i < j->nothers; i++) {
        if (strcmp(j->others[i], p->owner_uid) == 0) {
            pthread_mutex_unlock(&j->mu);
            snprintf(why, cap, "pod %s: its Job %s is not one of this JobSet's", p->name,
                     p->owner_name);
            return -MESH_E_INVAL;
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (j->jobset_uid[0] == '\0' || j->client == NULL) {
        return 0; /* the own JobSet is unknown (logged at start): labels decide */
    }
    /* Only the informer thread uses j->client. */
    rc = mesh_sidecar_job_same(ctx, j->client, p, why, cap);
    if (rc == -MESH_E_INVAL) {
        pthread_mutex_lock(&j->mu);
        snprintf(j->others[j->next_other], MESH_K8S_UID_MAX, "%s", p->owner_uid);
        j->next_other = (j->next_other + 1) % MESH_SIDECAR_JOB_SLICES_MAX;
        if (j->nothers < MESH_SIDECAR_JOB_SLICES_MAX) {
            j->nothers++;
        }
        pthread_mutex_unlock(&j->mu);
    }
    return rc;
}
