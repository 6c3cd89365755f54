/* testutil.h: running the built `burst` program (or a worker) from a test and
 * capturing what it printed and how it exited; temporary directories. */
#ifndef BURST_TESTUTIL_H
#define BURST_TESTUTIL_H

#include <stddef.h>

typedef struct {
    int exit_code;   /* exit status, or 128 + signal number */
    char *out;       /* everything printed on stdout and stderr, NUL-terminated */
    double seconds;  /* wall-clock time the command took */
} test_run_result;

/* Path of the built `burst` program ($BURST, set by make check). */
const char *test_burst_path(void);
/* Path of a program built for the tests: $BURST_TEST_BUILDDIR/PATH (PATH such as
 * "tests/attn/ring_worker"). */
const char *test_program_path(const char *path, char *buf, size_t len);
/* Runs argv (argv[0] a path) with extra "NAME=VALUE" variables (NULL-terminated
 * list, may be NULL), capturing stdout and stderr together. */
test_run_result test_run(char *const argv[], char *const env[]);
void test_run_free(test_run_result *r);
/* True when the captured output contains needle. */
int test_output_has(const test_run_result *r, const char *needle);

/* A fresh directory $TMPDIR/PREFIX-XXXXXX (/tmp when TMPDIR is unset or empty),
 * its path in buf; returns buf, or NULL when it could not be made. */
char *test_make_tmpdir(char *buf, size_t len, const char *prefix);
/* "DIR/NAME" in one of 4 static buffers used in turn, so up to 4 paths made
 * in a row stay valid together. */
const char *test_path_in(const char *dir, const char *name);
/* Removes path and everything below it, as rm -rf does: 0, or -1 when
 * something could not be removed. */
int test_remove_tree(const char *path);

#endif
