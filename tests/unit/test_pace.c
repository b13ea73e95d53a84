/*
 * test_pace.c - the publish pacing rule (pace.h): after the first publish a
 * routine one waits 1 s, then 2, 4, 8, up to 16 s with every publish in a
 * row (urgent ones included); a change 16 s or more after the last publish
 * starts again at 1 s; and a continuous burst of any rate costs about
 * log2(T) + T / 16 publishes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/pace.h"

/* A start far from 0 (the monotonic clock of a host up for days). */
#define T0 987654321

static void test_first_publish_not_held(void **state)
{
    (void)state;
    struct mesh_pace p = {0};
    int64_t until = -1;
    assert_false(mesh_pace_hold(&p, T0, &until));
    assert_int_equal(until, -1);
    assert_int_equal(mesh_pace_wait(&p, T0), 0);
}

/* One row: a publish at time `at` carrying a change that came at `since`,
 * and what a routine change `probe_after` ms later then gets: held until
 * `until` (absolute, 0 = not held) and the wait reported. Rows with the
 * same `at` probe the same publish again. */
static void test_series(void **state)
{
    (void)state;
    static const struct {
        int64_t at, since, probe_after;
        int64_t until; /* 0: not held */
        int64_t wait;
    } rows[] = {
        /* the first publish: the next routine one waits 1 s */
        {T0, T0, 10, T0 + 1000, 1000},
        {T0, T0, 999, T0 + 1000, 1000},
        {T0, T0, 1000, 0, 1000},
        /* publishes in a row (their changes held back): 2, 4, 8, 16, 16 s */
        {T0 + 1000, T0 + 10, 1, T0 + 3000, 2000},
        {T0 + 3000, T0 + 1500, 3999, T0 + 7000, 4000},
        {T0 + 7000, T0 + 3100, 100, T0 + 15000, 8000},
        {T0 + 15000, T0 + 7100, 100, T0 + 31000, 16000},
        {T0 + 31000, T0 + 15100, 15999, T0 + 47000, 16000},
        {T0 + 47000, T0 + 31500, 100, T0 + 63000, 16000},
        /* 16 s after the last publish a change is not held and the wait reads 1 s */
        {T0 + 47000, T0 + 31500, 16000, 0, 1000},
        /* a change 16 s or more after the last publish starts the series again */
        {T0 + 70000, T0 + 70000, 500, T0 + 71000, 1000},
        /* an urgent publish (it went out at once) doubles the wait like any other */
        {T0 + 70300, T0 + 70300, 500, T0 + 72300, 2000},
        /* a change that came after its wait ended (but within 16 s) doubles it too */
        {T0 + 72800, T0 + 72800, 0, T0 + 76800, 4000},
        /* a change noted with an arrival after the publish counts as arriving then */
        {T0 + 76800, T0 + 99000, 100, T0 + 84800, 8000},
    };
    struct mesh_pace p = {0};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("row %zu\n", i);
        if (i == 0 || rows[i].at != rows[i - 1].at) {
            mesh_pace_note(&p, rows[i].at, rows[i].since);
        }
        int64_t now = rows[i].at + rows[i].probe_after, until = 0;
        bool held = mesh_pace_hold(&p, now, &until);
        assert_int_equal(held, rows[i].until != 0);
        if (held) {
            assert_int_equal(until, rows[i].until);
        }
        assert_int_equal(mesh_pace_wait(&p, now), rows[i].wait);
    }
}

/* A routine change every `every` ms for `span` ms after an urgent publish,
 * each published as soon as the pacing allows (the sidecar's main loop):
 * the count of routine publishes. */
static int burst(int64_t every, int64_t span)
{
    struct mesh_pace p = {0};
    mesh_pace_note(&p, T0, T0);
    int n = 0;
    int64_t pending_since = -1;
    for (int64_t t = T0; t <= T0 + span; t++) {
        if ((t - T0) % every == 0 && t > T0) {
            pending_since = pending_since < 0 ? t : pending_since;
        }
        int64_t until = 0;
        if (pending_since >= 0 && !mesh_pace_hold(&p, t, &until)) {
            mesh_pace_note(&p, t, pending_since);
            pending_since = -1;
            n++;
        }
    }
    return n;
}

static void test_burst_cost(void **state)
{
    (void)state;
    static const struct {
        int64_t every, span;
        int max; /* publishes at most */
    } rows[] = {
        /* 0, 1, 3, 7, 15 s: four routine publishes after the urgent one in 20 s, */
        {1, 20000, 4},
        {40, 20000, 4},
        {100, 20000, 4},
        /* then one per 16 s: 5 + 18 in five minutes instead of 3,000 at 10 a second */
        {10, 300000, 23},
        /* changes slower than the waits are published as they come, never more */
        {3000, 20000, 6},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int n = burst(rows[i].every, rows[i].span);
        print_message("every %lld ms for %lld ms: %d publishes\n", (long long)rows[i].every,
                      (long long)rows[i].span, n);
        assert_true(n >= 1);
        assert_true(n <= rows[i].max);
    }
    /* A change every 10 ms for 5 min: exactly the series 1, 3, 7, 15, 31, 47, ... s. */
    assert_int_equal(burst(10, 300000), 4 + (300000 - 15000) / 16000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_publish_not_held),
        cmocka_unit_test(test_series),
        cmocka_unit_test(test_burst_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
