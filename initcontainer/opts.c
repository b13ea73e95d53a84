/*
 * opts.c - tpumesh-init's command line (docs/DESIGN.md §6): its option
 * table for the shared engine (io/cliopts.h) and the layer only
 * tpumesh-init has, the pod's annotations. Precedence: flag > annotation
 * tpumesh.dev/<flag> > TPUMESH_<FLAG> > default; an error names where the bad
 * value came from.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "core/annotations.h"
#include "core/buf.h"
#include "core/cleanup.h"
#include "core/mem.h"
#include "core/ports.h"
#include "init.h"
#include "io/cliopts.h"
#include "io/sys.h"

#define OFF(f) offsetof(struct mesh_init_opts, f)
#define ANN "\n      (else annotation tpumesh.dev/"

/* In --help order. */
static const struct mesh_cliopt defs[] = {
    {"out-dir", MESH_CLIOPT_STR, OFF(out_dir), 0, 0, "/var/run/tpumesh", "DIR",
     "shared volume to publish the files into"},
    {"log-format", MESH_CLIOPT_FORMAT, OFF(log_format), 0, 0, "text", "text|json",
     "log line format"},
    {"log-level", MESH_CLIOPT_LEVEL, OFF(log_level), 0, 0, "info", "debug|info|warn|error",
     "log level"},
    {"tpu", MESH_CLIOPT_STR, OFF(tpu), 0, 0, NULL, "NAME[,NAME]|local|grpc://HOST[:PORT][,...]",
     "the TPU, as TPUClusterResolver's tpu argument" ANN
     "tpu; then KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS,\n"
     "      TPU_NAME, TPU_CONFIG, then GKE's TPU_WORKER_*)"},
    {"zone", MESH_CLIOPT_STR, OFF(zone), 0, 0, NULL, "ZONE",
     "the TPU's zone" ANN "zone, then the metadata server's zone)"},
    {"project", MESH_CLIOPT_STR, OFF(project), 0, 0, NULL, "PROJECT",
     "the TPU's project" ANN "project, then the metadata server's project)"},
    {"accelerator-type", MESH_CLIOPT_STR, OFF(accelerator_type), 0, 0, NULL, "TYPE",
     "e.g. v4-32, v5litepod-16 (else TPU_ACCELERATOR_TYPE)"},
    {"topology", MESH_CLIOPT_STR, OFF(topology), 0, 0, NULL, "AxB[xC]",
     "e.g. 2x2x4 (else TPU_TOPOLOGY)"},
    {"annotations-file", MESH_CLIOPT_STR, OFF(annotations_file), 0, 0, "/etc/podinfo/annotations",
     "FILE", "downward-API file with the pod's annotations (tpumesh.dev/*); must exist if named"},
    {"dev-dir", MESH_CLIOPT_STR, OFF(dev_dir), 0, 0, "/dev", "DIR",
     "where the TPU devices are (TPU VM preflight)"},
    {"timeout", MESH_CLIOPT_INT, OFF(timeout_s), 1, 86400, "600", "SECONDS",
     "resolve and initialize must be done within this" ANN "timeout)"},
    {"metadata-host", MESH_CLIOPT_STR, OFF(metadata_host), 0, 0, NULL, "HOST[:PORT]",
     "GCE metadata server (else GCE_METADATA_HOST, GCE_METADATA_IP, "
     "metadata.google.internal)"},
    {"tpu-api-endpoint", MESH_CLIOPT_STR, OFF(tpu_api_endpoint), 0, 0, NULL, "URL",
     "Cloud TPU API (else from TPU_API_DISCOVERY_URL, else https://tpu.googleapis.com)"},
    {"skip-init", MESH_CLIOPT_BOOL, OFF(skip_init), 0, 0, "false", NULL,
     "only resolve and publish; do not initialize the TPU system"},
    {"port", MESH_CLIOPT_INT, OFF(port), 1, 65535, "10000", "PORT",
     "DTensor port of every worker" ANN "port)"},
    {"job-name", MESH_CLIOPT_STR, OFF(job_name), 0, 0, NULL, "NAME",
     "DTENSOR_JOB_NAME" ANN "job-name; then localhost for one worker, else worker)"},
    {"address-mode", MESH_CLIOPT_CHOICE, OFF(address_mode), 0, 0, "auto", "auto|dns|ip",
     "worker addresses: host names, IPs, or dns when every worker has a name" ANN "address-mode)"},
    {"expected-workers", MESH_CLIOPT_INT, OFF(expected_workers), 1, MESH_INIT_MAX_WORKERS, NULL,
     "N",
     "worker count, all slices" ANN "expected-workers; then the slice's host count\n"
     "      x MEGASCALE_NUM_SLICES)"},
};

