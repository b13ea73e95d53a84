/*
 * test_accel.c - the accelerator model (common/core/accel.c): type, label
 * and topology parsers, and mesh_slice_derive over every example of
 * TensorFlow's v2/v3 table and xpk's machine table plus the invalid combinations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core/accel.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/topo.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static void test_parse_type(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        enum mesh_tpu_gen gen;
        int suffix;
    } rows[] = {
        {"v2-8", 0, MESH_GEN_V2, 8},
        {"v3-2048", 0, MESH_GEN_V3, 2048},
        {"v4-32", 0, MESH_GEN_V4, 32},
        {"v5p-8", 0, MESH_GEN_V5P, 8},
        {"v5litepod-16", 0, MESH_GEN_V5E, 16},
        {"v6e-256", 0, MESH_GEN_V6E, 256},
        {"tpu7x-8", 0, MESH_GEN_TPU7X, 8},
        {"v4-7", 0, MESH_GEN_V4, 7}, /* parity is derive's business */
        {"v4-131072", 0, MESH_GEN_V4, 131072},
        {"v4-131073", -MESH_E_INVAL, 0, 0},
        {"v4-032", -MESH_E_INVAL, 0, 0},
        {"v4-0", -MESH_E_INVAL, 0, 0},
        {"v4--32", -MESH_E_INVAL, 0, 0},
        {"v4-+32", -MESH_E_INVAL, 0, 0},
        {"v4-32 ", -MESH_E_INVAL, 0, 0},
        {" v4-32", -MESH_E_INVAL, 0, 0},
        {"V4-32", -MESH_E_INVAL, 0, 0},
        {"v4-", -MESH_E_INVAL, 0, 0},
        {"v4", -MESH_E_INVAL, 0, 0},
        {"v5e-8", -MESH_E_INVAL, 0, 0},
        {"v9-8", -MESH_E_INVAL, 0, 0},
        {"tpu-v4-podslice", -MESH_E_INVAL, 0, 0},
        {"-8", -MESH_E_INVAL, 0, 0},
        {"", -MESH_E_INVAL, 0, 0},
        {"v4-99999999999999999999", -MESH_E_INVAL, 0, 0},
        {"v4-32\n$(touch /tmp/x)", -MESH_E_INVAL, 0, 0},
        {"v4-32xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
         -MESH_E_INVAL, 0, 0},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        enum mesh_tpu_gen gen = MESH_GEN_UNKNOWN;
        int suffix = -1;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_accel_parse_type(rows[i].in, &gen, &suffix, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu '%s': rc %d, want %d (%s)", i, rows[i].in, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(gen, rows[i].gen);
            assert_int_equal(suffix, rows[i].suffix);
        } else {
            assert_int_equal(gen, MESH_GEN_UNKNOWN); /* untouched on failure */
            assert_int_equal(suffix, -1);
            assert_non_null(strstr(err.msg, "accelerator type"));
            assert_null(strchr(err.msg, '\n'));
        }
    }
    assert_int_equal(mesh_accel_parse_type(NULL, NULL, NULL, NULL), -MESH_E_INVAL);
    struct mesh_err err;
    enum mesh_tpu_gen gen;
    int suffix;
    assert_int_equal(mesh_accel_parse_type("v5e-16", &gen, &suffix, &err), -MESH_E_INVAL);
    assert_non_null(strstr(err.msg, "written v5litepod-N (e.g. v5litepod-16)"));
}

static void test_gke_label(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        enum mesh_tpu_gen gen;
    } rows[] = {
        {"tpu-v4-podslice", 0, MESH_GEN_V4},   {"tpu-v5-lite-podslice", 0, MESH_GEN_V5E},
        {"tpu-v5p-slice", 0, MESH_GEN_V5P},    {"tpu-v6e-slice", 0, MESH_GEN_V6E},
        {"tpu7x", 0, MESH_GEN_TPU7X},          {"tpu-v3-slice", 0, MESH_GEN_V3},
        {"tpu-v3-device", 0, MESH_GEN_V3},     {"tpu-v4-lite-podslice", -MESH_E_INVAL, 0},
        {"TPU-V4-PODSLICE", -MESH_E_INVAL, 0}, {"tpu-v4-podslice ", -MESH_E_INVAL, 0},
        {"v4-32", -MESH_E_INVAL, 0},           {"", -MESH_E_INVAL, 0},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        enum mesh_tpu_gen gen = MESH_GEN_UNKNOWN;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_accel_gen_from_gke_label(rows[i].in, &gen, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu '%s': rc %d, want %d (%s)", i, rows[i].in, rc, rows[i].rc, err.msg);
        }
        assert_int_equal(gen, rc == 0 ? rows[i].gen : MESH_GEN_UNKNOWN);
        if (rc != 0) {
            assert_non_null(strstr(err.msg, "label"));
        }
    }
}

