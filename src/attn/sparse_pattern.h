/* sparse_pattern.h: block-sparse attention patterns written as text, e.g.
 * "local:4+global:1", and the bitmap they give for the block-sparse mask
 * (bk_attn_mask_block_sparse, kernels/attention_math.h). The sequence is cut
 * into blocks of block_size tokens; query block q may attend to key block k
 * (k <= q: the patterns are causal) when any component allows it:
 *
 *   local:W    the W blocks ending at q (q - k < W): a sliding window of blocks
 *   global:G   the first G blocks (k < G): tokens every later block sees
 *   strided:S  every S-th block back from q ((q - k) % S == 0)
 *
 * Components are joined with '+', each at most once. Within the allowed
 * blocks the mask is also causal token by token. */
#ifndef BURST_ATTN_SPARSE_PATTERN_H
#define BURST_ATTN_SPARSE_PATTERN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t local, global, stride; /* 0: the component is absent */
} sparse_pattern;

/* Reads text into p: 0, or -1 with the reason (without the text) in why. */
int sparse_pattern_parse(const char *text, sparse_pattern *p, char *why, size_t why_len);
/* Whether p lets query block q attend to key block k. */
int sparse_pattern_allows(const sparse_pattern *p, int64_t q, int64_t k);
/* The bitmap of p over n_blocks blocks: ceil(n_blocks^2 / 64) words, bit
 * q * n_blocks + k as kernels/attention_math.h orders them; free() it. NULL
 * when out of memory. */
uint64_t *sparse_pattern_bitmap(const sparse_pattern *p, int64_t n_blocks);

#endif
