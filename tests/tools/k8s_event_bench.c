/*
 * k8s_event_bench.c - CPU cost of one watch event in the informer, measured
 * on the informer's own thread (CLOCK_THREAD_CPUTIME_ID), against an
 * in-process HTTP server on 127.0.0.1 (port 0) that serves a LIST of
 * --pods pods and then a WATCH of --events MODIFIED events (a pod's IP and
 * resourceVersion change, one chunk per event, as fast as the socket
 * takes them). The informer runs as the sidecar runs it: extract =
 * mesh_k8s_pod_extract, equal = memcmp of the records, a main thread woken by
 * the notify fd. Prints one line:
 *
 *   EVENTS n=<events> pods=<pods> bytes=<avg event bytes> cpu_us=<per event>
 *          wall_us=<per event> list_ms=<LIST to synced> lag_p50_us=.. lag_p99_us=..
 *
 * lag = from the event's last byte read (mesh_k8s_informer_event_time_us)
 * to its on_update: framing, parse, extract and store.
 *
 * Usage: k8s_event_bench [--pods N] [--events N] [--pod FILE] [--keep-managed-fields]
 * FILE: one Pod as JSON (e.g. from the kube-apiserver simulator with
 * --managed-fields), used as the template of every pod; without it a
 * built-in template of ~1 KB is used. Not part of make test (a benchmark).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/k8s_pod.h"
#include "core/mem.h"
#include "io/k8s_client.h"
#include "sidecar/k8s_informer.h"

static const char builtin_pod[] =
    "{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\",\"resourceVersion\":\"1\","
    "\"labels\":{\"batch.kubernetes.io/job-name\":\"trainer\"},\"annotations\":{"
    "\"batch.kubernetes.io/job-completion-index\":\"0\"}},\"spec\":{\"hostname\":\"x\","
    "\"subdomain\":\"trainer\",\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.1\",\"conditions\":[{\"type\":"
    "\"Ready\",\"status\":\"True\"}]}}";

struct bench {
    int pods, events;
    cJSON *tmpl; /* owned */
    int listen_fd;
    atomic_bool stop;
    /* informer side */
    struct mesh_k8s_informer *inf;
    int updates;
    int64_t *lag_us; /* owned: per event, events entries */
    double cpu0, cpu1, wall0, wall1, list_start;
    uint64_t bytes;
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Pod i of the template at resourceVersion rv with IP 10.x.y.z. */
static char *render_pod(struct bench *b, int i, long rv, int gen)
{
    char name[64], rvs[32], ip[32], idx[16];
    snprintf(name, sizeof(name), "trainer-%d", i);
    snprintf(rvs, sizeof(rvs), "%ld", rv);
    snprintf(ip, sizeof(ip), "10.%d.%d.%d", gen % 200, (i >> 8) & 255, i & 255);
    snprintf(idx, sizeof(idx), "%d", i);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(b->tmpl, "metadata");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(b->tmpl, "status");
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(b->tmpl, "spec");
    cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
    cJSON_ReplaceItemInObjectCaseSensitive(md, "name", cJSON_CreateString(name));
    cJSON_ReplaceItemInObjectCaseSensitive(md, "resourceVersion", cJSON_CreateString(rvs));
    cJSON_ReplaceItemInObjectCaseSensitive(st, "podIP", cJSON_CreateString(ip));
    cJSON_ReplaceItemInObjectCaseSensitive(spec, "hostname", cJSON_CreateString(name));
    if (cJSON_GetObjectItemCaseSensitive(ann, MESH_K8S_KEY_COMPLETION_INDEX) != NULL) {
        cJSON_ReplaceItemInObjectCaseSensitive(ann, MESH_K8S_KEY_COMPLETION_INDEX,
                                               cJSON_CreateString(idx));
    }
    return cJSON_PrintUnformatted(b->tmpl);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve_list(struct bench *b, int fd)
{
    struct mesh_buf body;
    mesh_buf_init(&body, (size_t)1 << 31);
    mesh_buf_puts(&body,
                  "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{"
                  "\"resourceVersion\":\"1000\"},\"items\":[",
                  NULL);
    for (int i = 0; i < b->pods; i++) {
        char *p = render_pod(b, i, 1000, 0);
        mesh_buf_printf(&body, NULL, "%s%s", i ? "," : "", p);
        cJSON_free(p);
    }
    mesh_buf_puts(&body, "]}", NULL);
    char hdr[160];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\n\r\n",
                     body.len);
    b->list_start = clock_s(CLOCK_MONOTONIC);
    (void)(write_all(fd, hdr, (size_t)n) == 0 && write_all(fd, body.data, body.len) == 0);
    mesh_buf_cleanup(&body);
}

