/* trainer.h: one rank of `burst train`. The world is split into a DP x CP grid
 * (node-major: a CP group is a run of consecutive ranks); each CP group trains
 * on its own sequences through the distributed attention ring; gradients are
 * reduce-scattered over the world into AdamW shards (ZeRO-1). Rank 0 prints a
 * memory report, a progress line per log step and the final peak memory, and
 * writes JSON-lines metrics. A non-finite loss or gradient stops (or skips the
 * update on) every rank, naming the step and the first rank that saw it, or
 * saying that the gradient became non-finite in the sum over the ranks.
 *
 * The trainer lives in six files: trainer.c (setup, the loop, teardown),
 * trainer_memory.c (a rank's memory counted, checked and, on a device, taken
 * as one arena), trainer_step.c (one optimizer step), trainer_ckpt.c
 * (checkpoints and resume), trainer_eval.c (held-out accuracy: passkey,
 * recall) and trainer_report.c (memory, progress and metrics reports). */
#ifndef BURST_TRAIN_TRAINER_H
#define BURST_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "src/train/config.h"
#include "src/train/data/token_source.h"
#include "src/train/model.h"
#include "src/train/optimizer.h"
#include "src/train/choices.h"

/* What the command line adds to the configuration. */
typedef struct {
    int inject_step, inject_rank; /* testing aid: a NaN gradient at this step on this rank */
    int64_t overflow_step;        /* testing aid: at this step every rank's first gradient is
                                     FLT_MAX, finite locally, infinite once summed */
    int resume;                   /* continue from the latest checkpoint */
    int64_t stop_after;           /* stop (checkpointed) after this step; 0 = run to the end */
    int forward_only;             /* burst eval: no gradients and no optimizer are made */
    int dry_run;                  /* set up and report, then stop before the first step */
} trainer_opts;

/* The bytes of one rank's training state, by part, known before any of it is
 * allocated: what the memory report prints and the pre-check compares. */
typedef struct {
    size_t params, grads; /* [n_params] each: parameters fp32 or bf16, gradients fp32;
                             with zero >= 2 the gradients' windows, with zero = 3 the
                             parameters' (the embedding's and a bucket each) */
    int zero_stage;       /* the stage counted (the parts' names say what it shards) */
    size_t optimizer;     /* moments (and with bf16 parameters the fp32 masters) of the
                             shard, reduce buffers (zero1_bytes) */
    size_t optimizer_host; /* of those, in host memory with [memory] optimizer = host
                              (zero1_host_bytes; optimizer then counts the rest) */
    size_t tokens;        /* tokens and labels [micro_batches][n] */
    size_t segments;      /* document ids [micro_batches][seq_len + 1] (document mask) */
    size_t whole_sample;  /* the recall source's sample, tokens and labels [seq_len] each */
    model_memory model;   /* stored activations, workspace, ring buffers, head logits */
    size_t reduce_copy;   /* the optimizer step's reduce-scatter (zero1_step_bytes) */
    size_t arena_margin;  /* on a device: what the arena adds to the device parts, for
                             its alignment and the kernels' scratch (0 on the host) */
    size_t nccl;          /* on a device in a node NCCL serves: NCCL's own buffers,
                             estimated (bt_nccl_buffer_bytes), outside the arena */
} trainer_memory;

