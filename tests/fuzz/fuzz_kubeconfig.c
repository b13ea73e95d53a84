/*
 * fuzz_kubeconfig.c - the kubeconfig parser, the ExecCredential parser,
 * RFC 3339 times and base64, with properties:
 *  - a resolved kubeconfig names its context (the override when one is
 *    given) and cluster, and every file path is absolute (relative
 *    ones are resolved against the file's directory, like client-go);
 *  - an ExecCredential yields a non-empty token;
 *  - a parsed time printed back as YYYY-MM-DDTHH:MM:SSZ parses to the same
 *    second (dates such as Feb 31 normalise, and stay stable after that);
 *  - base64: bytes encoded decode to themselves, and decoding is
 *    idempotent through a re-encoding, within the 3-bytes-per-4 bound.
 *
 * Input: byte 0 selects the context (current-context or "ctx"); the rest
 * is parsed as a kubeconfig, as an ExecCredential, as a time and as base64.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base64.h"
#include "core/mem.h"
#include "fuzz_check.h"
#include "io/kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *p)
{
    const char *home = getenv("HOME");
    FUZZ_CHECK(p == NULL || p[0] == '/' || (home != NULL && strncmp(p, home, strlen(home)) == 0));
}

static void check_kubeconfig(const struct mesh_kubeconfig *kc, const char *ctx)
{
    FUZZ_CHECK(kc->context != NULL && kc->cluster_name != NULL); /* a user is optional */
    FUZZ_CHECK(ctx == NULL || strcmp(kc->context, ctx) == 0);
    check_path(kc->ca_file);
    check_path(kc->client_cert_file);
    check_path(kc->client_key_file);
    check_path(kc->token_file);
}

static void check_time(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
        return; /* an offset moved it out of four-digit years */
    }
    char text[32];
    snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    int64_t again = 0;
    FUZZ_CHECK(mesh_kubeconfig_parse_time(text, &again, NULL) == 0 && again == t);
}

static void check_base64(const char *p, size_t n)
{
    char *enc = mesh_base64_encode(p, n, NULL);
    unsigned char *raw = NULL;
    size_t rawn = 0;
    FUZZ_CHECK(mesh_base64_decode(enc, strlen(enc), &raw, &rawn, NULL) == 0);
    FUZZ_CHECK(rawn == n && memcmp(raw, p, n) == 0);
    mesh_free(raw);
    mesh_free(enc);

    unsigned char *out = NULL;
    size_t outn = 0;
    if (mesh_base64_decode(p, n, &out, &outn, NULL) != 0) {
        return;
    }
    FUZZ_CHECK(outn <= n / 4 * 3 + 2 && out[outn] == '\0');
    enc = mesh_base64_encode(out, outn, NULL);
    FUZZ_CHECK(mesh_base64_decode(enc, strlen(enc), &raw, &rawn, NULL) == 0);
    FUZZ_CHECK(rawn == outn && memcmp(raw, out, outn) == 0);
    mesh_free(raw);
    mesh_free(enc);
    mesh_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    const char *ctx = (data[0] & 1) ? "ctx" : NULL;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct mesh_kubeconfig kc;
    struct mesh_err err;
    if (mesh_kubeconfig_parse(p, n, "/fuzz/kube/config", ctx, &kc, &err) == 0) {
        check_kubeconfig(&kc, ctx);
        mesh_kubeconfig_cleanup(&kc);
    }
    char *tok = NULL;
    int64_t exp;
    if (mesh_kubeconfig_parse_exec_credential(p, n, "fuzz", &tok, &exp, &err) == 0) {
        FUZZ_CHECK(tok != NULL && tok[0] != '\0');
        mesh_free(tok);
    }
    char *s = mesh_strndup(p, n);
    int64_t t;
    if (mesh_kubeconfig_parse_time(s, &t, NULL) == 0) {
        check_time(t);
    }
    mesh_free(s);
    check_base64(p, n);
    return 0;
}
