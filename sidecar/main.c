/*
 * main.c - tpumesh-sidecar: flags, identity, the informer and HTTP threads,
 * and the main loop (docs/DESIGN.md §1, §6; issue 5).
 *
 * The main thread polls three things: a signalfd (SIGTERM/SIGINT, blocked
 * in every thread before any is created, docs/STYLE.md R7/R18), the informer's
 * notify eventfd (the store changed), and a one-second tick (retry a failed
 * publish, re-check --verify-dns, track API progress for /healthz). On
 * SIGTERM it stops the informer (which cancels its in-flight request within
 * ~100 ms), lets the current publish (synchronous, on this thread) finish,
 * stops the HTTP server and exits 0; the published files stay.
 */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "core/cleanup.h"
#include "core/mem.h"
#include "io/cliopts.h"
#include "grpc_server.h"
#include "io/k8s_client.h"
#include "k8s_informer.h"
#include "io/secret.h"
#include "io/log.h"
#include "relay_client.h"
#include "io/sys.h"
#include "sidecar.h"

#define MOD "sidecar"

static void *informer_thread(void *arg)
{
    struct mesh_k8s_informer *inf = arg;
    struct mesh_err err;
    mesh_err_clear(&err);
    if (mesh_k8s_informer_run(inf, &err) < 0) {
        mesh_error("k8s", "informer stopped: %s", err.msg);
    }
    return NULL;
}

struct mesh_k8s_client *mesh_sidecar_client_new(const struct mesh_sidecar_opts *o,
                                                struct mesh_err *err)
{
    struct mesh_k8s_client_opts co = {
        .apiserver = o->apiserver,
        .token_file = o->token_file,
        .ca_file = o->ca_file,
        .kubeconfig = o->kubeconfig,
        .user_agent = "tpumesh-sidecar/" MESH_VERSION,
    };
    return mesh_k8s_client_new(&co, err);
}

/* Wait for SIGTERM/SIGINT while something slow runs on another thread. */
struct stopper {
    int sfd;
    volatile int stop;
    pthread_t thread;
};

static void *stopper_thread(void *arg)
{
    struct stopper *s = arg;
    struct pollfd p = {s->sfd, POLLIN, 0};
    while (!s->stop) {
        if (poll(&p, 1, 100) > 0) {
            s->stop = 1;
        }
    }
    return NULL;
}

int mesh_sidecar_direct_start(struct mesh_sidecar *ctx, struct mesh_err *err)
{
    /* The informer gets its own client: a client serves one thread. */
    struct mesh_k8s_client *wc = mesh_sidecar_client_new(&ctx->opts, err);
    if (wc == NULL) {
        return -MESH_E_CONFIG;
    }
    struct mesh_k8s_informer_opts io = {
        .query = {.ns = ctx->ns, .resource = "pods", .label_selector = ctx->selector},
        /* Pages of 500 pods (client-go's size): the informer parses a page
         * item by item, so its size no longer sets the peak memory, and
         * fewer pages mean fewer round trips. */
        .page_limit = 500,
        .stall_timeout_s = ctx->opts.stall_timeout_s,
        .extract = mesh_sidecar_extract,
        .record_free = mesh_sidecar_record_free,
        .equal = mesh_sidecar_record_equal,
        .cb = {mesh_sidecar_on_add, mesh_sidecar_on_update, mesh_sidecar_on_delete,
               mesh_sidecar_on_synced},
        .ctx = ctx,
    };
    struct mesh_k8s_informer *inf = mesh_k8s_informer_new(wc, &io, err);
    if (inf == NULL) {
        mesh_k8s_client_free(wc);
        return -MESH_E_CONFIG;
    }
    pthread_mutex_lock(&ctx->mu);
    ctx->inf = inf;
    ctx->wclient = wc;
    pthread_mutex_unlock(&ctx->mu);
    if (pthread_create(&ctx->inf_thread, NULL, informer_thread, inf) != 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "cannot start the watch thread");
    }
    ctx->inf_running = true;
    return 0;
}

void mesh_sidecar_direct_stop(struct mesh_sidecar *ctx)
{
    if (ctx->inf == NULL) {
        return;
    }
    if (ctx->inf_running) {
        mesh_k8s_informer_stop(ctx->inf);
        pthread_join(ctx->inf_thread, NULL);
        ctx->inf_running = false;
    }
    pthread_mutex_lock(&ctx->mu);
    struct mesh_k8s_informer *inf = ctx->inf;
    struct mesh_k8s_client *wc = ctx->wclient;
    ctx->inf = NULL;
    ctx->wclient = NULL;
    pthread_mutex_unlock(&ctx->mu);
    mesh_k8s_informer_free(inf);
    mesh_k8s_client_free(wc);
    ctx->api_progress = 0;
    ctx->api_watches = ctx->api_failures = 0;
}

