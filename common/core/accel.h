/*
 * accel.h - the accelerator model: TPU accelerator types, GKE accelerator
 * labels, topology strings, and the derivation of a complete, consistent
 * struct mesh_slice (model.h) from whatever subset of them is known.
 *
 * Pure (libmeshcore): no I/O, no allocation that outlives a call.
 * Facts from TensorFlow (tpu/topology.py, the v2/v3 host-bounds table), Google's
 * xpk machine table (system_characteristics.py) and GKE's TPU node labels.
 */
#ifndef MESH_ACCEL_H
#define MESH_ACCEL_H

#include <stddef.h>

#include "core/err.h"
#include "core/model.h"

/* Upper bounds accepted by the parsers (input limits, docs/STYLE.md R9). The
 * largest real slices are around 9216 chips (TPU7x pod); 65536 leaves room
 * while keeping a TopologyProto for the slice bounded. */
#define MESH_ACCEL_CHIPS_MAX 65536
#define MESH_ACCEL_DIM_MAX 4096
#define MESH_ACCEL_SUFFIX_MAX (2 * MESH_ACCEL_CHIPS_MAX)
#define MESH_ACCEL_INPUT_MAX 64 /* longest type / label / topology string accepted */

/* Room for any "x,y,z" bounds string produced by mesh_accel_format_bounds. */
#define MESH_ACCEL_BOUNDS_MAX 40

/* Parse an accelerator type: "v2-N", "v3-N", "v4-N", "v5p-N", "v5litepod-N",
 * "v6e-N" or "tpu7x-N". Strict: lower case, no spaces, N a
 * positive decimal integer without sign or leading zeros, N <=
 * MESH_ACCEL_SUFFIX_MAX. N is the raw suffix (TensorCores for
 * v2/v3/v4/v5p/tpu7x, chips for v5litepod/v6e); its consistency with the
 * generation (even core counts, v2/v3 table sizes) is checked by
 * mesh_slice_derive, not here.
 * s: borrowed NUL-terminated string. out_gen, out_suffix: written on success.
 * Returns 0, or -MESH_E_INVAL (NULL/empty/unknown prefix/bad number) with a
 * message naming the accepted forms. */
int mesh_accel_parse_type(const char *s, enum mesh_tpu_gen *out_gen, int *out_suffix,
                          struct mesh_err *err);

/* Map a GKE node label value (cloud.google.com/gke-tpu-accelerator) to its
 * generation: "tpu-v4-podslice" v4, "tpu-v5-lite-podslice" v5e,
 * "tpu-v5p-slice" v5p, "tpu-v6e-slice" v6e, "tpu7x" tpu7x, "tpu-v3-slice" and
 * "tpu-v3-device" v3. Exact match.
 * label: borrowed. Returns 0, or -MESH_E_INVAL listing the known values. */
int mesh_accel_gen_from_gke_label(const char *label, enum mesh_tpu_gen *out_gen,
                                  struct mesh_err *err);

/* Parse a topology string "AxB" or "AxBxC" (lower-case 'x'; each dimension a
 * positive decimal integer, no leading zeros, <= MESH_ACCEL_DIM_MAX; product
 * <= MESH_ACCEL_CHIPS_MAX). out_dims gets A, B and C (C = 1 for "AxB");
 * out_ndims gets 2 or 3. Both written only on success.
 * Returns 0, or -MESH_E_INVAL / -MESH_E_RANGE with a message. */
int mesh_accel_parse_topology(const char *s, int out_dims[3], int *out_ndims, struct mesh_err *err);

