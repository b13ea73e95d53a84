/*
 * init.c - lifecycle of the tpumesh-init context and the error-code to
 * exit-code table (init.h, docs/DESIGN.md §6).
 */
#include <string.h>

#include "core/mem.h"
#include "init.h"

void mesh_init_init(struct mesh_init *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->opts.port = 10000;
    ctx->opts.timeout_s = 600;
    ctx->opts.address_mode = MESH_ADDR_AUTO;
    ctx->self_index = -1;
    ctx->num_slices = 1;
}

void mesh_init_cleanup(struct mesh_init *ctx)
{
    struct mesh_init_opts *o = &ctx->opts;
    char **strs[] = {&o->tpu,           &o->zone,
                     &o->project,       &o->accelerator_type,
                     &o->topology,      &o->annotations_file,
                     &o->dev_dir,       &o->out_dir,
                     &o->metadata_host, &o->tpu_api_endpoint,
                     &o->job_name,      &o->tf_version,
                     &ctx->tpu_source,  &ctx->megascale_coordinator};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        mesh_free(*strs[i]);
        *strs[i] = NULL;
    }
    mesh_free(ctx->workers);
    mesh_free(ctx->endpoints);
    mesh_free(ctx->topology_pb);
    mesh_init_init(ctx);
}

int mesh_init_exit_code(int code)
{
    if (code < 0) {
        code = -code;
    }
    switch (code) {
    case MESH_OK:
        return 0;
    case MESH_E_CONFIG:
    case MESH_E_INVAL:
    case MESH_E_PARSE:
    case MESH_E_RANGE:
    case MESH_E_TOOBIG:
        return 2;
    case MESH_E_NOTFOUND:
        return 3;
    case MESH_E_NOTREADY:
    case MESH_E_TIMEOUT:
    case MESH_E_BUSY:
        return 4;
    case MESH_E_AUTH:
    case MESH_E_FORBIDDEN:
    case MESH_E_API:
        return 5;
    case MESH_E_PUBLISH:
    case MESH_E_IO:
        return 6;
    default:
        return 1;
    }
}
