/*
 * topo.c - device coordinates of a slice and the tensorflow.tpu.TopologyProto
 * that carries them: build, serialize (protobuf-c), parse and validate.
 *
 * Pure: protobuf-c with an allocator that goes through mesh_malloc, no I/O.
 * Wire format (proto/tensorflow/core/protobuf/tpu/topology.proto):
 *   1 mesh_shape                repeated int32, packed (tag 0x0A, length, varints)
 *   2 num_tasks                 int32 (tag 0x10)
 *   3 num_tpu_devices_per_task  int32 (tag 0x18)
 *   4 device_coordinates        repeated int32, packed (tag 0x22)
 *   5 tpu_hardware_feature      TPUHardwareFeature (tag 0x2A)
 * The validation rules and their texts are TensorFlow's Topology._parse_topology.
 */
#include <stdio.h>
#include <string.h>

#include "tensorflow/core/protobuf/tpu/topology.pb-c.h"

#include "core/mem.h"
#include "topo.h"

static void *pb_alloc(void *data, size_t n)
{
    (void)data;
    return mesh_malloc(n != 0 ? n : 1);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    mesh_free(p);
}

void mesh_topo_info_init(struct mesh_topo_info *info)
{
    memset(info, 0, sizeof(*info));
}

void mesh_topo_info_cleanup(struct mesh_topo_info *info)
{
    if (info == NULL) {
        return;
    }
    mesh_free(info->coords);
    mesh_topo_info_init(info);
}

/* A slice is usable for coordinates when its fields agree with each other
 * (what mesh_slice_derive guarantees); hand-built slices are checked. */
static int slice_check(const struct mesh_slice *s, struct mesh_err *err)
{
    if (s == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "topology: no slice");
    }
    long long chips = 1, hosts = 1, cph = 1;
    bool ok = s->mesh_shape[3] == 1 || s->mesh_shape[3] == 2;
    for (int i = 0; i < 3 && ok; i++) {
        ok = s->dims[i] >= 1 && s->dims[i] <= MESH_ACCEL_DIM_MAX && s->host_bounds[i] >= 1 &&
             s->chips_per_host_bounds[i] >= 1 && s->mesh_shape[i] == s->dims[i] &&
             (long long)s->host_bounds[i] * s->chips_per_host_bounds[i] == s->dims[i];
        chips *= s->dims[i];
        hosts *= s->host_bounds[i];
        cph *= s->chips_per_host_bounds[i];
    }
    ok = ok && chips == s->chips && chips <= MESH_ACCEL_CHIPS_MAX && hosts == s->hosts &&
         cph == s->chips_per_host && (long long)s->devices_per_host == cph * s->mesh_shape[3];
    if (!ok) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "topology: slice '%.32s' '%.32s' is not consistent (derive it with "
                            "mesh_slice_derive)",
                            s->accelerator_type, s->topology);
    }
    return 0;
}

int mesh_topo_coords(const struct mesh_slice *s, int32_t **out_coords, size_t *out_n,
                     struct mesh_err *err)
{
    int rc = slice_check(s, err);
    if (rc != 0) {
        return rc;
    }
    const int *hb = s->host_bounds, *bb = s->chips_per_host_bounds;
    int cores = s->mesh_shape[3];
    size_t n = (size_t)s->hosts * (size_t)s->devices_per_host * 4;
    int32_t *c = mesh_calloc(n, sizeof(*c));
    size_t k = 0;
    for (int t = 0; t < s->hosts; t++) {
        /* host-grid position of task t: x fastest, then y, then z */
        int ox = (t % hb[0]) * bb[0];
        int oy = ((t / hb[0]) % hb[1]) * bb[1];
        int oz = (t / (hb[0] * hb[1])) * bb[2];
        for (int z = 0; z < bb[2]; z++) {
            for (int y = 0; y < bb[1]; y++) {
                for (int x = 0; x < bb[0]; x++) {
                    for (int core = 0; core < cores; core++) {
                        c[k++] = ox + x;
                        c[k++] = oy + y;
                        c[k++] = oz + z;
                        c[k++] = core;
                    }
                }
            }
        }
    }
    *out_coords = c;
    *out_n = n;
    return 0;
}

