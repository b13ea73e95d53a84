/*
 * opts.c - tpumesh-injector's command line (docs/DESIGN.md §6).
 *
 * Every option is "--flag VALUE" or "--flag=VALUE" and also the variable
 * TPUMESH_<FLAG_UPPER_SNAKE> (TPUMESH_IMAGE for --image); the flag wins over
 * the variable, the variable over the default; an empty variable counts as
 * unset.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/names.h"
#include "injector.h"

enum kind { K_STR, K_INT, K_LEVEL, K_FORMAT };

struct def {
    const char *flag; /* without "--" */
    enum kind kind;
    size_t off;
    long long min, max;
    const char *def; /* default text, NULL = none */
    const char *arg; /* placeholder for --help */
    const char *help;
};

#define OFF(f) offsetof(struct mesh_injector_opts, f)

static const struct def defs[] = {
    {"listen", K_STR, OFF(listen), 0, 0, ":9443", "[HOST]:PORT",
     "HTTPS address of POST /mutate (the webhook's Service points here)"},
    {"tls-cert-file", K_STR, OFF(tls_cert), 0, 0, NULL, "FILE",
     "serving certificate (PEM, chain allowed); re-read when it changes"},
    {"tls-key-file", K_STR, OFF(tls_key), 0, 0, NULL, "FILE",
     "its private key (PEM); re-read when it changes"},
    {"image", K_STR, OFF(image), 0, 0, NULL, "REF",
     "image of the injected containers (else the config's, else tpumesh:" MESH_VERSION ")"},
    {"config", K_STR, OFF(config), 0, 0, NULL, "FILE",
     "YAML: initContainer, sidecar, volumes, volumeMounts to inject (else the built-in\n"
     "      defaults, equal to the chart's)"},
    {"http-addr", K_STR, OFF(http_addr), 0, 0, ":9431", "[HOST]:PORT",
     "plain HTTP: /healthz /readyz /metrics"},
    {"apiserver", K_STR, OFF(apiserver), 0, 0, NULL, "URL",
     "API server for the service-account check (else in-cluster; without either it is "
     "skipped)"},
    {"token-file", K_STR, OFF(token_file), 0, 0, NULL, "FILE", "bearer token for --apiserver"},
    {"ca-file", K_STR, OFF(ca_file), 0, 0, NULL, "FILE", "CA bundle for --apiserver"},
    {"check-namespace", K_STR, OFF(check_ns), 0, 0, NULL, "NS",
     "do not serve: create a labelled pod in NS as a dry run through the API server and\n"
     "      check that it was injected (exit 0 yes, 1 no); the chart's helm test runs this"},
    {"cert-check-interval", K_INT, OFF(cert_check_s), 1, 3600, "5", "SECONDS",
     "how often the certificate files are checked for a change"},
    {"log-format", K_FORMAT, OFF(log_format), 0, 0, "text", "text|json", "log line format"},
    {"log-level", K_LEVEL, OFF(log_level), 0, 0, "info", "debug|info|warn|error", "log level"},
};

#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static void env_name(const char *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "TPUMESH_");
    for (const char *p = flag; *p != '\0' && n + 1 < cap; p++) {
        out[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
    }
    out[n] = '\0';
}

static void usage(void)
{
    printf("usage: tpumesh-injector --tls-cert-file FILE --tls-key-file FILE [OPTIONS]\n\n"
           "Mutating admission webhook: POST /mutate takes an admission.k8s.io/v1\n"
           "AdmissionReview of a Pod labelled tpumesh.dev/inject=true and answers with a\n"
           "JSON Patch that adds tpumesh-init, the tpumesh-sidecar native sidecar, their\n"
           "volumes and the read-only mounts. Invalid tpumesh.dev/* annotations are denied\n"
           "with the rule. SIGTERM/SIGINT: stop serving, exit 0.\n\n"
           "Options (each also read from TPUMESH_<FLAG>; the flag wins):\n");
    for (size_t i = 0; i < NDEFS; i++) {
        char env[64];
        env_name(defs[i].flag, env, sizeof(env));
        char left[64];
        snprintf(left, sizeof(left), "--%s %s", defs[i].flag, defs[i].arg ? defs[i].arg : "");
        printf("  %-34s %s%s%s\n      %s\n", left, env, defs[i].def ? "  default " : "",
               defs[i].def ? defs[i].def : "", defs[i].help);
    }
    printf("  --help, --version\n");
}

