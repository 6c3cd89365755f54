/* bench_kernels_ops.c: the per-op part of `burst bench kernels`: memory
 * bandwidth of the elementwise and per-row kernels (RMSNorm, RoPE, SwiGLU,
 * embedding, AdamW, cross-entropy), and the built-in GEMM against cblas_sgemm.
 *
 * Bandwidth counts the bytes a kernel must move at least: every buffer it reads
 * once plus every buffer it writes once (small vectors such as the RMSNorm
 * weight left out), divided by the wall time of one call. Buffers are sized
 * well beyond the last-level cache in the full run, so the figure is a DRAM
 * bandwidth; the quick run uses small sizes and mostly measures caches. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/ops.h"
#include "src/bench/bench.h"
#include "util/clock.h"

/* Seconds per call: one warm-up call, then calls until min_seconds passed
 * (at least 3); the fastest call is kept, since the machine is shared and a
 * slow call measures the neighbours, not the kernel. */
#define TIME_CALLS(min_seconds, secs_out, call)                                                    \
    do {                                                                                           \
        call;                                                                                      \
        int reps_ = 0;                                                                             \
        double start_ = bu_now(), best_ = 1e30, t0_, t1_;                                       \
        do {                                                                                       \
            t0_ = bu_now();                                                                     \
            call;                                                                                  \
            t1_ = bu_now();                                                                     \
            if (t1_ - t0_ < best_) best_ = t1_ - t0_;                                              \
            reps_++;                                                                               \
        } while (reps_ < 3 || t1_ - start_ < (min_seconds));                                       \
        (secs_out) = best_;                                                                        \
    } while (0)

static float *filled(int64_t n, float lo, float hi, uint32_t seed)
{
    float *x = malloc((size_t)n * sizeof(float));
    if (!x) return NULL;
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(s >> 8) * (1.0f / 16777216.0f);
    }
    return x;
}

static void row(FILE *out, const char *op, const char *shape, double secs, double bytes)
{
    fprintf(out, "  %-22s %-22s %10.3f ms/call %8.2f GB/s\n", op, shape, 1e3 * secs,
            bytes / secs / 1e9);
}

/* 0 on success; the kernels' status is checked once, outside the timing. */
static int bench_bandwidth(FILE *out, int quick)
{
    bk_queue q = bk_host_queue();
    double tmin = quick ? 0.05 : 0.5;
    /* elements per big buffer: 64 MiB full (beyond the 36 MB L3), 4 MiB quick */
    int64_t E = quick ? (1 << 20) : (1 << 24);
    int64_t d = 4096, n = E / d;                /* RMSNorm rows [n, d] */
    int64_t H = 8, hd = 128, nr = E / (H * hd); /* RoPE [nr, H, hd] */
    int64_t V = 32000, ce_rows = E / V;         /* cross-entropy chunk [ce_rows, V] */
    int rc = 0;
    char shape[64];
    double t;

    float *a = filled(E, -1, 1, 1), *b = filled(E, -1, 1, 2), *c = filled(E, -1, 1, 3);
    float *e = filled(E, -1, 1, 4), *f = filled(E, -1, 1, 5), *w = filled(d, 0.5f, 1.5f, 6);
    float *rstd = filled(n, 1, 1, 7), *dw = filled(d, 0, 0, 8);
    int64_t *pos = malloc((size_t)nr * sizeof(int64_t)), *tok = malloc((size_t)n * sizeof(int64_t));
    int64_t *lab = malloc((size_t)(ce_rows > 0 ? ce_rows : 1) * sizeof(int64_t));
    float *loss = malloc((size_t)(ce_rows > 0 ? ce_rows : 1) * sizeof(float));
    if (!a || !b || !c || !e || !f || !w || !rstd || !dw || !pos || !tok || !lab || !loss) {
        fprintf(out, "  out of memory\n");
        rc = 1;
        goto done;
    }
    for (int64_t r = 0; r < nr; r++) pos[r] = 1000000 + 3 * r; /* a shard far into the sequence */
    for (int64_t r = 0; r < n; r++) tok[r] = (r * 7919) % n;
    for (int64_t r = 0; r < ce_rows; r++) lab[r] = (r * 104729) % V;

    fprintf(out,
            "per-op kernels (%d thread(s); best call; bytes = each buffer read or written once)\n",
            omp_get_max_threads());
    double fb = (double)E * sizeof(float); /* bytes of one big buffer */

    snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)n, (long long)d);
    rc |= bk_rmsnorm_fwd(&q, n, d, a, w, 1e-5f, b, rstd) != BK_OK;
    TIME_CALLS(tmin, t, bk_rmsnorm_fwd(&q, n, d, a, w, 1e-5f, b, rstd));
    row(out, "rmsnorm fwd", shape, t, 2 * fb);
    rc |= bk_rmsnorm_bwd(&q, n, d, a, w, rstd, c, e, dw) != BK_OK;
    TIME_CALLS(tmin, t, bk_rmsnorm_bwd(&q, n, d, a, w, rstd, c, e, dw));
    row(out, "rmsnorm bwd", shape, t, 3 * fb);

    snprintf(shape, sizeof shape, "[%lld, %lld, %lld]", (long long)nr, (long long)H, (long long)hd);
    const bk_rope rope = {.type = BK_ROPE_DEFAULT, .theta = 500000.0, .factor = 1.0};
    rc |= bk_rope_fwd(&q, nr, H, hd, pos, &rope, a, b) != BK_OK;
    TIME_CALLS(tmin, t, bk_rope_fwd(&q, nr, H, hd, pos, &rope, a, b));
    row(out, "rope fwd", shape, t, 2 * fb);
    TIME_CALLS(tmin, t, bk_rope_bwd(&q, nr, H, hd, pos, &rope, a, b));
    row(out, "rope bwd", shape, t, 2 * fb);

    snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)n, (long long)d);
    rc |= bk_swiglu_fwd(&q, n, d, a, b, d, c) != BK_OK;
    TIME_CALLS(tmin, t, bk_swiglu_fwd(&q, n, d, a, b, d, c));
    row(out, "swiglu fwd", shape, t, 3 * fb);
    rc |= bk_swiglu_bwd(&q, n, d, a, b, d, c, e, f) != BK_OK;
    TIME_CALLS(tmin, t, bk_swiglu_bwd(&q, n, d, a, b, d, c, e, f));
    row(out, "swiglu bwd", shape, t, 5 * fb);

    /* embedding: table [n, d] of n rows, n tokens */
    rc |= bk_embedding_gather(&q, n, n, d, tok, a, b) != BK_OK;
    TIME_CALLS(tmin, t, bk_embedding_gather(&q, n, n, d, tok, a, b));
    row(out, "embedding gather", shape, t, 2 * fb);
    rc |= bk_embedding_scatter_add(&q, n, n, d, tok, b, c) != BK_OK;
    TIME_CALLS(tmin, t, bk_embedding_scatter_add(&q, n, n, d, tok, b, c));
    row(out, "embedding scatter-add", shape, t, 3 * fb);

    snprintf(shape, sizeof shape, "[%lld]", (long long)E);
    bk_adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    rc |= bk_adamw_step(&q, E, a, b, c, e, &hp, 1, 1.0f) != BK_OK;
    memset(e, 0, (size_t)E * sizeof(float)); /* v >= 0 */
    TIME_CALLS(tmin, t, bk_adamw_step(&q, E, a, b, c, e, &hp, 10, 1.0f));
    row(out, "adamw step", shape, t, 7 * fb);
    const float *bufs[1] = {b};
    double sq;
    rc |= bk_grad_sqnorm(&q, 1, bufs, &E, &sq) != BK_OK;
    TIME_CALLS(tmin, t, bk_grad_sqnorm(&q, 1, bufs, &E, &sq));
    row(out, "grad sqnorm", shape, t, fb);

    if (ce_rows > 0) {
        /* the kernel overwrites its logits with dlogits: later calls run on
         * those (finite, same work per element), so no refill is timed */
        snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)ce_rows, (long long)V);
        rc |= bk_cross_entropy_fwd_bwd(&q, ce_rows, V, c, V, lab, -100, 1.0f, 1e-4f, loss, NULL,
                                       NULL) != BK_OK;
        TIME_CALLS(tmin, t,
                   bk_cross_entropy_fwd_bwd(&q, ce_rows, V, c, V, lab, -100, 1.0f, 1e-4f, loss,
                                            NULL, NULL));
        row(out, "cross-entropy fwd+bwd", shape, t, 2.0 * (double)(ce_rows * V) * sizeof(float));
    }
    if (rc) fprintf(out, "  a kernel returned an error\n");
