/* ops.h: the transformer's non-attention kernels on one rank: GEMM, RMSNorm,
 * RoPE, SwiGLU, embedding gather / scatter-add, AdamW, gradient norm and
 * clipping, and the chunked cross-entropy of the fused LM head.
 *
 * One interface for both backends: every kernel takes the queue first (where
 * the buffers live, the stream, the thread count) and returns a bk_status; none
 * keeps state between calls (only the built-in GEMM allocates scratch).
 * The CPU backend computes in fp32; the per-element math lives in ops_math.h.
 *
 * Conventions for every function below:
 *   - matrices are row-major; a shape is written [rows, cols] next to the buffer;
 *   - sizes are int64_t and must be >= 0 (size 0: nothing to do, BK_OK);
 *   - buffers must never be NULL, even when a size is 0 (except where a
 *     parameter says "may be NULL");
 *   - invalid arguments return BK_ERR_ARG before anything is written (and abort
 *     in --enable-debug builds); a queue for a location this backend does not
 *     serve returns BK_ERR_UNSUPPORTED. */
#ifndef BURST_KERNELS_OPS_H
#define BURST_KERNELS_OPS_H

#include <stdint.h>

#include "kernels/kernels_common.h"
#include "kernels/ops_math.h" /* bk_clip_scale, bk_adamw_coefs */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- GEMM */
typedef enum { BK_NO_TRANS = 0, BK_TRANS = 1 } bk_transpose;

/* C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C[m, n], row-major.
 * A is stored [m, lda] (lda >= k) when ta = BK_NO_TRANS, [k, lda] (lda >= m)
 * when BK_TRANS; likewise B is [k, ldb >= n] or [n, ldb >= k]; C is
 * [m, ldc >= n]. beta = 0 overwrites C (NaNs in C do not propagate).
 * Uses CBLAS when the build has it, the built-in GEMM otherwise. */
bk_status bk_gemm(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc);
/* The internal cache-blocked OpenMP GEMM, always built. It allocates its packing
 * buffers per call (about 1 MB plus 100 KB per thread) and returns
 * BK_ERR_UNSUPPORTED if that allocation fails. The sum order does not depend on
 * the thread count. */
bk_status bk_gemm_builtin(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float beta, float *c, int64_t ldc);
/* cblas_sgemm; BK_ERR_UNSUPPORTED when the build has no CBLAS or a size does
 * not fit CBLAS's int. Its thread count is the library's, not q->n_threads. */
bk_status bk_gemm_cblas(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                        int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);
/* 1 when bk_gemm goes through CBLAS. */
int bk_gemm_has_cblas(void);

/* ---------------------------------------------------------------- RMSNorm */
/* y[n, d] = x[n, d] * rstd[n] * w[d], rstd = 1 / sqrt(mean_row(x^2) + eps).
 * rstd[n] (may be NULL) keeps the per-row factor for the backward. y may be x. */
bk_status bk_rmsnorm_fwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         float eps, float *y, float *rstd);
/* The same with y16[n, d] = y rounded to bf16 (the same bits as bk_rmsnorm_fwd
 * then bk_round_bf16), for a consumer that reads bf16 only: no fp32 y is
 * written and no rounding pass made. */
bk_status bk_rmsnorm_fwd_bf16(const bk_queue *q, int64_t n, int64_t d, const float *x,
                              const float *w, float eps, uint16_t *y16, float *rstd);
/* dx[n, d] from dy[n, d]; dw[d] += the weight gradient of these n rows (fp32).
 * rstd[n] is the forward's. dx may be dy (not x). */
bk_status bk_rmsnorm_bwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         const float *rstd, const float *dy, float *dx, float *dw);

/* ---------------------------------------------------------------- RoPE */
/* Rotary embedding of x[n, H, d] into out[n, H, d] (out may be x): token r sits
 * at GLOBAL position pos[r]; the pair (x[i], x[i + d/2]) of each head rotates by
 * pos * freq_i, the frequencies theta^(-2i/d) scaled as rope->type says
 * (LLaMA's half-split "rotate_half" pairing and Hugging Face's scalings; see
 * ops_math.h). d must be even and > 0, *rope valid (bk_rope_valid). */
