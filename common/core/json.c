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

cJSON *mesh_json_parse(const char *buf, size_t len, size_t max, struct mesh_err *err)
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
    if (memmem(buf, len, "\\u0000", 6) != NULL) {
        copy = mesh_malloc(len + 1);
        memcpy(copy, buf, len);
        copy[len] = '\0';
        mesh_json_mask_nul_escapes(copy, len);
        buf = copy;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
    if (j == NULL) {
        size_t off = (end != NULL && end >= buf) ? (size_t)(end - buf) : 0;
        mesh_err_set(err, MESH_E_PARSE, 0, "malformed JSON near byte %zu", off);
        return NULL;
    }
    /* Only whitespace may follow the value. */
    for (const char *p = end; p != NULL && p < buf + len; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            cJSON_Delete(j);
            mesh_err_set(err, MESH_E_PARSE, 0, "trailing data after JSON value at byte %zu",
                         (size_t)(p - buf));
            return NULL;
        }
    }
    return j;
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
