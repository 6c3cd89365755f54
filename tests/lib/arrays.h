/* arrays.h: the buffers of the check suites: allocated zeroed (a failed
 * allocation fails the check), copied, widened to double, or random. */
#ifndef BURST_TESTS_ARRAYS_H
#define BURST_TESTS_ARRAYS_H

#include <stddef.h>
#include <stdint.h>

/* n elements of size bytes, zeroed; n = 0 gives a valid (1-element) buffer. */
void *test_alloc(size_t n, size_t size);
/* n zeroed floats, doubles. */
float *test_zeros_f(int64_t n);
double *test_zeros_d(int64_t n);
/* A copy of x[n]. */
float *test_copy_f(const float *x, int64_t n);
/* x[n] in double precision. */
double *test_to_d(const float *x, int64_t n);
/* n floats uniform in [lo, hi) from the stream *s (tests/lib/rng.h). */
float *test_rand_f(uint64_t *s, int64_t n, double lo, double hi);

#endif
