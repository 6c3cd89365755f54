/* lm_head.c: see lm_head.h. The LM head and the cross-entropy in one pass over
 * chunks of tokens: per chunk of c rows,
 *   logits[c, V] = h[c, D] W^T          (scratch, the only logits alive)
 *   dlogits[c, V] in place               (bk_cross_entropy_fwd_bwd, times scale)
 *   dh[c, D]  = dlogits W
 *   dW[V, D] += dlogits^T h[c, D]
 * Scratch layout: logits [chunk_tokens, V], then the per-row losses
 * [chunk_tokens]. The loss sum is accumulated in double, in row order, so the
 * fused and unfused paths report the same sum.
 *
 * With W in bf16 (lm_head_fused_bf16) the three products run on bf16
 * operands, h and dlogits rounded as they enter into the scratch, after the
 * losses: dlogits16 [chunk_tokens, V], then h16 [chunk_tokens, D], each
 * 256-byte aligned; the logits, the cross-entropy and every accumulation
 * stay fp32.
 *
 * The losses, the valid rows and the bad labels add up in a bk_ce_sums in
 * the queue's memory (bk_cross_entropy_sum), which the caller clears before
 * a pass and reads after it (lm_head_sums_read): on a device queue h, W,
 * labels, dh, dW, the scratch and the sums are device memory, and no chunk
 * waits for the device; the pass's one wait is the read. A bad label there
 * is found when the sums are read, after the chunks added to dW (the trainer
 * checks the labels on the host before they go to the device); on the host
 * the labels are checked before anything is written. The unfused path is
 * the host's slow reference only, and allocates its [n, V] logits at every
 * call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/train/lm_head.h"

/* Every label is ignore_index or in [0, V). Checked over all n rows before
 * anything is written, so a bad label in a late chunk leaves dh and dW alone. */
static int labels_ok(int64_t n, int64_t V, const int64_t *labels, int64_t ignore_index)
{
    for (int64_t r = 0; r < n; r++)
        if (labels[r] != ignore_index && (labels[r] < 0 || labels[r] >= V)) return 0;
    return 1;
}

/* Arguments common to both paths. */
static bk_status check_args(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                            int64_t V, const float *h, const void *W, const int64_t *labels,
                            const bk_ce_sums *sums)
{
    BK_CHECK_ARG(q != NULL && o != NULL);
    if (q->where != BK_HOST && q->where != BK_DEVICE) return BK_ERR_UNSUPPORTED;
    BK_CHECK_ARG(n >= 0 && D > 0 && V > 0);
    BK_CHECK_ARG(o->z_loss >= 0.0f);
    BK_CHECK_ARG(h != NULL && W != NULL && labels != NULL && sums != NULL);
    BK_CHECK_ARG(q->where == BK_DEVICE || labels_ok(n, V, labels, o->ignore_index));
    return BK_OK;
}

/* check_args, and the gradients' buffers of the calls that write them. */
static bk_status check_grad_args(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                                 int64_t V, const float *h, const void *W, const int64_t *labels,
                                 const bk_ce_sums *sums, const float *dh, const float *dW)
{
    BK_CHECK_ARG(dh != NULL && dW != NULL);
    return check_args(q, o, n, D, V, h, W, labels, sums);
}

bk_status lm_head_sums_read(const bk_queue *q, const bk_ce_sums *sums, double *loss_sum,
                            int64_t *n_valid)
{
    BK_CHECK_ARG(q != NULL && sums != NULL && loss_sum != NULL && n_valid != NULL);
    bk_ce_sums seen;
    if (q->where == BK_DEVICE) {
        bk_status st = bk_device_download(q, &seen, sums, sizeof seen);
        if (st != BK_OK) return st;
    } else {
        seen = *sums;
    }
    BK_CHECK_ARG(seen.bad == 0); /* a label outside [0, V) that is not ignore_index */
    *loss_sum += seen.loss;
    *n_valid += seen.valid;
    return BK_OK;
}

/* row_loss [rows] (host) = the block's per-row losses loss [rows] (the
 * queue's memory); on a device the host waits for the block. */
static bk_status copy_row_losses(const bk_queue *q, int64_t rows, const float *loss,
                                 float *row_loss)
{
    size_t bytes = (size_t)rows * sizeof(float);
    if (q->where == BK_DEVICE) return bk_device_download(q, row_loss, loss, bytes);
    memcpy(row_loss, loss, bytes);
    return BK_OK;
}

/* One operand of the head's products: fp32, or bf16 when bf16 is set. */
typedef struct {
    const float *f32;
    const uint16_t *bf16;
} operand;

/* The head's weight W [V, D], and with a bf16 W the scratch its products'
 * other operands are rounded into: h16 [chunk, D], dlogits16 [chunk, V]. */
typedef struct {
    operand W;
    uint16_t *h16, *dlogits16;
} head_weight;

