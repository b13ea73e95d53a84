/*
 * pace.h - when the sidecar's next publish may go out (docs/DESIGN.md §4).
 *
 * Publishes are of two kinds:
 *   - urgent: the first one, every change of "complete" (either way), and
 *     every address or membership change of a complete topology: these are
 *     what trainers act on, and go out at once;
 *   - routine: an incomplete topology after an incomplete one (only
 *     topology.json changes, and while incomplete it is diagnostic: /readyz,
 *     /metrics and the gRPC health answer live), and a complete topology
 *     whose only change is peers' readiness.
 * A routine publish waits a while after the publish before it: 1 s after
 * the first publish, and twice as long after each further one (urgent ones
 * included: a job start's completing publish does not make the readiness
 * changes that follow it go out faster), up to MESH_PACE_MAX_MS. A change
 * that comes MESH_PACE_MAX_MS or more after the last publish ends the burst:
 * it goes out at once (whatever its kind) and the next routine publish
 * waits MESH_PACE_MIN_MS again. A burst lasting T seconds is thus published
 * about log2(T) + T / 16 times plus its urgent changes (at T = 20 s: 0, 1,
 * 3, 7 and 15 s), whatever the rate of changes.
 *
 * Pure: no I/O, no clock of its own (the caller passes milliseconds of one
 * monotonic clock).
 */
#ifndef MESH_PACE_H
#define MESH_PACE_H

#include <stdbool.h>
#include <stdint.h>

#define MESH_PACE_MIN_MS 1000
#define MESH_PACE_MAX_MS 16000

struct mesh_pace {
    bool published;  /* a publish was noted */
    int64_t last_ms; /* when the last one was */
    int64_t wait_ms; /* how long the next routine publish waits after it */
};

/* The wait that applies to a routine publish made at now_ms, counted from
 * p->last_ms: MESH_PACE_MIN_MS..MESH_PACE_MAX_MS (MESH_PACE_MIN_MS once
 * MESH_PACE_MAX_MS have passed); 0 before any publish. */
int64_t mesh_pace_wait(const struct mesh_pace *p, int64_t now_ms);

/* Whether a routine publish must wait at now_ms; if so *until_ms receives
 * when it may go out. */
bool mesh_pace_hold(const struct mesh_pace *p, int64_t now_ms, int64_t *until_ms);

/* Note a publish (of either kind) made at now_ms; since_ms: when the
 * earliest change it carries came (at most now_ms). */
void mesh_pace_note(struct mesh_pace *p, int64_t now_ms, int64_t since_ms);

#endif
