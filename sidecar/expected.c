/*
 * expected.c - how many workers make this job complete (docs/DESIGN.md §5). The
 * first source that gives a count wins:
 *
 *   1. --expected-workers / TPUMESH_EXPECTED_WORKERS            "flag"
 *   2. the own pod's annotation tpumesh.dev/expected-workers     "annotation"
 *      (a multi-slice job's total over all slices)
 *   3. the owning controller, one GET each, starting from the own pod:
 *        JobSet (the pod's jobset-name label, else the controller
 *        owner of its Job): the sum over spec.replicatedJobs of
 *        replicas x the Job template's completions             "jobset"
 *        Indexed Job: spec.completions                         "job"
 *        StatefulSet: spec.replicas                            "statefulset"
 *   4. where the API refuses the GET (403), the object is gone (404), it
 *      still fails after OWNER_ATTEMPTS tries, or the pod has no owner of
 *      these kinds: the slice's host count (tpumesh-init's topology.json) x the
 *      number of slices (jobset.sigs.k8s.io/global-replicas, else
 *      replicatedjob-replicas, else MEGASCALE_NUM_SLICES; 1 for a pod
 *      outside a JobSet)                                       "slice"
 *
 * With no count the topology is never complete: counting whatever pods
 * happen to exist would publish a smaller job as if it were whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "io/k8s_client.h"
#include "io/log.h"
#include "io/sys.h"
#include "sidecar.h"

#define MOD "sidecar"

/* Transient failures of one owner GET are retried this many times (about
 * 12 s with the backoff below) before the fallback is used. */
#define OWNER_ATTEMPTS 6

/* The API group/version each owner kind is read with. */
#define GV_JOB "batch/v1"
#define GV_JOBSET "jobset.x-k8s.io/v1alpha2"
#define GV_STATEFULSET "apps/v1"

/* Result of one owner GET: the object, or why there is none. */
enum owner_res {
    OWNER_OK,
    OWNER_REFUSED, /* 403: the Role lacks get on it */
    OWNER_GONE,    /* 404: deleted, or the API (a CRD) is not installed */
    OWNER_FAILED,  /* still failing after retries, or stopped */
};

static enum owner_res get_owner(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                                volatile int *stop, const char *gv, const char *resource,
                                const char *name, cJSON **out)
{
    struct mesh_k8s_query q = {.ns = ctx->ns, .group_version = gv, .resource = resource};
    long delay = 500;
    for (int attempt = 1;; attempt++) {
        struct mesh_err e;
        mesh_err_clear(&e);
        int rc = mesh_k8s_client_get(client, &q, name, out, &e);
        if (rc == 0) {
            return OWNER_OK;
        }
        if (rc == -MESH_E_FORBIDDEN) {
            mesh_warn(MOD, "%s", e.msg);
            return OWNER_REFUSED;
        }
        if (rc == -MESH_E_NOTFOUND) {
            mesh_warn(MOD, "%s (the owner is gone, or its API is not installed)", e.msg);
            return OWNER_GONE;
        }
        if (rc == -MESH_E_PARSE || attempt >= OWNER_ATTEMPTS || *stop) {
            mesh_warn(MOD, "reading the owner failed: %s", e.msg);
            return OWNER_FAILED;
        }
        mesh_info(MOD, "reading the owner failed (%s), retrying: %s", mesh_strerror(rc), e.msg);
        for (long waited = 0; waited < delay && !*stop; waited += 50) {
            mesh_sys_sleep_ms(50);
        }
        delay = delay * 2 > 5000 ? 5000 : delay * 2;
    }
}

/* An optional non-negative integer field: *out = its value, def when
 * absent or null. False when present and not an integer in range. */
static bool int_field(const cJSON *obj, const char *path, long long def, long long *out)
{
    const cJSON *v = mesh_json_path(obj, path);
    if (v == NULL || cJSON_IsNull(v)) {
        *out = def;
        return true;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > MESH_WORKERS_MAX ||
        v->valuedouble != (double)(long long)v->valuedouble) {
        return false;
    }
    *out = (long long)v->valuedouble;
    return true;
}

/* Pods of one Job (spec or a JobSet's template spec): an Indexed Job runs
 * one pod per completion index; any other Job runs `parallelism` at once.
 * Unset fields default as the API server defaults them (both 1). 0 when
 * unusable. */
static long long job_pods(const cJSON *spec)
{
    long long completions = 0, parallelism = 0;
    const char *mode = mesh_json_str(spec, "completionMode");
    if (!int_field(spec, "completions", -1, &completions) ||
        !int_field(spec, "parallelism", 1, &parallelism)) {
        return 0;
    }
    if (mode != NULL && strcmp(mode, "Indexed") == 0) {
        return completions > 0 ? completions : 0;
    }
    if (completions < 0) {
        return parallelism;
    }
    return parallelism < completions ? parallelism : completions;
}

/* A JobSet's total and, when every replicated job has the same pods per
 * Job, that count (hosts per slice). 0 when unusable. */
