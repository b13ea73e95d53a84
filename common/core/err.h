/*
 * err.h - the one error convention of tpumesh (docs/STYLE.md R4).
 *
 * A function that can fail returns 0 (or a count, or an fd) on success and a
 * negative -MESH_E_* code on failure, and takes `struct mesh_err *err` as its
 * last parameter. Functions returning a pointer return NULL and fill err.
 * struct mesh_err lives on the caller's stack: the error path never allocates.
 * err may be NULL everywhere.
 */
#ifndef MESH_ERR_H
#define MESH_ERR_H

#include <stdarg.h>

/* Status codes. MESH_OK and MESH_MORE are not errors; everything else is
 * returned negated (-MESH_E_PARSE). */
enum mesh_code {
    MESH_OK = 0,
    MESH_MORE = 1,          /* a streaming parser needs more input */
    MESH_E_INVAL = 2,       /* bad argument or bad input value */
    MESH_E_PARSE = 3,       /* malformed input */
    MESH_E_RANGE = 4,       /* value out of range */
    MESH_E_TOOBIG = 5,      /* input larger than a configured limit */
    MESH_E_IO = 6,          /* file or socket I/O failed (sys_errno set) */
    MESH_E_CONFIG = 7,      /* configuration error (exit 2 in tpumesh-init) */
    MESH_E_NOTFOUND = 8,    /* the thing does not exist (404, no devices) */
    MESH_E_NOTREADY = 9,    /* exists but not ready / unhealthy */
    MESH_E_TIMEOUT = 10,    /* a deadline passed */
    MESH_E_AUTH = 11,       /* 401 (and 403 from APIs other than Kubernetes') */
    MESH_E_API = 12,        /* remote API failed (5xx, unreachable, bad reply) */
    MESH_E_GONE = 13,       /* 410: resourceVersion expired */
    MESH_E_PUBLISH = 14,    /* cannot publish on the shared volume */
    MESH_E_BUSY = 15,       /* resource held by somebody else (TPU lock) */
    MESH_E_INCOMPLETE = 16, /* topology not complete yet */
    MESH_E_FORBIDDEN = 17,  /* 403: authenticated but not authorized (RBAC) */
    MESH_E__COUNT
};

#define MESH_ERR_MSG_MAX 256

struct mesh_err {
    int code;      /* enum mesh_code, positive; 0 when no error was set */
    int sys_errno; /* errno at the failure, or 0 */
    char msg[MESH_ERR_MSG_MAX];
};

/* Reset err to "no error". err may be NULL. */
void mesh_err_clear(struct mesh_err *err);

/* Fill err (when not NULL) with code, sys_errno and a formatted message and
 * return -code, so failure is one line: `return mesh_err_set(err, ...)`.
 * When sys_errno != 0 the text ": strerror(sys_errno)" is appended. */
int mesh_err_set(struct mesh_err *err, int code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefix the existing message with "<fmt>: ". Returns -err->code (or
 * -MESH_E_INVAL if err is NULL or unset) so it can be returned directly. */
int mesh_err_prefix(struct mesh_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Static name of a code ("parse error"); accepts positive or negative codes. */
const char *mesh_strerror(int code);

#endif
