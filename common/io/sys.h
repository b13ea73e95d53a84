/*
 * sys.h - the small system helpers every I/O module needs once: the
 * monotonic clock, a sleep that survives signals, reads and writes retried
 * on EINTR, and reading a small regular file whole.
 */
#ifndef MESH_SYS_H
#define MESH_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/err.h"

/* CLOCK_MONOTONIC in milliseconds / microseconds (never jumps with the wall
 * clock; only differences are meaningful). */
int64_t mesh_sys_now_ms(void);
int64_t mesh_sys_now_us(void);
/* CLOCK_REALTIME in milliseconds since the epoch: for timestamps that leave
 * the process (log lines, published documents), never for measuring time. */
int64_t mesh_sys_wall_ms(void);

/* Sleep ms milliseconds (nothing for ms <= 0); a signal does not cut it short. */
void mesh_sys_sleep_ms(int64_t ms);

/* read(2) / write(2) retried while they fail with EINTR; otherwise exactly
 * what the system call returns (errno set on -1). */
ssize_t mesh_sys_read(int fd, void *buf, size_t n);
ssize_t mesh_sys_write(int fd, const void *buf, size_t n);

/* Read the regular file at path (at most max bytes) into out, which the
 * caller has initialised (mesh_buf_init) and keeps owning; on failure out is
 * left empty. Symlinks are followed (Kubernetes mounts secrets through them),
 * but the file itself must be a regular file (or a character device such as
 * /dev/null): a FIFO, socket or directory is refused without blocking. Errors: -MESH_E_IO with
 * sys_errno (ENOENT for a missing file; the message names the path), -MESH_E_TOOBIG above max
 * bytes. */
int mesh_sys_read_file(const char *path, size_t max, struct mesh_buf *out, struct mesh_err *err);

#endif
