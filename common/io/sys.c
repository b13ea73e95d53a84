/*
 * sys.c - monotonic clock, signal-proof sleep, EINTR-retried read/write and
 * the small-file reader (see sys.h).
 */
#include "io/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"

int64_t mesh_sys_now_ms(void)
{
    return mesh_sys_now_us() / 1000;
}

int64_t mesh_sys_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mesh_sys_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void mesh_sys_sleep_ms(int64_t ms)
{
    if (ms <= 0) {
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

ssize_t mesh_sys_read(int fd, void *buf, size_t n)
{
    ssize_t r;
    do {
        r = read(fd, buf, n);
    } while (r < 0 && errno == EINTR);
    return r;
}

ssize_t mesh_sys_write(int fd, const void *buf, size_t n)
{
    ssize_t r;
    do {
        r = write(fd, buf, n);
    } while (r < 0 && errno == EINTR);
    return r;
}

int mesh_sys_read_file(const char *path, size_t max, struct mesh_buf *out, struct mesh_err *err)
{
    /* O_NONBLOCK: opening a FIFO for reading then returns at once instead of
     * waiting for a writer; fstat below refuses it. */
    mesh_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "open '%s'", path);
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "stat '%s'", path);
    }
    /* A character device is allowed so that /dev/null reads as empty. */
    if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) {
        return mesh_err_set(err, MESH_E_IO, EINVAL, "'%s' is not a regular file", path);
    }
    char chunk[4096];
    for (;;) {
        ssize_t n = mesh_sys_read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            int e = errno;
            mesh_buf_reset(out);
            return mesh_err_set(err, MESH_E_IO, e, "read '%s'", path);
        }
        if (n == 0) {
            /* Files read here include bearer tokens: no copy left on the stack. */
            explicit_bzero(chunk, sizeof(chunk));
            return 0;
        }
        if (out->len + (size_t)n > max || mesh_buf_append(out, chunk, (size_t)n, NULL) < 0) {
            explicit_bzero(chunk, sizeof(chunk));
            mesh_buf_reset(out);
            return mesh_err_set(err, MESH_E_TOOBIG, 0, "'%s' is larger than %zu bytes", path, max);
        }
    }
}
