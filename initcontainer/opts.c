/*
 * opts.c - tpumesh-init's command line (docs/DESIGN.md §6).
 *
 * Every option is a long flag ("--flag value" or "--flag=value") and also
 * the variable TPUMESH_<FLAG_UPPER_SNAKE>; the flag wins, and an empty
 * variable counts as unset. The layers are merged as strings first and the
 * winning string is converted once, so an error names exactly where the bad
 * value came from ("--port" or "TPUMESH_PORT").
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/annotations.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/logfmt.h"
#include "core/mem.h"
#include "core/ports.h"
#include "init.h"
#include "io/log.h"
#include "io/sys.h"

enum opt_kind {
    K_STR,    /* char * field of struct mesh_init_opts */
    K_INT,    /* int field, [min, max] */
    K_BOOL,   /* bool field: true/false/1/0/yes/no; a bare flag means true */
    K_MODE,   /* address mode auto|dns|ip */
    K_LEVEL,  /* log level (struct mesh_init_cli) */
    K_FORMAT, /* log format (struct mesh_init_cli) */
};

struct opt_def {
    const char *flag; /* without "--" */
    const char *env;
    enum opt_kind kind;
    size_t off; /* offset in struct mesh_init_opts (K_STR, K_INT, K_BOOL, K_MODE) */
    long long min, max;
    const char *def; /* default as text, NULL = none */
    const char *arg; /* what the value looks like, for messages */
};

#define OFF(f) offsetof(struct mesh_init_opts, f)

static const struct opt_def opt_defs[] = {
    {"out-dir", "TPUMESH_OUT_DIR", K_STR, OFF(out_dir), 0, 0, "/var/run/tpumesh", "DIR"},
    {"log-format", "TPUMESH_LOG_FORMAT", K_FORMAT, 0, 0, 0, "text", "text|json"},
    {"log-level", "TPUMESH_LOG_LEVEL", K_LEVEL, 0, 0, 0, "info", "debug|info|warn|error"},
    {"tpu", "TPUMESH_TPU", K_STR, OFF(tpu), 0, 0, NULL, "NAME[,NAME]|local|grpc://..."},
    {"zone", "TPUMESH_ZONE", K_STR, OFF(zone), 0, 0, NULL, "ZONE"},
    {"project", "TPUMESH_PROJECT", K_STR, OFF(project), 0, 0, NULL, "PROJECT"},
    {"accelerator-type", "TPUMESH_ACCELERATOR_TYPE", K_STR, OFF(accelerator_type), 0, 0, NULL,
     "TYPE"},
    {"topology", "TPUMESH_TOPOLOGY", K_STR, OFF(topology), 0, 0, NULL, "AxB[xC]"},
    {"annotations-file", "TPUMESH_ANNOTATIONS_FILE", K_STR, OFF(annotations_file), 0, 0,
     "/etc/podinfo/annotations", "FILE"},
    {"dev-dir", "TPUMESH_DEV_DIR", K_STR, OFF(dev_dir), 0, 0, "/dev", "DIR"},
    {"timeout", "TPUMESH_TIMEOUT", K_INT, OFF(timeout_s), 1, 86400, "600", "SECONDS"},
    {"metadata-host", "TPUMESH_METADATA_HOST", K_STR, OFF(metadata_host), 0, 0, NULL,
     "HOST[:PORT]"},
    {"tpu-api-endpoint", "TPUMESH_TPU_API_ENDPOINT", K_STR, OFF(tpu_api_endpoint), 0, 0, NULL,
     "URL"},
    {"skip-init", "TPUMESH_SKIP_INIT", K_BOOL, OFF(skip_init), 0, 0, "false", NULL},
    {"port", "TPUMESH_PORT", K_INT, OFF(port), 1, 65535, "10000", "PORT"},
    {"job-name", "TPUMESH_JOB_NAME", K_STR, OFF(job_name), 0, 0, NULL, "NAME"},
    {"address-mode", "TPUMESH_ADDRESS_MODE", K_MODE, OFF(address_mode), 0, 0, "auto",
     "auto|dns|ip"},
    {"expected-workers", "TPUMESH_EXPECTED_WORKERS", K_INT, OFF(expected_workers), 1,
     MESH_INIT_MAX_WORKERS, NULL, "N"},
};

