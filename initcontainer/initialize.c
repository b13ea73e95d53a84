/*
 * initialize.c - the initialize step of tpumesh-init (init.h).
 *
 * Two very different things hide behind "TPU system initialization":
 *
 *  - TPU Node (legacy, ctx->kind MESH_TPU_NODE_GRPC/_API): the TPU hosts run
 *    a TensorFlow server; initialization state lives there and survives us.
 *    We do what `sess.run(tf.compat.v1.tpu.initialize_system())` does over
 *    TensorFlow's master gRPC protocol and keep the TopologyProto it returns.
 *
 *  - TPU VM (MESH_TPU_VM_LOCAL): the TPU is attached to this host and the
 *    trainer loads libtpu in-process; an initialized TPU does not survive the
 *    process that initialized it. So we only run a
 *    preflight: the device nodes are there, as many as the host's chips, and
 *    nobody holds the libtpu lock. We never open a device and never take the
 *    lock: the trainer must get both.
 *
 * Environment (besides the flags in ctx->opts): TPUMESH_LOCK_DIR replaces
 * /tmp as the directory of libtpu's lock files, TPUMESH_SYS_DIR replaces
 * /sys for the PCI diagnostic; both exist for tests and unusual mounts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/mem.h"
#include "core/topo.h"
#include "io/log.h"
#include "io/sys.h"
#include "tf_master.h"
#include "init.h"

#define MOD "init"

/* Upper bound on directory entries we look at in --dev-dir, the lock
 * directory and sysfs's PCI list: a real /dev has a few hundred. */
#define MAX_DIR_ENTRIES 65536

static void closedir_p(DIR **d)
{
    if (*d != NULL) {
        closedir(*d);
    }
}
#define autoclosedir __attribute__((cleanup(closedir_p)))

/* True when s is "<prefix><one or more digits>" (accel0, 12). */
static bool is_prefix_number(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] == '\0') {
        return false;
    }
    for (const char *p = s + n; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
    }
    return true;
}

/* Count entries of dir whose name is prefix + digits. A missing directory
 * counts 0; any other failure to read it is an I/O error. */
static int count_numbered(const char *dir, const char *prefix, int *out_n, struct mesh_err *err)
{
    DIR *d autoclosedir = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT || errno == ENOTDIR) {
            *out_n = 0;
            return 0;
        }
        return mesh_err_set(err, MESH_E_IO, errno, "cannot list device directory '%s'", dir);
    }
    int n = 0;
    int seen = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && seen++ < MAX_DIR_ENTRIES) {
        if (is_prefix_number(de->d_name, prefix)) {
            n++;
        }
    }
    *out_n = n;
    return 0;
}

/* Count the TPU device nodes under dev_dir the way libtpu finds them
 * (/dev/accel<N>, else /dev/vfio/<N> on newer generations).
 * We only list names: opening a device could race the trainer for it. */
static int count_tpu_devices(const char *dev_dir, int *out_n, const char **out_kind,
                             struct mesh_err *err)
{
    int accel = 0;
    int vfio = 0;
    int rc = count_numbered(dev_dir, "accel", &accel, err);
    if (rc < 0) {
        return rc;
    }
    mesh_autofree char *vfio_dir = mesh_asprintf("%s/vfio", dev_dir);
    rc = count_numbered(vfio_dir, "", &vfio, err);
    if (rc < 0) {
        return rc;
    }
    if (accel > 0) {
        *out_n = accel;
        *out_kind = "accel";
    } else {
        *out_n = vfio;
        *out_kind = "vfio";
    }
    return 0;
}

/* Is the POSIX record lock that libtpu takes with lockf(F_TLOCK) on path
 * held by a process? We test with F_GETLK, which reports a conflicting lock
 * without taking one, and we never create the file. A file that is absent or
 * that we may not read is "not held as far as we can tell". */