static void test_parse_topology(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        int ndims;
        int d[3];
    } rows[] = {
        {"2x2x4", 0, 3, {2, 2, 4}},
        {"4x4", 0, 2, {4, 4, 1}},
        {"1x1", 0, 2, {1, 1, 1}},
        {"2x2x1", 0, 3, {2, 2, 1}},
        {"16x16", 0, 2, {16, 16, 1}},
        {"8x16x16", 0, 3, {8, 16, 16}},
        {"4096x16", 0, 2, {4096, 16, 1}},
        {"99999999999x1", -MESH_E_RANGE, 0, {0}},
        {"-99999999999x1", -MESH_E_INVAL, 0, {0}},
        {"4097x1", -MESH_E_RANGE, 0, {0}},
        {"4096x4096", -MESH_E_RANGE, 0, {0}}, /* more than MESH_ACCEL_CHIPS_MAX chips */
        {"4", -MESH_E_INVAL, 0, {0}},
        {"2x2x2x2", -MESH_E_INVAL, 0, {0}},
        {"2x2x", -MESH_E_INVAL, 0, {0}},
        {"x2x2", -MESH_E_INVAL, 0, {0}},
        {"2X2", -MESH_E_INVAL, 0, {0}},
        {"2*2", -MESH_E_INVAL, 0, {0}},
        {"0x2", -MESH_E_INVAL, 0, {0}},
        {"02x2", -MESH_E_INVAL, 0, {0}},
        {"-2x2", -MESH_E_INVAL, 0, {0}},
        {"2x 2", -MESH_E_INVAL, 0, {0}},
        {"2,2,1", -MESH_E_INVAL, 0, {0}},
        {"", -MESH_E_INVAL, 0, {0}},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        int d[3] = {-1, -1, -1}, nd = -1;
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_accel_parse_topology(rows[i].in, d, &nd, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu '%s': rc %d, want %d (%s)", i, rows[i].in, rc, rows[i].rc, err.msg);
        }
        if (rc == 0) {
            assert_int_equal(nd, rows[i].ndims);
            assert_memory_equal(d, rows[i].d, sizeof(d));
        } else {
            assert_int_equal(nd, -1);
            assert_int_equal(d[0], -1);
            assert_non_null(strstr(err.msg, "topology"));
        }
    }
}

static void test_names(void **state)
{
    (void)state;
    static const struct {
        enum mesh_tpu_gen gen;
        const char *name;
        const char *label;
    } rows[] = {
        {MESH_GEN_V2, "v2", NULL},
        {MESH_GEN_V3, "v3", "tpu-v3-slice"},
        {MESH_GEN_V4, "v4", "tpu-v4-podslice"},
        {MESH_GEN_V5P, "v5p", "tpu-v5p-slice"},
        {MESH_GEN_V5E, "v5litepod", "tpu-v5-lite-podslice"},
        {MESH_GEN_V6E, "v6e", "tpu-v6e-slice"},
        {MESH_GEN_TPU7X, "tpu7x", "tpu7x"},
        {MESH_GEN_UNKNOWN, "unknown", NULL},
        {(enum mesh_tpu_gen)99, "unknown", NULL},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        assert_string_equal(mesh_accel_gen_name(rows[i].gen), rows[i].name);
        const char *l = mesh_accel_gen_gke_label(rows[i].gen);
        if (rows[i].label == NULL) {
            assert_null(l);
        } else {
            assert_string_equal(l, rows[i].label);
            /* every label maps back to its generation */
            enum mesh_tpu_gen g = MESH_GEN_UNKNOWN;
            assert_int_equal(mesh_accel_gen_from_gke_label(l, &g, NULL), 0);
            assert_int_equal(g, rows[i].gen);
        }
    }
    char b[MESH_ACCEL_BOUNDS_MAX];
    assert_string_equal(mesh_accel_format_bounds((int[3]){2, 2, 1}, b, sizeof(b)), "2,2,1");
    assert_string_equal(mesh_accel_format_bounds((int[3]){16, 16, 1}, b, sizeof(b)), "16,16,1");
    assert_string_equal(mesh_accel_format_bounds((int[3]){1, 2, 4}, b, 4), "1,2");
    b[0] = 'z';
    assert_ptr_equal(mesh_accel_format_bounds((int[3]){1, 2, 4}, b, 0), b);
    assert_int_equal(b[0], 'z'); /* out_len 0: nothing written */
    assert_string_equal(
        mesh_accel_format_bounds((int[3]){-2147483647 - 1, -2147483647 - 1, -2147483647 - 1}, b,
                                 sizeof(b)),
        "-2147483648,-2147483648,-2147483648");
}

/* ---- derivation: every example of TensorFlow's and xpk's tables and more --- */

struct derive_row {
    const char *type, *label, *topo;
    int cph_in, hosts_in;
    /* expected */
    const char *want_type, *want_topo;
    enum mesh_tpu_gen gen;
    int ndims, chips, hosts, cph, cores, dph;
    int hb[3], cphb[3], mesh[4];
};

