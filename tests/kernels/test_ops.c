/* test_ops.c: the non-attention kernels (kernels/ops.h) against the
 * double-precision references of kernels/ref/ops_ref.c on random shapes, odd sizes
 * included; finite-difference checks of every backward; the promises about
 * determinism, ignore_index and invalid arguments. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/arena.h"
#include "kernels/bf16.h"
#include "kernels/device.h" /* bk_round_bf16 */
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "tests/lib/rope_cases.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/close.h"
#include "tests/lib/rng.h"

/* ---------------------------------------------------------------- helpers */
static void assert_close_d(const char *what, const double *got, const double *ref, int64_t n,
                           double atol, double rtol)
{
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]);
        ck_assert_msg(err <= atol + rtol * fabs(ref[i]),
                      "%s: element %lld is %.12g, expected %.12g", what, (long long)i, got[i],
                      ref[i]);
    }
}

/* Central differences of a scalar function of x[n] (double), h relative. */
typedef double (*scalar_fn)(const double *x, const void *ctx);

static void fd_grad(scalar_fn f, const void *ctx, double *x, int64_t n, double *grad)
{
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
        x[i] = x0 + h;
        double fp = f(x, ctx);
        x[i] = x0 - h;
        double fm = f(x, ctx);
        x[i] = x0;
        grad[i] = (fp - fm) / (2.0 * h);
    }
}

static double dot_d(const double *a, const double *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static bk_queue host_q(int n_threads)
{
    bk_queue q = bk_host_queue();
    q.n_threads = n_threads;
    return q;
}

/* ---------------------------------------------------------------- shared exp */
START_TEST(expf_is_accurate)
{
    /* bk_expf (ops_math.h) replaces libm's expf in SwiGLU and cross-entropy. */
    double worst = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.3f + (88.7f + 87.3f) * (float)i / 2000000.0f;
        double ref = exp((double)x), rel = fabs((double)bk_expf(x) - ref) / ref;
        if (rel > worst) worst = rel;
    }
    ck_assert_msg(worst < 3.0 * 5.96e-8, "bk_expf worst relative error %g", worst);
    ck_assert(bk_expf(0.0f) == 1.0f);
    ck_assert(bk_expf(-INFINITY) == 0.0f);
    ck_assert(bk_expf(-100.0f) == 0.0f);
    ck_assert(isinf(bk_expf(89.0f)) && isinf(bk_expf(INFINITY)));
    ck_assert(isnan(bk_expf(NAN)));
    ck_assert(bk_expf(88.7f) > 3.0e38f && isfinite(bk_expf(88.7f)));
}
END_TEST

START_TEST(rope_sincos_is_accurate)
{
    /* bk_rope_sincos (ops_math.h) replaces libm's sin and cos in RoPE, at
     * positions up to 2^31 and every frequency of a d = 128 head. */
    uint64_t rng = test_rng(5);
    double worst = 0.0;
    for (int it = 0; it < 200000; it++) {
        int64_t pos = it < 1000 ? it : (int64_t)(bu_rng_next(&rng) % 2147483648ull);
        int64_t i = (int64_t)(bu_rng_next(&rng) % 64);
        double freq = bk_rope_inv_freq(i, 128, 500000.0) / (it % 2 ? 1.0 : 8.0);
        double angle = (double)pos * freq;
        float c, s;
        bk_rope_sincos(pos, freq, &c, &s);
        double e = fmax(fabs(c - cos(angle)), fabs(s - sin(angle)));
        if (e > worst) worst = e;
    }
    ck_assert_msg(worst < 2.5e-7, "bk_rope_sincos worst absolute error %g", worst);
}
END_TEST

/* ---------------------------------------------------------------- GEMM */
typedef bk_status (*gemm_fn)(const bk_queue *, bk_transpose, bk_transpose, int64_t, int64_t,
                             int64_t, float, const float *, int64_t, const float *, int64_t, float,
                             float *, int64_t);

/* Every transpose combination, alpha/beta, odd sizes, padded leading dims. */
static void check_gemm(gemm_fn fn, const char *name)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {1, 37, 5},    {37, 1, 129},  {7, 9, 3},       {33, 31, 65},
        {67, 45, 300}, {130, 70, 17}, {9, 1100, 40}, {140, 600, 260}, {40, 40, 40},
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.5f, 0.25f}, {0.0f, 2.0f}};
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(11);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                size_t v = (s + (size_t)(2 * ta + tb)) % 4;
                float alpha = ab[v][0], beta = ab[v][1];
                int64_t pad = (int64_t)(s % 3);
                int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
                float *a = test_rand_f(&rng, (ta ? k : m) * lda, -1, 1);
                float *b = test_rand_f(&rng, (tb ? n : k) * ldb, -1, 1);
                float *c = test_rand_f(&rng, m * ldc, -1, 1);
                if (beta == 0.0f)
                    for (int64_t i = 0; i < m * ldc; i++) c[i] = NAN; /* must not propagate */
                double *ref = test_zeros_d(m * n);
                ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ref);
                float *pad_before = test_copy_f(c, m * ldc);
                ck_assert_int_eq(fn(&q, ta ? BK_TRANS : BK_NO_TRANS, tb ? BK_TRANS : BK_NO_TRANS, m,
                                    n, k, alpha, a, lda, b, ldb, beta, c, ldc),
                                 BK_OK);
                float *got = malloc((size_t)(m * n) * sizeof(float));
                for (int64_t i = 0; i < m; i++) {
                    memcpy(got + i * n, c + i * ldc, (size_t)n * sizeof(float));
                    for (int64_t j = n; j < ldc; j++) /* the padding is not C's */
                        ck_assert(memcmp(&c[i * ldc + j], &pad_before[i * ldc + j], 4) == 0);
                }
                char what[128];
                snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld ta=%d tb=%d", name,
                         (long long)m, (long long)n, (long long)k, ta, tb);
                test_assert_close(what, got, ref, m * n, 2e-6 * (double)k + 1e-6, 1e-5);
                free(a);
                free(b);
                free(c);
                free(ref);
                free(got);
                free(pad_before);
            }
    }
}

START_TEST(gemm_builtin_matches_reference)
{
    check_gemm(bk_gemm_builtin, "builtin");
}
END_TEST

START_TEST(gemm_cblas_matches_reference)
{
    if (!bk_gemm_has_cblas()) {
        bk_queue q = bk_host_queue();
        float x = 1.0f;
        ck_assert_int_eq(
            bk_gemm_cblas(&q, BK_NO_TRANS, BK_NO_TRANS, 1, 1, 1, 1.0f, &x, 1, &x, 1, 0.0f, &x, 1),
            BK_ERR_UNSUPPORTED);
        return;
    }
    check_gemm(bk_gemm_cblas, "cblas");
}
END_TEST

START_TEST(gemm_dispatch_matches_reference)
{
    check_gemm(bk_gemm, "bk_gemm");
}
END_TEST

