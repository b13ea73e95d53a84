/*
 * injector.h - tpumesh-injector's modules (docs/DESIGN.md §6, §8): the command
 * line (opts.c), the HTTPS admission server and the plain-HTTP probe and
 * metrics server (server.c, both common/io/httpd), the --check-namespace
 * end-to-end check (check.c) and main.c, which wires them.
 */
#ifndef MESH_INJECTOR_H
#define MESH_INJECTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "core/inject.h"
#include "core/logfmt.h"

struct mesh_injector_opts {
    char *listen;     /* --listen [HOST]:PORT, HTTPS (default :9443) */
    char *tls_cert;   /* --tls-cert-file (PEM, chain allowed) */
    char *tls_key;    /* --tls-key-file (PEM) */
    char *image;      /* --image: both injected containers; NULL = the config's */
    char *http_addr;  /* --http-addr [HOST]:PORT, plain HTTP probes (default :9431) */
    char *config;     /* --config FILE, NULL = built-in defaults */
    char *apiserver;  /* --apiserver URL for --check-namespace (else in-cluster) */
    char *token_file; /* --token-file (with --apiserver) */
    char *ca_file;    /* --ca-file (with --apiserver) */
    int cert_check_s; /* --cert-check-interval: seconds between looks at the cert files */
    char *check_ns;   /* --check-namespace: check injection there instead of serving */
    enum mesh_log_format log_format;
    enum mesh_log_level log_level;
};

/* Parse argv and TPUMESH_<FLAG> variables. Returns 0, 1 when --help or
 * --version was printed (exit 0), or -MESH_E_CONFIG naming the flag. */
int mesh_injector_opts_parse(int argc, char **argv, struct mesh_injector_opts *out,
                             struct mesh_err *err);
void mesh_injector_opts_cleanup(struct mesh_injector_opts *o);
/* Before the parse: the log format and level asked for (mesh_cliopts_log_setup). */
void mesh_injector_log_setup(int argc, char **argv);

/* --check-namespace: create a labelled pod in o->check_ns as a dry run and
 * check that it comes back injected with cfg's containers and mounts.
 * Returns the exit code: 0 injected, 1 not (logged with what to check),
 * 2 no API access. */
int mesh_injector_check(const struct mesh_injector_opts *o, const struct mesh_inject_config *cfg);

/* The servers: two common/io/httpd servers, each on a thread of its own
 * (HTTPS POST /mutate on o->listen, probes and metrics on o->http_addr).
 * o and cfg are borrowed for the servers' life. Owned by caller
 * (mesh_injector_server_stop). NULL with -MESH_E_CONFIG (bad address or
 * certificate) or -MESH_E_IO (cannot listen). */
struct mesh_injector_server;
struct mesh_injector_server *mesh_injector_server_start(const struct mesh_injector_opts *o,
                                                        const struct mesh_inject_config *cfg,
                                                        int *out_https_port, int *out_http_port,
                                                        struct mesh_err *err);
void mesh_injector_server_stop(struct mesh_injector_server *s);

#endif
