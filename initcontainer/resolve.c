/*
 * resolve.c - the resolve step of tpumesh-init (init.h): which TPU, which
 * slice, which workers.
 *
 * 1. The `tpu` value and its source, with TensorFlow's precedence:
 *    opts.tpu (flag, annotation tpumesh.dev/tpu or TPUMESH_TPU, merged by opts.c), then
 *    KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS (present, even empty), then TPU_NAME,
 *    then TPU_CONFIG (JSON). Beyond TensorFlow, a pod that carries the GKE TPU
 *    VM environment resolves as `local`
 *    before TPU_NAME is considered: KubeRay and LWS set TPU_NAME to a pod or
 *    group name on TPU VMs, which is not a Cloud TPU node.
 * 2. The value decides the kind: `local` (TPU VM: GKE TPU_* environment,
 *    checked against the accelerator model), `grpc://` endpoint lists
 *    (legacy TPU Node), or TPU names resolved through the
 *    Cloud TPU API.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/accel.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "core/tpuenv.h"
#include "core/workers.h"
#include "init.h"
#include "gce_metadata.h"
#include "io/log.h"
#include "io/secret.h"
#include "io/sys.h"
#include "tpu_api.h"

#define MOD "resolve"
#define MESH_TF_VERSION_KEY "annotation tf-version.cloud-tpus.google.com"
/* TPU_CONFIG is a small JSON object. */
#define TPU_CONFIG_MAX 16384

/* TensorFlow's text when no source names a TPU, then ours. */
#define NO_TPU_MSG                                                                                 \
    "Please provide a TPU Name to connect to. Set --tpu (or the pod annotation "                   \
    "tpumesh.dev/tpu): 'local' on a TPU VM, a Cloud TPU name, or grpc://IP:8470; or run on a "     \
    "GKE TPU node pool, which sets TPU_WORKER_ID and TPU_WORKER_HOSTNAMES"

static void set_source(struct mesh_init *ctx, const char *src)
{
    mesh_free(ctx->tpu_source);
    ctx->tpu_source = mesh_strdup(src);
}

/* ---- TPU VM (GKE environment) ------------------------------------------ */

/* True when the pod carries any of the variables GKE's webhook or the TPU
 * device plugin inject on TPU VM node pools, or the accelerator model was
 * given on the command line. */
static bool have_tpu_vm_env(const struct mesh_init *ctx)
{
    static const char *const names[] = {"TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
                                        "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (getenv(names[i]) != NULL) {
            return true;
        }
    }
    return ctx->opts.accelerator_type != NULL || ctx->opts.topology != NULL;
}

/* A TPU VM value: the environment variable name, else (when the metadata
 * server's tpu-env was read) its tpu-env key - name without a "TPU_" prefix
 * (HOST_BOUNDS, CHIPS_PER_HOST_BOUNDS, ACCELERATOR_TYPE,
 * WORKER_ID, MEGASCALE_*). *used names where the value came from. */
static const char *vm_get(const struct mesh_annotations *tenv, const char *name, const char **used)
{
    const char *v = getenv(name);
    *used = name;
    if (v == NULL && tenv != NULL) {
        const char *key = strncmp(name, "TPU_", 4) == 0 ? name + 4 : name;
        v = mesh_annotations_get(tenv, key);
        *used = "metadata tpu-env key";
    }
    return v;
}

/* Parse an integer TPU VM value within [min, max]. Returns 0 and *found =
 * false when absent. */
static int env_int(const struct mesh_annotations *tenv, const char *name, long long min,
                   long long max, bool *found, long long *out, struct mesh_err *err)
{
    const char *used;
    const char *v = vm_get(tenv, name, &used);
    *found = false;
    if (v == NULL) {
        return 0;
    }
    if (mesh_parse_ll(v, strlen(v), min, max, out, NULL) != 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s%s%s='%.32s' is not an integer in %lld..%lld; fix or unset it",
                            used == name ? "" : used, used == name ? "" : " ", name, v, min, max);
    }
    *found = true;
    return 0;
}

/* Bounds from the first present of two variable names (TPU_HOST_BOUNDS or
 * HOST_BOUNDS). */
static int env_bounds(const struct mesh_annotations *tenv, const char *name, const char *alt,
                      bool *found, int out[3], struct mesh_err *err)
{
    const char *used;
    const char *v = getenv(name);
    used = name;
    if (v == NULL && alt != NULL) {
        v = vm_get(tenv, alt, &used);
        used = alt;
    }
    *found = false;
    if (v == NULL) {
        return 0;
    }
    int rc = mesh_tpuenv_parse_bounds(used, v, strlen(v), out, err);
    if (rc == 0) {
        *found = true;
    }
    return rc;
}

