/* zero.h: ZeRO's room: AdamW with ZeRO over the world, and the model's side
 * of it (its windows, the sink its backward writes the gradients into, the
 * source its passes gather the parameters from). Stages 1 to 3, zero_sharding:
 * what follows is stage 1; stage 2 sums the gradients range by range, stage
 * 3 keeps only the shard's masters). Every rank holds all the
 * parameters (one flat buffer, identical everywhere) and its own partial
 * gradients (one flat fp32 buffer); a step reduce-scatters the gradients (sum)
 * so each rank owns 1/world of them, takes the global gradient norm, clips,
 * updates its shard with its shard of the moments (decoupled weight decay, bias
 * correction, fp32), and all-gathers the parameters. Also the learning-rate
 * schedule: linear warm-up, then cosine decay to min_lr.
 *
 * The parameters are fp32 (BK_F32: the buffer the model reads is the
 * optimizer's master copy) or bf16 (BK_BF16: the model reads bf16 parameters
 * [n_params]; the fp32 masters of this rank's shard live here beside the
 * moments, and a step all-gathers the shards rounded to bf16, half the bytes).
 * An fp32 run and a bf16 run given the same gradients keep the same masters,
 * bit for bit: the bf16 parameters are always the fp32 ones rounded.
 *
 * The buffers (parameters, gradients, masters, moments) live in the memory of
 * the optimizer's queue: host memory, or device memory for a device queue (the
 * collectives then move device memory: bt_reduce_scatter_mem); with
 * state_on_host (zero_sharding) the parameters and gradients of the device,
 * the state on the host. */
#ifndef BURST_TRAIN_ZERO_H
#define BURST_TRAIN_ZERO_H

#include <stdint.h>

#include "kernels/device.h"
#include "kernels/kernels_common.h"
#include "src/train/model.h"
#include "transport/transport.h"

typedef struct {
    double beta1, beta2, eps, weight_decay;
    double grad_clip; /* max global norm; 0 = no clipping */
} zero_hparams;

typedef struct zero zero;

/* What is sharded beyond the optimizer's state (the ZeRO stage): 1 nothing,
 * the gradients reduce-scattered from a whole buffer at the step; 2 the
 * gradients, summed range by range (zero_add_range); 3 the parameters too:
 * this rank keeps the fp32 masters of its shard and no step all-gathers
 * them; a pass gathers the range it uses (zero_gather_range). */
typedef struct {
    int stage; /* 1, 2 or 3 */
    /* With a device queue and bf16 parameters at stage 2 or 3: the shard's
     * state (masters, moments, the summed gradient block) in host memory and
     * its update on the CPU ([memory] optimizer = host); each range's own
     * part of the gradients comes down through a host buffer of range_floats
     * floats (at least the longest range zero_add_range is given), added
     * into the block at the next range or step, so that the host's addition
     * overlaps the device's work queued after the range. */
    int state_on_host;
    int64_t range_floats;
} zero_sharding;

/* n_params parameters of param_type (BK_F32 or BK_BF16); decay_mask
 * [n_params] (1 = apply weight decay, 0 = not, e.g. norm gains), host memory,
 * copied; NULL = decay everything. q: the queue of the step's kernels and the
 * memory of every buffer (NULL: the host). Collective over comm. With BK_BF16,
 * or at stage 3, the masters start at zero: zero_set_params gives them their
 * values. */
zero *zero_create(bt_comm *comm, int64_t n_params, const uint8_t *decay_mask,
                  const zero_hparams *hp, const bk_queue *q, bk_dtype param_type,
                  zero_sharding sharding);
void zero_free(zero *z);

/* One step (step counts from 1). grads are reduced in place (their content
 * afterwards is unspecified); params [n_params], of the parameter type
 * zero_create was given (the optimizer's memory), are updated on every rank
 * (stage 3: the masters alone, params NULL): fp32 parameters are their own
 * masters, the shard updated in place and all-gathered; with bf16 parameters
 * the shard's masters are updated and params become every rank's masters
 * rounded to bf16.
 * *grad_norm is the global norm before clipping; when it is not finite
 * nothing is updated and BT_OK is returned with *grad_norm = NaN or inf (the
 * caller decides). grads NULL: the gradients were summed into this rank's
 * block already (zero_add_range). */
bt_status zero_step(zero *z, void *params, float *grads, double lr, int64_t step,
                    double *grad_norm);

