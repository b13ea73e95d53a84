/*
 * k8s_watch.c - pure Kubernetes list/watch protocol pieces: newline framer,
 * event / list / Status decoders, resourceVersion comparison, backoff.
 * No I/O, clocks or randomness (docs/STYLE.md R8): time and jitter come in as
 * arguments. Wire facts are cited in k8s_watch.h.
 */
#include "k8s_watch.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"

/* ---- framer ------------------------------------------------------------ */

void mesh_k8s_watch_framer_init(struct mesh_k8s_watch_framer *f, size_t max)
{
    f->max = max ? max : MESH_K8S_EVENT_MAX_DEFAULT;
    mesh_buf_init(&f->partial, f->max);
}

void mesh_k8s_watch_framer_cleanup(struct mesh_k8s_watch_framer *f)
{
    mesh_buf_cleanup(&f->partial);
}

void mesh_k8s_watch_framer_reset(struct mesh_k8s_watch_framer *f)
{
    mesh_buf_reset(&f->partial);
}

size_t mesh_k8s_watch_framer_pending(const struct mesh_k8s_watch_framer *f)
{
    return f->partial.len;
}

/* Hand one complete line to fn: strip one trailing '\r' (servers behind
 * proxies may use CRLF) and skip lines that are only whitespace. */
static int emit_line(const char *line, size_t len, mesh_k8s_watch_line_fn fn, void *ctx,
                     struct mesh_err *err)
{
    if (len > 0 && line[len - 1] == '\r') {
        len--;
    }
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) {
        i++;
    }
    if (i == len) {
        return 0;
    }
    return fn(ctx, line, len, err);
}

static int too_big(const struct mesh_k8s_watch_framer *f, size_t have, struct mesh_err *err)
{
    return mesh_err_set(err, MESH_E_TOOBIG, 0,
                        "watch event larger than the limit of %zu bytes (%zu bytes without a "
                        "newline); raise the event size limit if objects this large are expected",
                        f->max, have);
}

int mesh_k8s_watch_framer_feed(struct mesh_k8s_watch_framer *f, const char *data, size_t len,
                               mesh_k8s_watch_line_fn fn, void *ctx, struct mesh_err *err)
{
    size_t off = 0;
    while (off < len) {
        const char *nl = memchr(data + off, '\n', len - off);
        if (nl == NULL) {
            /* Incomplete tail: keep it, within the bound. */
            size_t n = len - off;
            if (f->partial.len + n > f->max) {
                return too_big(f, f->partial.len + n, err);
            }
            return mesh_buf_append(&f->partial, data + off, n, err);
        }
        size_t n = (size_t)(nl - (data + off));
        int rc;
        if (f->partial.len == 0) {
            /* Common case: the whole line is inside this block, no copy. */
            if (n > f->max) {
                return too_big(f, n, err);
            }
            rc = emit_line(data + off, n, fn, ctx, err);
        } else {
            if (f->partial.len + n > f->max) {
                return too_big(f, f->partial.len + n, err);
            }
            rc = mesh_buf_append(&f->partial, data + off, n, err);
            if (rc == 0) {
                rc = emit_line(f->partial.data, f->partial.len, fn, ctx, err);
            }
            mesh_buf_reset(&f->partial);
        }
        if (rc < 0) {
            return rc;
        }
        off += n + 1;
    }
    return 0;
}

/* ---- decoders ---------------------------------------------------------- */

/* Copy a string member into a fixed buffer; -MESH_E_PARSE if absent, not a
 * string, empty (when required) or too long. */
static int copy_str(const cJSON *o, const char *key, char *out, size_t cap, bool required,
                    const char *what, struct mesh_err *err)
{
    const char *s = mesh_json_str(o, key);
    if (s == NULL) {
        if (!required) {
            out[0] = '\0';
            return 0;
        }
        return mesh_err_set(err, MESH_E_PARSE, 0, "%s: missing string \"%s\"", what, key);
    }
    size_t n = strlen(s);
    if (n >= cap || (required && n == 0)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "%s: \"%s\" is %s (%zu bytes)", what, key,
                            n == 0 ? "empty" : "too long", n);
    }
    memcpy(out, s, n + 1);
    return 0;
}

