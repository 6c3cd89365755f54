/* bench_kernels_device.c: `burst bench kernels --device cuda`: the device
 * kernels on the program's device backend (a CUDA GPU in CUDA builds).
 *
 *   attention  forward and backward TFLOP/s with bf16 Q, K, V (tensor cores,
 *              fp32 accumulation), as a ratio to the bf16 GEMM (cuBLASLt, bf16
 *              in and out, fp32 accumulation) measured in the same run
 *   per op     GB/s of each elementwise and per-row kernel, as a ratio to the
 *              device-to-device copy bandwidth measured in the same run
 *
 * The device interface has no events: a measurement queues a batch of calls
 * and waits for the stream, doubling the batch until it lasts min_ms, and
 * keeps the best of reps batches. A benchmark, not a test: nothing here fails
 * on slowness; it fails when a kernel returns an error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/device.h"
#include "kernels/sdpa.h"
#include "src/bench/bench.h"
#include "util/clock.h"
#include "util/rng.h"

/* ---------------------------------------------------------------- timing */

/* One call of the kernel under measurement, queued on q. */
typedef bk_status (*dev_call_fn)(const bk_queue *q, void *ctx);

/* Seconds per call of f (best of reps batches), or a negative value when a
 * call failed (the status is printed). */
static double time_calls(const bench_device_opts *o, const char *what, dev_call_fn f, void *ctx)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    bk_status st = f(&q, ctx); /* warm-up: module load, caches, cuBLASLt plans */
    if (st == BK_OK) st = bk_device_sync(&q);
    double best = INFINITY;
    long batch = 1;
    for (int r = 0; st == BK_OK && r < o->reps;) {
        double t0 = bu_now();
        for (long i = 0; i < batch && st == BK_OK; i++) st = f(&q, ctx);
        if (st == BK_OK) st = bk_device_sync(&q);
        double t = bu_now() - t0;
        if (t * 1e3 < o->min_ms && batch < (1L << 20)) {
            batch *= 2; /* too short to time: a longer batch, not counted */
            continue;
        }
        if (t / (double)batch < best) best = t / (double)batch;
        r++;
    }
    if (st != BK_OK) {
        fprintf(stderr, "burst bench kernels: %s failed: %s\n", what, bk_status_name(st));
        return -1;
    }
    return best;
}

/* ---------------------------------------------------------------- buffers */

/* Device buffers of one measurement, freed together. */
typedef struct {
    void *p[24];
    int n;
    int failed;
} dev_pool;

/* Device memory for n values of elem_bytes each, uploaded from a host fill:
 * uniform in [lo, hi) as fp32 or bf16 (elem_bytes 4 or 2), or 0..range-1 as
 * int64 tokens (elem_bytes 8, range > 0). NULL (and pool->failed) on failure. */
static void *pool_fill(dev_pool *pool, size_t n, int elem_bytes, double lo, double hi,
                       int64_t range)
{
    if (pool->failed || pool->n == 24) return pool->failed = 1, NULL;
    void *host = malloc(n * (size_t)elem_bytes + 8), *dev = NULL;
    uint64_t s = bu_splitmix64((uint64_t)pool->n + 1);
    for (size_t i = 0; host && i < n; i++) {
        double u = lo + (hi - lo) * bu_rng_unit(&s);
        if (elem_bytes == 8)
            ((int64_t *)host)[i] = range > 0 ? bu_rng_range(&s, 0, range - 1) : (int64_t)i;
        else if (elem_bytes == 4)
            ((float *)host)[i] = (float)u;
        else
            ((uint16_t *)host)[i] = bk_float_to_bf16((float)u);
    }
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    size_t bytes = n * (size_t)elem_bytes;
    if (!host || bk_device_malloc(bytes, &dev) != BK_OK ||
        bk_device_upload(&q, dev, host, bytes) != BK_OK) {
        fprintf(stderr, "burst bench kernels: cannot place %zu bytes on the device\n", bytes);
        pool->failed = 1;
        free(host);
        bk_device_free(dev);
        return NULL;
    }
    free(host);
    return pool->p[pool->n++] = dev;
}

