/*
 * annotations.c - parser for the downward-API annotations file (Go %q
 * values, see annotations.h) and validation of tpumesh's tpumesh.dev keys.
 * Pure: no I/O.
 */
#include "annotations.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/names.h"
#include "core/ports.h"

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Append code point cp as UTF-8 (cp already checked to be a scalar value). */
static size_t put_utf8(char *o, unsigned long cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one escape at s[*i] (just after the backslash) into o. Returns the
 * number of bytes written or -1 with *why set. */
static int unescape(const char *s, size_t end, size_t *i, char *o, const char **why)
{
    char c = s[*i];
    static const char simple_in[] = "abfnrtv\\\"";
    static const char simple_out[] = "\a\b\f\n\r\t\v\\\"";
    const char *p = strchr(simple_in, c);
    if (c != '\0' && p != NULL) {
        o[0] = simple_out[p - simple_in];
        (*i)++;
        return 1;
    }
    if (c >= '0' && c <= '7') {
        /* Octal \NNN: exactly three digits, value <= 255. */
        if (*i + 3 > end) {
            *why = "short octal escape";
            return -1;
        }
        int v = 0;
        for (int k = 0; k < 3; k++) {
            char d = s[*i + (size_t)k];
            if (d < '0' || d > '7') {
                *why = "bad octal escape";
                return -1;
            }
            v = v * 8 + (d - '0');
        }
        if (v > 255) {
            *why = "octal escape above \\377";
            return -1;
        }
        o[0] = (char)v;
        *i += 3;
        return 1;
    }
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits == 0) {
        *why = "unknown escape";
        return -1;
    }
    if (*i + 1 + (size_t)digits > end) {
        *why = "short hex escape";
        return -1;
    }
    unsigned long v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexval(s[*i + 1 + (size_t)k]);
        if (h < 0) {
            *why = "bad hex digit in escape";
            return -1;
        }
        v = v * 16 + (unsigned long)h;
    }
    *i += 1 + (size_t)digits;
    if (c == 'x') {
        o[0] = (char)v; /* a raw byte, as in Go */
        return 1;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *why = "escape is not a Unicode scalar value";
        return -1;
    }
    return (int)put_utf8(o, v);
}

int mesh_annotations_unquote(const char *s, size_t len, char **out_value, struct mesh_err *err)
{
    if (len < 2 || s[0] != '"' || s[len - 1] != '"') {
        return mesh_err_set(err, MESH_E_PARSE, 0, "value is not a \"double-quoted\" string");
    }
    /* Every escape decodes to no more bytes than its source text. */
    char *o = mesh_malloc(len);
    size_t n = 0, end = len - 1;
    const char *why = NULL;
    for (size_t i = 1; i < end;) {
        char c = s[i];
        if (c == '"' || c == '\n') {
            why = c == '"' ? "unescaped '\"' inside the value" : "raw newline inside the value";
            break;
        }
        if (c != '\\') {
            o[n++] = c;
            i++;
            continue;
        }
        i++;
        if (i >= end) {
            why = "backslash at the end of the value";
            break;
        }
        int w = unescape(s, end, &i, o + n, &why);
        if (w < 0) {
            break;
        }
        n += (size_t)w;
    }
    if (why == NULL && memchr(o, '\0', n) != NULL) {
        why = "value contains a NUL byte";
    }
    if (why != NULL) {
        mesh_free(o);
        return mesh_err_set(err, MESH_E_PARSE, 0, "%s", why);
    }
    o[n] = '\0';
    *out_value = o;
    return 0;
}

void mesh_annotations_cleanup(struct mesh_annotations *a)
{
    if (a == NULL) {
        return;
    }
    for (size_t i = 0; i < a->n; i++) {
        mesh_free(a->items[i].key);
        mesh_free(a->items[i].value);
    }
    mesh_free(a->items);
    a->items = NULL;
    a->n = 0;
}

const char *mesh_annotations_get(const struct mesh_annotations *a, const char *key)
{
    if (a == NULL || key == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->items[i].key, key) == 0) {
            return a->items[i].value;
        }
    }
    return NULL;
}

/* Annotation keys: [prefix/]name, where Kubernetes allows [A-Za-z0-9._-] and
 * one '/'; anything else cannot come from the kubelet. */
static bool is_key(const char *k, size_t len)
{
    if (len == 0 || len > 317) {
        return false;
    }
    int slashes = 0;
    for (size_t i = 0; i < len; i++) {
        char c = k[i];
        if (c == '/') {
            slashes++;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_')) {
            return false;
        }
    }
    return slashes <= 1;
}

