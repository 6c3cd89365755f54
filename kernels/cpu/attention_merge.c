/* attention_merge.c: the merge of a block's attention result (O_blk, lse_blk)
 * into the running (O, lse), for ring steps whose block result was computed
 * elsewhere (bk_attn_fwd merges its own block as it goes). The weights are
 * attention_math.h's bk_attn_merge_weights, shared with the device. */
#include "kernels/cpu/attention_cpu.h"

bk_status bk_attn_merge(const bk_queue *q, int64_t n_q, int h_q, int d, float *O, float *lse,
                        const float *O_blk, const float *lse_blk)
{
    BK_CHECK_ARG(q != NULL && n_q >= 0 && h_q > 0 && d > 0 && d % 8 == 0);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL && O_blk != NULL && lse_blk != NULL));
    BK_DEVICE_DISPATCH(q, attn_merge, (q, n_q, h_q, d, O, lse, O_blk, lse_blk));
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
#pragma omp parallel for num_threads(bk_attn_threads(q))                                           \
    schedule(static) if (n_q * h_q * d >= 16384)
    for (int64_t r = 0; r < n_q * h_q; r++) {
        float w_old, w_blk;
        lse[r] = bk_attn_merge_weights(lse[r], lse_blk[r], &w_old, &w_blk);
        float *o = O + r * d; /* O[row, head, :] */
        const float *ob = O_blk + r * d;
        for (int c = 0; c < d; c++) o[c] = o[c] * w_old + ob[c] * w_blk;
    }
    return BK_OK;
}