/* Everything one rank needs during the run. */
typedef struct {
    train_config cfg;
    train_choices choices;
    trainer_opts opts;
    bt_world *world;
    bt_comm *dp_comm, *cp_comm;
    int rank, world_size, dp_rank, cp_rank;
    model_layout model;
    model_runner *runner;
    zero1 *opt;
    token_source *data;
    seq_layout layout;
    token_shard shard;            /* this rank's positions of every sample */
    float *params;                /* [n_params] in the queue's memory (NULL with bf16
                                     parameters) */
    float *grads;                 /* the gradients in the queue's memory: [n_params]; with
                                     [parallel] zero >= 2 the embedding's window [V D] */
    float *grad_buckets[2];       /* zero >= 2: the buckets [model_bucket_floats] */
    model_grads grad_sink;        /* where the backward writes them (trainer_bind_gradients) */
    void *param_windows[3];       /* zero = 3: the parameters' embedding window [V D] and
                                     two buckets, of their type (params and params16 NULL) */
    model_gather param_gather;    /* zero = 3: how the runner fills them */
    int zero_stage;               /* [parallel] zero, chosen at setup when auto */
    const char *zero_chosen;      /* zero = auto: how the stage was chosen; else NULL */
    double reduce_s, gather_s;    /* this step's seconds the host spent in ZeRO's range
                                     reductions (zero >= 2) and parameter gathers (zero = 3),
                                     starting them and waiting for them, this rank's: their
                                     exposed time */
    double grad_sq;               /* zero = 2: the step's squared gradients before the
                                     reduction, this rank's (its finiteness check) */
    int64_t step_now;             /* the step and micro-batch being computed */
    int mb_now;
    uint16_t *params16;           /* [n_params] bf16 parameters (train_choices.bf16_matmul), their
                                     fp32 masters the optimizer's; else NULL */
    int64_t *tokens, *labels;     /* [micro_batches][n] on the host: what the source reads */
    int64_t *dev_tokens, *dev_labels; /* the same in device memory ([train] device = cuda) */
    int32_t *segments;            /* [micro_batches][seq_len + 1] document ids (mask = document) */
    uint64_t *sparse_bits;        /* the bitmap of mask = sparse (plan.mask points at it) */
    bk_queue queue;               /* the model's kernels: the host, or the device */
    bk_arena *arena;              /* on a device: where every buffer of the engine and the
                                     kernels' scratch come from (the queue's arena) */
    int device_index, device_count; /* the GPU this rank drives, of the node's (device only) */
    int nccl_ranks;                 /* ranks of this node that NCCL serves together, or 0 */
    FILE *metrics;
    trainer_memory mem;
    trainer_memory held;          /* what each part the setup made took of the model's
                                     memory, measured between them (bk_held_bytes; parts
                                     trainer_memory_part calls kept); on a device the device's
                                     token buffers as tokens */
    double baseline_bytes;        /* the process before the model was made */
    double sgemm_gflops;          /* one rank's sgemm rate, measured by rank 0 alone */
} trainer;

/* Every rank decided to stop together (a non-finite loss, a failed checkpoint). */
enum { STOP_AGREED = -1 };

/* Validates the configuration against the world, refuses a run that does not
 * fit in memory ([memory] limit_bytes, or the node's available memory; on a
 * device, the device parts against the GPU's free memory), takes the device
 * arena (on a device), then makes the model, the optimizer, the data source
 * and the buffers. 0, or an
 * exit status (EXIT_USAGE for all of these, on every rank) with the message
 * in err for rank 0 to print. Where the ranks agreed on a failure (the memory
 * check, an allocation, a file one rank cannot open), the ranks with something
 * to say have printed it before any rank returns, and err is empty. t->cfg,
 * t->opts and t->world are set by the caller. */
int trainer_setup(trainer *t, char *err, size_t err_len);
/* What trainer_setup counts of rank 0's memory (t->mem, t->layout, t->choices,
 * t->model), for a world of world_size ranks on `nodes` nodes, without a
 * world, a device or any large allocation: `burst plan memory`. t->cfg is
 * set by the caller, with a ZeRO stage (zero = auto is the caller's to
 * choose, as the fit depends on the cluster it describes); trainer_free frees
 * the rest. 0, or -1 with err. */
int trainer_plan_offline(trainer *t, int world_size, int nodes, char *err, size_t err_len);
/* Trains from the first step (or the checkpoint), checkpoints, evaluates.
 * 0, STOP_AGREED or an exit status. */
int trainer_run(trainer *t);
/* Frees what setup made (each part may be missing after an early failure). */
void trainer_free(trainer *t);
/* Leaves the world after trainer_run's status and frees t: in order when every
 * rank finished or stopped together, by abort after a failure the other ranks
 * may not have seen. The exit status: 0, or EXIT_RUN_FAILURE. */
int trainer_leave_world(trainer *t, int status);

/* Parts of the setup (trainer_memory.c), each collective where it says so.
 * Counts every part of this rank's memory from the configuration alone (and
 * on a device the arena's margin); 0 or -1 with err. */
int trainer_plan_memory(trainer *t, const model_runner_config *rc, char *err, size_t err_len);
/* Collective: refuses, before anything large is allocated and on every rank
 * alike, a run whose largest rank needs more than [memory] limit_bytes, or
 * more than the share of the memory it lives in of the rank with the least
 * (a node's available memory over its ranks, or a GPU's free memory over
 * the ranks that drive it); 0 or an exit status. */