/* Derive a complete slice from what is known (struct mesh_slice_spec: every
 * field optional). Fills every field of *out on success; *out is untouched
 * on failure.
 *
 * Rules:
 *  - generation from the accelerator type and/or the GKE label; both given
 *    must agree. Neither given: -MESH_E_CONFIG.
 *  - chips from the type (suffix/2 for v2/v3/v4/v5p/tpu7x, suffix for
 *    v5litepod/v6e), the topology (product) or hosts * chips_per_host; all
 *    that are given must agree.
 *  - chips per host: the given value; else chips / hosts when hosts is
 *    given; else the default: 4 for v2/v3/v4/v5p, and for v5e/v6e/tpu7x
 *    xpk's rule "1 if the slice has 1 chip, else 4" (it
 *    counts GKE VMs, not GCE physical hosts). So v5litepod-8/v6e-8 "2x4" is
 *    2 hosts of 4 chips unless chips_per_host 8 or hosts 1 says it is one
 *    8-chip VM. Allowed: 4 for v2/v3/v4/v5p, 1/4/8 for v5e/v6e, 1/4 for
 *    tpu7x; 1-chip VMs only for a 1-chip slice (xpk). 8-chip VMs may form
 *    multi-host slices (GCE counts v5e hosts of 8 chips).
 *  - chips-per-host bounds (the host block): 1 chip 1,1,1; 4 chips 2,2,1;
 *    8 chips 2,4,1. The topology must divide into such blocks; host bounds
 *    = topology / block per axis.
 *  - topology written AxB for v2/v3/v5e/v6e (an "AxBx1" input is accepted
 *    and written AxB) and AxBxC for v4/v5p/tpu7x.
 *  - v2/v3: the type must be in TensorFlow's host-bounds table;
 *    topology = host bounds * 2,2,1.
 *  - no topology given: the default is the most compact shape (smallest
 *    max/min dimension ratio, dimensions non-decreasing) among the shapes
 *    that divide into host blocks; 3-D slices of 64+ chips only consider
 *    shapes whose every dimension is a multiple of 4 (4x4x4 cubes); a single
 *    4-chip v4/v5p/tpu7x host is 2x2x1. It is used when it is the only
 *    shape or the unique most compact one (below 64 chips also with ratio
 *    <= 2). This reproduces every topology of xpk's machine table (tested);
 *    otherwise -MESH_E_CONFIG lists the possible topologies (most compact
 *    first) and asks for TPU_TOPOLOGY. A given topology may be any
 *    permutation that divides into host blocks (4x2x2 is kept as 4x2x2).
 *  - devices per chip (TF/JAX devices): 2 for v2/v3 (one per TensorCore),
 *    1 for v4/v5p (megacore) and v5e/v6e, 2 for tpu7x (no megacore; JAX
 *    ChipVersion 7x). devices_per_host = chips_per_host * that;
 *    mesh_shape = [x, y, z, devices per chip].
 * Inconsistent input is -MESH_E_CONFIG with a message saying what would be
 * consistent, e.g. "v4-32 has 16 chips but topology 2x2x2 has 8; v4-32 uses
 * 2x2x4 (or 2x4x2, 4x2x2)". Unparseable strings are -MESH_E_INVAL.
 * in: borrowed. out: caller-allocated. */
int mesh_slice_derive(const struct mesh_slice_spec *in, struct mesh_slice *out,
                      struct mesh_err *err);

/* The accelerator-type prefix of a generation: "v2", "v3", "v4", "v5p",
 * "v5litepod", "v6e", "tpu7x"; "unknown" for MESH_GEN_UNKNOWN or any other
 * value. Static string. */
const char *mesh_accel_gen_name(enum mesh_tpu_gen g);

/* The GKE accelerator label of a generation ("tpu-v4-podslice", ...;
 * "tpu-v3-slice" for v3), or NULL when it has none (v2, unknown). Static. */
const char *mesh_accel_gen_gke_label(enum mesh_tpu_gen g);

/* Format three bounds as "x,y,z" (TPU_HOST_BOUNDS, TPU_CHIPS_PER_HOST_BOUNDS)
 * into out (caller-owned, out_len bytes; MESH_ACCEL_BOUNDS_MAX always
 * suffices). Always NUL-terminates when out_len > 0. Returns out. */
char *mesh_accel_format_bounds(const int bounds[3], char *out, size_t out_len);

#endif