int mesh_k8s_watch_object_key(const cJSON *obj, char out_key[MESH_K8S_KEY_MAX],
                              char out_rv[MESH_K8S_RV_MAX], struct mesh_err *err)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!cJSON_IsObject(md)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "object has no metadata");
    }
    if (out_rv != NULL) {
        int rc = copy_str(md, "resourceVersion", out_rv, MESH_K8S_RV_MAX, true, "metadata", err);
        if (rc < 0) {
            return rc;
        }
    }
    if (out_key != NULL) {
        char name[256], ns[64];
        int rc = copy_str(md, "name", name, sizeof(name), true, "metadata", err);
        if (rc == 0) {
            rc = copy_str(md, "namespace", ns, sizeof(ns), false, "metadata", err);
        }
        if (rc < 0) {
            return rc;
        }
        snprintf(out_key, MESH_K8S_KEY_MAX, "%s/%s", ns, name);
    }
    return 0;
}

int mesh_k8s_watch_status_from_json(const cJSON *obj, struct mesh_k8s_watch_status *out,
                                    struct mesh_err *err)
{
    if (!cJSON_IsObject(obj)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "Status is not a JSON object");
    }
    const char *kind = mesh_json_str(obj, "kind");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
    if ((kind != NULL && strcmp(kind, "Status") != 0) || !cJSON_IsNumber(code)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "not a Status object (kind %s, code %s)",
                            kind ? kind : "absent", cJSON_IsNumber(code) ? "set" : "absent");
    }
    struct mesh_k8s_watch_status st;
    memset(&st, 0, sizeof(st));
    if (code->valuedouble < 0 || code->valuedouble > 999) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "Status code %g out of range", code->valuedouble);
    }
    st.code = (int)code->valuedouble;
    const char *reason = mesh_json_str(obj, "reason");
    const char *message = mesh_json_str(obj, "message");
    snprintf(st.reason, sizeof(st.reason), "%s", reason ? reason : "");
    snprintf(st.message, sizeof(st.message), "%s", message ? message : "");
    const cJSON *details = cJSON_GetObjectItemCaseSensitive(obj, "details");
    long long ra = 0;
    if (mesh_json_int(details, "retryAfterSeconds", 0, 3600, false, &ra, NULL) == 0) {
        st.retry_after_s = (long)ra;
    }
    *out = st;
    return 0;
}

int mesh_k8s_watch_decode_status(const char *body, size_t len, struct mesh_k8s_watch_status *out,
                                 struct mesh_err *err)
{
    mesh_autocjson cJSON *j = mesh_json_parse(body, len, 1 << 20, err);
    if (j == NULL) {
        mesh_err_prefix(err, "Status body");
        return -MESH_E_PARSE;
    }
    return mesh_k8s_watch_status_from_json(j, out, err);
}

bool mesh_k8s_watch_status_is_expired(const struct mesh_k8s_watch_status *st)
{
    return st->code == 410 || strcmp(st->reason, "Expired") == 0 || strcmp(st->reason, "Gone") == 0;
}

static const struct {
    const char *name;
    enum mesh_k8s_event_type type;
} event_types[] = {
    {"ADDED", MESH_K8S_EV_ADDED},     {"MODIFIED", MESH_K8S_EV_MODIFIED},
    {"DELETED", MESH_K8S_EV_DELETED}, {"BOOKMARK", MESH_K8S_EV_BOOKMARK},
    {"ERROR", MESH_K8S_EV_ERROR},
};

static int event_type(const char *s, enum mesh_k8s_event_type *out)
{
    for (size_t i = 0; i < sizeof(event_types) / sizeof(event_types[0]); i++) {
        if (strcmp(s, event_types[i].name) == 0) {
            *out = event_types[i].type;
            return 0;
        }
    }
    return -MESH_E_PARSE;
}

/* BOOKMARK of a streaming list: metadata.annotations["k8s.io/initial-events-end"] == "true". */
static bool is_initial_events_end(const cJSON *obj)
{
    const cJSON *ann = mesh_json_path(obj, "metadata.annotations");
    const char *v = mesh_json_str(ann, "k8s.io/initial-events-end");
    return v != NULL && strcmp(v, "true") == 0;
}

static int decode_event_body(cJSON *root, struct mesh_k8s_watch_event *ev, struct mesh_err *err)
{
    const char *type = mesh_json_str(root, "type");
    if (type == NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "watch event has no \"type\" string");
    }
    if (event_type(type, &ev->type) < 0) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "unknown watch event type \"%.32s\"", type);
    }
    ev->object = cJSON_GetObjectItemCaseSensitive(root, "object");
    if (!cJSON_IsObject(ev->object)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "%s event has no \"object\" object", type);
    }
    int rc;
    switch (ev->type) {
    case MESH_K8S_EV_ERROR:
        rc = mesh_k8s_watch_status_from_json(ev->object, &ev->status, err);
        break;
    case MESH_K8S_EV_BOOKMARK:
        rc = mesh_k8s_watch_object_key(ev->object, NULL, ev->rv, err);
        ev->initial_events_end = rc == 0 && is_initial_events_end(ev->object);
        break;
    default:
        rc = mesh_k8s_watch_object_key(ev->object, ev->key, ev->rv, err);
        break;
    }
    if (rc < 0) {
        mesh_err_prefix(err, "%s event", type);
    }
    return rc;
}

