/*
 * opts.c - tpumesh-sidecar's command line (docs/DESIGN.md §6).
 *
 * Every option is "--flag VALUE" or "--flag=VALUE" and also the variable
 * TPUMESH_<FLAG_UPPER_SNAKE>; the flag wins over the variable, the variable
 * over the default; an empty variable counts as unset. The pod name also
 * falls back to POD_NAME (the downward-API convention). Each value is
 * converted once, so an error names exactly where it came from.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/ports.h"
#include "sidecar.h"

enum kind { K_STR, K_INT, K_BOOL, K_MODE, K_LEVEL, K_FORMAT, K_WATCH };

struct def {
    const char *flag; /* without "--" */
    enum kind kind;
    size_t off;
    long long min, max;
    const char *def; /* default text, NULL = none */
    const char *arg; /* placeholder for --help */
    const char *help;
};

#define OFF(f) offsetof(struct mesh_sidecar_opts, f)

static const struct def defs[] = {
    {"out-dir", K_STR, OFF(out_dir), 0, 0, "/var/run/tpumesh", "DIR",
     "shared volume the files are published into"},
    {"log-format", K_FORMAT, OFF(log_format), 0, 0, "text", "text|json", "log line format"},
    {"log-level", K_LEVEL, OFF(log_level), 0, 0, "info", "debug|info|warn|error", "log level"},
    {"apiserver", K_STR, OFF(apiserver), 0, 0, NULL, "URL",
     "Kubernetes API server (else in-cluster, else kubeconfig)"},
    {"kubeconfig", K_STR, OFF(kubeconfig), 0, 0, NULL, "FILE", "kubeconfig (else $KUBECONFIG)"},
    {"token-file", K_STR, OFF(token_file), 0, 0, NULL, "FILE",
     "bearer token file for --apiserver (re-read every minute and after a 401)"},
    {"ca-file", K_STR, OFF(ca_file), 0, 0, NULL, "FILE", "CA bundle for --apiserver"},
    {"namespace", K_STR, OFF(ns), 0, 0, NULL, "NS",
     "namespace of this pod and its peers (else $POD_NAMESPACE / in-cluster file)"},
    {"selector", K_STR, OFF(selector), 0, 0, NULL, "LABELS",
     "label selector of the peer pods (else derived from this pod's labels)"},
    {"pod-name", K_STR, OFF(pod_name), 0, 0, NULL, "NAME", "this pod's name (else $POD_NAME)"},
    {"port", K_INT, OFF(port), 1, 65535, "10000", "PORT",
     "DTensor port of every worker (else annotation tpumesh.dev/port)"},
    {"address-mode", K_MODE, OFF(address_mode), 0, 0, "auto", "auto|dns|ip",
     "worker addresses: <hostname>.<subdomain>, pod IP, or dns when every pod has both\n"
     "      (else annotation tpumesh.dev/address-mode)"},
    {"expected-workers", K_INT, OFF(expected_workers), 1, MESH_WORKERS_MAX, NULL, "N",
     "worker count, all slices (else annotation tpumesh.dev/expected-workers, the owning "
     "Job/JobSet/StatefulSet, slice hosts x slices; none: never complete)"},
    {"job-name", K_STR, OFF(job_name), 0, 0, NULL, "NAME",
     "DTENSOR_JOB_NAME (else the init container's, else DTensor's default)"},
    {"http-addr", K_STR, OFF(http_addr), 0, 0, ":9431", "[HOST]:PORT",
     "probes and metrics: /healthz /readyz /metrics /topology, WebSocket /watch"},
    {"grpc-addr", K_STR, OFF(grpc_addr), 0, 0, ":9432", "[HOST]:PORT",
     "gRPC: grpc.health.v1.Health and tpumesh.v1.Topology (Get, Watch)"},
    {"watch-mode", K_WATCH, OFF(watch_mode), 0, 0, "auto", "direct|relay|auto",
     "direct: watch the API; relay: follow a relay sidecar over gRPC (falls back to\n"
     "      the API); auto: relay from 33 expected workers on (docs/scale.md)"},
    {"relay-fanout", K_INT, OFF(relay_fanout), 2, 1024, "64", "N",
     "relay mode: most subscribers one sidecar serves (larger jobs form a tree)"},
    {"relay-fallback", K_INT, OFF(relay_fallback_s), 1, 3600, "10", "SECONDS",
     "relay mode: watch the API after this long (jittered to [S/2, S]) without the relay"},
    {"watch-max-clients", K_INT, OFF(watch_max_clients), 1, 128, "16", "N",
     "most WebSocket /watch clients at once on --http-addr (more get 503)"},
    {"verify-dns", K_BOOL, OFF(verify_dns), 0, 0, "false", NULL,
     "in dns mode, count a worker only once its name resolves to its pod IP"},
    {"stall-timeout", K_INT, OFF(stall_timeout_s), 5, 3600, "90", "SECONDS",
     "a watch that delivers no byte (not even a bookmark) this long is reconnected"},
    {"stuck-limit", K_INT, OFF(stuck_limit_s), 10, 86400, "900", "SECONDS",
     "/healthz fails when the API made no progress for this long"},
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
    printf("usage: tpumesh-sidecar [OPTIONS]\n\n"
           "Lists and watches this job's pods, publishes topology.json, dtensor.env,\n"
           "tf_config.json, tpu.env and jax.env atomically whenever the worker list\n"
           "changes, and is ready (/readyz 200) only while the published topology is\n"
           "complete. SIGTERM/SIGINT: stop watching, finish a publish, exit 0.\n\n"
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

/* Convert text (from `where`) into the option. */
static int apply(struct mesh_sidecar_opts *o, const struct def *d, const char *text,
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
    case K_BOOL: {
        bool v;
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0 || strcmp(text, "yes") == 0) {
            v = true;
        } else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0 ||
                   strcmp(text, "no") == 0) {
            v = false;
        } else {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not true|false", where, text);
        }
        *(bool *)(base + d->off) = v;
        return 0;
    }
    case K_MODE: {
        enum mesh_addr_mode m;
        if (strcmp(text, "auto") == 0) {
            m = MESH_ADDR_AUTO;
        } else if (strcmp(text, "dns") == 0) {
            m = MESH_ADDR_DNS;
        } else if (strcmp(text, "ip") == 0) {
            m = MESH_ADDR_IP;
        } else {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not auto|dns|ip", where, text);
        }
        *(enum mesh_addr_mode *)(base + d->off) = m;
        return 0;
    }
    case K_LEVEL:
        if (mesh_logfmt_parse_level(text, (enum mesh_log_level *)(base + d->off)) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not debug|info|warn|error",
                                where, text);
        }
        return 0;
    case K_WATCH: {
        int m;
        if (strcmp(text, "auto") == 0) {
            m = MESH_SIDECAR_WATCH_AUTO;
        } else if (strcmp(text, "direct") == 0) {
            m = MESH_SIDECAR_WATCH_DIRECT;
        } else if (strcmp(text, "relay") == 0) {
            m = MESH_SIDECAR_WATCH_RELAY;
        } else {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%s' is not direct|relay|auto", where,
                                text);
        }
        *(int *)(base + d->off) = m;
        return 0;
    }
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

