/*
 * test_render_cache.c - the incremental renderer (core/render.h,
 * mesh_render_cache_*) against the full one: long random sequences of
 * changes (ip, host, pod name, readiness, index, workers added and removed,
 * address mode, own index, completeness, generation, job name, port, slice,
 * expected count), hostile values among them, and after every step the
 * cache's bytes and errors must be exactly mesh_render_all's, and its
 * changed-file mask exactly the files whose bytes differ from the last ones
 * it rendered.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/render.h"
#include "core/workers.h"

/* xorshift64*: deterministic per seed, so a failure names its seed. */
static uint64_t rnd_state;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 2685821657736338717ULL;
}

static size_t pick(size_t n)
{
    return (size_t)(rnd() % n);
}

static char long_name[300];

/* Valid values of several lengths (so splices move the tail both ways) and
 * values the validators reject. */
static const char *const pods[] = {
    "w-0",   "w-1",      "trainer-17", "a",     "job-worker-0-abcde", "x.y", "",
    "UPPER", "bad name", "ev'il",      "-dash",
};
static const char *const hosts[] = {
    "w-0.job.ns.svc", "h",        "trainer-3.trainer.default.svc.cluster.local",
    "10.1.2.3",       "fd00::5",  "",
    "a..b",           "bad host", "x;rm -rf",
    "-lead",
};
static const char *const ips[] = {
    "10.0.0.1",   "10.200.100.250", "192.168.1.9",     "fd00::1",   "2001:db8::a:b", "",
    "10.0.0.256", "1.2.3",          "::ffff:10.0.0.1", "not an ip", "10.0.0.01",
};
static const char *const jobs[] = {NULL, "", "worker", "trainer_2", "bad name", "9lead"};

static const char *pick_str(const char *const *tab, size_t n, size_t valid)
{
    /* Mostly valid values: a hostile one makes the whole render fail, and
     * long runs of valid steps are what exercise the splices. */
    if (pick(20) == 0) {
        return pick(8) == 0 ? long_name : tab[pick(n)];
    }
    return tab[pick(valid)];
}

#define NPODS (sizeof(pods) / sizeof(pods[0]))
#define NHOSTS (sizeof(hosts) / sizeof(hosts[0]))
#define NIPS (sizeof(ips) / sizeof(ips[0]))

struct model {
    struct mesh_worker w[96];
    size_t n;
    struct mesh_slice slice;
    bool have_slice;
    const char *job;
    int port;
    enum mesh_addr_mode mode;
    int self;
    int expected;
    uint64_t generation;
    bool complete;
    int slices; /* multi-slice: tpu.env lists one slice */
    int mport;
    const char *jaxc;
};

static void slice_v4_32(struct mesh_slice *s)
{
    memset(s, 0, sizeof(*s));
    s->gen = MESH_GEN_V4;
    snprintf(s->accelerator_type, sizeof(s->accelerator_type), "v4-32");
    snprintf(s->topology, sizeof(s->topology), "2x2x4");
    s->ndims = 3;
    s->dims[0] = 2, s->dims[1] = 2, s->dims[2] = 4;
    s->chips = 16, s->hosts = 4, s->chips_per_host = 4, s->cores_per_chip = 2;
    s->devices_per_host = 4;
    s->host_bounds[0] = 1, s->host_bounds[1] = 1, s->host_bounds[2] = 4;
    s->chips_per_host_bounds[0] = 2, s->chips_per_host_bounds[1] = 2;
    s->chips_per_host_bounds[2] = 1;
    s->mesh_shape[0] = 2, s->mesh_shape[1] = 2, s->mesh_shape[2] = 4, s->mesh_shape[3] = 1;
}

static void valid_worker(struct mesh_worker *w, size_t i)
{
    w->index = (int)i;
    w->pod = pods[pick(6)];
    w->host = hosts[pick(5)];
    w->ip = ips[pick(5)];
    w->ready = pick(2) == 0;
    w->terminating = false;
}

static void model_init(struct model *m, size_t n)
{
    memset(m, 0, sizeof(*m));
    m->n = n;
    for (size_t i = 0; i < n; i++) {
        valid_worker(&m->w[i], i);
    }
    slice_v4_32(&m->slice);
    m->have_slice = pick(2) == 0;
    m->job = jobs[pick(4)];
    m->port = 10000;
    m->mode = MESH_ADDR_IP;
    m->self = 0;
    m->generation = 1;
    m->complete = true;
}