static void pool_free(dev_pool *pool)
{
    for (int i = 0; i < pool->n; i++) bk_device_free(pool->p[i]);
    pool->n = 0;
}

/* ---------------------------------------------------------------- GEMM reference */

typedef struct {
    int64_t n;
    const uint16_t *a, *b;
    uint16_t *c;
} gemm_ctx;

static bk_status gemm_call(const bk_queue *q, void *ctx)
{
    gemm_ctx *g = ctx;
    return bk_gemm_bf16(q, BK_NO_TRANS, BK_NO_TRANS, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b,
                        g->n, 0.0f, g->c, BK_BF16, g->n);
}

/* TFLOP/s of the square bf16 GEMM of side n; negative on failure. */
static double gemm_tflops(const bench_device_opts *o, int64_t n)
{
    dev_pool pool = {0};
    size_t nn = (size_t)n * (size_t)n;
    gemm_ctx g = {n, pool_fill(&pool, nn, 2, -1, 1, 0), pool_fill(&pool, nn, 2, -1, 1, 0),
                  pool_fill(&pool, nn, 2, 0, 0, 0)};
    double t = pool.failed ? -1 : time_calls(o, "bf16 GEMM", gemm_call, &g);
    pool_free(&pool);
    return t > 0 ? 2.0 * (double)n * (double)n * (double)n / t * 1e-12 : -1;
}

/* ---------------------------------------------------------------- attention */

typedef struct {
    bk_attn_geom g;
    const uint16_t *Q, *K, *V, *dO; /* bf16 [seq, H, d] */
    const float *dO_f32;            /* an fp32 dO for bk_attn_delta (any values do) */
    float *O, *lse, *delta, *dQ, *dK, *dV;
} attn_ctx;

static bk_status attn_fwd_call(const bk_queue *q, void *ctx)
{
    attn_ctx *a = ctx;
    return bk_attn_fwd_bf16(q, &a->g, a->Q, a->K, a->V, a->O, a->lse, NULL);
}

static bk_status attn_bwd_call(const bk_queue *q, void *ctx)
{
    attn_ctx *a = ctx;
    return bk_attn_bwd_bf16(q, &a->g, a->Q, a->K, a->V, a->dO, a->lse, a->delta, a->dQ, a->dK,
                            a->dV, NULL);
}

/* cuDNN's fused SDPA on the same block: one dense call, causal as a right
 * bound 0 (top-left), a bf16 block output and Stats; the backward reads the
 * bf16 O and writes bf16 gradients. */
typedef struct {
    bk_sdpa_call c;
    bk_sdpa_seq seq;
    const uint16_t *Q, *K, *V, *dO;
    uint16_t *O, *dQ, *dK, *dV;
    float *stats;
    void *ws;
    size_t ws_bytes;
} sdpa_ctx;

static bk_status sdpa_fwd_call(const bk_queue *q, void *ctx)
{
    sdpa_ctx *a = ctx;
    return bk_sdpa_fwd(q, &a->c, a->Q, a->K, a->V, a->O, a->stats, a->ws, a->ws_bytes);
}

static bk_status sdpa_bwd_call(const bk_queue *q, void *ctx)
{
    sdpa_ctx *a = ctx;
    return bk_sdpa_bwd(q, &a->c, a->Q, a->K, a->V, a->O, a->dO, a->stats, a->dQ, a->dK, a->dV,
                       a->ws, a->ws_bytes);
}

