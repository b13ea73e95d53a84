/*
 * test_sys.c - the small-file reader (regular files, missing files, FIFOs
 * refused without blocking, the size cap), EINTR-safe sleep and the
 * monotonic clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "io/sys.h"

struct dir {
    char path[64];
};

static void make_dir(struct dir *d)
{
    snprintf(d->path, sizeof(d->path), "/tmp/test_sys.XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static void put(const struct dir *d, const char *name, const char *text, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", d->path, name);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_read_file(void **state)
{
    (void)state;
    struct dir d;
    make_dir(&d);
    char p[128], fifo[128], link[128], missing[128];
    put(&d, "token", "abc\n", p, sizeof(p));
    snprintf(fifo, sizeof(fifo), "%s/fifo", d.path);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(link, sizeof(link), "%s/link", d.path);
    assert_int_equal(symlink("token", link), 0);
    snprintf(missing, sizeof(missing), "%s/missing", d.path);

    static const struct {
        const char *which;
        size_t max;
        int rc, sys_errno;
        const char *want;
    } rows[] = {
        {"file", 16, 0, 0, "abc\n"},          {"file", 4, 0, 0, "abc\n"},
        {"file", 3, -MESH_E_TOOBIG, 0, ""},   {"link", 16, 0, 0, "abc\n"},
        {"fifo", 16, -MESH_E_IO, EINVAL, ""}, {"missing", 16, -MESH_E_IO, ENOENT, ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const char *path = strcmp(rows[i].which, "file") == 0   ? p
                           : strcmp(rows[i].which, "link") == 0 ? link
                           : strcmp(rows[i].which, "fifo") == 0 ? fifo
                                                                : missing;
        struct mesh_buf b;
        mesh_buf_init(&b, 1024);
        struct mesh_err err = {0};
        print_message("row %zu: %s max %zu\n", i, rows[i].which, rows[i].max);
        assert_int_equal(mesh_sys_read_file(path, rows[i].max, &b, &err), rows[i].rc);
        assert_string_equal(mesh_buf_str(&b), rows[i].want);
        if (rows[i].rc < 0) {
            assert_int_equal(err.sys_errno, rows[i].sys_errno);
            assert_non_null(strstr(err.msg, path));
        }
        mesh_buf_cleanup(&b);
    }
    unlink(p);
    unlink(fifo);
    unlink(link);
    rmdir(d.path);
}

static void test_clock_and_sleep(void **state)
{
    (void)state;
    int64_t a = mesh_sys_now_ms();
    int64_t au = mesh_sys_now_us();
    mesh_sys_sleep_ms(20);
    mesh_sys_sleep_ms(0);
    mesh_sys_sleep_ms(-5);
    int64_t b = mesh_sys_now_ms();
    assert_true(b - a >= 20);
    assert_true(mesh_sys_now_us() - au >= 20000);
}

static void test_read_write(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    assert_int_equal(mesh_sys_write(fds[1], "xy", 2), 2);
    char buf[4];
    assert_int_equal(mesh_sys_read(fds[0], buf, sizeof(buf)), 2);
    assert_memory_equal(buf, "xy", 2);
    close(fds[1]);
    assert_int_equal(mesh_sys_read(fds[0], buf, sizeof(buf)), 0);
    close(fds[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_clock_and_sleep),
        cmocka_unit_test(test_read_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
