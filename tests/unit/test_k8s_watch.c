/*
 * test_k8s_watch.c - the watch-stream framer (every chunking of the same
 * stream yields the same events), the event / list / Status decoders, the
 * resourceVersion comparison, the backoff arithmetic and Retry-After.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/buf.h"
#include "core/k8s_watch.h"
#include "core/mem.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Collects lines as "line1|line2|..." */
static int collect(void *ctx, const char *line, size_t len, struct mesh_err *err)
{
    struct mesh_buf *b = ctx;
    if (b->len > 0) {
        mesh_buf_puts(b, "|", err);
    }
    return mesh_buf_append(b, line, len, err);
}

static int stop_on_x(void *ctx, const char *line, size_t len, struct mesh_err *err)
{
    if (len == 1 && line[0] == 'x') {
        return mesh_err_set(err, MESH_E_GONE, 0, "stop");
    }
    return collect(ctx, line, len, err);
}

static void test_framer_chunkings(void **state)
{
    (void)state;
    static const struct {
        const char *stream;
        size_t max;
        const char *want; /* lines joined by '|' */
        size_t pending;   /* bytes left in the framer at the end */
        int rc;
    } rows[] = {
        {"{\"a\":1}\n{\"b\":2}\n", 0, "{\"a\":1}|{\"b\":2}", 0, 0},
        {"one\r\ntwo\r\n", 0, "one|two", 0, 0},
        {"\n\n  \nx1\n\r\n", 0, "x1", 0, 0},
        {"abc\ndef", 0, "abc", 3, 0},
        {"", 0, "", 0, 0},
        {"12345678\n123456789\n", 8, "12345678", 0, -MESH_E_TOOBIG},
        {"1234\n1234567890", 8, "1234", 0, -MESH_E_TOOBIG},
        {"abcdefgh\n", 8, "abcdefgh", 0, 0},
        {"a\nb\nc\n", 1, "a|b|c", 0, 0},
    };
    static const size_t splits[] = {1, 2, 3, 5, 7, 64, 100000};
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        for (size_t s = 0; s < ARRAY_LEN(splits); s++) {
            struct mesh_k8s_watch_framer f;
            struct mesh_buf got;
            mesh_k8s_watch_framer_init(&f, rows[i].max);
            mesh_buf_init(&got, 1 << 16);
            const char *p = rows[i].stream;
            size_t left = strlen(p);
            int rc = 0;
            while (left > 0 && rc == 0) {
                size_t n = left < splits[s] ? left : splits[s];
                rc = mesh_k8s_watch_framer_feed(&f, p, n, collect, &got, NULL);
                p += n;
                left -= n;
            }
            assert_int_equal(rc, rows[i].rc);
            assert_string_equal(mesh_buf_str(&got), rows[i].want);
            if (rc == 0) {
                assert_int_equal(mesh_k8s_watch_framer_pending(&f), rows[i].pending);
            }
            /* Memory never exceeds the bound, whatever happened. */
            assert_true(f.partial.len <= f.max);
            mesh_buf_cleanup(&got);
            mesh_k8s_watch_framer_cleanup(&f);
        }
    }
}

static void test_framer_callback_stops_and_reset(void **state)
{
    (void)state;
    struct mesh_k8s_watch_framer f;
    struct mesh_buf got;
    struct mesh_err err;
    mesh_k8s_watch_framer_init(&f, 0);
    mesh_buf_init(&got, 1024);
    assert_int_equal(mesh_k8s_watch_framer_feed(&f, "a\nx\nb\nhalf", 11, stop_on_x, &got, &err),
                     -MESH_E_GONE);
    assert_string_equal(mesh_buf_str(&got), "a");
    mesh_k8s_watch_framer_reset(&f);
    assert_int_equal(mesh_k8s_watch_framer_pending(&f), 0);
    assert_int_equal(mesh_k8s_watch_framer_feed(&f, "c\n", 2, stop_on_x, &got, &err), 0);
    assert_string_equal(mesh_buf_str(&got), "a|c");
    mesh_buf_cleanup(&got);
    mesh_k8s_watch_framer_cleanup(&f);
}

