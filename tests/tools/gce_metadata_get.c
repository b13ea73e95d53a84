/*
 * gce_metadata_get.c - test driver for the GCE metadata client: reads one
 * value with initcontainer/gce_metadata.c and prints it, so integration tests can
 * check every accessor against tests/sim/gce-metadata.
 *
 *   gce_metadata_get HOST[:PORT] project|zone|token-len|tpu-vm|raw PATH
 *
 * project, zone, ip: the value. token-len: the token's length (never the
 * token). tpu-vm: "type=<t> workers=<n> number=<k> first=<ip> HOST_BOUNDS=<v>".
 * raw PATH: the body of PATH. Exit 0, or the error on stderr and exit 1
 * (2 for usage).
 */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "initcontainer/gce_metadata.h"

static int get_value(const struct mesh_gce_metadata *md, const char *what, const char *path,
                     struct mesh_err *err)
{
    char *v = NULL;
    int rc;
    if (strcmp(what, "project") == 0) {
        rc = mesh_gce_metadata_project(md, &v, err);
    } else if (strcmp(what, "zone") == 0) {
        rc = mesh_gce_metadata_zone(md, &v, err);
    } else if (strcmp(what, "token-len") == 0) {
        rc = mesh_gce_metadata_token(md, &v, err);
        if (rc == 0) {
            printf("%zu\n", strlen(v));
            mesh_free(v);
            return 0;
        }
    } else {
        rc = mesh_gce_metadata_get(md, path, &v, err);
    }
    if (rc == 0) {
        printf("%s\n", v);
        mesh_free(v);
    }
    return rc;
}

static int get_tpu_vm(const struct mesh_gce_metadata *md, struct mesh_err *err)
{
    struct mesh_gce_tpu_vm vm;
    int rc = mesh_gce_metadata_tpu_vm(md, 64, &vm, err);
    if (rc < 0) {
        return rc;
    }
    const char *hb = mesh_annotations_get(&vm.env, "HOST_BOUNDS");
    printf("type=%s workers=%zu number=%d first=%s HOST_BOUNDS=%s\n",
           vm.accelerator_type ? vm.accelerator_type : "-", vm.nworkers, vm.worker_number,
           vm.nworkers > 0 ? vm.workers[0].ip : "-", hb ? hb : "-");
    mesh_gce_metadata_tpu_vm_cleanup(&vm);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "raw") == 0 && argc < 4)) {
        fprintf(stderr, "usage: gce_metadata_get HOST[:PORT] "
                        "project|zone|token-len|tpu-vm|raw PATH\n");
        return 2;
    }
    struct mesh_gce_metadata md;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_gce_metadata_init(&md, argv[1], &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    md.retry_delay_ms = 50;
    int rc = strcmp(argv[2], "tpu-vm") == 0
                 ? get_tpu_vm(&md, &err)
                 : get_value(&md, argv[2], argc > 3 ? argv[3] : NULL, &err);
    mesh_gce_metadata_cleanup(&md);
    if (rc < 0) {
        fprintf(stderr, "%s (%s)\n", err.msg, mesh_strerror(rc));
        return 1;
    }
    return 0;
}
