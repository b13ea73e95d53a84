/*
 * webhook_load.c - load generator for admission webhooks (bench/injector):
 * CONNS connections kept alive over HTTPS (libcurl multi, CA verified)
 * send the same AdmissionReview body to URL until TOTAL answers arrived.
 * First every connection sends one request (its TLS handshake: a warm-up,
 * not counted). Then, with RATE 0, every connection sends its next request
 * as soon as its answer arrived (closed loop: CONNS requests always in
 * flight); with RATE > 0 requests are due at a fixed rate (open loop, as an
 * API server forwards pod creations) and go out on an idle connection, and
 * a request's latency counts from when it was due (time waiting for a free
 * connection included). Prints one JSON line: requests, errors (non-200 or
 * transfer failures), seconds, rps and latency percentiles in ms.
 *
 *   webhook_load URL CAFILE BODYFILE CONNS TOTAL [RATE]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/mem.h"

struct conn {
    CURL *easy;
    int done;   /* answers received on this connection */
    double due; /* when the request in flight was due (open loop) */
    bool busy;
};

static size_t sink(char *p, size_t s, size_t n, void *u)
{
    (void)p;
    (void)u;
    return s * n;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long long arg_ll(const char *s)
{
    long long v = 0;
    if (mesh_parse_ll(s, strlen(s), 0, 10000000, &v, NULL) < 0) {
        fprintf(stderr, "webhook_load: '%s' is not a positive integer\n", s);
        exit(2);
    }
    return v;
}

static void start(CURLM *m, struct conn *c, const char *url, const char *ca, const char *body,
                  size_t len, struct curl_slist *hdrs)
{
    curl_easy_setopt(c->easy, CURLOPT_URL, url);
    curl_easy_setopt(c->easy, CURLOPT_CAINFO, ca);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE, (long)len);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
    curl_easy_setopt(c->easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, 30000L);
    curl_multi_add_handle(m, c->easy);
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: webhook_load URL CAFILE BODYFILE CONNS TOTAL [RATE]\n");
        return 2;
    }
    const char *url = argv[1], *ca = argv[2];
    int conns = (int)arg_ll(argv[4]);
    long long total = arg_ll(argv[5]);
    double rate = argc == 7 ? (double)arg_ll(argv[6]) : 0;
    if (conns < 1 || total < 1) {
        fprintf(stderr, "webhook_load: CONNS and TOTAL must be at least 1\n");
        return 2;
    }
    FILE *f = fopen(argv[3], "rb");
    if (f == NULL) {
        perror(argv[3]);
        return 2;
    }
    struct mesh_buf body;
    mesh_buf_init(&body, 8u << 20);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        mesh_buf_append(&body, chunk, n, NULL);
    }
    fclose(f);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    /* One connection per handle: no pipelining or multiplexing, like the API server's pool. */
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conns);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    struct conn *cs = mesh_calloc((size_t)conns, sizeof(*cs));
    double *lat = mesh_calloc((size_t)total, sizeof(double));
    long long got = 0, errors = 0;
    for (int i = 0; i < conns; i++) {
        cs[i].easy = curl_easy_init();
        start(m, &cs[i], url, ca, mesh_buf_str(&body), body.len, hdrs);
        cs[i].busy = true;
    }
    /* Warm-up: every connection's first answer (TLS handshake) is not counted. */
    int warm = 0, running = 1;
    double t0 = 0, next_due = 0;
    long long issued = 0; /* counted requests sent (open loop: due times handed out) */
    while (got < total) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int q;
        double now = now_s();
        while ((msg = curl_multi_info_read(m, &q)) != NULL) {
            if (msg->msg != CURLMSG_DONE) {
                continue;
            }
            struct conn *c = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            curl_multi_remove_handle(m, msg->easy_handle);
            c->busy = false;
            if (c->done++ == 0) {
                warm++;
                continue;
            }
            if (msg->data.result != CURLE_OK || code != 200) {
                errors++;
            }
            if (got < total) {
                lat[got++] = (now - c->due) * 1000.0;
            }
        }
        if (warm < conns) {
            curl_multi_poll(m, NULL, 0, 10, NULL);
            continue;
        }
        if (t0 == 0) {
            t0 = next_due = now;
        }
        /* Hand due requests to idle connections. */
        for (int i = 0; i < conns && issued < total; i++) {
            if (cs[i].busy || (rate > 0 && next_due > now)) {
                continue;
            }
            cs[i].due = rate > 0 ? next_due : now;
            next_due += rate > 0 ? 1.0 / rate : 0;
            start(m, &cs[i], url, ca, mesh_buf_str(&body), body.len, hdrs);
            cs[i].busy = true;
            issued++;
        }
        double wait_ms = rate > 0 && next_due > now ? (next_due - now) * 1000.0 : 10;
        curl_multi_poll(m, NULL, 0, wait_ms < 1 ? 1 : (int)(wait_ms > 10 ? 10 : wait_ms), NULL);
    }
    double secs = now_s() - t0;
    qsort(lat, (size_t)got, sizeof(double), cmp);
    double p50 = got ? lat[got * 50 / 100] : 0, p90 = got ? lat[got * 90 / 100] : 0;
    double p99 = got ? lat[got * 99 / 100] : 0, mx = got ? lat[got - 1] : 0;
    printf("{\"requests\":%lld,\"errors\":%lld,\"seconds\":%.3f,\"rps\":%.1f,\"p50_ms\":%.3f,"
           "\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"conns\":%d,\"rate\":%.0f}\n",
           got, errors, secs, secs > 0 ? (double)got / secs : 0, p50, p90, p99, mx, conns, rate);
    for (int i = 0; i < conns; i++) {
        curl_multi_remove_handle(m, cs[i].easy);
        curl_easy_cleanup(cs[i].easy);
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hdrs);
    mesh_free(cs);
    mesh_free(lat);
    mesh_buf_cleanup(&body);
    curl_global_cleanup();
    return errors ? 1 : 0;
}
