/*
 * render_int.h - what render.c shares with render_cache.c and nothing else:
 * the checked input the writers work from, the output writer, each file's
 * parts, and the checks. Not part of the render API (render.h); only the two
 * render files include it. Pure: no I/O.
 */
#ifndef MESH_RENDER_INT_H
#define MESH_RENDER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "render.h"

/* What the one validation pass of a render learns about a worker, so the
 * writers copy known lengths instead of measuring and checking every string
 * again for every file. */
struct mesh_render_wfacts {
    uint16_t pod_len;  /* < MESH_POD_MAX */
    uint16_t host_len; /* < MESH_HOST_MAX */
    uint8_t ip_len;    /* < MESH_IP_MAX */
    bool host_v6;      /* host is an IPv6 literal: "[host]:port" */
    bool ip_v6;
};

/* A checked input, ready for the writers. */
struct mesh_render_prep {
    const struct mesh_render_input *in;
    struct mesh_render_wfacts *f; /* owned; one per worker, NULL when there are none */
    enum mesh_addr_mode mode;     /* effective: dns or ip */
    size_t text_bytes;            /* sum of every worker's pod, host and ip lengths */
    size_t addr_bytes;            /* sum of the bare addresses in mode */
    char port[8];                 /* ":<port>" of in->port */
    size_t port_len;
    /* Slices (render.h): derived by mesh_render_prep_slices. */
    int nslices;     /* >= 1 */
    int total;       /* workers of the whole job (mesh_render_expected_of) */
    int hps;         /* hosts per slice */
    int self_slice;  /* this pod's slice, -1 = unknown */
    int base_idx;    /* global index of this pod's slice's worker 0 (0 when unknown) */
    size_t base_pos; /* its position in workers[] */
    uint64_t digest; /* workersDigest, set by prep_digest */
    uint64_t *ah;    /* owned or NULL: each worker's address hash (prep_digest) */
};

struct mesh_render_wr {
    char *data; /* owned */
    size_t len;
    size_t cap; /* > len: room for the NUL */
};

/* The parts of each text file (topology.pb is binary, not rendered here).
 * jax.env names worker 0 only: it is all prefix. */
struct mesh_render_parts {
    size_t (*hint)(const struct mesh_render_prep *p);
    void (*prefix)(struct mesh_render_wr *w, const struct mesh_render_prep *p);
    void (*frag)(struct mesh_render_wr *w, const struct mesh_render_prep *p,
                 size_t i);                                                     /* NULL: no list */
    void (*suffix)(struct mesh_render_wr *w, const struct mesh_render_prep *p); /* NULL: none */
};

/* The file parts of each text file, indexed by mesh_render_file_id
 * (topology.pb's entry is empty: prefix NULL). */
extern const struct mesh_render_parts mesh_render_file_parts[MESH_FILE__COUNT];

/* The job's worker count: in->expected, or the list size when it is 0 (the
 * whole job's count when only one slice is listed). */
int mesh_render_expected_of(const struct mesh_render_input *in);

/* Fill p's slice fields (nslices, total, hps, self_slice, base_idx,
 * base_pos) from p->in, which mesh_render_check_common accepted. */
void mesh_render_prep_slices(struct mesh_render_prep *p);

/* Release what p owns (the worker facts, the address hashes); p may be
 * reused. */
void mesh_render_prep_cleanup(struct mesh_render_prep *p);

/* Check one worker (mesh_render_check_worker's rules and words) and fill
 * *f with its lengths and address families. 0 or -MESH_E_INVAL. */
int mesh_render_check_worker_facts(const struct mesh_worker *w, struct mesh_render_wfacts *f,
                                   struct mesh_err *err);

/* The checks every renderer runs on its input (sizes, port, generation,
 * mode, job name, slices, each worker once); on success *p is ready for the
 * writers (mesh_render_prep_cleanup it), on failure it holds nothing.
 * Errors: -MESH_E_RANGE, -MESH_E_INVAL naming the value. */
int mesh_render_check_common(const struct mesh_render_input *in, struct mesh_render_prep *p,
                             struct mesh_err *err);

/* The slice's accelerator type and topology are within their buffers
 * (-MESH_E_INVAL otherwise); s may be NULL. */
int mesh_render_check_slice_terminated(const struct mesh_slice *s, struct mesh_err *err);

/* The slice's accelerator type and topology are plain tokens that are safe
 * in an env file (-MESH_E_INVAL otherwise). */
int mesh_render_check_slice_tokens(const struct mesh_slice *s, struct mesh_err *err);

/* Every check of the whole file set, in the order the renderers run them
 * (the first failure wins); on success *p is ready for the writers. */
int mesh_render_check_all(const struct mesh_render_input *in, struct mesh_render_prep *p,
                          struct mesh_err *err);

/* Does the file set of in include file id? topology.json always; the others
 * only for a complete topology (a listed slice of a multi-slice job: only
 * tpu.env and jax.env). */
bool mesh_render_renders(const struct mesh_render_input *in, int id);

/* workersDigest's parts: the hash of worker i's address as the files write
 * it, and the fold of every (index, address hash) pair in list order. */
uint64_t mesh_render_addr_hash(const struct mesh_render_prep *p, size_t i);
uint64_t mesh_render_fold_digest(const struct mesh_worker *w, const uint64_t *ah, size_t n);

/* Start an output block of about hint bytes (it grows when short). */
void mesh_render_wr_init(struct mesh_render_wr *w, size_t hint);

/* Write one whole file: prefix, each worker's fragment, suffix. off (may be
 * NULL; nworkers + 1 entries for a file with a list) receives where each
 * fragment and, last, the suffix starts. *out_data is owned by the caller
 * (mesh_free), NUL-terminated, *out_len bytes. */
void mesh_render_write_file(enum mesh_render_file_id id, const struct mesh_render_prep *p,
                            uint32_t *off, char **out_data, size_t *out_len);

#endif
