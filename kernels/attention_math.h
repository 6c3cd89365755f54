/* attention_math.h: the per-element and per-row math of attention that the CPU
 * and CUDA backends share: the mask predicate over global positions, the
 * online-softmax rescale inside a block, the merge of a block's (O, lse) into
 * the running (O, lse) of a ring, and the score gradient of the backward.
 *
 * Everything here compiles as host C11 and as CUDA device code (BK_HOSTDEV), so
 * the CPU tests exercise the exact arithmetic the GPU will run. The mask type is
 * defined here rather than in attention.h because device code reads it too. */
#ifndef BURST_KERNELS_ATTENTION_MATH_H
#define BURST_KERNELS_ATTENTION_MATH_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bf16.h"
#include "kernels/shared_math.h"

/* Mask features; a mask is the conjunction of the features set in its flags,
 * 0 being full (non-causal) attention. Every feature reads global positions,
 * never row indices, so zigzag and striped layouts mask correctly. */
enum {
    BK_ATTN_CAUSAL = 1u,       /* key allowed iff k_pos <= q_pos */
    BK_ATTN_WINDOW = 2u,       /* key allowed iff q_pos - left <= k_pos <= q_pos + right */
    BK_ATTN_DOCUMENT = 4u,     /* key allowed iff segment(q row) == segment(k row) */
    BK_ATTN_BLOCK_SPARSE = 8u, /* key allowed iff bit (q_pos / bs, k_pos / bs) is set */
};

typedef struct {
    unsigned flags; /* OR of BK_ATTN_* above */
    /* BK_ATTN_WINDOW, in positions; a negative side is unbounded. A causal
     * window of W tokens including the query itself is left = W - 1, right = 0. */
    int64_t window_left, window_right;
    /* BK_ATTN_BLOCK_SPARSE: bit (qb * n_blocks + kb) of block_bits (word = bit / 64,
     * bit within the word = bit % 64) says whether query block qb = q_pos / block_size
     * may attend to key block kb = k_pos / block_size. Positions outside
     * [0, n_blocks * block_size) are masked. block_bits holds
     * ceil(n_blocks^2 / 64) words. */
    const uint64_t *block_bits;
    int64_t block_size, n_blocks;
} bk_attn_mask;

/* Words of a block-sparse bitmap over n_blocks blocks: ceil(n_blocks^2 / 64). */
static inline int64_t bk_attn_block_words(int64_t n_blocks)
{
    return (n_blocks * n_blocks + 63) / 64;
}
/* Its bytes: whole words. */
static inline size_t bk_attn_block_bytes(int64_t n_blocks)
{
    return (size_t)bk_attn_block_words(n_blocks) * sizeof(uint64_t);
}

/* Bit (q block, k block) of a block-sparse mask; 0 outside the bitmap. */
BK_HOSTDEV int bk_attn_block_bit(const bk_attn_mask *m, int64_t q_pos, int64_t k_pos)
{
    if (q_pos < 0 || k_pos < 0) return 0;
    int64_t qb = q_pos / m->block_size, kb = k_pos / m->block_size;
    if (qb >= m->n_blocks || kb >= m->n_blocks) return 0;
    int64_t bit = qb * m->n_blocks + kb;
    return (int)((m->block_bits[bit >> 6] >> (bit & 63)) & 1u);
}

/* Whether the query at global position q_pos (document q_seg) may attend to the
 * key at k_pos (document k_seg). Segments are only read with BK_ATTN_DOCUMENT.
 * Positions are assumed within +-2^62 so that differences do not overflow. */
