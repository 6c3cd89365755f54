/* gemm.c: single-precision GEMM on the CPU, row-major, with transpose flags,
 * alpha and beta: through cblas_sgemm when the build links a CBLAS, and an
 * internal cache-blocked OpenMP GEMM that is always built (the fallback
 * without BLAS, and the baseline the benchmark compares against).
 *
 * The built-in GEMM follows the usual blocking scheme:
 *   - C is first scaled by beta, so every K panel can simply add into it;
 *   - K is cut into panels of KC, N into panels of NC; the KC x NC block of
 *     op(B) is packed once (by all threads) into NR-wide column strips, so the
 *     micro-kernel reads it contiguously from L2;
 *   - the work on that block is cut into tasks of MC rows x NSUB columns;
 *     a task packs its MC x KC block of op(A) into MR-high row strips (so the
 *     transposes cost nothing in the inner loop) and runs the micro-kernel;
 *     (the sizes below can be overridden with -D when tuning for another CPU);
 *   - the micro-kernel keeps an MR x NR tile of C in registers (GCC vector
 *     types, 16 floats = one AVX-512 register) over the KC panel.
 * Edge tiles are computed on zero-padded packs and written back with bounds. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/cpu/ops_cpu.h"

#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

#ifndef MR
#define MR 12 /* rows of the register tile: 24 accumulators of the 32 zmm */
#endif
#ifndef NR
#define NR 32 /* columns of the register tile: two vectors of 16 */
#endif
#ifndef KC
#define KC 256 /* depth of a packed panel */
#endif
#ifndef MC
#define MC 96 /* rows of op(A) per task (multiple of MR) */
#endif
#ifndef NC
#define NC 1024 /* columns of op(B) packed at once (multiple of NSUB) */
#endif
#ifndef NSUB
#define NSUB 256 /* columns per task (multiple of NR) */
#endif

/* 16 floats, one AVX-512 register: v16a for the 64-byte aligned packed
 * panels, v16u for rows of C (any alignment). GCC lets vector types alias their
 * element type. */
typedef float v16a __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

static int gemm_args_ok(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                        int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                        const float *c, int64_t ldc)
{
    (void)q;
    if (m < 0 || n < 0 || k < 0) return 0;
    if (a == NULL || b == NULL || c == NULL) return 0;
    if ((ta != BK_NO_TRANS && ta != BK_TRANS) || (tb != BK_NO_TRANS && tb != BK_TRANS)) return 0;
    int64_t a_cols = ta == BK_NO_TRANS ? k : m, b_cols = tb == BK_NO_TRANS ? n : k;
    if (lda < (a_cols > 1 ? a_cols : 1)) return 0;
    if (ldb < (b_cols > 1 ? b_cols : 1)) return 0;
    if (ldc < (n > 1 ? n : 1)) return 0;
    return 1;
}

/* C[m, n] *= beta; beta = 0 writes zeros (NaN in C must not survive). */
static void scale_c(int nt, int64_t m, int64_t n, float beta, float *c, int64_t ldc)
{
    if (beta == 1.0f) return;
#pragma omp parallel for num_threads(nt) schedule(static) if (m * n >= 16384)
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc; /* C[i, 0:n] */
        if (beta == 0.0f) {
            memset(ci, 0, (size_t)n * sizeof(float));
        } else {
#pragma omp simd
            for (int64_t j = 0; j < n; j++) ci[j] *= beta;
        }
    }
}

/* op(A)[i, p] and op(B)[p, j] of the row-major operands. */
static inline float op_a(bk_transpose ta, const float *a, int64_t lda, int64_t i, int64_t p)
{
    return ta == BK_NO_TRANS ? a[i * lda + p] : a[p * lda + i];
}

static inline float op_b(bk_transpose tb, const float *b, int64_t ldb, int64_t p, int64_t j)
{
    return tb == BK_NO_TRANS ? b[p * ldb + j] : b[j * ldb + p];
}

/* Tiny products: the packing would cost more than the arithmetic. */
static void gemm_small(bk_transpose ta, bk_transpose tb, int64_t m, int64_t n, int64_t k,
                       float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                       float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++) s += op_a(ta, a, lda, i, p) * op_b(tb, b, ldb, p, j);
            c[i * ldc + j] += alpha * s;
        }
}

