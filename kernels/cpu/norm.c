/* norm.c: RMSNorm forward and backward on the CPU (OpenMP over rows, SIMD along
 * a row). The per-element formulas are ops_math.h's, shared with the GPU.
 *
 * The weight gradient is a sum over rows; to keep it deterministic and free of
 * races, the backward computes it in its own pass where each thread owns a
 * range of columns and adds the rows in order, so the result does not depend
 * on the thread count. */
#include <stdlib.h>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/device.h" /* bk_round_bf16 */

/* Below this many elements the OpenMP fork costs more than the work. */
#define NORM_PAR_MIN 16384

bk_status bk_rmsnorm_fwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         float eps, float *y, float *rstd)
{
    BK_CPU_OR_DEVICE(q, rmsnorm_fwd, (q, n, d, x, w, eps, y, rstd));
    BK_CHECK_ARG(n >= 0 && d > 0);
    BK_CHECK_ARG(x != NULL && w != NULL && y != NULL);
    BK_CHECK_ARG(eps >= 0.0f);
    int nt = bk_cpu_threads(q);
#pragma omp parallel for num_threads(nt) schedule(static) if (n * d >= NORM_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d; /* [d] */
        float *yr = y + r * d;       /* [d] */
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t j = 0; j < d; j++) ss += xr[j] * xr[j];
        float rs = bk_rmsnorm_rstd(ss, d, eps);
#pragma omp simd
        for (int64_t j = 0; j < d; j++) yr[j] = bk_rmsnorm_fwd_elem(xr[j], rs, w[j]);
        if (rstd) rstd[r] = rs;
    }
    return BK_OK;
}

/* The host's is the definition: the fp32 norm, rounded (a buffer of n d
 * floats for the call; the device writes bf16 without it). */
bk_status bk_rmsnorm_fwd_bf16(const bk_queue *q, int64_t n, int64_t d, const float *x,
                              const float *w, float eps, uint16_t *y16, float *rstd)
{
    BK_CPU_OR_DEVICE(q, rmsnorm_fwd_bf16, (q, n, d, x, w, eps, y16, rstd));
    BK_CHECK_ARG(n >= 0 && d > 0 && y16 != NULL);
    float *y = malloc((size_t)(n * d) * sizeof *y + 1); /* [n, d] */
    if (!y) return BK_ERR_NOMEM;
    bk_status st = bk_rmsnorm_fwd(q, n, d, x, w, eps, y, rstd);
    if (st == BK_OK) st = bk_round_bf16(q, n * d, y, y16);
    free(y);
    return st;
}

/* Widest column strip of the weight-gradient pass (its accumulator lives on the
 * stack). Strips are as wide as the thread count allows: a narrow strip reads a
 * few bytes from every row, one TLB miss per row. */
#define DW_STRIP_MAX 2048

bk_status bk_rmsnorm_bwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         const float *rstd, const float *dy, float *dx, float *dw)
{
    BK_CPU_OR_DEVICE(q, rmsnorm_bwd, (q, n, d, x, w, rstd, dy, dx, dw));
    BK_CHECK_ARG(n >= 0 && d > 0);
    BK_CHECK_ARG(x != NULL && w != NULL && rstd != NULL && dy != NULL && dx != NULL && dw != NULL);
    int nt = bk_cpu_threads(q);
    int par = n * d >= NORM_PAR_MIN;

    /* Pass 1, dw[d]: before dx, because dx may overwrite dy. The strip width
     * depends on the thread count but the order in which rows add into a
     * column does not: every column sums rows 0, 1, ..., n - 1. */
    int64_t strip = (d + nt - 1) / nt;
    strip = (strip + 15) / 16 * 16;
    if (strip > DW_STRIP_MAX) strip = DW_STRIP_MAX;
    int64_t n_strips = (d + strip - 1) / strip;
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int64_t s = 0; s < n_strips; s++) {
        int64_t j0 = s * strip, j1 = j0 + strip < d ? j0 + strip : d;
        float acc[DW_STRIP_MAX];
        for (int64_t j = 0; j < j1 - j0; j++) acc[j] = 0.0f;
        for (int64_t r = 0; r < n; r++) {
            const float *xr = x + r * d, *dyr = dy + r * d; /* [d] */
            float rs = rstd[r];
#pragma omp simd
            for (int64_t j = j0; j < j1; j++) acc[j - j0] += bk_rmsnorm_bwd_dw(xr[j], dyr[j], rs);
        }
        for (int64_t j = j0; j < j1; j++) dw[j] += acc[j - j0];
    }

    /* Pass 2, dx[n, d]: one row reduction c = sum(w dy x) / d, then elementwise. */
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d, *dyr = dy + r * d; /* [d] */
        float *dxr = dx + r * d;
        float c = 0.0f;
#pragma omp simd reduction(+ : c)
        for (int64_t j = 0; j < d; j++) c += w[j] * dyr[j] * xr[j];
        float c_over_d = c / (float)d, rs = rstd[r];
#pragma omp simd
        for (int64_t j = 0; j < d; j++)
            dxr[j] = bk_rmsnorm_bwd_dx(xr[j], w[j], dyr[j], rs, c_over_d);
    }
    return BK_OK;
}