static void test_decode_event(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int rc;
        enum mesh_k8s_event_type type;
        const char *key;
        const char *rv;
        int code;
        bool end;
    } rows[] = {
        {"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
         "\"namespace\":\"ns\",\"resourceVersion\":\"12\"}}}",
         0, MESH_K8S_EV_ADDED, "ns/p", "12", 0, false},
        {"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"n1\","
         "\"resourceVersion\":\"7\"}}}",
         0, MESH_K8S_EV_MODIFIED, "/n1", "7", 0, false},
        {"{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"a\","
         "\"resourceVersion\":\"99\"}}}",
         0, MESH_K8S_EV_DELETED, "a/p", "99", 0, false},
        /* Real bookmark capture shape (spec §2.3): no name. */
        {"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
         "\"metadata\":{\"resourceVersion\":\"12746\"},\"spec\":{\"containers\":null},"
         "\"status\":{}}}",
         0, MESH_K8S_EV_BOOKMARK, "", "12746", 0, false},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"5\","
         "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}",
         0, MESH_K8S_EV_BOOKMARK, "", "5", 0, true},
        /* In-stream 410 (spec §2.7). */
        {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
         "\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 "
         "(3171407)\",\"reason\":\"Expired\",\"code\":410}}",
         0, MESH_K8S_EV_ERROR, "", "", 410, false},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p\"}}}", -MESH_E_PARSE, 0, NULL,
         NULL, 0, false},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}",
         -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\",\"resourceVersion\":\"1\"}}}",
         -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":\"ADDED\",\"object\":[]}", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":\"SYNC\",\"object\":{}}", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":7,\"object\":{}}", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Pod\"}}", -MESH_E_PARSE, 0, NULL, NULL, 0,
         false},
        {"{\"type\":\"ADDED\",\"obj", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"[1,2]", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"garbage", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
        {"{\"type\":\"ADDED\",\"object\":{}} trailing", -MESH_E_PARSE, 0, NULL, NULL, 0, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_k8s_watch_event ev;
        struct mesh_err err;
        memset(&ev, 0, sizeof(ev));
        mesh_err_clear(&err);
        int rc = mesh_k8s_watch_decode_event(rows[i].line, strlen(rows[i].line), 0, &ev, &err);
        assert_int_equal(rc, rows[i].rc);
        if (rc < 0) {
            assert_null(ev.root);
            assert_true(err.msg[0] != '\0');
            continue;
        }
        assert_int_equal(ev.type, rows[i].type);
        assert_string_equal(ev.key, rows[i].key);
        assert_string_equal(ev.rv, rows[i].rv);
        assert_int_equal(ev.status.code, rows[i].code);
        assert_int_equal(ev.initial_events_end, rows[i].end);
        assert_non_null(ev.object);
        mesh_k8s_watch_event_cleanup(&ev);
    }
}

static void test_decode_event_limit(void **state)
{
    (void)state;
    const char *line = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p\","
                       "\"resourceVersion\":\"1\"}}}";
    struct mesh_k8s_watch_event ev;
    struct mesh_err err;
    assert_int_equal(mesh_k8s_watch_decode_event(line, strlen(line), 20, &ev, &err),
                     -MESH_E_TOOBIG);
}

static void test_decode_status(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int rc;
        int code;
        const char *reason;
        long retry;
        bool expired;
    } rows[] = {
        {"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
         "\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}",
         0, 401, "Unauthorized", 0, false},
        {"{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"x\",\"reason\":\"Expired\","
         "\"code\":410}",
         0, 410, "Expired", 0, true},
        {"{\"kind\":\"Status\",\"reason\":\"Gone\",\"code\":500}", 0, 500, "Gone", 0, true},
        {"{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"code\":429,"
         "\"details\":{\"retryAfterSeconds\":3}}",
         0, 429, "TooManyRequests", 3, false},
        {"Too many requests, please try again later.\n", -MESH_E_PARSE, 0, "", 0, false},
        {"{\"kind\":\"Pod\",\"code\":1}", -MESH_E_PARSE, 0, "", 0, false},
        {"{\"kind\":\"Status\"}", -MESH_E_PARSE, 0, "", 0, false},
        {"{\"kind\":\"Status\",\"code\":-4}", -MESH_E_PARSE, 0, "", 0, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_k8s_watch_status st;
        memset(&st, 0, sizeof(st));
        int rc = mesh_k8s_watch_decode_status(rows[i].body, strlen(rows[i].body), &st, NULL);
        assert_int_equal(rc, rows[i].rc);
        if (rc == 0) {
            assert_int_equal(st.code, rows[i].code);
            assert_string_equal(st.reason, rows[i].reason);
            assert_int_equal(st.retry_after_s, rows[i].retry);
            assert_int_equal(mesh_k8s_watch_status_is_expired(&st), rows[i].expired);
        }
    }
}

