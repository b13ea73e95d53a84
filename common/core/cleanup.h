/*
 * cleanup.h - cleanup attributes for locals (docs/STYLE.md R5).
 *
 * Initialise every such local to NULL (or -1 for fds). Hand ownership out
 * with `*out = p; p = NULL;`. The library-specific helpers are defined only
 * when that library's header (yaml.h, curl/curl.h) was included first, so
 * pure core code never drags in libcurl. cJSON is part of the core.
 */
#ifndef MESH_CLEANUP_H
#define MESH_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/mem.h"

static inline void mesh_cleanup_free_(void *p)
{
    mesh_free(*(void **)p);
}

static inline void mesh_cleanup_close_(const int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

static inline void mesh_cleanup_fclose_(FILE **f)
{
    if (*f != NULL) {
        fclose(*f);
    }
}

#define mesh_autofree __attribute__((cleanup(mesh_cleanup_free_)))
#define mesh_autoclose __attribute__((cleanup(mesh_cleanup_close_)))
#define mesh_autofclose __attribute__((cleanup(mesh_cleanup_fclose_)))

static inline void mesh_cleanup_cjson_(cJSON **j)
{
    cJSON_Delete(*j);
}
#define mesh_autocjson __attribute__((cleanup(mesh_cleanup_cjson_)))

#ifdef YAML_H
static inline void mesh_cleanup_yaml_parser_(yaml_parser_t **p)
{
    if (*p != NULL) {
        yaml_parser_delete(*p);
    }
}
static inline void mesh_cleanup_yaml_document_(yaml_document_t **d)
{
    if (*d != NULL) {
        yaml_document_delete(*d);
    }
}
/* For pointers to a stack yaml_parser_t/yaml_document_t that were initialised. */
#define mesh_autoyaml_parser __attribute__((cleanup(mesh_cleanup_yaml_parser_)))
#define mesh_autoyaml_document __attribute__((cleanup(mesh_cleanup_yaml_document_)))
#endif

#ifdef CURLINC_CURL_H
static inline void mesh_cleanup_curl_(CURL **c)
{
    if (*c != NULL) {
        curl_easy_cleanup(*c);
    }
}
static inline void mesh_cleanup_slist_(struct curl_slist **l)
{
    curl_slist_free_all(*l);
}
#define mesh_autocurl __attribute__((cleanup(mesh_cleanup_curl_)))
#define mesh_autoslist __attribute__((cleanup(mesh_cleanup_slist_)))
#endif

/* Move a pointer out of an auto-freed local: `return MESH_STEAL(p);` */
#define MESH_STEAL(p)                                                                              \
    ({                                                                                             \
        __typeof__(p) mesh_steal_tmp_ = (p);                                                       \
        (p) = NULL;                                                                                \
        mesh_steal_tmp_;                                                                           \
    })

#endif
