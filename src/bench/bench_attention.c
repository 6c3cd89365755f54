/* bench_attention.c: `burst bench attention`. Measures, in one run, the
 * distributed attention ring (forward; Q-side and KV-side backward) against an
 * all-gather baseline (gather all K/V, compute locally, reduce-scatter dK/dV)
 * and against the single-rank kernels on the whole sequence, for a causal mask
 * (zigzag layout) and a causal sliding window (contiguous layout), MHA and GQA,
 * on P = 2 and 4 ranks of one OpenMP thread each. Per pass it reports the
 * slowest rank's wall time, the exposed communication (time waiting on
 * transfers), the bytes each rank sends, the parallel efficiency against the
 * single rank and the byte ratios. The ring's O, dQ, dK, dV are compared with
 * the baseline's, so the numbers are those of correct runs.
 *
 * Like `bench transport`, the command re-launches itself through `burst run` as
 * --worker (once per rank count, and once per thread count for the single
 * rank) and reads rank 0's machine-readable lines. */
#define _GNU_SOURCE
#include "config.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/attn/attn_options.h"
#include "src/bench/bench.h"
#include "src/bench/relaunch.h"
#include "src/attn/ring.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/options.h"

/* The four problems of every run: Hq = 8 always; GQA has 4 query heads per K/V head. */
typedef struct {
    const char *mask;
    int h_q, h_kv;
} bench_config;
static const bench_config configs[] = {
    {"causal", 8, 8}, {"causal", 8, 2}, {"window", 8, 8}, {"window", 8, 2}};
#define N_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

enum { M_RING_Q = 0, M_RING_KV = 1, M_ALLGATHER = 2, N_METHODS = 3 };
static const char *const method_names[N_METHODS] = {"ring Q-side", "ring KV-side", "all-gather"};
static const char *const method_keys[N_METHODS] = {"ringq", "ringkv", "allgather"};
enum { MAX_COUNTS = 6 };

typedef struct {
    int64_t seq, window; /* N tokens; W tokens a query sees, itself included */
    int d, reps, quick;
    int ranks[MAX_COUNTS], n_ranks;
    int is_worker; /* one of the ranks the command started (--worker) */
} bench_opts;

/* One measured pass pair, already reduced over ranks (max). */
typedef struct {
    int valid;
    double fwd_s, bwd_s;         /* wall time of the slowest rank */
    double fwd_wait, bwd_wait;   /* exposed communication, slowest rank */
    double fwd_bytes, bwd_bytes; /* bytes sent, the rank that sends most */
} pass_result;

static int set_d(void *o, const char *v)
{
    return attn_parse_head_dim(v, &((bench_opts *)o)->d);
}

static int set_ranks(void *o, const char *v)
{
    bench_opts *bo = o;
    return bench_parse_rank_counts(v, bo->ranks, &bo->n_ranks, MAX_COUNTS);
}

#define OPT(field) offsetof(bench_opts, field)
static const bu_option options[] = {
    {"--seq", "N", BU_OPT_I64, OPT(seq), 16, 9.2e18, NULL,
     "global tokens (default 8192; a few minutes on 2 cores); a\n"
     "multiple of 2P for every P"},
    {"--window", "W", BU_OPT_I64, OPT(window), 1, 9.2e18, NULL,
     "window of the sliding-window problem (default N/8)"},
    {"--d", "D", BU_OPT_CUSTOM, 0, 0, 0, set_d, "head dimension, a multiple of 8 (default 64)"},
    {"--ranks", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_ranks,
     "comma-separated rank counts, each 2..64 (default 2,4)"},
    {"--reps", "R", BU_OPT_INT, OPT(reps), 1, 100, NULL,
     "runs of every pass, the fastest kept (default 1)"},
    {"--quick", NULL, BU_OPT_FLAG, OPT(quick), 0, 0, NULL,
     "N = 2048 (unless --seq is given): a few seconds"},
    {"--worker", NULL, BU_OPT_FLAG, OPT(is_worker), 0, 0, NULL,
     "run as one of the ranks (how the benchmark starts itself\n"
     "under `burst run`; not for people)"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst bench attention [--quick] [--seq N] [--window W] [--d D]\n"
            "                             [--ranks LIST] [--reps R]\n\n"
            "Distributed attention forward and backward on ranks started with `burst run` on\n"
            "this machine, each rank with one OpenMP thread (OMP_NUM_THREADS=1). Problems:\n"
            "causal mask (zigzag layout) and causal sliding window of W tokens (contiguous\n"
            "layout), each with MHA (Hq = Hkv = 8) and GQA (Hq = 8, Hkv = 2), fp32. Methods:\n"
            "  ring Q-side   ring forward + BurstAttention backward (Q, dO, lse, delta travel)\n"
            "  ring KV-side  the same forward + classic ring backward (K, V, dK, dV travel)\n"
            "  all-gather    forward: all-gather K and V, attend locally to the whole\n"
            "                sequence; backward: all-gather K and V again, local gradients for\n"
            "                the whole sequence, reduce-scatter dK and dV\n"
            "Reference: the single-rank kernels (bk_attn_fwd, bk_attn_bwd) on the whole\n"
            "sequence (same N, same total work), with 1 thread and with one thread per\n"
            "online CPU.\n\n"
            "Reported per pass: wall time of the slowest rank; exposed communication = time\n"
            "that rank spent waiting on transfers (ring_exec_stats.wait_s; for all-gather the\n"
            "time in the blocking collectives); bytes sent per rank (transport counters, the\n"
            "rank that sends most); parallel efficiency = T(1 rank, 1 thread) / (P x time);\n"
            "and the speedup against the single rank using every CPU. Byte ratios: Q-side /\n"
            "KV-side backward, ring / all-gather. The ring's O and gradients are checked\n"
            "against the all-gather baseline (max difference relative to max |value|); a\n"
            "difference above 1e-3 fails the benchmark (exit 1).\n\n");
    bu_options_print(out, options, N_OPTIONS, 16);
    fprintf(out, "  -h, --help    this help\n");
}

