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
 * On a device queue h, W, labels, dh, dW and the scratch are device memory;
 * each chunk's losses come back to the host for the sum (the host waits for
 * the chunk) through a buffer on the stack, LOSS_PIECE_ROWS rows at a time,
 * so that a step allocates nothing per chunk; the labels are checked by the
 * cross-entropy kernel chunk by chunk, so a bad label in a late chunk is
 * found after the earlier chunks added to dW (the trainer checks them on the
 * host before they go to the device). The unfused path is the host's slow
 * reference only, and allocates its [n, V] logits at every call. */
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
                            const double *loss_sum, const int64_t *n_valid)
{
    BK_CHECK_ARG(q != NULL && o != NULL);
    if (q->where != BK_HOST && q->where != BK_DEVICE) return BK_ERR_UNSUPPORTED;
    BK_CHECK_ARG(n >= 0 && D > 0 && V > 0);
    BK_CHECK_ARG(o->z_loss >= 0.0f);
    BK_CHECK_ARG(h != NULL && W != NULL && labels != NULL);
    BK_CHECK_ARG(loss_sum != NULL && n_valid != NULL);
    BK_CHECK_ARG(q->where == BK_DEVICE || labels_ok(n, V, labels, o->ignore_index));
    return BK_OK;
}

/* check_args, and the gradients' buffers of the calls that write them. */
static bk_status check_grad_args(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                                 int64_t V, const float *h, const void *W, const int64_t *labels,
                                 const double *loss_sum, const int64_t *n_valid, const float *dh,
                                 const float *dW)
{
    BK_CHECK_ARG(dh != NULL && dW != NULL);
    return check_args(q, o, n, D, V, h, W, labels, loss_sum, n_valid);
}

/* Rows of device losses copied to the host at once, into a buffer on the
 * stack (4 KiB): the default chunk (1024 tokens) comes back in one copy, a
 * larger one in several, the first of which waits for the chunk's kernels. */
enum { LOSS_PIECE_ROWS = 1024 };

/* *loss_sum += loss[0] + ... + loss[rows - 1] in double, in row order
 * (ignored rows are 0); device losses are copied to the host first, piece
 * by piece, without allocating; with row_loss, each row's loss there too. */