static const struct derive_row derive_rows[] = {
    /* v2/v3: TensorFlow's host bounds table, 8 devices per host */
    {"v2-8",
     NULL,
     NULL,
     0,
     0,
     "v2-8",
     "2x2",
     MESH_GEN_V2,
     2,
     4,
     1,
     4,
     2,
     8,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 2}},
    {"v2-32",
     NULL,
     NULL,
     0,
     0,
     "v2-32",
     "4x4",
     MESH_GEN_V2,
     2,
     16,
     4,
     4,
     2,
     8,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 2}},
    {"v2-128",
     NULL,
     NULL,
     0,
     0,
     "v2-128",
     "8x8",
     MESH_GEN_V2,
     2,
     64,
     16,
     4,
     2,
     8,
     {4, 4, 1},
     {2, 2, 1},
     {8, 8, 1, 2}},
    {"v2-256",
     NULL,
     NULL,
     0,
     0,
     "v2-256",
     "8x16",
     MESH_GEN_V2,
     2,
     128,
     32,
     4,
     2,
     8,
     {4, 8, 1},
     {2, 2, 1},
     {8, 16, 1, 2}},
    {"v2-512",
     NULL,
     NULL,
     0,
     0,
     "v2-512",
     "16x16",
     MESH_GEN_V2,
     2,
     256,
     64,
     4,
     2,
     8,
     {8, 8, 1},
     {2, 2, 1},
     {16, 16, 1, 2}},
    {"v3-8",
     NULL,
     NULL,
     0,
     0,
     "v3-8",
     "2x2",
     MESH_GEN_V3,
     2,
     4,
     1,
     4,
     2,
     8,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 2}},
    {"v3-32",
     NULL,
     NULL,
     0,
     0,
     "v3-32",
     "4x4",
     MESH_GEN_V3,
     2,
     16,
     4,
     4,
     2,
     8,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 2}},
    {"v3-64",
     NULL,
     NULL,
     0,
     0,
     "v3-64",
     "4x8",
     MESH_GEN_V3,
     2,
     32,
     8,
     4,
     2,
     8,
     {2, 4, 1},
     {2, 2, 1},
     {4, 8, 1, 2}},
    {"v3-128",
     NULL,
     NULL,
     0,
     0,
     "v3-128",
     "8x8",
     MESH_GEN_V3,
     2,
     64,
     16,
     4,
     2,
     8,
     {4, 4, 1},
     {2, 2, 1},
     {8, 8, 1, 2}},
    {"v3-256",
     NULL,
     NULL,
     0,
     0,
     "v3-256",
     "8x16",
     MESH_GEN_V3,
     2,
     128,
     32,
     4,
     2,
     8,
     {4, 8, 1},
     {2, 2, 1},
     {8, 16, 1, 2}},
    {"v3-512",
     NULL,
     NULL,
     0,
     0,
     "v3-512",
     "16x16",
     MESH_GEN_V3,
     2,
     256,
     64,
     4,
     2,
     8,
     {8, 8, 1},
     {2, 2, 1},
     {16, 16, 1, 2}},
    {"v3-1024",
     NULL,
     NULL,
     0,
     0,
     "v3-1024",
     "16x32",
     MESH_GEN_V3,
     2,
     512,
     128,
     4,
     2,
     8,
     {8, 16, 1},
     {2, 2, 1},
     {16, 32, 1, 2}},
    {"v3-2048",
     NULL,
     NULL,
     0,
     0,
     "v3-2048",
     "32x32",
     MESH_GEN_V3,
     2,
     1024,
     256,
     4,
     2,
     8,
     {16, 16, 1},
     {2, 2, 1},
     {32, 32, 1, 2}},
    {"v3-32",
     "tpu-v3-slice",
     "4x4",
     4,
     4,
     "v3-32",
     "4x4",
     MESH_GEN_V3,
     2,
     16,
     4,
     4,
     2,
     8,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 2}},
    {NULL,
     "tpu-v3-device",
     "2x2",
     0,
     0,
     "v3-8",
     "2x2",
     MESH_GEN_V3,
     2,
     4,
     1,
     4,
     2,
     8,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 2}},
    /* v4: 4-chip VMs, megacore = 1 device per chip */
    {"v4-8",
     NULL,
     NULL,
     0,
     0,
     "v4-8",
     "2x2x1",
     MESH_GEN_V4,
     3,
     4,
     1,
     4,
     2,
     4,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 1}},
    {"v4-8",
     "tpu-v4-podslice",
     "2x2x1",
     4,
     1,
     "v4-8",
     "2x2x1",
     MESH_GEN_V4,
     3,
     4,
     1,
     4,
     2,
     4,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 1}},
    {"v4-16",
     NULL,
     NULL,
     0,
     0,
     "v4-16",
     "2x2x2",
     MESH_GEN_V4,
     3,
     8,
     2,
     4,
     2,
     4,
     {1, 1, 2},
     {2, 2, 1},
     {2, 2, 2, 1}},
    {"v4-16",
     "tpu-v4-podslice",
     "2x2x2",
     0,
     0,
     "v4-16",
     "2x2x2",
     MESH_GEN_V4,
     3,
     8,
     2,
     4,
     2,
     4,
     {1, 1, 2},
     {2, 2, 1},
     {2, 2, 2, 1}},
    {"v4-32",
     NULL,
     NULL,
     0,
     0,
     "v4-32",
     "2x2x4",
     MESH_GEN_V4,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {"v4-32",
     "tpu-v4-podslice",
     "2x2x4",
     4,
     4,
     "v4-32",
     "2x2x4",
     MESH_GEN_V4,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {"v4-32",
     NULL,
     "4x2x2",
     0,
     0,
     "v4-32",
     "4x2x2",
     MESH_GEN_V4,
     3,
     16,
     4,
     4,
     2,
     4,
     {2, 1, 2},
     {2, 2, 1},
     {4, 2, 2, 1}},
    {NULL,
     "tpu-v4-podslice",
     "2x2x4",
     0,
     0,
     "v4-32",
     "2x2x4",
     MESH_GEN_V4,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {NULL,
     "tpu-v4-podslice",
     NULL,
     4,
     4,
     "v4-32",
     "2x2x4",
     MESH_GEN_V4,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {"v4-64",
     NULL,
     NULL,
     0,
     0,
     "v4-64",
     "2x4x4",
     MESH_GEN_V4,
     3,
     32,
     8,
     4,
     2,
     4,
     {1, 2, 4},
     {2, 2, 1},
     {2, 4, 4, 1}},
    {"v4-128",
     NULL,
     NULL,
     0,
     0,
     "v4-128",
     "4x4x4",
     MESH_GEN_V4,
     3,
     64,
     16,
     4,
     2,
     4,
     {2, 2, 4},
     {2, 2, 1},
     {4, 4, 4, 1}},
    {"v4-1536",
     NULL,
     NULL,
     0,
     0,
     "v4-1536",
     "8x8x12",
     MESH_GEN_V4,
     3,
     768,
     192,
     4,
     2,
     4,
     {4, 4, 12},
     {2, 2, 1},
     {8, 8, 12, 1}},
    /* v5p */
    {"v5p-8",
     NULL,
     NULL,
     0,
     0,
     "v5p-8",
     "2x2x1",
     MESH_GEN_V5P,
     3,
     4,
     1,
     4,
     2,
     4,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 1}},
    {"v5p-32",
     NULL,
     NULL,
     0,
     0,
     "v5p-32",
     "2x2x4",
     MESH_GEN_V5P,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {"v5p-32",
     "tpu-v5p-slice",
     "2x2x4",
     0,
     0,
     "v5p-32",
     "2x2x4",
     MESH_GEN_V5P,
     3,
     16,
     4,
     4,
     2,
     4,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 1}},
    {NULL,
     "tpu-v5p-slice",
     "2x2x2",
     0,
     0,
     "v5p-16",
     "2x2x2",
     MESH_GEN_V5P,
     3,
     8,
     2,
     4,
     2,
     4,
     {1, 1, 2},
     {2, 2, 1},
     {2, 2, 2, 1}},
    {NULL,
     "tpu-v5p-slice",
     "2x4x4",
     0,
     0,
     "v5p-64",
     "2x4x4",
     MESH_GEN_V5P,
     3,
     32,
     8,
     4,
     2,
     4,
     {1, 2, 4},
     {2, 2, 1},
     {2, 4, 4, 1}},
    {NULL,
     "tpu-v5p-slice",
     "4x4x4",
     0,
     0,
     "v5p-128",
     "4x4x4",
     MESH_GEN_V5P,
     3,
     64,
     16,
     4,
     2,
     4,
     {2, 2, 4},
     {2, 2, 1},
     {4, 4, 4, 1}},
    /* v5e (v5litepod): suffix = chips; VMs of 1, 4 or 8 chips */
    {"v5litepod-1",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-1",
     "1x1",
     MESH_GEN_V5E,
     2,
     1,
     1,
     1,
     1,
     1,
     {1, 1, 1},
     {1, 1, 1},
     {1, 1, 1, 1}},
    {"v5litepod-4",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-4",
     "2x2",
     MESH_GEN_V5E,
     2,
     4,
     1,
     4,
     1,
     4,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 1}},
    {"v5litepod-4",
     "tpu-v5-lite-podslice",
     "2x2",
     4,
     1,
     "v5litepod-4",
     "2x2",
     MESH_GEN_V5E,
     2,
     4,
     1,
     4,
     1,
     4,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 1}},
    /* v5litepod-8 "2x4": xpk's 4-chip VMs by default (2 hosts) ... */
    {"v5litepod-8",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-8",
     "2x4",
     MESH_GEN_V5E,
     2,
     8,
     2,
     4,
     1,
     4,
     {1, 2, 1},
     {2, 2, 1},
     {2, 4, 1, 1}},
    {"v5litepod-8",
     "tpu-v5-lite-podslice",
     "2x4",
     4,
     0,
     "v5litepod-8",
     "2x4",
     MESH_GEN_V5E,
     2,
     8,
     2,
     4,
     1,
     4,
     {1, 2, 1},
     {2, 2, 1},
     {2, 4, 1, 1}},
    /* ... one 8-chip VM (ct5lp-hightpu-8t) when chips per host or hosts say so */
    {"v5litepod-8",
     NULL,
     "2x4",
     8,
     0,
     "v5litepod-8",
     "2x4",
     MESH_GEN_V5E,
     2,
     8,
     1,
     8,
     1,
     8,
     {1, 1, 1},
     {2, 4, 1},
     {2, 4, 1, 1}},
    {"v5litepod-8",
     NULL,
     NULL,
     0,
     1,
     "v5litepod-8",
     "2x4",
     MESH_GEN_V5E,
     2,
     8,
     1,
     8,
     1,
     8,
     {1, 1, 1},
     {2, 4, 1},
     {2, 4, 1, 1}},
    {"v5litepod-16",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-16",
     "4x4",
     MESH_GEN_V5E,
     2,
     16,
     4,
     4,
     1,
     4,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 1}},
    {NULL,
     "tpu-v5-lite-podslice",
     "4x4",
     0,
     0,
     "v5litepod-16",
     "4x4",
     MESH_GEN_V5E,
     2,
     16,
     4,
     4,
     1,
     4,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 1}},
    {"v5litepod-16",
     NULL,
     "4x4x1",
     0,
     4,
     "v5litepod-16",
     "4x4",
     MESH_GEN_V5E,
     2,
     16,
     4,
     4,
     1,
     4,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 1}},
    {"v5litepod-32",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-32",
     "4x8",
     MESH_GEN_V5E,
     2,
     32,
     8,
     4,
     1,
     4,
     {2, 4, 1},
     {2, 2, 1},
     {4, 8, 1, 1}},
    {"v5litepod-256",
     NULL,
     NULL,
     0,
     0,
     "v5litepod-256",
     "16x16",
     MESH_GEN_V5E,
     2,
     256,
     64,
     4,
     1,
     4,
     {8, 8, 1},
     {2, 2, 1},
     {16, 16, 1, 1}},
    /* v6e */
    {"v6e-8",
     NULL,
     NULL,
     0,
     0,
     "v6e-8",
     "2x4",
     MESH_GEN_V6E,
     2,
     8,
     2,
     4,
     1,
     4,
     {1, 2, 1},
     {2, 2, 1},
     {2, 4, 1, 1}},
    {"v6e-8",
     "tpu-v6e-slice",
     "2x4",
     8,
     0,
     "v6e-8",
     "2x4",
     MESH_GEN_V6E,
     2,
     8,
     1,
     8,
     1,
     8,
     {1, 1, 1},
     {2, 4, 1},
     {2, 4, 1, 1}},
    {"v6e-16",
     NULL,
     NULL,
     0,
     0,
     "v6e-16",
     "4x4",
     MESH_GEN_V6E,
     2,
     16,
     4,
     4,
     1,
     4,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 1}},
    {NULL,
     "tpu-v6e-slice",
     "4x4",
     4,
     4,
     "v6e-16",
     "4x4",
     MESH_GEN_V6E,
     2,
     16,
     4,
     4,
     1,
     4,
     {2, 2, 1},
     {2, 2, 1},
     {4, 4, 1, 1}},
    {"v6e-32",
     NULL,
     "4x8",
     8,
     0,
     "v6e-32",
     "4x8",
     MESH_GEN_V6E,
     2,
     32,
     4,
     8,
     1,
     8,
     {2, 2, 1},
     {2, 4, 1},
     {4, 8, 1, 1}},
    /* tpu7x: N = cores, 2 devices per chip (no megacore) */
    {"tpu7x-8",
     NULL,
     NULL,
     0,
     0,
     "tpu7x-8",
     "2x2x1",
     MESH_GEN_TPU7X,
     3,
     4,
     1,
     4,
     2,
     8,
     {1, 1, 1},
     {2, 2, 1},
     {2, 2, 1, 2}},
    {"tpu7x-2",
     NULL,
     NULL,
     0,
     0,
     "tpu7x-2",
     "1x1x1",
     MESH_GEN_TPU7X,
     3,
     1,
     1,
     1,
     2,
     2,
     {1, 1, 1},
     {1, 1, 1},
     {1, 1, 1, 2}},
    {NULL,
     "tpu7x",
     "2x2x4",
     0,
     0,
     "tpu7x-32",
     "2x2x4",
     MESH_GEN_TPU7X,
     3,
     16,
     4,
     4,
     2,
     8,
     {1, 1, 4},
     {2, 2, 1},
     {2, 2, 4, 2}},
    {"", "", "2x2x1", 0, 0, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, {0}, {0}, {0}}, /* no generation */
};

