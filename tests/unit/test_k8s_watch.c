/*
 * test_k8s_watch.c - the watch-stream framer (every chunking of the same
 * stream yields the same events), the event / Status decoders, the
 * streaming list scanner (every chunking of a page yields the same items),
 * the resourceVersion comparison, the backoff arithmetic and Retry-After.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
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
        /* Real bookmark capture shape: no name. */
        {"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
         "\"metadata\":{\"resourceVersion\":\"12746\"},\"spec\":{\"containers\":null},"
         "\"status\":{}}}",
         0, MESH_K8S_EV_BOOKMARK, "", "12746", 0, false},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"5\","
         "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}",
         0, MESH_K8S_EV_BOOKMARK, "", "5", 0, true},
        /* In-stream 410. */
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

/* ---- list splitter ---- */

/* One scan's outcome, to compare chunkings. */
struct scan_out {
    int rc;
    char msg[256];
    struct mesh_buf items; /* the items' compact prints, joined by '|' */
    struct mesh_k8s_list_meta meta;
    int stop_after; /* item callback fails after this many (0 = never) */
    int seen;
};

/* Items are kept as cJSON's compact print of the tree handed out. */
static int scan_item(void *ctx, const cJSON *item, struct mesh_err *err)
{
    struct scan_out *o = ctx;
    if (o->stop_after > 0 && o->seen == o->stop_after) {
        return mesh_err_set(err, MESH_E_GONE, 0, "callback stop");
    }
    o->seen++;
    if (o->items.len > 0) {
        mesh_buf_puts(&o->items, "|", NULL);
    }
    char *text = cJSON_PrintUnformatted(item);
    assert_non_null(text);
    int rc = mesh_buf_puts(&o->items, text, NULL);
    cJSON_free(text);
    return rc;
}

/* Scan body cut at the offsets cuts[0..ncuts) (ascending). */
static void scan(const char *body, size_t len, size_t max_item, size_t max_total,
                 const size_t *cuts, size_t ncuts, int stop_after, struct scan_out *o)
{
    memset(o, 0, sizeof(*o));
    o->stop_after = stop_after;
    mesh_buf_init(&o->items, 1 << 20);
    struct mesh_k8s_list_scanner sc;
    struct mesh_err err;
    mesh_err_clear(&err);
    mesh_k8s_list_scanner_init(&sc, max_item, max_total, scan_item, o);
    size_t at = 0;
    int rc = 0;
    for (size_t k = 0; k <= ncuts && rc == 0; k++) {
        size_t end = k < ncuts ? cuts[k] : len;
        rc = mesh_k8s_list_scanner_feed(&sc, body + at, end - at, &err);
        at = end;
        /* The bound holds at every step. */
        assert_true(sc.item.len <= sc.max_item);
    }
    if (rc == 0) {
        rc = mesh_k8s_list_scanner_finish(&sc, &o->meta, &err);
    }
    o->rc = rc;
    snprintf(o->msg, sizeof(o->msg), "%s", rc < 0 ? err.msg : "");
    mesh_k8s_list_scanner_cleanup(&sc);
}

static void scan_out_cleanup(struct scan_out *o)
{
    mesh_buf_cleanup(&o->items);
    if (o->rc == 0) {
        mesh_k8s_list_meta_cleanup(&o->meta);
    }
}

static void assert_same_scan(const struct scan_out *a, const struct scan_out *b)
{
    assert_int_equal(a->rc, b->rc);
    assert_string_equal(a->msg, b->msg);
    assert_string_equal(mesh_buf_str(&a->items), mesh_buf_str(&b->items));
    if (a->rc == 0) {
        assert_string_equal(a->meta.rv, b->meta.rv);
        assert_string_equal(a->meta.kind, b->meta.kind);
        assert_int_equal(a->meta.remaining, b->meta.remaining);
        assert_int_equal(a->meta.items, b->meta.items);
        assert_true((a->meta.cont == NULL) == (b->meta.cont == NULL));
        if (a->meta.cont != NULL) {
            assert_string_equal(a->meta.cont, b->meta.cont);
        }
    }
}

