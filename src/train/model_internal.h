/* model_internal.h: what the files of the model runner share and nothing
 * outside them sees: the runner itself (its dimensions, buffers and ring
 * passes), the stored activations, and the products and conversions every pass
 * goes through. model_runner.c makes and counts the buffers,
 * model_operands.c holds every difference between fp32 and bf16 operands,
 * model_pass.c runs the forward and the backward. */
#ifndef BURST_MODEL_INTERNAL_H
#define BURST_MODEL_INTERNAL_H

#include <stdint.h>

#include "kernels/ops.h"
#include "src/attn/kernel_status.h"
#include "src/attn/ring_sdpa.h"
#include "src/attn/ulysses.h"
#include "src/train/model.h"

/* With keep_layers, a layer's intermediates as its forward computed them,
 * fp32, for the whole of the rank's n tokens: what the backward would
 * otherwise recompute from the stored input. */
typedef struct {
    float *a, *rstd1; /* [n, D], [n]: the attention norm's output and factors */
    float *q, *k, *v; /* [n, QD], [n, KD], [n, KD]: after RoPE */
    float *x1;        /* [n, D]: x_in + O Wo */
    float *b, *rstd2; /* [n, D], [n]: the MLP norm's output and factors */
    float *g, *s;     /* [n, 2F], [n, F]: gate and up, SwiGLU's output */
} kept_layer;

typedef struct {
    int layer, micro_batch; /* the key this entry was stored under */
    void *x_in;             /* [n, D] the layer's input, in act_bytes elements */
    void *o_kept;           /* [n_kept, Hq*hd] attention output of the kept rows, likewise */
    float *lse_kept;        /* [n_kept, Hq] fp32 always */
    kept_layer kept;        /* with keep_layers; else NULLs */
} stored_layer;

/* The buffers of a stored set that offloading moves, in one order: e's
 * input [n, D] and kept O [n_kept, Hq*hd] (act_bytes elements each), and lse
 * [n_kept, Hq] (fp32; O and lse one element more, so that none is empty):
 * their addresses in e and their bytes. */
enum { STORED_SET = 3 };
void runner_stored_set(const model_runner *r, stored_layer *e, void **buf[STORED_SET],
                       size_t bytes[STORED_SET]);

/* kept_layer's buffers in one order: the attention norm's (a, rstd1; chunk
 * buffers in the workspace), the projections' (q, k, v; whole), the MLP's
 * (chunk buffers): with runner_kept_buffers they are made, copied and freed
 * by one table. */
enum { KEPT_NORM = 2, KEPT_ATTENTION = 5, KEPT_BUFFERS = 10 };

/* Parameters [at, at + count) widened to fp32 at wide. */
typedef struct {
    int64_t at, count;
    float *wide;
} wide_region;