#define NOPTS (sizeof(opt_defs) / sizeof(opt_defs[0]))

static const char usage_text[] =
    "usage: tpumesh-init [OPTIONS]\n"
    "\n"
    "Resolves the Cloud TPU of this pod, runs TPU system initialization, and\n"
    "publishes topology.json, dtensor.env, tf_config.json, tpu.env, jax.env and\n"
    "topology.pb atomically into the shared volume.\n"
    "\n"
    "Options (each also read from the variable shown; the flag wins):\n"
    "  --out-dir DIR             TPUMESH_OUT_DIR           default /var/run/tpumesh\n"
    "      shared volume to publish the files into\n"
    "  --log-format text|json    TPUMESH_LOG_FORMAT        default text\n"
    "  --log-level LEVEL         TPUMESH_LOG_LEVEL         default info (debug|info|warn|error)\n"
    "  --tpu NAME[,NAME]|local|grpc://HOST[:PORT][,...]    TPUMESH_TPU\n"
    "      the TPU, as TPUClusterResolver's tpu argument; without it:\n"
    "      KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS, TPU_NAME, TPU_CONFIG, then GKE's TPU_WORKER_*\n"
    "  --zone ZONE               TPUMESH_ZONE              default: metadata server's zone\n"
    "  --project PROJECT         TPUMESH_PROJECT           default: metadata server's project\n"
    "  --accelerator-type TYPE   TPUMESH_ACCELERATOR_TYPE  e.g. v4-32, v5litepod-16\n"
    "      default: TPU_ACCELERATOR_TYPE\n"
    "  --topology AxB[xC]        TPUMESH_TOPOLOGY          e.g. 2x2x4; default: TPU_TOPOLOGY\n"
    "  --annotations-file FILE   TPUMESH_ANNOTATIONS_FILE  default /etc/podinfo/annotations\n"
    "      downward-API file with the pod's annotations (tpumesh.dev/*)\n"
    "  --dev-dir DIR             TPUMESH_DEV_DIR           default /dev\n"
    "  --timeout SECONDS         TPUMESH_TIMEOUT           default 600 (1..86400)\n"
    "  --metadata-host HOST      TPUMESH_METADATA_HOST\n"
    "      default: GCE_METADATA_HOST, GCE_METADATA_IP, metadata.google.internal\n"
    "  --tpu-api-endpoint URL    TPUMESH_TPU_API_ENDPOINT\n"
    "      default: from TPU_API_DISCOVERY_URL, else https://tpu.googleapis.com\n"
    "  --skip-init               TPUMESH_SKIP_INIT         default false (true|false|1|0)\n"
    "      only resolve and publish; do not initialize the TPU system\n"
    "  --port PORT               TPUMESH_PORT              default 10000 (DTensor port)\n"
    "  --job-name NAME           TPUMESH_JOB_NAME          default: localhost for one\n"
    "      worker, else worker (DTENSOR_JOB_NAME)\n"
    "  --address-mode auto|dns|ip TPUMESH_ADDRESS_MODE     default auto\n"
    "  --expected-workers N      TPUMESH_EXPECTED_WORKERS  default: the slice's host count\n"
    "                                                      (x MEGASCALE_NUM_SLICES: the total)\n"
    "  --version                 print the version and exit\n"
    "  --help                    print this help and exit\n"
    "\n"
    "Standard variables honoured (TensorFlow's precedence): KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS,\n"
    "TPU_NAME, TPU_CONFIG, GCE_METADATA_HOST, GCE_METADATA_IP, TPU_API_DISCOVERY_URL,\n"
    "TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY.\n"
    "Precedence: flag > pod annotation > environment > metadata server.\n"
    "\n"
    "Exit codes:\n"
    "  0  files published\n"
    "  2  usage or configuration error (bad flag, no TPU source, invalid worker names)\n"
    "  3  no TPU found\n"
    "  4  TPU not ready, unhealthy or unresponsive before --timeout\n"
    "  5  API or authentication failure\n"
    "  6  cannot publish to --out-dir\n"
    "The last log line says why.\n";