/* ------------------------------------------------------------------ rank side */

static bt_world *world;
static int my_rank;

static void must(bt_status st, const char *what)
{
    if (st == BT_OK) return;
    fprintf(stderr, "bench attention: rank %d: %s: %s\n", my_rank, what, bt_world_error(world));
    exit(EXIT_RUN_FAILURE);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench attention: out of memory (%zu bytes)\n", bytes);
        exit(EXIT_RUN_FAILURE);
    }
    return p;
}

/* Element c of the row at global position pos: a hash of (seed, pos, c) in
 * [-1, 1), so every rank makes its own rows, identical to the single rank's. */
static void fill_rows(float *buf, const int64_t *pos, int64_t n, size_t row, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        for (size_t c = 0; c < row; c++) {
            uint64_t x = seed * 0x9E3779B97F4A7C15ull + (uint64_t)pos[i] * row + c;
            x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
            x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
            buf[(size_t)i * row + c] = (float)((double)(x >> 11) / 9007199254740992.0 * 2 - 1);
        }
}

static uint64_t sent_total(void)
{
    return bt_counter_total(world).sent_bytes;
}

/* Keeps the fastest of the repetitions of one pass (values already max over ranks). */
static void keep_best(double *best, const double *now, int n)
{
    if (best[0] == 0 || now[0] < best[0]) memcpy(best, now, (size_t)n * sizeof *now);
}

/* The maximum over ranks of each of the n values. */
static void max_over_ranks(double *v, int n)
{
    must(bt_allreduce(bt_world_comm(world), v, (size_t)n, BT_F64, BT_MAX), "allreduce");
}

/* max |a - b| and max |b| over count values, for a relative difference. */
static void diff_into(const float *a, const float *b, size_t count, double *diff, double *ref)
{
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= *diff)) *diff = e; /* NaN propagates */
        if (fabs((double)b[i]) > *ref) *ref = fabs((double)b[i]);
    }
}

static void problem(const bench_opts *bo, int cfg_index, attn_options *o, ring_plan_config *pc)
{
    const bench_config *c = &configs[cfg_index];
    char err[256];
    attn_options_default(o);
    o->seq = bo->seq;
    o->ranks = bt_world_size(world);
    o->h_q = c->h_q;
    o->h_kv = c->h_kv;
    o->d = bo->d;
    o->window = bo->window;
    snprintf(o->mask, sizeof o->mask, "%s", c->mask);
    if (attn_options_build(o, pc, err, sizeof err) != 0) {
        fprintf(stderr, "bench attention: %s\n", err);
        exit(EXIT_USAGE);
    }
}

/* The reference: one rank, the kernels on the whole sequence, as many threads
 * as OMP_NUM_THREADS gives. */