int trainer_check_memory(trainer *t, char *err, size_t err_len);
/* Collective: whether every rank's need, as trainer_check_memory compares
 * it, fits: 1, 0, or -1 when the world failed. */
int trainer_memory_fits(trainer *t);
/* The three needs of a rank the memory check compares, each with its room:
 * the total (with [memory] limit_bytes), on a device the device parts and
 * NCCL's buffers (with the GPU's share), and the host's parts (with the
 * node's share: on the CPU the total, on a device the rest). */
enum { MEMORY_TOTAL, MEMORY_DEVICE, MEMORY_HOST, MEMORY_KINDS };
void trainer_memory_needs(const trainer_memory *m, int on_device, double need[MEMORY_KINDS]);
/* The first kind whose need exceeds its room (a room < 0 is not compared), or
 * -1 when everything fits: the one verdict of the run's check and of `burst
 * plan memory`. */
int trainer_memory_verdict(const double need[MEMORY_KINDS], const double room[MEMORY_KINDS]);
/* The host's part of m: everything on the CPU; on a device the parts outside
 * the device arena and NCCL's (the offloaded activations, the host's tokens)
 * but the transients: the gradient reduction's copy is counted as the whole
 * buffer staged at once, an upper bound of what the staging pool's pieces
 * or NCCL take, and the reference head (its logits) runs on the CPU alone. */
size_t trainer_host_bytes(const trainer_memory *m, int on_device);
/* Collective, on a device (else nothing): the arena of trainer_arena_bytes,
 * taken now and set on the queue the runner, the optimizer and the trainer's
 * buffers use; 0, or EXIT_USAGE on every rank when any rank could not take
 * it, each naming the size, the device's free memory and the parts. */
int trainer_make_arena(trainer *t, char *err, size_t err_len);
/* On a device, once every buffer is made: the kernels' scratch fits in what
 * is left of the arena (else the margin was too small: found here rather
 * than in a step); 0 or -1 with err. */
int trainer_check_scratch_room(const trainer *t, char *err, size_t err_len);
/* Ends a setup that every rank knows has failed: each rank with something to
 * say prints it (naming itself with name_rank; err emptied), a rank without
 * whose world has failed names the lost rank (the agreement was cut short),
 * then the ranks wait for each other, so that none leaves, and no launcher
 * stops the others, before every message is out. EXIT_USAGE. */
int trainer_fail_together(trainer *t, int says, int name_rank, char *err, size_t err_len);
/* Prints "burst train: rank R: <the world's error>" and returns 1 when the
 * world has failed (a rank lost, a wait timed out); 0 otherwise. */
int trainer_report_world_failure(const trainer *t);
/* The command a message names: burst eval (forward_only) or burst train. */
const char *trainer_command(const trainer *t);
/* After a part of the setup that is each rank's own: 0, or EXIT_USAGE on
 * every rank when any failed, each rank that did naming itself and why. */
int trainer_agree_on_own_part(trainer *t, int failed, char *err, size_t err_len);

/* The parameters the model reads: t->params, or t->params16. */
model_params trainer_params(const trainer *t);

/* Which sample micro-batch mb of step (1-based) reads on DP rank dp_rank: the
 * one formula for reading, prefetching and the checkpoint's sample position. */
int64_t trainer_sample_index(const train_config *c, int64_t step, int dp_rank, int mb);

/* Sample `index` of the data source into micro-batch mb of the token buffers
 * (t->tokens and t->labels [n] at mb * n); under the document mask also its
 * document ids, with the last token of each document predicting nothing.
 * 0, or -1 when the source failed (it said why). */
int trainer_read_sample(trainer *t, int64_t index, int mb);
/* On a device, micro-batches [0, count) of the token buffers copied to the
 * device's; nothing on the host. 0 or -1. */
int trainer_upload_tokens(trainer *t, int count);

/* t->grad_sink over t->grads: the whole buffer, or with [parallel] zero >= 2
 * the windows, each range summed into the optimizer's block as it completes. */
void trainer_bind_gradients(trainer *t);
/* The ZeRO stage this run uses: [parallel] zero (or the stage auto chose)
 * when training, 1 for a pass without an optimizer (burst eval reads whole
 * parameters). */
int trainer_zero_stage(const trainer *t);
/* The ZeRO stage recorded in the configuration of the latest checkpoint of
 * [train] checkpoint_dir, or 0 when there is none to read (resuming will say
 * why). */
