/*
 * fuzz_k8s_watch.c - the watch-stream framer and the event and Status
 * decoders never crash, never exceed their bounds, and frame the same
 * stream identically whatever the chunking (list pages: fuzz_k8s_list.c);
 * an event without its metadata.managedFields decodes to the same event, its
 * object to the parsed one without that member.
 *
 * Input: byte 0 picks the chunk size (1..64), the rest is the stream.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/k8s_watch.h"
#include "core/mem.h"
#include "fuzz_tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define EVENT_MAX 4096

struct sink {
    struct mesh_buf lines; /* every line, '\n'-joined, to compare chunkings */
    size_t events;
};

/* Cutting object.metadata.managedFields out of the event's text must give
 * the same event, its object the tree cJSON gives once that member is
 * deleted from the parsed one (when names are not escaped and object and
 * metadata are not duplicated, which the text scan does not interpret). */
static void check_strip(const char *line, size_t len, const struct mesh_k8s_watch_event *ev)
{
    if (memchr(line, '\\', len) != NULL || fuzz_count_key(ev->root, "object") > 1 ||
        fuzz_count_key(ev->object, "metadata") > 1) {
        return;
    }
    struct mesh_buf scratch;
    mesh_buf_init(&scratch, EVENT_MAX);
    size_t n = 0;
    const char *cut = mesh_k8s_watch_strip_managed_fields(line, len, &scratch, &n);
    cJSON *want = cJSON_Duplicate(ev->object, true);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(want, "metadata");
    bool removed =
        cJSON_IsObject(md) && cJSON_GetObjectItemCaseSensitive(md, "managedFields") != NULL;
    if (removed) {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    }
    struct mesh_k8s_watch_event ev2;
    if ((cut != line) != removed ||
        mesh_k8s_watch_decode_event(cut, n, EVENT_MAX, &ev2, NULL) != 0) {
        abort(); /* the text cut and the tree edit disagree, or the cut broke the event */
    }
    if (ev2.type != ev->type || strcmp(ev2.key, ev->key) != 0 || strcmp(ev2.rv, ev->rv) != 0 ||
        !fuzz_same_tree(ev2.object, want)) {
        abort();
    }
    mesh_k8s_watch_event_cleanup(&ev2);
    cJSON_Delete(want);
    mesh_buf_cleanup(&scratch);
}

static int on_line(void *ctx, const char *line, size_t len, struct mesh_err *err)
{
    struct sink *s = ctx;
    mesh_buf_append(&s->lines, line, len, NULL);
    mesh_buf_append(&s->lines, "\n", 1, NULL);
    struct mesh_k8s_watch_event ev;
    if (mesh_k8s_watch_decode_event(line, len, EVENT_MAX, &ev, err) == 0) {
        check_strip(line, len, &ev);
        s->events++;
        (void)mesh_k8s_watch_rv_cmp(ev.rv, "1000");
        if (ev.type == MESH_K8S_EV_ERROR) {
            (void)mesh_k8s_watch_status_is_expired(&ev.status);
        }
        mesh_k8s_watch_event_cleanup(&ev);
    }
    return 0;
}

static int frame(const uint8_t *p, size_t n, size_t step, struct sink *s)
{
    struct mesh_k8s_watch_framer f;
    struct mesh_err err;
    mesh_k8s_watch_framer_init(&f, EVENT_MAX);
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += step) {
        size_t k = n - off < step ? n - off : step;
        rc = mesh_k8s_watch_framer_feed(&f, (const char *)p + off, k, on_line, s, &err);
        if (f.partial.len > EVENT_MAX) {
            abort(); /* the bound was not enforced */
        }
    }
    mesh_k8s_watch_framer_cleanup(&f);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    size_t step = (size_t)(data[0] % 64) + 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    struct sink a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    mesh_buf_init(&a.lines, (size_t)1 << 24);
    mesh_buf_init(&b.lines, (size_t)1 << 24);
    int ra = frame(p, n, step, &a);
    int rb = frame(p, n, n ? n : 1, &b);
    if (ra != rb || a.events != b.events || a.lines.len != b.lines.len ||
        (a.lines.len && memcmp(a.lines.data, b.lines.data, a.lines.len) != 0)) {
        abort(); /* chunking changed the result */
    }
    mesh_buf_cleanup(&a.lines);
    mesh_buf_cleanup(&b.lines);

    struct mesh_k8s_watch_status st;
    (void)mesh_k8s_watch_decode_status((const char *)p, n, &st, NULL);
    (void)mesh_k8s_watch_parse_retry_after((const char *)p, n, 30);
    return 0;
}
