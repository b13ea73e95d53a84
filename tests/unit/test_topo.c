/*
 * test_topo.c - device coordinates and TopologyProto (common/core/topo.c):
 * coordinate properties for every slice of TensorFlow's and xpk's tables, proto round trip
 * and wire layout, TensorFlow's Topology validation rules, and
 * the check of a TPU-returned topology against a slice.
 *
 * With MESH_TOPO_DUMP_DIR set, writes <type>_<topology>.pb for every row
 * (<type>_<topology>_8t.pb for 8-chip hosts) into that directory (read by
 * tests/integration/test_topology_pb.py, which decodes them with Google's
 * protobuf library).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/core/protobuf/tpu/topology.pb-c.h"

#include "core/accel.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/topo.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    const char *type, *topo;
    int cph;
} slices[] = {
    {"v2-8", NULL, 0},         {"v2-32", NULL, 0},        {"v2-512", NULL, 0},
    {"v3-8", NULL, 0},         {"v3-32", NULL, 0},        {"v3-64", NULL, 0},
    {"v3-2048", NULL, 0},      {"v4-8", NULL, 0},         {"v4-16", NULL, 0},
    {"v4-32", NULL, 0},        {"v4-32", "4x2x2", 0},     {"v4-32", "2x4x2", 0},
    {"v4-128", NULL, 0},       {"v4-1536", NULL, 0},      {"v5p-8", NULL, 0},
    {"v5p-32", NULL, 0},       {"v5p-64", "2x4x4", 0},    {"v5litepod-1", NULL, 0},
    {"v5litepod-4", NULL, 0},  {"v5litepod-8", NULL, 0},  {"v5litepod-8", NULL, 8},
    {"v5litepod-16", NULL, 0}, {"v5litepod-32", NULL, 0}, {"v5litepod-256", NULL, 0},
    {"v6e-8", NULL, 0},        {"v6e-8", NULL, 8},        {"v6e-16", NULL, 0},
    {"v6e-32", "4x8", 8},      {"tpu7x-2", NULL, 0},      {"tpu7x-8", NULL, 0},
    {"tpu7x-32", "2x2x4", 0},  {"tpu7x-128", NULL, 0},
};

static void derive_row(size_t i, struct mesh_slice *s)
{
    struct mesh_slice_spec in = {slices[i].type, NULL, slices[i].topo, slices[i].cph, 0};
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_slice_derive(&in, s, &err) != 0) {
        fail_msg("row %zu %s: %s", i, slices[i].type, err.msg);
    }
}

/* Properties of our coordinates: every mesh position exactly once; task t
 * owns the host block at host-grid position (t % hx, t / hx % hy, t / hx /
 * hy), chips x fastest then y then z, cores minor. */
static void check_coords(const struct mesh_slice *s, const int32_t *c, size_t n)
{
    const int *hb = s->host_bounds, *bb = s->chips_per_host_bounds, *ms = s->mesh_shape;
    size_t mesh = (size_t)ms[0] * ms[1] * ms[2] * ms[3];
    assert_int_equal(n, (size_t)s->hosts * s->devices_per_host * 4);
    assert_int_equal(mesh, (size_t)s->hosts * s->devices_per_host);
    unsigned char *seen = mesh_calloc(mesh, 1);
    for (int t = 0; t < s->hosts; t++) {
        int origin[3] = {(t % hb[0]) * bb[0], ((t / hb[0]) % hb[1]) * bb[1],
                         (t / (hb[0] * hb[1])) * bb[2]};
        for (int d = 0; d < s->devices_per_host; d++) {
            const int32_t *v = &c[((size_t)t * s->devices_per_host + d) * 4];
            int chip = d / ms[3];
            int want[4] = {origin[0] + chip % bb[0], origin[1] + (chip / bb[0]) % bb[1],
                           origin[2] + chip / (bb[0] * bb[1]), d % ms[3]};
            for (int a = 0; a < 4; a++) {
                assert_true(v[a] >= 0 && v[a] < ms[a]);
                if (v[a] != want[a]) {
                    fail_msg("%s task %d device %d axis %d: %d, want %d", s->accelerator_type, t, d,
                             a, v[a], want[a]);
                }
            }
            /* inside the task's block */
            for (int a = 0; a < 3; a++) {
                assert_true(v[a] >= origin[a] && v[a] < origin[a] + bb[a]);
            }
            size_t pos = (((size_t)v[2] * ms[1] + v[1]) * ms[0] + v[0]) * ms[3] + v[3];
            assert_int_equal(seen[pos], 0);
            seen[pos] = 1;
        }
    }
    for (size_t p = 0; p < mesh; p++) {
        assert_int_equal(seen[p], 1);
    }
    mesh_free(seen);
}