/* Liveness bookkeeping, once a second: the loop ticked, and the source
 * (API watch counters, or relay messages) showed progress. */
static void tick_progress(struct mesh_sidecar *ctx, int64_t mono)
{
    uint64_t pr = 0;
    bool new_watch = false;
    int64_t progress_at = mono;
    if (ctx->inf != NULL && !ctx->following) {
        struct mesh_k8s_informer_stats s;
        mesh_k8s_informer_stats(ctx->inf, &s);
        pr = s.lists + s.events + s.bookmarks + s.pages;
        /* A new watch is progress only when no request failed since the
         * last tick: retries against an API server that cannot be reached
         * start a watch every few seconds and must not keep /healthz at 200. */
        new_watch = s.watches != ctx->api_watches && s.failures == ctx->api_failures;
        ctx->api_watches = s.watches;
        ctx->api_failures = s.failures;
    } else {
        /* Following a relay: progress is when the relay's source (the root's
         * API watch) last moved, as its message says (received at
         * last_msg_ms, source_age_ms old then), not when a heartbeat came:
         * heartbeats from a stuck root must not look like progress here
         * nor to this sidecar's own subscribers. Moves under 250 ms are
         * the jitter of two heartbeats of one unchanged source. */
        struct mesh_relay_status rs;
        bool have = false;
        mesh_sidecar_relay_status(ctx, &rs, &have);
        int64_t src = have && rs.last_msg_ms > 0 ? rs.last_msg_ms - rs.source_age_ms : 0;
        int64_t at = src > ctx->relay_src_ms + 250 ? src : 0;
        if (at > 0) {
            ctx->relay_src_ms = src;
            pr = ctx->api_progress + 1;
            progress_at = at < mono ? at : mono;
        } else {
            pr = ctx->api_progress;
        }
    }
    pthread_mutex_lock(&ctx->mu);
    ctx->st.loop_tick_ms = mono; /* /healthz: the loop is alive */
    bool moved = pr != ctx->api_progress || new_watch || ctx->st.last_progress_ms == 0;
    if (moved) {
        ctx->api_progress = pr;
        ctx->st.last_progress_ms = progress_at;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (ctx->grpc != NULL && moved) {
        mesh_grpc_server_note_progress(ctx->grpc, progress_at);
    }
}

static int run_loop(struct mesh_sidecar *ctx, int sfd)
{
    int64_t last_tick = 0;
    for (;;) {
        int nfd = ctx->inf != NULL ? mesh_k8s_informer_notify_fd(ctx->inf) : -1;
        struct pollfd p[3] = {{sfd, POLLIN, 0}, {nfd, POLLIN, 0}, {ctx->wake_fd, POLLIN, 0}};
        /* A held-back publish (topology.c, coalescing) is due at hold_until_ms. */
        int timeout = 1000;
        if (ctx->hold_until_ms > 0) {
            int64_t left = ctx->hold_until_ms - mesh_sys_now_ms();
            timeout = left <= 0 ? 0 : (left < 1000 ? (int)left : 1000);
        }
        int n = poll(p, 3, timeout);
        int64_t woke_us = mesh_sys_now_us();
        if (n < 0 && errno != EINTR) {
            mesh_error(MOD, "poll: %s", strerror(errno));
            return -1;
        }
        if (n > 0 && (p[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                mesh_info(MOD, "received %s: stopping the watch", strsignal((int)si.ssi_signo));
            }
            if (ctx->hold_until_ms > 0 && mesh_sidecar_source_synced(ctx)) {
                /* Nothing held back is lost: publish the last state now. */
                mesh_info(MOD, "publishing the %llu change%s held back before stopping",
                          (unsigned long long)ctx->held, ctx->held == 1 ? "" : "s");
                ctx->flush = true;
                (void)mesh_sidecar_recompute(ctx, mesh_sys_wall_ms(), woke_us);
            }
            return 0;
        }
        for (int i = 1; i < 3; i++) {
            if (n > 0 && (p[i].revents & POLLIN)) {
                uint64_t v;
                (void)!read(p[i].fd, &v, sizeof(v));
            }
        }
        mesh_sidecar_relay_tick(ctx);
        int64_t mono = mesh_sys_now_ms();
        bool tick = mono - last_tick >= 1000;
        if (tick) {
            last_tick = mono;
            tick_progress(ctx, mono);
        }
        bool dirty = atomic_load(&ctx->changes) != ctx->changes_seen;
        bool retry = tick && (ctx->publish_pending ||
                              (ctx->opts.verify_dns && ctx->have_cur && !ctx->last_complete));
        bool due = ctx->hold_until_ms > 0 && mono >= ctx->hold_until_ms;
        if (mesh_sidecar_source_synced(ctx) && (dirty || retry || due)) {
            (void)mesh_sidecar_recompute(ctx, mesh_sys_wall_ms(), woke_us);
        }
        mesh_sidecar_grpc_update(ctx);
        if (ctx->http != NULL && ctx->generation != ctx->http_gen) {
            ctx->http_gen = ctx->generation;
            mesh_sidecar_http_notify(ctx->http);
        }
    }
}

static int setup_signals(struct mesh_err *err)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    /* Blocked before any thread exists, so every thread inherits the mask
     * and only the signalfd sees them. */
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "block signals");
    }
    int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) {
        return mesh_err_set(err, MESH_E_IO, errno, "signalfd");
    }
    signal(SIGPIPE, SIG_IGN);
    /* Over RLIMIT_FSIZE a write fails with EFBIG (a publish failure, logged
     * and retried) instead of SIGXFSZ ending the process. */
    signal(SIGXFSZ, SIG_IGN);
    return fd;
}

