/*
 * logfmt.h - the log line format of docs/DESIGN.md §7, as a pure function.
 *
 * text: 2026-01-02T03:04:05.678Z INFO  k8s  watch restarted rv=123
 * json: {"time":"2026-01-02T03:04:05.678Z","level":"info","mod":"k8s","msg":"...","rv":"123"}
 *
 * One event is always one line: control characters in the message or in
 * field values are escaped (\n, \t, \xNN) in text mode, JSON-escaped in json.
 */
#ifndef MESH_LOGFMT_H
#define MESH_LOGFMT_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

enum mesh_log_level {
    MESH_LOG_DEBUG = 0,
    MESH_LOG_INFO = 1,
    MESH_LOG_WARN = 2,
    MESH_LOG_ERROR = 3,
    MESH_LOG_FATAL = 4,
};

enum mesh_log_format {
    MESH_LOG_TEXT = 0,
    MESH_LOG_JSON = 1,
};

/* An extra key/value of a log line. Both strings borrowed. */
struct mesh_log_field {
    const char *key;
    const char *value;
};

/* Parse "debug|info|warn|warning|error" / "text|json". 0 or -MESH_E_INVAL. */
int mesh_logfmt_parse_level(const char *s, enum mesh_log_level *out_level);
int mesh_logfmt_parse_format(const char *s, enum mesh_log_format *out_format);

/* Append one complete line (with trailing '\n') to out. fields may be NULL
 * when nfields is 0. Returns 0 or -MESH_E_TOOBIG (out's limit). */
int mesh_logfmt_line(struct mesh_buf *out, enum mesh_log_format format, int64_t now_ms,
                     enum mesh_log_level level, const char *mod, const char *msg,
                     const struct mesh_log_field *fields, size_t nfields);

#endif