const char *mesh_init_usage_text(void)
{
    return usage_text;
}

static const struct opt_def *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTS; i++) {
        if (strlen(opt_defs[i].flag) == len && strncmp(opt_defs[i].flag, name, len) == 0) {
            return &opt_defs[i];
        }
    }
    return NULL;
}

static int parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* Convert the winning string of one option into its field. `src` names
 * where it came from ("--port" / "TPUMESH_PORT") for the message. */
static int apply_opt(struct mesh_init *ctx, struct mesh_init_cli *cli, const struct opt_def *d,
                     const char *v, const char *src, struct mesh_err *err)
{
    /* ctx may be NULL for the log options, which live in cli. */
    char *base = ctx != NULL ? (char *)&ctx->opts : NULL;
    switch (d->kind) {
    case K_STR: {
        char **field = (char **)(void *)(base + d->off);
        mesh_free(*field);
        *field = mesh_strdup(v);
        return 0;
    }
    case K_INT: {
        long long n;
        struct mesh_err perr;
        if (mesh_parse_ll(v, strlen(v), d->min, d->max, &n, &perr) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.64s' is not a whole number in %lld..%lld", src, v, d->min,
                                d->max);
        }
        *(int *)(void *)(base + d->off) = (int)n;
        return 0;
    }
    case K_BOOL:
        if (parse_bool(v, (bool *)(void *)(base + d->off)) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.64s' is not a boolean; use true or false", src, v);
        }
        return 0;
    case K_MODE: {
        enum mesh_addr_mode *m = (enum mesh_addr_mode *)(void *)(base + d->off);
        if (strcmp(v, "auto") == 0) {
            *m = MESH_ADDR_AUTO;
        } else if (strcmp(v, "dns") == 0) {
            *m = MESH_ADDR_DNS;
        } else if (strcmp(v, "ip") == 0) {
            *m = MESH_ADDR_IP;
        } else {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%.64s' is not auto, dns or ip", src,
                                v);
        }
        return 0;
    }
    case K_LEVEL: {
        enum mesh_log_level l;
        if (mesh_logfmt_parse_level(v, &l) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "%s: '%.64s' is not debug, info, warn or error", src, v);
        }
        cli->log_level = (int)l;
        return 0;
    }
    case K_FORMAT: {
        enum mesh_log_format f;
        if (mesh_logfmt_parse_format(v, &f) < 0) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: '%.64s' is not text or json", src, v);
        }
        cli->log_format = (int)f;
        return 0;
    }
    }
    return mesh_err_set(err, MESH_E_CONFIG, 0, "%s: unhandled option kind", src);
}

/* Collect the flag layer: vals[i] (borrowed from argv) for each given
 * option; the last occurrence wins. */
static int scan_args(int argc, char *const argv[], const char *vals[NOPTS],
                     struct mesh_init_cli *cli, struct mesh_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli->action = MESH_INIT_ACTION_HELP;
            continue;
        }
        if (strcmp(a, "--version") == 0) {
            if (cli->action == MESH_INIT_ACTION_RUN) {
                cli->action = MESH_INIT_ACTION_VERSION;
            }
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            return mesh_err_set(err, MESH_E_CONFIG, 0,
                                "unexpected argument '%.64s': tpumesh-init takes only --options "
                                "(see --help)",
                                a);
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq != NULL ? (size_t)(eq - name) : strlen(name);
        const struct opt_def *d = find_opt(name, nlen);
        if (d == NULL) {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "unknown option '--%.*s' (see --help)",
                                (int)(nlen > 64 ? 64 : nlen), name);
        }
        const char *v;
        if (eq != NULL) {
            v = eq + 1;
        } else if (d->kind == K_BOOL) {
            v = "true";
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "--%s needs a value (%s)", d->flag, d->arg);
        }
        if (v[0] == '\0') {
            return mesh_err_set(err, MESH_E_CONFIG, 0, "--%s needs a non-empty value (%s)", d->flag,
                                d->arg != NULL ? d->arg : "true|false");
        }
        vals[d - opt_defs] = v;
    }
    return 0;
}