static int parse_line(const char *line, size_t llen, size_t lineno, struct mesh_annotations *a,
                      size_t *cap, struct mesh_err *err)
{
    if (llen > 0 && line[llen - 1] == '\r') {
        llen--;
    }
    if (llen == 0) {
        return 0;
    }
    const char *eq = memchr(line, '=', llen);
    if (eq == NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "line %zu has no '=' (want key=\"value\")",
                            lineno);
    }
    size_t klen = (size_t)(eq - line);
    if (!is_key(line, klen)) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "line %zu: '%.*s' is not an annotation key",
                            lineno, (int)(klen > 64 ? 64 : klen), line);
    }
    for (size_t i = 0; i < a->n; i++) {
        if (strlen(a->items[i].key) == klen && memcmp(a->items[i].key, line, klen) == 0) {
            return mesh_err_set(err, MESH_E_PARSE, 0, "line %zu: duplicate key '%.*s'", lineno,
                                (int)klen, line);
        }
    }
    if (a->n >= MESH_ANNOTATIONS_MAX_ITEMS) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "more than %d annotations",
                            MESH_ANNOTATIONS_MAX_ITEMS);
    }
    char *value = NULL;
    int rc = mesh_annotations_unquote(eq + 1, llen - klen - 1, &value, err);
    if (rc < 0) {
        return mesh_err_prefix(err, "line %zu (%.*s)", lineno, (int)(klen > 64 ? 64 : klen), line);
    }
    if (a->n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        a->items = mesh_reallocarray(a->items, *cap, sizeof(*a->items));
    }
    a->items[a->n].key = mesh_strndup(line, klen);
    a->items[a->n].value = value;
    a->n++;
    return 0;
}

int mesh_annotations_parse(const char *buf, size_t len, struct mesh_annotations *out_annotations,
                           struct mesh_err *err)
{
    struct mesh_annotations a = {0};
    size_t cap = 0, pos = 0, lineno = 1;
    if (len > MESH_ANNOTATIONS_MAX_INPUT) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "annotations file is larger than %d bytes",
                            MESH_ANNOTATIONS_MAX_INPUT);
    }
    while (pos < len) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        int rc = parse_line(line, llen, lineno, &a, &cap, err);
        if (rc < 0) {
            mesh_annotations_cleanup(&a);
            return rc;
        }
        pos += llen + (nl ? 1 : 0);
        lineno++;
    }
    *out_annotations = a;
    return 0;
}

/* ---- tpumesh.dev keys ---------------------------------------------------- */

#define KEYS_TEXT                                                                                  \
    "tpu, zone, project, job-name, port, address-mode, expected-workers, timeout, "                \
    "megascale-port, inject, containers"