int mesh_k8s_watch_decode_event(const char *line, size_t len, size_t max,
                                struct mesh_k8s_watch_event *out, struct mesh_err *err)
{
    struct mesh_k8s_watch_event ev;
    memset(&ev, 0, sizeof(ev));
    max = max ? max : MESH_K8S_EVENT_MAX_DEFAULT;
    ev.root = mesh_json_parse_arena(line, len, max, &ev.arena, err);
    int rc;
    if (ev.root == NULL) {
        /* mesh_json_parse fails with TOOBIG or PARSE: keep which. */
        mesh_err_prefix(err, "watch event");
        rc = len > max ? -MESH_E_TOOBIG : -MESH_E_PARSE;
    } else if (!cJSON_IsObject(ev.root)) {
        rc = mesh_err_set(err, MESH_E_PARSE, 0, "watch event is not a JSON object");
    } else {
        rc = decode_event_body(ev.root, &ev, err);
    }
    if (rc < 0) {
        mesh_json_arena_free(&ev.arena);
        return rc;
    }
    *out = ev;
    return 0;
}

void mesh_k8s_watch_event_cleanup(struct mesh_k8s_watch_event *ev)
{
    mesh_json_arena_free(&ev->arena);
    ev->root = NULL;
    ev->object = NULL;
}

/* ---- list splitter --------------------------------------------------------- */

/* What the next byte is. */
enum {
    LS_TOP,         /* before the document: '{' */
    LS_OUT,         /* in the list object outside "items": copied to s->outside */
    LS_ITEMS_OPEN,  /* after the member name "items": ':' and '[' */
    LS_ITEMS_FIRST, /* after items' '[': an item or ']' */
    LS_ITEMS_NEXT,  /* after an item: ',' or ']' */
    LS_ITEMS_VALUE, /* after ',' in items: an item */
    LS_ITEM,        /* inside an item */
    LS_DONE,        /* after the list object: whitespace only */
    LS_FAILED,
};

static const char *ls_expected(const struct mesh_k8s_list_scanner *s)
{
    static const char *const what[] = {
        [LS_TOP] = "'{' (a list response is a JSON object)",
        [LS_OUT] = "the rest of the list object",
        [LS_ITEMS_OPEN] = "':' and '[' (items is an array)",
        [LS_ITEMS_FIRST] = "a JSON value or ']'",
        [LS_ITEMS_NEXT] = "',' or ']' after an array element",
        [LS_ITEMS_VALUE] = "a JSON value",
        [LS_ITEM] = "the rest of an element of items",
        [LS_DONE] = "nothing after the list object",
    };
    return s->in_str ? "the rest of a string and its closing '\"'" : what[s->state];
}

static int ls_fail_msg(struct mesh_k8s_list_scanner *s, int code, size_t at, const char *what,
                       struct mesh_err *err)
{
    s->state = LS_FAILED;
    return mesh_err_set(err, code, 0, "list response: byte %zu: %s", at, what);
}

/* An unexpected byte c at absolute offset at. */
static int ls_fail(struct mesh_k8s_list_scanner *s, size_t at, unsigned char c,
                   struct mesh_err *err)
{
    char msg[128];
    snprintf(msg, sizeof(msg),
             c >= 0x20 && c < 0x7f ? "expected %s, found '%c'" : "expected %s, found byte 0x%02x",
             ls_expected(s), c);
    return ls_fail_msg(s, MESH_E_PARSE, at, msg, err);
}

void mesh_k8s_list_scanner_init(struct mesh_k8s_list_scanner *s, size_t max_item, size_t max_total,
                                mesh_k8s_list_item_fn fn, void *ctx)
{
    memset(s, 0, sizeof(*s));
    s->fn = fn;
    s->ctx = ctx;
    s->max_item = max_item ? max_item : MESH_K8S_EVENT_MAX_DEFAULT;
    s->max_total = max_total ? max_total : MESH_K8S_LIST_MAX_DEFAULT;
    s->meta.remaining = -1;
    mesh_buf_init(&s->item, s->max_item);
    mesh_buf_init(&s->outside, MESH_K8S_LIST_OUTSIDE_MAX);
}

void mesh_k8s_list_scanner_cleanup(struct mesh_k8s_list_scanner *s)
{
    mesh_buf_cleanup(&s->item);
    mesh_buf_cleanup(&s->outside);
    mesh_json_arena_free(&s->arena);
    mesh_k8s_list_meta_cleanup(&s->meta);
}