static long long jobset_pods(const cJSON *js, int *per_job, int *jobs, char *why, size_t whylen)
{
    const cJSON *rjs = mesh_json_path(js, "spec.replicatedJobs");
    const cJSON *rj = NULL;
    long long total = 0, njobs = 0;
    int same = -1;
    if (!cJSON_IsArray(rjs) || cJSON_GetArraySize(rjs) == 0) {
        snprintf(why, whylen, "spec.replicatedJobs is missing");
        return 0;
    }
    cJSON_ArrayForEach(rj, rjs)
    {
        long long replicas = 0;
        long long pods = job_pods(mesh_json_path(rj, "template.spec"));
        if (!int_field(rj, "replicas", 1, &replicas) || pods <= 0) {
            snprintf(why, whylen, "replicated job %s has no usable replicas/completions",
                     mesh_json_str(rj, "name") ? mesh_json_str(rj, "name") : "(unnamed)");
            return 0;
        }
        total += replicas * pods;
        njobs += replicas;
        if (total > MESH_WORKERS_MAX) {
            snprintf(why, whylen, "more than %d workers", MESH_WORKERS_MAX);
            return 0;
        }
        same = same == -1 || same == (int)pods ? (int)pods : 0;
    }
    *per_job = same > 0 ? same : 0;
    *jobs = (int)njobs;
    return total;
}

/* The name of the JobSet that controls a Job object, or NULL. */
static const char *jobset_owner(const cJSON *job)
{
    const cJSON *owners = mesh_json_path(job, "metadata.ownerReferences");
    const cJSON *o = NULL;
    if (!cJSON_IsArray(owners)) {
        return NULL;
    }
    cJSON_ArrayForEach(o, owners)
    {
        const char *kind = mesh_json_str(o, "kind");
        const char *name = mesh_json_str(o, "name");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller")) && kind != NULL &&
            strcmp(kind, "JobSet") == 0 && name != NULL &&
            mesh_names_is_dns_label(name, strlen(name))) {
            return name;
        }
    }
    return NULL;
}

struct owner_count {
    long long count;    /* > 0: found */
    const char *source; /* "job", "jobset", "statefulset" */
    char what[160];     /* "JobSet js (2 Jobs x 4 pods)" for the log */
    bool fallback;      /* refused or gone: use the slice fallback */
    int per_job;        /* JobSet: pods per Job when all equal, else 0 */
};

static void count_jobset(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                         volatile int *stop, const char *name, struct owner_count *oc)
{
    mesh_autocjson cJSON *js = NULL;
    enum owner_res r = get_owner(ctx, client, stop, GV_JOBSET, "jobsets", name, &js);
    if (r != OWNER_OK) {
        oc->fallback = true; /* refused, gone, or still failing after retries */
        return;
    }
    char why[128] = "";
    int jobs = 0;
    long long n = jobset_pods(js, &oc->per_job, &jobs, why, sizeof(why));
    if (n <= 0) {
        mesh_warn(MOD, "JobSet %s gives no worker count: %s", name, why);
        oc->fallback = true;
        return;
    }
    oc->count = n;
    oc->source = "jobset";
    if (oc->per_job > 0) {
        snprintf(oc->what, sizeof(oc->what), "JobSet %.63s: %d Job%s x %d pods", name, jobs,
                 jobs == 1 ? "" : "s", oc->per_job);
    } else {
        snprintf(oc->what, sizeof(oc->what), "JobSet %.63s: %d Jobs of different sizes", name,
                 jobs);
    }
}

static void count_owner(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                        volatile int *stop, struct owner_count *oc)
{
    const struct mesh_k8s_pod *s = &ctx->self;
    if (s->jobset_name[0] != '\0') {
        count_jobset(ctx, client, stop, s->jobset_name, oc);
        return;
    }
    if (strcmp(s->owner_kind, "Job") == 0) {
        mesh_autocjson cJSON *job = NULL;
        enum owner_res r = get_owner(ctx, client, stop, GV_JOB, "jobs", s->owner_name, &job);
        if (r != OWNER_OK) {
            oc->fallback = true;
            return;
        }
        const char *js = jobset_owner(job);
        if (js != NULL) {
            count_jobset(ctx, client, stop, js, oc);
            return;
        }
        long long n = job_pods(cJSON_GetObjectItemCaseSensitive(job, "spec"));
        if (n <= 0) {
            mesh_warn(MOD, "Job %s gives no worker count (spec.completions)", s->owner_name);
            oc->fallback = true;
            return;
        }
        const char *mode =
            mesh_json_str(cJSON_GetObjectItemCaseSensitive(job, "spec"), "completionMode");
        oc->count = n;
        oc->source = "job";
        snprintf(oc->what, sizeof(oc->what), "Job %.63s spec.%s", s->owner_name,
                 mode != NULL && strcmp(mode, "Indexed") == 0 ? "completions" : "parallelism");
        return;
    }
    if (strcmp(s->owner_kind, "StatefulSet") == 0) {
        mesh_autocjson cJSON *sts = NULL;
        enum owner_res r =
            get_owner(ctx, client, stop, GV_STATEFULSET, "statefulsets", s->owner_name, &sts);
        long long n = 0;
        if (r != OWNER_OK) {
            oc->fallback = true;
            return;
        }
        if (!int_field(sts, "spec.replicas", 1, &n) || n <= 0) {
            mesh_warn(MOD, "StatefulSet %s gives no worker count (spec.replicas)", s->owner_name);
            oc->fallback = true;
            return;
        }
        oc->count = n;
        oc->source = "statefulset";
        snprintf(oc->what, sizeof(oc->what), "StatefulSet %.63s spec.replicas", s->owner_name);
        return;
    }
    /* No owner to ask (a bare pod, or one of a kind tpumesh does not read). */
    oc->fallback = true;
}

