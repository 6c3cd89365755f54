/* model.h: a LLaMA-style decoder (token embedding; per layer RMSNorm, Q/K/V
 * projections, RoPE at global positions, distributed attention (GQA), output
 * projection, residual, RMSNorm, SwiGLU MLP, residual; final RMSNorm; LM head
 * fused with the loss), its parameters as one flat buffer (fp32, or bf16 on a
 * device), and one forward + backward over this rank's share of a sequence.
 *
 * Activation memory follows the checkpoint policy: each layer keeps its input
 * and the attention output O (bf16 with bf16_matmul, the input rounded as it
 * enters the layer) and lse (fp32) of a fraction of the local tokens, keyed
 * by (layer, micro-batch) and checked on retrieval; a micro-batch's forward and
 * backward run back to back, so one set is kept, that of the micro-batch in
 * flight. Norms, projections and the MLP are recomputed in the backward, and
 * so is the attention of the tokens not kept (with zigzag and fraction 1/2:
 * the early chunk, through a ring over the first half of the sequence only —
 * a quarter of the causal FLOPs, half of the K/V traffic). */
#ifndef BURST_MODEL_H
#define BURST_MODEL_H

#include <stdint.h>

#include "kernels/kernels_common.h"
#include "kernels/ops_math.h"
#include "src/train/lm_head.h"
#include "src/attn/ring.h"
#include "src/train/choices.h"

typedef struct {
    int layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab;
    int tied;
    bk_rope rope;
    float norm_eps;
} model_dims;

/* Offsets (in floats) of every tensor in the flat parameter buffer. Matrices
 * are [in, out] row-major (y = x W), the embedding and the head [V, D]. */
typedef struct {
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate_up, w_down;
} layer_offsets;

typedef struct {
    model_dims dims;
    int64_t n_params;
    int64_t embed, head, final_norm;
    layer_offsets *layer; /* [layers] */
} model_layout;

/* 0, or -1 when the table of layers cannot be allocated. */
int model_layout_init(model_layout *m, const model_dims *d);
void model_layout_free(model_layout *m);
/* Seeded and counter-based: parameter i gets the same value whatever the
 * number of ranks. Norm gains are 1, matrices N(0, std^2). */
void model_init_params(const model_layout *m, float *params, uint64_t seed, double std);
/* The same values for parameters [begin, end) alone, into out [end - begin]. */
void model_init_params_range(const model_layout *m, float *out, int64_t begin, int64_t end,
                             uint64_t seed, double std);
/* 1 for matrices (weight decay), 0 for norm gains. */
void model_decay_mask(const model_layout *m, uint8_t *mask);
/* Forward FLOPs of one sequence of N tokens (matrix products and attention,
 * with the mask's fraction of attention pairs), for throughput reports. */
double model_flops_per_sequence(const model_layout *m, int64_t N, double attn_pair_fraction);
/* FLOPs of a training step over `sequences` sequences of N tokens: 3 x their
 * forward (the backward counted as twice the forward; recompute not counted),
 * attention by the mask's fraction of pairs: the MFU's count. */
double model_train_flops(const model_layout *m, int64_t N, double attn_pair_fraction,
                         double sequences);

/* Tokens per chunk by default of all that runs token by token (the norms,
 * the MLP, the head): their buffers [chunk, 2 d_ff] and [chunk, d_model]
 * stay small at any sequence length, and the products stay large. */
enum { MODEL_CHUNK_ROWS = 4096 };

typedef struct model_runner model_runner;

typedef struct {
    const model_layout *model;
    bt_comm *cp;                 /* context-parallel group */
    bt_comm *ulysses_group;      /* with layout.U > 1: this rank's Ulysses group, and the ring */
    bt_comm *ulysses_ring;       /* over the groups' matching members (src/attn/ulysses.h);
                                  * NULL offline */
    seq_layout layout;           /* of the sequence over the cp group (its Ulysses groups) */
    ring_topology topo;
    int nodes;                   /* for the double ring */
    bk_attn_mask mask;           /* choose_mask's (positions are global); a block-sparse
                                  * bitmap must outlive the runner */
    ring_bwd_choice backward;
    int64_t piece_rows;          /* query rows per kernel call in the ring; 0: the default */
    int64_t chunk_rows;          /* tokens per chunk of the norms, the MLP and the head (their
                                  * buffers hold one chunk); 0: MODEL_CHUNK_ROWS */
    train_keep keep;             /* attention outputs kept: none, half (zigzag + causal), all */
    int keep_layers;             /* each layer's intermediates kept, not recomputed, for the
                                  * backward ([memory] keep_layers) */
    int offload_activations;     /* on a device queue: each layer's stored input, kept O
                                  * and lse in page-locked host memory, through two
                                  * device slots ([memory] offload_activations); ignored
                                  * on the host */
    int micro_batches;           /* micro-batches of a step: mb in [0, micro_batches) */
    int fused_head;
    int bf16_matmul; /* bf16 parameters and the layers' matrix products on bf16
                      * operands (a device queue): the parameters as they are, the
                      * activations and gradients rounded as they enter, fp32
                      * accumulation and results; the norm gains, the embedding
                      * and the LM head read an fp32 copy widened at each step;
                      * the stored activations bf16 */
    lm_head_opts head;
    int ring_bf16; /* Q, K, V and dO travel the rings in bf16 (choose_ring_bf16),
                    * else fp32 (ring_exec_ctx.in_type) */
    int sdpa;      /* the rings' block pairs on SDPA calls where they map (choose_sdpa:
                    * a device, ring_bf16, a mask ring_sdpa_supported takes) */
    const bk_queue *queue;
} model_runner_config;

