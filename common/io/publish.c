/*
 * publish.c - the atomic publisher of the shared volume (see publish.h for
 * the layout and its guarantees).
 *
 * Scope: one directory, always through its descriptor: openat/linkat/
 * renameat/unlinkat on plain names, O_NOFOLLOW on every open, O_NONBLOCK on
 * every open of something that may not be a regular file, and "..data"
 * resolved by readlinkat and checked to name a version directory before it
 * is used. A publish plans the new version first (which files to write,
 * which to hard-link), so a set equal to the current version costs no
 * write at all; then writes the version directory, swaps "..data", repairs
 * the per-file symlinks and removes versions older than the one it
 * replaced. Reads go through "..data" the same way.
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
#include "io/sys.h"
#include "publish.h"

#define GEN_FILE "topology.json"
#define DATA_TMP "..data_tmp"
#define LINK_TMP "..link_tmp"
#define NAME_MAX_LEN 128
/* A version directory's name: '0' stands for any digit. */
static const char version_shape[] = "..0000_00_00_00_00_00.000000000";
#define VERSION_LEN (sizeof(version_shape) - 1)

struct mesh_publish_dir {
    char *dir; /* as given, for messages */
    int dfd;
    bool sync;          /* false on tmpfs: fsync is a no-op there */
    int64_t swapped_us; /* mesh_sys_now_us() when "..data" last changed, 0 = never */
    void (*on_swap)(void *ctx, enum mesh_publish_swap at);
    void *on_swap_ctx;
};

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
        ssize_t n = mesh_sys_write(fd, p, len);
        if (n < 0) {
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static bool name_ok(const char *name)
{
    return name != NULL && name[0] != '\0' && name[0] != '.' && strchr(name, '/') == NULL &&
           strlen(name) < NAME_MAX_LEN;
}

static bool is_version_name(const char *s)
{
    size_t i = 0;
    for (; i < VERSION_LEN && s[i] != '\0'; i++) {
        char want = version_shape[i];
        if (want == '0' ? (s[i] < '0' || s[i] > '9') : s[i] != want) {
            return false;
        }
    }
    return i == VERSION_LEN && s[i] == '\0';
}

/* The version "..data" names into out (VERSION_LEN + 1 bytes): 0; -ENOENT
 * when there is no "..data"; -EISDIR when "..data" is a directory; -EINVAL
 * when it is anything else (a file, or a symlink to something that is not
 * a version name). */
static int read_data_link(int dfd, char *out)
{
    char buf[VERSION_LEN + 2];
    ssize_t n = readlinkat(dfd, MESH_PUBLISH_DATA_LINK, buf, sizeof(buf));
    if (n < 0) {
        int e = errno;
        struct stat st;
        if (e == EINVAL && fstatat(dfd, MESH_PUBLISH_DATA_LINK, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(st.st_mode)) {
            return -EISDIR;
        }
        return e == ENOENT ? -ENOENT : -EINVAL;
    }
    if ((size_t)n != VERSION_LEN) {
        return -EINVAL;
    }
    buf[n] = '\0';
    if (!is_version_name(buf)) {
        return -EINVAL;
    }
    memcpy(out, buf, VERSION_LEN + 1);
    return 0;
}

/* A version directory by name, never through a symlink. */
static int open_version(int dfd, const char *name)
{
    return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

/* Remove the entry name of dfd: a directory with what is in it (one level:
 * a version holds plain files; a subdirectory that is not empty is left,
 * and so is the directory), anything else by unlinking the entry itself,
 * never what it points to. 0 or -errno. */
static int remove_entry(int dfd, const char *name)
{
    int fd = open_version(dfd, name);
    if (fd < 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
    }
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (unlinkat(dirfd(d), e->d_name, 0) < 0 && errno == EISDIR) {
            (void)unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        }
    }
    closedir(d);
    return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -errno;
}

/* A stream of dfd's entries on a descriptor of its own, or NULL. */
static DIR *open_dir(int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL && fd >= 0) {
        close(fd);
    }
    return d;
}

/* Remove every version directory other than keep1 and keep2 (either may be
 * "" or NULL) and the temporary symlinks a killed publisher may have left.
 * Best effort: a failure is logged once per entry and the scan goes on. */
static void remove_others(struct mesh_publish_dir *p, const char *keep1, const char *keep2)
{
    DIR *d = open_dir(p->dfd);
    if (d == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        bool tmp = strcmp(n, DATA_TMP) == 0 || strcmp(n, LINK_TMP) == 0;
        if (!tmp && (!is_version_name(n) || (keep1 != NULL && strcmp(n, keep1) == 0) ||
                     (keep2 != NULL && strcmp(n, keep2) == 0))) {
            continue;
        }
        int rc = remove_entry(p->dfd, n);
        if (rc < 0) {
            mesh_warn("pub", "cannot remove %s/%s: %s", p->dir, n, strerror(-rc));
        }
    }
    closedir(d);
}

/* tmpfs keeps nothing across a reboot: fsync there is a no-op (the kernel's
 * noop_fsync), and skipping the calls saves a system call per file and
 * two for the directories on every publish. */
static bool on_tmpfs(int dfd)
{
    struct statfs fs;
    return fstatfs(dfd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

struct mesh_publish_dir *mesh_publish_dir_open(const char *dir, struct mesh_err *err)
{
    if (dir == NULL || dir[0] == '\0') {
        mesh_err_set(err, MESH_E_INVAL, 0, "no output directory given (--out-dir)");
        return NULL;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        struct stat st;
        if (e == ENOTDIR || (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))) {
            e = ENOTDIR;
        }
        pub_error(err, dir, "files", e);
        return NULL;
    }
    struct mesh_publish_dir *p = mesh_calloc(1, sizeof(*p));
    p->dir = mesh_strdup(dir);
    p->dfd = dfd;
    p->sync = !on_tmpfs(dfd);
    char cur[VERSION_LEN + 1];
    bool have = read_data_link(dfd, cur) == 0;
    remove_others(p, have ? cur : NULL, NULL);
    return p;
}

void mesh_publish_dir_on_swap(struct mesh_publish_dir *p,
                              void (*fn)(void *ctx, enum mesh_publish_swap at), void *ctx)
{
    p->on_swap = fn;
    p->on_swap_ctx = ctx;
}

int64_t mesh_publish_dir_swapped_us(const struct mesh_publish_dir *p)
{
    return p != NULL ? p->swapped_us : 0;
}

void mesh_publish_dir_close(struct mesh_publish_dir *p)
{
    if (p == NULL) {
        return;
    }
    close(p->dfd);
    mesh_free(p->dir);
    mesh_free(p);
}

/* Does the open file fd hold exactly data/len? Streamed: a size that
 * differs answers at once, equal sizes are compared chunk by chunk and stop
 * at the first difference, and nothing the size of the file is allocated
 * (topology.json is ~700 KB at 4,096 workers and its generation, near the
 * top, differs on every publish). *st receives fd's status. */
static bool fd_holds(int fd, const void *data, size_t len, struct stat *st)
{
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || (uint64_t)st->st_size != (uint64_t)len) {
        return false;
    }
    const unsigned char *want = data;
    unsigned char chunk[16384];
    size_t off = 0;
    for (;;) {
        ssize_t n = mesh_sys_read(fd, chunk, sizeof(chunk));
        if (n < 0) {
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

/* Open name of the directory fd for reading: never a symlink's target,
 * never blocking on a FIFO (regular files ignore O_NONBLOCK). */
static int open_file(int fd, const char *name)
{
    return openat(fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

enum how { SKIP, WRITE, LINK };

/* One file of the version being built. */
struct plan {
    char name[NAME_MAX_LEN];
    const void *data; /* WRITE, or LINK of a file compared with data; else NULL */
    size_t len;
    enum how how;
    dev_t dev; /* LINK: the inode planned to be linked */
    ino_t ino;
};

/* Plan a file that keeps the source's copy: LINK when src has a regular
 * file of that name, else SKIP. */
static void plan_keep(int src, struct plan *pl)
{
    struct stat st;
    if (src >= 0 && fstatat(src, pl->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
        pl->how = LINK;
        pl->dev = st.st_dev;
        pl->ino = st.st_ino;
    } else {
        pl->how = SKIP;
    }
}

static bool planned(const struct plan *pl, size_t k, const char *name)
{
    for (size_t i = 0; i < k; i++) {
        if (strcmp(pl[i].name, name) == 0) {
            return true;
        }
    }
    return false;
}

/* The set's files, then (from a current version) the files it carries
 * over. src: the current version, or the out-dir itself while it holds an
 * older tpumesh's plain files, or -1. Returns the number planned. */
static size_t make_plan(int src, bool carry_all, const struct mesh_publish_file *files, size_t n,
                        struct plan *pl)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++, k++) {
        struct plan *x = &pl[k];
        memset(x, 0, sizeof(*x));
        snprintf(x->name, sizeof(x->name), "%s", files[i].name);
        if (files[i].data == NULL) {
            plan_keep(src, x);
            continue;
        }
        x->data = files[i].data;
        x->len = files[i].len;
        x->how = WRITE;
        if (src >= 0 && !files[i].differs) {
            mesh_autoclose int fd = open_file(src, x->name);
            struct stat st;
            if (fd >= 0 && fd_holds(fd, x->data, x->len, &st)) {
                x->how = LINK;
                x->dev = st.st_dev;
                x->ino = st.st_ino;
            }
        }
    }
    if (!carry_all || src < 0) {
        return k;
    }
    DIR *d = open_dir(src);
    if (d == NULL) {
        return k;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL && k < MESH_PUBLISH_MAX_FILES) {
        if (!name_ok(e->d_name) || planned(pl, k, e->d_name)) {
            continue;
        }
        struct plan *x = &pl[k];
        memset(x, 0, sizeof(*x));
        memcpy(x->name, e->d_name, strlen(e->d_name) + 1); /* name_ok: it fits */
        plan_keep(src, x);
        if (x->how == LINK) {
            k++;
        }
    }
    closedir(d);
    return k;
}

/* Write one file into the version directory vfd: 0 or -errno. */
static int write_file(int vfd, const struct plan *pl, bool sync)
{
    int fd = openat(vfd, pl->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return -errno;
    }
    int rc = 0;
    /* The umask may have taken bits away; readers in other containers may
     * run as other users, so the files are world-readable. */
    if (fchmod(fd, 0644) < 0) {
        rc = -errno;
    }
    if (rc == 0) {
        rc = write_all(fd, pl->data, pl->len);
    }
    if (rc == 0 && sync && fsync(fd) < 0) {
        rc = -errno;
    }
    if (close(fd) < 0 && rc == 0 && errno != EINTR) {
        rc = -errno;
    }
    return rc;
}

/* Hard-link the planned inode from src into vfd. The link is checked to be
 * that inode (a regular file, never a symlink someone swapped in); a file
 * the plan has the bytes of is written instead when it is not. */
static int link_file(int src, int vfd, const struct plan *pl, bool sync)
{
    int rc = linkat(src, pl->name, vfd, pl->name, 0) == 0 ? 0 : -errno;
    if (rc == 0) {
        struct stat st;
        if (fstatat(vfd, pl->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_dev == pl->dev && st.st_ino == pl->ino) {
            return 0;
        }
        (void)unlinkat(vfd, pl->name, 0);
        rc = -ESTALE;
    }
    if (pl->data != NULL && rc != -ENOSPC && rc != -EROFS && rc != -EDQUOT) {
        return write_file(vfd, pl, sync);
    }
    return rc;
}

/* Create the next version directory: its name into v (VERSION_LEN + 1
 * bytes), returns its descriptor or -errno. */
static int make_version(int dfd, char *v)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    for (int attempt = 0; attempt < 64; attempt++) {
        long ns = (ts.tv_nsec + attempt) % 1000000000L;
        int year = tm.tm_year + 1900;
        char name[64];
        int nl = snprintf(name, sizeof(name), "..%04d_%02d_%02d_%02d_%02d_%02d.%09ld",
                          year > 9999 ? 9999 : year, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                          tm.tm_min, tm.tm_sec, ns);
        if (nl != (int)VERSION_LEN) {
            return -EINVAL; /* a clock before year 0 */
        }
        memcpy(v, name, VERSION_LEN + 1);
        if (mkdirat(dfd, v, 0755) < 0) {
            if (errno == EEXIST) {
                continue; /* a name in use (by anything): the next one */
            }
            return -errno;
        }
        int fd = open_version(dfd, v);
        if (fd < 0) {
            int e = errno;
            (void)remove_entry(dfd, v);
            return -e;
        }
        /* As the files: readable by every user whatever the umask. */
        if (fchmod(fd, 0755) < 0) {
            int e = errno;
            close(fd);
            (void)remove_entry(dfd, v);
            return -e;
        }
        return fd;
    }
    return -EEXIST;
}

/* Make name a symlink to "..data/<name>" unless it already is one: a new
 * symlink renamed over whatever is there (an older tpumesh's plain file is
 * replaced in one step). 1 when a link was made, 0 when it was right, or
 * -errno. */
static int ensure_link(int dfd, const char *name)
{
    char want[NAME_MAX_LEN + sizeof(MESH_PUBLISH_DATA_LINK) + 1];
    int wl = snprintf(want, sizeof(want), "%s/%s", MESH_PUBLISH_DATA_LINK, name);
    char got[sizeof(want)];
    ssize_t n = readlinkat(dfd, name, got, sizeof(got));
    if (n == wl && memcmp(got, want, (size_t)wl) == 0) {
        return 0;
    }
    (void)remove_entry(dfd, LINK_TMP);
    if (symlinkat(want, dfd, LINK_TMP) < 0) {
        return -errno;
    }
    if (renameat(dfd, LINK_TMP, dfd, name) < 0) {
        int e = errno;
        (void)unlinkat(dfd, LINK_TMP, 0);
        return -e;
    }
    return 1;
}

/* An older tpumesh kept ".<name>.spare" and wrote ".<name>.XXXXXX" temp
 * files next to each file: once the out-dir has the layout, those of the
 * version's names go (regular files only). */
static void remove_old_spares(int dfd, const struct plan *pl, size_t k)
{
    DIR *d = open_dir(dfd);
    if (d == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (n[0] != '.' || n[1] == '.') {
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            size_t nl = strlen(pl[i].name);
            const char *tail = n + 1 + nl;
            if (strncmp(n + 1, pl[i].name, nl) != 0 || tail[0] != '.') {
                continue;
            }
            struct stat st;
            if ((strcmp(tail, ".spare") == 0 || strlen(tail) == 7) &&
                fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
                (void)unlinkat(dfd, n, 0);
            }
            break;
        }
    }
    closedir(d);
}

static int check_set(const struct mesh_publish_file *files, size_t n, struct mesh_err *err)
{
    if (n > MESH_PUBLISH_MAX_FILES) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "%zu files to publish, above the limit of %d", n,
                            MESH_PUBLISH_MAX_FILES);
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
        for (size_t j = 0; j < i; j++) {
            if (strcmp(files[i].name, files[j].name) == 0) {
                return mesh_err_set(err, MESH_E_INVAL, 0, "%s is in the set twice", files[i].name);
            }
        }
    }
    return 0;
}

/* What another container may have put where the layout needs a symlink:
 * a directory cannot be replaced by a rename. Checked before anything is
 * written. */
static int check_in_the_way(const struct mesh_publish_dir *p, const struct plan *pl, size_t k,
                            struct mesh_err *err)
{
    for (size_t i = 0; i < k; i++) {
        struct stat st;
        if (pl[i].how != SKIP && fstatat(p->dfd, pl[i].name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(st.st_mode)) {
            return mesh_err_set(err, MESH_E_PUBLISH, EISDIR,
                                "cannot publish %s: '%.120s/%s' is a directory; remove it (the "
                                "name must be a symlink into %s)",
                                pl[i].name, p->dir, pl[i].name, MESH_PUBLISH_DATA_LINK);
        }
    }
    return 0;
}

/* Build the version directory from the plan: its descriptor, or -1 with
 * err set and nothing left behind. */
static int build_version(struct mesh_publish_dir *p, int src, const struct plan *pl, size_t k,
                         char *v, struct mesh_err *err)
{
    int vfd = make_version(p->dfd, v);
    if (vfd < 0) {
        return pub_error(err, p->dir, "a new version directory", -vfd);
    }
    for (size_t i = 0; i < k; i++) {
        int rc = 0;
        if (pl[i].how == WRITE) {
            rc = write_file(vfd, &pl[i], p->sync);
        } else if (pl[i].how == LINK) {
            rc = link_file(src, vfd, &pl[i], p->sync);
        }
        if (rc < 0) {
            close(vfd);
            (void)remove_entry(p->dfd, v);
            return pub_error(err, p->dir, pl[i].name, -rc);
        }
    }
    if (p->sync && fsync(vfd) < 0 && errno != EINVAL) {
        int e = errno;
        close(vfd);
        (void)remove_entry(p->dfd, v);
        return pub_error(err, p->dir, "the version directory", e);
    }
    return vfd;
}

/* Point "..data" at v with one rename of a fresh "..data_tmp". */
static int swap_data(struct mesh_publish_dir *p, const char *v, struct mesh_err *err)
{
    (void)remove_entry(p->dfd, DATA_TMP);
    if (symlinkat(v, p->dfd, DATA_TMP) < 0) {
        return pub_error(err, p->dir, DATA_TMP, errno);
    }
    if (p->on_swap != NULL) {
        p->on_swap(p->on_swap_ctx, MESH_PUBLISH_SWAP_BEGIN);
    }
    int rc = renameat(p->dfd, DATA_TMP, p->dfd, MESH_PUBLISH_DATA_LINK);
    int e = errno;
    if (p->on_swap != NULL) {
        p->on_swap(p->on_swap_ctx, rc == 0 ? MESH_PUBLISH_SWAP_DONE : MESH_PUBLISH_SWAP_FAILED);
    }
    if (rc < 0) {
        (void)unlinkat(p->dfd, DATA_TMP, 0);
        return pub_error(err, p->dir, MESH_PUBLISH_DATA_LINK, e);
    }
    if (p->sync && fsync(p->dfd) < 0 && errno != EINVAL) {
        return pub_error(err, p->dir, "the directory", errno);
    }
    return 0;
}

static int ensure_links(struct mesh_publish_dir *p, const struct plan *pl, size_t k, const char *v,
                        struct mesh_err *err)
{
    int made = 0;
    for (size_t i = 0; i < k; i++) {
        if (pl[i].how == SKIP) {
            continue;
        }
        int rc = ensure_link(p->dfd, pl[i].name);
        if (rc < 0) {
            mesh_err_set(err, MESH_E_PUBLISH, -rc,
                         "published %s in '%.120s' but cannot make %s a symlink into %s: %s; "
                         "remove what is there",
                         v != NULL ? v : "the current version", p->dir, pl[i].name,
                         MESH_PUBLISH_DATA_LINK, strerror(-rc));
            return -MESH_E_PUBLISH;
        }
        made += rc;
    }
    if (made > 0 && p->sync && fsync(p->dfd) < 0 && errno != EINVAL) {
        return pub_error(err, p->dir, "the directory", errno);
    }
    return 0;
}

int mesh_publish_dir_commit(struct mesh_publish_dir *p, const struct mesh_publish_file *files,
                            size_t n, size_t *out_written, struct mesh_err *err)
{
    if (out_written != NULL) {
        *out_written = 0;
    }
    int rc = check_set(files, n, err);
    if (rc < 0) {
        return rc;
    }
    char cur[VERSION_LEN + 1] = "";
    int link = read_data_link(p->dfd, cur);
    if (link == -EISDIR) {
        return mesh_err_set(err, MESH_E_PUBLISH, EISDIR,
                            "'%.120s/%s' is a directory, not the symlink tpumesh keeps there; "
                            "remove it",
                            p->dir, MESH_PUBLISH_DATA_LINK);
    }
    /* The files to start from: the current version; or, while the out-dir
     * still holds an older tpumesh's plain files (no "..data" yet), those. */
    mesh_autoclose int vcur = link == 0 ? open_version(p->dfd, cur) : -1;
    bool have_version = vcur >= 0;
    if (!have_version) {
        cur[0] = '\0';
    }
    int src = have_version ? vcur : (link == -ENOENT ? p->dfd : -1);

    struct plan pl[MESH_PUBLISH_MAX_FILES];
    size_t k = make_plan(src, have_version, files, n, pl);
    size_t written = 0, kept = 0;
    for (size_t i = 0; i < k; i++) {
        written += pl[i].how == WRITE;
        kept += pl[i].how == LINK;
    }
    if (written + kept == 0 || (have_version && written == 0)) {
        /* Nothing differs: no new version. A symlink someone removed is
         * put back. */
        return have_version ? ensure_links(p, pl, k, NULL, err) : 0;
    }
    rc = check_in_the_way(p, pl, k, err);
    if (rc < 0) {
        return rc;
    }
    char v[VERSION_LEN + 1];
    int vfd = build_version(p, src, pl, k, v, err);
    if (vfd < 0) {
        return vfd;
    }
    close(vfd);
    rc = swap_data(p, v, err);
    if (rc < 0) {
        (void)remove_entry(p->dfd, v);
        return rc;
    }
    p->swapped_us = mesh_sys_now_us();
    rc = ensure_links(p, pl, k, v, err);
    if (!have_version && link == -ENOENT) {
        remove_old_spares(p->dfd, pl, k);
    }
    /* The version just replaced stays for readers that resolved "..data"
     * before the swap; older ones go. */
    remove_others(p, v, cur);
    if (out_written != NULL) {
        *out_written = written;
    }
    return rc;
}

int mesh_publish_files(const char *dir, const struct mesh_publish_file *files, size_t n,
                       size_t *out_written, struct mesh_err *err)
{
    if (out_written != NULL) {
        *out_written = 0;
    }
    struct mesh_publish_dir *p = mesh_publish_dir_open(dir, err);
    if (p == NULL) {
        return err != NULL && err->code != 0 ? -err->code : -MESH_E_PUBLISH;
    }
    int rc = mesh_publish_dir_commit(p, files, n, out_written, err);
    mesh_publish_dir_close(p);
    return rc;
}

/* ---- readers ---- */

/* The directory the current files are read from: the version "..data"
 * names, or dir itself when it has no "..data" (an older tpumesh's plain
 * files). A descriptor, or -errno (-EINVAL: "..data" is not the
 * publisher's). A swap between reading "..data" and opening its target
 * may remove that target: then "..data" is read again. */
static int open_current(const char *dir)
{
    mesh_autoclose int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return -errno;
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        char cur[VERSION_LEN + 1];
        int rc = read_data_link(dfd, cur);
        if (rc == -ENOENT) {
            int fd = dfd;
            dfd = -1;
            return fd;
        }
        if (rc < 0) {
            return -EINVAL;
        }
        int vfd = open_version(dfd, cur);
        if (vfd >= 0) {
            return vfd;
        }
        if (errno != ENOENT) {
            return errno == ELOOP || errno == ENOTDIR ? -EINVAL : -errno;
        }
    }
    return -ENOENT;
}

static int read_small(int fd, size_t max, char **out_data, size_t *out_len)
{
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
        ssize_t n = mesh_sys_read(fd, buf + len, cap - 1 - len);
        if (n < 0) {
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

/* name of the current version, opened for reading, or -errno. */
static int open_current_file(const char *dir, const char *name)
{
    if (!name_ok(name)) {
        return -EINVAL;
    }
    mesh_autoclose int cfd = open_current(dir);
    if (cfd < 0) {
        return cfd;
    }
    int fd = open_file(cfd, name);
    if (fd < 0) {
        return errno == ELOOP ? -EINVAL : -errno;
    }
    return fd;
}

int mesh_publish_read_file(const char *dir, const char *name, char **out_data, size_t *out_len)
{
    mesh_autoclose int fd = open_current_file(dir, name);
    if (fd < 0) {
        return fd;
    }
    return read_small(fd, MESH_PUBLISH_MAX_FILE, out_data, out_len);
}

bool mesh_publish_is_current(const char *dir, const char *name, const void *data, size_t len)
{
    mesh_autoclose int fd = open_current_file(dir, name);
    struct stat st;
    return fd >= 0 && fd_holds(fd, data, len, &st);
}

int mesh_publish_read_generation(const char *dir, uint64_t *out_generation, bool *out_found,
                                 struct mesh_err *err)
{
    (void)err;
    *out_generation = 0;
    if (out_found != NULL) {
        *out_found = false;
    }
    mesh_autofree char *data = NULL;
    size_t len = 0;
    int rc = mesh_publish_read_file(dir, GEN_FILE, &data, &len);
    if (rc == -ENOENT) {
        return 0;
    }
    if (rc < 0) {
        mesh_warn("pub", "cannot read the previous %s/%s (%s): starting at generation 1", dir,
                  GEN_FILE,
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
        mesh_warn("pub", "ignoring the previous %s/%s (%s): starting at generation 1", dir,
                  GEN_FILE, perr.msg);
        return 0;
    }
    *out_generation = (uint64_t)gen;
    if (out_found != NULL) {
        *out_found = true;
    }
    return 0;
}