/* The pod-annotation layer (docs/DESIGN.md §6: flag > annotation > environment).
 * Reads the downward-API file at path into *out; a missing file is no
 * layer (0, *out empty), an unreadable or malformed one is a configuration
 * error. tpumesh.dev keys are validated (unknown keys, bad values) here. */
static int load_annotations(const char *path, struct mesh_annotations *out,
                            struct mesh_annotations_config *out_cfg, struct mesh_err *err)
{
    memset(out, 0, sizeof(*out));
    memset(out_cfg, 0, sizeof(*out_cfg));
    struct mesh_buf b;
    mesh_buf_init(&b, MESH_ANNOTATIONS_MAX_INPUT);
    struct mesh_err rerr;
    int rc = mesh_sys_read_file(path, MESH_ANNOTATIONS_MAX_INPUT, &b, &rerr);
    if (rc < 0) {
        mesh_buf_cleanup(&b);
        if (rerr.sys_errno == ENOENT) {
            return 0;
        }
        return mesh_err_set(err, MESH_E_CONFIG, 0, "annotations file: %s", rerr.msg);
    }
    if (rc == 0) {
        rc = mesh_annotations_parse(b.data ? b.data : "", b.len, out, err);
    }
    mesh_buf_cleanup(&b);
    if (rc == 0) {
        rc = mesh_annotations_config(out, out_cfg, err);
        if (rc < 0) {
            mesh_annotations_cleanup(out);
        }
    }
    if (rc < 0) {
        if (err != NULL) {
            err->code = MESH_E_CONFIG; /* exit 2 even for a too-big file */
        }
        return mesh_err_prefix(err, "annotations file '%.128s' (--annotations-file)", path);
    }
    return 0;
}

/* The annotation tpumesh.dev/<flag> for the flags that have one, or NULL. */
static const char *annotation_for(const struct mesh_annotations *a, const char *flag, char *key,
                                  size_t keylen)
{
    static const char *const keyed[] = {"tpu",  "zone",         "project",          "job-name",
                                        "port", "address-mode", "expected-workers", "timeout"};
    for (size_t i = 0; i < sizeof(keyed) / sizeof(keyed[0]); i++) {
        if (strcmp(flag, keyed[i]) == 0) {
            snprintf(key, keylen, "annotation %s%s", MESH_ANNOTATION_PREFIX, flag);
            return mesh_annotations_get(a, key + strlen("annotation "));
        }
    }
    return NULL;
}

