/* test_options.c: the option-table walker (util/options.c): each kind of row
 * sets its field, values out of range and unknown options are refused naming
 * them, byte counts take their units, help wins, positionals go to their
 * callback, and --help prints every row at the column asked. */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/check_main.h"
#include "util/options.h"

typedef struct {
    int flag, count;
    int64_t big, size;
    double ratio;
    const char *name, *custom, *first_positional;
    int n_positional;
} settings;

static int set_custom(void *s, const char *v)
{
    if (strcmp(v, "no") == 0) return -1;
    if (strcmp(v, "said") == 0) {
        fprintf(stderr, "cmd: the setter's own words\n");
        return -2;
    }
    ((settings *)s)->custom = v;
    return 0;
}

static int take_positional(void *s, const char *arg)
{
    settings *t = s;
    if (t->n_positional++ == 0) t->first_positional = arg;
    return t->n_positional <= 2 ? 0 : -1;
}

static const bu_option opts[] = {
    {"--flag", NULL, BU_OPT_FLAG, offsetof(settings, flag), 0, 0, NULL, "a flag"},
    {"--count", "N", BU_OPT_INT, offsetof(settings, count), 1, 9, NULL, "a count\nof two lines"},
    {"--big", "N", BU_OPT_I64, offsetof(settings, big), -1, 5e9, NULL, "a big count"},
    {"--ratio", "F", BU_OPT_DOUBLE, offsetof(settings, ratio), 0, 1, NULL, "a ratio"},
    {"--size", "SIZE", BU_OPT_BYTES, offsetof(settings, size), 1, 1e12, NULL, "a size"},
    {"-n, --name", "S", BU_OPT_STRING, offsetof(settings, name), 0, 0, NULL, "a name"},
    {"--a-very-long-option", "VALUE", BU_OPT_CUSTOM, 0, 0, 0, set_custom, "custom"},
};
enum { N = sizeof opts / sizeof opts[0] };

/* Parses argv (NULL-terminated) into *s; what was printed on stderr into err. */
static int parse(char **argv, settings *s, int with_positional, char *err, size_t len)
{
    int argc = 0;
    while (argv[argc]) argc++;
    fflush(stderr);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(tmp), STDERR_FILENO);
    int rc =
        bu_options_parse("cmd", opts, N, argc, argv, s, with_positional ? take_positional : NULL);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    size_t got = fread(err, 1, len - 1, tmp);
    err[got] = '\0';
    fclose(tmp);
    return rc;
}

START_TEST(every_kind_sets_its_field)
{
    settings s = {0};
    char err[256];
    char *argv[] = {
        "cmd", "--flag", "--count", "7", "--ratio", "0.25", "-n", "x", "--a-very-long-option",
        "yes", "pos1",   "pos2",    NULL};
    ck_assert_int_eq(parse(argv, &s, 1, err, sizeof err), 0);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(s.flag, 1);
    ck_assert_int_eq(s.count, 7);
    ck_assert(s.ratio == 0.25);
    ck_assert_str_eq(s.name, "x");
    ck_assert_str_eq(s.custom, "yes");
    ck_assert_int_eq(s.n_positional, 2);
    ck_assert_str_eq(s.first_positional, "pos1");
    char *big[] = {"cmd", "--big", "4294967296", NULL};
    ck_assert_int_eq(parse(big, &s, 0, err, sizeof err), 0);
    ck_assert(s.big == 4294967296LL);
    char *long_spelling[] = {"cmd", "--name", "y", NULL};
    ck_assert_int_eq(parse(long_spelling, &s, 0, err, sizeof err), 0);
    ck_assert_str_eq(s.name, "y");
    char *half_spelling[] = {"cmd", "-n,", "y", NULL};
    ck_assert_int_eq(parse(half_spelling, &s, 0, err, sizeof err), -1);
}
END_TEST

