/*
 * k8s_driver.c - test driver for the Kubernetes client and informer: runs
 * an informer on its own thread (as the sidecar does) and prints every
 * store change as one line on stdout, so integration tests can check the
 * client against the kube-apiserver simulator.
 *
 *   ADD <ns/name> rv=<rv> ip=<ip> ready=<0|1> phase=<phase>
 *   UPDATE <ns/name> rv=<old>-><new> ip=<ip> ready=<0|1> phase=<phase>
 *   DELETE <ns/name> rv=<rv>
 *   SYNCED <count>
 *   STORE <ns/name> rv=<rv> ip=<ip> ready=<0|1> phase=<phase>   (on SIGUSR1, then END <n>)
 *   STATS lists=.. relists=.. watches=.. events=.. bookmarks=.. failures=.. changes=..
 *         wakeups=.. badtime=.. starts=<reason>:<n>,.. errors=<label>:<n>,.. rv=..
 *         (at exit; wakeups = times the notify fd woke the main loop; badtime =
 *         callbacks whose mesh_k8s_informer_event_time_us was 0 or in the future;
 *         starts = watch starts by reason, errors = API errors by label, "-" if none)
 *   MEM heap=<live heap bytes>            (after each SYNCED, for bench/k8s_client)
 *   PROGRESS changes=<n>                  (--quiet: every 1,000 changes instead of the lines)
 *
 * Modes: default = informer until SIGTERM/SIGINT; --get NAME = one GET
 * (prints GOT <ns/name> rv=.. ip=..); --list = one paginated LIST walk,
 * streamed item by item (prints LISTED <n> kind=<kind> rv=<rv> pages=<p>). Exit 0, or 1 with the
 * error on stderr (2 for usage / configuration).
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "io/k8s_client.h"
#include "sidecar/k8s_informer.h"
#include "io/log.h"

/* The compact record the driver keeps per pod (what a sidecar needs). */
struct pod_rec {
    char rv[24]; /* kept here only so the driver can print it */
    char ip[46];
    char phase[12];
    bool ready;
};

static void *extract(void *ctx, const cJSON *obj)
{
    (void)ctx;
    struct pod_rec *r = mesh_calloc(1, sizeof(*r));
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(obj, "status");
    const char *ip = mesh_json_str(status, "podIP");
    const char *phase = mesh_json_str(status, "phase");
    snprintf(r->ip, sizeof(r->ip), "%s", ip ? ip : "");
    snprintf(r->phase, sizeof(r->phase), "%s", phase ? phase : "");
    const char *rv =
        mesh_json_str(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "resourceVersion");
    snprintf(r->rv, sizeof(r->rv), "%s", rv ? rv : "");
    const cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
    const cJSON *c;
    cJSON_ArrayForEach(c, conds)
    {
        const char *type = mesh_json_str(c, "type");
        const char *st = mesh_json_str(c, "status");
        if (type && st && strcmp(type, "Ready") == 0) {
            r->ready = strcmp(st, "True") == 0;
        }
    }
    return r;
}

static void rec_free(void *ctx, void *rec)
{
    (void)ctx;
    mesh_free(rec);
}

struct drv {
    struct mesh_k8s_informer *inf;
    bool quiet; /* no per-change lines (benchmarks) */
    uint64_t changes;
    uint64_t badtime; /* callbacks without a plausible event time */
};

/* The informer's event time must be set and not in the future. */
static void check_time(struct drv *d)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    int64_t t = mesh_k8s_informer_event_time_us(d->inf);
    if (t <= 0 || t > now) {
        d->badtime++;
    }
}

/* Live heap bytes (all arenas): what the store costs, for bench/k8s_client. */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void on_synced(void *ctx, size_t count)
{
    check_time(ctx);
    printf("SYNCED %zu\n", count);
    printf("MEM heap=%zu\n", heap_in_use());
    fflush(stdout);
}

