/* trainer_report.c: what a rank tells the user (trainer.h): the memory report
 * at start (the parts the setup's pre-check counts) and its estimate, on a
 * device the arena's capacity and then the largest peak measured on any rank
 * (every rank asked), one rank's sgemm rate (times the world size, the
 * reference for achieved GFLOP/s), the progress line of a step and the
 * metrics file. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/arena.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/train/trainer_internal.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/parse.h"
#include "util/proc_memory.h"

/* sgemm rate (GFLOP/s) of the queue the model runs on, measured for 0.3 s:
 * this rank's threads, or the device. 0 when it cannot be measured. */
static double measure_sgemm(const bk_queue *q)
{
    const int64_t n = 768;
    float *a = NULL, *b = NULL, *c = NULL; /* [n, n] = 0.1 each, in q's memory */
    int ok = bk_alloc_floats(q, n * n, 0.1f, &a) == BK_OK &&
             bk_alloc_floats(q, n * n, 0.1f, &b) == BK_OK &&
             bk_alloc_floats(q, n * n, 0.1f, &c) == BK_OK &&
             bk_gemm(q, BK_NO_TRANS, BK_NO_TRANS, n, n, n, 1, a, n, b, n, 0, c, n) == BK_OK;
    double t0 = bu_now(), t = 0;
    int reps = 0;
    while (ok && (bu_now() - t0 < 0.3 || reps < 2)) {
        ok = bk_gemm(q, BK_NO_TRANS, BK_NO_TRANS, n, n, n, 1, a, n, b, n, 0, c, n) == BK_OK &&
             (q->where != BK_DEVICE || bk_device_sync(q) == BK_OK);
        reps++;
    }
    t = bu_now() - t0;
    bk_free(q, a), bk_free(q, b), bk_free(q, c);
    return ok ? 2.0 * (double)n * n * n * reps / t / 1e9 : 0;
}

double trainer_estimated_bytes(const trainer *t)
{
    return t->baseline_bytes + (double)trainer_memory_total(&t->mem);
}

double trainer_estimated_host_bytes(const trainer *t)
{
    size_t on_device = t->arena ? trainer_device_bytes(&t->mem) + t->mem.nccl : 0;
    return t->baseline_bytes + (double)(trainer_memory_total(&t->mem) - on_device);
}

/* This rank's device memory: what is used of its total, or -1 and -1 when
 * the device does not report it. */
static void device_memory_now(int64_t *used, int64_t *total)
{
    size_t free_bytes, all;
    *used = *total = -1;
    if (bk_device_memory(&free_bytes, &all) != BK_OK) return;
    *used = (int64_t)(all - free_bytes);
    *total = (int64_t)all;
}

/* "; device memory used U of T" when total >= 0, else "". */
static const char *device_used(int64_t used, int64_t total, char *buf, size_t len)
{
    char u[32], of[32];
    buf[0] = '\0';
    if (total >= 0)
        snprintf(buf, len, "; device memory used %s of %s",
                 bu_human_bytes((double)used, u, sizeof u),
                 bu_human_bytes((double)total, of, sizeof of));
    return buf;
}

/* On a device: the arena's capacity, what it holds, the device's memory
 * (its runtime, cuBLASLt's workspace and other processes included). */
static void arena_report(const trainer *t)
{
    bk_arena_stats a = bk_arena_stats_of(t->arena);
    char b[4][32], used[96];
    int64_t dev_used, dev_total;
    device_memory_now(&dev_used, &dev_total);
    printf("device arena per rank: capacity %zu bytes (%s): the device parts %s and %s for "
           "alignment and kernel scratch; %s in use after setup%s\n",
           a.capacity, bu_human_bytes((double)a.capacity, b[0], 32),
           bu_human_bytes((double)trainer_device_bytes(&t->mem), b[1], 32),
           bu_human_bytes((double)t->mem.arena_margin, b[2], 32),
           bu_human_bytes((double)a.in_use, b[3], 32),
           device_used(dev_used, dev_total, used, sizeof used));
}

