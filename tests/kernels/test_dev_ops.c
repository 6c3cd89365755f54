/* test_dev_ops.c: the non-attention kernels on a device queue, against the
 * double-precision references of kernels/ref/ops_ref.c: every __global__
 * kernel of kernels/cuda/{norm,rope,swiglu,embedding,adamw,grad_norm,
 * cross_entropy,attention_state,device_checks,vector}.cu and the GEMM entry
 * points.
 *
 * Built twice: linked with the SIMT emulator (test_dev_ops_emu, every build:
 * the kernels run on the CPU, with the emulator's checks), and with the CUDA
 * backend (test_dev_ops_cuda, CUDA builds: skips without a GPU).
 *
 * Shapes are small and ragged: sizes that are not multiples of the block
 * sizes (256 threads per row, 32 lanes per warp, 256-row chunks of the RMSNorm
 * weight gradient, 8192-element blocks of the gradient norm), one row, one
 * column. Tolerances are the CPU tests' (tests/kernels/test_ops.c): the inputs are
 * fp32 and the kernels compute in fp32 with the same per-element functions
 * (ops_math.h); only the order of the reductions differs (a tree instead of a
 * loop), which stays well inside them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/arena.h"
#include "kernels/bf16.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/rope_cases.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/close.h"
#include "tests/lib/rng.h"

/* The random stream of the running test (each test runs in its own process). */
static uint64_t rs;

#define PUT(x, n)    dev_put((x), (size_t)(n) * sizeof *(x))
#define GET(h, d, n) dev_get((h), (d), (size_t)(n) * sizeof *(h))

/* ---------------------------------------------------------------- RMSNorm */
/* RMSNorm and SwiGLU writing bf16 on the device: the device's fp32 outputs
 * rounded, to the bit, and the same factors. */
START_TEST(bf16_outputs_are_the_rounded_fp32_ones)
{
    bk_queue q = dev_queue();
    rs = test_rng(25);
    const int64_t n = 37, d = 300, ld = 2 * d + 3;
    float *x = test_rand_f(&rs, n * ld, -2, 2), *w = test_rand_f(&rs, d, 0.5, 1.5);
    float *y = test_zeros_f(n * d), *rstd = test_zeros_f(n), *rstd16 = test_zeros_f(n);
    uint16_t *y16 = test_alloc((size_t)(n * d), sizeof *y16);
    float *gx = PUT(x, n * ld), *gw = PUT(w, d), *gy = PUT(y, n * d), *gr = PUT(rstd, n),
          *gr16 = PUT(rstd16, n);
    uint16_t *gy16 = PUT(y16, n * d);
    for (int op = 0; op < 2; op++) {
        if (op == 0) {
            ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, gx, gw, 1e-5f, gy, gr), BK_OK);
            ck_assert_int_eq(bk_rmsnorm_fwd_bf16(&q, n, d, gx, gw, 1e-5f, gy16, gr16), BK_OK);
            GET(rstd, gr, n), GET(rstd16, gr16, n);
            ck_assert(memcmp(rstd, rstd16, (size_t)n * sizeof *rstd) == 0);
        } else {
            ck_assert_int_eq(bk_swiglu_fwd(&q, n, d, gx, gx + d, ld, gy), BK_OK);
            ck_assert_int_eq(bk_swiglu_fwd_bf16(&q, n, d, gx, gx + d, ld, gy16), BK_OK);
        }
        GET(y, gy, n * d), GET(y16, gy16, n * d);
        for (int64_t i = 0; i < n * d; i++)
            ck_assert_msg(y16[i] == bk_float_to_bf16(y[i]), "op %d, element %lld: %04x, not %04x",
                          op, (long long)i, y16[i], bk_float_to_bf16(y[i]));
    }
    /* x kept rounded on the device: the copy rounded, x its widened values */
    ck_assert_int_eq(bk_round_bf16_keep(&q, n * d, gx, gy16), BK_OK);
    GET(y16, gy16, n * d), GET(y, gx, n * d);
    for (int64_t i = 0; i < n * d; i++)
        ck_assert_msg(y16[i] == bk_float_to_bf16(x[i]) && y[i] == bk_bf16_to_float(y16[i]),
                      "element %lld kept as %04x, %g", (long long)i, y16[i], (double)y[i]);
    void *bufs[] = {gx, gw, gy, gr, gr16, gy16};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dev_free(bufs[i]);
    free(x), free(w), free(y), free(rstd), free(rstd16), free(y16);
}
END_TEST

START_TEST(rmsnorm_matches_reference)
{
    /* 600 rows: three chunks of the weight gradient, summed by a second kernel */
    static const int64_t shapes[][2] = {{1, 1},    {1, 17},   {5, 64},  {33, 100},
                                        {70, 257}, {3, 4096}, {600, 40}};
    bk_queue q = dev_queue();
    rs = test_rng(21);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], d = shapes[s][1], nd = n * d;
        float eps = 1e-5f;
        float *x = test_rand_f(&rs, nd, -2, 2), *w = test_rand_f(&rs, d, 0.5, 1.5), *dy = test_rand_f(&rs, nd, -1, 1);
        float *dw0 = test_rand_f(&rs, d, -1, 1), *y = test_alloc((size_t)nd * 4, 1), *rstd = test_alloc((size_t)n * 4, 1);
        float *dx = test_alloc((size_t)nd * 4, 1), *dw = test_alloc((size_t)d * 4, 1);
        double *xd = test_to_d(x, nd), *wd = test_to_d(w, d), *dyd = test_to_d(dy, nd);
        double *yr = test_alloc((size_t)nd * 8, 1), *rr = test_alloc((size_t)n * 8, 1);
        double *dxr = test_alloc((size_t)nd * 8, 1), *dwr = test_alloc((size_t)d * 8, 1);
        ref_rmsnorm_fwd(n, d, xd, wd, eps, yr, rr);
        ref_rmsnorm_bwd(n, d, xd, wd, eps, dyd, dxr, dwr);
        for (int64_t j = 0; j < d; j++) dwr[j] += dw0[j]; /* the kernel accumulates */

        float *gx = PUT(x, nd), *gw = PUT(w, d), *gdy = PUT(dy, nd), *gdw = PUT(dw0, d);
        float *gy = PUT(x, nd), *gr = PUT(rstd, n), *gdx = PUT(dy, nd);
        ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, gx, gw, eps, gy, gr), BK_OK);
        GET(y, gy, nd), GET(rstd, gr, n);
        test_assert_close("rmsnorm y", y, yr, nd, 1e-6, 1e-5);
        test_assert_close("rmsnorm rstd", rstd, rr, n, 0, 1e-5);
        ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, gx, gw, gr, gdy, gdx, gdw), BK_OK);
        GET(dx, gdx, nd), GET(dw, gdw, d);
        test_assert_close("rmsnorm dx", dx, dxr, nd, 1e-5, 1e-4);
        test_assert_close("rmsnorm dw", dw, dwr, d, 1e-5, 1e-4);
        /* in place: y = x, dx = dy (dw is computed before dx overwrites dy) */
        float *gdw2 = PUT(dw0, d);
        ck_assert_int_eq(bk_rmsnorm_fwd(&q, n, d, gx, gw, eps, gx, NULL), BK_OK);
        GET(y, gx, nd);
        test_assert_close("rmsnorm in place", y, yr, nd, 1e-6, 1e-5);
        float *gxx = PUT(x, nd);
        ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, gxx, gw, gr, gdy, gdy, gdw2), BK_OK);
        GET(dx, gdy, nd), GET(dw, gdw2, d);
        test_assert_close("rmsnorm dx in place", dx, dxr, nd, 1e-5, 1e-4);
        test_assert_close("rmsnorm dw in place", dw, dwr, d, 1e-5, 1e-4);
        dev_free(gx), dev_free(gw), dev_free(gdy), dev_free(gdw), dev_free(gy), dev_free(gr);
        dev_free(gdx), dev_free(gdw2), dev_free(gxx);
        free(x), free(w), free(dy), free(dw0), free(y), free(rstd), free(dx), free(dw);
        free(xd), free(wd), free(dyd), free(yr), free(rr), free(dxr), free(dwr);
    }
}
END_TEST

