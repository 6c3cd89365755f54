/* simt_warp.h: the warp-level primitives of CUDA for the SIMT emulator:
 * __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync,
 * __ballot_sync, __any_sync, __all_sync and __syncwarp.
 *
 * Each is a warp collective: the calling lane must be in the mask, every lane
 * of the mask must call a collective of the same kind with the same mask, and
 * the call returns once they all have. The emulator reports (and fails the
 * launch) when a mask names a lane that has exited or does not exist, when a
 * lane of the mask waits in a different collective, or when a shuffle reads a
 * lane outside the mask (CUDA leaves that value undefined). They are macros so
 * that errors can name the call site. */
#ifndef BURST_EMU_SIMT_WARP_H
#define BURST_EMU_SIMT_WARP_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace bk_emu
{

/* kind: C_SHFL_IDX, C_SHFL_UP, C_SHFL_DOWN or C_SHFL_XOR; returns the bits
 * of the source lane's value. */
uint64_t shfl_bits(const char *file, int line, int kind, unsigned mask, uint64_t bits, int arg,
                   int width);
/* The mask's lanes whose predicate is non-zero. */
unsigned ballot(const char *file, int line, unsigned mask, int pred);
void syncwarp(const char *file, int line, unsigned mask);

template <class T>
T shfl(const char *file, int line, int kind, unsigned mask, T v, int arg, int width = 32)
{
    static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8, "shuffle of a scalar");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = shfl_bits(file, line, kind, mask, bits, arg, width);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

} // namespace bk_emu

/* The values of kind, as in simt_internal.h's collective_kind. */
#define BK_EMU_SHFL_IDX  0
#define BK_EMU_SHFL_UP   1
#define BK_EMU_SHFL_DOWN 2
#define BK_EMU_SHFL_XOR  3

#define __shfl_sync(mask, v, ...)                                                                  \
    bk_emu::shfl(__FILE__, __LINE__, BK_EMU_SHFL_IDX, (mask), (v), __VA_ARGS__)
#define __shfl_up_sync(mask, v, ...)                                                               \
    bk_emu::shfl(__FILE__, __LINE__, BK_EMU_SHFL_UP, (mask), (v), __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...)                                                             \
    bk_emu::shfl(__FILE__, __LINE__, BK_EMU_SHFL_DOWN, (mask), (v), __VA_ARGS__)
#define __shfl_xor_sync(mask, v, ...)                                                              \
    bk_emu::shfl(__FILE__, __LINE__, BK_EMU_SHFL_XOR, (mask), (v), __VA_ARGS__)
#define __ballot_sync(mask, pred) bk_emu::ballot(__FILE__, __LINE__, (mask), (pred))
#define __any_sync(mask, pred)    ((int)(bk_emu::ballot(__FILE__, __LINE__, (mask), (pred)) != 0u))
#define __all_sync(mask, pred)                                                                     \
    ((int)(bk_emu::ballot(__FILE__, __LINE__, (mask), (pred)) == (unsigned)(mask)))
#define __syncwarp(...) bk_emu::syncwarp(__FILE__, __LINE__, bk_emu_syncwarp_mask(__VA_ARGS__))

static inline unsigned bk_emu_syncwarp_mask(void)
{
    return 0xffffffffu;
}
static inline unsigned bk_emu_syncwarp_mask(unsigned mask)
{
    return mask;
}

#endif