static void test_coords_properties(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ELEMS(slices); i++) {
        struct mesh_slice s;
        derive_row(i, &s);
        int32_t *c = NULL;
        size_t n = 0;
        assert_int_equal(mesh_topo_coords(&s, &c, &n, NULL), 0);
        check_coords(&s, c, n);
        mesh_free(c);
    }
}

/* A few exact coordinate lists written out by hand. */
static void test_coords_exact(void **state)
{
    (void)state;
    static const int32_t v3_8[] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1,
                                   0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1};
    static const int32_t v4_16[] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0,
                                    0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0};
    /* v5litepod-16 4x4: host bounds 2,2,1; task 1 is the block at x=2 */
    static const int32_t v5e_16_task1[] = {2, 0, 0, 0, 3, 0, 0, 0, 2, 1, 0, 0, 3, 1, 0, 0};
    static const int32_t v6e_8_8t[] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0,
                                       0, 2, 0, 0, 1, 2, 0, 0, 0, 3, 0, 0, 1, 3, 0, 0};
    static const struct {
        const char *type;
        int cph;
        size_t offset;
        const int32_t *want;
        size_t n;
    } rows[] = {
        {"v3-8", 0, 0, v3_8, N_ELEMS(v3_8)},
        {"v4-16", 0, 0, v4_16, N_ELEMS(v4_16)},
        {"v5litepod-16", 0, 16, v5e_16_task1, N_ELEMS(v5e_16_task1)},
        {"v6e-8", 8, 0, v6e_8_8t, N_ELEMS(v6e_8_8t)},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        struct mesh_slice_spec in = {rows[i].type, NULL, NULL, rows[i].cph, 0};
        struct mesh_slice s;
        assert_int_equal(mesh_slice_derive(&in, &s, NULL), 0);
        int32_t *c = NULL;
        size_t n = 0;
        assert_int_equal(mesh_topo_coords(&s, &c, &n, NULL), 0);
        assert_true(n >= rows[i].offset + rows[i].n);
        assert_memory_equal(c + rows[i].offset, rows[i].want, rows[i].n * sizeof(int32_t));
        mesh_free(c);
    }
}

static void test_coords_bad_slice(void **state)
{
    (void)state;
    struct mesh_slice_spec in = {"v4-16", NULL, NULL, 0, 0};
    struct mesh_slice good, s;
    assert_int_equal(mesh_slice_derive(&in, &good, NULL), 0);
    static const int field[] = {0, 1, 2, 3, 4, 5};
    for (size_t k = 0; k < N_ELEMS(field); k++) {
        s = good;
        switch (field[k]) {
        case 0:
            s.hosts = 3;
            break;
        case 1:
            s.mesh_shape[3] = 3;
            break;
        case 2:
            s.host_bounds[2] = 1;
            break;
        case 3:
            s.devices_per_host = 8;
            break;
        case 4:
            s.dims[0] = 0;
            break;
        default:
            s.chips = 9;
            break;
        }
        int32_t *c = (int32_t *)&s; /* must stay untouched */
        size_t n = 77;
        struct mesh_err err;
        mesh_err_clear(&err);
        assert_int_equal(mesh_topo_coords(&s, &c, &n, &err), -MESH_E_INVAL);
        assert_ptr_equal(c, (int32_t *)&s);
        assert_int_equal(n, 77);
        assert_non_null(strstr(err.msg, "not consistent"));
        uint8_t *buf = NULL;
        assert_int_equal(mesh_topo_build(&s, &buf, &n, NULL), -MESH_E_INVAL);
        assert_null(buf);
    }
    assert_int_equal(mesh_topo_coords(NULL, NULL, NULL, NULL), -MESH_E_INVAL);
}

/* Minimal protobuf wire reader for the layout checks. */
static uint64_t rd_varint(const uint8_t *b, size_t len, size_t *pos)
{
    uint64_t v = 0;
    for (int shift = 0; *pos < len && shift < 64; shift += 7) {
        uint8_t c = b[(*pos)++];
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            return v;
        }
    }
    fail_msg("truncated varint");
    return 0;
}