/* In --quiet mode, one line every 1,000 changes (benchmarks follow progress). */
static void progress(struct drv *d)
{
    if (d->quiet && d->changes % 1000 == 0) {
        printf("PROGRESS changes=%" PRIu64 "\n", d->changes);
        fflush(stdout);
    }
}

static void on_add(void *ctx, const char *key, const void *rec)
{
    struct drv *d = ctx;
    const struct pod_rec *r = rec;
    check_time(d);
    d->changes++;
    progress(d);
    if (!d->quiet) {
        printf("ADD %s rv=%s ip=%s ready=%d phase=%s\n", key, r->rv, r->ip, r->ready, r->phase);
        fflush(stdout);
    }
}

static void on_update(void *ctx, const char *key, const void *old_rec, const void *new_rec)
{
    struct drv *d = ctx;
    const struct pod_rec *r = new_rec;
    (void)old_rec;
    check_time(d);
    d->changes++;
    progress(d);
    if (!d->quiet) {
        printf("UPDATE %s rv=%s ip=%s ready=%d phase=%s\n", key, r->rv, r->ip, r->ready, r->phase);
        fflush(stdout);
    }
}

static void on_delete(void *ctx, const char *key, const void *old_rec)
{
    struct drv *d = ctx;
    (void)old_rec;
    check_time(d);
    d->changes++;
    progress(d);
    if (!d->quiet) {
        printf("DELETE %s\n", key);
        fflush(stdout);
    }
}

static int print_one(void *ctx, const char *key, const char *rv, const void *rec)
{
    const struct pod_rec *r = rec;
    (void)ctx;
    printf("STORE %s rv=%s ip=%s ready=%d phase=%s\n", key, rv, r->ip, r->ready, r->phase);
    return 0;
}

static void dump(struct drv *d)
{
    mesh_k8s_informer_lock(d->inf);
    mesh_k8s_informer_foreach(d->inf, print_one, d);
    printf("END %zu\n", mesh_k8s_informer_count(d->inf));
    mesh_k8s_informer_unlock(d->inf);
    fflush(stdout);
}

static void *run_thread(void *arg)
{
    struct drv *d = arg;
    struct mesh_err err;
    if (mesh_k8s_informer_run(d->inf, &err) < 0) {
        fprintf(stderr, "k8s_driver: %s\n", err.msg);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: k8s_driver [--apiserver URL --token-file F --ca-file F | --kubeconfig F "
        "[--context C]]\n"
        "       [--namespace NS] [--selector S] [--field-selector S] [--limit N]\n"
        "       [--watch-timeout S] [--stall S] [--max-event BYTES] [--max-list BYTES]\n"
        "       [--backoff-ms MS] [--token-reload S] [--streaming-list] [--quiet] [--log-level L]\n"
        "       [--get NAME | --list]\n");
}

struct args {
    struct mesh_k8s_client_opts copts;
    struct mesh_k8s_informer_opts iopts;
    const char *get;
    bool list;
    bool quiet;
};

static long num(const char *s)
{
    long long v = 0;
    if (mesh_parse_ll(s, strlen(s), 0, 1LL << 40, &v, NULL) < 0) {
        fprintf(stderr, "k8s_driver: bad number '%s'\n", s);
        exit(2);
    }
    return (long)v;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (strcmp(k, "--quiet") == 0) {
            a->quiet = true;
            continue;
        }
        if (strcmp(k, "--list") == 0) {
            a->list = true;
            continue;
        }
        if (strcmp(k, "--streaming-list") == 0) {
            a->iopts.streaming_list = true;
            continue;
        }
        if (i + 1 >= argc) {
            return -1;
        }
        const char *v = argv[++i];
        if (strcmp(k, "--apiserver") == 0) {
            a->copts.apiserver = v;
        } else if (strcmp(k, "--token-file") == 0) {
            a->copts.token_file = v;
        } else if (strcmp(k, "--ca-file") == 0) {
            a->copts.ca_file = v;
        } else if (strcmp(k, "--kubeconfig") == 0) {
            a->copts.kubeconfig = v;
        } else if (strcmp(k, "--context") == 0) {
            a->copts.context = v;
        } else if (strcmp(k, "--token-reload") == 0) {
            a->copts.token_reload_s = (int)num(v);
        } else if (strcmp(k, "--namespace") == 0) {
            a->iopts.query.ns = v;
        } else if (strcmp(k, "--selector") == 0) {
            a->iopts.query.label_selector = v;
        } else if (strcmp(k, "--field-selector") == 0) {
            a->iopts.query.field_selector = v;
        } else if (strcmp(k, "--limit") == 0) {
            a->iopts.page_limit = num(v);
        } else if (strcmp(k, "--watch-timeout") == 0) {
            a->iopts.watch_timeout_min_s = (int)num(v);
            a->iopts.watch_timeout_max_s = (int)num(v) + 1;
        } else if (strcmp(k, "--stall") == 0) {
            a->iopts.stall_timeout_s = (int)num(v);
        } else if (strcmp(k, "--max-event") == 0) {
            a->iopts.max_event_bytes = (size_t)num(v);
        } else if (strcmp(k, "--max-list") == 0) {
            a->iopts.max_list_bytes = (size_t)num(v);
        } else if (strcmp(k, "--backoff-ms") == 0) {
            a->iopts.backoff_initial_ms = (int)num(v);
        } else if (strcmp(k, "--get") == 0) {
            a->get = v;
        } else if (strcmp(k, "--log-level") == 0) {
            enum mesh_log_level lv;
            if (mesh_logfmt_parse_level(v, &lv) < 0) {
                return -1;
            }
            mesh_log_setup(lv, MESH_LOG_TEXT);
        } else {
            return -1;
        }
    }
    return 0;
}