static void single_rank(const bench_opts *bo, int cfg_index)
{
    attn_options o;
    ring_plan_config pc;
    problem(bo, cfg_index, &o, &pc);
    int64_t N = bo->seq;
    size_t qrow = (size_t)o.h_q * (size_t)o.d, kvrow = (size_t)o.h_kv * (size_t)o.d;
    int64_t *pos = xmalloc((size_t)N * sizeof *pos);
    for (int64_t i = 0; i < N; i++) pos[i] = i;
    float *Q = xmalloc((size_t)N * qrow * 4), *K = xmalloc((size_t)N * kvrow * 4),
          *V = xmalloc((size_t)N * kvrow * 4), *dO = xmalloc((size_t)N * qrow * 4),
          *O = xmalloc((size_t)N * qrow * 4), *lse = xmalloc((size_t)N * (size_t)o.h_q * 4),
          *delta = xmalloc((size_t)N * (size_t)o.h_q * 4), *dQ = xmalloc((size_t)N * qrow * 4),
          *dK = xmalloc((size_t)N * kvrow * 4), *dV = xmalloc((size_t)N * kvrow * 4);
    fill_rows(Q, pos, N, qrow, 1), fill_rows(K, pos, N, kvrow, 2);
    fill_rows(V, pos, N, kvrow, 3), fill_rows(dO, pos, N, qrow, 4);
    bk_queue q = bk_host_queue();
    bk_attn_geom g = {.n_q = N,
                      .n_kv = N,
                      .h_q = o.h_q,
                      .h_kv = o.h_kv,
                      .d = o.d,
                      .scale = 1.0f / sqrtf((float)o.d),
                      .q_pos = pos,
                      .kv_pos = pos,
                      .mask = o.kernel_mask};
    double best[2] = {0, 0};
    for (int rep = 0; rep < bo->reps; rep++) {
        double t0 = bu_now();
        bk_attn_fwd_init(&q, N, o.h_q, o.d, O, lse);
        bk_status st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        bk_attn_fwd_finalize(&q, N, o.h_q, o.d, O, lse);
        double t1 = bu_now();
        bk_attn_delta(&q, N, o.h_q, o.d, dO, O, delta);
        memset(dQ, 0, (size_t)N * qrow * 4);
        memset(dK, 0, (size_t)N * kvrow * 4);
        memset(dV, 0, (size_t)N * kvrow * 4);
        if (st == BK_OK) st = bk_attn_bwd(&q, &g, Q, K, V, dO, lse, delta, dQ, dK, dV, NULL);
        double now[2] = {t1 - t0, bu_now() - t1};
        if (st != BK_OK) {
            fprintf(stderr, "bench attention: kernel: %s\n", bk_status_name(st));
            exit(EXIT_RUN_FAILURE);
        }
        keep_best(best, now, 2);
    }
    printf("res %d 1 %d single %.6f %.6f 0 0 0 0\n", cfg_index, omp_get_max_threads(), best[0],
           best[1]);
    fflush(stdout);
    free(pos), free(Q), free(K), free(V), free(dO), free(O), free(lse), free(delta);
    free(dQ), free(dK), free(dV);
    attn_options_free(&o);
}

/* Local buffers of one rank for one problem: inputs [n rows], outputs of each
 * method, and the gathered K/V and dK/dV of the baseline [N rows]. */
typedef struct {
    int64_t n, N;
    size_t qrow, kvrow;
    int64_t *pos, *pos_all; /* [n] this rank's global positions; [N] every rank's, rank order */
    float *Q, *K, *V, *dO;
    float *O_ring, *lse_ring, *O_ag, *lse_ag;
    float *dQ[N_METHODS], *dK[N_METHODS], *dV[N_METHODS];
    float *K_all, *V_all, *dK_all, *dV_all, *delta;
} rank_bufs;

/* The baseline's gather of every rank's K and V (blocking collectives). */
static void gather_kv(rank_bufs *b)
{
    bt_comm *comm = bt_world_comm(world);
    size_t kv_bytes = (size_t)b->n * b->kvrow * sizeof(float);
    must(bt_allgather(comm, b->K, b->K_all, kv_bytes), "all-gather K");
    must(bt_allgather(comm, b->V, b->V_all, kv_bytes), "all-gather V");
}

/* This rank's queries against the gathered rows, which are in layout rank
 * order: their positions are pos_all. */
static bk_attn_geom gathered_geom(const ring_exec_ctx *ctx, const rank_bufs *b, int h_q, int h_kv,
                                  int d)
{
    return (bk_attn_geom){.n_q = b->n,
                          .n_kv = b->N,
                          .h_q = h_q,
                          .h_kv = h_kv,
                          .d = d,
                          .scale = ctx->scale,
                          .q_pos = b->pos,
                          .kv_pos = b->pos_all,
                          .mask = ctx->mask};
}