static void check_derived(size_t i, const struct derive_row *r, const struct mesh_slice *s)
{
    if (strcmp(s->accelerator_type, r->want_type) != 0 || strcmp(s->topology, r->want_topo) != 0) {
        fail_msg("row %zu: got %s %s, want %s %s", i, s->accelerator_type, s->topology,
                 r->want_type, r->want_topo);
    }
    assert_int_equal(s->gen, r->gen);
    assert_int_equal(s->ndims, r->ndims);
    assert_int_equal(s->chips, r->chips);
    assert_int_equal(s->hosts, r->hosts);
    assert_int_equal(s->chips_per_host, r->cph);
    assert_int_equal(s->cores_per_chip, r->cores);
    assert_int_equal(s->devices_per_host, r->dph);
    assert_memory_equal(s->host_bounds, r->hb, sizeof(r->hb));
    assert_memory_equal(s->chips_per_host_bounds, r->cphb, sizeof(r->cphb));
    assert_memory_equal(s->mesh_shape, r->mesh, sizeof(r->mesh));
    /* internal consistency every consumer relies on */
    assert_int_equal(s->dims[0] * s->dims[1] * s->dims[2], s->chips);
    assert_int_equal(s->hosts * s->chips_per_host, s->chips);
    for (int a = 0; a < 3; a++) {
        assert_int_equal(s->dims[a], s->mesh_shape[a]);
        assert_int_equal(s->host_bounds[a] * s->chips_per_host_bounds[a], s->dims[a]);
    }
    assert_int_equal(s->devices_per_host, s->chips_per_host * s->mesh_shape[3]);
}

