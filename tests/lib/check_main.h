/* check_main.h: what every check suite's main does, once: a test case added to
 * its suite with a timeout, tests added to it by name, and the run of the
 * suite (verbosity from CK_VERBOSITY, as make check sets it) that gives the
 * program's exit status. */
#ifndef BURST_TESTS_CHECK_MAIN_H
#define BURST_TESTS_CHECK_MAIN_H

#include <check.h>

#if CHECK_MAJOR_VERSION == 0 && CHECK_MINOR_VERSION < 13
#error "the check suites need check 0.13 or later (START_TEST defining a TTest)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A new test case NAME added to suite s; timeout_s > 0 replaces check's default
 * timeout (4 s, or CK_DEFAULT_TIMEOUT), three times longer in the sanitizer
 * build. */
TCase *check_tcase(Suite *s, const char *name, double timeout_s);
/* Adds the tests named (as in START_TEST) to tc, in this order; the loop form
 * runs each of them for _i in [start, end). */
#define check_add_tests(tc, ...) check_add_test_list((tc), 0, 1, (const TTest *[]){__VA_ARGS__, NULL})
#define check_add_loop_tests(tc, start, end, ...)                                                  \
    check_add_test_list((tc), (start), (end), (const TTest *[]){__VA_ARGS__, NULL})
void check_add_test_list(TCase *tc, int start, int end, const TTest *const *tests);
/* Runs every test of s and frees s: EXIT_SUCCESS when none failed, else
 * EXIT_FAILURE. */
int check_run(Suite *s);

#ifdef __cplusplus
}
#endif

#endif