/* Our bytes: fields in order 1,2,3,4; 1 and 4 packed (tags 0x0A, 0x22). */
static void check_wire(const struct mesh_slice *s, const uint8_t *b, size_t len)
{
    static const uint8_t tags[] = {0x0A, 0x10, 0x18, 0x22};
    size_t pos = 0;
    for (size_t f = 0; f < N_ELEMS(tags); f++) {
        assert_true(pos < len);
        assert_int_equal(b[pos], tags[f]);
        pos++;
        if (tags[f] == 0x10 || tags[f] == 0x18) {
            uint64_t v = rd_varint(b, len, &pos);
            assert_int_equal(v, tags[f] == 0x10 ? s->hosts : s->devices_per_host);
            continue;
        }
        uint64_t plen = rd_varint(b, len, &pos);
        size_t end = pos + plen, count = 0;
        assert_true(end <= len);
        while (pos < end) {
            (void)rd_varint(b, end, &pos);
            count++;
        }
        assert_int_equal(count, tags[f] == 0x0A ? 4 : (size_t)s->hosts * s->devices_per_host * 4);
    }
    assert_int_equal(pos, len);
}

static void dump(const struct mesh_slice *s, const uint8_t *buf, size_t len)
{
    const char *dir = getenv("MESH_TOPO_DUMP_DIR");
    if (dir == NULL || dir[0] == '\0') {
        return;
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/%s_%s%s.pb", dir, s->accelerator_type, s->topology,
             s->chips_per_host == 8 ? "_8t" : "");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_build_parse_roundtrip(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ELEMS(slices); i++) {
        struct mesh_slice s;
        derive_row(i, &s);
        uint8_t *buf = NULL;
        size_t len = 0;
        struct mesh_err err;
        mesh_err_clear(&err);
        assert_int_equal(mesh_topo_build(&s, &buf, &len, &err), 0);
        check_wire(&s, buf, len);
        dump(&s, buf, len);

        struct mesh_topo_info info;
        if (mesh_topo_parse(buf, len, &info, &err) != 0) {
            fail_msg("row %zu %s: %s", i, s.accelerator_type, err.msg);
        }
        assert_memory_equal(info.mesh_shape, s.mesh_shape, sizeof(info.mesh_shape));
        assert_int_equal(info.num_tasks, s.hosts);
        assert_int_equal(info.devices_per_task, s.devices_per_host);
        assert_int_equal(info.missing_devices, 0);
        assert_int_equal(info.duplicate_devices, 0);
        assert_false(info.has_hardware_feature);
        int32_t *c = NULL;
        size_t n = 0;
        assert_int_equal(mesh_topo_coords(&s, &c, &n, NULL), 0);
        assert_int_equal(info.n_coords, n);
        assert_memory_equal(info.coords, c, n * sizeof(int32_t));
        assert_int_equal(mesh_topo_check_slice(&info, &s, &err), 0);
        mesh_free(c);
        mesh_topo_info_cleanup(&info);
        assert_null(info.coords);
        mesh_free(buf);
    }
    mesh_topo_info_cleanup(NULL);
}

/* Encode an arbitrary TopologyProto with protobuf-c itself (so rule
 * violations can be written). Owned by the caller. */
static uint8_t *encode(const int32_t *mesh, size_t nmesh, int tasks, int dpt, const int32_t *coords,
                       size_t ncoords, int embedding, size_t *out_len)
{
    Tensorflow__Tpu__TopologyProto m = TENSORFLOW__TPU__TOPOLOGY_PROTO__INIT;
    Tensorflow__Tpu__TPUHardwareFeature hw = TENSORFLOW__TPU__TPUHARDWARE_FEATURE__INIT;
    m.n_mesh_shape = nmesh;
    m.mesh_shape = (int32_t *)mesh;
    m.num_tasks = tasks;
    m.num_tpu_devices_per_task = dpt;
    m.n_device_coordinates = ncoords;
    m.device_coordinates = (int32_t *)coords;
    if (embedding >= 0) {
        hw.embedding_feature = embedding;
        m.tpu_hardware_feature = &hw;
    }
    size_t len = tensorflow__tpu__topology_proto__get_packed_size(&m);
    uint8_t *b = mesh_malloc(len + 1);
    assert_int_equal(tensorflow__tpu__topology_proto__pack(&m, b), len);
    *out_len = len;
    return b;
}

