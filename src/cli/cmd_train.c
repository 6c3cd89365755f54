/* cmd_train.c: `burst train`, the training loop. Every rank validates the
 * configuration before any work; the world is split into a DP x CP grid
 * (node-major: a CP group is a run of consecutive ranks); each CP group trains
 * on its own sequences through the distributed attention ring; gradients are
 * reduce-scattered over the world into AdamW shards (ZeRO-1). Rank 0 prints a
 * memory report, a progress line per log step and the final peak memory, and
 * writes JSON-lines metrics. A non-finite loss or gradient stops every rank with
 * the step and the first rank that saw it. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "io/checkpoint.h"
#include "io/dataset_int64.h"
#include "kernels/ops.h"
#include "src/cli/cli.h"
#include "src/train/model.h"
#include "src/train/optimizer.h"
#include "src/train/data/token_source.h"
#include "src/train/config.h"
#include "util/parse.h"
#include "util/clock.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst train [--config FILE] [--set section.key=value ...] [--print-config]\n\n"
            "Trains a LLaMA-style model on sequences split across ranks. Launch it on every\n"
            "rank: `burst run -n 4 -- burst train ...`, or `srun -n 16 burst train ...`.\n\n"
            "  --config FILE        INI configuration; every key is checked (unknown keys,\n"
            "                       types and ranges are errors naming the key)\n"
            "  --set S.K=V          override one key after the file (repeatable, in order)\n"
            "  --print-config       print the effective configuration with defaults and exit\n"
            "  --resume             continue from the latest checkpoint in [train] checkpoint_dir\n"
            "                       (bit for bit: the losses equal those of an uninterrupted run)\n"
            "  --stop-after S       stop after step S (checkpointed when checkpoint_dir is set),\n"
            "                       e.g. to fit a job's time limit; --resume continues it\n"
            "  --inject-nan S[:R]   testing aid: make rank R's (default 0) gradient NaN at step S\n\n"
            "Output: a progress line on rank 0 (step, loss, tokens/s, achieved GFLOP/s and its\n"
            "fraction of this machine's sgemm rate, memory, ETA); [train] metrics names a\n"
            "JSON-lines file; [train] checkpoint_dir and checkpoint_every write checkpoints;\n"
            "[eval] eval_path measures passkey retrieval accuracy after training. Exit status: 0 done, 1 a failure while training (a lost rank,\n"
            "a non-finite loss), 2 a bad configuration (found before any rank works).\n");
}

static double rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

static double current_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * 4096.0;
}

/* sgemm rate of this machine (GFLOP/s), measured once at start. */
static double measure_sgemm(const bk_queue *q)
{
    const int64_t n = 768;
    float *a = calloc((size_t)(n * n), 4), *b = calloc((size_t)(n * n), 4), *c = calloc((size_t)(n * n), 4);
    for (int64_t i = 0; i < n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    bk_gemm(q, BK_NO_TRANS, BK_NO_TRANS, n, n, n, 1, a, n, b, n, 0, c, n);
    double t0 = bu_now();
    int reps = 0;
    while (bu_now() - t0 < 0.3 || reps < 2) {
        bk_gemm(q, BK_NO_TRANS, BK_NO_TRANS, n, n, n, 1, a, n, b, n, 0, c, n);
        reps++;
    }
    double t = bu_now() - t0;
    free(a), free(b), free(c);
    return 2.0 * (double)n * n * n * reps / t / 1e9;
}

/* MemAvailable of /proc/meminfo in bytes, or 0 when unknown. */
static double available_memory_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024.0;
}

typedef struct {
    int inject_step, inject_rank;
    int print_config;
    int resume;
    int64_t stop_after;
    const char *config_path;
} train_args;