static bool bounds_equal(const int a[3], const int b[3])
{
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

/* MEGASCALE_COORDINATOR_ADDRESS: a host name or IP literal, optionally
 * with ":port" (JAX strips it from the variable; so do we: the port is
 * MEGASCALE_PORT's). The host is kept in ctx->megascale_coordinator. */
static int take_coordinator(struct mesh_init *ctx, const char *used, const char *v,
                            struct mesh_err *err)
{
    size_t n = strlen(v);
    const char *colon = strrchr(v, ':');
    if (colon != NULL && memchr(v, ':', (size_t)(colon - v)) == NULL) {
        long long port = 0;
        if (mesh_parse_ll(colon + 1, strlen(colon + 1), 1, 65535, &port, NULL) == 0) {
            n = (size_t)(colon - v);
        }
    }
    mesh_autofree char *host = mesh_strndup(v, n);
    if (n == 0 || n > 253 ||
        (!mesh_names_is_dns_name(host, n, false, true) && !mesh_names_is_ip(host, n, NULL))) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s%sMEGASCALE_COORDINATOR_ADDRESS='%.64s' is not a host name or IP "
                            "address (optionally with :port); fix or unset it",
                            used, *used ? " " : "", v);
    }
    mesh_free(ctx->megascale_coordinator);
    ctx->megascale_coordinator = MESH_STEAL(host);
    return 0;
}

/* MEGASCALE_PORT: the tpumesh.dev/megascale-port annotation wins over the
 * variable GKE sets; 0 = the default (8080, render.h). */
static int take_megascale_port(struct mesh_init *ctx, const struct mesh_annotations *tenv,
                               struct mesh_err *err)
{
    if (ctx->opts.megascale_port > 0) {
        ctx->megascale_port = ctx->opts.megascale_port;
        return 0;
    }
    bool have = false;
    long long port = 0;
    int rc = env_int(tenv, "MEGASCALE_PORT", 1, 65535, &have, &port, err);
    if (rc == 0 && have) {
        ctx->megascale_port = (int)port;
    }
    return rc;
}

/* MEGASCALE_NUM_SLICES / MEGASCALE_SLICE_ID / MEGASCALE_COORDINATOR_ADDRESS /
 * MEGASCALE_PORT (multislice, set by GKE for JobSets): validated, logged and
 * kept in ctx. *out_slices = the number of slices (1 when unset):
 * TPU_WORKER_HOSTNAMES then names only this slice's VMs. */
static int check_megascale(struct mesh_init *ctx, const struct mesh_annotations *tenv,
                           long long *out_slices, struct mesh_err *err)
{
    bool have_n = false, have_id = false;
    long long n = 1, id = 0;
    int rc = env_int(tenv, "MEGASCALE_NUM_SLICES", 1, 4096, &have_n, &n, err);
    if (rc == 0) {
        rc = env_int(tenv, "MEGASCALE_SLICE_ID", 0, 4095, &have_id, &id, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (have_id && id >= n) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "MEGASCALE_SLICE_ID=%lld is out of range for MEGASCALE_NUM_SLICES=%lld "
                            "(want 0..%lld)",
                            id, n, n - 1);
    }
    if (have_n && n > 1 && !have_id) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "MEGASCALE_NUM_SLICES=%lld but MEGASCALE_SLICE_ID is not set; set it "
                            "to this pod's slice (0..%lld)",
                            n, n - 1);
    }
    if (have_n && n > 1) {
        const char *used;
        const char *coord = vm_get(tenv, "MEGASCALE_COORDINATOR_ADDRESS", &used);
        if (coord != NULL && coord[0] != '\0') {
            bool from_env = strcmp(used, "MEGASCALE_COORDINATOR_ADDRESS") == 0;
            rc = take_coordinator(ctx, from_env ? "" : used, coord, err);
        }
        if (rc == 0) {
            rc = take_megascale_port(ctx, tenv, err);
        }
        if (rc < 0) {
            return rc;
        }
        if (id != 0 && ctx->megascale_coordinator == NULL) {
            mesh_warn(MOD,
                      "multislice: MEGASCALE_COORDINATOR_ADDRESS is not set: slice %lld "
                      "cannot name slice 0's worker 0, so tpu.env and jax.env are left to "
                      "the sidecar",
                      id);
        }
        mesh_info(MOD, "multislice: slice %lld of %lld, coordinator %s, MEGASCALE_PORT %d", id, n,
                  ctx->megascale_coordinator ? ctx->megascale_coordinator : "(not set)",
                  ctx->megascale_port > 0 ? ctx->megascale_port : 8080);
    }
    ctx->num_slices = (int)n;
    ctx->slice_id = (int)id;
    *out_slices = n;
    return 0;
}

/* Derive the slice from the accelerator model when anything names it, and
 * check the GKE bounds against it. */