struct model_runner {
    model_runner_config cfg;
    const model_layout *m;
    int64_t n, D, QD, KD, F, V, Hq, n_kept;
    size_t act_bytes;  /* of a stored activation: 2 (bf16, with bf16_matmul) or 4 (fp32) */
    int64_t chunk_rows; /* rows of one chunk: min(n, chunk_rows of the config or the default) */
    int64_t *pos;      /* [n] global positions, for the kernels */
    int64_t *pos_host; /* [n] the same on the host (pos itself there) */
    int32_t *segments; /* [N] document ids (document mask), else NULL */
    /* on a device, a block-sparse mask's bitmap for the kernels (ring.mask's;
     * the plans read the config's, on the host), else NULL */
    uint64_t *mask_bits;
    ring_plan_config ring_cfg;       /* what the rings are planned from, less the segments */
    ring_schedule *fwd, *bwd, *half; /* half: recompute of the early chunks */
    ring_exec_ctx ring;
    ring_sdpa *sdpa, *sdpa_half; /* with cfg.sdpa: the pairs of fwd and bwd, and of half */
    ulysses *uly;                /* with Ulysses groups (layout.U > 1): their buffers, and
                                  * every ring pass runs through them */
    /* [layers]: one micro-batch's forward and backward run back to back, so
     * only the set of the micro-batch in flight is ever live */
    stored_layer *store;
    /* workspace (model_pass.c): [n, ...] for what the ring reads and writes
     * (q, k, v, o, lse, d_o, dq, dk, dv) and the residual streams (x, dx);
     * [chunk_rows, ...] for all that runs token by token: the norms (a,
     * rstd1: the attention norm's and the final norm's), the MLP (x1, b,
     * rstd2, g, s, ds, dg; x1 also takes a chunk of a stored input widened
     * from bf16). The backward's gradients of x1 and of a go into dx and a.
     * d_o is x's memory (x is free in the backward, and holds n * max(D, QD)
     * floats), dq is o's (the ring reads O once, before it writes dQ), and
     * when the ring's inputs travel in bf16 dk and dv are k's and v's (it
     * reads them once, rounding them at home); v follows k in one buffer, dv
     * dk (the ring receives the home block's [dK | dV] there), and the ring's
     * backward keeps accumulators in q and d_o (RING_CALLER_MEMORY) */
    float *x, *a, *rstd1, *q, *k, *v, *o, *lse, *x1, *b, *rstd2, *g, *s;
    float *dx, *d_o, *dq, *dk, *dv, *ds, *dg;
    float *head_scratch; /* fused head: its chunk scratch; else the logits [V] of a prediction */
    float *logits_host;  /* on a device: a prediction's logits [V] copied to the host */
    bk_ce_sums *head_sums; /* the head's losses and counts over a pass (lm_head.h) */
    /* bf16 matrix products only: two operands rounded to bf16 chunk by chunk,
     * of chunk_rows * max(D, QD, 2F) elements each, and the fp32 copies (widened
     * at each step's first micro-batch) of the parameters that fp32 kernels
     * read: the norm gains and the embedding, one region each, in wide */
    uint16_t *op16[2];
    float *wide;
    wide_region *regions;
    int n_regions;
    const float *P;      /* the parameters of the pass in progress: fp32, */
    const uint16_t *p16; /* or bf16 (bf16_matmul); both NULL when gathered: */
    const model_gather *gather; /* the windows (model_runner_gather), or NULL */
    struct {
        int64_t begin, end; /* the range bucket[k] holds, or is filling; empty: none */
    } bucket_range[2];
    int reading;        /* the bucket the pass reads now, or -1 */
    int filling;        /* the bucket whose fill is on its way (runner_prefetch), or -1 */
    int embed_gathered; /* the embedding's window holds the parameters of the last
                           runner_use_params that refreshed them (a step's micro-batches
                           gather it once); so do the buckets their ranges */
    /* offload_activations on a device: the stored sets (runner_stored_set:
     * store[l]'s input, kept O and lse) are page-locked host memory, and
     * layer l's passes through slot[l % 2], a set of the device, copied out
     * on copy's stream during the forward and back one layer ahead during
     * the backward (model_pass.c). copied[k]: the copy stream's last copy of
     * slot k; used[k]: the compute queued before the copy stream's next copy
     * of slot k. */
    int offload;
    int offload_unordered; /* testing aid (BURST_TEST_OFFLOAD_UNORDERED=1): the backward's
                              compute does not wait for a slot's copy back */
    stored_layer slot[2];
    bk_queue copy;
    void *copied[2], *used[2];
    model_memory mem;    /* what the buffers below take, counted as they are made */
    model_memory held;   /* what its arena handed out for each part, when it has one */
    int allocate;        /* make the buffers (1) or only count them (0) */
    int on_device;       /* the buffers the kernels read are device memory */
    char failed[160];    /* the first allocation that failed */
};

/* Rows of the chunk that starts at row r0 of m rows: the chunk buffers and
 * the bf16 products' operands hold at most chunk_rows rows. */
static inline int64_t runner_chunk_rows(const model_runner *r, int64_t r0, int64_t m)
{
    return m - r0 < r->chunk_rows ? m - r0 : r->chunk_rows;
}

/* An operand of the layers' products: rows of fp32 values, and with
 * bf16_matmul their bf16 copy when the caller rounded them once for every
 * product of a chunk that reads them (runner_round); bf16 NULL: each product
 * rounds the rows it reads as it goes. */
typedef struct {
    const float *f32;
    const uint16_t *bf16;
} runner_operand;

/* x as an operand that each product rounds as it reads it. */
static inline runner_operand runner_fp32(const float *x)
{
    return (runner_operand){x, NULL};
}

