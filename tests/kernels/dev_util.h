/* dev_util.h: what the device kernel tests share: device buffers filled from
 * host arrays and read back (so one test source runs in the SIMT emulator and
 * on a GPU), random numbers, the double-precision closeness check, and the
 * main that skips (exit 77) when the program has no usable device. */
#ifndef BURST_TESTS_KERNELS_DEV_UTIL_H
#define BURST_TESTS_KERNELS_DEV_UTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/device.h"

/* A device queue on the default stream. */
bk_queue dev_queue(void);

/* Device copy of host[bytes] (bytes may be 0: a valid dummy buffer). */
void *dev_put(const void *host, size_t bytes);
/* host[bytes] = dev[bytes]. */
void dev_get(void *host, const void *dev, size_t bytes);
void dev_free(void *dev);

/* Deterministic random numbers (splitmix64). */
void rng_seed(uint64_t s);
uint64_t rng_next(void);
double rng_unit(void);
/* n floats uniform in [lo, hi) (malloc'd, never NULL). */
float *rand_f(int64_t n, double lo, double hi);
double *to_d(const float *x, int64_t n);
float *copy_f(const float *x, int64_t n);
void *xmalloc(size_t bytes);

/* |got - ref| <= atol + rtol |ref| everywhere; reports the worst element.
 * Infinities must match exactly; NaN fails. */
void assert_close(const char *what, const float *got, const double *ref, int64_t n, double atol,
                  double rtol);

/* Runs the suite; 77 (skip) when no device is available to this program. */
int dev_test_main(Suite *s);

#endif
