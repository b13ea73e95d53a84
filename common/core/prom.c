/*
 * prom.c - Prometheus text exposition format 0.0.4 (see prom.h): HELP and
 * TYPE lines, escaped label values, numbers that read back exactly, and
 * histograms.
 */
#include "core/prom.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append s with '\\', '\n' and (in label values, quote true) '"' escaped. */
static void put_escaped(struct mesh_buf *b, const char *s, bool quote)
{
    for (const char *c = s; *c != '\0'; c++) {
        const char *esc = *c == '\\'             ? "\\\\"
                          : *c == '\n'           ? "\\n"
                          : (quote && *c == '"') ? "\\\""
                                                 : NULL;
        (void)mesh_buf_append(b, esc ? esc : c, esc ? 2 : 1, NULL);
    }
}

/* The shortest %g text (up to 17 digits) that reads back as v. */
static void format_double(char *out, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, "%cInf", v > 0 ? '+' : '-');
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v) {
            return;
        }
    }
}

static void put_name(struct mesh_buf *b, const char *name, const char *label, const char *lvalue)
{
    (void)mesh_buf_puts(b, name, NULL);
    if (label != NULL) {
        (void)mesh_buf_printf(b, NULL, "{%s=\"", label);
        put_escaped(b, lvalue != NULL ? lvalue : "", true);
        (void)mesh_buf_puts(b, "\"}", NULL);
    }
}

void mesh_prom_family(struct mesh_buf *b, const char *name, const char *type, const char *help)
{
    (void)mesh_buf_printf(b, NULL, "# HELP %s ", name);
    put_escaped(b, help, false);
    (void)mesh_buf_printf(b, NULL, "\n# TYPE %s %s\n", name, type);
}

void mesh_prom_u64(struct mesh_buf *b, const char *name, const char *label, const char *lvalue,
                   uint64_t v)
{
    put_name(b, name, label, lvalue);
    (void)mesh_buf_printf(b, NULL, " %llu\n", (unsigned long long)v);
}

void mesh_prom_f64(struct mesh_buf *b, const char *name, const char *label, const char *lvalue,
                   double v)
{
    char num[40];
    format_double(num, sizeof(num), v);
    put_name(b, name, label, lvalue);
    (void)mesh_buf_printf(b, NULL, " %s\n", num);
}

void mesh_prom_counter(struct mesh_buf *b, const char *name, const char *help, uint64_t v)
{
    mesh_prom_family(b, name, "counter", help);
    mesh_prom_u64(b, name, NULL, NULL, v);
}

void mesh_prom_gauge(struct mesh_buf *b, const char *name, const char *help, double v)
{
    mesh_prom_family(b, name, "gauge", help);
    mesh_prom_f64(b, name, NULL, NULL, v);
}

void mesh_prom_histogram(struct mesh_buf *b, const char *name, const char *help, const double *le,
                         const uint64_t *cum, size_t n, double sum, uint64_t count)
{
    char sample[160], num[40];
    mesh_prom_family(b, name, "histogram", help);
    snprintf(sample, sizeof(sample), "%s_bucket", name);
    for (size_t i = 0; i < n; i++) {
        format_double(num, sizeof(num), le[i]);
        mesh_prom_u64(b, sample, "le", num, cum[i]);
    }
    mesh_prom_u64(b, sample, "le", "+Inf", count);
    snprintf(sample, sizeof(sample), "%s_sum", name);
    mesh_prom_f64(b, sample, NULL, NULL, sum);
    snprintf(sample, sizeof(sample), "%s_count", name);
    mesh_prom_u64(b, sample, NULL, NULL, count);
}