START_TEST(gemm_thread_counts_agree)
{
    /* The built-in GEMM's sum order does not depend on who computes a tile. */
    uint64_t rng = test_rng(12);
    int64_t m = 150, n = 300, k = 520;
    float *a = test_rand_f(&rng, m * k, -1, 1), *b = test_rand_f(&rng, k * n, -1, 1);
    float *c1 = calloc((size_t)(m * n), sizeof(float)),
          *c2 = calloc((size_t)(m * n), sizeof(float));
    bk_queue q1 = host_q(1), q2 = host_q(2);
    ck_assert_int_eq(
        bk_gemm_builtin(&q1, BK_NO_TRANS, BK_NO_TRANS, m, n, k, 1.0f, a, k, b, n, 0.0f, c1, n),
        BK_OK);
    ck_assert_int_eq(
        bk_gemm_builtin(&q2, BK_NO_TRANS, BK_NO_TRANS, m, n, k, 1.0f, a, k, b, n, 0.0f, c2, n),
        BK_OK);
    ck_assert(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) == 0);
    free(a);
    free(b);
    free(c1);
    free(c2);
}
END_TEST

/* ---------------------------------------------------------------- RMSNorm */
START_TEST(rmsnorm_matches_reference)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 17}, {5, 64}, {33, 100}, {70, 257}, {3, 4096}};
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(21);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], d = shapes[s][1];
        float eps = 1e-5f;
        float *x = test_rand_f(&rng, n * d, -2, 2), *w = test_rand_f(&rng, d, 0.5, 1.5),
              *dy = test_rand_f(&rng, n * d, -1, 1);
        float *y = test_rand_f(&rng, n * d, 0, 1), *rstd = test_rand_f(&rng, n, 0, 1),
              *dx = test_rand_f(&rng, n * d, 0, 1);
        float *dw = test_rand_f(&rng, d, -1, 1), *dw0 = test_copy_f(dw, d);
        double *xd = test_to_d(x, n * d), *wd = test_to_d(w, d), *dyd = test_to_d(dy, n * d);
        double *yr = test_zeros_d(n * d), *rr = test_zeros_d(n), *dxr = test_zeros_d(n * d),
               *dwr = test_zeros_d(d);
        ref_rmsnorm_fwd(n, d, xd, wd, eps, yr, rr);
        ref_rmsnorm_bwd(n, d, xd, wd, eps, dyd, dxr, dwr);
        for (int64_t j = 0; j < d; j++) dwr[j] += dw0[j]; /* the kernel accumulates */
        ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, x, w, eps, y, rstd), BK_OK);
        test_assert_close("rmsnorm y", y, yr, n * d, 1e-6, 1e-5);
        test_assert_close("rmsnorm rstd", rstd, rr, n, 0, 1e-5);
        ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, x, w, rstd, dy, dx, dw), BK_OK);
        test_assert_close("rmsnorm dx", dx, dxr, n * d, 1e-5, 1e-4);
        test_assert_close("rmsnorm dw", dw, dwr, d, 1e-5, 1e-4);
        /* in place: y = x, dx = dy */
        float *xi = test_copy_f(x, n * d), *dyi = test_copy_f(dy, n * d),
              *dwi = test_copy_f(dw0, d);
        ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, xi, w, eps, xi, NULL), BK_OK);
        test_assert_close("rmsnorm in place", xi, yr, n * d, 1e-6, 1e-5);
        ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, x, w, rstd, dyi, dyi, dwi), BK_OK);
        test_assert_close("rmsnorm dx in place", dyi, dxr, n * d, 1e-5, 1e-4);
        test_assert_close("rmsnorm dw in place", dwi, dwr, d, 1e-5, 1e-4);
        free(x), free(w), free(dy), free(y), free(rstd), free(dx), free(dw), free(dw0);
        free(xd), free(wd), free(dyd), free(yr), free(rr), free(dxr), free(dwr);
        free(xi), free(dyi), free(dwi);
    }
}
END_TEST

/* RMSNorm and SwiGLU writing the bf16 operand of a product directly: the
 * bits of the fp32 kernel's output rounded (bk_round_bf16), rstd the same,
 * SwiGLU's inputs with a row stride wider than its columns. */
START_TEST(bf16_outputs_are_the_rounded_fp32_ones)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(23);
    const int64_t n = 37, d = 300, ld = 2 * d + 3;
    float *x = test_rand_f(&rng, n * ld, -2, 2), *w = test_rand_f(&rng, d, 0.5, 1.5);
    float *y = test_zeros_f(n * d), *rstd = test_zeros_f(n), *rstd16 = test_zeros_f(n);
    uint16_t *y16 = test_alloc((size_t)(n * d), sizeof *y16),
             *rounded = test_alloc((size_t)(n * d), sizeof *rounded);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, x, w, 1e-5f, y, rstd), BK_OK);
    ck_assert_int_eq(bk_rmsnorm_fwd_bf16(&q, n, d, x, w, 1e-5f, y16, rstd16), BK_OK);
    ck_assert_int_eq(bk_round_bf16(&q, n * d, y, rounded), BK_OK);
    ck_assert(memcmp(y16, rounded, (size_t)(n * d) * sizeof *y16) == 0);
    ck_assert(memcmp(rstd, rstd16, (size_t)n * sizeof *rstd) == 0);
    ck_assert_int_eq(bk_swiglu_fwd(&q, n, d, x, x + d, ld, y), BK_OK);
    ck_assert_int_eq(bk_swiglu_fwd_bf16(&q, n, d, x, x + d, ld, y16), BK_OK);
    ck_assert_int_eq(bk_round_bf16(&q, n * d, y, rounded), BK_OK);
    ck_assert(memcmp(y16, rounded, (size_t)(n * d) * sizeof *y16) == 0);
    /* x kept rounded: the copy rounded, x its widened values, in one pass */
    float *kept = test_copy_f(x, n * d);
    ck_assert_int_eq(bk_round_bf16_keep(&q, n * d, kept, y16), BK_OK);
    ck_assert_int_eq(bk_round_bf16(&q, n * d, x, rounded), BK_OK);
    ck_assert(memcmp(y16, rounded, (size_t)(n * d) * sizeof *y16) == 0);
    ck_assert_int_eq(bk_widen_bf16(&q, n * d, rounded, y), BK_OK);
    ck_assert(memcmp(kept, y, (size_t)(n * d) * sizeof *y) == 0);
    free(x), free(w), free(y), free(rstd), free(rstd16), free(y16), free(rounded), free(kept);
}
END_TEST

