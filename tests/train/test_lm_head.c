/* test_lm_head.c: the LM head fused with the loss (src/train/lm_head.c). The chunked
 * path against the unfused one for many chunk sizes; both against a
 * double-precision reference written here (z-loss and ignore_index included);
 * finite differences of the loss for dh and dW; a shard whose rows are all
 * ignored; the scratch size (one chunk of logits, never n of them); the
 * head on a bf16 weight (its products on bf16 operands) against the double
 * reference on the rounded values; invalid arguments.
 *
 * "Relative" below is normwise: max |got - want| / max |want|. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/bf16.h"
#include "src/train/lm_head.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

#define IGNORE (-100)

/* ---------------------------------------------------------------- helpers */
/* labels[n]: about frac_ignored of them IGNORE, the rest in [0, V). */
static int64_t *rand_labels(uint64_t *rng, int64_t n, int64_t V, double frac_ignored)
{
    int64_t *y = test_alloc((size_t)(n > 0 ? n : 0), sizeof *y);
    for (int64_t r = 0; r < n; r++)
        y[r] = bu_rng_unit(rng) < frac_ignored ? IGNORE : (int64_t)(bu_rng_next(rng) % (uint64_t)V);
    return y;
}

static int64_t count_valid(int64_t n, const int64_t *labels)
{
    int64_t c = 0;
    for (int64_t r = 0; r < n; r++) c += labels[r] != IGNORE;
    return c;
}

/* Normwise relative difference of float got[n] against want[n] (double). */
static double rel_diff(const float *got, const double *want, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        num = d > num ? d : num;
        den = fabs(want[i]) > den ? fabs(want[i]) : den;
    }
    return den > 0.0 ? num / den : num;
}

static double rel_diff_f(const float *got, const float *want, int64_t n)
{
    double *w = test_to_d(want, n);
    double r = rel_diff(got, w, n);
    free(w);
    return r;
}

static int all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* ---------------------------------------------------------------- the double reference */
/* Loss and gradients of L = scale * sum over valid rows of
 *   lse_r - logit_r[y_r] + z * lse_r^2,  logits[n, V] = h[n, D] W[V, D]^T.
 * Returns the unscaled loss sum; *nv gets the valid count. dh[n, D] and
 * dW[V, D] (either may be NULL) are overwritten with dL/dh and dL/dW. */
static double ref_head(int64_t n, int64_t D, int64_t V, const double *h, const double *W,
                       const int64_t *labels, double z, double scale, int64_t *nv, double *dh,
                       double *dW)
{
    double *x = test_zeros_d(V); /* one row of logits, then of dlogits */
    double sum = 0.0;
    int64_t valid = 0;
    if (dh) memset(dh, 0, (size_t)(n * D) * sizeof(double));
    if (dW) memset(dW, 0, (size_t)(V * D) * sizeof(double));
    for (int64_t r = 0; r < n; r++) {
        if (labels[r] == IGNORE) continue;
        valid++;
        const double *hr = h + r * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < D; k++) s += hr[k] * W[j * D + k];
            x[j] = s;
            mx = s > mx ? s : mx;
        }
        double se = 0.0;
        for (int64_t j = 0; j < V; j++) se += exp(x[j] - mx);
        double lse = mx + log(se);
        int64_t y = labels[r];
        sum += lse - x[y] + z * lse * lse;
        /* dL/dlogit_j = scale * (softmax_j (1 + 2 z lse) - [j == y]) */
        for (int64_t j = 0; j < V; j++)
            x[j] = scale * (exp(x[j] - lse) * (1.0 + 2.0 * z * lse) - (j == y ? 1.0 : 0.0));
        for (int64_t j = 0; j < V; j++) {
            for (int64_t k = 0; k < D; k++) {
                if (dh) dh[r * D + k] += x[j] * W[j * D + k];
                if (dW) dW[j * D + k] += x[j] * hr[k];
            }
        }
    }
    free(x);
    if (nv) *nv = valid;
    return sum;
}

/* ---------------------------------------------------------------- runs */
typedef struct {
    double loss;
    int64_t nv;
    float *dh; /* [n, D] */
    float *dW; /* [V, D], starting from dW0 */
} head_out;

static void head_out_free(head_out *r)
{
    free(r->dh);
    free(r->dW);
}