/* Deterministic pseudo-random numbers for the chunkings. */
static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1103515245u + 12345u;
    return *st >> 8;
}

/* Every single split point, 1-byte chunks and 50 random chunkings must give
 * exactly what one block gives. */
static void scan_every_chunking(const char *body, size_t max_item, size_t max_total,
                                struct scan_out *whole)
{
    size_t len = strlen(body);
    scan(body, len, max_item, max_total, NULL, 0, 0, whole);
    for (size_t cut = 0; cut <= len; cut++) {
        struct scan_out o;
        scan(body, len, max_item, max_total, &cut, 1, 0, &o);
        assert_same_scan(whole, &o);
        scan_out_cleanup(&o);
    }
    size_t *cuts = mesh_calloc(len + 1, sizeof(*cuts));
    for (size_t k = 0; k < len; k++) {
        cuts[k] = k + 1;
    }
    struct scan_out o;
    scan(body, len, max_item, max_total, cuts, len ? len - 1 : 0, 0, &o);
    assert_same_scan(whole, &o);
    scan_out_cleanup(&o);
    uint32_t st = (uint32_t)len;
    for (int r = 0; r < 50; r++) {
        size_t n = 0, at = 0;
        while (len > 0) {
            at += 1 + lcg(&st) % 40;
            if (at >= len) {
                break;
            }
            cuts[n++] = at;
        }
        scan(body, len, max_item, max_total, cuts, n, 0, &o);
        assert_same_scan(whole, &o);
        scan_out_cleanup(&o);
    }
    mesh_free(cuts);
}

