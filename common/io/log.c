/*
 * log.c - writes formatted log lines to stderr with one write(2) each, so
 * lines from several threads never interleave within a line.
 */
#include "io/log.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "io/sys.h"

enum mesh_log_level mesh_log_threshold = MESH_LOG_INFO;
static enum mesh_log_format log_format = MESH_LOG_TEXT;

void mesh_log_setup(enum mesh_log_level level, enum mesh_log_format format)
{
    mesh_log_threshold = level;
    log_format = format;
}

void mesh_log_emit(enum mesh_log_level level, const char *mod, const struct mesh_log_field *fields,
                   size_t nfields, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    int64_t now_ms = mesh_sys_wall_ms();

    struct mesh_buf line;
    mesh_buf_init(&line, 16384);
    if (mesh_logfmt_line(&line, log_format, now_ms, level, mod, msg, fields, nfields) < 0) {
        mesh_buf_reset(&line);
        mesh_buf_puts(&line, "log line too long\n", NULL);
    }
    const char *p = mesh_buf_str(&line);
    size_t left = line.len;
    while (left > 0) {
        ssize_t w = write(STDERR_FILENO, p, left);
        if (w < 0) {
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    mesh_buf_cleanup(&line);
}
