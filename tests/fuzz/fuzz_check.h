/*
 * fuzz_check.h - FUZZ_CHECK(cond): the property a fuzz target asserts about
 * what it parsed (docs/STYLE.md R10). A false cond prints the expression and
 * its place and aborts, which libFuzzer and the corpus replay both report.
 */
#ifndef MESH_FUZZ_CHECK_H
#define MESH_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
