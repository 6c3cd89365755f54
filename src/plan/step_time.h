/* step_time.h: one training step priced before it runs (`burst plan time`).
 *
 * A step is what src/train/model_pass.c runs, per micro-batch on each rank's
 * n tokens, then the optimizer's step:
 *   per layer: the products (forward, backward twice the forward, and without
 *     keep_layers the backward's recompute of Q, K, V, Wo and gate/up), the
 *     forward ring, the recompute ring (the whole forward ring with nothing
 *     kept, the half-sequence ring with half, none with all), the backward
 *     ring, and the passes over memory (norms, RoPE, SwiGLU, residual adds:
 *     step_layer_pass_bytes);
 *   the head (its three products, the cross-entropy's passes), the embedding;
 *   per step: AdamW over the rank's shard, and ZeRO's collectives over every
 *   rank (reduce-scatter of the gradients, all-gather of the parameters; at
 *   stages 2 and 3 they run while the layers compute, so only what outlasts
 *   the layers is exposed).
 * Compute is priced by the profile's rates (products by FLOPs over the GEMM
 * rate, passes by bytes over the elementwise bandwidth, rings by
 * ring_time.h); a part's time is its compute plus its exposed communication. */
#ifndef BURST_PLAN_STEP_TIME_H
#define BURST_PLAN_STEP_TIME_H

#include <stddef.h>

#include "src/plan/profile.h"
#include "src/plan/ring_time.h"
#include "src/train/trainer_memory.h"

typedef struct {
    const char *name;
    double compute_s, comm_s, exposed_s;
} step_part;

/* The parts of one layer (one micro-batch), then those of the step. */
enum {
    PART_PRODUCTS = 0,
    PART_ATTN_FORWARD,
    PART_ATTN_RECOMPUTE,
    PART_ATTN_BACKWARD,
    PART_PASSES,
    LAYER_PARTS,
    PART_LAYERS = LAYER_PARTS, /* every layer of every micro-batch */
    PART_HEAD,                 /* the head and the embedding, every micro-batch */
    PART_OPTIMIZER,
    PART_COLLECTIVES,
    STEP_PARTS
};

typedef struct {
    step_part part[STEP_PARTS];
    ring_pass_time ring[3]; /* forward, recompute (total_s 0: none), backward */
    double layer_s;         /* one layer of one micro-batch */
    double step_s;
    double tokens_per_s_per_rank;
    double mfu; /* the trainer's FLOPs / (step_s x ranks x the profile's peak) */
    char bottleneck[160];
} step_time;

/* Bytes one token's passes over memory move in one layer (forward,
 * backward, and the recompute without keep_layers), fp32 elements. */
double step_layer_pass_bytes(const model_dims *d, int keep_layers);

/* Prices t with p, ranks on nodes of per_node: 0, or -1 with err naming
 * the profile row it lacks. */
int step_time_price(const trainer_step_plan *t, const plan_profile *p, int per_node, step_time *out,
                    char *err, size_t err_len);

#endif