/* Packs op(A)[i0 : i0 + mc, p0 : p0 + kc] into strips of MR rows:
 * ap[strip][p][MR], rows past mc zero. */
static void pack_a(bk_transpose ta, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                   int64_t kc, float *ap)
{
    for (int64_t s = 0; s < mc; s += MR) {
        float *dst = ap + s * kc; /* [kc][MR] */
        int64_t rows = mc - s < MR ? mc - s : MR;
        if (ta == BK_NO_TRANS) {
            for (int64_t ii = 0; ii < MR; ii++) {
                const float *src = a + (i0 + s + ii) * lda + p0; /* A[i, p0:] */
                if (ii < rows)
                    for (int64_t p = 0; p < kc; p++) dst[p * MR + ii] = src[p];
                else
                    for (int64_t p = 0; p < kc; p++) dst[p * MR + ii] = 0.0f;
            }
        } else {
            for (int64_t p = 0; p < kc; p++) {
                const float *src = a + (p0 + p) * lda + i0 + s; /* A[p, i0 + s:] */
                for (int64_t ii = 0; ii < MR; ii++) dst[p * MR + ii] = ii < rows ? src[ii] : 0.0f;
            }
        }
    }
}

/* Packs the NR-wide strip t of op(B)[p0 : p0 + kc, j0 : j0 + nc] into
 * bp[t][p][NR], columns past nc zero. */
static void pack_b_strip(bk_transpose tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                         int64_t j0, int64_t nc, int64_t t, float *bp)
{
    float *dst = bp + t * NR * kc; /* [kc][NR] */
    int64_t js = t * NR, cols = nc - js < NR ? nc - js : NR;
    if (tb == BK_NO_TRANS) {
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + (p0 + p) * ldb + j0 + js; /* B[p, j:] */
            for (int64_t jj = 0; jj < NR; jj++) dst[p * NR + jj] = jj < cols ? src[jj] : 0.0f;
        }
    } else {
        for (int64_t jj = 0; jj < NR; jj++) {
            const float *src = b + (j0 + js + jj) * ldb + p0; /* B[j, p0:] */
            if (jj < cols)
                for (int64_t p = 0; p < kc; p++) dst[p * NR + jj] = src[p];
            else
                for (int64_t p = 0; p < kc; p++) dst[p * NR + jj] = 0.0f;
        }
    }
}

/* C[0:mr, 0:nr] += alpha * Ap[kc][MR] * Bp[kc][NR], the register tile: the
 * accumulators must never have their address taken, or GCC keeps them in
 * memory. */
static void micro_kernel(int64_t kc, const float *ap, const float *bp, float alpha, float *c,
                         int64_t ldc, int64_t mr, int64_t nr)
{
    v16a acc[MR][2];
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = (v16a){0};
    for (int64_t p = 0; p < kc; p++) {
        v16a b0 = *(const v16a *)(bp + p * NR), b1 = *(const v16a *)(bp + p * NR + 16);
        const float *a = ap + p * MR;
        for (int i = 0; i < MR; i++) {
            acc[i][0] += a[i] * b0;
            acc[i][1] += a[i] * b1;
        }
    }
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; i++) {
            v16u *ci = (v16u *)(c + i * ldc);
            ci[0] += alpha * acc[i][0];
            ci[1] += alpha * acc[i][1];
        }
    } else {
        _Alignas(64) float tile[MR][NR];
        for (int i = 0; i < MR; i++) {
            *(v16a *)&tile[i][0] = acc[i][0];
            *(v16a *)&tile[i][16] = acc[i][1];
        }
        for (int64_t i = 0; i < mr; i++)
            for (int64_t j = 0; j < nr; j++) c[i * ldc + j] += alpha * tile[i][j];
    }
}

