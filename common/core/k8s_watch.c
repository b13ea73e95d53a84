/*
 * k8s_watch.c - pure Kubernetes list/watch protocol pieces: newline framer,
 * event / list / Status decoders, resourceVersion comparison, backoff.
 * No I/O, clocks or randomness (STYLE.md R8): time and jitter come in as
 * arguments. Wire facts are cited in k8s_watch.h.
 */
#include "k8s_watch.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"

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

/* BOOKMARK of a streaming list: metadata.annotations["k8s.io/initial-events-end"] == "true"
 * (spec §2.6). */
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
    mesh_autocjson cJSON *root =
        mesh_json_parse(line, len, max ? max : MESH_K8S_EVENT_MAX_DEFAULT, err);
    if (root == NULL) {
        /* mesh_json_parse fails with TOOBIG or PARSE: keep which. */
        mesh_err_prefix(err, "watch event");
        return len > (max ? max : MESH_K8S_EVENT_MAX_DEFAULT) ? -MESH_E_TOOBIG : -MESH_E_PARSE;
    }
    if (!cJSON_IsObject(root)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "watch event is not a JSON object");
    }
    struct mesh_k8s_watch_event ev;
    memset(&ev, 0, sizeof(ev));
    int rc = decode_event_body(root, &ev, err);
    if (rc < 0) {
        return rc;
    }
    ev.root = MESH_STEAL(root);
    *out = ev;
    return 0;
}

void mesh_k8s_watch_event_cleanup(struct mesh_k8s_watch_event *ev)
{
    cJSON_Delete(ev->root);
    ev->root = NULL;
    ev->object = NULL;
}

int mesh_k8s_watch_decode_list(const char *body, size_t len, size_t max,
                               struct mesh_k8s_watch_list *out, struct mesh_err *err)
{
    mesh_autocjson cJSON *root =
        mesh_json_parse(body, len, max ? max : MESH_K8S_LIST_MAX_DEFAULT, err);
    if (root == NULL) {
        mesh_err_prefix(err, "list response");
        return len > (max ? max : MESH_K8S_LIST_MAX_DEFAULT) ? -MESH_E_TOOBIG : -MESH_E_PARSE;
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(items) || !cJSON_IsObject(md)) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "list response is not a list (needs \"metadata\" and \"items\")");
    }
    struct mesh_k8s_watch_list l;
    memset(&l, 0, sizeof(l));
    l.remaining = -1;
    int rc = copy_str(md, "resourceVersion", l.rv, sizeof(l.rv), true, "list metadata", err);
    if (rc < 0) {
        return rc;
    }
    const char *cont = mesh_json_str(md, "continue");
    long long rem;
    if (mesh_json_int(md, "remainingItemCount", 0, INT64_MAX, false, &rem, NULL) == 0) {
        l.remaining = rem;
    }
    l.cont = (cont != NULL && cont[0] != '\0') ? mesh_strdup(cont) : NULL;
    l.items = items;
    l.root = MESH_STEAL(root);
    *out = l;
    return 0;
}

void mesh_k8s_watch_list_cleanup(struct mesh_k8s_watch_list *l)
{
    cJSON_Delete(l->root);
    mesh_free(l->cont);
    l->root = NULL;
    l->items = NULL;
    l->cont = NULL;
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
