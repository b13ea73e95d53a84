/*
 * render_bench.c - timing driver for the renderers (render.h): builds N
 * workers that look like a JobSet's pods (pods "trainer-<i>-<5 random lower
 * case letters>", hosts "trainer-<i>.trainer", IPv4 10.x.y.z with every 97th
 * worker on IPv6, about one in ten not ready), runs each renderer K times in
 * ip and in dns mode and prints the median and p99 in microseconds.
 *
 *   render_bench [-n N[,N...]] [-k K] [-s SEED]
 *
 * Defaults: N = 1024,4096,16384; K = 2,000,000 / N clamped to 50..500;
 * SEED = 1. Exit 0, 1 when a renderer fails (the message is printed), 2 on
 * usage errors. Not a test: numbers depend on the machine and its load.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/mem.h"
#include "core/render.h"

#define MAX_SIZES 8

/* The strings of one worker, kept apart from struct mesh_worker so the
 * driver works whether the struct holds the strings or points at them. */
struct names {
    char pod[64];
    char host[64];
    char ip[48];
};

/* The one place that knows how struct mesh_worker stores its strings. */
static void fill_worker(struct mesh_worker *w, int index, const struct names *nm, bool ready)
{
    memset(w, 0, sizeof(*w));
    w->index = index;
    w->pod = nm->pod;
    w->host = nm->host;
    w->ip = nm->ip;
    w->ready = ready;
    w->terminating = false;
}

/* xorshift64*: deterministic, seedable, good enough for test names. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static void make_names(struct names *nm, int i, uint64_t *rng)
{
    char suffix[6];
    for (int k = 0; k < 5; k++) {
        suffix[k] = (char)('a' + rng_next(rng) % 26);
    }
    suffix[5] = '\0';
    snprintf(nm->pod, sizeof(nm->pod), "trainer-%d-%s", i, suffix);
    snprintf(nm->host, sizeof(nm->host), "trainer-%d.trainer", i);
    if (i % 97 == 13) {
        snprintf(nm->ip, sizeof(nm->ip), "fd00:10:%x::%x", (unsigned)(i >> 8),
                 (unsigned)(rng_next(rng) % 0xfffe + 1));
    } else {
        snprintf(nm->ip, sizeof(nm->ip), "10.%d.%d.%d", (i >> 16) & 0xff, (i >> 8) & 0xff,
                 (i & 0xff));
    }
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

typedef int (*render_fn)(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                         struct mesh_err *err);

/* mesh_render_all in the renderers' signature, so one loop times them all. */
static int render_all(const struct mesh_render_input *in, char **out_data, size_t *out_len,
                      struct mesh_err *err)
{
    struct mesh_render_out out;
    mesh_render_out_init(&out);
    int rc = mesh_render_all(in, &out, err);
    size_t total = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        total += out.len[i];
    }
    mesh_render_out_cleanup(&out);
    *out_data = rc == 0 ? mesh_strdup("") : NULL;
    *out_len = total;
    return rc;
}

static int dtensor_env(const struct mesh_render_input *in, char **d, size_t *l, struct mesh_err *e)
{
    return mesh_render_file(MESH_FILE_DTENSOR_ENV, in, d, l, e);
}

static int tf_config(const struct mesh_render_input *in, char **d, size_t *l, struct mesh_err *e)
{
    return mesh_render_file(MESH_FILE_TF_CONFIG, in, d, l, e);
}

static int tpu_env(const struct mesh_render_input *in, char **d, size_t *l, struct mesh_err *e)
{
    return mesh_render_file(MESH_FILE_TPU_ENV, in, d, l, e);
}

static int jax_env(const struct mesh_render_input *in, char **d, size_t *l, struct mesh_err *e)
{
    return mesh_render_file(MESH_FILE_JAX_ENV, in, d, l, e);
}

static const struct {
    const char *name;
    render_fn fn;
} renderers[] = {
    {"topology_json", mesh_render_topology_json},
    {"dtensor_env", dtensor_env},
    {"tf_config", tf_config},
    {"tpu_env", tpu_env},
    {"jax_env", jax_env},
    {"render_all", render_all},
};

