/* norm.c: RMSNorm forward and backward on the CPU (OpenMP over rows, SIMD along
 * a row). The per-element formulas are ops_math.h's, shared with the GPU.
 *
 * The weight gradient is a sum over rows; to keep it deterministic and free of
 * races, the backward computes it in its own pass where each thread owns a
 * range of columns and adds the rows in order, so the result does not depend
 * on the thread count. */
#include "kernels/cpu/ops_cpu.h"

/* Below this many elements the OpenMP fork costs more than the work. */
#define NORM_PAR_MIN 16384

bk_status bk_rmsnorm_fwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         float eps, float *y, float *rstd)
{
    BK_CPU_QUEUE_CHECK(q);
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

/* Width of the column strips of the weight-gradient pass: one strip is a few
 * cache lines of every row. */
#define DW_STRIP 64

bk_status bk_rmsnorm_bwd(const bk_queue *q, int64_t n, int64_t d, const float *x, const float *w,
                         const float *rstd, const float *dy, float *dx, float *dw)
{
    BK_CPU_QUEUE_CHECK(q);
    BK_CHECK_ARG(n >= 0 && d > 0);
    BK_CHECK_ARG(x != NULL && w != NULL && rstd != NULL && dy != NULL && dx != NULL && dw != NULL);
    int nt = bk_cpu_threads(q);
    int par = n * d >= NORM_PAR_MIN;

    /* Pass 1, dw[d]: before dx, because dx may overwrite dy. Thread count only
     * changes which thread owns a strip, not the order in which rows add up. */
    int64_t n_strips = (d + DW_STRIP - 1) / DW_STRIP;
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int64_t s = 0; s < n_strips; s++) {
        int64_t j0 = s * DW_STRIP, j1 = j0 + DW_STRIP < d ? j0 + DW_STRIP : d;
        float acc[DW_STRIP] = {0};
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