/* ---------------------------------------------------------------- RoPE */
START_TEST(rope_matches_reference)
{
    static const int64_t shapes[][3] = {
        {1, 1, 2}, {3, 2, 6}, {17, 3, 64}, {9, 8, 128}, {2, 1, 600}};
    bk_queue q = dev_queue();
    rs = test_rng(31);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], H = shapes[s][1], d = shapes[s][2], len = n * H * d;
        int64_t *pos = test_alloc((size_t)n * sizeof(int64_t), 1);
        for (int64_t r = 0; r < n; r++) pos[r] = (int64_t)(bu_rng_next(&rs) % 2000000); /* zigzag-like */
        pos[0] = 0;
        bk_rope rope = test_rope((int)s, s % 2 ? 500000.0 : 10000.0); /* each scaling */
        float *x = test_rand_f(&rs, len, -1, 1), *y = test_alloc((size_t)len * 4, 1);
        double *xd = test_to_d(x, len), *yr = test_alloc((size_t)len * 8, 1), *dxr = test_alloc((size_t)len * 8, 1);
        ref_rope(n, H, d, pos, &rope, xd, 1.0, yr);
        ref_rope(n, H, d, pos, &rope, xd, -1.0, dxr);
        int64_t *gp = PUT(pos, n);
        float *gx = PUT(x, len), *gy = PUT(x, len);
        ck_assert_int_eq(bk_rope_fwd(&q, n, H, d, gp, &rope, gx, gy), BK_OK);
        GET(y, gy, len);
        test_assert_close("rope fwd", y, yr, len, 2e-6, 1e-5);
        ck_assert_int_eq(bk_rope_bwd(&q, n, H, d, gp, &rope, gx, gy), BK_OK);
        GET(y, gy, len);
        test_assert_close("rope bwd", y, dxr, len, 2e-6, 1e-5);
        /* in place, and the backward undoes the forward (times yarn's scale squared) */
        ck_assert_int_eq(bk_rope_fwd(&q, n, H, d, gp, &rope, gx, gx), BK_OK);
        ck_assert_int_eq(bk_rope_bwd(&q, n, H, d, gp, &rope, gx, gx), BK_OK);
        GET(y, gx, len);
        double s2 = (double)bk_rope_scale(&rope) * bk_rope_scale(&rope);
        for (int64_t i = 0; i < len; i++) xd[i] *= s2;
        test_assert_close("rope bwd(fwd(x))", y, xd, len, 4e-6, 1e-5);
        dev_free(gp), dev_free(gx), dev_free(gy);
        free(pos), free(x), free(y), free(xd), free(yr), free(dxr);
    }
}
END_TEST

/* ---------------------------------------------------------------- SwiGLU */
START_TEST(swiglu_matches_reference)
{
    static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {17, 130}, {64, 300}};
    bk_queue q = dev_queue();
    rs = test_rng(41);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int fused = 0; fused < 2; fused++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1], ld = fused ? 2 * cols : cols;
            int64_t len = rows * cols, blen = rows * ld;
            /* gate = buf, up = buf + cols when fused (a [rows, 2F] GEMM output) */
            float *buf = test_rand_f(&rs, fused ? blen : 2 * blen, -6, 6), *dout = test_rand_f(&rs, len, -1, 1);
            const float *gate = buf, *up = fused ? buf + cols : buf + blen;
            double *g = test_alloc((size_t)len * 8, 1), *u = test_alloc((size_t)len * 8, 1);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++) {
                    g[r * cols + j] = gate[r * ld + j];
                    u[r * cols + j] = up[r * ld + j];
                }
            double *dod = test_to_d(dout, len), *outr = test_alloc((size_t)len * 8, 1);
            double *dgr = test_alloc((size_t)len * 8, 1), *dur = test_alloc((size_t)len * 8, 1);
            ref_swiglu_fwd(len, g, u, outr);
            ref_swiglu_bwd(len, g, u, dod, dgr, dur);
            int64_t total = fused ? blen : 2 * blen;
            float *gbuf = PUT(buf, total), *gdo = PUT(dout, len), *gout = PUT(dout, len);
            float *ggate = gbuf, *gup = fused ? gbuf + cols : gbuf + blen;
            float *out = test_alloc((size_t)len * 4, 1), *back = test_alloc((size_t)total * 4, 1);
            ck_assert_int_eq(bk_swiglu_fwd(&q, rows, cols, ggate, gup, ld, gout), BK_OK);
            GET(out, gout, len);
            test_assert_close("swiglu out", out, outr, len, 1e-6, 1e-5);
            /* gradients over the inputs, in place */
            ck_assert_int_eq(bk_swiglu_bwd(&q, rows, cols, ggate, gup, ld, gdo, ggate, gup), BK_OK);
            GET(back, gbuf, total);
            float *dg = test_alloc((size_t)len * 4, 1), *du = test_alloc((size_t)len * 4, 1);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++) {
                    dg[r * cols + j] = back[r * ld + j];
                    du[r * cols + j] = back[(fused ? cols : blen) + r * ld + j];
                }
            test_assert_close("swiglu dgate", dg, dgr, len, 1e-6, 1e-5);
            test_assert_close("swiglu dup", du, dur, len, 1e-6, 1e-5);
            dev_free(gbuf), dev_free(gdo), dev_free(gout);
            free(buf), free(dout), free(g), free(u), free(dod), free(outr), free(dgr), free(dur);
            free(out), free(back), free(dg), free(du);
        }
}
END_TEST

