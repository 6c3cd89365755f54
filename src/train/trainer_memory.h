/* trainer_memory.h: the bytes one rank of a run needs, by part, counted from
 * the configuration before anything is allocated (trainer_memory.c): what
 * the memory report prints, the setup's check compares and `burst plan
 * memory` answers for a cluster without starting it (trainer_plan_offline,
 * the same count, in trainer.c). */
#ifndef BURST_TRAIN_TRAINER_MEMORY_H
#define BURST_TRAIN_TRAINER_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "src/train/config.h"
#include "src/train/model.h"

/* The bytes of one rank's training state, by part, known before any of it is
 * allocated: what the memory report prints and the pre-check compares. */
typedef struct {
    size_t params, grads; /* [n_params] each: parameters fp32 or bf16, gradients fp32;
                             with zero >= 2 the gradients' windows, with zero = 3 the
                             parameters' (the embedding's and a bucket each) */
    int zero_stage;       /* the stage counted (the parts' names say what it shards) */
    size_t optimizer;     /* moments (and with bf16 parameters the fp32 masters) of the
                             shard, reduce buffers (zero_bytes) */
    size_t optimizer_host; /* of those, in host memory with [memory] optimizer = host
                              (zero_host_bytes; optimizer then counts the rest) */
    size_t tokens;        /* tokens and labels [micro_batches][n] */
    size_t segments;      /* document ids [micro_batches][seq_len + 1] (document mask) */
    size_t whole_sample;  /* the recall source's sample, tokens and labels [seq_len] each */
    model_memory model;   /* stored activations, workspace, ring buffers, head logits */
    size_t reduce_copy;   /* the optimizer step's reduce-scatter, or at zero >= 2 the sum of
                             the longest range (zero_step_bytes) */
    size_t arena_margin;  /* on a device: what the arena adds to the device parts, for
                             its alignment and the kernels' scratch (0 on the host) */
    size_t nccl;          /* on a device in a node NCCL serves: NCCL's own buffers,
                             estimated (bt_nccl_buffer_bytes), outside the arena */
} trainer_memory;

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

/* The most m holds at once: every part, but only the larger of the two
 * transients, which live at different times of a step (the reference head's
 * logits in the forward, the reduce-scatter's copy in the optimizer). */
size_t trainer_memory_total(const trainer_memory *m);
/* The parts of m, named, as one line of text ("parameters 1.2 MiB, ..."). */
void trainer_memory_parts(const trainer_memory *m, char *buf, size_t len);
/* The same parts one by one, in that order (the two transients last; NCCL's
 * buffers only where counted): their name, a key for scripts and the bytes,
 * into out [TRAINER_MEMORY_PARTS]; returns how many. */
enum { TRAINER_MEMORY_PARTS = 13 };
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
/* The device arena's capacity: trainer_device_bytes plus m->arena_margin, rounded up
 * to BK_ARENA_ALIGN as the arena rounds it. */
size_t trainer_arena_bytes(const trainer_memory *m);

/* What trainer_plan_offline counts of rank 0. */
typedef struct {
    trainer_memory mem;
    int64_t n_params;        /* the model's parameters */
    int64_t tokens_per_rank; /* of a sequence, each context-parallel rank's */
    int zero_stage;          /* the stage counted */
    int on_device;           /* [train] device = cuda: a GPU per rank */
    char nccl_basis[256];    /* the figures NCCL's buffers (mem.nccl) were estimated from */
} trainer_memory_plan;

/* What trainer_setup counts of rank 0's memory for cfg (with a ZeRO stage:
 * zero = auto is the caller's to choose, as the fit depends on the cluster
 * it describes) on a world of world_size ranks on `nodes` nodes, without a
 * world, a device or any large allocation: `burst plan memory`. 0, or -1
 * with err. */
int trainer_plan_offline(const train_config *cfg, int world_size, int nodes,
                         trainer_memory_plan *out, char *err, size_t err_len);

/* What one step of cfg runs on rank 0, planned as trainer_plan_offline
 * plans its memory (with it): `burst plan time` prices it. */
typedef struct {
    trainer_memory_plan memory;
    model_dims dims;
    int ranks, nodes, dp, cp, micro_batches;
    double flops_per_step;   /* the trainer's count (model_train_flops) of every sequence of
                                a step, attention by the pairs the mask allows (all ranks) */
    int64_t tokens_per_step; /* every sequence of a step: seq_len x dp x micro_batches */
    train_keep keep;         /* attention outputs kept: none, half, all */
    int keep_layers, bf16_matmul, sdpa;
    model_rings rings; /* the forward, backward and (keep half) recompute rings */
} trainer_step_plan;
int trainer_plan_step_offline(const train_config *cfg, int world_size, int nodes,
                              trainer_step_plan *out, char *err, size_t err_len);
void trainer_step_plan_free(trainer_step_plan *p);

#endif