static int check_lock_file(const char *path, struct mesh_err *err)
{
    int fd mesh_autoclose = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            mesh_warn(MOD, "cannot check the libtpu lock file '%s': %s", path, strerror(errno));
        }
        return 0;
    }
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0;
    if (fcntl(fd, F_GETLK, &fl) != 0) {
        mesh_warn(MOD, "cannot test the libtpu lock file '%s': %s", path, strerror(errno));
        return 0;
    }
    if (fl.l_type == F_UNLCK) {
        mesh_debug(MOD, "libtpu lock file '%s' exists but is not held", path);
        return 0;
    }
    /* Wording after TensorFlow's own "The TPU is already in use by process
     * with pid ...". l_pid is 0 or -1 when the holder lives in
     * another PID namespace or holds an OFD lock. */
    if (fl.l_pid > 0) {
        return mesh_err_set(err, MESH_E_BUSY, 0,
                            "The TPU is already in use by process with pid %ld (it holds the "
                            "libtpu lock '%s'); stop that process: only one program per host "
                            "may use the TPU",
                            (long)fl.l_pid, path);
    }
    return mesh_err_set(err, MESH_E_BUSY, 0,
                        "The TPU is already in use by another process (it holds the libtpu lock "
                        "'%s', pid not visible from this container); stop that process: only one "
                        "program per host may use the TPU",
                        path);
}

/* The lock files libtpu uses: /tmp/libtpu_lockfile, the per-user
 * /tmp/libtpu_lock_<uid>/libtpu_lockfile of newer XLA (any uid: the trainer
 * need not run as our user) and $HOME/.libtpu_lockfile. TPUMESH_LOCK_DIR
 * replaces /tmp (tests, or a host /tmp mounted elsewhere).
 * Each container has its own /tmp: a holder in another container or pod is
 * visible only when the chart mounts the shared /tmp (e.g. the host's, via
 * hostPath) here and points TPUMESH_LOCK_DIR at it. Locks on the same inode
 * then conflict across PID namespaces; F_GETLK reports pid 0 for those. */
static int check_tpu_locks(struct mesh_err *err)
{
    const char *base = getenv("TPUMESH_LOCK_DIR");
    if (base == NULL || base[0] == '\0') {
        base = "/tmp";
    }
    mesh_autofree char *main_lock = mesh_asprintf("%s/libtpu_lockfile", base);
    int rc = check_lock_file(main_lock, err);
    if (rc < 0) {
        return rc;
    }

    DIR *d autoclosedir = opendir(base);
    if (d != NULL) {
        struct dirent *de;
        int seen = 0;
        while ((de = readdir(d)) != NULL && seen++ < MAX_DIR_ENTRIES) {
            if (strncmp(de->d_name, "libtpu_lock_", strlen("libtpu_lock_")) != 0) {
                continue;
            }
            mesh_autofree char *p = mesh_asprintf("%s/%s/libtpu_lockfile", base, de->d_name);
            rc = check_lock_file(p, err);
            if (rc < 0) {
                return rc;
            }
        }
    }

    const char *home = getenv("HOME");
    if (home != NULL && home[0] == '/') {
        mesh_autofree char *p = mesh_asprintf("%s/.libtpu_lockfile", home);
        rc = check_lock_file(p, err);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/* Read a small sysfs attribute ("0x1ae0\n") as a number; false if absent. */
static bool read_hex_attr(const char *path, long *out)
{
    int fd mesh_autoclose = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return false;
    }
    char buf[32];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n <= 0) {
        return false;
    }
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(buf, &end, 16);
    if (errno != 0 || end == buf || (*end != '\0' && *end != '\n')) {
        return false;
    }
    *out = v;
    return true;
}

/* Google TPU chips on the host's PCI bus, the way PyTorch/XLA finds them
 * without libtpu: vendor 0x1ae0, device 0x0027 (v2/v3), 0x005e
 * (v4), 0x0063 (v5e), 0x006f (v6e). sysfs attributes only, never a device
 * node. Used to explain a container that sees no TPU device: a host that has
 * TPUs but did not give them to us. TPUMESH_SYS_DIR replaces /sys (tests). */
static int count_tpu_pci(void)
{
    const char *sys = getenv("TPUMESH_SYS_DIR");
    mesh_autofree char *dir =
        mesh_asprintf("%s/bus/pci/devices", sys != NULL && sys[0] != '\0' ? sys : "/sys");
    DIR *d autoclosedir = opendir(dir);
    if (d == NULL) {
        return 0;
    }
    int n = 0;
    int seen = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && seen++ < MAX_DIR_ENTRIES) {
        if (de->d_name[0] == '.') {
            continue;
        }
        long vendor = 0;
        long device = 0;
        mesh_autofree char *vp = mesh_asprintf("%s/%s/vendor", dir, de->d_name);
        mesh_autofree char *dp = mesh_asprintf("%s/%s/device", dir, de->d_name);
        if (read_hex_attr(vp, &vendor) && vendor == 0x1ae0 && read_hex_attr(dp, &device) &&
            (device == 0x0027 || device == 0x005e || device == 0x0063 || device == 0x006f)) {
            n++;
        }
    }
    return n;
}