static bk_status add_losses(const bk_queue *q, int64_t rows, const float *loss, double *loss_sum,
                            float *row_loss)
{
    float piece[LOSS_PIECE_ROWS];
    double s = 0.0;
    for (int64_t r0 = 0; r0 < rows; r0 += LOSS_PIECE_ROWS) {
        int64_t n = rows - r0 < LOSS_PIECE_ROWS ? rows - r0 : LOSS_PIECE_ROWS;
        const float *seen = loss + r0;
        if (q->where == BK_DEVICE) {
            bk_status st = bk_device_download(q, piece, seen, (size_t)n * sizeof(float));
            if (st != BK_OK) return st;
            seen = piece;
        }
        for (int64_t r = 0; r < n; r++) s += (double)seen[r];
        if (row_loss) memcpy(row_loss + r0, seen, (size_t)n * sizeof(float));
    }
    *loss_sum += s;
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

/* One block of `rows` tokens starting at h, labels, dh: logits into `logits`
 * [rows, V], per-row losses into `loss` [rows] (and row_loss on the host when
 * given). Adds to *loss_sum, *n_valid and dW; without dh, the loss alone. */
static bk_status head_block(const bk_queue *q, const lm_head_opts *o, int64_t rows, int64_t D,
                            int64_t V, const float *h, const head_weight *w, const int64_t *labels,
                            float scale, double *loss_sum, int64_t *n_valid, float *dh, float *dW,
                            float *logits, float *loss, float *row_loss)
{
    operand hx, dl;
    bk_status st = as_operand(q, w, h, rows * D, w->h16, &hx);
    /* logits[rows, V] = h[rows, D] W[V, D]^T */
    if (st == BK_OK)
        st = product(q, BK_NO_TRANS, BK_TRANS, rows, V, D, hx, D, w->W, D, 0.0f, logits, V);
    if (st != BK_OK) return st;
    int64_t valid = 0;
    st = bk_cross_entropy_fwd_bwd(q, rows, V, logits, V, labels, o->ignore_index, scale, o->z_loss,
                                  loss, NULL, &valid);
    if (st != BK_OK) return st;
    st = add_losses(q, rows, loss, loss_sum, row_loss);
    if (st != BK_OK) return st;
    *n_valid += valid;
    if (!dh) return BK_OK; /* the loss alone */
    if (valid == 0) {
        /* Every row ignored: dlogits is 0, so dh is 0 and dW does not change;
         * skip the GEMMs (and never multiply 0 by a non-finite h). */
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
                              const int64_t *labels, float scale, double *loss_sum,
                              int64_t *n_valid, float *dh, float *dW, float *scratch,
                              float *row_loss)
{
    int64_t chunk = o->chunk_tokens;
    float *logits = scratch;                           /* [chunk, V] */
    float *loss = scratch + (size_t)chunk * (size_t)V; /* [chunk] */
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        int64_t rows = n - r0 < chunk ? n - r0 : chunk;
        bk_status st =
            head_block(q, o, rows, D, V, h + r0 * D, w, labels + r0, scale, loss_sum, n_valid,
                       dh ? dh + r0 * D : NULL, dW, logits, loss, row_loss ? row_loss + r0 : NULL);
        if (st != BK_OK) return st;
    }
    return BK_OK;
}

bk_status lm_head_fused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                        const float *h, const float *W, const int64_t *labels, float scale,
                        double *loss_sum, int64_t *n_valid, float *dh, float *dW, float *scratch)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W, labels, loss_sum, n_valid, dh, dW);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && lm_head_scratch_floats(o, V) > 0);
    head_weight w = {.W = {W, NULL}};
    return fused_chunks(q, o, n, D, V, h, &w, labels, scale, loss_sum, n_valid, dh, dW, scratch,
                        NULL);
}

bk_status lm_head_fused_bf16(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D,
                             int64_t V, const float *h, const uint16_t *W16, const int64_t *labels,
                             float scale, double *loss_sum, int64_t *n_valid, float *dh, float *dW,
                             float *scratch)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W16, labels, loss_sum, n_valid, dh, dW);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && lm_head_bf16_scratch_floats(o, V, D) > 0);
    head_weight w = bf16_weight(o, V, W16, scratch);
    return fused_chunks(q, o, n, D, V, h, &w, labels, scale, loss_sum, n_valid, dh, dW, scratch,
                        NULL);
}

bk_status lm_head_loss(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                       const float *h, const float *W, const uint16_t *W16, const int64_t *labels,
                       double *loss_sum, int64_t *n_valid, float *row_loss, float *scratch)
{
    const void *weight = W16 ? (const void *)W16 : (const void *)W;
    bk_status st = check_args(q, o, n, D, V, h, weight, labels, loss_sum, n_valid);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(scratch != NULL && (W == NULL) != (W16 == NULL));
    BK_CHECK_ARG(W16 ? lm_head_bf16_scratch_floats(o, V, D) > 0 : lm_head_scratch_floats(o, V) > 0);
    head_weight w = W16 ? bf16_weight(o, V, W16, scratch) : (head_weight){.W = {W, NULL}};
    return fused_chunks(q, o, n, D, V, h, &w, labels, 0.0f, loss_sum, n_valid, NULL, NULL, scratch,
                        row_loss);
}

bk_status lm_head_unfused(const bk_queue *q, const lm_head_opts *o, int64_t n, int64_t D, int64_t V,
                          const float *h, const float *W, const int64_t *labels, float scale,
                          double *loss_sum, int64_t *n_valid, float *dh, float *dW)
{
    bk_status st = check_grad_args(q, o, n, D, V, h, W, labels, loss_sum, n_valid, dh, dW);
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
    st = head_block(q, o, n, D, V, h, &w, labels, scale, loss_sum, n_valid, dh, dW, logits, loss,
                    NULL);
    free(logits);
    free(loss);
    return st;
}
