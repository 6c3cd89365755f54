/* ring_worker.c: one rank of a distributed-attention test, launched by test_ring
 * through `burst run`. Every rank builds the same global inputs (seeded), the
 * double-precision single-rank reference of the whole sequence, and its share
 * of the inputs under the layout; it runs the ring forward and both backward
 * directions for MHA and GQA and compares O, lse, dQ, dK, dV with the
 * reference rows at its global positions, and the transport's byte counters
 * with the schedule. --piece-rows R calls the kernels on pieces of R query
 * rows (several pieces per block when R < N/P). --device runs the ring on the
 * device queue with every buffer in device memory and the transport moving
 * device buffers (the worker linked with the emulator, ring_worker_emu, runs
 * it in make check); the inputs are then rounded to bf16, which the device's
 * tensor cores take exactly, and the tolerance is that of the P and dS the
 * kernels round to bf16. --in-bytes 2 makes Q, K, V and dO travel in bf16
 * (ring_exec_ctx.in_type): the inputs are rounded to bf16 first, so on the
 * host, where the kernels widen bf16 exactly, the fp32 tolerances still hold,
 * and the byte counters show the halved bundles. Each backward runs again
 * with the gradients over their inputs' memory (expect_gradients_over_inputs).
 * --intra nccl moves the device buffers between the ranks of a node over NCCL
 * (a GPU per rank: the emulator's BK_EMU_GPUS_PER_NODE). --sdpa 1 (with
 * --device and --in-bytes 2) computes the block pairs with SDPA calls
 * (src/attn/ring_sdpa.h: the emulator's model of cuDNN), both backward
 * directions (the Q-side through the surrogate O'), to the same tolerances.
 * --ulysses U runs the hybrid (src/attn/ulysses.h): groups of U ranks, their
 * all-to-alls around a ring over the groups, to the same tolerances; its
 * backward again over its inputs (dQ over O, dK over K, dV over V) gives the
 * same bits.
 * Rank 0 prints "ok ..." when every rank agreed. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/arena.h"
#include "kernels/bf16.h"
#include "kernels/device.h"
#include "kernels/ref/attention_ref.h"
#include "src/attn/device_link.h"
#include "src/attn/ring.h"
#include "src/attn/ring_sdpa.h"
#include "src/attn/ulysses.h"
#include "tests/lib/rng.h"
#include "tests/lib/worker_device.h"

typedef struct {
    const char *mask_name;
    seq_layout_kind layout;
    int64_t N;
    int nodes;
    ring_topology topo;
    int kill_rank;
    int64_t piece_rows; /* 0: the executor's default */
    int device;         /* run on the device queue, on device buffers */
    int in_bytes;       /* 4: Q, K, V, dO travel in fp32; 2: in bf16 */
    const char *intra;  /* the transport inside a node: auto, ucx or nccl (a GPU per rank) */
    int sdpa;           /* the block pairs on SDPA calls (the emulator's model of cuDNN) */
    int ulysses;        /* ranks per Ulysses group (1: the ring alone) */
} options;

/* Relative tolerances: fp32 on the host; on the device, P and dS rounded to
 * bf16 (2^-8 relative each) before the products that make O and the gradients. */
static double tol_fwd(const options *o)
{
    return o->device ? 2e-2 : 2e-5;
}

static double tol_bwd(const options *o)
{
    return o->device ? 4e-2 : 5e-5;
}

static void round_to_bf16(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = bk_bf16_to_float(bk_float_to_bf16((float)x[i]));
}

/* The ring's buffers of one rank, host or device memory: the inputs, then the
 * outputs (from IO_OUT on). */
enum { IO_Q, IO_K, IO_V, IO_DOUT, IO_OUT, IO_LSE, IO_DQ, IO_DK, IO_DV, IO_BUFS };
typedef struct {
    float *b[IO_BUFS];
} ring_io;

/* Device copies of host's buffers [floats[i]] each, dK and dV one buffer
 * [dK | dV] as on the host (RING_CALLER_MEMORY asks for it). */
