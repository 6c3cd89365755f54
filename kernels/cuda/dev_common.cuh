/* dev_common.cuh: what the device launchers of kernels/cuda/ share: the
 * backend's memory and checking helpers (device_memory.cu, device_checks.cu),
 * the launchers' prototypes (device_table.cu puts them in the table), and
 * warp and block reductions.
 *
 * Names: a launcher is BK_DEV_FN(op), i.e. bk_cuda_op under nvcc and bk_emu_op
 * in the emulator, with C linkage, taking the arguments of the public entry
 * point (kernels/device_ops.h). Kernels are `__global__ void bk_..._kernel`,
 * device helpers `static __device__ __forceinline__`. */
#ifndef BURST_KERNELS_CUDA_DEV_COMMON_CUH
#define BURST_KERNELS_CUDA_DEV_COMMON_CUH

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/cuda/bk_cuda.cuh"
#include "kernels/device_ops.h"

extern "C" {
/* ---------------------------------------------------------------- memory (device_memory.cu) */
int BK_DEV_FN(available)(void);
bk_status BK_DEV_FN(use)(int index, int *count);
bk_status BK_DEV_FN(prepare)(void); /* gemm.cu: cuBLASLt's handle and workspace */
bk_status BK_DEV_FN(mem_info)(size_t *free_bytes, size_t *total_bytes);
/* The most scratch any kernel holds at once (device.h), from the two that
 * take more than a few bytes: norm.cu's and grad_norm.cu's. */
size_t BK_DEV_FN(scratch_bytes)(int64_t rows, int64_t width, int64_t sqnorm_elements);
size_t BK_DEV_FN(rmsnorm_scratch_bytes)(int64_t rows, int64_t width);
size_t BK_DEV_FN(sqnorm_scratch_bytes)(int64_t elements);
bk_status BK_DEV_FN(malloc)(size_t bytes, void **p);
bk_status BK_DEV_FN(free)(void *p);
bk_status BK_DEV_FN(copy)(const bk_queue *q, void *dst, const void *src, size_t bytes, int dir);
bk_status BK_DEV_FN(sync)(const bk_queue *q);
/* bytes of zeros at device memory p, queued on q's stream (cudaMemsetAsync):
 * the host does not wait, where an upload of zeros from the host would. */
bk_status BK_DEV_FN(zero_async)(const bk_queue *q, void *p, size_t bytes);
bk_status BK_DEV_FN(copy_async)(const bk_queue *q, void *dst, const void *src, size_t bytes,
                                int dir);
bk_status BK_DEV_FN(stream_create)(void **stream);
bk_status BK_DEV_FN(stream_destroy)(void *stream);
bk_status BK_DEV_FN(event_create)(void **event);
bk_status BK_DEV_FN(event_destroy)(void *event);
bk_status BK_DEV_FN(event_record)(void *event, const bk_queue *q);
bk_status BK_DEV_FN(stream_wait_event)(const bk_queue *q, void *event);
bk_status BK_DEV_FN(event_sync)(void *event);
int BK_DEV_FN(event_query)(void *event);
bk_status BK_DEV_FN(host_malloc)(size_t bytes, void **p);
bk_status BK_DEV_FN(host_free)(void *p);
void BK_DEV_FN(note_piece)(const void *p, size_t bytes);
void BK_DEV_FN(note_parts)(const void *p, size_t part_bytes, int parts);
void BK_DEV_FN(step_begin)(int64_t step);
void BK_DEV_FN(step_end)(void);
/* Scratch memory ordered on q's stream (freed with scratch_free on the same
 * stream, after the kernels that use it): a piece of q->arena when the queue
 * has one (BK_ERR_NOMEM when none holds it), else the runtime's stream-ordered
 * allocator. A kernel holds at most one piece of scratch at a time. */
bk_status BK_DEV_FN(scratch)(const bk_queue *q, size_t bytes, void **p);
void BK_DEV_FN(scratch_free)(const bk_queue *q, void *p);
/* BK_OK when every non-NULL pointer of ptrs[n] is device memory the kernels
 * can use; BK_ERR_UNSUPPORTED for host memory or without a device. */
bk_status BK_DEV_FN(check_ptrs)(const void *const *ptrs, int n);

/* ---------------------------------------------------------------- checks (device_checks.cu) */
/* *count = how many of v[n] lie outside [lo, hi) and differ from skip (when
 * use_skip); runs on q's stream and waits for the result. */
bk_status BK_DEV_FN(count_outside)(const bk_queue *q, const int64_t *v, int64_t n, int64_t lo,
                                   int64_t hi, int64_t skip, int use_skip, int64_t *count);

/* ---------------------------------------------------------------- the launchers */
bk_status BK_DEV_FN(gemm)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float beta, float *c, int64_t ldc);
bk_status BK_DEV_FN(gemm_bf16)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                               int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                               const uint16_t *b, int64_t ldb, float beta, void *c, bk_dtype c_type,
                               int64_t ldc);