BK_HOSTDEV int bk_attn_allowed(const bk_attn_mask *m, int64_t q_pos, int64_t k_pos, int32_t q_seg,
                               int32_t k_seg)
{
    unsigned f = m->flags;
    if ((f & BK_ATTN_CAUSAL) && k_pos > q_pos) return 0;
    if (f & BK_ATTN_WINDOW) {
        if (m->window_left >= 0 && q_pos - k_pos > m->window_left) return 0;
        if (m->window_right >= 0 && k_pos - q_pos > m->window_right) return 0;
    }
    if ((f & BK_ATTN_DOCUMENT) && q_seg != k_seg) return 0;
    if ((f & BK_ATTN_BLOCK_SPARSE) && !bk_attn_block_bit(m, q_pos, k_pos)) return 0;
    return 1;
}

/* Online softmax inside a block, in base-2 units (scores pre-multiplied by
 * scale * log2(e)). Given the running max *m2 and the max of the next tile,
 * updates *m2 and returns the factor by which the running sum and accumulator
 * must be multiplied. While every score so far is masked (max -inf) the factor
 * is 1 and nothing has been accumulated, so no -inf - -inf is ever formed. */
BK_HOSTDEV float bk_attn_online_rescale(float *m2, float tile_max2)
{
    float m_new = *m2 > tile_max2 ? *m2 : tile_max2;
    float alpha = (m_new == -INFINITY) ? 1.0f : exp2f(*m2 - m_new);
    *m2 = m_new;
    return alpha;
}

/* The offset subtracted from base-2 scores before exponentiation: the running
 * max, or 0 while the row is fully masked so that exp2(-inf - 0) = 0. */
BK_HOSTDEV float bk_attn_exp_offset(float m2)
{
    return m2 == -INFINITY ? 0.0f : m2;
}

/* Natural-log lse of a block from its base-2 running max and sum of
 * exp2(score - offset); -inf for a row with no allowed key (sum 0). */
BK_HOSTDEV float bk_attn_block_lse(float m2, float sum)
{
    if (!(sum > 0.0f)) return -INFINITY;
    return (bk_attn_exp_offset(m2) + log2f(sum)) * 0.693147180559945309f;
}

/* Merge of a block into the running output, both normalised:
 *   lse_new = logaddexp(lse, lse_blk)
 *   O_new   = O * exp(lse - lse_new) + O_blk * exp(lse_blk - lse_new).
 * Returns lse_new and the two weights; both weights are 0 when both sides are
 * empty (-inf), so a fully masked row stays O = 0, lse = -inf without NaN. */
BK_HOSTDEV float bk_attn_merge_weights(float lse, float lse_blk, float *w_old, float *w_blk)
{
    float lse_new = bk_logaddexp(lse, lse_blk);
    if (lse_new == -INFINITY) {
        *w_old = 0.0f;
        *w_blk = 0.0f;
        return lse_new;
    }
    *w_old = expf(lse - lse_new);
    *w_blk = expf(lse_blk - lse_new);
    return lse_new;
}

/* Base-2 offset for the backward's probabilities p = exp2(s2 - offset) from the
 * row's final natural-log lse; +inf for a fully masked row so that p = 0. */
BK_HOSTDEV float bk_attn_bwd_offset(float lse)
{
    return lse == -INFINITY ? INFINITY : lse * 1.44269504088896341f;
}

/* Gradient of the loss with respect to the (unscaled) score q.k:
 * dS = P * (dP - delta) * scale, where dP = dO.v and delta = rowsum(dO * O). */
BK_HOSTDEV float bk_attn_dscore(float p, float dp, float delta, float scale)
{
    return p * (dp - delta) * scale;
}

/* The factor delta / |dO|^2 of a row's surrogate output O' = factor dO
 * (kernels/sdpa.h, bk_attn_surrogate_o), from the row's d bf16 values of
 * dO; 0 where dO is 0. The sum of squares in fp32, lane-free: one thread
 * owns the row. */
BK_HOSTDEV float bk_attn_surrogate_weight(const uint16_t *dO_row, int d, float delta)
{
    float sq = 0.0f;
    for (int e = 0; e < d; e++) {
        float g = bk_bf16_to_float(dO_row[e]);
        sq += g * g;
    }
    return sq > 0.0f ? delta / sq : 0.0f;
}

#endif
