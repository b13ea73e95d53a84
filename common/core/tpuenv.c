/*
 * tpuenv.c - parsers for TPU values that arrive as text (see tpuenv.h):
 * worker host lists, bounds, gRPC endpoint lists, the `tpu-env` metadata
 * document and `worker-network-endpoints`. Pure: no I/O.
 */
#include "tpuenv.h"

#include <arpa/inet.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/names.h"
#include "core/workers.h"

/* Longest piece of offending input quoted in an error message. */
#define SHOW_MAX 64

bool mesh_tpuenv_is_grpc(const char *s, size_t len)
{
    return s != NULL && len >= 7 && memcmp(s, "grpc://", 7) == 0;
}

/* Iterate over comma-separated items of s[0..len): *pos is the cursor.
 * Returns false when there is nothing left; an empty input yields one empty
 * item (so "" is reported as an empty entry, like Python's "".split(",")). */
static bool next_item(const char *s, size_t len, size_t *pos, bool *done, const char **out_item,
                      size_t *out_len)
{
    if (*done) {
        return false;
    }
    const char *start = s + *pos;
    const char *comma = memchr(start, ',', len - *pos);
    if (comma == NULL) {
        *out_item = start;
        *out_len = len - *pos;
        *done = true;
        return true;
    }
    *out_item = start;
    *out_len = (size_t)(comma - start);
    *pos += *out_len + 1;
    return true;
}

static int show_len(size_t len)
{
    return (int)(len > SHOW_MAX ? SHOW_MAX : len);
}

/* One item (number idx) of a worker list checked: the text to keep for the
 * worker (a host name or an IP address; borrowed from item) or an error. */
typedef int (*worker_item_fn)(const char *item, size_t ilen, size_t idx, const char **out_val,
                              size_t *out_vlen, struct mesh_err *err);

/* A comma-separated worker list of at most max items (what names it in
 * errors). Pass 0 checks and counts, pass 1 fills one block (model.h); a
 * worker's ip is its text when that is an IP address, else "". */
static int parse_workers(const char *what, worker_item_fn check, const char *s, size_t len,
                         size_t max, struct mesh_worker **out_workers, size_t *out_n,
                         struct mesh_err *err)
{
    if (s == NULL || len > MESH_TPUENV_MAX_INPUT) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "%s is larger than %d bytes", what,
                            MESH_TPUENV_MAX_INPUT);
    }
    size_t n = 0, bytes = 0;
    struct mesh_worker *w = NULL;
    struct mesh_workers_block blk;
    for (int pass = 0; pass < 2; pass++) {
        size_t pos = 0;
        bool done = false;
        const char *item;
        size_t ilen;
        if (pass == 1) {
            w = mesh_workers_block_alloc(n, bytes, &blk);
            n = 0;
        }
        while (next_item(s, len, &pos, &done, &item, &ilen)) {
            if (n >= max) {
                return mesh_err_set(err, MESH_E_TOOBIG, 0, "%s: more than %zu workers", what, max);
            }
            const char *v;
            size_t vlen;
            int rc = check(item, ilen, n, &v, &vlen, err);
            if (rc < 0) {
                return rc; /* pass 0: nothing allocated yet */
            }
            if (pass == 1) {
                w[n].index = (int)n;
                w[n].host = mesh_workers_block_put(&blk, v, vlen);
                w[n].ip = mesh_names_is_ip(v, vlen, NULL) ? w[n].host : "";
            }
            bytes += vlen + 1;
            n++;
        }
    }
    *out_workers = w;
    *out_n = n;
    return 0;
}

static int host_item(const char *item, size_t ilen, size_t idx, const char **out_val,
                     size_t *out_vlen, struct mesh_err *err)
{
    if (!mesh_names_is_host(item, ilen)) {
        if (ilen == 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "entry %zu is empty (remove the stray comma)", idx);
        }
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "entry %zu '%.*s' is not a valid RFC 1123 host name or IP address", idx,
                            show_len(ilen), item);
    }
    *out_val = item;
    *out_vlen = ilen;
    return 0;
}

int mesh_tpuenv_parse_hostnames(const char *s, size_t len, size_t max,
                                struct mesh_worker **out_workers, size_t *out_n,
                                struct mesh_err *err)
{
    return parse_workers("worker host list", host_item, s, len, max, out_workers, out_n, err);
}

int mesh_tpuenv_parse_bounds(const char *name, const char *s, size_t len, int out_bounds[3],
                             struct mesh_err *err)
{
    int b[3];
    size_t pos = 0, i = 0;
    bool done = false;
    const char *item;
    size_t ilen;
    if (s == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s is missing", name);
    }
    while (next_item(s, len, &pos, &done, &item, &ilen)) {
        long long v;
        if (i >= 3 || mesh_parse_ll(item, ilen, 1, 4096, &v, NULL) != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s '%.*s' is not three positive integers \"x,y,z\" (e.g. 2,2,1)",
                                name, show_len(len), s);
        }
        b[i++] = (int)v;
    }
    if (i != 3) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s '%.*s' is not three positive integers \"x,y,z\" (e.g. 2,2,1)", name,
                            show_len(len), s);
    }
    memcpy(out_bounds, b, sizeof(b));
    return 0;
}