#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char usage_head[] =
    "usage: tpumesh-init [OPTIONS]\n"
    "\n"
    "Resolves the Cloud TPU of this pod, runs TPU system initialization, and\n"
    "publishes topology.json, dtensor.env, tf_config.json, tpu.env, jax.env and\n"
    "topology.pb atomically into the shared volume.\n"
    "\n"
    "Options (each also read from TPUMESH_<FLAG>; the flag wins, then the pod\n"
    "annotation where one is named, then the variable):\n";

static const char usage_tail[] =
    "\n"
    "Standard variables honoured (TensorFlow's precedence): KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS,\n"
    "TPU_NAME, TPU_CONFIG, GCE_METADATA_HOST, GCE_METADATA_IP, TPU_API_DISCOVERY_URL,\n"
    "TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY.\n"
    "Precedence: flag > pod annotation > environment > metadata server.\n"
    "\n"
    "Exit codes:\n"
    "  0  files published (or --help, --version)\n"
    "  2  usage or configuration error (bad flag, no TPU source, invalid worker names)\n"
    "  3  no TPU found\n"
    "  4  TPU not ready, unhealthy or unresponsive before --timeout\n"
    "  5  API or authentication failure\n"
    "  6  cannot publish to --out-dir\n"
    "The last log line says why.\n";

static void print_version(void)
{
    /* Second line: the libraries that talk to the network (libcurl names
     * itself and the TLS, zlib, ... libraries it loads). */
    printf("tpumesh-init %s\n%s\n", MESH_VERSION, curl_version());
}

/* The pod-annotation layer: the downward-API file and what it says. */
struct ann_layer {
    int argc;
    char **argv;
    struct mesh_annotations ann;
    struct mesh_annotations_config cfg;
};

/* Reads the downward-API file at path into l. A missing file at the default
 * path is no layer (0, nothing set): tpumesh-init run outside a pod. A
 * missing file that was asked for (configured: --annotations-file or
 * TPUMESH_ANNOTATIONS_FILE, as the chart and the injector set it) is an
 * error, since every tpumesh.dev annotation would silently vanish; so is an
 * unreadable or malformed one. tpumesh.dev keys are validated (unknown keys,
 * bad values) here. */
static int load_annotations(const char *path, bool configured, struct ann_layer *l,
                            struct mesh_err *err)
{
    struct mesh_buf b;
    mesh_buf_init(&b, MESH_ANNOTATIONS_MAX_INPUT);
    struct mesh_err rerr;
    int rc = mesh_sys_read_file(path, MESH_ANNOTATIONS_MAX_INPUT, &b, &rerr);
    if (rc < 0) {
        mesh_buf_cleanup(&b);
        if (rerr.sys_errno == ENOENT && !configured) {
            return 0;
        }
        if (rerr.sys_errno == ENOENT || rerr.sys_errno == ENOTDIR) {
            return mesh_err_set(
                err, MESH_E_CONFIG, 0,
                "annotations file '%.80s' does not exist: is the pod's downward-API "
                "volume (podinfo) mounted? Without it every tpumesh.dev/ "
                "annotation is lost (outside a pod: --annotations-file /dev/null)",
                path);
        }
        bool perm = rerr.sys_errno == EACCES || rerr.sys_errno == EPERM;
        return mesh_err_set(err, MESH_E_CONFIG, 0, "annotations file: %s%s", rerr.msg,
                            perm ? " (the downward-API volume must be readable by this user)" : "");
    }
    rc = mesh_annotations_parse(b.data ? b.data : "", b.len, &l->ann, err);
    mesh_buf_cleanup(&b);
    if (rc == 0) {
        rc = mesh_annotations_config(&l->ann, &l->cfg, err);
    }
    if (rc < 0) {
        if (err != NULL) {
            err->code = MESH_E_CONFIG; /* exit 2 even for a too-big file */
        }
        return mesh_err_prefix(err, "annotations file '%.128s' (--annotations-file)", path);
    }
    return 0;
}

