/*
 * k8s_watch.c - pure Kubernetes list/watch protocol pieces: newline framer,
 * event / list / Status decoders, resourceVersion comparison, backoff.
 * No I/O, clocks or randomness (docs/STYLE.md R8): time and jitter come in as
 * arguments. Wire facts are cited in k8s_watch.h.
 */
#include "k8s_watch.h"

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

/* ---- streaming list scanner ---------------------------------------------- */

/* What the next byte may be. */
enum {
    LS_TOP,       /* before the document: '{' */
    LS_VALUE,     /* a value (after ':' or after ',' in an array) */
    LS_ARR_FIRST, /* after '[': a value or ']' */
    LS_OBJ_FIRST, /* after '{': a member name or '}' */
    LS_OBJ_KEY,   /* after ',' in an object: a member name */
    LS_COLON,     /* after a member name: ':' */
    LS_AFTER,     /* after a value: ',' or the closing bracket */
    LS_STR,       /* inside a string */
    LS_STR_ESC,   /* after a backslash */
    LS_STR_HEX,   /* inside \uXXXX */
    LS_STR_LOW1,  /* after a high surrogate escape: '\\' of its low half */
    LS_STR_LOW2,  /* then 'u' */
    LS_NUM_MINUS, /* after '-': a digit */
    LS_NUM_ZERO,  /* after a leading 0: '.', 'e' or the end of the number */
    LS_NUM_INT,   /* integer digits */
    LS_NUM_DOT,   /* after '.': a digit */
    LS_NUM_FRAC,  /* fraction digits */
    LS_NUM_E,     /* after 'e': a sign or a digit */
    LS_NUM_ESIGN, /* after the exponent's sign: a digit */
    LS_NUM_EXP,   /* exponent digits */
    LS_LIT,       /* inside true / false / null */
    LS_DONE,      /* after the list object: whitespace only */
    LS_FAILED,
};

/* Members we look at: top-level kind / metadata / items, and
 * metadata.resourceVersion / continue / remainingItemCount. member holds
 * the top-level one in its low byte and the metadata one in the next. */
enum { M_NONE, M_KIND, M_METADATA, M_ITEMS, M_RV, M_CONT, M_REMAINING };

static const char *const member_names[] = {
    "", "kind", "metadata", "items", "resourceVersion", "continue", "remainingItemCount",
};

static const char *ls_expected(const struct mesh_k8s_list_scanner *s)
{
    bool arr = s->depth > 0 && (s->stack[(s->depth - 1) / 8] >> ((s->depth - 1) % 8)) & 1;
    switch (s->state) {
    case LS_TOP:
        return "'{' (a list response is a JSON object)";
    case LS_VALUE:
        return "a JSON value";
    case LS_ARR_FIRST:
        return "a JSON value or ']'";
    case LS_OBJ_FIRST:
        return "'\"' (a member name) or '}'";
    case LS_OBJ_KEY:
        return "'\"' (a member name)";
    case LS_COLON:
        return "':' after a member name";
    case LS_AFTER:
        return arr ? "',' or ']' after an array element" : "',' or '}' after an object member";
    case LS_STR:
        return "the rest of a string and its closing '\"'";
    case LS_STR_ESC:
        return "an escape character (\" \\ / b f n r t u)";
    case LS_STR_HEX:
        return "a hex digit of a \\u escape";
    case LS_STR_LOW1:
    case LS_STR_LOW2:
        return "\\u and the low half of a UTF-16 surrogate pair";
    case LS_NUM_MINUS:
    case LS_NUM_DOT:
    case LS_NUM_ESIGN:
        return "a digit";
    case LS_NUM_E:
        return "a digit or a sign in an exponent";
    case LS_LIT:
        return "the rest of true / false / null";
    case LS_DONE:
        return "nothing after the list object";
    default:
        return "nothing (the scanner failed before)";
    }
}

static int ls_fail(struct mesh_k8s_list_scanner *s, size_t abs_off, unsigned char c,
                   struct mesh_err *err)
{
    char found[24];
    if (c >= 0x20 && c < 0x7f) {
        snprintf(found, sizeof(found), "'%c'", c);
    } else {
        snprintf(found, sizeof(found), "byte 0x%02x", c);
    }
    int rc = mesh_err_set(err, MESH_E_PARSE, 0, "list response: byte %zu: expected %s, found %s",
                          abs_off, ls_expected(s), found);
    s->state = LS_FAILED;
    return rc;
}