static int preflight_tpu_vm(struct mesh_init *ctx, struct mesh_err *err)
{
    const char *dev_dir = ctx->opts.dev_dir != NULL ? ctx->opts.dev_dir : "/dev";
    int ndev = 0;
    const char *kind = "accel";
    int rc = count_tpu_devices(dev_dir, &ndev, &kind, err);
    if (rc < 0) {
        return rc;
    }
    int want = ctx->have_slice ? ctx->slice.chips_per_host : 0;
    const char *slice_name =
        ctx->slice.accelerator_type[0] != '\0' ? ctx->slice.accelerator_type : ctx->slice.topology;

    /* TensorFlow reports a missing TPU as NotFound "TPUs not found in the
     * cluster. Failed in initialization: ...". */
    if (ndev == 0) {
        int npci = count_tpu_pci();
        if (npci > 0) {
            return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                                "TPUs not found in the cluster. Failed in initialization: the "
                                "host has %d TPU chip(s) on its PCI bus but none is visible "
                                "under '%s'; request google.com/tpu for this container",
                                npci, dev_dir);
        }
        return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                            "TPUs not found in the cluster. Failed in initialization: no TPU "
                            "device under '%s' (neither accel<N> nor vfio/<N>); request "
                            "google.com/tpu for this container or point --dev-dir at the "
                            "host's devices",
                            dev_dir);
    }
    if (want > 0 && ndev < want) {
        return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                            "TPUs not found in the cluster. Failed in initialization: %d TPU "
                            "device(s) under '%s' but %s has %d chips per host; request "
                            "google.com/tpu: %d for this container",
                            ndev, dev_dir, slice_name, want, want);
    }
    /* More devices than chips: the TPU this container got is not the slice
     * we were told about (issue 4: "as many as the host's chips", else exit
     * 3); usually a wrong accelerator type. */
    if (want > 0 && ndev > want) {
        return mesh_err_set(err, MESH_E_NOTFOUND, 0,
                            "TPUs not found in the cluster. Failed in initialization: %d TPU "
                            "devices under '%s' but %s has %d chips per host; check "
                            "--accelerator-type/--topology (v5e/v6e count chips, v4/v5p cores)",
                            ndev, dev_dir, slice_name, want);
    }

    rc = check_tpu_locks(err);
    if (rc < 0) {
        return rc;
    }
    mesh_info(MOD, "TPU VM preflight ok: %d %s device(s) under %s, libtpu lock free", ndev, kind,
              dev_dir);
    return 0;
}

/* Validate what the TPU returned as tf.tpu.experimental.Topology would
 * (topo.h): a TopologyProto TensorFlow rejects must not reach
 * topology.pb. It is published byte for byte as the TPU sent it (docs/DESIGN.md
 * §6); disagreements with the slice we expected are logged, not fatal: the
 * TPU is the authority on its own topology. */
/* topology.json's slice on the legacy path shows the TPU's own mesh shape
 * (docs/DESIGN.md §4): the known slice takes it, and an unknown slice (no
 * --accelerator-type, no API type) is described from the proto alone, with
 * its accelerator type and topology unknown (null). */
static void slice_from_proto(struct mesh_init *ctx, const struct mesh_topo_info *info)
{
    struct mesh_slice *s = &ctx->slice;
    if (!ctx->have_slice) {
        memset(s, 0, sizeof(*s));
        s->ndims = 3;
        for (int i = 0; i < 3; i++) {
            s->dims[i] = info->mesh_shape[i];
        }
        s->chips = info->mesh_shape[0] * info->mesh_shape[1] * info->mesh_shape[2];
        s->hosts = info->num_tasks;
        s->cores_per_chip = info->mesh_shape[3];
        s->devices_per_host = info->devices_per_task;
        s->chips_per_host = info->devices_per_task / info->mesh_shape[3];
        ctx->have_slice = true;
    }
    for (int i = 0; i < 4; i++) {
        s->mesh_shape[i] = info->mesh_shape[i];
    }
}

