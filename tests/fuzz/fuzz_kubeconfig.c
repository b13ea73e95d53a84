/*
 * fuzz_kubeconfig.c - the kubeconfig parser, the ExecCredential parser,
 * RFC 3339 and base64 never crash or leak on arbitrary input.
 *
 * Input: byte 0 selects the context (current-context or "ctx"); the rest
 * is parsed as a kubeconfig, as an ExecCredential, as a time and as base64.
 */
#include <stdint.h>
#include <string.h>

#include "core/mem.h"
#include "io/kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        mesh_kubeconfig_cleanup(&kc);
    }
    char *tok = NULL;
    int64_t exp;
    if (mesh_kubeconfig_parse_exec_credential(p, n, "fuzz", &tok, &exp, &err) == 0) {
        mesh_free(tok);
    }
    char *s = mesh_strndup(p, n);
    int64_t t;
    (void)mesh_kubeconfig_parse_time(s, &t, NULL);
    mesh_free(s);
    unsigned char *out = NULL;
    size_t outn;
    if (mesh_kubeconfig_base64_decode(p, n, &out, &outn, NULL) == 0) {
        mesh_free(out);
    }
    return 0;
}
