/*
 * publish.h - atomic publisher of the files on the shared volume
 * (docs/DESIGN.md §4), laid out the way the kubelet's AtomicWriter lays out a
 * ConfigMap volume:
 *
 *   dir/..2026_11_25_21_30_00.123456789/   one version: every file, complete
 *   dir/..data -> ..2026_11_25_21_30_00.123456789
 *   dir/topology.json -> ..data/topology.json      (one symlink per file)
 *
 * A version directory is named "..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN" after the
 * UTC time it was created (nanoseconds last; the kubelet's names have the
 * same shape with a random tail). Publishing writes a new version directory
 * (files whose bytes are unchanged are hard-linked from the current one, not
 * rewritten), then points "..data" at it with one rename of a "..data_tmp"
 * symlink: every file of a version switches at the same instant, and
 * "..data" only ever names a complete version. A reader that opens a path
 * (`cat`, `source`) gets one whole file; a reader that opens "..data/" once
 * and reads several files through it gets them all from one version; tools
 * that watch a ConfigMap volume (inotify on the directory, waiting for
 * "..data" to be created or moved to) see one event per version. A set
 * whose bytes equal the current version is not published at all.
 *
 * The version just swapped out stays until the next publish, so a reader
 * that resolved "..data" just before a swap can finish reading it (only an
 * open that takes longer than two publishes can find its version gone and
 * fail with ENOENT: retry it); every older one is removed (unchanged files
 * share their inode, so this costs only the old bytes of the files that
 * changed). Version directories that "..data" does not name (a publisher
 * killed while writing one) and a leftover "..data_tmp" are removed when a
 * publisher opens the directory.
 *
 * Everything is done relative to a descriptor of dir, never following a
 * symlink or opening a FIFO found there: what another container puts on
 * the shared volume can make a publish fail with a clear error, but never
 * makes it write outside dir or block.
 *
 * Durability: on a disk, every written file and the version directory are
 * fsynced before the swap and dir after it, so after a crash "..data" names
 * the old or the new complete version. On tmpfs (the default volume,
 * `medium: Memory`) nothing survives a reboot and fsync is a no-op, so
 * those calls are skipped.
 */
#ifndef MESH_PUBLISH_H
#define MESH_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Upper bound of one published file and of a topology.json we read back. */
#define MESH_PUBLISH_MAX_FILE ((size_t)16 << 20)

/* Most files in one version (those of the set plus those carried over). */
#define MESH_PUBLISH_MAX_FILES 32

/* The symlink that names the current version. */
#define MESH_PUBLISH_DATA_LINK "..data"

/* One file of a set. name is a plain file name (no '/', not starting with
 * '.', under 128 bytes); data/len its full content. data NULL = keep this
 * file as the current version has it (hard-linked into the new version;
 * left out when there is none). differs: the caller knows data differs
 * from the current version's file (it published that file itself and knows
 * what changed since), so it is written without comparing it first; false
 * = compare, and hard-link an equal file instead of writing it. Everything
 * borrowed. */
struct mesh_publish_file {
    const char *name;
    const void *data;
    size_t len;
    bool differs;
};

/* A publisher of one directory: its descriptor and what it removes after
 * the next swap. One publisher per directory at a time. */
struct mesh_publish_dir;

/* Open dir for publishing and clean it up: remove version directories
 * "..data" does not name, a leftover "..data_tmp" (a publisher killed
 * mid-version) and spare and temp files of an older tpumesh
 * (".<name>.spare", ".<name>.XXXXXX"); failures of the cleanup are logged,
 * not returned (a read-only volume still reads). dir borrowed. Returns the
 * publisher (owned by caller, mesh_publish_dir_close), or NULL with err:
 * -MESH_E_INVAL for an empty dir, -MESH_E_PUBLISH when dir is missing, not
 * a directory or cannot be opened (the message names dir and the fix). */
struct mesh_publish_dir *mesh_publish_dir_open(const char *dir, struct mesh_err *err);

void mesh_publish_dir_close(struct mesh_publish_dir *p);