static int resolve_vm_slice(struct mesh_init *ctx, const struct mesh_gce_tpu_vm *md,
                            size_t nhosts_listed, struct mesh_err *err)
{
    const struct mesh_annotations *tenv = md ? &md->env : NULL;
    const char *used;
    const char *type = ctx->opts.accelerator_type ? ctx->opts.accelerator_type
                                                  : vm_get(tenv, "TPU_ACCELERATOR_TYPE", &used);
    const char *topo =
        ctx->opts.topology ? ctx->opts.topology : vm_get(tenv, "TPU_TOPOLOGY", &used);
    if (type == NULL && md != NULL) {
        type = md->accelerator_type;
    }
    int hb[3], cb[3];
    bool have_hb = false, have_cb = false;
    int rc = env_bounds(tenv, "TPU_HOST_BOUNDS", "HOST_BOUNDS", &have_hb, hb, err);
    if (rc == 0) {
        rc = env_bounds(tenv, "TPU_CHIPS_PER_HOST_BOUNDS", "CHIPS_PER_HOST_BOUNDS", &have_cb, cb,
                        err);
    }
    if (rc < 0) {
        return rc;
    }
    if ((type == NULL || *type == '\0') && (topo == NULL || *topo == '\0')) {
        mesh_warn(MOD, "no accelerator type or topology (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, "
                       "--accelerator-type, --topology): the slice stays unknown");
        return 0;
    }
    struct mesh_slice_spec spec = {
        .accelerator_type = (type && *type) ? type : NULL,
        .topology = (topo && *topo) ? topo : NULL,
        .chips_per_host = have_cb ? cb[0] * cb[1] * cb[2] : 0,
        .hosts = have_hb ? hb[0] * hb[1] * hb[2] : (int)nhosts_listed,
    };
    rc = mesh_slice_derive(&spec, &ctx->slice, err);
    if (rc < 0) {
        return mesh_err_prefix(err, "accelerator model (type %s, topology %s)",
                               spec.accelerator_type ? spec.accelerator_type : "unset",
                               spec.topology ? spec.topology : "unset");
    }
    const struct mesh_slice *s = &ctx->slice;
    if (have_hb && !bounds_equal(hb, s->host_bounds)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_HOST_BOUNDS=%d,%d,%d does not match %s %s (host bounds %d,%d,%d); "
                            "check the node pool's accelerator and topology",
                            hb[0], hb[1], hb[2], s->accelerator_type, s->topology,
                            s->host_bounds[0], s->host_bounds[1], s->host_bounds[2]);
    }
    if (have_cb && !bounds_equal(cb, s->chips_per_host_bounds)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_CHIPS_PER_HOST_BOUNDS=%d,%d,%d does not match %s %s (chips per "
                            "host bounds %d,%d,%d)",
                            cb[0], cb[1], cb[2], s->accelerator_type, s->topology,
                            s->chips_per_host_bounds[0], s->chips_per_host_bounds[1],
                            s->chips_per_host_bounds[2]);
    }
    ctx->have_slice = true;
    return 0;
}

/* This worker's index: TPU_WORKER_ID (or tpu-env WORKER_ID), else the
 * metadata agent-worker-number, else JOB_COMPLETION_INDEX (Indexed Jobs;
 * GKE's webhook sets TPU_WORKER_ID from it), else 0
 * for a one-worker list. *out_id = -1 when unknown. */
static int vm_worker_id(const struct mesh_init *ctx, const struct mesh_gce_tpu_vm *md,
                        long long *out_id, struct mesh_err *err)
{
    const struct mesh_annotations *tenv = md ? &md->env : NULL;
    bool have_id = false, have_jci = false;
    long long id = -1, jci = -1;
    int rc = env_int(tenv, "TPU_WORKER_ID", 0, MESH_INIT_MAX_WORKERS - 1, &have_id, &id, err);
    if (rc == 0) {
        rc = env_int(NULL, "JOB_COMPLETION_INDEX", 0, MESH_INIT_MAX_WORKERS - 1, &have_jci, &jci,
                     err);
    }
    if (rc < 0) {
        return rc;
    }
    if (!have_id && md != NULL && md->worker_number >= 0) {
        id = md->worker_number;
        have_id = true;
    }
    if (have_id && have_jci && id != jci) {
        mesh_warn(MOD, "TPU_WORKER_ID=%lld but JOB_COMPLETION_INDEX=%lld: using TPU_WORKER_ID", id,
                  jci);
    }
    if (!have_id && have_jci && ctx->nworkers > 0) {
        mesh_info(MOD, "TPU_WORKER_ID not set: using JOB_COMPLETION_INDEX=%lld", jci);
        id = jci;
        have_id = true;
    }
    if (!have_id && ctx->nworkers == 1) {
        id = 0; /* a single-host slice: the only worker is this one */
        have_id = true;
    }
    if (have_id && ctx->nworkers > 0 && (size_t)id >= ctx->nworkers) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_WORKER_ID=%lld is out of range: TPU_WORKER_HOSTNAMES lists %zu "
                            "workers (want 0..%zu)",
                            id, ctx->nworkers, ctx->nworkers - 1);
    }
    if (!have_id && ctx->nworkers > 1) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_WORKER_HOSTNAMES lists %zu workers but TPU_WORKER_ID is not set; "
                            "set TPU_WORKER_ID to this pod's index (an Indexed Job's completion "
                            "index)",
                            ctx->nworkers);
    }
    *out_id = have_id ? id : -1;
    return 0;
}

/* GKE names worker i `<hostname>.<subdomain>`, so
 * our own entry should start with our host name. A mismatch (wrong
 * TPU_WORKER_ID, hostNetwork pods) is worth a warning: the DTensor client id
 * would point at another pod. */