/* What the arena line says of one rank's arena and device. */
enum { ARENA_PEAK, ARENA_CAPACITY, ARENA_ESTIMATE, ARENA_DEV_USED, ARENA_DEV_TOTAL, ARENA_N };

/* Collective: the rank whose arena peaked highest (the lowest such rank),
 * and that rank's values in v (ARENA_*), the same on every rank; -1 when the
 * ranks could not be asked (the world has failed). */
static int largest_peak(const trainer *t, int64_t v[ARENA_N])
{
    bt_comm *world = bt_world_comm(t->world);
    bk_arena_stats a = bk_arena_stats_of(t->arena);
    int64_t mine[ARENA_N] = {(int64_t)a.peak, (int64_t)a.capacity,
                             (int64_t)trainer_device_bytes(&t->mem)};
    device_memory_now(&mine[ARENA_DEV_USED], &mine[ARENA_DEV_TOTAL]);
    int64_t peak = mine[ARENA_PEAK], rank;
    if (bt_allreduce(world, &peak, 1, BT_I64, BT_MAX) != BT_OK) return -1;
    rank = mine[ARENA_PEAK] == peak ? t->rank : t->world_size;
    if (bt_allreduce(world, &rank, 1, BT_I64, BT_MIN) != BT_OK) return -1;
    /* the values of that rank alone: every other rank adds the least there is */
    for (int k = 0; k < ARENA_N; k++) v[k] = rank == t->rank ? mine[k] : INT64_MIN;
    if (bt_allreduce(world, v, ARENA_N, BT_I64, BT_MAX) != BT_OK) return -1;
    return (int)rank;
}

void trainer_report_arena(const trainer *t, const char *when)
{
    if (!t->arena) return;
    int64_t v[ARENA_N];
    int rank = largest_peak(t, v);
    if (t->rank != 0 || rank < 0) return;
    double peak = (double)v[ARENA_PEAK], cap = (double)v[ARENA_CAPACITY],
           est = (double)v[ARENA_ESTIMATE];
    char b[3][32], used[96], whose[64] = "";
    if (t->world_size > 1)
        snprintf(whose, sizeof whose, " on rank %d, the largest of %d ranks,", rank, t->world_size);
    printf("device arena %s: peak %.0f bytes (%s)%s of capacity %.0f bytes (%s), estimated %.0f "
           "bytes (%s, ratio %.2f)%s\n",
           when, peak, bu_human_bytes(peak, b[0], 32), whose, cap, bu_human_bytes(cap, b[1], 32),
           est, bu_human_bytes(est, b[2], 32), est > 0 ? peak / est : 0,
           device_used(v[ARENA_DEV_USED], v[ARENA_DEV_TOTAL], used, sizeof used));
    fflush(stdout);
}

/* What each part the setup made took of the model's memory (t->held: on a
 * device its arena, on the CPU the heap), against its count, in bytes. On a
 * device the count of a part includes its few host buffers, which are not in
 * the arena: the layer workspace's positions, the host's tokens. */
static void held_report(const trainer *t)
{
    trainer_memory_part counted[TRAINER_MEMORY_PARTS], held[TRAINER_MEMORY_PARTS];
    trainer_memory held_mem = t->held;
    /* the same rows as the count's, the optional ones too (not measured: outside the arena) */
    held_mem.nccl = t->mem.nccl;
    held_mem.optimizer_host = t->mem.optimizer_host;
    held_mem.model.offloaded = t->mem.model.offloaded;
    int n = trainer_memory_part_list(&t->mem, counted);
    trainer_memory_part_list(&held_mem, held);
    printf("%s at setup, by part (bytes held of counted):",
           t->choices.on_device ? "device arena held" : "heap held");
    const char *sep = " ";
    for (int i = 0; i < n; i++)
        if (counted[i].kept) {
            printf("%s%s %zu of %zu", sep, counted[i].name, held[i].bytes, counted[i].bytes);
            sep = ", ";
        }
    printf("\n");
}

