/* check_main.c: see check_main.h. */
#include "config.h"

#include <stdlib.h>

#include "tests/lib/check_main.h"

/* How much slower the sanitizer build runs the slowest tests than a plain one
 * (ASan's shadow memory and checks; the emulated device most of all): a
 * timeout is there to stop a hang, not to time the code. */
#ifdef BURST_SANITIZERS
enum { TIMEOUT_SCALE = 3 };
#else
enum { TIMEOUT_SCALE = 1 };
#endif

TCase *check_tcase(Suite *s, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    if (timeout_s > 0) tcase_set_timeout(tc, timeout_s * TIMEOUT_SCALE);
    suite_add_tcase(s, tc);
    return tc;
}

void check_add_test_list(TCase *tc, int start, int end, const TTest *const *tests)
{
    for (; *tests; tests++) tcase_add_loop_test(tc, *tests, start, end);
}

int check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
