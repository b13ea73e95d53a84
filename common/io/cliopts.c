/*
 * cliopts.c - the shared command-line engine (see cliopts.h).
 */
#include "io/cliopts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/logfmt.h"
#include "core/mem.h"

/* Longest "--flag" name a table may use (TPUMESH_ + it must fit env[]). */
#define FLAG_MAX 48

void mesh_cliopts_env_name(const char *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "TPUMESH_");
    for (const char *p = flag; *p != '\0' && n + 1 < cap; p++) {
        out[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    }
    out[n < cap ? n : cap - 1] = '\0';
}

void mesh_cliopts_usage(const struct mesh_cliopt *defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char env[FLAG_MAX + 16];
        mesh_cliopts_env_name(defs[i].flag, env, sizeof(env));
        char left[64];
        snprintf(left, sizeof(left), "--%s %s", defs[i].flag, defs[i].arg ? defs[i].arg : "");
        printf("  %-34s %s%s%s\n      %s\n", left, env, defs[i].def ? "  default " : "",
               defs[i].def ? defs[i].def : "", defs[i].help);
    }
    printf("  --help, --version\n");
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
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not an integer in %lld..%lld",
                                where, text, d->min, d->max);
        }
        *(int *)(void *)field = (int)v;
        return 0;
    }
    case MESH_CLIOPT_BOOL: {
        int i = choice_index("false|true|0|1|no|yes", text);
        if (i < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not true|false", where, text);
        }
        *(bool *)(void *)field = i % 2 == 1;
        return 0;
    }
    case MESH_CLIOPT_LEVEL:
        if (mesh_logfmt_parse_level(text, (enum mesh_log_level *)(void *)field) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not debug|info|warn|error",
                                where, text);
        }
        return 0;
    case MESH_CLIOPT_FORMAT:
        if (mesh_logfmt_parse_format(text, (enum mesh_log_format *)(void *)field) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not text|json", where, text);
        }
        return 0;
    case MESH_CLIOPT_CHOICE: {
        int i = choice_index(d->arg, text);
        if (i < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not %s", where, text, d->arg);
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

/* Collect "--flag value" / "--flag=value" into given[] (n entries). */
static int collect(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                   const char **given, struct mesh_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return MESH_CLIOPT_HELP;
        }
        if (strcmp(a, "--version") == 0) {
            return MESH_CLIOPT_VERSION;
        }
        if (strncmp(a, "--", 2) != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "unexpected argument '%s'; options start with -- (see --help)", a);
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        const struct mesh_cliopt *d = find(defs, n, name, eq ? (size_t)(eq - name) : strlen(name));
        if (d == NULL) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "unknown option '%s' (see --help)", a);
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
        given[d - defs] = val;
    }
    return MESH_CLIOPT_OK;
}

static const char *env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

int mesh_cliopts_parse(const struct mesh_cliopt *defs, size_t n, int argc, char **argv, void *base,
                       bool *out_explicit, struct mesh_err *err)
{
    const char **given = mesh_calloc(n > 0 ? n : 1, sizeof(*given));
    int rc = collect(defs, n, argc, argv, given, err);
    /* Precedence is applied once per option: flag, variable, default. */
    for (size_t i = 0; rc == MESH_CLIOPT_OK && i < n; i++) {
        char env[FLAG_MAX + 16], where[FLAG_MAX + 32];
        mesh_cliopts_env_name(defs[i].flag, env, sizeof(env));
        const char *text = given[i];
        const char *ev = env_set(env);
        if (text != NULL) {
            snprintf(where, sizeof(where), "--%s", defs[i].flag);
        } else if (ev != NULL) {
            text = ev;
            snprintf(where, sizeof(where), "%s", env);
        } else {
            text = defs[i].def;
            snprintf(where, sizeof(where), "default of --%s", defs[i].flag);
        }
        if (out_explicit != NULL) {
            out_explicit[i] = given[i] != NULL || ev != NULL;
        }
        if (text != NULL && apply(&defs[i], base, text, where, err) < 0) {
            rc = -MESH_E_CONFIG;
        }
    }
    mesh_free(given);
    if (rc < 0) {
        mesh_cliopts_cleanup(defs, n, base);
    }
    return rc;
}

int mesh_cliopts_parse_main(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                            void *base, bool *out_explicit, const char *usage_head,
                            void (*print_version)(void), struct mesh_err *err)
{
    int rc = mesh_cliopts_parse(defs, n, argc, argv, base, out_explicit, err);
    if (rc == MESH_CLIOPT_HELP) {
        fputs(usage_head, stdout);
        mesh_cliopts_usage(defs, n);
        return 1;
    }
    if (rc == MESH_CLIOPT_VERSION) {
        print_version();
        return 1;
    }
    return rc;
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
