/*
 * log.h - the one logging module (docs/STYLE.md R12, docs/DESIGN.md §7).
 *
 * mesh_log(level, mod, fmt, ...) checks the level before evaluating its
 * arguments and writes one line to stderr. The level and format are the only
 * mutable globals of the process (set once at start-up from the flags).
 * Log an error once, where it is handled; never log tokens, Authorization
 * headers or file contents.
 */
#ifndef MESH_LOG_H
#define MESH_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "core/logfmt.h"

extern enum mesh_log_level mesh_log_threshold;

/* Configure level and format (call once, before threads start). */
void mesh_log_setup(enum mesh_log_level level, enum mesh_log_format format);

/* Emit one line now. Use the macros below instead. */
void mesh_log_emit(enum mesh_log_level level, const char *mod, const struct mesh_log_field *fields,
                   size_t nfields, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define mesh_log(level, mod, ...)                                                                  \
    do {                                                                                           \
        if ((level) >= mesh_log_threshold) {                                                       \
            mesh_log_emit((level), (mod), NULL, 0, __VA_ARGS__);                                   \
        }                                                                                          \
    } while (0)

/* With extra key/value fields (JSON keys in json format, key=value in text). */
#define mesh_log_kv(level, mod, fields, nfields, ...)                                              \
    do {                                                                                           \
        if ((level) >= mesh_log_threshold) {                                                       \
            mesh_log_emit((level), (mod), (fields), (nfields), __VA_ARGS__);                       \
        }                                                                                          \
    } while (0)

#define mesh_debug(mod, ...) mesh_log(MESH_LOG_DEBUG, mod, __VA_ARGS__)
#define mesh_info(mod, ...) mesh_log(MESH_LOG_INFO, mod, __VA_ARGS__)
#define mesh_warn(mod, ...) mesh_log(MESH_LOG_WARN, mod, __VA_ARGS__)
#define mesh_error(mod, ...) mesh_log(MESH_LOG_ERROR, mod, __VA_ARGS__)

#endif