static int bench_one(const struct mesh_render_input *in, const char *mode, int k, double *samples)
{
    for (size_t r = 0; r < sizeof(renderers) / sizeof(renderers[0]); r++) {
        size_t bytes = 0;
        for (int i = 0; i < k; i++) {
            char *data = NULL;
            struct mesh_err err;
            double t0 = now_us();
            int rc = renderers[r].fn(in, &data, &bytes, &err);
            samples[i] = now_us() - t0;
            mesh_free(data);
            if (rc < 0) {
                fprintf(stderr, "render_bench: %s: %s\n", renderers[r].name, err.msg);
                return 1;
            }
        }
        qsort(samples, (size_t)k, sizeof(double), cmp_double);
        size_t p99 = ((size_t)k * 99 + 99) / 100;
        printf("n=%-6zu mode=%-3s %-14s median %9.1f us  p99 %9.1f us  (%d runs, %zu bytes)\n",
               in->nworkers, mode, renderers[r].name, samples[k / 2], samples[p99 - 1], k, bytes);
    }
    return 0;
}

static int bench_size(size_t n, int k_opt, uint64_t seed)
{
    uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
    struct names *nm = mesh_calloc(n, sizeof(*nm));
    struct mesh_worker *w = mesh_calloc(n, sizeof(*w));
    for (size_t i = 0; i < n; i++) {
        make_names(&nm[i], (int)i, &rng);
        fill_worker(&w[i], (int)i, &nm[i], rng_next(&rng) % 10 != 0);
    }
    struct mesh_slice slice = {
        .gen = MESH_GEN_V4,
        .accelerator_type = "v4-32768",
        .topology = "16x16x64",
        .ndims = 3,
        .dims = {16, 16, 64},
        .chips = 16384,
        .hosts = 4096,
        .chips_per_host = 4,
        .cores_per_chip = 2,
        .devices_per_host = 4,
        .host_bounds = {8, 8, 64},
        .chips_per_host_bounds = {2, 2, 1},
        .mesh_shape = {16, 16, 64, 1},
    };
    int k = k_opt;
    if (k <= 0) {
        k = (int)(2000000 / n);
        k = k < 50 ? 50 : k > 500 ? 500 : k;
    }
    double *samples = mesh_calloc((size_t)k, sizeof(double));
    struct mesh_render_input in = {
        .slice = &slice,
        .workers = w,
        .nworkers = n,
        .expected = (int)n,
        .self_index = (int)(n / 3),
        .job_name = NULL,
        .port = 9991,
        .generation = 123456,
        .complete = true,
    };
    in.mode = MESH_ADDR_IP;
    int rc = bench_one(&in, "ip", k, samples);
    if (rc == 0) {
        in.mode = MESH_ADDR_DNS;
        rc = bench_one(&in, "dns", k, samples);
    }
    mesh_free(samples);
    mesh_free(w);
    mesh_free(nm);
    return rc;
}

static int parse_num(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || (*end != '\0' && *end != ',') || v < lo || v > hi) {
        return -1;
    }
    *out = v;
    return (int)(end - s);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: render_bench [-n N[,N...]] [-k K] [-s SEED]\n"
            "  N 1..%d workers (default 1024,4096,16384), K runs per renderer\n",
            MESH_RENDER_MAX_WORKERS);
    return 2;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {1024, 4096, 16384};
    int nsizes = 3;
    long k = 0;
    long seed = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            return usage();
        }
        const char *v = argv[++i];
        if (strcmp(argv[i - 1], "-n") == 0) {
            nsizes = 0;
            while (*v != '\0') {
                long n = 0;
                int used = parse_num(v, 1, MESH_RENDER_MAX_WORKERS, &n);
                if (used < 0 || nsizes == MAX_SIZES) {
                    return usage();
                }
                sizes[nsizes++] = (size_t)n;
                v += used;
                v += *v == ',' ? 1 : 0;
            }
        } else if (strcmp(argv[i - 1], "-k") == 0) {
            if (parse_num(v, 1, 1000000, &k) < 0 || v[strcspn(v, ",")] != '\0') {
                return usage();
            }
        } else if (strcmp(argv[i - 1], "-s") == 0) {
            if (parse_num(v, 0, 1L << 30, &seed) < 0 || v[strcspn(v, ",")] != '\0') {
                return usage();
            }
        } else {
            return usage();
        }
    }
    for (int i = 0; i < nsizes; i++) {
        if (bench_size(sizes[i], (int)k, (uint64_t)seed) != 0) {
            return 1;
        }
    }
    return 0;
}