bk_status bk_rope_fwd(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                      const bk_rope *rope, const float *x, float *out);
/* The backward: dx = rotation of dy by the negative angle (times the same
 * scale). dx may be dy. */
bk_status bk_rope_bwd(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                      const bk_rope *rope, const float *dy, float *dx);

/* ---------------------------------------------------------------- SwiGLU */
/* out[rows, cols] = silu(gate) * up. gate and up are rows of cols values with a
 * row stride of ld_in >= cols, so a fused [rows, 2F] GEMM output works:
 * gate = buf, up = buf + F, ld_in = 2F. out is contiguous [rows, cols]. */
bk_status bk_swiglu_fwd(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                        const float *up, int64_t ld_in, float *out);
/* The same with out16[rows, cols] = out rounded to bf16 (bk_swiglu_fwd then
 * bk_round_bf16, to the bit), in one pass. */
bk_status bk_swiglu_fwd_bf16(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                             const float *up, int64_t ld_in, uint16_t *out16);
/* dgate, dup (row stride ld_in, like gate and up) from dout[rows, cols].
 * dgate may be gate and dup may be up (each element is read before written). */
bk_status bk_swiglu_bwd(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                        const float *up, int64_t ld_in, const float *dout, float *dgate,
                        float *dup);

/* ---------------------------------------------------------------- embedding */
/* out[n, D] = table[tokens[r], :]; every token must be in [0, V). */
bk_status bk_embedding_gather(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                              const int64_t *tokens, const float *table, float *out);
/* dtable[V, D] += dout[r, :] at row tokens[r] for every r. Deterministic: the
 * rows are added in order r = 0, 1, ... whatever the thread count (threads own
 * column ranges, so there are no races). */
bk_status bk_embedding_scatter_add(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                   const int64_t *tokens, const float *dout, float *dtable);

/* ---------------------------------------------------------------- AdamW */
typedef struct {
    float lr;           /* >= 0 */
    float beta1, beta2; /* in [0, 1) */
    float eps;          /* >= 0 */
    float weight_decay; /* decoupled, >= 0 */
} bk_adamw_params;

/* One AdamW step (number step >= 1, counting from 1) over n parameters:
 * param[n], m[n], v[n] fp32 updated in place from grad[n] * grad_scale
 * (grad_scale: the clipping factor, 1 for none). */
bk_status bk_adamw_step(const bk_queue *q, int64_t n, float *param, const float *grad, float *m,
                        float *v, const bk_adamw_params *hp, int64_t step, float grad_scale);

/* ---------------------------------------------------------------- gradient norm */
/* *sqnorm = sum over the n_bufs buffers bufs[i][counts[i]] of x^2, accumulated
 * in double in a fixed order (the result does not depend on the thread count). */
bk_status bk_grad_sqnorm(const bk_queue *q, int n_bufs, const float *const *bufs,
                         const int64_t *counts, double *sqnorm);
/* x[n] *= alpha (applies a clipping factor to a buffer in place). */
bk_status bk_scale(const bk_queue *q, int64_t n, float *x, float alpha);
/* The clipping factor min(1, max_norm / sqrt(sqnorm)) is the host/device
 * function bk_clip_scale(double sqnorm, double max_norm) of ops_math.h; pass it
 * to bk_adamw_step as grad_scale, or apply it with bk_scale. */

/* ---------------------------------------------------------------- vectors */
/* What an engine does to whole buffers, written once for either memory: on a
 * device queue the work is queued like any kernel. */
/* x[n] = value. */
bk_status bk_fill(const bk_queue *q, int64_t n, float *x, float value);
/* y[n] += alpha * x[n]; x and y do not overlap. */
bk_status bk_axpy(const bk_queue *q, int64_t n, float alpha, const float *x, float *y);
/* dst [b, a, width] = src [a, b, width] (fp32; dst and src do not overlap):
 * the first two axes swapped, rows of width floats moved whole. With b = U it
 * cuts each of a tokens' heads into U groups, group j of every token
 * together (Ulysses' all-to-all sends group j to member j); swapping back is
 * the same call with a and b exchanged. */
