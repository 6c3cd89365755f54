/* attn_options.h: the command-line description of a distributed attention
 * problem (sequence, ranks, topology, mask, heads, backward direction), shared
 * by `burst plan` and `burst bench attention`, and its translation into a
 * planner configuration. */
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
/* Consumes argv[*i] (and its value) if it is one of these options: returns 1
 * when consumed, 0 when not one of ours, -1 on a bad value (message printed). */
int attn_options_parse(attn_options *o, int argc, char **argv, int *i, const char *prog);
/* The option lines for a --help text. */
void attn_options_help(FILE *out);
/* Fills cfg (and the mask, segments and bitmap it points to); picks the layout
 * the mask wants when none was given. Returns 0, or -1 with a message. */
int attn_options_build(attn_options *o, ring_plan_config *cfg, char *err, size_t err_len);
/* Work imbalance of the planned layout under the mask: max / mean over ranks
 * of the (query, key) pairs each rank computes (1 = balanced). */
double attn_options_imbalance(const ring_plan_config *cfg);
void attn_options_free(attn_options *o);

#endif