/* c[m, n] = op(a) op(b) + beta c, fp32 results; on bf16 operands when a is
 * (then b is too): fp32 accumulation through bk_gemm_bf16. */
static bk_status product(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                         int64_t k, operand a, int64_t lda, operand b, int64_t ldb, float beta,
                         float *c, int64_t ldc)
{
    if (a.bf16)
        return bk_gemm_bf16(q, ta, tb, m, n, k, 1.0f, a.bf16, lda, b.bf16, ldb, beta, c, BK_F32,
                            ldc);
    return bk_gemm(q, ta, tb, m, n, k, 1.0f, a.f32, lda, b.f32, ldb, beta, c, ldc);
}

/* x [count] as an operand of w's products: itself, or rounded into to. */
static bk_status as_operand(const bk_queue *q, const head_weight *w, const float *x, int64_t count,
                            uint16_t *to, operand *out)
{
    *out = (operand){x, NULL};
    if (!w->W.bf16) return BK_OK;
    out->bf16 = to;
    return bk_round_bf16(q, count, x, to);
}

/* Whether the block's rows are all ignored, where the host knows it without
 * waiting (a host queue, whose sums it reads; valid_before is sums->valid
 * before the block); on a device never, and the products run on every block
 * (an ignored row's dlogits are 0, so it adds 0 unless its h is not finite,
 * in which case the step's gradient norm is not finite either). */
static int all_ignored(const bk_queue *q, const bk_ce_sums *sums, int64_t valid_before)
{
    return q->where == BK_HOST && sums->valid == valid_before;
}

/* One block of `rows` tokens starting at h, labels, dh: logits into `logits`
 * [rows, V], per-row losses into `loss` [rows] (and row_loss on the host when
 * given). Adds to *sums and dW; without dh, the loss alone. */
static bk_status head_block(const bk_queue *q, const lm_head_opts *o, int64_t rows, int64_t D,
                            int64_t V, const float *h, const head_weight *w, const int64_t *labels,
                            float scale, bk_ce_sums *sums, float *dh, float *dW, float *logits,
                            float *loss, float *row_loss)
{
    operand hx, dl;
    bk_status st = as_operand(q, w, h, rows * D, w->h16, &hx);
    /* logits[rows, V] = h[rows, D] W[V, D]^T */
    if (st == BK_OK)
        st = product(q, BK_NO_TRANS, BK_TRANS, rows, V, D, hx, D, w->W, D, 0.0f, logits, V);
    if (st != BK_OK) return st;
    int64_t valid_before = q->where == BK_HOST ? sums->valid : 0;
    st = bk_cross_entropy_sum(q, rows, V, logits, V, labels, o->ignore_index, scale, o->z_loss,
                              loss, sums);
    if (st == BK_OK && row_loss) st = copy_row_losses(q, rows, loss, row_loss);
    if (st != BK_OK) return st;
    if (!dh) return BK_OK; /* the loss alone */
    if (all_ignored(q, sums, valid_before)) {
        /* dlogits is 0, so dh is 0 and dW does not change: skip the GEMMs
         * (and never multiply 0 by a non-finite h) */
        return bk_fill(q, rows * D, dh, 0.0f);
    }
    st = as_operand(q, w, logits, rows * V, w->dlogits16, &dl);
    /* dh[rows, D] = dlogits[rows, V] W[V, D] */
    if (st == BK_OK)
        st = product(q, BK_NO_TRANS, BK_NO_TRANS, rows, D, V, dl, V, w->W, D, 0.0f, dh, D);
    if (st != BK_OK) return st;
    /* dW[V, D] += dlogits[rows, V]^T h[rows, D] */
    return product(q, BK_TRANS, BK_NO_TRANS, V, D, rows, dl, V, hx, D, 1.0f, dW, D);
}

size_t lm_head_scratch_floats(const lm_head_opts *o, int64_t V)
{
    /* 0 for invalid options or a size that does not fit size_t. */
    if (o == NULL || o->chunk_tokens < 1 || V < 1) return 0;
    size_t c = (size_t)o->chunk_tokens, v = (size_t)V;
    if (c > (SIZE_MAX / sizeof(float)) / (v + 1)) return 0;
    return c * v + c; /* logits [chunk, V] + loss [chunk] */
}

/* The floats of the fp32 scratch rounded up to 64 (256 bytes): where the
 * bf16 operands start, aligned as cuBLASLt's fastest kernels want them. */
static size_t bf16_operands_at(size_t fp32_floats)
{
    return (fp32_floats + 63) / 64 * 64;
}

/* bf16 values of dlogits16 [chunk, V] rounded up to 128 (256 bytes): where
 * h16 starts, aligned alike whatever V is. */
static size_t dlogits16_halves(size_t chunk, size_t V)
{
    return (chunk * V + 127) / 128 * 128;
}