/* The number of slices for the fallback: 0 = unknown. */
static int slice_count(const struct mesh_sidecar *ctx, const char **from)
{
    const struct mesh_k8s_pod *s = &ctx->self;
    if (s->global_replicas > 0) {
        *from = MESH_K8S_KEY_GLOBAL_REPLICAS;
        return s->global_replicas;
    }
    if (s->rjob_replicas > 0) {
        *from = MESH_K8S_KEY_RJOB_REPLICAS;
        return s->rjob_replicas;
    }
    const char *env = getenv("MEGASCALE_NUM_SLICES");
    long long n = 0;
    if (env != NULL && mesh_parse_ll(env, strlen(env), 1, 4096, &n, NULL) == 0) {
        *from = "MEGASCALE_NUM_SLICES";
        return (int)n;
    }
    if (s->jobset_name[0] == '\0' && s->job_index < 0 && s->job_global_index < 0) {
        *from = "a single slice";
        return 1;
    }
    return 0;
}

static bool is_multislice(const struct mesh_sidecar *ctx)
{
    return ctx->self.job_global_index >= 0 || ctx->self.job_index >= 0;
}

static void set_count(struct mesh_sidecar *ctx, long long n, const char *source)
{
    ctx->expected = (int)n;
    snprintf(ctx->expected_source, sizeof(ctx->expected_source), "%s", source);
}

/* Hosts per slice of a multi-slice job when nothing said it yet: the total
 * over the slice count. Deriving it from the highest completion index
 * present would shrink every slice when its last pod is missing. */
static void settle_per_slice(struct mesh_sidecar *ctx)
{
    const char *from = NULL;
    int slices = slice_count(ctx, &from);
    if (is_multislice(ctx) && ctx->per_slice == 0 && ctx->expected > 0 && slices > 0 &&
        ctx->expected % slices == 0) {
        ctx->per_slice = ctx->expected / slices;
        mesh_info(MOD, "%d hosts per slice (%d workers over %d slices from %s)", ctx->per_slice,
                  ctx->expected, slices, from);
    }
}

int mesh_sidecar_expected(struct mesh_sidecar *ctx, struct mesh_k8s_client *client,
                          volatile int *stop, struct mesh_err *err)
{
    (void)err;
    ctx->expected = 0;
    ctx->expected_source[0] = '\0';
    if (ctx->opts.expected_workers > 0) {
        set_count(ctx, ctx->opts.expected_workers, "flag");
        mesh_info(MOD, "expecting %d workers (from --expected-workers / TPUMESH_EXPECTED_WORKERS)",
                  ctx->expected);
        settle_per_slice(ctx);
        return 0;
    }
    if (ctx->self.expected_workers > 0) {
        set_count(ctx, ctx->self.expected_workers, "annotation");
        mesh_info(MOD, "expecting %d workers (from annotation " MESH_K8S_KEY_EXPECTED ")",
                  ctx->expected);
        settle_per_slice(ctx);
        return 0;
    }
    struct owner_count oc = {0};
    count_owner(ctx, client, stop, &oc);
    if (oc.count > 0) {
        set_count(ctx, oc.count, oc.source);
        if (ctx->per_slice == 0 && oc.per_job > 0 && is_multislice(ctx)) {
            ctx->per_slice = oc.per_job;
        }
        mesh_info(MOD, "expecting %d workers (from %s)", ctx->expected, oc.what);
        settle_per_slice(ctx);
        return 0;
    }
    const char *from = NULL;
    int slices = slice_count(ctx, &from);
    if (oc.fallback && ctx->have_slice && ctx->slice.hosts > 0 && slices > 0) {
        set_count(ctx, (long long)ctx->slice.hosts * slices, "slice");
        if (ctx->per_slice == 0 && is_multislice(ctx)) {
            ctx->per_slice = ctx->slice.hosts;
        }
        mesh_info(MOD,
                  "expecting %d workers (from the slice: %s %s has %d hosts x %d slice%s from "
                  "%s)",
                  ctx->expected, ctx->slice.accelerator_type, ctx->slice.topology, ctx->slice.hosts,
                  slices, slices == 1 ? "" : "s", from);
        return 0;
    }
    mesh_warn(MOD,
              "no source gives the number of workers (no --expected-workers, no annotation, no "
              "count from the owner%s%s): the topology stays incomplete until the pod template "
              "sets the annotation " MESH_K8S_KEY_EXPECTED,
              ctx->have_slice ? "" : ", no slice in tpumesh-init's topology.json",
              ctx->have_slice && slices == 0 ? ", no slice count on the pod" : "");
    return 0;
}