void mesh_k8s_list_meta_cleanup(struct mesh_k8s_list_meta *m)
{
    mesh_free(m->cont);
    m->cont = NULL;
}

static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Copy n bytes to the text outside items, within its bound. */
static int ls_out(struct mesh_k8s_list_scanner *s, const char *p, size_t n, struct mesh_err *err)
{
    if (mesh_buf_append(&s->outside, p, n, NULL) == 0) {
        return 0;
    }
    s->state = LS_FAILED;
    return mesh_err_set(err, MESH_E_TOOBIG, 0,
                        "list response: the members outside \"items\" are larger than the limit "
                        "of %zu bytes",
                        (size_t)MESH_K8S_LIST_OUTSIDE_MAX);
}

/* From data[*pi] inside a string: to its closing quote (consumed, in_str
 * cleared) or the end of the block. */
static int ls_string(struct mesh_k8s_list_scanner *s, const char *data, size_t len, size_t *pi,
                     struct mesh_err *err)
{
    size_t i = *pi;
    while (i < len && s->in_str) {
        unsigned char c = (unsigned char)data[i++];
        if (s->esc == 1) {
            s->esc = c == 'u' ? 5 : 0;
        } else if (s->esc > 1) {
            /* cJSON reads a bad \u escape as U+0000, which ends its string early */
            if (!isxdigit(c)) {
                return ls_fail_msg(s, MESH_E_PARSE, s->off + i - 1,
                                   "expected a hex digit of a \\u escape", err);
            }
            s->esc = s->esc == 2 ? 0 : s->esc - 1;
        } else if (c == '\\') {
            s->esc = 1;
        } else if (c == '"') {
            s->in_str = false;
        } else if (c < 0x20) {
            return ls_fail_msg(s, MESH_E_PARSE, s->off + i - 1,
                               "raw control character in a string (JSON requires an escape)", err);
        }
    }
    *pi = i;
    return 0;
}

/* Is the member name key (n bytes, quotes included) "items", escaped or not? */
static bool ls_key_is_items(const char *key, size_t n)
{
    if (memchr(key, '\\', n) == NULL || n > 64) {
        return n == 7 && memcmp(key, "\"items\"", 7) == 0;
    }
    cJSON *j = cJSON_ParseWithLength(key, n);
    bool items = cJSON_IsString(j) && strcmp(j->valuestring, "items") == 0;
    cJSON_Delete(j);
    return items;
}

static int ls_item_too_big(struct mesh_k8s_list_scanner *s, struct mesh_err *err)
{
    s->state = LS_FAILED;
    return mesh_err_set(err, MESH_E_TOOBIG, 0,
                        "list response: item %zu (from byte %zu) is larger than the limit of %zu "
                        "bytes; raise the object size limit if objects this large are expected",
                        s->meta.items + 1, s->item_start_abs, s->max_item);
}

/* The item ended before data[e] (e may be 0: it ended with the previous
 * block). cJSON parses it, the caller reads the tree, the tree goes. */
static int ls_item_done(struct mesh_k8s_list_scanner *s, const char *data, size_t e,
                        struct mesh_err *err)
{
    const char *p;
    size_t n;
    if (s->item_start_abs >= s->off) {
        /* The whole item is inside this block: no copy. */
        p = data + (s->item_start_abs - s->off);
        n = s->off + e - s->item_start_abs;
    } else {
        if (mesh_buf_append(&s->item, data, e, NULL) < 0) {
            return ls_item_too_big(s, err);
        }
        p = s->item.data;
        n = s->item.len;
    }
    if (n > s->max_item) {
        return ls_item_too_big(s, err);
    }
    cJSON *j = mesh_json_parse_arena(p, n, n, &s->arena, NULL);
    int rc;
    if (j == NULL) {
        /* Where cJSON stops, in the page (a second parse, on this path only). */
        const char *end = NULL;
        cJSON_Delete(cJSON_ParseWithLengthOpts(p, n, &end, false));
        size_t at = s->item_start_abs + (end != NULL && end >= p ? (size_t)(end - p) : 0);
        rc = mesh_err_set(err, MESH_E_PARSE, 0,
                          "list response: byte %zu: item %zu (from byte %zu) is not valid JSON", at,
                          s->meta.items + 1, s->item_start_abs);
    } else {
        s->meta.items++;
        rc = s->fn(s->ctx, j, err);
    }
    mesh_json_arena_free(&s->arena);
    mesh_buf_reset(&s->item);
    s->state = rc < 0 ? LS_FAILED : LS_ITEMS_NEXT;
    return rc;
}