/* ---------------------------------------------------------------- embedding */
START_TEST(embedding_matches_reference)
{
    /* more tokens than a warp's 32, more table rows than the 4096 owner warps */
    static const int64_t shapes[][3] = {{1, 1, 1},     {5, 3, 7},     {100, 17, 33},
                                        {300, 50, 40}, {1000, 7, 40}, {70, 5000, 3}};
    bk_queue q = dev_queue(), h = bk_host_queue();
    h.n_threads = 1;
    rs = test_rng(51);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], V = shapes[s][1], D = shapes[s][2];
        int64_t *tok = test_alloc((size_t)n * sizeof(int64_t), 1);
        for (int64_t r = 0; r < n; r++) tok[r] = (int64_t)(bu_rng_next(&rs) % (uint64_t)V);
        tok[0] = V - 1;
        if (V > 4096 && n > 1) tok[1] = 4096 + 3; /* row 4099: owned modulo 4096 */
        float *table = test_rand_f(&rs, V * D, -1, 1), *out = calloc((size_t)(n * D), 4);
        float *dout = test_rand_f(&rs, n * D, -1, 1), *dt = test_rand_f(&rs, V * D, -1, 1), *dt_cpu = test_copy_f(dt, V * D);
        double *td = test_to_d(table, V * D), *outr = test_alloc((size_t)(n * D) * 8, 1);
        double *dtr = test_to_d(dt, V * D), *dod = test_to_d(dout, n * D);
        ref_embedding_gather(n, D, tok, td, outr);
        ref_embedding_scatter_add(n, D, tok, dod, dtr);
        int64_t *gtok = PUT(tok, n);
        float *gtab = PUT(table, V * D), *gout = PUT(out, n * D);
        float *gdo = PUT(dout, n * D), *gdt = PUT(dt, V * D);
        ck_assert_int_eq(bk_embedding_gather(&q, n, V, D, gtok, gtab, gout), BK_OK);
        GET(out, gout, n * D);
        test_assert_close("embedding gather", out, outr, n * D, 0, 0);
        ck_assert_int_eq(bk_embedding_scatter_add(&q, n, V, D, gtok, gdo, gdt), BK_OK);
        GET(dt, gdt, V * D);
        test_assert_close("embedding scatter-add", dt, dtr, V * D, 1e-6, 1e-5);
        /* rows receive their additions in token order: bitwise the CPU kernel's sums */
        ck_assert_int_eq(bk_embedding_scatter_add(&h, n, V, D, tok, dout, dt_cpu), BK_OK);
        ck_assert_msg(memcmp(dt, dt_cpu, (size_t)(V * D) * 4) == 0,
                      "embedding scatter-add differs from the CPU kernel's in-order sums");
        /* a token outside [0, V): refused before anything is written */
        tok[n - 1] = V;
        int64_t *gbad = PUT(tok, n);
        ck_assert_int_eq(bk_embedding_scatter_add(&q, n, V, D, gbad, gdo, gdt), BK_ERR_ARG);
        ck_assert_int_eq(bk_embedding_gather(&q, n, V, D, gbad, gtab, gout), BK_ERR_ARG);
        float *after = test_alloc((size_t)(V * D) * 4, 1);
        GET(after, gdt, V * D);
        ck_assert(memcmp(after, dt, (size_t)(V * D) * 4) == 0);
        dev_free(gtok), dev_free(gtab), dev_free(gout), dev_free(gdo), dev_free(gdt),
            dev_free(gbad);
        free(tok), free(table), free(out), free(dout), free(dt), free(dt_cpu), free(td);
        free(outr), free(dtr), free(dod), free(after);
    }
}
END_TEST

/* ---------------------------------------------------------------- AdamW */
START_TEST(adamw_matches_reference_over_steps)
{
    bk_queue q = dev_queue();
    rs = test_rng(61);
    int64_t n = 40003; /* not a multiple of the 256 threads of a block */
    bk_adamw_params hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    float *p = test_rand_f(&rs, n, -1, 1), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
    uint16_t *p16 = test_alloc((size_t)n * 2, 1);
    double *pr = test_to_d(p, n), *mr = calloc((size_t)n, 8), *vr = calloc((size_t)n, 8);
    float *gp = PUT(p, n), *gm = PUT(m, n), *gv = PUT(v, n);
    uint16_t *gp16 = PUT(p16, n);
    for (int64_t step = 1; step <= 6; step++) {
        float *g = test_rand_f(&rs, n, -2, 2);
        g[0] = 0.0f; /* a zero gradient on a fresh moment: weight decay only */
        float scale = step == 3 ? 0.25f : 1.0f;
        double *gd = test_to_d(g, n);
        ref_adamw_step(n, pr, mr, vr, gd, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, step,
                       scale);
        float *gg = PUT(g, n);
        if (step % 2)
            ck_assert_int_eq(bk_adamw_step(&q, n, gp, gg, gm, gv, &hp, step, scale), BK_OK);
        else
            ck_assert_int_eq(bk_adamw_step_bf16(&q, n, gp, gg, gm, gv, &hp, step, scale, gp16),
                             BK_OK);
        GET(p, gp, n), GET(m, gm, n), GET(v, gv, n);
        test_assert_close("adamw param", p, pr, n, 1e-6, 1e-5);
        test_assert_close("adamw m", m, mr, n, 1e-7, 1e-5);
        test_assert_close("adamw v", v, vr, n, 1e-7, 1e-5);
        if (step % 2 == 0) {
            GET(p16, gp16, n);
            for (int64_t i = 0; i < n; i++) ck_assert_uint_eq(p16[i], bk_float_to_bf16(p[i]));
        }
        dev_free(gg);
        free(g), free(gd);
    }
    dev_free(gp), dev_free(gm), dev_free(gv), dev_free(gp16);
    free(p), free(m), free(v), free(p16), free(pr), free(mr), free(vr);
}
END_TEST

/* ---------------------------------------------------------------- gradient norm */
START_TEST(grad_norm_and_clipping)
{
    rs = test_rng(71);
    int64_t counts[4] = {1, 100001, 37, 0}; /* 100001: 13 blocks of 8192, the last partial */
    float *bufs[4], *dbufs[4];
    double ref = 0.0;
    for (int b = 0; b < 4; b++) {
        bufs[b] = test_rand_f(&rs, counts[b], -3, 3);
        for (int64_t i = 0; i < counts[b]; i++) ref += (double)bufs[b][i] * bufs[b][i];
        dbufs[b] = PUT(bufs[b], counts[b]);
    }
    bk_queue q = dev_queue();
    double s1 = -1, s2 = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q, 4, (const float *const *)dbufs, counts, &s1), BK_OK);
    ck_assert_int_eq(bk_grad_sqnorm(&q, 4, (const float *const *)dbufs, counts, &s2), BK_OK);
    /* double accumulation of fp32 squares: relative error ~ n eps64 */
    ck_assert_msg(fabs(s1 - ref) <= 1e-12 * ref, "sqnorm %.17g, reference %.17g", s1, ref);
    ck_assert(s1 == s2);
    double zero = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q, 0, NULL, NULL, &zero), BK_OK);
    ck_assert(zero == 0.0);
    double max_norm = 0.5 * sqrt(ref);
    float scale = bk_clip_scale(s1, max_norm);
    for (int b = 0; b < 4; b++) ck_assert_int_eq(bk_scale(&q, counts[b], dbufs[b], scale), BK_OK);
    double s3 = -1;
    ck_assert_int_eq(bk_grad_sqnorm(&q, 4, (const float *const *)dbufs, counts, &s3), BK_OK);
    ck_assert(fabs(sqrt(s3) - max_norm) <= 1e-6 * max_norm);
    for (int b = 0; b < 4; b++) dev_free(dbufs[b]), free(bufs[b]);
}
END_TEST

