/* close.h: the closeness check of the kernel suites: a float result against
 * its double-precision reference, element by element. */
#ifndef BURST_TESTS_CLOSE_H
#define BURST_TESTS_CLOSE_H

#include <stdint.h>

/* Fails the running check unless |got - ref| <= atol + rtol |ref| for every
 * element of [n], naming what, the worst element and how far past the
 * tolerance it is. Infinities must match exactly; a NaN fails. */
void test_assert_close(const char *what, const float *got, const double *ref, int64_t n,
                       double atol, double rtol);

#endif