static void test_list_scanner(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        size_t max_item, max_total;
        int rc;
        const char *msg; /* substring of the error, or NULL */
        const char *items;
        const char *rv, *cont, *kind;
        long long remaining;
    } rows[] = {
        /* the API's documented PodList shape */
        {"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
         "\"10245\",\"continue\":\"eyJ2\",\"remainingItemCount\":753},\"items\":[{\"metadata\":"
         "{\"name\":\"a\"}}]}",
         0, 0, 0, NULL, "{\"metadata\":{\"name\":\"a\"}}", "10245", "eyJ2", "PodList", 753},
        {"{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"3\",\"continue\":\"\"},"
         "\"items\":[]}",
         0, 0, 0, NULL, "", "3", NULL, "PodList", -1},
        /* items before metadata; braces, brackets and escaped quotes in strings */
        {"{\"items\":[{\"a\":\"}{][\"},{\"b\":\"\\\"x\\\\\"}],\"metadata\":{"
         "\"remainingItemCount\":2,\"resourceVersion\":\"7\",\"continue\":\"c\\u0041\"},"
         "\"kind\":\"PodList\"}",
         0, 0, 0, NULL, "{\"a\":\"}{][\"}|{\"b\":\"\\\"x\\\\\"}", "7", "cA", "PodList", 2},
        /* whitespace everywhere, every kind of item value */
        {" \n{ \"kind\" : \"PodList\" ,\t\"metadata\" : { \"resourceVersion\" : \"5\" } , "
         "\"items\" : [ 1 , \"s\" , true , null , -0.5e+3 , [ ] , { } , 0 ] } \r\n",
         0, 0, 0, NULL, "1|\"s\"|true|null|-500|[]|{}|0", "5", NULL, "PodList", -1},
        /* the same names deeper down are not the list's */
        {"{\"metadata\":{\"resourceVersion\":\"5\",\"x\":{\"continue\":\"no\"}},\"items\":[{"
         "\"metadata\":{\"resourceVersion\":\"999\",\"continue\":\"zz\"},\"items\":[1]}]}",
         0, 0, 0, NULL,
         "{\"metadata\":{\"resourceVersion\":\"999\",\"continue\":\"zz\"},\"items\":[1]}", "5",
         NULL, "", -1},
        /* escaped member names are the same names */
        {"{\"ite\\u006ds\":[2],\"m\\u0065tadata\":{\"resourceVersion\":\"\\u0039\"}}", 0, 0, 0,
         NULL, "2", "9", NULL, "", -1},
        {"{\"metadata\":{\"resourceVersion\":\"3\",\"continue\":null},\"items\":[]}", 0, 0, 0, NULL,
         "", "3", NULL, "", -1},
        /* not lists */
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":null}", 0, 0, -MESH_E_PARSE,
         "byte 44: \"items\" is not an array", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{},\"items\":[]}", 0, 0, -MESH_E_PARSE, "no metadata.resourceVersion", "",
         NULL, NULL, NULL, 0},
        {"{\"items\":[]}", 0, 0, -MESH_E_PARSE, "no \"metadata\" object", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"}}", 0, 0, -MESH_E_PARSE, "no \"items\" array",
         "", NULL, NULL, NULL, 0},
        {"[]", 0, 0, -MESH_E_PARSE, "byte 0: expected '{' (a list response is a JSON object)", "",
         NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[", 0, 0, -MESH_E_PARSE,
         "truncated at byte 45: expected a JSON value or ']'", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[{\"a\":1},{\"b\"", 0, 0,
         -MESH_E_PARSE, "truncated at byte 57: expected the rest of an element of items",
         "{\"a\":1}", NULL, NULL, NULL, 0},
        {"{\"kind\":\"Status\",\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[]}", 0, 0,
         -MESH_E_PARSE, "kind \"Status\", not a *List", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[],\"items\":[1]}", 0, 0,
         -MESH_E_PARSE, "duplicate \"items\" member", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"3\",\"resourceVersion\":\"4\"},\"items\":[]}", 0, 0,
         -MESH_E_PARSE, "duplicate \"metadata.resourceVersion\"", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[1 2]}", 0, 0, -MESH_E_PARSE,
         "byte 47: expected ',' or ']' after an array element, found '2'", "1", NULL, NULL, NULL,
         0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}x", 0, 0, -MESH_E_PARSE,
         "byte 47: expected nothing after the list object, found 'x'", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"a\tb\"]}", 0, 0, -MESH_E_PARSE,
         "byte 47: raw control character", "", NULL, NULL, NULL, 0},
        /* items are cJSON's grammar, as watch events: leading zeros and a bare '.' pass */
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[01,1.]}", 0, 0, 0, NULL, "1|1", "1",
         NULL, "", -1},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[-]}", 0, 0, -MESH_E_PARSE,
         "byte 45: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\x\"]}", 0, 0, -MESH_E_PARSE,
         "byte 46: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\u12g4\"]}", 0, 0, -MESH_E_PARSE,
         "byte 50: expected a hex digit of a \\u escape", "", NULL, NULL, NULL, 0},
        /* UTF-16 surrogate escapes pair up (cJSON rejects lone ones) */
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\ud83d\\ude00\"]}", 0, 0, 0, NULL,
         "\"\xf0\x9f\x98\x80\"", "1", NULL, "", -1},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\ude00\"]}", 0, 0, -MESH_E_PARSE,
         "byte 46: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\ud83dx\"]}", 0, 0, -MESH_E_PARSE,
         "byte 46: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"\\ud83d\\u0041\"]}", 0, 0,
         -MESH_E_PARSE, "byte 46: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL,
         0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[tru]}", 0, 0, -MESH_E_PARSE,
         "byte 45: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":[],\"items\":[]}", 0, 0, -MESH_E_PARSE, "\"metadata\" is not an object", "",
         NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":3},\"items\":[]}", 0, 0, -MESH_E_PARSE,
         "metadata.\"resourceVersion\" is not a string", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"} \"items\":[]}", 0, 0, -MESH_E_PARSE,
         "byte 36: not valid JSON (outside \"items\")", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[{\"a\":1,}]}", 0, 0, -MESH_E_PARSE,
         "byte 52: item 1 (from byte 45) is not valid JSON", "", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\\u0000\"},\"items\":[]}", 0, 0, -MESH_E_PARSE,
         "a \\u0000 escape outside", "", NULL, NULL, NULL, 0},
        {"{\"items\":[],\"metadata\":{\"resourceVersion\":\"1\"},\"metadata\":{}}", 0, 0,
         -MESH_E_PARSE, "duplicate \"metadata\" member", "", NULL, NULL, NULL, 0},
        {"{\"items\":[],\"\\u0069tems\":[1]}", 0, 0, -MESH_E_PARSE, "duplicate \"items\" member",
         "", NULL, NULL, NULL, 0},
        /* bounds: one item over the object limit, the page over its limit */
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"0123456\",\"0123456789\",1]}", 10,
         0, -MESH_E_TOOBIG, "item 2 (from byte 55) is larger than the limit of 10 bytes",
         "\"0123456\"", NULL, NULL, NULL, 0},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[\"0123456\"]}", 10, 0, 0, NULL,
         "\"0123456\"", "1", NULL, "", -1},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}", 0, 45, -MESH_E_TOOBIG,
         "larger than the limit of 45 bytes", "", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct scan_out o;
        scan_every_chunking(rows[i].body, rows[i].max_item, rows[i].max_total, &o);
        if (o.rc != rows[i].rc || (rows[i].msg && strstr(o.msg, rows[i].msg) == NULL) ||
            strcmp(mesh_buf_str(&o.items), rows[i].items) != 0) {
            print_error("row %zu: rc %d msg \"%s\" items %s\n", i, o.rc, o.msg,
                        mesh_buf_str(&o.items));
        }
        assert_int_equal(o.rc, rows[i].rc);
        if (rows[i].msg != NULL) {
            assert_non_null(strstr(o.msg, rows[i].msg));
        }
        assert_string_equal(mesh_buf_str(&o.items), rows[i].items);
        if (o.rc == 0) {
            assert_string_equal(o.meta.rv, rows[i].rv);
            assert_string_equal(o.meta.kind, rows[i].kind);
            assert_int_equal(o.meta.remaining, rows[i].remaining);
            if (rows[i].cont == NULL) {
                assert_null(o.meta.cont);
            } else {
                assert_string_equal(o.meta.cont, rows[i].cont);
            }
        }
        scan_out_cleanup(&o);
    }
}

