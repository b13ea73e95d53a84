/*
 * workers.h - pod records -> the ordered worker list of docs/DESIGN.md §5, with
 * completeness and a one-line reason (docs/STYLE.md R8: pure, no I/O).
 *
 * Index sources, in precedence order (docs/DESIGN.md §5,
 * docs/worker-order.md):
 *   1. batch.kubernetes.io/job-completion-index (Indexed Job, JobSet)
 *   2. apps.kubernetes.io/pod-index (StatefulSet)
 *   3. none on any pod: natural pod-name order ("w-9" before "w-10")
 * Multi-slice JobSets are slice-major, worker-minor: a pod's index is
 *   slice * per_slice + worker, slice = jobset.sigs.k8s.io/job-global-index
 *   (else job-index), worker = its completion index.
 *
 * Rules:
 *   - an invalid pod record is left out and reported;
 *   - when some pods carry an index, a pod without one is left out and reported;
 *   - a terminating or finished pod yields its index to a live pod claiming it;
 *   - two live pods claiming one index, or a live pod with an index beyond the
 *     expected count, are reported and keep the topology incomplete (never
 *     wrong); in natural-order mode pods beyond the expected count are ignored
 *     and reported, and do not block;
 *   - with no expected count (0) the list shows the selected pods but is
 *     never complete (MESH_WORKERS_UNKNOWN_COUNT): "whatever pods exist"
 *     is not a job;
 *   - complete = every index 0..expected-1 has a live pod with its address
 *     (an IP; in dns mode also hostname and subdomain) and no conflict above.
 *     Readiness is reported, never required (docs/DESIGN.md §5 explains why).
 */
#ifndef MESH_WORKERS_H
#define MESH_WORKERS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "core/k8s_pod.h"
#include "core/model.h"

#define MESH_WORKERS_MAX 65536      /* most workers one topology may hold */
#define MESH_WORKERS_REASON_MAX 512 /* bytes of the /readyz reason line */
/* The reason when no expected count is known (what the user must set). */
#define MESH_WORKERS_UNKNOWN_COUNT "expected worker count unknown: set tpumesh.dev/expected-workers"

struct mesh_workers_opts {
    enum mesh_addr_mode mode; /* requested mode; AUTO resolves per docs/DESIGN.md §5 */
    int expected;  /* > 0: the worker count (flag, annotation, owner, slice); 0 = unknown:
                      the selected pods are listed but the list is never complete */
    int per_slice; /* hosts per slice for multi-slice JobSets; 0 = max completion index + 1 */
};

/* The result. workers[i].index == i for every slot; a slot with no pod has
 * workers[i].pod[0] == '\0'. */
struct mesh_workers {
    struct mesh_worker *workers; /* owned: ONE block holding the nworkers entries
                                    (== expected) and the strings they point to;
                                    valid after the records are gone */
    size_t nworkers;
    enum mesh_addr_mode mode; /* resolved: MESH_ADDR_DNS or MESH_ADDR_IP */
    bool complete;
    int present;                          /* slots with a live pod */
    int addressed;                        /* slots with a live pod that has its address */
    int ready;                            /* slots whose pod is Ready */
    char reason[MESH_WORKERS_REASON_MAX]; /* "" when complete, else e.g.
                                             "missing 3,7; no address 5; not ready 2" */
    char **problems; /* owned: one line per conflict or left-out pod, naming the
                        pods; stable text, so a caller can log each once */
    size_t nproblems;
    /* How the slots were assigned. */
    bool indexed;   /* from index labels (else natural name order) */
    long per_slice; /* hosts per slice used for slice-major indices */
};

/* Build *out from npods packed records (pods[i] borrowed, only during the
 * call: the result owns copies of every string it shows; NULL entries
 * skipped; any order: the result depends only on the set). out is
 * initialised here and must be released with mesh_workers_cleanup, also
 * after a failure. Cost: O(n) when pods carry indices (only the pods a
 * problem line names are sorted), O(n log n) in natural-order mode; a few
 * arrays of n entries and one string per problem line, no allocation per pod.
 * Returns 0 (complete or not), or -MESH_E_RANGE when the expected count
 * exceeds MESH_WORKERS_MAX. */
int mesh_workers_build(const struct mesh_k8s_pod_rec *const *pods, size_t npods,
                       const struct mesh_workers_opts *opts, struct mesh_workers *out,
                       struct mesh_err *err);

/* Release what mesh_workers_build allocated; w is empty afterwards. */
void mesh_workers_cleanup(struct mesh_workers *w);

/* Index of the slot holding pod `name` (borrowed), or -1. */
int mesh_workers_index_of(const struct mesh_workers *w, const char *name);

/* ---- one-block worker arrays (model.h: struct mesh_worker) ---- */

/* Cursor over the string area of a block being filled. */
struct mesh_workers_block {
    char *next; /* first free string byte */
    char *end;  /* one past the last string byte */
};

/* Allocate n zeroed workers (index 0, every string "", flags false)
 * followed by string_bytes bytes for their strings, all in one allocation
 * (owned by caller: a single mesh_free releases array and strings). *b is
 * set to the string area. n may be 0 (a valid block is still returned). */
struct mesh_worker *mesh_workers_block_alloc(size_t n, size_t string_bytes,
                                             struct mesh_workers_block *b);

/* Copy len bytes of s (borrowed, no NUL needed) plus a NUL into the block
 * and return the copy, borrowed from the block. len == 0 returns "" and
 * uses no bytes. The caller sized the block: asking for more than is left
 * is a programming error and aborts. */
const char *mesh_workers_block_put(struct mesh_workers_block *b, const char *s, size_t len);

/* A one-block copy of n workers (src borrowed; its strings may live
 * anywhere). Owned by caller, mesh_free. n == 0 returns a valid empty block. */
struct mesh_worker *mesh_workers_copy(const struct mesh_worker *src, size_t n);

/* Natural order of pod names: digit runs compare as numbers, so "w-9" sorts
 * before "w-10". Returns <0, 0, >0 like strcmp. */
int mesh_workers_name_cmp(const char *a, const char *b);

#endif