/* chunk < 0: the unfused path. The fused path's scratch is exactly
 * lm_head_scratch_floats() (ASan sees any overrun). */
static head_out run_head(int64_t chunk, float z, int64_t n, int64_t D, int64_t V, const float *h,
                         const float *W, const int64_t *labels, float scale, const float *dW0)
{
    bk_queue q = bk_host_queue();
    lm_head_opts o = {chunk < 0 ? 1 : chunk, z, IGNORE};
    head_out r = {0.0, 0, test_zeros_f(n * D), test_copy_f(dW0, V * D)};
    bk_ce_sums sums = {0};
    bk_status st;
    if (chunk < 0) {
        st = lm_head_unfused(&q, &o, n, D, V, h, W, labels, scale, &sums, r.dh, r.dW);
    } else {
        size_t sf = lm_head_scratch_floats(&o, V);
        ck_assert_uint_gt(sf, 0);
        float *scratch = malloc(sf * sizeof(float));
        ck_assert_ptr_nonnull(scratch);
        st = lm_head_fused(&q, &o, n, D, V, h, W, labels, scale, &sums, r.dh, r.dW, scratch);
        free(scratch);
    }
    ck_assert_int_eq(st, BK_OK);
    ck_assert_int_eq(lm_head_sums_read(&q, &sums, &r.loss, &r.nv), BK_OK);
    return r;
}

/* ---------------------------------------------------------------- tests */
/* (1) The chunked path equals the unfused one for chunks of 1, 7, n and > n. */
START_TEST(fused_equals_unfused)
{
    const int64_t D = 24, n = 67, Vs[] = {37, 1000};
    for (size_t iv = 0; iv < 2; iv++) {
        int64_t V = Vs[iv];
        for (int zi = 0; zi < 2; zi++) {
            float z = zi ? 1e-3f : 0.0f;
            uint64_t rng = test_rng(100 + 10 * iv + (uint64_t)zi);
            float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
            int64_t *labels = rand_labels(&rng, n, V, 0.15);
            float *dW0 = test_zeros_f(V * D); /* zeros: dW compared without an offset */
            float scale = 1.0f / (float)count_valid(n, labels);
            head_out ref = run_head(-1, z, n, D, V, h, W, labels, scale, dW0);
            ck_assert(all_finite(ref.dh, n * D) && all_finite(ref.dW, V * D));
            const int64_t chunks[] = {1, 7, n, n + 5};
            for (size_t ic = 0; ic < 4; ic++) {
                head_out f = run_head(chunks[ic], z, n, D, V, h, W, labels, scale, dW0);
                ck_assert_int_eq(f.nv, ref.nv);
                double lrel = fabs(f.loss - ref.loss) / fabs(ref.loss);
                double hrel = rel_diff_f(f.dh, ref.dh, n * D);
                double wrel = rel_diff_f(f.dW, ref.dW, V * D);
                if (lrel > 1e-6 || hrel > 1e-5 || wrel > 1e-5)
                    ck_abort_msg("V=%lld z=%g chunk=%lld: loss %.3g dh %.3g dW %.3g", (long long)V,
                                 (double)z, (long long)chunks[ic], lrel, hrel, wrel);
                head_out_free(&f);
            }
            head_out_free(&ref);
            free(h), free(W), free(labels), free(dW0);
        }
    }
}
END_TEST

/* (2) Both paths against the double reference, z-loss and ignored rows
 * included; dW accumulates onto what it held. */
