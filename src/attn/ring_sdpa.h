/* ring_sdpa.h: the ring's block pairs computed by a fused SDPA (cuDNN's, or
 * the emulator's model of it: kernels/sdpa.h) instead of our kernels.
 *
 * Made once per layout at setup: every block pair a rank can compute (its
 * queries against any block's keys, any block's queries against its keys) is
 * translated into SDPA calls (src/attn/sdpa_map.c) and their plans are made,
 * so that no step compiles anything; a pair the translator cannot express
 * stays on our kernels (ring_sdpa_pair answers NULL). The ring then calls:
 *   forward   every call's bf16 block output and Stats merged into the fp32
 *             running (O, lse) (ring-flash-attention's lesson: the merge
 *             across steps stays fp32);
 *   backward  the final O rounded to bf16 once (ring_sdpa_backward_begin),
 *             then per call the final lse packed as Stats, cuDNN's backward
 *             into bf16 gradients, and those added into our fp32
 *             accumulators.
 * The KV-side backward maps as it is. The Q-side one carries delta instead of
 * O, which cuDNN will not take: each holder gives cuDNN a surrogate O' with
 * the same rowsum(dO O') (doc/ATTENTION.md).
 *
 * Its device memory: one bf16 [n, Hq, d] (a block output, or the final O),
 * the largest call's Stats, the bf16 gradients of a call [n, Hq + 2 Hkv, d]
 * and cuDNN's workspace: ring_sdpa_bytes, what the memory plan counts. */
#ifndef BURST_ATTN_RING_SDPA_H
#define BURST_ATTN_RING_SDPA_H

#include <stddef.h>

#include "kernels/sdpa.h"
#include "src/attn/attn_need.h"
#include "src/attn/sdpa_map.h"
#include "transport/transport.h"

typedef struct ring_sdpa ring_sdpa;

typedef struct {
    seq_layout layout;
    attn_need_ctx need; /* the ring's mask (block-sparse and documents are refused) */
    int rank;           /* in the cp group */
    int h_q, h_kv, d;
    float scale;
} ring_sdpa_config;

/* Whether the ring of cfg can run on SDPA calls at all: 1, or 0 with the
 * reason (the mask, the head dim). Whether this machine has SDPA calls is
 * bk_sdpa_available's and bk_sdpa_version_usable's to say. */
int ring_sdpa_supported(const ring_sdpa_config *cfg, char *why, size_t why_len);
/* The bytes ring_sdpa_create takes of the queue's memory, counted before
 * making it (the workspace as the fp32 dQ and delta of the largest call's
 * rows, what cuDNN's Hopper backward keeps); 0 when the calls of lender_cfg
 * (or NULL) lend it theirs. */
size_t ring_sdpa_bytes(const ring_sdpa_config *cfg, const ring_sdpa_config *lender_cfg);
/* NULL with why (out of memory, a call cuDNN refuses). With a lender (or
 * NULL) whose buffers hold these calls, they are borrowed, not made: the two
 * never run at once (the half-sequence recompute and the whole ring run one
 * after the other on one queue); the lender outlives the borrower. */
ring_sdpa *ring_sdpa_create(const ring_sdpa_config *cfg, const bk_queue *q,
                            const ring_sdpa *lender, char *why, size_t why_len);
void ring_sdpa_free(ring_sdpa *rs);

/* The calls of (queries of q_rank, keys of k_rank), or NULL when that pair
 * runs on our kernels. */
const sdpa_calls *ring_sdpa_pair(const ring_sdpa *rs, int q_rank, int k_rank);

/* Forward of a pair: Q [n, Hq, d], K and V [n, Hkv, d] bf16; O [n, Hq, d]
 * and lse [n, Hq] fp32, merged into. */
bt_status ring_sdpa_forward(ring_sdpa *rs, const bk_queue *q, const sdpa_calls *pair,
                            const uint16_t *Q, const uint16_t *K, const uint16_t *V, float *O,
                            float *lse);
/* The backward's final O [n, Hq, d] (fp32) kept in bf16 for every pair. */
bt_status ring_sdpa_backward_begin(ring_sdpa *rs, const bk_queue *q, const float *O);
/* Backward of a pair: the queries' Q and dO [n, Hq, d] (bf16) with their
 * final lse [n, Hq], the keys' K and V [n, Hkv, d] (bf16); adds the pair's
 * gradients into dQ [n, Hq, d], dK and dV [n, Hkv, d] (fp32). KV-side: delta
 * NULL, the final O is ring_sdpa_backward_begin's. Q-side: the visiting
 * bundle's delta [n, Hq], from which the queries' surrogate O' is made
 * (bk_attn_surrogate_o): cuDNN reads O only for rowsum(dO O) = delta. */
bt_status ring_sdpa_backward(ring_sdpa *rs, const bk_queue *q, const sdpa_calls *pair,
                             const uint16_t *Q, const uint16_t *K, const uint16_t *V,
                             const uint16_t *dO, const float *lse, const float *delta, float *dQ,
                             float *dK, float *dV);

#endif
