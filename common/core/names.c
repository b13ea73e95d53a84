/*
 * names.c - validation of names and addresses (see names.h). Pure: no I/O.
 */
#include "names.h"

#include <arpa/inet.h>
#include <string.h>

#include "core/model.h"

bool mesh_names_is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool mesh_names_is_ip(const char *s, size_t len, bool *out_v6)
{
    char tmp[MESH_IP_MAX];
    unsigned char bin[16];
    if (s == NULL || len == 0 || len >= sizeof(tmp) || memchr(s, '\0', len) != NULL) {
        return false;
    }
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    bool v6 = false;
    if (inet_pton(AF_INET, tmp, bin) != 1) {
        if (inet_pton(AF_INET6, tmp, bin) != 1) {
            return false;
        }
        v6 = true;
    }
    if (out_v6 != NULL) {
        *out_v6 = v6;
    }
    return true;
}

/* Character classes for DNS names, one bit each: a character is allowed
 * in a label when its bit for the mode is set. Every other byte (NUL,
 * space, >= 0x80) has no bit; '.' has only DNS_DOT. */
enum {
    DNS_LOWER = 1, /* [a-z0-9-]: Kubernetes object names */
    DNS_ANY = 2,   /* [A-Za-z0-9-] */
    DNS_DIGIT = 4, /* [0-9] */
    DNS_DOT = 8,   /* '.', a label separator, allowed in no label */
};

static const unsigned char dns_class[256] = {
    ['-'] = DNS_LOWER | DNS_ANY,
    ['.'] = DNS_DOT,
#define D(c) [c] = DNS_LOWER | DNS_ANY | DNS_DIGIT
    D('0'),
    D('1'),
    D('2'),
    D('3'),
    D('4'),
    D('5'),
    D('6'),
    D('7'),
    D('8'),
    D('9'),
#undef D
#define L(c) [c] = DNS_LOWER | DNS_ANY, [c - 'a' + 'A'] = DNS_ANY
    L('a'),
    L('b'),
    L('c'),
    L('d'),
    L('e'),
    L('f'),
    L('g'),
    L('h'),
    L('i'),
    L('j'),
    L('k'),
    L('l'),
    L('m'),
    L('n'),
    L('o'),
    L('p'),
    L('q'),
    L('r'),
    L('s'),
    L('t'),
    L('u'),
    L('v'),
    L('w'),
    L('x'),
    L('y'),
    L('z'),
#undef L
};

/* One label p[0..n) of a DNS name: 1..63 allowed bytes, no '-' at either
 * end. acc: the AND of the label's byte classes. */
static bool dns_label_ok(const unsigned char *p, size_t n, unsigned acc, unsigned allow)
{
    return n > 0 && n <= 63 && p[0] != '-' && p[n - 1] != '-' && (acc & allow) != 0;
}

/* RFC 1123 names (names.h). A name made only of digits and dots (e.g.
 * "10.0.0") is not a host name: it is a broken IP. One pass: the classes of
 * a label's bytes are ANDed, so the mode's bit survives only when every
 * byte is allowed and DNS_DIGIT only when every byte is a digit; a dot
 * (DNS_DOT, no other bit) closes the label. */
bool mesh_names_is_dns_name(const char *s, size_t len, bool lower_only, bool reject_numeric)
{
    if (s == NULL || len == 0 || len > 253) {
        return false;
    }
    const unsigned char *p = (const unsigned char *)s;
    const unsigned allow = lower_only ? DNS_LOWER : DNS_ANY;
    unsigned digits = DNS_DIGIT, acc = 0xff;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned c = dns_class[p[i]];
        if (c == DNS_DOT) {
            if (!dns_label_ok(p + start, i - start, acc, allow)) {
                return false;
            }
            digits &= acc;
            acc = 0xff;
            start = i + 1;
        } else {
            acc &= c;
        }
    }
    if (!dns_label_ok(p + start, len - start, acc, allow)) {
        return false; /* also a trailing dot: an empty last label */
    }
    digits &= acc;
    return !(reject_numeric && digits != 0);
}

bool mesh_names_is_host(const char *s, size_t len)
{
    if (s == NULL) {
        return false;
    }
    return mesh_names_is_ip(s, len, NULL) || mesh_names_is_dns_name(s, len, false, true);
}

bool mesh_names_is_dns_label(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > 63) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool lower_alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!lower_alnum && (i == 0 || i == len - 1 || c != '-')) {
            return false;
        }
    }
    return true;
}

bool mesh_names_is_k8s_name(const char *s, size_t len)
{
    return mesh_names_is_dns_name(s, len, true, false);
}

bool mesh_names_is_label_value(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > 63) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!mesh_names_is_alnum(c) &&
            (i == 0 || i == len - 1 || (c != '-' && c != '_' && c != '.'))) {
            return false;
        }
    }
    return true;
}

bool mesh_names_is_plain_ipv4(const char *s, size_t n)
{
    if (s == NULL || n < 7 || n > 15) {
        return false;
    }
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= n || s[i] != '.') {
                return false;
            }
            i++;
        }
        size_t start = i;
        unsigned v = 0;
        while (i < n && i - start < 3 && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (unsigned)(s[i] - '0');
            i++;
        }
        if (i == start || v > 255 || (i - start > 1 && s[start] == '0')) {
            return false;
        }
    }
    return i == n;
}

bool mesh_names_is_job_name(const char *s)
{
    if (s == NULL) {
        return false;
    }
    size_t n = strnlen(s, MESH_JOB_NAME_MAX);
    if (n == 0 || n >= MESH_JOB_NAME_MAX) {
        return false;
    }
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) {
        return false;
    }
    for (size_t i = 1; i < n; i++) {
        if (!mesh_names_is_alnum(s[i]) && s[i] != '_') {
            return false;
        }
    }
    return true;
}