/* Publish a version made of the current version's files with the set's
 * applied (see struct mesh_publish_file); files of the current version
 * that the set does not name are carried over. Nothing is published when
 * no file's bytes differ from the current version (the symlinks are still
 * repaired if someone removed one). An out-dir holding the plain files of
 * an older tpumesh gets the layout on the first publish: each plain file is
 * replaced by its symlink with one rename, so a reader sees the old file or
 * the new one. *out_written (may be NULL) receives the number of files
 * written into the new version (0 = nothing published). Errors
 * (-MESH_E_PUBLISH, the message names the directory and what to do):
 * read-only file system, no space, permission denied, a directory (or
 * "..data" not being a symlink) where a file's symlink belongs, other I/O
 * failures; -MESH_E_INVAL for a bad name, a file above
 * MESH_PUBLISH_MAX_FILE or more than MESH_PUBLISH_MAX_FILES files. On error
 * "..data" still names the previous version whole, and the new version's
 * directory is removed; only the symlinks of names new in this version may
 * be missing when the error came after the swap (the message says so). */
int mesh_publish_dir_commit(struct mesh_publish_dir *p, const struct mesh_publish_file *files,
                            size_t n, size_t *out_written, struct mesh_err *err);

/* Where a commit stands when it calls the hook of mesh_publish_dir_on_swap. */
enum mesh_publish_swap {
    MESH_PUBLISH_SWAP_BEGIN,  /* "..data" is about to name the new version */
    MESH_PUBLISH_SWAP_DONE,   /* it does: the version is visible */
    MESH_PUBLISH_SWAP_FAILED, /* it still names the previous one */
};

/* Call fn(ctx, ...) around the rename that makes each committed version
 * visible: BEGIN right before it, then DONE or FAILED right after (before
 * the commit tidies up). What fn does between BEGIN and DONE a reader of
 * the files cannot miss: e.g. it holds a lock from BEGIN to DONE and counts
 * the publish inside, so whoever saw the new files and then takes the lock
 * sees the count. fn NULL removes the hook. p borrowed; ctx borrowed for
 * as long as the hook is set. */
void mesh_publish_dir_on_swap(struct mesh_publish_dir *p,
                              void (*fn)(void *ctx, enum mesh_publish_swap at), void *ctx);

/* When the last commit of p made its version visible (the rename of
 * "..data"), in mesh_sys_now_us() microseconds; 0 before the first. A
 * commit returns a little later: it then repairs symlinks and removes the
 * version before the one it replaced. p borrowed (NULL: 0). */
int64_t mesh_publish_dir_swapped_us(const struct mesh_publish_dir *p);

/* Open dir, commit one set and close it (tpumesh-init). Errors as
 * mesh_publish_dir_open and mesh_publish_dir_commit. */
int mesh_publish_files(const char *dir, const struct mesh_publish_file *files, size_t n,
                       size_t *out_written, struct mesh_err *err);

/* Read name of the current version in dir (through "..data"; a dir
 * without "..data" is read as an older tpumesh wrote it, plain files) whole
 * into *out_data (owned by caller, mesh_free; NUL-terminated) and its
 * length into *out_len. Never follows a symlink other than a valid
 * "..data" and never blocks on a FIFO. Returns 0, -ENOENT when there is no
 * such file, -EINVAL when it (or "..data") is not what the publisher
 * writes, -EFBIG above MESH_PUBLISH_MAX_FILE, or another -errno. */
int mesh_publish_read_file(const char *dir, const char *name, char **out_data, size_t *out_len);

/* True when the current version in dir (read as mesh_publish_read_file
 * does) has name holding exactly data/len. Never fails: an unreadable file
 * counts as different. */
bool mesh_publish_is_current(const char *dir, const char *name, const void *data, size_t len);

/* The "generation" of the current topology.json in dir, so a restarted
 * process continues the sequence (docs/DESIGN.md §4). *out_generation = 0 when
 * the file does not exist. A file that is unreadable, larger than
 * MESH_PUBLISH_MAX_FILE, not JSON, or without a non-negative integer
 * generation is tolerated: a warning is logged and *out_generation = 0.
 * *out_found (may be NULL) tells whether a valid generation was read.
 * Returns 0; the signature leaves room for hard errors. */
int mesh_publish_read_generation(const char *dir, uint64_t *out_generation, bool *out_found,
                                 struct mesh_err *err);

#endif