static void memory_report(const trainer *t)
{
    char parts[512], b[2][32];
    trainer_memory_parts(&t->mem, parts, sizeof parts);
    printf("memory per rank: %s; process baseline %s\n", parts,
           bu_human_bytes(t->baseline_bytes, b[0], 32));
    printf("memory per rank, estimated total: %s\n",
           bu_human_bytes(trainer_estimated_bytes(t), b[1], 32));
    if (t->mem.nccl > 0) {
        char basis[256];
        trainer_nccl_bytes(t, basis, sizeof basis);
        printf("NCCL's buffers, estimated from its settings (outside the arena): %s\n", basis);
    }
    if (t->arena) arena_report(t);
    held_report(t);
}

/* Rank 0 measures sgemm while the others wait in a barrier, so the rate is
 * that of one rank in its own thread setting rather than of ranks contending.
 * Its buffers are made and freed before the first step, outside the arena
 * (whose peak is then the training's alone). */
static int measure_sgemm_alone(trainer *t)
{
    bt_comm *world = bt_world_comm(t->world);
    bk_queue q = t->queue;
    q.arena = NULL;
    if (bt_barrier(world) != BT_OK) return -1;
    if (t->rank == 0) t->sgemm_gflops = measure_sgemm(&q);
    return bt_barrier(world) == BT_OK ? 0 : -1;
}

