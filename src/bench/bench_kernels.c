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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

#include "kernels/attention.h"
#include "kernels/device.h"
#include "src/attn/attn_options.h"
#include "src/bench/bench.h"
#include "src/plan/profile.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/options.h"
#include "util/parse.h"

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

/* What the command line sets; the device-only values are -1 when not given. */
typedef struct {
    int on_device, quick, no_ops, cpu_time, reps, only_d, only_hkv, only_mask, n_seq;
    unsigned kernels; /* BENCH_KERNEL_* bits given; 0: none given */
    int64_t seqs[16];
    int hq, gemm_n, op_mib, min_ms;
    const char *profile_out; /* --profile-out: the measured rows written there */
} kernels_opts;

static int set_device(void *o, const char *v)
{
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0) return -1;
    ((kernels_opts *)o)->on_device = strcmp(v, "cuda") == 0;
    return 0;
}

static int set_seq(void *o, const char *v)
{
    kernels_opts *k = o;
    int64_t n;
    if (k->n_seq == 16 || bu_parse_i64(v, &n, NULL) != 0 || n < 16 || n > (1 << 20)) return -1;
    k->seqs[k->n_seq++] = n;
    return 0;
}

static int set_d(void *o, const char *v)
{
    return attn_parse_head_dim(v, &((kernels_opts *)o)->only_d);
}

static int set_mask(void *o, const char *v)
{
    int causal = strcmp(v, "causal") == 0;
    if (!causal && strcmp(v, "full") != 0) return -1;
    ((kernels_opts *)o)->only_mask = causal;
    return 0;
}

/* --kernel burst,cudnn: the list, each name once */
static int set_kernels(void *o, const char *v)
{
    kernels_opts *k = o;
    char list[64];
    if (strlen(v) >= sizeof list) return -1;
    strcpy(list, v);
    k->kernels = 0;
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        unsigned bit = !strcmp(name, "burst") ? BENCH_KERNEL_BURST
                       : !strcmp(name, "cudnn") ? BENCH_KERNEL_CUDNN
                                                : 0;
        if (!bit || (k->kernels & bit)) return -1;
        k->kernels |= bit;
    }
    return k->kernels ? 0 : -1;
}

#define OPT(field) offsetof(kernels_opts, field)
static const bu_option options[] = {
    {"--device", "cpu|cuda", BU_OPT_CUSTOM, 0, 0, 0, set_device,
     "where the kernels run (default cpu; cuda: see below)"},
    {"--quick", NULL, BU_OPT_FLAG, OPT(quick), 0, 0, NULL,
     "SEQ = 1024 and one run each: a few seconds"},
    {"--seq", "N", BU_OPT_CUSTOM, 0, 0, 0, set_seq,
     "block size in tokens, 16..1048576 (repeatable, up to 16; default\n"
     "4096 8192 16384; 32768 takes minutes per configuration)"},
    {"--d", "N", BU_OPT_CUSTOM, 0, 0, 0, set_d,
     "only head dim N (64 or 128 are the fast ones; any multiple of 8)"},
    {"--hkv", "N", BU_OPT_INT, OPT(only_hkv), 1, 128, NULL,
     "only Hkv = N (must divide Hq: 8 on the CPU)"},
    {"--mask", "M", BU_OPT_CUSTOM, 0, 0, 0, set_mask, "only M = full or causal"},
    {"--reps", "N", BU_OPT_INT, OPT(reps), 1, 100, NULL,
     "runs per measurement, best kept (default 2; 1 with --quick)"},
    {"--cpu-time", NULL, BU_OPT_FLAG, OPT(cpu_time), 0, 0, NULL,
     "time with the process CPU clock instead of the wall clock:\n"
     "GFLOP per CPU-second, insensitive to other processes taking\n"
     "the cores (meant for OMP_NUM_THREADS=1 on a shared machine;\n"
     "with more threads, spinning OpenMP threads count too)"},
    {"--no-ops", NULL, BU_OPT_FLAG, OPT(no_ops), 0, 0, NULL, "skip the per-op kernels"},
    {"--profile-out", "FILE", BU_OPT_STRING, OPT(profile_out), 0, 0, NULL,
     "write what was measured as a device profile for `burst plan\n"
     "time`: on the CPU sgemm as the gemm and peak rows, the per-op\n"
     "kernels' bandwidth as elementwise, attention in the ring's\n"
     "512-row pieces at Hkv = 8 (or --hkv); with --device cuda the\n"
     "attention rows of one --kernel at Hkv = Hq"},
    {"--hq", "N", BU_OPT_INT, OPT(hq), 1, 128, NULL, "--device cuda: query heads (default 16)"},
    {"--kernel", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_kernels,
     "--device cuda: the attention kernels, burst (ours) and/or cudnn\n"
     "(cuDNN's fused SDPA), comma-separated (default burst,cudnn;\n"
     "cudnn rows say n/a and why where it cannot run)"},
    {"--gemm", "N", BU_OPT_INT, OPT(gemm_n), 16, 65536, NULL,
     "--device cuda: side of the reference GEMM (default 8192)"},
    {"--op-mib", "N", BU_OPT_INT, OPT(op_mib), 1, 65536, NULL,
     "--device cuda: MiB of each per-op buffer (default 1024)"},
    {"--min-ms", "X", BU_OPT_INT, OPT(min_ms), 0, 60000, NULL,
     "--device cuda: shortest batch that counts, in ms (default 20)"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

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
            "--device cuda: the device kernels on the GPU (CUDA builds). Attention forward and\n"
            "backward TFLOP/s with bf16 Q/K/V on tensor cores (fp32 accumulation), Hq = 16,\n"
            "Hkv = Hq and Hq / 4, each as a ratio to the cuBLASLt bf16 GEMM rate measured\n"
            "right before it, for our kernels and cuDNN's fused SDPA (--kernel; one dense\n"
            "call per block, causal as a right bound 0); then each op's GB/s as a ratio to device-to-device copy\n"
            "bandwidth measured in the same run. Defaults: SEQ 4096 8192 16384 32768,\n"
            "best of 3 batches of calls, each batch at least 20 ms. --quick: SEQ = 1024,\n"
            "GEMM side 2048, 64 MiB op buffers, one batch.\n\n");
    bu_options_print(out, options, N_OPTIONS, 17);
    fprintf(out, "  -h, --help     this help\n");
}