/* Gradients sharded (ZeRO-2): this rank's block of the summed gradients
 * gathered range by range while the backward produces them, instead of
 * reduce-scattered from a whole buffer [n_params] at the step.
 * zero_clear_gradients zeroes the block (before a step's first
 * micro-batch). zero_add_range sums grad [end - begin], the gradients of
 * the flat range [begin, end) in the optimizer's memory, over the ranks in
 * place and adds this rank's part of the sum to its block; collective over
 * the communicator, every rank adding the same ranges in the same order. A
 * step then takes grads NULL. zero_range_bytes: what zero_add_range
 * allocates while it runs, for count floats on size ranks.
 *
 * With the state on the device, the sum runs on NCCL's stream where NCCL
 * carries it (bt_iallreduce_mem), and zero_add_range returns without
 * waiting for it: grad then belongs to the optimizer until zero_add_arrived,
 * which the next zero_add_range, zero_clear_gradients and the step call
 * first. So a caller gives the next range in another buffer (the model's
 * two gradient buckets), and calls zero_add_arrived itself before it
 * writes this one again. */
bt_status zero_clear_gradients(zero *z);
bt_status zero_add_range(zero *z, float *grad, int64_t begin, int64_t end);
size_t zero_range_bytes(int64_t count, int size);
/* Waits for the last range's sum and adds its own part into the block
 * (nothing to do when none is on its way). With the state on the host the
 * sum came before zero_add_range returned, and its own part comes down on
 * the queue: a caller about to wait for its queue calls this before, so that
 * the host adds while the device runs what was queued after the range. */
bt_status zero_add_arrived(zero *z);
/* Stage 3: the parameters [begin, end) of every rank's masters into window
 * (fp32, or rounded to bf16 with bf16 parameters; zero_window_bytes of them,
 * 8-byte aligned), in the optimizer's memory. Every parameter has one owner,
 * so each rank writes the bits of its part of the range and zeros elsewhere,
 * and an integer sum over the ranks (an all-reduce of 64-bit words, which
 * adds disjoint bit fields without a carry) leaves every rank with each
 * owner's bits exactly: -0 and NaN included, and with bf16 parameters half
 * the bytes of an fp32 sum, through no staging buffer. Collective over the
 * communicator, the same ranges on every rank in the same order. */
bt_status zero_gather_range(zero *z, void *window, int64_t begin, int64_t end);
/* zero_gather_range in two halves, so that the caller computes while the
 * window fills: zero_gather_start returns once the sum is on its way
 * (bt_iallreduce_mem; whole where NCCL does not carry it), and
 * zero_gather_arrived waits for it (nothing to do when none is on its way).
 * One gather at a time (BT_ERR_ARG for a second start); the window is the
 * optimizer's until it arrived. */
bt_status zero_gather_start(zero *z, void *window, int64_t begin, int64_t end);
bt_status zero_gather_arrived(zero *z);
/* The bytes of a window zero_gather_range fills with up to count parameters
 * of param_type: whole 8-byte words. */
size_t zero_window_bytes(int64_t count, bk_dtype param_type);

/* bf16 parameters or stage 3 (where the optimizer keeps masters).
 * zero_set_params: this rank's masters from the fp32 parameters full
 * [n_params] (host memory), and with bf16 parameters below stage 3, params
 * [n_params] (bf16, the optimizer's memory) to full rounded to bf16 (else
 * NULL); not collective; 0 or -1 (the device failed, or out of host memory).
 * zero_gather_params: the fp32
 * parameters [n_params] into full (host memory) on every rank, the masters of
 * every shard; collective: a rank without its buffer (full NULL) still takes
 * part, and then every rank fails. */
int zero_set_params(zero *z, const float *full, uint16_t *params);
/* The masters of this rank's shard from own [end - begin] (host memory), as
 * zero_set_params takes them from full; stage 3 only. 0 or -1. */
int zero_set_masters(zero *z, const float *own);
bt_status zero_gather_params(zero *z, float *full);

/* This rank's shard: [*begin, *end) of the flat parameter index. */
void zero_shard(const zero *z, int64_t *begin, int64_t *end);
/* Bytes of optimizer state on this rank (two fp32 moments of its shard). */
size_t zero_state_bytes(const zero *z);
/* Bytes zero_create allocates on rank of size ranks, known before creating
 * it: the two moments of the shard and the gradient block; when n_params is
 * not a multiple of size, the padded work buffer (stage 1, and fp32
 * parameters at stage 2) and the bf16 all-gather buffer (bf16 parameters,
 * stages 1 and 2); the masters of the shard (bf16 parameters, or stage 3);
 * nothing more at stage 3. */
size_t zero_bytes(int64_t n_params, int size, int rank, bk_dtype param_type,
                  zero_sharding sharding);
/* Of those, the bytes in host memory: with state_on_host the state and the
 * range's host buffer, else 0 (zero_bytes then counts the rest). */
size_t zero_host_bytes(int64_t n_params, int size, int rank, bk_dtype param_type,
                       zero_sharding sharding);
/* 1 when the state (masters, moments) is host memory: a host queue's
 * optimizer, or state_on_host. */