START_TEST(rmsnorm_backward_is_deterministic)
{
    /* dw sums rows in the same order whatever the thread count */
    uint64_t rng = test_rng(23);
    int64_t n = 300, d = 1000;
    float *x = test_rand_f(&rng, n * d, -2, 2), *w = test_rand_f(&rng, d, 0.5, 1.5),
          *dy = test_rand_f(&rng, n * d, -1, 1);
    float *rstd = test_rand_f(&rng, n, 0.5, 1), *dx1 = test_rand_f(&rng, n * d, 0, 1),
          *dx2 = test_rand_f(&rng, n * d, 0, 1);
    float *dw1 = calloc((size_t)d, sizeof(float)), *dw2 = calloc((size_t)d, sizeof(float));
    bk_queue q1 = host_q(1), q2 = host_q(2), q3 = host_q(3);
    ck_assert_int_eq(bk_rmsnorm_bwd(&q1, n, d, x, w, rstd, dy, dx1, dw1), BK_OK);
    ck_assert_int_eq(bk_rmsnorm_bwd(&q2, n, d, x, w, rstd, dy, dx2, dw2), BK_OK);
    ck_assert(memcmp(dw1, dw2, (size_t)d * sizeof(float)) == 0);
    ck_assert(memcmp(dx1, dx2, (size_t)(n * d) * sizeof(float)) == 0);
    memset(dw2, 0, (size_t)d * sizeof(float));
    ck_assert_int_eq(bk_rmsnorm_bwd(&q3, n, d, x, w, rstd, dy, dx2, dw2), BK_OK);
    ck_assert(memcmp(dw1, dw2, (size_t)d * sizeof(float)) == 0);
    free(x), free(w), free(dy), free(rstd), free(dx1), free(dx2), free(dw1), free(dw2);
}
END_TEST

typedef struct {
    int64_t n, d;
    const double *x, *w, *r; /* r: weights of the scalar loss sum(y * r) */
    double eps;
} rms_ctx;

static double rms_loss_x(const double *x, const void *p)
{
    const rms_ctx *c = p;
    double *y = test_zeros_d(c->n * c->d);
    ref_rmsnorm_fwd(c->n, c->d, x, c->w, c->eps, y, NULL);
    double l = dot_d(y, c->r, c->n * c->d);
    free(y);
    return l;
}

static double rms_loss_w(const double *w, const void *p)
{
    const rms_ctx *c = p;
    double *y = test_zeros_d(c->n * c->d);
    ref_rmsnorm_fwd(c->n, c->d, c->x, w, c->eps, y, NULL);
    double l = dot_d(y, c->r, c->n * c->d);
    free(y);
    return l;
}

START_TEST(rmsnorm_backward_finite_differences)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(22);
    int64_t n = 3, d = 7;
    float eps = 1e-3f;
    float *x = test_rand_f(&rng, n * d, -2, 2), *w = test_rand_f(&rng, d, 0.5, 1.5),
          *dy = test_rand_f(&rng, n * d, -1, 1);
    float *rstd = test_rand_f(&rng, n, 0, 1), *y = test_rand_f(&rng, n * d, 0, 1),
          *dx = test_rand_f(&rng, n * d, 0, 1);
    float *dw = calloc((size_t)d, sizeof(float));
    double *xd = test_to_d(x, n * d), *wd = test_to_d(w, d), *rd = test_to_d(dy, n * d);
    double *gx = test_zeros_d(n * d), *gw = test_zeros_d(d), *dxr = test_zeros_d(n * d),
           *dwr = test_zeros_d(d);
    rms_ctx c = {n, d, xd, wd, rd, eps};
    fd_grad(rms_loss_x, &c, xd, n * d, gx);
    fd_grad(rms_loss_w, &c, wd, d, gw);
    ref_rmsnorm_bwd(n, d, xd, wd, eps, rd, dxr, dwr);
    assert_close_d("ref rmsnorm dx vs fd", dxr, gx, n * d, 1e-7, 1e-6);
    assert_close_d("ref rmsnorm dw vs fd", dwr, gw, d, 1e-7, 1e-6);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, x, w, eps, y, rstd), BK_OK);
    ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, x, w, rstd, dy, dx, dw), BK_OK);
    test_assert_close("rmsnorm dx vs fd", dx, gx, n * d, 1e-5, 1e-4);
    test_assert_close("rmsnorm dw vs fd", dw, gw, d, 1e-5, 1e-4);
    free(x), free(w), free(dy), free(rstd), free(y), free(dx), free(dw);
    free(xd), free(wd), free(rd), free(gx), free(gw), free(dxr), free(dwr);
}
END_TEST

/* ---------------------------------------------------------------- RoPE */
START_TEST(rope_matches_reference)
{
    static const int64_t shapes[][3] = {
        {1, 1, 2}, {3, 2, 6}, {17, 3, 64}, {9, 8, 128}, {2, 1, 600}};
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(31);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], H = shapes[s][1], d = shapes[s][2], len = n * H * d;
        int64_t *pos = malloc((size_t)n * sizeof(int64_t));
        /* global positions of a zigzag shard: far apart, up to ~2M */
        for (int64_t r = 0; r < n; r++) pos[r] = (int64_t)(bu_rng_next(&rng) % 2000000);
        pos[0] = 0;
        for (int k = 0; k < TEST_ROPE_CASES; k++) { /* default, linear, llama3, yarn, dynamic */
            bk_rope rope = test_rope(k, s % 2 ? 500000.0 : 10000.0);
            float *x = test_rand_f(&rng, len, -1, 1), *y = test_rand_f(&rng, len, 0, 1),
                  *dx = test_rand_f(&rng, len, 0, 1);
            double *xd = test_to_d(x, len), *yr = test_zeros_d(len), *dxr = test_zeros_d(len);
            ref_rope(n, H, d, pos, &rope, xd, 1.0, yr);
            ref_rope(n, H, d, pos, &rope, xd, -1.0, dxr);
            ck_assert_int_eq(bk_rope_fwd(&q, n, H, d, pos, &rope, x, y), BK_OK);
            test_assert_close("rope fwd", y, yr, len, 2e-6, 1e-5);
            ck_assert_int_eq(bk_rope_bwd(&q, n, H, d, pos, &rope, x, dx), BK_OK);
            test_assert_close("rope bwd", dx, dxr, len, 2e-6, 1e-5);
            /* in place, and backward undoes forward (times yarn's scale squared) */
            float *xi = test_copy_f(x, len);
            ck_assert_int_eq(bk_rope_fwd(&q, n, H, d, pos, &rope, xi, xi), BK_OK);
            test_assert_close("rope fwd in place", xi, yr, len, 2e-6, 1e-5);
            ck_assert_int_eq(bk_rope_bwd(&q, n, H, d, pos, &rope, xi, xi), BK_OK);
            double s2 = (double)bk_rope_scale(&rope) * bk_rope_scale(&rope);
            for (int64_t i = 0; i < len; i++) xd[i] *= s2;
            test_assert_close("rope bwd(fwd(x))", xi, xd, len, 4e-6, 1e-5);
            free(x), free(y), free(dx), free(xd), free(yr), free(dxr), free(xi);
        }
        free(pos);
    }
}
END_TEST

START_TEST(rope_pairs_are_half_split)
{
    /* d = 4, position 1, theta 1 (every frequency 1): pairs (0, 2) and (1, 3). */
    bk_queue q = bk_host_queue();
    int64_t pos = 1;
    float x[4] = {1, 0, 0, 0}, y[4];
    const bk_rope unit = {.type = BK_ROPE_DEFAULT, .theta = 1.0, .factor = 1.0};
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, &pos, &unit, x, y), BK_OK);
    ck_assert_float_eq_tol(y[0], cosf(1.0f), 1e-6f);
    ck_assert_float_eq_tol(y[2], sinf(1.0f), 1e-6f);
    ck_assert_float_eq_tol(y[1], 0.0f, 1e-7f);
    ck_assert_float_eq_tol(y[3], 0.0f, 1e-7f);
}
END_TEST

