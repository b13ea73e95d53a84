/*
 * resolve.c - the resolve step of tpumesh-init (see init.h). Being written; until
 * then the step reports that it is unavailable.
 */
#include "init.h"

int mesh_init_resolve(struct mesh_init *ctx, struct mesh_err *err)
{
    (void)ctx;
    return mesh_err_set(err, MESH_E_CONFIG, 0, "the resolve step is not available in this build");
}
