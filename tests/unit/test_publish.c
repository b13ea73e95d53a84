/*
 * test_publish.c - the atomic publisher (io/publish.h): files land whole
 * with mode 0644 and no temp files; unchanged content keeps inode and
 * mtime; generation read-back tolerates garbage; a missing directory, a
 * full volume (ENOSPC, tiny tmpfs) and a read-only volume (EROFS) give a
 * clear error and leave the previous files intact. The tmpfs cases need
 * mount(2) (root in the test container) and are skipped without it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/mem.h"
#include "io/publish.h"

struct fixture {
    char dir[64];
    bool mounted;
};

static int setup(void **state)
{
    struct fixture *f = mesh_calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/tpumesh-pub.------");
    memset(f->dir + strlen(f->dir) - 6, 'X', 6); /* mkdtemp's template */
    if (mkdtemp(f->dir) == NULL) {
        mesh_free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static void rm_dir_contents(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        char *p = mesh_asprintf("%s/%s", dir, e->d_name);
        if (unlink(p) < 0 && errno == EISDIR) {
            rm_dir_contents(p);
            rmdir(p);
        }
        mesh_free(p);
    }
    closedir(d);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->mounted) {
        umount2(f->dir, MNT_DETACH);
    }
    rm_dir_contents(f->dir);
    rmdir(f->dir);
    mesh_free(f);
    return 0;
}

static char *slurp(const char *dir, const char *name)
{
    char *p = mesh_asprintf("%s/%s", dir, name);
    FILE *fp = fopen(p, "rb");
    mesh_free(p);
    if (fp == NULL) {
        return NULL;
    }
    char *buf = mesh_calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void put(const char *dir, const char *name, const char *content)
{
    char *p = mesh_asprintf("%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    fputs(content, fp);
    fclose(fp);
    mesh_free(p);
}

static struct stat stat_of(const char *dir, const char *name)
{
    struct stat st;
    char *p = mesh_asprintf("%s/%s", dir, name);
    assert_int_equal(stat(p, &st), 0);
    mesh_free(p);
    return st;
}

/* Number of directory entries whose name starts with '.' (temp files),
 * besides . and .. */
static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            n++;
        }
    }
    closedir(d);
    return n;
}

#define FILE_OF(n, s)                                                                              \
    {                                                                                              \
        (n), (s), sizeof(s) - 1, false                                                             \
    }

static void test_publish_and_unchanged(void **state)
{
    struct fixture *f = *state;
    const struct mesh_publish_file set1[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='a:1'\n"),
        {"tpu.env", NULL, 0, false}, /* not rendered: left alone */
        FILE_OF("topology.json", "{\"generation\":1}\n"),
    };
    size_t written = 99;
    struct mesh_err err;
    assert_int_equal(mesh_publish_files(f->dir, set1, 3, &written, &err), 0);
    assert_int_equal(written, 2);
    char *s = slurp(f->dir, "dtensor.env");
    assert_string_equal(s, "DTENSOR_JOBS='a:1'\n");
    mesh_free(s);
    assert_null(slurp(f->dir, "tpu.env"));
    struct stat a1 = stat_of(f->dir, "dtensor.env");
    struct stat t1 = stat_of(f->dir, "topology.json");
    assert_int_equal(a1.st_mode & 07777, 0644);
    assert_int_equal(count_temps(f->dir), 0);

    /* Same content again: nothing written, same inode and mtime. */
    usleep(20000);
    assert_int_equal(mesh_publish_files(f->dir, set1, 3, &written, &err), 0);
    assert_int_equal(written, 0);
    struct stat a2 = stat_of(f->dir, "dtensor.env");
    assert_int_equal(a2.st_ino, a1.st_ino);
    assert_int_equal(a2.st_mtim.tv_sec, a1.st_mtim.tv_sec);
    assert_int_equal(a2.st_mtim.tv_nsec, a1.st_mtim.tv_nsec);

    /* One file changes: only it is replaced (new inode, by rename). */
    const struct mesh_publish_file set2[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='a:1'\n"),
        FILE_OF("topology.json", "{\"generation\":2}\n"),
    };
    assert_int_equal(mesh_publish_files(f->dir, set2, 2, &written, &err), 0);
    assert_int_equal(written, 1);
    assert_int_equal(stat_of(f->dir, "dtensor.env").st_ino, a1.st_ino);
    assert_true(stat_of(f->dir, "topology.json").st_ino != t1.st_ino);
    s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":2}\n");
    mesh_free(s);
    /* A shorter and an empty file are content changes too. */
    const struct mesh_publish_file set3[] = {
        {"dtensor.env", "", 0, false},
        FILE_OF("topology.json", "{}\n"),
    };
    assert_int_equal(mesh_publish_files(f->dir, set3, 2, &written, &err), 0);
    assert_int_equal(written, 2);
    assert_int_equal(stat_of(f->dir, "dtensor.env").st_size, 0);
    assert_true(mesh_publish_is_current(f->dir, "topology.json", "{}\n", 3));
    assert_false(mesh_publish_is_current(f->dir, "topology.json", "{}", 2));
    assert_false(mesh_publish_is_current(f->dir, "nope.json", "{}", 2));
    assert_int_equal(count_temps(f->dir), 0);

    /* differs: the caller vouches that the bytes changed, so the file is
     * written without a comparison (the sidecar knows what it changed). */
    struct stat t3 = stat_of(f->dir, "topology.json");
    const struct mesh_publish_file set4[] = {
        {"dtensor.env", "", 0, false},
        {"topology.json", "{}\n", 3, true},
    };
    assert_int_equal(mesh_publish_files(f->dir, set4, 2, &written, &err), 0);
    assert_int_equal(written, 1);
    assert_true(stat_of(f->dir, "topology.json").st_ino != t3.st_ino);
    assert_true(mesh_publish_is_current(f->dir, "topology.json", "{}\n", 3));
    assert_int_equal(count_temps(f->dir), 0);
}