/* Refusals of combinations no single row can see: 0, or EXIT_USAGE. */
static int check_combination(const kernels_opts *o)
{
    int hq = o->on_device ? (o->hq > 0 ? o->hq : 16) : 8;
    if (o->only_hkv && hq % o->only_hkv) {
        fprintf(stderr, "burst bench kernels: --hkv %d does not divide Hq = %d\n", o->only_hkv, hq);
        return EXIT_USAGE;
    }
    if (o->profile_out && !o->on_device && o->no_ops) {
        fprintf(stderr, "burst bench kernels: --profile-out on the CPU needs the per-op kernels "
                        "(no --no-ops) for its elementwise row\n");
        return EXIT_USAGE;
    }
    if (o->profile_out && o->on_device &&
        (o->kernels != BENCH_KERNEL_BURST && o->kernels != BENCH_KERNEL_CUDNN)) {
        fprintf(stderr, "burst bench kernels: --profile-out with --device cuda writes one "
                        "kernel's attention rows: give --kernel burst or --kernel cudnn\n");
        return EXIT_USAGE;
    }
    if (o->on_device && o->cpu_time) {
        fprintf(stderr, "burst bench kernels: --cpu-time applies to --device cpu only\n");
        return EXIT_USAGE;
    }
    if (!o->on_device &&
        (o->hq >= 0 || o->gemm_n >= 0 || o->op_mib >= 0 || o->min_ms >= 0 || o->kernels)) {
        fprintf(stderr, "burst bench kernels: --hq, --kernel, --gemm, --op-mib and --min-ms "
                        "apply to --device cuda only\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* The CPU as a profile names it: its model and the threads measured. */
static void cpu_name(char *buf, size_t len)
{
    char model[200] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    if (f) fclose(f);
    snprintf(buf, len, "CPU %s, %d OpenMP thread%s", model, omp_get_max_threads(),
             omp_get_max_threads() == 1 ? "" : "s");
}

/* --profile-out: opens the writer for the CPU's rows or (device_kernel, its
 * name) a device kernel's, the command line as their source. */
static int profile_open(profile_writer *w, const char *path, const char *device_kernel, int argc,
                        char **argv)
{
    char cmd[1024], dev[300], name[64], err[512];
    profile_command_line(cmd, sizeof cmd, "burst bench", argc, argv);
    if (device_kernel)
        snprintf(dev, sizeof dev, "%s, attention kernel %s", bk_device_backend_name(),
                 device_kernel);
    else
        cpu_name(dev, sizeof dev);
    snprintf(name, sizeof name, "%s%s", device_kernel ? "attention-" : "cpu",
             device_kernel ? device_kernel : "");
    if (profile_writer_open(w, path, name, dev, cmd, err, sizeof err) != 0) {
        fprintf(stderr, "burst bench kernels: %s\n", err);
        return -1;
    }
    return 0;
}

static void profile_rate(profile_writer *w, profile_row_kind kind, double value)
{
    profile_row r = {.kind = kind};
    if (kind == PROFILE_ELEMENTWISE)
        r.gbps = value;
    else
        r.gflops = value;
    profile_write_row(w, &r);
}

int bench_kernels(int argc, char **argv)
{
    kernels_opts o = {.only_mask = -1, .hq = -1, .gemm_n = -1, .op_mib = -1, .min_ms = -1};
    int parsed = bu_options_parse("burst bench kernels", options, N_OPTIONS, argc, argv, &o, NULL);
    if (parsed == 1) {
        usage(stdout);
        return 0;
    }
    if (parsed != 0 || check_combination(&o) != 0) return EXIT_USAGE;
    if (o.on_device) {
        bench_device_opts dev = {.n_seq = o.n_seq,
                                 .hq = o.hq > 0 ? o.hq : 0,
                                 .only_d = o.only_d,
                                 .only_hkv = o.only_hkv,
                                 .only_mask = o.only_mask,
                                 .kernels = o.kernels,
                                 .ops = !o.no_ops,
                                 .reps = o.reps,
                                 .gemm_n = o.gemm_n > 0 ? o.gemm_n : 0,
                                 .op_bytes = o.op_mib > 0 ? (int64_t)o.op_mib << 20 : 0,
                                 .min_ms = o.min_ms >= 0 ? o.min_ms : 0};
        memcpy(dev.seqs, o.seqs, sizeof o.seqs);
        if (!o.profile_out) return run_on_device(&dev, o.quick);
        profile_writer prof;
        if (profile_open(&prof, o.profile_out, o.kernels == BENCH_KERNEL_CUDNN ? "cudnn" : "burst",
                         argc, argv) != 0)
            return EXIT_RUN_FAILURE;
        dev.profile = &prof;
        int status = run_on_device(&dev, o.quick);
        char err[512];
        if (profile_writer_close(&prof, o.profile_out, status == 0, err, sizeof err) != 0) {
            if (status == 0) fprintf(stderr, "burst bench kernels: %s\n", err);
            return EXIT_RUN_FAILURE;
        }
        printf("profile: %s (its attention rows; with a device's file of the other rows)\n",
               o.profile_out);
        return status;
    }
    use_cpu_time = o.cpu_time;
    int64_t *seqs = o.seqs;
    int n_seq = o.n_seq, quick = o.quick, ops = !o.no_ops, reps = o.reps;
    int only_d = o.only_d, only_hkv = o.only_hkv, only_mask = o.only_mask;
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

    profile_writer prof;
    if (o.profile_out && profile_open(&prof, o.profile_out, NULL, argc, argv) != 0)
        return EXIT_RUN_FAILURE;
    if (o.profile_out) {
        double mm = sgemm_gflops(2048, 3);
        profile_rate(&prof, PROFILE_PEAK, mm);
        profile_rate(&prof, PROFILE_GEMM, mm);
    }
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
                    if (o.profile_out && hkv == (only_hkv ? only_hkv : 8))
                        for (int bwd = 0; bwd < 2; bwd++) /* the ring's 512-row pieces */
                            profile_write_attention(&prof, bwd, d, m, seqs[s], gf[2 + bwd]);
                }
            }
        }
    }
    double gbps = 0;
    if (ops && bench_kernels_ops(stdout, quick, &gbps) != 0) failed = 1;
    if (o.profile_out) {
        char err[512];
        if (!failed) profile_rate(&prof, PROFILE_ELEMENTWISE, gbps);
        if (profile_writer_close(&prof, o.profile_out, !failed, err, sizeof err) != 0) {
            if (!failed) fprintf(stderr, "burst bench kernels: %s\n", err);
            failed = 1;
        } else {
            printf("profile: %s (burst plan time --profile %s)\n", o.profile_out, o.profile_out);
        }
    }
    return failed ? EXIT_RUN_FAILURE : 0;
}
