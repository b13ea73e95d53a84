/*
 * json.c - cJSON helpers.
 */
#include "json.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/mem.h"

size_t mesh_json_mask_nul_escapes(char *buf, size_t len)
{
    size_t masked = 0;
    for (size_t i = 0; i + 6 <= len; i++) {
        if (memcmp(buf + i, "\\u0000", 6) != 0) {
            continue;
        }
        /* A real escape only if the backslash is not itself escaped: an
         * even number of backslashes before it. */
        size_t bs = 0;
        while (bs < i && buf[i - 1 - bs] == '\\') {
            bs++;
        }
        if (bs % 2 == 0) {
            memcpy(buf + i + 2, "fffd", 4);
            masked++;
            i += 5;
        }
    }
    return masked;
}

/* ---- arena ------------------------------------------------------------- */

struct mesh_json_chunk {
    struct mesh_json_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

/* The arena of the parse running on this thread (NULL: none, cJSON allocates from the heap). */
static _Thread_local struct mesh_json_arena *parsing;

static void *arena_alloc(struct mesh_json_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15; /* a node (64 bytes) or a string of the document: no overflow */
    struct mesh_json_chunk *c = a->chunks;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = a->next > n ? a->next : n;
        a->next = cap * 2;
        struct mesh_json_chunk *k = mesh_malloc(sizeof(*k) + cap);
        k->next = c;
        k->cap = cap;
        k->used = 0;
        a->chunks = c = k;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void mesh_json_arena_free(struct mesh_json_arena *a)
{
    while (a->chunks != NULL) {
        struct mesh_json_chunk *c = a->chunks;
        a->chunks = c->next;
        mesh_free(c);
    }
    a->next = 0;
}

static void *hook_malloc(size_t n)
{
    return parsing != NULL ? arena_alloc(parsing, n) : mesh_malloc(n);
}

/* Inside an arena parse cJSON frees only what that parse allocated (a tree it gives up on). */
static void hook_free(void *p)
{
    if (parsing == NULL) {
        mesh_free(p);
    }
}

/* Before main, while there is one thread: cJSON's hooks are process-wide. */
__attribute__((constructor)) static void install_hooks(void)
{
    cJSON_Hooks h = {.malloc_fn = hook_malloc, .free_fn = hook_free};
    cJSON_InitHooks(&h);
}

/* ---- parsing ----------------------------------------------------------- */

/* True when buf holds the 6 bytes \u0000 (escaped or not: the mask decides). */
static bool has_nul_escape(const char *buf, size_t len)
{
    const char *end = buf + len;
    for (const char *p = buf; (p = memchr(p, '\\', (size_t)(end - p))) != NULL; p++) {
        if (end - p >= 6 && memcmp(p, "\\u0000", 6) == 0) {
            return true;
        }
    }
    return false;
}

static cJSON *parse(const char *buf, size_t len, size_t max, struct mesh_json_arena *a,
                    struct mesh_err *err)
{
    if (len > max) {
        mesh_err_set(err, MESH_E_TOOBIG, 0, "JSON document of %zu bytes exceeds the limit of %zu",
                     len, max);
        return NULL;
    }
    /* cJSON decodes \u0000 into a NUL that ends the C string: "a\u0000$(x)"
     * would be read as "a". Such strings become "a\uFFFD$(x)" instead, a
     * value every validator of names, addresses and annotations rejects,
     * so the value is refused as a whole and never silently truncated. */
    mesh_autofree char *copy = NULL;
    if (has_nul_escape(buf, len)) {
        copy = mesh_malloc(len + 1);
        memcpy(copy, buf, len);
        copy[len] = '\0';
        mesh_json_mask_nul_escapes(copy, len);
        buf = copy;
    }
    if (a != NULL && a->chunks == NULL && a->next == 0) {
        /* cJSON's tree of a Pod takes ~4x its JSON text (16-byte rounding included):
         * one chunk, usually. */
        a->next = len < 1024 ? 4096 : 4 * len + 1024;
    }
    const char *end = NULL;
    parsing = a;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (j == NULL) {
        parsing = NULL;
        size_t off = (end != NULL && end >= buf) ? (size_t)(end - buf) : 0;
        mesh_err_set(err, MESH_E_PARSE, 0, "malformed JSON near byte %zu", off);
        return NULL;
    }
    /* Only whitespace may follow the value. */
    for (const char *p = end; p != NULL && p < buf + len; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            cJSON_Delete(j);
            parsing = NULL;
            mesh_err_set(err, MESH_E_PARSE, 0, "trailing data after JSON value at byte %zu",
                         (size_t)(p - buf));
            return NULL;
        }
    }
    parsing = NULL;
    return j;
}

cJSON *mesh_json_parse(const char *buf, size_t len, size_t max, struct mesh_err *err)
{
    return parse(buf, len, max, NULL, err);
}

cJSON *mesh_json_parse_arena(const char *buf, size_t len, size_t max, struct mesh_json_arena *a,
                             struct mesh_err *err)
{
    return parse(buf, len, max, a, err);
}

const cJSON *mesh_json_path(const cJSON *o, const char *dotted)
{
    const char *p = dotted;
    while (o != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char key[128];
        if (n >= sizeof(key) || !cJSON_IsObject(o)) {
            return NULL;
        }
        memcpy(key, p, n);
        key[n] = '\0';
        o = cJSON_GetObjectItemCaseSensitive(o, key);
        p += n;
        if (*p == '.') {
            p++;
        }
    }
    return o;
}

const char *mesh_json_str(const cJSON *o, const char *key)
{
    if (!cJSON_IsObject(o)) {
        return NULL;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int mesh_parse_ll(const char *s, size_t len, long long min, long long max, long long *out_value,
                  struct mesh_err *err)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == len) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "not an integer: empty");
    }
    if (s[i] == '0' && len - i > 1) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "not an integer: leading zero");
    }
    unsigned long long v = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return mesh_err_set(err, MESH_E_INVAL, 0, "not an integer: unexpected character");
        }
        if (v > (ULLONG_MAX - 9) / 10) {
            return mesh_err_set(err, MESH_E_RANGE, 0, "integer too large");
        }
        v = v * 10 + (unsigned)(s[i] - '0');
        if (v > (unsigned long long)LLONG_MAX + 1) {
            return mesh_err_set(err, MESH_E_RANGE, 0, "integer too large");
        }
    }
    long long r;
    if (neg) {
        r = (v == (unsigned long long)LLONG_MAX + 1) ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX) {
            return mesh_err_set(err, MESH_E_RANGE, 0, "integer too large");
        }
        r = (long long)v;
    }
    if (r < min || r > max) {
        return mesh_err_set(err, MESH_E_RANGE, 0, "%lld is outside %lld..%lld", r, min, max);
    }
    *out_value = r;
    return 0;
}

