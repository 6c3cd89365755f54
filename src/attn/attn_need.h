/* attn_need.h: which block pairs a mask needs. Whether any query of one set of
 * global positions may attend to any key of another, and how many (query, key)
 * pairs the mask lets through, computed exactly on runs of positions (constant
 * document, constant sparse block) rather than token by token, so that the
 * planner can decide at a million tokens which block pairs to compute and which
 * blocks to send. The per-element rule is the kernels' bk_attn_allowed; tests
 * check this against it pair by pair. */
#ifndef BURST_ATTN_NEED_H
#define BURST_ATTN_NEED_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "src/attn/seq_layout.h"

typedef struct {
    bk_attn_mask mask;
    const int32_t *segments; /* [N] document id per global position (BK_ATTN_DOCUMENT) */
    int64_t N;
} attn_need_ctx;

/* Documents must be packed in order: segment ids non-decreasing along the
 * sequence. Returns 0, or -1 with a message. */
int attn_need_validate(const attn_need_ctx *c, char *err, size_t err_len);

/* The keys [*lo, *hi] (positions) the causal and window rules allow the query
 * at position q; INT64_MIN / 4 or INT64_MAX / 4 where nothing bounds that side.
 * Each bound is q plus a constant: the interval moves with q, one for one. */
void attn_need_key_range(const bk_attn_mask *m, int64_t q, int64_t *lo, int64_t *hi);
/* The first position in (p, end) whose document is not p's, or end (a
 * binary search: documents are packed in order). */
int64_t attn_need_document_end(const attn_need_ctx *c, int64_t p, int64_t end);

/* Allowed (query, key) pairs with queries in q_chunks and keys in k_chunks.
 * With count_all = 0 it stops at the first allowed pair and returns 0 or 1. */
int64_t attn_need_pairs(const attn_need_ctx *c, const seq_chunk *q_chunks, int n_q_chunks,
                        const seq_chunk *k_chunks, int n_k_chunks, int count_all);

/* Allowed (query, key) pairs of the whole sequence, [0, N) x [0, N): the
 * attention work of one sequence under the mask (over N^2, the fraction of a
 * full attention it computes; throughput reports count it). Each run of
 * queries visits only the keys it may reach (its document, its window, the
 * set bits of its row of a sparse bitmap), and a pair of runs where every
 * query sees every key costs O(1), so a sequence of a million tokens takes
 * milliseconds: about N steps, plus a scan of the bitmap. */
int64_t attn_need_sequence_pairs(const attn_need_ctx *c);

#endif