static void test_parse_rules(void **state)
{
    (void)state;
    static const int32_t m2211[] = {2, 2, 1, 1}, m221[] = {2, 2, 1}, m2201[] = {2, 2, 0, 1};
    static const int32_t m1111[] = {1, 1, 1, 1}, m2111[] = {2, 1, 1, 1};
    static const int32_t mhuge[] = {1000, 1000, 1000, 1};
    static const int32_t c4[] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0};
    static const int32_t cneg[] = {0, 0, 0, 0, 1, 0, 0, 0, 0, -1, 0, 0, 1, 1, 0, 0};
    static const int32_t cout[] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 1, 1, 0, 0};
    static const int32_t cdup[] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const struct {
        const int32_t *mesh;
        size_t nmesh;
        int tasks, dpt;
        const int32_t *coords;
        size_t ncoords;
        int embedding;
        int rc;
        const char *says;
        int missing, dups;
    } rows[] = {
        {m2211, 4, 1, 4, c4, 16, -1, 0, NULL, 0, 0},
        {m2211, 4, 1, 4, c4, 16, 2, 0, NULL, 0, 0},
        {m2211, 4, 2, 2, c4, 16, 1, 0, NULL, 0, 0},
        {m2211, 4, 0, 0, NULL, 0, -1, 0, NULL, 4, 0}, /* TF accepts an empty topology */
        {m2111, 4, 1, 2, cdup, 8, -1, 0, NULL, 1, 1}, /* duplicates: TF accepts, we count */
        {m221, 3, 1, 4, c4, 12, -1, -MESH_E_INVAL,
         "`mesh_shape` must be a vector of size 4 with positive entries; got [2, 2, 1]", 0, 0},
        {m2201, 4, 1, 4, c4, 16, -1, -MESH_E_INVAL,
         "`mesh_shape` must be a vector of size 4 with positive entries; got [2, 2, 0, 1]", 0, 0},
        {NULL, 0, 0, 0, NULL, 0, -1, -MESH_E_INVAL, "got []", 0, 0},
        {m2211, 4, -1, 4, c4, 16, -1, -MESH_E_INVAL, "`num_tasks` must be >= 0; got -1", 0, 0},
        {m2211, 4, 1, -4, c4, 16, -1, -MESH_E_INVAL,
         "`num_tpu_devices_per_task` must be >= 0; got -4", 0, 0},
        {m2211, 4, 1, 4, c4, 12, -1, -MESH_E_INVAL,
         "`device_coordinates` must have shape num_tasks (1) * num_tpu_devices_per_task (4) * "
         "len(mesh_shape) (4); got shape 12",
         0, 0},
        {m2211, 4, 2, 4, c4, 16, -1, -MESH_E_INVAL, "got shape 16", 0, 0},
        {m2211, 4, 1, 4, cneg, 16, -1, -MESH_E_INVAL,
         "All values in `device_coordinates` must be >= 0, got -1 at index 9", 0, 0},
        {m2211, 4, 1, 4, cout, 16, -1, -MESH_E_INVAL,
         "device 2 of task 0 has coordinate 2 on axis 1, outside mesh_shape [2, 2, 1, 1]", 0, 0},
        {m1111, 4, 1, 1, c4, 16, -1, -MESH_E_INVAL, "got shape 16", 0, 0},
        {mhuge, 4, 1, 1, c4, 4, -1, -MESH_E_RANGE, "at most 131072", 0, 0},
        {m1111, 4, 100000, 100000, NULL, 0, -1, -MESH_E_RANGE, "10000000000 devices", 0, 0},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        size_t len = 0;
        uint8_t *b = encode(rows[i].mesh, rows[i].nmesh, rows[i].tasks, rows[i].dpt, rows[i].coords,
                            rows[i].ncoords, rows[i].embedding, &len);
        struct mesh_topo_info info;
        memset(&info, 0x11, sizeof(info));
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_topo_parse(b, len, &info, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d, want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(info.num_tasks, rows[i].tasks);
            assert_int_equal(info.devices_per_task, rows[i].dpt);
            assert_int_equal(info.missing_devices, rows[i].missing);
            assert_int_equal(info.duplicate_devices, rows[i].dups);
            assert_int_equal(info.has_hardware_feature, rows[i].embedding >= 0);
            if (rows[i].embedding >= 0) {
                assert_int_equal(info.embedding_feature, rows[i].embedding);
            }
            mesh_topo_info_cleanup(&info);
        } else {
            assert_int_equal(info.num_tasks, 0x11111111); /* untouched */
            if (strstr(err.msg, rows[i].says) == NULL) {
                fail_msg("row %zu: \"%s\" does not say \"%s\"", i, err.msg, rows[i].says);
            }
        }
        mesh_free(b);
    }
}