/* One random change; most touch one worker, as the sidecar's events do. */
static void mutate(struct model *m)
{
    size_t i = m->n > 0 ? pick(m->n) : 0;
    switch (pick(26)) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
        if (m->n > 0) {
            m->w[i].ip = pick_str(ips, NIPS, 5);
        }
        break;
    case 5:
    case 6:
        if (m->n > 0) {
            m->w[i].host = pick_str(hosts, NHOSTS, 5);
        }
        break;
    case 7:
    case 8:
        if (m->n > 0) {
            m->w[i].pod = pick_str(pods, NPODS, 6);
        }
        break;
    case 9:
    case 10:
    case 11:
        if (m->n > 0) {
            m->w[i].ready = !m->w[i].ready;
        }
        break;
    case 12:
        if (m->n > 0) {
            m->w[i].index = pick(4) == 0 ? (int)pick(m->n + 2) : (int)i;
        }
        break;
    case 13:
        if (m->n < sizeof(m->w) / sizeof(m->w[0])) {
            valid_worker(&m->w[m->n], m->n);
            m->n++;
        }
        break;
    case 14:
        if (m->n > 0) {
            m->n--;
        }
        break;
    case 15:
        m->mode = (enum mesh_addr_mode)pick(3);
        break;
    case 16:
        m->self = pick(6) == 0 ? (int)pick(m->n + 2) - 1 : (int)(m->n > 0 ? pick(m->n) : 0);
        break;
    case 17:
    case 18:
        m->complete = !m->complete;
        break;
    case 19:
        m->generation = pick(10) == 0 ? 9007199254740990ULL + pick(3) : m->generation + 1;
        break;
    case 20:
        m->job = jobs[pick(sizeof(jobs) / sizeof(jobs[0]))];
        break;
    case 21:
        m->port = pick(8) == 0 ? (int)pick(3) * 70000 : (pick(2) == 0 ? 10000 : 8470);
        break;
    case 22:
        m->have_slice = !m->have_slice;
        break;
    case 23: {
        /* Mostly a slice count that divides the job, so renders succeed. */
        int k = (int)pick(5);
        if (pick(4) != 0) {
            while (k > 1 && m->n % (size_t)k != 0) {
                k--;
            }
        }
        m->slices = k;
        break;
    }
    case 24: {
        static const char *const coords[] = {NULL,       "",        "coord.js.ns",
                                             "10.9.0.1", "fd00::1", "bad host"};
        m->jaxc = coords[pick(sizeof(coords) / sizeof(coords[0]))];
        m->mport = pick(4) == 0 ? (int)pick(3) * 40000 : 0;
        break;
    }
    default:
        m->expected = pick(3) == 0 ? (int)m->n + 1 : (pick(2) == 0 ? 0 : (int)m->n);
        break;
    }
}

/* The last bytes of each file the cache rendered, to check its mask. */
struct last {
    char *data[MESH_FILE__COUNT];
    size_t len[MESH_FILE__COUNT];
};

static void last_forget(struct last *l)
{
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        mesh_free(l->data[i]);
        l->data[i] = NULL;
        l->len[i] = 0;
    }
}

/* Move the cache to the next generation as the sidecar does before a
 * publish, and check it against a full render at that generation. */
static void next_generation(struct mesh_render_cache *c, struct model *m, struct last *last)
{
    struct mesh_worker *copy = mesh_workers_copy(m->w, m->n);
    m->generation = m->generation >= 9007199254740991ULL ? 3 : m->generation + 1;
    struct mesh_render_input in = {
        .slice = m->have_slice ? &m->slice : NULL,
        .workers = copy,
        .nworkers = m->n,
        .expected = m->expected,
        .self_index = m->self,
        .job_name = m->job,
        .port = m->port,
        .mode = m->mode,
        .generation = m->generation,
        .complete = m->complete,
        .slices = m->slices,
        .megascale_port = m->mport,
        .jax_coordinator = m->jaxc,
    };
    struct mesh_render_out full, view;
    mesh_render_out_init(&full);
    assert_int_equal(mesh_render_all(&in, &full, NULL), 0);
    assert_int_equal(mesh_render_cache_set_generation(c, &in, NULL), 0);
    mesh_free(copy);
    mesh_render_cache_view(c, &view);
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        assert_int_equal(full.len[i], view.len[i]);
        if (full.data[i] != NULL) {
            assert_memory_equal(full.data[i], view.data[i], full.len[i]);
            mesh_free(last->data[i]);
            last->data[i] = full.data[i];
            last->len[i] = full.len[i];
            full.data[i] = NULL;
        }
    }
    mesh_render_out_cleanup(&full);
}

/* The workers of the previous update's input, to hand the cache a dirty
 * list (render.h) on half the steps: exactly the workers that changed, plus
 * now and then an unchanged one, a repeat, or an index past the end. */