bk_status bk_swap_axes(const bk_queue *q, int64_t a, int64_t b, int64_t width, const float *src,
                       float *dst);
/* dst[bytes] = src[bytes], both in the queue's memory: memmove on the host, a
 * queued device-to-device copy on a device (bk_device_copy; no overlap). */
bk_status bk_copy(const bk_queue *q, void *dst, const void *src, size_t bytes);
/* *p = bytes of the queue's memory (at least one byte, so *p is never NULL
 * on success): zeroed host memory, or device memory, not zeroed (bk_fill it
 * where zeros are needed). With q->arena the memory is a piece of that arena
 * (kernels/arena.h: aligned to BK_ARENA_ALIGN, no call to the runtime),
 * otherwise the runtime's (calloc, bk_device_malloc). BK_ERR_NOMEM when it
 * cannot be had: the runtime refused, or no free piece of the arena holds it. */
bk_status bk_alloc(const bk_queue *q, size_t bytes, void **p);
/* Frees what bk_alloc gave with a queue of the same kind and arena (NULL:
 * nothing); a pointer the arena did not give is BK_ERR_ARG. A device piece
 * given back may be handed out again at once: that is safe for work queued
 * on the same stream, which runs in order, not for a buffer another stream
 * still reads. */
bk_status bk_free(const bk_queue *q, void *p);
/* The bytes the queue's memory holds now, for measuring what a piece of code
 * takes: its arena's pieces in use, or on the host without one the C heap's
 * bytes in use (the whole process's: glibc's mallinfo2, or the sanitizer's
 * allocator under AddressSanitizer); 0 for a device without an arena, whose
 * runtime does not say. */
size_t bk_held_bytes(const bk_queue *q);
/* *p = floats [count] (at least one), every one = value, in the queue's
 * memory (bk_alloc, then bk_fill where the memory is not already value). */
bk_status bk_alloc_floats(const bk_queue *q, int64_t count, float value, float **p);

/* ---------------------------------------------------------------- cross-entropy */
/* Cross-entropy over a chunk of logits[rows, V] (row stride ld >= V), in place:
 *   lse[r]  = log sum_j exp(logits[r, j])                       (fp32, stable)
 *   loss[r] = lse[r] - logits[r, labels[r]] + z_loss * lse[r]^2
 *   logits[r, :] is overwritten by dlogits = scale * (softmax * (1 + 2 z_loss lse) - onehot)
 * with scale given by the caller (e.g. 1 / valid tokens over all ranks).
 * A row whose label is ignore_index gets loss 0, lse 0, dlogits 0 and is not
 * counted; other labels must be in [0, V) (checked before anything is written).
 * lse[rows] and n_valid (number of rows not ignored) may be NULL. */
bk_status bk_cross_entropy_fwd_bwd(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                                   int64_t ld, const int64_t *labels, int64_t ignore_index,
                                   float scale, float z_loss, float *loss, float *lse,
                                   int64_t *n_valid);

/* What a pass of cross-entropy calls over many chunks adds up, kept in the
 * queue's memory so that no call waits for the device: the losses (nats, in
 * double), the rows not ignored, and the labels outside [0, V) that are not
 * ignore_index (their rows treated as ignored; the caller refuses the pass
 * when it reads bad > 0). Plain integers and a double: zero bits are zero. */
typedef struct {
    double loss;
    int64_t valid, bad;
} bk_ce_sums;

/* *sums = 0 in the queue's memory (on a device queued on its stream, with no
 * wait). */
bk_status bk_ce_sums_clear(const bk_queue *q, bk_ce_sums *sums);

/* bk_cross_entropy_fwd_bwd's loss[rows] and dlogits for one chunk of a pass
 * whose sums stay in the queue's memory: adds the chunk's losses (summed in
 * row order in double, then added, as the host sums them) to sums->loss, its
 * rows not ignored to sums->valid, and its bad labels to sums->bad, without
 * waiting; a bad label's row gets loss 0 and dlogits 0. */
bk_status bk_cross_entropy_sum(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                               int64_t ld, const int64_t *labels, int64_t ignore_index, float scale,
                               float z_loss, float *loss, bk_ce_sums *sums);

#ifdef __cplusplus
}
#endif

#endif