/* mesh_publish_is_current compares in chunks: equal sizes with a difference
 * in the first, a middle or the last chunk, files larger than one chunk, an
 * empty file, and things that are not regular files. */
static void test_is_current_table(void **state)
{
    struct fixture *f = *state;
    const size_t big = 3 * 16384 + 123;
    char *data = mesh_malloc(big);
    for (size_t i = 0; i < big; i++) {
        data[i] = (char)('a' + (i * 7) % 26);
    }
    struct mesh_err err;
    size_t written = 0;
    const struct mesh_publish_file set[] = {
        {"big.json", data, big, false},
        {"empty.env", "", 0, false},
    };
    assert_int_equal(mesh_publish_files(f->dir, set, 2, &written, &err), 0);
    static const struct {
        size_t flip; /* byte changed in the candidate, or SIZE_MAX for none */
        size_t len;  /* candidate length */
        bool want;
    } rows[] = {
        {SIZE_MAX, 3 * 16384 + 123, true},
        {0, 3 * 16384 + 123, false},
        {16383, 3 * 16384 + 123, false},
        {16384, 3 * 16384 + 123, false},
        {40000, 3 * 16384 + 123, false},
        {3 * 16384 + 122, 3 * 16384 + 123, false},
        {SIZE_MAX, 3 * 16384 + 122, false},
        {SIZE_MAX, 16384, false},
        {SIZE_MAX, 0, false},
    };
    char *cand = mesh_malloc(big);
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        memcpy(cand, data, big);
        if (rows[r].flip != SIZE_MAX) {
            cand[rows[r].flip] ^= 0x20;
        }
        assert_int_equal(mesh_publish_is_current(f->dir, "big.json", cand, rows[r].len),
                         rows[r].want);
    }
    assert_true(mesh_publish_is_current(f->dir, "empty.env", "", 0));
    assert_false(mesh_publish_is_current(f->dir, "empty.env", "x", 1));
    /* A directory or a missing file is never current. */
    char *sub = mesh_asprintf("%s/adir", f->dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_false(mesh_publish_is_current(f->dir, "adir", "", 0));
    assert_int_equal(rmdir(sub), 0);
    assert_false(mesh_publish_is_current(f->dir, "missing.json", "", 0));
    /* A FIFO under a published name (the volume is shared with other
     * containers) is neither current nor readable, and never blocks. */
    char *fifo = mesh_asprintf("%s/fifo.json", f->dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_false(mesh_publish_is_current(f->dir, "fifo.json", "", 0));
    char *got = NULL;
    size_t got_len = 0;
    assert_int_equal(mesh_publish_read_file(f->dir, "fifo.json", &got, &got_len), -EINVAL);
    assert_int_equal(unlink(fifo), 0);
    mesh_free(fifo);
    assert_int_equal(mesh_publish_read_file(f->dir, "missing.json", &got, &got_len), -ENOENT);
    assert_int_equal(mesh_publish_read_file(f->dir, "empty.env", &got, &got_len), 0);
    assert_int_equal(got_len, 0);
    assert_string_equal(got, "");
    mesh_free(got);
    got = NULL;
    assert_int_equal(mesh_publish_read_file(f->dir, "big.json", &got, &got_len), 0);
    assert_int_equal(got_len, big);
    assert_memory_equal(got, data, big);
    mesh_free(got);
    mesh_free(sub);
    mesh_free(cand);
    mesh_free(data);
}

static void test_generation_table(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *content; /* NULL = no file */
        uint64_t gen;
        bool found;
    } rows[] = {
        {NULL, 0, false},
        {"{\"generation\": 41, \"complete\": true}\n", 41, true},
        {"{\"generation\":9007199254740991}", 9007199254740991ULL, true},
        {"", 0, false},
        {"not json at all", 0, false},
        {"{\"generation\": -3}", 0, false},
        {"{\"generation\": 1.5}", 0, false},
        {"{\"generation\": \"7\"}", 0, false},
        {"{\"complete\": true}", 0, false},
        {"[1,2,3]", 0, false},
        {"{\"generation\": 5", 0, false},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        char *p = mesh_asprintf("%s/topology.json", f->dir);
        unlink(p);
        mesh_free(p);
        if (rows[r].content != NULL) {
            put(f->dir, "topology.json", rows[r].content);
        }
        uint64_t gen = 12345;
        bool found = true;
        assert_int_equal(mesh_publish_read_generation(f->dir, &gen, &found, NULL), 0);
        assert_int_equal(gen, rows[r].gen);
        assert_int_equal(found, rows[r].found);
    }
    /* A directory where topology.json should be is tolerated as well. */
    char *p = mesh_asprintf("%s/topology.json", f->dir);
    unlink(p);
    assert_int_equal(mkdir(p, 0755), 0);
    uint64_t gen = 1;
    assert_int_equal(mesh_publish_read_generation(f->dir, &gen, NULL, NULL), 0);
    assert_int_equal(gen, 0);
    rmdir(p);
    mesh_free(p);
}