/* The rings a runner of cfg runs, planned alone (`burst plan time`): the
 * forward, the backward cfg->backward chooses and, with keep = half, the
 * half-sequence ring of the recompute (else NULL), each step's pairs
 * counted. 0, or -1 with err (a
 * document mask: its rings follow each sample's documents). */
typedef struct {
    ring_schedule *fwd, *bwd, *half;
} model_rings;
int model_runner_plan_rings(const model_runner_config *cfg, model_rings *out, char *err,
                            size_t err_len);
void model_rings_free(model_rings *rings);

/* The bytes a runner holds, by part. */
typedef struct {
    size_t stored;      /* per layer its input [n, D] and the kept O [n_kept, Hq*hd] (2 bytes
                           each with bf16_matmul, else 4), lse [n_kept, Hq] (4 bytes), and
                           with keep_layers its intermediates (model_internal.h, fp32) */
    size_t workspace;   /* the layer's work buffers [n, ...] and [chunk, ...], positions [n],
                           the head's scratch */
    size_t ring;        /* the ring's slots, accumulators and position tables */
    size_t sdpa;        /* with sdpa: the SDPA calls' block output, Stats, gradients and
                           workspace (src/attn/ring_sdpa.h), per layout the rings use */
    size_t head_logits; /* the reference head's logits [chunk, V] + losses [chunk], made at
                           each chunk (0 with the fused head) */
    size_t offloaded;   /* with offload_activations on a device: every layer's stored input,
                           kept O and lse in page-locked host memory (stored then counts
                           the two device slots they pass through instead) */
} model_memory;


/* What model_runner_create(cfg) allocates, known before allocating anything
 * large: 0, or -1 with err for a configuration the runner refuses. */
int model_runner_memory(const model_runner_config *cfg, model_memory *mem, char *err, size_t err_len);
/* Plans the ring and allocates every buffer; NULL with err for a refused
 * configuration or an allocation that failed (err names its size). */
model_runner *model_runner_create(const model_runner_config *cfg, char *err, size_t err_len);
void model_runner_free(model_runner *r);
/* What r's buffers of each part (stored, workspace, ring) took of the
 * queue's memory as they were made (bk_held_bytes): measured, not counted. */
model_memory model_runner_held(const model_runner *r);

/* Under a document mask: the document ids [N] of the global positions of the
 * sequence the next forward (and backward) computes, the same on every rank
 * of the CP group. The rings are planned again for them, so a K/V or query
 * block is only sent to the ranks whose tokens share a document with it. A
 * runner starts with one document. Without a document mask: nothing to do.
 * 0, or -1 with a message (ids that decrease along the sequence). */
int model_runner_set_documents(model_runner *r, const int32_t *segments, char *err,
                               size_t err_len);

/* The parameters a pass reads [n_params], in the memory of the runner's
 * queue: fp32, or bf16 with bf16_matmul; the other pointer NULL. Both NULL
 * when the runner gathers them (model_runner_gather). */
typedef struct {
    const float *f32;
    const uint16_t *bf16;
} model_params;

/* Parameters sharded ([parallel] zero = 3): a pass reads them from windows
 * of the parameters' type, each a buffer of its own: the embedding's [V D]
 * (with a tied head's), filled at a step's first pass and held to its end,
 * and two buckets for the tail (the final norm and an untied head) and the
 * layers, each range in its bucket (model_bucket_of). While the pass
 * computes with the range in one bucket, the next range it needs fills the
 * other: the next
 * layer (the tail after the last) in the forward, the layer below in the
 * backward. A range a bucket still holds from earlier in the step is not
 * filled again (the last layer and the tail, between the forward and the
 * backward; the first two layers, between micro-batches). start: begins
 * filling window with the range [begin, end), collective as the caller's
 * gathering is; wait: returns once the fill last started is complete (one
 * fill at a time); BT_OK or the error the pass returns. */
