/*
 * fuzz_httpd.c - raw byte streams against the HTTP server of io/httpd.h,
 * libwebsockets in-process: each input is sent on one TCP connection to a
 * server on 127.0.0.1 (then the write side is shut and the answer read),
 * and afterwards a plain GET /readyz on a new connection must get 200. A
 * crash, a hang past the time limits or a server that stops answering
 * aborts the run. The corpus holds the malformed inputs of issue 13 (TLS
 * ClientHello, absolute URI, OPTIONS/TRACE, header without a colon, 4 KB
 * request line, HTTP/2 preface, SSH banner, NUL in the path, an empty
 * connection, WebSocket and h2c upgrades, request bodies, ...) and, for the
 * WebSocket stream on /watch, handshakes followed by client frames (text,
 * binary, huge and unmasked frames, pings, closes, reserved opcodes and
 * bits, truncated headers). The server also takes POST /mutate as
 * tpumesh-injector's does (bounded bodies, JSON pre-scan, then the
 * injector's review parse and decision from core/inject.h), and after each
 * input a real AdmissionReview there must still get 200: the corpus holds
 * the hostile bodies of issue 23 too (flat arrays, many keys, deep nesting,
 * long strings, lengths that lie, chunked bodies, no length).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/inject.h"
#include "core/mem.h"
#include "io/httpd.h"
#include "io/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct mesh_httpd *srv;
static struct mesh_httpd_body *big;
static int port;
static struct mesh_inject_config cfg;

/* POST /mutate: what tpumesh-injector's server does with a body. */
static void mutate(void *arg, const char *path, const char *body, size_t len,
                   struct mesh_httpd_resp *r)
{
    (void)arg;
    (void)path;
    struct mesh_inject_review rv;
    struct mesh_err err = {0};
    if (mesh_inject_review_parse(body, len, &rv, &err) < 0) {
        r->status = 400;
        r->text = mesh_asprintf("%s\n", err.msg);
        return;
    }
    struct mesh_inject_decision d;
    if (mesh_inject_decide(&cfg, &rv, &d, &err) < 0) {
        r->status = 500;
        r->text = mesh_asprintf("%s\n", err.msg);
        mesh_inject_review_cleanup(&rv);
        return;
    }
    size_t n = 0;
    r->text = mesh_inject_response(rv.uid, &d, NULL, 0, &n, &err);
    r->type = "application/json";
    if (r->text == NULL) {
        r->status = 500;
        r->text = mesh_asprintf("%s\n", err.msg);
    }
    mesh_inject_decision_cleanup(&d);
    mesh_inject_review_cleanup(&rv);
}

static void handler(void *arg, const char *path, struct mesh_httpd_resp *r)
{
    (void)arg;
    if (strcmp(path, "/readyz") == 0) {
        r->text = mesh_strdup("ok\n");
    } else if (strcmp(path, "/big") == 0) {
        r->type = "application/json";
        r->body = mesh_httpd_body_ref(big);
        r->bulk = true;
    } else if (strcmp(path, "/healthz") == 0) {
        r->status = 503;
        r->text = mesh_strdup("stuck: for the test\n");
    } else {
        r->status = 404;
        r->text = mesh_strdup("not found: try /readyz /big /healthz\n");
    }
}

/* The /watch stream's document: the 100,000-byte body, version 1. */
static struct mesh_httpd_body *watch_doc(void *arg, uint64_t *out_version)
{
    (void)arg;
    *out_version = 1;
    return mesh_httpd_body_ref(big);
}

static void stop_server(void)
{
    mesh_httpd_stop(srv);
    srv = NULL;
    mesh_httpd_body_unref(big);
    big = NULL;
    mesh_inject_config_cleanup(&cfg);
}

static void start_server(void)
{
    mesh_log_setup(MESH_LOG_ERROR, MESH_LOG_TEXT);
    char *fill = mesh_malloc(100000);
    memset(fill, 'x', 100000);
    big = mesh_httpd_body_from_bytes(fill, 100000);
    mesh_free(fill);
    if (mesh_inject_config_default(&cfg, NULL) < 0) {
        abort();
    }
    struct mesh_httpd_opts o = {
        .addr = "127.0.0.1:0",
        .flag = "addr",
        .handler = handler,
        .limits = {.max_conns = 16,
                   .max_per_peer = 8,
                   .header_timeout_s = 2,
                   .send_timeout_s = 2,
                   .ws_idle_s = 2,
                   .max_body = MESH_INJECT_REVIEW_MAX,
                   .max_inflight = 8u << 20,
                   .small_body = 64u << 10,
                   .small_reserve = 1u << 20,
                   /* Lower than the injector's caps, so the corpus files that
                    * pass them stay small. */
                   .json_max_values = 20000,
                   .json_max_string = 64u << 10},
        .ws_path = "/watch",
        .ws_doc = watch_doc,
        .ws_name = "/watch clients",
        .post_path = "/mutate",
        .post = mutate,
        .post_json = true,
    };
    struct mesh_err err = {0};
    srv = mesh_httpd_start(&o, &port, &err);
    if (srv == NULL) {
        fprintf(stderr, "cannot start the server: %s\n", err.msg);
        abort();
    }
    atexit(stop_server);
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        abort();
    }
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        fprintf(stderr, "connect: %s\n", strerror(errno));
        abort();
    }
    return fd;
}

/* Read until EOF, an error or the receive timeout; keeps the first bytes. */
static size_t drain(int fd, char *head, size_t cap)
{
    size_t got = 0;
    char buf[16384];
    for (int rounds = 0; rounds < 1000; rounds++) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        if (got < cap) {
            size_t k = (size_t)n < cap - got ? (size_t)n : cap - got;
            memcpy(head + got, buf, k);
        }
        got += (size_t)n;
    }
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (srv == NULL) {
        start_server();
    }
    int fd = dial();
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break; /* the server closed: fine */
        }
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char head[64];
    memset(head, 0, sizeof(head));
    size_t got = drain(fd, head, sizeof(head) - 1);
    close(fd);
    if (getenv("FUZZ_HTTPD_VERBOSE") != NULL) {
        /* The first line of the answer, to see what each input gets. */
        fprintf(stderr, "%zu bytes in -> %zu bytes out: %.*s\n", size, got,
                (int)strcspn(head, "\r\n"), head);
    }

    /* The server must still answer. */
    fd = dial();
    static const char probe[] =
        "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.35\r\n"
        "Connection: close\r\n\r\n";
    if (send(fd, probe, sizeof(probe) - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof(probe) - 1)) {
        abort();
    }
    memset(head, 0, sizeof(head));
    got = drain(fd, head, sizeof(head) - 1);
    close(fd);
    if (got < 12 || memcmp(head, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "the server no longer answers /readyz (got %zu bytes: %.40s)\n", got, head);
        abort();
    }

    /* ... and a real review. */
    static const char review[] =
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
        "\"uid\":\"u-1\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
        "\"operation\":\"CREATE\",\"namespace\":\"ml\",\"object\":{\"metadata\":{\"labels\":"
        "{\"tpumesh.dev/inject\":\"true\"}},\"spec\":{\"containers\":[{\"name\":\"t\"}]}}}}";
    char req[1024];
    int rl =
        snprintf(req, sizeof(req),
                 "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 sizeof(review) - 1, review);
    fd = dial();
    if (send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
        abort();
    }
    memset(head, 0, sizeof(head));
    got = drain(fd, head, sizeof(head) - 1);
    close(fd);
    if (got < 12 || memcmp(head, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "the server no longer answers POST /mutate (got %zu bytes: %.40s)\n", got,
                head);
        abort();
    }
    return 0;
}