static void test_error_paths(void **state)
{
    struct fixture *f = *state;
    const struct mesh_publish_file one[] = {FILE_OF("a.env", "A='1'\n")};
    struct mesh_err err;
    char *missing = mesh_asprintf("%s/does-not-exist", f->dir);
    assert_int_equal(mesh_publish_files(missing, one, 1, NULL, &err), -MESH_E_PUBLISH);
    assert_non_null(strstr(err.msg, "does not exist"));
    assert_non_null(strstr(err.msg, missing));
    mesh_free(missing);

    put(f->dir, "plainfile", "x");
    char *notdir = mesh_asprintf("%s/plainfile", f->dir);
    assert_int_equal(mesh_publish_files(notdir, one, 1, NULL, &err), -MESH_E_PUBLISH);
    assert_non_null(strstr(err.msg, "not a directory"));
    mesh_free(notdir);

    static const char *const bad_names[] = {"", ".hidden", "a/b", "../x"};
    for (size_t i = 0; i < 4; i++) {
        const struct mesh_publish_file bad[] = {{bad_names[i], "x", 1, false}};
        assert_int_equal(mesh_publish_files(f->dir, bad, 1, NULL, &err), -MESH_E_INVAL);
    }
    assert_int_equal(mesh_publish_files("", one, 1, NULL, &err), -MESH_E_INVAL);
    /* A directory in the way of a file: the rename fails, nothing left over. */
    char *p = mesh_asprintf("%s/a.env", f->dir);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(mesh_publish_files(f->dir, one, 1, NULL, &err), -MESH_E_PUBLISH);
    rmdir(p);
    mesh_free(p);
    assert_int_equal(count_temps(f->dir), 0);
}

static bool mount_tmpfs(struct fixture *f, const char *opts)
{
    if (mount("tmpfs", f->dir, "tmpfs", 0, opts) < 0) {
        return false;
    }
    f->mounted = true;
    return true;
}

