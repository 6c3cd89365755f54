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

/* Every per-op row's bytes and seconds together: the passes' bandwidth
 * (a device profile's elementwise row). */
static double all_bytes, all_secs;

static void row(FILE *out, const char *op, const char *shape, double secs, double bytes)
{
    all_bytes += bytes;
    all_secs += secs;
    fprintf(out, "  %-22s %-22s %10.3f ms/call %8.2f GB/s\n", op, shape, 1e3 * secs,
            bytes / secs / 1e9);
}

/* The shapes and buffers the per-op kernels run on, and how long each is
 * timed. */
typedef struct {
    bk_queue q;
    double tmin;              /* seconds of calls per measurement, at least */
    int64_t E;                /* elements per big buffer */
    int64_t d, n;             /* RMSNorm, SwiGLU, embedding rows [n, d] */
    int64_t H, hd, nr;        /* RoPE [nr, H, hd] */
    int64_t V, ce_rows;       /* cross-entropy chunk [ce_rows, V] */
    float *a, *b, *c, *e, *f; /* [E] each */
    float *w, *rstd, *dw;     /* [d], [n], [d] */
    int64_t *pos, *tok, *lab; /* [nr], [n], [ce_rows] */
    float *loss;              /* [ce_rows] */
} op_bench;

/* The shapes for a quick or a full run, and their buffers filled: 0, or -1
 * when memory ran out (op_bench_free frees what was had). */
static int op_bench_init(op_bench *o, int quick)
{
    /* elements per big buffer: 64 MiB full (beyond the 36 MB L3), 4 MiB quick */
    int64_t E = quick ? (1 << 20) : (1 << 24);
    *o = (op_bench){.q = bk_host_queue(),
                    .tmin = quick ? 0.05 : 0.5,
                    .E = E,
                    .d = 4096,
                    .H = 8,
                    .hd = 128,
                    .V = 32000};
    o->n = E / o->d, o->nr = E / (o->H * o->hd), o->ce_rows = E / o->V;
    o->a = filled(E, -1, 1, 1), o->b = filled(E, -1, 1, 2), o->c = filled(E, -1, 1, 3);
    o->e = filled(E, -1, 1, 4), o->f = filled(E, -1, 1, 5), o->w = filled(o->d, 0.5f, 1.5f, 6);
    o->rstd = filled(o->n, 1, 1, 7), o->dw = filled(o->d, 0, 0, 8);
    o->pos = malloc((size_t)o->nr * sizeof(int64_t));
    o->tok = malloc((size_t)o->n * sizeof(int64_t));
    o->lab = malloc((size_t)(o->ce_rows > 0 ? o->ce_rows : 1) * sizeof(int64_t));
    o->loss = malloc((size_t)(o->ce_rows > 0 ? o->ce_rows : 1) * sizeof(float));
    if (!o->a || !o->b || !o->c || !o->e || !o->f || !o->w || !o->rstd || !o->dw || !o->pos ||
        !o->tok || !o->lab || !o->loss)
        return -1;
    for (int64_t r = 0; r < o->nr; r++)
        o->pos[r] = 1000000 + 3 * r; /* a shard far into the sequence */
    for (int64_t r = 0; r < o->n; r++) o->tok[r] = (r * 7919) % o->n;
    for (int64_t r = 0; r < o->ce_rows; r++) o->lab[r] = (r * 104729) % o->V;
    return 0;
}

static void op_bench_free(op_bench *o)
{
    free(o->a), free(o->b), free(o->c), free(o->e), free(o->f), free(o->w), free(o->rstd);
    free(o->dw), free(o->pos), free(o->tok), free(o->lab), free(o->loss);
}

/* RMSNorm and RoPE, forward and backward: 0, or 1 when a kernel failed. */
static int time_norm_and_rope(FILE *out, op_bench *o)
{
    const bk_queue *q = &o->q;
    double fb = (double)o->E * sizeof(float), t; /* bytes of one big buffer */
    int64_t n = o->n, d = o->d, nr = o->nr, H = o->H, hd = o->hd;
    int rc = 0;
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)n, (long long)d);
    rc |= bk_rmsnorm_fwd(q, n, d, o->a, o->w, 1e-5f, o->b, o->rstd) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_rmsnorm_fwd(q, n, d, o->a, o->w, 1e-5f, o->b, o->rstd));
    row(out, "rmsnorm fwd", shape, t, 2 * fb);
    rc |= bk_rmsnorm_bwd(q, n, d, o->a, o->w, o->rstd, o->c, o->e, o->dw) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_rmsnorm_bwd(q, n, d, o->a, o->w, o->rstd, o->c, o->e, o->dw));
    row(out, "rmsnorm bwd", shape, t, 3 * fb);

    snprintf(shape, sizeof shape, "[%lld, %lld, %lld]", (long long)nr, (long long)H, (long long)hd);
    const bk_rope rope = {.type = BK_ROPE_DEFAULT, .theta = 500000.0, .factor = 1.0};
    rc |= bk_rope_fwd(q, nr, H, hd, o->pos, &rope, o->a, o->b) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_rope_fwd(q, nr, H, hd, o->pos, &rope, o->a, o->b));
    row(out, "rope fwd", shape, t, 2 * fb);
    TIME_CALLS(o->tmin, t, bk_rope_bwd(q, nr, H, hd, o->pos, &rope, o->a, o->b));
    row(out, "rope bwd", shape, t, 2 * fb);
    return rc;
}