/* ---------------------------------------------------------------- scratch */
/* With an arena on the queue the kernels' scratch is a piece of it: the
 * RMSNorm weight gradient of 600 rows (3 chunks through scratch), a gradient
 * norm over 3 blocks, the cross-entropy's count of valid rows, in an arena of
 * bk_device_scratch_bytes for those sizes, give the results of a queue
 * without arena bit for bit; the arena's peak is the largest piece, and none
 * stays in use. An arena too small for the norm's scratch: BK_ERR_NOMEM. */
START_TEST(scratch_comes_from_the_queues_arena)
{
    const int64_t n = 600, d = 40, count = 20000, V = 7;
    rs = test_rng(75);
    float *x = test_rand_f(&rs, n * d, -2, 2), *w = test_rand_f(&rs, d, 0.5, 1.5);
    float *dy = test_rand_f(&rs, n * d, -1, 1), *rstd = test_rand_f(&rs, n, 0.5, 1);
    float *g = test_rand_f(&rs, count, -1, 1), *logits = test_rand_f(&rs, n * V, -1, 1);
    int64_t *labels = test_alloc((size_t)n * sizeof(int64_t), 1);
    for (int64_t r = 0; r < n; r++) labels[r] = r % 5 == 0 ? -100 : r % V;
    size_t bound = bk_device_scratch_bytes(n, d, count);
    ck_assert_uint_eq(bound, (size_t)3 * d * sizeof(float)); /* the largest: 3 chunks of dw */
    bk_arena *arena = NULL;
    ck_assert_int_eq(bk_arena_create(bound, BK_ARENA_DEVICE, &arena), BK_OK);
    float *dx[2], *dw[2], *out[2];
    double sq[2];
    int64_t valid[2];
    float *gx = PUT(x, n * d), *gw = PUT(w, d), *gdy = PUT(dy, n * d), *gr = PUT(rstd, n);
    float *gg = PUT(g, count);
    int64_t *glab = PUT(labels, n);
    for (int k = 0; k < 2; k++) { /* 0: without arena, 1: with */
        bk_queue q = dev_queue();
        q.arena = k ? arena : NULL;
        float *gdx = PUT(dy, n * d), *gdw = PUT(w, d), *gl = PUT(logits, n * V), *gloss = PUT(rstd, n);
        ck_assert_int_eq(bk_rmsnorm_bwd(&q, n, d, gx, gw, gr, gdy, gdx, gdw), BK_OK);
        const float *bufs[1] = {gg};
        ck_assert_int_eq(bk_grad_sqnorm(&q, 1, bufs, &count, &sq[k]), BK_OK);
        ck_assert_int_eq(bk_cross_entropy_fwd_bwd(&q, n, V, gl, V, glab, -100,
                                                  1.0f, 0.0f, gloss, NULL, &valid[k]),
                         BK_OK);
        dx[k] = test_alloc((size_t)(n * d), sizeof(float)), dw[k] = test_alloc((size_t)d, sizeof(float));
        out[k] = test_alloc((size_t)(n * V), sizeof(float));
        GET(dx[k], gdx, n * d), GET(dw[k], gdw, d), GET(out[k], gl, n * V);
        dev_free(gdx), dev_free(gdw), dev_free(gl), dev_free(gloss);
    }
    ck_assert_int_eq(memcmp(dx[0], dx[1], (size_t)(n * d) * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(dw[0], dw[1], (size_t)d * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(out[0], out[1], (size_t)(n * V) * sizeof(float)), 0);
    ck_assert(sq[0] == sq[1]);
    ck_assert_int_eq(valid[0], valid[1]);
    bk_arena_stats st = bk_arena_stats_of(arena);
    ck_assert_uint_eq(st.peak, st.capacity);
    ck_assert_uint_eq(st.in_use, 0);
    bk_arena_destroy(arena);

    ck_assert_int_eq(bk_arena_create(BK_ARENA_ALIGN, BK_ARENA_DEVICE, &arena), BK_OK);
    bk_queue small = dev_queue();
    small.arena = arena;
    ck_assert_int_eq(bk_rmsnorm_bwd(&small, n, d, gx, gw, gr, gdy, gdy, gw), BK_ERR_NOMEM);
    ck_assert_uint_eq(bk_arena_stats_of(arena).in_use, 0);
    bk_arena_destroy(arena);
    dev_free(gx), dev_free(gw), dev_free(gdy), dev_free(gr), dev_free(gg), dev_free(glab);
    for (int k = 0; k < 2; k++) free(dx[k]), free(dw[k]), free(out[k]);
    free(x), free(w), free(dy), free(rstd), free(g), free(logits), free(labels);
}
END_TEST

/* ---------------------------------------------------------------- cross-entropy */
START_TEST(cross_entropy_matches_reference)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 5}, {7, 33}, {40, 1001}, {3, 32000}};
    const int64_t ignore = -100;
    bk_queue q = dev_queue();
    rs = test_rng(81);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 3; variant++) {
            int64_t rows = shapes[s][0], V = shapes[s][1], ld = V + (int64_t)s % 2;
            /* variant 1: huge logits (exp overflows without the max); 2: z-loss */
            double offset = variant == 1 ? 3e4 : 0.0, z = variant == 2 ? 1e-2 : 0.0;
            float *lg = test_rand_f(&rs, rows * ld, -5, 5);
            for (int64_t i = 0; i < rows * ld; i++) lg[i] += (float)offset;
            int64_t *lab = test_alloc((size_t)rows * sizeof(int64_t), 1);
            for (int64_t r = 0; r < rows; r++)
                lab[r] = (r % 3 == 1) ? ignore : (int64_t)(bu_rng_next(&rs) % (uint64_t)V);
            double *x = test_alloc((size_t)(rows * V) * 8, 1);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < V; j++) x[r * V + j] = lg[r * ld + j];
            double *lr = test_alloc((size_t)rows * 8, 1), *er = test_alloc((size_t)rows * 8, 1);
            double *dr = test_alloc((size_t)(rows * V) * 8, 1), scale = 1.0 / 7.0;
            int64_t nv_ref = ref_cross_entropy(rows, V, x, lab, ignore, scale, z, lr, er, dr);
            float *gl = PUT(lg, rows * ld), *loss = test_rand_f(&rs, rows, 0, 1), *lse = test_rand_f(&rs, rows, 0, 1);
            float *gloss = PUT(loss, rows), *glse = PUT(lse, rows);
            int64_t *glab = PUT(lab, rows), nv = -1;
            ck_assert_int_eq(bk_cross_entropy_fwd_bwd(&q, rows, V, gl, ld, glab, ignore,
                                                      (float)scale, (float)z, gloss, glse, &nv),
                             BK_OK);
            ck_assert_int_eq(nv, nv_ref);
            char what[96];
            snprintf(what, sizeof what, "ce rows=%lld V=%lld variant %d", (long long)rows,
                     (long long)V, variant);
            GET(loss, gloss, rows), GET(lse, glse, rows);
            test_assert_close(what, lse, er, rows, 1e-6, 2e-7 * (z > 0 ? 10 : 1) + 1e-6);
            test_assert_close(what, loss, lr, rows, 2e-5 + 4e-7 * offset, 1e-5);
            float *out = test_alloc((size_t)(rows * ld) * 4, 1), *d = test_alloc((size_t)(rows * V) * 4, 1);
            GET(out, gl, rows * ld);
            for (int64_t r = 0; r < rows; r++) {
                memcpy(d + r * V, out + r * ld, (size_t)V * 4);
                for (int64_t j = V; j < ld; j++) /* the row padding is not touched */
                    ck_assert(memcmp(&out[r * ld + j], &lg[r * ld + j], 4) == 0);
            }
            test_assert_close(what, d, dr, rows * V, 1e-6, 1e-4);
            dev_free(gl), dev_free(gloss), dev_free(glse), dev_free(glab);
            free(lg), free(lab), free(x), free(lr), free(er), free(dr), free(loss), free(lse);
            free(out), free(d);
        }
}
END_TEST

