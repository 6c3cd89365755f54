/* bf16_ops.c: the bf16 entry points of kernels/device.h. A device queue goes
 * to the device backend; on the host they widen the bf16 inputs to fp32 and
 * run the fp32 CPU kernels (bf16 -> fp32 is exact, so the host result is the
 * fp32 kernel's on the same values); bk_widen_bf16 widens, bk_round_bf16
 * rounds the other way. */
#include <stdlib.h>

#include "kernels/bf16.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/ops_cpu.h"

/* x[n] widened to fp32 (malloc'd; never NULL unless out of memory). */
static float *widen(const uint16_t *x, int64_t n)
{
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (y == NULL) return NULL;
    for (int64_t i = 0; i < n; i++) y[i] = bk_bf16_to_float(x[i]);
    return y;
}

/* Elements a row-major matrix of `rows` rows of `cols` values, ld apart, spans. */
static int64_t extent(int64_t rows, int64_t cols, int64_t ld)
{
    return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

static int gemm_bf16_args_ok(bk_transpose ta, bk_transpose tb, int64_t m, int64_t n, int64_t k,
                             const void *a, int64_t lda, const void *b, int64_t ldb, const void *c,
                             bk_dtype c_type, int64_t ldc)
{
    if (m < 0 || n < 0 || k < 0 || a == NULL || b == NULL || c == NULL) return 0;
    if ((ta != BK_NO_TRANS && ta != BK_TRANS) || (tb != BK_NO_TRANS && tb != BK_TRANS)) return 0;
    if (c_type != BK_F32 && c_type != BK_BF16) return 0;
    int64_t a_cols = ta == BK_NO_TRANS ? k : m, b_cols = tb == BK_NO_TRANS ? n : k;
    return lda >= (a_cols > 1 ? a_cols : 1) && ldb >= (b_cols > 1 ? b_cols : 1) &&
           ldc >= (n > 1 ? n : 1);
}

/* C (bf16) = alpha op(A) op(B) + beta C through an fp32 copy of C. */
static bk_status gemm_into_bf16(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                                int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                                const float *b, int64_t ldb, float beta, uint16_t *c, int64_t ldc)
{
    float *cf = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float));
    if (cf == NULL) return BK_ERR_UNSUPPORTED;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            cf[i * n + j] = beta == 0.0f ? 0.0f : bk_bf16_to_float(c[i * ldc + j]);
    bk_status st =
        bk_gemm_builtin(q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cf, n > 0 ? n : 1);
    if (st == BK_OK)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = bk_float_to_bf16(cf[i * n + j]);
    free(cf);
    return st;
}

bk_status bk_gemm_bf16_cpu(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                           int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                           const uint16_t *b, int64_t ldb, float beta, void *c, bk_dtype c_type,
                           int64_t ldc)
{
    BK_CPU_QUEUE_CHECK(q);
    BK_CHECK_ARG(gemm_bf16_args_ok(ta, tb, m, n, k, a, lda, b, ldb, c, c_type, ldc));
    int64_t a_rows = ta == BK_NO_TRANS ? m : k, a_cols = ta == BK_NO_TRANS ? k : m;
    int64_t b_rows = tb == BK_NO_TRANS ? k : n, b_cols = tb == BK_NO_TRANS ? n : k;
    float *af = widen(a, extent(a_rows, a_cols, lda)), *bf = widen(b, extent(b_rows, b_cols, ldb));
    bk_status st = BK_ERR_UNSUPPORTED;
    if (af != NULL && bf != NULL) {
        if (c_type == BK_F32)
            st = bk_gemm_builtin(q, ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);
        else
            st = gemm_into_bf16(q, ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc);
    }
    free(af);
    free(bf);
    return st;
}

bk_status bk_gemm_bf16(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                       int64_t k, float alpha, const uint16_t *a, int64_t lda, const uint16_t *b,
                       int64_t ldb, float beta, void *c, bk_dtype c_type, int64_t ldc)
{
    BK_CPU_OR_DEVICE(q, gemm_bf16,
                     (q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, c_type, ldc));
    return bk_gemm_bf16_cpu(q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, c_type, ldc);
}

