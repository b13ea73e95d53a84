/*
 * test_ports.c - the port rules (ports.h): every reserved port and its
 * neighbours, collisions between the DTensor, probe and gRPC ports, port 0
 * exempt, and the ":PORT" suffix of a listen address.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/ports.h"

static void test_reserved(void **state)
{
    (void)state;
    static const struct {
        int port;
        bool reserved;
    } rows[] = {
        {8469, false}, {8470, true},  {8473, true},  {8476, true},   {8477, false}, {8079, false},
        {8080, true},  {8081, false}, {9469, false}, {9470, true},   {9471, false}, {9476, true},
        {9477, false}, {9431, false}, {9432, false}, {10000, false}, {1, false},    {65535, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("port %d\n", rows[i].port);
        assert_int_equal(mesh_ports_is_reserved(rows[i].port), rows[i].reserved);
    }
}

static void test_check(void **state)
{
    (void)state;
    static const struct {
        int dtensor, probe, grpc;
        const char *msg; /* substring of the error, NULL = accepted */
    } rows[] = {
        {10000, 9431, 9432, NULL},
        {10000, 0, 0, NULL}, /* any free port: exempt */
        {8476, 9431, 9432,
         "DTensor port 8476 is reserved: TPU software uses ports 8470-8476, "
         "8482, 8080, 9470 and 9476"},
        {10000, 8482, 9432, "probe port 8482 is reserved"},
        {10000, 9431, 8481, NULL},
        {10000, 9431, 8483, NULL},
        {10000, 8080, 9432, "probe port 8080 is reserved"},
        {10000, 9431, 9470, "gRPC port 9470 is reserved"},
        {9431, 9431, 9432,
         "DTensor port and probe port are both 9431: the DTensor, probe and "
         "gRPC ports must be distinct"},
        {10000, 9432, 9432, "probe port and gRPC port are both 9432"},
        {10000, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct mesh_port_use u[3] = {
            {"DTensor port", rows[i].dtensor},
            {"probe port", rows[i].probe},
            {"gRPC port", rows[i].grpc},
        };
        struct mesh_err err;
        mesh_err_clear(&err);
        int rc = mesh_ports_check(u, 3, &err);
        print_message("%d %d %d -> %d %s\n", rows[i].dtensor, rows[i].probe, rows[i].grpc, rc,
                      err.msg);
        if (rows[i].msg == NULL) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -MESH_E_CONFIG);
            assert_non_null(strstr(err.msg, rows[i].msg));
        }
    }
}

static void test_of_addr(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int port; /* -1 = refused */
    } rows[] = {
        {":9431", 9431}, {"127.0.0.1:0", 0}, {"[::1]:65535", 65535},
        {"host:80", 80}, {"9431", -1},       {":", -1},
        {":65536", -1},  {":12a", -1},       {"127.0.0.1:", -1},
        {":123456", -1}, {"", -1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int p = -1;
        int rc = mesh_ports_of_addr(rows[i].in, strlen(rows[i].in), &p, NULL);
        print_message("'%s' -> %d (%d)\n", rows[i].in, p, rc);
        if (rows[i].port < 0) {
            assert_int_equal(rc, -MESH_E_PARSE);
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(p, rows[i].port);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserved),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_of_addr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
