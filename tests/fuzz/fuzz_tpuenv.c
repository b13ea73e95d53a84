/*
 * fuzz_tpuenv.c - every tpuenv parser (tpu-env documents, worker host lists,
 * bounds, gRPC endpoint lists, worker-network-endpoints) on the same bytes,
 * with properties:
 *  - tpu-env round trip: the parsed keys and values, written back as
 *    KEY: "escaped" lines and parsed again, are the same in the same order;
 *  - a host list splits its input exactly (the entries joined by ',' are
 *    the input), every entry is a valid host and its ip is set exactly
 *    when it is an IP literal;
 *  - worker-network-endpoints keep only IP literals;
 *  - endpoint lists: ports 1-65535, hosts valid, and "host:port" written
 *    back parses to the same list;
 *  - bounds: three integers 1-4096 that print back to the same bounds.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/mem.h"
#include "core/names.h"
#include "core/tpuenv.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_env_round_trip(const struct mesh_annotations *env)
{
    struct mesh_buf b;
    mesh_buf_init(&b, SIZE_MAX);
    for (size_t i = 0; i < env->n; i++) {
        FUZZ_CHECK(mesh_annotations_get(env, env->items[i].key) == env->items[i].value);
        (void)mesh_buf_printf(&b, NULL, "%s: \"", env->items[i].key);
        for (const char *p = env->items[i].value; *p; p++) {
            const char *e = *p == '\n' ? "\\n" : *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : NULL;
            (void)mesh_buf_append(&b, e ? e : p, e ? 2 : 1, NULL);
        }
        (void)mesh_buf_puts(&b, "\"\n", NULL);
    }
    struct mesh_annotations again = {0};
    struct mesh_err err;
    int rc = mesh_tpuenv_parse(b.data ? b.data : "", b.len, &again, &err);
    FUZZ_CHECK(rc == 0 || (rc == -MESH_E_TOOBIG && b.len > MESH_TPUENV_MAX_INPUT));
    if (rc == 0) {
        FUZZ_CHECK(again.n == env->n);
        for (size_t i = 0; i < env->n; i++) {
            FUZZ_CHECK(strcmp(again.items[i].key, env->items[i].key) == 0);
            FUZZ_CHECK(strcmp(again.items[i].value, env->items[i].value) == 0);
        }
        mesh_annotations_cleanup(&again);
    }
    mesh_buf_cleanup(&b);
}

static void check_hosts(const char *s, size_t size, const struct mesh_worker *w, size_t n)
{
    struct mesh_buf b;
    mesh_buf_init(&b, SIZE_MAX);
    FUZZ_CHECK(n >= 1 && n <= 64);
    for (size_t i = 0; i < n; i++) {
        size_t hl = strlen(w[i].host);
        FUZZ_CHECK(w[i].index == (int)i);
        FUZZ_CHECK(mesh_names_is_host(w[i].host, hl));
        FUZZ_CHECK((w[i].ip[0] != '\0') == mesh_names_is_ip(w[i].host, hl, NULL));
        (void)mesh_buf_printf(&b, NULL, "%s%s", i ? "," : "", w[i].host);
    }
    FUZZ_CHECK(b.len == size && memcmp(b.data, s, size) == 0);
    mesh_buf_cleanup(&b);
}

static void check_endpoints(const struct mesh_tpuenv_endpoint *eps, size_t n)
{
    struct mesh_buf b;
    mesh_buf_init(&b, SIZE_MAX);
    FUZZ_CHECK(n >= 1 && n <= 64);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(eps[i].port >= 1 && eps[i].port <= 65535);
        FUZZ_CHECK(mesh_names_is_host(eps[i].ip, strlen(eps[i].ip)));
        (void)mesh_buf_printf(&b, NULL, "%s%s:%d", i ? "," : "", eps[i].ip, eps[i].port);
    }
    struct mesh_tpuenv_endpoint *again = NULL;
    size_t m = 0;
    FUZZ_CHECK(mesh_tpuenv_parse_endpoints(b.data, b.len, 64, &again, &m, NULL) == 0);
    FUZZ_CHECK(m == n);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(strcmp(again[i].ip, eps[i].ip) == 0 && again[i].port == eps[i].port);
    }
    mesh_free(again);
    mesh_buf_cleanup(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct mesh_err err;
    struct mesh_annotations env = {0};
    if (mesh_tpuenv_parse(s, size, &env, &err) == 0) {
        FUZZ_CHECK(env.n <= MESH_TPUENV_MAX_KEYS);
        check_env_round_trip(&env);
        mesh_annotations_cleanup(&env);
    }
    struct mesh_worker *w = NULL;
    size_t n = 0;
    if (mesh_tpuenv_parse_hostnames(s, size, 64, &w, &n, &err) == 0) {
        check_hosts(s, size, w, n);
        mesh_free(w);
    }
    if (mesh_tpuenv_parse_worker_endpoints(s, size, 64, &w, &n, &err) == 0) {
        for (size_t i = 0; i < n; i++) {
            FUZZ_CHECK(mesh_names_is_ip(w[i].host, strlen(w[i].host), NULL));
            FUZZ_CHECK(w[i].ip == w[i].host);
        }
        mesh_free(w);
    }
    struct mesh_tpuenv_endpoint *eps = NULL;
    if (mesh_tpuenv_parse_endpoints(s, size, 64, &eps, &n, &err) == 0) {
        check_endpoints(eps, n);
        mesh_free(eps);
    }
    int b[3];
    if (mesh_tpuenv_parse_bounds("B", s, size, b, &err) == 0) {
        char text[48];
        int again[3];
        int len = snprintf(text, sizeof(text), "%d,%d,%d", b[0], b[1], b[2]);
        FUZZ_CHECK(mesh_tpuenv_parse_bounds("B", text, (size_t)len, again, &err) == 0);
        for (int i = 0; i < 3; i++) {
            FUZZ_CHECK(b[i] >= 1 && b[i] <= 4096 && again[i] == b[i]);
        }
    }
    (void)mesh_names_is_host(s, size);
    return 0;
}
