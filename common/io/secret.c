/*
 * secret.c - wiping secrets when they are dropped, and no core dumps
 * (secret.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>

#include "core/err.h"
#include "core/mem.h"
#include "io/secret.h"

void mesh_secret_free(char *s)
{
    if (s == NULL) {
        return;
    }
    explicit_bzero(s, strlen(s));
    mesh_free(s);
}

void mesh_secret_replace(char **slot, char *fresh)
{
    if (*slot != fresh) {
        mesh_secret_free(*slot);
    }
    *slot = fresh;
}

void mesh_secret_slist_free(struct curl_slist *list)
{
    for (struct curl_slist *p = list; p != NULL; p = p->next) {
        if (p->data != NULL) {
            explicit_bzero(p->data, strlen(p->data));
        }
    }
    curl_slist_free_all(list);
}

int mesh_secret_no_dumps(void)
{
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        return -MESH_E_IO;
    }
    return 0;
}