static void check_self_host(const struct mesh_init *ctx)
{
    char me[256];
    if (ctx->self_index < 0 || (size_t)ctx->self_index >= ctx->nworkers ||
        gethostname(me, sizeof(me)) != 0) {
        return;
    }
    me[sizeof(me) - 1] = '\0';
    const char *entry = ctx->workers[ctx->self_index].host;
    size_t label = strcspn(entry, ".");
    if (ctx->workers[ctx->self_index].ip[0] != '\0' || strcmp(entry, "localhost") == 0) {
        return;
    }
    size_t mine = strcspn(me, ".");
    if (label != mine || strncasecmp(entry, me, label) != 0) {
        mesh_warn(MOD,
                  "TPU_WORKER_HOSTNAMES entry %d is '%s' but this pod's host name is '%s': "
                  "check TPU_WORKER_ID",
                  ctx->self_index, entry, me);
    }
}

static int resolve_vm_checked(struct mesh_init *ctx, const struct mesh_gce_tpu_vm *md,
                              struct mesh_err *err)
{
    const struct mesh_annotations *tenv = md ? &md->env : NULL;
    long long id = -1;
    int rc = vm_worker_id(ctx, md, &id, err);
    if (rc < 0) {
        return rc;
    }
    bool have_id = id >= 0;
    ctx->self_index = (int)id;
    check_self_host(ctx);
    long long slices = 1;
    rc = check_megascale(ctx, tenv, &slices, err);
    if (rc == 0) {
        rc = resolve_vm_slice(ctx, md, ctx->nworkers, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (ctx->have_slice && ctx->nworkers > 0 && (size_t)ctx->slice.hosts != ctx->nworkers) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_WORKER_HOSTNAMES lists %zu workers but %s %s has %d hosts; the "
                            "list must name every TPU VM of the slice",
                            ctx->nworkers, ctx->slice.accelerator_type, ctx->slice.topology,
                            ctx->slice.hosts);
    }
    if (ctx->have_slice && have_id && id >= ctx->slice.hosts) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_WORKER_ID=%lld is out of range for %s %s with %d hosts", id,
                            ctx->slice.accelerator_type, ctx->slice.topology, ctx->slice.hosts);
    }
    /* The expected count is the job's total (docs/DESIGN.md §5): in a multislice
     * job TPU_WORKER_HOSTNAMES names one slice, so the total is that list
     * times MEGASCALE_NUM_SLICES, as the sidecar counts it. */
    if (ctx->opts.expected_workers > 0 && ctx->nworkers > 0 &&
        (long long)ctx->opts.expected_workers != (long long)ctx->nworkers * slices) {
        if (slices > 1) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "expected %d workers (--expected-workers / tpumesh.dev/expected-"
                                "workers: the total over all slices) but TPU_WORKER_HOSTNAMES "
                                "lists %zu per slice x MEGASCALE_NUM_SLICES=%lld = %lld",
                                ctx->opts.expected_workers, ctx->nworkers, slices,
                                (long long)ctx->nworkers * slices);
        }
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "expected %d workers (--expected-workers / tpumesh.dev/expected-"
                            "workers) but TPU_WORKER_HOSTNAMES lists %zu",
                            ctx->opts.expected_workers, ctx->nworkers);
    }
    /* docs/DESIGN.md §5: a multislice job's workers are slice-major across all
     * slices; this pod only knows its own slice: it publishes the slice's
     * tpu.env and jax.env, and the sidecar completes the worker list. */
    ctx->complete = ctx->nworkers > 0 && slices == 1;
    ctx->slice_complete = ctx->nworkers > 0 && have_id && slices > 1;
    if (ctx->nworkers > 0 && slices > 1) {
        for (size_t i = 0; i < ctx->nworkers; i++) {
            ctx->workers[i].index = ctx->slice_id * (int)ctx->nworkers + (int)i;
        }
        mesh_info(MOD,
                  "multislice: TPU_WORKER_HOSTNAMES names this slice only (global indices "
                  "%d..%d); the sidecar completes the worker list across %lld slices",
                  ctx->slice_id * (int)ctx->nworkers,
                  ctx->slice_id * (int)ctx->nworkers + (int)ctx->nworkers - 1, slices);
    }
    mesh_info(MOD, "TPU VM: worker %d of %zu, slice %s%s%s, worker list %s", ctx->self_index,
              ctx->nworkers, ctx->have_slice ? ctx->slice.accelerator_type : "unknown",
              ctx->have_slice ? " " : "", ctx->have_slice ? ctx->slice.topology : "",
              ctx->complete ? "complete" : "incomplete");
    return 0;
}

/* Without TPU_WORKER_HOSTNAMES, try the GCE metadata server's TPU VM
 * attributes (a plain TPU VM, not GKE, where they are hidden).
 * An unreachable server or missing attributes are not fatal
 * (returns 0: the worker list stays unknown); malformed attributes are
 * (-MESH_E_API: the server answered with something we must not publish).
 * Returns 1 when out was filled. */
