/*
 * test_httpd.c - the limits of io/httpd.h on a real server on 127.0.0.1 with
 * small limits: eviction keeps room for a client that sends its request
 * at once, the header timeout closes slow clients, the bulk cap answers
 * 503 + Retry-After, upgrades are refused, HEAD has no body and 405 is
 * complete; the WebSocket stream sends the current document first and the
 * latest after a change, caps its clients (503), pings idle ones and drops
 * them without a pong, drops a client that stalls, and closes with 1001 on
 * stop. Every read has a deadline (SO_RCVTIMEO).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/mem.h"
#include "io/httpd.h"
#include "io/log.h"
#include "io/sys.h"
#include "slowdown.h"

struct fixture {
    struct mesh_httpd *srv;
    struct mesh_httpd_body *big;
    int port;
};

static void handler(void *arg, const char *path, struct mesh_httpd_resp *r)
{
    struct fixture *f = arg;
    if (strcmp(path, "/big") == 0) {
        r->body = mesh_httpd_body_ref(f->big);
        r->bulk = true;
        r->type = "application/json";
    } else if (strcmp(path, "/readyz") == 0) {
        r->text = mesh_strdup("ok\n");
    } else {
        r->status = 404;
        r->text = mesh_strdup("not found\n");
    }
}

static int setup(void **state)
{
    mesh_log_setup(MESH_LOG_ERROR, MESH_LOG_TEXT);
    struct fixture *f = mesh_calloc(1, sizeof(*f));
    size_t n = 4u << 20; /* more than loopback buffers take at once */
    char *fill = mesh_malloc(n);
    memset(fill, 'x', n);
    f->big = mesh_httpd_body_from_bytes(fill, n);
    mesh_free(fill);
    struct mesh_httpd_opts o = {
        .addr = "127.0.0.1:0",
        .flag = "addr",
        .handler = handler,
        .arg = f,
        .limits = {.max_conns = 8,
                   .max_per_peer = 8,
                   .max_bulk = 1,
                   .header_timeout_s = 1,
                   .send_timeout_s = 2},
    };
    struct mesh_err err;
    mesh_err_clear(&err);
    f->srv = mesh_httpd_start(&o, &f->port, &err);
    assert_non_null(f->srv);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mesh_httpd_stop(f->srv);
    mesh_httpd_body_unref(f->big);
    mesh_free(f);
    return 0;
}

