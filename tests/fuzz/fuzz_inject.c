/*
 * fuzz_inject.c - the AdmissionReview parser, the injection decision, the
 * JSON Patch and the response never crash, leak or read out of bounds; the
 * same bytes are also tried as the injector's YAML config. A patch, when
 * built, is valid JSON.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/inject.h"
#include "core/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    struct mesh_inject_config cfg;
    if (mesh_inject_config_default(&cfg, &err) != 0) {
        abort();
    }
    struct mesh_inject_review rv;
    if (mesh_inject_review_parse((const char *)data, size, &rv, &err) == 0) {
        struct mesh_inject_decision d;
        if (mesh_inject_decide(&cfg, &rv, &d, &err) == 0) {
            if (d.patch != NULL) {
                cJSON *p = cJSON_ParseWithLength(d.patch, d.patch_len);
                if (!cJSON_IsArray(p)) {
                    abort();
                }
                cJSON_Delete(p);
            }
            const char *w = "warning";
            char *resp = mesh_inject_response(rv.uid, &d, &w, 1, NULL, &err);
            mesh_free(resp);
            mesh_inject_decision_cleanup(&d);
        }
        mesh_inject_review_cleanup(&rv);
    }
    struct mesh_inject_config other;
    if (mesh_inject_config_parse((const char *)data, size, &other, &err) == 0) {
        mesh_inject_config_cleanup(&other);
    }
    mesh_inject_config_cleanup(&cfg);
    return 0;
}
