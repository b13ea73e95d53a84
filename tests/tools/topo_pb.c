/*
 * topo_pb.c - test driver for tests/integration/test_topology_pb.py: runs
 * our TopologyProto code on files so a foreign encoder/decoder (Google's
 * protobuf library) can be compared with it.
 *
 *   topo_pb build TYPE [TOPOLOGY [CHIPS_PER_HOST]]   TopologyProto bytes on stdout
 *   topo_pb parse FILE                               one JSON line describing it
 *   topo_pb check FILE TYPE [TOPOLOGY [CHIPS_PER_HOST]]
 *                                                    parse, then check against the slice
 * Exit 0 on success, 1 when our code rejects the input (the JSON line then
 * has "ok":false, "code" and "error"), 2 on usage errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/accel.h"
#include "core/json.h"
#include "core/mem.h"
#include "core/topo.h"

static int usage(void)
{
    fprintf(stderr, "usage: topo_pb build TYPE [TOPOLOGY [CPH]] | parse FILE | "
                    "check FILE TYPE [TOPOLOGY [CPH]]\n");
    return 2;
}

static int fail_json(const struct mesh_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 0);
    cJSON_AddStringToObject(o, "code", mesh_strerror(err->code));
    cJSON_AddStringToObject(o, "error", err->msg);
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
    return 1;
}

static int derive_args(int argc, char **argv, int first, struct mesh_slice *s, struct mesh_err *err)
{
    long long cph = 0;
    if (argc > first + 2 &&
        mesh_parse_ll(argv[first + 2], strlen(argv[first + 2]), 0, 64, &cph, err) != 0) {
        return -MESH_E_INVAL;
    }
    struct mesh_slice_spec in = {argv[first], NULL, argc > first + 1 ? argv[first + 1] : NULL,
                                 (int)cph, 0};
    return mesh_slice_derive(&in, s, err);
}

static uint8_t *read_file(const char *path, size_t *out_len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    uint8_t *b = mesh_malloc(cap);
    size_t n;
    while ((n = fread(b + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            cap *= 2;
            b = mesh_realloc(b, cap);
        }
    }
    fclose(f);
    *out_len = len;
    return b;
}

static void print_info(const struct mesh_topo_info *info)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddItemToObject(o, "mesh_shape", cJSON_CreateIntArray(info->mesh_shape, 4));
    cJSON_AddNumberToObject(o, "num_tasks", info->num_tasks);
    cJSON_AddNumberToObject(o, "devices_per_task", info->devices_per_task);
    cJSON_AddNumberToObject(o, "n_coords", (double)info->n_coords);
    cJSON *c = cJSON_AddArrayToObject(o, "coords");
    for (size_t i = 0; i < info->n_coords && i < 4096; i++) {
        cJSON_AddItemToArray(c, cJSON_CreateNumber(info->coords[i]));
    }
    cJSON_AddBoolToObject(o, "has_hardware_feature", info->has_hardware_feature);
    cJSON_AddNumberToObject(o, "embedding_feature", info->embedding_feature);
    cJSON_AddNumberToObject(o, "missing_devices", info->missing_devices);
    cJSON_AddNumberToObject(o, "duplicate_devices", info->duplicate_devices);
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

int main(int argc, char **argv)
{
    struct mesh_err err;
    mesh_err_clear(&err);
    if (argc >= 3 && strcmp(argv[1], "build") == 0) {
        struct mesh_slice s;
        uint8_t *buf = NULL;
        size_t len = 0;
        if (derive_args(argc, argv, 2, &s, &err) != 0 ||
            mesh_topo_build(&s, &buf, &len, &err) != 0) {
            return fail_json(&err);
        }
        int rc = fwrite(buf, 1, len, stdout) == len ? 0 : 1;
        mesh_free(buf);
        return rc;
    }
    if (argc >= 3 && (strcmp(argv[1], "parse") == 0 || strcmp(argv[1], "check") == 0)) {
        bool check = strcmp(argv[1], "check") == 0;
        if (check && argc < 4) {
            return usage();
        }
        size_t len = 0;
        uint8_t *buf = read_file(argv[2], &len);
        if (buf == NULL) {
            return 2;
        }
        struct mesh_topo_info info;
        int rc = mesh_topo_parse(buf, len, &info, &err);
        mesh_free(buf);
        if (rc != 0) {
            return fail_json(&err);
        }
        if (check) {
            struct mesh_slice s;
            if (derive_args(argc, argv, 3, &s, &err) != 0 ||
                mesh_topo_check_slice(&info, &s, &err) != 0) {
                mesh_topo_info_cleanup(&info);
                return fail_json(&err);
            }
        }
        print_info(&info);
        mesh_topo_info_cleanup(&info);
        return 0;
    }
    return usage();
}
