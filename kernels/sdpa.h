/* sdpa.h: fused scaled-dot-product attention as cuDNN's SDPA takes it, beside
 * our own kernels (kernels/attention.h) because its contract is not theirs.
 *
 * Ours merge each block into the fp32 running (O, lse) in place and take lse
 * and delta in the backward. cuDNN's SDPA writes a block output in bf16 with
 * its Stats (the natural-log log-sum-exp of the scaled scores, fp32, laid out
 * [b, h, s, 1] and packed), and its backward reads O and dO (it computes delta
 * itself) with the final Stats, writing dQ, dK, dV in bf16. So a ring step on
 * cuDNN is: bk_sdpa_fwd into a bf16 block output, then bk_attn_merge_sdpa into
 * the running (O, lse); and backward: bk_attn_pack_stats of the final lse,
 * bk_sdpa_bwd into bf16 gradients, bk_add_bf16 into our fp32 accumulators.
 *
 * A call works on sub-views (rows) of our buffers, never copies of them:
 *   Q, O, dO, dQ   [n_q,  h_q,  d]  bf16, rows q_row .. q_row + q_len of a sequence
 *   K, V, dK, dV   [n_kv, h_kv, d]  bf16, rows kv_row .. kv_row + kv_len
 *   Stats          [n_seq, h_q, s_q]  fp32 packed, s_q = the longest q_len
 * that is, in cuDNN's terms, tensors [b, h, s, d] with strides
 * (_, d, h d, 1) (the BSHD layout), one sequence a batch element; more than
 * one sequence is a ragged (THD) call with a padding mask, each sequence's
 * rows found by its offset.
 *
 * The mask of a call is cuDNN's diagonal band, over row i in [0, q_len) and
 * column j in [0, kv_len) of each sequence (bk_sdpa_allowed): alignment
 * top-left (shift 0) or bottom-right (shift kv_len - q_len), then
 *   a right bound R (>= 0):  j - i - shift <= R   (inclusive)
 *   a left bound L (>= 1):   i - j + shift <  L   (exclusive)
 * either bound unset meaning unbounded on that side; neither set is full
 * attention. Causal is a right bound 0. What the ring's masks need is turned
 * into such calls by src/attn/sdpa_map.c; the block-sparse bitmap is not
 * expressible and stays on our kernels.
 *
 * Backends (kernels/device_ops.h): a CUDA build with the cuDNN frontend runs
 * cuDNN (kernels/cuda/cudnn_sdpa.cc), loading libcudnn at run time; the
 * emulator runs a model of these calls written from cuDNN's documentation
 * (emu/cudnn/); anything else answers BK_ERR_UNSUPPORTED, and
 * bk_sdpa_available says why. There is no host implementation: the host ring
 * never calls these. */
#ifndef BURST_KERNELS_SDPA_H
#define BURST_KERNELS_SDPA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels_common.h"
#include "kernels/shared_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BK_SDPA_TOP_LEFT = 0, BK_SDPA_BOTTOM_RIGHT = 1 } bk_sdpa_align;

/* The diagonal band of a call (see above). */
typedef struct {
    bk_sdpa_align align;
    int has_right, has_left;
    int64_t right; /* inclusive, >= 0 when set */
    int64_t left;  /* exclusive, >= 1 when set */
} bk_sdpa_band;

/* One sequence (batch element) of a call: its rows in the query-side buffers
 * and in the key/value-side buffers. Lengths >= 1; the sequences of one call
 * share no row on either side. */
typedef struct {
    int64_t q_row, q_len;
    int64_t kv_row, kv_len;
} bk_sdpa_seq;

/* One SDPA call. seq is host memory: a backend that needs the offsets on the
 * device keeps its own copy, made when the call's plan is made
 * (bk_sdpa_prepare), so a step uploads nothing. */
typedef struct {
    int h_q, h_kv, d;   /* heads (h_q a multiple of h_kv); head dim, a multiple of 8, <= 128 */
    float scale;        /* softmax scale, finite and > 0 */
    bk_sdpa_band band;
    int n_seq;          /* sequences: 1 is a dense call, more a ragged one */
    const bk_sdpa_seq *seq;
} bk_sdpa_call;

/* Whether column j of row i of a sequence of q_len x kv_len is allowed by the
 * band: cuDNN's documented rule, the one fact every side of the contract
 * reads (the translator's test, the emulator's model). */
BK_HOSTDEV int bk_sdpa_allowed(const bk_sdpa_band *b, int64_t q_len, int64_t kv_len, int64_t i,
                               int64_t j)
{
    int64_t shift = b->align == BK_SDPA_BOTTOM_RIGHT ? kv_len - q_len : 0;
    if (b->has_right && j - i - shift > b->right) return 0;
    if (b->has_left && i - j + shift >= b->left) return 0;
    return 1;
}

/* The longest q_len of a call: Stats' s dimension. */
static inline int64_t bk_sdpa_max_q(const bk_sdpa_call *c)
{
    int64_t m = 0;
    for (int k = 0; k < c->n_seq; k++)
        if (c->seq[k].q_len > m) m = c->seq[k].q_len;
    return m;
}
/* 1 when the query rows of every sequence of c lie within [0, n_q): what the
 * state kernels around a call check of it, on either backend. */
