/* shared_math.h: per-element and per-row math shared by the CPU and CUDA
 * backends. Every function here compiles as host code (C11) and as device code
 * (nvcc), so the CPU tests exercise the exact arithmetic the GPU runs. */
#ifndef BURST_KERNELS_SHARED_MATH_H
#define BURST_KERNELS_SHARED_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BK_HOSTDEV __host__ __device__ static inline
#else
#define BK_HOSTDEV static inline
#endif

/* A float's IEEE bits and back (memcpy on the host, the intrinsics on the
 * device: both are reinterpretations, not conversions). */
BK_HOSTDEV float bk_bits_to_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

BK_HOSTDEV uint32_t bk_float_to_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* log(exp(a) + exp(b)) without overflow; -inf + -inf stays -inf, never NaN. */
BK_HOSTDEV float bk_logaddexp(float a, float b)
{
    float hi = a > b ? a : b, lo = a > b ? b : a;
    if (hi == -INFINITY) return -INFINITY;
    return hi + log1pf(expf(lo - hi));
}

#endif
