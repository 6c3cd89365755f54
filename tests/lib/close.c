/* close.c: see close.h. */
#include <check.h>
#include <math.h>

#include "tests/lib/close.h"

/* How many tolerances element (g, r) is off: 0 when equal infinities,
 * INFINITY for a NaN or unequal infinities. */
static double tolerances_off(double g, double r, double atol, double rtol)
{
    if (isinf(r) || isinf(g)) return g == r ? 0.0 : INFINITY;
    if (isnan(g) || isnan(r)) return INFINITY;
    return fabs(g - r) / (atol + rtol * fabs(r));
}

void test_assert_close(const char *what, const float *got, const double *ref, int64_t n,
                       double atol, double rtol)
{
    int64_t worst = -1;
    double worst_ratio = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double ratio = tolerances_off(got[i], ref[i], atol, rtol);
        if (ratio > 1.0 && (worst < 0 || ratio > worst_ratio)) {
            worst = i;
            worst_ratio = ratio;
        }
    }
    ck_assert_msg(worst < 0, "%s: element %lld of %lld is %.9g, reference %.9g (%.3g x the tolerance)",
                  what, (long long)worst, (long long)n, worst < 0 ? 0.0 : (double)got[worst],
                  worst < 0 ? 0.0 : ref[worst], worst_ratio);
}