/* x [count] (one chunk: at most chunk_rows rows) as an operand rounded once,
 * with bf16_matmul, into op16[slot]: slot 0 holds what a product reads first
 * (X, A), slot 1 a weight gradient's dY, and a product rounds an operand
 * given unrounded into its role's slot, so while a caller holds a rounded
 * operand in a slot the products it calls take unrounded operands only in
 * the other role. Without bf16_matmul *out is x itself. */
bk_status runner_round(model_runner *r, int slot, const float *x, int64_t count,
                       runner_operand *out);

/* The matrix products of the layers, with the weight W[k, n] at offset w of
 * the parameters. In fp32, or with bf16_matmul on bf16 operands: the weight
 * from the bf16 parameters, the activation or gradient rounded once
 * (runner_round) or as it enters (into op16, chunk_rows rows at a time, so
 * the operands never take [n, ...]), fp32 accumulation and results.
 *
 * out[m, cols] (+)= X[m, inner] op(W), op(W) [inner, cols]: W itself
 * (tw = BK_NO_TRANS, W [inner, cols]) or its transpose (BK_TRANS, W
 * [cols, inner]), at offset w of the parameters. */
bk_status runner_times_weight(model_runner *r, runner_operand X, int64_t m, int64_t inner,
                              int64_t w, bk_transpose tw, int64_t cols, float *out, int accumulate);

/* C[m, n] = A[m, k] W[k, n] (+ C when accumulate) */
bk_status runner_mm(model_runner *r, runner_operand A, int64_t m, int64_t k, int64_t w, int64_t n,
                    float *C, int accumulate);

/* dW[k, n] += A[m, k]^T dY[m, n] */
bk_status runner_mm_grad_weight(model_runner *r, runner_operand A, int64_t m, int64_t k,
                                runner_operand dY, int64_t n, float *dW);

/* dA[m, k] (+)= dY[m, n] W[k, n]^T */
bk_status runner_mm_grad_input(model_runner *r, runner_operand dY, int64_t m, int64_t n, int64_t w,
                               int64_t k, float *dA, int accumulate);

/* The parameters of the pass about to run (their type the runner's); with
 * bf16 parameters, the fp32 copy of what fp32 kernels read widened from them
 * (once per step: at the first micro-batch, and for every prediction). */
bt_status runner_use_params(model_runner *r, model_params p, int refresh);
/* The weights at flat offset `at`, fp32 or bf16: in the parameters of the
 * pass, or in the gathered windows (NULL, which kernels refuse, for a range
 * not gathered now). */
const float *runner_weight32(const model_runner *r, int64_t at);
const uint16_t *runner_weight16(const model_runner *r, int64_t at);
/* Gathered parameters: [begin, end) (the embedding's range, or the tail's or
 * a layer's) in its window, filled now unless a bucket holds it or is
 * filling it, and the fp32 copies of its regions widened; nothing when the
 * parameters are whole. */
bt_status runner_gather(model_runner *r, int64_t begin, int64_t end);
/* Gathered parameters: starts filling [begin, end), the range the pass
 * gathers next, into its bucket (model_bucket_of), so that the fill runs
 * while the pass computes with the other; nothing when the bucket holds it
 * already or is the one the pass reads, or the parameters are whole. */
bt_status runner_prefetch(model_runner *r, int64_t begin, int64_t end);

/* The fp32 parameters from offset at of the flat index, for an fp32 kernel:
 * the parameters themselves, or their widened copy. */
const float *runner_param32(const model_runner *r, int64_t at);

/* k's buffers (kept[i], KEPT_ATTENTION of the attention part, then the
 * MLP's), the workspace buffer each is copied from (work[i]: [n, ...] for
 * the attention part, the MLP's chunk buffers) and its floats per row. */
void runner_kept_buffers(model_runner *r, kept_layer *k, float **kept[KEPT_BUFFERS],
                         float *work[KEPT_BUFFERS], int64_t width[KEPT_BUFFERS]);

/* Activations as they are stored: dst[count] (act_bytes elements) = src,
 * rounded to bf16 with bf16_matmul. */
bk_status runner_keep(const model_runner *r, void *dst, const float *src, int64_t count);

/* The stored activations back: dst[count] (fp32) = src (act_bytes elements). */
bk_status runner_fetch(const model_runner *r, float *dst, const void *src, int64_t count);

#endif