static int ls_open(struct mesh_k8s_list_scanner *s, size_t at, struct mesh_err *err)
{
    if (s->depth >= MESH_K8S_LIST_DEPTH_MAX) {
        char msg[64];
        snprintf(msg, sizeof(msg), "JSON nested deeper than %d levels", MESH_K8S_LIST_DEPTH_MAX);
        return ls_fail_msg(s, MESH_E_PARSE, at, msg, err);
    }
    s->depth++;
    return 0;
}

/* One byte c = data[i] outside strings and items: copied out, nesting
 * and the list object's member names followed. */
static int ls_outside(struct mesh_k8s_list_scanner *s, const char *data, size_t i, unsigned char c,
                      struct mesh_err *err)
{
    size_t at = s->off + i;
    int rc = ls_out(s, data + i, 1, err);
    if (rc < 0 || is_ws(c)) {
        return rc;
    }
    switch (c) {
    case '"':
        s->in_str = true;
        s->key_at = s->depth == 1 && s->key_next ? s->outside.len : 0;
        s->key_next = false;
        return 0;
    case '{':
    case '[':
        return ls_open(s, at, err);
    case '}':
    case ']':
        if (--s->depth == 0) {
            s->state = LS_DONE;
        }
        return 0;
    case ',':
        s->key_next = s->depth == 1;
        return 0;
    default:
        return 0;
    }
}

/* A string of the list object (data[from..i)) went by; a member name
 * "items" starts the split. */
static int ls_outside_string(struct mesh_k8s_list_scanner *s, const char *data, size_t from,
                             size_t i, struct mesh_err *err)
{
    int rc = ls_out(s, data + from, i - from, err);
    if (rc < 0 || s->in_str || s->key_at == 0 ||
        !ls_key_is_items(s->outside.data + s->key_at - 1, s->outside.len - s->key_at + 1)) {
        return rc;
    }
    if (s->items_seen) {
        return ls_fail_msg(s, MESH_E_PARSE, s->off + i - 1, "duplicate \"items\" member", err);
    }
    s->state = LS_ITEMS_OPEN;
    return 0;
}

/* One byte c = data[i] around the elements of items. */
static int ls_around_items(struct mesh_k8s_list_scanner *s, const char *data, size_t i,
                           unsigned char c, struct mesh_err *err)
{
    size_t at = s->off + i;
    if (is_ws(c)) {
        return s->state == LS_ITEMS_OPEN ? ls_out(s, data + i, 1, err) : 0;
    }
    switch (s->state) {
    case LS_ITEMS_OPEN: {
        if (c == ':') { /* cJSON checks there is one, at the end */
            return ls_out(s, data + i, 1, err);
        }
        if (c != '[') {
            return ls_fail_msg(s, MESH_E_PARSE, at, "\"items\" is not an array", err);
        }
        s->items_seen = true;
        s->state = LS_ITEMS_FIRST;
        int rc = ls_open(s, at, err);
        if (rc == 0) {
            rc = ls_out(s, "[", 1, err);
        }
        s->items_at = s->outside.len;
        return rc;
    }
    case LS_ITEMS_NEXT:
        if (c == ',') {
            s->state = LS_ITEMS_VALUE;
            return 0;
        }
        break;
    default: /* LS_ITEMS_FIRST, LS_ITEMS_VALUE: an item starts */
        if (c == ',' || c == ':' || c == '}' || (c == ']' && s->state == LS_ITEMS_VALUE)) {
            return ls_fail(s, at, c, err);
        }
        if (c == ']') {
            break;
        }
        s->state = LS_ITEM;
        s->item_start_abs = at;
        s->scalar = c != '{' && c != '[' && c != '"';
        s->in_str = c == '"';
        return s->scalar || s->in_str ? 0 : ls_open(s, at, err);
    }
    if (c != ']') {
        return ls_fail(s, at, c, err);
    }
    s->depth--;
    s->items_end_abs = at;
    s->state = LS_OUT;
    return ls_out(s, "]", 1, err);
}

/* One byte c = data[i] of an item, outside its strings. */
static int ls_in_item(struct mesh_k8s_list_scanner *s, const char *data, size_t i, unsigned char c,
                      struct mesh_err *err)
{
    if (s->scalar) {
        /* A number or literal ends before a delimiter, read again after it. */
        return is_ws(c) || strchr(",]}[{\":", c) != NULL ? ls_item_done(s, data, i, err) : 1;
    }
    int rc = 0;
    if (c == '"') {
        s->in_str = true;
    } else if (c == '{' || c == '[') {
        rc = ls_open(s, s->off + i, err);
    } else if ((c == '}' || c == ']') && --s->depth == 2) {
        rc = ls_item_done(s, data, i + 1, err);
    }
    return rc < 0 ? rc : 1;
}

