/*
 * opts.c - tpumesh-sidecar's command line (docs/DESIGN.md §6).
 *
 * The option table for the shared engine (io/cliopts.h: "--flag VALUE",
 * "--flag=VALUE", TPUMESH_<FLAG_UPPER_SNAKE>, flag > variable > default).
 * The pod name also falls back to POD_NAME (the downward-API convention).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/ports.h"
#include "io/cliopts.h"
#include "sidecar.h"

#define OFF(f) offsetof(struct mesh_sidecar_opts, f)

static const struct mesh_cliopt defs[] = {
    {"out-dir", MESH_CLIOPT_STR, OFF(out_dir), 0, 0, "/var/run/tpumesh", "DIR",
     "shared volume the files are published into"},
    {"log-format", MESH_CLIOPT_FORMAT, OFF(log_format), 0, 0, "text", "text|json",
     "log line format"},
    {"log-level", MESH_CLIOPT_LEVEL, OFF(log_level), 0, 0, "info", "debug|info|warn|error",
     "log level"},
    {"apiserver", MESH_CLIOPT_STR, OFF(apiserver), 0, 0, NULL, "URL",
     "Kubernetes API server (else in-cluster, else kubeconfig)"},
    {"kubeconfig", MESH_CLIOPT_STR, OFF(kubeconfig), 0, 0, NULL, "FILE",
     "kubeconfig (else $KUBECONFIG)"},
    {"token-file", MESH_CLIOPT_STR, OFF(token_file), 0, 0, NULL, "FILE",
     "bearer token file for --apiserver (re-read every minute and after a 401)"},
    {"ca-file", MESH_CLIOPT_STR, OFF(ca_file), 0, 0, NULL, "FILE", "CA bundle for --apiserver"},
    {"namespace", MESH_CLIOPT_STR, OFF(ns), 0, 0, NULL, "NS",
     "namespace of this pod and its peers (else $POD_NAMESPACE / in-cluster file)"},
    {"selector", MESH_CLIOPT_STR, OFF(selector), 0, 0, NULL, "LABELS",
     "label selector of the peer pods (else derived from this pod's labels)"},
    {"pod-name", MESH_CLIOPT_STR, OFF(pod_name), 0, 0, NULL, "NAME",
     "this pod's name (else $POD_NAME)"},
    {"port", MESH_CLIOPT_INT, OFF(port), 1, 65535, "10000", "PORT",
     "DTensor port of every worker (else annotation tpumesh.dev/port)"},
    {"address-mode", MESH_CLIOPT_CHOICE, OFF(address_mode), 0, 0, "auto", "auto|dns|ip",
     "worker addresses: <hostname>.<subdomain>, pod IP, or dns when every pod has both\n"
     "      (else annotation tpumesh.dev/address-mode)"},
    {"expected-workers", MESH_CLIOPT_INT, OFF(expected_workers), 1, MESH_WORKERS_MAX, NULL, "N",
     "worker count, all slices (else annotation tpumesh.dev/expected-workers, the owning "
     "Job/JobSet/StatefulSet, slice hosts x slices; none: never complete)"},
    {"job-name", MESH_CLIOPT_STR, OFF(job_name), 0, 0, NULL, "NAME",
     "DTENSOR_JOB_NAME (else the init container's, else DTensor's default)"},
    {"http-addr", MESH_CLIOPT_STR, OFF(http_addr), 0, 0, ":9431", "[HOST]:PORT",
     "probes and metrics: /healthz /readyz /metrics /topology, WebSocket /watch"},
    {"grpc-addr", MESH_CLIOPT_STR, OFF(grpc_addr), 0, 0, ":9432", "[HOST]:PORT",
     "gRPC: grpc.health.v1.Health and tpumesh.v1.Topology (Get, Watch)"},
    {"watch-mode", MESH_CLIOPT_CHOICE, OFF(watch_mode), 0, 0, "auto", "auto|direct|relay",
     "direct: watch the API; relay: follow a relay sidecar over gRPC (falls back to\n"
     "      the API); auto: relay from 33 expected workers on (docs/scale.md)"},
    {"relay-fanout", MESH_CLIOPT_INT, OFF(relay_fanout), 2, 1024, "64", "N",
     "relay mode: most subscribers one sidecar serves (larger jobs form a tree)"},
    {"relay-fallback", MESH_CLIOPT_INT, OFF(relay_fallback_s), 1, 3600, "10", "SECONDS",
     "relay mode: watch the API after this long (jittered to [S/2, S]) without the relay"},
    {"watch-max-clients", MESH_CLIOPT_INT, OFF(watch_max_clients), 1, 128, "16", "N",
     "most WebSocket /watch clients at once on --http-addr (more get 503)"},
    {"verify-dns", MESH_CLIOPT_BOOL, OFF(verify_dns), 0, 0, "false", NULL,
     "in dns mode, count a worker only once its name resolves to its pod IP"},
    {"stall-timeout", MESH_CLIOPT_INT, OFF(stall_timeout_s), 5, 3600, "90", "SECONDS",
     "a watch that delivers no byte (not even a bookmark) this long is reconnected"},
    {"stuck-limit", MESH_CLIOPT_INT, OFF(stuck_limit_s), 10, 86400, "900", "SECONDS",
     "/healthz fails when the API made no progress for this long"},
};

#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char usage_head[] =
    "usage: tpumesh-sidecar [OPTIONS]\n\n"
    "Lists and watches this job's pods, publishes topology.json, dtensor.env,\n"
    "tf_config.json, tpu.env and jax.env atomically whenever the worker list\n"
    "changes, and is ready (/readyz 200) only while the published topology is\n"
    "complete. SIGTERM/SIGINT: stop watching, finish a publish, exit 0.\n\n"
    "Options (each also read from TPUMESH_<FLAG>; the flag wins):\n";

static const char usage_tail[] = "\n"
                                 "Exit codes:\n"
                                 "  0  stopped by SIGTERM or SIGINT (the files stay), or --help, "
                                 "--version\n"
                                 "  1  runtime failure (a server cannot start, the loop failed)\n"
                                 "  2  usage or configuration error (bad flag or value, "
                                 "conflicting ports, bad namespace)\n"
                                 "The last log line says why.\n";

static void print_version(void)
{
    /* Second line: the libraries that talk to the network (libcurl names
     * itself and the TLS, zlib, ... libraries it loads). */
    printf("tpumesh-sidecar %s\n%s\n", MESH_VERSION, curl_version());
}

int mesh_sidecar_opts_parse(int argc, char **argv, struct mesh_sidecar_opts *out,
                            struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    enum mesh_cliopt_source src[NDEFS];
    const struct mesh_cliopt_usage usage = {usage_head, usage_tail, print_version};
    int rc = mesh_cliopts_parse_main(defs, NDEFS, argc, argv, out, NULL, src, &usage, err);
    if (rc != 0) {
        return rc;
    }
    /* The downward-API convention, after --pod-name and TPUMESH_POD_NAME. */
    const char *pn = getenv("POD_NAME");
    if (out->pod_name == NULL && pn != NULL && pn[0] != '\0') {
        out->pod_name = mesh_strdup(pn);
    }
    for (size_t i = 0; i < NDEFS; i++) {
        bool given = src[i] != MESH_CLIOPT_FROM_DEFAULT;
        if (given && defs[i].off == OFF(port)) {
            out->port_given = true;
        } else if (given && defs[i].off == OFF(address_mode)) {
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
    mesh_cliopts_cleanup(defs, NDEFS, o);
}

void mesh_sidecar_log_setup(int argc, char **argv)
{
    mesh_cliopts_log_setup(defs, NDEFS, argc, argv);
}