static int dial(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    /* Every read gives up after 3 s of the plain build's time. */
    struct timeval tv = {.tv_sec = (time_t)(test_scaled_ms(3000) / 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (rcvbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void put(int fd, const char *s)
{
    assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Read up to cap-1 bytes until EOF or the (scaled) 3 s receive timeout. */
static size_t get(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
    }
    buf[got] = '\0';
    return got;
}

/* A request sent at once on a new connection; returns the answer's status. */
static int probe(int port, const char *method, const char *path, char *out, size_t cap)
{
    int fd = dial(port, 0);
    char req[256];
    snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", method,
             path);
    put(fd, req);
    char local[4096];
    char *buf = out != NULL ? out : local;
    size_t n = get(fd, buf, out != NULL ? cap : sizeof(local));
    close(fd);
    int code = 0;
    if (n >= 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0) {
        code = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    }
    return code;
}

/* 20 slowloris connections (half a request line each) on a server of 8:
 * every probe still gets its answer, and the slow ones were evicted. */
static void test_eviction_keeps_room(void **state)
{
    struct fixture *f = *state;
    int slow[20];
    for (int i = 0; i < 20; i++) {
        slow[i] = dial(f->port, 0);
        put(slow[i], "GET /readyz HTTP/1.1\r\nHost: a\r\n");
    }
    for (int i = 0; i < 10; i++) {
        assert_int_equal(probe(f->port, "GET", "/readyz", NULL, 0), 200);
    }
    struct mesh_httpd_stats st;
    mesh_httpd_get_stats(f->srv, &st);
    assert_true(st.evicted >= 12);
    assert_true(st.open <= 8 + 8);
    for (int i = 0; i < 20; i++) {
        close(slow[i]);
    }
}

/* A client that never finishes its headers is closed after header_timeout_s. */
static void test_header_timeout(void **state)
{
    struct fixture *f = *state;
    struct mesh_httpd_stats before;
    mesh_httpd_get_stats(f->srv, &before);
    int fd = dial(f->port, 0);
    put(fd, "GET /readyz HTTP/1.1\r\nX-Slow: ");
    int64_t t0 = mesh_sys_now_ms();
    char buf[256];
    size_t n = get(fd, buf, sizeof(buf)); /* EOF when the server closes it */
    int64_t took = mesh_sys_now_ms() - t0;
    close(fd);
    assert_int_equal(n, 0);
    /* Closed by the server, not by our receive timeout. */
    assert_true(took < test_scaled_ms(3000));
    struct mesh_httpd_stats after;
    mesh_httpd_get_stats(f->srv, &after);
    assert_true(after.timed_out > before.timed_out);
}

/* max_bulk = 1: a second transfer while one is held is answered 503 + Retry-After. */
static void test_bulk_cap(void **state)
{
    struct fixture *f = *state;
    int held = dial(f->port, 4096);
    put(held, "GET /big HTTP/1.1\r\nHost: a\r\n\r\n");
    /* The server has started sending /big (its first byte is here, left
     * unread) and stalls on the small window. */
    char first;
    assert_int_equal(recv(held, &first, 1, MSG_PEEK), 1);
    char buf[4096];
    assert_int_equal(probe(f->port, "GET", "/big", buf, sizeof(buf)), 503);
    assert_non_null(strcasestr(buf, "retry-after: 1"));
    close(held);
    mesh_sys_sleep_ms(test_scaled_ms(200));
    assert_int_equal(probe(f->port, "HEAD", "/big", buf, sizeof(buf)), 200);
    assert_non_null(strcasestr(buf, "content-length: 4194304"));
    assert_non_null(strstr(buf, "\r\n\r\n"));
    assert_int_equal(strlen(strstr(buf, "\r\n\r\n")), 4); /* HEAD: no body */
}

/* Other methods: a complete 405 with Allow and a body; upgrades closed. */
static void test_methods_and_upgrades(void **state)
{
    struct fixture *f = *state;
    int fd = dial(f->port, 0);
    put(fd, "POST /readyz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
            "hello");
    char buf[4096];
    get(fd, buf, sizeof(buf));
    close(fd);
    assert_memory_equal(buf, "HTTP/1.1 405", 12);
    assert_non_null(strcasestr(buf, "allow: GET, HEAD"));
    assert_non_null(strstr(buf, "only GET and HEAD are served"));
    struct mesh_httpd_stats before;
    mesh_httpd_get_stats(f->srv, &before);
    fd = dial(f->port, 0);
    put(fd, "GET /readyz HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    assert_int_equal(get(fd, buf, sizeof(buf)), 0);
    close(fd);
    struct mesh_httpd_stats after;
    mesh_httpd_get_stats(f->srv, &after);
    assert_int_equal(after.upgrades, before.upgrades + 1);
    assert_int_equal(probe(f->port, "GET", "/nope", buf, sizeof(buf)), 404);
    assert_non_null(strstr(buf, "not found"));
}

/* ---- WebSocket stream ---------------------------------------------------- */

struct wsfix {
    struct mesh_httpd *srv;
    pthread_mutex_t mu;
    struct mesh_httpd_body *doc; /* NULL = nothing published yet */
    uint64_t ver;
    int port;
};

static struct mesh_httpd_body *ws_doc(void *arg, uint64_t *out_version)
{
    struct wsfix *w = arg;
    pthread_mutex_lock(&w->mu);
    struct mesh_httpd_body *b = mesh_httpd_body_ref(w->doc);
    *out_version = w->ver;
    pthread_mutex_unlock(&w->mu);
    return b;
}

static void ws_set(struct wsfix *w, const char *text, size_t len)
{
    struct mesh_httpd_body *b = mesh_httpd_body_from_bytes(text, len);
    pthread_mutex_lock(&w->mu);
    mesh_httpd_body_unref(w->doc);
    w->doc = b;
    w->ver++;
    pthread_mutex_unlock(&w->mu);
    mesh_httpd_notify(w->srv);
}

static int ws_start(void **state, int idle_s)
{
    mesh_log_setup(MESH_LOG_ERROR, MESH_LOG_TEXT);
    struct wsfix *w = mesh_calloc(1, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    struct mesh_httpd_opts o = {
        .addr = "127.0.0.1:0",
        .flag = "addr",
        .handler = handler,
        .arg = w,
        .limits = {.max_conns = 16,
                   .header_timeout_s = 1,
                   .send_timeout_s = 2,
                   .max_ws = 2,
                   .ws_idle_s = idle_s},
        .ws_path = "/watch",
        .ws_doc = ws_doc,
        .ws_name = "/watch clients",
    };
    struct mesh_err err;
    mesh_err_clear(&err);
    w->srv = mesh_httpd_start(&o, &w->port, &err);
    assert_non_null(w->srv);
    *state = w;
    return 0;
}

/* Pings after 1 s idle. */
static int ws_setup(void **state)
{
    return ws_start(state, 1);
}

/* Pings only after 30 s: stalls are caught by the send timeout. */
static int ws_setup_no_ping(void **state)
{
    return ws_start(state, 30);
}

static int ws_teardown(void **state)
{
    struct wsfix *w = *state;
    mesh_httpd_stop(w->srv);
    mesh_httpd_body_unref(w->doc);
    pthread_mutex_destroy(&w->mu);
    mesh_free(w);
    return 0;
}

/* Exactly n bytes (false on EOF, error or the (scaled) 3 s timeout). */
static bool get_exact(int fd, unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, buf + got, n - got, 0);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return false;
        }
        got += (size_t)k;
    }
    return true;
}

/* A handshake on /watch; the status code of the answer (its head read whole). */
static int ws_open(int port, int rcvbuf, int *out_fd)
{
    int fd = dial(port, rcvbuf);
    put(fd, "GET /watch HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    char head[2048];
    size_t n = 0;
    while (n + 1 < sizeof(head) && (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4) != 0)) {
        if (!get_exact(fd, (unsigned char *)head + n, 1)) {
            break;
        }
        n++;
    }
    head[n] = '\0';
    *out_fd = fd;
    if (n < 12 || strncmp(head, "HTTP/1.", 7) != 0) {
        return 0;
    }
    return (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
}

/* One server frame (unmasked): its opcode, payload in buf (cap bytes at
 * most, the rest skipped), *len its full length. -1 on EOF or timeout. */
static int ws_frame(int fd, unsigned char *buf, size_t cap, size_t *len)
{
    unsigned char h[8];
    if (!get_exact(fd, h, 2)) {
        return -1;
    }
    uint64_t n = h[1] & 0x7f;
    if (n == 126 || n == 127) {
        size_t k = n == 126 ? 2 : 8;
        if (!get_exact(fd, h, k)) {
            return -1;
        }
        n = 0;
        for (size_t i = 0; i < k; i++) {
            n = n << 8 | h[i];
        }
    }
    *len = (size_t)n;
    for (uint64_t off = 0; off < n;) {
        unsigned char skip[4096];
        size_t want = n - off < sizeof(skip) ? (size_t)(n - off) : sizeof(skip);
        if (!get_exact(fd, off < cap ? buf + off : skip,
                       off < cap && want > cap - off ? cap - off : want)) {
            return -1;
        }
        off += off < cap && want > cap - off ? cap - off : want;
    }
    return h[0] & 0x0f;
}

/* The next text message as a string (the test's documents fit in one frame). */
static int ws_text(int fd, char *out, size_t cap)
{
    size_t len = 0;
    int op = ws_frame(fd, (unsigned char *)out, cap - 1, &len);
    out[len < cap - 1 ? len : cap - 1] = '\0';
    return op;
}

/* Nothing published: no message; then the current document first, the latest
 * after changes, and a second client gets the current one. */
static void test_ws_stream(void **state)
{
    struct wsfix *w = *state;
    int fd = -1;
    assert_int_equal(ws_open(w->port, 0, &fd), 101);
    ws_set(w, "{\"generation\":1}", 16);
    char msg[256];
    assert_int_equal(ws_text(fd, msg, sizeof(msg)), 1);
    assert_string_equal(msg, "{\"generation\":1}");
    ws_set(w, "{\"generation\":2}", 16);
    assert_int_equal(ws_text(fd, msg, sizeof(msg)), 1);
    assert_string_equal(msg, "{\"generation\":2}");
    int fd2 = -1;
    assert_int_equal(ws_open(w->port, 0, &fd2), 101);
    assert_int_equal(ws_text(fd2, msg, sizeof(msg)), 1);
    assert_string_equal(msg, "{\"generation\":2}");
    /* The server counts a message after writing it: the client may read
     * the third before the count reaches 3. */
    struct mesh_httpd_stats st;
    int64_t until = mesh_sys_now_ms() + test_scaled_ms(2000);
    for (;;) {
        mesh_httpd_get_stats(w->srv, &st);
        if (st.ws_sent >= 3 || mesh_sys_now_ms() >= until) {
            break;
        }
        mesh_sys_sleep_ms(5);
    }
    assert_int_equal(st.ws_open, 2);
    assert_true(st.ws_sent >= 3);
    close(fd);
    close(fd2);
}

/* max_ws = 2: the third client gets 503 with Retry-After; a slot freed is
 * usable again; another path is still refused. */
static void test_ws_cap(void **state)
{
    struct wsfix *w = *state;
    ws_set(w, "{}", 2);
    int a = -1, b = -1, c = -1;
    assert_int_equal(ws_open(w->port, 0, &a), 101);
    assert_int_equal(ws_open(w->port, 0, &b), 101);
    assert_int_equal(ws_open(w->port, 0, &c), 503);
    close(c);
    close(a);
    struct mesh_httpd_stats st;
    int64_t until = mesh_sys_now_ms() + test_scaled_ms(2000);
    for (;;) {
        mesh_httpd_get_stats(w->srv, &st);
        if (st.ws_open == 1 || mesh_sys_now_ms() >= until) {
            break;
        }
        mesh_sys_sleep_ms(20);
    }
    assert_int_equal(st.ws_open, 1);
    assert_true(st.ws_busy >= 1);
    assert_int_equal(ws_open(w->port, 0, &a), 101);
    close(a);
    close(b);
    int fd = dial(w->port, 0);
    put(fd, "GET /readyz HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    char buf[256];
    assert_int_equal(get(fd, buf, sizeof(buf)), 0);
    close(fd);
}

/* ws_idle_s = 1: an idle client is pinged, and closed when it never answers. */
static void test_ws_idle_ping(void **state)
{
    struct wsfix *w = *state;
    ws_set(w, "{}", 2);
    int fd = -1;
    assert_int_equal(ws_open(w->port, 0, &fd), 101);
    char msg[64];
    assert_int_equal(ws_text(fd, msg, sizeof(msg)), 1);
    unsigned char buf[256];
    size_t len = 0;
    assert_int_equal(ws_frame(fd, buf, sizeof(buf), &len), 9); /* a ping */
    int op = 0;
    while ((op = ws_frame(fd, buf, sizeof(buf), &len)) == 9) {
    }
    assert_int_equal(op, -1); /* then the server hangs up */
    close(fd);
}

/* A client that reads nothing of a 4 MiB document is dropped after
 * send_timeout_s, and holds no more than its one reference meanwhile. */
static void test_ws_stall(void **state)
{
    struct wsfix *w = *state;
    size_t n = 4u << 20;
    char *fill = mesh_malloc(n);
    memset(fill, 'x', n);
    ws_set(w, fill, n);
    mesh_free(fill);
    int fd = -1;
    assert_int_equal(ws_open(w->port, 4096, &fd), 101);
    /* The first fragment's header (text, not final) shows the server has
     * begun the 4 MiB document; a newer version set before that would be
     * the one sent, and it fits in the socket. */
    unsigned char h[2];
    assert_true(get_exact(fd, h, 2));
    assert_int_equal(h[0], 0x01);
    ws_set(w, "{}", 2); /* a newer version while the first is stuck */
    struct mesh_httpd_stats st;
    /* The drop comes send_timeout_s (2 s) after the stall began, and the
     * stall begins once the server has filled the socket: up to 10 s, scaled
     * (valgrind runs the server many times slower). */
    int64_t until = mesh_sys_now_ms() + test_scaled_ms(10000);
    for (;;) {
        mesh_httpd_get_stats(w->srv, &st);
        /* The server counts the drop, then the timeout: wait for both. */
        if ((st.ws_dropped >= 1 && st.timed_out >= 1) || mesh_sys_now_ms() >= until) {
            break;
        }
        mesh_sys_sleep_ms(20);
    }
    assert_int_equal(st.ws_dropped, 1);
    assert_true(st.timed_out >= 1);
    close(fd);
}

/* Stopping the server closes a client with 1001 (going away). */
static void test_ws_stop_closes(void **state)
{
    struct wsfix *w = *state;
    ws_set(w, "{}", 2);
    int fd = -1;
    assert_int_equal(ws_open(w->port, 0, &fd), 101);
    char msg[64];
    assert_int_equal(ws_text(fd, msg, sizeof(msg)), 1);
    mesh_httpd_stop(w->srv);
    w->srv = NULL;
    unsigned char buf[128];
    size_t len = 0;
    int op = 0;
    while ((op = ws_frame(fd, buf, sizeof(buf), &len)) == 9) {
    }
    assert_int_equal(op, 8);
    assert_true(len >= 2);
    assert_int_equal(buf[0] << 8 | buf[1], 1001);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_eviction_keeps_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bulk_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_methods_and_upgrades, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ws_stream, ws_setup, ws_teardown),
        cmocka_unit_test_setup_teardown(test_ws_cap, ws_setup, ws_teardown),
        cmocka_unit_test_setup_teardown(test_ws_idle_ping, ws_setup, ws_teardown),
        cmocka_unit_test_setup_teardown(test_ws_stall, ws_setup_no_ping, ws_teardown),
        cmocka_unit_test_setup_teardown(test_ws_stop_closes, ws_setup, ws_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