bk_status bk_round_bf16(const bk_queue *q, int64_t n, const float *x, uint16_t *y)
{
    BK_CPU_OR_DEVICE(q, round_bf16, (q, n, x, y));
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) y[i] = bk_float_to_bf16(x[i]);
    return BK_OK;
}

bk_status bk_widen_bf16(const bk_queue *q, int64_t n, const uint16_t *x, float *y)
{
    BK_CPU_OR_DEVICE(q, widen_bf16, (q, n, x, y));
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) y[i] = bk_bf16_to_float(x[i]);
    return BK_OK;
}

bk_status bk_round_bf16_keep(const bk_queue *q, int64_t n, float *x, uint16_t *y)
{
    BK_CPU_OR_DEVICE(q, round_bf16_keep, (q, n, x, y));
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) {
        y[i] = bk_float_to_bf16(x[i]);
        x[i] = bk_bf16_to_float(y[i]);
    }
    return BK_OK;
}

bk_status bk_adamw_step_bf16(const bk_queue *q, int64_t n, float *param, const float *grad,
                             float *m, float *v, const bk_adamw_params *hp, int64_t step,
                             float grad_scale, uint16_t *param_bf16)
{
    BK_CPU_OR_DEVICE(q, adamw_step, (q, n, param, grad, m, v, hp, step, grad_scale, param_bf16));
    BK_CHECK_ARG(param_bf16 != NULL);
    bk_status st = bk_adamw_step(q, n, param, grad, m, v, hp, step, grad_scale);
    if (st != BK_OK) return st;
    for (int64_t i = 0; i < n; i++) param_bf16[i] = bk_float_to_bf16(param[i]);
    return BK_OK;
}

/* ---------------------------------------------------------------- attention */

bk_status bk_attn_fwd_bf16(const bk_queue *q, const bk_attn_geom *g, const uint16_t *Q,
                           const uint16_t *K, const uint16_t *V, float *O, float *lse,
                           bk_attn_stats *stats)
{
    BK_CPU_OR_DEVICE(q, attn_fwd, (q, g, Q, K, V, BK_BF16, O, lse, stats));
    bk_status st = bk_attn_check_geom(q, g);
    if (st != BK_OK) return st;
    if (g->n_q > 0) BK_CHECK_ARG(Q != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL);
    int64_t nq = g->n_q * g->h_q * g->d, nk = g->n_kv * g->h_kv * g->d;
    float *Qf = widen(Q, Q ? nq : 0), *Kf = widen(K, K ? nk : 0), *Vf = widen(V, V ? nk : 0);
    st = BK_ERR_UNSUPPORTED;
    if (Qf && Kf && Vf)
        st = bk_attn_fwd(q, g, Q ? Qf : NULL, K ? Kf : NULL, V ? Vf : NULL, O, lse, stats);
    free(Qf), free(Kf), free(Vf);
    return st;
}

bk_status bk_attn_bwd_bf16(const bk_queue *q, const bk_attn_geom *g, const uint16_t *Q,
                           const uint16_t *K, const uint16_t *V, const uint16_t *dO,
                           const float *lse, const float *delta, float *dQ, float *dK, float *dV,
                           bk_attn_stats *stats)
{
    BK_CPU_OR_DEVICE(q, attn_bwd, (q, g, Q, K, V, dO, BK_BF16, lse, delta, dQ, dK, dV, stats));
    bk_status st = bk_attn_check_geom(q, g);
    if (st != BK_OK) return st;
    if (g->n_q > 0) BK_CHECK_ARG(Q != NULL && dO != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL);
    int64_t nq = g->n_q * g->h_q * g->d, nk = g->n_kv * g->h_kv * g->d;
    float *Qf = widen(Q, Q ? nq : 0), *Kf = widen(K, K ? nk : 0), *Vf = widen(V, V ? nk : 0);
    float *dOf = widen(dO, dO ? nq : 0);
    st = BK_ERR_UNSUPPORTED;
    if (Qf && Kf && Vf && dOf)
        st = bk_attn_bwd(q, g, Q ? Qf : NULL, K ? Kf : NULL, V ? Vf : NULL, dO ? dOf : NULL, lse,
                         delta, dQ, dK, dV, stats);
    free(Qf), free(Kf), free(Vf), free(dOf);
    return st;
}
