/*
 * fuzz_accel.c - the accelerator parsers and mesh_slice_derive never crash,
 * and whatever derive accepts is self-consistent and yields coordinates
 * and a TopologyProto that our own parser accepts and checks.
 *
 * Input: "type NUL label NUL topology NUL" then up to two bytes (chips per
 * host, hosts); a missing field is NULL / 0. Each string is also fed to the
 * three single parsers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/accel.h"
#include "core/mem.h"
#include "core/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next NUL-terminated field of at most 96 bytes as an owned string, or
 * NULL when the input is used up. */
static char *next_field(const uint8_t *data, size_t size, size_t *pos)
{
    if (*pos >= size) {
        return NULL;
    }
    const uint8_t *start = data + *pos;
    const uint8_t *nul = memchr(start, 0, size - *pos);
    size_t n = nul != NULL ? (size_t)(nul - start) : size - *pos;
    *pos += n + (nul != NULL ? 1 : 0);
    return mesh_strndup((const char *)start, n < 96 ? n : 96);
}

static void exercise_slice(const struct mesh_slice *s)
{
    /* invariants every consumer relies on */
    if (s->dims[0] * s->dims[1] * s->dims[2] != s->chips ||
        s->hosts * s->chips_per_host != s->chips ||
        s->devices_per_host != s->chips_per_host * s->mesh_shape[3]) {
        abort();
    }
    for (int a = 0; a < 3; a++) {
        if (s->host_bounds[a] * s->chips_per_host_bounds[a] != s->dims[a]) {
            abort();
        }
    }
    if (s->chips > 4096) {
        return; /* keep iterations fast; big slices are covered by unit tests */
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    struct mesh_err err;
    if (mesh_topo_build(s, &buf, &len, &err) != 0) {
        abort();
    }
    struct mesh_topo_info info;
    if (mesh_topo_parse(buf, len, &info, &err) != 0 || mesh_topo_check_slice(&info, s, &err) != 0) {
        abort();
    }
    mesh_topo_info_cleanup(&info);
    mesh_free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    char *type = next_field(data, size, &pos);
    char *label = next_field(data, size, &pos);
    char *topo = next_field(data, size, &pos);
    int cph = pos < size ? data[pos++] : 0;
    int hosts = pos < size ? data[pos++] : 0;
    if (hosts == 255) {
        hosts = -1; /* reach the negative-input branch too */
    }

    struct mesh_err err;
    enum mesh_tpu_gen gen;
    int suffix, dims[3], nd;
    const char *fields[3] = {type, label, topo};
    for (int i = 0; i < 3; i++) {
        if (fields[i] != NULL) {
            (void)mesh_accel_parse_type(fields[i], &gen, &suffix, &err);
            (void)mesh_accel_gen_from_gke_label(fields[i], &gen, &err);
            (void)mesh_accel_parse_topology(fields[i], dims, &nd, &err);
        }
    }
    struct mesh_slice_spec in = {type, label, topo, cph, hosts};
    struct mesh_slice s;
    if (mesh_slice_derive(&in, &s, &err) == 0) {
        exercise_slice(&s);
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n') != NULL) {
        abort(); /* every failure explains itself on one line */
    }
    mesh_free(type);
    mesh_free(label);
    mesh_free(topo);
    return 0;
}
