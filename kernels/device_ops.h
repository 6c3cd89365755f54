/* device_ops.h: the device backend behind BK_DEVICE queues, as a table of
 * functions (internal to kernels/).
 *
 * The entry points of ops.h, attention.h and device.h check the queue first:
 * a BK_DEVICE queue goes to bk_device_backend()'s function of the same name
 * (BK_DEVICE_DISPATCH), or returns BK_ERR_UNSUPPORTED when the program has no
 * device backend. The table is filled by kernels/cuda/device_table.cu, which
 * compiles to bk_cuda_ops with nvcc and to bk_emu_ops for the SIMT emulator;
 * which one bk_device_backend() returns is fixed at link time:
 * kernels/cuda/select_cuda.c (CUDA builds), kernels/device_none.c (others),
 * emu/simt/select_emu.c (linked into the emulator tests). */
#ifndef BURST_KERNELS_DEVICE_OPS_H
#define BURST_KERNELS_DEVICE_OPS_H

#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "kernels/sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Directions of bk_device_ops.copy. Host to device and device to host return
 * once the copy is complete; device to device is only queued. */
enum { BK_COPY_HOST_TO_DEVICE = 0, BK_COPY_DEVICE_TO_HOST = 1, BK_COPY_DEVICE_TO_DEVICE = 2 };

typedef struct bk_device_ops {
    const char *name;
    int (*available)(void);
    bk_status (*use)(int index, int *count);
    bk_status (*prepare)(void);
    bk_status (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    size_t (*scratch_bytes)(int64_t rows, int64_t width, int64_t sqnorm_elements);
    /* memory; dir: a BK_COPY_* direction */
    bk_status (*malloc_)(size_t bytes, void **p);
    bk_status (*free_)(void *p);
    bk_status (*copy)(const bk_queue *q, void *dst, const void *src, size_t bytes, int dir);
    bk_status (*sync)(const bk_queue *q);
    /* streams and events (device.h); copy_async queues a copy in any direction */
    bk_status (*copy_async)(const bk_queue *q, void *dst, const void *src, size_t bytes, int dir);
    bk_status (*stream_create)(void **stream);
    bk_status (*stream_destroy)(void *stream);
    bk_status (*event_create)(void **event);
    bk_status (*event_destroy)(void *event);
    bk_status (*event_record)(void *event, const bk_queue *q);
    bk_status (*stream_wait_event)(const bk_queue *q, void *event);
    bk_status (*event_sync)(void *event);
    int (*event_query)(void *event); /* 1 done, 0 pending, -BK_ERR_* */
    bk_status (*host_malloc)(size_t bytes, void **p); /* page-locked host memory */
    bk_status (*host_free)(void *p);
    void (*note_piece)(const void *p, size_t bytes); /* the arena's pieces (device.h) */
    void (*note_parts)(const void *p, size_t part_bytes, int parts); /* device.h */
    /* the steps' account (device.h) */
    void (*step_begin)(int64_t step);
    void (*step_end)(void);

    /* ops.h */
    bk_status (*gemm)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *c, int64_t ldc);
    bk_status (*gemm_bf16)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                           int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float beta, void *c, bk_dtype c_type,
                           int64_t ldc);
    bk_status (*rmsnorm_fwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                             const float *w, float eps, float *y, float *rstd);
    bk_status (*rmsnorm_fwd_bf16)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                  const float *w, float eps, uint16_t *y16, float *rstd);
    bk_status (*rmsnorm_bwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                             const float *w, const float *rstd, const float *dy, float *dx,
                             float *dw);
    /* sign +1: forward, -1: backward */
    bk_status (*rope)(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                      bk_rope rope, const float *x, float *out, float sign);
    bk_status (*swiglu_fwd)(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                            const float *up, int64_t ld_in, float *out);
    bk_status (*swiglu_fwd_bf16)(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                                 const float *up, int64_t ld_in, uint16_t *out16);
    bk_status (*swiglu_bwd)(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                            const float *up, int64_t ld_in, const float *dout, float *dgate,
                            float *dup);
    bk_status (*embedding_gather)(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                  const int64_t *tokens, const float *table, float *out);
    bk_status (*embedding_scatter_add)(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                       const int64_t *tokens, const float *dout, float *dtable);
    /* param_bf16 may be NULL */
    bk_status (*adamw_step)(const bk_queue *q, int64_t n, float *param, const float *grad, float *m,
                            float *v, const bk_adamw_params *hp, int64_t step, float grad_scale,
                            uint16_t *param_bf16);
    bk_status (*grad_sqnorm)(const bk_queue *q, int n_bufs, const float *const *bufs,
                             const int64_t *counts, double *sqnorm);
    bk_status (*scale)(const bk_queue *q, int64_t n, float *x, float alpha);
    bk_status (*fill)(const bk_queue *q, int64_t n, float *x, float value);
    bk_status (*axpy)(const bk_queue *q, int64_t n, float alpha, const float *x, float *y);
    bk_status (*swap_axes)(const bk_queue *q, int64_t a, int64_t b, int64_t width, const float *src,
                           float *dst);
    bk_status (*round_bf16)(const bk_queue *q, int64_t n, const float *x, uint16_t *y);
    bk_status (*widen_bf16)(const bk_queue *q, int64_t n, const uint16_t *x, float *y);
    bk_status (*round_bf16_keep)(const bk_queue *q, int64_t n, float *x, uint16_t *y);
    bk_status (*cross_entropy)(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                               int64_t ld, const int64_t *labels, int64_t ignore_index, float scale,
                               float z_loss, float *loss, float *lse, int64_t *n_valid);
    bk_status (*ce_sums_clear)(const bk_queue *q, bk_ce_sums *sums);
    bk_status (*cross_entropy_sum)(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                                   int64_t ld, const int64_t *labels, int64_t ignore_index,
                                   float scale, float z_loss, float *loss, bk_ce_sums *sums);

    /* attention.h; in_type is the type of Q, K, V and dO */
    bk_status (*attn_fwd_init)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                               float *lse);
    bk_status (*attn_fwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q, const void *K,
                          const void *V, bk_dtype in_type, float *O, float *lse,
                          bk_attn_stats *stats);
    bk_status (*attn_fwd_finalize)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                                   const float *lse);
    bk_status (*attn_delta)(const bk_queue *q, int64_t n_q, int h_q, int d, const float *dO,
                            const float *O, float *delta);
    bk_status (*attn_bwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q, const void *K,
                          const void *V, const void *dO, bk_dtype in_type, const float *lse,
                          const float *delta, float *dQ, float *dK, float *dV,
                          bk_attn_stats *stats);
    bk_status (*attn_merge)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O, float *lse,
                            const float *O_blk, const float *lse_blk);

    /* sdpa.h: the fused SDPA calls (cuDNN on a CUDA build, the emulator's model
     * of cuDNN) and the state operations around them */
    int (*sdpa_available)(char *why, size_t why_len);
    long (*sdpa_version)(void);
    bk_status (*sdpa_prepare)(const bk_sdpa_call *calls, int n, int backward,
                              size_t *workspace_bytes);
    bk_status (*sdpa_fwd)(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                          const uint16_t *K, const uint16_t *V, uint16_t *O_blk, float *stats,
                          void *workspace, size_t workspace_bytes);
    bk_status (*sdpa_bwd)(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                          const uint16_t *K, const uint16_t *V, const uint16_t *O,
                          const uint16_t *dO, const float *stats, uint16_t *dQ, uint16_t *dK,
                          uint16_t *dV, void *workspace, size_t workspace_bytes);
    bk_status (*attn_merge_sdpa)(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q, int d,
                                 float *O, float *lse, const uint16_t *O_blk, const float *stats);
    bk_status (*attn_pack_stats)(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q,
                                 const float *lse, float *stats);
    bk_status (*attn_surrogate_o)(const bk_queue *q, int64_t n, int h, int d, const uint16_t *dO,
                                  const float *delta, uint16_t *O);
    bk_status (*add_bf16)(const bk_queue *q, int64_t n, const uint16_t *x, float *y);
} bk_device_ops;