/* The slice's device coordinates (topo.h) cover the mesh exactly once and
 * each task's devices fill one chips_per_host_bounds block aligned to the
 * block grid. Checked for every derived row, not just test_topo's list. */
static void check_coords(const struct mesh_slice *s)
{
    int32_t *c = NULL;
    size_t n = 0;
    struct mesh_err err;
    if (mesh_topo_coords(s, &c, &n, &err) != 0) {
        fail_msg("%s: %s", s->accelerator_type, err.msg);
    }
    const int *ms = s->mesh_shape, *bb = s->chips_per_host_bounds;
    size_t mesh = (size_t)ms[0] * ms[1] * ms[2] * ms[3];
    assert_int_equal(n, mesh * 4);
    unsigned char *seen = mesh_calloc(mesh, 1);
    for (int t = 0; t < s->hosts; t++) {
        const int32_t *d0 = &c[(size_t)t * s->devices_per_host * 4];
        for (int a = 0; a < 3; a++) {
            assert_int_equal(d0[a] % bb[a], 0); /* block-aligned origin */
        }
        for (int d = 0; d < s->devices_per_host; d++) {
            const int32_t *v = &d0[(size_t)d * 4];
            for (int a = 0; a < 3; a++) {
                assert_true(v[a] >= d0[a] && v[a] < d0[a] + bb[a]);
            }
            assert_true(v[3] >= 0 && v[3] < ms[3]);
            size_t pos = (((size_t)v[2] * ms[1] + v[1]) * ms[0] + v[0]) * ms[3] + v[3];
            assert_int_equal(seen[pos], 0);
            seen[pos] = 1;
        }
    }
    mesh_free(seen);
    mesh_free(c);
}

