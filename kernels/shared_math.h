/* shared_math.h: per-element and per-row math shared by the CPU and CUDA
 * backends. Every function here compiles as host code (C11) and as device code
 * (nvcc), so the CPU tests exercise the exact arithmetic the GPU runs. */
#ifndef BURST_KERNELS_SHARED_MATH_H
#define BURST_KERNELS_SHARED_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define BK_HOSTDEV __host__ __device__ static inline
#else
#define BK_HOSTDEV static inline
#endif

/* log(exp(a) + exp(b)) without overflow; -inf + -inf stays -inf, never NaN. */
BK_HOSTDEV float bk_logaddexp(float a, float b)
{
    float hi = a > b ? a : b, lo = a > b ? b : a;
    if (hi == -INFINITY) return -INFINITY;
    return hi + log1pf(expf(lo - hi));
}

#endif
