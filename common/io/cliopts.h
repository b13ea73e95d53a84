/*
 * cliopts.h - the command-line engine the sidecar and the injector share.
 *
 * A program describes its options in a table of struct mesh_cliopt (one row
 * per "--flag", the offset of its field in the program's options struct)
 * and gets: "--flag VALUE" and "--flag=VALUE" parsing, the variable
 * TPUMESH_<FLAG_UPPER_SNAKE> for every flag, precedence flag > variable >
 * default (an empty variable counts as unset),
 * conversion of each value once with an error that names where it came from
 * ("--port", "TPUMESH_PORT", "default of --port"), the --help listing, and
 * release of the strings. What --help says before the option list and what
 * --version prints are the program's (mesh_cliopts_parse_main).
 */
#ifndef MESH_CLIOPTS_H
#define MESH_CLIOPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

enum mesh_cliopt_kind {
    MESH_CLIOPT_STR,    /* char * (owned by the options struct; mesh_cliopt_cleanup) */
    MESH_CLIOPT_INT,    /* int in min..max */
    MESH_CLIOPT_BOOL,   /* bool: true|false|1|0|yes|no; a bare --flag is true */
    MESH_CLIOPT_LEVEL,  /* enum mesh_log_level: debug|info|warn|error */
    MESH_CLIOPT_FORMAT, /* enum mesh_log_format: text|json */
    MESH_CLIOPT_CHOICE, /* int: the index of the value in choices ("a|b|c") */
};

struct mesh_cliopt {
    const char *flag; /* without "--" */
    enum mesh_cliopt_kind kind;
    size_t off;         /* offset of the field in the options struct */
    long long min, max; /* MESH_CLIOPT_INT */
    const char *def;    /* default text, NULL = none */
    const char *arg;    /* placeholder for --help ("FILE"); for CHOICE the choices "a|b|c" */
    const char *help;   /* one or more lines for --help */
};

/* What mesh_cliopts_parse found besides options. */
enum mesh_cliopt_result {
    MESH_CLIOPT_OK = 0,
    MESH_CLIOPT_HELP = 1,    /* --help or -h: print usage and exit 0 */
    MESH_CLIOPT_VERSION = 2, /* --version: print the version and exit 0 */
};

/* "TPUMESH_" + flag in upper snake case, into out (cap bytes, cut if
 * shorter). */
void mesh_cliopts_env_name(const char *flag, char *out, size_t cap);

/* Parse argv[1..argc) against the n rows of defs into the struct at base
 * (zeroed by the caller). out_explicit (may be NULL; n entries) tells which
 * options were given by a flag or a variable rather than left to their
 * default. Returns MESH_CLIOPT_OK, MESH_CLIOPT_HELP or MESH_CLIOPT_VERSION
 * (nothing converted), or -MESH_E_CONFIG naming the argument or the value
 * and where it came from; on failure the strings already stored are
 * released. */
int mesh_cliopts_parse(const struct mesh_cliopt *defs, size_t n, int argc, char **argv, void *base,
                       bool *out_explicit, struct mesh_err *err);

/* mesh_cliopts_parse for a program's main, which answers --help and
 * --version itself: --help prints usage_head (borrowed) and then the option
 * list (mesh_cliopts_usage) to stdout, --version calls print_version; both
 * return 1 (the program exits 0) with nothing converted. Otherwise the same
 * as mesh_cliopts_parse: 0, or -MESH_E_CONFIG with the strings released. */
int mesh_cliopts_parse_main(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                            void *base, bool *out_explicit, const char *usage_head,
                            void (*print_version)(void), struct mesh_err *err);

/* Print the option list of --help to stdout: each flag with its argument,
 * its variable, its default and its help. */
void mesh_cliopts_usage(const struct mesh_cliopt *defs, size_t n);

/* Free the MESH_CLIOPT_STR fields of the struct at base and set them NULL. */
void mesh_cliopts_cleanup(const struct mesh_cliopt *defs, size_t n, void *base);

#endif