static int do_get(struct mesh_k8s_client *c, const struct args *a)
{
    struct mesh_k8s_query q = a->iopts.query;
    if (q.ns == NULL) {
        q.ns = mesh_k8s_client_namespace(c);
    }
    cJSON *obj = NULL;
    struct mesh_err err;
    if (mesh_k8s_client_get(c, &q, a->get, &obj, &err) < 0) {
        fprintf(stderr, "k8s_driver: %s\n", err.msg);
        return 1;
    }
    char key[MESH_K8S_KEY_MAX], rv[MESH_K8S_RV_MAX];
    int rc = mesh_k8s_watch_object_key(obj, key, rv, &err);
    struct pod_rec *r = extract(NULL, obj);
    if (rc == 0) {
        printf("GOT %s rv=%s ip=%s ready=%d phase=%s\n", key, rv, r->ip, r->ready, r->phase);
    }
    mesh_free(r);
    cJSON_Delete(obj);
    return rc < 0 ? 1 : 0;
}

/* --list: count the items and check each is a JSON object with a key. */
static int count_item(void *ctx, const cJSON *obj, struct mesh_err *err)
{
    long *n = ctx;
    int rc = mesh_k8s_watch_object_key(obj, NULL, NULL, err);
    if (rc == 0) {
        ++*n;
    }
    return rc;
}

static int do_list(struct mesh_k8s_client *c, const struct args *a)
{
    char *cont = NULL;
    long n = 0, pages = 0;
    char rv[MESH_K8S_RV_MAX] = "", kind[MESH_K8S_LIST_KIND_MAX] = "";
    for (;;) {
        struct mesh_k8s_list_meta page;
        struct mesh_err err;
        if (mesh_k8s_client_list(c, &a->iopts.query, a->iopts.page_limit, cont, NULL,
                                 a->iopts.max_list_bytes, a->iopts.max_event_bytes, count_item, &n,
                                 &page, &err) < 0) {
            fprintf(stderr, "k8s_driver: %s (error class %s)\n", err.msg,
                    mesh_k8s_client_last_error(c));
            mesh_free(cont);
            return 1;
        }
        pages++;
        snprintf(rv, sizeof(rv), "%s", page.rv);
        snprintf(kind, sizeof(kind), "%s", page.kind);
        mesh_free(cont);
        cont = page.cont;
        page.cont = NULL;
        mesh_k8s_list_meta_cleanup(&page);
        if (cont == NULL) {
            break;
        }
    }
    printf("LISTED %ld kind=%s rv=%s pages=%ld\n", n, kind, rv, pages);
    return 0;
}

