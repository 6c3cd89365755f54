/* simt_atomic.h: CUDA's atomic functions for the SIMT emulator. The threads
 * of a launch run on one OS thread, but the functions use the compiler's
 * atomic built-ins anyway, so that they stay correct if blocks ever run on
 * several OS threads. Float and double additions go through compare-and-swap,
 * as on older GPUs. Shared memory is reached through a checked element
 * (atomicAdd(&tile[i], v)), so the bounds check happens before the call; the
 * race detector does not record atomics (they never race with each other). */
#ifndef BURST_EMU_SIMT_ATOMIC_H
#define BURST_EMU_SIMT_ATOMIC_H

#include <string.h>

#include "emu/simt/simt_shared.h"

namespace bk_emu
{

template <class T> T atomic_fetch_add(T *p, T v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

template <class T, class U> T atomic_float_rmw(T *p, T v, U op)
{
    T old;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    for (;;) {
        T want = op(old, v);
        if (__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return old;
    }
}

} // namespace bk_emu

static inline int atomicAdd(int *p, int v)
{
    return bk_emu::atomic_fetch_add(p, v);
}
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    return bk_emu::atomic_fetch_add(p, v);
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return bk_emu::atomic_fetch_add(p, v);
}
static inline float atomicAdd(float *p, float v)
{
    return bk_emu::atomic_float_rmw(p, v, [](float a, float b) { return a + b; });
}
static inline double atomicAdd(double *p, double v)
{
    return bk_emu::atomic_float_rmw(p, v, [](double a, double b) { return a + b; });
}
static inline int atomicSub(int *p, int v)
{
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicSub(unsigned *p, unsigned v)
{
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
template <class T> static inline T atomicExch(T *p, T v)
{
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <class T> static inline T atomicCAS(T *p, T compare, T v)
{
    __atomic_compare_exchange(p, &compare, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare; /* the old value either way */
}
template <class T> static inline T atomicMax(T *p, T v)
{
    return bk_emu::atomic_float_rmw(p, v, [](T a, T b) { return a > b ? a : b; });
}
template <class T> static inline T atomicMin(T *p, T v)
{
    return bk_emu::atomic_float_rmw(p, v, [](T a, T b) { return a < b ? a : b; });
}
template <class T> static inline T atomicAnd(T *p, T v)
{
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
template <class T> static inline T atomicOr(T *p, T v)
{
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
template <class T> static inline T atomicXor(T *p, T v)
{
    return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
}

/* Each atomic on a shared element's address (bk_emu::saddr). */
#define BK_EMU_SHARED_ATOMIC(fn)                                                                   \
    template <class T, class... V> static inline T fn(bk_emu::saddr<T> p, V... v)                  \
    {                                                                                              \
        return fn(p.atomic_target(), static_cast<T>(v)...);                                        \
    }
BK_EMU_SHARED_ATOMIC(atomicAdd)
BK_EMU_SHARED_ATOMIC(atomicSub)
BK_EMU_SHARED_ATOMIC(atomicExch)
BK_EMU_SHARED_ATOMIC(atomicCAS)
BK_EMU_SHARED_ATOMIC(atomicMax)
BK_EMU_SHARED_ATOMIC(atomicMin)
BK_EMU_SHARED_ATOMIC(atomicAnd)
BK_EMU_SHARED_ATOMIC(atomicOr)
BK_EMU_SHARED_ATOMIC(atomicXor)
#undef BK_EMU_SHARED_ATOMIC

#endif