static void test_derive_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ELEMS(derive_rows); i++) {
        const struct derive_row *r = &derive_rows[i];
        struct mesh_slice_spec in = {r->type, r->label, r->topo, r->cph_in, r->hosts_in};
        struct mesh_slice s;
        struct mesh_err err;
        mesh_err_clear(&err);
        memset(&s, 0x5a, sizeof(s));
        int rc = mesh_slice_derive(&in, &s, &err);
        if (r->want_type == NULL) {
            assert_int_equal(rc, -MESH_E_CONFIG);
            continue;
        }
        if (rc != 0) {
            fail_msg("row %zu (%s %s %s cph %d hosts %d): %s", i, r->type ? r->type : "-",
                     r->label ? r->label : "-", r->topo ? r->topo : "-", r->cph_in, r->hosts_in,
                     err.msg);
        }
        check_derived(i, r, &s);
        check_coords(&s);
        /* The derived slice is a fixed point: feeding its own type,
         * topology and chips per host back in gives the same slice. */
        struct mesh_slice_spec again = {s.accelerator_type, NULL, s.topology, s.chips_per_host,
                                        s.hosts};
        struct mesh_slice s2;
        assert_int_equal(mesh_slice_derive(&again, &s2, &err), 0);
        assert_memory_equal(&s, &s2, sizeof(s));
    }
}

/* Every TPU topology of xpk's machine table (AI-Hypercomputer/xpk
 * src/xpk/core/system_characteristics.py), with
 * its 4-chip VMs: the type alone must derive exactly that topology (the
 * default-shape rule reproduces the table), and label + topology must give
 * back the type and chips / 4 hosts. */
static void test_derive_xpk_table(void **state)
{
    (void)state;
    static const struct {
        const char *prefix;
        int cores;
        const char *topologies; /* space separated */
    } gens[] = {
        {"v4", 2, "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x8x8 8x8x8 8x8x12 8x8x16 8x16x16 "},
        {"v5p", 2,
         "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 "
         "4x8x20 4x4x44 8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 "
         "4x12x28 4x8x44 4x4x92 8x12x16 4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 "
         "4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 12x12x16 4x4x148 4x8x76 4x12x52 8x16x20 "
         "4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 12x16x16 4x28x28 8x20x20 "
         "4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 12x16x20 "
         "4x4x244 4x8x124 12x12x28 16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24 "
         "4x8x148 12x20x20 8x8x76 4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 "
         "4x8x172 4x12x116 8x16x44 12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 "
         "12x24x24 16x20x28 "},
        {"tpu7x", 2,
         "12x12x12 12x12x16 12x12x20 12x12x24 12x12x28 12x12x36 12x16x16 12x16x20 12x16x24 "
         "12x16x28 12x20x20 12x20x24 12x24x24 16x16x16 16x16x20 16x16x24 16x16x32 16x20x28 "
         "16x24x24 2x2x1 2x2x2 2x2x4 2x4x4 4x12x116 4x12x12 4x12x124 4x12x20 4x12x28 4x12x44 "
         "4x12x52 4x12x68 4x12x76 4x12x92 4x20x20 4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 "
         "4x28x28 4x28x44 4x28x52 4x4x116 4x4x12 4x4x124 4x4x148 4x4x164 4x4x172 4x4x188 "
         "4x4x20 4x4x212 4x4x236 4x4x244 4x4x28 4x4x4 4x4x44 4x4x52 4x4x68 4x4x76 4x4x8 "
         "4x4x92 4x8x116 4x8x12 4x8x124 4x8x148 4x8x164 4x8x172 4x8x188 4x8x20 4x8x28 4x8x44 "
         "4x8x52 4x8x68 4x8x76 4x8x8 4x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52 "
         "8x16x16 8x16x20 8x16x28 8x16x44 8x20x20 8x20x28 8x8x12 8x8x16 8x8x20 8x8x28 8x8x44 "
         "8x8x52 8x8x68 8x8x76 8x8x8 8x8x92 "},
        {"v5litepod", 1, "2x4 4x4 4x8 8x8 8x16 16x16 "},
        {"v6e", 1, "2x2 2x4 4x4 4x8 8x8 8x16 16x16 "},
    };
    int checked = 0;
    for (size_t g = 0; g < N_ELEMS(gens); g++) {
        const char *p = gens[g].topologies;
        while (*p != '\0') {
            const char *sp = strchr(p, ' ');
            size_t len = sp != NULL ? (size_t)(sp - p) : strlen(p);
            char topo[32], type[48];
            assert_true(len < sizeof(topo));
            memcpy(topo, p, len);
            topo[len] = '\0';
            p += len + (sp != NULL ? 1 : 0);
            int d[3], nd;
            assert_int_equal(mesh_accel_parse_topology(topo, d, &nd, NULL), 0);
            int chips = d[0] * d[1] * d[2];
            snprintf(type, sizeof(type), "%s-%d", gens[g].prefix, chips * gens[g].cores);
            struct mesh_slice_spec by_type = {type, NULL, NULL, 0, 0};
            struct mesh_slice s;
            struct mesh_err err;
            mesh_err_clear(&err);
            if (mesh_slice_derive(&by_type, &s, &err) != 0) {
                fail_msg("%s (xpk %s): %s", type, topo, err.msg);
            }
            if (strcmp(s.topology, topo) != 0) {
                fail_msg("%s: derived %s, xpk says %s", type, s.topology, topo);
            }
            assert_int_equal(s.hosts, chips / 4);
            struct mesh_slice_spec by_topo = {NULL, mesh_accel_gen_gke_label(s.gen), topo, 0, 0};
            struct mesh_slice s2;
            assert_int_equal(mesh_slice_derive(&by_topo, &s2, NULL), 0);
            assert_memory_equal(&s, &s2, sizeof(s));
            check_coords(&s);
            checked++;
        }
    }
    assert_int_equal(checked, 218);
}