done:
    free(a), free(b), free(c), free(e), free(f), free(w), free(rstd), free(dw);
    free(pos), free(tok), free(lab), free(loss);
    return rc;
}

/* Built-in GEMM vs cblas_sgemm on square products. */
static int bench_gemm(FILE *out, int quick)
{
    bk_queue q = bk_host_queue();
    static const int64_t full[] = {1024, 2048, 4096};
    static const int64_t fast[] = {512, 1024};
    const int64_t *sizes = quick ? fast : full;
    int n_sizes = quick ? 2 : 3, rc = 0;
    double tmin = quick ? 0.1 : 1.0;
    fprintf(out, "GEMM C[N, N] = A[N, N] B[N, N], GFLOP/s (2 N^3 per call); cblas: %s\n",
            bk_gemm_has_cblas() ? BURST_BLAS_NAME : "not built");
    for (int s = 0; s < n_sizes; s++) {
        int64_t N = sizes[s];
        float *a = filled(N * N, -1, 1, 11), *b = filled(N * N, -1, 1, 12);
        float *c = filled(N * N, 0, 0, 13);
        if (!a || !b || !c) {
            free(a), free(b), free(c);
            fprintf(out, "  out of memory\n");
            return 1;
        }
        double flops = 2.0 * (double)N * N * N, tb, tc = 0;
        rc |= bk_gemm_builtin(&q, BK_NO_TRANS, BK_NO_TRANS, N, N, N, 1.0f, a, N, b, N, 0.0f, c,
                              N) != BK_OK;
        TIME_CALLS(
            tmin, tb,
            bk_gemm_builtin(&q, BK_NO_TRANS, BK_NO_TRANS, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N));
        double gb = flops / tb / 1e9;
        if (bk_gemm_has_cblas()) {
            TIME_CALLS(
                tmin, tc,
                bk_gemm_cblas(&q, BK_NO_TRANS, BK_NO_TRANS, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N));
            double gc = flops / tc / 1e9;
            fprintf(out, "  N = %-5lld built-in %7.1f GFLOP/s   cblas %7.1f GFLOP/s   ratio %.2f\n",
                    (long long)N, gb, gc, gb / gc);
        } else {
            fprintf(out, "  N = %-5lld built-in %7.1f GFLOP/s\n", (long long)N, gb);
        }
        free(a), free(b), free(c);
    }
    return rc;
}

int bench_kernels_ops(FILE *out, int quick)
{
    int rc = bench_bandwidth(out, quick);
    rc |= bench_gemm(out, quick);
    return rc ? 1 : 0;
}
