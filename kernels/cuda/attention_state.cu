/* attention_state.cu: the running attention state on the device, outside the
 * tile kernels: O [n_q, h_q, d] and lse [n_q, h_q] set to (0, -inf), the final
 * O = 0 where lse = -inf, delta [n_q, h_q] = rowsum(dO * O) for the backward,
 * and the merge of a block's (O_blk, lse_blk) into the running (O, lse) with
 * attention_math.h's bk_attn_merge_weights (for ring steps whose block result
 * comes from elsewhere). One warp per (row, head), lanes along d. */
#include "kernels/attention_math.h"
#include "kernels/cuda/dev_common.cuh"

enum { STATE_THREADS = 256 };

/* The (row, head) of the calling warp in a grid-stride loop over rows_heads. */
#define FOR_EACH_ROW_WARP(i, rows_heads)                                                           \
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; i < (rows_heads);      \
         i += (int64_t)gridDim.x * blockDim.x / 32)

__global__ void bk_attn_init_kernel(int64_t rows_heads, int d, float *O, float *lse)
{
    int lane = (int)threadIdx.x % 32;
    FOR_EACH_ROW_WARP(i, rows_heads)
    {
        for (int c = lane; c < d; c += 32) O[i * d + c] = 0.0f;
        if (lane == 0) lse[i] = -INFINITY;
    }
}

__global__ void bk_attn_finalize_kernel(int64_t rows_heads, int d, float *O, const float *lse)
{
    int lane = (int)threadIdx.x % 32;
    FOR_EACH_ROW_WARP(i, rows_heads)
    {
        if (lse[i] == -INFINITY)
            for (int c = lane; c < d; c += 32) O[i * d + c] = 0.0f;
    }
}

__global__ void bk_attn_delta_kernel(int64_t rows_heads, int d, const float *dO, const float *O,
                                     float *delta)
{
    int lane = (int)threadIdx.x % 32;
    FOR_EACH_ROW_WARP(i, rows_heads)
    {
        float acc = 0.0f;
        for (int c = lane; c < d; c += 32) acc += dO[i * d + c] * O[i * d + c];
        acc = bk_warp_sum(acc);
        if (lane == 0) delta[i] = acc;
    }
}

__global__ void bk_attn_merge_kernel(int64_t rows_heads, int d, float *O, float *lse,
                                     const float *O_blk, const float *lse_blk)
{
    int lane = (int)threadIdx.x % 32;
    FOR_EACH_ROW_WARP(i, rows_heads)
    {
        float w_old, w_blk;
        float l = bk_attn_merge_weights(lse[i], lse_blk[i], &w_old, &w_blk);
        for (int c = lane; c < d; c += 32)
            O[i * d + c] = O[i * d + c] * w_old + O_blk[i * d + c] * w_blk;
        __syncwarp();
        if (lane == 0) lse[i] = l;
    }
}

static unsigned warp_blocks(int64_t rows_heads)
{
    return bk_grid_for(rows_heads * 32, STATE_THREADS);
}

#define STATE_CHECKS(q, n_q, h_q, d)                                                               \
    BK_CHECK_ARG((q) != NULL && (n_q) >= 0 && (h_q) > 0 && (d) > 0 && (d) % 8 == 0)

extern "C" bk_status BK_DEV_FN(attn_fwd_init)(const bk_queue *q, int64_t n_q, int h_q, int d,
                                              float *O, float *lse)
{
    STATE_CHECKS(q, n_q, h_q, d);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL));
    BK_DEV_PTRS(O, lse);
    if (n_q == 0) return BK_OK;
    int64_t rh = n_q * h_q;
    BK_FOOTPRINT(0, rh * (d + 1) * sizeof(float)); /* O and lse */
    return BK_LAUNCH(bk_attn_init_kernel, dim3(warp_blocks(rh)), dim3(STATE_THREADS), 0, q->stream,
                     rh, d, O, lse);
}

extern "C" bk_status BK_DEV_FN(attn_fwd_finalize)(const bk_queue *q, int64_t n_q, int h_q, int d,
                                                  float *O, const float *lse)
{
    STATE_CHECKS(q, n_q, h_q, d);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL));
    BK_DEV_PTRS(O, lse);
    if (n_q == 0) return BK_OK;
    int64_t rh = n_q * h_q;
    BK_FOOTPRINT(rh * (d + 1) * sizeof(float), rh * d * sizeof(float));
    return BK_LAUNCH(bk_attn_finalize_kernel, dim3(warp_blocks(rh)), dim3(STATE_THREADS), 0,
                     q->stream, rh, d, O, lse);
}

extern "C" bk_status BK_DEV_FN(attn_delta)(const bk_queue *q, int64_t n_q, int h_q, int d,
                                           const float *dO, const float *O, float *delta)
{
    STATE_CHECKS(q, n_q, h_q, d);
    BK_CHECK_ARG(n_q == 0 || (dO != NULL && O != NULL && delta != NULL));
    BK_DEV_PTRS(dO, O, delta);
    if (n_q == 0) return BK_OK;
    int64_t rh = n_q * h_q;
    BK_FOOTPRINT(2 * rh * d * sizeof(float), rh * sizeof(float));
    return BK_LAUNCH(bk_attn_delta_kernel, dim3(warp_blocks(rh)), dim3(STATE_THREADS), 0, q->stream,
                     rh, d, dO, O, delta);
}

extern "C" bk_status BK_DEV_FN(attn_merge)(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                                           float *lse, const float *O_blk, const float *lse_blk)
{
    STATE_CHECKS(q, n_q, h_q, d);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL && O_blk != NULL && lse_blk != NULL));
    BK_DEV_PTRS(O, lse, O_blk, lse_blk);
    if (n_q == 0) return BK_OK;
    int64_t rh = n_q * h_q;
    /* O, lse and the block's O, lse read; O, lse written */
    BK_FOOTPRINT(2 * rh * (d + 1) * sizeof(float), rh * (d + 1) * sizeof(float));
    return BK_LAUNCH(bk_attn_merge_kernel, dim3(warp_blocks(rh)), dim3(STATE_THREADS), 0, q->stream,
                     rh, d, O, lse, O_blk, lse_blk);
}