int mesh_json_int(const cJSON *o, const char *key, long long min, long long max, bool allow_string,
                  long long *out_value, struct mesh_err *err)
{
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    if (v == NULL) {
        return mesh_err_set(err, MESH_E_NOTFOUND, 0, "'%s' is missing", key);
    }
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "'%s' is not an integer", key);
        }
        long long r = (long long)d;
        if (r < min || r > max) {
            return mesh_err_set(err, MESH_E_RANGE, 0, "'%s' = %lld is outside %lld..%lld", key, r,
                                min, max);
        }
        *out_value = r;
        return 0;
    }
    if (allow_string && cJSON_IsString(v)) {
        int rc = mesh_parse_ll(v->valuestring, strlen(v->valuestring), min, max, out_value, err);
        if (rc < 0) {
            return mesh_err_prefix(err, "'%s'", key);
        }
        return 0;
    }
    return mesh_err_set(err, MESH_E_INVAL, 0, "'%s' is not an integer", key);
}

/* ---- the pre-scan ---------------------------------------------------------- */

enum { SC_TOKEN, SC_STRING, SC_ESCAPE, SC_SCALAR, SC_FAILED };

void mesh_json_scan_init(struct mesh_json_scan *s, size_t max_depth, size_t max_values,
                         size_t max_string)
{
    memset(s, 0, sizeof(*s));
    s->max_depth = max_depth;
    s->max_values = max_values;
    s->max_string = max_string;
    s->state = SC_TOKEN;
}

static int scan_fail(struct mesh_json_scan *s, struct mesh_err *err)
{
    s->state = SC_FAILED;
    if (s->max_depth > 0 && s->depth > s->max_depth) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "JSON nested deeper than %zu levels",
                            s->max_depth);
    }
    if (s->max_string > 0 && s->str_len > s->max_string) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "a JSON string longer than %zu bytes",
                            s->max_string);
    }
    return mesh_err_set(err, MESH_E_TOOBIG, 0, "more than %zu JSON values", s->max_values);
}

/* One value begins. */
static bool scan_value(struct mesh_json_scan *s)
{
    s->values++;
    return s->max_values == 0 || s->values <= s->max_values;
}

/* A byte outside strings and scalars: false when a cap is passed. */
static bool scan_token(struct mesh_json_scan *s, unsigned char c)
{
    if (c == '"') {
        s->state = SC_STRING;
        s->str_len = 0;
        return scan_value(s);
    }
    if (c == '[' || c == '{') {
        s->depth++;
        return scan_value(s) && (s->max_depth == 0 || s->depth <= s->max_depth);
    }
    if (c == ']' || c == '}') {
        s->depth -= s->depth > 0 ? 1 : 0;
    } else if ((c >= '0' && c <= '9') || c == '-' || (c >= 'a' && c <= 'z')) {
        s->state = SC_SCALAR;
        return scan_value(s);
    }
    /* ',', ':' and white space separate tokens; anything else is for the parse to refuse. */
    return true;
}

/* Inside a string: false when it grows past max_string. */
static bool scan_string(struct mesh_json_scan *s, unsigned char c)
{
    if (s->state == SC_ESCAPE) {
        s->state = SC_STRING;
        return true;
    }
    if (c == '"') {
        s->state = SC_TOKEN;
        return true;
    }
    s->state = c == '\\' ? SC_ESCAPE : SC_STRING;
    return s->max_string == 0 || ++s->str_len <= s->max_string;
}

int mesh_json_scan_feed(struct mesh_json_scan *s, const char *buf, size_t len, struct mesh_err *err)
{
    if (s->state == SC_FAILED) {
        return scan_fail(s, err);
    }
    for (size_t i = 0; i < len; i++) {
        if (s->state == SC_STRING) {
            /* Most of a review's bytes are inside strings: skip to the next
             * quote or backslash at once. */
            size_t j = i;
            while (j < len && buf[j] != '"' && buf[j] != '\\') {
                j++;
            }
            s->str_len += j - i;
            if (s->max_string > 0 && s->str_len > s->max_string) {
                return scan_fail(s, err);
            }
            if (j == len) {
                break;
            }
            i = j;
        }
        unsigned char c = (unsigned char)buf[i];
        if (s->state == SC_STRING || s->state == SC_ESCAPE) {
            if (!scan_string(s, c)) {
                return scan_fail(s, err);
            }
            continue;
        }
        if (s->state == SC_SCALAR) {
            /* A number or literal ends at the first byte that cannot be in one. */
            if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '.' || c == '+' ||
                c == '-' || c == 'E') {
                continue;
            }
            s->state = SC_TOKEN;
        }
        if (!scan_token(s, c)) {
            return scan_fail(s, err);
        }
    }
    return 0;
}