bk_status BK_DEV_FN(rmsnorm_fwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                 const float *w, float eps, float *y, float *rstd);
bk_status BK_DEV_FN(rmsnorm_fwd_bf16)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                      const float *w, float eps, uint16_t *y16, float *rstd);
bk_status BK_DEV_FN(rmsnorm_bwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                 const float *w, const float *rstd, const float *dy, float *dx,
                                 float *dw);
bk_status BK_DEV_FN(rope)(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                          bk_rope rope, const float *x, float *out, float sign);
bk_status BK_DEV_FN(swiglu_fwd)(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                                const float *up, int64_t ld_in, float *out);
bk_status BK_DEV_FN(swiglu_fwd_bf16)(const bk_queue *q, int64_t rows, int64_t cols,
                                     const float *gate, const float *up, int64_t ld_in,
                                     uint16_t *out16);
bk_status BK_DEV_FN(swiglu_bwd)(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                                const float *up, int64_t ld_in, const float *dout, float *dgate,
                                float *dup);
bk_status BK_DEV_FN(embedding_gather)(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                      const int64_t *tokens, const float *table, float *out);
bk_status BK_DEV_FN(embedding_scatter_add)(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                           const int64_t *tokens, const float *dout, float *dtable);
bk_status BK_DEV_FN(adamw_step)(const bk_queue *q, int64_t n, float *param, const float *grad,
                                float *m, float *v, const bk_adamw_params *hp, int64_t step,
                                float grad_scale, uint16_t *param_bf16);
bk_status BK_DEV_FN(grad_sqnorm)(const bk_queue *q, int n_bufs, const float *const *bufs,
                                 const int64_t *counts, double *sqnorm);
bk_status BK_DEV_FN(scale)(const bk_queue *q, int64_t n, float *x, float alpha);
bk_status BK_DEV_FN(fill)(const bk_queue *q, int64_t n, float *x, float value);
bk_status BK_DEV_FN(axpy)(const bk_queue *q, int64_t n, float alpha, const float *x, float *y);
bk_status BK_DEV_FN(swap_axes)(const bk_queue *q, int64_t a, int64_t b, int64_t width,
                               const float *src, float *dst);
bk_status BK_DEV_FN(round_bf16)(const bk_queue *q, int64_t n, const float *x, uint16_t *y);
bk_status BK_DEV_FN(widen_bf16)(const bk_queue *q, int64_t n, const uint16_t *x, float *y);
bk_status BK_DEV_FN(round_bf16_keep)(const bk_queue *q, int64_t n, float *x, uint16_t *y);
bk_status BK_DEV_FN(cross_entropy)(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                                   int64_t ld, const int64_t *labels, int64_t ignore_index,
                                   float scale, float z_loss, float *loss, float *lse,
                                   int64_t *n_valid);
bk_status BK_DEV_FN(ce_sums_clear)(const bk_queue *q, bk_ce_sums *sums);
bk_status BK_DEV_FN(cross_entropy_sum)(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                                       int64_t ld, const int64_t *labels, int64_t ignore_index,
                                       float scale, float z_loss, float *loss, bk_ce_sums *sums);
bk_status BK_DEV_FN(attn_fwd_init)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                                   float *lse);
bk_status BK_DEV_FN(attn_fwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q,
                              const void *K, const void *V, bk_dtype in_type, float *O, float *lse,
                              bk_attn_stats *stats);
bk_status BK_DEV_FN(attn_fwd_finalize)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                                       const float *lse);
bk_status BK_DEV_FN(attn_delta)(const bk_queue *q, int64_t n_q, int h_q, int d, const float *dO,
                                const float *O, float *delta);
bk_status BK_DEV_FN(attn_bwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q,
                              const void *K, const void *V, const void *dO, bk_dtype in_type,
                              const float *lse, const float *delta, float *dQ, float *dK, float *dV,
                              bk_attn_stats *stats);
bk_status BK_DEV_FN(attn_merge)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                                float *lse, const float *O_blk, const float *lse_blk);
/* sdpa_state.cu */
bk_status BK_DEV_FN(attn_merge_sdpa)(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q, int d,
                                     float *O, float *lse, const uint16_t *O_blk,
                                     const float *stats);
bk_status BK_DEV_FN(attn_pack_stats)(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q,
                                     const float *lse, float *stats);
bk_status BK_DEV_FN(attn_surrogate_o)(const bk_queue *q, int64_t n, int h, int d,
                                      const uint16_t *dO, const float *delta, uint16_t *O);
