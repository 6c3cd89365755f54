/* trainer_internal.h: the trainer's own files' shared view (as
 * model_internal.h is the model's): the state of one rank and the parts of
 * the run each file holds. The files, from the bottom up:
 *   trainer_agree.c    the ranks agreeing on a failure, and in what words
 *   trainer_samples.c  which sample a micro-batch reads, read and uploaded
 *   trainer_zero.c     what the trainer chooses of ZeRO: the stage, the
 *                      sharding, the whole parameters, the testing aids' fault
 *   trainer_memory.c   a rank's memory counted, checked, taken as one arena
 *   trainer_report.c   the memory report, progress lines and metrics
 *   trainer_ckpt.c     checkpoints and resume
 *   trainer_step.c     one optimizer step
 *   trainer_eval.c     held-out accuracy (passkey, recall)
 *   trainer_nll.c      burst eval's negative log-likelihood
 *   trainer.c          setup, the loop, teardown (trainer.h's face)
 * a file calling only those listed above it. */
#ifndef BURST_TRAIN_TRAINER_INTERNAL_H
#define BURST_TRAIN_TRAINER_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "src/train/choices.h"
#include "src/train/config.h"
#include "src/train/data/token_source.h"
#include "src/train/model.h"
#include "src/train/trainer.h"
#include "src/train/trainer_memory.h"
#include "src/train/zero.h"

/* Everything one rank needs during the run. */
struct trainer {
    train_config cfg;
    train_choices choices;
    trainer_opts opts;
    bt_world *world;
    bt_comm *dp_comm, *cp_comm;
    bt_comm *ulysses_group, *ulysses_ring; /* [parallel] ulysses > 1: the cp rank's group, and
                                            * the ring of the groups' matching members */
    int rank, world_size, dp_rank, cp_rank;
    model_layout model;
    model_runner *runner;
    zero *opt;
    token_source *data;
    seq_layout layout;
    token_shard shard;            /* this rank's positions of every sample */
    float *params;                /* [n_params] in the queue's memory (NULL with bf16
                                     parameters) */
    float *grads;                 /* zero = 1: the gradients [n_params] in the queue's memory;
                                     NULL at zero >= 2 (the optimizer's windows hold them) */
    const model_grads *grad_sink; /* where the backward writes them: the optimizer's sink
                                     (zero_grad_sink) */
    int zero_stage;               /* [parallel] zero, chosen at setup when auto */
    char sdpa_why[256];           /* the attention kernel chosen, and why (choose_sdpa) */
    int offline;                  /* counting for burst plan memory: no device touched */
    const char *zero_chosen;      /* zero = auto: how the stage was chosen; else NULL */
    int memory_chosen;            /* attn_kept_fraction or keep_layers was auto */
    int64_t step_now;             /* the step being computed */
    uint16_t *params16;           /* [n_params] bf16 parameters (train_choices.bf16_matmul), their
                                     fp32 masters the optimizer's; else NULL (and both NULL at
                                     zero = 3: the optimizer's windows hold them) */
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
};

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
/* Collective: whether every rank's need fits as trainer_check_memory
 * compares it, on a device with the arena's margin and NCCL's buffers (what
 * trainer_make_arena then takes, as `burst plan memory` compares it), so
 * that a choice made by it is one the arena holds: 1, 0, or -1 when the
 * world failed. */
int trainer_memory_fits(trainer *t);
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
/* The document ids of micro-batch mb's sample (mask = document), else NULL. */
int32_t *trainer_segments(const trainer *t, int mb);

/* The testing aids' fault for this step and rank (a NaN gradient, or FLT_MAX
 * on every rank), written to the first parameter's gradient before the
 * reduction (zero_sink_fault); 0 for none. */
float trainer_injected_fault(const trainer *t);
/* The ZeRO stage this run uses: [parallel] zero (or the stage auto chose)
 * when training, 1 for a pass without an optimizer (burst eval reads whole
 * parameters). */
int trainer_zero_stage(const trainer *t);
/* The ZeRO stage recorded in the configuration of the latest checkpoint of
 * [train] checkpoint_dir, or 0 when there is none to read (resuming will say
 * why). */
int trainer_checkpoint_zero_stage(const trainer *t);
/* What the optimizer shards (zero_sharding_for): the stage, and where its
 * state lives. */
zero_sharding trainer_sharding(const trainer *t);

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

/* One optimizer step: all micro-batches, then ZeRO's update. 0, STOP_AGREED, or the
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

/* trainer_free's first half: what setup made, t itself kept and zeroed. */
void trainer_free_parts(trainer *t);

/* NCCL's own device buffers on this rank, estimated (bt_nccl_buffer_bytes for
 * the ring's communicators and the collectives'), 0 where NCCL serves no
 * peer of it; basis [basis_len] gets the figures (may be NULL, 0). */
size_t trainer_nccl_bytes(const trainer *t, char *basis, size_t basis_len);

#endif