typedef struct {
    int64_t n, H, d;
    const int64_t *pos;
    bk_rope rope;
    const double *r;
} rope_ctx;

static double rope_loss(const double *x, const void *p)
{
    const rope_ctx *c = p;
    int64_t len = c->n * c->H * c->d;
    double *y = test_zeros_d(len);
    ref_rope(c->n, c->H, c->d, c->pos, &c->rope, x, 1.0, y);
    double l = dot_d(y, c->r, len);
    free(y);
    return l;
}

START_TEST(rope_backward_finite_differences)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(32);
    int64_t n = 3, H = 2, d = 6, len = n * H * d, pos[3] = {5, 123456, 7};
    float *x = test_rand_f(&rng, len, -1, 1), *dy = test_rand_f(&rng, len, -1, 1),
          *dx = test_rand_f(&rng, len, 0, 1);
    double *xd = test_to_d(x, len), *rd = test_to_d(dy, len), *g = test_zeros_d(len);
    rope_ctx c = {n, H, d, pos, test_rope(3, 10000.0), rd}; /* yarn: a ramp and a scale */
    fd_grad(rope_loss, &c, xd, len, g);
    ck_assert_int_eq(bk_rope_bwd(&q, n, H, d, pos, &c.rope, dy, dx), BK_OK);
    test_assert_close("rope dx vs fd", dx, g, len, 1e-5, 1e-4);
    free(x), free(dy), free(dx), free(xd), free(rd), free(g);
}
END_TEST

/* ---------------------------------------------------------------- SwiGLU */
START_TEST(swiglu_matches_reference)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 13}, {7, 33}, {64, 250}, {5, 1000}};
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(41);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], F = shapes[s][1], len = rows * F;
        /* fused [rows, 2F] layout: gate = first half, up = second half */
        float *gu = test_rand_f(&rng, rows * 2 * F, -8, 8);
        gu[0] = -100.0f; /* saturated sigmoid both ways */
        if (len > 1) gu[1] = 100.0f;
        float *dout = test_rand_f(&rng, len, -1, 1), *out = test_rand_f(&rng, len, 0, 1);
        float *dgu = test_rand_f(&rng, rows * 2 * F, 0, 1);
        double *g = test_zeros_d(len), *u = test_zeros_d(len), *dod = test_to_d(dout, len);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < F; j++) {
                g[r * F + j] = gu[r * 2 * F + j];
                u[r * F + j] = gu[r * 2 * F + F + j];
            }
        double *outr = test_zeros_d(len), *dgr = test_zeros_d(len), *dur = test_zeros_d(len);
        ref_swiglu_fwd(len, g, u, outr);
        ref_swiglu_bwd(len, g, u, dod, dgr, dur);
        ck_assert_int_eq(bk_swiglu_fwd(&q, rows, F, gu, gu + F, 2 * F, out), BK_OK);
        test_assert_close("swiglu out", out, outr, len, 1e-6, 1e-5);
        ck_assert_int_eq(bk_swiglu_bwd(&q, rows, F, gu, gu + F, 2 * F, dout, dgu, dgu + F), BK_OK);
        float *dg = malloc((size_t)len * sizeof(float)), *du = malloc((size_t)len * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            memcpy(dg + r * F, dgu + r * 2 * F, (size_t)F * sizeof(float));
            memcpy(du + r * F, dgu + r * 2 * F + F, (size_t)F * sizeof(float));
        }
        test_assert_close("swiglu dgate", dg, dgr, len, 1e-6, 1e-5);
        test_assert_close("swiglu dup", du, dur, len, 1e-6, 1e-5);
        /* in place: gradients over the inputs */
        ck_assert_int_eq(bk_swiglu_bwd(&q, rows, F, gu, gu + F, 2 * F, dout, gu, gu + F), BK_OK);
        for (int64_t r = 0; r < rows; r++) {
            memcpy(dg + r * F, gu + r * 2 * F, (size_t)F * sizeof(float));
            memcpy(du + r * F, gu + r * 2 * F + F, (size_t)F * sizeof(float));
        }
        test_assert_close("swiglu dgate in place", dg, dgr, len, 1e-6, 1e-5);
        test_assert_close("swiglu dup in place", du, dur, len, 1e-6, 1e-5);
        free(gu), free(dout), free(out), free(dgu), free(g), free(u), free(dod);
        free(outr), free(dgr), free(dur), free(dg), free(du);
    }
}
END_TEST

typedef struct {
    int64_t n;
    const double *other, *r;
    int wrt_gate;
} swiglu_ctx;

static double swiglu_loss(const double *x, const void *p)
{
    const swiglu_ctx *c = p;
    double *y = test_zeros_d(c->n);
    if (c->wrt_gate)
        ref_swiglu_fwd(c->n, x, c->other, y);
    else
        ref_swiglu_fwd(c->n, c->other, x, y);
    double l = dot_d(y, c->r, c->n);
    free(y);
    return l;
}

START_TEST(swiglu_backward_finite_differences)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(42);
    int64_t n = 11;
    float *g = test_rand_f(&rng, n, -5, 5), *u = test_rand_f(&rng, n, -2, 2),
          *dout = test_rand_f(&rng, n, -1, 1);
    float *dg = test_rand_f(&rng, n, 0, 1), *du = test_rand_f(&rng, n, 0, 1);
    double *gd = test_to_d(g, n), *ud = test_to_d(u, n), *rd = test_to_d(dout, n);
    double *fg = test_zeros_d(n), *fu = test_zeros_d(n);
    swiglu_ctx cg = {n, ud, rd, 1}, cu = {n, gd, rd, 0};
    fd_grad(swiglu_loss, &cg, gd, n, fg);
    fd_grad(swiglu_loss, &cu, ud, n, fu);
    ck_assert_int_eq(bk_swiglu_bwd(&q, 1, n, g, u, n, dout, dg, du), BK_OK);
    test_assert_close("swiglu dgate vs fd", dg, fg, n, 1e-5, 1e-4);
    test_assert_close("swiglu dup vs fd", du, fu, n, 1e-5, 1e-4);
    free(g), free(u), free(dout), free(dg), free(du), free(gd), free(ud), free(rd), free(fg),
        free(fu);
}
END_TEST

