/*
 * test_cliopts.c - the shared command-line engine: precedence (flag, layer,
 * TPUMESH_ variable, default; an empty variable is unset), "--flag=value"
 * and "--flag value", bare booleans and every boolean spelling, choices,
 * errors naming where a value came from, --help / --version (and what
 * mesh_cliopts_parse_main prints for them), a layer (tpumesh-init's
 * annotations) and its errors, peeking before the parse, and the strings
 * released on failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/logfmt.h"
#include "io/cliopts.h"

struct opts {
    char *dir;
    int port;
    bool verbose;
    int mode;
    enum mesh_log_level level;
};

#define OFF(f) offsetof(struct opts, f)

static const struct mesh_cliopt defs[] = {
    {"out-dir", MESH_CLIOPT_STR, OFF(dir), 0, 0, "/var/run/x", "DIR", "dir"},
    {"port", MESH_CLIOPT_INT, OFF(port), 1, 65535, "10000", "PORT", "port"},
    {"verbose", MESH_CLIOPT_BOOL, OFF(verbose), 0, 0, "false", NULL, "more"},
    {"mode", MESH_CLIOPT_CHOICE, OFF(mode), 0, 0, "auto", "auto|dns|ip", "mode"},
    {"log-level", MESH_CLIOPT_LEVEL, OFF(level), 0, 0, "info", "debug|info|warn|error", "lvl"},
};
#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static void test_table(void **state)
{
    (void)state;
    static const struct {
        const char *args[4];
        const char *env_port, *env_dir;
        int rc;
        const char *dir;
        int port, mode;
        bool verbose, port_explicit;
        const char *msg;
    } rows[] = {
        {{NULL}, NULL, NULL, 0, "/var/run/x", 10000, 0, false, false, NULL},
        {{"--port", "9"}, "7", NULL, 0, "/var/run/x", 9, 0, false, true, NULL},
        {{"--port=9"}, NULL, NULL, 0, "/var/run/x", 9, 0, false, true, NULL},
        {{NULL}, "7", "/d", 0, "/d", 7, 0, false, true, NULL},
        {{NULL}, "", NULL, 0, "/var/run/x", 10000, 0, false, false, NULL},
        {{"--verbose", "--mode", "ip"}, NULL, NULL, 0, "/var/run/x", 10000, 2, true, false, NULL},
        {{"--verbose=no", "--mode=dns"}, NULL, NULL, 0, "/var/run/x", 10000, 1, false, false, NULL},
        {{"--verbose=on"}, NULL, NULL, 0, "/var/run/x", 10000, 0, true, false, NULL},
        {{"--verbose=off"}, NULL, NULL, 0, "/var/run/x", 10000, 0, false, false, NULL},
        {{"--verbose=1"}, NULL, NULL, 0, "/var/run/x", 10000, 0, true, false, NULL},
        {{"--out-dir="},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "--out-dir needs a non-empty value (DIR)"},
        {{NULL},
         "0",
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "TPUMESH_PORT: '0' is not an integer in 1..65535"},
        {{"--port", "x"},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "--port: 'x' is not an integer"},
        {{"--mode", "fqdn"},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "--mode: 'fqdn' is not auto|dns|ip"},
        {{"--verbose=maybe"},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "--verbose: 'maybe' is not a boolean (true|false, 1|0, yes|no, on|off)"},
        {{"--port"}, NULL, NULL, -MESH_E_CONFIG, NULL, 0, 0, false, false, "--port needs a value"},
        {{"--nope"},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "unknown option '--nope'"},
        {{"stray"}, NULL, NULL, -MESH_E_CONFIG, NULL, 0, 0, false, false, "unexpected argument"},
        {{"--out-dir", "/e", "--log-level", "loud"},
         NULL,
         NULL,
         -MESH_E_CONFIG,
         NULL,
         0,
         0,
         false,
         false,
         "--log-level: 'loud'"},
        {{"--port", "x", "--help"}, NULL, NULL, MESH_CLIOPT_HELP, NULL, 0, 0, false, false, NULL},
        {{"--version"}, NULL, NULL, MESH_CLIOPT_VERSION, NULL, 0, 0, false, false, NULL},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char *argv[6] = {"prog"};
        int argc = 1;
        for (int k = 0; k < 4 && rows[r].args[k] != NULL; k++) {
            argv[argc++] = (char *)rows[r].args[k];
        }
        if (rows[r].env_port != NULL) {
            setenv("TPUMESH_PORT", rows[r].env_port, 1);
        } else {
            unsetenv("TPUMESH_PORT");
        }
        if (rows[r].env_dir != NULL) {
            setenv("TPUMESH_OUT_DIR", rows[r].env_dir, 1);
        } else {
            unsetenv("TPUMESH_OUT_DIR");
        }
        struct opts o;
        memset(&o, 0, sizeof(o));
        enum mesh_cliopt_source src[NDEFS];
        struct mesh_err err = {0};
        print_message("row %zu\n", r);
        int rc = mesh_cliopts_parse(defs, NDEFS, argc, argv, &o, NULL, src, &err);
        assert_int_equal(rc, rows[r].rc);
        if (rc == 0) {
            assert_string_equal(o.dir, rows[r].dir);
            assert_int_equal(o.port, rows[r].port);
            assert_int_equal(o.mode, rows[r].mode);
            assert_int_equal(o.verbose, rows[r].verbose);
            assert_int_equal(src[1] != MESH_CLIOPT_FROM_DEFAULT, rows[r].port_explicit);
            assert_int_equal(o.level, MESH_LOG_INFO);
        }
        if (rows[r].msg != NULL) {
            assert_non_null(strstr(err.msg, rows[r].msg));
        }
        if (rc < 0) {
            assert_null(o.dir); /* released on failure */
        }
        mesh_cliopts_cleanup(defs, NDEFS, &o);
        assert_null(o.dir);
    }
    unsetenv("TPUMESH_PORT");
    unsetenv("TPUMESH_OUT_DIR");
}

