/*
 * publish.c - the atomic publisher of the shared volume (see publish.h).
 *
 * Scope: files only. Writes a set in two phases (all temp files written and
 * fsynced, then all renames, then one directory fsync) so that the errors a
 * full or read-only volume produces happen before anything is replaced.
 * Reads back topology.json's generation, tolerating garbage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "io/log.h"
#include "publish.h"

#define GEN_FILE "topology.json"

/* One clear message per errno a volume gives us, naming the directory and
 * what to do about it. */
static int pub_error(struct mesh_err *err, const char *dir, const char *name, int e)
{
    switch (e) {
    case ENOENT:
        return mesh_err_set(err, MESH_E_PUBLISH, e,
                            "output directory '%.120s' does not exist: create it or mount the "
                            "shared volume there (--out-dir)",
                            dir);
    case ENOTDIR:
        return mesh_err_set(err, MESH_E_PUBLISH, e,
                            "'%.120s' is not a directory: point --out-dir at the shared volume",
                            dir);
    case EROFS:
        return mesh_err_set(err, MESH_E_PUBLISH, e,
                            "cannot write %s: '%.120s' is read-only; mount the shared volume "
                            "read-write in this container",
                            name, dir);
    case ENOSPC:
    case EDQUOT:
        return mesh_err_set(err, MESH_E_PUBLISH, e,
                            "cannot write %s: no space left in '%.120s'; free space or raise the "
                            "volume's sizeLimit",
                            name, dir);
    case EACCES:
    case EPERM:
        return mesh_err_set(err, MESH_E_PUBLISH, e,
                            "cannot write %s in '%.120s': permission denied; run as a user that "
                            "may write the volume (fsGroup / runAsUser)",
                            name, dir);
    default:
        return mesh_err_set(err, MESH_E_PUBLISH, e, "cannot write %s in '%.120s'", name, dir);
    }
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* O_NONBLOCK: the shared volume is writable by other containers, and
 * opening a FIFO planted under one of our names would otherwise block until
 * a writer appears (regular files ignore the flag). */
static int read_small(const char *path, size_t max, char **out_data, size_t *out_len)
{
    mesh_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        return -errno;
    }
    if (!S_ISREG(st.st_mode)) {
        return -EINVAL;
    }
    if ((uint64_t)st.st_size > max) {
        return -EFBIG;
    }
    size_t cap = (size_t)st.st_size + 1;
    mesh_autofree char *buf = mesh_malloc(cap);
    size_t len = 0;
    for (;;) {
        if (len + 1 >= cap) {
            /* The file grew under us: one byte more than max is enough to
             * tell it is too big. */
            if (cap > max + 1) {
                return -EFBIG;
            }
            cap = cap * 2 > max + 2 ? max + 2 : cap * 2;
            buf = mesh_realloc(buf, cap);
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            break;
        }
        len += (size_t)n;
    }
    if (len > max) {
        return -EFBIG;
    }
    buf[len] = '\0';
    *out_data = MESH_STEAL(buf);
    *out_len = len;
    return 0;
}

int mesh_publish_read_file(const char *dir, const char *name, char **out_data, size_t *out_len)
{
    mesh_autofree char *path = mesh_asprintf("%s/%s", dir, name);
    return read_small(path, MESH_PUBLISH_MAX_FILE, out_data, out_len);
}

bool mesh_publish_is_current(const char *dir, const char *name, const void *data, size_t len)
{
    /* Streamed: a size that differs answers at once, equal sizes are compared
     * chunk by chunk and stop at the first difference, and nothing the size
     * of the file is allocated (topology.json is ~700 KB at 4,096 workers and
     * its generation, near the top, differs on every publish). */
    mesh_autofree char *path = mesh_asprintf("%s/%s", dir, name);
    mesh_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != (uint64_t)len) {
        return false;
    }
    const unsigned char *want = data;
    unsigned char chunk[16384];
    size_t off = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return false;
        }
        if (n == 0) {
            return off == len;
        }
        if ((size_t)n > len - off || memcmp(chunk, want + off, (size_t)n) != 0) {
            return false; /* longer than its size said, or different */
        }
        off += (size_t)n;
    }
}