static int start(struct mesh_sidecar *ctx, int sfd, struct mesh_sidecar_http **out_http,
                 int *out_grpc_port, struct mesh_err *err)
{
    int port = 0;
    *out_http = mesh_sidecar_http_start(ctx, ctx->opts.http_addr, &port, err);
    if (*out_http == NULL) {
        return err->code != 0 ? -err->code : -MESH_E_IO; /* a bad address is a config error */
    }
    ctx->http = *out_http;
    /* ":PORT" binds every address: say so, since --http-addr and --grpc-addr are
     * independent and a loopback HTTP address leaves gRPC where its own flag puts it. */
    mesh_info(MOD, "http: serving /healthz /readyz /metrics /topology /watch on %s%s (port %d)",
              ctx->opts.http_addr, ctx->opts.http_addr[0] == ':' ? ", every address" : "", port);
    struct mesh_grpc_server_opts go = {
        .addr = ctx->opts.grpc_addr,
        .max_pod_streams = ctx->opts.relay_fanout,
        .max_streams = ctx->opts.relay_fanout + 64,
        .health = mesh_sidecar_grpc_health,
        .on_subscriber = mesh_sidecar_grpc_wake,
        .ctx = ctx,
    };
    ctx->grpc = mesh_grpc_server_start(&go, &port, err);
    if (ctx->grpc == NULL) {
        return err->code != 0 ? -err->code : -MESH_E_IO;
    }
    mesh_info(MOD, "grpc: serving grpc.health.v1.Health and tpumesh.v1.Topology on %s%s (port %d)",
              ctx->opts.grpc_addr, ctx->opts.grpc_addr[0] == ':' ? ", every address" : "", port);
    *out_grpc_port = port;

    /* Own pod first, on a client of this thread; a signal stops the retries. */
    struct mesh_k8s_client *c = mesh_sidecar_client_new(&ctx->opts, err);
    if (c == NULL) {
        return -MESH_E_CONFIG;
    }
    mesh_info("k8s", "API server %s (%s)", mesh_k8s_client_server(c), mesh_k8s_client_source(c));
    struct stopper st = {.sfd = sfd};
    pthread_create(&st.thread, NULL, stopper_thread, &st);
    int rc = mesh_sidecar_identify(ctx, c, &st.stop, err);
    if (rc == 0) {
        rc = mesh_sidecar_load_state(ctx, err);
    }
    if (rc == 0) {
        rc = mesh_sidecar_expected(ctx, c, &st.stop, err);
    }
    if (rc == 0) {
        rc = mesh_sidecar_check_selector(ctx, c, &st.stop, err);
    }
    if (rc == 0) {
        rc = mesh_sidecar_job_identify(ctx, c);
    }
    int stopped = st.stop;
    st.stop = 1;
    pthread_join(st.thread, NULL);
    mesh_k8s_client_free(c);
    if (rc < 0 || stopped) {
        return stopped ? 1 : rc;
    }
    mesh_grpc_server_set_scope(ctx->grpc, ctx->ns, ctx->selector);
    pthread_mutex_lock(&ctx->mu);
    snprintf(ctx->st.reason, sizeof(ctx->st.reason),
             "waiting for the first list of pods (selector %.400s)", ctx->selector);
    ctx->st.generation = ctx->generation;
    pthread_mutex_unlock(&ctx->mu);

    (void)mesh_sidecar_relay_plan(ctx);
    if (ctx->relay_mode && ctx->rank > 0) {
        return mesh_sidecar_relay_start(ctx, *out_grpc_port, err);
    }
    return mesh_sidecar_direct_start(ctx, err);
}

