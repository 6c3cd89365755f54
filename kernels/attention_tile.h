/* attention_tile.h: the classification of a (query tile, key tile) pair
 * against a mask from per-tile summaries of positions and segment ids: SKIP
 * (no pair can be allowed: no work at all), FULL (every pair allowed: no
 * elementwise mask), PARTIAL. Shared by the CPU and CUDA attention kernels
 * (BK_HOSTDEV), so both skip exactly the same tiles for tiles of the same
 * rows. The classification is conservative: PARTIAL when unsure, never SKIP. */
#ifndef BURST_KERNELS_ATTENTION_TILE_H
#define BURST_KERNELS_ATTENTION_TILE_H

#include <stdint.h>

#include "kernels/attention_math.h"

/* Summary of the rows of one tile: range of positions and of segment ids. */
typedef struct {
    int64_t pmin, pmax;
    int32_t smin, smax;
} bk_attn_range;

enum { BK_ATTN_TILE_SKIP = 0, BK_ATTN_TILE_FULL = 1, BK_ATTN_TILE_PARTIAL = 2 };

/* Block-sparse part: scans the bitmap over the block rectangle the tiles span
 * when it is small (at most 256 blocks); PARTIAL when it is not. */
BK_HOSTDEV int bk_attn_block_sparse_class(const bk_attn_mask *m, const bk_attn_range *qr,
                                          const bk_attn_range *kr)
{
    int64_t bs = m->block_size, nb = m->n_blocks, lim = nb * bs;
    /* clip the position ranges to the bitmap; positions outside are masked */
    int64_t q0 = qr->pmin < 0 ? 0 : qr->pmin, q1 = qr->pmax >= lim ? lim - 1 : qr->pmax;
    int64_t k0 = kr->pmin < 0 ? 0 : kr->pmin, k1 = kr->pmax >= lim ? lim - 1 : kr->pmax;
    if (q0 > q1 || k0 > k1) return BK_ATTN_TILE_SKIP;
    int clipped = q0 != qr->pmin || q1 != qr->pmax || k0 != kr->pmin || k1 != kr->pmax;
    int64_t qb0 = q0 / bs, qb1 = q1 / bs, kb0 = k0 / bs, kb1 = k1 / bs;
    if ((qb1 - qb0 + 1) * (kb1 - kb0 + 1) > 256) return BK_ATTN_TILE_PARTIAL;
    int64_t set = 0, all = 0;
    for (int64_t qb = qb0; qb <= qb1; qb++)
        for (int64_t kb = kb0; kb <= kb1; kb++) {
            int64_t bit = qb * nb + kb;
            set += (int64_t)((m->block_bits[bit >> 6] >> (bit & 63)) & 1u);
            all++;
        }
    if (set == 0) return BK_ATTN_TILE_SKIP;
    return (set == all && !clipped) ? BK_ATTN_TILE_FULL : BK_ATTN_TILE_PARTIAL;
}

/* SKIP, FULL or PARTIAL for the tiles summarised by qr and kr. */
BK_HOSTDEV int bk_attn_classify_tiles(const bk_attn_mask *m, const bk_attn_range *qr,
                                      const bk_attn_range *kr)
{
    unsigned f = m->flags;
    int full = 1;
    if (f & BK_ATTN_CAUSAL) {
        if (kr->pmin > qr->pmax) return BK_ATTN_TILE_SKIP; /* every key after every query */
        if (kr->pmax > qr->pmin) full = 0;
    }
    if (f & BK_ATTN_WINDOW) {
        int64_t left = m->window_left, right = m->window_right;
        if (left >= 0) {
            if (qr->pmin - kr->pmax > left) return BK_ATTN_TILE_SKIP;
            if (qr->pmax - kr->pmin > left) full = 0;
        }
        if (right >= 0) {
            if (kr->pmin - qr->pmax > right) return BK_ATTN_TILE_SKIP;
            if (kr->pmax - qr->pmin > right) full = 0;
        }
    }
    if (f & BK_ATTN_DOCUMENT) {
        if (qr->smax < kr->smin || kr->smax < qr->smin) return BK_ATTN_TILE_SKIP;
        if (!(qr->smin == qr->smax && kr->smin == kr->smax && qr->smin == kr->smin)) full = 0;
    }
    if (f & BK_ATTN_BLOCK_SPARSE) {
        int c = bk_attn_block_sparse_class(m, qr, kr);
        if (c == BK_ATTN_TILE_SKIP) return c;
        if (c == BK_ATTN_TILE_PARTIAL) full = 0;
    }
    return full ? BK_ATTN_TILE_FULL : BK_ATTN_TILE_PARTIAL;
}

#endif
