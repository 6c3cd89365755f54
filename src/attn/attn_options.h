/* attn_options.h: a distributed attention problem (sequence, ranks,
 * topology, mask, heads, backward direction) as `burst plan` reads it from its
 * command line and `burst bench attention` sets it, and its translation into
 * a planner configuration. */
#ifndef BURST_ATTN_OPTIONS_H
#define BURST_ATTN_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "src/attn/ring_plan.h"

typedef struct {
    int64_t seq;               /* N, global tokens */
    int ranks, nodes;          /* P, M (nodes > 1: double ring) */
    int flat;                  /* force the flat ring even with nodes > 1 */
    int h_q, h_kv, d;
    char mask[32];             /* none | causal | window | document | sparse */
    int64_t window;            /* W tokens (window mask), query included */
    int64_t doc_len;           /* document length (document mask) */
    int64_t sparse_block;      /* block size (sparse mask) */
    double sparse_density;     /* fraction of kept off-diagonal blocks (sparse mask) */
    int layout_given;
    seq_layout_kind layout;
    ring_bwd_choice bwd;
    /* built by attn_options_build: */
    bk_attn_mask kernel_mask;
    int32_t *segments;         /* [seq] */
    uint64_t *sparse_bits;
} attn_options;

void attn_options_default(attn_options *o);
/* A head dimension as the kernels take it, a multiple of 8 in 8..1024 ("64"):
 * 0, or -1 when v is not one (*d unchanged). */
int attn_parse_head_dim(const char *v, int *d);
/* Fills cfg (and the mask, segments and bitmap it points to); picks the layout
 * the mask wants when none was given. Returns 0, or -1 with a message. */
int attn_options_build(attn_options *o, ring_plan_config *cfg, char *err, size_t err_len);
/* Work imbalance of the planned layout under the mask: max / mean over ranks
 * of the (query, key) pairs each rank computes (1 = balanced). */
double attn_options_imbalance(const ring_plan_config *cfg);
void attn_options_free(attn_options *o);

#endif