int trainer_checkpoint_zero_stage(const trainer *t);
/* zero = 3: the bytes of a parameter window of count parameters, which the
 * optimizer's gathers fill in whole words (zero1_window_bytes). */
size_t trainer_param_window_bytes(const trainer *t, int64_t count);
/* ZeRO's windows (zero >= 2; model.h), each a buffer of its own: the
 * embedding's, bucket 0 and bucket 1, their lengths in parameters into
 * floats[3], for the memory count and the allocation alike. */
void trainer_window_floats(const trainer *t, int64_t floats[3]);
/* What the optimizer shards (zero1_sharding): the stage. */
zero1_sharding trainer_sharding(const trainer *t);

/* What one step did, the same on every rank. */
typedef struct {
    double loss, grad_norm;
    int skipped;        /* non-finite, and [train] on_nonfinite = skip */
    int64_t tokens;     /* tokens with a label (not ignored), all ranks */
    double attn_bytes;  /* bytes the attention rings sent, all ranks */
    double attn_pairs;  /* (query, key) pairs the mask allows in the step's sequences, all
                           DP groups: the attention work the FLOPs count */
    double attn_s;      /* wall time in the attention rings, the slowest rank's */
    double exposed_s;   /* of which waiting for transfers (ring_exec_stats.wait_s), the
                         * most any rank waited */
    double reduce_s;    /* in ZeRO's range reductions (zero >= 2) and its parameter */
    double gather_s;    /* gathers (zero = 3), blocking: the slowest rank's */
    double offload_s;   /* waiting for offloaded activations to come back
                           ([memory] offload_activations): the most any rank waited */
} trainer_step_result;

/* One optimizer step: all micro-batches, then ZeRO-1. 0, STOP_AGREED, or the
 * exit status after a failure. */
int trainer_step(trainer *t, int64_t step, trainer_step_result *res);

/* 1 on every rank when any rank passes failed != 0: ranks stop together. */
int trainer_any_rank(trainer *t, int failed);
/* The lowest rank that passes failed != 0, the same on every rank; -1 when
 * none did (this rank's own number when the ranks could not agree). */
int trainer_failed_rank(trainer *t, int failed);
/* err of a rank whose own part went well when the ranks agreed that another
 * failed: "what: " and the transport's error when it lost a rank (which
 * names it: the agreement itself may be where a rank that failed and left is
 * found gone), else "what: said". */
void trainer_another_rank_failed(const trainer *t, const char *what, const char *said, char *err,
                                 size_t err_len);
/* Checkpoint of a completed step, written by every rank; 0 or -1 with err. */
int trainer_save_checkpoint(trainer *t, int64_t step, char *err, size_t err_len);
/* The latest checkpoint's step, loaded; or -1 with err, also when this run
 * would not continue it bit for bit (a key that changes the numbers differs,
 * or the sampler position or RNG state recorded is not this run's). */
int64_t trainer_load_checkpoint(trainer *t, char *err, size_t err_len);
/* Correct answers of total asked, summed over all ranks. */
typedef struct {
    int64_t correct, total;
} eval_counts;
/* The evaluations the configuration asks for after training, each reported
 * by rank 0 with its chance level: 0; STOP_AGREED when one failed on every
 * rank or fell below [eval] min_accuracy; or EXIT_RUN_FAILURE when this rank
 * alone could not read a sample: it must leave the world by abort, so that
 * the others, waiting for it in the ring, stop naming it. */
int trainer_evaluate(trainer *t);
/* `burst eval`: the negative log-likelihood of the model on samples [0,
 * samples) of the data source (all its windows when samples is 0 or more than
 * it holds), the dp groups taking them in turn. Rank 0 prints
 * "eval: nll X over N tokens (ppl Y)" and, with out_json, writes the mean,
 * each sample's and each power-of-two position bucket's NLL there. 0, or an
 * exit status with err. */
int trainer_eval_nll(trainer *t, int64_t samples, const char *out_json, char *err, size_t err_len);
/* Passkey retrieval over [eval] eval_path: 0; -1 with err when the ranks
 * stopped together; or EXIT_RUN_FAILURE with err (this rank alone). */