static void test_enospc_keeps_previous(void **state)
{
    struct fixture *f = *state;
    if (!mount_tmpfs(f, "size=16k")) {
        skip();
    }
    const struct mesh_publish_file v1[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='v1'\n"),
        FILE_OF("topology.json", "{\"generation\":1}\n"),
    };
    struct mesh_err err;
    assert_int_equal(mesh_publish_files(f->dir, v1, 2, NULL, &err), 0);
    /* 64 KiB cannot fit in a 16 KiB tmpfs: the first temp file fails. */
    size_t big_len = 64 * 1024;
    char *big = mesh_malloc(big_len);
    memset(big, 'x', big_len);
    const struct mesh_publish_file v2[] = {
        {"dtensor.env", big, big_len, false},
        FILE_OF("topology.json", "{\"generation\":2}\n"),
    };
    assert_int_equal(mesh_publish_files(f->dir, v2, 2, NULL, &err), -MESH_E_PUBLISH);
    assert_int_equal(err.sys_errno, ENOSPC);
    assert_non_null(strstr(err.msg, "no space left"));
    assert_non_null(strstr(err.msg, f->dir));
    /* Also when the first file fits and a later one does not. */
    const struct mesh_publish_file v3[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='v3'\n"),
        {"topology.json", big, big_len, false},
    };
    assert_int_equal(mesh_publish_files(f->dir, v3, 2, NULL, &err), -MESH_E_PUBLISH);
    mesh_free(big);
    char *s = slurp(f->dir, "dtensor.env");
    assert_string_equal(s, "DTENSOR_JOBS='v1'\n");
    mesh_free(s);
    s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":1}\n");
    mesh_free(s);
    assert_int_equal(count_temps(f->dir), 0);
}

static void test_erofs_keeps_previous(void **state)
{
    struct fixture *f = *state;
    if (!mount_tmpfs(f, "size=64k")) {
        skip();
    }
    const struct mesh_publish_file v1[] = {FILE_OF("topology.json", "{\"generation\":1}\n")};
    struct mesh_err err;
    assert_int_equal(mesh_publish_files(f->dir, v1, 1, NULL, &err), 0);
    assert_int_equal(mount("tmpfs", f->dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
    const struct mesh_publish_file v2[] = {FILE_OF("topology.json", "{\"generation\":2}\n")};
    assert_int_equal(mesh_publish_files(f->dir, v2, 1, NULL, &err), -MESH_E_PUBLISH);
    assert_int_equal(err.sys_errno, EROFS);
    assert_non_null(strstr(err.msg, "read-only"));
    assert_non_null(strstr(err.msg, "mount the shared volume read-write"));
    /* Unchanged content on a read-only volume is not an error: nothing to write. */
    size_t written = 9;
    assert_int_equal(mesh_publish_files(f->dir, v1, 1, &written, &err), 0);
    assert_int_equal(written, 0);
    char *s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":1}\n");
    mesh_free(s);
    uint64_t gen = 0;
    assert_int_equal(mesh_publish_read_generation(f->dir, &gen, NULL, NULL), 0);
    assert_int_equal(gen, 1);
}

static void test_stale_temps_removed(void **state)
{
    struct fixture *f = *state;
    /* Left behind by a killed publisher: an old one goes, a fresh one (a
     * publisher at work right now) and unrelated dot files stay. */
    put(f->dir, ".dtensor.env.a1b2c3", "half");
    put(f->dir, ".topology.json.zzzzzz", "new");
    put(f->dir, ".dtensor.env.toolong7", "other");
    put(f->dir, ".profile", "other");
    char *old = mesh_asprintf("%s/.dtensor.env.a1b2c3", f->dir);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, old, ts, 0), 0);
    char *old2 = mesh_asprintf("%s/.dtensor.env.toolong7", f->dir);
    assert_int_equal(utimensat(AT_FDCWD, old2, ts, 0), 0);
    const struct mesh_publish_file set[] = {
        FILE_OF("dtensor.env", "A='1'\n"),
        FILE_OF("topology.json", "{}\n"),
    };
    assert_int_equal(mesh_publish_files(f->dir, set, 2, NULL, NULL), 0);
    assert_int_equal(access(old, F_OK), -1);
    assert_int_equal(access(old2, F_OK), 0);
    mesh_free(old);
    mesh_free(old2);
    assert_int_equal(count_temps(f->dir), 3);
}

/* A reader running while a publisher replaces a 256 KiB file thousands of
 * times only ever sees one complete version or the other. */