/* ---------------------------------------------------------------- embedding */
START_TEST(embedding_matches_reference)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {5, 3, 7}, {100, 17, 33}, {300, 50, 1000}};
    uint64_t rng = test_rng(51);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], V = shapes[s][1], D = shapes[s][2];
        int64_t *tok = malloc((size_t)n * sizeof(int64_t));
        for (int64_t r = 0; r < n; r++) tok[r] = (int64_t)(bu_rng_next(&rng) % (uint64_t)V);
        tok[0] = V - 1;
        float *table = test_rand_f(&rng, V * D, -1, 1), *out = test_rand_f(&rng, n * D, 0, 1);
        float *dout = test_rand_f(&rng, n * D, -1, 1), *dt1 = test_rand_f(&rng, V * D, -1, 1),
              *dt2 = test_copy_f(dt1, V * D);
        double *td = test_to_d(table, V * D), *outr = test_zeros_d(n * D),
               *dtr = test_to_d(dt1, V * D);
        double *dod = test_to_d(dout, n * D);
        ref_embedding_gather(n, D, tok, td, outr);
        ref_embedding_scatter_add(n, D, tok, dod, dtr);
        bk_queue q1 = host_q(1), q2 = host_q(2);
        ck_assert_int_eq(bk_embedding_gather(&q2, n, V, D, tok, table, out), BK_OK);
        test_assert_close("embedding gather", out, outr, n * D, 0, 0);
        ck_assert_int_eq(bk_embedding_scatter_add(&q1, n, V, D, tok, dout, dt1), BK_OK);
        ck_assert_int_eq(bk_embedding_scatter_add(&q2, n, V, D, tok, dout, dt2), BK_OK);
        test_assert_close("embedding scatter-add", dt2, dtr, V * D, 1e-6, 1e-5);
        /* deterministic: bitwise the same for 1 and 2 threads */
        ck_assert(memcmp(dt1, dt2, (size_t)(V * D) * sizeof(float)) == 0);
        free(tok), free(table), free(out), free(dout), free(dt1), free(dt2);
        free(td), free(outr), free(dtr), free(dod);
    }
}
END_TEST

typedef struct {
    int64_t n, D;
    const int64_t *tok;
    const double *r;
} emb_ctx;

static double emb_loss(const double *table, const void *p)
{
    const emb_ctx *c = p;
    double *y = test_zeros_d(c->n * c->D);
    ref_embedding_gather(c->n, c->D, c->tok, table, y);
    double l = dot_d(y, c->r, c->n * c->D);
    free(y);
    return l;
}

START_TEST(embedding_backward_finite_differences)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(52);
    int64_t n = 6, V = 4, D = 3, tok[6] = {2, 0, 2, 3, 2, 0};
    float *table = test_rand_f(&rng, V * D, -1, 1), *dout = test_rand_f(&rng, n * D, -1, 1);
    float *dt = calloc((size_t)(V * D), sizeof(float));
    double *td = test_to_d(table, V * D), *rd = test_to_d(dout, n * D), *g = test_zeros_d(V * D);
    emb_ctx c = {n, D, tok, rd};
    fd_grad(emb_loss, &c, td, V * D, g);
    ck_assert_int_eq(bk_embedding_scatter_add(&q, n, V, D, tok, dout, dt), BK_OK);
    test_assert_close("embedding dtable vs fd", dt, g, V * D, 1e-6, 1e-5);
    free(table), free(dout), free(dt), free(td), free(rd), free(g);
}
END_TEST

/* ---------------------------------------------------------------- AdamW, norm, clipping */
START_TEST(adamw_matches_reference_over_steps)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(61);
    int64_t n = 40003; /* crosses the parallel threshold, not a multiple of 16 */
    bk_adamw_params hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    float *p = test_rand_f(&rng, n, -1, 1), *m = calloc((size_t)n, sizeof(float));
    float *v = calloc((size_t)n, sizeof(float));
    double *pr = test_to_d(p, n), *mr = test_zeros_d(n), *vr = test_zeros_d(n);
    for (int64_t step = 1; step <= 6; step++) {
        float *g = test_rand_f(&rng, n, -2, 2);
        g[0] = 0.0f; /* a zero gradient on a fresh moment: update = weight decay only */
        float scale = step == 3 ? 0.25f : 1.0f;
        double *gd = test_to_d(g, n);
        ref_adamw_step(n, pr, mr, vr, gd, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, step,
                       scale);
        ck_assert_int_eq(bk_adamw_step(&q, n, p, g, m, v, &hp, step, scale), BK_OK);
        test_assert_close("adamw param", p, pr, n, 1e-6, 1e-5);
        test_assert_close("adamw m", m, mr, n, 1e-7, 1e-5);
        test_assert_close("adamw v", v, vr, n, 1e-7, 1e-5);
        free(g), free(gd);
    }
    free(p), free(m), free(v), free(pr), free(mr), free(vr);
}
END_TEST

START_TEST(grad_norm_and_clipping)
{
    uint64_t rng = test_rng(71);
    int64_t counts[3] = {1, 100001, 37};
    float *bufs[3];
    double ref = 0.0;
    for (int b = 0; b < 3; b++) {
        bufs[b] = test_rand_f(&rng, counts[b], -3, 3);
        for (int64_t i = 0; i < counts[b]; i++) ref += (double)bufs[b][i] * bufs[b][i];
    }
    bk_queue q1 = host_q(1), q2 = host_q(2);
    double s1 = -1, s2 = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q1, 3, (const float *const *)bufs, counts, &s1), BK_OK);
    ck_assert_int_eq(bk_grad_sqnorm(&q2, 3, (const float *const *)bufs, counts, &s2), BK_OK);
    ck_assert(fabs(s1 - ref) <= 1e-12 * ref);
    ck_assert(s1 == s2); /* independent of the thread count */
    double zero = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q1, 0, NULL, NULL, &zero), BK_OK);
    ck_assert(zero == 0.0);

    /* clipping factor: min(1, max_norm / norm) */
    ck_assert_float_eq(bk_clip_scale(4.0, 1.0), 0.5f);
    ck_assert_float_eq(bk_clip_scale(0.25, 1.0), 1.0f);
    ck_assert_float_eq(bk_clip_scale(0.0, 1.0), 1.0f);
    ck_assert(isnan(bk_clip_scale(INFINITY, 1.0)));
    ck_assert(isnan(bk_clip_scale(NAN, 1.0)));
    /* clip the buffers and check the new norm is max_norm */
    double max_norm = 0.5 * sqrt(ref);
    float scale = bk_clip_scale(s1, max_norm);
    for (int b = 0; b < 3; b++) ck_assert_int_eq(bk_scale(&q2, counts[b], bufs[b], scale), BK_OK);
    double s3 = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q2, 3, (const float *const *)bufs, counts, &s3), BK_OK);
    ck_assert(fabs(sqrt(s3) - max_norm) <= 1e-6 * max_norm);
    for (int b = 0; b < 3; b++) free(bufs[b]);
}
END_TEST

