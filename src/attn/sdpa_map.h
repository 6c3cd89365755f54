/* sdpa_map.h: the block pair of a ring step as cuDNN SDPA calls
 * (kernels/sdpa.h). A step combines the query rows of one rank with the key
 * rows of another, each in its owner's local order (seq_layout_positions), and
 * our kernels read the mask by global position; cuDNN knows only a diagonal
 * band over each sequence of a call. So the pair is cut where positions stop
 * being consecutive (the layout's chunks) and, under a document mask, where
 * documents end: within such a rectangle causal and window masks are a band
 * lo <= j - i <= hi. Each rectangle is trimmed to the rows and keys its band
 * reaches, which puts the band in cuDNN's conventions (a right bound >= 0, a
 * left bound >= 1), full rectangles side by side are joined, and rectangles
 * with one band and no shared row become the sequences of one ragged call.
 * The calls' union is exactly the pairs bk_attn_allowed allows, each pair in
 * one call only, so a step run as these calls is the step on our kernels.
 * Block-sparse bitmaps are no band and stay on our kernels (doc/ATTENTION.md,
 * "A ring step as cuDNN calls"). */
#ifndef BURST_ATTN_SDPA_MAP_H
#define BURST_ATTN_SDPA_MAP_H

#include "kernels/sdpa.h"
#include "src/attn/attn_need.h"
#include "src/attn/seq_layout.h"

/* The calls of one block pair. Rows are local rows: a call's q_row indexes the
 * query rank's [n, h_q, d] buffers, its kv_row the key rank's [n, h_kv, d]
 * (n = the layout's tokens per rank). */
typedef struct {
    int mapped; /* 1: calls are the pair (none when the mask allows nothing);
                 * 0: cuDNN cannot express it, why says what */
    int n_calls;
    bk_sdpa_call *calls; /* [n_calls]; call k's seq points into seqs */
    bk_sdpa_seq *seqs;   /* [the calls' n_seq summed] */
    char why[128];
} sdpa_calls;

/* The SDPA calls of the queries of q_rank against the keys of k_rank under
 * need's mask (segments read for a document mask; need as attn_need_validate
 * accepts it), with h_q query heads, h_kv key/value heads, head dim d and the
 * softmax scale. Returns 0 with *out set: mapped, or unmapped for a
 * block-sparse mask, a head shape cuDNN refuses (d not a multiple of 8 in
 * 8 .. 128, h_q not a multiple of h_kv, a scale not finite and > 0) or a
 * lone pair of one query row and one key row it cannot widen; -1 when out of
 * memory (*out then holds nothing). Free *out with sdpa_calls_free. */
int sdpa_map_block_pair(const attn_need_ctx *need, const seq_layout *l, int q_rank, int k_rank,
                        int h_q, int h_kv, int d, float scale, sdpa_calls *out);
void sdpa_calls_free(sdpa_calls *c);

#endif