static bool all_chars(const char *s, const char *extra, bool upper, bool underscore)
{
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  (upper && c >= 'A' && c <= 'Z') || (underscore && c == '_') ||
                  (extra && c != '\0' && strchr(extra, c) != NULL);
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool is_lower_start(const char *s)
{
    return s[0] >= 'a' && s[0] <= 'z';
}

/* The value as messages show it: at most 32 bytes, control bytes, quotes
 * and backslashes as '?', so a hostile value stays one short line in a log
 * or an admission answer. */
struct shown {
    char s[81];
};

static struct shown show(const char *v, size_t max)
{
    struct shown o;
    size_t n = 0;
    for (const char *p = v; *p != '\0' && n < max && n + 1 < sizeof(o.s); p++) {
        unsigned char c = (unsigned char)*p;
        o.s[n++] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\') ? '?' : (char)c;
    }
    o.s[n] = '\0';
    return o;
}

/* -MESH_E_CONFIG "annotation KEY="VALUE" <rule>". */
__attribute__((format(printf, 4, 5))) static int bad(struct mesh_err *err, const char *key,
                                                     const char *v, const char *fmt, ...)
{
    char rule[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    return mesh_err_set(err, MESH_E_CONFIG, 0, "annotation %s=\"%s\" %s", key, show(v, 32).s, rule);
}

static int want_int(const char *key, const char *v, long long min, long long max, int *out,
                    struct mesh_err *err)
{
    long long x;
    if (mesh_parse_ll(v, strlen(v), min, max, &x, NULL) != 0) {
        return bad(err, key, v, "is not an integer in %lld..%lld", min, max);
    }
    if (out != NULL) {
        *out = (int)x;
    }
    return 0;
}

static int tpu_rule(const char *v, struct mesh_err *err)
{
    size_t n = strlen(v);
    if (n == 0 || n > 4096 || !all_chars(v, "-,:/.[]", true, true)) {
        return bad(err, "tpumesh.dev/tpu", v,
                   "must be 'local', grpc://IP:PORT[,...] or Cloud TPU name(s), without spaces");
    }
    return 0;
}

static int zone_rule(const char *v, struct mesh_err *err)
{
    size_t n = strlen(v);
    if (n == 0 || n > 63 || !is_lower_start(v) || !all_chars(v, "-", false, false)) {
        return bad(err, "tpumesh.dev/zone", v, "is not a zone (e.g. us-central2-b)");
    }
    return 0;
}

static int project_rule(const char *v, struct mesh_err *err)
{
    size_t n = strlen(v);
    if (n == 0 || n > 100 || !is_lower_start(v) || !all_chars(v, "-.:", false, false)) {
        return bad(err, "tpumesh.dev/project", v,
                   "is not a project ID (lower-case letters, digits, '-')");
    }
    return 0;
}

static int job_name_rule(const char *v, struct mesh_err *err)
{
    /* TensorFlow job names: a letter, then letters, digits and '_'. */
    size_t n = strlen(v);
    bool letter = (v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z');
    if (n == 0 || n > MESH_JOB_NAME_MAX - 1 || !letter || !all_chars(v, NULL, true, true)) {
        return bad(err, "tpumesh.dev/job-name", v,
                   "is not a TensorFlow job name (a letter, then letters, digits, '_'; at most "
                   "%d)",
                   MESH_JOB_NAME_MAX - 1);
    }
    if (strcmp(v, "tpu_worker") == 0) {
        return bad(err, "tpumesh.dev/job-name", v,
                   "is reserved for the TPU's own servers; use e.g. worker");
    }
    return 0;
}

int mesh_annotations_port(const char *v, int *out, struct mesh_err *err)
{
    int p = 0;
    int rc = want_int(MESH_ANNOTATION_PORT, v, 1, 65535, &p, err);
    if (rc < 0) {
        return rc;
    }
    if (mesh_ports_is_reserved(p)) {
        return bad(err, MESH_ANNOTATION_PORT, v,
                   "is reserved: TPU software uses ports " MESH_PORTS_RESERVED_TEXT
                   " in the pod's network namespace; choose another port");
    }
    if (out != NULL) {
        *out = p;
    }
    return 0;
}

int mesh_annotations_address_mode(const char *v, enum mesh_addr_mode *out, struct mesh_err *err)
{
    static const char *const modes[] = {"auto", "dns", "ip"};
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(v, modes[i]) == 0) {
            if (out != NULL) {
                *out = (enum mesh_addr_mode)i;
            }
            return 0;
        }
    }
    return bad(err, MESH_ANNOTATION_ADDRESS_MODE, v,
               "is not one of the accepted values auto, dns, ip");
}

int mesh_annotations_expected_workers(const char *v, int *out, struct mesh_err *err)
{
    return want_int(MESH_ANNOTATION_EXPECTED_WORKERS, v, 1, MESH_ANNOTATION_EXPECTED_MAX, out, err);
}

static int timeout_rule(const char *v, int *out, struct mesh_err *err)
{
    return want_int("tpumesh.dev/timeout", v, 1, 86400, out, err);
}

int mesh_annotations_megascale_port(const char *v, int *out, struct mesh_err *err)
{
    return want_int(MESH_ANNOTATION_MEGASCALE_PORT, v, 1, 65535, out, err);
}

bool mesh_annotations_list_next(const char **cursor, const char **out_item, size_t *out_len)
{
    const char *p = *cursor;
    if (p == NULL) {
        return false;
    }
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    while (n > 0 && *p == ' ') {
        p++;
        n--;
    }
    while (n > 0 && p[n - 1] == ' ') {
        n--;
    }
    *out_item = p;
    *out_len = n;
    *cursor = comma ? comma + 1 : NULL;
    return true;
}

static int containers_rule(const char *v, struct mesh_err *err)
{
    const char *cursor = v;
    const char *name;
    size_t n;
    while (mesh_annotations_list_next(&cursor, &name, &n)) {
        if (n == 0 || !mesh_names_is_dns_label(name, n)) {
            return bad(err, MESH_ANNOTATION_CONTAINERS, v,
                       "must be a comma-separated list of container names (DNS labels)");
        }
    }
    return 0;
}

static int tf_version_rule(const char *v, struct mesh_err *err)
{
    if (*v == '\0' || strlen(v) > 128 || !all_chars(v, "-._+", true, true)) {
        return bad(err, MESH_ANNOTATION_TF_VERSION, v,
                   "is not a TensorFlow version (e.g. 2.12.0 or nightly)");
    }
    return 0;
}

/* mesh_annotations_address_mode as a number rule (the table below). */
static int address_mode_rule(const char *v, int *out, struct mesh_err *err)
{
    enum mesh_addr_mode m = MESH_ADDR_AUTO;
    int rc = mesh_annotations_address_mode(v, &m, err);
    *out = (int)m;
    return rc;
}

/* Every key tpumesh reads: its rule (a string rule or a number rule), and
 * where mesh_annotations_config keeps the value. */
enum kept { NOT_KEPT, STR, NUM, MODE };
#define AT(f) offsetof(struct mesh_annotations_config, f)
static const struct key_rule {
    const char *key;
    int (*str)(const char *v, struct mesh_err *err);
    int (*num)(const char *v, int *out, struct mesh_err *err);
    enum kept kept;
    size_t at;
} key_rules[] = {
    {MESH_ANNOTATION_PREFIX "tpu", tpu_rule, NULL, STR, AT(tpu)},
    {MESH_ANNOTATION_PREFIX "zone", zone_rule, NULL, STR, AT(zone)},
    {MESH_ANNOTATION_PREFIX "project", project_rule, NULL, STR, AT(project)},
    {MESH_ANNOTATION_PREFIX "job-name", job_name_rule, NULL, STR, AT(job_name)},
    {MESH_ANNOTATION_TF_VERSION, tf_version_rule, NULL, STR, AT(tf_version)},
    {MESH_ANNOTATION_PORT, NULL, mesh_annotations_port, NUM, AT(port)},
    {MESH_ANNOTATION_EXPECTED_WORKERS, NULL, mesh_annotations_expected_workers, NUM,
     AT(expected_workers)},
    {MESH_ANNOTATION_PREFIX "timeout", NULL, timeout_rule, NUM, AT(timeout_s)},
    {MESH_ANNOTATION_MEGASCALE_PORT, NULL, mesh_annotations_megascale_port, NUM,
     AT(megascale_port)},
    {MESH_ANNOTATION_ADDRESS_MODE, NULL, address_mode_rule, MODE, AT(address_mode)},
    {MESH_ANNOTATION_CONTAINERS, containers_rule, NULL, NOT_KEPT, 0},
    /* The webhook's switch is a label; as an annotation it is ignored. */
    {MESH_ANNOTATION_PREFIX "inject", NULL, NULL, NOT_KEPT, 0},
};

/* Check v by key's rule and, with c, keep the value in c. */
static int apply(const char *key, const char *v, struct mesh_annotations_config *c,
                 struct mesh_err *err)
{
    const struct key_rule *r = NULL;
    for (size_t i = 0; r == NULL && i < sizeof(key_rules) / sizeof(key_rules[0]); i++) {
        r = strcmp(key, key_rules[i].key) == 0 ? &key_rules[i] : NULL;
    }
    if (r == NULL) {
        if (strncmp(key, MESH_ANNOTATION_PREFIX, strlen(MESH_ANNOTATION_PREFIX)) != 0) {
            return 0; /* not ours */
        }
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "unknown annotation %s: accepted tpumesh.dev/ keys are " KEYS_TEXT,
                            show(key, 80).s);
    }
    int n = 0;
    int rc = r->str != NULL ? r->str(v, err) : (r->num != NULL ? r->num(v, &n, err) : 0);
    if (rc < 0 || c == NULL) {
        return rc;
    }
    if (r->kept == STR) {
        char **field = (char **)((char *)c + r->at);
        mesh_free(*field);
        *field = mesh_strdup(v);
    } else if (r->kept == NUM) {
        *(int *)((char *)c + r->at) = n;
    } else if (r->kept == MODE) {
        c->has_address_mode = true;
        c->address_mode = (enum mesh_addr_mode)n;
    }
    return 0;
}

int mesh_annotations_check(const char *key, const char *v, struct mesh_err *err)
{
    return apply(key, v, NULL, err);
}

_Static_assert(MESH_ADDR_AUTO == 0 && MESH_ADDR_DNS == 1 && MESH_ADDR_IP == 2,
               "address-mode table order");

void mesh_annotations_config_cleanup(struct mesh_annotations_config *c)
{
    if (c == NULL) {
        return;
    }
    mesh_free(c->tpu);
    mesh_free(c->zone);
    mesh_free(c->project);
    mesh_free(c->job_name);
    mesh_free(c->tf_version);
    memset(c, 0, sizeof(*c));
}

int mesh_annotations_config(const struct mesh_annotations *a,
                            struct mesh_annotations_config *out_config, struct mesh_err *err)
{
    struct mesh_annotations_config c = {0};
    for (size_t i = 0; i < a->n; i++) {
        int rc = apply(a->items[i].key, a->items[i].value, &c, err);
        if (rc < 0) {
            mesh_annotations_config_cleanup(&c);
            return rc;
        }
    }
    *out_config = c;
    return 0;
}
