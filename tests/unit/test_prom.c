/*
 * test_prom.c - core/prom: the exact text of each kind of line (HELP and
 * TYPE with escapes, labelled and plain samples, numbers that read back,
 * a histogram), and a cut at the buffer's limit instead of an overrun.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/prom.h"

static void test_lines(void **state)
{
    (void)state;
    struct mesh_buf b;
    mesh_buf_init(&b, 4096);
    mesh_prom_family(&b, "m_total", "counter", "a \\ b\nc \"d\"");
    mesh_prom_u64(&b, "m_total", "why", "x\"y\\z\nw", 18446744073709551615ull);
    mesh_prom_u64(&b, "m_total", NULL, NULL, 0);
    mesh_prom_gauge(&b, "g", "G.", 0.1);
    mesh_prom_f64(&b, "g", "k", "v", -1);
    mesh_prom_f64(&b, "g", NULL, NULL, 1764323520.123);
    mesh_prom_f64(&b, "g", NULL, NULL, NAN);
    mesh_prom_f64(&b, "g", NULL, NULL, -INFINITY);
    mesh_prom_counter(&b, "c_total", "C.", 7);
    assert_string_equal(b.data, "# HELP m_total a \\\\ b\\nc \"d\"\n"
                                "# TYPE m_total counter\n"
                                "m_total{why=\"x\\\"y\\\\z\\nw\"} 18446744073709551615\n"
                                "m_total 0\n"
                                "# HELP g G.\n# TYPE g gauge\ng 0.1\n"
                                "g{k=\"v\"} -1\n"
                                "g 1764323520.123\n"
                                "g NaN\n"
                                "g -Inf\n"
                                "# HELP c_total C.\n# TYPE c_total counter\nc_total 7\n");
    mesh_buf_cleanup(&b);
}

static void test_numbers_read_back(void **state)
{
    (void)state;
    static const double vals[] = {0.0005, 1.0 / 3.0, 1e-300, 123456789.987654321, 2.5e17};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        struct mesh_buf b;
        mesh_buf_init(&b, 256);
        mesh_prom_f64(&b, "x", NULL, NULL, vals[i]);
        assert_true(strncmp(b.data, "x ", 2) == 0);
        assert_true(strtod(b.data + 2, NULL) == vals[i]);
        mesh_buf_cleanup(&b);
    }
}

static void test_histogram(void **state)
{
    (void)state;
    struct mesh_buf b;
    mesh_buf_init(&b, 4096);
    static const double le[] = {0.0005, 0.5, 5};
    static const uint64_t cum[] = {1, 3, 4};
    mesh_prom_histogram(&b, "h_seconds", "H.", le, cum, 3, 2.25, 5);
    assert_string_equal(b.data, "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
                                "h_seconds_bucket{le=\"0.0005\"} 1\n"
                                "h_seconds_bucket{le=\"0.5\"} 3\n"
                                "h_seconds_bucket{le=\"5\"} 4\n"
                                "h_seconds_bucket{le=\"+Inf\"} 5\n"
                                "h_seconds_sum 2.25\n"
                                "h_seconds_count 5\n");
    mesh_buf_cleanup(&b);
}

static void test_limit(void **state)
{
    (void)state;
    struct mesh_buf b;
    mesh_buf_init(&b, 40);
    for (int i = 0; i < 10; i++) {
        mesh_prom_counter(&b, "a_rather_long_metric_name_total", "Help text.", 1);
    }
    assert_true(b.len <= 40);
    mesh_buf_cleanup(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_numbers_read_back),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
