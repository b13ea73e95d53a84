/*
 * prom.h - the Prometheus text exposition format 0.0.4, written once for
 * every /metrics document (tpumesh-sidecar's and tpumesh-injector's):
 *
 *   # HELP <name> <help, '\' and newline escaped>
 *   # TYPE <name> counter|gauge|summary|histogram
 *   <name>[{<label>="<value, '\', '"' and newline escaped>"}] <number>
 *
 * Numbers: integers in decimal; doubles in the shortest %g form that reads
 * back to the same double ("NaN", "+Inf", "-Inf" for the others).
 * Histograms add _bucket{le="..."} (cumulative, ending at le="+Inf"), _sum
 * and _count. Names and label names are the caller's constants and are
 * written as given.
 *
 * Pure (docs/STYLE.md R8): appends to a mesh_buf; a piece that would pass
 * the buffer's limit is left out (mesh_buf_append's TOOBIG), so a document
 * can lose lines but never overruns. Callers size the limit far above
 * their documents (the sidecar's and the injector's: 1 MiB).
 */
#ifndef MESH_PROM_H
#define MESH_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* "# HELP" and "# TYPE" lines of one metric family. */
void mesh_prom_family(struct mesh_buf *b, const char *name, const char *type, const char *help);

/* One sample `name value`; label may be NULL (no labels), else
 * `name{label="value"}` with lvalue escaped. */
void mesh_prom_u64(struct mesh_buf *b, const char *name, const char *label, const char *lvalue,
                   uint64_t v);
void mesh_prom_f64(struct mesh_buf *b, const char *name, const char *label, const char *lvalue,
                   double v);

/* A family with one unlabelled sample: HELP, TYPE counter/gauge, value. */
void mesh_prom_counter(struct mesh_buf *b, const char *name, const char *help, uint64_t v);
void mesh_prom_gauge(struct mesh_buf *b, const char *name, const char *help, double v);

/* A whole histogram family: n finite upper bounds le[] (ascending) with
 * their cumulative counts cum[] (borrowed), then +Inf = count, _sum, _count. */
void mesh_prom_histogram(struct mesh_buf *b, const char *name, const char *help, const double *le,
                         const uint64_t *cum, size_t n, double sum, uint64_t count);

#endif