typedef struct {
    void *embed, *bucket[2];
    bt_status (*start)(void *ctx, void *window, int64_t begin, int64_t end);
    bt_status (*wait)(void *ctx);
    void *ctx;
} model_gather;
/* From now on the runner's passes read the parameters through g (kept; NULL:
 * the model_params given to each pass again). */
void model_runner_gather(model_runner *r, const model_gather *g);

typedef struct {
    double attn_fwd_s, attn_bwd_s, attn_recompute_s; /* wall time in the ring */
    double attn_wait_s;                              /* exposed communication */
    double offload_wait_s; /* the host's wait for offloaded inputs coming back: exposed copies */
} model_step_stats;

/* Where a backward writes the fp32 gradients, in the memory of the runner's
 * queue. Whole: one buffer [n_params], accumulated (+=) over the micro-batches
 * of a step. Windowed (gradients sharded, [parallel] zero = 2): the backward
 * produces the flat index range by range, each in a window that starts at
 * zero for the range, and hands each range to `complete` as soon as the
 * micro-batch's gradients of it are whole: the tail [final_norm, n_params)
 * (the final norm and an untied head) first, then each layer from the last,
 * then the embedding [embed, embed + V D) (with a tied head's). */
typedef struct {
    float *whole;     /* [n_params], or NULL: windowed */
    float *embed;     /* windowed: the embedding's window [V D] */
    float *bucket[2]; /* windowed: every other range's window, in its bucket
                         (model_bucket_of, [model_bucket_floats]), so that `complete` may
                         still read one range's while the backward writes the next
                         (each a buffer of its own) */
    /* windowed: the gradients of [begin, end) in grad [end - begin], the
     * queue's work on them possibly still queued; grad is the callee's until
     * the pass opens that window again for the range after next (the
     * embedding's: the next micro-batch's pass); BT_OK, or the error the
     * pass returns */
    bt_status (*complete)(void *ctx, float *grad, int64_t begin, int64_t end);
    void *ctx;
} model_grads;

/* The floats of the embedding [V D] (with a tied head's): ZeRO's embedding
 * window. */
int64_t model_embed_floats(const model_layout *m);
/* ZeRO's two buckets (model_grads, model_gather): the one that takes the
 * range starting at begin, a layer's or the tail's: the tail bucket 0,
 * layer l bucket (layers - l) mod 2. So consecutive ranges of a pass alternate,
 * forward (layer 0 up, then the tail) and backward (the tail, then layer
 * layers - 1 down), and bucket 1 never holds the tail, the longest range
 * with an untied head. model_bucket_floats: the floats of bucket k, its
 * longest range. */
int model_bucket_of(const model_layout *m, int64_t begin);
int64_t model_bucket_floats(const model_layout *m, int k);
/* Where ZeRO's windows hold the parameter (or gradient) at flat offset at:
 * the embedding's window [V D] (*in_embed set) or the bucket holding the
 * range [begin, end); the element offset there, or -1 in neither. */
int64_t model_window_offset(const model_layout *m, int64_t at, int64_t begin, int64_t end,
                            int *in_embed);
/* Layer l's range [*begin, *end) of the flat index. */
void model_layer_range(const model_layout *m, int l, int64_t *begin, int64_t *end);

/* One forward + backward of micro-batch mb over this rank's tokens [n] (their
 * labels [n], ignore_index where nothing is predicted), the gradients into
 * grads (model_grads). loss_scale multiplies every gradient (1 / valid tokens
 * of the whole step over all ranks). Adds this rank's unscaled loss sum and
 * valid count. With bf16 parameters their fp32 copy is widened at micro-batch
 * 0: params must not change between the micro-batches of a step. BT_ERR_ARG
 * for parameters of the other type. */
bt_status model_forward_backward(model_runner *r, int mb, model_params params,
                                 const model_grads *grads, const int64_t *tokens,
                                 const int64_t *labels, float loss_scale, double *loss_sum,
                                 int64_t *n_valid, model_step_stats *stats);

/* Forward only (collective over the CP group, like a training step): the
 * negative log-likelihood of labels [n] (ignore_index rows skipped) added to
 * *loss_sum (nats, summed) and *n_valid, and with row_loss each row's into
 * row_loss [n] on the host (0 for ignored rows). Needs the fused head
 * (model_runner_config.fused_head, or bf16 parameters). */
bt_status model_forward_loss(model_runner *r, model_params params, const int64_t *tokens,
                             const int64_t *labels, double *loss_sum, int64_t *n_valid,
                             float *row_loss);

/* Forward only (collective over the CP group, like a training step): the
 * most likely next token at local rows[n_rows] of this rank's tokens [n]. */
bt_status model_predict(model_runner *r, model_params params, const int64_t *tokens,
                        const int64_t *rows, int n_rows, int64_t *predicted);

#endif