int trainer_report_start(trainer *t)
{
    if (measure_sgemm_alone(t) != 0) {
        fprintf(stderr, "burst train: %s\n", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    if (t->rank != 0) return 0;
    const train_config *c = &t->cfg;
    printf("burst train: %lld parameters (%d layers, d_model %d, heads %d/%d, vocab %d); "
           "world %d = dp %d x cp %d, ZeRO stage %d%s%s%s; sequence %lld tokens (%lld per rank, "
           "%s layout); checkpoint fraction %g, layers %s%s; %s head\n",
           (long long)t->model.n_params, c->layers, c->d_model, c->n_heads, c->n_kv_heads, c->vocab,
           t->world_size, c->dp, c->cp, trainer_zero_stage(t),
           t->zero_chosen ? " (zero = auto: " : "", t->zero_chosen ? t->zero_chosen : "",
           t->zero_chosen ? ")" : "", (long long)c->seq_len, (long long)t->layout.n,
           seq_layout_name(t->layout.kind), c->attn_kept_fraction,
           c->keep_layers ? "kept" : "recomputed",
           t->memory_chosen ? " (auto: the fastest whose memory fits)" : "",
           c->fused_head ? "fused" : "unfused");
    int in_bytes = t->choices.ring_bf16 ? 2 : 4;
    printf("attention: mask %s; %s; kernel pieces of %lld query rows; inputs travel in %s; "
           "block pairs on %s\n",
           train_config_name("parallel", "mask", c->mask),
           ring_pass_name(ring_choose_backward(t->choices.backward, c->n_heads, c->n_kv_heads,
                                               c->d_model / c->n_heads, in_bytes)),
           (long long)ring_piece_rows(c->piece_rows, t->layout.n, t->choices.on_device),
           in_bytes == 2 ? "bf16" : "fp32", t->sdpa_why);
    memory_report(t);
    if (t->choices.on_device)
        printf("device: %s, device %d of rank 0; its sgemm: %.1f GFLOP/s (rank 0 alone); %s; layer "
               "matrix products in %s\n",
               bk_device_backend_name(), t->device_index, t->sgemm_gflops,
               !t->choices.bf16_matmul ? "fp32 parameters"
               : train_config_optimizer_on_host(c)
                   ? "bf16 parameters, fp32 masters in the optimizer's shards in host memory "
                     "(AdamW on the CPU)"
                   : "bf16 parameters, fp32 masters in the optimizer's shards",
               t->choices.bf16_matmul ? "bf16" : "fp32");
    else
        printf("sgemm per rank: %.1f GFLOP/s (rank 0 alone, %d OpenMP thread%s)\n",
               t->sgemm_gflops, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
    fflush(stdout);
    return 0;
}

/* FLOPs of one step: 3 x the forward of every sequence of the step, whose
 * attention is the pairs the mask allowed in them (res->attn_pairs), as a
 * fraction of all N^2 pairs. */
static double step_flops(const trainer *t, const trainer_step_result *res)
{
    const train_config *c = &t->cfg;
    double sequences = (double)c->dp * c->micro_batches, N = (double)c->seq_len;
    double fraction = res->attn_pairs / (sequences * N * N);
    return model_train_flops(&t->model, c->seq_len, fraction, sequences);
}

static double step_tokens(const trainer *t)
{
    return (double)t->cfg.seq_len * t->cfg.dp * t->cfg.micro_batches;
}

void trainer_report_progress(const trainer *t, int64_t step, int64_t first_step,
                             const trainer_step_result *res, double step_s, double elapsed_s)
{
    const train_config *c = &t->cfg;
    if (t->rank != 0 || (step % c->log_every != 0 && step != c->steps)) return;
    char mem[32];
    double gflops = step_flops(t, res) / step_s / 1e9;
    double sgemm_world = t->sgemm_gflops * t->world_size;
    double eta = elapsed_s / (double)(step - first_step + 1) * (double)(c->steps - step);
    char zero_part[96] = "";
    int stage = trainer_zero_stage(t);
    if (stage == 2)
        snprintf(zero_part, sizeof zero_part, "  zero-2 reduce %.3g s", res->reduce_s);
    else if (stage == 3)
        snprintf(zero_part, sizeof zero_part, "  zero-3 reduce %.3g s gather %.3g s", res->reduce_s,
                 res->gather_s);
    char offload[48] = "";
    if (t->cfg.offload_activations)
        snprintf(offload, sizeof offload, "  offload wait %.3g s", res->offload_s);
    printf("step %5lld/%lld  loss %.4f  grad-norm %.3g  lr %.3g  %.0f tokens/s  %.2f GFLOP/s "
           "(%.2f of sgemm x P)  attn %.3g s (exposed %.3g s)%s%s  mem %s  ETA %.0f s\n",
           (long long)step, (long long)c->steps, res->loss, res->grad_norm,
           lr_schedule(c->lr, c->min_lr, c->warmup_steps, c->steps, step), step_tokens(t) / step_s,
           gflops, sgemm_world > 0 ? gflops / sgemm_world : 0, res->attn_s, res->exposed_s,
           zero_part, offload, bu_human_bytes(bu_rss_bytes(), mem, sizeof mem), eta);
    fflush(stdout);
}

/* A JSON number: v with every digit, or null where JSON has no number (the
 * loss or norm of a non-finite step). */
static const char *json_number(double v, char *buf, size_t len)
{
    if (!isfinite(v)) return "null";
    snprintf(buf, len, "%.17g", v);
    return buf;
}

void trainer_report_metrics(trainer *t, int64_t step, const trainer_step_result *res,
                            double step_s)
{
    if (!t->metrics) return;
    char l[32], g[32];
    fprintf(t->metrics,
            "{\"step\": %lld, \"loss\": %s, \"grad_norm\": %s, \"skipped\": %d, "
            "\"tokens\": %lld, \"attn_bytes\": %.0f, \"attn_pairs\": %.0f, \"attn_s\": %.6g, "
            "\"exposed_s\": %.6g, \"reduce_s\": %.6g, \"gather_s\": %.6g, \"offload_s\": %.6g, "
            "\"tokens_per_s\": %.6g, \"gflops\": %.6g, \"seconds\": %.6g}\n",
            (long long)step, json_number(res->loss, l, sizeof l),
            json_number(res->grad_norm, g, sizeof g), res->skipped, (long long)res->tokens,
            res->attn_bytes, res->attn_pairs, res->attn_s, res->exposed_s, res->reduce_s,
            res->gather_s, res->offload_s, step_tokens(t) / step_s,
            step_flops(t, res) / step_s / 1e9, step_s);
}
