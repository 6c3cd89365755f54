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
 * s = rows, strides (_, d, h d, 1). A dense call (one sequence) points at its
 * first row: `base` is the element offset of the view from the buffer's
 * start. A ragged call gives per sequence its start (ragged_offset [b + 1]:
 * cuDNN's ragged-offset tensor, elements, int64) and its length (seq_len
 * [b]) with the padding mask on; s is then the longest sequence. */
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
    int64_t base;      /* dense: elements from the buffer's start to the view */
    int64_t ragged_offset[BK_SDPA_MAX_SEQ + 1]; /* ragged: element offset of each sequence */
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