START_TEST(cross_entropy_edge_rows_and_invalid_labels)
{
    bk_queue q = dev_queue();
    const int64_t V = 40, ignore = -1;
    float lg[3 * 40];
    for (int i = 0; i < 3 * 40; i++) lg[i] = (float)(i % 7) - 3.0f;
    for (int j = 0; j < V; j++) lg[V + j] = -INFINITY; /* row 1: every logit -inf */
    lg[2 * V + 5] = NAN;                               /* row 2: ignored, never read */
    int64_t lab[3] = {3, 7, ignore};
    float *gl = PUT(lg, 3 * V), loss[3] = {9, 9, 9}, *gloss = PUT(loss, 3);
    int64_t *glab = PUT(lab, 3), nv = -1;
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 3, V, gl, V, glab, ignore, 1.0f, 0.0f, gloss, NULL, &nv),
        BK_OK);
    ck_assert_int_eq(nv, 2);
    float out[3 * 40];
    GET(loss, gloss, 3), GET(out, gl, 3 * V);
    ck_assert(isinf(loss[1]) && loss[1] > 0 && loss[2] == 0.0f && isfinite(loss[0]));
    for (int j = 0; j < V; j++) ck_assert(out[V + j] == 0.0f && out[2 * V + j] == 0.0f);
    /* a label outside [0, V) that is not ignore_index: nothing written */
    int64_t bad[3] = {3, V, ignore};
    int64_t *gbad = PUT(bad, 3);
    float *gl2 = PUT(lg, 3 * V), *gloss2 = PUT(loss, 3);
    ck_assert_int_eq(
        bk_cross_entropy_fwd_bwd(&q, 3, V, gl2, V, gbad, ignore, 1.0f, 0.0f, gloss2, NULL, NULL),
        BK_ERR_ARG);
    float after[3 * 40];
    GET(after, gl2, 3 * V);
    ck_assert(memcmp(after, lg, sizeof lg) == 0);
    dev_free(gl), dev_free(gloss), dev_free(glab), dev_free(gbad), dev_free(gl2), dev_free(gloss2);
}
END_TEST

/* ---------------------------------------------------------------- GEMM */
/* C = alpha op(A) op(B) + beta C in fp32 and from bf16 inputs. Tolerances:
 * fp32 as the CPU test (2e-6 k + 1e-6 absolute, 1e-5 relative); bf16 inputs
 * are exact in fp32, so the bf16 GEMM with fp32 output has the same; with bf16
 * output the result is rounded once more: relative 2^-8. */
START_TEST(device_to_device_copy)
{
    bk_queue q = dev_queue();
    rs = test_rng(111);
    const int64_t n = 1000;
    float *x = test_rand_f(&rs, n, -1, 1), *back = test_zeros_f(n);
    float *dx = PUT(x, n), *dy = PUT(back, n);
    ck_assert_int_eq(bk_device_copy(&q, dy + 1, dx + 2, (size_t)(n - 2) * sizeof(float)), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    dev_get(back, dy, (size_t)n * sizeof(float));
    ck_assert_float_eq(back[0], 0.0f);
    ck_assert_float_eq(back[n - 1], 0.0f);
    ck_assert_int_eq(memcmp(back + 1, x + 2, (size_t)(n - 2) * sizeof(float)), 0);
    ck_assert_int_eq(bk_device_copy(&q, dy, NULL, 4), BK_ERR_ARG);
    dev_free(dx), dev_free(dy);
    free(x), free(back);
}
END_TEST

START_TEST(vector_helpers_match_host)
{
    bk_queue q = dev_queue();
    rs = test_rng(113);
    const int64_t sizes[] = {1, 255, 70001}; /* one thread, part of a block, many blocks */
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int64_t n = sizes[s];
        float *x = test_rand_f(&rs, n, -1, 1), *y = test_rand_f(&rs, n, -1, 1);
        float *back = test_zeros_f(n);
        float *dx = PUT(x, n), *dy = PUT(y, n);
        ck_assert_int_eq(bk_axpy(&q, n, -0.75f, dx, dy), BK_OK);
        ck_assert_int_eq(bk_device_sync(&q), BK_OK);
        dev_get(back, dy, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) /* one rounding of a float fma or mul+add */
            ck_assert_msg(fabs(back[i] - ((double)y[i] - 0.75 * (double)x[i])) <= 2e-7,
                          "axpy n=%lld [%lld]: %g", (long long)n, (long long)i, back[i]);
        ck_assert_int_eq(bk_fill(&q, n - 1, dy, 2.5f), BK_OK);
        ck_assert_int_eq(bk_copy(&q, dx, dy, (size_t)n * sizeof(float)), BK_OK);
        ck_assert_int_eq(bk_device_sync(&q), BK_OK);
        dev_get(back, dx, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n - 1; i++) ck_assert_float_eq(back[i], 2.5f);
        ck_assert_float_eq(back[n - 1], (float)((double)y[n - 1] - 0.75 * (double)x[n - 1]));
        /* [a, b, w] -> [b, a, w], rows moved whole: the host's bits */
        const int64_t shapes[3][3] = {{1, 1, 1}, {51, 5, 1}, {7, 5, 2000}}, *sh = shapes[s];
        int64_t a = sh[0], b = sh[1], w = sh[2];
        float *want = test_zeros_f(n);
        bk_queue hq = {BK_HOST, NULL, 1, NULL};
        ck_assert_int_eq(bk_swap_axes(&hq, a, b, w, x, want), BK_OK);
        float *dsrc = PUT(x, n);
        ck_assert_int_eq(bk_swap_axes(&q, a, b, w, dsrc, dy), BK_OK);
        ck_assert_int_eq(bk_device_sync(&q), BK_OK);
        dev_get(back, dy, (size_t)(a * b * w) * sizeof(float));
        ck_assert_int_eq(memcmp(back, want, (size_t)(a * b * w) * sizeof(float)), 0);
        dev_free(dsrc);
        free(want);
        dev_free(dx), dev_free(dy);
        free(x), free(y), free(back);
    }
    ck_assert_int_eq(bk_fill(&q, 4, NULL, 0.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_axpy(&q, -1, 1.0f, NULL, NULL), BK_ERR_ARG);
    /* allocation in device memory, filled on the device: zeros too */
    for (int k = 0; k < 2; k++) {
        const int64_t n = 300;
        float value = k ? -2.0f : 0.0f, *d = NULL, back[300];
        ck_assert_int_eq(bk_alloc_floats(&q, n, value, &d), BK_OK);
        dev_get(back, d, sizeof back);
        for (int64_t i = 0; i < n; i++) ck_assert_float_eq(back[i], value);
        ck_assert_int_eq(bk_free(&q, d), BK_OK);
    }
}
END_TEST

/* A GEMM runs after what its stream holds: C accumulated onto a queued copy. */
/* The nearest bf16 to a finite x, ties to the even one, found in double: the
 * two bf16 neighbours of x (its bits truncated, and one bf16 step further
 * from zero) compared by distance. NaN stays NaN. */
static uint16_t nearest_bf16(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (isnan(x)) return (uint16_t)((bits >> 16) | 0x40);
    uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, sizeof flo);
    memcpy(&fhi, &hi, sizeof fhi);
    double dlo = fabs((double)x - (double)flo), dhi = fabs((double)fhi - (double)x);
    if (isinf(fhi) && !isinf(x)) dhi = fabs(ldexp(1.0, 128) - fabs((double)x)); /* overflow */
    int up = dhi < dlo || (dhi == dlo && ((lo >> 16) & 1));
    return (uint16_t)((up ? hi : lo) >> 16);
}

