/* dev_util.c: helpers of the device kernel tests (dev_util.h). */
#include "tests/kernels/dev_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bk_queue dev_queue(void)
{
    bk_queue q = {BK_DEVICE, NULL, 0};
    return q;
}

void *dev_put(const void *host, size_t bytes)
{
    void *d = NULL;
    bk_queue q = dev_queue();
    ck_assert_int_eq(bk_device_malloc(bytes ? bytes : 16, &d), BK_OK);
    ck_assert_int_eq(bk_device_upload(&q, d, host, bytes), BK_OK);
    return d;
}

void dev_get(void *host, const void *dev, size_t bytes)
{
    bk_queue q = dev_queue();
    ck_assert_int_eq(bk_device_download(&q, host, dev, bytes), BK_OK);
}

void dev_free(void *dev)
{
    ck_assert_int_eq(bk_device_free(dev), BK_OK);
}

static uint64_t rng_state = 1;

void rng_seed(uint64_t s)
{
    rng_state = s * 0x9E3779B97F4A7C15ull + 1;
}

uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_unit(void)
{
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

float *rand_f(int64_t n, double lo, double hi)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_unit());
    return x;
}

double *to_d(const float *x, int64_t n)
{
    double *y = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

float *copy_f(const float *x, int64_t n)
{
    float *y = xmalloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

void assert_close(const char *what, const float *got, const double *ref, int64_t n, double atol,
                  double rtol)
{
    int64_t worst = -1;
    double worst_ratio = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i], ratio;
        if (isinf(r) || isinf(g))
            ratio = g == r ? 0.0 : INFINITY;
        else if (isnan(g) || isnan(r))
            ratio = INFINITY;
        else
            ratio = fabs(g - r) / (atol + rtol * fabs(r));
        if (ratio > 1.0 && (worst < 0 || ratio > worst_ratio)) {
            worst = i;
            worst_ratio = ratio;
        }
    }
    ck_assert_msg(worst < 0, "%s: element %lld is %.9g, reference %.9g (%.3g x the tolerance)",
                  what, (long long)worst, worst < 0 ? 0.0 : (double)got[worst],
                  worst < 0 ? 0.0 : ref[worst], worst_ratio);
}

int dev_test_main(Suite *s)
{
    if (!bk_device_available()) {
        printf("SKIP: no device for backend \"%s\"\n", bk_device_backend_name());
        srunner_free(srunner_create(s));
        return 77;
    }
    printf("device backend: %s\n", bk_device_backend_name());
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