START_TEST(matches_double_reference)
{
    const int64_t D = 24, n = 53, Vs[] = {37, 1000};
    const float zs[] = {0.0f, 0.01f};
    for (size_t iv = 0; iv < 2; iv++) {
        int64_t V = Vs[iv];
        for (size_t iz = 0; iz < 2; iz++) {
            uint64_t rng = test_rng(200 + 10 * iv + iz);
            float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
            int64_t *labels = rand_labels(&rng, n, V, 0.2);
            labels[0] = IGNORE, labels[n - 1] = IGNORE;
            float *dW0 = test_rand_f(&rng, V * D, -0.1, 0.1);
            int64_t nvalid = count_valid(n, labels);
            float scale = 1.0f / (float)nvalid;

            double *hd = test_to_d(h, n * D), *Wd = test_to_d(W, V * D);
            double *dh_ref = test_zeros_d(n * D), *dW_ref = test_zeros_d(V * D);
            int64_t nv_ref = 0;
            double loss_ref =
                ref_head(n, D, V, hd, Wd, labels, zs[iz], (double)scale, &nv_ref, dh_ref, dW_ref);
            for (int64_t i = 0; i < V * D; i++) dW_ref[i] += dW0[i];
            ck_assert_int_eq(nv_ref, nvalid);

            const int64_t chunks[] = {-1, 5, n};
            for (size_t ic = 0; ic < 3; ic++) {
                head_out f = run_head(chunks[ic], zs[iz], n, D, V, h, W, labels, scale, dW0);
                ck_assert_int_eq(f.nv, nvalid);
                double lrel = fabs(f.loss - loss_ref) / fabs(loss_ref);
                double hrel = rel_diff(f.dh, dh_ref, n * D);
                double wrel = rel_diff(f.dW, dW_ref, V * D);
                if (lrel > 1e-5 || hrel > 1e-4 || wrel > 1e-4)
                    ck_abort_msg("V=%lld z=%g chunk=%lld: loss %.3g dh %.3g dW %.3g", (long long)V,
                                 (double)zs[iz], (long long)chunks[ic], lrel, hrel, wrel);
                /* ignored rows have exactly zero dh */
                for (int64_t k = 0; k < D; k++) {
                    ck_assert(f.dh[k] == 0.0f);
                    ck_assert(f.dh[(n - 1) * D + k] == 0.0f);
                }
                head_out_free(&f);
            }
            free(hd), free(Wd), free(dh_ref), free(dW_ref);
            free(h), free(W), free(labels), free(dW0);
        }
    }
}
END_TEST

/* (3) Finite differences of L = scale * sum(loss) (double reference) against the
 * fp32 fused gradients, and against the reference's own analytic gradients. */
START_TEST(finite_differences)
{
    const int64_t n = 5, D = 4, V = 7;
    const double z = 0.05, eps = 1e-6;
    uint64_t rng = test_rng(300);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    int64_t labels[] = {3, IGNORE, 0, 6, 2};
    float scale = 1.0f / (float)count_valid(n, labels);
    float *dW0 = test_zeros_f(V * D);
    head_out f = run_head(2, (float)z, n, D, V, h, W, labels, scale, dW0);

    double *hd = test_to_d(h, n * D), *Wd = test_to_d(W, V * D);
    double *dh_ref = test_zeros_d(n * D), *dW_ref = test_zeros_d(V * D);
    ref_head(n, D, V, hd, Wd, labels, z, scale, NULL, dh_ref, dW_ref);
    for (int pass = 0; pass < 2; pass++) {
        double *p = pass ? Wd : hd;
        const float *got = pass ? f.dW : f.dh;
        const double *ana = pass ? dW_ref : dh_ref;
        int64_t cnt = pass ? V * D : n * D;
        for (int64_t i = 0; i < cnt; i++) {
            double keep = p[i];
            p[i] = keep + eps;
            double lp = ref_head(n, D, V, hd, Wd, labels, z, scale, NULL, NULL, NULL);
            p[i] = keep - eps;
            double lm = ref_head(n, D, V, hd, Wd, labels, z, scale, NULL, NULL, NULL);
            p[i] = keep;
            double fd = scale * (lp - lm) / (2.0 * eps);
            if (fabs(ana[i] - fd) > 1e-7 + 1e-6 * fabs(fd))
                ck_abort_msg("%s[%lld]: reference %.9g, fd %.9g", pass ? "dW" : "dh", (long long)i,
                             ana[i], fd);
            if (fabs((double)got[i] - fd) > 1e-5 + 1e-3 * fabs(fd))
                ck_abort_msg("%s[%lld]: fused %.9g, fd %.9g", pass ? "dW" : "dh", (long long)i,
                             (double)got[i], fd);
        }
    }
    head_out_free(&f);
    free(hd), free(Wd), free(dh_ref), free(dW_ref);
    free(h), free(W), free(dW0);
}
END_TEST

/* (4) A shard whose rows are all ignored: loss 0, n_valid 0, dh 0, dW
 * unchanged, no NaN -- even with the scale a zero count would give. And a
 * chunk of ignored rows among valid ones. */