/* The device backend of this program, or NULL when it has none. */
const bk_device_ops *bk_device_backend(void);

/* Every BK_ERR_DEVICE of a backend comes from here: records "device error:
 * CALL: DETAIL" (CALL up to its first '(', so that a stringified call gives
 * its name) as the calling thread's bk_kernel_error(), and returns
 * BK_ERR_DEVICE. */
bk_status bk_device_failed(const char *call, const char *detail);

extern const bk_device_ops bk_cuda_ops; /* kernels/cuda/device_table.cu under nvcc */
extern const bk_device_ops bk_emu_ops;  /* the same file for the emulator */

/* The host implementation of bk_gemm_bf16 (kernels/cpu/bf16_ops.c): the
 * inputs widened to fp32, then bk_gemm_builtin; the emulator backend runs it
 * too. */
bk_status bk_gemm_bf16_cpu(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                           int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float beta, void *c, bk_dtype c_type,
                           int64_t ldc);

/* The entry point (bk_*) whose call reached the backend last on this thread,
 * and the address it returns to in its caller: kept as each call begins
 * (BK_DEVICE_DISPATCH, kernels/device.c), so that the emulator's account
 * (emu/simt/simt_account.h) names where a host wait came from. Nothing on a
 * GPU reads it; keeping it is two stores a call. */
typedef struct {
    const char *entry;
    const void *caller;
} bk_device_call;
void bk_device_note_call(const char *entry, const void *caller);
bk_device_call bk_device_last_call(void);
/* In an entry point: notes the call (__func__ and its return address). */
#define BK_DEVICE_NOTE_CALL() bk_device_note_call(__func__, __builtin_return_address(0))

/* In an entry point, after its queue is known not to be NULL: a device queue
 * is served by the backend's function `op` called with `args`. */
#define BK_DEVICE_DISPATCH(q, op, args)                                                            \
    do {                                                                                           \
        if ((q)->where == BK_DEVICE) {                                                             \
            const bk_device_ops *bk_dev_ = bk_device_backend();                                    \
            BK_DEVICE_NOTE_CALL();                                                                 \
            return bk_dev_ != NULL && bk_dev_->op != NULL ? bk_dev_->op args : BK_ERR_UNSUPPORTED; \
        }                                                                                          \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