/* A realistic page (Go key order, managedFields, a continue token), fed at
 * every split point like the rows above. */
static void test_list_scanner_realistic(void **state)
{
    (void)state;
    static const char body[] =
        "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"2001"
        "\",\"continue\":\"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjAwMSwic3RhcnQiOiJ0cmFpbmVyLT"
        "FcdTAwMDAifQ\",\"remainingItemCount\":1},\"items\":[{\"metadata\":{\"name\":\"traine"
        "r-0-x\",\"generateName\":\"trainer-0-\",\"namespace\":\"default\",\"uid\":\"59d21b64"
        "-2c42-4469-a19d-9fd13e58636a\",\"resourceVersion\":\"1000\",\"labels\":{\"batch.kube"
        "rnetes.io/controller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f30a8d6\",\"batch.kubernet"
        "es.io/job-completion-index\":\"0\",\"batch.kubernetes.io/job-name\":\"trainer\",\"co"
        "ntroller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f30a8d6\",\"job-name\":\"trainer\"},\""
        "managedFields\":[{\"manager\":\"kubelet\",\"operation\":\"Update\",\"fieldsType\":\""
        "FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditions\":{\"k:{\\\"type\\\":\\\"Ready"
        "\\\"}\":{\".\":{},\"f:status\":{}}}}}}]},\"spec\":{\"hostname\":\"trainer-0\",\"subd"
        "omain\":\"trainer\"},\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.0\",\"cond"
        "itions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}},{\"metadata\":{\"name\":\"trai"
        "ner-1-x\",\"generateName\":\"trainer-0-\",\"namespace\":\"default\",\"uid\":\"59d21b"
        "64-2c42-4469-a19d-9fd13e58636a\",\"resourceVersion\":\"1001\",\"labels\":{\"batch.ku"
        "bernetes.io/controller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f30a8d6\",\"batch.kubern"
        "etes.io/job-completion-index\":\"0\",\"batch.kubernetes.io/job-name\":\"trainer\",\""
        "controller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f30a8d6\",\"job-name\":\"trainer\"},"
        "\"managedFields\":[{\"manager\":\"kubelet\",\"operation\":\"Update\",\"fieldsType\":"
        "\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditions\":{\"k:{\\\"type\\\":\\\"Rea"
        "dy\\\"}\":{\".\":{},\"f:status\":{}}}}}}]},\"spec\":{\"hostname\":\"trainer-1\",\"su"
        "bdomain\":\"trainer\"},\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.1\",\"co"
        "nditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}]}";
    static const char items[] =
        "{\"metadata\":{\"name\":\"trainer-0-x\",\"generateName\":\"trainer-0-\",\"namespace"
        "\":\"default\",\"uid\":\"59d21b64-2c42-4469-a19d-9fd13e58636a\",\"resourceVersion\":"
        "\"1000\",\"labels\":{\"batch.kubernetes.io/controller-uid\":\"d5eb7f0a-5a80-45d0-989"
        "2-8e312f30a8d6\",\"batch.kubernetes.io/job-completion-index\":\"0\",\"batch.kubernet"
        "es.io/job-name\":\"trainer\",\"controller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f30a8"
        "d6\",\"job-name\":\"trainer\"},\"managedFields\":[{\"manager\":\"kubelet\",\"operati"
        "on\":\"Update\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:conditio"
        "ns\":{\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\"f:status\":{}}}}}}]},\"spec\":{"
        "\"hostname\":\"trainer-0\",\"subdomain\":\"trainer\"},\"status\":{\"phase\":\"Runnin"
        "g\",\"podIP\":\"10.0.0.0\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]"
        "}}|{\"metadata\":{\"name\":\"trainer-1-x\",\"generateName\":\"trainer-0-\",\"namespa"
        "ce\":\"default\",\"uid\":\"59d21b64-2c42-4469-a19d-9fd13e58636a\",\"resourceVersion"
        "\":\"1001\",\"labels\":{\"batch.kubernetes.io/controller-uid\":\"d5eb7f0a-5a80-45d0-"
        "9892-8e312f30a8d6\",\"batch.kubernetes.io/job-completion-index\":\"0\",\"batch.kuber"
        "netes.io/job-name\":\"trainer\",\"controller-uid\":\"d5eb7f0a-5a80-45d0-9892-8e312f3"
        "0a8d6\",\"job-name\":\"trainer\"},\"managedFields\":[{\"manager\":\"kubelet\",\"oper"
        "ation\":\"Update\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:condi"
        "tions\":{\"k:{\\\"type\\\":\\\"Ready\\\"}\":{\".\":{},\"f:status\":{}}}}}}]},\"spec"
        "\":{\"hostname\":\"trainer-1\",\"subdomain\":\"trainer\"},\"status\":{\"phase\":\"Ru"
        "nning\",\"podIP\":\"10.0.0.1\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True"
        "\"}]}}";
    struct scan_out o;
    scan_every_chunking(body, 0, 0, &o);
    assert_int_equal(o.rc, 0);
    assert_string_equal(mesh_buf_str(&o.items), items);
    assert_string_equal(o.meta.rv, "2001");
    assert_string_equal(o.meta.kind, "PodList");
    assert_int_equal(o.meta.remaining, 1);
    assert_int_equal(o.meta.items, 2);
    assert_non_null(o.meta.cont);
    assert_string_equal(
        o.meta.cont,
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjAwMSwic3RhcnQiOiJ0cmFpbmVyLTFcdTAwMDAifQ");
    scan_out_cleanup(&o);
}

/* A callback error stops the scan at once with its code; nesting is bounded. */
static void test_list_scanner_stop_and_depth(void **state)
{
    (void)state;
    const char *body = "{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[1,2,3]}";
    struct scan_out o;
    scan(body, strlen(body), 0, 0, NULL, 0, 2, &o);
    assert_int_equal(o.rc, -MESH_E_GONE);
    assert_string_equal(mesh_buf_str(&o.items), "1|2");
    scan_out_cleanup(&o);

    struct mesh_buf deep;
    mesh_buf_init(&deep, 1 << 16);
    mesh_buf_puts(&deep, "{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[", NULL);
    for (int k = 0; k < MESH_K8S_LIST_DEPTH_MAX; k++) {
        mesh_buf_puts(&deep, "[", NULL);
    }
    scan(deep.data, deep.len, 0, 0, NULL, 0, 0, &o);
    assert_int_equal(o.rc, -MESH_E_PARSE);
    assert_non_null(strstr(o.msg, "nested deeper than 512"));
    scan_out_cleanup(&o);
    mesh_buf_cleanup(&deep);
}

/* metadata.managedFields is cut out of an event with one comma; nothing else changes. */
#define EV "{\"type\":\"ADDED\",\"object\":"
static void test_strip_managed_fields(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *want; /* NULL = returned unchanged (the same pointer) */
    } rows[] = {
        {"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"managedFields\":[{"
         "\"f:x\":{\"}\":\"]\\\"\"}}],\"uid\":\"u\"},\"spec\":{}}}",
         "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"uid\":\"u\"},"
         "\"spec\":{}}}"},
        /* last member: the comma before it goes */
        {EV "{\"metadata\":{\"name\":\"a\" , \"managedFields\" : [ ] }}}",
         EV "{\"metadata\":{\"name\":\"a\"  }}}"},
        /* only member */
        {EV "{\"metadata\":{\"managedFields\":null}}}", EV "{\"metadata\":{}}}"},
        {EV "{\"metadata\":{\"managedFields\":[1],\"name\":\"n\"},\"x\":1}}",
         EV "{\"metadata\":{\"name\":\"n\"},\"x\":1}}"},
        /* backslash runs: an escaped backslash ends before the quote, an escaped quote not */
        {EV "{\"metadata\":{\"a\":\"x\\\\\",\"managedFields\":1}}}",
         EV "{\"metadata\":{\"a\":\"x\\\\\"}}}"},
        {EV "{\"metadata\":{\"a\":\"q\\\",\\\"managedFields\\\":1\"}}}", NULL},
        /* the same name elsewhere stays */
        {EV "{\"managedFields\":1,\"metadata\":{\"name\":\"n\"}}}", NULL},
        {"{\"metadata\":{\"managedFields\":1},\"object\":{}}", NULL},
        {EV
         "{\"spec\":{\"metadata\":{\"managedFields\":1}},\"metadata\":{\"a\":\"managedFields\"}}}",
         NULL},
        {EV "{\"metadata\":{\"name\":\"n\"}}}", NULL},
        /* an object alone is not an event */
        {"{\"metadata\":{\"managedFields\":1}}", NULL},
        /* broken text: nothing found, nothing read out of bounds */
        {EV "{\"metadata\":{\"managedFields\":", NULL},
        {EV "{\"metadata\":{\"managedFields\":[1,", EV "{\"metadata\":{"},
        {"\"", NULL},
        {"}}]]" EV "{\"metadata\":{\"managedFields\":1}}}", NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        struct mesh_buf scratch;
        mesh_buf_init(&scratch, 1 << 16);
        size_t len = strlen(rows[i].in), n = 0;
        const char *out = mesh_k8s_watch_strip_managed_fields(rows[i].in, len, &scratch, &n);
        if (rows[i].want == NULL) {
            assert_ptr_equal(out, rows[i].in);
            assert_int_equal(n, len);
        } else {
            assert_int_equal(n, strlen(rows[i].want));
            assert_memory_equal(out, rows[i].want, n);
        }
        mesh_buf_cleanup(&scratch);
    }
}
#undef EV

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
        cmocka_unit_test(test_list_scanner),
        cmocka_unit_test(test_list_scanner_realistic),
        cmocka_unit_test(test_list_scanner_stop_and_depth),
        cmocka_unit_test(test_strip_managed_fields),
        cmocka_unit_test(test_rv_cmp),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