static bool name_ok(const char *name)
{
    return name != NULL && name[0] != '\0' && name[0] != '.' && strchr(name, '/') == NULL &&
           strlen(name) < 128;
}

struct pending {
    char *tmp;   /* owned temp path, or NULL */
    char *final; /* owned final path */
    bool spare;  /* tmp is the file's spare (swap_one): exchanged, never unlinked */
};

static void pending_drop(struct pending *p, size_t n, bool unlink_tmp)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].tmp != NULL && unlink_tmp && !p[i].spare) {
            (void)unlink(p[i].tmp);
        }
        mesh_free(p[i].tmp);
        mesh_free(p[i].final);
    }
    mesh_free(p);
}

/* Phase 1 for one file: write it to a temp file next to its final name. */
static int stage_one(const char *dir, const struct mesh_publish_file *f, bool sync,
                     struct pending *p, struct mesh_err *err)
{
    /* mkostemp wants a template ending in six 'X' characters. */
    char *tmp = mesh_asprintf("%s/.%s.------", dir, f->name);
    memset(tmp + strlen(tmp) - 6, 'X', 6);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        mesh_free(tmp);
        return pub_error(err, dir, f->name, e);
    }
    p->tmp = tmp;
    p->final = mesh_asprintf("%s/%s", dir, f->name);
    int rc = 0;
    /* mkostemp creates 0600; readers in other containers may run as other
     * users, so the published files are world-readable. */
    if (fchmod(fd, 0644) < 0) {
        rc = -errno;
    }
    if (rc == 0) {
        rc = write_all(fd, f->data, f->len);
    }
    if (rc == 0 && sync && fsync(fd) < 0) {
        rc = -errno;
    }
    if (close(fd) < 0 && rc == 0 && errno != EINTR) {
        rc = -errno;
    }
    if (rc < 0) {
        return pub_error(err, dir, f->name, -rc);
    }
    return 0;
}

/* The spare of a file (mesh_publish_files_swap): an earlier version of it,
 * kept under ".<name>.spare" so that the next publish writes into pages the
 * file system already holds instead of allocating new ones and freeing the
 * old (on tmpfs that allocation is most of a write). It is reused only when
 * it is a regular file with one link (not planted as a hard link to another
 * file) that nobody has open: a write lease (F_SETLEASE) is granted only
 * when no other descriptor or mapping of the file exists, so a reader that
 * opened the file while it was published, and still reads or maps it, keeps
 * its bytes. The lease stays held on the returned fd until the caller has
 * written the new version and closes it (close drops it): a process whose
 * open(2) of this inode was still under way (its path walk began while the
 * inode was the published file) is held by the kernel until then and reads
 * the new version whole, never a half-written one. Breaking the lease sends
 * the holder SIGIO, which the caller ignores; nothing waits on it, since the
 * fd is closed right after the write. Returns an O_RDWR fd and the spare's
 * current size, or -1 when the spare cannot be used (it is then unlinked,
 * best effort, and the caller writes a new file). */
static int open_spare(const char *path, off_t *out_size)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        return -1;
    }
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
              fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
    if (ok) {
        *out_size = st.st_size;
        return fd;
    }
    (void)close(fd);
    (void)unlink(path);
    return -1;
}

/* Phase 1 for one file, writing into its spare (or a new spare): the file
 * is then swapped into place by mesh_publish_files_swap's phase 2. Falls
 * back to stage_one when no spare can be had (e.g. another file holds the
 * name). */
