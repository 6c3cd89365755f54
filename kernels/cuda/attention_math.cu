/* attention_math.cu: compiles the shared attention math for the device, so a
 * CUDA build proves that kernels/attention_math.h stays device-clean. Each
 * shared function is instantiated once in a kernel; nothing launches them. */
#include "kernels/attention_math.h"

__global__ void bk_attn_allowed_kernel(bk_attn_mask m, const int64_t *q_pos, const int64_t *k_pos,
                                       const int32_t *q_seg, const int32_t *k_seg, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = bk_attn_allowed(&m, q_pos[i], k_pos[i], q_seg[i], k_seg[i]) +
                 2 * bk_attn_block_bit(&m, q_pos[i], k_pos[i]);
}

__global__ void bk_attn_online_kernel(float *m2, const float *tile_max, float *alpha, float *off,
                                      float *lse, const float *sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        alpha[i] = bk_attn_online_rescale(&m2[i], tile_max[i]);
        off[i] = bk_attn_exp_offset(m2[i]);
        lse[i] = bk_attn_block_lse(m2[i], sum[i]);
    }
}

__global__ void bk_attn_merge_kernel(float *lse, const float *lse_blk, float *w_old, float *w_blk,
                                     int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) lse[i] = bk_attn_merge_weights(lse[i], lse_blk[i], &w_old[i], &w_blk[i]);
}

__global__ void bk_attn_dscore_kernel(const float *lse, const float *s2, const float *dp,
                                      const float *delta, float scale, float *ds, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float p = exp2f(s2[i] - bk_attn_bwd_offset(lse[i]));
        ds[i] = bk_attn_dscore(p, dp[i], delta[i], scale);
    }
}
