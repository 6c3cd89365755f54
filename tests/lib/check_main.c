/* check_main.c: see check_main.h. */
#include <stdlib.h>

#include "tests/lib/check_main.h"

TCase *check_tcase(Suite *s, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    if (timeout_s > 0) tcase_set_timeout(tc, timeout_s);
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