/* bk_round_bf16 on the device gives, bit for bit, the host's bk_round_bf16 and
 * the nearest bf16 found in double (ties to even, NaN kept, overflow to inf). */
START_TEST(round_bf16_matches_nearest)
{
    bk_queue q = dev_queue(), host = bk_host_queue();
    rs = test_rng(117);
    const int64_t n = 70001;
    float *x = test_rand_f(&rs, n, -4, 4);
    const float special[] = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, /* ties: down, up */
                             1e-40f, -3e38f, 3.3961776e38f, INFINITY, -INFINITY, NAN};
    memcpy(x, special, sizeof special);
    uint16_t *from_dev = calloc((size_t)n, 2), *from_host = calloc((size_t)n, 2);
    float *dx = PUT(x, n);
    uint16_t *dy = dev_put(from_dev, (size_t)n * 2);
    ck_assert_int_eq(bk_round_bf16(&q, n, dx, dy), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    dev_get(from_dev, dy, (size_t)n * 2);
    ck_assert_int_eq(bk_round_bf16(&host, n, x, from_host), BK_OK);
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = nearest_bf16(x[i]);
        ck_assert_msg(from_dev[i] == want && from_host[i] == want,
                      "[%lld] %a: device %04x, host %04x, nearest %04x", (long long)i, x[i],
                      from_dev[i], from_host[i], want);
    }
    ck_assert_int_eq(bk_round_bf16(&q, 4, NULL, dy), BK_ERR_ARG);
    dev_free(dx), dev_free(dy);
    free(x), free(from_dev), free(from_host);
}
END_TEST

/* bk_widen_bf16 on the device and on the host gives every one of the 65,536
 * bf16 values exactly: the float whose upper half is the bf16's bits. */
START_TEST(widen_bf16_is_exact)
{
    bk_queue q = dev_queue(), host = bk_host_queue();
    const int64_t n = 65536;
    uint16_t *x = malloc((size_t)n * 2);
    float *from_dev = calloc((size_t)n, sizeof(float)),
          *from_host = calloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)i;
    uint16_t *dx = dev_put(x, (size_t)n * 2);
    float *dy = PUT(from_dev, n);
    ck_assert_int_eq(bk_widen_bf16(&q, n, dx, dy), BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    dev_get(from_dev, dy, (size_t)n * sizeof(float));
    ck_assert_int_eq(bk_widen_bf16(&host, n, x, from_host), BK_OK);
    for (int64_t i = 0; i < n; i++) {
        uint32_t want = (uint32_t)i << 16, dev_bits, host_bits;
        memcpy(&dev_bits, &from_dev[i], 4);
        memcpy(&host_bits, &from_host[i], 4);
        ck_assert_msg(dev_bits == want && host_bits == want, "%04llx: device %08x, host %08x",
                      (long long)i, dev_bits, host_bits);
    }
    ck_assert_int_eq(bk_widen_bf16(&q, 4, NULL, dy), BK_ERR_ARG);
    ck_assert_int_eq(bk_widen_bf16(&host, -1, x, from_host), BK_ERR_ARG);
    dev_free(dx), dev_free(dy);
    free(x), free(from_dev), free(from_host);
}
END_TEST

START_TEST(gemm_runs_after_queued_copies)
{
    bk_queue q = dev_queue();
    float a[4] = {1, 2, 3, 4}, id[4] = {1, 0, 0, 1}, c0[4] = {10, 20, 30, 40}, got[4];
    float *da = PUT(a, 4), *di = PUT(id, 4), *dc0 = PUT(c0, 4), *dc = PUT(a, 4);
    ck_assert_int_eq(bk_device_copy(&q, dc, dc0, sizeof c0), BK_OK);
    ck_assert_int_eq(bk_gemm(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, da, 2, di, 2, 1.0f, dc, 2),
                     BK_OK);
    ck_assert_int_eq(bk_device_sync(&q), BK_OK);
    dev_get(got, dc, sizeof got);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(got[i], c0[i] + a[i]);
    dev_free(da), dev_free(di), dev_free(dc0), dev_free(dc);
}
END_TEST