/* ---------------------------------------------------------------- vectors */
START_TEST(vector_helpers_match_reference)
{
    uint64_t rng = test_rng(73);
    const int64_t n = 40001; /* above the size where the loops go parallel */
    float *x = test_rand_f(&rng, n, -1, 1), *y = test_rand_f(&rng, n, -1, 1);
    float *y0 = malloc((size_t)n * sizeof(float));
    memcpy(y0, y, (size_t)n * sizeof(float));
    bk_queue q = host_q(2);
    ck_assert_int_eq(bk_axpy(&q, n, 0.5f, x, y), BK_OK);
    for (int64_t i = 0; i < n; i++)
        ck_assert(fabs(y[i] - ((double)y0[i] + 0.5 * (double)x[i])) <= 2e-7);
    ck_assert_int_eq(bk_fill(&q, n - 1, y, -3.0f), BK_OK);
    for (int64_t i = 0; i < n - 1; i++) ck_assert_float_eq(y[i], -3.0f);
    ck_assert_float_eq(y[n - 1], (float)((double)y0[n - 1] + 0.5 * (double)x[n - 1]));
    ck_assert_int_eq(bk_copy(&q, y + 1, y, 8 * sizeof(float)), BK_OK); /* overlap: memmove */
    ck_assert_float_eq(y[8], -3.0f);
    ck_assert_int_eq(bk_copy(&q, y, x, (size_t)n * sizeof(float)), BK_OK);
    ck_assert_int_eq(memcmp(x, y, (size_t)n * sizeof(float)), 0);
    /* [a, b, w] -> [b, a, w] against the index formula, and back to the bits */
    const int64_t a = 37, b = 3, w = 360; /* a b w = 39960 floats: the parallel loop */
    ck_assert_int_eq(bk_swap_axes(&q, a, b, w, x, y), BK_OK);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            ck_assert_int_eq(memcmp(y + (j * a + i) * w, x + (i * b + j) * w, w * sizeof(float)),
                             0);
    ck_assert_int_eq(bk_swap_axes(&q, b, a, w, y, y0), BK_OK);
    ck_assert_int_eq(memcmp(y0, x, (size_t)(a * b * w) * sizeof(float)), 0);
    ck_assert_int_eq(bk_swap_axes(&q, a, b, w, NULL, y), BK_ERR_ARG);
    free(x), free(y), free(y0);
    /* allocation in the queue's memory: zeroed on the host, never NULL */
    void *empty = NULL;
    ck_assert_int_eq(bk_alloc(&q, 0, &empty), BK_OK);
    ck_assert_ptr_nonnull(empty);
    ck_assert_int_eq(bk_free(&q, empty), BK_OK);
    float *zeros = NULL, *filled = NULL;
    ck_assert_int_eq(bk_alloc_floats(&q, n, 0.0f, &zeros), BK_OK);
    ck_assert_int_eq(bk_alloc_floats(&q, 3, 1.25f, &filled), BK_OK);
    for (int64_t i = 0; i < n; i++) ck_assert_float_eq(zeros[i], 0.0f);
    for (int i = 0; i < 3; i++) ck_assert_float_eq(filled[i], 1.25f);
    bk_free(&q, zeros), bk_free(&q, filled);
    ck_assert_int_eq(bk_alloc(&q, 8, NULL), BK_ERR_ARG);
}
END_TEST

/* A queue with an arena: bk_alloc takes pieces of it (aligned, counted, still
 * zeroed on the host when a piece was used before), bk_free gives them back,
 * a request no piece holds is BK_ERR_NOMEM, a pointer the arena did not give
 * is refused. */
START_TEST(allocation_from_the_queues_arena)
{
    const size_t capacity = 64 << 10;
    bk_arena *arena = NULL;
    ck_assert_int_eq(bk_arena_create(capacity, BK_ARENA_HOST, &arena), BK_OK);
    bk_queue q = host_q(1);
    q.arena = arena;
    float *a = NULL, *b = NULL;
    ck_assert_int_eq(bk_alloc_floats(&q, 1000, 0.0f, &a), BK_OK);
    ck_assert_int_eq(bk_alloc_floats(&q, 3, 2.5f, &b), BK_OK);
    ck_assert_uint_eq((uintptr_t)a % BK_ARENA_ALIGN, 0);
    bk_arena_stats st = bk_arena_stats_of(arena);
    ck_assert_uint_eq(st.pieces, 2);
    ck_assert_uint_eq(st.in_use, 4096 + BK_ARENA_ALIGN); /* 4000 and 12 bytes, rounded */
    for (int i = 0; i < 3; i++) ck_assert_float_eq(b[i], 2.5f);
    for (int i = 0; i < 1000; i++) a[i] = -1.0f;
    ck_assert_int_eq(bk_free(&q, a), BK_OK);
    /* the same piece again (best fit), zeroed although it held -1 */
    float *c = NULL;
    ck_assert_int_eq(bk_alloc_floats(&q, 1000, 0.0f, &c), BK_OK);
    ck_assert_ptr_eq(c, a);
    for (int i = 0; i < 1000; i++) ck_assert_float_eq(c[i], 0.0f);
    void *big = NULL;
    ck_assert_int_eq(bk_alloc(&q, capacity, &big), BK_ERR_NOMEM);
    ck_assert_ptr_null(big);
    float outside = 0;
    ck_assert_int_eq(bk_free(&q, &outside), BK_ERR_ARG);
    ck_assert_int_eq(bk_free(&q, c), BK_OK);
    ck_assert_int_eq(bk_free(&q, b), BK_OK);
    st = bk_arena_stats_of(arena);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.largest_free, st.capacity);
    ck_assert_uint_eq(st.peak, 4096 + BK_ARENA_ALIGN);
    bk_arena_destroy(arena);
}
END_TEST

/* ---------------------------------------------------------------- cross-entropy */
START_TEST(cross_entropy_matches_reference)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 5}, {7, 33}, {40, 1001}, {3, 32000}};
    const int64_t ignore = -100;
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(81);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 3; variant++) {
            int64_t rows = shapes[s][0], V = shapes[s][1], ld = V + (int64_t)s % 2;
            /* variant 1: huge logits (exp would overflow without the max);
             * variant 2: z-loss */
            double offset = variant == 1 ? 3e4 : 0.0, z = variant == 2 ? 1e-2 : 0.0;
            float *lg = test_rand_f(&rng, rows * ld, -5, 5);
            for (int64_t i = 0; i < rows * ld; i++) lg[i] += (float)offset;
            int64_t *lab = malloc((size_t)rows * sizeof(int64_t));
            for (int64_t r = 0; r < rows; r++)
                lab[r] = (r % 3 == 1) ? ignore : (int64_t)(bu_rng_next(&rng) % (uint64_t)V);
            double *x = test_zeros_d(rows * V);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < V; j++) x[r * V + j] = lg[r * ld + j];
            double *lr = test_zeros_d(rows), *er = test_zeros_d(rows), *dr = test_zeros_d(rows * V);
            double scale = 1.0 / 7.0;
            int64_t nv_ref = ref_cross_entropy(rows, V, x, lab, ignore, scale, z, lr, er, dr);
            float *loss = test_rand_f(&rng, rows, 0, 1), *lse = test_rand_f(&rng, rows, 0, 1);
            float *pad = test_copy_f(lg, rows * ld);
            int64_t nv = -1;
            ck_assert_int_eq(bk_cross_entropy_fwd_bwd(&q, rows, V, lg, ld, lab, ignore,
                                                      (float)scale, (float)z, loss, lse, &nv),
                             BK_OK);
            ck_assert_int_eq(nv, nv_ref);
            char what[96];
            snprintf(what, sizeof what, "ce rows=%lld V=%lld variant %d", (long long)rows,
                     (long long)V, variant);
            /* lse is fp32: relative error eps32 of |lse| ~ offset */
            test_assert_close(what, lse, er, rows, 1e-6, 2e-7 * (z > 0 ? 10 : 1) + 1e-6);
            test_assert_close(what, loss, lr, rows, 2e-5 + 4e-7 * offset, 1e-5);
            float *d = malloc((size_t)(rows * V) * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                memcpy(d + r * V, lg + r * ld, (size_t)V * sizeof(float));
                for (int64_t j = V; j < ld; j++)
                    ck_assert(memcmp(&lg[r * ld + j], &pad[r * ld + j], 4) == 0);
            }
            test_assert_close(what, d, dr, rows * V, 1e-6, 1e-4);
            free(lg), free(lab), free(x), free(lr), free(er), free(dr), free(loss), free(lse);
            free(pad), free(d);
        }
}
END_TEST

