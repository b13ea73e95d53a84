/*
 * logfmt.c - pure formatting of log lines (docs/DESIGN.md §7). No clock, no I/O:
 * the time is passed in and the line is appended to a caller's buffer.
 */
#include "logfmt.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/cleanup.h"

int mesh_logfmt_parse_level(const char *s, enum mesh_log_level *out_level)
{
    static const struct {
        const char *name;
        enum mesh_log_level level;
    } names[] = {
        {"debug", MESH_LOG_DEBUG},  {"info", MESH_LOG_INFO},   {"warn", MESH_LOG_WARN},
        {"warning", MESH_LOG_WARN}, {"error", MESH_LOG_ERROR},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out_level = names[i].level;
            return 0;
        }
    }
    return -MESH_E_INVAL;
}

int mesh_logfmt_parse_format(const char *s, enum mesh_log_format *out_format)
{
    if (strcmp(s, "text") == 0) {
        *out_format = MESH_LOG_TEXT;
        return 0;
    }
    if (strcmp(s, "json") == 0) {
        *out_format = MESH_LOG_JSON;
        return 0;
    }
    return -MESH_E_INVAL;
}

/* Upper-case ("INFO") and lower-case ("info") names of a level. Static. */
static const char *level_name(enum mesh_log_level level)
{
    switch (level) {
    case MESH_LOG_DEBUG:
        return "DEBUG";
    case MESH_LOG_INFO:
        return "INFO";
    case MESH_LOG_WARN:
        return "WARN";
    case MESH_LOG_ERROR:
        return "ERROR";
    case MESH_LOG_FATAL:
        return "FATAL";
    }
    return "?";
}

static const char *level_lname(enum mesh_log_level level)
{
    switch (level) {
    case MESH_LOG_DEBUG:
        return "debug";
    case MESH_LOG_INFO:
        return "info";
    case MESH_LOG_WARN:
        return "warn";
    case MESH_LOG_ERROR:
        return "error";
    case MESH_LOG_FATAL:
        return "fatal";
    }
    return "?";
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" for now_ms (ms since the epoch, UTC). */
static void format_time(int64_t now_ms, char out[64])
{
    time_t secs = (time_t)(now_ms / 1000);
    int ms = (int)(now_ms % 1000);
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    struct tm tm;
    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(out, 64, "1970-01-01T00:00:00.000Z");
        return;
    }
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/* The code point of the valid UTF-8 sequence at p (at most `avail` bytes),
 * its length in *n; -1 for an invalid or truncated sequence, an overlong
 * form or a surrogate. */
static long utf8_next(const unsigned char *p, size_t avail, size_t *n)
{
    long cp;
    size_t len;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2;
        cp = p[0] & 0x1f;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        cp = p[0] & 0x0f;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        cp = p[0] & 0x07;
    } else {
        return -1;
    }
    if (avail < len) {
        return -1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return -1;
        }
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
        return -1;
    }
    *n = len;
    return cp;
}

/* Code points a terminal or log viewer would not show as themselves: C1
 * controls, the bidirectional controls that reorder what follows
 * (Trojan Source: U+202A..U+202E, U+2066..U+2069, U+200E/F, U+061C), the
 * line and paragraph separators and the byte order mark. */
static bool escape_cp(long cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

/* Text mode: keep the line on one line and printable: ASCII controls as
 * \n \r \t \xHH, the code points of escape_cp as \uHHHH, bytes that are not
 * UTF-8 as \xHH; other UTF-8 is kept. */
static int put_escaped(struct mesh_buf *out, const char *s, struct mesh_err *err)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left > 0) {
        int rc;
        size_t n = 1;
        if (*p == '\n') {
            rc = mesh_buf_puts(out, "\\n", err);
        } else if (*p == '\r') {
            rc = mesh_buf_puts(out, "\\r", err);
        } else if (*p == '\t') {
            rc = mesh_buf_puts(out, "\\t", err);
        } else if (*p < 0x20 || *p == 0x7f) {
            rc = mesh_buf_printf(out, err, "\\x%02x", *p);
        } else if (*p < 0x80) {
            rc = mesh_buf_append(out, p, 1, err);
        } else {
            long cp = utf8_next(p, left, &n);
            if (cp < 0) {
                n = 1;
                rc = mesh_buf_printf(out, err, "\\x%02x", *p);
            } else if (escape_cp(cp)) {
                rc = mesh_buf_printf(out, err, "\\u%04lx", cp);
            } else {
                rc = mesh_buf_append(out, p, n, err);
            }
        }
        if (rc < 0) {
            return rc;
        }
        p += n;
        left -= n;
    }
    return 0;
}

static bool needs_quotes(const char *v)
{
    if (*v == '\0') {
        return true;
    }
    return strpbrk(v, " \"=") != NULL;
}

static int line_text(struct mesh_buf *out, const char *ts, enum mesh_log_level level,
                     const char *mod, const char *msg, const struct mesh_log_field *fields,
                     size_t nfields)
{
    int rc = mesh_buf_printf(out, NULL, "%s %-5s %-4s ", ts, level_name(level), mod);
    if (rc == 0) {
        rc = put_escaped(out, msg, NULL);
    }
    for (size_t i = 0; rc == 0 && i < nfields; i++) {
        const char *v = fields[i].value ? fields[i].value : "";
        bool q = needs_quotes(v);
        rc = mesh_buf_printf(out, NULL, " %s=%s", fields[i].key, q ? "\"" : "");
        if (rc == 0) {
            rc = put_escaped(out, v, NULL);
        }
        if (rc == 0 && q) {
            rc = mesh_buf_puts(out, "\"", NULL);
        }
    }
    if (rc == 0) {
        rc = mesh_buf_puts(out, "\n", NULL);
    }
    return rc;
}

static int line_json(struct mesh_buf *out, const char *ts, enum mesh_log_level level,
                     const char *mod, const char *msg, const struct mesh_log_field *fields,
                     size_t nfields)
{
    mesh_autocjson cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return -MESH_E_TOOBIG;
    }
    cJSON_AddStringToObject(o, "time", ts);
    cJSON_AddStringToObject(o, "level", level_lname(level));
    cJSON_AddStringToObject(o, "mod", mod);
    cJSON_AddStringToObject(o, "msg", msg);
    for (size_t i = 0; i < nfields; i++) {
        const char *k = fields[i].key;
        /* The fixed keys cannot be overridden by a field. */
        if (strcmp(k, "time") == 0 || strcmp(k, "level") == 0 || strcmp(k, "mod") == 0 ||
            strcmp(k, "msg") == 0) {
            continue;
        }
        cJSON_AddStringToObject(o, k, fields[i].value ? fields[i].value : "");
    }
    mesh_autofree char *s = cJSON_PrintUnformatted(o);
    if (s == NULL) {
        return -MESH_E_TOOBIG;
    }
    int rc = mesh_buf_puts(out, s, NULL);
    if (rc == 0) {
        rc = mesh_buf_puts(out, "\n", NULL);
    }
    return rc;
}

int mesh_logfmt_line(struct mesh_buf *out, enum mesh_log_format format, int64_t now_ms,
                     enum mesh_log_level level, const char *mod, const char *msg,
                     const struct mesh_log_field *fields, size_t nfields)
{
    char ts[64];
    format_time(now_ms, ts);
    if (format == MESH_LOG_JSON) {
        return line_json(out, ts, level, mod, msg, fields, nfields);
    }
    return line_text(out, ts, level, mod, msg, fields, nfields);
}
