/* trainer.h: one rank of `burst train` and `burst eval`. The world is split
 * into a DP x CP grid (node-major: a CP group is a run of consecutive ranks);
 * each CP group trains on its own sequences through the distributed attention
 * ring; gradients are reduced into AdamW shards, the optimizer's state, the
 * gradients and the parameters sharded as [parallel] zero says. Rank 0 prints
 * a memory report, a progress line per log step and the final peak memory,
 * and writes JSON-lines metrics. A non-finite loss or gradient stops (or
 * skips the update on) every rank, naming the step and the first rank that
 * saw it, or saying that the gradient became non-finite in the sum over the
 * ranks.
 *
 * This is the trainer's face: make one on a world, set it up, run it (or
 * evaluate), leave. What `burst plan memory` reads is trainer_memory.h; the
 * trainer's own files share trainer_internal.h. */
#ifndef BURST_TRAIN_TRAINER_H
#define BURST_TRAIN_TRAINER_H

#include <stdint.h>

#include "src/train/config.h"
#include "transport/transport.h"

typedef struct trainer trainer;

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

/* Every rank decided to stop together (a non-finite loss, a failed checkpoint). */
enum { STOP_AGREED = -1 };

/* A trainer of cfg and opts (copied) on world, which stays the caller's to
 * abort after a failed setup and is left by trainer_leave_world; NULL when
 * out of memory. */
trainer *trainer_create(const train_config *cfg, const trainer_opts *opts, bt_world *world);
/* This rank's number in the world. */
int trainer_rank(const trainer *t);
/* Validates the configuration against the world, refuses a run that does not
 * fit in memory ([memory] limit_bytes, or the node's available memory; on a
 * device, the device parts against the GPU's free memory), takes the device
 * arena (on a device), then makes the model, the optimizer, the data source
 * and the buffers. 0, or an
 * exit status (EXIT_USAGE for all of these, on every rank) with the message
 * in err for rank 0 to print. Where the ranks agreed on a failure (the memory
 * check, an allocation, a file one rank cannot open), the ranks with something
 * to say have printed it before any rank returns, and err is empty. t is
 * trainer_create's. */
int trainer_setup(trainer *t, char *err, size_t err_len);
/* Trains from the first step (or the checkpoint), checkpoints, evaluates.
 * 0, STOP_AGREED or an exit status. */
int trainer_run(trainer *t);
/* Frees what setup made (each part may be missing after an early failure)
 * and t; NULL is nothing. The world stays the caller's. */
void trainer_free(trainer *t);
/* Leaves the world after trainer_run's status and frees t: in order when every
 * rank finished or stopped together, by abort after a failure the other ranks
 * may not have seen. The exit status: 0, or EXIT_RUN_FAILURE. */
int trainer_leave_world(trainer *t, int status);
/* `burst eval`: the negative log-likelihood of the model on samples [0,
 * samples) of the data source (all its windows when samples is 0 or more than
 * it holds), the dp groups taking them in turn. Rank 0 prints
 * "eval: nll X over N tokens (ppl Y)" and, with out_json, writes the mean,
 * each sample's and each power-of-two position bucket's NLL there. 0, or an
 * exit status with err. */
int trainer_eval_nll(trainer *t, int64_t samples, const char *out_json, char *err, size_t err_len);

#endif