static int versions_printed;

static void print_version(void)
{
    versions_printed++;
    printf("prog 1.2.3\n");
}

/* mesh_cliopts_parse_main's result for args, and what it wrote to stdout
 * (into out, cap bytes). */
static int parse_main(const char *const *args, struct opts *o, char *out, size_t cap,
                      struct mesh_err *err)
{
    char *argv[8] = {"prog"};
    int argc = 1;
    for (; args[argc - 1] != NULL; argc++) {
        argv[argc] = (char *)args[argc - 1];
    }
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDOUT_FILENO) >= 0);
    memset(o, 0, sizeof(*o));
    const struct mesh_cliopt_usage u = {"usage: prog\n", "Exit codes: none\n", print_version};
    int rc = mesh_cliopts_parse_main(defs, NDEFS, argc, argv, o, NULL, NULL, &u, err);
    fflush(stdout);
    assert_true(dup2(saved, STDOUT_FILENO) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return rc;
}

static void test_parse_main(void **state)
{
    (void)state;
    unsetenv("TPUMESH_PORT");
    struct opts o;
    struct mesh_err err = {0};
    char out[4096];

    static const char *const help[] = {"--port", "9", "--help", NULL};
    assert_int_equal(parse_main(help, &o, out, sizeof(out), &err), 1);
    assert_non_null(strstr(out, "usage: prog\n  --out-dir DIR"));
    assert_non_null(strstr(out, "TPUMESH_PORT  default 10000"));
    assert_non_null(strstr(out, "--verbose [BOOL]"));
    assert_non_null(strstr(out, "--help, --version\nBOOL is true|false"));
    assert_non_null(strstr(out, "\nExit codes: none\n"));
    assert_null(o.dir); /* nothing converted */
    assert_int_equal(versions_printed, 0);

    static const char *const version[] = {"--version", NULL};
    assert_int_equal(parse_main(version, &o, out, sizeof(out), &err), 1);
    assert_string_equal(out, "prog 1.2.3\n");
    assert_int_equal(versions_printed, 1);

    static const char *const ok[] = {"--port=9", NULL};
    assert_int_equal(parse_main(ok, &o, out, sizeof(out), &err), 0);
    assert_string_equal(out, "");
    assert_int_equal(o.port, 9);
    mesh_cliopts_cleanup(defs, NDEFS, &o);

    static const char *const bad[] = {"--port=0", NULL};
    assert_int_equal(parse_main(bad, &o, out, sizeof(out), &err), -MESH_E_CONFIG);
    assert_string_equal(out, "");
    assert_non_null(strstr(err.msg, "--port"));
    assert_null(o.dir); /* released on failure */
}