static int apply(struct mesh_injector_opts *o, const struct def *d, const char *text,
                 const char *where, struct mesh_err *err)
{
    char *base = (char *)o;
    switch (d->kind) {
    case K_STR: {
        char **slot = (char **)(base + d->off);
        mesh_free(*slot);
        *slot = mesh_strdup(text);
        return 0;
    }
    case K_INT: {
        long long v = 0;
        if (mesh_parse_ll(text, strlen(text), d->min, d->max, &v, NULL) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not an integer in %lld..%lld",
                                where, text, d->min, d->max);
        }
        *(int *)(base + d->off) = (int)v;
        return 0;
    }
    case K_LEVEL:
        if (mesh_logfmt_parse_level(text, (enum mesh_log_level *)(base + d->off)) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not debug|info|warn|error",
                                where, text);
        }
        return 0;
    case K_FORMAT:
        if (mesh_logfmt_parse_format(text, (enum mesh_log_format *)(base + d->off)) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not text|json", where, text);
        }
        return 0;
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: unsupported option kind", where);
}

static const struct def *find(const char *flag, size_t len)
{
    for (size_t i = 0; i < NDEFS; i++) {
        if (strlen(defs[i].flag) == len && strncmp(defs[i].flag, flag, len) == 0) {
            return &defs[i];
        }
    }
    return NULL;
}

/* Collect "--flag value" / "--flag=value" into given[]. 1 = help/version. */
static int collect(int argc, char **argv, const char **given, struct mesh_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("tpumesh-injector %s\nlibwebsockets %s\n", MESH_VERSION,
                   lws_get_library_version());
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "unexpected argument '%s'; options start with -- (see --help)", a);
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        const struct def *d = find(name, eq ? (size_t)(eq - name) : strlen(name));
        if (d == NULL) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "unknown option '%s' (see --help)", a);
        }
        const char *val = eq ? eq + 1 : NULL;
        if (val == NULL) {
            if (i + 1 >= argc) {
                return mesh_err_set(err, MESH_E_CONFIG, 0, "--%s needs a value (%s)", d->flag,
                                    d->arg);
            }
            val = argv[++i];
        }
        given[d - defs] = val;
    }
    return 0;
}

int mesh_injector_opts_parse(int argc, char **argv, struct mesh_injector_opts *out,
                             struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    const char *given[NDEFS] = {0};
    int rc = collect(argc, argv, given, err);
    if (rc != 0) {
        return rc;
    }
    for (size_t i = 0; i < NDEFS; i++) {
        char env[64], where[80];
        env_name(defs[i].flag, env, sizeof(env));
        const char *ev = getenv(env);
        const char *text = given[i];
        if (text != NULL) {
            snprintf(where, sizeof(where), "--%s", defs[i].flag);
        } else if (ev != NULL && ev[0] != '\0') {
            text = ev;
            snprintf(where, sizeof(where), "%s", env);
        } else {
            text = defs[i].def;
            snprintf(where, sizeof(where), "default of --%s", defs[i].flag);
        }
        if (text != NULL && apply(out, &defs[i], text, where, err) < 0) {
            mesh_injector_opts_cleanup(out);
            return -MESH_E_CONFIG;
        }
    }
    if (out->check_ns != NULL && !mesh_names_is_dns_label(out->check_ns, strlen(out->check_ns))) {
        rc = mesh_err_set(err, MESH_E_CONFIG, 0, "--check-namespace: '%.64s' is not a namespace",
                          out->check_ns);
        mesh_injector_opts_cleanup(out);
        return rc;
    }
    if (out->check_ns == NULL && (out->tls_cert == NULL || out->tls_key == NULL)) {
        mesh_injector_opts_cleanup(out);
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "--tls-cert-file and --tls-key-file are required: the API server "
                            "calls webhooks over HTTPS only (the chart mounts them from the "
                            "webhook's Secret)");
    }
    return 0;
}

void mesh_injector_opts_cleanup(struct mesh_injector_opts *o)
{
    for (size_t i = 0; i < NDEFS; i++) {
        if (defs[i].kind == K_STR) {
            char **slot = (char **)((char *)o + defs[i].off);
            mesh_free(*slot);
            *slot = NULL;
        }
    }
}

int mesh_injector_parse_addr(const char *flag, const char *addr, char *iface, size_t cap,
                             int *out_port, struct mesh_err *err)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "%s '%s' is not [HOST]:PORT (e.g. :9443, 127.0.0.1:9443)", flag, addr);
    }
    size_t hl = (size_t)(colon - addr);
    const char *host = addr;
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
        host++;
        hl -= 2;
    }
    if (hl >= cap) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s '%s': host too long", flag, addr);
    }
    memcpy(iface, host, hl);
    iface[hl] = '\0';
    long long p = 0;
    if (mesh_parse_ll(colon + 1, strlen(colon + 1), 0, 65535, &p, NULL) < 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0, "%s '%s': port must be 0..65535", flag, addr);
    }
    *out_port = (int)p;
    return 0;
}
