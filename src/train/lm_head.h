/* lm_head.h: the LM head fused with the cross-entropy loss, chunked along the
 * sequence, so the [n, V] logits are never materialised: for each chunk of
 * tokens, logits = h W^T, per-row fp32 lse and loss, dlogits = softmax -
 * onehot (times scale) in place, then dh = dlogits W and dW += dlogits^T h,
 * all during the forward. A reference path materialises all logits at once;
 * tests check the two agree.
 *
 * Every call adds its losses, its rows not ignored and its bad labels to a
 * bk_ce_sums in the queue's memory: a pass clears it (bk_ce_sums_clear),
 * makes its calls and reads it once (lm_head_sums_read), so that on a device
 * no chunk waits for the host. */
#ifndef BURST_LM_HEAD_H
#define BURST_LM_HEAD_H

#include <stdint.h>

#include "kernels/kernels_common.h"
#include "kernels/ops.h" /* bk_ce_sums */

typedef struct {
    int64_t chunk_tokens; /* rows of logits alive at once (fused path) */
    float z_loss;         /* coefficient of lse^2 (0 = off) */
    int64_t ignore_index; /* label of rows that do not count */
} lm_head_opts;

/* h [n, D] (final-normed hidden states), W [V, D] (one row per vocabulary
 * entry: the tied embedding's layout), labels [n]. scale multiplies every
 * gradient (1 / valid tokens over all ranks, known before the call). Adds the
 * sum of per-row losses of valid rows (unscaled, including z-loss) to
 * sums->loss and their count to sums->valid; writes dh [n, D]; adds to dW
 * [V, D] (fp32). scratch holds lm_head_scratch_floats() floats. */
bk_status lm_head_fused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                        const float *h, const float *W, const int64_t *labels, float scale,
                        bk_ce_sums *sums, float *dh, float *dW, float *scratch);
size_t lm_head_scratch_floats(const lm_head_opts *o, int64_t V);

/* The same with the weight in bf16, W16 [V, D] (bf16 parameters): the three
 * products run on bf16 operands through bk_gemm_bf16 (h and dlogits rounded
 * as they enter, fp32 accumulation and results), all else as lm_head_fused.
 * scratch holds lm_head_bf16_scratch_floats() floats. */
bk_status lm_head_fused_bf16(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                             int64_t V, const float *h, const uint16_t *W16, const int64_t *labels,
                             float scale, bk_ce_sums *sums, float *dh, float *dW, float *scratch);
size_t lm_head_bf16_scratch_floats(const lm_head_opts *o, int64_t V, int64_t D);

/* The loss alone (evaluation), with W [V, D] or W16 (the other NULL): the
 * losses lm_head_fused or lm_head_fused_bf16 would give, added to *sums,
 * with no gradient computed; with row_loss, each row's loss (0 for ignored
 * rows) into row_loss [n] on the host (on a device a wait per chunk). scratch
 * as the fused call of the same weight type takes. */
bk_status lm_head_loss(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                       const float *h, const float *W, const uint16_t *W16, const int64_t *labels,
                       bk_ce_sums *sums, float *row_loss, float *scratch);

/* The reference: the same results with all [n, V] logits in memory at once. */
bk_status lm_head_unfused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                          const float *h, const float *W, const int64_t *labels, float scale,
                          bk_ce_sums *sums, float *dh, float *dW);

/* A pass's sums on the host: *loss_sum += sums->loss, *n_valid +=
 * sums->valid; BK_ERR_ARG, adding nothing, when a label was outside [0, V)
 * and not ignore_index. On a device the host waits for the pass here. */
bk_status lm_head_sums_read(const bk_queue *q, const bk_ce_sums *sums, double *loss_sum,
                            int64_t *n_valid);

#endif
