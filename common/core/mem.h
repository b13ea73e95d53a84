/*
 * mem.h - allocation wrappers with one OOM policy (docs/STYLE.md R6).
 *
 * Every wrapper writes one line to stderr and abort()s when memory runs out:
 * a pod with a memory limit is OOM-killed anyway, and aborting keeps every
 * call site simple. Returned memory is owned by the caller: free with
 * mesh_free(). mesh_free(NULL) does nothing.
 */
#ifndef MESH_MEM_H
#define MESH_MEM_H

#include <stdarg.h>
#include <stddef.h>

void *mesh_malloc(size_t n);
void *mesh_calloc(size_t count, size_t size);
void *mesh_realloc(void *p, size_t n);
/* Growth of an array of `count` elements of `size` bytes; aborts on overflow. */
void *mesh_reallocarray(void *p, size_t count, size_t size);
char *mesh_strdup(const char *s);
/* Copy of the first n bytes of s (which need not be NUL-terminated), NUL-terminated. */
char *mesh_strndup(const char *s, size_t n);
char *mesh_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *mesh_vasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
void mesh_free(void *p);

#endif