/* Raw bytes: what protobuf-c must refuse, and encodings TF also accepts. */
static void test_parse_wire(void **state)
{
    (void)state;
    /* mesh 2,2,1,1; 1 task; 4 devices; coordinates packed */
    static const uint8_t good[] = {0x0A, 0x04, 2, 2, 1, 1, 0x10, 1, 0x18, 4, 0x22, 0x10, 0, 0,
                                   0,    0,    1, 0, 0, 0, 0,    1, 0,    0, 1,    1,    0, 0};
    /* the same with mesh_shape not packed (proto2 style): TF accepts it */
    static const uint8_t unpacked[] = {0x08, 2, 0x08, 2,    0x08, 1, 0x08, 1, 0x10, 1,
                                       0x18, 4, 0x22, 0x10, 0,    0, 0,    0, 1,    0,
                                       0,    0, 0,    1,    0,    0, 1,    1, 0,    0};
    /* hardware feature V1 plus an unknown field 2 inside it (newer TF's
     * num_embedding_devices_per_chip): accepted */
    static const uint8_t hw[] = {0x0A, 0x04, 2, 2, 1,    1, 0x10, 1, 0x18, 4, 0x22, 0x10,
                                 0,    0,    0, 0, 1,    0, 0,    0, 0,    1, 0,    0,
                                 1,    1,    0, 0, 0x2A, 4, 0x08, 1, 0x10, 4};
    static const uint8_t truncated[] = {0x0A, 0x04, 2, 2};
    static const uint8_t bad_len[] = {0x0A, 0x7F, 2, 2, 1, 1};
    static const uint8_t garbage[] = {0x0A, 0x04, 2, 2, 1, 1, 0x10, 0, 0x18, 0, 0xFF, 0xFF};
    static const uint8_t unknown[] = {0x0A, 0x04, 2, 2, 1, 1, 0x30, 1};
    static const uint8_t wire7[] = {0x0F};
    static const struct {
        const uint8_t *b;
        size_t len;
        int rc;
        const char *says;
    } rows[] = {
        {good, sizeof(good), 0, NULL},
        {unpacked, sizeof(unpacked), 0, NULL},
        {hw, sizeof(hw), 0, NULL},
        {truncated, sizeof(truncated), -MESH_E_PARSE, "not a valid protobuf message"},
        {bad_len, sizeof(bad_len), -MESH_E_PARSE, "truncated"},
        {garbage, sizeof(garbage), -MESH_E_PARSE, "garbage"},
        {unknown, sizeof(unknown), -MESH_E_PARSE, "unknown field 6"},
        {wire7, sizeof(wire7), -MESH_E_PARSE, "not a valid"},
        {good, 0, -MESH_E_INVAL, "`mesh_shape` must be a vector of size 4"},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        struct mesh_topo_info info;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_topo_parse(rows[i].b, rows[i].len, &info, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d, want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            static const int want_mesh[4] = {2, 2, 1, 1};
            assert_memory_equal(info.mesh_shape, want_mesh, sizeof(want_mesh));
            assert_int_equal(info.n_coords, 16);
            assert_int_equal(info.coords[5], 0);
            assert_int_equal(info.coords[4], 1);
            mesh_topo_info_cleanup(&info);
        } else if (strstr(err.msg, rows[i].says) == NULL) {
            fail_msg("row %zu: \"%s\" does not say \"%s\"", i, err.msg, rows[i].says);
        }
    }
    /* size limit is checked before anything is read */
    size_t big = MESH_TOPO_PB_MAX + 1;
    uint8_t *huge = mesh_calloc(big, 1);
    struct mesh_topo_info info;
    struct mesh_err err;
    assert_int_equal(mesh_topo_parse(huge, big, &info, &err), -MESH_E_TOOBIG);
    assert_non_null(strstr(err.msg, "more than"));
    mesh_free(huge);
    assert_int_equal(mesh_topo_parse(NULL, 4, &info, NULL), -MESH_E_INVAL);
}

/* Parse our own bytes for slice a, then edit the coordinates the way a TPU
 * might report them, and check them against slice b. */
