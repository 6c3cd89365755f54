/* sdpa_state.cu: the attention state around a fused SDPA call (kernels/sdpa.h)
 * on the device: a call's bf16 block output and Stats [n_seq, h_q, s_q] merged
 * into the running fp32 (O [n_q, h_q, d], lse [n_q, h_q]) with attention_math.h's
 * bk_attn_merge_weights (the rule of bk_attn_merge); the final lse packed as
 * the backward's Stats; the Q-side backward's surrogate O'; a bf16 gradient
 * added into an fp32 accumulator. One
 * launch per sequence of the call: a ring step has one to a few. The host
 * references are kernels/sdpa.c's. */
#include "kernels/attention_math.h"
#include "kernels/bf16.h"
#include "kernels/cuda/dev_common.cuh"

enum { SDPA_STATE_THREADS = 256 };

/* One warp per (row, head) of a sequence's rows, lanes along d. rows_heads =
 * q_len h: row i, head hh at i h + hh; stats_seq is the sequence's
 * [h, s_q]. */
__global__ void bk_attn_merge_sdpa_kernel(int64_t rows_heads, int h, int d, int64_t s_q,
                                          float *O, float *lse, const uint16_t *O_blk,
                                          const float *stats_seq)
{
    int lane = (int)threadIdx.x % 32;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; r < rows_heads;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        int64_t i = r / h;
        int hh = (int)(r % h);
        float w_old, w_blk;
        float l = bk_attn_merge_weights(lse[r], stats_seq[hh * s_q + i], &w_old, &w_blk);
        for (int c = lane; c < d; c += 32)
            O[r * d + c] = O[r * d + c] * w_old + bk_bf16_to_float(O_blk[r * d + c]) * w_blk;
        __syncwarp();
        if (lane == 0) lse[r] = l;
    }
}

/* stats_seq [h, s_q] = lse [q_len, h] of a sequence's rows, -inf past q_len. */
__global__ void bk_attn_pack_stats_kernel(int64_t q_len, int h, int64_t s_q, const float *lse,
                                          float *stats_seq)
{
    int64_t n = (int64_t)h * s_q;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t hh = t / s_q, i = t % s_q;
        stats_seq[t] = i < q_len ? lse[i * h + hh] : -INFINITY;
    }
}

__global__ void bk_add_bf16_kernel(int64_t n, const uint16_t *x, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bk_bf16_to_float(x[i]);
}

/* One thread per (row, head): O' = bk_attn_surrogate_weight dO. */
__global__ void bk_attn_surrogate_o_kernel(int64_t rows_heads, int d, const uint16_t *dO,
                                           const float *delta, uint16_t *O)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows_heads;
         r += (int64_t)gridDim.x * blockDim.x) {
        const uint16_t *g = dO + r * d;
        float w = bk_attn_surrogate_weight(g, d, delta[r]);
        for (int e = 0; e < d; e++) O[r * d + e] = bk_float_to_bf16(w * bk_bf16_to_float(g[e]));
    }
}

extern "C" bk_status BK_DEV_FN(attn_merge_sdpa)(const bk_queue *q, const bk_sdpa_call *c,
                                                int64_t n_q, int d, float *O, float *lse,
                                                const uint16_t *O_blk, const float *stats)
{
    BK_CHECK_ARG(q != NULL && c != NULL && d == c->d && c->h_q > 0 &&
                 bk_sdpa_rows_within(c, n_q));
    BK_DEV_PTRS(O, lse, O_blk, stats);
    int h = c->h_q;
    int64_t s_q = bk_sdpa_max_q(c);
    for (int k = 0; k < c->n_seq; k++) {
        int64_t row = c->seq[k].q_row, rh = c->seq[k].q_len * h;
        size_t at = (size_t)(row * h);
        /* O, lse read and written; the bf16 block output and Stats read */
        BK_FOOTPRINT(rh * (d + 1) * sizeof(float) + rh * d * 2 + rh * sizeof(float),
                     rh * (d + 1) * sizeof(float));
        bk_status st = BK_LAUNCH(bk_attn_merge_sdpa_kernel,
                                 dim3(bk_grid_for(rh * 32, SDPA_STATE_THREADS)),
                                 dim3(SDPA_STATE_THREADS), 0, q->stream, rh, h, d, s_q,
                                 O + at * (size_t)d, lse + at, O_blk + at * (size_t)d,
                                 stats + (size_t)k * (size_t)h * (size_t)s_q);
        if (st != BK_OK) return st;
    }
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(attn_pack_stats)(const bk_queue *q, const bk_sdpa_call *c,
                                                int64_t n_q, const float *lse, float *stats)
{
    BK_CHECK_ARG(q != NULL && c != NULL && c->h_q > 0 && bk_sdpa_rows_within(c, n_q));
    BK_DEV_PTRS(lse, stats);
    int h = c->h_q;
    int64_t s_q = bk_sdpa_max_q(c);
    for (int k = 0; k < c->n_seq; k++) {
        BK_FOOTPRINT(c->seq[k].q_len * h * sizeof(float), h * s_q * sizeof(float));
        bk_status st = BK_LAUNCH(bk_attn_pack_stats_kernel,
                                 dim3(bk_grid_for(h * s_q, SDPA_STATE_THREADS)),
                                 dim3(SDPA_STATE_THREADS), 0, q->stream, c->seq[k].q_len, h, s_q,
                                 lse + (size_t)(c->seq[k].q_row * h),
                                 stats + (size_t)k * (size_t)h * (size_t)s_q);
        if (st != BK_OK) return st;
    }
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(add_bf16)(const bk_queue *q, int64_t n, const uint16_t *x, float *y)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x, y);
    BK_FOOTPRINT(n * (2 + sizeof(float)), n * sizeof(float));
    return BK_LAUNCH(bk_add_bf16_kernel, dim3(bk_grid_for(n, SDPA_STATE_THREADS)),
                     dim3(SDPA_STATE_THREADS), 0, q->stream, n, x, y);
}

extern "C" bk_status BK_DEV_FN(attn_surrogate_o)(const bk_queue *q, int64_t n, int h, int d,
                                                 const uint16_t *dO, const float *delta,
                                                 uint16_t *O)
{
    BK_CHECK_ARG(q != NULL && n >= 0 && h > 0 && d > 0);
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(dO, delta, O);
    int64_t rh = n * h;
    BK_FOOTPRINT(rh * d * 2 + rh * sizeof(float), rh * d * 2); /* dO, delta; O' */
    return BK_LAUNCH(bk_attn_surrogate_o_kernel, dim3(bk_grid_for(rh, SDPA_STATE_THREADS)),
                     dim3(SDPA_STATE_THREADS), 0, q->stream, rh, d, dO, delta, O);
}
