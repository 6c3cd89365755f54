/* bench_kernels.c: `burst bench kernels`: its options, and on the CPU the
 * attention forward and backward GFLOP/s against cblas_sgemm measured in the
 * same run (speed is reported as a ratio to a reference, never as an absolute
 * pass/fail), then the per-op kernels (bench_kernels_ops). `--device cuda`
 * runs bench_kernels_device instead. A benchmark, not a test: nothing here
 * fails on slowness. */
#include "config.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

#include "kernels/attention.h"
#include "src/bench/bench.h"
#include "util/clock.h"
#include "util/exit_codes.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst bench kernels [--device cpu|cuda] [OPTIONS]\n\n"
            "Attention forward and backward GFLOP/s on one block (query and key/value rows of\n"
            "the same SEQ tokens, Hq = 8 query heads), for full and causal masks, head dims 64\n"
            "and 128, Hkv = 8 and 2, each as a ratio to cblas_sgemm GFLOP/s measured in the\n"
            "same run, right before each configuration (best of 3), on a square product of\n"
            "side min(SEQ, 2048) (sgemm is n/a without CBLAS). Then the per-op kernels.\n"
            "FLOPs: forward 4 * SEQ^2 * d per head, backward 2.5x that, both halved for the\n"
            "causal mask (a diagonal block). Times are the best of REPS runs of one kernel call\n"
            "(bk_attn_fwd, bk_attn_bwd); threads are the OpenMP default (OMP_NUM_THREADS).\n"
            "fwd512 and bwd512: the same work as the ring calls it, in pieces of 512 query\n"
            "rows against the whole key block, as ratios to sgemm.\n\n"
            "  --quick        SEQ = 1024 and one run each: a few seconds\n"
            "  --seq N        block size in tokens (repeatable; default 4096 8192 16384;\n"
            "                 32768 is accepted but takes minutes per configuration)\n"
            "  --d N          only head dim N (64 or 128 are the fast ones; any multiple of 8)\n"
            "  --hkv N        only Hkv = N (must divide Hq: 8 on the CPU)\n"
            "  --mask M       only M = full or causal\n"
            "  --reps N       runs per measurement, best kept (default 2; 1 with --quick)\n"
            "  --cpu-time     time with the process CPU clock instead of the wall clock:\n"
            "                 GFLOP per CPU-second, insensitive to other processes taking\n"
            "                 the cores (meant for OMP_NUM_THREADS=1 on a shared machine;\n"
            "                 with more threads, spinning OpenMP threads count too)\n"
            "  --no-ops       skip the per-op kernels\n"
            "  -h, --help     this help\n\n"
            "--device cuda: the device kernels on the GPU (CUDA builds). Attention forward and\n"
            "backward TFLOP/s with bf16 Q/K/V on tensor cores (fp32 accumulation), Hq = 16,\n"
            "Hkv = Hq and Hq / 4, each as a ratio to the cuBLASLt bf16 GEMM rate measured\n"
            "right before it; then each op's GB/s as a ratio to device-to-device copy\n"
            "bandwidth measured in the same run. Defaults: SEQ 4096 8192 16384 32768,\n"
            "best of 3 batches of calls, each batch at least 20 ms. --quick: SEQ = 1024,\n"
            "GEMM side 2048, 64 MiB op buffers, one batch. Besides the options above:\n"
            "  --hq N         query heads (default 16)\n"
            "  --gemm N       side of the reference GEMM (default 8192)\n"
            "  --op-mib N     MiB of each per-op buffer (default 1024)\n"
            "  --min-ms X     shortest batch that counts, in ms (default 20)\n");
}

/* The clock all timings use: wall (default) or process CPU time (--cpu-time). */
static int use_cpu_time;