static ring_io device_copy_of(const ring_io *host, const size_t floats[IO_BUFS])
{
    ring_io dev;
    for (int i = 0; i < IO_BUFS; i++)
        if (i != IO_DV)
            dev.b[i] = worker_device_copy(
                host->b[i], (floats[i] + (i == IO_DK ? floats[IO_DV] : 0)) * sizeof(float));
    dev.b[IO_DV] = dev.b[IO_DK] + floats[IO_DK];
    return dev;
}

/* The outputs back from the device into host's buffers. */
static void download_outputs(ring_io *host, const ring_io *dev, const size_t floats[IO_BUFS])
{
    for (int i = IO_OUT; i < IO_BUFS; i++)
        worker_device_read(host->b[i], dev->b[i], floats[i] * sizeof(float));
}

/* dst[floats] = src on queue q. */
static void copy_floats(const bk_queue *q, float *dst, const float *src, size_t floats)
{
    if (bk_copy(q, dst, src, floats * sizeof(float)) != BK_OK)
        must(BT_ERR_SYS, "a copy of the ring's buffers");
}

/* Whether a spent input now differs from its copy kept: the ring kept an
 * accumulator there. */
static int overwritten(const bk_queue *q, const float *input, const float *kept, size_t floats)
{
    float *a = malloc(floats * sizeof(float)), *b = malloc(floats * sizeof(float));
    if (q->where == BK_DEVICE) {
        worker_device_read(a, input, floats * sizeof(float));
        worker_device_read(b, kept, floats * sizeof(float));
    } else {
        memcpy(a, input, floats * sizeof(float)), memcpy(b, kept, floats * sizeof(float));
    }
    int differs = memcmp(a, b, floats * sizeof(float)) != 0;
    free(a), free(b);
    return differs;
}

/* The gradients host holds against apart[3], the run apart's: the same bits
 * on the host, within 1e-6 on the device (whose kernels may add in another
 * order from run to run); frees apart. */
static void expect_same_gradients(const bk_queue *q, float *apart[3], const ring_io *host,
                                  const size_t floats[IO_BUFS], const char *config)
{
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; i++) {
        double worst = 0, tol = q->where == BK_DEVICE ? 1e-6 : 0;
        for (size_t j = 0; j < floats[IO_DQ + i]; j++) {
            double a = apart[i][j], b = host->b[IO_DQ + i][j];
            double rel = a == b ? 0 : fabs(a - b) / (fabs(a) > 1e-30 ? fabs(a) : 1e-30);
            if (!(rel <= worst)) worst = rel;
        }
        if (!(worst <= tol)) {
            fprintf(stderr, "rank %d: %s: %s over its input differs from the run apart by %.3g\n",
                    rank, config, names[i], worst);
            failures++;
        }
        free(apart[i]);
    }
}

/* ring.h lets dQ take O's memory, and with bf16 inputs dK and dV K's and
 * V's, and the accumulators the caller's memory (RING_CALLER_MEMORY, on
 * buffers made for the call: the home block's in its gradients, with bf16
 * inputs on the KV side the trailing ones in Q and dO): the backward again
 * with O (and K, V) copied into the gradients' buffers and passed as both,
 * and Q and dO given to spend, gives the gradients host holds from the run
 * apart: the same bits on the host, within 1e-6 on the device (whose kernels
 * may add in another order from run to run). With bf16 inputs on the KV side
 * and Hq >= 2 Hkv the ring must have written into Q; Q and dO are put back
 * after. */