START_TEST(all_rows_ignored)
{
    const int64_t n = 9, D = 24, V = 37;
    uint64_t rng = test_rng(400);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    float *dW0 = test_rand_f(&rng, V * D, -1, 1);
    int64_t labels[9];
    for (int64_t r = 0; r < n; r++) labels[r] = IGNORE;
    const float scales[] = {1.0f, INFINITY};
    const int64_t chunks[] = {-1, 1, 4, n, 100};
    for (size_t is = 0; is < 2; is++) {
        for (size_t ic = 0; ic < 5; ic++) {
            bk_queue q = bk_host_queue();
            lm_head_opts o = {chunks[ic] < 0 ? 1 : chunks[ic], 0.01f, IGNORE};
            bk_ce_sums sums = {0};
            float *dh = test_zeros_f(n * D), *dW = test_copy_f(dW0, V * D);
            for (int64_t i = 0; i < n * D; i++) dh[i] = 7.0f; /* must be overwritten */
            bk_status st;
            if (chunks[ic] < 0) {
                st = lm_head_unfused(&q, &o, n, D, V, h, W, labels, scales[is], &sums, dh, dW);
            } else {
                float *scratch = test_zeros_f((int64_t)lm_head_scratch_floats(&o, V));
                st = lm_head_fused(&q, &o, n, D, V, h, W, labels, scales[is], &sums, dh, dW,
                                   scratch);
                free(scratch);
            }
            ck_assert_int_eq(st, BK_OK);
            ck_assert(sums.loss == 0.0);
            ck_assert_int_eq(sums.valid, 0);
            for (int64_t i = 0; i < n * D; i++) ck_assert(dh[i] == 0.0f);
            ck_assert(memcmp(dW, dW0, (size_t)(V * D) * sizeof(float)) == 0);
            free(dh), free(dW);
        }
    }

    /* rows 0-3 ignored (the first chunk of 4), the rest valid */
    int64_t mixed[9] = {IGNORE, IGNORE, IGNORE, IGNORE, 1, 5, IGNORE, 36, 0};
    float scale = 1.0f / (float)count_valid(n, mixed);
    head_out f = run_head(4, 0.01f, n, D, V, h, W, mixed, scale, dW0);
    head_out u = run_head(-1, 0.01f, n, D, V, h, W, mixed, scale, dW0);
    ck_assert_int_eq(f.nv, 4);
    ck_assert(isfinite(f.loss) && f.loss > 0.0);
    ck_assert(all_finite(f.dh, n * D) && all_finite(f.dW, V * D));
    for (int64_t i = 0; i < 4 * D; i++) ck_assert(f.dh[i] == 0.0f);
    ck_assert(rel_diff_f(f.dh, u.dh, n * D) < 1e-5);
    ck_assert(rel_diff_f(f.dW, u.dW, V * D) < 1e-5);
    head_out_free(&f);
    head_out_free(&u);

    /* n = 0: nothing added */
    {
        bk_queue q = bk_host_queue();
        lm_head_opts o = {4, 0.0f, IGNORE};
        bk_ce_sums sums = {0};
        float *scratch = test_zeros_f((int64_t)lm_head_scratch_floats(&o, V));
        float *dW = test_copy_f(dW0, V * D);
        ck_assert_int_eq(lm_head_fused(&q, &o, 0, D, V, h, W, labels, 1.0f, &sums, h, dW, scratch),
                         BK_OK);
        ck_assert(sums.loss == 0.0 && sums.valid == 0);
        ck_assert(memcmp(dW, dW0, (size_t)(V * D) * sizeof(float)) == 0);
        free(scratch), free(dW);
    }
    free(h), free(W), free(dW0);
}
END_TEST

/* (4b) The bf16 weight (lm_head_fused_bf16): the logits are products of
 * bf16 values accumulated in fp32, so the loss is the double reference's on
 * h and W rounded to bf16, nearly exactly; dh and dW come from dlogits
 * rounded to bf16 as well (a relative 2^-9 each), so they match within 1%.
 * The scratch is exactly lm_head_bf16_scratch_floats() (ASan sees any
 * overrun), with chunks of 5 (the last one short) and of n. */
