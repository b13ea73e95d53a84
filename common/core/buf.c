/*
 * buf.c - bounded growable byte buffer.
 */
#include "buf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

void mesh_buf_init(struct mesh_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void mesh_buf_cleanup(struct mesh_buf *b)
{
    mesh_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void mesh_buf_reset(struct mesh_buf *b)
{
    b->len = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

static int ensure(struct mesh_buf *b, size_t extra, struct mesh_err *err)
{
    if (extra > b->max || b->len > b->max - extra) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0, "data exceeds the limit of %zu bytes", b->max);
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        cap *= 2;
    }
    if (b->max < SIZE_MAX && cap > b->max + 1) { /* max + 1 would wrap for "no limit" */
        cap = b->max + 1;
    }
    b->data = mesh_realloc(b->data, cap);
    b->cap = cap;
    return 0;
}

int mesh_buf_append(struct mesh_buf *b, const void *p, size_t n, struct mesh_err *err)
{
    int rc = ensure(b, n, err);
    if (rc < 0) {
        return rc;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int mesh_buf_puts(struct mesh_buf *b, const char *s, struct mesh_err *err)
{
    return mesh_buf_append(b, s, strlen(s), err);
}

int mesh_buf_printf(struct mesh_buf *b, struct mesh_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "bad format");
    }
    int rc = ensure(b, (size_t)n, err);
    if (rc < 0) {
        return rc;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

const char *mesh_buf_str(const struct mesh_buf *b)
{
    return b->data != NULL ? b->data : "";
}

char *mesh_buf_steal(struct mesh_buf *b, size_t *out_len)
{
    char *p = b->data;
    if (p == NULL) {
        p = mesh_strdup("");
    }
    if (out_len != NULL) {
        *out_len = b->len;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
