/* rng.h: the random numbers of the tests, drawn from util/rng.h's splitmix64
 * stream (bu_rng_next, bu_rng_unit, bu_rng_range on a uint64_t state). For the
 * check suites and the multi-rank workers alike: nothing here needs check. */
#ifndef BURST_TESTS_RNG_H
#define BURST_TESTS_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "util/rng.h"

/* The state of seed's stream: seed * (splitmix64's gamma) + 1. Seeds k apart
 * give the same stream k draws apart; where the draws must be unrelated, take
 * seeds far apart, or bu_splitmix64(seed) as the state. */
static inline uint64_t test_rng(uint64_t seed)
{
    return seed * 0x9e3779b97f4a7c15ull + 1;
}

/* Uniform integer in [0, n), n >= 1. */
static inline int64_t test_rng_below(uint64_t *s, int64_t n)
{
    return bu_rng_range(s, 0, n - 1);
}

/* Uniform in [lo, hi). */
static inline double test_rng_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * bu_rng_unit(s);
}

/* x[0..n) uniform in [lo, hi). */
static inline void test_rng_fill(uint64_t *s, double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = test_rng_uniform(s, lo, hi);
}

#endif