/* The SDPA call of attn's block, planned, its buffers in pool: 0, or -1. */
static int sdpa_setup(sdpa_ctx *s, const attn_ctx *a, dev_pool *pool, int causal)
{
    const bk_attn_geom *g = &a->g;
    size_t nq = (size_t)g->n_q * (size_t)g->h_q * (size_t)g->d;
    size_t nk = (size_t)g->n_kv * (size_t)g->h_kv * (size_t)g->d;
    s->seq = (bk_sdpa_seq){0, g->n_q, 0, g->n_kv};
    s->c = (bk_sdpa_call){.h_q = g->h_q, .h_kv = g->h_kv, .d = g->d, .scale = g->scale,
                          .band = {.align = BK_SDPA_TOP_LEFT, .has_right = causal, .right = 0},
                          .n_seq = 1, .seq = &s->seq};
    s->Q = a->Q, s->K = a->K, s->V = a->V, s->dO = a->dO;
    s->O = pool_fill(pool, nq, 2, 0, 0, 0), s->dQ = pool_fill(pool, nq, 2, 0, 0, 0);
    s->dK = pool_fill(pool, nk, 2, 0, 0, 0), s->dV = pool_fill(pool, nk, 2, 0, 0, 0);
    s->stats = pool_fill(pool, bk_sdpa_stats_floats(&s->c), 4, 0, 0, 0);
    if (pool->failed || bk_sdpa_prepare(&s->c, 1, 1, &s->ws_bytes) != BK_OK) return -1;
    s->ws = pool_fill(pool, s->ws_bytes / 4 + 1, 4, 0, 0, 0);
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    return !pool->failed && sdpa_fwd_call(&q, s) == BK_OK ? 0 : -1; /* O, Stats for the backward */
}

/* O and lse of one forward pass, then delta: the state a backward reads. */
static bk_status attn_prepare_backward(attn_ctx *a)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    const bk_attn_geom *g = &a->g;
    bk_status st = bk_attn_fwd_init(&q, g->n_q, g->h_q, g->d, a->O, a->lse);
    if (st == BK_OK) st = attn_fwd_call(&q, a);
    if (st == BK_OK) st = bk_attn_fwd_finalize(&q, g->n_q, g->h_q, g->d, a->O, a->lse);
    if (st == BK_OK) st = bk_attn_delta(&q, g->n_q, g->h_q, g->d, a->dO_f32, a->O, a->delta);
    return st;
}

/* Seconds per forward and per backward call of the kernel (BENCH_KERNEL_*)
 * on the block of a; 0 on success. */
static int time_kernel(const bench_device_opts *o, unsigned kernel, attn_ctx *a, dev_pool *pool,
                       double *tf, double *tb)
{
    if (kernel == BENCH_KERNEL_BURST) {
        if (attn_prepare_backward(a) != BK_OK) return 1;
        *tf = time_calls(o, "attention forward", attn_fwd_call, a);
        *tb = *tf > 0 ? time_calls(o, "attention backward", attn_bwd_call, a) : -1;
        return *tb > 0 ? 0 : 1;
    }
    sdpa_ctx s;
    if (sdpa_setup(&s, a, pool, a->g.mask.flags != 0) != 0) {
        fprintf(stderr, "burst bench kernels: cuDNN SDPA set-up failed: %s\n", bk_kernel_error());
        return 1;
    }
    *tf = time_calls(o, "cuDNN SDPA forward", sdpa_fwd_call, &s);
    *tb = *tf > 0 ? time_calls(o, "cuDNN SDPA backward", sdpa_bwd_call, &s) : -1;
    return *tb > 0 ? 0 : 1;
}

/* Forward and backward TFLOP/s of one block of seq query and key/value rows
 * on kernel (BENCH_KERNEL_*). FLOPs: 4 seq^2 d per query head forward, 2.5x
 * that backward, halved for the causal mask. 0 on success. */