static int ls_fail_msg(struct mesh_k8s_list_scanner *s, int code, size_t abs_off, const char *what,
                       struct mesh_err *err)
{
    s->state = LS_FAILED;
    return mesh_err_set(err, code, 0, "list response: byte %zu: %s", abs_off, what);
}

void mesh_k8s_list_scanner_init(struct mesh_k8s_list_scanner *s, size_t max_item, size_t max_total,
                                mesh_k8s_list_item_fn fn, void *ctx)
{
    memset(s, 0, sizeof(*s));
    s->fn = fn;
    s->ctx = ctx;
    s->max_item = max_item ? max_item : MESH_K8S_EVENT_MAX_DEFAULT;
    s->max_total = max_total ? max_total : MESH_K8S_LIST_MAX_DEFAULT;
    s->state = LS_TOP;
    s->meta.remaining = -1;
    mesh_buf_init(&s->item, s->max_item);
}

void mesh_k8s_list_scanner_cleanup(struct mesh_k8s_list_scanner *s)
{
    mesh_buf_cleanup(&s->item);
    mesh_k8s_list_meta_cleanup(&s->meta);
}

void mesh_k8s_list_meta_cleanup(struct mesh_k8s_list_meta *m)
{
    mesh_free(m->cont);
    m->cont = NULL;
}

static void ls_capture(struct mesh_k8s_list_scanner *s, const char *p, size_t n)
{
    if (s->cap_key) {
        if (n > sizeof(s->key) - s->key_len) {
            s->key_long = true;
        } else {
            memcpy(s->key + s->key_len, p, n);
            s->key_len += n;
        }
    }
    if (s->cap_val) {
        if (n > sizeof(s->val) - s->val_len) {
            s->val_long = true;
        } else {
            memcpy(s->val + s->val_len, p, n);
            s->val_len += n;
        }
    }
}

/* Decode a captured JSON string token (quotes included) into out (cap
 * bytes with the NUL). Returns the length, or -1 when it does not fit or
 * is not a string. Escapes are rare (Go writes none in these fields), so
 * only then is cJSON asked to decode. */
