/*
 * kubeconfig.h - the subset of a kubeconfig file (client-go
 * tools/clientcmd/api/v1 types) that an in-pod client needs, resolved for one context, and the
 * ExecCredential reply of a client.authentication.k8s.io/v1 credential plugin
 * (gke-gcloud-auth-plugin).
 *
 * Resolution: the context is the caller's override, else current-context;
 * the context names a cluster (which must exist), may name a user (which
 * then must exist; without one the client sends no credentials) and may
 * carry a namespace. Relative file paths (certificate-authority,
 * client-certificate, client-key, tokenFile, exec command containing '/')
 * are resolved against the kubeconfig file's directory, like client-go.
 * *-data fields are base64 of PEM and are decoded here (core/base64.h).
 *
 * Every error is -MESH_E_CONFIG with a message naming the file, the key
 * path (e.g. "users[u1].user.client-key-data") and what to do about it.
 * Parsing takes (buf, len) and bounds the input (1 MiB), the nesting
 * depth and the number of entries.
 */
#ifndef MESH_KUBECONFIG_H
#define MESH_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define MESH_KUBECONFIG_MAX_BYTES ((size_t)1 << 20)

/* users[].user.exec (client.authentication.k8s.io/v1 or v1beta1). */
struct mesh_kubeconfig_exec {
    char *api_version; /* as written */
    char *command;     /* resolved path or a bare name looked up in PATH */
    char **args;       /* nargs strings */
    size_t nargs;
    char **env_names; /* nenv name/value pairs added to the environment */
    char **env_values;
    size_t nenv;
    bool provide_cluster_info;
};

/* One resolved context. Every string is owned by the struct (released by
 * mesh_kubeconfig_cleanup); NULL / 0 = not set. */
struct mesh_kubeconfig {
    char *path;         /* the file this came from */
    char *context;      /* context used */
    char *cluster_name; /* its cluster */
    char *user_name;    /* its user */
    char *ns;           /* context namespace */
    /* cluster */
    char *server;
    char *tls_server_name;
    char *ca_file;
    unsigned char *ca_data; /* PEM bytes */
    size_t ca_data_len;
    bool insecure_skip_tls_verify;
    /* user */
    char *client_cert_file;
    unsigned char *client_cert_data;
    size_t client_cert_data_len;
    char *client_key_file;
    unsigned char *client_key_data;
    size_t client_key_data_len;
    char *token;
    char *token_file;
    struct mesh_kubeconfig_exec *exec; /* owned, or NULL */
};

/* Parse len bytes of YAML (no NUL needed). path (borrowed) is used in
 * messages and to resolve relative paths (NULL: the current directory).
 * context NULL = current-context. On success *out is filled; on failure
 * it is left zeroed. */
int mesh_kubeconfig_parse(const char *buf, size_t len, const char *path, const char *context,
                          struct mesh_kubeconfig *out, struct mesh_err *err);

/* Read path (at most MESH_KUBECONFIG_MAX_BYTES) and parse it.
 * -MESH_E_CONFIG also for an unreadable file. */
int mesh_kubeconfig_load(const char *path, const char *context, struct mesh_kubeconfig *out,
                         struct mesh_err *err);

/* Release everything in kc and zero it; safe on a zeroed struct. */
void mesh_kubeconfig_cleanup(struct mesh_kubeconfig *kc);

/* The kubeconfig to use when none was given: the FIRST non-empty entry
 * of $KUBECONFIG (colon-separated lists are not merged: documented
 * limitation), else $HOME/.kube/config when that file exists. Owned
 * string (mesh_free) or NULL when there is none (not an error). */
char *mesh_kubeconfig_default_path(void);

/* Parse an ExecCredential printed by a credential plugin:
 * {"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
 *  "status":{"token":"...","expirationTimestamp":"2026-01-01T00:00:00Z"}}.
 * *out_token: owned token (mesh_free). *out_expiry: seconds since the
 * epoch, or 0 when the plugin gave no expiry. Client-certificate replies
 * (clientCertificateData) are rejected with a clear message. what (e.g.
 * the command) names the plugin in messages. */
int mesh_kubeconfig_parse_exec_credential(const char *buf, size_t len, const char *what,
                                          char **out_token, int64_t *out_expiry,
                                          struct mesh_err *err);

/* RFC 3339 UTC ("2026-07-01T12:00:00Z", optional fraction, "Z" or
 * +hh:mm) to seconds since the epoch. -MESH_E_PARSE on anything else. */
int mesh_kubeconfig_parse_time(const char *s, int64_t *out_epoch_s, struct mesh_err *err);

#endif
