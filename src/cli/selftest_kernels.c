/* selftest_kernels.c: quick numeric checks of the kernels for `burst selftest`:
 * the shared logaddexp, and the attention forward (two key blocks merged
 * through the running (O, lse), causal mask, GQA, one fully masked row)
 * against the double-precision reference of kernels/ref/. Well under a
 * millisecond; prints what failed. */
#include <math.h>
#include <stdio.h>

#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/shared_math.h"
#include "src/cli/selftest.h"

enum { ST_NQ = 5, ST_NKV = 9, ST_HQ = 2, ST_HKV = 1, ST_D = 16 };

static int attention_check(void)
{
    float Q[ST_NQ * ST_HQ * ST_D], K[ST_NKV * ST_D], V[ST_NKV * ST_D];
    float O[ST_NQ * ST_HQ * ST_D], lse[ST_NQ * ST_HQ];
    double Or[ST_NQ * ST_HQ * ST_D], lr[ST_NQ * ST_HQ];
    /* query positions out of order, the last one before every key */
    int64_t qp[ST_NQ] = {12, 3, 7, 15, -1}, kp[ST_NKV];
    unsigned s = 12345u;
    for (int i = 0; i < ST_NQ * ST_HQ * ST_D; i++)
        Q[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
    for (int i = 0; i < ST_NKV * ST_D; i++) {
        K[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
        V[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 1023) / 512.0f - 1.0f;
    }
    for (int j = 0; j < ST_NKV; j++) kp[j] = 2 * j; /* zigzag-free but sparse positions */
    const float scale = 0.25f;
    bk_queue q = bk_host_queue();
    q.n_threads = 1;
    int bad = bk_attn_fwd_init(&q, ST_NQ, ST_HQ, ST_D, O, lse) != BK_OK;
    /* two key blocks: rows 0..3 and 4..8, merged in place */
    for (int b = 0; b < 2 && !bad; b++) {
        int j0 = b ? 4 : 0, nkv = b ? ST_NKV - 4 : 4;
        bk_attn_geom g = {
            ST_NQ, nkv, ST_HQ, ST_HKV, ST_D, scale, qp, kp + j0, NULL, NULL, bk_attn_mask_causal()};
        bad = bk_attn_fwd(&q, &g, Q, K + j0 * ST_D, V + j0 * ST_D, O, lse, NULL) != BK_OK;
    }
    if (!bad) bad = bk_attn_fwd_finalize(&q, ST_NQ, ST_HQ, ST_D, O, lse) != BK_OK;
    if (bad) {
        fprintf(stderr, "selftest kernels: attention forward returned an error\n");
        return 1;
    }
    double Qd[ST_NQ * ST_HQ * ST_D], Kd[ST_NKV * ST_D], Vd[ST_NKV * ST_D];
    for (int i = 0; i < ST_NQ * ST_HQ * ST_D; i++) Qd[i] = Q[i];
    for (int i = 0; i < ST_NKV * ST_D; i++) Kd[i] = K[i], Vd[i] = V[i];
    bk_attn_geom whole = {
        ST_NQ, ST_NKV, ST_HQ, ST_HKV, ST_D, scale, qp, kp, NULL, NULL, bk_attn_mask_causal()};
    ref_attn_fwd(&whole, Qd, Kd, Vd, Or, lr);
    int failures = 0;
    for (int r = 0; r < ST_NQ * ST_HQ; r++) {
        if (isinf(lr[r]) ? lse[r] != -INFINITY
                         : !(fabs(lse[r] - lr[r]) <= 1e-5 + 1e-5 * fabs(lr[r]))) {
            fprintf(stderr, "selftest kernels: attention lse[%d] = %g, expected %g\n", r, lse[r],
                    lr[r]);
            failures++;
        }
        for (int c = 0; c < ST_D; c++) {
            double e = Or[r * ST_D + c], x = O[r * ST_D + c];
            if (!(fabs(x - e) <= 2e-5 + 2e-4 * fabs(e))) {
                fprintf(stderr, "selftest kernels: attention O[%d][%d] = %g, expected %g\n", r, c,
                        x, e);
                failures++;
                break;
            }
        }
    }
    return failures ? 1 : 0;
}

int selftest_kernels(void)
{
    int failures = 0;
    float v = bk_logaddexp(logf(2.0f), logf(3.0f));
    if (fabsf(v - logf(5.0f)) > 1e-6f) {
        fprintf(stderr, "selftest kernels: logaddexp(log 2, log 3) = %g, expected %g\n", v,
                logf(5.0f));
        failures++;
    }
    if (bk_logaddexp(-INFINITY, -INFINITY) != -INFINITY) {
        fprintf(stderr, "selftest kernels: logaddexp(-inf, -inf) is not -inf\n");
        failures++;
    }
    failures += attention_check();
    return failures ? 1 : 0;
}