static struct mesh_worker prev_w[96];
static size_t prev_n;

static bool worker_differs(const struct mesh_worker *a, const struct mesh_worker *b)
{
    return a->index != b->index || a->ready != b->ready || a->terminating != b->terminating ||
           strcmp(a->pod, b->pod) != 0 || strcmp(a->host, b->host) != 0 ||
           strcmp(a->ip, b->ip) != 0;
}

static size_t dirty_list(const struct model *m, size_t *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n && k + 3 < cap; i++) {
        if (i >= prev_n || worker_differs(&m->w[i], &prev_w[i])) {
            out[k++] = i;
            if (pick(8) == 0) {
                out[k++] = i; /* a repeat */
            }
        } else if (pick(16) == 0) {
            out[k++] = i; /* unchanged, listed anyway */
        }
    }
    if (pick(32) == 0) {
        out[k++] = m->n + pick(3); /* past the end: the list is ignored */
    }
    return k;
}

/* One step: the same input through both renderers. Returns whether the
 * render succeeded. */
static bool step(struct mesh_render_cache *c, struct model *m, struct last *last)
{
    /* A fresh one-block copy per step, freed right after, as the sidecar's
     * worker lists are: the cache must not keep pointers into its input. */
    struct mesh_worker *copy = mesh_workers_copy(m->w, m->n);
    struct mesh_render_input in = {
        .slice = m->have_slice ? &m->slice : NULL,
        .workers = copy,
        .nworkers = m->n,
        .expected = m->expected,
        .self_index = m->self,
        .job_name = m->job,
        .port = m->port,
        .mode = m->mode,
        .generation = m->generation,
        .complete = m->complete,
        .slices = m->slices,
        .megascale_port = m->mport,
        .jax_coordinator = m->jaxc,
    };
    struct mesh_err e1, e2;
    mesh_err_clear(&e1);
    mesh_err_clear(&e2);
    struct mesh_render_out full;
    mesh_render_out_init(&full);
    int rc1 = mesh_render_all(&in, &full, &e1);
    unsigned mask = 0xdead;
    size_t dirty[2 * 96 + 8];
    if (pick(2) == 0) {
        in.ndirty = dirty_list(m, dirty, sizeof(dirty) / sizeof(dirty[0]));
        in.dirty = dirty;
    }
    int rc2 = mesh_render_cache_update(c, &in, &mask, &e2);
    mesh_free(copy);
    memcpy(prev_w, m->w, m->n * sizeof(m->w[0]));
    prev_n = m->n;
    assert_int_equal(rc1, rc2);
    struct mesh_render_out view;
    mesh_render_cache_view(c, &view);
    if (rc1 < 0) {
        assert_int_equal(e1.code, e2.code);
        assert_string_equal(e1.msg, e2.msg);
        for (int i = 0; i < MESH_FILE__COUNT; i++) {
            assert_null(view.data[i]);
        }
        last_forget(last);
        return false;
    }
    unsigned want = 0;
    for (int i = 0; i < MESH_FILE__COUNT; i++) {
        if (full.data[i] == NULL) {
            assert_null(view.data[i]);
            continue;
        }
        assert_non_null(view.data[i]);
        assert_int_equal(full.len[i], view.len[i]);
        assert_memory_equal(full.data[i], view.data[i], full.len[i]);
        assert_int_equal(view.data[i][view.len[i]], '\0');
        if (last->data[i] == NULL || last->len[i] != full.len[i] ||
            memcmp(last->data[i], full.data[i], full.len[i]) != 0) {
            want |= 1u << i;
        }
        mesh_free(last->data[i]);
        last->data[i] = full.data[i];
        last->len[i] = full.len[i];
        full.data[i] = NULL;
    }
    assert_int_equal(want, mask);
    mesh_render_out_cleanup(&full);
    if (pick(2) == 0) {
        next_generation(c, m, last);
    }
    return true;
}

struct totals {
    size_t steps, ok;
    uint64_t full, patched;
};