START_TEST(cross_entropy_all_ignored_is_finite)
{
    bk_queue q = bk_host_queue();
    int64_t rows = 4, V = 9, lab[4] = {-1, -1, -1, -1};
    float lg[36], loss[4], lse[4];
    for (int i = 0; i < 36; i++) lg[i] = i % 2 ? NAN : INFINITY; /* padding garbage */
    int64_t nv = -1;
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, rows, V, lg, V, lab, -1, 0.0f, 1e-4f, loss, lse, &nv), BK_OK);
    ck_assert_int_eq(nv, 0);
    for (int i = 0; i < 36; i++) ck_assert(lg[i] == 0.0f);
    for (int r = 0; r < 4; r++) ck_assert(loss[r] == 0.0f && lse[r] == 0.0f);
    /* zero rows: nothing to do, no NaN either */
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 0, V, lg, V, lab, -1, 1.0f, 0.0f, loss, NULL, &nv), BK_OK);
    ck_assert_int_eq(nv, 0);
}
END_TEST

/* bk_cross_entropy_sum over two chunks: each chunk's losses and dlogits are
 * bk_cross_entropy_fwd_bwd's to the bit (its bad labels' rows as ignored
 * ones), and the sums add up over both: the losses in row order in double,
 * the valid rows, the two bad labels. */
START_TEST(cross_entropy_sum_adds_up_over_chunks)
{
    const int64_t rows = 20, V = 101, ignore = -100;
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(82);
    bk_ce_sums sums;
    ck_assert_int_eq(bk_ce_sums_clear(&q, &sums), BK_OK);
    double loss_sum = 0.0;
    int64_t valid = 0;
    for (int chunk = 0; chunk < 2; chunk++) {
        float *lg = test_rand_f(&rng, rows * V, -5, 5), *ref = test_copy_f(lg, rows * V);
        int64_t lab[20], lab_ok[20];
        for (int64_t r = 0; r < rows; r++)
            lab[r] = r % 4 == 1 ? ignore : (int64_t)(bu_rng_next(&rng) % (uint64_t)V);
        lab[7 + chunk] = chunk ? -3 : V; /* one bad label a chunk */
        for (int64_t r = 0; r < rows; r++) {
            int bad = lab[r] != ignore && (lab[r] < 0 || lab[r] >= V);
            lab_ok[r] = bad ? ignore : lab[r];
            valid += lab_ok[r] != ignore;
        }
        float loss[20], loss_ref[20];
        ck_assert_int_eq(bk_cross_entropy_fwd_bwd(&q, rows, V, ref, V, lab_ok, ignore, 0.5f, 1e-3f,
                                                  loss_ref, NULL, NULL),
                         BK_OK);
        ck_assert_int_eq(
            bk_cross_entropy_sum(&q, rows, V, lg, V, lab, ignore, 0.5f, 1e-3f, loss, &sums), BK_OK);
        ck_assert(memcmp(loss, loss_ref, sizeof loss) == 0);
        ck_assert(memcmp(lg, ref, (size_t)(rows * V) * sizeof(float)) == 0);
        double s = 0.0;
        for (int64_t r = 0; r < rows; r++) s += (double)loss_ref[r];
        loss_sum += s;
        free(lg), free(ref);
    }
    ck_assert(sums.loss == loss_sum);
    ck_assert_int_eq(sums.valid, valid);
    ck_assert_int_eq(sums.bad, 2);
}
END_TEST

typedef struct {
    int64_t rows, V;
    const int64_t *lab;
    double z, scale;
} ce_ctx;

static double ce_loss(const double *x, const void *p)
{
    const ce_ctx *c = p;
    double *l = test_zeros_d(c->rows);
    ref_cross_entropy(c->rows, c->V, x, c->lab, -100, 1.0, c->z, l, NULL, NULL);
    double s = 0.0;
    for (int64_t r = 0; r < c->rows; r++) s += l[r];
    free(l);
    return c->scale * s;
}

START_TEST(cross_entropy_backward_finite_differences)
{
    bk_queue q = bk_host_queue();
    uint64_t rng = test_rng(82);
    int64_t rows = 4, V = 7, lab[4] = {3, -100, 0, 6};
    for (int zi = 0; zi < 2; zi++) {
        double z = zi ? 0.05 : 0.0, scale = 1.0 / 3.0;
        float *lg = test_rand_f(&rng, rows * V, -3, 3), loss[4];
        double *x = test_to_d(lg, rows * V), *g = test_zeros_d(rows * V),
               *dr = test_zeros_d(rows * V);
        ce_ctx c = {rows, V, lab, z, scale};
        fd_grad(ce_loss, &c, x, rows * V, g);
        ref_cross_entropy(rows, V, x, lab, -100, scale, z, NULL, NULL, dr);
        assert_close_d("ref ce dlogits vs fd", dr, g, rows * V, 1e-8, 1e-6);
        ck_assert_int_eq(bk_cross_entropy_fwd_bwd(&q, rows, V, lg, V, lab, -100, (float)scale,
                                                  (float)z, loss, NULL, NULL),
                         BK_OK);
        test_assert_close(zi ? "ce dlogits vs fd (z-loss)" : "ce dlogits vs fd", lg, g, rows * V,
                          1e-6, 1e-4);
        free(lg), free(x), free(g), free(dr);
    }
}
END_TEST

