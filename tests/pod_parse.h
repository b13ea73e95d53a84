/*
 * tests/pod_parse.h - a Pod's JSON text read as the sidecar reads one: parsed
 * (core/json.h: at most 4 MiB, \u0000 masked) and extracted
 * (mesh_k8s_pod_extract). The programs get the tree from the list splitter or
 * the watch decoder; the tests and fuzz targets start from text.
 */
#ifndef MESH_TESTS_POD_PARSE_H
#define MESH_TESTS_POD_PARSE_H

#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/k8s_pod.h"

/* -MESH_E_PARSE / -MESH_E_TOOBIG (out zeroed, invalid set) or what
 * mesh_k8s_pod_extract returns. */
static inline int test_pod_parse(const char *buf, size_t len, struct mesh_k8s_pod *out,
                                 struct mesh_err *err)
{
    mesh_autocjson cJSON *j = mesh_json_parse(buf, len, (size_t)4 << 20, err);
    if (j == NULL) {
        memset(out, 0, sizeof(*out));
        out->invalid = true;
        return mesh_err_prefix(err, "pod JSON");
    }
    return mesh_k8s_pod_extract(j, out, err);
}

#endif
