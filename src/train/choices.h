/* choices.h: the configuration's choices as the engine's types, decided in one
 * place. The configuration keeps each choice as the value of its key (config.h,
 * parsed once where the configuration is read); every rule that turns those
 * values into a layout, a mask, a ring or a policy is here, once, and both the
 * validation of a configuration and the trainer use it. */
#ifndef BURST_TRAIN_CHOICES_H
#define BURST_TRAIN_CHOICES_H

#include <stdint.h>

#include "kernels/attention.h"
#include "src/attn/ring_plan.h"
#include "src/attn/ring_sdpa.h"
#include "src/attn/seq_layout.h"
#include "src/train/config.h"

/* Which tokens keep their attention output between forward and backward. */
typedef enum { KEEP_NONE = 0, KEEP_HALF = 1, KEEP_ALL = 2 } train_keep;

typedef struct {
    seq_layout_kind layout;
    bk_attn_mask mask; /* positions are global */
    ring_bwd_choice backward;
    train_ring_choice ring;
    train_source_kind source;
    int shuffled; /* hdf5 sampling: a seeded permutation of the windows */
    int recall;   /* the synthetic recall task: evaluated after training */
    train_nonfinite on_nonfinite;
    train_keep keep; /* from [memory] attn_kept_fraction */
    int on_device;   /* [train] device = cuda */
    int bf16_matmul; /* bf16 parameters (fp32 masters in the optimizer's shards) and
                      * the layers' products on bf16 operands ([train] matmul) */
    int ring_bf16;   /* Q, K, V and dO travel the attention rings in bf16 */
} train_choices;

/* [parallel] layout, with auto: zigzag under the causal mask (it balances the
 * causal work), contiguous under a window (the work is already balanced and
 * blocks meet fewer neighbours). */
seq_layout_kind choose_layout(train_layout_choice layout, train_mask_choice mask);
/* [parallel] mask: causal; causal within a window of `window` tokens (the
 * query included); causal within documents (the document ids come with every
 * sample: model_runner_set_documents); or causal and block-sparse, whose
 * bitmap choose_sparse_mask adds. */
bk_attn_mask choose_mask(train_mask_choice mask, int64_t window);
/* mask = sparse: [parallel] sparse_pattern over blocks of sparse_block tokens
 * of a seq_len sequence. Checks both (at most CHOICE_SPARSE_MAX_BLOCKS blocks);
 * with bits given, also makes the bitmap (*bits, the caller's to free) and
 * points mask at it. 0, or -1 with a message naming the key. */
enum { CHOICE_SPARSE_MAX_BLOCKS = 16384 }; /* a bitmap of 32 MiB */
int choose_sparse_mask(const char *pattern, int64_t sparse_block, int64_t seq_len,
                       bk_attn_mask *mask, uint64_t **bits, char *err, size_t err_len);
/* 1 when the data are the synthetic recall task (which the evaluation knows
 * how to ask). */
int choose_recall(train_source_kind source, synthetic_task task);
/* [memory] attn_kept_fraction 0, 0.5 or 1. */
train_keep choose_keep(double attn_kept_fraction);
/* 1 when the layers' matrix products take bf16 operands ([train] matmul: bf16,
 * or auto on a device). */
int choose_bf16_matmul(train_device device, train_matmul matmul);
/* 1 when Q, K, V and dO travel the attention rings in bf16: on a device, whose
 * attention kernels round their fp32 inputs to bf16 as they load them, so
 * rounding once at home halves the rings' bytes and slots and changes no
 * result; on the CPU they travel in fp32, which its kernels compute in. */
int choose_ring_bf16(int on_device);
/* Keeping half of the tokens recomputes the attention of the early zigzag
 * chunks through a ring over the first half of the sequence: it needs the
 * zigzag layout and the plain causal mask. */
int keep_half_allowed(seq_layout_kind layout, const bk_attn_mask *mask);

/* One way to hold a run in memory: the ZeRO stage, the share of attention
 * outputs kept, and whether the layers' intermediates are kept. */
typedef struct {
    int zero_stage;
    double kept_fraction;
    int keep_layers;
} memory_choice;
enum { MEMORY_CHOICES_MAX = 3 * 2 * 3 };
/* The memory choices a run may take, fastest first, into out: the values
 * given, and for each left to auto ([parallel] zero = auto: zero_stage 0,
 * attn_kept_fraction TRAIN_KEPT_AUTO, keep_layers TRAIN_AUTO) every value in
 * turn: first the attention outputs kept (1, 0.5 where keep_half_allowed, 0:
 * recomputing attention costs most at long sequences), then the layers'
 * intermediates (kept, then recomputed: a quarter more GEMM FLOPs), then the
 * ZeRO stage (lowest_stage up to 3: the higher, the more gathers). The setup
 * takes the first whose memory fits (the last when none does, for the check
 * to refuse naming the parts). Returns how many. */
int choose_memory_candidates(int zero_stage, int lowest_stage, double kept_fraction,
                             int keep_layers, int half_allowed,
                             memory_choice out[MEMORY_CHOICES_MAX]);
/* The keys a memory choice sets, written into c: [parallel] zero, [memory]
 * attn_kept_fraction and keep_layers. */
void memory_choice_apply(const memory_choice *ch, train_config *c);

/* [attention] kernel and deterministic: 1 when the rings' block pairs go to
 * SDPA calls (cuDNN's fused attention) where they map, 0 when they all run on
 * our kernels, with the reason in why either way (the start report prints
 * it); -1 when kernel = cudnn cannot be had, why naming the key and what is
 * missing. SDPA needs a device, inputs travelling in bf16 and a ring
 * ring_sdpa_supported takes; deterministic keeps our kernels (cuDNN's Hopper
 * backward sums dQ with atomics). offline: counting for another machine
 * (burst plan memory), whose cuDNN is taken to be there. */
int choose_sdpa(train_attn_kernel kernel, int deterministic, int on_device, int ring_bf16,
                const ring_sdpa_config *rc, int offline, char *why, size_t why_len);

/* The topology of a CP group of cp ranks in a world of `nodes` nodes with
 * local_size ranks each: double when asked or (auto) when the group spans
 * several nodes evenly. Sets *cp_nodes; -1 when double is asked but the group
 * does not span several nodes evenly. */
int choose_topology(train_ring_choice ring, int cp, int nodes, int local_size, ring_topology *topo,
                    int *cp_nodes);

#endif