static int attn_tflops(const bench_device_opts *o, unsigned kernel, int64_t seq, int d, int hkv,
                       int causal, double *fwd, double *bwd)
{
    dev_pool pool = {0};
    const int hq = o->hq;
    size_t nq = (size_t)seq * (size_t)hq * (size_t)d, nk = (size_t)seq * (size_t)hkv * (size_t)d;
    size_t rows = (size_t)seq * (size_t)hq;
    attn_ctx a = {0};
    const int64_t *pos = pool_fill(&pool, (size_t)seq, 8, 0, 0, 0);
    a.g = (bk_attn_geom){seq, seq, hq, hkv, d, 1.0f / sqrtf((float)d), pos, pos, NULL, NULL,
                         causal ? bk_attn_mask_causal() : bk_attn_mask_none()};
    a.Q = pool_fill(&pool, nq, 2, -1, 1, 0), a.K = pool_fill(&pool, nk, 2, -1, 1, 0);
    a.V = pool_fill(&pool, nk, 2, -1, 1, 0);
    a.dO = pool_fill(&pool, nq, 2, -1, 1, 0), a.dO_f32 = pool_fill(&pool, nq, 4, -1, 1, 0);
    a.O = pool_fill(&pool, nq, 4, 0, 0, 0), a.lse = pool_fill(&pool, rows, 4, 0, 0, 0);
    a.delta = pool_fill(&pool, rows, 4, 0, 0, 0);
    a.dQ = pool_fill(&pool, nq, 4, 0, 0, 0), a.dK = pool_fill(&pool, nk, 4, 0, 0, 0);
    a.dV = pool_fill(&pool, nk, 4, 0, 0, 0);
    int rc = 1;
    double tf, tb;
    if (!pool.failed && time_kernel(o, kernel, &a, &pool, &tf, &tb) == 0) {
        double flops = 4.0 * (double)seq * (double)seq * d * hq * (causal ? 0.5 : 1.0);
        *fwd = flops / tf * 1e-12;
        *bwd = 2.5 * flops / tb * 1e-12;
        rc = 0;
    } else if (!pool.failed) {
        fprintf(stderr, "burst bench kernels: attention set-up failed at seq %lld\n",
                (long long)seq);
    }
    pool_free(&pool);
    return rc;
}

/* The kernels to time: those asked (both by default); cuDNN's only where
 * this program can run it, else a line saying why. */
static unsigned kernels_to_time(const bench_device_opts *o)
{
    unsigned k = o->kernels ? o->kernels : BENCH_KERNEL_BURST | BENCH_KERNEL_CUDNN;
    char why[256];
    if ((k & BENCH_KERNEL_CUDNN) && !bk_sdpa_available(why, sizeof why)) {
        printf("cudnn: n/a: %s\n", why);
        k &= ~BENCH_KERNEL_CUDNN;
    }
    return k;
}

/* One row: the reference GEMM, then the kernel on one configuration. */
static int attention_row(const bench_device_opts *o, unsigned kernel, int64_t seq, int m, int d,
                         int hkv)
{
    /* the reference right before each configuration: both see the same
     * clocks and the same neighbours */
    double mm = gemm_tflops(o, o->gemm_n), fwd = 0, bwd = 0;
    if (mm <= 0 || attn_tflops(o, kernel, seq, d, hkv, m, &fwd, &bwd)) return 1;
    printf("%-6s %-7s %6lld %4d %4d %11.4g %10.4g %7.3g %10.4g %7.3g\n",
           kernel == BENCH_KERNEL_CUDNN ? "cudnn" : "burst", m ? "causal" : "full",
           (long long)seq, d, hkv, mm, fwd, fwd / mm, bwd, bwd / mm);
    fflush(stdout);
    for (int pass = 0; o->profile && hkv == o->hq && pass < 2; pass++)
        profile_write_attention(o->profile, pass, d, m, seq, 1e3 * (pass ? bwd : fwd));
    return 0;
}