static int parse_args(int argc, char **argv, train_config *c, train_args *a)
{
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            a->config_path = argv[++i];
            if (train_config_load(c, a->config_path, err, sizeof err) != 0) {
                fprintf(stderr, "burst train: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (train_config_set(c, argv[++i], err, sizeof err) != 0) {
                fprintf(stderr, "burst train: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--print-config") == 0) {
            a->print_config = 1;
        } else if (strcmp(argv[i], "--resume") == 0) {
            a->resume = 1;
        } else if (strcmp(argv[i], "--stop-after") == 0 && i + 1 < argc) {
            char *end;
            a->stop_after = strtoll(argv[++i], &end, 10);
            if (*end || a->stop_after < 1) {
                fprintf(stderr, "burst train: --stop-after '%s': expected a step >= 1\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--inject-nan") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%d:%d", &a->inject_step, &a->inject_rank) < 1) {
                fprintf(stderr, "burst train: --inject-nan '%s': expected STEP or STEP:RANK\n", argv[i]);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "burst train: unknown argument '%s'\n\n", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    return -1; /* go on */
}

/* Everything one rank needs during the run. */
typedef struct {
    train_config cfg;
    bt_world *world;
    bt_comm *dp_comm, *cp_comm;
    int rank, world_size, dp_rank, cp_rank;
    model_layout model;
    model_runner *runner;
    zero1 *opt;
    token_source *data;
    seq_layout layout;
    float *params, *grads;
    int64_t *tokens, *labels; /* [micro_batches][n] */
    bk_queue queue;
    FILE *metrics;
} trainer;

static int fail(trainer *t, int status, const char *fmt, const char *detail)
{
    if (t->rank == 0 || status == EXIT_RUN_FAILURE) {
        fprintf(stderr, "burst train: ");
        fprintf(stderr, fmt, detail);
        fprintf(stderr, "\n");
    }
    return status;
}

static int setup(trainer *t, const train_args *a, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    int status = 0;
    if (train_config_validate(c, t->world_size, err, err_len) != 0) return EXIT_USAGE;
    model_dims dims = {.layers = c->layers, .d_model = c->d_model, .n_heads = c->n_heads,
                       .n_kv_heads = c->n_kv_heads, .head_dim = c->d_model / c->n_heads,
                       .d_ff = c->d_ff, .vocab = c->vocab, .tied = c->tied_embeddings,
                       .rope_theta = (float)c->rope_theta, .rope_scaling = (float)c->rope_scaling,
                       .norm_eps = (float)c->norm_eps};
    model_layout_init(&t->model, &dims);
    /* Parameters, gradients, the reduce buffer and the moments, for every rank
     * of this node: refuse a model that cannot fit before allocating it. */
    double need = 4.0 * (double)t->model.n_params * sizeof(float) *
                  (bt_world_local_size(t->world) > 0 ? bt_world_local_size(t->world) : 1);
    double avail = available_memory_bytes();
    if (avail > 0 && need > avail) {
        char need_text[32], avail_text[32];
        snprintf(err, err_len, "[model] preset = %s: %lld parameters need at least %s on this node "
                               "(%d ranks), it has %s available",
                 c->preset, (long long)t->model.n_params, bu_human_bytes(need, need_text, sizeof need_text),
                 bt_world_local_size(t->world), bu_human_bytes(avail, avail_text, sizeof avail_text));
        return EXIT_USAGE;
    }
    if (bt_comm_grid(t->world, c->dp, c->cp, &t->dp_comm, &t->cp_comm) != BT_OK) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    t->dp_rank = bt_comm_rank(t->dp_comm);
    t->cp_rank = bt_comm_rank(t->cp_comm);
    int causal = strcmp(c->mask, "causal") == 0;
    seq_layout_kind kind = strcmp(c->layout, "zigzag") == 0       ? LAYOUT_ZIGZAG
                           : strcmp(c->layout, "contiguous") == 0 ? LAYOUT_CONTIGUOUS
                           : causal                               ? LAYOUT_ZIGZAG
                                                                  : LAYOUT_CONTIGUOUS;
    if (seq_layout_init(&t->layout, kind, c->cp, c->seq_len, err, err_len) != 0) return EXIT_USAGE;
    bk_attn_mask mask = bk_attn_mask_causal();
    if (!causal) {
        mask = bk_attn_mask_window(c->window - 1, 0);
        mask.flags |= BK_ATTN_CAUSAL;
    }
    /* The double ring needs the CP group spread evenly over nodes. */
    int nodes = bt_world_n_nodes(t->world), local = bt_world_local_size(t->world);
    int cp_nodes = local > 0 && c->cp % local == 0 ? c->cp / local : 1;
    ring_topology topo = TOPO_FLAT;
    if (strcmp(c->ring, "double") == 0 || (strcmp(c->ring, "auto") == 0 && nodes > 1 && cp_nodes > 1))
        topo = cp_nodes > 1 ? TOPO_DOUBLE : TOPO_FLAT;
    if (strcmp(c->ring, "double") == 0 && cp_nodes < 2) {
        snprintf(err, err_len, "[parallel] ring = double, but the CP group of %d ranks does not span "
                               "several nodes with the same number of ranks each", c->cp);
        return EXIT_USAGE;
    }
    model_runner_config rc = {
        .model = &t->model, .cp = t->cp_comm, .layout = t->layout, .topo = topo, .nodes = cp_nodes,
        .mask = mask,
        .backward = strcmp(c->backward, "q") == 0 ? BWD_Q_SIDE : strcmp(c->backward, "kv") == 0 ? BWD_KV_SIDE : BWD_AUTO,
        .ckpt_fraction = c->ckpt_fraction, .micro_batches = c->micro_batches,
        .fused_head = c->fused_head,
        .head = {.chunk_tokens = c->head_chunk, .z_loss = (float)c->z_loss, .ignore_index = TOKEN_IGNORE},
        .queue = &t->queue};
    t->runner = model_runner_create(&rc, err, err_len);
    if (!t->runner) return EXIT_USAGE;
    if (strcmp(c->source, "hdf5") == 0)
        t->data = hdf5_source_create(c->path, c->seq_len, c->vocab,
                                     strcmp(c->sampling, "shuffled") == 0, c->data_seed, &t->layout,
                                     t->cp_rank, err, err_len);
    else
        t->data = synthetic_source_create(c->task, c->vocab, c->data_seed, err, err_len);
    if (!t->data) return EXIT_USAGE;
    if (a->resume && !c->checkpoint_dir[0]) {
        snprintf(err, err_len, "--resume needs [train] checkpoint_dir");
        return EXIT_USAGE;
    }

    size_t np = (size_t)t->model.n_params;
    t->params = malloc(np * sizeof(float));
    t->grads = malloc(np * sizeof(float));
    model_init_params(&t->model, t->params, c->seed, c->init_std);
    uint8_t *decay = malloc(np);
    model_decay_mask(&t->model, decay);
    zero1_hparams hp = {.beta1 = c->beta1, .beta2 = c->beta2, .eps = c->adam_eps,
                        .weight_decay = c->weight_decay, .grad_clip = c->grad_clip};
    t->opt = zero1_create(bt_world_comm(t->world), t->model.n_params, decay, &hp);
    free(decay);
    size_t n = (size_t)t->layout.n * (size_t)c->micro_batches;
    t->tokens = malloc(n * sizeof(int64_t));
    t->labels = malloc(n * sizeof(int64_t));
    if (t->rank == 0 && c->metrics[0]) {
        t->metrics = fopen(c->metrics, "w");
        if (!t->metrics) {
            snprintf(err, err_len, "[train] metrics: cannot write %s", c->metrics);
            return EXIT_USAGE;
        }
    }
    return status;
}

static void memory_report(trainer *t, double baseline)
{
    char b[7][32];
    size_t np = (size_t)t->model.n_params * sizeof(float);
    size_t stored = model_runner_stored_bytes(t->runner), transient = model_runner_transient_bytes(t->runner);
    size_t opt = zero1_state_bytes(t->opt);
    /* params, grads, the optimizer's padded gradient work buffer */
    double total = baseline + (double)(3 * np + opt + stored + transient);
    printf("memory per rank: parameters %s, gradients %s (+ %s reduce buffer), optimizer shard %s, "
           "stored activations %s, largest transient %s, process baseline %s\n",
           bu_human_bytes((double)np, b[0], 32), bu_human_bytes((double)np, b[1], 32), bu_human_bytes((double)np, b[2], 32),
           bu_human_bytes((double)opt, b[3], 32), bu_human_bytes((double)stored, b[4], 32),
           bu_human_bytes((double)transient, b[5], 32), bu_human_bytes(baseline, b[6], 32));
    printf("memory per rank, estimated total: %s\n", bu_human_bytes(total, b[0], 32));
}

static double estimated_bytes(trainer *t, double baseline)
{
    size_t np = (size_t)t->model.n_params * sizeof(float);
    return baseline + (double)(3 * np + zero1_state_bytes(t->opt) +
                               model_runner_stored_bytes(t->runner) +
                               model_runner_transient_bytes(t->runner));
}

/* Every rank decided to stop together (a non-finite loss): leave in order. */
enum { STOP_AGREED = -1 };

/* One optimizer step: all micro-batches, then ZeRO-1. Returns 0, STOP_AGREED,
 * or the exit status after a failure. */
static int train_step(trainer *t, int64_t step, const train_args *a, double *loss_out,
                      double *gnorm_out, int *skipped)
{
    train_config *c = &t->cfg;
    int64_t n = t->layout.n;
    seq_chunk chunks[2];
    int n_chunks = seq_layout_chunks(&t->layout, t->cp_rank, chunks);
    int64_t local_valid = 0;
    for (int mb = 0; mb < c->micro_batches; mb++) {
        int64_t index = ((step - 1) * c->dp + t->dp_rank) * c->micro_batches + mb;
        if (t->data->read(t->data, index, c->seq_len, chunks, n_chunks, t->tokens + mb * n,
                          t->labels + mb * n) != 0)
            return EXIT_RUN_FAILURE; /* the source said what failed */
        for (int64_t i = 0; i < n; i++) local_valid += t->labels[mb * n + i] != TOKEN_IGNORE;
    }
    if (t->data->prefetch) /* the first sample of the next step, read while this one computes */
        t->data->prefetch(t->data, (step * c->dp + t->dp_rank) * c->micro_batches);
    /* The loss is a mean over every valid token of the step, on all ranks. */
    int64_t valid = local_valid;
    if (bt_allreduce(bt_world_comm(t->world), &valid, 1, BT_I64, BT_SUM) != BT_OK)
        return fail(t, EXIT_RUN_FAILURE, "%s", bt_world_error(t->world));
    float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;
    memset(t->grads, 0, (size_t)t->model.n_params * sizeof(float));
    double sums[2] = {0, 0};
    int64_t counted = 0;
    model_step_stats ms = {0};
    for (int mb = 0; mb < c->micro_batches; mb++) {
        bt_status st = model_forward_backward(t->runner, mb, t->params, t->grads, t->tokens + mb * n,
                                              t->labels + mb * n, scale, &sums[0], &counted, &ms);
        if (st != BT_OK)
            return fail(t, EXIT_RUN_FAILURE, "%s",
                        bt_world_error(t->world)[0] ? bt_world_error(t->world) : "a kernel refused its arguments");
    }
    if (a->inject_step == step && a->inject_rank == t->rank) t->grads[0] = NAN;
    /* Which rank first sees a non-finite loss or gradient: every rank learns it. */
    int bad = !isfinite(sums[0]);
    for (int64_t i = 0; i < t->model.n_params && !bad; i++) bad = !isfinite(t->grads[i]);
    int64_t first_bad = bad ? t->rank : INT64_MAX;
    sums[1] = (double)counted;
    if (bt_allreduce(bt_world_comm(t->world), &first_bad, 1, BT_I64, BT_MIN) != BT_OK ||
        bt_allreduce(bt_world_comm(t->world), sums, 2, BT_F64, BT_SUM) != BT_OK)
        return fail(t, EXIT_RUN_FAILURE, "%s", bt_world_error(t->world));
    *loss_out = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    *skipped = 0;
    if (first_bad != INT64_MAX) {
        if (strcmp(c->on_nonfinite, "skip") == 0) {
            if (t->rank == 0)
                fprintf(stderr, "burst train: step %lld: non-finite loss or gradient on rank %lld; "
                                "skipping the update ([train] on_nonfinite = skip)\n",
                        (long long)step, (long long)first_bad);
            *skipped = 1;
            return 0;
        }
        fprintf(stderr, "burst train: rank %d: step %lld: non-finite loss or gradient seen on rank %lld; stopping\n",
                t->rank, (long long)step, (long long)first_bad);
        return STOP_AGREED;
    }
    double lr = lr_schedule(c->lr, c->min_lr, c->warmup_steps, c->steps, step);
    if (zero1_step(t->opt, t->params, t->grads, lr, step, gnorm_out) != BT_OK)
        return fail(t, EXIT_RUN_FAILURE, "%s", bt_world_error(t->world));
    return 0;
}

/* Frees what setup made (each part may be missing after an early failure). */
static void trainer_free(trainer *t)
{
    model_runner_free(t->runner);
    model_layout_free(&t->model);
    if (t->opt) zero1_free(t->opt);
    if (t->data) t->data->free(t->data);
    bt_comm_free(t->dp_comm);
    bt_comm_free(t->cp_comm);
    free(t->params), free(t->grads), free(t->tokens), free(t->labels);
    if (t->metrics) fclose(t->metrics);
    memset(t, 0, sizeof *t);
}

/* 1 on every rank when any rank passes failed != 0: ranks stop together. */
static int any_rank(trainer *t, int failed)
{
    int64_t v = failed != 0;
    if (bt_allreduce(bt_world_comm(t->world), &v, 1, BT_I64, BT_MAX) != BT_OK) return 1;
    return v != 0;
}

/* Checkpoint of a completed step: rank 0 opens the directory, every rank writes
 * its part, rank 0 commits; a failure anywhere leaves the previous one whole. */
static int save_checkpoint(trainer *t, int64_t step, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    train_config_print(mem, c);
    fclose(mem);
    io_ckpt_meta meta = {.step = step, .sample_position = step * c->dp * c->micro_batches,
                         .rng_state = c->data_seed, .world_size = t->world_size,
                         .n_params = t->model.n_params, .config_text = text};
    int64_t begin, end;
    zero1_shard(t->opt, &begin, &end);
    int failed = t->rank == 0 && io_checkpoint_begin(c->checkpoint_dir, step, err, err_len) != 0;
    if (!any_rank(t, failed))
        failed = io_checkpoint_write_rank(c->checkpoint_dir, step, t->rank, &meta, t->params, begin,
                                          end - begin, zero1_moment1(t->opt),
                                          zero1_moment2(t->opt), err, err_len) != 0;
    else if (!failed)
        snprintf(err, err_len, "checkpoint of step %lld failed on another rank", (long long)step);
    if (!any_rank(t, failed))
        failed = t->rank == 0 &&
                 io_checkpoint_commit(c->checkpoint_dir, step, c->keep_checkpoints, err, err_len) != 0;
    else if (!failed)
        snprintf(err, err_len, "checkpoint of step %lld failed on another rank", (long long)step);
    int any = any_rank(t, failed);
    free(text);
    return any ? -1 : 0;
}

/* Loads the latest checkpoint; returns its step, or -1 with err set. */
static int64_t load_checkpoint(trainer *t, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    int64_t step = io_checkpoint_latest(c->checkpoint_dir, err, err_len);
    int failed = step < 0;
    io_ckpt_meta expect = {.world_size = t->world_size, .n_params = t->model.n_params}, meta;
    memset(&meta, 0, sizeof meta);
    if (!failed)
        failed = io_checkpoint_read_model(c->checkpoint_dir, step, &expect, &meta, t->params, err,
                                          err_len) != 0;
    int64_t begin, end;
    zero1_shard(t->opt, &begin, &end);
    if (!failed)
        failed = io_checkpoint_read_rank(c->checkpoint_dir, step, t->rank, begin, end - begin,
                                         zero1_moment1(t->opt), zero1_moment2(t->opt), err,
                                         err_len) != 0;
    free((char *)meta.config_text);
    if (any_rank(t, failed)) {
        if (!failed) snprintf(err, err_len, "another rank could not load the checkpoint");
        return -1;
    }
    return step;
}

/* Passkey retrieval: the most likely token at each held-out sample's answer
 * position against the answer; returns 0 with the counts over all ranks. */
static int evaluate(trainer *t, int64_t *correct, int64_t *total, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    int64_t *answers = NULL, rows = 0, cols = 0, n = t->layout.n;
    *correct = *total = 0;
    token_source *src = NULL;
    int failed = io_read_int64_dataset(c->eval_path, "/answers", &answers, &rows, &cols, err, err_len) != 0;
    if (!failed && cols < 3) {
        snprintf(err, err_len, "%s: /answers must have 3 columns (start, answer position, answer)",
                 c->eval_path);
        failed = 1;
    }
    if (!failed)
        src = hdf5_source_create(c->eval_path, c->seq_len, c->vocab, 0, 0, &t->layout, t->cp_rank,
                                 err, err_len);
    failed |= !src;
    if (any_rank(t, failed)) {
        free(answers);
        if (src) src->free(src);
        return -1;
    }
    int64_t *pos = malloc((size_t)n * sizeof(int64_t)), counts[2] = {0, 0};
    seq_layout_positions(&t->layout, t->cp_rank, pos);
    int64_t samples = rows < c->eval_samples ? rows : c->eval_samples;
    for (int64_t s = t->dp_rank; s < samples && !failed; s += c->dp) {
        if (answers[s * cols] != s * (c->seq_len + 1)) {
            snprintf(err, err_len, "%s: sample %lld starts at %lld, not at a multiple of [data] "
                                   "seq_len + 1: the eval corpus was made for another seq_len",
                     c->eval_path, (long long)s, (long long)answers[s * cols]);
            failed = 1;
            break;
        }
        seq_chunk chunks[2];
        int n_chunks = seq_layout_chunks(&t->layout, t->cp_rank, chunks);
        failed = src->read(src, s, c->seq_len, chunks, n_chunks, t->tokens, t->labels) != 0;
        int64_t query = answers[s * cols + 1] - 1, row = -1, predicted = -1;
        for (int64_t i = 0; i < n; i++)
            if (pos[i] == query) row = i;
        if (!failed &&
            model_predict(t->runner, t->params, t->tokens, &row, row >= 0, &predicted) != BT_OK) {
            snprintf(err, err_len, "%s", bt_world_error(t->world));
            failed = 1;
        }
        if (row >= 0) {
            counts[0] += predicted == answers[s * cols + 2];
            counts[1]++;
        }
    }
    free(pos);
    free(answers);
    src->free(src);
    if (any_rank(t, failed) ||
        bt_allreduce(bt_world_comm(t->world), counts, 2, BT_I64, BT_SUM) != BT_OK)
        return -1;
    *correct = counts[0];
    *total = counts[1];
    return 0;
}

int cmd_train(int argc, char **argv)
{
    trainer t;
    memset(&t, 0, sizeof t);
    train_args a = {.inject_step = -1, .inject_rank = 0};
    train_config_default(&t.cfg);
    int status = parse_args(argc, argv, &t.cfg, &a);
    if (status >= 0) return status;
    if (a.print_config) {
        train_config_print(stdout, &t.cfg);
        return 0;
    }
    char err[512];
    bt_options opt;
    bt_options_default(&opt);
    opt.intra = t.cfg.intra;
    opt.timeout_s = t.cfg.timeout;
    if (bt_world_init(&opt, &t.world, err, sizeof err) != BT_OK) {
        fprintf(stderr, "burst train: transport: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    t.rank = bt_world_rank(t.world);
    t.world_size = bt_world_size(t.world);
    t.queue = bk_host_queue();
    double baseline = current_rss_bytes();
    status = setup(&t, &a, err, sizeof err);
    if (status != 0) {
        if (t.rank == 0) fprintf(stderr, "burst train: %s\n", err);
        bt_world_abort(t.world);
        trainer_free(&t);
        return status;
    }
    train_config *c = &t.cfg;
    double sgemm = t.rank == 0 ? measure_sgemm(&t.queue) : 0;
    double flops_step = 3.0 * model_flops_per_sequence(&t.model, c->seq_len, 0.5) * c->dp * c->micro_batches;
    if (t.rank == 0) {
        printf("burst train: %lld parameters (%d layers, d_model %d, heads %d/%d, vocab %d); "
               "world %d = dp %d x cp %d; sequence %lld tokens (%lld per rank, %s layout); "
               "checkpoint fraction %g; %s head\n",
               (long long)t.model.n_params, c->layers, c->d_model, c->n_heads, c->n_kv_heads,
               c->vocab, t.world_size, c->dp, c->cp, (long long)c->seq_len, (long long)t.layout.n,
               seq_layout_name(t.layout.kind), c->ckpt_fraction, c->fused_head ? "fused" : "unfused");
        memory_report(&t, baseline);
        printf("sgemm on this machine: %.1f GFLOP/s\n", sgemm);
        fflush(stdout);
    }
    int64_t first_step = 1;
    if (a.resume) {
        int64_t done = load_checkpoint(&t, err, sizeof err);
        if (done < 0) {
            fprintf(stderr, "burst train: rank %d: --resume: %s\n", t.rank, err);
            bt_world_abort(t.world);
            trainer_free(&t);
            return EXIT_USAGE;
        }
        first_step = done + 1;
        if (t.rank == 0)
            printf("resumed from %s/step-%lld\n", c->checkpoint_dir, (long long)done);
    }
    double t_start = bu_now(), loss = 0, gnorm = 0;
    int64_t step;
    for (step = first_step; step <= c->steps && status == 0; step++) {
        double t0 = bu_now();
        int skipped = 0;
        status = train_step(&t, step, &a, &loss, &gnorm, &skipped);
        if (status != 0) break;
        double dt = bu_now() - t0, elapsed = bu_now() - t_start;
        double tokens_s = (double)c->seq_len * c->dp * c->micro_batches / dt;
        double gflops = flops_step / dt / 1e9;
        if (t.rank == 0 && (step % c->log_every == 0 || step == c->steps)) {
            char mem[32];
            double eta = elapsed / (double)(step - first_step + 1) * (double)(c->steps - step);
            printf("step %5lld/%lld  loss %.4f  grad-norm %.3g  lr %.3g  %.0f tokens/s  %.2f GFLOP/s "
                   "(%.2f of sgemm)  mem %s  ETA %.0f s\n",
                   (long long)step, (long long)c->steps, loss, gnorm,
                   lr_schedule(c->lr, c->min_lr, c->warmup_steps, c->steps, step), tokens_s, gflops,
                   sgemm > 0 ? gflops / sgemm : 0, bu_human_bytes(current_rss_bytes(), mem, sizeof mem), eta);
            fflush(stdout);
        }
        int last = step == c->steps || step == a.stop_after;
        if (c->checkpoint_dir[0] &&
            (last || (c->checkpoint_every > 0 && step % c->checkpoint_every == 0))) {
            if (save_checkpoint(&t, step, err, sizeof err) != 0) {
                fprintf(stderr, "burst train: rank %d: %s\n", t.rank, err);
                status = STOP_AGREED;
                break;
            }
            if (t.rank == 0) printf("checkpoint: %s/step-%lld\n", c->checkpoint_dir, (long long)step);
        }
        if (t.metrics)
            fprintf(t.metrics,
                    "{\"step\": %lld, \"loss\": %.17g, \"grad_norm\": %.17g, \"skipped\": %d, "
                    "\"tokens_per_s\": %.6g, \"gflops\": %.6g, \"seconds\": %.6g}\n",
                    (long long)step, loss, gnorm, skipped, tokens_s, gflops, dt);
        if (step == a.stop_after) {
            step++;
            break;
        }
    }
    if (t.metrics) fclose(t.metrics);
    t.metrics = NULL;
    if (status == 0 && c->eval_path[0]) {
        int64_t correct, total;
        if (evaluate(&t, &correct, &total, err, sizeof err) != 0) {
            fprintf(stderr, "burst train: rank %d: evaluation: %s\n", t.rank, err);
            status = STOP_AGREED;
        } else if (t.rank == 0) {
            printf("passkey retrieval accuracy: %.1f%% (%lld of %lld held-out samples; chance "
                   "about %.1f%%)\n",
                   total ? 100.0 * (double)correct / (double)total : 0.0, (long long)correct,
                   (long long)total, 100.0 / c->vocab);
        }
    }
    if (status == STOP_AGREED) {
        bt_comm_free(t.dp_comm);
        bt_comm_free(t.cp_comm);
        t.dp_comm = t.cp_comm = NULL;
        bt_world_finalize(t.world);
        status = EXIT_RUN_FAILURE;
    } else if (status == 0) {
        double peak = rss_bytes(), est = estimated_bytes(&t, baseline);
        if (t.rank == 0) {
            char p[32], e[32];
            printf("done: step %lld of %lld, final loss %.4f; peak memory rank 0 %s (estimated %s, "
                   "ratio %.2f)\n",
                   (long long)(step - 1), (long long)c->steps, loss, bu_human_bytes(peak, p, sizeof p),
                   bu_human_bytes(est, e, sizeof e), peak / est);
        }
        bt_comm_free(t.dp_comm);
        bt_comm_free(t.cp_comm);
        t.dp_comm = t.cp_comm = NULL;
        if (bt_world_finalize(t.world) != BT_OK) status = EXIT_RUN_FAILURE;
    } else {
        bt_world_abort(t.world);
    }
    trainer_free(&t);
    return status;
}
