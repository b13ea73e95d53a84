/*
 * cliopts.h - the command-line engine of tpumesh-init, tpumesh-sidecar and
 * tpumesh-injector.
 *
 * A program describes its options in a table of struct mesh_cliopt (one row
 * per "--flag", the offset of its field in the program's options struct)
 * and gets: "--flag VALUE" and "--flag=VALUE" parsing, the variable
 * TPUMESH_<FLAG_UPPER_SNAKE> for every flag, precedence flag > layer >
 * variable > default (the layer is optional: tpumesh-init's pod annotations;
 * an empty variable counts as unset), conversion of each value once with an
 * error that names where it came from ("--port", "TPUMESH_PORT",
 * "annotation tpumesh.dev/port", "default of --port"), the --help listing in
 * table order, the log format and level before the options are parsed, one
 * format for command-line errors, and release of the strings.
 *
 * Values, the same in every program:
 *   booleans  true|false, 1|0, yes|no, on|off; a bare --flag means true
 *   integers  decimal, no sign but '-', no leading zeros, within the row's range
 *   choices   one of the row's "a|b|c" (log level debug|info|warn|error,
 *             log format text|json)
 */
#ifndef MESH_CLIOPTS_H
#define MESH_CLIOPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

enum mesh_cliopt_kind {
    MESH_CLIOPT_STR,    /* char * (owned by the options struct; mesh_cliopt_cleanup) */
    MESH_CLIOPT_INT,    /* int in min..max */
    MESH_CLIOPT_BOOL,   /* bool (spellings above) */
    MESH_CLIOPT_LEVEL,  /* enum mesh_log_level: debug|info|warn|error */
    MESH_CLIOPT_FORMAT, /* enum mesh_log_format: text|json */
    MESH_CLIOPT_CHOICE, /* int or enum: the index of the value in choices ("a|b|c") */
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

/* Where an option's value came from. */
enum mesh_cliopt_source {
    MESH_CLIOPT_FROM_DEFAULT = 0, /* the row's default, or unset */
    MESH_CLIOPT_FROM_FLAG,
    MESH_CLIOPT_FROM_LAYER,
    MESH_CLIOPT_FROM_ENV,
};

/* A source between the flag and the variable (tpumesh-init: the pod's
 * tpumesh.dev/ annotations). open (may be NULL) runs once, after the flags
 * were read and before any value is converted, and never for --help or
 * --version; a negative return stops the parse with its error. get returns
 * the layer's text for flag (borrowed, valid until the parse returns; NULL:
 * not set there) and writes into where (cap bytes) how messages name it. */
struct mesh_cliopt_layer {
    int (*open)(void *arg, struct mesh_err *err);
    const char *(*get)(void *arg, const char *flag, char *where, size_t cap);
    void *arg;
};

/* What --help and --version print around the option list. */
struct mesh_cliopt_usage {
    const char *head; /* before the option list: usage line, what the program does */
    const char *tail; /* after it: exit codes, notes (may be NULL) */
    void (*print_version)(void);
};

/* "TPUMESH_" + flag in upper snake case, into out (cap bytes, cut if
 * shorter). */
void mesh_cliopts_env_name(const char *flag, char *out, size_t cap);

/* Parse argv[1..argc) against the n rows of defs into the struct at base
 * (zeroed by the caller), with layer (may be NULL) between flag and
 * variable. out_source (may be NULL; n entries) tells where each value came
 * from. Returns MESH_CLIOPT_OK, MESH_CLIOPT_HELP or MESH_CLIOPT_VERSION
 * (nothing converted), or -MESH_E_CONFIG naming the argument or the value
 * and where it came from (or the layer's error); on failure the strings
 * already stored are released. */
int mesh_cliopts_parse(const struct mesh_cliopt *defs, size_t n, int argc, char **argv, void *base,
                       const struct mesh_cliopt_layer *layer, enum mesh_cliopt_source *out_source,
                       struct mesh_err *err);

/* mesh_cliopts_parse for a program's main, which answers --help and
 * --version itself: --help prints u->head, the option list (each flag
 * with its argument, variable, default and help) and u->tail to stdout,
 * --version calls u->print_version; both return 1 (the program exits 0) with nothing
 * converted. Otherwise the same as mesh_cliopts_parse: 0, or a negative
 * error with the strings released. */
int mesh_cliopts_parse_main(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                            void *base, const struct mesh_cliopt_layer *layer,
                            enum mesh_cliopt_source *out_source, const struct mesh_cliopt_usage *u,
                            struct mesh_err *err);

/* The text of flag's last well-formed occurrence in argv, else its
 * non-empty variable, else NULL (the default is not consulted: NULL means
 * "not configured"). Best effort before the parse: never fails, converts
 * nothing. Borrowed from argv or the environment. */
const char *mesh_cliopts_peek(const struct mesh_cliopt *defs, size_t n, int argc, char **argv,
                              const char *flag);

/* Before the parse: set up the log (mesh_log_setup) with the format and
 * level the command line or the variables ask for (--log-format,
 * --log-level), defaults for anything missing or malformed, so that even a
 * command-line error is logged in the format asked for. */
void mesh_cliopts_log_setup(const struct mesh_cliopt *defs, size_t n, int argc, char **argv);

/* Log a failed parse the one way all three programs do - one error line,
 * mod (borrowed) its module tag: "command line failed (exit 2,
 * configuration error): <err->msg>" - and return 2, the exit code. */
int mesh_cliopts_fail(const char *mod, const struct mesh_err *err);

/* Free the MESH_CLIOPT_STR fields of the struct at base and set them NULL. */
void mesh_cliopts_cleanup(const struct mesh_cliopt *defs, size_t n, void *base);

#endif
