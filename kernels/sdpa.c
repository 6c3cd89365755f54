/* sdpa.c: the entry points of kernels/sdpa.h. The SDPA calls themselves
 * exist only on a device (cuDNN, or the emulator's model of it); the state
 * operations around them (the merge of a block output into the running
 * (O, lse), the packing of Stats, the bf16 gradient added into fp32) have a
 * host implementation too, the slow reference the device's are tested
 * against. */
#include <math.h>
#include <stdio.h>

#include "kernels/bf16.h"
#include "kernels/device_ops.h"
#include "kernels/sdpa.h"

/* The device backend's entry `op`, or NULL. */
#define SDPA_BACKEND(op) (bk_device_backend() != NULL ? bk_device_backend()->op : NULL)

int bk_sdpa_available(char *why, size_t why_len)
{
    if (!SDPA_BACKEND(sdpa_available)) {
        snprintf(why, why_len, "this program has no device backend");
        return 0;
    }
    return bk_device_backend()->sdpa_available(why, why_len);
}

long bk_sdpa_version(void)
{
    return SDPA_BACKEND(sdpa_version) ? bk_device_backend()->sdpa_version() : 0;
}

int bk_sdpa_version_usable(long version, int window, char *why, size_t why_len)
{
    if (version == 91000 || version == 91001) {
        snprintf(why, why_len, "cuDNN %ld has known bugs in the bf16 SDPA backward (9.10.2 fixes them)",
                 version);
        return 0;
    }
    if (version == 91400 && window) {
        snprintf(why, why_len, "cuDNN 9.14.0 has a known bug with sliding windows (9.14.1 fixes it)");
        return 0;
    }
    return 1;
}

bk_status bk_sdpa_prepare(const bk_sdpa_call *calls, int n, int backward, size_t *workspace_bytes)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || calls != NULL) && workspace_bytes != NULL);
    *workspace_bytes = 0;
    if (!SDPA_BACKEND(sdpa_prepare)) return BK_ERR_UNSUPPORTED;
    return bk_device_backend()->sdpa_prepare(calls, n, backward, workspace_bytes);
}

bk_status bk_sdpa_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                      const uint16_t *K, const uint16_t *V, uint16_t *O_blk, float *stats,
                      void *workspace, size_t workspace_bytes)
{
    BK_CHECK_ARG(q != NULL && c != NULL);
    BK_DEVICE_DISPATCH(q, sdpa_fwd, (q, c, Q, K, V, O_blk, stats, workspace, workspace_bytes));
    return BK_ERR_UNSUPPORTED;
}

bk_status bk_sdpa_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                      const uint16_t *K, const uint16_t *V, const uint16_t *O,
                      const uint16_t *dO, const float *stats, uint16_t *dQ, uint16_t *dK,
                      uint16_t *dV, void *workspace, size_t workspace_bytes)
{
    BK_CHECK_ARG(q != NULL && c != NULL);
    BK_DEVICE_DISPATCH(q, sdpa_bwd,
                       (q, c, Q, K, V, O, dO, stats, dQ, dK, dV, workspace, workspace_bytes));
    return BK_ERR_UNSUPPORTED;
}

bk_status bk_attn_merge_sdpa(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q, int d,
                             float *O, float *lse, const uint16_t *O_blk, const float *stats)
{
    BK_CHECK_ARG(q != NULL && c != NULL && d == c->d && d > 0 && c->h_q > 0 &&
                 bk_sdpa_rows_within(c, n_q));
    BK_CHECK_ARG(O != NULL && lse != NULL && O_blk != NULL && stats != NULL);
    BK_DEVICE_DISPATCH(q, attn_merge_sdpa, (q, c, n_q, d, O, lse, O_blk, stats));
    int h = c->h_q;
    int64_t s_q = bk_sdpa_max_q(c);
    for (int k = 0; k < c->n_seq; k++)
        for (int64_t i = 0; i < c->seq[k].q_len; i++)
            for (int hh = 0; hh < h; hh++) {
                int64_t r = (c->seq[k].q_row + i) * h + hh; /* [n_q, h_q] */
                float w_old, w_blk, l_blk = stats[((int64_t)k * h + hh) * s_q + i];
                lse[r] = bk_attn_merge_weights(lse[r], l_blk, &w_old, &w_blk);
                for (int e = 0; e < d; e++)
                    O[r * d + e] = O[r * d + e] * w_old + bk_bf16_to_float(O_blk[r * d + e]) * w_blk;
            }
    return BK_OK;
}

bk_status bk_attn_pack_stats(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q,
                             const float *lse, float *stats)
{
    BK_CHECK_ARG(q != NULL && c != NULL && c->h_q > 0 && bk_sdpa_rows_within(c, n_q));
    BK_CHECK_ARG(lse != NULL && stats != NULL);
    BK_DEVICE_DISPATCH(q, attn_pack_stats, (q, c, n_q, lse, stats));
    int h = c->h_q;
    int64_t s_q = bk_sdpa_max_q(c);
    for (int k = 0; k < c->n_seq; k++)
        for (int hh = 0; hh < h; hh++)
            for (int64_t i = 0; i < s_q; i++)
                stats[((int64_t)k * h + hh) * s_q + i] =
                    i < c->seq[k].q_len ? lse[(c->seq[k].q_row + i) * h + hh] : -INFINITY;
    return BK_OK;
}

bk_status bk_attn_surrogate_o(const bk_queue *q, int64_t n, int h, int d, const uint16_t *dO,
                              const float *delta, uint16_t *O)
{
    BK_CHECK_ARG(q != NULL && n >= 0 && h > 0 && d > 0);
    BK_CHECK_ARG(n == 0 || (dO != NULL && delta != NULL && O != NULL));
    BK_DEVICE_DISPATCH(q, attn_surrogate_o, (q, n, h, d, dO, delta, O));
    for (int64_t r = 0; r < n * h; r++) {
        const uint16_t *g = dO + r * d; /* dO[row, head, :] */
        float w = bk_attn_surrogate_weight(g, d, delta[r]);
        for (int e = 0; e < d; e++) O[r * d + e] = bk_float_to_bf16(w * bk_bf16_to_float(g[e]));
    }
    return BK_OK;
}

bk_status bk_add_bf16(const bk_queue *q, int64_t n, const uint16_t *x, float *y)
{
    BK_CHECK_ARG(q != NULL && n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    BK_DEVICE_DISPATCH(q, add_bf16, (q, n, x, y));
    for (int64_t i = 0; i < n; i++) y[i] += bk_bf16_to_float(x[i]);
    return BK_OK;
}