/* The baseline forward: gather all K/V (blocking), attend to the whole sequence.
 * out: {time, wait, bytes}. */
static void allgather_forward(const ring_exec_ctx *ctx, rank_bufs *b, int h_q, int h_kv, int d,
                              double out[3])
{
    uint64_t sent0 = sent_total();
    double t0 = bu_now();
    gather_kv(b);
    double t1 = bu_now();
    bk_attn_geom g = gathered_geom(ctx, b, h_q, h_kv, d);
    bk_attn_fwd_init(ctx->queue, b->n, h_q, d, b->O_ag, b->lse_ag);
    if (bk_attn_fwd(ctx->queue, &g, b->Q, b->K_all, b->V_all, b->O_ag, b->lse_ag, NULL) != BK_OK)
        must(BT_ERR_ARG, "attention forward kernel");
    bk_attn_fwd_finalize(ctx->queue, b->n, h_q, d, b->O_ag, b->lse_ag);
    out[0] = bu_now() - t0;
    out[1] = t1 - t0;
    out[2] = (double)(sent_total() - sent0);
}

/* The baseline backward: gather K/V again (a memory-bounded implementation does
 * not keep the whole sequence between passes, and the ring re-circulates K/V
 * too), local gradients against the whole sequence, then reduce-scatter dK and
 * dV: block r of the gathered order is rank r's rows in its local order, so
 * the reduced block each rank receives is exactly its own dK, dV. */
static void allgather_backward(const ring_exec_ctx *ctx, rank_bufs *b, int h_q, int h_kv, int d,
                               double out[3])
{
    bt_comm *comm = bt_world_comm(world);
    size_t kv_count = (size_t)b->n * b->kvrow, all_count = (size_t)b->N * b->kvrow;
    uint64_t sent0 = sent_total();
    double t0 = bu_now();
    gather_kv(b);
    double t1 = bu_now();
    bk_attn_geom g = gathered_geom(ctx, b, h_q, h_kv, d);
    float *dQ = b->dQ[M_ALLGATHER];
    bk_attn_delta(ctx->queue, b->n, h_q, d, b->dO, b->O_ag, b->delta);
    memset(dQ, 0, (size_t)b->n * b->qrow * sizeof(float));
    memset(b->dK_all, 0, all_count * sizeof(float));
    memset(b->dV_all, 0, all_count * sizeof(float));
    if (bk_attn_bwd(ctx->queue, &g, b->Q, b->K_all, b->V_all, b->dO, b->lse_ag, b->delta, dQ,
                    b->dK_all, b->dV_all, NULL) != BK_OK)
        must(BT_ERR_ARG, "attention backward kernel");
    double t2 = bu_now();
    must(bt_reduce_scatter(comm, b->dK_all, b->dK[M_ALLGATHER], kv_count, BT_F32, BT_SUM),
         "reduce-scatter dK");
    must(bt_reduce_scatter(comm, b->dV_all, b->dV[M_ALLGATHER], kv_count, BT_F32, BT_SUM),
         "reduce-scatter dV");
    double t3 = bu_now();
    out[0] = t3 - t0;
    out[1] = (t1 - t0) + (t3 - t2);
    out[2] = (double)(sent_total() - sent0);
}

static void check_bytes(const ring_schedule *s, double measured)
{
    uint64_t planned = ring_schedule_bytes_sent(s, my_rank);
    if ((double)planned != measured)
        fprintf(stderr, "bench attention: rank %d: %s sent %.0f bytes, the schedule says %llu\n",
                my_rank, ring_pass_name(s->pass), measured, (unsigned long long)planned);
}

/* This rank's buffers for a problem of h_q, h_kv heads of dimension d on
 * layout l, the inputs filled. */
