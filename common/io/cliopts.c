/*
 * cliopts.c - the command-line engine of the three programs (see cliopts.h).
 */
#include "io/cliopts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/logfmt.h"
#include "core/mem.h"
#include "io/log.h"

/* Longest "--flag" name a table may use (TPUMESH_ + it must fit env[]). */
#define FLAG_MAX 48
/* The boolean spellings: even index false, odd index true. */
#define BOOLS "false|true|0|1|no|yes|off|on"

void mesh_cliopts_env_name(const char *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "TPUMESH_");
    for (const char *p = flag; *p != '\0' && n + 1 < cap; p++) {
        out[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    }
    out[n < cap ? n : cap - 1] = '\0';
}

/* The option list of --help on stdout, in table order. */
static void usage(const struct mesh_cliopt *defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char env[FLAG_MAX + 16];
        mesh_cliopts_env_name(defs[i].flag, env, sizeof(env));
        char left[64];
        snprintf(left, sizeof(left), "--%s %s", defs[i].flag,
                 defs[i].arg ? defs[i].arg : (defs[i].kind == MESH_CLIOPT_BOOL ? "[BOOL]" : ""));
        printf("  %-34s %s%s%s\n      %s\n", left, env, defs[i].def ? "  default " : "",
               defs[i].def ? defs[i].def : "", defs[i].help);
    }
    printf("  --help, --version\n"
           "BOOL is true|false (also 1|0, yes|no, on|off); a bare --flag means true.\n");
}

/* The index of text among the '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *text)
{
    size_t tl = strlen(text);
    int idx = 0;
    for (const char *p = choices; p != NULL && *p != '\0'; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (len == tl && strncmp(p, text, len) == 0) {
            return idx;
        }
        p = bar != NULL ? bar + 1 : NULL;
    }
    return -1;
}

/* Convert text (from `where`) into the field of d. */
static int apply(const struct mesh_cliopt *d, void *base, const char *text, const char *where,
                 struct mesh_err *err)
{
    char *field = (char *)base + d->off;
    switch (d->kind) {
    case MESH_CLIOPT_STR: {
        char **slot = (char **)(void *)field;
        mesh_free(*slot);
        *slot = mesh_strdup(text);
        return 0;
    }
    case MESH_CLIOPT_INT: {
        long long v = 0;
        if (mesh_parse_ll(text, strlen(text), d->min, d->max, &v, NULL) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.64s' is not an integer in %lld..%lld", where, text, d->min,
                                d->max);
        }
        *(int *)(void *)field = (int)v;
        return 0;
    }
    case MESH_CLIOPT_BOOL: {
        int i = choice_index(BOOLS, text);
        if (i < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.64s' is not a boolean (true|false, 1|0, yes|no, on|off)",
                                where, text);
        }
        *(bool *)(void *)field = i % 2 == 1;
        return 0;
    }
    case MESH_CLIOPT_LEVEL:
        if (mesh_logfmt_parse_level(text, (enum mesh_log_level *)(void *)field) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%.64s' is not debug|info|warn|error",
                                where, text);
        }
        return 0;
    case MESH_CLIOPT_FORMAT:
        if (mesh_logfmt_parse_format(text, (enum mesh_log_format *)(void *)field) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%.64s' is not text|json", where, text);
        }
        return 0;
    case MESH_CLIOPT_CHOICE: {
        int i = choice_index(d->arg, text);
        if (i < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%.64s' is not %s", where, text,
                                d->arg);
        }
        *(int *)(void *)field = i;
        return 0;
    }
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: unsupported option kind", where);
}

static const struct mesh_cliopt *find(const struct mesh_cliopt *defs, size_t n, const char *flag,
                                      size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(defs[i].flag) == len && strncmp(defs[i].flag, flag, len) == 0) {
            return &defs[i];
        }
    }
    return NULL;
}

/* Collect "--flag value" / "--flag=value" into given[] (n entries; the last
 * occurrence wins). --help wins over everything, --version over the rest. */
static int collect(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                   const char **given, struct mesh_err *err)
{
    int action = MESH_CLIOPT_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return MESH_CLIOPT_HELP;
        }
        if (strcmp(a, "--version") == 0) {
            action = MESH_CLIOPT_VERSION;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "unexpected argument '%.64s': options start with -- (see --help)",
                                a);
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct mesh_cliopt *d = find(defs, n, name, nlen);
        if (d == NULL) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "unknown option '--%.*s' (see --help)",
                                (int)(nlen > 64 ? 64 : nlen), name);
        }
        const char *val = eq ? eq + 1 : NULL;
        if (val == NULL && d->kind == MESH_CLIOPT_BOOL) {
            val = "true";
        } else if (val == NULL) {
            if (i + 1 >= argc) {
                return mesh_err_set(err, MESH_E_CONFIG, 0, "--%s needs a value (%s)", d->flag,
                                    d->arg);
            }
            val = argv[++i];
        }
        if (val[0] == '\0') {
            /* As an empty variable is unset, an empty flag is no value at all. */
            return mesh_err_set(err, MESH_E_CONFIG, 0, "--%s needs a non-empty value (%s)", d->flag,
                                d->arg != NULL ? d->arg : "true|false");
        }
        given[d - defs] = val;
    }
    return action;
}