static int swap_one(const char *dir, const struct mesh_publish_file *f, bool sync,
                    struct pending *p, struct mesh_err *err)
{
    char *spare = mesh_asprintf("%s/.%s.spare", dir, f->name);
    off_t old = 0;
    int fd = open_spare(spare, &old);
    if (fd < 0) {
        fd = open(spare, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            mesh_free(spare);
            return stage_one(dir, f, sync, p, err);
        }
        /* As stage_one: readers may run as other users. */
        if (fchmod(fd, 0644) < 0) {
            int e = errno;
            (void)close(fd);
            (void)unlink(spare);
            mesh_free(spare);
            return pub_error(err, dir, f->name, e);
        }
    }
    p->tmp = spare;
    p->final = mesh_asprintf("%s/%s", dir, f->name);
    p->spare = true;
    int rc = 0;
    const char *d = f->data;
    size_t done = 0;
    while (rc == 0 && done < f->len) {
        ssize_t n = pwrite(fd, d + done, f->len - done, (off_t)done);
        if (n < 0) {
            rc = errno == EINTR ? 0 : -errno;
            continue;
        }
        done += (size_t)n;
    }
    if (rc == 0 && old > (off_t)f->len && ftruncate(fd, (off_t)f->len) < 0) {
        rc = -errno;
    }
    if (rc == 0 && sync && fsync(fd) < 0) {
        rc = -errno;
    }
    if (close(fd) < 0 && rc == 0 && errno != EINTR) {
        rc = -errno;
    }
    if (rc < 0) {
        /* A half-written spare must not be taken for a version later:
         * the spare is only ever the source of a swap, never read, but
         * drop it so the next publish starts clean. */
        (void)unlink(spare);
        return pub_error(err, dir, f->name, -rc);
    }
    return 0;
}

static int fsync_dir(const char *dir, struct mesh_err *err)
{
    mesh_autoclose int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return pub_error(err, dir, "the directory", errno);
    }
    if (fsync(dfd) < 0 && errno != EINVAL) {
        /* EINVAL: the file system does not support fsync on directories. */
        return pub_error(err, dir, "the directory", errno);
    }
    return 0;
}

/* Is entry a temp file of ours for one of the set's names: ".<name>."
 * followed by exactly six characters (mkostemp's template)? */
static bool is_our_temp(const char *entry, const struct mesh_publish_file *files, size_t n)
{
    if (entry[0] != '.') {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(files[i].name);
        if (strncmp(entry + 1, files[i].name, nl) == 0 && entry[1 + nl] == '.' &&
            strlen(entry + 2 + nl) == 6) {
            return true;
        }
    }
    return false;
}

/* Remove temp files a killed publisher left behind (a crash between
 * mkostemp and rename). Only files older than MESH_PUBLISH_STALE_S are
 * touched, so a publisher running at the same moment is never disturbed.
 * Best effort: failures are ignored. */
static void remove_stale_temps(const char *dir, const struct mesh_publish_file *files, size_t n)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_our_temp(e->d_name, files, n)) {
            continue;
        }
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > MESH_PUBLISH_STALE_S && unlinkat(dirfd(d), e->d_name, 0) == 0) {
            mesh_info("pub", "removed %s/%s left behind by an interrupted publish", dir, e->d_name);
        }
    }
    closedir(d);
}

/* tmpfs keeps nothing across a reboot: fsync there is a no-op (the kernel's
 * noop_fsync), and skipping the calls saves a system call per file and
 * three for the directory on every publish. */
static bool on_tmpfs(const char *dir)
{
    struct statfs fs;
    return statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* Phase 2 for one file: 0, or -1 with errno set. A spare is exchanged with
 * the final name, so the previous version becomes the spare; with no final
 * file yet, or on a file system without RENAME_EXCHANGE, a plain rename. */
static int put_in_place(const struct pending *p)
{
    if (p->spare) {
        int r = renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->final, RENAME_EXCHANGE);
        if (r == 0 || (errno != ENOENT && errno != EINVAL)) {
            return r;
        }
    }
    return rename(p->tmp, p->final);
}