static void serve_watch(struct bench *b, int fd)
{
    static const char hdr[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n";
    if (write_all(fd, hdr, sizeof(hdr) - 1) < 0) {
        return;
    }
    struct mesh_buf ev;
    mesh_buf_init(&ev, (size_t)1 << 26);
    for (int k = 0; k < b->events && !atomic_load(&b->stop); k++) {
        char *p = render_pod(b, k % b->pods, 1001 + k, k / b->pods + 1);
        mesh_buf_reset(&ev);
        size_t n = strlen("{\"type\":\"MODIFIED\",\"object\":") + strlen(p) + 2;
        mesh_buf_printf(&ev, NULL, "%zx\r\n{\"type\":\"MODIFIED\",\"object\":%s}\n\r\n", n, p);
        cJSON_free(p);
        b->bytes += n;
        if (write_all(fd, ev.data, ev.len) < 0) {
            break;
        }
    }
    mesh_buf_cleanup(&ev);
    while (!atomic_load(&b->stop)) {
        usleep(20000); /* hold the watch open */
    }
}

static void *server(void *arg)
{
    struct bench *b = arg;
    while (!atomic_load(&b->stop)) {
        struct pollfd p = {.fd = b->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) {
            continue;
        }
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        char req[8192];
        size_t got = 0;
        while (got < sizeof(req) - 1) {
            ssize_t r = read(fd, req + got, sizeof(req) - 1 - got);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
            req[got] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL) {
                break;
            }
        }
        req[got] = '\0';
        if (strstr(req, "watch=1") != NULL) {
            serve_watch(b, fd);
        } else {
            serve_list(b, fd);
        }
        close(fd);
    }
    return NULL;
}

static void *extract(void *ctx, const cJSON *obj)
{
    (void)ctx;
    struct mesh_k8s_pod *p = mesh_malloc(sizeof(*p));
    if (mesh_k8s_pod_extract(obj, p, NULL) < 0) {
        mesh_free(p);
        return NULL;
    }
    return p;
}

static void rec_free(void *ctx, void *rec)
{
    (void)ctx;
    mesh_free(rec);
}

static bool equal(void *ctx, const void *a, const void *b)
{
    (void)ctx;
    return memcmp(a, b, sizeof(struct mesh_k8s_pod)) == 0;
}

static void on_update(void *ctx, const char *key, const void *o, const void *n)
{
    struct bench *b = ctx;
    (void)key;
    (void)o;
    (void)n;
    if (b->updates < b->events) {
        int64_t now = (int64_t)(clock_s(CLOCK_MONOTONIC) * 1e6);
        b->lag_us[b->updates] = now - mesh_k8s_informer_event_time_us(b->inf);
    }
    if (++b->updates == b->events) {
        b->cpu1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        b->wall1 = clock_s(CLOCK_MONOTONIC);
        mesh_k8s_informer_stop(b->inf);
    }
}

