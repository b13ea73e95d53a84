/*
 * secret.h - handling of bearer tokens and other secrets in memory (issue 13):
 * a secret lives in one heap string owned by one struct, and every copy that
 * is dropped (the old token when a new one replaces it, an Authorization
 * header handed to libcurl, a reply that carried a token) is overwritten
 * with explicit_bzero first, so a later heap dump or reuse does not show it.
 * Both programs also mark themselves non-dumpable (mesh_secret_no_dumps), so
 * no core file or ptrace by another user of the same UID sees the memory.
 */
#ifndef MESH_SECRET_H
#define MESH_SECRET_H

#include <curl/curl.h>

/* Wipe the NUL-terminated string s and free it. NULL does nothing. */
void mesh_secret_free(char *s);

/* Wipe and free *slot, then store fresh (takes ownership; may be NULL). */
void mesh_secret_replace(char **slot, char *fresh);

/* Wipe every string of a curl header list (e.g. "Authorization: Bearer ...")
 * and free the list. NULL does nothing. */
void mesh_secret_slist_free(struct curl_slist *list);

static inline void mesh_cleanup_secret_slist_(struct curl_slist **l)
{
    mesh_secret_slist_free(*l);
}
/* A curl header list that carries a secret: wiped and freed at scope exit. */
#define mesh_autosecretslist __attribute__((cleanup(mesh_cleanup_secret_slist_)))

/* prctl(PR_SET_DUMPABLE, 0): no core dump of this process and no ptrace
 * attach or /proc/<pid>/mem read by an unprivileged process of the same
 * user. Returns 0 or -MESH_E_IO (errno from prctl). Call first in main. */
int mesh_secret_no_dumps(void);

#endif
