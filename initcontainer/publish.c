/*
 * publish.c - the publish step of tpumesh-init (init.h): render the files
 * of docs/DESIGN.md §4 from what resolve (and initialize) found and publish them
 * atomically into --out-dir.
 *
 * The generation continues from the topology.json already on the volume
 * (a restarted init container must not go backwards); when the rendered
 * content equals what is there, nothing is rewritten and the generation
 * stays. The TPU VM path writes every file; the legacy TPU Node path writes
 * TensorFlow's cluster_spec as tf_config.json, the TopologyProto the TPU
 * returned as topology.pb, and topology.json (docs/DESIGN.md §6).
 */
#include <string.h>

#include "core/cleanup.h"
#include "core/mem.h"
#include "core/render.h"
#include "core/topo.h"
#include "init.h"
#include "io/log.h"
#include "io/publish.h"

#define MOD "publish"

static bool is_node_path(const struct mesh_init *ctx);

static void fill_input(const struct mesh_init *ctx, uint64_t generation,
                       struct mesh_render_input *in)
{
    memset(in, 0, sizeof(*in));
    in->slice = ctx->have_slice ? &ctx->slice : NULL;
    in->workers = ctx->workers;
    in->nworkers = ctx->nworkers;
    in->expected = ctx->opts.expected_workers;
    in->expected_source = ctx->opts.expected_origin;
    if (in->expected <= 0 && ctx->have_slice && ctx->slice.hosts > 0 &&
        ctx->kind != MESH_TPU_NODE_GRPC && ctx->kind != MESH_TPU_NODE_API) {
        /* A multislice job's total: every slice has the same hosts. */
        in->expected = ctx->slice.hosts * (ctx->num_slices > 1 ? ctx->num_slices : 1);
        in->expected_source = "slice";
    }
    if (in->expected <= 0) {
        in->expected_source = "worker-list"; /* expected 0 = the list's size */
    }
    in->present = (int)ctx->nworkers;
    in->self_index = ctx->self_index;
    in->job_name = ctx->opts.job_name;
    in->port = ctx->opts.port;
    in->mode = ctx->opts.address_mode;
    in->generation = generation;
    in->complete = ctx->complete;
    in->megascale_port = ctx->megascale_port;
    if (ctx->num_slices > 1 && !is_node_path(ctx)) {
        /* GKE's TPU_WORKER_HOSTNAMES names this slice only (render.h,
         * slice_only): tpu.env and jax.env, not the global lists. */
        in->slice_only = true;
        in->slices = ctx->num_slices;
        in->slice_id = ctx->slice_id;
        in->megascale_coordinator = ctx->megascale_coordinator;
        in->expected = 0;
        /* Slice 0 names its own worker 0; another slice needs the variable. */
        in->complete =
            ctx->slice_complete && (ctx->slice_id == 0 || ctx->megascale_coordinator != NULL);
        if (ctx->self_index >= 0) {
            in->self_index = ctx->slice_id * (int)ctx->nworkers + ctx->self_index;
        }
    }
}

/* A render error of tpumesh-init. The init container's worker list is
 * static configuration (GKE's TPU_WORKER_HOSTNAMES, flags, annotations), so
 * a list that does not make a complete job is a configuration error (exit
 * 2), like an invalid worker value. */
static int render_failed(struct mesh_err *err, int rc)
{
    if (rc == -MESH_E_INCOMPLETE && err != NULL) {
        err->code = MESH_E_CONFIG;
    }
    return mesh_err_prefix(err, "render");
}

static bool is_node_path(const struct mesh_init *ctx)
{
    return ctx->kind == MESH_TPU_NODE_GRPC || ctx->kind == MESH_TPU_NODE_API;
}

/* Render everything for one generation into out (text files via the
 * renderers, tf_config.json replaced by the cluster_spec on the TPU Node
 * path). topology.pb is added by the caller. */
static int render_set(const struct mesh_init *ctx, uint64_t generation, struct mesh_render_out *out,
                      struct mesh_err *err)
{
    struct mesh_render_input in;
    fill_input(ctx, generation, &in);
    if (!is_node_path(ctx)) {
        return mesh_render_all(&in, out, err);
    }
    int rc = mesh_render_topology_json(&in, &out->data[MESH_FILE_TOPOLOGY_JSON],
                                       &out->len[MESH_FILE_TOPOLOGY_JSON], err);
    if (rc < 0) {
        return rc;
    }
    if (ctx->nendpoints == 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "the TPU Node has no gRPC endpoints");
    }
    const char **hosts = mesh_calloc(ctx->nendpoints, sizeof(*hosts));
    int *ports = mesh_calloc(ctx->nendpoints, sizeof(*ports));
    for (size_t i = 0; i < ctx->nendpoints; i++) {
        hosts[i] = ctx->endpoints[i].ip;
        ports[i] = ctx->endpoints[i].port > 0 ? ctx->endpoints[i].port : MESH_RENDER_TPU_NODE_PORT;
    }
    rc = mesh_render_node_tf_config(hosts, ports, ctx->nendpoints, &out->data[MESH_FILE_TF_CONFIG],
                                    &out->len[MESH_FILE_TF_CONFIG], err);
    mesh_free(hosts);
    mesh_free(ports);
    return rc;
}

/* The TopologyProto bytes to publish (docs/DESIGN.md §4, §6): exactly what the
 * TPU returned on the TPU Node path, else the one built from the derived
 * slice (topo.c), else none (slice unknown). *out_built is owned by the
 * caller (mesh_free) and NULL when nothing was built. */