int mesh_init_opts_parse(struct mesh_init *ctx, int argc, char *const argv[],
                         struct mesh_init_cli *out_cli, struct mesh_err *err)
{
    struct mesh_init_cli cli = {MESH_INIT_ACTION_RUN, MESH_LOG_INFO, MESH_LOG_TEXT};
    const char *vals[NOPTS] = {0};
    int rc = scan_args(argc, argv, vals, &cli, err);
    if (rc < 0) {
        return rc;
    }
    if (cli.action != MESH_INIT_ACTION_RUN) {
        *out_cli = cli;
        return 0;
    }
    const struct opt_def *afd = find_opt("annotations-file", strlen("annotations-file"));
    const char *apath = vals[afd - opt_defs];
    if (apath == NULL) {
        apath = getenv(afd->env);
    }
    if (apath == NULL || apath[0] == '\0') {
        apath = afd->def;
    }
    struct mesh_annotations ann;
    struct mesh_annotations_config acfg;
    rc = load_annotations(apath, &ann, &acfg, err);
    if (rc < 0) {
        return rc;
    }
    if (acfg.tf_version != NULL) {
        mesh_free(ctx->opts.tf_version);
        ctx->opts.tf_version = acfg.tf_version;
        acfg.tf_version = NULL;
    }
    /* Multi-slice: annotation only (no flag); resolve.c falls back to the
     * MEGASCALE_PORT variable GKE sets. */
    ctx->opts.megascale_port = acfg.megascale_port;
    if (acfg.coordinator != NULL) {
        mesh_free(ctx->opts.jax_coordinator);
        ctx->opts.jax_coordinator = acfg.coordinator;
        acfg.coordinator = NULL;
    }
    mesh_annotations_config_cleanup(&acfg);
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt_def *d = &opt_defs[i];
        char src[64];
        const char *v = vals[i];
        const char *av = NULL;
        if (v != NULL) {
            snprintf(src, sizeof(src), "--%s", d->flag);
        } else if ((av = annotation_for(&ann, d->flag, src, sizeof(src))) != NULL) {
            v = av;
        } else {
            v = getenv(d->env);
            if (v != NULL && v[0] == '\0') {
                v = NULL;
            }
            snprintf(src, sizeof(src), "%s", d->env);
        }
        if (v == NULL) {
            v = d->def;
            snprintf(src, sizeof(src), "default of --%s", d->flag);
        }
        if (v == NULL) {
            continue;
        }
        rc = apply_opt(ctx, &cli, d, v, src, err);
        if (rc < 0) {
            mesh_annotations_cleanup(&ann);
            return rc;
        }
        /* What the operator asked for, and from where (none are secrets). */
        mesh_debug("opts", "--%s = '%.200s' (from %s)", d->flag, v, src);
        if (strcmp(d->flag, "expected-workers") == 0) {
            ctx->opts.expected_origin = av != NULL ? "annotation" : "flag";
        }
        if (strcmp(d->flag, "port") == 0) {
            /* The rules the sidecar and the chart apply too (core/ports.h). */
            char what[96];
            snprintf(what, sizeof(what), "DTensor port (%s)", src);
            struct mesh_port_use u = {what, ctx->opts.port};
            rc = mesh_ports_check(&u, 1, err);
            if (rc < 0) {
                mesh_annotations_cleanup(&ann);
                return rc;
            }
        }
        if (strcmp(d->flag, "tpu") == 0) {
            ctx->opts.tpu_origin = vals[i] != NULL ? "flag --tpu"
                                   : av != NULL    ? "annotation tpumesh.dev/tpu"
                                                   : "env TPUMESH_TPU";
        }
    }
    mesh_annotations_cleanup(&ann);
    *out_cli = cli;
    return 0;
}

void mesh_init_log_prefs(int argc, char *const argv[], struct mesh_init_cli *out_cli)
{
    struct mesh_init_cli cli = {MESH_INIT_ACTION_RUN, MESH_LOG_INFO, MESH_LOG_TEXT};
    static const char *const names[] = {"log-format", "log-level"};
    for (size_t k = 0; k < 2; k++) {
        const struct opt_def *d = find_opt(names[k], strlen(names[k]));
        const char *v = getenv(d->env);
        size_t nlen = strlen(names[k]);
        /* The last well-formed flag wins over the variable, as in the
         * full parse; anything malformed is left to it to report. */
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, names[k], nlen) != 0) {
                continue;
            }
            if (a[2 + nlen] == '=') {
                v = a + 3 + nlen;
            } else if (a[2 + nlen] == '\0' && i + 1 < argc) {
                v = argv[i + 1];
            }
        }
        if (v != NULL && v[0] != '\0') {
            (void)apply_opt(NULL, &cli, d, v, names[k], NULL);
        }
    }
    *out_cli = cli;
}
