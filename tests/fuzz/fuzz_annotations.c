/*
 * fuzz_annotations.c - the downward-API annotations parser and the
 * tpumesh.dev key validation, with properties:
 *  - round trip: every parsed file, written back in the kubelet's format
 *    (key="Go-quoted value", one per line) and parsed again, gives the same
 *    keys and values in the same order; values never hold a NUL;
 *  - mesh_annotations_get finds each parsed key's own value;
 *  - unquote is the inverse of quoting: a decoded value quoted again
 *    decodes to itself;
 *  - a configuration that validates has every number inside its documented
 *    range and every string equal to its annotation.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "core/annotations.h"
#include "core/buf.h"
#include "core/mem.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Go-style "%q" of v: printable ASCII as is, '"' and '\\' escaped, any
 * other byte as \xHH (which Go's strconv.Unquote also reads). */
static void quote(struct mesh_buf *b, const char *v)
{
    static const char hex[] = "0123456789abcdef";
    (void)mesh_buf_append(b, "\"", 1, NULL);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            (void)mesh_buf_append(b, e, 2, NULL);
        } else if (*p >= 0x20 && *p < 0x7f) {
            (void)mesh_buf_append(b, p, 1, NULL);
        } else {
            char e[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
            (void)mesh_buf_append(b, e, 4, NULL);
        }
    }
    (void)mesh_buf_append(b, "\"", 1, NULL);
}

static void check_round_trip(const struct mesh_annotations *a)
{
    struct mesh_buf b;
    mesh_buf_init(&b, SIZE_MAX);
    for (size_t i = 0; i < a->n; i++) {
        FUZZ_CHECK(a->items[i].key[0] != '\0');
        FUZZ_CHECK(mesh_annotations_get(a, a->items[i].key) == a->items[i].value);
        (void)mesh_buf_printf(&b, NULL, "%s%s=", i ? "\n" : "", a->items[i].key);
        quote(&b, a->items[i].value);
    }
    struct mesh_annotations again;
    struct mesh_err err;
    int rc = mesh_annotations_parse(b.data ? b.data : "", b.len, &again, &err);
    /* \xHH escapes may grow a file past the size limit; nothing else may fail. */
    FUZZ_CHECK(rc == 0 || (rc == -MESH_E_TOOBIG && b.len > MESH_ANNOTATIONS_MAX_INPUT));
    if (rc == 0) {
        FUZZ_CHECK(again.n == a->n);
        for (size_t i = 0; i < a->n; i++) {
            FUZZ_CHECK(strcmp(again.items[i].key, a->items[i].key) == 0);
            FUZZ_CHECK(strcmp(again.items[i].value, a->items[i].value) == 0);
        }
        mesh_annotations_cleanup(&again);
    }
    mesh_buf_cleanup(&b);
}

static void check_config(const struct mesh_annotations *a)
{
    struct mesh_err err;
    struct mesh_annotations_config c;
    if (mesh_annotations_config(a, &c, &err) != 0) {
        return;
    }
    FUZZ_CHECK(c.port >= 0 && c.port <= 65535);
    FUZZ_CHECK(c.megascale_port >= 0 && c.megascale_port <= 65535);
    FUZZ_CHECK(c.expected_workers >= 0 && c.expected_workers <= 65536);
    FUZZ_CHECK(c.timeout_s >= 0 && c.timeout_s <= 86400);
    const struct {
        const char *key;
        const char *got;
    } strs[] = {
        {MESH_ANNOTATION_PREFIX "tpu", c.tpu},
        {MESH_ANNOTATION_PREFIX "zone", c.zone},
        {MESH_ANNOTATION_PREFIX "project", c.project},
        {MESH_ANNOTATION_PREFIX "job-name", c.job_name},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        const char *want = mesh_annotations_get(a, strs[i].key);
        FUZZ_CHECK((want == NULL) == (strs[i].got == NULL));
        FUZZ_CHECK(want == NULL || strcmp(want, strs[i].got) == 0);
    }
    mesh_annotations_config_cleanup(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    struct mesh_annotations a;
    if (mesh_annotations_parse((const char *)data, size, &a, &err) == 0) {
        FUZZ_CHECK(a.n <= MESH_ANNOTATIONS_MAX_ITEMS);
        check_round_trip(&a);
        check_config(&a);
        mesh_annotations_cleanup(&a);
    }
    char *v = NULL;
    if (mesh_annotations_unquote((const char *)data, size, &v, &err) == 0) {
        FUZZ_CHECK(strlen(v) < size);
        struct mesh_buf b;
        mesh_buf_init(&b, SIZE_MAX);
        quote(&b, v);
        char *back = NULL;
        FUZZ_CHECK(mesh_annotations_unquote(b.data, b.len, &back, &err) == 0);
        FUZZ_CHECK(strcmp(back, v) == 0);
        mesh_free(back);
        mesh_buf_cleanup(&b);
        mesh_free(v);
    }
    return 0;
}
