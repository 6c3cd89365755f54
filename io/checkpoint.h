/* checkpoint.h: training checkpoints in HDF5. A checkpoint of step S is the
 * directory DIR/step-S: model.h5 (step, sampler position, RNG state, the
 * configuration text, shapes) written by rank 0, and shard-R.h5 per rank (its
 * shard of the fp32 parameters and of the AdamW moments), so that no rank
 * writes or holds more than its shard. Everything is written under
 * DIR/step-S.tmp and renamed when complete; DIR/latest (a one-line file
 * naming the step) is replaced last, so a crash at any moment leaves the
 * previous checkpoint whole. The io wing takes rank and world as plain numbers;
 * the engine provides the barriers between the phases. Checkpoints of format
 * version 1 (the parameters whole in model.h5, the moments in optim-R.h5) are
 * read as well. */
#ifndef BURST_IO_CHECKPOINT_H
#define BURST_IO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t step;
    int64_t sample_position; /* next sample index of the sampler */
    uint64_t rng_state;
    int world_size;
    int64_t n_params;
    const char *config_text; /* the effective configuration (INI) */
    int weights_only;        /* no optimizer state (a model imported or converted: a run
                                may start from it, not resume it); read back from version 2 */
} io_ckpt_meta;

/* Phase 1 (rank 0, before the others write): creates DIR/step-S.tmp afresh. */
int io_checkpoint_begin(const char *dir, int64_t step, char *err, size_t err_len);
/* Phase 2 (every rank): rank 0 writes model.h5 (meta); every rank writes
 * shard-R.h5: params, m and v [shard_len], its shard [shard_begin, shard_begin
 * + shard_len) of the parameters and the moments (m and v NULL: weights only,
 * meta->weights_only). */
int io_checkpoint_write_rank(const char *dir, int64_t step, int rank, const io_ckpt_meta *meta,
                             int64_t shard_begin, int64_t shard_len, const float *params,
                             const float *m, const float *v, char *err, size_t err_len);
/* Phase 3 (rank 0, after every rank wrote): renames step-S.tmp to step-S,
 * replaces DIR/latest, removes all but the newest keep_last checkpoints. */
int io_checkpoint_commit(const char *dir, int64_t step, int keep_last, char *err, size_t err_len);

/* The step DIR/latest names, or -1 when there is none (err says why). */
int64_t io_checkpoint_latest(const char *dir, char *err, size_t err_len);
/* Reads meta (config_text malloc'd; caller frees) and, unless NULL, the
 * parameters [n_params], reassembled from every rank's shard; a checkpoint
 * whose n_params or world_size differ from expect is refused with a message
 * naming both values. */
int io_checkpoint_read_model(const char *dir, int64_t step, const io_ckpt_meta *expect,
                             io_ckpt_meta *meta, float *params, char *err, size_t err_len);
/* Reads the parameters [begin, begin + count) into out [count], whatever the
 * world that wrote the checkpoint: from the shards that hold them (version 1:
 * from model.h5's whole /params). A range beyond n_params is refused, and so
 * is a checkpoint other than expect (may be NULL) as io_checkpoint_read_model
 * refuses it. */
int io_checkpoint_read_params(const char *dir, int64_t step, const io_ckpt_meta *expect,
                              int64_t begin, int64_t count, float *out, char *err, size_t err_len);
/* Reads rank's shard [shard_begin, shard_begin + shard_len), which must be the
 * one it wrote: the parameters into params and the moments into m and v
 * [shard_len] each; any of the three may be NULL (not read). Asking a
 * checkpoint of weights only for moments is refused. */
int io_checkpoint_read_rank(const char *dir, int64_t step, int rank, int64_t shard_begin,
                            int64_t shard_len, float *params, float *m, float *v, char *err,
                            size_t err_len);

#endif
