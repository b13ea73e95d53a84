/*
 * fuzz_tf_master.c - decoding what a TPU's TensorFlow master sends back
 * (common/core/tf_graph.c) never crashes, leaks or reads out of bounds:
 * the first input byte picks the decoder, the rest is the reply.
 *   0: RunStepResponse (fetch ConfigureDistributedTPU:0), 1: CreateSessionResponse,
 *   2: RunStepResponse, then the returned topology through mesh_topo_parse,
 *   3: the rest is a comma list of task addresses: build the CreateSessionRequest
 *      (option B for even lengths, option A for odd ones) and check it decodes
 *      back to the same cluster_def and target (or to none).
 * A successful decode must hand back a value that is consistent with itself.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/core/protobuf/master.pb-c.h"

#include "core/mem.h"
#include "core/tf_graph.h"
#include "core/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FUZZ_TASKS 64

/* Mode 3: the request builder is a pure transform; what it accepts must
 * round-trip through protobuf-c's decoder unchanged. */
static void fuzz_create_session(const uint8_t *buf, size_t len)
{
    char *copy = mesh_strndup((const char *)buf, len);
    const char *tasks[MAX_FUZZ_TASKS];
    size_t n = 0;
    char *p = copy;
    while (n < MAX_FUZZ_TASKS) {
        tasks[n++] = p;
        char *comma = strchr(p, ',');
        if (comma == NULL) {
            break;
        }
        *comma = '\0';
        p = comma + 1;
    }
    struct mesh_tf_session_spec spec = {tasks, n, 1000, (len % 2) == 1};
    uint8_t *req = NULL;
    size_t rl = 0;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_tf_graph_create_session_request(&spec, &req, &rl, &err) == 0) {
        Tensorflow__CreateSessionRequest *r =
            tensorflow__create_session_request__unpack(NULL, rl, req);
        if (r == NULL || r->config == NULL || r->graph_def == NULL || r->graph_def->n_node != 1) {
            abort();
        }
        if (spec.server_cluster) {
            /* Option A: no cluster_def, no target. */
            if (r->config->cluster_def != NULL || r->target[0] != '\0') {
                abort();
            }
            n = 0;
        } else if (r->config->cluster_def == NULL || r->config->cluster_def->n_job != 1 ||
                   r->config->cluster_def->job[0]->n_tasks != n ||
                   strncmp(r->target, "grpc://", 7) != 0 || strcmp(r->target + 7, tasks[0]) != 0) {
            abort();
        }
        for (size_t i = 0; i < n; i++) {
            const Tensorflow__JobDef__TasksEntry *e = r->config->cluster_def->job[0]->tasks[i];
            if (e->key != (int32_t)i || strcmp(e->value, tasks[i]) != 0) {
                abort();
            }
        }
        tensorflow__create_session_request__free_unpacked(r, NULL);
        mesh_free(req);
    } else if (req != NULL || err.msg[0] == '\0') {
        abort();
    }
    mesh_free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    uint8_t mode = data[0] % 4;
    const uint8_t *buf = data + 1;
    size_t len = size - 1;
    struct mesh_err err;
    mesh_err_clear(&err);

    if (mode == 3) {
        fuzz_create_session(data + 1, size - 1);
        return 0;
    }
    if (mode == 1) {
        char *handle = NULL;
        if (mesh_tf_graph_parse_create_session_response(buf, len, &handle, &err) == 0) {
            size_t hl = strlen(handle);
            if (hl == 0 || hl > MESH_TF_MAX_HANDLE) {
                abort();
            }
            /* A handle we accept must round-trip into the next requests. */
            uint8_t *req = NULL;
            size_t rl = 0;
            if (mesh_tf_graph_run_step_request(handle, MESH_TF_CONFIGURE_FETCH, 1000, &req, &rl,
                                               &err) != 0) {
                abort();
            }
            mesh_free(req);
            mesh_free(handle);
        } else if (err.code == 0 || err.msg[0] == '\0') {
            abort(); /* every failure must say why */
        }
        return 0;
    }

    uint8_t *value = NULL;
    size_t vlen = 0;
    int rc = mesh_tf_graph_parse_run_step_response(buf, len, MESH_TF_CONFIGURE_FETCH, &value, &vlen,
                                                   &err);
    if (rc == 0) {
        if (value == NULL || vlen > len || vlen > MESH_TF_MAX_TOPOLOGY) {
            abort();
        }
        if (mode == 2) {
            struct mesh_topo_info info;
            mesh_topo_info_init(&info);
            if (mesh_topo_parse(value, vlen, &info, &err) == 0) {
                mesh_topo_info_cleanup(&info);
            }
        }
        mesh_free(value);
    } else if (err.code == 0 || err.msg[0] == '\0') {
        abort();
    }
    return 0;
}
