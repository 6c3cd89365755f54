/* selftest_kernels.c: quick numeric checks of the kernels for `burst selftest`. */
#include <math.h>
#include <stdio.h>

#include "kernels/shared_math.h"
#include "src/selftest.h"

int selftest_kernels(void)
{
    int failures = 0;
    float v = bk_logaddexp(logf(2.0f), logf(3.0f));
    if (fabsf(v - logf(5.0f)) > 1e-6f) {
        fprintf(stderr, "selftest kernels: logaddexp(log 2, log 3) = %g, expected %g\n", v,
                logf(5.0f));
        failures++;
    }
    if (bk_logaddexp(-INFINITY, -INFINITY) != -INFINITY) {
        fprintf(stderr, "selftest kernels: logaddexp(-inf, -inf) is not -inf\n");
        failures++;
    }
    return failures ? 1 : 0;
}
