/* optimizer.h: AdamW with ZeRO over the world (stages 1 to 3, zero1_sharding:
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
 * state_on_host (zero1_sharding) the parameters and gradients of the device,
 * the state on the host. */
#ifndef BURST_OPTIMIZER_H
#define BURST_OPTIMIZER_H

#include <stdint.h>

#include "kernels/device.h"
#include "kernels/kernels_common.h"
#include "transport/transport.h"

typedef struct {
    double beta1, beta2, eps, weight_decay;
    double grad_clip; /* max global norm; 0 = no clipping */
} zero1_hparams;

typedef struct zero1 zero1;

/* What is sharded beyond the optimizer's state (the ZeRO stage): 1 nothing,
 * the gradients reduce-scattered from a whole buffer at the step; 2 the
 * gradients, summed range by range (zero1_add_range); 3 the parameters too:
 * this rank keeps the fp32 masters of its shard and no step all-gathers
 * them; a pass gathers the range it uses (zero1_gather_range). */
typedef struct {
    int stage; /* 1, 2 or 3 */
    /* With a device queue and bf16 parameters at stage 2 or 3: the shard's
     * state (masters, moments, the summed gradient block) in host memory and
     * its update on the CPU ([memory] optimizer = host); each range's own
     * part of the gradients comes down through a host buffer of range_floats
     * floats (at least the longest range zero1_add_range is given), added
     * into the block at the next range or step, so that the host's addition
     * overlaps the device's work queued after the range. */
    int state_on_host;
    int64_t range_floats;
} zero1_sharding;

/* n_params parameters of param_type (BK_F32 or BK_BF16); decay_mask
 * [n_params] (1 = apply weight decay, 0 = not, e.g. norm gains), host memory,
 * copied; NULL = decay everything. q: the queue of the step's kernels and the
 * memory of every buffer (NULL: the host). Collective over comm. With BK_BF16,
 * or at stage 3, the masters start at zero: zero1_set_params gives them their
 * values. */
zero1 *zero1_create(bt_comm *comm, int64_t n_params, const uint8_t *decay_mask,
                    const zero1_hparams *hp, const bk_queue *q, bk_dtype param_type,
                    zero1_sharding sharding);
void zero1_free(zero1 *z);

/* One step (step counts from 1). grads are reduced in place (their content
 * afterwards is unspecified); params are updated on every rank (stage 3:
 * the masters alone, params NULL). *grad_norm is
 * the global norm before clipping; when it is not finite nothing is updated
 * and BT_OK is returned with *grad_norm = NaN or inf (the caller decides).
 * grads NULL: the gradients were summed into this rank's block already
 * (zero1_add_range). */
bt_status zero1_step(zero1 *z, float *params, float *grads, double lr, int64_t step,
                     double *grad_norm);
/* The same step with bf16 parameters: the masters of the shard are updated,
 * and params [n_params] (bf16, the optimizer's memory) become every rank's
 * masters rounded to bf16. */
bt_status zero1_step_bf16(zero1 *z, uint16_t *params, float *grads, double lr, int64_t step,
                          double *grad_norm);

/* Gradients sharded (ZeRO-2): this rank's block of the summed gradients
 * gathered range by range while the backward produces them, instead of
 * reduce-scattered from a whole buffer [n_params] at the step.
 * zero1_clear_gradients zeroes the block (before a step's first
 * micro-batch). zero1_add_range sums grad [end - begin], the gradients of
 * the flat range [begin, end) in the optimizer's memory, over the ranks in
 * place and adds this rank's part of the sum to its block; collective over
 * the communicator, every rank adding the same ranges in the same order. A
 * step then takes grads NULL. zero1_range_bytes: what zero1_add_range
 * allocates while it runs, for count floats on size ranks.
 *
 * With the state on the device, the sum runs on NCCL's stream where NCCL
 * carries it (bt_iallreduce_mem), and zero1_add_range returns without
 * waiting for it: grad then belongs to the optimizer until zero1_add_arrived,
 * which the next zero1_add_range, zero1_clear_gradients and the step call
 * first. So a caller gives the next range in another buffer (the model's
 * two gradient buckets), and calls zero1_add_arrived itself before it
 * writes this one again. */
bt_status zero1_clear_gradients(zero1 *z);
bt_status zero1_add_range(zero1 *z, float *grad, int64_t begin, int64_t end);
size_t zero1_range_bytes(int64_t count, int size);
/* Waits for the last range's sum and adds its own part into the block
 * (nothing to do when none is on its way). With the state on the host the
 * sum came before zero1_add_range returned, and its own part comes down on
 * the queue: a caller about to wait for its queue calls this before, so that
 * the host adds while the device runs what was queued after the range. */