int mesh_k8s_list_scanner_feed(struct mesh_k8s_list_scanner *s, const char *data, size_t len,
                               struct mesh_err *err)
{
    if (s->state == LS_FAILED) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "list scanner fed after an error");
    }
    if (len > s->max_total || s->off > s->max_total - len) {
        s->state = LS_FAILED;
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "list response larger than the limit of %zu bytes; lower the page "
                            "size (limit) or raise the list size limit",
                            s->max_total);
    }
    size_t i = 0;
    int rc = 0;
    while (i < len && rc >= 0) {
        unsigned char c = (unsigned char)data[i];
        size_t from = i;
        switch (s->state) {
        case LS_TOP:
        case LS_DONE:
            if (!is_ws(c) && (s->state == LS_DONE || c != '{')) {
                rc = ls_fail(s, s->off + i, c, err);
            } else if (!is_ws(c)) {
                s->state = LS_OUT;
                s->doc_start_abs = s->off + i;
                s->key_next = true;
                rc = ls_outside(s, data, i, c, err);
            }
            i++;
            break;
        case LS_OUT:
            if (s->in_str) {
                rc = ls_string(s, data, len, &i, err);
                rc = rc < 0 ? rc : ls_outside_string(s, data, from, i, err);
            } else {
                rc = ls_outside(s, data, i++, c, err);
            }
            break;
        case LS_ITEM:
            if (s->in_str) {
                rc = ls_string(s, data, len, &i, err);
                if (rc == 0 && !s->in_str && s->depth == 2) {
                    rc = ls_item_done(s, data, i, err);
                }
            } else {
                rc = ls_in_item(s, data, i, c, err);
                i += rc == 1; /* 0: the byte ended a number and is read again */
            }
            break;
        default:
            rc = ls_around_items(s, data, i++, c, err);
            break;
        }
    }
    if (rc < 0) {
        return rc;
    }
    if (s->state == LS_ITEM) {
        /* Keep the started item's bytes of this block, within the bound. */
        size_t from = s->item_start_abs >= s->off ? s->item_start_abs - s->off : 0;
        if (mesh_buf_append(&s->item, data + from, len - from, NULL) < 0) {
            return ls_item_too_big(s, err);
        }
    }
    s->off += len;
    return 0;
}

/* Members named key in o, counted (cJSON keeps duplicates). */
static int ls_count(const cJSON *o, const char *key)
{
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, o)
    {
        n += c->string != NULL && strcmp(c->string, key) == 0;
    }
    return n;
}

/* A string member of o into out (cap bytes with the NUL): 0 absent, 1
 * stored, -1 wrong type or too long. */
static int ls_str(const cJSON *o, const char *key, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL || (cJSON_IsNull(v) && strcmp(key, "continue") == 0)) {
        return 0;
    }
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap) {
        return -1;
    }
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return 1;
}

/* What the list object outside items says (doc, parsed by cJSON). */
static int ls_meta(struct mesh_k8s_list_scanner *s, const cJSON *doc, struct mesh_err *err)
{
    static const char *const names[] = {"kind", "metadata", "resourceVersion", "continue",
                                        "remainingItemCount"};
    struct mesh_k8s_list_meta *m = &s->meta;
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(doc, "metadata");
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (ls_count(k < 2 ? doc : md, names[k]) > 1) {
            return mesh_err_set(err, MESH_E_PARSE, 0, "list response: duplicate \"%s%s\" member",
                                k < 2 ? "" : "metadata.", names[k]);
        }
    }
    char cont[MESH_K8S_LIST_CONT_MAX + 1] = "";
    const char *bad = NULL;
    if (ls_str(doc, "kind", m->kind, sizeof(m->kind)) < 0) {
        bad = "\"kind\" is not a string of at most 63 bytes";
    } else if (md != NULL && !cJSON_IsObject(md)) {
        bad = "\"metadata\" is not an object";
    } else if (ls_str(md, "resourceVersion", m->rv, sizeof(m->rv)) < 0) {
        bad = "metadata.\"resourceVersion\" is not a string of at most 63 bytes";
    } else if (ls_str(md, "continue", cont, sizeof(cont)) < 0) {
        bad = "metadata.\"continue\" is not a string of at most 4096 bytes";
    }
    if (bad != NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "list response: %s", bad);
    }
    const char *missing = !s->items_seen ? "no \"items\" array"
                          : md == NULL   ? "no \"metadata\" object"
                          : !m->rv[0]    ? "no metadata.resourceVersion"
                                         : NULL;
    if (missing != NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "list response is not a list (%s; kind \"%s\")",
                            missing, m->kind);
    }
    size_t kl = strlen(m->kind);
    if (kl > 0 && (kl < 4 || strcmp(m->kind + kl - 4, "List") != 0)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "list response has kind \"%s\", not a *List",
                            m->kind);
    }
    const cJSON *rem = cJSON_GetObjectItemCaseSensitive(md, "remainingItemCount");
    if (cJSON_IsNumber(rem) && rem->valuedouble >= 0 && rem->valuedouble < 9e15 &&
        rem->valuedouble == (double)(long long)rem->valuedouble) {
        m->remaining = (long long)rem->valuedouble;
    }
    m->cont = cont[0] != '\0' && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "continue"))
                  ? mesh_strdup(cont)
                  : NULL;
    return 0;
}

