/*
 * base64.h - standard base64 (RFC 4648 §4): the patch of an AdmissionReview
 * response, certificate-authority-data handed to a credential plugin, and the
 * *-data fields of a kubeconfig.
 *
 * Pure (docs/STYLE.md R8): no I/O. The decoder takes (buf, len) and needs no
 * NUL terminator (R9).
 */
#ifndef MESH_BASE64_H
#define MESH_BASE64_H

#include <stddef.h>

#include "core/err.h"

/* Encode in[0..len) with the standard alphabet and '=' padding. Returns an
 * owned NUL-terminated string (mesh_free); its length goes to *out_len when
 * out_len is not NULL. Never fails (allocation failure aborts, R6). */
char *mesh_base64_encode(const void *in, size_t len, size_t *out_len);

/* Decode in[0..len) as kubectl and client-go accept it: the standard
 * alphabet (the URL-safe '-' and '_' too), padding optional, ASCII
 * whitespace ignored anywhere. *out: owned (mesh_free), NUL-terminated for
 * convenience, with *out_len bytes before the terminator; both written only
 * on success. Errors: -MESH_E_PARSE "not valid base64 (bad character at
 * byte N)" for a character outside the alphabet or after padding, "(truncated)"
 * for a dangling 6-bit group or more than two '='. */
int mesh_base64_decode(const char *in, size_t len, unsigned char **out, size_t *out_len,
                       struct mesh_err *err);

#endif
