/*
 * topo.h - TPU device coordinates and tensorflow.tpu.TopologyProto.
 *
 * Builds the device-coordinate array of a derived slice (accel.h), encodes
 * it as a TopologyProto (what TensorFlow's ConfigureDistributedTPU returns
 * and tf.tpu.experimental.Topology parses), parses and validates such a
 * proto, and checks a proto returned by a TPU against a known slice.
 *
 * Pure (libmeshcore, protobuf-c). Fields: proto/tensorflow/core/protobuf/tpu/
 * topology.proto; validation rules and texts: TensorFlow's
 * tensorflow/python/tpu/topology.py.
 *
 * Device order (our choice; TensorFlow accepts any order):
 *  - task t is worker index t (TPU_WORKER_ID = DTENSOR_CLIENT_ID);
 *  - hosts own blocks of chips_per_host_bounds chips (2x2x1 for a 4-chip
 *    VM, 2x4x1 for an 8-chip v5e/v6e VM, 1x1x1 for a 1-chip VM); host t sits
 *    at host-grid position (t % hx, (t / hx) % hy, t / (hx * hy)) of the
 *    host_bounds grid hx,hy,hz: x fastest, then y, then z;
 *  - inside a host, device d walks the block's chips x fastest, then y,
 *    then z, and for each chip its cores 0..mesh_shape[3]-1 (core minor):
 *    v3-8 task 0 is (0,0,0,0) (0,0,0,1) (1,0,0,0) (1,0,0,1) (0,1,0,0) ...
 */
#ifndef MESH_TOPO_H
#define MESH_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/accel.h"
#include "core/err.h"
#include "core/model.h"

/* Largest serialized TopologyProto accepted by mesh_topo_parse. */
#define MESH_TOPO_PB_MAX (4u << 20)
/* Most devices (mesh positions, and tasks * devices per task) accepted. */
#define MESH_TOPO_DEVICES_MAX (2 * MESH_ACCEL_CHIPS_MAX)

/* A parsed and validated TopologyProto. Initialise with
 * mesh_topo_info_init or a successful mesh_topo_parse; release with
 * mesh_topo_info_cleanup. */
struct mesh_topo_info {
    int mesh_shape[4];         /* [x, y, z, devices per chip], each >= 1 */
    int num_tasks;             /* field 2 */
    int devices_per_task;      /* field 3 (num_tpu_devices_per_task) */
    int32_t *coords;           /* owned: [num_tasks][devices_per_task][4], or NULL */
    size_t n_coords;           /* num_tasks * devices_per_task * 4 */
    bool has_hardware_feature; /* field 5 present */
    int embedding_feature;     /* TPUHardwareFeature.embedding_feature: 0 UNSUPPORTED,
                                  1 V1, 2 V2 (another value is kept as is) */
    int missing_devices;       /* mesh positions no device has (TF's missing_devices) */
    int duplicate_devices;     /* devices that repeat an earlier device's coordinates */
};

/* Make info empty (safe to clean up). */
void mesh_topo_info_init(struct mesh_topo_info *info);

/* Free info->coords and make info empty again. info may be NULL. */
void mesh_topo_info_cleanup(struct mesh_topo_info *info);

/* The device coordinates of slice s in the order documented above:
 * s->hosts * s->devices_per_host * 4 int32 values. s must come from
 * mesh_slice_derive (or be equally consistent: checked, -MESH_E_INVAL if
 * not). *out_coords is owned by the caller (mesh_free); both outputs are
 * written only on success. */
int mesh_topo_coords(const struct mesh_slice *s, int32_t **out_coords, size_t *out_n,
                     struct mesh_err *err);

/* Serialize the TopologyProto of slice s: mesh_shape (field 1, packed),
 * num_tasks = hosts (2), num_tpu_devices_per_task = devices_per_host (3),
 * device_coordinates (4, packed). Field 5 (hardware features) is not
 * written: it cannot be known without the TPU, and TensorFlow's own
 * Topology.serialized() leaves it out too.
 * *out_buf is owned by the caller (mesh_free); written only on success.
 * Errors: -MESH_E_INVAL for an inconsistent slice. */
int mesh_topo_build(const struct mesh_slice *s, uint8_t **out_buf, size_t *out_len,
                    struct mesh_err *err);

/* Parse len bytes of buf (no NUL needed) as a TopologyProto and validate it
 * as tf.tpu.experimental.Topology does (same texts):
 *  - "`mesh_shape` must be a vector of size 4 with positive entries; got [..]"
 *  - "`num_tasks` must be >= 0; got N", same for `num_tpu_devices_per_task`
 *  - "`device_coordinates` must have shape num_tasks (..) *
 *     num_tpu_devices_per_task (..) * len(mesh_shape) (4); got shape N"
 *  - "All values in `device_coordinates` must be >= 0, got V at index I"
 * plus what would crash TensorFlow or is not a TopologyProto: a coordinate
 * outside mesh_shape, unknown top-level fields, malformed or truncated wire
 * data (trailing garbage), more than MESH_TOPO_PB_MAX bytes
 * (-MESH_E_TOOBIG), more than MESH_TOPO_DEVICES_MAX devices (-MESH_E_RANGE).
 * Duplicated and missing devices are accepted, as TensorFlow does, and
 * counted in the info. Errors: -MESH_E_PARSE (wire), -MESH_E_INVAL (rules).
 * out: caller-allocated, filled only on success (then owns coords: call
 * mesh_topo_info_cleanup). */
int mesh_topo_parse(const uint8_t *buf, size_t len, struct mesh_topo_info *out,
                    struct mesh_err *err);

/* Check that a parsed topology (e.g. the one a legacy TPU Node returned
 * from ConfigureDistributedTPU) describes slice s: same mesh_shape, tasks =
 * hosts, devices per task = devices per host, every device exactly once,
 * and each task's devices filling exactly one chips_per_host_bounds block
 * of the host grid (block-aligned; the task order may differ from ours). Returns 0 or
 * -MESH_E_CONFIG with a message naming the first difference. Borrowed. */
int mesh_topo_check_slice(const struct mesh_topo_info *info, const struct mesh_slice *s,
                          struct mesh_err *err);

#endif
