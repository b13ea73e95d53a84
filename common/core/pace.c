/*
 * pace.c - the publish pacing rule (pace.h).
 */
#include "pace.h"

int64_t mesh_pace_wait(const struct mesh_pace *p, int64_t now_ms)
{
    if (!p->published) {
        return 0;
    }
    if (now_ms - p->last_ms >= MESH_PACE_MAX_MS || p->wait_ms < MESH_PACE_MIN_MS) {
        return MESH_PACE_MIN_MS;
    }
    return p->wait_ms > MESH_PACE_MAX_MS ? MESH_PACE_MAX_MS : p->wait_ms;
}

bool mesh_pace_hold(const struct mesh_pace *p, int64_t now_ms, int64_t *until_ms)
{
    if (!p->published) {
        return false;
    }
    int64_t until = p->last_ms + mesh_pace_wait(p, now_ms);
    if (now_ms >= until) {
        return false;
    }
    *until_ms = until;
    return true;
}

void mesh_pace_note(struct mesh_pace *p, int64_t now_ms, int64_t since_ms)
{
    int64_t next = MESH_PACE_MIN_MS;
    if (since_ms > now_ms) {
        since_ms = now_ms;
    }
    if (p->published && since_ms - p->last_ms < MESH_PACE_MAX_MS) {
        next = p->wait_ms < MESH_PACE_MIN_MS ? 2 * MESH_PACE_MIN_MS : 2 * p->wait_ms;
        if (next > MESH_PACE_MAX_MS) {
            next = MESH_PACE_MAX_MS;
        }
    }
    p->published = true;
    p->last_ms = now_ms;
    p->wait_ms = next;
}