static void expect_gradients_over_inputs(const ring_exec_ctx *ctx, ring_io *host, const ring_io *io,
                                         const size_t floats[IO_BUFS], int h_q, int h_kv,
                                         const char *config)
{
    float *apart[3];
    for (int i = 0; i < 3; i++) {
        apart[i] = malloc(floats[IO_DQ + i] * sizeof(float));
        memcpy(apart[i], host->b[IO_DQ + i], floats[IO_DQ + i] * sizeof(float));
    }
    int kv = ctx->in_type == BK_BF16; /* dK over K and dV over V too */
    const int from[3] = {IO_OUT, IO_K, IO_V}, spent[2] = {IO_Q, IO_DOUT};
    for (int i = 0; i < (kv ? 3 : 1); i++)
        copy_floats(ctx->queue, io->b[IO_DQ + i], io->b[from[i]], floats[from[i]]);
    ring_exec_ctx c = *ctx;
    float *kept[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        if (bk_alloc(ctx->queue, floats[spent[i]] * sizeof(float), (void **)&kept[i]) != BK_OK)
            must(BT_ERR_SYS, "a copy of a spent input");
        copy_floats(ctx->queue, kept[i], io->b[spent[i]], floats[spent[i]]);
        c.spend[i] = io->b[spent[i]];
    }
    const float *k = kv ? io->b[IO_DK] : io->b[IO_K], *v = kv ? io->b[IO_DV] : io->b[IO_V];
    ring_exec_stats stats;
    must(ring_backward(&c, io->b[IO_Q], k, v, io->b[IO_DQ], io->b[IO_DOUT], io->b[IO_LSE],
                       io->b[IO_DQ], io->b[IO_DK], io->b[IO_DV], &stats),
         "ring backward, gradients over inputs");
    if (ctx->queue->where == BK_DEVICE) download_outputs(host, io, floats);
    /* acc_out[0], which step 0 (the home block) computes into, in Q */
    int lent = kv && c.sched->pass == RING_BWD_KV_SIDE && h_q >= 2 * h_kv;
    for (int i = 0; i < 2; i++) {
        if (lent && i == 0 &&
            !overwritten(ctx->queue, io->b[spent[i]], kept[i], floats[spent[i]])) {
            fprintf(stderr, "rank %d: %s: the ring kept no accumulator in Q\n", rank, config);
            failures++;
        }
        copy_floats(ctx->queue, io->b[spent[i]], kept[i], floats[spent[i]]);
        bk_free(ctx->queue, kept[i]);
    }
    expect_same_gradients(ctx->queue, apart, host, floats, config);
}

/* ulysses_backward with dQ over O, dK over K and dV over V (its contract:
 * every input split before a gradient is written) gives the bits of the run
 * apart that host holds. */
static void expect_ulysses_over_inputs(ulysses *u, const ring_exec_ctx *ctx, ring_io *host,
                                       const ring_io *io, const size_t floats[IO_BUFS],
                                       const char *config)
{
    float *apart[3];
    const int from[3] = {IO_OUT, IO_K, IO_V};
    for (int i = 0; i < 3; i++) {
        apart[i] = malloc(floats[IO_DQ + i] * sizeof(float));
        memcpy(apart[i], host->b[IO_DQ + i], floats[IO_DQ + i] * sizeof(float));
        copy_floats(ctx->queue, io->b[IO_DQ + i], io->b[from[i]], floats[from[i]]);
    }
    ring_exec_stats stats;
    must(ulysses_backward(u, ctx, io->b[IO_Q], io->b[IO_DK], io->b[IO_DV], io->b[IO_DQ],
                          io->b[IO_DOUT], io->b[IO_LSE], io->b[IO_DQ], io->b[IO_DK], io->b[IO_DV],
                          &stats),
         "Ulysses backward, gradients over inputs");
    if (ctx->queue->where == BK_DEVICE) download_outputs(host, io, floats);
    expect_same_gradients(ctx->queue, apart, host, floats, config);
}

static bk_attn_mask make_mask(const char *name, int64_t N, int P, uint64_t **bits_out)
{
    *bits_out = NULL;
    if (strcmp(name, "none") == 0) return bk_attn_mask_none();
    if (strcmp(name, "causal") == 0) return bk_attn_mask_causal();
    if (strcmp(name, "window") == 0) {
        /* A causal window of 1.5 local blocks: each rank needs 2 earlier blocks. */
        bk_attn_mask m = bk_attn_mask_window(N / P + N / P / 2 - 1, 0);
        m.flags |= BK_ATTN_CAUSAL;
        return m;
    }
    if (strcmp(name, "document") == 0) return bk_attn_mask_document(1);
    if (strcmp(name, "sparse") == 0) {
        int64_t n_blocks = 8, bs = N / n_blocks;
        uint64_t *bits = calloc(1, sizeof(uint64_t));
        for (int qb = 0; qb < n_blocks; qb++)
            for (int kb = 0; kb <= qb; kb++)
                if (kb == qb || kb == 0 || (qb + kb) % 3 == 0) bits[0] |= 1ull << (qb * n_blocks + kb);
        *bits_out = bits;
        bk_attn_mask m = bk_attn_mask_block_sparse(bits, bs, n_blocks);
        m.flags |= BK_ATTN_CAUSAL;
        return m;
    }
    fprintf(stderr, "ring_worker: unknown mask '%s'\n", name);
    exit(WORKER_USAGE);
}

