/*
 * slowdown.h - how much slower than the plain build the code under test runs
 * (tests/run.sh exports TPUMESH_TEST_SLOWDOWN: about 10 under valgrind, 3
 * under ASan, 1 otherwise). A unit test that waits on a wall clock for the
 * code under test (a server thread) bounds the wait with test_scaled_ms(),
 * so a slowed-down server is waited for and only one that hangs fails.
 * Static functions: include it from the .c files that use them.
 */
#ifndef TPUMESH_TESTS_UNIT_SLOWDOWN_H
#define TPUMESH_TESTS_UNIT_SLOWDOWN_H

#include <stdint.h>
#include <stdlib.h>

/* TPUMESH_TEST_SLOWDOWN as a whole number in [1, 100]; 1 when unset or bad. */
static inline int64_t test_slowdown(void)
{
    const char *v = getenv("TPUMESH_TEST_SLOWDOWN");
    if (v == NULL || *v == '\0') {
        return 1;
    }
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return (*end == '\0' && n >= 1 && n <= 100) ? (int64_t)n : 1;
}

/* ms milliseconds of the plain build's time, stretched by the slowdown. */
static inline int64_t test_scaled_ms(int64_t ms)
{
    return ms * test_slowdown();
}

#endif