/* The teardown after the loop (SIGTERM's drain, docs/DESIGN.md §6): the
 * watch or relay subscription first, then the servers, then everything the
 * process holds. The published files stay. */
static void stop_all(struct mesh_sidecar *ctx, struct mesh_sidecar_http *http)
{
    if (ctx->inf_running || ctx->relay != NULL) {
        int64_t t0 = mesh_sys_now_ms();
        if (ctx->inf_running) {
            mesh_k8s_informer_stop(ctx->inf);
            pthread_join(ctx->inf_thread, NULL);
            ctx->inf_running = false;
        }
        mesh_info(MOD, "watch stopped in %lld ms; files stay at generation %llu",
                  (long long)(mesh_sys_now_ms() - t0), (unsigned long long)ctx->generation);
    }
    ctx->http = NULL;
    mesh_sidecar_http_stop(http);
    mesh_grpc_server_stop(ctx->grpc);
    ctx->grpc = NULL;
    mesh_sidecar_relay_stop(ctx);
    mesh_sidecar_direct_stop(ctx);
    if (ctx->wake_fd >= 0) {
        close(ctx->wake_fd);
    }
    mesh_sidecar_topology_cleanup(ctx);
    mesh_sidecar_opts_cleanup(&ctx->opts);
    mesh_sidecar_job_cleanup(ctx);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->chg_mu);
}

int main(int argc, char **argv)
{
    /* One malloc arena for every thread. glibc gives each thread that
     * allocates its own arena (up to 8 x cores: 64+ on a TPU host's CPUs),
     * and memory freed in one is not reused by another: the informer
     * thread's parse garbage and the main thread's render buffers would
     * each keep their own high-water mark. Our threads are few and
     * allocate little at a time, so the shared lock costs nothing
     * measurable. M_TRIM_THRESHOLD / M_MMAP_THRESHOLD / malloc_trim were
     * left out: they lower the resting RSS but not the peak, and add page
     * faults to every publish (bench/sidecar/RESULTS.md). */
    (void)mallopt(M_ARENA_MAX, 1);
    /* The API token stays in the process: no core dump (a crash would
     * write it to disk), no ptrace or /proc/<pid>/mem by another process
     * of the same user. */
    (void)mesh_secret_no_dumps();
    static struct mesh_sidecar ctx; /* large; zero-initialised */
    struct mesh_err err;
    mesh_err_clear(&err);
    mesh_sidecar_log_setup(argc, argv);
    int rc = mesh_sidecar_opts_parse(argc, argv, &ctx.opts, &err);
    if (rc != 0) {
        mesh_sidecar_opts_cleanup(&ctx.opts);
        return rc > 0 ? 0 : mesh_cliopts_fail(MOD, &err);
    }
    mesh_log_setup(ctx.opts.log_level, ctx.opts.log_format);
    /* Each sidecar its own jitter (relay fallback delays and retry pauses). */
    srandom((unsigned)getpid() ^ (unsigned)mesh_sys_now_us());
    pthread_mutex_init(&ctx.mu, NULL);
    pthread_mutex_init(&ctx.chg_mu, NULL);
    /* /readyz says why it is not ready from the first request on. */
    snprintf(ctx.st.reason, sizeof(ctx.st.reason), "starting: reading this pod %.253s",
             ctx.opts.pod_name ? ctx.opts.pod_name : "");
    ctx.self_hint = -1;
    /* Port and address mode are logged once they are final (identity.c:
     * the own pod's annotations may set them). */
    mesh_info(MOD, "tpumesh-sidecar %s starting: out-dir %s", MESH_VERSION, ctx.opts.out_dir);

    int exit_code = 0;
    struct mesh_sidecar_http *http = NULL;
    int grpc_port = 0;
    ctx.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    mesh_autoclose int sfd = setup_signals(&err);
    if (sfd < 0) {
        mesh_error(MOD, "%s", err.msg);
        exit_code = 1;
        goto out;
    }
    rc = start(&ctx, sfd, &http, &grpc_port, &err);
    if (rc == 1) {
        mesh_info(MOD, "stopped before the first LIST; exiting");
        goto out;
    }
    if (rc < 0) {
        mesh_error(MOD, "%s", err.msg);
        exit_code = rc == -MESH_E_CONFIG ? 2 : 1;
        goto out;
    }
    if (run_loop(&ctx, sfd) < 0) {
        exit_code = 1;
    }

out:
    stop_all(&ctx, http);
    return exit_code;
}