/* Invalid or inconsistent combinations: the code and what the message must
 * say (the problem and what would be consistent). */
static void test_derive_invalid(void **state)
{
    (void)state;
    static const struct {
        const char *type, *label, *topo;
        int cph, hosts;
        int rc;
        const char *says[3];
    } rows[] = {
        {"v4-32",
         NULL,
         "2x2x2",
         0,
         0,
         -MESH_E_CONFIG,
         {"v4-32 has 16 chips but topology 2x2x2 has 8", "v4-32 uses 2x2x4 (or 2x4x2, 4x2x2)",
          "topology 2x2x2 is v4-16"}},
        {"v5litepod-16",
         NULL,
         "2x4",
         0,
         0,
         -MESH_E_CONFIG,
         {"v5litepod-16 has 16 chips but topology 2x4 has 8", "uses 4x4", "is v5litepod-8"}},
        {"v4-32",
         NULL,
         NULL,
         3,
         0,
         -MESH_E_CONFIG,
         {"3 chips per host is not possible", "TPU v4 VMs have 4 chips", "ct4p-hightpu-4t"}},
        {"v5litepod-16",
         NULL,
         NULL,
         3,
         0,
         -MESH_E_CONFIG,
         {"3 chips per host", "1, 4 or 8 chips", NULL}},
        {"tpu7x-32", NULL, NULL, 8, 0, -MESH_E_CONFIG, {"8 chips per host", "1 or 4 chips", NULL}},
        {"v3-32", NULL, NULL, 8, 0, -MESH_E_CONFIG, {"8 chips per host", "4 chips", NULL}},
        {"v4-24",
         NULL,
         "2x3x2",
         0,
         0,
         -MESH_E_CONFIG,
         {"topology 2x3x2 does not divide into 4-chip hosts of 2x2x1 chips", "uses 2x2x3", NULL}},
        {"v5litepod-16",
         NULL,
         "1x16",
         0,
         0,
         -MESH_E_CONFIG,
         {"topology 1x16 does not divide", "uses 4x4", NULL}},
        {"v5litepod-16",
         NULL,
         "8x2",
         8,
         0,
         -MESH_E_CONFIG,
         {"does not divide into 8-chip hosts of 2x4x1", NULL, NULL}},
        {"v4-32",
         "tpu-v5p-slice",
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"label 'tpu-v5p-slice' is TPU v5p", "'v4-32' is TPU v4", "label tpu-v4-podslice"}},
        {"v2-8", "tpu-v3-slice", NULL, 0, 0, -MESH_E_CONFIG, {"is TPU v3", "is TPU v2", NULL}},
        {NULL, NULL, NULL, 0, 0, -MESH_E_CONFIG, {"cannot tell the TPU generation", NULL, NULL}},
        {NULL,
         NULL,
         "2x2x4",
         4,
         4,
         -MESH_E_CONFIG,
         {"cannot tell the TPU generation", "TPU_ACCELERATOR_TYPE", NULL}},
        {NULL,
         "tpu-v4-podslice",
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"cannot tell the size", "TPU_TOPOLOGY", NULL}},
        {"v4-7", NULL, NULL, 0, 0, -MESH_E_CONFIG, {"must be even", "v4-6 or v4-8", NULL}},
        {"tpu7x-3", NULL, NULL, 0, 0, -MESH_E_CONFIG, {"must be even", NULL, NULL}},
        {"v4-4", NULL, NULL, 0, 0, -MESH_E_CONFIG, {"do not fill whole 4-chip VMs", NULL, NULL}},
        {"v3-16",
         NULL,
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"v3-16 is not a TPU v3 slice size", "v3-8, v3-32, v3-64", NULL}},
        {"v2-64", NULL, NULL, 0, 0, -MESH_E_CONFIG, {"v2-64 is not", "v2-32, v2-128", NULL}},
        {"v3-64",
         NULL,
         "8x4",
         0,
         0,
         -MESH_E_CONFIG,
         {"v3-64 uses topology 4x8", "host bounds 2,4,1", "not 8x4"}},
        {NULL, "tpu-v3-slice", "6x6", 0, 0, -MESH_E_CONFIG, {"v3-72 is not", NULL, NULL}},
        {"v5litepod-2",
         NULL,
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"v5litepod-2 has 2 chips", "1 chip or a multiple of 4 chips", NULL}},
        {"v5litepod-16",
         NULL,
         NULL,
         0,
         3,
         -MESH_E_CONFIG,
         {"cannot run on 3 hosts", "runs on 2 or 4 hosts", NULL}},
        {"v6e-16",
         NULL,
         NULL,
         0,
         16,
         -MESH_E_CONFIG,
         {"1-chip VMs (ct6e-standard-1t) only run 1x1 slices", "runs on 2 or 4 hosts", NULL}},
        {"tpu7x-8", NULL, NULL, 1, 0, -MESH_E_CONFIG, {"only run 1x1 slices", "runs on 1 hosts"}},
        {"v5litepod-8", NULL, NULL, 0, 8, -MESH_E_CONFIG, {"1-chip VMs", "runs on 1 or 2 hosts"}},
        {"v4-32", NULL, NULL, 0, 2, -MESH_E_CONFIG, {"cannot run on 2 hosts", "runs on 4 hosts"}},
        {"v5litepod-16",
         NULL,
         "4x4",
         4,
         2,
         -MESH_E_CONFIG,
         {"4 chips per host has 4 hosts, not 2", NULL, NULL}},
        {"v5litepod-4",
         NULL,
         NULL,
         8,
         0,
         -MESH_E_CONFIG,
         {"do not fill whole 8-chip VMs", NULL, NULL}},
        {"v4-96",
         NULL,
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"no single default topology", "one of 2x4x6, 2x2x12", "set TPU_TOPOLOGY"}},
        {"v4-192",
         NULL,
         NULL,
         0,
         0,
         -MESH_E_CONFIG,
         {"no single default topology", "one of 4x4x6, 2x6x8", NULL}},
        {"v4-32", NULL, "2x2", 0, 0, -MESH_E_CONFIG, {"3-D (AxBxC)", "did you mean 2x2x1?", NULL}},
        {"v5litepod-16", NULL, "2x2x4", 0, 0, -MESH_E_CONFIG, {"2-D (AxB", "'2x2x4' is 3-D", NULL}},
        {"v4-32", NULL, NULL, -1, 0, -MESH_E_INVAL, {"must not be negative", NULL, NULL}},
        {"v4-32", NULL, NULL, 0, -4, -MESH_E_INVAL, {"must not be negative", NULL, NULL}},
        {"v5litepod-131072", NULL, NULL, 0, 0, -MESH_E_RANGE, {"more than 65536", NULL, NULL}},
        {NULL,
         "tpu-v6e-slice",
         NULL,
         8,
         16384,
         -MESH_E_RANGE,
         {"16384 hosts of 8 chips", NULL, NULL}},
        {"v4-32 ", NULL, NULL, 0, 0, -MESH_E_INVAL, {"accelerator type", NULL, NULL}},
        {NULL, "tpu-v4-lite-podslice", "2x2x1", 0, 0, -MESH_E_INVAL, {"unknown GKE", NULL, NULL}},
        {"v4-32", NULL, "2x2x4\n", 0, 0, -MESH_E_INVAL, {"topology '2x2x4?'", NULL, NULL}},
    };
    for (size_t i = 0; i < N_ELEMS(rows); i++) {
        struct mesh_slice_spec in = {rows[i].type, rows[i].label, rows[i].topo, rows[i].cph,
                                     rows[i].hosts};
        struct mesh_slice s, untouched;
        memset(&s, 0x3c, sizeof(s));
        memcpy(&untouched, &s, sizeof(s));
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_slice_derive(&in, &s, &err);
        if (rc != rows[i].rc) {
            fail_msg("row %zu: rc %d, want %d (%s)", i, rc, rows[i].rc, err.msg);
        }
        assert_memory_equal(&s, &untouched, sizeof(s));
        assert_int_equal(err.code, -rc);
        assert_null(strchr(err.msg, '\n'));
        for (int k = 0; k < 3; k++) {
            if (rows[i].says[k] != NULL && strstr(err.msg, rows[i].says[k]) == NULL) {
                fail_msg("row %zu: message \"%s\" does not say \"%s\"", i, err.msg,
                         rows[i].says[k]);
            }
        }
    }
    assert_int_equal(mesh_slice_derive(NULL, NULL, NULL), -MESH_E_INVAL);
}