static const char *env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Apply flag > layer > variable > default to every row. */
static int convert(const struct mesh_cliopt *defs, size_t n, const char **given, void *base,
                   const struct mesh_cliopt_layer *layer, enum mesh_cliopt_source *out_source,
                   struct mesh_err *err)
{
    for (size_t i = 0; i < n; i++) {
        char env[FLAG_MAX + 16], where[FLAG_MAX + 96];
        mesh_cliopts_env_name(defs[i].flag, env, sizeof(env));
        enum mesh_cliopt_source src = MESH_CLIOPT_FROM_FLAG;
        const char *text = given[i];
        if (text != NULL) {
            snprintf(where, sizeof(where), "--%s", defs[i].flag);
        } else if (layer != NULL &&
                   (text = layer->get(layer->arg, defs[i].flag, where, sizeof(where))) != NULL) {
            src = MESH_CLIOPT_FROM_LAYER;
        } else if ((text = env_set(env)) != NULL) {
            src = MESH_CLIOPT_FROM_ENV;
            snprintf(where, sizeof(where), "%s", env);
        } else {
            text = defs[i].def;
            src = MESH_CLIOPT_FROM_DEFAULT;
            snprintf(where, sizeof(where), "default of --%s", defs[i].flag);
        }
        if (out_source != NULL) {
            out_source[i] = src;
        }
        if (text != NULL && apply(&defs[i], base, text, where, err) < 0) {
            return -MESH_E_CONFIG;
        }
        if (text != NULL) {
            /* What the operator asked for, and from where (none are secrets). */
            mesh_debug("opts", "--%s = '%.200s' (from %s)", defs[i].flag, text, where);
        }
    }
    return 0;
}

int mesh_cliopts_parse(const struct mesh_cliopt *defs, size_t n, int argc, char **argv, void *base,
                       const struct mesh_cliopt_layer *layer, enum mesh_cliopt_source *out_source,
                       struct mesh_err *err)
{
    const char **given = mesh_calloc(n > 0 ? n : 1, sizeof(*given));
    int rc = collect(defs, n, argc, argv, given, err);
    if (rc == MESH_CLIOPT_OK && layer != NULL && layer->open != NULL) {
        rc = layer->open(layer->arg, err);
    }
    if (rc == MESH_CLIOPT_OK) {
        rc = convert(defs, n, given, base, layer, out_source, err);
    }
    mesh_free(given);
    if (rc < 0) {
        mesh_cliopts_cleanup(defs, n, base);
    }
    return rc;
}

int mesh_cliopts_parse_main(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                            void *base, const struct mesh_cliopt_layer *layer,
                            enum mesh_cliopt_source *out_source, const struct mesh_cliopt_usage *u,
                            struct mesh_err *err)
{
    int rc = mesh_cliopts_parse(defs, n, argc, argv, base, layer, out_source, err);
    if (rc == MESH_CLIOPT_HELP) {
        fputs(u->head, stdout);
        usage(defs, n);
        if (u->tail != NULL) {
            fputs(u->tail, stdout);
        }
        return 1;
    }
    if (rc == MESH_CLIOPT_VERSION) {
        u->print_version();
        return 1;
    }
    return rc;
}

const char *mesh_cliopts_peek(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                              const char *flag)
{
    const struct mesh_cliopt *d = find(defs, n, flag, strlen(flag));
    if (d == NULL) {
        return NULL;
    }
    size_t fl = strlen(flag);
    const char *v = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, flag, fl) != 0) {
            continue;
        }
        if (a[2 + fl] == '=') {
            v = a + 3 + fl;
        } else if (a[2 + fl] == '\0' && d->kind == MESH_CLIOPT_BOOL) {
            v = "true";
        } else if (a[2 + fl] == '\0' && i + 1 < argc) {
            v = argv[++i];
        }
    }
    if (v != NULL) {
        return v;
    }
    char env[FLAG_MAX + 16];
    mesh_cliopts_env_name(flag, env, sizeof(env));
    return env_set(env);
}

void mesh_cliopts_log_setup(const struct mesh_cliopt *defs, size_t n, int argc, char **argv)
{
    enum mesh_log_level level = MESH_LOG_INFO;
    enum mesh_log_format format = MESH_LOG_TEXT;
    const char *v = mesh_cliopts_peek(defs, n, argc, argv, "log-level");
    if (v != NULL) {
        (void)mesh_logfmt_parse_level(v, &level); /* malformed: the parse reports it */
    }
    v = mesh_cliopts_peek(defs, n, argc, argv, "log-format");
    if (v != NULL) {
        (void)mesh_logfmt_parse_format(v, &format);
    }
    mesh_log_setup(level, format);
}

int mesh_cliopts_fail(const char *mod, const struct mesh_err *err)
{
    mesh_error(mod, "command line failed (exit 2, %s): %s", mesh_strerror(MESH_E_CONFIG), err->msg);
    return 2;
}

void mesh_cliopts_cleanup(const struct mesh_cliopt *defs, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        if (defs[i].kind == MESH_CLIOPT_STR) {
            char **slot = (char **)(void *)((char *)base + defs[i].off);
            mesh_free(*slot);
            *slot = NULL;
        }
    }
}
