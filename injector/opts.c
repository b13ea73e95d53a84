/*
 * opts.c - tpumesh-injector's command line (docs/DESIGN.md §6).
 *
 * The option table for the shared engine (io/cliopts.h: "--flag VALUE",
 * "--flag=VALUE", TPUMESH_<FLAG_UPPER_SNAKE> (TPUMESH_IMAGE for --image),
 * flag > variable > default).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "core/mem.h"
#include "core/names.h"
#include "io/cliopts.h"
#include "injector.h"

#define OFF(f) offsetof(struct mesh_injector_opts, f)

static const struct mesh_cliopt defs[] = {
    {"listen", MESH_CLIOPT_STR, OFF(listen), 0, 0, ":9443", "[HOST]:PORT",
     "HTTPS address of POST /mutate (the webhook's Service points here)"},
    {"tls-cert-file", MESH_CLIOPT_STR, OFF(tls_cert), 0, 0, NULL, "FILE",
     "serving certificate (PEM, chain allowed); re-read when it changes"},
    {"tls-key-file", MESH_CLIOPT_STR, OFF(tls_key), 0, 0, NULL, "FILE",
     "its private key (PEM); re-read when it changes"},
    {"image", MESH_CLIOPT_STR, OFF(image), 0, 0, NULL, "REF",
     "image of the injected containers (else the config's, else tpumesh:" MESH_VERSION ")"},
    {"config", MESH_CLIOPT_STR, OFF(config), 0, 0, NULL, "FILE",
     "YAML: initContainer, sidecar, volumes, volumeMounts to inject (else the built-in\n"
     "      defaults, equal to the chart's)"},
    {"http-addr", MESH_CLIOPT_STR, OFF(http_addr), 0, 0, ":9431", "[HOST]:PORT",
     "plain HTTP: /healthz /readyz /metrics"},
    {"apiserver", MESH_CLIOPT_STR, OFF(apiserver), 0, 0, NULL, "URL",
     "API server for --check-namespace (else in-cluster)"},
    {"token-file", MESH_CLIOPT_STR, OFF(token_file), 0, 0, NULL, "FILE",
     "bearer token for --apiserver"},
    {"ca-file", MESH_CLIOPT_STR, OFF(ca_file), 0, 0, NULL, "FILE", "CA bundle for --apiserver"},
    {"check-namespace", MESH_CLIOPT_STR, OFF(check_ns), 0, 0, NULL, "NS",
     "do not serve: create a labelled pod in NS as a dry run through the API server and\n"
     "      check that it was injected (exit 0 yes, 1 no); the chart's helm test runs this"},
    {"cert-check-interval", MESH_CLIOPT_INT, OFF(cert_check_s), 1, 3600, "5", "SECONDS",
     "how often the certificate files are checked for a change"},
    {"log-format", MESH_CLIOPT_FORMAT, OFF(log_format), 0, 0, "text", "text|json",
     "log line format"},
    {"log-level", MESH_CLIOPT_LEVEL, OFF(log_level), 0, 0, "info", "debug|info|warn|error",
     "log level"},
};

#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char usage_head[] =
    "usage: tpumesh-injector --tls-cert-file FILE --tls-key-file FILE [OPTIONS]\n\n"
    "Mutating admission webhook: POST /mutate takes an admission.k8s.io/v1\n"
    "AdmissionReview of a Pod labelled tpumesh.dev/inject=true and answers with a\n"
    "JSON Patch that adds tpumesh-init, the tpumesh-sidecar native sidecar, their\n"
    "volumes and the read-only mounts. Invalid tpumesh.dev/* annotations are denied\n"
    "with the rule. SIGTERM/SIGINT: stop serving, exit 0.\n\n"
    "Options (each also read from TPUMESH_<FLAG>; the flag wins):\n";

static const char usage_tail[] =
    "\n"
    "Exit codes:\n"
    "  0  stopped by SIGTERM or SIGINT; --check-namespace: the pod was injected; --help,\n"
    "     --version\n"
    "  1  serving failed; --check-namespace: the pod was not injected or the dry run failed\n"
    "  2  usage or configuration error (bad flag or value, --config, certificates)\n"
    "The last log line says why.\n";

static void print_version(void)
{
    printf("tpumesh-injector %s\nlibwebsockets %s\n", MESH_VERSION, lws_get_library_version());
}

int mesh_injector_opts_parse(int argc, char **argv, struct mesh_injector_opts *out,
                             struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    const struct mesh_cliopt_usage usage = {usage_head, usage_tail, print_version};
    int rc = mesh_cliopts_parse_main(defs, NDEFS, argc, argv, out, NULL, NULL, &usage, err);
    if (rc != 0) {
        return rc;
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
    mesh_cliopts_cleanup(defs, NDEFS, o);
}

void mesh_injector_log_setup(int argc, char **argv)
{
    mesh_cliopts_log_setup(defs, NDEFS, argc, argv);
}
