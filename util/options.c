/* options.c: the option-table walker (options.h). */
#include "util/options.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/parse.h"

/* Whether arg is one of the spellings of name ("--x" or "-x, --x"). */
static int spells(const char *name, const char *arg)
{
    const char *comma = strstr(name, ", ");
    if (!comma) return strcmp(name, arg) == 0;
    size_t n = (size_t)(comma - name);
    return (strlen(arg) == n && strncmp(name, arg, n) == 0) || strcmp(comma + 2, arg) == 0;
}

static const bu_option *find(const bu_option *opts, int n_opts, const char *arg)
{
    for (int i = 0; i < n_opts; i++)
        if (spells(opts[i].name, arg)) return &opts[i];
    return NULL;
}

/* A BU_OPT_BYTES value: the units bu_parse_bytes reads (K, M, G), with a B
 * after the count or the unit, and "iB" after the unit, taken off first, so
 * that sizes can be written as people write them. 0, or -1. */
static int parse_byte_count(const char *value, int64_t *out)
{
    char count[32];
    size_t n = strlen(value);
    if (n >= sizeof count) return -1;
    memcpy(count, value, n + 1);
    if (n >= 2 && tolower((unsigned char)count[n - 1]) == 'b') {
        count[--n] = '\0';
        if (n >= 2 && count[n - 1] == 'i' && isalpha((unsigned char)count[n - 2]))
            count[--n] = '\0';
    }
    uint64_t v;
    if (bu_parse_bytes(count, &v) != 0 || v > INT64_MAX) return -1;
    *out = (int64_t)v;
    return 0;
}

/* Stores value into the row's field: 0, -1 when it is not valid, or -2 when a
 * CUSTOM setter has said why itself. */
static int store(const bu_option *o, void *settings, const char *value)
{
    char *field = (char *)settings + o->offset;
    switch (o->kind) {
    case BU_OPT_FLAG:
        *(int *)(void *)field = 1;
        return 0;
    case BU_OPT_INT: {
        int64_t v;
        if (bu_parse_i64(value, &v, NULL) != 0 || v < o->lo || v > o->hi) return -1;
        *(int *)(void *)field = (int)v;
        return 0;
    }
    case BU_OPT_I64:
    case BU_OPT_BYTES: {
        int64_t v;
        int read =
            o->kind == BU_OPT_I64 ? bu_parse_i64(value, &v, NULL) : parse_byte_count(value, &v);
        if (read != 0 || (double)v < o->lo || (double)v > o->hi) return -1;
        *(int64_t *)(void *)field = v;
        return 0;
    }
    case BU_OPT_DOUBLE: {
        char *end;
        double v = strtod(value, &end);
        if (end == value || *end != '\0' || !isfinite(v) || v < o->lo || v > o->hi) return -1;
        *(double *)(void *)field = v;
        return 0;
    }
    case BU_OPT_STRING:
        *(const char **)(void *)field = value;
        return 0;
    case BU_OPT_CUSTOM:
        return o->set(settings, value);
    }
    return -1;
}

/* After an error: where the options are listed. Returns -1. */
static int refused(const char *cmd)
{
    fprintf(stderr, "(`%s --help` lists the options)\n", cmd);
    return -1;
}

/* The walk both parsers share. prefix: stop at "--" (skipped) or at the
 * first argument that is no option, with *rest its index; help is then an
 * option met on the way, not a word anywhere. */
static int walk(const char *cmd, const bu_option *opts, int n_opts, int argc, char **argv,
                void *settings, int (*positional)(void *settings, const char *arg), int prefix,
                int *rest)
{
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return 1;
        if (prefix && (strcmp(a, "--") == 0 || a[0] != '-')) {
            i += strcmp(a, "--") == 0;
            break;
        }
        const bu_option *o = find(opts, n_opts, a);
        if (!o) {
            if (a[0] != '-' && positional && positional(settings, a) == 0) continue;
            fprintf(stderr, "%s: %s '%s'\n", cmd,
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return refused(cmd);
        }
        const char *value = NULL;
        if (o->kind != BU_OPT_FLAG) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value\n", cmd, a);
                return refused(cmd);
            }
            value = argv[++i];
        }
        int stored = store(o, settings, value);
        if (stored == -2) return -1; /* the setter said why */
        if (stored != 0) {
            fprintf(stderr, "%s: %s: bad value '%s'\n", cmd, a, value);
            return refused(cmd);
        }
    }
    if (rest) *rest = i;
    return 0;
}

int bu_options_parse(const char *cmd, const bu_option *opts, int n_opts, int argc, char **argv,
                     void *settings, int (*positional)(void *settings, const char *arg))
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return walk(cmd, opts, n_opts, argc, argv, settings, positional, 0, NULL);
}

int bu_options_parse_prefix(const char *cmd, const bu_option *opts, int n_opts, int argc,
                            char **argv, void *settings, int *rest)
{
    return walk(cmd, opts, n_opts, argc, argv, settings, NULL, 1, rest);
}

void bu_options_print(FILE *out, const bu_option *opts, int n_opts, int width)
{
    for (int i = 0; i < n_opts; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        int pad = width - 3 - (int)strlen(head);
        if (pad >= 0)
            fprintf(out, "  %s%*s ", head, pad, "");
        else /* a long head: the help starts on the next line */
            fprintf(out, "  %s\n  %*s ", head, width - 3, "");
        for (const char *p = opts[i].help; *p; p++) {
            fputc(*p, out);
            if (*p == '\n') fprintf(out, "  %*s ", width - 3, "");
        }
        fputc('\n', out);
    }
}