static int ann_open(void *arg, struct mesh_err *err)
{
    struct ann_layer *l = arg;
    const char *path = mesh_cliopts_peek(defs, NDEFS, l->argc, l->argv, "annotations-file");
    /* peek: NULL when neither the flag nor the variable names a file. */
    return load_annotations(path != NULL ? path : "/etc/podinfo/annotations", path != NULL, l, err);
}

/* tpumesh.dev/<flag> for the flags that have one (their help says so). */
static const char *ann_get(void *arg, const char *flag, char *where, size_t cap)
{
    static const char *const keyed[] = {"tpu",  "zone",         "project",          "job-name",
                                        "port", "address-mode", "expected-workers", "timeout"};
    const struct ann_layer *l = arg;
    for (size_t i = 0; i < sizeof(keyed) / sizeof(keyed[0]); i++) {
        if (strcmp(flag, keyed[i]) == 0) {
            snprintf(where, cap, "annotation %s%s", MESH_ANNOTATION_PREFIX, flag);
            return mesh_annotations_get(&l->ann, where + strlen("annotation "));
        }
    }
    return NULL;
}

static int source_of(const char *flag, const enum mesh_cliopt_source *src)
{
    for (size_t i = 0; i < NDEFS; i++) {
        if (strcmp(defs[i].flag, flag) == 0) {
            return (int)src[i];
        }
    }
    return MESH_CLIOPT_FROM_DEFAULT;
}

/* What only the annotations set (no flag), and where two options came from. */
static void take_layer(struct mesh_init_opts *o, struct ann_layer *l,
                       const enum mesh_cliopt_source *src)
{
    o->tf_version = MESH_STEAL(l->cfg.tf_version);
    /* Multi-slice: annotation only; resolve.c falls back to the MEGASCALE_PORT
     * variable GKE sets. */
    o->megascale_port = l->cfg.megascale_port;
    int s = source_of("expected-workers", src);
    o->expected_origin = s == MESH_CLIOPT_FROM_LAYER     ? "annotation"
                         : s == MESH_CLIOPT_FROM_DEFAULT ? NULL
                                                         : "flag";
    s = source_of("tpu", src);
    o->tpu_origin = s == MESH_CLIOPT_FROM_LAYER ? "annotation tpumesh.dev/tpu"
                    : s == MESH_CLIOPT_FROM_ENV ? "env TPUMESH_TPU"
                                                : "flag --tpu";
}

int mesh_init_opts_parse(struct mesh_init *ctx, int argc, char **argv, struct mesh_err *err)
{
    struct ann_layer l = {.argc = argc, .argv = argv};
    const struct mesh_cliopt_layer layer = {ann_open, ann_get, &l};
    const struct mesh_cliopt_usage usage = {usage_head, usage_tail, print_version};
    enum mesh_cliopt_source src[NDEFS];
    struct mesh_init_opts *o = &ctx->opts;
    int rc = mesh_cliopts_parse_main(defs, NDEFS, argc, argv, o, &layer, src, &usage, err);
    if (rc == 0) {
        take_layer(o, &l, src);
        /* The rules the sidecar and the chart apply too (core/ports.h). */
        char what[96];
        int s = source_of("port", src);
        snprintf(what, sizeof(what), "DTensor port (%s)",
                 s == MESH_CLIOPT_FROM_FLAG    ? "--port"
                 : s == MESH_CLIOPT_FROM_LAYER ? "annotation tpumesh.dev/port"
                 : s == MESH_CLIOPT_FROM_ENV   ? "TPUMESH_PORT"
                                               : "default of --port");
        struct mesh_port_use u = {what, o->port};
        rc = mesh_ports_check(&u, 1, err);
    }
    mesh_annotations_config_cleanup(&l.cfg);
    mesh_annotations_cleanup(&l.ann);
    return rc;
}

void mesh_init_log_setup(int argc, char **argv)
{
    mesh_cliopts_log_setup(defs, NDEFS, argc, argv);
}
