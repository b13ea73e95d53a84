/*
 * publish.h - atomic publisher of the files on the shared volume
 * (docs/DESIGN.md §4).
 *
 * Every file is written to a temp file in the same directory (O_CLOEXEC,
 * mode 0644), fsynced, renamed over its final name, and the directory is
 * fsynced: a reader sees the old or the new version, never a mix. A file
 * whose bytes equal what is on disk is not touched (same inode, same
 * mtime). All temp files of a set are written and fsynced before the first
 * rename, so a full or read-only volume fails before anything is replaced
 * and leaves the previous files intact, with no temp files behind.
 */
#ifndef MESH_PUBLISH_H
#define MESH_PUBLISH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Temp files of this set older than this many seconds are what a killed
 * publisher left behind and are removed at the next publish. */
#define MESH_PUBLISH_STALE_S 60

/* Upper bound of one published file and of a topology.json we read back. */
#define MESH_PUBLISH_MAX_FILE ((size_t)16 << 20)

/* One file of a set. name is a plain file name (no '/', not starting with
 * '.'); data/len its full content. data NULL = leave this file as it is.
 * differs: the caller knows data differs from the file on disk (it wrote
 * that file itself and knows what changed since), so the file is written
 * without comparing it first; false = compare, and leave an equal file
 * untouched. Everything borrowed. */
struct mesh_publish_file {
    const char *name;
    const void *data;
    size_t len;
    bool differs;
};

/* Publish a set of files into dir, in array order (put the file readers
 * poll, topology.json, last). Stale temp files of the set's names (see
 * MESH_PUBLISH_STALE_S) are removed first. *out_written (may be NULL) receives the number
 * of files actually replaced (0 when everything was already current).
 * Errors (-MESH_E_PUBLISH, message names the directory and what to do):
 * missing directory, not a directory, read-only file system, no space,
 * permission denied, other I/O failures; -MESH_E_INVAL for a bad name or a
 * file above MESH_PUBLISH_MAX_FILE. On error no file of the set has been
 * replaced unless the failure came during the renames themselves (then the
 * files before the failing one are new and the rest are old, each whole). */
int mesh_publish_files(const char *dir, const struct mesh_publish_file *files, size_t n,
                       size_t *out_written, struct mesh_err *err);

/* mesh_publish_files for a publisher that replaces the same files again and
 * again (the sidecar): each file is written into its spare, a hidden
 * ".<name>.spare" in dir that holds an earlier version, and swapped into
 * place with renameat2(RENAME_EXCHANGE), so the version it replaces becomes
 * the next spare. Writing over pages the file system already holds avoids
 * allocating the file anew and freeing the old one on every publish (on
 * tmpfs, most of a write's cost). Readers see the same thing: every name
 * changes by one atomic rename, to a complete file. A spare is reused only
 * when it is a regular file with a single link that no process has open or
 * mapped (checked with a write lease, which the owner of the files may
 * always take); otherwise, and on the first publish, a new one is written.
 * The volume then holds each file about twice (what a publish holds anyway
 * while it runs). The caller must ignore SIGIO (or block it in every
 * thread): a process opening a spare while it is being rewritten breaks
 * the lease, which signals SIGIO; that open waits until the new version is
 * written, then reads it whole. One publisher per directory at a time. On
 * tmpfs nothing is fsynced (a no-op there). scan_stale: remove stale temp
 * files first, as mesh_publish_files always does (a caller publishing many
 * times a second asks for it at start and then now and then). Errors as
 * mesh_publish_files. */
int mesh_publish_files_swap(const char *dir, const struct mesh_publish_file *files, size_t n,
                            bool scan_stale, size_t *out_written, struct mesh_err *err);

/* Read dir/name whole into *out_data (owned by caller, mesh_free;
 * NUL-terminated) and its length into *out_len. Never follows a symlink and
 * never blocks on a FIFO. Returns 0, -ENOENT when there is no such file,
 * -EINVAL when it is not a regular file, -EFBIG above MESH_PUBLISH_MAX_FILE,
 * or another -errno. */
int mesh_publish_read_file(const char *dir, const char *name, char **out_data, size_t *out_len);

/* True when dir/name exists and holds exactly data/len. Never fails: an
 * unreadable file counts as different. */
bool mesh_publish_is_current(const char *dir, const char *name, const void *data, size_t len);

/* The "generation" of an existing dir/topology.json, so a restarted
 * process continues the sequence (docs/DESIGN.md §4). *out_generation = 0 when
 * the file does not exist. A file that is unreadable, larger than
 * MESH_PUBLISH_MAX_FILE, not JSON, or without a non-negative integer
 * generation is tolerated: a warning is logged and *out_generation = 0.
 * *out_found (may be NULL) tells whether a valid generation was read.
 * Returns 0; the signature leaves room for hard errors. */
int mesh_publish_read_generation(const char *dir, uint64_t *out_generation, bool *out_found,
                                 struct mesh_err *err);

#endif
