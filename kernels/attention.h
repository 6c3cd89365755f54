/* attention.h: single-rank attention kernels over one (query block, key/value
 * block) pair, written so that a ring of blocks needs no separate merge pass.
 *
 * Forward: bk_attn_fwd_init once (O = 0, lse = -inf), bk_attn_fwd once per K/V
 * block (each call merges the block into the running (O, lse) in place),
 * bk_attn_fwd_finalize once. Backward: bk_attn_delta once at home, then
 * bk_attn_bwd once per block pair, accumulating (+=) into dQ, dK, dV; the
 * backward never needs O.
 *
 * Layouts (row-major, fp32, contiguous):
 *   Q, O, dO, dQ   [n_q,  h_q,  d]      lse, delta   [n_q, h_q]
 *   K, V, dK, dV   [n_kv, h_kv, d]
 *   q_pos [n_q], kv_pos [n_kv] global positions; q_seg [n_q], kv_seg [n_kv] documents.
 * Query head h reads key/value head h / (h_q / h_kv) (grouped-query attention;
 * K/V are never expanded). lse is the natural-log log-sum-exp of the scaled
 * scores scale * q.k over the allowed keys seen so far; O is kept normalised
 * after every merge, so finalize only enforces O = 0 where lse = -inf.
 *
 * A row with no allowed key ends with O = 0 and lse = -inf (never NaN). Tiles
 * the mask empties are skipped without work; bk_attn_stats counts them. */
#ifndef BURST_KERNELS_ATTENTION_H
#define BURST_KERNELS_ATTENTION_H

#include <stdint.h>

#include "kernels/attention_math.h"
#include "kernels/kernels_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Geometry, positions and mask of one (query block, key/value block) pair. */
typedef struct {
    int64_t n_q;           /* query rows in this block (>= 0) */
    int64_t n_kv;          /* key/value rows in this block (>= 0) */
    int h_q, h_kv;         /* heads; h_q a multiple of h_kv */
    int d;                 /* head dim: a positive multiple of 8 (64 and 128 are fast) */
    float scale;           /* softmax scale (usually 1/sqrt(d)); must be finite and > 0 */
    const int64_t *q_pos;  /* [n_q] global positions; may be NULL when mask.flags == 0 */
    const int64_t *kv_pos; /* [n_kv] idem */
    const int32_t *q_seg;  /* [n_q] document ids; read only with BK_ATTN_DOCUMENT */
    const int32_t *kv_seg; /* [n_kv] idem */
    bk_attn_mask mask;
} bk_attn_geom;

/* What a kernel call did, counted per (query head, query tile, key tile). */
typedef struct {
    int tile_q, tile_kv;   /* tile sizes used (rows) */
    int64_t tiles_total;   /* tiles considered */
    int64_t tiles_skipped; /* emptied by the mask: no work at all */
    int64_t tiles_masked;  /* computed with an elementwise mask (mask boundary) */
    int64_t tiles_full;    /* computed with every key allowed */
} bk_attn_stats;

/* Convenience constructors of masks. */
bk_attn_mask bk_attn_mask_none(void);
bk_attn_mask bk_attn_mask_causal(void);
/* Window q - left <= k <= q + right (negative side = unbounded). */
bk_attn_mask bk_attn_mask_window(int64_t left, int64_t right);
/* Same document only; causal != 0 adds the causal condition. */
bk_attn_mask bk_attn_mask_document(int causal);
/* See bk_attn_mask.block_bits for the bit order. */
bk_attn_mask bk_attn_mask_block_sparse(const uint64_t *bits, int64_t block_size, int64_t n_blocks);

/* O [n_q, h_q, d] = 0, lse [n_q, h_q] = -inf: the state before the first block. */
bk_status bk_attn_fwd_init(const bk_queue *q, int64_t n_q, int h_q, int d, float *O, float *lse);

/* Attention of the query rows of g against the key/value rows of g, merged in
 * place into the running (O, lse). stats may be NULL. */
bk_status bk_attn_fwd(const bk_queue *q, const bk_attn_geom *g, const float *Q, const float *K,
                      const float *V, float *O, float *lse, bk_attn_stats *stats);

/* Merges a block's normalised result (O_blk [n_q, h_q, d], lse_blk [n_q, h_q])
 * into the running (O, lse) in place: lse = logaddexp(lse, lse_blk),
 * O = O e^(lse_old - lse) + O_blk e^(lse_blk - lse); two empty sides (-inf)
 * stay O = 0, lse = -inf. For ring steps whose block was computed elsewhere. */
bk_status bk_attn_merge(const bk_queue *q, int64_t n_q, int h_q, int d, float *O, float *lse,
                        const float *O_blk, const float *lse_blk);

/* Turns the running accumulator into the output: O = 0 on rows with lse = -inf
 * (O is otherwise already normalised on this backend). */
bk_status bk_attn_fwd_finalize(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                               const float *lse);

/* delta [n_q, h_q] = rowsum over d of dO * O (the final, normalised O). */
bk_status bk_attn_delta(const bk_queue *q, int64_t n_q, int h_q, int d, const float *dO,
                        const float *O, float *delta);

/* Backward of one block pair: given the final lse and delta of the query rows,
 * adds this pair's contribution to dQ [n_q, h_q, d], dK and dV [n_kv, h_kv, d].
 * stats may be NULL. */
bk_status bk_attn_bwd(const bk_queue *q, const bk_attn_geom *g, const float *Q, const float *K,
                      const float *V, const float *dO, const float *lse, const float *delta,
                      float *dQ, float *dK, float *dV, bk_attn_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