static long ls_decode_str(const char *raw, size_t n, char *out, size_t cap)
{
    if (n < 2 || raw[0] != '"') {
        return -1;
    }
    if (memchr(raw, '\\', n) == NULL) {
        if (n - 2 >= cap) {
            return -1;
        }
        memcpy(out, raw + 1, n - 2);
        out[n - 2] = '\0';
        return (long)(n - 2);
    }
    if (memmem(raw, n, "\\u0000", 6) != NULL) {
        return -1; /* a NUL would end the string early: refuse the value */
    }
    cJSON *j = cJSON_ParseWithLength(raw, n);
    long rc = -1;
    if (cJSON_IsString(j)) {
        size_t k = strlen(j->valuestring);
        if (k < cap) {
            memcpy(out, j->valuestring, k + 1);
            rc = (long)k;
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* A member name ended (closing quote at absolute offset at). */
static int ls_key_done(struct mesh_k8s_list_scanner *s, size_t at, struct mesh_err *err)
{
    s->state = LS_COLON;
    if (!s->cap_key) {
        return 0;
    }
    s->cap_key = false;
    char name[MESH_K8S_LIST_KEY_CAPTURE];
    int m = M_NONE;
    if (!s->key_long && ls_decode_str(s->key, s->key_len, name, sizeof(name)) >= 0) {
        int first = s->depth == 1 ? M_KIND : M_RV, last = s->depth == 1 ? M_ITEMS : M_REMAINING;
        for (int k = first; k <= last; k++) {
            if (strcmp(name, member_names[k]) == 0) {
                m = k;
            }
        }
    }
    if (m != M_NONE && (s->seen & (1u << m))) {
        char msg[96];
        snprintf(msg, sizeof(msg), "duplicate \"%s%s\" member", s->depth == 1 ? "" : "metadata.",
                 member_names[m]);
        return ls_fail_msg(s, MESH_E_PARSE, at, msg, err);
    }
    s->seen |= 1u << m;
    if (s->depth == 1) {
        s->member = m;
    } else {
        s->member = (s->member & 0xff) | (m << 8);
    }
    return 0;
}

/* A captured member value ended: store it in meta. */
static int ls_store(struct mesh_k8s_list_scanner *s, int m, size_t at, struct mesh_err *err)
{
    char msg[128];
    s->cap_val = false;
    if (s->val_long) {
        snprintf(msg, sizeof(msg), "\"%s\" is longer than %zu bytes", member_names[m],
                 sizeof(s->val) - 2);
        return ls_fail_msg(s, MESH_E_TOOBIG, at, msg, err);
    }
    const char *raw = s->val;
    size_t n = s->val_len;
    if (m == M_REMAINING) {
        long long v;
        if (mesh_parse_ll(raw, n, 0, INT64_MAX, &v, NULL) == 0) {
            s->meta.remaining = v;
        }
        return 0;
    }
    if (m == M_CONT && n == 4 && memcmp(raw, "null", 4) == 0) {
        return 0;
    }
    long k;
    if (m == M_KIND) {
        k = ls_decode_str(raw, n, s->meta.kind, sizeof(s->meta.kind));
    } else if (m == M_RV) {
        k = ls_decode_str(raw, n, s->meta.rv, sizeof(s->meta.rv));
    } else {
        char tok[MESH_K8S_LIST_CONT_MAX + 1];
        k = ls_decode_str(raw, n, tok, sizeof(tok));
        if (k > 0) {
            s->meta.cont = mesh_strdup(tok);
        }
    }
    if (k < 0) {
        snprintf(msg, sizeof(msg), "%s\"%s\" is %s", m == M_KIND ? "" : "metadata.",
                 member_names[m], raw[0] == '"' ? "too long" : "not a string");
        return ls_fail_msg(s, MESH_E_PARSE, at, msg, err);
    }
    return 0;
}

/* The item being collected grew past max_item (the same message whatever
 * the chunking). */
static int ls_item_too_big(struct mesh_k8s_list_scanner *s, struct mesh_err *err)
{
    s->state = LS_FAILED;
    return mesh_err_set(err, MESH_E_TOOBIG, 0,
                        "list response: item %zu (from byte %zu) is larger than the limit of %zu "
                        "bytes; raise the object size limit if objects this large are expected",
                        s->meta.items + 1, s->item_start_abs, s->max_item);
}

/* A value ended; e = its end (exclusive) as an index into data, which may
 * be 0 when it ended with the previous block (a number). */
static int ls_value_done(struct mesh_k8s_list_scanner *s, const char *data, size_t e,
                         struct mesh_err *err)
{
    size_t at = s->off + e;
    s->state = s->depth == 0 ? LS_DONE : LS_AFTER;
    if (s->cap_val) {
        int m = s->depth == 1 ? (s->member & 0xff) : (s->member >> 8);
        int rc = ls_store(s, m, at, err);
        if (rc < 0) {
            return rc;
        }
    }
    if (!s->item_on || s->depth != 2 || !s->in_items) {
        return 0;
    }
    s->item_on = false;
    const char *p;
    size_t n;
    if (s->item_start_abs >= s->off) {
        /* The whole item is inside this block: no copy. */
        p = data + (s->item_start_abs - s->off);
        n = at - s->item_start_abs;
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
    s->meta.items++;
    int rc = s->fn(s->ctx, p, n, err);
    mesh_buf_reset(&s->item);
    if (rc < 0) {
        s->state = LS_FAILED;
    }
    return rc;
}

static int ls_push(struct mesh_k8s_list_scanner *s, bool array, size_t at, struct mesh_err *err)
{
    if (s->depth >= MESH_K8S_LIST_DEPTH_MAX) {
        char msg[64];
        snprintf(msg, sizeof(msg), "JSON nested deeper than %d levels", MESH_K8S_LIST_DEPTH_MAX);
        return ls_fail_msg(s, MESH_E_PARSE, at, msg, err);
    }
    unsigned char bit = (unsigned char)(1u << (s->depth % 8));
    if (array) {
        s->stack[s->depth / 8] |= bit;
    } else {
        s->stack[s->depth / 8] &= (unsigned char)~bit;
    }
    s->depth++;
    s->state = array ? LS_ARR_FIRST : LS_OBJ_FIRST;
    return 0;
}

static bool ls_top_is_array(const struct mesh_k8s_list_scanner *s)
{
    return (s->stack[(s->depth - 1) / 8] >> ((s->depth - 1) % 8)) & 1;
}

/* Close the innermost container with the byte at index i. */
static int ls_close(struct mesh_k8s_list_scanner *s, const char *data, size_t i,
                    struct mesh_err *err)
{
    s->depth--;
    if (s->depth == 1) {
        s->in_meta = false;
        s->in_items = false;
    }
    return ls_value_done(s, data, i + 1, err);
}

/* First byte c (index i) of a value. */
static int ls_value_start(struct mesh_k8s_list_scanner *s, size_t i, unsigned char c,
                          struct mesh_err *err)
{
    size_t at = s->off + i;
    int m = M_NONE;
    if (s->depth == 1) {
        m = s->member & 0xff;
    } else if (s->depth == 2 && s->in_meta) {
        m = s->member >> 8;
    } else if (s->depth == 2 && s->in_items) {
        s->item_on = true;
        s->item_start_abs = at;
    }
    if ((m == M_ITEMS && c != '[') || (m == M_METADATA && c != '{')) {
        return ls_fail_msg(
            s, MESH_E_PARSE, at,
            m == M_ITEMS ? "\"items\" is not an array" : "\"metadata\" is not an object", err);
    }
    if (m == M_KIND || m == M_RV || m == M_CONT || (m == M_REMAINING && c != '{' && c != '[')) {
        s->cap_val = true;
        s->val_len = 0;
        s->val_long = false;
        ls_capture(s, (const char *)&c, 1);
    }
    switch (c) {
    case '{':
    case '[': {
        if (s->cap_val) {
            return ls_fail_msg(s, MESH_E_PARSE, at, "kind / metadata field is not a string", err);
        }
        int rc = ls_push(s, c == '[', at, err);
        if (rc == 0 && s->depth == 2) {
            s->in_items = m == M_ITEMS;
            s->in_meta = m == M_METADATA;
        }
        return rc;
    }
    case '"':
        s->str_is_key = false;
        s->state = LS_STR;
        return 0;
    case '-':
        s->state = LS_NUM_MINUS;
        return 0;
    case '0':
        s->state = LS_NUM_ZERO;
        return 0;
    case 't':
    case 'f':
    case 'n':
        s->lit = c == 't' ? "true" : (c == 'f' ? "false" : "null");
        s->lit_pos = 1;
        s->state = LS_LIT;
        return 0;
    default:
        if (c >= '1' && c <= '9') {
            s->state = LS_NUM_INT;
            return 0;
        }
        return ls_fail(s, at, c, err);
    }
}

static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* One structural byte (not inside a string, number or literal). */
static int ls_structural(struct mesh_k8s_list_scanner *s, const char *data, size_t i,
                         unsigned char c, struct mesh_err *err)
{
    size_t at = s->off + i;
    switch (s->state) {
    case LS_TOP:
        if (c != '{') {
            return ls_fail(s, at, c, err);
        }
        return ls_value_start(s, i, c, err);
    case LS_VALUE:
        return ls_value_start(s, i, c, err);
    case LS_ARR_FIRST:
        return c == ']' ? ls_close(s, data, i, err) : ls_value_start(s, i, c, err);
    case LS_OBJ_FIRST:
    case LS_OBJ_KEY:
        if (c == '}' && s->state == LS_OBJ_FIRST) {
            return ls_close(s, data, i, err);
        }
        if (c != '"') {
            return ls_fail(s, at, c, err);
        }
        s->str_is_key = true;
        s->cap_key = s->depth == 1 || (s->depth == 2 && s->in_meta);
        s->key_len = 0;
        s->key_long = false;
        ls_capture(s, "\"", 1);
        s->state = LS_STR;
        return 0;
    case LS_COLON:
        if (c != ':') {
            return ls_fail(s, at, c, err);
        }
        s->state = LS_VALUE;
        return 0;
    case LS_AFTER:
        if (c == ',') {
            s->state = ls_top_is_array(s) ? LS_VALUE : LS_OBJ_KEY;
            return 0;
        }
        if (c == (ls_top_is_array(s) ? ']' : '}')) {
            return ls_close(s, data, i, err);
        }
        return ls_fail(s, at, c, err);
    default: /* LS_DONE */
        return ls_fail(s, at, c, err);
    }
}

/* Inside a number: returns 1 when c ends it (c not consumed), 0 when
 * consumed, or an error. */
static int ls_number(struct mesh_k8s_list_scanner *s, unsigned char c, size_t at,
                     struct mesh_err *err)
{
    bool digit = c >= '0' && c <= '9';
    switch (s->state) {
    case LS_NUM_MINUS:
        if (!digit) {
            return ls_fail(s, at, c, err);
        }
        s->state = c == '0' ? LS_NUM_ZERO : LS_NUM_INT;
        return 0;
    case LS_NUM_ZERO:
    case LS_NUM_INT:
        if (digit && s->state == LS_NUM_INT) {
            return 0;
        }
        if (c == '.') {
            s->state = LS_NUM_DOT;
            return 0;
        }
        break;
    case LS_NUM_DOT:
        if (!digit) {
            return ls_fail(s, at, c, err);
        }
        s->state = LS_NUM_FRAC;
        return 0;
    case LS_NUM_FRAC:
        if (digit) {
            return 0;
        }
        break;
    case LS_NUM_E:
        if (c == '+' || c == '-' || digit) {
            s->state = digit ? LS_NUM_EXP : LS_NUM_ESIGN;
            return 0;
        }
        return ls_fail(s, at, c, err);
    case LS_NUM_ESIGN:
        if (!digit) {
            return ls_fail(s, at, c, err);
        }
        s->state = LS_NUM_EXP;
        return 0;
    default: /* LS_NUM_EXP */
        return digit ? 0 : 1;
    }
    if ((c == 'e' || c == 'E') && s->state != LS_NUM_EXP) {
        s->state = LS_NUM_E;
        return 0;
    }
    return 1;
}

/* A \uXXXX escape ended (its last digit at abs_off). UTF-16 surrogates must
 * pair up, a high one (D800-DBFF) followed by a low one (DC00-DFFF), as
 * cJSON requires when it decodes the item. */
static int ls_escape_done(struct mesh_k8s_list_scanner *s, size_t abs_off, struct mesh_err *err)
{
    bool low = s->hex_val >= 0xdc00 && s->hex_val <= 0xdfff;
    bool high = s->hex_val >= 0xd800 && s->hex_val <= 0xdbff;
    if (s->low_pending != low) {
        return ls_fail_msg(s, MESH_E_PARSE, abs_off,
                           low ? "a lone low surrogate \\u escape (DC00-DFFF)"
                               : "a high surrogate \\u escape not followed by a low one",
                           err);
    }
    s->low_pending = high;
    s->state = high ? LS_STR_LOW1 : LS_STR;
    return 0;
}

static int ls_in_string(struct mesh_k8s_list_scanner *s, const char *data, size_t len, size_t *pi,
                        struct mesh_err *err)
{
    size_t i = *pi, j = i;
    /* Fast path: the bytes that need no decision. */
    while (j < len) {
        unsigned char d = (unsigned char)data[j];
        if (d == '"' || d == '\\' || d < 0x20) {
            break;
        }
        j++;
    }
    if (s->cap_key || s->cap_val) {
        ls_capture(s, data + i, j - i + (j < len ? 1 : 0));
    }
    *pi = j + 1;
    if (j == len) {
        *pi = len;
        return 0;
    }
    unsigned char d = (unsigned char)data[j];
    if (d < 0x20) {
        s->state = LS_STR;
        return ls_fail_msg(s, MESH_E_PARSE, s->off + j,
                           "raw control character in a string (JSON requires an escape)", err);
    }
    if (d == '\\') {
        s->state = LS_STR_ESC;
        return 0;
    }
    return s->str_is_key ? ls_key_done(s, s->off + j, err) : ls_value_done(s, data, j + 1, err);
}

/* One byte of an escape sequence (after the backslash). */
static int ls_escape(struct mesh_k8s_list_scanner *s, unsigned char c, size_t at,
                     struct mesh_err *err)
{
    switch (s->state) {
    case LS_STR_ESC:
        if (c == '\0' || strchr("\"\\/bfnrtu", c) == NULL) {
            return ls_fail(s, at, c, err);
        }
        s->state = c == 'u' ? LS_STR_HEX : LS_STR;
        s->hex_left = 4;
        s->hex_val = 0;
        return 0;
    case LS_STR_HEX:
        if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'))) {
            return ls_fail(s, at, c, err);
        }
        s->hex_val = s->hex_val * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        return --s->hex_left == 0 ? ls_escape_done(s, at, err) : 0;
    default: /* LS_STR_LOW1, LS_STR_LOW2: "\\u" of a surrogate's low half */
        if (c != (s->state == LS_STR_LOW1 ? '\\' : 'u')) {
            return ls_fail(s, at, c, err);
        }
        s->state = s->state == LS_STR_LOW1 ? LS_STR_LOW2 : LS_STR_HEX;
        s->hex_left = 4;
        s->hex_val = 0;
        return 0;
    }
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
    while (i < len && rc == 0) {
        unsigned char c = (unsigned char)data[i];
        switch (s->state) {
        case LS_STR:
            rc = ls_in_string(s, data, len, &i, err);
            continue;
        case LS_STR_ESC:
        case LS_STR_HEX:
        case LS_STR_LOW1:
        case LS_STR_LOW2:
            rc = ls_escape(s, c, s->off + i, err);
            if (rc < 0) {
                continue;
            }
            break;
        case LS_NUM_MINUS:
        case LS_NUM_ZERO:
        case LS_NUM_INT:
        case LS_NUM_DOT:
        case LS_NUM_FRAC:
        case LS_NUM_E:
        case LS_NUM_ESIGN:
        case LS_NUM_EXP:
            rc = ls_number(s, c, s->off + i, err);
            if (rc == 1) {
                /* c ends the number and is read again as structure. */
                rc = ls_value_done(s, data, i, err);
                continue;
            }
            break;
        case LS_LIT:
            if (c != (unsigned char)s->lit[s->lit_pos]) {
                rc = ls_fail(s, s->off + i, c, err);
                continue;
            }
            if (s->lit[++s->lit_pos] == '\0') {
                if (s->cap_val) {
                    ls_capture(s, data + i, 1);
                }
                rc = ls_value_done(s, data, i + 1, err);
                i++;
                continue;
            }
            break;
        default:
            if (!is_ws(c)) {
                rc = ls_structural(s, data, i, c, err);
            }
            i++;
            continue;
        }
        if (s->cap_key || s->cap_val) {
            ls_capture(s, data + i, 1);
        }
        i++;
    }
    if (rc < 0) {
        return rc;
    }
    if (s->item_on) {
        /* Keep the started item's bytes of this block, within the bound. */
        size_t from = s->item_start_abs >= s->off ? s->item_start_abs - s->off : 0;
        if (mesh_buf_append(&s->item, data + from, len - from, NULL) < 0) {
            return ls_item_too_big(s, err);
        }
    }
    s->off += len;
    return 0;
}

int mesh_k8s_list_scanner_finish(struct mesh_k8s_list_scanner *s,
                                 struct mesh_k8s_list_meta *out_meta, struct mesh_err *err)
{
    if (s->state != LS_DONE) {
        if (s->state == LS_FAILED) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "list scanner finished after an error");
        }
        int rc =
            mesh_err_set(err, MESH_E_PARSE, 0, "list response truncated at byte %zu: expected %s",
                         s->off, ls_expected(s));
        s->state = LS_FAILED;
        return rc;
    }
    const char *missing = !(s->seen & (1u << M_ITEMS))      ? "no \"items\" array"
                          : !(s->seen & (1u << M_METADATA)) ? "no \"metadata\" object"
                          : s->meta.rv[0] == '\0'           ? "no metadata.resourceVersion"
                                                            : NULL;
    if (missing != NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "list response is not a list (%s; kind \"%s\")",
                            missing, s->meta.kind);
    }
    size_t kl = strlen(s->meta.kind);
    if (kl > 0 && (kl < 4 || strcmp(s->meta.kind + kl - 4, "List") != 0)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "list response has kind \"%s\", not a *List",
                            s->meta.kind);
    }
    *out_meta = s->meta;
    s->meta.cont = NULL;
    return 0;
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

bool mesh_k8s_watch_find_member(const char *json, size_t len, const char *const *path, size_t npath,
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

const char *mesh_k8s_watch_strip_managed_fields(const char *json, size_t len, bool in_event,
                                                struct mesh_buf *scratch, size_t *out_len)
{
    static const char *const event_path[] = {"object", "metadata", "managedFields"};
    const char *const *path = in_event ? event_path : event_path + 1;
    size_t start, end;
    *out_len = len;
    if (!mesh_k8s_watch_find_member(json, len, path, in_event ? 3 : 2, &start, &end)) {
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