static int bench_attention_device(const bench_device_opts *o)
{
    unsigned kernels = kernels_to_time(o);
    printf("%-6s %-7s %6s %4s %4s %11s %10s %7s %10s %7s\n", "kernel", "mask", "seq", "d", "hkv",
           "GEMM TF/s", "fwd TF/s", "fwd/mm", "bwd TF/s", "bwd/mm");
    static const int ds[] = {64, 128};
    const int hkvs[] = {o->hq, o->hq >= 4 ? o->hq / 4 : 1};
    for (int s = 0; s < o->n_seq; s++)
        for (int m = 0; m < 2; m++) {
            if (o->only_mask >= 0 && m != o->only_mask) continue;
            for (int di = 0; di < (o->only_d ? 1 : 2); di++)
                for (int hi = 0; hi < (o->only_hkv ? 1 : 2); hi++) {
                    int d = o->only_d ? o->only_d : ds[di];
                    int hkv = o->only_hkv ? o->only_hkv : hkvs[hi];
                    for (unsigned k = BENCH_KERNEL_BURST; k <= BENCH_KERNEL_CUDNN; k <<= 1)
                        if ((kernels & k) && attention_row(o, k, o->seqs[s], m, d, hkv))
                            return 1;
                }
        }
    return 0;
}

/* ---------------------------------------------------------------- per-op bandwidth */

/* The buffers the ops work on: x, y, z, w of n fp32 values each, seen as
 * [rows, cols] where an op has rows (and as [n / vocab, vocab] logits by the
 * cross-entropy); small: per-row outputs; tok: rows int64 tokens, positions
 * and labels, all below min(rows, vocab); bf: n bf16 values. */
typedef struct {
    int64_t n, rows, cols, vocab;
    float *x, *y, *z, *w, *small;
    int64_t *tok;
    uint16_t *bf;
    double *sq;
} op_ctx;

static bk_status op_copy(const bk_queue *q, void *c)
{
    op_ctx *o = c;
    return bk_device_copy(q, o->y, o->x, (size_t)o->n * sizeof(float));
}
static bk_status op_rmsnorm_fwd(const bk_queue *q, void *c)
{
    op_ctx *o = c;
    return bk_rmsnorm_fwd(q, o->rows, o->cols, o->x, o->w, 1e-5f, o->y, o->small);
}
static bk_status op_rmsnorm_bwd(const bk_queue *q, void *c)
{
    op_ctx *o = c;
    return bk_rmsnorm_bwd(q, o->rows, o->cols, o->x, o->w, o->small, o->y, o->z, o->w + o->cols);
}
static bk_status op_rope_fwd(const bk_queue *q, void *c)
{
    op_ctx *o = c; /* cols = H * 128: heads of 128 */
    const bk_rope rope = {.type = BK_ROPE_DEFAULT, .theta = 5e5, .factor = 1.0};
    return bk_rope_fwd(q, o->rows, o->cols / 128, 128, o->tok, &rope, o->x, o->y);
}
static bk_status op_swiglu_fwd(const bk_queue *q, void *c)
{
    op_ctx *o = c; /* gate and up: the two halves of x */
    return bk_swiglu_fwd(q, o->rows, o->cols / 2, o->x, o->x + o->n / 2, o->cols / 2, o->y);
}
static bk_status op_embedding_gather(const bk_queue *q, void *c)
{
    op_ctx *o = c; /* the table: x as [rows, cols] */
    return bk_embedding_gather(q, o->rows, o->rows, o->cols, o->tok, o->x, o->y);
}
static bk_status op_adamw(const bk_queue *q, void *c)
{
    op_ctx *o = c;
    bk_adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    return bk_adamw_step_bf16(q, o->n, o->x, o->y, o->z, o->w, &hp, 1, 1.0f, o->bf);
}
static bk_status op_cross_entropy(const bk_queue *q, void *c)
{
    op_ctx *o = c; /* logits [rows, vocab] in y (overwritten by their gradient) */
    int64_t n_valid;
    int64_t rows = o->n / o->vocab;
    return bk_cross_entropy_fwd_bwd(q, rows, o->vocab, o->y, o->vocab, o->tok, -100, 1.0f, 0.0f,
                                    o->small, o->small + rows, &n_valid);
}
static bk_status op_grad_sqnorm(const bk_queue *q, void *c)
{
    op_ctx *o = c;
    const float *bufs[1] = {o->x};
    int64_t counts[1] = {o->n};
    return bk_grad_sqnorm(q, 1, bufs, counts, o->sq);
}