static void test_decode_list(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int rc;
        const char *rv;
        const char *cont;
        long long remaining;
        int nitems;
    } rows[] = {
        {"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
         "\"10245\",\"continue\":\"eyJ2\",\"remainingItemCount\":753},\"items\":[{\"metadata\":"
         "{\"name\":\"a\"}}]}",
         0, "10245", "eyJ2", 753, 1},
        {"{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"3\",\"continue\":\"\"},"
         "\"items\":[]}",
         0, "3", NULL, -1, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":null}", -MESH_E_PARSE, NULL, NULL, 0,
         0},
        {"{\"metadata\":{},\"items\":[]}", -MESH_E_PARSE, NULL, NULL, 0, 0},
        {"{\"items\":[]}", -MESH_E_PARSE, NULL, NULL, 0, 0},
        {"[]", -MESH_E_PARSE, NULL, NULL, 0, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[", -MESH_E_PARSE, NULL, NULL, 0, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_k8s_watch_list l;
        memset(&l, 0, sizeof(l));
        int rc = mesh_k8s_watch_decode_list(rows[i].body, strlen(rows[i].body), 0, &l, NULL);
        assert_int_equal(rc, rows[i].rc);
        if (rc < 0) {
            assert_null(l.root);
            continue;
        }
        assert_string_equal(l.rv, rows[i].rv);
        if (rows[i].cont == NULL) {
            assert_null(l.cont);
        } else {
            assert_string_equal(l.cont, rows[i].cont);
        }
        assert_int_equal(l.remaining, rows[i].remaining);
        assert_int_equal(cJSON_GetArraySize(l.items), rows[i].nitems);
        mesh_k8s_watch_list_cleanup(&l);
    }
}

static void test_rv_cmp(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        int want;
    } rows[] = {
        {"1", "2", -1},
        {"10", "9", 1},
        {"123", "123", 0},
        {"18446744073709551615", "18446744073709551614", 1},
        {"18446744073709551616", "1", 2},
        {"abc", "abc", 0},
        {"abc", "abd", 2},
        {"", "1", 2},
        {"01", "1", 2},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        assert_int_equal(mesh_k8s_watch_rv_cmp(rows[i].a, rows[i].b), rows[i].want);
    }
}

static void test_backoff(void **state)
{
    (void)state;
    /* client-go: 0.8 s doubling, cap 30 s, jitter x[1,2), reset after 2 min. */
    static const struct {
        int64_t now;
        double rnd;
        int64_t want;
    } steps[] = {
        {0, 0.0, 800},
        {1000, 0.5, 2400},
        {2000, 0.0, 3200},
        {3000, 0.0, 6400},
        {4000, 0.0, 12800},
        {5000, 0.0, 25600},
        {6000, 0.0, 30000},
        {7000, 0.999, 59970},
        {8000, 0.0, 30000},
        {8000 + 120001, 0.0, 800},
        {8000 + 120002, 7.0, 1600},
        {8000 + 120003, -1.0, 3200},
    };
    struct mesh_k8s_watch_backoff b;
    mesh_k8s_watch_backoff_init(&b, 0, 0, 0);
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
        assert_int_equal(mesh_k8s_watch_backoff_next(&b, steps[i].now, steps[i].rnd),
                         steps[i].want);
    }
    mesh_k8s_watch_backoff_reset(&b);
    assert_int_equal(mesh_k8s_watch_backoff_next(&b, 0, 0.0), 800);
    mesh_k8s_watch_backoff_init(&b, 100, 50, 10);
    assert_int_equal(mesh_k8s_watch_backoff_next(&b, 0, 0.0), 100);
    assert_int_equal(mesh_k8s_watch_backoff_next(&b, 1, 0.0), 100);
}

static void test_retry_after(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        long cap;
        long want;
    } rows[] = {
        {"1", 30, 1},
        {" 5\r\n", 30, 5},
        {"32", 30, 30},
        {"0", 30, 0},
        {"007", 30, 7},
        {"", 30, -MESH_E_INVAL},
        {"-1", 30, -MESH_E_INVAL},
        {"Wed, 21 Oct 2015 07:28:00 GMT", 30, -MESH_E_INVAL},
        {"99999999999999999999", 30, -MESH_E_INVAL},
        {"1.5", 30, -MESH_E_INVAL},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        assert_int_equal(
            mesh_k8s_watch_parse_retry_after(rows[i].v, strlen(rows[i].v), rows[i].cap),
            rows[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_framer_chunkings),
        cmocka_unit_test(test_framer_callback_stops_and_reset),
        cmocka_unit_test(test_decode_event),
        cmocka_unit_test(test_decode_event_limit),
        cmocka_unit_test(test_decode_status),
        cmocka_unit_test(test_decode_list),
        cmocka_unit_test(test_rv_cmp),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