START_TEST(gemm_matches_reference)
{
    static const int64_t sizes[][3] = {{1, 1, 1}, {17, 33, 65}, {64, 40, 128}};
    bk_queue q = dev_queue();
    rs = test_rng(91);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
            int ta = t & 1, tb = t >> 1;
            int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
            int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
            float *a = test_rand_f(&rs, na, -1, 1), *b = test_rand_f(&rs, nb, -1, 1), *c = test_rand_f(&rs, nc, -1, 1);
            uint16_t *a16 = test_alloc((size_t)na * 2, 1), *b16 = test_alloc((size_t)nb * 2, 1);
            for (int64_t i = 0; i < na; i++) a16[i] = bk_float_to_bf16(a[i]);
            for (int64_t i = 0; i < nb; i++) b16[i] = bk_float_to_bf16(b[i]);
            float *ab = test_alloc((size_t)na * 4, 1), *bb = test_alloc((size_t)nb * 4, 1);
            for (int64_t i = 0; i < na; i++) ab[i] = bk_bf16_to_float(a16[i]);
            for (int64_t i = 0; i < nb; i++) bb[i] = bk_bf16_to_float(b16[i]);
            double *r32 = test_alloc((size_t)(m * n) * 8, 1), *r16 = test_alloc((size_t)(m * n) * 8, 1);
            ref_gemm(ta, tb, m, n, k, 0.5, a, lda, b, ldb, -1.5, c, ldc, r32);
            ref_gemm(ta, tb, m, n, k, 0.5, ab, lda, bb, ldb, -1.5, c, ldc, r16);
            float *ga = PUT(a, na), *gb = PUT(b, nb), *gc = PUT(c, nc),
                  *out = test_alloc((size_t)nc * 4, 1);
            ck_assert_int_eq(bk_gemm(&q, ta ? BK_TRANS : BK_NO_TRANS, tb ? BK_TRANS : BK_NO_TRANS,
                                     m, n, k, 0.5f, ga, lda, gb, ldb, -1.5f, gc, ldc),
                             BK_OK);
            GET(out, gc, nc);
            float *dense = test_alloc((size_t)(m * n) * 4, 1);
            for (int64_t i = 0; i < m; i++) memcpy(dense + i * n, out + i * ldc, (size_t)n * 4);
            test_assert_close("gemm fp32", dense, r32, m * n, 2e-6 * (double)k + 1e-6, 1e-5);
            uint16_t *ga16 = PUT(a16, na), *gb16 = PUT(b16, nb);
            float *gc2 = PUT(c, nc);
            ck_assert_int_eq(bk_gemm_bf16(&q, ta ? BK_TRANS : BK_NO_TRANS,
                                          tb ? BK_TRANS : BK_NO_TRANS, m, n, k, 0.5f, ga16, lda,
                                          gb16, ldb, -1.5f, gc2, BK_F32, ldc),
                             BK_OK);
            GET(out, gc2, nc);
            for (int64_t i = 0; i < m; i++) memcpy(dense + i * n, out + i * ldc, (size_t)n * 4);
            test_assert_close("gemm bf16 -> fp32", dense, r16, m * n, 2e-6 * (double)k + 1e-6, 1e-5);
            uint16_t *c16 = test_alloc((size_t)nc * 2, 1);
            for (int64_t i = 0; i < nc; i++) c16[i] = bk_float_to_bf16(c[i]);
            float *cb = test_alloc((size_t)nc * 4, 1);
            for (int64_t i = 0; i < nc; i++) cb[i] = bk_bf16_to_float(c16[i]);
            ref_gemm(ta, tb, m, n, k, 0.5, ab, lda, bb, ldb, -1.5, cb, ldc, r16);
            uint16_t *gc16 = PUT(c16, nc);
            ck_assert_int_eq(bk_gemm_bf16(&q, ta ? BK_TRANS : BK_NO_TRANS,
                                          tb ? BK_TRANS : BK_NO_TRANS, m, n, k, 0.5f, ga16, lda,
                                          gb16, ldb, -1.5f, gc16, BK_BF16, ldc),
                             BK_OK);
            GET(c16, gc16, nc);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    dense[i * n + j] = bk_bf16_to_float(c16[i * ldc + j]);
            test_assert_close("gemm bf16 -> bf16", dense, r16, m * n, 2e-6 * (double)k + 1e-6,
                         1.0 / 256);
            dev_free(ga), dev_free(gb), dev_free(gc), dev_free(ga16), dev_free(gb16);
            dev_free(gc2), dev_free(gc16);
            free(a), free(b), free(c), free(a16), free(b16), free(ab), free(bb), free(r32);
            free(r16), free(out), free(dense), free(c16), free(cb);
        }
}
END_TEST

/* ---------------------------------------------------------------- attention state */
START_TEST(attention_state_kernels)
{
    const int64_t n = 37;
    const int h = 3, d = 40, rh = 37 * 3;
    bk_queue q = dev_queue();
    rs = test_rng(101);
    float *O = test_rand_f(&rs, rh * d, -1, 1), *lse = test_rand_f(&rs, rh, -2, 2);
    float *Ob = test_rand_f(&rs, rh * d, -1, 1), *lb = test_rand_f(&rs, rh, -2, 2), *dO = test_rand_f(&rs, rh * d, -1, 1);
    lse[4] = -INFINITY;         /* empty running side */
    lb[5] = -INFINITY;          /* empty block side */
    lse[6] = lb[6] = -INFINITY; /* both empty: stays O = 0, lse = -inf */
    for (int c = 0; c < d; c++) O[6 * d + c] = 0.0f;
    double *Or = test_alloc((size_t)(rh * d) * 8, 1), *lr = test_alloc((size_t)rh * 8, 1);
    double *dr = test_alloc((size_t)rh * 8, 1);
    for (int64_t r = 0; r < rh; r++) {
        double a = lse[r], b = lb[r], m = a > b ? a : b;
        double l = m == -INFINITY ? -INFINITY : m + log(exp(a - m) + exp(b - m));
        double wa = l == -INFINITY ? 0 : exp(a - l), wb = l == -INFINITY ? 0 : exp(b - l);
        lr[r] = l;
        double acc = 0;
        for (int c = 0; c < d; c++) {
            Or[r * d + c] = O[r * d + c] * wa + Ob[r * d + c] * wb;
            acc += (double)dO[r * d + c] * Or[r * d + c];
        }
        dr[r] = acc;
    }
    float *gO = PUT(O, rh * d), *gl = PUT(lse, rh), *gOb = PUT(Ob, rh * d), *glb = PUT(lb, rh);
    float *gdO = PUT(dO, rh * d), *gdl = PUT(lb, rh);
    ck_assert_int_eq(bk_attn_merge(&q, n, h, d, gO, gl, gOb, glb), BK_OK);
    float *o = test_alloc((size_t)(rh * d) * 4, 1), *l = test_alloc((size_t)rh * 4, 1);
    GET(o, gO, rh * d), GET(l, gl, rh);
    test_assert_close("merge O", o, Or, rh * d, 1e-6, 1e-5);
    test_assert_close("merge lse", l, lr, rh, 1e-6, 1e-6);
    /* delta = rowsum(dO * O) of the merged O */
    ck_assert_int_eq(bk_attn_delta(&q, n, h, d, gdO, gO, gdl), BK_OK);
    GET(l, gdl, rh);
    test_assert_close("delta", l, dr, rh, 1e-5, 1e-5);
    /* finalize zeroes rows with lse = -inf; init sets (0, -inf) */
    float *gO2 = PUT(Ob, rh * d);
    ck_assert_int_eq(bk_attn_fwd_finalize(&q, n, h, d, gO2, glb), BK_OK);
    GET(o, gO2, rh * d);
    for (int64_t r = 0; r < rh; r++)
        for (int c = 0; c < d; c++)
            ck_assert(o[r * d + c] == (lb[r] == -INFINITY ? 0.0f : Ob[r * d + c]));
    ck_assert_int_eq(bk_attn_fwd_init(&q, n, h, d, gO2, glb), BK_OK);
    GET(o, gO2, rh * d), GET(l, glb, rh);
    for (int64_t r = 0; r < rh; r++) {
        ck_assert(l[r] == -INFINITY);
        for (int c = 0; c < d; c++) ck_assert(o[r * d + c] == 0.0f);
    }
    dev_free(gO), dev_free(gl), dev_free(gOb), dev_free(glb), dev_free(gdO), dev_free(gdl);
    dev_free(gO2);
    free(O), free(lse), free(Ob), free(lb), free(dO), free(Or), free(lr), free(dr), free(o),
        free(l);
}
END_TEST