bt_status zero1_add_arrived(zero1 *z);
/* Stage 3: the parameters [begin, end) of every rank's masters into window
 * (fp32, or rounded to bf16 with bf16 parameters; zero1_window_bytes of them,
 * 8-byte aligned), in the optimizer's memory. Every parameter has one owner,
 * so each rank writes the bits of its part of the range and zeros elsewhere,
 * and an integer sum over the ranks (an all-reduce of 64-bit words, which
 * adds disjoint bit fields without a carry) leaves every rank with each
 * owner's bits exactly: -0 and NaN included, and with bf16 parameters half
 * the bytes of an fp32 sum, through no staging buffer. Collective over the
 * communicator, the same ranges on every rank in the same order. */
bt_status zero1_gather_range(zero1 *z, void *window, int64_t begin, int64_t end);
/* zero1_gather_range in two halves, so that the caller computes while the
 * window fills: zero1_gather_start returns once the sum is on its way
 * (bt_iallreduce_mem; whole where NCCL does not carry it), and
 * zero1_gather_arrived waits for it (nothing to do when none is on its way).
 * One gather at a time (BT_ERR_ARG for a second start); the window is the
 * optimizer's until it arrived. */
bt_status zero1_gather_start(zero1 *z, void *window, int64_t begin, int64_t end);
bt_status zero1_gather_arrived(zero1 *z);
/* The bytes of a window zero1_gather_range fills with up to count parameters
 * of param_type: whole 8-byte words. */
size_t zero1_window_bytes(int64_t count, bk_dtype param_type);

/* bf16 parameters or stage 3 (where the optimizer keeps masters).
 * zero1_set_params: this rank's masters from the fp32 parameters full
 * [n_params] (host memory), and with bf16 parameters below stage 3, params
 * [n_params] (bf16, the optimizer's memory) to full rounded to bf16 (else
 * NULL); not collective; 0 or -1 (the device failed, or out of host memory).
 * zero1_gather_params: the fp32
 * parameters [n_params] into full (host memory) on every rank, the masters of
 * every shard; collective: a rank without its buffer (full NULL) still takes
 * part, and then every rank fails. */
int zero1_set_params(zero1 *z, const float *full, uint16_t *params);
/* The masters of this rank's shard from own [end - begin] (host memory), as
 * zero1_set_params takes them from full; stage 3 only. 0 or -1. */
int zero1_set_masters(zero1 *z, const float *own);
bt_status zero1_gather_params(zero1 *z, float *full);

/* This rank's shard: [*begin, *end) of the flat parameter index. */
void zero1_shard(const zero1 *z, int64_t *begin, int64_t *end);
/* Bytes of optimizer state on this rank (two fp32 moments of its shard). */
size_t zero1_state_bytes(const zero1 *z);
/* Bytes zero1_create allocates on rank of size ranks, known before creating
 * it: the two moments of the shard and the gradient block; when n_params is
 * not a multiple of size, the padded work buffer (stage 1, and fp32
 * parameters at stage 2) and the bf16 all-gather buffer (bf16 parameters,
 * stages 1 and 2); the masters of the shard (bf16 parameters, or stage 3);
 * nothing more at stage 3. */
size_t zero1_bytes(int64_t n_params, int size, int rank, bk_dtype param_type,
                   zero1_sharding sharding);
/* Of those, the bytes in host memory: with state_on_host the state and the
 * range's host buffer, else 0 (zero1_bytes then counts the rest). */
size_t zero1_host_bytes(int64_t n_params, int size, int rank, bk_dtype param_type,
                        zero1_sharding sharding);
/* 1 when the state (masters, moments) is host memory: a host queue's
 * optimizer, or state_on_host. */
int zero1_state_on_host(const zero1 *z);
/* Bytes a step allocates while it runs (the transport's reduce-scatter). */
size_t zero1_step_bytes(int64_t n_params, int size);
/* Moments of this rank's shard, for checkpoints: [shard size] each, in the
 * state's memory (zero1_state_on_host). */
float *zero1_moment1(zero1 *z);
/* The fp32 masters of this rank's shard [end - begin] (bf16 parameters or
 * stage 3; else NULL), in the state's memory. A caller may write them
 * (a checkpoint's load) before the next gather: what a gather copies up is
 * made again from them then. */
float *zero1_masters(zero1 *z);
float *zero1_moment2(zero1 *z);

/* Learning rate at a step (1-based): warm-up from 0 to lr over warmup steps,
 * then cosine to min_lr at total_steps. */
double lr_schedule(double lr, double min_lr, int64_t warmup, int64_t total_steps, int64_t step);

#endif