/* max |got - want| over the rows this rank holds, relative to max |want|. */
static double compare_rows(const seq_layout *l, const float *local, const double *global,
                           size_t row)
{
    int64_t *pos = malloc((size_t)l->n * sizeof(int64_t));
    seq_layout_positions(l, rank, pos);
    double err = 0, scale = 1e-30;
    for (int64_t i = 0; i < l->n; i++)
        for (size_t k = 0; k < row; k++) {
            double want = global[(size_t)pos[i] * row + k], got = local[(size_t)i * row + k];
            if (isinf(want) && want == got) continue;
            double e = fabs(got - want);
            if (!(e <= err)) err = e; /* NaN propagates */
            if (fabs(want) > scale && !isinf(want)) scale = fabs(want);
        }
    free(pos);
    return err / scale;
}

static void check(const char *what, double rel_err, double tol, const char *config)
{
    if (!(rel_err <= tol)) {
        fprintf(stderr, "rank %d: %s: %s differs from the single-rank reference by %.3g (tolerance %g)\n",
                rank, config, what, rel_err, tol);
        failures++;
    }
}

static void check_bytes(const ring_schedule *s, int ring_rank, bt_counter before[RING_N_CHANNELS],
                        const char *config)
{
    uint64_t sent = 0;
    for (int ch = 0; ch < RING_N_CHANNELS; ch++)
        sent += bt_counter_get(world, ch).sent_bytes - before[ch].sent_bytes;
    uint64_t planned = ring_schedule_bytes_sent(s, ring_rank);
    if (sent != planned) {
        fprintf(stderr, "rank %d: %s: %s sent %llu bytes, the schedule says %llu\n", rank, config,
                ring_pass_name(s->pass), (unsigned long long)sent, (unsigned long long)planned);
        failures++;
    }
}

static void snapshot(bt_counter c[RING_N_CHANNELS])
{
    for (int ch = 0; ch < RING_N_CHANNELS; ch++) c[ch] = bt_counter_get(world, ch);
}

