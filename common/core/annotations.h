/*
 * annotations.h - the pod annotations file a downward-API volume projects
 * (`metadata.annotations`), and tpumesh's configuration keys in it.
 *
 * File format (kubernetes pkg/fieldpath
 * FormatMap): one line per annotation, sorted by key, written with Go's
 * `%v=%q`: the key verbatim, '=', then the value as a Go double-quoted string
 * literal (escapes \a \b \f \n \r \t \v \\ \" \xNN \uNNNN \UNNNNNNNN; octal
 * \NNN is accepted too, as Go's strconv.Unquote does). Lines are joined by
 * '\n' with no newline after the last; we also accept a trailing newline,
 * CRLF and blank lines.
 *
 * Pure (docs/STYLE.md R8): the caller reads the file and hands over (buf, len).
 */
#ifndef MESH_ANNOTATIONS_H
#define MESH_ANNOTATIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "core/model.h"

/* Kubernetes caps all annotations of an object at 256 KiB. */
#define MESH_ANNOTATIONS_MAX_INPUT (256 * 1024)
#define MESH_ANNOTATIONS_MAX_ITEMS 1024

struct mesh_annotation {
    char *key;   /* owned */
    char *value; /* owned, decoded; never contains NUL */
};

/* Also the list of a TPU VM's tpu-env keys (core/tpuenv.h). */
struct mesh_annotations {
    struct mesh_annotation *items; /* owned, file order */
    size_t n;
};

/* Parse buf[0..len) into out_annotations (need not be initialised; written
 * only on success, then owned by the caller: mesh_annotations_cleanup).
 * Errors: -MESH_E_TOOBIG (input above MESH_ANNOTATIONS_MAX_INPUT or more
 * than MESH_ANNOTATIONS_MAX_ITEMS lines), -MESH_E_PARSE naming the line and
 * the problem (no '=', value not a "quoted string", bad escape, NUL,
 * duplicate key). */
int mesh_annotations_parse(const char *buf, size_t len, struct mesh_annotations *out_annotations,
                           struct mesh_err *err);
/* The decoded value of key, or NULL. Borrowed from a. */
const char *mesh_annotations_get(const struct mesh_annotations *a, const char *key);
/* Free what a owns; a is empty afterwards. NULL is fine. */
void mesh_annotations_cleanup(struct mesh_annotations *a);

/* Decode one Go double-quoted string literal s[0..len) (with its quotes)
 * into an owned NUL-terminated string. -MESH_E_PARSE with the reason. */
int mesh_annotations_unquote(const char *s, size_t len, char **out_value, struct mesh_err *err);

/* The prefix of our keys and the legacy TPU Node key. */
#define MESH_ANNOTATION_PREFIX "tpumesh.dev/"
#define MESH_ANNOTATION_TF_VERSION "tf-version.cloud-tpus.google.com"

/* tpumesh's configuration from annotations. Strings owned (NULL = absent);
 * numbers 0 = absent; has_address_mode says whether address_mode is set. */
struct mesh_annotations_config {
    char *tpu;        /* tpumesh.dev/tpu: 'local', grpc://..., or Cloud TPU name(s) */
    char *zone;       /* tpumesh.dev/zone */
    char *project;    /* tpumesh.dev/project */
    char *job_name;   /* tpumesh.dev/job-name */
    char *tf_version; /* tf-version.cloud-tpus.google.com */
    int port;         /* tpumesh.dev/port, 1-65535 */
    bool has_address_mode;
    enum mesh_addr_mode address_mode; /* tpumesh.dev/address-mode auto|dns|ip */
    int expected_workers;             /* tpumesh.dev/expected-workers, 1-65536 */
    int timeout_s;                    /* tpumesh.dev/timeout, whole seconds 1-86400 */
    int megascale_port;               /* tpumesh.dev/megascale-port, 1-65535 */
};

/* One rule per annotation, shared by the three programs (docs/DESIGN.md §6):
 * tpumesh-init applies it to its annotations file, the sidecar to its own
 * pod's annotations (core/k8s_pod.c), tpumesh-injector at admission, so a
 * value one of them refuses is refused by all three with the same words.
 * Each takes the decoded value v (NUL-terminated, borrowed) and returns 0
 * (with the parsed value in *out where there is one) or -MESH_E_CONFIG with
 * a message "annotation KEY="VALUE" <rule>" (the value cut to 32 bytes, its
 * control bytes and quotes shown as '?'). The number rules the sidecar reads
 * one by one are public; the others are reached through mesh_annotations_check. */
/* The DTensor port: 1-65535 and not one TPU software uses (core/ports.h). */
int mesh_annotations_port(const char *v, int *out, struct mesh_err *err);
int mesh_annotations_address_mode(const char *v, enum mesh_addr_mode *out, struct mesh_err *err);
int mesh_annotations_expected_workers(const char *v, int *out, struct mesh_err *err);
int mesh_annotations_megascale_port(const char *v, int *out, struct mesh_err *err);
/* Walks a comma-separated list such as tpumesh.dev/containers (a list of DNS
 * labels, spaces around the names allowed): start with *cursor = the list;
 * each call sets *out_item and *out_len to the next item with the spaces
 * around it trimmed (*out_len may be 0) and returns true, and returns false
 * once the last item was returned. */
bool mesh_annotations_list_next(const char **cursor, const char **out_item, size_t *out_len);

/* The rule of key applied to v: 0 when v is acceptable or key is none of
 * tpumesh's keys (other annotations are not ours); an unknown tpumesh.dev/
 * key is -MESH_E_CONFIG naming the accepted keys. */
int mesh_annotations_check(const char *key, const char *v, struct mesh_err *err);

#define MESH_ANNOTATION_PORT "tpumesh.dev/port"
#define MESH_ANNOTATION_ADDRESS_MODE "tpumesh.dev/address-mode"
#define MESH_ANNOTATION_EXPECTED_WORKERS "tpumesh.dev/expected-workers"
#define MESH_ANNOTATION_MEGASCALE_PORT "tpumesh.dev/megascale-port"
#define MESH_ANNOTATION_CONTAINERS "tpumesh.dev/containers"
/* tpumesh.dev/expected-workers is at most this (a TPU slice has far fewer hosts). */
#define MESH_ANNOTATION_EXPECTED_MAX 65536

/* Extract and validate tpumesh's keys from a (each with its rule above). Keys outside tpumesh.dev/
 * are ignored except tf-version.cloud-tpus.google.com. (A JobSet's jobset.sigs.k8s.io/coordinator
 * is not read: jax.env names process 0, where JAX starts its coordination service.)
 * tpumesh.dev/inject (the webhook's switch) and tpumesh.dev/containers (which containers the
 * webhook mounts the volume in; tpumesh-injector checks it) are accepted and ignored. Any other
 * tpumesh.dev/ key, or a bad value, is -MESH_E_CONFIG naming the key and the accepted keys/values.
 * out_config is filled only on success; free with mesh_annotations_config_cleanup. */
int mesh_annotations_config(const struct mesh_annotations *a,
                            struct mesh_annotations_config *out_config, struct mesh_err *err);
void mesh_annotations_config_cleanup(struct mesh_annotations_config *c);

#endif