static void run_seed(uint64_t seed, size_t steps, size_t max_n, struct totals *tot)
{
    tot->steps += steps;
    rnd_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    struct model m;
    model_init(&m, 1 + pick(max_n));
    struct mesh_render_cache *c = mesh_render_cache_new();
    struct last last;
    memset(&last, 0, sizeof(last));
    size_t ok = 0;
    for (size_t s = 0; s < steps; s++) {
        size_t k = 1 + (pick(4) == 0 ? pick(3) : 0);
        for (size_t j = 0; j < k; j++) {
            mutate(&m);
        }
        /* Drift back towards a valid, complete job so that long valid runs
         * (the incremental path) keep happening. */
        if (pick(6) == 0) {
            bool all = pick(2) == 0;
            for (size_t i = 0; i < m.n; i++) {
                m.w[i].index = (int)i;
                if (all || pick(4) == 0) {
                    valid_worker(&m.w[i], i);
                }
            }
            m.expected = 0;
            m.port = 10000;
            m.self = m.n > 0 ? (int)pick(m.n) : 0;
            m.job = jobs[pick(4)];
        }
        if (step(c, &m, &last)) {
            ok++;
        }
    }
    uint64_t full = 0, patched = 0;
    mesh_render_cache_counts(c, &full, &patched);
    tot->ok += ok;
    tot->full += full;
    tot->patched += patched;
    last_forget(&last);
    mesh_render_cache_free(c);
}

/* The sequences must reach both paths often, or they prove little. */
static void check_totals(const struct totals *t)
{
    print_message("%zu steps: %zu rendered, %llu full renders, %llu patched\n", t->steps, t->ok,
                  (unsigned long long)t->full, (unsigned long long)t->patched);
    assert_true(t->ok > t->steps / 3);
    assert_true(t->patched > t->steps / 6);
    assert_true(t->full > t->steps / 10);
}

static void test_random_sequences(void **state)
{
    (void)state;
    memset(long_name, 'a', sizeof(long_name) - 1);
    struct totals t = {0};
    for (uint64_t seed = 1; seed <= 60; seed++) {
        run_seed(seed, 400, 60, &t);
    }
    check_totals(&t);
}

/* Few workers: every change touches a large share, the edges (worker 0,
 * the last one, n = 1) come up often. */
static void test_small_jobs(void **state)
{
    (void)state;
    struct totals t = {0};
    for (uint64_t seed = 100; seed <= 160; seed++) {
        run_seed(seed, 300, 3, &t);
    }
    check_totals(&t);
}

/* The sidecar's case: a big job in ip mode, one IP at a time, with lengths
 * that move the tail; each step must patch, not re-render. */
static void test_single_ip_changes(void **state)
{
    (void)state;
    static char ipbuf[4096][16];
    size_t n = 4096;
    struct mesh_worker *w = mesh_calloc(n, sizeof(*w));
    static char names[4096][24];
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "trainer-%zu-x", i);
        snprintf(ipbuf[i], sizeof(ipbuf[i]), "10.%zu.%zu.%zu", i / 65536, i / 256 % 256, i % 256);
        w[i] = (struct mesh_worker){(int)i, names[i], "", ipbuf[i], true, false};
    }
    struct mesh_render_input in = {.workers = w,
                                   .nworkers = n,
                                   .port = 10000,
                                   .mode = MESH_ADDR_IP,
                                   .complete = true,
                                   .generation = 7,
                                   .self_index = 3};
    struct mesh_render_cache *c = mesh_render_cache_new();
    unsigned mask = 0;
    assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
    assert_int_equal(mask, 0x2f); /* every text file, first time */
    rnd_state = 42;
    for (int s = 0; s < 200; s++) {
        size_t i = pick(n);
        snprintf(ipbuf[i], sizeof(ipbuf[i]), "10.%d.%d.%d", (int)pick(256), (int)pick(256),
                 (int)pick(256));
        in.generation++;
        assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
        assert_false(mesh_render_cache_is_readiness_only(c));
        struct mesh_render_out full, view;
        mesh_render_out_init(&full);
        assert_int_equal(mesh_render_all(&in, &full, NULL), 0);
        mesh_render_cache_view(c, &view);
        for (int f = 0; f < MESH_FILE__COUNT; f++) {
            assert_int_equal(full.len[f], view.len[f]);
            if (full.data[f] != NULL) {
                assert_memory_equal(full.data[f], view.data[f], full.len[f]);
            }
        }
        mesh_render_out_cleanup(&full);
        /* A readiness flip changes topology.json alone. */
        w[i].ready = !w[i].ready;
        assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
        assert_int_equal(mask, 1u << MESH_FILE_TOPOLOGY_JSON);
        assert_true(mesh_render_cache_is_readiness_only(c));
        /* Nothing changed: nothing to rewrite. */
        assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
        assert_int_equal(mask, 0);
    }
    uint64_t full = 0, patched = 0;
    mesh_render_cache_counts(c, &full, &patched);
    assert_int_equal(full, 1);
    assert_int_equal(patched, 600);
    mesh_render_cache_free(c);
    mesh_free(w);
}

/* Many readiness flips in one update (more than a patch takes, so the
 * cache renders in full) are still a readiness-only change; the same flips
 * with one more change of any other kind are not. */