static rank_bufs alloc_rank_bufs(const seq_layout *l, int h_q, int h_kv, int d)
{
    rank_bufs b = {
        .n = l->n, .N = l->N, .qrow = (size_t)h_q * (size_t)d, .kvrow = (size_t)h_kv * (size_t)d};
    size_t n = (size_t)b.n, N = (size_t)b.N;
    b.pos = xmalloc(n * sizeof *b.pos);
    b.pos_all = xmalloc(N * sizeof *b.pos_all);
    seq_layout_positions(l, my_rank, b.pos);
    for (int r = 0; r < l->P; r++) seq_layout_positions(l, r, b.pos_all + (size_t)r * n);
    b.Q = xmalloc(n * b.qrow * 4), b.dO = xmalloc(n * b.qrow * 4);
    b.K = xmalloc(n * b.kvrow * 4), b.V = xmalloc(n * b.kvrow * 4);
    fill_rows(b.Q, b.pos, b.n, b.qrow, 1), fill_rows(b.K, b.pos, b.n, b.kvrow, 2);
    fill_rows(b.V, b.pos, b.n, b.kvrow, 3), fill_rows(b.dO, b.pos, b.n, b.qrow, 4);
    b.O_ring = xmalloc(n * b.qrow * 4), b.O_ag = xmalloc(n * b.qrow * 4);
    b.lse_ring = xmalloc(n * (size_t)h_q * 4), b.lse_ag = xmalloc(n * (size_t)h_q * 4);
    b.delta = xmalloc(n * (size_t)h_q * 4);
    for (int m = 0; m < N_METHODS; m++) {
        b.dQ[m] = xmalloc(n * b.qrow * 4);
        b.dK[m] = xmalloc(n * b.kvrow * 4);
        b.dV[m] = xmalloc(n * b.kvrow * 4);
    }
    b.K_all = xmalloc(N * b.kvrow * 4), b.V_all = xmalloc(N * b.kvrow * 4);
    b.dK_all = xmalloc(N * b.kvrow * 4), b.dV_all = xmalloc(N * b.kvrow * 4);
    return b;
}

static void free_rank_bufs(rank_bufs *b)
{
    free(b->pos), free(b->pos_all), free(b->Q), free(b->K), free(b->V), free(b->dO);
    free(b->O_ring), free(b->O_ag), free(b->lse_ring), free(b->lse_ag), free(b->delta);
    for (int m = 0; m < N_METHODS; m++) free(b->dQ[m]), free(b->dK[m]), free(b->dV[m]);
    free(b->K_all), free(b->V_all), free(b->dK_all), free(b->dV_all);
}

/* The ring's schedules: the forward, and the Q-side and KV-side backward. */
typedef struct {
    ring_schedule *fwd, *bwd[2];
} ring_schedules;

/* One ring pass (schedule s; a backward one writes the gradients of method
 * k), from a barrier, so that no rank's time includes another rank finishing
 * the previous pass. out: {time, wait, bytes}, max over ranks. */
static void time_ring_pass(ring_exec_ctx *ctx, const ring_schedule *s, rank_bufs *b, int k,
                           double out[3])
{
    ring_exec_stats stats;
    must(bt_barrier(ctx->comm), "barrier");
    uint64_t sent0 = sent_total();
    ctx->sched = s;
    if (s->pass == RING_FORWARD)
        must(ring_forward(ctx, b->Q, b->K, b->V, b->O_ring, b->lse_ring, &stats), "ring forward");
    else
        must(ring_backward(ctx, b->Q, b->K, b->V, b->O_ring, b->dO, b->lse_ring, b->dQ[k], b->dK[k],
                           b->dV[k], &stats),
             "ring backward");
    out[0] = stats.total_s, out[1] = stats.wait_s, out[2] = (double)(sent_total() - sent0);
    check_bytes(s, out[2]);
    max_over_ranks(out, 3);
}

/* best[k]: {time, wait, bytes} of pass k, max over ranks, fastest of the
 * repetitions. Passes: 0 ring forward, 1 Q-side backward, 2 KV-side
 * backward, 3 all-gather forward, 4 all-gather backward. */
static void time_passes(const bench_opts *bo, ring_exec_ctx *ctx, const ring_schedules *rs,
                        rank_bufs *b, const attn_options *o, double best[5][3])
{
    for (int rep = 0; rep < bo->reps; rep++) {
        double now[3];
        time_ring_pass(ctx, rs->fwd, b, 0, now);
        keep_best(best[0], now, 3);
        for (int k = 0; k < 2; k++) {
            time_ring_pass(ctx, rs->bwd[k], b, k, now);
            keep_best(best[1 + k], now, 3);
        }
        must(bt_barrier(ctx->comm), "barrier");
        allgather_forward(ctx, b, o->h_q, o->h_kv, o->d, now);
        max_over_ranks(now, 3);
        keep_best(best[3], now, 3);
        must(bt_barrier(ctx->comm), "barrier");
        allgather_backward(ctx, b, o->h_q, o->h_kv, o->d, now);
        max_over_ranks(now, 3);
        keep_best(best[4], now, 3);
    }
}

/* Rank 0 prints the passes' results and how far the ring's O and every
 * gradient of both ring directions are from the baseline's (max over ranks). */