static void test_check_slice(void **state)
{
    (void)state;
    enum { OK, SWAP_TASKS, SWAP_CORES, MIX_BLOCKS, DUP };
    static const struct {
        const char *a, *b;
        int cph_a, cph_b;
        int edit;
        int rc;
        const char *says;
    } rows[] = {
        {"v4-16", "v4-16", 0, 0, OK, 0, NULL},
        {"v3-8", "v3-8", 0, 0, OK, 0, NULL},
        {"v4-32", "v4-32", 0, 0, SWAP_TASKS, 0, NULL}, /* task order may differ */
        {"v3-32", "v3-32", 0, 0, SWAP_CORES, 0, NULL},
        {"v4-16", "v4-16", 0, 0, MIX_BLOCKS, -MESH_E_CONFIG, "not one host block of 2,2,1 chips"},
        {"v4-16", "v4-16", 0, 0, DUP, -MESH_E_CONFIG, "1 duplicated and 1 missing"},
        {"v4-16", "v4-32", 0, 0, OK, -MESH_E_CONFIG,
         "the TPU reports mesh_shape [2, 2, 2, 1] but v4-32 (topology 2x2x4) has [2, 2, 4, 1]"},
        {"v3-8", "v4-16", 0, 0, OK, -MESH_E_CONFIG, "mesh_shape [2, 2, 1, 2]"},
        {"v6e-8", "v6e-8", 8, 0, OK, -MESH_E_CONFIG,
         "the TPU reports 1 tasks of 8 devices but v6e-8 has 2 hosts of 4 devices"},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        struct mesh_slice_spec ia = {rows[i].a, NULL, NULL, rows[i].cph_a, 0};
        struct mesh_slice_spec ib = {rows[i].b, NULL, NULL, rows[i].cph_b, 0};
        struct mesh_slice sa, sb;
        assert_int_equal(mesh_slice_derive(&ia, &sa, NULL), 0);
        assert_int_equal(mesh_slice_derive(&ib, &sb, NULL), 0);
        uint8_t *buf = NULL;
        size_t len = 0;
        assert_int_equal(mesh_topo_build(&sa, &buf, &len, NULL), 0);
        struct mesh_topo_info info;
        assert_int_equal(mesh_topo_parse(buf, len, &info, NULL), 0);
        mesh_free(buf);
        size_t per_task = (size_t)info.devices_per_task * 4;
        int32_t *c = info.coords;
        switch (rows[i].edit) {
        case SWAP_TASKS:
            for (size_t k = 0; k < per_task; k++) {
                int32_t t = c[k];
                c[k] = c[per_task * 3 + k];
                c[per_task * 3 + k] = t;
            }
            break;
        case SWAP_CORES:
            c[3] = 1;
            c[7] = 0;
            break;
        case MIX_BLOCKS: /* device 0 of task 0 <-> device 0 of task 1 */
            for (size_t k = 0; k < 4; k++) {
                int32_t t = c[k];
                c[k] = c[per_task + k];
                c[per_task + k] = t;
            }
            break;
        case DUP: /* device 1 repeats device 0 */
            memcpy(&c[4], &c[0], 4 * sizeof(int32_t));
            break;
        default:
            break;
        }
        /* re-encode the edited coordinates so parse recounts them */
        int32_t mesh[4] = {info.mesh_shape[0], info.mesh_shape[1], info.mesh_shape[2],
                           info.mesh_shape[3]};
        uint8_t *b2 =
            encode(mesh, 4, info.num_tasks, info.devices_per_task, c, info.n_coords, -1, &len);
        struct mesh_topo_info edited;
        assert_int_equal(mesh_topo_parse(b2, len, &edited, NULL), 0);
        mesh_free(b2);
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_topo_check_slice(&edited, &sb, &err);
        mesh_topo_info_cleanup(&edited);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d, want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        if (rc != 0 && strstr(err.msg, rows[i].says) == NULL) {
            fail_msg("row %zu: \"%s\" does not say \"%s\"", i, err.msg, rows[i].says);
        }
        mesh_topo_info_cleanup(&info);
    }
    struct mesh_slice s;
    struct mesh_slice_spec in = {"v4-8", NULL, NULL, 0, 0};
    assert_int_equal(mesh_slice_derive(&in, &s, NULL), 0);
    struct mesh_topo_info empty;
    mesh_topo_info_init(&empty);
    assert_int_equal(mesh_topo_check_slice(&empty, &s, NULL), -MESH_E_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coords_properties), cmocka_unit_test(test_coords_exact),
        cmocka_unit_test(test_coords_bad_slice),  cmocka_unit_test(test_build_parse_roundtrip),
        cmocka_unit_test(test_parse_rules),       cmocka_unit_test(test_parse_wire),
        cmocka_unit_test(test_check_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