int mesh_topo_build(const struct mesh_slice *s, uint8_t **out_buf, size_t *out_len,
                    struct mesh_err *err)
{
    int32_t *coords = NULL;
    size_t n = 0;
    int rc = mesh_topo_coords(s, &coords, &n, err);
    if (rc != 0) {
        return mesh_err_prefix(err, "build TopologyProto");
    }
    int32_t shape[4] = {s->mesh_shape[0], s->mesh_shape[1], s->mesh_shape[2], s->mesh_shape[3]};
    Tensorflow__Tpu__TopologyProto msg = TENSORFLOW__TPU__TOPOLOGY_PROTO__INIT;
    msg.n_mesh_shape = 4;
    msg.mesh_shape = shape;
    msg.num_tasks = s->hosts;
    msg.num_tpu_devices_per_task = s->devices_per_host;
    msg.n_device_coordinates = n;
    msg.device_coordinates = coords;
    size_t len = tensorflow__tpu__topology_proto__get_packed_size(&msg);
    uint8_t *buf = mesh_malloc(len != 0 ? len : 1);
    size_t wrote = tensorflow__tpu__topology_proto__pack(&msg, buf);
    mesh_free(coords);
    if (wrote != len) {
        mesh_free(buf);
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "build TopologyProto: protobuf-c packed %zu bytes, expected %zu", wrote,
                            len);
    }
    *out_buf = buf;
    *out_len = len;
    return 0;
}

/* "[2, 2, 1, 2]" (numpy-like) for messages; at most 6 values. */
static const char *format_list(const int32_t *v, size_t n, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    used += (size_t)snprintf(out, cap, "[");
    for (size_t i = 0; i < n && i < 6 && used < cap; i++) {
        used += (size_t)snprintf(out + used, cap - used, "%s%d", i == 0 ? "" : ", ", (int)v[i]);
    }
    if (used < cap) {
        snprintf(out + used, cap - used, "%s]", n > 6 ? ", ..." : "");
    }
    return out;
}

/* TensorFlow's Topology._parse_topology rules
 * (tensorflow/python/tpu/topology.py) on the decoded message, in its order
 * and with its texts, then the bounds check that keeps the inverse map
 * (_invert_topology indexes a mesh-shaped array with each coordinate) in
 * range. One deliberate difference: where TensorFlow's shape message says
 * "len(mesh_shape) (...)" it prints the whole mesh_shape; we print 4. */
static int validate(const Tensorflow__Tpu__TopologyProto *m, struct mesh_err *err)
{
    char l[96];
    bool shape_ok = m->n_mesh_shape == 4;
    for (size_t i = 0; i < m->n_mesh_shape && shape_ok; i++) {
        shape_ok = m->mesh_shape[i] >= 1;
    }
    if (!shape_ok) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "`mesh_shape` must be a vector of size 4 with positive entries; got %s",
                            format_list(m->mesh_shape, m->n_mesh_shape, l, sizeof(l)));
    }
    if (m->num_tasks < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "`num_tasks` must be >= 0; got %d",
                            (int)m->num_tasks);
    }
    if (m->num_tpu_devices_per_task < 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "`num_tpu_devices_per_task` must be >= 0; got %d",
                            (int)m->num_tpu_devices_per_task);
    }
    long long devices = (long long)m->num_tasks * m->num_tpu_devices_per_task;
    long long mesh = 1;
    for (int i = 0; i < 4; i++) {
        mesh *= m->mesh_shape[i];
        if (mesh > MESH_TOPO_DEVICES_MAX) {
            break;
        }
    }
    if (devices > MESH_TOPO_DEVICES_MAX || mesh > MESH_TOPO_DEVICES_MAX) {
        return mesh_err_set(err, MESH_E_RANGE, 0,
                            "TopologyProto has %lld devices on a mesh of %s; at most %d are "
                            "supported",
                            devices, format_list(m->mesh_shape, 4, l, sizeof(l)),
                            MESH_TOPO_DEVICES_MAX);
    }
    if ((long long)m->n_device_coordinates != devices * 4) {
        return mesh_err_set(err, MESH_E_INVAL, 0,
                            "`device_coordinates` must have shape num_tasks (%d) * "
                            "num_tpu_devices_per_task (%d) * len(mesh_shape) (4); got shape %zu",
                            (int)m->num_tasks, (int)m->num_tpu_devices_per_task,
                            m->n_device_coordinates);
    }
    for (size_t i = 0; i < m->n_device_coordinates; i++) {
        if (m->device_coordinates[i] < 0) {
            return mesh_err_set(
                err, MESH_E_INVAL, 0,
                "All values in `device_coordinates` must be >= 0, got %d at index %zu",
                (int)m->device_coordinates[i], i);
        }
        /* TensorFlow would index its inverse map with this value and fail
         * with an IndexError: reject it with a message instead. */
        if (m->device_coordinates[i] >= m->mesh_shape[i % 4]) {
            size_t dev = i / 4;
            return mesh_err_set(err, MESH_E_INVAL, 0,
                                "device %zu of task %zu has coordinate %d on axis %zu, outside "
                                "mesh_shape %s",
                                dev % (size_t)m->num_tpu_devices_per_task,
                                dev / (size_t)m->num_tpu_devices_per_task,
                                (int)m->device_coordinates[i], i % 4,
                                format_list(m->mesh_shape, 4, l, sizeof(l)));
        }
    }
    return 0;
}

