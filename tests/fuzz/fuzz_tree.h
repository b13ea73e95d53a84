/*
 * fuzz_tree.h - oracle helpers for the fuzz targets that compare cJSON
 * trees (fuzz_k8s_list, fuzz_k8s_watch). Written apart from the code they
 * check, so an oracle never calls what it judges.
 */
#ifndef MESH_FUZZ_TREE_H
#define MESH_FUZZ_TREE_H

#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

/* Members named key in o, counted (cJSON keeps duplicates). */
static inline int fuzz_count_key(const cJSON *o, const char *key)
{
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, o)
    {
        n += c->string != NULL && strcmp(c->string, key) == 0;
    }
    return n;
}

/* Same trees, compared as their compact prints (cJSON_Compare calls two
 * infinities from "1e999" different). */
static inline bool fuzz_same_tree(const cJSON *a, const cJSON *b)
{
    char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
    bool same = x != NULL && y != NULL && strcmp(x, y) == 0;
    cJSON_free(x);
    cJSON_free(y);
    return same;
}

#endif