static int publish_set(const char *dir, const struct mesh_publish_file *files, size_t n, bool swap,
                       bool scan_stale, size_t *out_written, struct mesh_err *err)
{
    if (dir == NULL || dir[0] == '\0') {
        return mesh_err_set(err, MESH_E_INVAL, 0, "no output directory given (--out-dir)");
    }
    struct stat st;
    if (stat(dir, &st) < 0) {
        return pub_error(err, dir, "files", errno);
    }
    if (!S_ISDIR(st.st_mode)) {
        return pub_error(err, dir, "files", ENOTDIR);
    }
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(files[i].name)) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "bad file name '%.64s' to publish",
                                files[i].name != NULL ? files[i].name : "(null)");
        }
        if (files[i].len > MESH_PUBLISH_MAX_FILE) {
            return mesh_err_set(err, MESH_E_INVAL, 0, "%s is %zu bytes, above the limit of %zu",
                                files[i].name, files[i].len, MESH_PUBLISH_MAX_FILE);
        }
    }

    if (scan_stale) {
        remove_stale_temps(dir, files, n);
    }
    bool sync = !swap || !on_tmpfs(dir);
    struct pending *p = mesh_calloc(n > 0 ? n : 1, sizeof(*p));
    size_t staged = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct mesh_publish_file *f = &files[i];
        if (f->data == NULL ||
            (!f->differs && mesh_publish_is_current(dir, f->name, f->data, f->len))) {
            continue;
        }
        rc = swap ? swap_one(dir, f, sync, &p[staged], err)
                  : stage_one(dir, f, true, &p[staged], err);
        staged++;
    }
    if (rc < 0) {
        pending_drop(p, staged, true);
        return rc;
    }
    /* Phase 2: renames. Each one is atomic; they happen in array order. */
    for (size_t i = 0; i < staged; i++) {
        if (put_in_place(&p[i]) < 0) {
            rc = pub_error(err, dir, strrchr(p[i].final, '/') + 1, errno);
            /* The renamed ones have tmp == NULL; the rest are unlinked. */
            pending_drop(p, staged, true);
            return rc;
        }
        mesh_free(p[i].tmp);
        p[i].tmp = NULL;
    }
    pending_drop(p, staged, false);
    if (staged > 0 && sync) {
        rc = fsync_dir(dir, err);
        if (rc < 0) {
            return rc;
        }
    }
    if (out_written != NULL) {
        *out_written = staged;
    }
    return 0;
}

int mesh_publish_files(const char *dir, const struct mesh_publish_file *files, size_t n,
                       size_t *out_written, struct mesh_err *err)
{
    return publish_set(dir, files, n, false, true, out_written, err);
}

int mesh_publish_files_swap(const char *dir, const struct mesh_publish_file *files, size_t n,
                            bool scan_stale, size_t *out_written, struct mesh_err *err)
{
    return publish_set(dir, files, n, true, scan_stale, out_written, err);
}

int mesh_publish_read_generation(const char *dir, uint64_t *out_generation, bool *out_found,
                                 struct mesh_err *err)
{
    (void)err;
    *out_generation = 0;
    if (out_found != NULL) {
        *out_found = false;
    }
    mesh_autofree char *path = mesh_asprintf("%s/%s", dir, GEN_FILE);
    mesh_autofree char *data = NULL;
    size_t len = 0;
    int rc = read_small(path, MESH_PUBLISH_MAX_FILE, &data, &len);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc < 0) {
        mesh_warn("pub", "cannot read the previous %s (%s): starting at generation 1", path,
                  rc == -EFBIG    ? "too large"
                  : rc == -EINVAL ? "not a regular file"
                                  : strerror(-rc));
        return 0;
    }
    struct mesh_err perr;
    mesh_err_clear(&perr);
    mesh_autocjson cJSON *j = mesh_json_parse(data, len, MESH_PUBLISH_MAX_FILE, &perr);
    long long gen = 0;
    if (j == NULL ||
        mesh_json_int(j, "generation", 0, 9007199254740991LL, false, &gen, &perr) < 0) {
        mesh_warn("pub", "ignoring the previous %s (%s): starting at generation 1", path, perr.msg);
        return 0;
    }
    *out_generation = (uint64_t)gen;
    if (out_found != NULL) {
        *out_found = true;
    }
    return 0;
}
