/*
 * base64.c - standard base64 encoding and a lenient decoder (see base64.h):
 * the one home for the format, used by the injector's response, the
 * Kubernetes client's exec-plugin input and the kubeconfig parser.
 */
#include "core/base64.h"

#include <stdint.h>

#include "core/cleanup.h"
#include "core/mem.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *mesh_base64_encode(const void *in, size_t len, size_t *out_len)
{
    const unsigned char *s = in;
    char *o = mesh_malloc((len + 2) / 3 * 4 + 1);
    size_t j = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < len) {
            v |= (uint32_t)s[i + 1] << 8;
        }
        if (i + 2 < len) {
            v |= s[i + 2];
        }
        o[j++] = alphabet[(v >> 18) & 63];
        o[j++] = alphabet[(v >> 12) & 63];
        o[j++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
        o[j++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    o[j] = '\0';
    if (out_len != NULL) {
        *out_len = j;
    }
    return o;
}

/* The 6-bit value of c, accepting the URL-safe alphabet's '-' and '_' as
 * kubectl's decoder does; -1 for anything else. */
static int sextet(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+' || c == '-') {
        return 62;
    }
    if (c == '/' || c == '_') {
        return 63;
    }
    return -1;
}

int mesh_base64_decode(const char *in, size_t len, unsigned char **out, size_t *out_len,
                       struct mesh_err *err)
{
    mesh_autofree unsigned char *buf = mesh_malloc(len / 4 * 3 + 4);
    size_t n = 0, pad = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            continue;
        }
        if (c == '=') {
            pad++;
            continue;
        }
        int v = sextet(c);
        if (v < 0 || pad > 0) {
            return mesh_err_set(err, MESH_E_PARSE, 0,
                                "not valid base64 (bad character at byte %zu)", i);
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[n++] = (unsigned char)(acc >> bits);
        }
    }
    if (pad > 2 || bits >= 6) {
        return mesh_err_set(err, MESH_E_PARSE, 0, "not valid base64 (truncated)");
    }
    buf[n] = '\0';
    *out = MESH_STEAL(buf);
    *out_len = n;
    return 0;
}