static void test_readers_never_see_a_mix(void **state)
{
    struct fixture *f = *state;
    size_t len = 256 * 1024;
    char *a = mesh_malloc(len);
    char *b = mesh_malloc(len);
    memset(a, 'a', len);
    memset(b, 'b', len);
    const struct mesh_publish_file va[] = {{"big.env", a, len, false}};
    const struct mesh_publish_file vb[] = {{"big.env", b, len, false}};
    assert_int_equal(mesh_publish_files(f->dir, va, 1, NULL, NULL), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 400; i++) {
            if (mesh_publish_files(f->dir, i % 2 == 0 ? vb : va, 1, NULL, NULL) < 0) {
                _exit(1);
            }
        }
        _exit(0);
    }
    char *path = mesh_asprintf("%s/big.env", f->dir);
    char *buf = mesh_malloc(len + 1);
    int reads = 0;
    int bad = 0;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        size_t got = 0;
        ssize_t r;
        while (got <= len && (r = read(fd, buf + got, len + 1 - got)) > 0) {
            got += (size_t)r;
        }
        close(fd);
        reads++;
        if (got != len || (memcmp(buf, a, len) != 0 && memcmp(buf, b, len) != 0)) {
            bad++;
        }
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    print_message("%d reads during 400 publishes, %d torn\n", reads, bad);
    assert_int_equal(bad, 0);
    assert_true(reads > 0);
    assert_int_equal(count_temps(f->dir), 0);
    mesh_free(path);
    mesh_free(buf);
    mesh_free(a);
    mesh_free(b);
}

/* mesh_publish_files_swap: from the second publish on, each file is written
 * into its spare (the version before) and exchanged with the final name. */
static void test_swap_reuses_spare(void **state)
{
    struct fixture *f = *state;
    const struct mesh_publish_file v1[] = {FILE_OF("topology.json", "{\"generation\":1}\n")};
    const struct mesh_publish_file v2[] = {
        FILE_OF("topology.json", "{\"generation\":2,\"x\":1}\n")};
    const struct mesh_publish_file v3[] = {FILE_OF("topology.json", "{\"generation\":3}\n")};
    size_t written = 0;
    struct mesh_err err;
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 1, true, &written, &err), 0);
    assert_int_equal(written, 1);
    ino_t i1 = stat_of(f->dir, "topology.json").st_ino;
    assert_int_equal(mesh_publish_files_swap(f->dir, v2, 1, false, &written, &err), 0);
    assert_int_equal(written, 1);
    /* v1's inode is now the spare, v2 is a new one. */
    assert_int_equal(stat_of(f->dir, ".topology.json.spare").st_ino, i1);
    ino_t i2 = stat_of(f->dir, "topology.json").st_ino;
    assert_true(i2 != i1);
    assert_int_equal(stat_of(f->dir, "topology.json").st_mode & 07777, 0644);
    /* v3 (shorter than v2, longer than v1) goes into v1's inode. */
    assert_int_equal(mesh_publish_files_swap(f->dir, v3, 1, false, &written, &err), 0);
    assert_int_equal(stat_of(f->dir, "topology.json").st_ino, i1);
    assert_int_equal(stat_of(f->dir, ".topology.json.spare").st_ino, i2);
    char *s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":3}\n");
    mesh_free(s);
    /* And a shorter one than the spare: truncated. */
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 1, false, &written, &err), 0);
    s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":1}\n");
    mesh_free(s);
    /* Unchanged: untouched, as with mesh_publish_files. */
    ino_t i4 = stat_of(f->dir, "topology.json").st_ino;
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 1, false, &written, &err), 0);
    assert_int_equal(written, 0);
    assert_int_equal(stat_of(f->dir, "topology.json").st_ino, i4);
    /* The spare is the only hidden file left. */
    assert_int_equal(count_temps(f->dir), 1);
}

/* A reader that still has a replaced version open keeps its bytes: that
 * spare is not written over, a new one is. A spare planted as a hard link
 * to another file, or as a symlink, is not written through either. */
