/*
 * test_httpd.c - the limits of io/httpd.h on a real server on 127.0.0.1 with
 * small limits: eviction keeps room for a client that sends its request
 * at once, the header timeout closes slow clients, the bulk cap answers
 * 503 + Retry-After, upgrades are refused, HEAD has no body and 405 is
 * complete. Every read has a deadline (SO_RCVTIMEO).
 */
#include <arpa/inet.h>
#include <errno.h>
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
    struct timeval tv = {.tv_sec = 3};
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

/* Read up to cap-1 bytes until EOF or the 3 s receive timeout. */
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
    assert_true(took < 3000); /* closed by the server, not by our receive timeout */
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
    mesh_sys_sleep_ms(200); /* the server has started sending /big and stalled */
    char buf[4096];
    assert_int_equal(probe(f->port, "GET", "/big", buf, sizeof(buf)), 503);
    assert_non_null(strcasestr(buf, "retry-after: 1"));
    close(held);
    mesh_sys_sleep_ms(200);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_eviction_keeps_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bulk_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_methods_and_upgrades, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