START_TEST(bf16_weight_matches_double_reference)
{
    const int64_t D = 24, n = 53, V = 1000;
    uint64_t rng = test_rng(600);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    int64_t *labels = rand_labels(&rng, n, V, 0.2);
    float *dW0 = test_rand_f(&rng, V * D, -0.1, 0.1);
    uint16_t *W16 = test_alloc((size_t)(V * D), sizeof *W16);
    double *hd = test_zeros_d(n * D), *Wd = test_zeros_d(V * D);
    for (int64_t i = 0; i < V * D; i++) {
        W16[i] = bk_float_to_bf16(W[i]);
        Wd[i] = bk_bf16_to_float(W16[i]);
    }
    for (int64_t i = 0; i < n * D; i++) hd[i] = bk_bf16_to_float(bk_float_to_bf16(h[i]));
    int64_t nvalid = count_valid(n, labels);
    float scale = 1.0f / (float)nvalid;
    double *dh_ref = test_zeros_d(n * D), *dW_ref = test_zeros_d(V * D);
    double loss_ref = ref_head(n, D, V, hd, Wd, labels, 0.01, scale, NULL, dh_ref, dW_ref);
    for (int64_t i = 0; i < V * D; i++) dW_ref[i] += dW0[i];

    const int64_t chunks[] = {5, n};
    for (size_t ic = 0; ic < 2; ic++) {
        bk_queue q = bk_host_queue();
        lm_head_opts o = {chunks[ic], 0.01f, IGNORE};
        size_t sf = lm_head_bf16_scratch_floats(&o, V, D);
        ck_assert_uint_gt(sf, lm_head_scratch_floats(&o, V));
        float *scratch = malloc(sf * sizeof(float)), *dh = test_zeros_f(n * D);
        float *dW = test_copy_f(dW0, V * D);
        bk_ce_sums sums = {0};
        ck_assert_int_eq(
            lm_head_fused_bf16(&q, &o, n, D, V, h, W16, labels, scale, &sums, dh, dW, scratch),
            BK_OK);
        ck_assert_int_eq(sums.valid, nvalid);
        double lrel = fabs(sums.loss - loss_ref) / fabs(loss_ref);
        double hrel = rel_diff(dh, dh_ref, n * D), wrel = rel_diff(dW, dW_ref, V * D);
        if (lrel > 1e-5 || hrel > 1e-2 || wrel > 1e-2)
            ck_abort_msg("chunk=%lld: loss %.3g dh %.3g dW %.3g", (long long)chunks[ic], lrel, hrel,
                         wrel);
        free(scratch), free(dh), free(dW);
    }
    free(h), free(W), free(W16), free(labels), free(dW0);
    free(hd), free(Wd), free(dh_ref), free(dW_ref);
}
END_TEST

/* (5) Memory: the fused path needs one chunk of logits (plus a float per row of
 * the chunk), whatever n is, and stays inside it. */
START_TEST(scratch_is_one_chunk)
{
    lm_head_opts o = {7, 0.0f, IGNORE};
    ck_assert_uint_eq(lm_head_scratch_floats(&o, 37), 7 * 37 + 7);
    ck_assert_uint_eq(lm_head_scratch_floats(&o, 1000), 7 * 1000 + 7);

    /* 1M tokens x 128K vocabulary: n*V*4 bytes = 512 GiB of logits; a chunk of
     * 1024 tokens needs 1024*V floats (512 MiB). */
    const int64_t n_big = 1 << 20, V_big = 128 << 10;
    lm_head_opts big = {1024, 0.0f, IGNORE};
    size_t sf = lm_head_scratch_floats(&big, V_big);
    ck_assert_uint_eq(sf, (size_t)1024 * (size_t)V_big + 1024);
    ck_assert_uint_eq((uint64_t)n_big * (uint64_t)V_big * 4, (uint64_t)512 << 30);
    ck_assert_uint_lt(sf, (size_t)n_big * (size_t)V_big / 1000);

    /* invalid options */
    lm_head_opts zero = {0, 0.0f, IGNORE};
    ck_assert_uint_eq(lm_head_scratch_floats(&zero, 37), 0);
    ck_assert_uint_eq(lm_head_scratch_floats(&o, 0), 0);
    ck_assert_uint_eq(lm_head_scratch_floats(NULL, 37), 0);
    lm_head_opts huge = {INT64_MAX, 0.0f, IGNORE};
    ck_assert_uint_eq(lm_head_scratch_floats(&huge, 1000), 0);

    /* with a bf16 weight: the fp32 scratch rounded up to 64 floats, then
     * dlogits16 [chunk, V] rounded up to 128 values and h16 [chunk, D], two
     * bf16 to a float */
    ck_assert_uint_eq(lm_head_bf16_scratch_floats(&o, 37, 5), 320 + (384 + 7 * 5 + 1) / 2);
    ck_assert_uint_eq(lm_head_bf16_scratch_floats(&o, 37, 0), 0);
    ck_assert_uint_eq(lm_head_bf16_scratch_floats(&huge, 1000, 5), 0);
    ck_assert_uint_eq(lm_head_bf16_scratch_floats(&big, V_big, INT64_MAX), 0);

    /* A run with n = 61 > chunk = 7 writes only inside scratch_floats: guard
     * floats past the end stay as they were. */
    const int64_t n = 61, D = 24, V = 1000, guard = 64;
    uint64_t rng = test_rng(500);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    int64_t *labels = rand_labels(&rng, n, V, 0.1);
    float *dh = test_zeros_f(n * D), *dW = test_zeros_f(V * D);
    size_t need = lm_head_scratch_floats(&o, V);
    ck_assert_uint_lt(need, (size_t)(n * V));
    float *scratch = test_zeros_f((int64_t)need + guard);
    for (int64_t i = 0; i < guard; i++) scratch[(int64_t)need + i] = -1234.5f;
    bk_queue q = bk_host_queue();
    bk_ce_sums sums = {0};
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, h, W, labels, 0.5f, &sums, dh, dW, scratch),
                     BK_OK);
    for (int64_t i = 0; i < guard; i++) ck_assert(scratch[(int64_t)need + i] == -1234.5f);
    ck_assert_int_eq(sums.valid, count_valid(n, labels));
    free(h), free(W), free(labels), free(dh), free(dW), free(scratch);
}
END_TEST