/* Count mesh positions without a device and devices that repeat one. */
static void count_coverage(struct mesh_topo_info *info)
{
    const int *ms = info->mesh_shape;
    size_t mesh = (size_t)ms[0] * ms[1] * ms[2] * ms[3];
    unsigned char *seen = mesh_calloc(mesh != 0 ? mesh : 1, 1);
    size_t used = 0;
    info->duplicate_devices = 0;
    for (size_t i = 0; i + 3 < info->n_coords; i += 4) {
        const int32_t *c = &info->coords[i];
        size_t pos =
            (((size_t)c[2] * ms[1] + (size_t)c[1]) * ms[0] + (size_t)c[0]) * ms[3] + (size_t)c[3];
        if (seen[pos]) {
            info->duplicate_devices++;
        } else {
            seen[pos] = 1;
            used++;
        }
    }
    info->missing_devices = (int)(mesh - used);
    mesh_free(seen);
}

int mesh_topo_parse(const uint8_t *buf, size_t len, struct mesh_topo_info *out,
                    struct mesh_err *err)
{
    if (buf == NULL && len != 0) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "TopologyProto: no buffer");
    }
    if (len > MESH_TOPO_PB_MAX) {
        return mesh_err_set(err, MESH_E_TOOBIG, 0,
                            "TopologyProto is %zu bytes, more than the %u accepted", len,
                            MESH_TOPO_PB_MAX);
    }
    ProtobufCAllocator alloc = {pb_alloc, pb_free, NULL};
    static const uint8_t empty[1] = {0};
    Tensorflow__Tpu__TopologyProto *m =
        tensorflow__tpu__topology_proto__unpack(&alloc, len, len != 0 ? buf : empty);
    if (m == NULL) {
        return mesh_err_set(err, MESH_E_PARSE, 0,
                            "TopologyProto (%zu bytes) is not a valid protobuf message: truncated, "
                            "malformed or followed by garbage",
                            len);
    }
    int rc = 0;
    if (m->base.n_unknown_fields != 0) {
        rc = mesh_err_set(err, MESH_E_PARSE, 0,
                          "TopologyProto has an unknown field %u (expected fields 1-5 only): "
                          "not a TopologyProto, or followed by garbage",
                          (unsigned)m->base.unknown_fields[0].tag);
    }
    if (rc == 0) {
        rc = validate(m, err);
    }
    if (rc != 0) {
        tensorflow__tpu__topology_proto__free_unpacked(m, &alloc);
        return rc;
    }
    struct mesh_topo_info info;
    mesh_topo_info_init(&info);
    for (int i = 0; i < 4; i++) {
        info.mesh_shape[i] = m->mesh_shape[i];
    }
    info.num_tasks = m->num_tasks;
    info.devices_per_task = m->num_tpu_devices_per_task;
    info.n_coords = m->n_device_coordinates;
    info.coords = mesh_calloc(info.n_coords != 0 ? info.n_coords : 1, sizeof(int32_t));
    if (info.n_coords != 0) {
        memcpy(info.coords, m->device_coordinates, info.n_coords * sizeof(int32_t));
    }
    if (m->tpu_hardware_feature != NULL) {
        info.has_hardware_feature = true;
        info.embedding_feature = (int)m->tpu_hardware_feature->embedding_feature;
    }
    tensorflow__tpu__topology_proto__free_unpacked(m, &alloc);
    count_coverage(&info);
    *out = info;
    return 0;
}