/* One endpoint item after TensorFlow's rules (see tpuenv.h). */
static int parse_endpoint(const char *item, size_t ilen, size_t idx,
                          struct mesh_tpuenv_endpoint *ep, struct mesh_err *err)
{
    const char *p = item;
    size_t plen = ilen;
    if (mesh_tpuenv_is_grpc(p, plen)) {
        p += 7;
        plen -= 7;
    }
    const char *colon = memchr(p, ':', plen);
    size_t hlen = colon ? (size_t)(colon - p) : plen;
    long long port = MESH_TPUENV_DEFAULT_PORT;
    if (colon != NULL) {
        const char *ps = colon + 1;
        size_t pslen = plen - hlen - 1;
        if (memchr(ps, ':', pslen) != NULL) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "endpoint %zu '%.*s' has more than one ':' (use grpc://IPv4:PORT; "
                                "IPv6 cannot be written in this format)",
                                idx, show_len(ilen), item);
        }
        if (mesh_parse_ll(ps, pslen, 1, 65535, &port, NULL) != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "endpoint %zu '%.*s' has an invalid port (want 1-65535)", idx,
                                show_len(ilen), item);
        }
    }
    if (hlen == 0 || hlen >= MESH_IP_MAX || !mesh_names_is_host(p, hlen)) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "endpoint %zu '%.*s' is not grpc://HOST[:PORT] with an IPv4 address or "
                            "host name (spaces are not trimmed)",
                            idx, show_len(ilen), item);
    }
    memcpy(ep->ip, p, hlen);
    ep->ip[hlen] = '\0';
    ep->port = (int)port;
    return 0;
}

int mesh_tpuenv_parse_endpoints(const char *s, size_t len, size_t max,
                                struct mesh_tpuenv_endpoint **out_eps, size_t *out_n,
                                struct mesh_err *err)
{
    if (s == NULL || len > MESH_TPUENV_MAX_INPUT) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "endpoint list is larger than %d bytes",
                            MESH_TPUENV_MAX_INPUT);
    }
    size_t pos = 0, n = 0, cap = 0;
    bool done = false;
    const char *item;
    size_t ilen;
    struct mesh_tpuenv_endpoint *eps = NULL;
    while (next_item(s, len, &pos, &done, &item, &ilen)) {
        if (n >= max) {
            mesh_free(eps);
            return mesh_err_set(err, MESH_E_TOOBIG, 0, "more than %zu endpoints listed", max);
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            eps = mesh_reallocarray(eps, cap, sizeof(*eps));
        }
        int rc = parse_endpoint(item, ilen, n, &eps[n], err);
        if (rc < 0) {
            mesh_free(eps);
            return rc;
        }
        n++;
    }
    *out_eps = eps;
    *out_n = n;
    return 0;
}

/* ---- tpu-env ------------------------------------------------------------ */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* After a closing quote only blanks may follow, optionally then a YAML
 * comment (" # ..."). */
static bool only_trailer(const char *v, size_t from, size_t vlen)
{
    size_t i = from;
    while (i < vlen && is_blank(v[i])) {
        i++;
    }
    return i == vlen || (v[i] == '#' && i > from);
}

/* A quoted value's end: v[i] is the closing quote (none when i == vlen),
 * and only a trailer follows it. */
static int check_closed(const char *v, size_t i, size_t vlen, char quote, size_t lineno,
                        struct mesh_err *err)
{
    if (i >= vlen) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "tpu-env line %zu: unterminated %c quote", lineno,
                            quote);
    }
    if (!only_trailer(v, i + 1, vlen)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "tpu-env line %zu: text after the closing quote",
                            lineno);
    }
    return 0;
}

/* Decode a YAML-ish scalar v[0..vlen) (already stripped of leading spaces)
 * into an owned string. */