static void on_synced(void *ctx, size_t count)
{
    struct bench *b = ctx;
    (void)count;
    b->cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    b->wall0 = clock_s(CLOCK_MONOTONIC);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

static void *run(void *arg)
{
    struct bench *b = arg;
    struct mesh_err err;
    (void)mesh_k8s_informer_run(b->inf, &err);
    return NULL;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        return NULL;
    }
    struct mesh_buf b;
    mesh_buf_init(&b, (size_t)1 << 24);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        mesh_buf_append(&b, chunk, n, NULL);
    }
    fclose(f);
    return mesh_buf_steal(&b, NULL);
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof(b));
    b.pods = 4096;
    b.events = 20000;
    const char *pod_file = NULL;
    bool keep_mf = false;
    for (int i = 1; i < argc; i++) {
        long long v = 0;
        if (strcmp(argv[i], "--keep-managed-fields") == 0) {
            keep_mf = true;
        } else if (i + 1 < argc && strcmp(argv[i], "--pod") == 0) {
            pod_file = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--pods") == 0 &&
                   mesh_parse_ll(argv[i + 1], strlen(argv[i + 1]), 1, 1 << 20, &v, NULL) == 0) {
            b.pods = (int)v;
            i++;
        } else if (i + 1 < argc && strcmp(argv[i], "--events") == 0 &&
                   mesh_parse_ll(argv[i + 1], strlen(argv[i + 1]), 1, 1 << 26, &v, NULL) == 0) {
            b.events = (int)v;
            i++;
        } else {
            fprintf(stderr, "usage: k8s_event_bench [--pods N] [--events N] [--pod FILE] "
                            "[--keep-managed-fields]\n");
            return 2;
        }
    }
    b.lag_us = mesh_calloc((size_t)b.events, sizeof(*b.lag_us));
    char *text = pod_file ? read_file(pod_file) : mesh_strdup(builtin_pod);
    b.tmpl = text ? cJSON_Parse(text) : NULL;
    mesh_free(text);
    if (!cJSON_IsObject(b.tmpl)) {
        fprintf(stderr, "k8s_event_bench: %s is not a JSON pod\n", pod_file ? pod_file : "?");
        return 2;
    }
    b.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (b.listen_fd < 0 || bind(b.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(b.listen_fd, 8) < 0 || getsockname(b.listen_fd, (struct sockaddr *)&sa, &sl) < 0) {
        perror("k8s_event_bench: listen");
        return 1;
    }
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(sa.sin_port));
    struct mesh_err err;
    struct mesh_k8s_client_opts co = {.apiserver = url};
    struct mesh_k8s_client *c = mesh_k8s_client_new(&co, &err);
    if (c == NULL) {
        fprintf(stderr, "k8s_event_bench: %s\n", err.msg);
        return 1;
    }
    struct mesh_k8s_informer_opts io = {
        .query = {.ns = "default"},
        .extract = extract,
        .record_free = rec_free,
        .equal = equal,
        .cb = {NULL, on_update, NULL, on_synced},
        .ctx = &b,
        .keep_managed_fields = keep_mf,
    };
    b.inf = mesh_k8s_informer_new(c, &io, &err);
    if (b.inf == NULL) {
        fprintf(stderr, "k8s_event_bench: %s\n", err.msg);
        return 1;
    }
    pthread_t srv, th;
    pthread_create(&srv, NULL, server, &b);
    pthread_create(&th, NULL, run, &b);
    /* The main thread drains the notify fd, as the sidecar's loop does. */
    int nfd = mesh_k8s_informer_notify_fd(b.inf);
    while (b.wall1 == 0.0) {
        struct pollfd p = {.fd = nfd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            uint64_t v;
            (void)!read(nfd, &v, sizeof(v));
        }
    }
    pthread_join(th, NULL);
    atomic_store(&b.stop, true);
    pthread_join(srv, NULL);
    qsort(b.lag_us, (size_t)b.events, sizeof(*b.lag_us), cmp_i64);
    printf("EVENTS n=%d pods=%d bytes=%llu cpu_us=%.2f wall_us=%.2f list_ms=%.1f lag_p50_us=%lld "
           "lag_p99_us=%lld\n",
           b.events, b.pods, (unsigned long long)(b.bytes / (uint64_t)b.events),
           (b.cpu1 - b.cpu0) / b.events * 1e6, (b.wall1 - b.wall0) / b.events * 1e6,
           (b.wall0 - b.list_start) * 1e3, (long long)b.lag_us[b.events / 2],
           (long long)b.lag_us[(size_t)b.events * 99 / 100]);
    mesh_free(b.lag_us);
    mesh_k8s_informer_free(b.inf);
    mesh_k8s_client_free(c);
    close(b.listen_fd);
    cJSON_Delete(b.tmpl);
    return 0;
}