static void report_distributed(int cfg_index, const rank_bufs *b, const double best[5][3])
{
    size_t n = (size_t)b->n;
    /* diff[k], ref[k]: k = 0 O, 1 dQ, 2 dK, 3 dV */
    double diff[4] = {0}, ref[4] = {0};
    diff_into(b->O_ring, b->O_ag, n * b->qrow, &diff[0], &ref[0]);
    for (int k = 0; k < 2; k++) {
        diff_into(b->dQ[k], b->dQ[M_ALLGATHER], n * b->qrow, &diff[1], &ref[1]);
        diff_into(b->dK[k], b->dK[M_ALLGATHER], n * b->kvrow, &diff[2], &ref[2]);
        diff_into(b->dV[k], b->dV[M_ALLGATHER], n * b->kvrow, &diff[3], &ref[3]);
    }
    max_over_ranks(diff, 4);
    max_over_ranks(ref, 4);
    if (my_rank != 0) return;
    int P = bt_world_size(world);
    for (int m = 0; m < N_METHODS; m++) {
        const double *f = best[m == M_ALLGATHER ? 3 : 0], *g = best[m == M_ALLGATHER ? 4 : 1 + m];
        printf("res %d %d 1 %s %.6f %.6f %.6f %.6f %.0f %.0f\n", cfg_index, P, method_keys[m], f[0],
               g[0], f[1], g[1], f[2], g[2]);
    }
    printf("check %d %d", cfg_index, P);
    for (int k = 0; k < 4; k++) printf(" %.3g", ref[k] > 0 ? diff[k] / ref[k] : diff[k]);
    printf("\n");
    fflush(stdout);
}

/* The ring and the all-gather baseline on this world's ranks for problem
 * cfg_index. */
static void distributed(const bench_opts *bo, int cfg_index)
{
    attn_options o;
    ring_plan_config pc;
    problem(bo, cfg_index, &o, &pc);
    rank_bufs b = alloc_rank_bufs(&pc.layout, o.h_q, o.h_kv, o.d);
    char err[256];
    ring_schedules rs = {ring_plan(&pc, RING_FORWARD, err, sizeof err),
                         {ring_plan(&pc, RING_BWD_Q_SIDE, err, sizeof err),
                          ring_plan(&pc, RING_BWD_KV_SIDE, err, sizeof err)}};
    if (!rs.fwd || !rs.bwd[0] || !rs.bwd[1]) {
        fprintf(stderr, "bench attention: plan: %s\n", err);
        exit(EXIT_USAGE);
    }
    bk_queue queue = bk_host_queue();
    ring_exec_ctx ctx = {.comm = bt_world_comm(world),
                         .queue = &queue,
                         .scale = 1.0f / sqrtf((float)o.d),
                         .mask = o.kernel_mask,
                         .segments = o.segments};
    double best[5][3] = {{0}};
    time_passes(bo, &ctx, &rs, &b, &o, best);
    report_distributed(cfg_index, &b, best);
    ring_schedule_free(rs.fwd), ring_schedule_free(rs.bwd[0]), ring_schedule_free(rs.bwd[1]);
    free_rank_bufs(&b);
    attn_options_free(&o);
}