/* Every v4/v5p/v5e/v6e/tpu7x size up to 2048 chips: derivation either
 * succeeds with a self-consistent slice or fails with a message that asks
 * for something; it never returns garbage. */
static void test_derive_sweep(void **state)
{
    (void)state;
    static const char *const prefixes[] = {"v4", "v5p", "v5litepod", "v6e", "tpu7x"};
    int ok = 0, asked = 0;
    for (size_t p = 0; p < N_ELEMS(prefixes); p++) {
        for (int n = 1; n <= 2048; n++) {
            char type[32];
            snprintf(type, sizeof(type), "%s-%d", prefixes[p], n);
            struct mesh_slice_spec in = {type, NULL, NULL, 0, 0};
            struct mesh_slice s;
            struct mesh_err err;
            mesh_err_clear(&err);
            int rc = mesh_slice_derive(&in, &s, &err);
            if (rc != 0) {
                assert_int_equal(rc, -MESH_E_CONFIG);
                assert_true(strlen(err.msg) > 20);
                asked++;
                continue;
            }
            ok++;
            assert_string_equal(s.accelerator_type, type);
            assert_int_equal(s.dims[0] * s.dims[1] * s.dims[2], s.chips);
            assert_int_equal(s.hosts * s.chips_per_host, s.chips);
            for (int a = 0; a < 3; a++) {
                assert_int_equal(s.host_bounds[a] * s.chips_per_host_bounds[a], s.dims[a]);
            }
            if (s.chips <= 256) {
                check_coords(&s);
            }
        }
    }
    assert_true(ok > 100);
    assert_true(asked > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_type),     cmocka_unit_test(test_gke_label),
        cmocka_unit_test(test_parse_topology), cmocka_unit_test(test_names),
        cmocka_unit_test(test_derive_table),   cmocka_unit_test(test_derive_invalid),
        cmocka_unit_test(test_derive_sweep),   cmocka_unit_test(test_derive_xpk_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