static int vm_from_metadata(struct mesh_init *ctx, struct mesh_gce_tpu_vm *out,
                            struct mesh_err *err)
{
    struct mesh_gce_metadata md;
    struct mesh_err merr;
    int rc = mesh_gce_metadata_init(&md, ctx->opts.metadata_host, err);
    if (rc < 0) {
        return rc;
    }
    md.attempts = 1;
    md.timeout_ms = 1000;
    rc = mesh_gce_metadata_tpu_vm(&md, MESH_INIT_MAX_WORKERS, out, &merr);
    mesh_gce_metadata_cleanup(&md);
    if (rc == -MESH_E_PARSE || rc == -MESH_E_TOOBIG) {
        return mesh_err_set(err, MESH_E_API, 0, "TPU VM metadata: %s", merr.msg);
    }
    if (rc < 0) {
        mesh_info(MOD,
                  "no TPU_WORKER_HOSTNAMES and no TPU VM metadata (%s): the worker list "
                  "stays unknown",
                  merr.msg);
        return 0;
    }
    mesh_info(MOD, "TPU VM attributes from the metadata server: %zu worker(s), type %s",
              out->nworkers, out->accelerator_type ? out->accelerator_type : "?");
    return 1;
}

static int resolve_vm_workers(struct mesh_init *ctx, const struct mesh_gce_tpu_vm *md,
                              struct mesh_err *err)
{
    const char *hosts = getenv("TPU_WORKER_HOSTNAMES");
    if (hosts != NULL) {
        int rc = mesh_tpuenv_parse_hostnames(hosts, strlen(hosts), MESH_INIT_MAX_WORKERS,
                                             &ctx->workers, &ctx->nworkers, err);
        if (rc < 0) {
            return mesh_err_prefix(err, "TPU_WORKER_HOSTNAMES");
        }
    } else if (md != NULL && md->nworkers > 0) {
        /* md keeps its block: take a one-block copy of our own. */
        ctx->workers = mesh_workers_copy(md->workers, md->nworkers);
        ctx->nworkers = md->nworkers;
    }
    return 0;
}

static int resolve_vm(struct mesh_init *ctx, struct mesh_err *err)
{
    ctx->kind = MESH_TPU_VM_LOCAL;
    ctx->self_index = -1;
    struct mesh_gce_tpu_vm mdv;
    const struct mesh_gce_tpu_vm *md = NULL;
    int rc = 0;
    /* The TPU device plugin sets TPU_SKIP_MDS_QUERY=true: the GCE metadata
     * server is not the pod's to ask. */
    const char *skip = getenv("TPU_SKIP_MDS_QUERY");
    bool skip_mds = skip != NULL && (strcasecmp(skip, "true") == 0 || strcmp(skip, "1") == 0);
    if (getenv("TPU_WORKER_HOSTNAMES") == NULL && skip_mds) {
        mesh_info(MOD, "TPU_SKIP_MDS_QUERY is set: not asking the metadata server for the worker "
                       "list");
    }
    if (getenv("TPU_WORKER_HOSTNAMES") == NULL && !skip_mds) {
        rc = vm_from_metadata(ctx, &mdv, err);
        if (rc < 0) {
            return rc;
        }
        md = rc == 1 ? &mdv : NULL;
    }
    rc = resolve_vm_workers(ctx, md, err);
    if (rc == 0) {
        rc = resolve_vm_checked(ctx, md, err);
    }
    if (md != NULL) {
        mesh_gce_metadata_tpu_vm_cleanup(&mdv);
    }
    return rc;
}

/* ---- legacy TPU Node: grpc:// endpoints -------------------------------- */

/* On the TPU Node paths the slice comes from --accelerator-type/--topology
 * when given (flag > API, docs/DESIGN.md §6), else from the API's acceleratorType,
 * else it stays unknown until ConfigureDistributedTPU returns a topology. */
static int node_slice_from_flags(struct mesh_init *ctx, struct mesh_err *err)
{
    if (ctx->opts.accelerator_type == NULL && ctx->opts.topology == NULL) {
        return 0;
    }
    struct mesh_slice_spec spec = {
        .accelerator_type = ctx->opts.accelerator_type,
        .topology = ctx->opts.topology,
    };
    int rc = mesh_slice_derive(&spec, &ctx->slice, err);
    if (rc < 0) {
        return mesh_err_prefix(err, "--accelerator-type/--topology");
    }
    ctx->have_slice = true;
    return 0;
}

static int resolve_grpc(struct mesh_init *ctx, const char *tpu, struct mesh_err *err)
{
    struct mesh_tpuenv_endpoint *eps = NULL;
    size_t n = 0;
    int rc = mesh_tpuenv_parse_endpoints(tpu, strlen(tpu), MESH_INIT_MAX_ENDPOINTS, &eps, &n, err);
    if (rc < 0) {
        return mesh_err_prefix(err, "%s", ctx->tpu_source);
    }
    ctx->endpoints = mesh_calloc(n, sizeof(*ctx->endpoints));
    for (size_t i = 0; i < n; i++) {
        memcpy(ctx->endpoints[i].ip, eps[i].ip, sizeof(ctx->endpoints[i].ip));
        ctx->endpoints[i].port = eps[i].port;
    }
    ctx->nendpoints = n;
    mesh_free(eps);
    rc = node_slice_from_flags(ctx, err);
    if (rc < 0) {
        return rc;
    }
    ctx->kind = MESH_TPU_NODE_GRPC;
    ctx->complete = true;
    ctx->self_index = 0;
    mesh_info(MOD, "TPU Node: %zu gRPC endpoint(s), task 0 at %s:%d", n, ctx->endpoints[0].ip,
              ctx->endpoints[0].port);
    return 0;
}

