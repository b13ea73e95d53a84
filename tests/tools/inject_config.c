/*
 * inject_config.c - prints the injector's config as JSON (keys initContainer,
 * sidecar, volumes, volumeMounts) the way tpumesh-injector reads it: the
 * built-in default without an argument, else the YAML file named. Tests
 * compare it with the chart's rendering.
 */
#include <stdio.h>

#include "core/buf.h"
#include "core/inject.h"
#include "core/mem.h"

int main(int argc, char **argv)
{
    struct mesh_inject_config c;
    struct mesh_err err = {0};
    int rc;
    if (argc > 1) {
        FILE *f = fopen(argv[1], "rb");
        if (f == NULL) {
            perror(argv[1]);
            return 2;
        }
        struct mesh_buf b;
        mesh_buf_init(&b, MESH_INJECT_CONFIG_MAX + 1);
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            if (mesh_buf_append(&b, chunk, n, &err) < 0) {
                break;
            }
        }
        fclose(f);
        rc = mesh_inject_config_parse(mesh_buf_str(&b), b.len, &c, &err);
        mesh_buf_cleanup(&b);
    } else {
        rc = mesh_inject_config_default(&c, &err);
    }
    if (rc < 0) {
        fprintf(stderr, "inject_config: %s\n", err.msg);
        return 1;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "initContainer", cJSON_Duplicate(c.init, true));
    cJSON_AddItemToObject(o, "sidecar", cJSON_Duplicate(c.sidecar, true));
    cJSON_AddItemToObject(o, "volumes", cJSON_Duplicate(c.volumes, true));
    cJSON_AddItemToObject(o, "volumeMounts", cJSON_Duplicate(c.mounts, true));
    char *text = cJSON_Print(o);
    puts(text);
    cJSON_free(text);
    cJSON_Delete(o);
    mesh_inject_config_cleanup(&c);
    return 0;
}
