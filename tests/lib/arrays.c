/* arrays.c: see arrays.h. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/arrays.h"
#include "tests/lib/rng.h"

void *test_alloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    ck_assert_ptr_nonnull(p);
    return p;
}

float *test_zeros_f(int64_t n)
{
    return test_alloc((size_t)(n > 0 ? n : 0), sizeof(float));
}

double *test_zeros_d(int64_t n)
{
    return test_alloc((size_t)(n > 0 ? n : 0), sizeof(double));
}

float *test_copy_f(const float *x, int64_t n)
{
    float *y = test_zeros_f(n);
    if (n > 0) memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

double *test_to_d(const float *x, int64_t n)
{
    double *y = test_zeros_d(n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

float *test_rand_f(uint64_t *s, int64_t n, double lo, double hi)
{
    float *x = test_zeros_f(n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)test_rng_uniform(s, lo, hi);
    return x;
}
