/*
 * injector.h - tpumesh-injector's modules (docs/DESIGN.md §6, §8): the command
 * line (opts.c), the HTTPS admission server and the plain-HTTP probe and
 * metrics server (server.c), the service-account permission check
 * (access.c) and main.c, which wires them.
 */
#ifndef MESH_INJECTOR_H
#define MESH_INJECTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "core/inject.h"
#include "core/logfmt.h"

struct mesh_injector_opts {
    char *listen;          /* --listen [HOST]:PORT, HTTPS (default :9443) */
    char *tls_cert;        /* --tls-cert-file (PEM, chain allowed) */
    char *tls_key;         /* --tls-key-file (PEM) */
    char *image;           /* --image: both injected containers; NULL = the config's */
    char *http_addr;       /* --http-addr [HOST]:PORT, plain HTTP probes (default :9431) */
    char *config;          /* --config FILE, NULL = built-in defaults */
    char *apiserver;       /* --apiserver URL for the permission check (else in-cluster) */
    char *token_file;      /* --token-file (with --apiserver) */
    char *ca_file;         /* --ca-file (with --apiserver) */
    int cert_check_s;      /* --cert-check-interval: seconds between looks at the cert files */
    int access_timeout_ms; /* --access-check-timeout: most a review waits for the check */
    char *check_ns;        /* --check-namespace: check injection there instead of serving */
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

/* Split "[HOST]:PORT" (":9443", "127.0.0.1:9443", "[::1]:9443") into iface
 * ("" = every interface) and port. -MESH_E_CONFIG naming flag. */
int mesh_injector_parse_addr(const char *flag, const char *addr, char *iface, size_t cap,
                             int *out_port, struct mesh_err *err);

/* The permission check: can the service account get, list and watch pods
 * in its namespace (three SubjectAccessReviews on a thread of the check's
 * own, answers cached for a minute, failures retried after ten seconds)? */
struct mesh_injector_access;
/* NULL (and one log line saying the check is skipped) when there is no API
 * access: no --apiserver and not in a cluster, or the client cannot be
 * built. Owned: mesh_injector_access_free (stops the thread). */
struct mesh_injector_access *mesh_injector_access_new(const struct mesh_injector_opts *o);
void mesh_injector_access_free(struct mesh_injector_access *a);
/* fn(arg) is called on the check's thread after every finished check (the
 * server wakes its service thread and looks again); NULL stops the calls
 * and returns only after a call under way. */
void mesh_injector_access_set_notify(struct mesh_injector_access *a, void (*fn)(void *), void *arg);
/* --access-check-timeout in milliseconds (0 when a is NULL). */
int mesh_injector_access_timeout_ms(const struct mesh_injector_access *a);
enum { MESH_ACCESS_KNOWN = 0, MESH_ACCESS_PENDING = 1 };
/* Never blocks. MESH_ACCESS_KNOWN: *out_warning is the warning to attach
 * (owned, mesh_free; NULL = the account has what it needs, or a is NULL):
 * a missing verb says what to grant, a failed check says the permission
 * could not be verified and how to check it. MESH_ACCESS_PENDING: the
 * account's first check is under way; look again after the notify
 * callback, or give up after the timeout with
 * mesh_injector_access_unverified. */
int mesh_injector_access_lookup(struct mesh_injector_access *a, const char *ns, const char *sa,
                                char **out_warning);
/* The warning for a review that waited the whole timeout (owned). */
char *mesh_injector_access_unverified(struct mesh_injector_access *a, const char *ns,
                                      const char *sa);

/* --check-namespace: create a labelled pod in o->check_ns as a dry run and
 * check that it comes back injected with cfg's containers and mounts.
 * Returns the exit code: 0 injected, 1 not (logged with what to check),
 * 2 no API access. */
int mesh_injector_check(const struct mesh_injector_opts *o, const struct mesh_inject_config *cfg);

/* The servers: one libwebsockets context with two vhosts, served on its own
 * thread. cfg and access are borrowed for the server's life. */
struct mesh_injector_server;
struct mesh_injector_server *mesh_injector_server_start(const struct mesh_injector_opts *o,
                                                        const struct mesh_inject_config *cfg,
                                                        struct mesh_injector_access *access,
                                                        int *out_https_port, int *out_http_port,
                                                        struct mesh_err *err);
void mesh_injector_server_stop(struct mesh_injector_server *s);

#endif