/* ---- Cloud TPU API ----------------------------------------------------- */

/* A Cloud TPU node name: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters
 * (it becomes part of a URL path, so nothing else may pass). */
static bool is_tpu_name(const char *s, size_t len)
{
    if (len == 0 || len > 63 || !(s[0] >= 'a' && s[0] <= 'z') || s[len - 1] == '-') {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
            return false;
        }
    }
    return true;
}

/* A project ID or zone as it may appear in an API path: starts with a
 * lower-case letter, then lower-case letters, digits, '-' (and for
 * domain-scoped project IDs '.' and ':'); at most max characters. */
static bool is_path_word(const char *s, const char *extra, size_t max)
{
    size_t len = strlen(s);
    if (len == 0 || len > max || !(s[0] >= 'a' && s[0] <= 'z')) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
              (extra != NULL && strchr(extra, c) != NULL))) {
            return false;
        }
    }
    return true;
}

/* Project and zone: flag/annotation > TPU_CONFIG > metadata. */
static int api_location(struct mesh_init *ctx, struct mesh_gce_metadata *md, char **out_project,
                        char **out_zone, struct mesh_err *err)
{
    mesh_autofree char *project = ctx->opts.project ? mesh_strdup(ctx->opts.project) : NULL;
    mesh_autofree char *zone = ctx->opts.zone ? mesh_strdup(ctx->opts.zone) : NULL;
    int rc;
    if (project == NULL) {
        rc = mesh_gce_metadata_project(md, &project, err);
        if (rc < 0) {
            return mesh_err_prefix(err, "project unknown (set --project or tpumesh.dev/project)");
        }
    }
    if (zone == NULL) {
        rc = mesh_gce_metadata_zone(md, &zone, err);
        if (rc < 0) {
            return mesh_err_prefix(err, "zone unknown (set --zone or tpumesh.dev/zone)");
        }
    }
    if (!is_path_word(project, ".:", 100)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "project '%.64s' is not a project ID (lower-case letters, digits, "
                            "'-'); fix --project / tpumesh.dev/project / TPU_CONFIG",
                            project);
    }
    if (!is_path_word(zone, NULL, 63)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "zone '%.64s' is not a zone such as us-central2-b; fix --zone / "
                            "tpumesh.dev/zone / TPU_CONFIG",
                            zone);
    }
    *out_project = MESH_STEAL(project);
    *out_zone = MESH_STEAL(zone);
    return 0;
}

static int append_endpoints(struct mesh_init *ctx, const struct mesh_tpu_api_node *node,
                            struct mesh_err *err)
{
    if (ctx->nendpoints + node->nendpoints > MESH_INIT_MAX_ENDPOINTS) {
        return mesh_err_set(err, MESH_E_API, 0, "the TPUs list more than %d endpoints in total",
                            MESH_INIT_MAX_ENDPOINTS);
    }
    ctx->endpoints = mesh_reallocarray(ctx->endpoints, ctx->nendpoints + node->nendpoints,
                                       sizeof(*ctx->endpoints));
    for (size_t i = 0; i < node->nendpoints; i++) {
        struct mesh_endpoint *e = &ctx->endpoints[ctx->nendpoints++];
        memset(e, 0, sizeof(*e));
        snprintf(e->ip, sizeof(e->ip), "%s", node->endpoints[i].ip);
        e->port = node->endpoints[i].port;
    }
    return 0;
}

/* Every name of a comma list must be a Cloud TPU name; checked before any
 * network traffic. */
static int check_names(const struct mesh_init *ctx, const char *tpu, struct mesh_err *err)
{
    size_t nnames = 1;
    for (const char *q = tpu; *q; q++) {
        nnames += *q == ',';
    }
    if (nnames > MESH_INIT_MAX_ENDPOINTS) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s lists more than %d TPU names",
                            ctx->tpu_source, MESH_INIT_MAX_ENDPOINTS);
    }
    for (const char *p = tpu;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (!is_tpu_name(p, n)) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.*s' is not 'local', grpc://IP:PORT or a Cloud TPU name "
                                "(lower-case letters, digits and '-', starting with a letter)",
                                ctx->tpu_source, (int)(n > 64 ? 64 : n), p);
        }
        if (comma == NULL) {
            return 0;
        }
        p = comma + 1;
    }
}

/* What the API path needs for the whole run. Strings owned. */
struct api_session {
    struct mesh_gce_metadata md;
    char *project;
    char *zone;
    char *token;
    char *endpoint;
    struct mesh_tpu_api api;
};

static void api_session_cleanup(struct api_session *s)
{
    mesh_gce_metadata_cleanup(&s->md);
    mesh_free(s->project);
    mesh_free(s->zone);
    mesh_secret_free(s->token);
    mesh_free(s->endpoint);
}