int trainer_eval_passkey(trainer *t, eval_counts *out, char *err, size_t err_len);
/* Recall over [eval] eval_samples held-out samples of the recall task (the
 * seed synthetic_heldout_seed([data] data_seed)), counting only queries whose
 * pair (key and value) other ranks hold, or every query with one
 * context-parallel rank; 0, -1 or EXIT_RUN_FAILURE with err, as
 * trainer_eval_passkey. */
int trainer_eval_recall(trainer *t, eval_counts *out, char *err, size_t err_len);
/* Of a sample's queries [n], those whose query position rank holds and whose
 * pair's key and value positions other ranks of layout hold (with one rank in
 * the layout, every query: there is no other rank to hold a pair): their local
 * rows and answers [at most n each], in query order; returns how many. */
int trainer_recall_select(const seq_layout *l, int rank, const recall_query *queries, int n,
                          int64_t *rows, int64_t *answers);
/* How many of predicted [n] equal answers [n]. */
int64_t trainer_count_correct(const int64_t *predicted, const int64_t *answers, int64_t n);

/* Memory of this process now and at its peak, and the machine's free memory. */
double trainer_rss_bytes(void);
double trainer_peak_rss_bytes(void);
double trainer_available_bytes(void);
/* The most m holds at once: every part, but only the larger of the two
 * transients, which live at different times of a step (the reference head's
 * logits in the forward, the reduce-scatter's copy in the optimizer). */
size_t trainer_memory_total(const trainer_memory *m);
/* The parts of m, named, as one line of text ("parameters 1.2 MiB, ..."). */
void trainer_memory_parts(const trainer_memory *m, char *buf, size_t len);
/* The same parts one by one, in that order (the two transients last; NCCL's
 * buffers only where counted): their name, a key for scripts and the bytes,
 * into out [TRAINER_MEMORY_PARTS]; returns how many. */
enum { TRAINER_MEMORY_PARTS = 12 };
typedef struct {
    const char *name, *key;
    size_t bytes;
    int kept; /* made at setup and kept (on a device, in the arena: t->held measures it);
                 0 for the transients and NCCL's own buffers */
} trainer_memory_part;
int trainer_memory_part_list(const trainer_memory *m, trainer_memory_part *out);
/* The parts of m that live in the device arena on a device: parameters,
 * gradients, optimizer, the device's token buffers, stored activations, layer
 * workspace (its few host buffers included) and ring buffers. NCCL's buffers
 * (m->nccl) are device memory outside the arena. The rest (the host's token
 * buffers, document ids, the reduce-scatter's copy, which the transport
 * stages through the host) stays on the host. */
size_t trainer_device_bytes(const trainer_memory *m);
/* NCCL's own device buffers on this rank, estimated (bt_nccl_buffer_bytes for
 * the ring's communicators and the collectives'), 0 where NCCL serves no
 * peer of it; basis [basis_len] gets the figures (may be NULL, 0). */
size_t trainer_nccl_bytes(const trainer *t, char *basis, size_t basis_len);
/* The device arena's capacity: trainer_device_bytes plus m->arena_margin, rounded up
 * to BK_ARENA_ALIGN as the arena rounds it. */
size_t trainer_arena_bytes(const trainer_memory *m);
/* The estimate of this rank's memory that the report prints and the end
 * compares: the process baseline and the training state. */
double trainer_estimated_bytes(const trainer *t);
/* Of that, what lives in this process's host memory, which its peak RSS is
 * compared with at the end: all of it on the CPU, less the device parts on a
 * device. */
double trainer_estimated_host_bytes(const trainer *t);
/* The report at start (collective): rank 0 measures sgemm alone, then prints
 * the model, the grid, memory and that rate. 0, or an exit status. */
int trainer_report_start(trainer *t);
/* On a device, collective (every rank calls it; nothing without an arena):
 * rank 0's line on the arenas (when: "after step 1", "at the end"): the
 * largest peak measured on any rank, naming that rank, against its arena's
 * capacity and its estimate, and its device's used memory when the device
 * reports it. Nothing is printed when the ranks cannot be asked. */
void trainer_report_arena(const trainer *t, const char *when);
/* Rank 0's progress line of a step (every [train] log_every steps and the last). */
void trainer_report_progress(const trainer *t, int64_t step, int64_t first_step,
                             const trainer_step_result *res, double step_s, double elapsed_s);
/* The step's line in the [train] metrics file, if any. */
void trainer_report_metrics(trainer *t, int64_t step, const trainer_step_result *res,
                            double step_s);

#endif