static void test_swap_spares_readers_and_links(void **state)
{
    struct fixture *f = *state;
    const struct mesh_publish_file v1[] = {FILE_OF("a.env", "A='1'\n")};
    const struct mesh_publish_file v2[] = {FILE_OF("a.env", "A='2'\n")};
    const struct mesh_publish_file v3[] = {FILE_OF("a.env", "A='3'\n")};
    const struct mesh_publish_file v4[] = {FILE_OF("a.env", "A='4'\n")};
    struct mesh_err err;
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 1, true, NULL, &err), 0);
    assert_int_equal(mesh_publish_files_swap(f->dir, v2, 1, false, NULL, &err), 0);
    /* A reader opens v2; v3 goes into v1's inode, v2 becomes the spare. */
    char *path = mesh_asprintf("%s/a.env", f->dir);
    FILE *reader = fopen(path, "rb");
    assert_non_null(reader);
    assert_int_equal(mesh_publish_files_swap(f->dir, v3, 1, false, NULL, &err), 0);
    /* v4 must not go into v2's inode, which the reader holds. */
    assert_int_equal(mesh_publish_files_swap(f->dir, v4, 1, false, NULL, &err), 0);
    char got[16] = "";
    assert_non_null(fgets(got, sizeof(got), reader));
    assert_string_equal(got, "A='2'\n");
    fclose(reader);
    char *s = slurp(f->dir, "a.env");
    assert_string_equal(s, "A='4'\n");
    mesh_free(s);

    /* Hard link: the spare name is a second name of "victim". */
    put(f->dir, "victim", "keep me\n");
    char *spare = mesh_asprintf("%s/.a.env.spare", f->dir);
    char *victim = mesh_asprintf("%s/victim", f->dir);
    assert_int_equal(unlink(spare), 0);
    assert_int_equal(link(victim, spare), 0);
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 1, false, NULL, &err), 0);
    s = slurp(f->dir, "victim");
    assert_string_equal(s, "keep me\n");
    mesh_free(s);
    s = slurp(f->dir, "a.env");
    assert_string_equal(s, "A='1'\n");
    mesh_free(s);
    /* Symlink: not followed. */
    assert_int_equal(unlink(spare), 0);
    assert_int_equal(symlink(victim, spare), 0);
    assert_int_equal(mesh_publish_files_swap(f->dir, v2, 1, false, NULL, &err), 0);
    s = slurp(f->dir, "victim");
    assert_string_equal(s, "keep me\n");
    mesh_free(s);
    s = slurp(f->dir, "a.env");
    assert_string_equal(s, "A='2'\n");
    mesh_free(s);
    mesh_free(spare);
    mesh_free(victim);
    mesh_free(path);
}

/* A spare that cannot grow (full volume) fails before any rename, and the
 * published files stay whole. */
static void test_swap_enospc_keeps_previous(void **state)
{
    struct fixture *f = *state;
    if (!mount_tmpfs(f, "size=16k")) {
        skip();
    }
    const struct mesh_publish_file v1[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='v1'\n"),
        FILE_OF("topology.json", "{\"generation\":1}\n"),
    };
    const struct mesh_publish_file v2[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='v2'\n"),
        FILE_OF("topology.json", "{\"generation\":2}\n"),
    };
    struct mesh_err err;
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 2, true, NULL, &err), 0);
    assert_int_equal(mesh_publish_files_swap(f->dir, v2, 2, false, NULL, &err), 0);
    size_t big_len = 64 * 1024;
    char *big = mesh_malloc(big_len);
    memset(big, 'x', big_len);
    const struct mesh_publish_file v3[] = {
        FILE_OF("dtensor.env", "DTENSOR_JOBS='v3'\n"),
        {"topology.json", big, big_len, false},
    };
    assert_int_equal(mesh_publish_files_swap(f->dir, v3, 2, false, NULL, &err), -MESH_E_PUBLISH);
    assert_int_equal(err.sys_errno, ENOSPC);
    mesh_free(big);
    char *s = slurp(f->dir, "dtensor.env");
    assert_string_equal(s, "DTENSOR_JOBS='v2'\n");
    mesh_free(s);
    s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":2}\n");
    mesh_free(s);
    /* And it works again once the content fits. */
    assert_int_equal(mesh_publish_files_swap(f->dir, v1, 2, false, NULL, &err), 0);
    s = slurp(f->dir, "topology.json");
    assert_string_equal(s, "{\"generation\":1}\n");
    mesh_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_and_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_is_current_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generation_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enospc_keeps_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_erofs_keeps_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_temps_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swap_reuses_spare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swap_spares_readers_and_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swap_enospc_keeps_previous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_never_see_a_mix, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