static int worker(const bench_opts *bo)
{
    char err[512];
    if (bt_world_init(NULL, &world, err, sizeof err) != BT_OK) {
        fprintf(stderr, "bench attention: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    my_rank = bt_world_rank(world);
    if (bt_world_size(world) > 1) {
        /* Warm-up: connect every pair of ranks before anything is timed. */
        size_t bytes = 1 << 20;
        unsigned char *a = calloc(1, bytes), *all = calloc((size_t)bt_world_size(world), bytes);
        must(bt_allgather(bt_world_comm(world), a, all, bytes), "warm-up");
        free(a), free(all);
    }
    for (int c = 0; c < N_CONFIGS; c++) {
        if (bt_world_size(world) == 1)
            single_rank(bo, c);
        else
            distributed(bo, c);
    }
    return bt_world_finalize(world) == BT_OK ? 0 : EXIT_RUN_FAILURE;
}

/* ------------------------------------------------------------------ parent side */

typedef struct {
    pass_result single[2]; /* 1 thread; one thread per CPU */
    int single_threads[2];
    pass_result dist[MAX_COUNTS][N_METHODS];
    double check[MAX_COUNTS][4]; /* relative differences O, dQ, dK, dV */
    int checked[MAX_COUNTS];
} config_results;

/* Runs one `burst run` of the worker and files rank 0's lines; slot is the
 * index into opts->ranks (distributed) or the thread slot (single rank). */
static int launch(const char *self, const bench_opts *bo, int ranks, int threads, int slot,
                  config_results *res)
{
    FILE *p = bench_relaunch(self, ranks, threads, 0,
                             "bench attention --worker --seq %lld --window %lld --d %d --reps %d",
                             (long long)bo->seq, (long long)bo->window, bo->d, bo->reps);
    if (!p) return -1;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        char *body = bench_rank_line(line);
        int cfg, P, thr;
        char key[32];
        double v[6], c[4];
        if (sscanf(body, "res %d %d %d %31s %lf %lf %lf %lf %lf %lf", &cfg, &P, &thr, key, &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5]) == 10 &&
            cfg >= 0 && cfg < N_CONFIGS) {
            pass_result r = {1, v[0], v[1], v[2], v[3], v[4], v[5]};
            if (strcmp(key, "single") == 0) {
                res[cfg].single[slot] = r;
                res[cfg].single_threads[slot] = thr;
            }
            for (int m = 0; m < N_METHODS; m++)
                if (strcmp(key, method_keys[m]) == 0) res[cfg].dist[slot][m] = r;
        } else if (sscanf(body, "check %d %d %lf %lf %lf %lf", &cfg, &P, &c[0], &c[1], &c[2],
                          &c[3]) == 6 &&
                   cfg >= 0 && cfg < N_CONFIGS) {
            memcpy(res[cfg].check[slot], c, sizeof c);
            res[cfg].checked[slot] = 1;
        } else {
            fputs(line, stderr);
        }
    }
    return pclose(p) == 0 ? 0 : -1;
}

static const char *heads_name(const bench_config *c)
{
    return c->h_q == c->h_kv ? "MHA" : "GQA";
}

static void print_table(const bench_opts *bo, const config_results *res, int all_threads)
{
    const double MiB = 1024.0 * 1024.0;
    printf("\n| mask | heads | P | method | fwd s | bwd s | fwd+bwd s | efficiency | "
           "vs 1 rank x %d thr | wait fwd s | wait bwd s | MiB sent/rank fwd | bwd |\n",
           all_threads);
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int c = 0; c < N_CONFIGS; c++) {
        const config_results *r = &res[c];
        const bench_config *cf = &configs[c];
        double t1 = r->single[0].fwd_s + r->single[0].bwd_s;
        double tall = r->single[1].valid ? r->single[1].fwd_s + r->single[1].bwd_s : 0;
        for (int s = 0; s < 2; s++) {
            if (!r->single[s].valid) continue;
            const pass_result *x = &r->single[s];
            printf("| %s | %s | 1 | single rank, %d thr | %.3f | %.3f | %.3f | %s | %s | - | - | "
                   "- | - |\n",
                   cf->mask, heads_name(cf), r->single_threads[s], x->fwd_s, x->bwd_s,
                   x->fwd_s + x->bwd_s, s == 0 ? "1 (ref)" : "-", s == 1 ? "1 (ref)" : "-");
        }
        for (int k = 0; k < bo->n_ranks; k++)
            for (int m = 0; m < N_METHODS; m++) {
                const pass_result *x = &r->dist[k][m];
                if (!x->valid) continue;
                double t = x->fwd_s + x->bwd_s;
                char vs[32] = "-";
                if (tall > 0) snprintf(vs, sizeof vs, "%.2f", tall / t);
                printf("| %s | %s | %d | %s | %.3f | %.3f | %.3f | %.2f | %s | %.3f | %.3f | "
                       "%.1f | %.1f |\n",
                       cf->mask, heads_name(cf), bo->ranks[k], method_names[m], x->fwd_s, x->bwd_s,
                       t, t1 / (bo->ranks[k] * t), vs, x->fwd_wait, x->bwd_wait, x->fwd_bytes / MiB,
                       x->bwd_bytes / MiB);
            }
    }

    printf("\nbyte ratios (bytes sent per rank, the rank that sends most):\n");
    printf("| mask | heads | P | bwd Q-side / KV-side | formula | fwd ring / all-gather | "
           "bwd Q-side / all-gather | bwd KV-side / all-gather |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int c = 0; c < N_CONFIGS; c++) {
        const bench_config *cf = &configs[c];
        /* per step: Q-side 3*Hq*d + 2*Hq values, KV-side 4*Hkv*d (src/attn/ring_plan.h) */
        double formula = (3.0 * cf->h_q * bo->d + 2.0 * cf->h_q) / (4.0 * cf->h_kv * bo->d);
        for (int k = 0; k < bo->n_ranks; k++) {
            const pass_result *x = res[c].dist[k];
            if (!x[M_ALLGATHER].valid) continue;
            printf("| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", cf->mask,
                   heads_name(cf), bo->ranks[k], x[M_RING_Q].bwd_bytes / x[M_RING_KV].bwd_bytes,
                   formula, x[M_RING_Q].fwd_bytes / x[M_ALLGATHER].fwd_bytes,
                   x[M_RING_Q].bwd_bytes / x[M_ALLGATHER].bwd_bytes,
                   x[M_RING_KV].bwd_bytes / x[M_ALLGATHER].bwd_bytes);
        }
    }
}