static void test_readiness_burst(void **state)
{
    (void)state;
    static const struct {
        size_t flips; /* workers whose readiness flips */
        int other;    /* 0 none, 1 an IP, 2 a pod name, 3 completeness, 4 the port */
        bool only;    /* readiness-only expected */
    } rows[] = {
        {1, 0, true},   {20, 0, true},  {33, 0, true},  {34, 0, true},
        {200, 0, true}, {256, 0, true}, {40, 1, false}, {40, 2, false},
        {40, 3, false}, {40, 4, false}, {0, 1, false},
    };
    static char names[256][24], ipbuf[256][16];
    struct mesh_worker w[256];
    size_t n = 256;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        print_message("%zu flips, other change %d\n", rows[r].flips, rows[r].other);
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof(names[i]), "trainer-%zu-x", i);
            snprintf(ipbuf[i], sizeof(ipbuf[i]), "10.0.%zu.%zu", i / 256, i % 256);
            w[i] = (struct mesh_worker){(int)i, names[i], "", ipbuf[i], i % 3 == 0, false};
        }
        struct mesh_render_input in = {.workers = w,
                                       .nworkers = n,
                                       .expected = (int)n,
                                       .port = 10000,
                                       .mode = MESH_ADDR_IP,
                                       .complete = true,
                                       .generation = 3,
                                       .self_index = 1};
        struct mesh_render_cache *c = mesh_render_cache_new();
        unsigned mask = 0;
        assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
        for (size_t k = 0; k < rows[r].flips; k++) {
            size_t i = (k * 7) % n; /* spread over the list; 7 and 256 are coprime */
            w[i].ready = !w[i].ready;
        }
        switch (rows[r].other) {
        case 1:
            snprintf(ipbuf[5], sizeof(ipbuf[5]), "10.9.9.9");
            break;
        case 2:
            snprintf(names[6], sizeof(names[6]), "trainer-6-y");
            break;
        case 3:
            in.complete = false;
            break;
        case 4:
            in.port = 10001;
            break;
        default:
            break;
        }
        assert_int_equal(mesh_render_cache_update(c, &in, &mask, NULL), 0);
        assert_int_equal(mesh_render_cache_is_readiness_only(c), rows[r].only);
        if (rows[r].only) {
            assert_int_equal(mask, 1u << MESH_FILE_TOPOLOGY_JSON);
        }
        /* The bytes are those of a full render either way. */
        struct mesh_render_out full, view;
        mesh_render_out_init(&full);
        assert_int_equal(mesh_render_all(&in, &full, NULL), 0);
        mesh_render_cache_view(c, &view);
        assert_int_equal(full.len[MESH_FILE_TOPOLOGY_JSON], view.len[MESH_FILE_TOPOLOGY_JSON]);
        assert_memory_equal(full.data[MESH_FILE_TOPOLOGY_JSON], view.data[MESH_FILE_TOPOLOGY_JSON],
                            full.len[MESH_FILE_TOPOLOGY_JSON]);
        mesh_render_out_cleanup(&full);
        mesh_render_cache_free(c);
    }
}

/* set_generation refuses an empty cache and a generation above 2^53 - 1,
 * leaving the bytes as they were. */
static void test_set_generation_errors(void **state)
{
    (void)state;
    static const struct mesh_worker w[1] = {{0, "w-0", "", "10.0.0.1", true, false}};
    struct mesh_render_input in = {
        .workers = w, .nworkers = 1, .port = 10000, .mode = MESH_ADDR_IP, .complete = true};
    struct mesh_render_cache *c = mesh_render_cache_new();
    struct mesh_err err;
    assert_int_equal(mesh_render_cache_set_generation(c, &in, &err), -MESH_E_INVAL);
    in.generation = 9007199254740991ULL;
    assert_int_equal(mesh_render_cache_update(c, &in, NULL, &err), 0);
    struct mesh_render_out view;
    mesh_render_cache_view(c, &view);
    char *before = mesh_strdup(view.data[MESH_FILE_TOPOLOGY_JSON]);
    in.generation++;
    assert_int_equal(mesh_render_cache_set_generation(c, &in, &err), -MESH_E_RANGE);
    mesh_render_cache_view(c, &view);
    assert_string_equal(before, view.data[MESH_FILE_TOPOLOGY_JSON]);
    mesh_free(before);
    mesh_render_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_sequences),      cmocka_unit_test(test_small_jobs),
        cmocka_unit_test(test_single_ip_changes),     cmocka_unit_test(test_readiness_burst),
        cmocka_unit_test(test_set_generation_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