/* ---------------------------------------------------------------- invalid arguments */
START_TEST(invalid_arguments_are_rejected)
{
    bk_queue q = bk_host_queue(), dev = {BK_DEVICE, NULL, 0, NULL};
    float buf[64] = {0}, out[64], sentinel[64];
    for (int i = 0; i < 64; i++) out[i] = sentinel[i] = (float)i;
    int64_t pos[4] = {0, 1, 2, 3}, tok_bad[2] = {0, 4}, lab_bad[2] = {0, 9};
    float *bufs[1] = {buf};
    int64_t cnt[1] = {-1};
    double sq;
    bk_adamw_params hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f}, hp_bad = hp;
    hp_bad.beta1 = 1.0f;

    /* a device queue is not served by the CPU backend (not an argument error) */
    ck_assert_int_eq(bk_rmsnorm_fwd(&dev, 1, 4, buf, buf, 1e-5f, out, NULL), BK_ERR_UNSUPPORTED);
    ck_assert_int_eq(
        bk_gemm(&dev, BK_NO_TRANS, BK_NO_TRANS, 1, 1, 1, 1.0f, buf, 1, buf, 1, 0.0f, out, 1),
        BK_ERR_UNSUPPORTED);
#ifdef BURST_DEBUG
    /* debug builds abort on an invalid argument instead of returning */
    (void)q, (void)pos, (void)tok_bad, (void)lab_bad, (void)bufs, (void)cnt, (void)sq, (void)hp_bad;
#else
    ck_assert_int_eq(bk_rmsnorm_fwd(NULL, 1, 4, buf, buf, 1e-5f, out, NULL), BK_ERR_ARG);
    /* GEMM: NULL, negative sizes, leading dims too small, bad flags */
    ck_assert_int_eq(
        bk_gemm(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, NULL, 2, buf, 2, 0.0f, out, 2),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_gemm_builtin(&q, BK_NO_TRANS, BK_NO_TRANS, -1, 2, 2, 1.0f, buf, 2, buf, 2, 0.0f, out, 2),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_gemm_builtin(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 3, 1.0f, buf, 2, buf, 2, 0.0f, out, 2),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_gemm_builtin(&q, BK_TRANS, BK_NO_TRANS, 3, 2, 2, 1.0f, buf, 2, buf, 2, 0.0f, out, 2),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_gemm_builtin(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 3, 2, 1.0f, buf, 2, buf, 3, 0.0f, out, 2),
        BK_ERR_ARG);
    ck_assert_int_eq(bk_gemm_builtin(&q, (bk_transpose)7, BK_NO_TRANS, 2, 2, 2, 1.0f, buf, 2, buf,
                                     2, 0.0f, out, 2),
                     BK_ERR_ARG);
    if (bk_gemm_has_cblas())
        ck_assert_int_eq(bk_gemm_cblas(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, buf, 2, buf, 1,
                                       0.0f, out, 2),
                         BK_ERR_ARG);
    /* RMSNorm */
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, -1, 4, buf, buf, 1e-5f, out, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, 1, 0, buf, buf, 1e-5f, out, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, 1, 4, buf, NULL, 1e-5f, out, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_rmsnorm_bwd(&q, 1, 4, buf, buf, NULL, buf, out, out), BK_ERR_ARG);
    /* RoPE: odd d, zero heads, NULL positions, bad theta / factor / llama3 bands / yarn base */
    bk_rope rope = test_rope(0, 1e4);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 5, pos, &rope, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_rope_bwd(&q, 1, 1, 3, pos, &rope, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 0, 4, pos, &rope, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, NULL, &rope, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, pos, NULL, buf, out), BK_ERR_ARG);
    rope.theta = 0.0;
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, pos, &rope, buf, out), BK_ERR_ARG);
    rope = test_rope(1, 1e4), rope.factor = -1.0;
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, pos, &rope, buf, out), BK_ERR_ARG);
    rope = test_rope(2, 1e4), rope.high_freq_factor = rope.low_freq_factor;
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, pos, &rope, buf, out), BK_ERR_ARG);
    rope = test_rope(3, 1.0);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 4, pos, &rope, buf, out), BK_ERR_ARG);
    /* SwiGLU: ld_in < cols, NULL */
    ck_assert_int_eq(bk_swiglu_fwd(&q, 2, 4, buf, buf, 3, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_swiglu_bwd(&q, 2, 4, buf, buf, 4, NULL, out, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_swiglu_fwd(&q, -2, 4, buf, buf, 4, out), BK_ERR_ARG);
    /* embedding: a token out of range, nothing written */
    ck_assert_int_eq(bk_embedding_gather(&q, 2, 4, 3, tok_bad, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_embedding_scatter_add(&q, 2, 4, 3, tok_bad, buf, out), BK_ERR_ARG);
    ck_assert_int_eq(bk_embedding_gather(&q, 2, 0, 3, pos, buf, out), BK_ERR_ARG);
    /* AdamW */
    ck_assert_int_eq(bk_adamw_step(&q, 4, out, buf, out, out, &hp, 0, 1.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_adamw_step(&q, 4, out, buf, out, out, &hp_bad, 1, 1.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_adamw_step(&q, 4, out, buf, out, out, NULL, 1, 1.0f), BK_ERR_ARG);
    /* gradient norm */
    ck_assert_int_eq(bk_grad_sqnorm(&q, 1, (const float *const *)bufs, cnt, &sq), BK_ERR_ARG);
    ck_assert_int_eq(bk_grad_sqnorm(&q, 1, NULL, cnt, &sq), BK_ERR_ARG);
    ck_assert_int_eq(bk_scale(&q, -3, out, 2.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_fill(&q, -1, out, 0.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_axpy(&q, 2, 1.0f, NULL, out), BK_ERR_ARG);
    /* cross-entropy: label out of range, ld < V, negative z-loss */
    float loss[2];
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 2, 8, out, 8, lab_bad, -100, 1.0f, 0.0f, loss, NULL, NULL),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 2, 8, out, 7, pos, -100, 1.0f, 0.0f, loss, NULL, NULL),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 2, 8, out, 8, pos, -100, 1.0f, -1.0f, loss, NULL, NULL),
        BK_ERR_ARG);
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 2, 8, out, 8, pos, -100, 1.0f, 0.0f, NULL, NULL, NULL),
        BK_ERR_ARG);
#endif
    /* nothing rejected wrote anything */
    ck_assert(memcmp(out, sentinel, sizeof out) == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = check_tcase(s, "ops", 120);
    check_add_tests(tc, expf_is_accurate, rope_sincos_is_accurate, gemm_builtin_matches_reference,
                    gemm_cblas_matches_reference, gemm_dispatch_matches_reference,
                    gemm_thread_counts_agree, rmsnorm_matches_reference,
                    bf16_outputs_are_the_rounded_fp32_ones,
                    rmsnorm_backward_finite_differences, rmsnorm_backward_is_deterministic,
                    rope_matches_reference, rope_pairs_are_half_split,
                    rope_backward_finite_differences, swiglu_matches_reference,
                    swiglu_backward_finite_differences, embedding_matches_reference,
                    embedding_backward_finite_differences, adamw_matches_reference_over_steps,
                    grad_norm_and_clipping, vector_helpers_match_reference,
                    allocation_from_the_queues_arena, cross_entropy_matches_reference,
                    cross_entropy_all_ignored_is_finite, cross_entropy_sum_adds_up_over_chunks,
                    cross_entropy_backward_finite_differences, invalid_arguments_are_rejected);
    return check_run(s);
}
