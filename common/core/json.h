/*
 * json.h - cJSON helpers: bounded parsing and typed getters that never
 * crash on a missing key or a value of the wrong type.
 */
#ifndef MESH_JSON_H
#define MESH_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

/* Parse exactly len bytes of buf (no NUL needed). Fails with -MESH_E_TOOBIG
 * above max bytes and -MESH_E_PARSE on malformed JSON or trailing garbage.
 * A string escape \u0000 is read as U+FFFD (mesh_json_mask_nul_escapes), so
 * a string never ends early at a NUL and the validators reject the value.
 * Returns an owned tree (cJSON_Delete / mesh_autocjson) or NULL. */
cJSON *mesh_json_parse(const char *buf, size_t len, size_t max, struct mesh_err *err);

/* Where the trees of documents that are read and dropped whole (a watch event, a list item)
 * live: a bump allocator of chunks. cJSON allocates two or three blocks per JSON value
 * (~380 for a 3.4 KB Pod) and frees them one by one; malloc, free and cJSON_Delete's walk
 * were ~35 % of the sidecar's instructions per watch event (callgrind). Zeroed = empty. */
struct mesh_json_arena {
    struct mesh_json_chunk *chunks; /* owned: newest first */
    size_t next;                    /* bytes of the next chunk (0: 4 KiB) */
};

/* mesh_json_parse with every node of the tree allocated in a (empty or not). The tree is
 * borrowed from a: valid until mesh_json_arena_free(a), never to be given to cJSON_Delete
 * (mesh_autocjson) nor detached and kept. On failure NULL (what the parse allocated stays
 * in a until it is freed). cJSON's allocator hooks are set once at start-up (json.c):
 * outside such a parse they are malloc and free. */
cJSON *mesh_json_parse_arena(const char *buf, size_t len, size_t max, struct mesh_json_arena *a,
                             struct mesh_err *err);

/* Free every tree parsed into a; a is empty afterwards. Safe on an empty arena. */
void mesh_json_arena_free(struct mesh_json_arena *a);

/* Rewrite every JSON escape \u0000 in buf[0..len) (not an escaped backslash
 * followed by "u0000") to \ufffd in place; returns how many. */
size_t mesh_json_mask_nul_escapes(char *buf, size_t len);

/* Follow a dotted path of object keys ("metadata.labels"). Borrowed or NULL. */
const cJSON *mesh_json_path(const cJSON *o, const char *dotted);

/* The string at key of object o, or NULL when absent or not a string. Borrowed. */
const char *mesh_json_str(const cJSON *o, const char *key);

/* The integer at key: must be a JSON number with no fraction, or (when
 * allow_string) a decimal string, within [min, max]. -MESH_E_NOTFOUND when
 * absent, -MESH_E_INVAL / -MESH_E_RANGE otherwise. */
int mesh_json_int(const cJSON *o, const char *key, long long min, long long max, bool allow_string,
                  long long *out_value, struct mesh_err *err);

/* Parse a whole decimal integer string (optional leading '-', no spaces,
 * no '+', no leading zeros unless "0") within [min, max]. */
int mesh_parse_ll(const char *s, size_t len, long long min, long long max, long long *out_value,
                  struct mesh_err *err);

/* A streaming pre-scan that bounds what a parse of a JSON text would build
 * before any tree exists (a 4 MiB `[0,0,0,...]` is two million cJSON nodes,
 * about 130 MiB). Fed the text in pieces as it arrives; counts every value
 * (string, number, literal, array, object; an object key counts as one
 * too), the nesting depth and the length of each string, and stops at the
 * first cap exceeded. It checks no grammar: a text it passes may still be
 * malformed, which the parse then says. Pure. */
struct mesh_json_scan {
    size_t max_depth, max_values, max_string; /* the caps; 0 = that cap is off */
    size_t depth, values, str_len;            /* progress (read-only for callers) */
    unsigned char state;                      /* internal */
};

/* Start a scan with the given caps. */
void mesh_json_scan_init(struct mesh_json_scan *s, size_t max_depth, size_t max_values,
                         size_t max_string);
/* Scan the next len bytes. 0, or -MESH_E_TOOBIG with a message naming the
 * cap ("JSON nested deeper than 64 levels", "more than 100000 JSON values",
 * "a JSON string longer than 1048576 bytes"); after a failure every later
 * call fails the same way. */
int mesh_json_scan_feed(struct mesh_json_scan *s, const char *buf, size_t len,
                        struct mesh_err *err);

#endif
