/* options.h: a command's options as one table, from which both the parser and
 * --help read, so that what --help says and what the command accepts cannot
 * drift apart. A row names the option, the field of the command's settings it
 * sets, and how its value is read and checked. */
#ifndef BURST_UTIL_OPTIONS_H
#define BURST_UTIL_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    BU_OPT_FLAG,   /* no value: sets an int field to 1 */
    BU_OPT_INT,    /* a decimal int field in [lo, hi] */
    BU_OPT_I64,    /* a decimal int64_t field in [lo, hi] */
    BU_OPT_DOUBLE, /* a finite double field in [lo, hi] */
    BU_OPT_STRING, /* a const char * field: the argument itself (not copied) */
    /* a byte count into an int64_t field in [lo, hi]: digits, an optional
     * binary unit K, M or G (either case), an optional B after either:
     * "5368709120", "5G", "5GB" and "5GiB" are one size */
    BU_OPT_BYTES,
    BU_OPT_CUSTOM, /* set() reads the value */
} bu_opt_kind;

typedef struct {
    const char *name; /* "--steps", or two spellings "-o, --output" */
    const char *arg;  /* the value's name in --help ("N"); NULL for a flag */
    bu_opt_kind kind;
    size_t offset; /* of the field in the settings (offsetof); CUSTOM: unused */
    double lo, hi; /* INT, I64, DOUBLE, BYTES: the values allowed */
    /* CUSTOM: stores value into settings; 0, -1 when value is not valid (the
     * walker says so), or -2 when set() has said why on stderr itself */
    int (*set)(void *settings, const char *value);
    const char *help; /* lines separated by '\n', no trailing newline */
} bu_option;

/* Walks argv[1..argc) against opts[n_opts], setting the fields of settings in
 * order. -h or --help: returns 1 (nothing else is parsed). An argument that is
 * no option goes to positional (0: taken), or is refused when positional is
 * NULL or returns -1. An error prints one line on stderr ("CMD: --name: bad
 * value 'V'", "CMD: --name needs a value", "CMD: unknown option '-X'" or "CMD:
 * unexpected argument 'X'") and where the options are listed, and returns -1.
 * Returns 0 when every argument was taken. */
int bu_options_parse(const char *cmd, const bu_option *opts, int n_opts, int argc, char **argv,
                     void *settings, int (*positional)(void *settings, const char *arg));

/* The same for a command whose own options come before another command's
 * words (`burst run -n 2 -- prog --help`): the walk stops at "--" (skipped)
 * or at the first argument that is no option, and *rest is the index where
 * the other words start (argc when none). -h or --help counts only before
 * that point. Returns 0, 1 for help, or -1 as bu_options_parse does. */
int bu_options_parse_prefix(const char *cmd, const bu_option *opts, int n_opts, int argc,
                            char **argv, void *settings, int *rest);

/* Prints the table as --help's list: "  --name ARG" padded to width columns,
 * then the help, its later lines indented to the same column. */
void bu_options_print(FILE *out, const bu_option *opts, int n_opts, int width);

#endif
