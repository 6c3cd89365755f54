/* attention_mask.c: everything the CPU attention kernels need to know about a
 * mask before touching data: the mask constructors, argument checks, and the
 * classification of a (query tile, key tile) pair as empty (skipped without
 * work), full (no elementwise mask) or partial, from per-tile summaries of
 * positions and segment ids. */
#include "config.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"

bk_attn_mask bk_attn_mask_none(void)
{
    bk_attn_mask m;
    memset(&m, 0, sizeof m);
    m.window_left = -1;
    m.window_right = -1;
    return m;
}

bk_attn_mask bk_attn_mask_causal(void)
{
    bk_attn_mask m = bk_attn_mask_none();
    m.flags = BK_ATTN_CAUSAL;
    return m;
}

bk_attn_mask bk_attn_mask_window(int64_t left, int64_t right)
{
    bk_attn_mask m = bk_attn_mask_none();
    m.flags = BK_ATTN_WINDOW;
    m.window_left = left;
    m.window_right = right;
    return m;
}

bk_attn_mask bk_attn_mask_document(int causal)
{
    bk_attn_mask m = bk_attn_mask_none();
    m.flags = BK_ATTN_DOCUMENT | (causal ? (unsigned)BK_ATTN_CAUSAL : 0u);
    return m;
}

bk_attn_mask bk_attn_mask_block_sparse(const uint64_t *bits, int64_t block_size, int64_t n_blocks)
{
    bk_attn_mask m = bk_attn_mask_none();
    m.flags = BK_ATTN_BLOCK_SPARSE;
    m.block_bits = bits;
    m.block_size = block_size;
    m.n_blocks = n_blocks;
    return m;
}

bk_status bk_attn_check_geom(const bk_queue *q, const bk_attn_geom *g)
{
    BK_CHECK_ARG(q != NULL && g != NULL);
    BK_CHECK_ARG(g->n_q >= 0 && g->n_kv >= 0);
    BK_CHECK_ARG(g->h_q > 0 && g->h_kv > 0 && g->h_q % g->h_kv == 0);
    BK_CHECK_ARG(g->d > 0 && g->d % 8 == 0);
    BK_CHECK_ARG(isfinite(g->scale) && g->scale > 0.0f);
    unsigned f = g->mask.flags;
    BK_CHECK_ARG((f & ~(unsigned)(BK_ATTN_CAUSAL | BK_ATTN_WINDOW | BK_ATTN_DOCUMENT |
                                  BK_ATTN_BLOCK_SPARSE)) == 0);
    if (f != 0) BK_CHECK_ARG((g->n_q == 0 || g->q_pos) && (g->n_kv == 0 || g->kv_pos));
    if (f & BK_ATTN_DOCUMENT)
        BK_CHECK_ARG((g->n_q == 0 || g->q_seg) && (g->n_kv == 0 || g->kv_seg));
    if (f & BK_ATTN_BLOCK_SPARSE) {
        BK_CHECK_ARG(g->mask.block_bits != NULL && g->mask.block_size > 0);
        /* n_blocks^2 bits must be addressable in int64 */
        BK_CHECK_ARG(g->mask.n_blocks > 0 && g->mask.n_blocks <= (int64_t)3037000499LL);
        BK_CHECK_ARG(g->mask.block_size <= INT64_MAX / 2 / g->mask.n_blocks);
    }
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
    return BK_OK;
}

void bk_attn_ranges(const int64_t *pos, const int32_t *seg, int64_t n, int tile, bk_attn_range *out)
{
    int64_t n_tiles = (n + tile - 1) / tile;
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t r0 = t * tile, r1 = r0 + tile < n ? r0 + tile : n;
        bk_attn_range r = {INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN};
        for (int64_t i = r0; i < r1; i++) {
            int64_t p = pos ? pos[i] : 0;
            int32_t s = seg ? seg[i] : 0;
            if (p < r.pmin) r.pmin = p;
            if (p > r.pmax) r.pmax = p;
            if (s < r.smin) r.smin = s;
            if (s > r.smax) r.smax = s;
        }
        out[t] = r;
    }
}

int bk_attn_tile_class(const bk_attn_mask *m, const bk_attn_range *qr, const bk_attn_range *kr)
{
    return bk_attn_classify_tiles(m, qr, kr);
}

void bk_attn_tile_mask(const bk_attn_geom *g, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                       float *st)
{
    const bk_attn_mask *m = &g->mask;
    const unsigned f = m->flags;
    const int64_t *restrict qp = g->q_pos + i0;
    const int32_t *restrict qs = (f & BK_ATTN_DOCUMENT) ? g->q_seg + i0 : NULL;
    for (int64_t j = 0; j < bk; j++) {
        /* causal and window together: key j is allowed for lo <= q_pos <= hi */
        const int64_t kp = g->kv_pos[j0 + j];
        int64_t lo = INT64_MIN, hi = INT64_MAX;
        if (f & BK_ATTN_CAUSAL) lo = kp;
        if (f & BK_ATTN_WINDOW) {
            if (m->window_right >= 0 && kp - m->window_right > lo) lo = kp - m->window_right;
            if (m->window_left >= 0) hi = kp + m->window_left;
        }
        float *restrict s = st + j * BK_ATTN_TQ;
#pragma omp simd
        for (int64_t i = 0; i < bq; i++)
            if (qp[i] < lo || qp[i] > hi) s[i] = -INFINITY;
        if (qs) {
            const int32_t ks = g->kv_seg[j0 + j];
#pragma omp simd
            for (int64_t i = 0; i < bq; i++)
                if (qs[i] != ks) s[i] = -INFINITY;
        }
        if (f & BK_ATTN_BLOCK_SPARSE)
            for (int64_t i = 0; i < bq; i++)
                if (!bk_attn_block_bit(m, qp[i], kp)) s[i] = -INFINITY;
    }
}

void bk_attn_stats_set(bk_attn_stats *stats, int64_t total, int64_t skipped, int64_t masked,
                       int64_t full)
{
    if (!stats) return;
    stats->tile_q = BK_ATTN_TQ;
    stats->tile_kv = BK_ATTN_TK;
    stats->tiles_total = total;
    stats->tiles_skipped = skipped;
    stats->tiles_masked = masked;
    stats->tiles_full = full;
}

int bk_attn_threads(const bk_queue *q)
{
    return q->n_threads > 0 ? q->n_threads : omp_get_max_threads();
}

float *bk_attn_scratch(size_t n_floats)
{
    size_t bytes = (n_floats * sizeof(float) + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

int bk_attn_scratch_had(int had, int *short_of_memory)
{
    if (!had) {
#pragma omp atomic write
        *short_of_memory = 1;
    }
    return had;
}