typedef struct {
    const char *name;
    dev_call_fn call;
    double bytes_per_value; /* bytes moved per fp32 value of n (reads + writes) */
} op_row;

static int bench_ops_device(const bench_device_opts *o)
{
    dev_pool pool = {0};
    op_ctx c = {0};
    c.n = o->op_bytes / 4 / 4096 * 4096; /* a multiple of the row length */
    c.cols = 4096, c.rows = c.n / c.cols, c.vocab = 32768;
    double sq = 0;
    c.sq = &sq;
    c.x = pool_fill(&pool, (size_t)c.n, 4, -1, 1, 0), c.y = pool_fill(&pool, (size_t)c.n, 4, -1, 1, 0);
    c.z = pool_fill(&pool, (size_t)c.n, 4, 0, 1e-3, 0), c.w = pool_fill(&pool, (size_t)c.n, 4, 0, 1e-3, 0);
    c.small = pool_fill(&pool, (size_t)c.rows * 2 + (size_t)c.n / (size_t)c.vocab * 2, 4, 1, 1, 0);
    c.tok = pool_fill(&pool, (size_t)c.rows, 8, 0, 0, c.rows < c.vocab ? c.rows : c.vocab);
    c.bf = pool_fill(&pool, (size_t)c.n, 2, 0, 0, 0);
    if (pool.failed) return pool_free(&pool), 1;
    /* bytes moved, per fp32 value of n: reads plus writes of the large buffers */
    const op_row rows[] = {
        {"copy (reference)", op_copy, 8},
        {"rmsnorm fwd", op_rmsnorm_fwd, 8},
        {"rmsnorm bwd", op_rmsnorm_bwd, 12},
        {"rope fwd", op_rope_fwd, 8},
        {"swiglu fwd", op_swiglu_fwd, 6},
        {"embedding gather", op_embedding_gather, 8},
        {"adamw + bf16 copy", op_adamw, 30},
        {"cross-entropy", op_cross_entropy, 8},
        {"grad sum of squares", op_grad_sqnorm, 4},
    };
    printf("\nper-op kernels: %lld fp32 values (%.0f MiB) per buffer, rows of %lld\n",
           (long long)c.n, (double)c.n * 4 / 1048576.0, (long long)c.cols);
    printf("  %-22s %10s %9s %8s\n", "op", "ms/call", "GB/s", "/copy");
    double copy_gbs = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double t = time_calls(o, rows[i].name, rows[i].call, &c);
        if (t <= 0) return pool_free(&pool), 1;
        double gbs = rows[i].bytes_per_value * (double)c.n / t * 1e-9;
        if (i == 0) copy_gbs = gbs;
        printf("  %-22s %10.4g %9.4g %8.3g\n", rows[i].name, t * 1e3, gbs, gbs / copy_gbs);
        fflush(stdout);
    }
    pool_free(&pool);
    return 0;
}

int bench_kernels_device(const bench_device_opts *o)
{
    if (!bk_device_available()) {
        fprintf(stderr,
                "burst bench kernels: --device cuda: no device (this build's device backend: "
                "%s%s)\n",
                bk_device_backend_name(),
                strcmp(bk_device_backend_name(), "none") ? ", and no GPU is visible" : "");
        return 1;
    }
    printf("device kernels on %s: Hq = %d, bf16 Q/K/V, fp32 accumulation; reference: bf16 "
           "GEMM %lld^3; best of %d batches of >= %.0f ms\n",
           bk_device_backend_name(), o->hq, (long long)o->gemm_n, o->reps, o->min_ms);
    if (bench_attention_device(o)) return 1;
    return o->ops && bench_ops_device(o) ? 1 : 0;
}