static int api_session_open(struct mesh_init *ctx, struct api_session *s, struct mesh_err *err)
{
    int rc = mesh_gce_metadata_init(&s->md, ctx->opts.metadata_host, err);
    if (rc == 0) {
        rc = api_location(ctx, &s->md, &s->project, &s->zone, err);
    }
    if (rc == 0) {
        rc = mesh_gce_metadata_token(&s->md, &s->token, err);
        if (rc < 0) {
            mesh_err_prefix(err, "access token for the Cloud TPU API");
        }
    }
    if (rc == 0) {
        rc = mesh_tpu_api_endpoint(ctx->opts.tpu_api_endpoint, getenv("TPU_API_DISCOVERY_URL"),
                                   &s->endpoint, err);
    }
    if (rc == -MESH_E_TOOBIG) {
        /* An oversized metadata reply is the server's fault, not the user's. */
        if (err != NULL) {
            err->code = MESH_E_API;
        }
        return -MESH_E_API;
    }
    if (rc < 0) {
        return rc;
    }
    mesh_info(MOD, "Cloud TPU API %s, project %s, zone %s", s->endpoint, s->project, s->zone);
    s->api.endpoint = s->endpoint;
    s->api.project = s->project;
    s->api.zone = s->zone;
    s->api.token = s->token;
    s->api.timeout_s = ctx->opts.timeout_s > 0 ? ctx->opts.timeout_s : 600;
    /* One deadline for every listed TPU, not one per TPU, and the run's own
     * deadline when main set one (--timeout covers resolve + initialize). */
    s->api.deadline_ms = ctx->deadline_ms > 0
                             ? (long long)ctx->deadline_ms
                             : (long long)mesh_sys_now_ms() + s->api.timeout_s * 1000LL;
    return 0;
}

/* Wait for one node. Access tokens expire (about an hour); when the API
 * rejects ours, fetch a fresh one from the metadata server once and retry. */
static int api_wait(struct api_session *s, const char *name, struct mesh_tpu_api_node *out,
                    struct mesh_err *err)
{
    int rc = mesh_tpu_api_wait_ready(&s->api, name, out, err);
    if (rc != -MESH_E_AUTH) {
        return rc;
    }
    char *fresh = NULL;
    struct mesh_err terr;
    if (mesh_gce_metadata_token(&s->md, &fresh, &terr) < 0) {
        return rc;
    }
    if (strcmp(fresh, s->token) == 0) {
        mesh_secret_free(fresh);
        return rc; /* the same token: refused for a reason a refresh cannot fix */
    }
    mesh_secret_replace(&s->token, fresh);
    s->api.token = fresh;
    mesh_info(MOD, "TPU \"%s\": access token refused; retrying with a fresh token", name);
    return mesh_tpu_api_wait_ready(&s->api, name, out, err);
}

/* Add one READY node's endpoints (and the slice from its type). */
static int api_take_node(struct mesh_init *ctx, const char *name,
                         const struct mesh_tpu_api_node *node, struct mesh_err *err)
{
    int rc = append_endpoints(ctx, node, err);
    if (rc < 0) {
        return rc;
    }
    /* The legacy GKE annotation names the TensorFlow version the TPU
     * should run; a mismatch is worth a warning, not a failure. */
    if (ctx->opts.tf_version != NULL && node->tensorflow_version[0] != '\0' &&
        strcmp(ctx->opts.tf_version, node->tensorflow_version) != 0) {
        mesh_warn(MOD, "TPU \"%s\" runs TensorFlow %s but the pod asks for %s (%s)", name,
                  node->tensorflow_version, ctx->opts.tf_version, MESH_TF_VERSION_KEY);
    }
    if (ctx->have_slice && node->accelerator_type[0] != '\0' &&
        strcmp(ctx->slice.accelerator_type, node->accelerator_type) != 0) {
        mesh_warn(MOD, "TPU \"%s\" is a %s but --accelerator-type says %s: using the flag", name,
                  node->accelerator_type, ctx->slice.accelerator_type);
    }
    if (!ctx->have_slice && node->accelerator_type[0] != '\0') {
        struct mesh_slice_spec spec = {.accelerator_type = node->accelerator_type};
        struct mesh_err serr;
        if (mesh_slice_derive(&spec, &ctx->slice, &serr) == 0) {
            ctx->have_slice = true;
        } else {
            mesh_warn(MOD, "TPU \"%s\": %s", name, serr.msg);
        }
    }
    mesh_info(MOD, "TPU \"%s\" is READY and HEALTHY: %zu endpoint(s), %s", name, node->nendpoints,
              node->accelerator_type[0] ? node->accelerator_type : "type ?");
    return 0;
}

