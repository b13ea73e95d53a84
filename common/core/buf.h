/*
 * buf.h - bounded growable byte buffer (curl dynbuf style, docs/STYLE.md R6/R9).
 *
 * A buffer has a hard maximum set at init; appends beyond it fail with
 * -MESH_E_TOOBIG and leave the content unchanged. The content is always
 * NUL-terminated (the terminator is not counted in len) so text can be
 * handed to C string APIs, but binary data may contain NULs.
 */
#ifndef MESH_BUF_H
#define MESH_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

struct mesh_buf {
    char *data; /* owned; NULL until the first append */
    size_t len; /* bytes in use */
    size_t cap; /* bytes allocated */
    size_t max; /* hard limit on len */
};

/* Initialise an empty buffer that may hold at most max bytes. */
void mesh_buf_init(struct mesh_buf *b, size_t max);
/* Release the memory; the buffer is empty and reusable afterwards. */
void mesh_buf_cleanup(struct mesh_buf *b);
/* Empty the buffer but keep its memory. */
void mesh_buf_reset(struct mesh_buf *b);

/* Append n bytes. -MESH_E_TOOBIG if len + n > max. */
int mesh_buf_append(struct mesh_buf *b, const void *p, size_t n, struct mesh_err *err);
/* Append a NUL-terminated string. */
int mesh_buf_puts(struct mesh_buf *b, const char *s, struct mesh_err *err);
/* Append formatted text. */
int mesh_buf_printf(struct mesh_buf *b, struct mesh_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Content as a C string; "" for an empty buffer. Borrowed. */
const char *mesh_buf_str(const struct mesh_buf *b);
/* Hand the content to the caller (owned; mesh_free) and empty the buffer.
 * Never NULL: an empty buffer yields "". */
char *mesh_buf_steal(struct mesh_buf *b, size_t *out_len);

#endif
