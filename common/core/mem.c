/*
 * mem.c - the only file that calls malloc/free directly (docs/STYLE.md R6).
 */
#include "mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void oom(size_t n)
{
    /* No allocation, no stdio buffering: write(2) straight to stderr. */
    char line[96];
    int len = snprintf(line, sizeof(line), "FATAL mem   out of memory allocating %zu bytes\n", n);
    if (len > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
    }
    abort();
}

void *mesh_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        oom(n);
    }
    return p;
}

void *mesh_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (p == NULL) {
        oom(count * size);
    }
    return p;
}

void *mesh_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) {
        oom(n);
    }
    return q;
}

void *mesh_reallocarray(void *p, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        oom(SIZE_MAX);
    }
    return mesh_realloc(p, count * size);
}

char *mesh_strdup(const char *s)
{
    return mesh_strndup(s, strlen(s));
}

char *mesh_strndup(const char *s, size_t n)
{
    char *p = mesh_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *mesh_vasprintf(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        n = 0;
    }
    char *p = mesh_malloc((size_t)n + 1);
    if (vsnprintf(p, (size_t)n + 1, fmt, ap) < 0) {
        p[0] = '\0';
    }
    return p;
}

char *mesh_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = mesh_vasprintf(fmt, ap);
    va_end(ap);
    return p;
}

void mesh_free(void *p)
{
    free(p);
}