bk_status BK_DEV_FN(add_bf16)(const bk_queue *q, int64_t n, const uint16_t *x, float *y);
#ifdef BK_EMULATOR
/* the emulator's model of cuDNN's SDPA (emu/cudnn/sdpa_model.cu) */
BK_SDPA_DECLARE(bk_emu_sdpa)
#endif
}

#ifdef BK_EMULATOR
namespace bk_emu
{
/* Prints "emu: CALL N bytes" on stderr under BK_EMU_TRACE_ALLOC=1
 * (device_memory.cu): how the tests see which calls allocate. */
void trace_alloc(const char *call, size_t bytes);
/* BK_OK when dst and src agree with the copy's direction (BK_COPY_*) and hold
 * its bytes; else BK_ERR_DEVICE with call's failure and what each pointer is
 * kept for bk_kernel_error (device_memory.cu). */
bk_status check_copy(const char *call, void *dst, const void *src, size_t bytes, int dir);
/* 0 when no live allocation's red zone was written; else -1 with call's
 * failure kept for bk_kernel_error (at every synchronisation). */
int red_zones_intact(const char *call);
} // namespace bk_emu
#endif

/* Returns from the launcher unless every listed pointer is usable device memory. */
#define BK_DEV_PTRS(...)                                                                           \
    do {                                                                                           \
        const void *bk_ptrs_[] = {__VA_ARGS__};                                                    \
        bk_status bk_st_ =                                                                         \
            BK_DEV_FN(check_ptrs)(bk_ptrs_, (int)(sizeof bk_ptrs_ / sizeof bk_ptrs_[0]));          \
        if (bk_st_ != BK_OK) return bk_st_;                                                        \
    } while (0)

/* The most blocks a grid-stride kernel is launched with: more than a GPU
 * runs at once, and the loops take the rest. In the emulator BK_EMU_GRID_CAP
 * (a positive number) lowers it, so that a test's small sizes wrap the loops
 * as a 1M-token sequence's sizes do on a GPU. */
static inline int64_t bk_grid_cap(void)
{
    int64_t cap = 65535;
#ifdef BK_EMULATOR
    static int64_t lowered = -1; /* read once: 0 when not set */
    if (lowered < 0) {
        const char *env = getenv("BK_EMU_GRID_CAP");
        long v = env != NULL ? strtol(env, NULL, 10) : 0;
        lowered = v > 0 && v < cap ? v : 0;
    }
    if (lowered > 0) cap = lowered;
#endif
    return cap;
}

/* Blocks for a grid-stride loop over `units` (rows, blocks of items): one
 * each, at least one, at most bk_grid_cap(). */
static inline unsigned bk_blocks_for(int64_t units)
{
    int64_t cap = bk_grid_cap();
    return (unsigned)(units < 1 ? 1 : (units > cap ? cap : units));
}

/* Blocks for a grid-stride loop over n items with `threads` per block. */
static inline unsigned bk_grid_for(int64_t n, int threads)
{
    return bk_blocks_for((n + threads - 1) / threads);
}

/* ---------------------------------------------------------------- reductions */
static __device__ __forceinline__ float bk_warp_sum(float v)
{
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double bk_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* max as the CPU kernels take it: a > b ? a : b */
static __device__ __forceinline__ float bk_warp_max(float v)
{
    for (int o = 16; o > 0; o /= 2) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Sum (is_max = 0) or max (is_max = 1) of v over the block, returned to every
 * thread. blockDim.x is a multiple of 32; red holds 32 floats of shared memory
 * and may be reused as soon as this returns. */
static __device__ __forceinline__ float bk_block_reduce(float v, BK_SPTR(float) red, int is_max)
{
    int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    int n_warps = (int)blockDim.x / 32;
    v = is_max ? bk_warp_max(v) : bk_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < n_warps ? red[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? bk_warp_max(w) : bk_warp_sum(w);
        if (lane == 0) red[0] = w;
    }
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}

static __device__ __forceinline__ double bk_block_sum_d(double v, BK_SPTR(double) red)
{
    int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    int n_warps = (int)blockDim.x / 32;
    v = bk_warp_sum_d(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < n_warps ? red[lane] : 0.0;
        w = bk_warp_sum_d(w);
        if (lane == 0) red[0] = w;
    }
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}

/* A kernel's result element stored as its output type: fp32 as it is, bf16
 * rounded (bk_float_to_bf16, as bk_round_bf16 rounds), so one template
 * serves a kernel's fp32 output and the bf16 operand a product reads. */
static __device__ __forceinline__ void bk_store_elem(float *p, float v)
{
    *p = v;
}
static __device__ __forceinline__ void bk_store_elem(uint16_t *p, float v)
{
    *p = bk_float_to_bf16(v);
}

#endif
