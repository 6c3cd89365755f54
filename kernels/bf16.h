/* bf16.h: bfloat16 as the kernels store it: the upper 16 bits of an IEEE
 * float, held in a uint16_t (C has no bf16 type). Conversions for host code
 * (C11, C++) and device code (BK_HOSTDEV), bit-identical on both:
 * float -> bf16 rounds to nearest, ties to even (as __float2bfloat16_rn);
 * a NaN stays a (quiet) NaN; bf16 -> float is exact. */
#ifndef BURST_KERNELS_BF16_H
#define BURST_KERNELS_BF16_H

#include <stdint.h>

#include "kernels/shared_math.h"

BK_HOSTDEV float bk_bf16_to_float(uint16_t h)
{
    return bk_bits_to_float((uint32_t)h << 16);
}

BK_HOSTDEV uint16_t bk_float_to_bf16(float f)
{
    uint32_t u = bk_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Two floats as a bf16 pair in one 32-bit register: lo in bits 0-15. */
BK_HOSTDEV uint32_t bk_pack_bf16x2(float lo, float hi)
{
    return (uint32_t)bk_float_to_bf16(lo) | ((uint32_t)bk_float_to_bf16(hi) << 16);
}

#endif