START_TEST(bad_input_is_refused_naming_it)
{
    static const struct {
        char *a, *b, *says;
    } bad[] = {
        {"--count", "0", "cmd: --count: bad value '0'\n"},
        {"--count", "10", "cmd: --count: bad value '10'\n"},
        {"--count", "3x", "cmd: --count: bad value '3x'\n"},
        {"--big", "5000000001", "cmd: --big: bad value '5000000001'\n"},
        {"--big", "-2", "cmd: --big: bad value '-2'\n"},
        {"--ratio", "1.5", "cmd: --ratio: bad value '1.5'\n"},
        {"--ratio", "nan", "cmd: --ratio: bad value 'nan'\n"},
        {"--ratio", "", "cmd: --ratio: bad value ''\n"},
        {"--a-very-long-option", "no", "cmd: --a-very-long-option: bad value 'no'\n"},
        {"--bogus", NULL, "cmd: unknown option '--bogus'\n"},
        {"stray", NULL, "cmd: unexpected argument 'stray'\n"},
        {"--count", NULL, "cmd: --count needs a value\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        settings s = {0};
        char err[256];
        char *argv[] = {"cmd", bad[i].a, bad[i].b, NULL};
        char says[160];
        snprintf(says, sizeof says, "%s(`cmd --help` lists the options)\n", bad[i].says);
        ck_assert_int_eq(parse(argv, &s, 0, err, sizeof err), -1);
        ck_assert_str_eq(err, says);
    }
    /* a setter that says why itself: its words alone */
    {
        settings t = {0};
        char err[256];
        char *argv[] = {"cmd", "--a-very-long-option", "said", NULL};
        ck_assert_int_eq(parse(argv, &t, 0, err, sizeof err), -1);
        ck_assert_str_eq(err, "cmd: the setter's own words\n");
    }
    /* a third positional is refused by the callback */
    settings s = {0};
    char err[256];
    char *argv[] = {"cmd", "a", "b", "c", NULL};
    ck_assert_int_eq(parse(argv, &s, 1, err, sizeof err), -1);
    ck_assert_str_eq(err, "cmd: unexpected argument 'c'\n(`cmd --help` lists the options)\n");
}
END_TEST

/* A byte count: digits, an optional K, M or G in either case, an optional B
 * or iB; within the row's range. */
START_TEST(byte_counts_take_their_units)
{
    static const struct {
        char *value;
        int64_t bytes;
    } good[] = {{"4096", 4096},
                {"4096B", 4096},
                {"64K", 65536},
                {"64k", 65536},
                {"1M", 1 << 20},
                {"5G", (int64_t)5 << 30},
                {"5GB", (int64_t)5 << 30},
                {"5gb", (int64_t)5 << 30},
                {"5GiB", (int64_t)5 << 30},
                {"3MiB", (int64_t)3 << 20}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        settings s = {0};
        char err[256];
        char *argv[] = {"cmd", "--size", good[i].value, NULL};
        ck_assert_msg(parse(argv, &s, 0, err, sizeof err) == 0, "%s: %s", good[i].value, err);
        ck_assert_msg(s.size == good[i].bytes, "%s: %lld", good[i].value, (long long)s.size);
    }
    /* below lo, above hi (2000 GiB > 1e12), units it does not know, a
     * fraction, a sign, B twice, nothing */
    static char *const bad[] = {"0",   "2000G", "2T", "1.5G", "-1",  "+1",
                                "5iB", "5GiBB", "B",  "",     "5 G", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        settings s = {0};
        char err[256], says[160];
        char *argv[] = {"cmd", "--size", bad[i], NULL};
        snprintf(says, sizeof says,
                 "cmd: --size: bad value '%s'\n(`cmd --help` lists the options)\n", bad[i]);
        ck_assert_int_eq(parse(argv, &s, 0, err, sizeof err), -1);
        ck_assert_str_eq(err, says);
        ck_assert_int_eq(s.size, 0);
    }
}
END_TEST

START_TEST(help_wins_over_everything)
{
    settings s = {0};
    char err[256];
    char *argv[] = {"cmd", "--bogus", "--count", "0", "-h", NULL};
    ck_assert_int_eq(parse(argv, &s, 0, err, sizeof err), 1);
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(s.count, 0);
}
END_TEST

/* A prefix walk stops at "--" or at the first word that is no option, and
 * leaves a later --help to the other command. */
START_TEST(a_prefix_walk_stops_at_the_other_command)
{
    settings s = {0};
    int rest = -1;
    char *dashes[] = {"cmd", "--count", "3", "--", "prog", "--help", NULL};
    ck_assert_int_eq(bu_options_parse_prefix("cmd", opts, N, 6, dashes, &s, &rest), 0);
    ck_assert_int_eq(s.count, 3);
    ck_assert_int_eq(rest, 4);
    char *bare[] = {"cmd", "--flag", "prog", "-h", NULL};
    ck_assert_int_eq(bu_options_parse_prefix("cmd", opts, N, 4, bare, &s, &rest), 0);
    ck_assert_int_eq(s.flag, 1);
    ck_assert_int_eq(rest, 2);
    char *none[] = {"cmd", "--flag", NULL};
    ck_assert_int_eq(bu_options_parse_prefix("cmd", opts, N, 2, none, &s, &rest), 0);
    ck_assert_int_eq(rest, 2);
    char *help[] = {"cmd", "-h", "--", "prog", NULL};
    ck_assert_int_eq(bu_options_parse_prefix("cmd", opts, N, 4, help, &s, &rest), 1);
}
END_TEST

START_TEST(help_lists_every_row_at_its_column)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    bu_options_print(out, opts, N, 14);
    fclose(out);
    ck_assert_str_eq(text, "  --flag      a flag\n"
                           "  --count N   a count\n"
                           "              of two lines\n"
                           "  --big N     a big count\n"
                           "  --ratio F   a ratio\n"
                           "  --size SIZE a size\n"
                           "  -n, --name S\n"
                           "              a name\n"
                           "  --a-very-long-option VALUE\n"
                           "              custom\n");
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = check_tcase(s, "options", 0);
    check_add_tests(tc, every_kind_sets_its_field, bad_input_is_refused_naming_it,
                    byte_counts_take_their_units, help_wins_over_everything,
                    a_prefix_walk_stops_at_the_other_command, help_lists_every_row_at_its_column);
    return check_run(s);
}
