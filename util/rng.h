/* rng.h: the one random-number generator of the project, splitmix64. It is
 * counter-based where that matters (a parameter's or a sample's value is a
 * function of the seed and its index, whatever the number of ranks), and a
 * plain stream elsewhere (tests, synthetic corpora). */
#ifndef BURST_UTIL_RNG_H
#define BURST_UTIL_RNG_H

#include <stdint.h>

/* The splitmix64 output of state x: a bijective mix of x + golden gamma. */
static inline uint64_t bu_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next value of the stream whose state is *s (advances *s). */
static inline uint64_t bu_rng_next(uint64_t *s)
{
    uint64_t x = *s;
    *s += 0x9e3779b97f4a7c15ull;
    return bu_splitmix64(x);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double bu_rng_unit(uint64_t *s)
{
    return (double)(bu_rng_next(s) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [lo, hi] (modulo bias below 2^-40 for ranges under 2^24). */
static inline int64_t bu_rng_range(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(bu_rng_next(s) % (uint64_t)(hi - lo + 1));
}

#endif