static double now(void)
{
    if (!use_cpu_time) return bu_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rand_buf(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    if (!x) return NULL;
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    return x;
}

/* GFLOP/s of cblas_sgemm on an n x n x n product (best of reps); 0 if none. */
static double sgemm_gflops(int n, int reps)
{
#ifdef HAVE_CBLAS
    float *a = rand_buf((size_t)n * n, 1), *b = rand_buf((size_t)n * n, 2),
          *c = calloc((size_t)n * n, sizeof(float));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                n); /* warm-up: threads, pages */
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double t = now() - t0;
        if (t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * n * (double)n * n / best * 1e-9;
#else
    (void)n;
    (void)reps;
    return 0;
#endif
}

/* One configuration's buffers: Q, dO, O, dQ [seq, hq, d]; K, V, dK, dV
 * [seq, hkv, d]; lse, delta [seq, hq]. */
typedef struct {
    int64_t *pos;
    float *Q, *K, *V, *dO, *O, *dQ, *dK, *dV, *lse, *delta;
} attn_bufs;

static void attn_bufs_free(attn_bufs *b)
{
    free(b->pos), free(b->Q), free(b->K), free(b->V), free(b->dO), free(b->O), free(b->dQ);
    free(b->dK), free(b->dV), free(b->lse), free(b->delta);
}

/* Seconds of one forward (backward with bwd) over the whole block, in calls
 * of `piece` query rows against the whole key block (0: one call), as the
 * ring makes them; the best of reps. O and lse are left final. */
static double time_attention(const bk_attn_geom *whole, attn_bufs *b, int64_t piece, int bwd,
                             int reps)
{
    bk_queue q = bk_host_queue();
    const int64_t seq = whole->n_q, hq = whole->h_q, d = whole->d;
    const int64_t step = piece > 0 ? piece : seq;
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        if (!bwd && bk_attn_fwd_init(&q, seq, (int)hq, (int)d, b->O, b->lse) != BK_OK) return -1;
        double t0 = now();
        for (int64_t r0 = 0; r0 < seq; r0 += step) {
            bk_attn_geom g = *whole;
            g.n_q = seq - r0 < step ? seq - r0 : step;
            g.q_pos = whole->q_pos + r0;
            const int64_t row = r0 * hq * d;
            bk_status st =
                bwd ? bk_attn_bwd(&q, &g, b->Q + row, b->K, b->V, b->dO + row, b->lse + r0 * hq,
                                  b->delta + r0 * hq, b->dQ + row, b->dK, b->dV, NULL)
                    : bk_attn_fwd(&q, &g, b->Q + row, b->K, b->V, b->O + row, b->lse + r0 * hq,
                                  NULL);
            if (st != BK_OK) return -1;
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    if (!bwd && bk_attn_fwd_finalize(&q, seq, (int)hq, (int)d, b->O, b->lse) != BK_OK) return -1;
    if (!bwd && bk_attn_delta(&q, seq, (int)hq, (int)d, b->dO, b->O, b->delta) != BK_OK) return -1;
    return best;
}

/* The ring's pieces of query rows (src/attn/ring_run.c's default). */
enum { RING_PIECE = 512 };

/* One configuration: fills buffers, times forward and backward, as one call
 * (gf[0], gf[1]) and in the ring's pieces (gf[2], gf[3]); GFLOP/s. */
static int bench_attention(int64_t seq, int d, int hkv, int causal, int reps, double gf[4])
{
    const int hq = 8;
    const size_t nq = (size_t)seq * hq * d, nk = (size_t)seq * hkv * d;
    attn_bufs b = {malloc((size_t)seq * sizeof(int64_t)), rand_buf(nq, 3), rand_buf(nk, 4),
                   rand_buf(nk, 5), rand_buf(nq, 6), malloc(nq * sizeof(float)),
                   calloc(nq, sizeof(float)), calloc(nk, sizeof(float)), calloc(nk, sizeof(float)),
                   malloc((size_t)seq * hq * sizeof(float)), malloc((size_t)seq * hq * sizeof(float))};
    int rc = 1;
    if (!b.pos || !b.Q || !b.K || !b.V || !b.dO || !b.O || !b.dQ || !b.dK || !b.dV || !b.lse ||
        !b.delta) {
        fprintf(stderr, "burst bench kernels: out of memory at seq %ld\n", (long)seq);
        goto out;
    }
    for (int64_t i = 0; i < seq; i++) b.pos[i] = i;
    bk_attn_geom g = {seq, seq, hq, hkv, d, 1.0f / sqrtf((float)d), b.pos, b.pos, NULL, NULL,
                      causal ? bk_attn_mask_causal() : bk_attn_mask_none()};
    double flops = 4.0 * (double)seq * (double)seq * d * hq * (causal ? 0.5 : 1.0);
    for (int k = 0; k < 4; k++) {
        double t = time_attention(&g, &b, k < 2 ? 0 : RING_PIECE, k % 2, reps);
        if (t < 0) goto out;
        gf[k] = (k % 2 ? 2.5 : 1.0) * flops / t * 1e-9;
    }
    rc = 0;
out:
    attn_bufs_free(&b);
    return rc;
}

/* One row of the table: GFLOP/s and ratios to sgemm (mm, 0 without CBLAS) of
 * the whole-block calls and of the ring's pieces. */
static void print_attention_row(int causal, int64_t seq, int d, int hkv, double mm,
                                const double gf[4])
{
    char mms[16] = "n/a", r[4][16] = {"n/a", "n/a", "n/a", "n/a"};
    if (mm > 0) {
        snprintf(mms, sizeof mms, "%.1f", mm);
        for (int k = 0; k < 4; k++) snprintf(r[k], sizeof r[k], "%.2f", gf[k] / mm);
    }
    printf("%-7s %6ld %4d %4d %10s %10.1f %8s %10.1f %8s %8s %8s\n", causal ? "causal" : "full",
           (long)seq, d, hkv, mms, gf[0], r[0], gf[1], r[1], r[2], r[3]);
    fflush(stdout);
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || v < lo || v > hi) {
        fprintf(stderr, "burst bench kernels: %s needs an integer in [%ld, %ld]\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* --device cuda: fills the defaults o left at 0, then runs the device bench. */
static int run_on_device(bench_device_opts *o, int quick)
{
    static const int64_t seqs[] = {4096, 8192, 16384, 32768};
    if (o->n_seq == 0 && quick) o->seqs[o->n_seq++] = 1024;
    for (int i = 0; o->n_seq == 0 && i < 4; i++) o->seqs[i] = seqs[i];
    if (o->n_seq == 0) o->n_seq = 4;
    if (!o->hq) o->hq = 16;
    if (!o->gemm_n) o->gemm_n = quick ? 2048 : 8192;
    if (!o->op_bytes) o->op_bytes = (quick ? 64 : 1024) << 20;
    if (!o->reps) o->reps = quick ? 1 : 3;
    if (o->min_ms <= 0) o->min_ms = 20;
    return bench_kernels_device(o) ? EXIT_RUN_FAILURE : 0;
}

int bench_kernels(int argc, char **argv)
{
    int quick = 0, ops = 1, reps = 0, only_d = 0, only_hkv = 0, only_mask = -1, n_seq = 0;
    int on_device = 0, device_only_opt = 0;
    int64_t seqs[16];
    bench_device_opts dev = {.only_mask = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quick")) {
            quick = 1;
        } else if (!strcmp(a, "--device")) {
            const char *d = ++i < argc ? argv[i] : "";
            if (strcmp(d, "cpu") && strcmp(d, "cuda")) {
                fprintf(stderr, "burst bench kernels: --device must be cpu or cuda, not '%s'\n", d);
                return EXIT_USAGE;
            }
            on_device = !strcmp(d, "cuda");
        } else if (!strcmp(a, "--hq")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 1, 128, &v)) return EXIT_USAGE;
            dev.hq = (int)v, device_only_opt = 1;
        } else if (!strcmp(a, "--gemm")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 16, 65536, &v)) return EXIT_USAGE;
            dev.gemm_n = v, device_only_opt = 1;
        } else if (!strcmp(a, "--op-mib")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 1, 65536, &v)) return EXIT_USAGE;
            dev.op_bytes = (int64_t)v << 20, device_only_opt = 1;
        } else if (!strcmp(a, "--min-ms")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 0, 60000, &v)) return EXIT_USAGE;
            dev.min_ms = (double)v, device_only_opt = 1;
        } else if (!strcmp(a, "--cpu-time")) {
            use_cpu_time = 1;
        } else if (!strcmp(a, "--no-ops")) {
            ops = 0;
        } else if (!strcmp(a, "--seq")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 16, 1L << 20, &v)) return EXIT_USAGE;
            if (n_seq == 16) {
                fprintf(stderr, "burst bench kernels: at most 16 --seq\n");
                return EXIT_USAGE;
            }
            seqs[n_seq++] = v;
        } else if (!strcmp(a, "--d")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 8, 1024, &v) || v % 8) {
                fprintf(stderr, "burst bench kernels: --d must be a multiple of 8\n");
                return EXIT_USAGE;
            }
            only_d = (int)v;
        } else if (!strcmp(a, "--hkv")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 1, 128, &v)) return EXIT_USAGE;
            only_hkv = (int)v; /* checked against Hq below */
        } else if (!strcmp(a, "--reps")) {
            if (parse_int(a, ++i < argc ? argv[i] : NULL, 1, 100, &v)) return EXIT_USAGE;
            reps = (int)v;
        } else if (!strcmp(a, "--mask")) {
            const char *m = ++i < argc ? argv[i] : "";
            if (!strcmp(m, "full"))
                only_mask = 0;
            else if (!strcmp(m, "causal"))
                only_mask = 1;
            else {
                fprintf(stderr, "burst bench kernels: --mask must be full or causal\n");
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "burst bench kernels: unknown option '%s'\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    int hq = on_device ? (dev.hq ? dev.hq : 16) : 8;
    if (only_hkv && hq % only_hkv) {
        fprintf(stderr, "burst bench kernels: --hkv %d does not divide Hq = %d\n", only_hkv, hq);
        return EXIT_USAGE;
    }
    if (on_device) {
        if (use_cpu_time) {
            fprintf(stderr, "burst bench kernels: --cpu-time applies to --device cpu only\n");
            return EXIT_USAGE;
        }
        memcpy(dev.seqs, seqs, sizeof seqs);
        dev.n_seq = n_seq, dev.only_d = only_d, dev.only_hkv = only_hkv;
        dev.only_mask = only_mask, dev.ops = ops, dev.reps = reps;
        return run_on_device(&dev, quick);
    }
    if (device_only_opt) {
        fprintf(stderr, "burst bench kernels: --hq, --gemm, --op-mib and --min-ms apply to "
                        "--device cuda only\n");
        return EXIT_USAGE;
    }
    if (n_seq == 0) {
        if (quick) {
            seqs[n_seq++] = 1024;
        } else {
            seqs[n_seq++] = 4096;
            seqs[n_seq++] = 8192;
            seqs[n_seq++] = 16384;
        }
    }
    if (reps == 0) reps = quick ? 1 : 2;

    printf("attention kernels: %d OpenMP threads, BLAS %s, Hq = 8, fp32, %s time\n",
           omp_get_max_threads(), BURST_BLAS_NAME, use_cpu_time ? "CPU" : "wall");
    printf("%-7s %6s %4s %4s %10s %10s %8s %10s %8s %8s %8s\n", "mask", "seq", "d", "hkv",
           "sgemm GF/s", "fwd GF/s", "fwd/mm", "bwd GF/s", "bwd/mm", "fwd512", "bwd512");
    int failed = 0;
    for (int s = 0; s < n_seq; s++) {
        int side = seqs[s] < 2048 ? (int)seqs[s] : 2048;
        static const int ds[] = {64, 128}, hkvs[] = {8, 2};
        for (int m = 0; m < 2; m++) {
            if (only_mask >= 0 && m != only_mask) continue;
            for (int di = 0; di < (only_d ? 1 : 2); di++) {
                int d = only_d ? only_d : ds[di];
                for (int hi = 0; hi < (only_hkv ? 1 : 2); hi++) {
                    int hkv = only_hkv ? only_hkv : hkvs[hi];
                    /* the reference right before each configuration, so that both see
                     * the same machine (it is shared) */
                    double mm = sgemm_gflops(side, 3);
                    double gf[4];
                    if (bench_attention(seqs[s], d, hkv, m, reps, gf)) {
                        failed = 1;
                        continue;
                    }
                    print_attention_row(m, seqs[s], d, hkv, mm, gf);
                }
            }
        }
    }
    if (ops && bench_kernels_ops(stdout, quick) != 0) failed = 1;
    return failed ? EXIT_RUN_FAILURE : 0;
}