int mesh_k8s_list_scanner_finish(struct mesh_k8s_list_scanner *s,
                                 struct mesh_k8s_list_meta *out_meta, struct mesh_err *err)
{
    if (s->state == LS_FAILED) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "list scanner finished after an error");
    }
    if (s->state != LS_DONE) {
        int rc =
            mesh_err_set(err, MESH_E_PARSE, 0, "list response truncated at byte %zu: expected %s",
                         s->off, ls_expected(s));
        s->state = LS_FAILED;
        return rc;
    }
    s->state = LS_FAILED;
    /* kind and metadata hold no NUL: cJSON would end them early. */
    if (mesh_json_mask_nul_escapes(s->outside.data, s->outside.len) > 0) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "list response: a \\u0000 escape outside \"items\"");
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(s->outside.data, s->outside.len, &end, false);
    if (doc == NULL || end != s->outside.data + s->outside.len) {
        /* The offset in the page: the outside text skips the items. */
        size_t at = end != NULL ? (size_t)(end - s->outside.data) : 0;
        at = s->items_seen && at >= s->items_at ? s->items_end_abs + (at - s->items_at)
                                                : s->doc_start_abs + at;
        cJSON_Delete(doc);
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "list response: byte %zu: not valid JSON (outside \"items\")", at);
    }
    int rc = ls_meta(s, doc, err);
    cJSON_Delete(doc);
    if (rc == 0) {
        *out_meta = s->meta;
        s->meta.cont = NULL;
        s->state = LS_DONE;
    }
    return rc;
}

/* ---- metadata.managedFields ------------------------------------------------ */

/* Index just past the string starting at json[i] == '"', or len. Jumps
 * from quote to quote (memchr); a quote preceded by an odd number of
 * backslashes is escaped. */
static size_t skip_string(const char *json, size_t len, size_t i)
{
    for (i++; i < len;) {
        const char *q = memchr(json + i, '"', len - i);
        if (q == NULL) {
            return len;
        }
        size_t k = (size_t)(q - json), b = k;
        while (b > i && json[b - 1] == '\\') {
            b--;
        }
        if ((k - b) % 2 == 0) {
            return k + 1;
        }
        i = k + 1;
    }
    return len;
}

static size_t skip_ws(const char *json, size_t len, size_t i)
{
    while (i < len && is_ws((unsigned char)json[i])) {
        i++;
    }
    return i;
}

