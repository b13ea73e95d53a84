/*
 * err.c - fixed-size, caller-owned error records (docs/STYLE.md R4).
 */
#include "err.h"

#include <stdio.h>
#include <string.h>

void mesh_err_clear(struct mesh_err *err)
{
    if (err == NULL) {
        return;
    }
    err->code = 0;
    err->sys_errno = 0;
    err->msg[0] = '\0';
}

int mesh_err_set(struct mesh_err *err, int code, int sys_errno, const char *fmt, ...)
{
    if (code < 0) {
        code = -code;
    }
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        if (n < 0) {
            err->msg[0] = '\0';
            n = 0;
        }
        if (sys_errno != 0 && (size_t)n < sizeof(err->msg)) {
            char ebuf[128];
            /* strerror_r is the thread-safe variant; GNU returns a pointer. */
            const char *s = strerror_r(sys_errno, ebuf, sizeof(ebuf));
            snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", s);
        }
        err->code = code;
        err->sys_errno = sys_errno;
    }
    return -code;
}

int mesh_err_prefix(struct mesh_err *err, const char *fmt, ...)
{
    if (err == NULL || err->code == 0) {
        return -MESH_E_INVAL;
    }
    char head[MESH_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    if (n > 0) {
        /* new = head ": " old, truncated to the fixed size. */
        char old[MESH_ERR_MSG_MAX];
        memcpy(old, err->msg, sizeof(old));
        size_t cap = sizeof(err->msg) - 1, pos = 0;
        const char *parts[3] = {head, ": ", old};
        for (int i = 0; i < 3; i++) {
            size_t l = strnlen(parts[i], cap - pos);
            memcpy(err->msg + pos, parts[i], l);
            pos += l;
        }
        err->msg[pos] = '\0';
    }
    return -err->code;
}

const char *mesh_strerror(int code)
{
    static const char *const names[MESH_E__COUNT] = {
        [MESH_OK] = "ok",
        [MESH_MORE] = "need more input",
        [MESH_E_INVAL] = "invalid argument",
        [MESH_E_PARSE] = "parse error",
        [MESH_E_RANGE] = "out of range",
        [MESH_E_TOOBIG] = "too big",
        [MESH_E_IO] = "I/O error",
        [MESH_E_CONFIG] = "configuration error",
        [MESH_E_NOTFOUND] = "not found",
        [MESH_E_NOTREADY] = "not ready",
        [MESH_E_TIMEOUT] = "timed out",
        [MESH_E_AUTH] = "authentication failed",
        [MESH_E_API] = "API error",
        [MESH_E_GONE] = "gone (expired)",
        [MESH_E_PUBLISH] = "cannot publish",
        [MESH_E_BUSY] = "busy",
        [MESH_E_INCOMPLETE] = "incomplete",
        [MESH_E_FORBIDDEN] = "not authorized",
    };
    if (code < 0) {
        code = -code;
    }
    if (code >= MESH_E__COUNT || names[code] == NULL) {
        return "unknown error";
    }
    return names[code];
}
