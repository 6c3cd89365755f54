/* simt.h: what a CUDA kernel source needs to compile as host C++ for the SIMT
 * emulator (g++ -x c++ -DBK_EMULATOR): the CUDA keywords, built-in variables
 * and types, barriers, warp primitives, atomics, checked shared memory,
 * tensor-core and cp.async emulation, and the few device intrinsics the
 * kernels use. Kernel sources include it through kernels/cuda/bk_cuda.cuh,
 * never directly. See doc/KERNELS.md, "The SIMT emulator". */
#ifndef BURST_EMU_SIMT_H
#define BURST_EMU_SIMT_H

#ifndef BK_EMULATOR
#error "emu/simt/simt.h is for the emulator build (-DBK_EMULATOR)"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "emu/simt/simt_atomic.h"
#include "emu/simt/simt_memory.h"
#include "emu/simt/simt_mma.h"
#include "emu/simt/simt_runtime.h"
#include "emu/simt/simt_shared.h"
#include "emu/simt/simt_types.h"
#include "emu/simt/simt_warp.h"

/* Keywords: every function is an ordinary host function; a kernel gets
 * internal linkage (kernels are written `__global__ void k(...)`, launched from
 * their own file). */
#define __global__ static
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

/* Memory fences order nothing more on one OS thread. */
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

/* Device intrinsics used by the kernels, with their exact semantics. */
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}
static inline int __ffs(int x)
{
    return __builtin_ffs(x);
}
static inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}

#endif