int zero_state_on_host(const zero *z);
/* Bytes a step of n_params parameters on size ranks allocates while it runs:
 * at stage 1 the transport's reduce-scatter; at stages 2 and 3 the sum of
 * the longest range (zero_range_bytes of range_floats). */
size_t zero_step_bytes(int64_t n_params, int size, zero_sharding sharding);
/* Moments of this rank's shard, for checkpoints: [shard size] each, in the
 * state's memory (zero_state_on_host). */
float *zero_moment1(zero *z);
/* The fp32 masters of this rank's shard [end - begin] (bf16 parameters or
 * stage 3; else NULL), in the state's memory. A caller may write them
 * (a checkpoint's load) before the next gather: what a gather copies up is
 * made again from them then. */
float *zero_masters(zero *z);
float *zero_moment2(zero *z);

/* The model's side (model.h). ZeRO's windows (stages 2 and 3), each a
 * buffer of its own: the embedding's, bucket 0 and bucket 1; their lengths
 * in parameters of m into floats[3], for the memory count and the
 * allocation alike. */
void zero_window_floats(const model_layout *m, int64_t floats[3]);
/* The sharding of a run of m at stage, with the state on the host or not:
 * range_floats is its longest window. */
zero_sharding zero_sharding_for(const model_layout *m, int stage, int state_on_host);
/* The bytes of the parameters and of the gradients a pass of m reads and
 * writes at stage, of param_type: the whole buffers [n_params] (bf16 rounded
 * up to whole floats, as a buffer of floats holds them), or the windows:
 * the gradients' (fp32) at stages 2 and 3, the parameters' at stage 3
 * (zero_window_bytes each). */
void zero_model_bytes(const model_layout *m, bk_dtype param_type, int stage, size_t *params,
                      size_t *grads);
/* z's windows of m, zeroed, in the memory of its queue, z's until
 * zero_free: zero_make_param_windows the parameters' (stage 3, of their
 * type), zero_make_grad_windows the gradients' (stages 2 and 3); nothing at
 * the other stages. 0, or -1 with *failed_bytes the bytes of the window that
 * could not be had (those made before it are freed with z). */
int zero_make_param_windows(zero *z, const model_layout *m, size_t *failed_bytes);
int zero_make_grad_windows(zero *z, const model_layout *m, size_t *failed_bytes);
/* Where the model's backward writes the gradients (model.h), z's as long as
 * it lives: at stage 1 the caller's whole [n_params] (in z's memory, which
 * zero_sink_clear and zero_sink_sqnorm then work on, and the caller gives
 * zero_step), at stages 2 and 3 the gradients' windows, each range
 * handed to a hook that adds this rank's squares of it to its finiteness
 * check, then sums it into the block (zero_add_range), the host's time in
 * both the exposed reduction time. */
const model_grads *zero_grad_sink(zero *z, float *whole);
/* Stage 3: how a pass fills the parameters' windows from every rank's
 * masters (model_gather; zero_gather_start, zero_gather_arrived), the host's
 * time in both the exposed gather time; z's as long as it lives. NULL at the
 * other stages: the model reads whole parameters. */
const model_gather *zero_param_source(zero *z);
/* A step's gradients through the sink, around the model's passes.
 * zero_sink_clear, before the first micro-batch: the gradients to zero (the
 * whole buffer, or the block: zero_clear_gradients), and the squares, the
 * exposed times and the fault too. zero_sink_arrived, after every
 * micro-batch but the last (the next pass opens the embedding's window
 * again): the last range's sum added (zero_add_arrived), its wait exposed
 * reduction time; nothing at stage 1. zero_sink_sqnorm: this rank's squared
 * gradients of the step before the reduction, its finiteness check (squares
 * of finite floats sum to a finite double): of the whole buffer, or those the
 * hook added range by range. */
bt_status zero_sink_clear(zero *z);
bt_status zero_sink_arrived(zero *z);
bt_status zero_sink_sqnorm(zero *z, double *sq);
/* A testing aid: value (0: none) written over the first parameter's
 * gradient of the micro-batch about to run, once the sink holds it whole: in
 * the windows by the hook, before the squares of its range; in the whole
 * buffer, the micro-batches' sum, by zero_sink_sqnorm. */
void zero_sink_fault(zero *z, float value);
/* The host's seconds in the sink's range reductions (stages 2 and 3) and in
 * the source's gathers (stage 3), starting them and waiting for them, since
 * zero_sink_clear: ZeRO's exposed time on this rank. */
void zero_exposed_times(const zero *z, double *reduce_s, double *gather_s);

/* Learning rate at a step (1-based): warm-up from 0 to lr over warmup steps,
 * then cosine to min_lr at total_steps. */
double lr_schedule(double lr, double min_lr, int64_t warmup, int64_t total_steps, int64_t step);

#endif