/* A layer between flag and variable: "port" and "mode" only. */
struct layer_state {
    int opened;
    int fail_open;
};

static int layer_open(void *arg, struct mesh_err *err)
{
    struct layer_state *l = arg;
    l->opened++;
    return l->fail_open ? mesh_err_set(err, MESH_E_CONFIG, 0, "annotations file: broken") : 0;
}

static const char *layer_get(void *arg, const char *flag, char *where, size_t cap)
{
    (void)arg;
    snprintf(where, cap, "annotation x/%s", flag);
    if (strcmp(flag, "port") == 0) {
        return "0";
    }
    return strcmp(flag, "mode") == 0 ? "dns" : NULL;
}

static void test_layer(void **state)
{
    (void)state;
    setenv("TPUMESH_MODE", "ip", 1);
    struct layer_state ls = {0, 0};
    const struct mesh_cliopt_layer layer = {layer_open, layer_get, &ls};
    enum mesh_cliopt_source src[NDEFS];
    struct mesh_err err = {0};
    struct opts o;

    /* The layer wins over the variable ... and names itself in errors. */
    char *a1[] = {"prog"};
    memset(&o, 0, sizeof(o));
    assert_int_equal(mesh_cliopts_parse(defs, NDEFS, 1, a1, &o, &layer, src, &err), -MESH_E_CONFIG);
    assert_non_null(strstr(err.msg, "annotation x/port: '0' is not an integer in 1..65535"));
    assert_int_equal(ls.opened, 1);

    /* ... and the flag over the layer. */
    char *a2[] = {"prog", "--port", "7"};
    memset(&o, 0, sizeof(o));
    assert_int_equal(mesh_cliopts_parse(defs, NDEFS, 3, a2, &o, &layer, src, &err), 0);
    assert_int_equal(o.port, 7);
    assert_int_equal(src[1], MESH_CLIOPT_FROM_FLAG);
    assert_int_equal(o.mode, 1);
    assert_int_equal(src[3], MESH_CLIOPT_FROM_LAYER);
    assert_int_equal(src[0], MESH_CLIOPT_FROM_DEFAULT);
    mesh_cliopts_cleanup(defs, NDEFS, &o);

    /* --help never opens the layer; a failing open stops the parse. */
    char *a3[] = {"prog", "--help"};
    assert_int_equal(mesh_cliopts_parse(defs, NDEFS, 2, a3, &o, &layer, src, &err),
                     MESH_CLIOPT_HELP);
    assert_int_equal(ls.opened, 2);
    ls.fail_open = 1;
    memset(&o, 0, sizeof(o));
    assert_int_equal(mesh_cliopts_parse(defs, NDEFS, 3, a2, &o, &layer, src, &err), -MESH_E_CONFIG);
    assert_string_equal(err.msg, "annotations file: broken");
    assert_null(o.dir);
    unsetenv("TPUMESH_MODE");
}

static void test_peek(void **state)
{
    (void)state;
    char *argv[] = {"prog", "--port", "9", "--out-dir=/a", "--port=8", "--verbose"};
    setenv("TPUMESH_MODE", "ip", 1);
    assert_string_equal(mesh_cliopts_peek(defs, NDEFS, 6, argv, "port"), "8");
    assert_string_equal(mesh_cliopts_peek(defs, NDEFS, 6, argv, "out-dir"), "/a");
    assert_string_equal(mesh_cliopts_peek(defs, NDEFS, 6, argv, "verbose"), "true");
    assert_string_equal(mesh_cliopts_peek(defs, NDEFS, 6, argv, "mode"), "ip");
    assert_null(mesh_cliopts_peek(defs, NDEFS, 6, argv, "log-level")); /* default: not asked */
    assert_null(mesh_cliopts_peek(defs, NDEFS, 6, argv, "nope"));
    unsetenv("TPUMESH_MODE");
}

static void test_env_name(void **state)
{
    (void)state;
    char out[64];
    mesh_cliopts_env_name("relay-fallback", out, sizeof(out));
    assert_string_equal(out, "TPUMESH_RELAY_FALLBACK");
    mesh_cliopts_env_name("relay-fallback", out, 12);
    assert_string_equal(out, "TPUMESH_REL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),    cmocka_unit_test(test_parse_main),
        cmocka_unit_test(test_layer),    cmocka_unit_test(test_peek),
        cmocka_unit_test(test_env_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
