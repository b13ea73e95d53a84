/*
 * fuzz_tpu_api.c - Cloud TPU API node replies (JSON), with properties:
 *  - bounds: every string field is terminated inside its array, at most 4096
 *    endpoints, each a valid host with a port 1-65535;
 *  - idempotence: the parsed node written back as a node resource (state,
 *    health, acceleratorType, tensorflowVersion, networkEndpoints) parses to
 *    the same node.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/names.h"
#include "fuzz_check.h"
#include "initcontainer/tpu_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TERMINATED(a) (memchr((a), '\0', sizeof(a)) != NULL)

static char *write_back(const struct mesh_tpu_api_node *n)
{
    mesh_autocjson cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", n->state);
    cJSON_AddStringToObject(o, "health", n->health);
    cJSON_AddStringToObject(o, "acceleratorType", n->accelerator_type);
    cJSON_AddStringToObject(o, "tensorflowVersion", n->tensorflow_version);
    cJSON *eps = cJSON_AddArrayToObject(o, "networkEndpoints");
    for (size_t i = 0; i < n->nendpoints; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "ipAddress", n->endpoints[i].ip);
        cJSON_AddNumberToObject(e, "port", n->endpoints[i].port);
        cJSON_AddItemToArray(eps, e);
    }
    return cJSON_PrintUnformatted(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    struct mesh_tpu_api_node node;
    if (mesh_tpu_api_parse_node((const char *)data, size, &node, &err) != 0) {
        return 0;
    }
    FUZZ_CHECK(TERMINATED(node.state) && TERMINATED(node.health));
    FUZZ_CHECK(TERMINATED(node.accelerator_type) && TERMINATED(node.tensorflow_version));
    FUZZ_CHECK(node.nendpoints <= 4096);
    for (size_t i = 0; i < node.nendpoints; i++) {
        FUZZ_CHECK(TERMINATED(node.endpoints[i].ip));
        FUZZ_CHECK(mesh_names_is_host(node.endpoints[i].ip, strlen(node.endpoints[i].ip)));
        FUZZ_CHECK(node.endpoints[i].port >= 1 && node.endpoints[i].port <= 65535);
    }
    mesh_autofree char *text = write_back(&node);
    FUZZ_CHECK(text != NULL);
    struct mesh_tpu_api_node again;
    FUZZ_CHECK(mesh_tpu_api_parse_node(text, strlen(text), &again, &err) == 0);
    FUZZ_CHECK(strcmp(again.state, node.state) == 0 && strcmp(again.health, node.health) == 0);
    FUZZ_CHECK(strcmp(again.accelerator_type, node.accelerator_type) == 0);
    FUZZ_CHECK(strcmp(again.tensorflow_version, node.tensorflow_version) == 0);
    FUZZ_CHECK(again.nendpoints == node.nendpoints);
    for (size_t i = 0; i < node.nendpoints; i++) {
        FUZZ_CHECK(strcmp(again.endpoints[i].ip, node.endpoints[i].ip) == 0);
        FUZZ_CHECK(again.endpoints[i].port == node.endpoints[i].port);
    }
    mesh_tpu_api_node_cleanup(&again);
    mesh_tpu_api_node_cleanup(&node);
    return 0;
}