/* Invalid arguments return BK_ERR_ARG before anything is written (a bad label
 * in the last chunk included); debug builds abort instead, so not run there. */
START_TEST(invalid_arguments)
{
#ifdef BURST_DEBUG
    /* debug builds abort on an invalid argument instead of returning */
#else
    const int64_t n = 10, D = 4, V = 5;
    uint64_t rng = test_rng(600);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    float *dh = test_zeros_f(n * D), *dW = test_zeros_f(V * D);
    int64_t labels[10] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
    bk_queue q = bk_host_queue();
    lm_head_opts o = {3, 0.0f, IGNORE};
    float *scratch = test_zeros_f((int64_t)lm_head_scratch_floats(&o, V));
    bk_ce_sums sums = {0};

    labels[9] = V; /* out of range, in the last chunk */
    for (int64_t i = 0; i < n * D; i++) dh[i] = 3.0f;
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_ARG);
    ck_assert_int_eq(lm_head_unfused(&q, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW),
                     BK_ERR_ARG);
    for (int64_t i = 0; i < n * D; i++) ck_assert(dh[i] == 3.0f);
    for (int64_t i = 0; i < V * D; i++) ck_assert(dW[i] == 0.0f);
    ck_assert(sums.loss == 0.0 && sums.valid == 0);
    labels[9] = -1; /* negative and not ignore_index */
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_ARG);
    labels[9] = 4;

    lm_head_opts bad_chunk = {0, 0.0f, IGNORE};
    ck_assert_int_eq(
        lm_head_fused(&q, &bad_chunk, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
        BK_ERR_ARG);
    lm_head_opts bad_z = {3, -1.0f, IGNORE};
    ck_assert_int_eq(lm_head_fused(&q, &bad_z, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_ARG);
    ck_assert_int_eq(lm_head_fused(&q, &o, -1, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_ARG);
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, NULL),
                     BK_ERR_ARG);
    ck_assert_int_eq(lm_head_fused(NULL, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_ARG);
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, h, W, labels, 1.0f, NULL, dh, dW, scratch),
                     BK_ERR_ARG);
    bk_queue dev = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(lm_head_fused(&dev, &o, n, D, V, h, W, labels, 1.0f, &sums, dh, dW, scratch),
                     BK_ERR_UNSUPPORTED);
    ck_assert(sums.loss == 0.0 && sums.valid == 0);
    free(h), free(W), free(dh), free(dW), free(scratch);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lm_head");
    TCase *tc = check_tcase(s, "lm_head", 60);
    check_add_tests(tc, fused_equals_unfused, matches_double_reference, finite_differences,
                    all_rows_ignored, bf16_weight_matches_double_reference, scratch_is_one_chunk,
                    invalid_arguments);
    return check_run(s);
}