bk_status bk_gemm_builtin(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float beta, float *c, int64_t ldc)
{
    BK_CPU_QUEUE_CHECK(q);
    BK_CHECK_ARG(gemm_args_ok(q, ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
    int nt = bk_cpu_threads(q);
    if (m == 0 || n == 0) return BK_OK;
    scale_c(nt, m, n, beta, c, ldc);
    if (alpha == 0.0f || k == 0) return BK_OK;
    if (m * n * k <= 32 * 32 * 32) {
        gemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
        return BK_OK;
    }

    int64_t kc_max = k < KC ? k : KC;
    int64_t nc_max = n < NC ? (n + NR - 1) / NR * NR : NC;
    int64_t mc_max = m < MC ? (m + MR - 1) / MR * MR : MC;
    /* aligned_alloc wants a size that is a multiple of the alignment */
    size_t bp_bytes = ((size_t)(kc_max * nc_max) * sizeof(float) + 63) / 64 * 64;
    size_t ap_bytes = ((size_t)(nt * mc_max * kc_max) * sizeof(float) + 63) / 64 * 64;
    float *bp = aligned_alloc(64, bp_bytes);
    float *ap_all = aligned_alloc(64, ap_bytes);
    if (bp == NULL || ap_all == NULL) {
        free(bp);
        free(ap_all);
        return BK_ERR_UNSUPPORTED; /* out of memory: the caller cannot proceed either way */
    }

    for (int64_t jc = 0; jc < n; jc += NC) {
        int64_t nc = n - jc < NC ? n - jc : NC;
        int64_t n_strips = (nc + NR - 1) / NR;
        for (int64_t pc = 0; pc < k; pc += KC) {
            int64_t kc = k - pc < KC ? k - pc : KC;
            int64_t m_tasks = (m + MC - 1) / MC, n_tasks = (nc + NSUB - 1) / NSUB;
#pragma omp parallel num_threads(nt)
            {
#pragma omp for schedule(static)
                for (int64_t t = 0; t < n_strips; t++)
                    pack_b_strip(tb, b, ldb, pc, kc, jc, nc, t, bp);
                /* the implicit barrier: bp is complete before anyone reads it */
                float *ap = ap_all + (int64_t)omp_get_thread_num() * mc_max * kc_max;
#pragma omp for collapse(2) schedule(dynamic, 1)
                for (int64_t ti = 0; ti < m_tasks; ti++) {
                    for (int64_t tj = 0; tj < n_tasks; tj++) {
                        int64_t i0 = ti * MC, mc = m - i0 < MC ? m - i0 : MC;
                        int64_t j0 = tj * NSUB, j1 = j0 + NSUB < nc ? j0 + NSUB : nc;
                        pack_a(ta, a, lda, i0, mc, pc, kc, ap);
                        for (int64_t jr = j0; jr < j1; jr += NR) {
                            int64_t nr = j1 - jr < NR ? j1 - jr : NR;
                            const float *bs = bp + (jr / NR) * NR * kc;
                            for (int64_t ir = 0; ir < mc; ir += MR) {
                                int64_t mr = mc - ir < MR ? mc - ir : MR;
                                micro_kernel(kc, ap + ir * kc, bs, alpha,
                                             c + (i0 + ir) * ldc + jc + jr, ldc, mr, nr);
                            }
                        }
                    }
                }
            }
        }
    }
    free(bp);
    free(ap_all);
    return BK_OK;
}

int bk_gemm_has_cblas(void)
{
#ifdef HAVE_CBLAS
    return 1;
#else
    return 0;
#endif
}

bk_status bk_gemm_cblas(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                        int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc)
{
    BK_CPU_QUEUE_CHECK(q);
    BK_CHECK_ARG(gemm_args_ok(q, ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
#ifdef HAVE_CBLAS
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return BK_ERR_UNSUPPORTED;
    if (m == 0 || n == 0) return BK_OK;
    cblas_sgemm(CblasRowMajor, ta == BK_TRANS ? CblasTrans : CblasNoTrans,
                tb == BK_TRANS ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return BK_OK;
#else
    return BK_ERR_UNSUPPORTED;
#endif
}

bk_status bk_gemm(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                  int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc)
{
    BK_CHECK_ARG(q != NULL);
    BK_DEVICE_DISPATCH(q, gemm, (q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
#ifdef HAVE_CBLAS
    bk_status st = bk_gemm_cblas(q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (st != BK_ERR_UNSUPPORTED) return st;
#endif
    return bk_gemm_builtin(q, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