static int resolve_api(struct mesh_init *ctx, const char *tpu, struct mesh_err *err)
{
    int rc = check_names(ctx, tpu, err);
    if (rc == 0) {
        rc = node_slice_from_flags(ctx, err);
    }
    if (rc < 0) {
        return rc;
    }
    struct api_session s;
    memset(&s, 0, sizeof(s));
    rc = api_session_open(ctx, &s, err);
    for (const char *p = tpu; rc == 0;) {
        const char *comma = strchr(p, ',');
        mesh_autofree char *name = mesh_strndup(p, comma ? (size_t)(comma - p) : strlen(p));
        struct mesh_tpu_api_node node;
        rc = api_wait(&s, name, &node, err);
        if (rc == 0) {
            rc = api_take_node(ctx, name, &node, err);
            mesh_tpu_api_node_cleanup(&node);
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    api_session_cleanup(&s);
    if (rc < 0) {
        return rc;
    }
    ctx->kind = MESH_TPU_NODE_API;
    ctx->complete = true;
    ctx->self_index = 0;
    return 0;
}

/* ---- the tpu value and its source -------------------------------------- */

/* TPU_CONFIG (newest cloud_tpu_client): JSON with tpu_node_name,
 * project, zone; explicit values win. Fills *out_name (owned) or leaves it
 * NULL when the JSON names no node. */
static int read_tpu_config(struct mesh_init *ctx, const char *v, char **out_name,
                           struct mesh_err *err)
{
    struct mesh_err jerr;
    mesh_autocjson cJSON *j = mesh_json_parse(v, strlen(v), TPU_CONFIG_MAX, &jerr);
    if (j == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_CONFIG is not valid JSON (%s); want {\"tpu_node_name\": ..., "
                            "\"project\": ..., \"zone\": ...}",
                            jerr.msg);
    }
    if (!cJSON_IsObject(j)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU_CONFIG is not a JSON object; want {\"tpu_node_name\": ..., "
                            "\"project\": ..., \"zone\": ...}");
    }
    const char *name = mesh_json_str(j, "tpu_node_name");
    const char *project = mesh_json_str(j, "project");
    const char *zone = mesh_json_str(j, "zone");
    if (ctx->opts.project == NULL && project != NULL && *project != '\0') {
        ctx->opts.project = mesh_strdup(project);
    }
    if (ctx->opts.zone == NULL && zone != NULL && *zone != '\0') {
        ctx->opts.zone = mesh_strdup(zone);
    }
    *out_name = (name != NULL && *name != '\0') ? mesh_strdup(name) : NULL;
    return 0;
}

/* Pick the tpu value (owned copy in *out_tpu) and record ctx->tpu_source.
 * *out_tpu stays NULL for the GKE TPU VM environment without a name. */
static int pick_tpu(struct mesh_init *ctx, char **out_tpu, struct mesh_err *err)
{
    const char *v;
    *out_tpu = NULL;
    /* TensorFlow treats tpu='' as unset, and so do we. */
    if (ctx->opts.tpu != NULL && ctx->opts.tpu[0] != '\0') {
        set_source(ctx, ctx->opts.tpu_origin ? ctx->opts.tpu_origin : "flag --tpu");
        *out_tpu = mesh_strdup(ctx->opts.tpu);
        return 0;
    }
    if ((v = getenv("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")) != NULL) {
        set_source(ctx, "env KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS");
        *out_tpu = mesh_strdup(v);
        return 0;
    }
    if (have_tpu_vm_env(ctx)) {
        set_source(ctx, "GKE TPU VM environment (TPU_WORKER_*, TPU_ACCELERATOR_TYPE)");
        if (getenv("TPU_NAME") != NULL) {
            mesh_info(MOD, "TPU_NAME is ignored on a TPU VM (GKE webhooks set it to a pod name)");
        }
        *out_tpu = mesh_strdup("local");
        return 0;
    }
    if ((v = getenv("TPU_NAME")) != NULL) {
        set_source(ctx, "env TPU_NAME");
        *out_tpu = mesh_strdup(v);
        return 0;
    }
    if ((v = getenv("TPU_CONFIG")) != NULL) {
        set_source(ctx, "env TPU_CONFIG");
        int rc = read_tpu_config(ctx, v, out_tpu, err);
        if (rc < 0) {
            return rc;
        }
        if (*out_tpu != NULL) {
            return 0;
        }
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0, "%s", NO_TPU_MSG);
}

int mesh_init_resolve(struct mesh_init *ctx, struct mesh_err *err)
{
    mesh_autofree char *tpu = NULL;
    int rc = pick_tpu(ctx, &tpu, err);
    if (rc < 0) {
        return rc;
    }
    const struct mesh_log_field fields[] = {{"tpu", tpu}, {"source", ctx->tpu_source}};
    mesh_log_kv(MESH_LOG_INFO, MOD, fields, 2, "tpu '%s' from %s", tpu, ctx->tpu_source);
    if (tpu[0] == '\0') {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s is set but empty: it must name a TPU ('local', grpc://IP:PORT,... "
                            "or a Cloud TPU name); set it or unset it",
                            ctx->tpu_source);
    }
    if (strcmp(tpu, "local") == 0) {
        return resolve_vm(ctx, err);
    }
    if (mesh_tpuenv_is_grpc(tpu, strlen(tpu))) {
        return resolve_grpc(ctx, tpu, err);
    }
    return resolve_api(ctx, tpu, err);
}
