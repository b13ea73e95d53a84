/*
 * fuzz_json.c - bounded JSON parsing and the integer parser, with properties:
 *  - print is a fixed point: a document parsed and printed, parsed again and
 *    printed again, gives the same text (duplicate keys, \u0000 masking,
 *    numbers out of double range and every escape included);
 *  - mesh_parse_ll agrees with a second parser, written here from its
 *    contract (json.h: optional '-', digits, no leading zeros, no '+' or
 *    spaces) plus strtoll, on both success and the value;
 *  - mesh_json_int returns only values inside its bounds.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The contract's grammar, independently: -?(0|[1-9][0-9]*), then strtoll. */
static bool oracle_ll(const char *s, size_t len, long long min, long long max, long long *out)
{
    size_t i = (len > 0 && s[0] == '-') ? 1 : 0;
    if (i == len || (s[i] == '0' && len - i > 1)) {
        return false;
    }
    for (size_t k = i; k < len; k++) {
        if (s[k] < '0' || s[k] > '9') {
            return false;
        }
    }
    if (len > 32) {
        return false; /* beyond any long long */
    }
    char tmp[33];
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    errno = 0;
    long long v = strtoll(tmp, NULL, 10);
    if (errno == ERANGE || v < min || v > max) {
        return false;
    }
    *out = v;
    return true;
}

static void check_print_fixed_point(const cJSON *j)
{
    mesh_autofree char *once = cJSON_PrintUnformatted(j);
    FUZZ_CHECK(once != NULL);
    struct mesh_err err;
    /* Printing escapes control characters (up to 6 bytes each). */
    mesh_autocjson cJSON *again = mesh_json_parse(once, strlen(once), SIZE_MAX, &err);
    FUZZ_CHECK(again != NULL);
    mesh_autofree char *twice = cJSON_PrintUnformatted(again);
    FUZZ_CHECK(twice != NULL && strcmp(once, twice) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mesh_err err;
    const char *s = (const char *)data;
    mesh_autocjson cJSON *j = mesh_json_parse(s, size, 1 << 20, &err);
    if (j != NULL) {
        check_print_fixed_point(j);
        long long v;
        (void)mesh_json_str(mesh_json_path(j, "metadata"), "name");
        if (mesh_json_int(j, "generation", 0, 1000, true, &v, &err) == 0) {
            FUZZ_CHECK(v >= 0 && v <= 1000);
        }
    }
    static const long long bounds[][2] = {{-5, 1000000}, {LLONG_MIN, LLONG_MAX}, {0, 0}};
    for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++) {
        long long v = 0, want = 0;
        bool ok = mesh_parse_ll(s, size, bounds[b][0], bounds[b][1], &v, &err) == 0;
        bool oracle = oracle_ll(s, size, bounds[b][0], bounds[b][1], &want);
        FUZZ_CHECK(ok == oracle);
        FUZZ_CHECK(!ok || v == want);
    }
    return 0;
}
