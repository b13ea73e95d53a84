/*
 * fuzz_k8s_list.c - the list splitter never crashes, never holds
 * more than one item, gives the same result for every chunking of the same
 * bytes, and agrees with cJSON run here on the whole page:
 *   - when the splitter accepts a page, cJSON parses the same bytes, and its
 *     "items" elements are the trees the splitter handed out (compared as
 *     compact prints; the splitter's parse reads a \u0000 escape as U+FFFD,
 *     core/json.h, so the page is masked the same way first), and its
 *     metadata.resourceVersion / continue and kind are what the splitter says;
 *   - when cJSON parses the bytes as an object, its compact re-print (valid
 *     JSON by construction) is accepted by the splitter, unless it lacks what
 *     a list needs or has a duplicate member the splitter rejects on purpose.
 * Any disagreement aborts.
 *
 * Input: byte 0 seeds the chunking (random chunk sizes 1..64 from it), the
 * rest is the body.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/k8s_watch.h"
#include "core/mem.h"
#include "fuzz_tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ITEM_MAX ((size_t)1 << 20)

struct result {
    int rc;
    struct mesh_err err;
    cJSON *items; /* owned: every item parsed alone, in order */
    struct mesh_k8s_list_meta meta;
};

static int on_item(void *ctx, const cJSON *item, struct mesh_err *err)
{
    (void)err;
    struct result *r = ctx;
    /* A copy on the heap: the tree is the splitter's and goes when this returns. */
    cJSON *j = item != NULL ? cJSON_Duplicate(item, true) : NULL;
    if (j == NULL) {
        abort(); /* the splitter handed out no tree */
    }
    cJSON_AddItemToArray(r->items, j);
    return 0;
}

static void scan(const char *p, size_t n, uint32_t seed, struct result *r)
{
    memset(r, 0, sizeof(*r));
    r->items = cJSON_CreateArray();
    struct mesh_k8s_list_scanner s;
    mesh_k8s_list_scanner_init(&s, ITEM_MAX, 0, on_item, r);
    size_t off = 0;
    int rc = 0;
    while (rc == 0 && off < n) {
        size_t step = n - off;
        if (seed != 0) {
            seed = seed * 1103515245u + 12345u;
            size_t k = (size_t)((seed >> 16) % 64) + 1;
            step = k < step ? k : step;
        }
        rc = mesh_k8s_list_scanner_feed(&s, p + off, step, &r->err);
        off += step;
        if (s.item.len > ITEM_MAX) {
            abort(); /* the bound was not enforced */
        }
    }
    if (rc == 0) {
        rc = mesh_k8s_list_scanner_finish(&s, &r->meta, &r->err);
    }
    r->rc = rc;
    mesh_k8s_list_scanner_cleanup(&s);
}

static void result_cleanup(struct result *r)
{
    cJSON_Delete(r->items);
    if (r->rc == 0) {
        mesh_k8s_list_meta_cleanup(&r->meta);
    }
}

static const char *str_or_empty(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The scanner's accepted page must match cJSON's view of the same bytes. */
static void check_against_cjson(const char *p, size_t n, const struct result *r)
{
    char *masked = mesh_malloc(n + 1);
    memcpy(masked, p, n);
    mesh_json_mask_nul_escapes(masked, n);
    cJSON *doc = cJSON_ParseWithLength(masked, n);
    mesh_free(masked);
    if (doc == NULL) {
        abort(); /* the scanner accepted what cJSON rejects */
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(doc, "items");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(doc, "metadata");
    if (!cJSON_IsArray(items) || !fuzz_same_tree(items, r->items) ||
        strcmp(str_or_empty(md, "resourceVersion"), r->meta.rv) != 0 ||
        strcmp(str_or_empty(md, "continue"), r->meta.cont ? r->meta.cont : "") != 0 ||
        strcmp(str_or_empty(doc, "kind"), r->meta.kind) != 0) {
        abort();
    }
    cJSON_Delete(doc);
}

/* Nesting depth of a tree (arrays and objects). */
static int depth(const cJSON *j)
{
    int d = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, j)
    {
        int k = depth(c);
        d = k > d ? k : d;
    }
    return (cJSON_IsArray(j) || cJSON_IsObject(j)) ? d + 1 : 0;
}

/* A document cJSON can print is valid JSON: the scanner must accept it when
 * it is a well-formed list, and agree on its items. */
static void check_reprint(const char *p, size_t n, uint32_t seed)
{
    cJSON *doc = cJSON_ParseWithLength(p, n);
    if (!cJSON_IsObject(doc) || depth(doc) > MESH_K8S_LIST_DEPTH_MAX) {
        cJSON_Delete(doc);
        return;
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(doc, "metadata");
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
    const cJSON *cont = cJSON_GetObjectItemCaseSensitive(md, "continue");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    size_t kl = cJSON_IsString(kind) ? strlen(kind->valuestring) : 0;
    bool listy =
        cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "items")) && cJSON_IsObject(md) &&
        cJSON_IsString(rv) && rv->valuestring[0] != '\0' &&
        strlen(rv->valuestring) < MESH_K8S_RV_MAX && strchr(rv->valuestring, '\0') != NULL &&
        (kind == NULL ||
         (cJSON_IsString(kind) && kl < MESH_K8S_LIST_KIND_MAX &&
          (kl == 0 || (kl >= 4 && strcmp(kind->valuestring + kl - 4, "List") == 0)))) &&
        (cont == NULL || cJSON_IsNull(cont) ||
         (cJSON_IsString(cont) && strlen(cont->valuestring) < MESH_K8S_LIST_CONT_MAX / 6)) &&
        fuzz_count_key(doc, "items") == 1 && fuzz_count_key(doc, "metadata") == 1 &&
        fuzz_count_key(doc, "kind") <= 1 && fuzz_count_key(md, "resourceVersion") == 1 &&
        fuzz_count_key(md, "continue") <= 1 && fuzz_count_key(md, "remainingItemCount") <= 1;
    char *text = listy ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (text == NULL) {
        return;
    }
    struct result r;
    scan(text, strlen(text), seed, &r);
    if (r.rc != 0) {
        abort(); /* valid list JSON rejected */
    }
    check_against_cjson(text, strlen(text), &r);
    result_cleanup(&r);
    cJSON_free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    uint32_t seed = (uint32_t)data[0] + 1;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct result whole, chunked;
    scan(p, n, 0, &whole);
    scan(p, n, seed, &chunked);
    if (whole.rc != chunked.rc || strcmp(whole.err.msg, chunked.err.msg) != 0 ||
        !fuzz_same_tree(whole.items, chunked.items)) {
        abort(); /* the chunking changed the result */
    }
    if (whole.rc == 0) {
        check_against_cjson(p, n, &whole);
    }
    result_cleanup(&whole);
    result_cleanup(&chunked);
    check_reprint(p, n, seed);
    return 0;
}