/* The bounding box of task t's devices: min in lo, extent in ext. */
static void task_box(const struct mesh_topo_info *info, int t, int lo[3], int ext[3])
{
    int hi[3] = {0, 0, 0};
    const int32_t *c = &info->coords[(size_t)t * info->devices_per_task * 4];
    for (int a = 0; a < 3; a++) {
        lo[a] = c[a];
        hi[a] = c[a];
    }
    for (int d = 1; d < info->devices_per_task; d++) {
        for (int a = 0; a < 3; a++) {
            int v = c[(size_t)d * 4 + a];
            lo[a] = v < lo[a] ? v : lo[a];
            hi[a] = v > hi[a] ? v : hi[a];
        }
    }
    for (int a = 0; a < 3; a++) {
        ext[a] = hi[a] - lo[a] + 1;
    }
}

int mesh_topo_check_slice(const struct mesh_topo_info *info, const struct mesh_slice *s,
                          struct mesh_err *err)
{
    char l1[64], l2[64], b[MESH_ACCEL_BOUNDS_MAX];
    int rc = slice_check(s, err);
    if (rc != 0) {
        return rc;
    }
    if (info == NULL || info->coords == NULL) {
        return mesh_err_set(err, MESH_E_INVAL, 0, "topology check: no parsed topology");
    }
    int32_t want[4] = {s->mesh_shape[0], s->mesh_shape[1], s->mesh_shape[2], s->mesh_shape[3]};
    int32_t got[4] = {info->mesh_shape[0], info->mesh_shape[1], info->mesh_shape[2],
                      info->mesh_shape[3]};
    if (memcmp(want, got, sizeof(want)) != 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "the TPU reports mesh_shape %s but %s (topology %s) has %s",
                            format_list(got, 4, l1, sizeof(l1)), s->accelerator_type, s->topology,
                            format_list(want, 4, l2, sizeof(l2)));
    }
    if (info->num_tasks != s->hosts || info->devices_per_task != s->devices_per_host) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "the TPU reports %d tasks of %d devices but %s has %d hosts of %d "
                            "devices",
                            info->num_tasks, info->devices_per_task, s->accelerator_type, s->hosts,
                            s->devices_per_host);
    }
    if (info->duplicate_devices != 0 || info->missing_devices != 0) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "the TPU topology has %d duplicated and %d missing devices; every "
                            "device of the %s mesh must appear exactly once",
                            info->duplicate_devices, info->missing_devices, s->topology);
    }
    for (int t = 0; t < info->num_tasks; t++) {
        int lo[3], ext[3];
        task_box(info, t, lo, ext);
        /* Every device appears once and a task has exactly as many devices
         * as a block holds, so a bounding box of exactly the block size
         * means the task fills that block. Boxes of one size that tile the
         * mesh are forced onto the block grid (the box covering the lowest
         * uncovered chip starts there), so alignment needs no check. */
        if (ext[0] != s->chips_per_host_bounds[0] || ext[1] != s->chips_per_host_bounds[1] ||
            ext[2] != s->chips_per_host_bounds[2]) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "task %d's devices span %dx%dx%d chips from (%d,%d,%d), not one "
                                "host block of %s chips",
                                t, ext[0], ext[1], ext[2], lo[0], lo[1], lo[2],
                                mesh_accel_format_bounds(s->chips_per_host_bounds, b, sizeof(b)));
        }
    }
    return 0;
}