/* Index just past the value starting at json[i] (after whitespace). */
static size_t skip_value(const char *json, size_t len, size_t i)
{
    if (i < len && json[i] == '"') {
        return skip_string(json, len, i);
    }
    if (i < len && json[i] != '{' && json[i] != '[') {
        /* A scalar: up to the delimiter after it. */
        while (i < len && json[i] != ',' && json[i] != '}' && json[i] != ']' &&
               !is_ws((unsigned char)json[i])) {
            i++;
        }
        return i;
    }
    int depth = 0;
    while (i < len) {
        char c = json[i];
        if (c == '"') {
            i = skip_string(json, len, i);
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
        i++;
    }
    return len;
}

/* The byte span [*out_start, *out_end) of `"name":value` at an object-key
 * path (path[0] a member of the top-level object, path[1] of its object
 * value, ...) in the first object on the path. */
static bool find_member(const char *json, size_t len, const char *const *path, size_t npath,
                        size_t *out_start, size_t *out_end)
{
    size_t depth = 0, matched = 0, i = 0;
    bool expect_open = false; /* the value of a matched path element must open an object */
    while (i < len) {
        char c = json[i];
        if (c == '"') {
            size_t k = skip_string(json, len, i);
            size_t after = skip_ws(json, len, k);
            expect_open = false;
            if (after < len && json[after] == ':' && depth == matched + 1 && matched < npath) {
                size_t n = strlen(path[matched]);
                bool hit = k - i == n + 2 && memcmp(json + i + 1, path[matched], n) == 0;
                if (hit && matched + 1 == npath) {
                    size_t v = skip_ws(json, len, after + 1);
                    *out_start = i;
                    *out_end = skip_value(json, len, v);
                    return *out_end > v;
                }
                expect_open = hit;
                k = after + 1;
            }
            i = k;
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
            if (expect_open && c == '{') {
                matched++;
            }
            expect_open = false;
        } else if (c == '}' || c == ']') {
            if (depth == 0) {
                return false;
            }
            if (matched > 0 && depth == matched + 1) {
                return false; /* left the first object on the path: not in it */
            }
            depth--;
        } else if (!is_ws((unsigned char)c)) {
            expect_open = false;
        }
        i++;
    }
    return false;
}

const char *mesh_k8s_watch_strip_managed_fields(const char *json, size_t len,
                                                struct mesh_buf *scratch, size_t *out_len)
{
    static const char *const path[] = {"object", "metadata", "managedFields"};
    size_t start, end;
    *out_len = len;
    if (!find_member(json, len, path, 3, &start, &end)) {
        return json;
    }
    /* Take one comma with the member: the one after it, else the one before. */
    size_t after = skip_ws(json, len, end);
    if (after < len && json[after] == ',') {
        end = after + 1;
    } else {
        size_t b = start;
        while (b > 0 && is_ws((unsigned char)json[b - 1])) {
            b--;
        }
        if (b > 0 && json[b - 1] == ',') {
            start = b - 1;
        }
    }
    mesh_buf_reset(scratch);
    if (mesh_buf_append(scratch, json, start, NULL) < 0 ||
        mesh_buf_append(scratch, json + end, len - end, NULL) < 0) {
        return json;
    }
    *out_len = scratch->len;
    return scratch->data;
}

/* ---- resourceVersion ----------------------------------------------------- */

static bool rv_number(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (s[0] == '\0' || (s[0] == '0' && s[1] != '\0')) {
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

int mesh_k8s_watch_rv_cmp(const char *a, const char *b)
{
    uint64_t x, y;
    if (rv_number(a, &x) && rv_number(b, &y)) {
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    return strcmp(a, b) == 0 ? 0 : 2;
}

/* ---- backoff ------------------------------------------------------------- */

void mesh_k8s_watch_backoff_init(struct mesh_k8s_watch_backoff *b, int64_t initial_ms,
                                 int64_t max_ms, int64_t reset_ms)
{
    b->initial_ms = initial_ms > 0 ? initial_ms : 800;
    b->max_ms = max_ms > 0 ? max_ms : 30000;
    b->reset_ms = reset_ms > 0 ? reset_ms : 120000;
    if (b->max_ms < b->initial_ms) {
        b->max_ms = b->initial_ms;
    }
    mesh_k8s_watch_backoff_reset(b);
}

void mesh_k8s_watch_backoff_reset(struct mesh_k8s_watch_backoff *b)
{
    b->current_ms = 0;
    b->last_fail_ms = -1;
}

int64_t mesh_k8s_watch_backoff_next(struct mesh_k8s_watch_backoff *b, int64_t now_ms, double rnd01)
{
    if (b->last_fail_ms >= 0 && now_ms - b->last_fail_ms > b->reset_ms) {
        b->current_ms = 0;
    }
    if (b->current_ms <= 0) {
        b->current_ms = b->initial_ms;
    }
    if (!(rnd01 >= 0.0) || rnd01 >= 1.0) {
        rnd01 = 0.0;
    }
    int64_t base = b->current_ms;
    int64_t delay = base + (int64_t)((double)base * rnd01);
    b->current_ms = base * 2 > b->max_ms ? b->max_ms : base * 2;
    b->last_fail_ms = now_ms;
    return delay;
}

long mesh_k8s_watch_parse_retry_after(const char *value, size_t len, long cap_s)
{
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t' || value[len - 1] == '\r' ||
                       value[len - 1] == '\n')) {
        len--;
    }
    while (len > 0 && (*value == ' ' || *value == '\t')) {
        value++;
        len--;
    }
    long long v;
    if (len == 0 || len > 18) {
        return -MESH_E_INVAL;
    }
    if (mesh_parse_ll(value, len, 0, INT64_MAX, &v, NULL) < 0) {
        /* Leading zeros ("05") are valid delta-seconds. */
        size_t i = 0;
        while (i + 1 < len && value[i] == '0') {
            i++;
        }
        if (mesh_parse_ll(value + i, len - i, 0, INT64_MAX, &v, NULL) < 0) {
            return -MESH_E_INVAL;
        }
    }
    return v > cap_s ? cap_s : (long)v;
}