static void run_heads(const options *o, int h_q, int h_kv, int d)
{
    int64_t N = o->N;
    char config[160], err[256];
    snprintf(config, sizeof config, "%s/%s P=%d %s Hq=%d Hkv=%d%s%s", o->mask_name,
             seq_layout_name(o->layout), size, o->topo == TOPO_DOUBLE ? "double" : "flat", h_q, h_kv,
             o->device ? " on the device" : "", o->in_bytes == 2 ? ", bf16 inputs" : "");
    seq_layout layout;
    if (seq_layout_init(&layout, o->layout, size, N, err, sizeof err) != 0 ||
        seq_layout_set_ulysses(&layout, o->ulysses, err, sizeof err) != 0 ||
        ulysses_check(o->ulysses, h_q, h_kv, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(WORKER_USAGE);
    }
    /* the ring over the groups: member m of each group, the groups' blocks
     * and 1/U of the heads */
    int U = o->ulysses;
    seq_layout ring_layout = seq_layout_ring(&layout);
    bt_comm *group = NULL, *across = bt_world_comm(world);
    if (U > 1) {
        must(bt_comm_split(bt_world_comm(world), rank / U, rank % U, &group), "the group");
        must(bt_comm_split(bt_world_comm(world), rank % U, rank / U, &across), "the ring");
    }
    size_t qn = (size_t)N * h_q * d, kvn = (size_t)N * h_kv * d;
    double *Q = malloc(qn * 8), *K = malloc(kvn * 8), *V = malloc(kvn * 8), *dO = malloc(qn * 8);
    uint64_t rng = test_rng(12345 + (uint64_t)h_kv);
    test_rng_fill(&rng, Q, qn, -1, 1);
    test_rng_fill(&rng, K, kvn, -1, 1);
    test_rng_fill(&rng, V, kvn, -1, 1);
    test_rng_fill(&rng, dO, qn, -1, 1);
    if (o->device || o->in_bytes == 2) {
        round_to_bf16(Q, qn), round_to_bf16(K, kvn), round_to_bf16(V, kvn);
        round_to_bf16(dO, qn);
    }
    int32_t *segments = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0, doc = 0; i < N; i++) { /* documents of N/6 tokens on average */
        if (i > 0 && test_rng_below(&rng, N / 6) == 0) doc++;
        segments[i] = (int32_t)doc;
    }
    uint64_t *bits;
    bk_attn_mask mask = make_mask(o->mask_name, N, size, &bits);

    /* The single-rank reference over the whole sequence, in double precision. */
    int64_t *gpos = malloc((size_t)N * sizeof(int64_t));
    for (int64_t i = 0; i < N; i++) gpos[i] = i;
    float scale = 1.0f / sqrtf((float)d);
    bk_attn_geom g = {.n_q = N, .n_kv = N, .h_q = h_q, .h_kv = h_kv, .d = d, .scale = scale,
                      .q_pos = gpos, .kv_pos = gpos, .q_seg = segments, .kv_seg = segments,
                      .mask = mask};
    double *O_ref = malloc(qn * 8), *lse_ref = malloc((size_t)N * h_q * 8);
    double *dQ_ref = malloc(qn * 8), *dK_ref = malloc(kvn * 8), *dV_ref = malloc(kvn * 8);
    ref_attn_fwd(&g, Q, K, V, O_ref, lse_ref);
    ref_attn_bwd(&g, Q, K, V, dO, dQ_ref, dK_ref, dV_ref);

    /* This rank's share, in fp32. */
    size_t n = (size_t)layout.n, qrow = (size_t)h_q * d, kvrow = (size_t)h_kv * d;
    float *q = malloc(n * qrow * 4), *k = malloc(n * kvrow * 4), *v = malloc(n * kvrow * 4),
          *dout = malloc(n * qrow * 4), *out = malloc(n * qrow * 4), *lse = malloc(n * h_q * 4),
          *dq = malloc(n * qrow * 4), *dk = malloc(2 * n * kvrow * 4), *dv = dk + n * kvrow;
    int64_t *pos = malloc(n * sizeof(int64_t));
    seq_layout_positions(&layout, rank, pos);
    for (size_t i = 0; i < n; i++) {
        size_t gi = (size_t)pos[i];
        for (size_t c = 0; c < qrow; c++) q[i * qrow + c] = (float)Q[gi * qrow + c];
        for (size_t c = 0; c < qrow; c++) dout[i * qrow + c] = (float)dO[gi * qrow + c];
        for (size_t c = 0; c < kvrow; c++) k[i * kvrow + c] = (float)K[gi * kvrow + c];
        for (size_t c = 0; c < kvrow; c++) v[i * kvrow + c] = (float)V[gi * kvrow + c];
    }

    ring_plan_config pc = {.topo = o->topo,
                           .nodes = o->nodes,
                           .layout = ring_layout,
                           .need = {.mask = mask, .segments = segments, .N = N},
                           .h_q = h_q / U,
                           .h_kv = h_kv / U,
                           .d = d,
                           .count_pairs = 0,
                           .in_bytes = o->in_bytes};
    /* on the device an arena, as the engine has: no cudaFree, which waits for
     * every stream, orders the ring's work behind the tests' backs */
    bk_arena *arena = NULL;
    if (o->device && bk_arena_create(64u << 20, BK_ARENA_DEVICE, &arena) != BK_OK)
        must(BT_ERR_SYS, "the device arena");
    bk_queue queue = o->device ? (bk_queue){BK_DEVICE, NULL, 0, arena} : bk_host_queue();
    ring_exec_ctx ctx = {.comm = across,
                         .queue = &queue,
                         .scale = scale,
                         .mask = mask,
                         .segments = segments,
                         .piece_rows = o->piece_rows,
                         .in_type = o->in_bytes == 2 ? BK_BF16 : BK_F32};
    if (o->device && bits) /* the device's kernels read the bitmap from device memory */
        ctx.mask.block_bits = worker_device_copy(bits, bk_attn_block_bytes(mask.n_blocks));
    ring_exec_stats stats;
    bt_counter before[RING_N_CHANNELS];
    ring_io host = {{q, k, v, dout, out, lse, dq, dk, dv}};
    const size_t floats[IO_BUFS] = {n * qrow, n * kvrow, n * kvrow, n * qrow, n * qrow,
                                    n * (size_t)h_q, n * qrow, n * kvrow, n * kvrow};
    ring_io io = o->device ? device_copy_of(&host, floats) : host;

    ring_sdpa_config sc = {.layout = ring_layout,
                           .need = pc.need,
                           .rank = bt_comm_rank(across),
                           .h_q = h_q / U,
                           .h_kv = h_kv / U,
                           .d = d,
                           .scale = scale};
    ulysses_config uc = {.group = group, .n = layout.n, .h_q = h_q, .h_kv = h_kv, .d = d};
    ulysses *uly = U > 1 ? ulysses_create(&uc, &queue) : NULL;
    if (U > 1 && !uly) must(BT_ERR_SYS, "the Ulysses buffers");
    if (o->sdpa && !(ctx.sdpa = ring_sdpa_create(&sc, &queue, NULL, err, sizeof err))) {
        fprintf(stderr, "rank %d: the SDPA calls: %s\n", rank, err);
        exit(WORKER_FAILED);
    }
    ring_schedule *fwd = ring_plan(&pc, RING_FORWARD, err, sizeof err);
    if (!fwd) {
        fprintf(stderr, "rank %d: plan: %s\n", rank, err);
        exit(WORKER_USAGE);
    }
    ctx.sched = fwd;
    snapshot(before);
    must(uly ? ulysses_forward(uly, &ctx, io.b[IO_Q], io.b[IO_K], io.b[IO_V], io.b[IO_OUT],
                               io.b[IO_LSE], &stats)
             : ring_forward(&ctx, io.b[IO_Q], io.b[IO_K], io.b[IO_V], io.b[IO_OUT], io.b[IO_LSE],
                            &stats),
         "ring forward");
    if (o->device) download_outputs(&host, &io, floats);
    check_bytes(fwd, bt_comm_rank(across), before, config);
    check("O", compare_rows(&layout, out, O_ref, qrow), tol_fwd(o), config);
    check("lse", compare_rows(&layout, lse, lse_ref, (size_t)h_q), tol_fwd(o), config);

    if (o->kill_rank == rank) {
        fprintf(stderr, "rank %d: dying between the forward and the backward ring\n", rank);
        kill(getpid(), SIGKILL);
    }
    const ring_pass passes[2] = {RING_BWD_Q_SIDE, RING_BWD_KV_SIDE};
    for (int p = 0; p < 2; p++) {
        ring_schedule *bwd = ring_plan(&pc, passes[p], err, sizeof err);
        ctx.sched = bwd;
        char cfg2[200];
        snprintf(cfg2, sizeof cfg2, "%s %s", config, p == 0 ? "Q-side" : "KV-side");
        snapshot(before);
        if (uly)
            must(ulysses_backward(uly, &ctx, io.b[IO_Q], io.b[IO_K], io.b[IO_V], io.b[IO_OUT],
                                  io.b[IO_DOUT], io.b[IO_LSE], io.b[IO_DQ], io.b[IO_DK],
                                  io.b[IO_DV], &stats),
                 "Ulysses backward");
        else
            must(ring_backward(&ctx, io.b[IO_Q], io.b[IO_K], io.b[IO_V], io.b[IO_OUT],
                               io.b[IO_DOUT], io.b[IO_LSE], io.b[IO_DQ], io.b[IO_DK], io.b[IO_DV],
                               &stats),
                 "ring backward");
        if (o->device) download_outputs(&host, &io, floats);
        check_bytes(bwd, bt_comm_rank(across), before, cfg2);
        check("dQ", compare_rows(&layout, dq, dQ_ref, qrow), tol_bwd(o), cfg2);
        check("dK", compare_rows(&layout, dk, dK_ref, kvrow), tol_bwd(o), cfg2);
        check("dV", compare_rows(&layout, dv, dV_ref, kvrow), tol_bwd(o), cfg2);
        if (uly)
            expect_ulysses_over_inputs(uly, &ctx, &host, &io, floats, cfg2);
        else
            expect_gradients_over_inputs(&ctx, &host, &io, floats, h_q, h_kv, cfg2);
        ring_schedule_free(bwd);
    }
    for (int i = 0; o->device && i < IO_BUFS; i++)
        if (i != IO_DV) bk_device_free(io.b[i]);
    if (o->device && bits) bk_device_free((void *)ctx.mask.block_bits);
    ring_sdpa_free(ctx.sdpa);
    ulysses_free(uly);
    if (U > 1) bt_comm_free(group), bt_comm_free(across);
    bk_arena_destroy(arena);
    ring_schedule_free(fwd);
    free(Q), free(K), free(V), free(dO), free(segments), free(bits), free(gpos);
    free(O_ref), free(lse_ref), free(dQ_ref), free(dK_ref), free(dV_ref);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk);
    free(pos);
}