/* Whether --seq splits into 2P chunks for every P: 0, or EXIT_USAGE after
 * saying which P it does not. */
static int check_seq_splits(const bench_opts *bo)
{
    for (int k = 0; k < bo->n_ranks; k++)
        if (bo->seq % (2 * bo->ranks[k]) != 0) {
            fprintf(stderr, "burst bench attention: --seq %lld is not a multiple of 2P = %d\n",
                    (long long)bo->seq, 2 * bo->ranks[k]);
            return EXIT_USAGE;
        }
    return 0;
}

/* Every run: the single rank with 1 thread and with all_threads, then each
 * rank count. 0, or -1 when one failed (the rest are not started). */
static int launch_all(const char *self, const bench_opts *bo, int all_threads, config_results *res)
{
    int failed = 0;
    for (int s = 0; s < (all_threads > 1 ? 2 : 1) && !failed; s++)
        failed = launch(self, bo, 1, s == 0 ? 1 : all_threads, s, res) != 0;
    for (int k = 0; k < bo->n_ranks && !failed; k++)
        failed = launch(self, bo, bo->ranks[k], 1, k, res) != 0;
    return failed ? -1 : 0;
}

/* The numbers count only if the ring computed what the baseline computed:
 * prints the differences; returns 1 when one is missing or above 1e-3. */
static int print_checks(const bench_opts *bo, const config_results *res)
{
    printf("\nring vs all-gather baseline, max |difference| / max |baseline| "
           "(O; dQ, dK, dV of both ring directions):\n");
    int mismatch = 0;
    for (int c = 0; c < N_CONFIGS; c++)
        for (int k = 0; k < bo->n_ranks; k++) {
            const double *x = res[c].check[k];
            int ok = res[c].checked[k];
            for (int j = 0; j < 4 && ok; j++) ok = x[j] <= 1e-3;
            mismatch |= !ok;
            printf("  %s %s P=%d: O %.2g, dQ %.2g, dK %.2g, dV %.2g%s\n", configs[c].mask,
                   heads_name(&configs[c]), bo->ranks[k], x[0], x[1], x[2], x[3],
                   ok ? "" : "  MISMATCH");
        }
    return mismatch;
}

int bench_dist_attention(int argc, char **argv)
{
    bench_opts bo = {.seq = 0, .window = 0, .d = 64, .reps = 1, .ranks = {2, 4}, .n_ranks = 2};
    int parsed =
        bu_options_parse("burst bench attention", options, N_OPTIONS, argc, argv, &bo, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    if (bo.seq == 0) bo.seq = bo.quick ? 2048 : 8192;
    if (bo.window == 0) bo.window = bo.seq / 8;
    if (bo.is_worker) return worker(&bo);
    if (check_seq_splits(&bo) != 0) return EXIT_USAGE;

    char self[4096];
    if (bench_self_path("burst bench attention", self, sizeof self) != 0) return EXIT_RUN_FAILURE;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int all_threads = cpus > 1 ? (int)cpus : 1;
    printf("bench attention: N = %lld, window W = %lld, d = %d, Hq = 8, fp32, %d rep%s, %d CPUs\n",
           (long long)bo.seq, (long long)bo.window, bo.d, bo.reps, bo.reps > 1 ? "s" : "",
           all_threads);
    fflush(stdout);
    config_results *res = calloc(N_CONFIGS, sizeof *res);
    if (launch_all(self, &bo, all_threads, res) != 0) {
        fprintf(stderr, "burst bench attention: a run of the ranks failed\n");
        free(res);
        return EXIT_RUN_FAILURE;
    }
    print_table(&bo, res, all_threads);
    int mismatch = print_checks(&bo, res);
    printf("\nefficiency = T(1 rank, 1 thread) / (P x time), on fwd+bwd; times are the slowest "
           "rank's.\nwait = exposed communication (time waiting on transfers).\n");
    free(res);
    return mismatch ? EXIT_RUN_FAILURE : 0;
}