static int check_node_topology(struct mesh_init *ctx, const uint8_t *pb, size_t len,
                               struct mesh_err *err)
{
    struct mesh_topo_info info;
    mesh_topo_info_init(&info);
    int rc = mesh_topo_parse(pb, len, &info, err);
    if (rc < 0) {
        if (err != NULL) {
            err->code = MESH_E_API;
            mesh_err_prefix(err, "the TPU returned an invalid TopologyProto (%zu bytes)", len);
        }
        return -MESH_E_API;
    }
    mesh_info(MOD, "TPU topology: mesh_shape [%d,%d,%d,%d], %d task(s) x %d TPU device(s)",
              info.mesh_shape[0], info.mesh_shape[1], info.mesh_shape[2], info.mesh_shape[3],
              info.num_tasks, info.devices_per_task);
    if ((size_t)info.num_tasks != ctx->nendpoints) {
        mesh_warn(MOD,
                  "the TPU reports %d task(s) but %zu gRPC endpoint(s) were given; "
                  "check the endpoint list",
                  info.num_tasks, ctx->nendpoints);
    }
    if (ctx->have_slice) {
        struct mesh_err e2;
        mesh_err_clear(&e2);
        if (mesh_topo_check_slice(&info, &ctx->slice, &e2) < 0) {
            mesh_warn(MOD, "the TPU's topology differs from %s: %s", ctx->slice.accelerator_type,
                      e2.msg);
        }
    }
    slice_from_proto(ctx, &info);
    mesh_topo_info_cleanup(&info);
    return 0;
}

/* Legacy TPU Node: run ConfigureDistributedTPU on the TPU's TensorFlow
 * server (tf_master.h) and keep the TopologyProto it returns. The
 * endpoints are TensorFlow's task order: task 0 is the master. */
static int initialize_tpu_node(struct mesh_init *ctx, struct mesh_err *err)
{
    if (ctx->nendpoints == 0 || ctx->endpoints == NULL) {
        return mesh_err_set(err, MESH_E_CONFIG, 0,
                            "TPU Node without gRPC endpoints; set --tpu grpc://<ip>:8470 or "
                            "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS");
    }
    size_t n = ctx->nendpoints;
    char **tasks = mesh_calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const struct mesh_endpoint *e = &ctx->endpoints[i];
        int port = e->port > 0 ? e->port : 8470;
        /* An IPv6 literal needs brackets in host:port. */
        if (strchr(e->ip, ':') != NULL) {
            tasks[i] = mesh_asprintf("[%s]:%d", e->ip, port);
        } else {
            tasks[i] = mesh_asprintf("%s:%d", e->ip, port);
        }
    }
    int64_t timeout_ms = (int64_t)(ctx->opts.timeout_s > 0 ? ctx->opts.timeout_s : 600) * 1000;
    if (ctx->deadline_ms > 0) {
        /* What is left of --timeout after resolve (e.g. waiting for READY). */
        int64_t left = ctx->deadline_ms - mesh_sys_now_ms();
        timeout_ms = left > 1 ? left : 1;
    }
    uint8_t *topo = NULL;
    size_t topo_len = 0;
    int rc = mesh_tf_master_configure_tpu((const char *const *)tasks, n, timeout_ms, &topo,
                                          &topo_len, err);
    for (size_t i = 0; i < n; i++) {
        mesh_free(tasks[i]);
    }
    mesh_free(tasks);
    if (rc < 0) {
        return rc;
    }
    rc = check_node_topology(ctx, topo, topo_len, err);
    if (rc < 0) {
        mesh_free(topo);
        return rc;
    }
    mesh_free(ctx->topology_pb);
    ctx->topology_pb = topo;
    ctx->topology_pb_len = topo_len;
    return 0;
}

int mesh_init_initialize(struct mesh_init *ctx, struct mesh_err *err)
{
    if (ctx->opts.skip_init) {
        mesh_info(MOD, "TPU system initialization skipped (--skip-init)");
        return 0;
    }
    switch (ctx->kind) {
    case MESH_TPU_VM_LOCAL:
        return preflight_tpu_vm(ctx, err);
    case MESH_TPU_NODE_GRPC:
    case MESH_TPU_NODE_API:
        return initialize_tpu_node(ctx, err);
    case MESH_TPU_NONE:
    default:
        break;
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0,
                        "no TPU was resolved before initialization; set --tpu (a TPU name, "
                        "grpc://host:port or local)");
}