int main(int argc, char **argv)
{
    options o = {"causal", LAYOUT_ZIGZAG, 0, 1, TOPO_FLAT, -1, 0, 0, 4, "auto", 0, 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mask") == 0) o.mask_name = argv[i + 1];
        else if (strcmp(argv[i], "--layout") == 0 && seq_layout_parse(argv[i + 1], &o.layout) == 0) {}
        else if (strcmp(argv[i], "--n") == 0) o.N = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--double-ring") == 0) o.topo = TOPO_DOUBLE, o.nodes = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--kill-rank") == 0) o.kill_rank = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--piece-rows") == 0) o.piece_rows = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--device") == 0) o.device = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--in-bytes") == 0) o.in_bytes = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--intra") == 0)
            o.intra = argv[i + 1];
        else if (strcmp(argv[i], "--sdpa") == 0)
            o.sdpa = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ulysses") == 0)
            o.ulysses = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "ring_worker: bad option '%s'\n", argv[i]);
            return WORKER_USAGE;
        }
    }
    bt_options topt;
    bt_options_default(&topt);
    topt.intra = o.intra;
    worker_init_with("ring_worker", &topt);
    int gpus = 0; /* the node's GPUs, a rank's the one its local rank names (as the trainer's) */
    if (o.device &&
        (!bk_device_available() || bk_device_use(bt_world_local_rank(world), &gpus) != BK_OK ||
         transport_link_device(world, bt_world_local_rank(world) % gpus) != BT_OK)) {
        fprintf(stderr, "rank %d: --device: no device (%s), or the transport refused it: %s\n",
                rank, bk_device_backend_name(), bt_world_error(world));
        return WORKER_FAILED;
    }
    if (o.N == 0) o.N = 48 * size; /* divisible by 2P, and by 8 sparse blocks when 8 | 6P */
    /* a member's heads: MHA, and GQA with Q and dO holding two [dK | dV] each */
    int U = o.ulysses, mha = U > 1 ? 2 * U : 4;
    run_heads(&o, mha, mha, 16);
    run_heads(&o, 4 * U, U, 16);
    int64_t total = worker_finish();
    if (rank == 0 && total == 0)
        printf("ok ring %s/%s on %d ranks%s%s%s%s%s%s%s\n", o.mask_name, seq_layout_name(o.layout),
               size, o.ulysses > 1 ? " in Ulysses groups" : "",
               o.topo == TOPO_DOUBLE ? " (double ring)" : "", o.piece_rows ? " in pieces" : "",
               o.device ? " on the device" : "", o.in_bytes == 2 ? " with bf16 inputs" : "",
               strcmp(o.intra, "nccl") == 0 ? " over NCCL" : "", o.sdpa ? " on SDPA calls" : "");
    return total ? WORKER_FAILED : 0;
}