/* ---------------------------------------------------------------- invalid arguments */
/* One fp32 GEMM on operands one element past an allocation's start (4-byte
 * aligned, where cuBLASLt's default asks for 256), against the float64
 * reference. */
static void gemm_misaligned_case(int ta, int tb, int64_t k, float beta)
{
    bk_queue q = dev_queue();
    int64_t m = 19, n = 23, lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 1;
    int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
    float *a = test_rand_f(&rs, na + 1, -1, 1), *b = test_rand_f(&rs, nb + 1, -1, 1),
          *c = test_rand_f(&rs, nc + 1, -1, 1), *out = test_alloc((size_t)(nc + 1) * 4, 1);
    double *want = test_alloc((size_t)(m * n) * 8, 1);
    float *dense = test_alloc((size_t)(m * n) * 4, 1);
    ref_gemm(ta, tb, m, n, k, 0.75, a + 1, lda, b + 1, ldb, beta, c + 1, ldc, want);
    float *ga = PUT(a, na + 1), *gb = PUT(b, nb + 1), *gc = PUT(c, nc + 1);
    bk_status st = bk_gemm(&q, ta ? BK_TRANS : BK_NO_TRANS, tb ? BK_TRANS : BK_NO_TRANS, m, n, k,
                           0.75f, ga + 1, lda, gb + 1, ldb, beta, gc + 1, ldc);
    ck_assert_msg(st == BK_OK, "ta %d tb %d k %lld beta %g: status %d (%s)", ta, tb, (long long)k,
                  beta, st, bk_kernel_error());
    GET(out, gc, nc + 1);
    for (int64_t i = 0; i < m; i++) memcpy(dense + i * n, out + 1 + i * ldc, (size_t)n * 4);
    test_assert_close("gemm on misaligned operands", dense, want, m * n, 2e-6 * (double)k + 1e-6,
                      1e-5);
    ck_assert_float_eq(out[0], c[0]); /* nothing before C written */
    dev_free(ga), dev_free(gb), dev_free(gc);
    free(a), free(b), free(c), free(out), free(want), free(dense);
}

/* Sub-buffer operands (as the model passes `out + r0 * cols`), every
 * transpose case, and k = 0 (C = beta C, never handed to cuBLASLt). At 4-byte
 * alignment cuBLASLt has no fp32 algorithm on an H200, and the model none
 * below 16 bytes: the call is staged at aligned scratch. */
START_TEST(gemm_takes_misaligned_operands_and_k_zero)
{
    rs = test_rng(92);
    for (int t = 0; t < 4; t++) {
        gemm_misaligned_case(t & 1, t >> 1, 37, -0.5f);
        gemm_misaligned_case(t & 1, t >> 1, 0, -0.5f);
        gemm_misaligned_case(t & 1, t >> 1, 0, 0.0f);
    }
}
END_TEST

/* The emulator's model of cuBLASLt must catch a call that leaves the
 * alignment preferences at their documented default (256 bytes) and passes a
 * 16-byte-aligned operand: BK_EMU_LT_DEFAULT_ALIGNMENT plants that mistake.
 * (Below 16 bytes the model's heuristic has no algorithm and the call is
 * staged at aligned scratch, which hides the preferences.) */
START_TEST(the_cublaslt_model_refuses_pointers_below_the_default_alignment)
{
    if (strcmp(bk_device_backend_name(), "emulator") != 0) return;
    setenv("BK_EMU_LT_DEFAULT_ALIGNMENT", "1", 1);
    bk_queue q = dev_queue();
    float x[17] = {0};
    float *g = PUT(x, 17);
    ck_assert_int_eq(bk_gemm(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, g, 2, g, 2, 0.0f, g, 2),
                     BK_OK);
    ck_assert_int_eq(
        bk_gemm(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, g + 4, 2, g, 2, 0.0f, g + 8, 2),
        BK_ERR_DEVICE);
    ck_assert_msg(strstr(bk_kernel_error(), "misaligned") != NULL, "error: %s", bk_kernel_error());
    dev_free(g);
}
END_TEST

START_TEST(invalid_arguments_are_refused)
{
    bk_queue q = dev_queue();
    float x[8] = {0};
    float *g = PUT(x, 8);
    ck_assert_int_eq(bk_rmsnorm_fwd(NULL, 1, 4, g, g, 1e-5f, g, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, -1, 4, g, g, 1e-5f, g, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_rmsnorm_bwd(&q, 1, 4, g, g, NULL, g, g, g), BK_ERR_ARG);
    const bk_rope rope = test_rope(0, 1e4);
    ck_assert_int_eq(bk_rope_fwd(&q, 1, 1, 3, (const int64_t *)g, &rope, g, g), BK_ERR_ARG);
    ck_assert_int_eq(bk_swiglu_fwd(&q, 1, 4, g, g, 3, g), BK_ERR_ARG);
    ck_assert_int_eq(bk_scale(&q, 4, NULL, 1.0f), BK_ERR_ARG);
    ck_assert_int_eq(
        bk_gemm(&q, BK_NO_TRANS, BK_NO_TRANS, 2, 2, 2, 1.0f, NULL, 2, g, 2, 0.0f, g, 2),
        BK_ERR_ARG);
    bk_adamw_params bad = {1e-3f, 1.0f, 0.9f, 1e-8f, 0.0f};
    ck_assert_int_eq(bk_adamw_step(&q, 4, g, g, g, g, &bad, 1, 1.0f), BK_ERR_ARG);
    ck_assert_int_eq(bk_attn_fwd_init(&q, 1, 1, 12, g, g), BK_ERR_ARG);
    dev_free(g);
}
END_TEST

static Suite *dev_ops_suite(void)
{
    Suite *s = suite_create("dev_ops");
    check_add_tests(check_tcase(s, "ops", 600), rmsnorm_matches_reference,
                    bf16_outputs_are_the_rounded_fp32_ones, rope_matches_reference,
                    swiglu_matches_reference, embedding_matches_reference,
                    adamw_matches_reference_over_steps, grad_norm_and_clipping,
                    scratch_comes_from_the_queues_arena, cross_entropy_matches_reference,
                    cross_entropy_edge_rows_and_invalid_labels, gemm_matches_reference,
                    attention_state_kernels, device_to_device_copy, vector_helpers_match_host,
                    gemm_runs_after_queued_copies, round_bf16_matches_nearest, widen_bf16_is_exact,
                    invalid_arguments_are_refused, gemm_takes_misaligned_operands_and_k_zero,
                    the_cublaslt_model_refuses_pointers_below_the_default_alignment);
    return s;
}

int main(void)
{
    return dev_test_main(dev_ops_suite());
}