/* "a:1,b:2" of the non-zero watch starts, or "-". */
static void print_breakdowns(const struct mesh_k8s_informer_stats *st)
{
    printf(" starts=");
    const char *sep = "";
    for (int r = 0; r < MESH_K8S_WATCH_REASONS; r++) {
        if (st->watch_starts[r] > 0) {
            printf("%s%s:%" PRIu64, sep, mesh_k8s_informer_reason_name(r), st->watch_starts[r]);
            sep = ",";
        }
    }
    printf("%s errors=", sep[0] ? "" : "-");
    sep = "";
    for (size_t i = 0; i < st->api_error_rows; i++) {
        printf("%s%s:%" PRIu64, sep, st->api_errors[i].label, st->api_errors[i].count);
        sep = ",";
    }
    printf("%s", sep[0] ? "" : "-");
}

static int run_informer(struct mesh_k8s_client *c, struct args *a)
{
    struct drv d = {.quiet = a->quiet};
    struct mesh_err err;
    a->iopts.extract = extract;
    a->iopts.record_free = rec_free;
    a->iopts.ctx = &d;
    a->iopts.cb = (struct mesh_k8s_informer_callbacks){on_add, on_update, on_delete, on_synced};
    d.inf = mesh_k8s_informer_new(c, &a->iopts, &err);
    if (d.inf == NULL) {
        fprintf(stderr, "k8s_driver: %s\n", err.msg);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    pthread_t th;
    pthread_create(&th, NULL, run_thread, &d);
    /* The main thread is an event loop over the signalfd and the informer's
     * notify fd, as a sidecar polling the store would be. */
    uint64_t wakeups = 0;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN},
                                {.fd = mesh_k8s_informer_notify_fd(d.inf), .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (pfd[1].revents & POLLIN) {
            uint64_t n;
            if (read(pfd[1].fd, &n, sizeof(n)) == (ssize_t)sizeof(n)) {
                wakeups++;
            }
        }
        if (!(pfd[0].revents & POLLIN)) {
            continue;
        }
        struct signalfd_siginfo si;
        ssize_t r = read(sfd, &si, sizeof(si));
        if (r == (ssize_t)sizeof(si) && si.ssi_signo == SIGUSR1) {
            dump(&d);
            continue;
        }
        break;
    }
    mesh_k8s_informer_stop(d.inf);
    pthread_join(th, NULL);
    close(sfd);
    struct mesh_k8s_informer_stats st;
    mesh_k8s_informer_stats(d.inf, &st);
    printf("STATS lists=%" PRIu64 " relists=%" PRIu64 " watches=%" PRIu64 " events=%" PRIu64
           " bookmarks=%" PRIu64 " failures=%" PRIu64 " changes=%" PRIu64 " wakeups=%" PRIu64
           " badtime=%" PRIu64,
           st.lists, st.relists, st.watches, st.events, st.bookmarks, st.failures, d.changes,
           wakeups, d.badtime);
    print_breakdowns(&st);
    printf(" rv=%s\n", st.rv);
    fflush(stdout);
    mesh_k8s_informer_free(d.inf);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    memset(&a, 0, sizeof(a));
    if (parse_args(argc, argv, &a) < 0) {
        usage();
        return 2;
    }
    struct mesh_err err;
    struct mesh_k8s_client *c = mesh_k8s_client_new(&a.copts, &err);
    if (c == NULL) {
        fprintf(stderr, "k8s_driver: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "k8s_driver: API server %s (%s)\n", mesh_k8s_client_server(c),
            mesh_k8s_client_source(c));
    int rc;
    if (a.get != NULL) {
        rc = do_get(c, &a);
    } else if (a.list) {
        rc = do_list(c, &a);
    } else {
        rc = run_informer(c, &a);
    }
    mesh_k8s_client_free(c);
    return rc;
}