/* SwiGLU forward and backward, the embedding's gather and scatter-add: 0, or
 * 1 when a kernel failed. */
static int time_swiglu_and_embedding(FILE *out, op_bench *o)
{
    const bk_queue *q = &o->q;
    double fb = (double)o->E * sizeof(float), t;
    int64_t n = o->n, d = o->d;
    int rc = 0;
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)n, (long long)d);
    rc |= bk_swiglu_fwd(q, n, d, o->a, o->b, d, o->c) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_swiglu_fwd(q, n, d, o->a, o->b, d, o->c));
    row(out, "swiglu fwd", shape, t, 3 * fb);
    rc |= bk_swiglu_bwd(q, n, d, o->a, o->b, d, o->c, o->e, o->f) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_swiglu_bwd(q, n, d, o->a, o->b, d, o->c, o->e, o->f));
    row(out, "swiglu bwd", shape, t, 5 * fb);

    /* embedding: table [n, d] of n rows, n tokens */
    rc |= bk_embedding_gather(q, n, n, d, o->tok, o->a, o->b) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_embedding_gather(q, n, n, d, o->tok, o->a, o->b));
    row(out, "embedding gather", shape, t, 2 * fb);
    rc |= bk_embedding_scatter_add(q, n, n, d, o->tok, o->b, o->c) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_embedding_scatter_add(q, n, n, d, o->tok, o->b, o->c));
    row(out, "embedding scatter-add", shape, t, 3 * fb);
    return rc;
}

/* The AdamW step, the gradient's squared norm and the fused cross-entropy:
 * 0, or 1 when a kernel failed. */
static int time_optimizer_and_loss(FILE *out, op_bench *o)
{
    const bk_queue *q = &o->q;
    double fb = (double)o->E * sizeof(float), t;
    int64_t E = o->E, V = o->V, ce_rows = o->ce_rows;
    int rc = 0;
    char shape[64];
    snprintf(shape, sizeof shape, "[%lld]", (long long)E);
    bk_adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    rc |= bk_adamw_step(q, E, o->a, o->b, o->c, o->e, &hp, 1, 1.0f) != BK_OK;
    memset(o->e, 0, (size_t)E * sizeof(float)); /* v >= 0 */
    TIME_CALLS(o->tmin, t, bk_adamw_step(q, E, o->a, o->b, o->c, o->e, &hp, 10, 1.0f));
    row(out, "adamw step", shape, t, 7 * fb);
    const float *bufs[1] = {o->b};
    double sq;
    rc |= bk_grad_sqnorm(q, 1, bufs, &E, &sq) != BK_OK;
    TIME_CALLS(o->tmin, t, bk_grad_sqnorm(q, 1, bufs, &E, &sq));
    row(out, "grad sqnorm", shape, t, fb);

    if (ce_rows > 0) {
        /* the kernel overwrites its logits with dlogits: later calls run on
         * those (finite, same work per element), so no refill is timed */
        snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)ce_rows, (long long)V);
        rc |= bk_cross_entropy_fwd_bwd(q, ce_rows, V, o->c, V, o->lab, -100, 1.0f, 1e-4f, o->loss,
                                       NULL, NULL) != BK_OK;
        TIME_CALLS(o->tmin, t,
                   bk_cross_entropy_fwd_bwd(q, ce_rows, V, o->c, V, o->lab, -100, 1.0f, 1e-4f,
                                            o->loss, NULL, NULL));
        row(out, "cross-entropy fwd+bwd", shape, t, 2.0 * (double)(ce_rows * V) * sizeof(float));
    }
    return rc;
}

/* 0 on success; the kernels' status is checked once, outside the timing. */
static int bench_bandwidth(FILE *out, int quick)
{
    op_bench o;
    int rc = 1;
    if (op_bench_init(&o, quick) != 0) {
        fprintf(out, "  out of memory\n");
    } else {
        fprintf(out,
                "per-op kernels (%d thread(s); best call; bytes = each buffer read or written "
                "once)\n",
                omp_get_max_threads());
        rc = time_norm_and_rope(out, &o);
        rc |= time_swiglu_and_embedding(out, &o);
        rc |= time_optimizer_and_loss(out, &o);
        if (rc) fprintf(out, "  a kernel returned an error\n");
    }
    op_bench_free(&o);
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

int bench_kernels_ops(FILE *out, int quick, double *gbps)
{
    all_bytes = all_secs = 0;
    int rc = bench_bandwidth(out, quick);
    if (gbps) *gbps = all_secs > 0 ? all_bytes / all_secs / 1e9 : 0;
    rc |= bench_gemm(out, quick);
    return rc ? 1 : 0;
}