static int topology_pb(const struct mesh_init *ctx, struct mesh_publish_file *f,
                       uint8_t **out_built, struct mesh_err *err)
{
    f->name = mesh_render_file_name(MESH_FILE_TOPOLOGY_PB);
    f->data = NULL;
    f->len = 0;
    f->differs = false;
    *out_built = NULL;
    if (ctx->topology_pb != NULL) {
        f->data = ctx->topology_pb;
        f->len = ctx->topology_pb_len;
        return 0;
    }
    if (!ctx->have_slice) {
        return 0;
    }
    size_t len = 0;
    int rc = mesh_topo_build(&ctx->slice, out_built, &len, err);
    if (rc < 0) {
        return mesh_err_prefix(err, "topology.pb for %s %s", ctx->slice.accelerator_type,
                               ctx->slice.topology);
    }
    f->data = *out_built;
    f->len = len;
    return 0;
}

static void to_files(const struct mesh_render_out *r, struct mesh_publish_file files[])
{
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        files[i].name = mesh_render_file_name((enum mesh_render_file_id)i);
        files[i].data = r->data[i];
        files[i].len = r->len[i];
        files[i].differs = false;
    }
}

/* Warn about an env line a trainer could not export (the files are still
 * right, and tf_config.json can be read instead). */
static void warn_long_env_lines(const struct mesh_render_out *r)
{
    static const enum mesh_render_file_id envs[] = {MESH_FILE_DTENSOR_ENV, MESH_FILE_TPU_ENV};
    for (size_t k = 0; k < sizeof(envs) / sizeof(envs[0]); k++) {
        const char *key = NULL;
        size_t key_len = 0;
        size_t n = mesh_render_env_longest(r->data[envs[k]], r->len[envs[k]], &key, &key_len);
        if (n > MESH_RENDER_ENV_STRING_MAX) {
            mesh_warn(MOD,
                      "%s: %.*s is %zu bytes exported, above Linux's %d-byte limit for one "
                      "environment string; exporting it makes exec fail (E2BIG): use shorter "
                      "host names or read tf_config.json instead",
                      mesh_render_file_name(envs[k]), (int)key_len, key, n,
                      MESH_RENDER_ENV_STRING_MAX);
        }
    }
}

static bool r_has(const struct mesh_publish_file files[], enum mesh_render_file_id id)
{
    return files[id].data != NULL;
}

static bool all_current(const char *dir, const struct mesh_publish_file files[], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (files[i].data != NULL &&
            !mesh_publish_is_current(dir, files[i].name, files[i].data, files[i].len)) {
            return false;
        }
    }
    return true;
}

int mesh_init_publish(struct mesh_init *ctx, struct mesh_err *err)
{
    const char *dir = ctx->opts.out_dir != NULL ? ctx->opts.out_dir : "/var/run/tpumesh";
    uint64_t gen = 0;
    bool found = false;
    int rc = mesh_publish_read_generation(dir, &gen, &found, err);
    if (rc < 0) {
        return rc;
    }
    if (gen >= MESH_RENDER_GENERATION_MAX) {
        mesh_warn(MOD, "generation %llu in %s/topology.json is at its limit: restarting at 1",
                  (unsigned long long)gen, dir);
        gen = 0;
        found = false;
    }

    struct mesh_render_out r;
    struct mesh_publish_file files[MESH_FILE__COUNT];
    mesh_render_out_init(&r);
    mesh_autofree uint8_t *pb = NULL;
    rc = topology_pb(ctx, &files[MESH_FILE_TOPOLOGY_PB], &pb, err);
    if (rc < 0) {
        return rc;
    }
    struct mesh_publish_file pb_file = files[MESH_FILE_TOPOLOGY_PB];
    /* Same content as on disk at the same generation: nothing to do. */
    if (found) {
        rc = render_set(ctx, gen, &r, err);
        if (rc < 0) {
            mesh_render_out_cleanup(&r);
            return render_failed(err, rc);
        }
        to_files(&r, files);
        files[MESH_FILE_TOPOLOGY_PB] = pb_file;
        bool same = all_current(dir, files, MESH_FILE__COUNT);
        mesh_render_out_cleanup(&r);
        if (same) {
            mesh_info(MOD, "%s is current at generation %llu: nothing rewritten", dir,
                      (unsigned long long)gen);
            return 0;
        }
    }

    rc = render_set(ctx, gen + 1, &r, err);
    if (rc < 0) {
        mesh_render_out_cleanup(&r);
        return render_failed(err, rc);
    }
    warn_long_env_lines(&r);
    to_files(&r, files);
    files[MESH_FILE_TOPOLOGY_PB] = pb_file;
    size_t written = 0;
    rc = mesh_publish_files(dir, files, MESH_FILE__COUNT, &written, err);
    mesh_render_out_cleanup(&r);
    if (rc < 0) {
        return rc;
    }
    if (is_node_path(ctx)) {
        mesh_info(MOD, "TPU Node path: dtensor.env, tpu.env and jax.env are not written (the "
                       "pod is a single TensorFlow client of the TPU)");
    } else if (ctx->num_slices > 1 && r_has(files, MESH_FILE_TPU_ENV)) {
        mesh_info(MOD,
                  "multislice: tpu.env and jax.env written for slice %d of %d; the sidecar "
                  "publishes dtensor.env and tf_config.json once every slice's workers are known",
                  ctx->slice_id, ctx->num_slices);
    } else if (!ctx->complete) {
        mesh_info(MOD, "worker list incomplete: only topology.json and topology.pb written; the "
                       "sidecar "
                       "publishes the env files once every worker is known");
    }
    mesh_info(MOD, "published generation %llu to %s (%zu file(s) written)",
              (unsigned long long)(gen + 1), dir, written);
    return 0;
}