int mesh_sidecar_opts_parse(int argc, char **argv, struct mesh_sidecar_opts *out,
                            struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    /* Flag values are collected first so precedence is simple: flag, then
     * variable, then default, each applied once. */
    const char *given[NDEFS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            /* Second line: the libraries that talk to the network (libcurl
             * names itself and the TLS, zlib, ... libraries it loads). */
            printf("tpumesh-sidecar %s\n%s\n", MESH_VERSION, curl_version());
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
        if (val == NULL && d->kind == K_BOOL) {
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
        } else if (strcmp(defs[i].flag, "pod-name") == 0 && getenv("POD_NAME") != NULL &&
                   getenv("POD_NAME")[0] != '\0') {
            text = getenv("POD_NAME");
            snprintf(where, sizeof(where), "POD_NAME");
        } else {
            text = defs[i].def;
            snprintf(where, sizeof(where), "default of --%s", defs[i].flag);
        }
        if (text != NULL && apply(out, &defs[i], text, where, err) < 0) {
            return -MESH_E_CONFIG;
        }
        bool explicit_value = given[i] != NULL || (ev != NULL && ev[0] != '\0');
        if (explicit_value && defs[i].off == OFF(port)) {
            out->port_given = true;
        } else if (explicit_value && defs[i].off == OFF(address_mode)) {
            out->address_mode_given = true;
        }
    }
    return mesh_sidecar_check_ports(out, "DTensor port (--port / TPUMESH_PORT)", err);
}

int mesh_sidecar_check_ports(const struct mesh_sidecar_opts *o, const char *port_what,
                             struct mesh_err *err)
{
    struct mesh_port_use u[3] = {
        {port_what, o->port},
        {"probe port (--http-addr)", 0},
        {"gRPC port (--grpc-addr)", 0},
    };
    const char *addrs[2] = {o->http_addr, o->grpc_addr};
    for (int k = 0; k < 2; k++) {
        /* A malformed address is reported where it is used (http.c names
         * the flag and the accepted forms). */
        if (addrs[k] != NULL) {
            (void)mesh_ports_of_addr(addrs[k], strlen(addrs[k]), &u[k + 1].port, NULL);
        }
    }
    return mesh_ports_check(u, 3, err);
}

void mesh_sidecar_opts_cleanup(struct mesh_sidecar_opts *o)
{
    for (size_t i = 0; i < NDEFS; i++) {
        if (defs[i].kind == K_STR) {
            char **slot = (char **)((char *)o + defs[i].off);
            mesh_free(*slot);
            *slot = NULL;
        }
    }
}
