/* sdpa_graph.h: an SDPA call (kernels/sdpa.h) said in cuDNN's own terms,
 * the tensors' dims and strides, the ragged offsets, the mask attributes,
 * exactly as the cuDNN frontend's graph is given them (internal to kernels/).
 *
 * One translation, two readers: the CUDA build's kernels/cuda/cudnn_sdpa.cc
 * builds its frontend graph from it attribute by attribute, and the
 * emulator's model of cuDNN (emu/cudnn/) checks it as cuDNN documents and
 * computes from it. So a mistake here (a stride, an offset, a bound) is one
 * the model sees: what the emulator runs is what the GPU would be given.
 *
 * Tensors are cuDNN's 4-D [b, h, s, d] in elements (Stats [b, h, s, 1]),
 * over our row-major buffers: Q [n_q, h_q, d] seen as b = sequences,
 * s = rows, strides (_, d, h d, 1). A tensor's data pointer is its buffer
 * plus `base` elements: the lowest row of its side. A ragged call gives per
 * sequence its start from there (ragged_offset [b + 1], elements: cuDNN's
 * ragged-offset tensor, the last entry where the furthest sequence ends) and
 * its length (seq_len [b]) with the padding mask on; s is then the longest
 * sequence. Element (b, h, s, e) of a tensor is at base + (ragged ?
 * ragged_offset[b] : b stride[0]) + h stride[1] + s stride[2] + e stride[3]. */
#ifndef BURST_KERNELS_SDPA_GRAPH_H
#define BURST_KERNELS_SDPA_GRAPH_H

#include <stdint.h>

#include "kernels/sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { BK_SDPA_MAX_SEQ = 64 }; /* sequences of one ragged call */

typedef struct {
    int64_t dim[4];    /* b, h, s, d (Stats: d = 1) */
    int64_t stride[4]; /* elements */
    int64_t base;      /* elements from the buffer's start to the view (its lowest row) */
    int64_t ragged_offset[BK_SDPA_MAX_SEQ + 1]; /* ragged: each sequence's start from base */
} bk_sdpa_tensor;

typedef struct {
    bk_sdpa_tensor q, k, v, o, stats; /* dO, dQ as q (o); dK, dV as k, v */
    int ragged;                       /* ragged offsets and the padding mask */
    int64_t seq_len_q[BK_SDPA_MAX_SEQ], seq_len_kv[BK_SDPA_MAX_SEQ]; /* ragged: [b] */
    float attn_scale;
    bk_sdpa_band band; /* alignment, bounds: cuDNN's attributes as they are */
    int generate_stats; /* forward: 1 (training) */
} bk_sdpa_graph;

/* The graph of call c; 0, or -1 when c is not a well-formed call (lengths,
 * heads, bounds out of range, more sequences than BK_SDPA_MAX_SEQ). */
int bk_sdpa_describe(const bk_sdpa_call *c, bk_sdpa_graph *g);

#ifdef __cplusplus
}
#endif

#endif