static int decode_value(const char *v, size_t vlen, size_t lineno, char **out, struct mesh_err *err)
{
    char *o = mesh_malloc(vlen + 1);
    size_t n = 0;
    if (vlen > 0 && v[0] == '\'') {
        size_t i = 1;
        for (; i < vlen; i++) {
            if (v[i] == '\'') {
                if (i + 1 < vlen && v[i + 1] == '\'') {
                    o[n++] = '\'';
                    i++;
                    continue;
                }
                break;
            }
            o[n++] = v[i];
        }
        int rc = check_closed(v, i, vlen, '\'', lineno, err);
        if (rc < 0) {
            mesh_free(o);
            return rc;
        }
    } else if (vlen > 0 && v[0] == '"') {
        size_t i = 1;
        for (; i < vlen && v[i] != '"'; i++) {
            if (v[i] == '\\') {
                if (++i >= vlen) {
                    break;
                }
                switch (v[i]) {
                case 'n':
                    o[n++] = '\n';
                    break;
                case 't':
                    o[n++] = '\t';
                    break;
                case '\\':
                case '"':
                case '/':
                    o[n++] = v[i];
                    break;
                default:
                    mesh_free(o);
                    return mesh_err_set(err, MESH_E_PARSE, 0,
                                        "tpu-env line %zu: unsupported escape '\\%c'", lineno,
                                        v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?');
                }
                continue;
            }
            o[n++] = v[i];
        }
        int rc = check_closed(v, i, vlen, '"', lineno, err);
        if (rc < 0) {
            mesh_free(o);
            return rc;
        }
    } else {
        /* A bare scalar ends at a " #" comment (YAML), then trailing blanks go. */
        for (size_t k = 1; k < vlen; k++) {
            if (v[k] == '#' && is_blank(v[k - 1])) {
                vlen = k;
                break;
            }
        }
        while (vlen > 0 && is_blank(v[vlen - 1])) {
            vlen--;
        }
        memcpy(o, v, vlen);
        n = vlen;
    }
    o[n] = '\0';
    *out = o;
    return 0;
}

static int parse_tpuenv_line(const char *line, size_t llen, size_t lineno,
                             struct mesh_annotations *env, size_t *cap, struct mesh_err *err)
{
    size_t i = 0;
    while (i < llen && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) {
        i++;
    }
    if (i == llen || line[i] == '#') {
        return 0;
    }
    size_t kstart = i;
    while (i < llen && (mesh_names_is_alnum(line[i]) || line[i] == '_')) {
        i++;
    }
    size_t klen = i - kstart;
    if (klen == 0 || i >= llen || line[i] != ':') {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "tpu-env line %zu is not KEY: 'value' (keys are [A-Za-z0-9_])", lineno);
    }
    i++;
    if (i < llen && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
        return mesh_err_set(err, MESH_E_PARSE, 0, "tpu-env line %zu: need a space after ':'",
                            lineno);
    }
    while (i < llen && (line[i] == ' ' || line[i] == '\t')) {
        i++;
    }
    for (size_t k = 0; k < env->n; k++) {
        if (strlen(env->items[k].key) == klen &&
            memcmp(env->items[k].key, line + kstart, klen) == 0) {
            return mesh_err_set(err, MESH_E_PARSE, 0, "tpu-env line %zu: duplicate key '%.*s'",
                                lineno, (int)klen, line + kstart);
        }
    }
    if (env->n >= MESH_TPUENV_MAX_KEYS) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "tpu-env has more than %d keys",
                            MESH_TPUENV_MAX_KEYS);
    }
    char *value = NULL;
    int rc = decode_value(line + i, llen - i, lineno, &value, err);
    if (rc < 0) {
        return rc;
    }
    if (env->n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        env->items = mesh_reallocarray(env->items, *cap, sizeof(*env->items));
    }
    env->items[env->n].key = mesh_strndup(line + kstart, klen);
    env->items[env->n].value = value;
    env->n++;
    return 0;
}

int mesh_tpuenv_parse(const char *buf, size_t len, struct mesh_annotations *out_env,
                      struct mesh_err *err)
{
    struct mesh_annotations env = {0};
    size_t cap = 0, pos = 0, lineno = 1;
    if (len > MESH_TPUENV_MAX_INPUT) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "tpu-env is larger than %d bytes",
                            MESH_TPUENV_MAX_INPUT);
    }
    if (len > 0 && memchr(buf, '\0', len) != NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "tpu-env contains a NUL byte");
    }
    while (pos < len) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        int rc = parse_tpuenv_line(line, llen, lineno, &env, &cap, err);
        if (rc < 0) {
            mesh_annotations_cleanup(&env);
            return rc;
        }
        pos += llen + (nl ? 1 : 0);
        lineno++;
    }
    *out_env = env;
    return 0;
}

/* hostname:uid:ip - keep field [2]. */
static int endpoint_item(const char *item, size_t ilen, size_t idx, const char **out_val,
                         size_t *out_vlen, struct mesh_err *err)
{
    const char *c1 = memchr(item, ':', ilen);
    const char *c2 = c1 ? memchr(c1 + 1, ':', ilen - (size_t)(c1 + 1 - item)) : NULL;
    const char *ip = c2 ? c2 + 1 : NULL;
    size_t iplen = ip ? ilen - (size_t)(ip - item) : 0;
    if (ip == NULL || !mesh_names_is_ip(ip, iplen, NULL)) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "worker-network-endpoints entry %zu '%.*s' is not hostname:uid:IP", idx,
                            show_len(ilen), item);
    }
    *out_val = ip;
    *out_vlen = iplen;
    return 0;
}

int mesh_tpuenv_parse_worker_endpoints(const char *s, size_t len, size_t max,
                                       struct mesh_worker **out_workers, size_t *out_n,
                                       struct mesh_err *err)
{
    return parse_workers("worker-network-endpoints", endpoint_item, s, len, max, out_workers, out_n,
                         err);
}