size_t lm_head_bf16_scratch_floats(const lm_head_opts *o, int64_t V, int64_t D)
{
    size_t at = bf16_operands_at(lm_head_scratch_floats(o, V));
    if (at == 0 || D < 1) return 0;
    size_t c = (size_t)o->chunk_tokens, v = (size_t)V, d = (size_t)D;
    if (d > SIZE_MAX / 8 / c) return 0; /* c * (v + d) then fits: c * v < SIZE_MAX / 4 */
    /* dlogits16 [chunk, V] + h16 [chunk, D], two bf16 to a float */
    size_t floats = (dlogits16_halves(c, v) + c * d + 1) / 2;
    if (floats > SIZE_MAX / sizeof(float) - at) return 0;
    return at + floats;
}

/* W16 and the scratch its products' bf16 operands take (after the fp32 part). */
static head_weight bf16_weight(const lm_head_opts *o, int64_t V, const uint16_t *W16,
                               float *scratch)
{
    uint16_t *operands = (uint16_t *)(scratch + bf16_operands_at(lm_head_scratch_floats(o, V)));
    return (head_weight){.W = {NULL, W16},
                         .dlogits16 = operands,
                         .h16 = operands + dlogits16_halves((size_t)o->chunk_tokens, (size_t)V)};
}

/* The fused pass over chunks of tokens, with the weight and its scratch. */
static bk_status fused_chunks(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                              int64_t V, const float *h, const head_weight *w,
                              const int64_t *labels, float scale, bk_ce_sums *sums, float *dh,
                              float *dW, float *scratch, float *row_loss)
{
    int64_t chunk = o->chunk_tokens;
    float *logits = scratch;                           /* [chunk, V] */
    float *loss = scratch + (size_t)chunk * (size_t)V; /* [chunk] */
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        bk_status st =
            head_block(q, o, rows, D, V, h + r0 * D, w, labels + r0, scale, sums,
                       dh ? dh + r0 * D : NULL, dW, logits, loss, row_loss ? row_loss + r0 : NULL);
        if (st != BK_OK) return st;
    }
    return BK_OK;
}

bk_status lm_head_fused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                        const float *h, const float *W, const int64_t *labels, float scale,
                        bk_ce_sums *sums, float *dh, float *dW, float *scratch)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W, labels, sums, dh, dW);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && lm_head_scratch_floats(o, V) > 0);
    head_weight w = {.W = {W, NULL}};
    return fused_chunks(q, o, n, D, V, h, &w, labels, scale, sums, dh, dW, scratch, NULL);
}

bk_status lm_head_fused_bf16(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                             int64_t V, const float *h, const uint16_t *W16, const int64_t *labels,
                             float scale, bk_ce_sums *sums, float *dh, float *dW, float *scratch)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W16, labels, sums, dh, dW);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && lm_head_bf16_scratch_floats(o, V, D) > 0);
    head_weight w = bf16_weight(o, V, W16, scratch);
    return fused_chunks(q, o, n, D, V, h, &w, labels, scale, sums, dh, dW, scratch, NULL);
}

bk_status lm_head_loss(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                       const float *h, const float *W, const uint16_t *W16, const int64_t *labels,
                       bk_ce_sums *sums, float *row_loss, float *scratch)
{
    const void *weight = W16 ? (const void *)W16 : (const void *)W;
    bk_status st = check_args(q, o, n, D, V, h, weight, labels, sums);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && (W == NULL) != (W16 == NULL));
    BK_CHECK_ARG(W16 ? lm_head_bf16_scratch_floats(o, V, D) > 0 : lm_head_scratch_floats(o, V) > 0);
    head_weight w = W16 ? bf16_weight(o, V, W16, scratch) : (head_weight){.W = {W, NULL}};
    return fused_chunks(q, o, n, D, V, h, &w, labels, 0.0f, sums, NULL, NULL, scratch, row_loss);
}

bk_status lm_head_unfused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                          const float *h, const float *W, const int64_t *labels, float scale,
                          bk_ce_sums *sums, float *dh, float *dW)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W, labels, sums, dh, dW);
    if (st != BK_OK) return st;
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED; /* a device uses the fused head */
    if (n == 0) return BK_OK;
    if ((size_t)n > SIZE_MAX / sizeof(float) / ((size_t)V + 1)) return BK_ERR_UNSUPPORTED;
    /* the slow reference: every logit at once, made per call (the memory
     * report counts them as the head logits, a transient of the step) */
    float *logits = malloc((size_t)n * (size_t)V * sizeof(float)); /* [n, V] */
    float *loss = malloc((size_t)n * sizeof(float));               /* [n] */
    if (logits == NULL || loss == NULL) {
        free(logits);
        free(loss);
        return BK_ERR_UNSUPPORTED;
    }
    head_weight w = {.W = {W, NULL}};
    st = head_block(q, o, n, D, V, h, &w, labels, scale, sums, dh, dW, logits, loss, NULL);
    free(logits);
    free(loss);
    return st;
}