static inline int bk_sdpa_rows_within(const bk_sdpa_call *c, int64_t n_q)
{
    if (c->n_seq < 1 || c->seq == NULL) return 0;
    for (int k = 0; k < c->n_seq; k++)
        if (c->seq[k].q_row < 0 || c->seq[k].q_len < 1 || c->seq[k].q_row + c->seq[k].q_len > n_q)
            return 0;
    return 1;
}

/* Floats of a call's Stats: n_seq h_q s_q. */
static inline size_t bk_sdpa_stats_floats(const bk_sdpa_call *c)
{
    return (size_t)c->n_seq * (size_t)c->h_q * (size_t)bk_sdpa_max_q(c);
}

/* The SDPA calls, declared once for every side that implements them: the
 * entry points of this header (BK_SDPA_DECLARE(bk_sdpa) below), cuDNN's on a
 * CUDA build (bk_cudnn_sdpa_*: kernels/cuda/cudnn_sdpa.h) and the emulator's
 * model (bk_emu_sdpa_*: kernels/cuda/dev_common.cuh). Each says:
 *
 * _available: 1 when this program can run SDPA calls on its device; else 0
 *   with the reason in why (no cuDNN frontend in this build, libcudnn not
 *   found, an architecture cuDNN's fused attention does not serve); on 1, why
 *   names what runs them.
 * _version: the loaded cuDNN's version as cudnnGetVersion gives it (91900 for
 *   9.19.0), 0 when none is loaded.
 * _prepare: makes (once) and keeps the plans of calls[n] (forward, and
 *   backward when backward != 0), so that no later call compiles anything;
 *   *workspace_bytes: the most workspace any of them needs. An error status
 *   when cuDNN refuses one (bk_kernel_error says which and why).
 * _fwd: the forward of one prepared call on q's stream: O_blk (rows of each
 *   sequence, bf16, [n_q, h_q, d] indexing) and Stats [n_seq, h_q, s_q]
 *   are written; rows of O_blk outside the sequences are not touched. A row
 *   with no allowed key is not defined by cuDNN: calls have none (the
 *   translator trims them, src/attn/sdpa_map.c).
 * _bwd: the backward of one prepared call: given the final O and dO (bf16)
 *   and the final Stats of the query rows (packed as bk_attn_pack_stats
 *   makes them), writes this call's dQ (rows of the query sequences), dK and
 *   dV (rows of the key sequences) in bf16; other rows are not touched. */
#define BK_SDPA_DECLARE(prefix)                                                                    \
    int prefix##_available(char *why, size_t why_len);                                            \
    long prefix##_version(void);                                                                  \
    bk_status prefix##_prepare(const bk_sdpa_call *calls, int n, int backward,                    \
                               size_t *workspace_bytes);                                          \
    bk_status prefix##_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,           \
                           const uint16_t *K, const uint16_t *V, uint16_t *O_blk, float *stats,   \
                           void *workspace, size_t workspace_bytes);                              \
    bk_status prefix##_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,           \
                           const uint16_t *K, const uint16_t *V, const uint16_t *O,               \
                           const uint16_t *dO, const float *stats, uint16_t *dQ, uint16_t *dK,    \
                           uint16_t *dV, void *workspace, size_t workspace_bytes);

BK_SDPA_DECLARE(bk_sdpa)

/* Whether a loaded cuDNN of `version` (cudnnGetVersion's number) serves the
 * ring's calls: 0 with the reason for the versions with a known bug for the
 * case (cuDNN's release notes, doc/KERNELS.md): 9.10.0 and 9.10.1 (the
 * bf16/fp16 backward), 9.14.0 with a sliding window (non-causal with s_kv >
 * 1024); else 1. */
int bk_sdpa_version_usable(long version, int window, char *why, size_t why_len);

/* The running (O [n_q, h_q, d], lse [n_q, h_q], fp32) merged, rows q_row ..
 * q_row + q_len of each sequence of c, with a call's block output (O_blk
 * bf16, same indexing) and Stats [n_seq, h_q, s_q]: bk_attn_merge's rule
 * (kernels/attention_math.h), two empty sides staying O = 0, lse = -inf. */
bk_status bk_attn_merge_sdpa(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q, int d,
                             float *O, float *lse, const uint16_t *O_blk, const float *stats);

/* stats [n_seq, h_q, s_q] = lse [n_q, h_q] of each sequence's rows, packed as
 * cuDNN's backward reads them; padding rows get -inf. */
bk_status bk_attn_pack_stats(const bk_queue *q, const bk_sdpa_call *c, int64_t n_q,
                             const float *lse, float *stats);

/* O' [n, h, d] (bf16) = delta dO / |dO|^2 for each row and head, 0 where dO
 * is 0, from dO [n, h, d] (bf16) and delta [n, h]: an output whose
 * rowsum(dO O') is delta to within 2^-9 |delta| (the rounding of O' to bf16;
 * the weights dO_e^2 / |dO|^2 are positive and sum to 1). cuDNN's backward
 * reads O only for that rowsum, so the Q-side backward, whose bundle carries
 * delta and not O, gives it O'. */
bk_status bk_attn_surrogate_o(const bk_queue *q, int64_t n, int h, int d, const uint16_t *dO,
                              const float *delta, uint16_t *O);

/* y[n] += x[n] widened to fp32: a bf16 gradient added into an fp32
 * accumulator. */
bk_status bk_add_bf16(const bk_queue *q, int64_t n, const uint16_t *x, float *y);

#ifdef __cplusplus
}
#endif

#endif
