/* ring_plan.h: distributed attention, planned as plain data.
 *
 * Every pass of the ring has the same shape. Each rank's block of "travelling
 * inputs" visits other ranks along a path fixed by the topology, and each
 * holder combines it with what stays at home:
 *
 *   pass        travelling inputs          trailing accumulator   stays home
 *   forward     K, V                       -                      Q, O, lse
 *   bwd KV-side K, V                       dK, dV                 Q, dO, lse, delta, dQ
 *   bwd Q-side  Q, dO, lse, delta          dQ                     K, V, dK, dV
 *
 * Inputs are prefetched (posted one step ahead on the intra-node ring, one
 * round ahead on the inter-node ring); the trailing accumulator follows its
 * block one holder behind, on its own channels, and finally hops home.
 *
 * Paths. Flat ring: block b is at rank b+s at step s (b-s for the Q-side
 * backward: query bundles travel towards the earlier keys they need). Double
 * ring (P = M nodes x L ranks, rank = node*L + local): step s = m*L + t (round
 * m, intra step t); block (node bn, local bl) is at (bn+m, bl+t) (or
 * (bn-m, bl-t)): rounds move between nodes
 * along the inter-node ring of each local index, steps move along the
 * intra-node ring. A block is only carried as far as some holder downstream
 * needs it: with a sliding window it visits ceil(W/n) ranks, not P-1.
 *
 * The planner sees every rank (it is pure and deterministic), so each rank can
 * plan alone and tests and `burst plan` can inspect the whole schedule. */
#ifndef BURST_ATTN_RING_PLAN_H
#define BURST_ATTN_RING_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "src/attn/attn_need.h"
#include "src/attn/seq_layout.h"

typedef enum { RING_FORWARD = 0, RING_BWD_KV_SIDE = 1, RING_BWD_Q_SIDE = 2 } ring_pass;
/* the values of [parallel] backward, in the order of its names (src/train/config.c) */
typedef enum { BWD_AUTO = 0, BWD_Q_SIDE = 1, BWD_KV_SIDE = 2 } ring_bwd_choice;
typedef enum { TOPO_FLAT = 0, TOPO_DOUBLE = 1 } ring_topology;
typedef enum { LINK_INTRA = 0, LINK_INTER = 1 } ring_link;

/* Transport channels of the ring: inputs and accumulators never share one, and
 * the forward and backward passes are counted apart. */
enum {
    RING_CH_FWD_INTRA = 0,
    RING_CH_FWD_INTER = 1,
    RING_CH_BWD_IN_INTRA = 2,
    RING_CH_BWD_IN_INTER = 3,
    RING_CH_BWD_ACC_INTRA = 4,
    RING_CH_BWD_ACC_INTER = 5,
    RING_CH_BWD_ACC_HOME = 6, /* the last holder's accumulator going home */
    RING_N_CHANNELS = 7,
};

/* Buffer slots of travelling inputs: the home block, two for the intra ring
 * (computed on / being received), two for the inter-node prefetch. */
enum { SLOT_HOME = 0, SLOT_INTRA0 = 1, SLOT_INTER0 = 3, RING_N_SLOTS = 5 };

typedef struct {
    int peer;        /* rank in the context-parallel group */
    int block;       /* origin (home rank) of the data */
    int slot;        /* input slot read (send) or written (receive) */
    int channel;
    ring_link link;
} ring_xfer;

typedef struct {
    int block;         /* block held this step, or -1 */
    int slot;          /* its input slot */
    int compute;       /* the mask needs this (queries, keys) pair */
    int64_t pairs;     /* allowed (query, key) pairs of that pair, when counted */
    /* posted at the start of the step, before computing: */
    int n_recv, n_send;
    ring_xfer recv[2]; /* inputs for a later step */
    ring_xfer send[2]; /* the held block, forwarded */
    /* backward only, after computing: */
    int acc_from;      /* add the running accumulator from this rank, or -1 (start from 0) */
    int acc_to;        /* then send it to this rank, or -1 (this is its home: keep it) */
    int acc_from_channel, acc_to_channel;
    int home_acc_in; /* this rank's final accumulator arrives this step (home_acc_from
                      * sends it after computing), so it is received then too */
} ring_step;

typedef struct {
    /* what was planned */
    ring_pass pass;
    ring_topology topo;
    int P, M, L;                  /* ranks, nodes, ranks per node */
    seq_layout layout;
    int h_q, h_kv, d;
    int n_steps;                  /* steps per rank (equal on every rank) */
    int pairs_counted;            /* ring_step.pairs counts pairs (else it is 0 or 1) */
    ring_step *steps;             /* [P][n_steps] */
    int *home_acc_from;           /* [P] backward: who sends the final accumulator home, or -1 */
    int *home_acc_channel;        /* [P] */
    /* sizes of what travels, in bytes: the inputs (Q, K, V, dO) in elements of
     * in_bytes (4: fp32, 2: bf16), lse, delta and the accumulators in fp32 */
    int in_bytes;
    size_t input_bytes, acc_bytes;
} ring_schedule;

typedef struct {
    ring_topology topo;
    int nodes;             /* M for the double ring (P % M == 0); 1 for flat */
    seq_layout layout;
    attn_need_ctx need;    /* mask (+ segment ids) */
    int h_q, h_kv, d;
    int count_pairs;       /* fill ring_step.pairs (slower: counts every pair) */
    int in_bytes;          /* element of Q, K, V and dO: 4 (fp32; 0 means 4) or 2 (bf16) */
} ring_plan_config;

/* The input slot of step (0 <= step < P) of s, the same on every rank and for
 * any mask: the home slot at step 0, an intra slot (alternating) while a block
 * travels within a node, an inter slot (alternating) where it crosses nodes.
 * A step the mask skips holds no slot (ring_step.slot -1), but this is the
 * slot it would hold. */
int ring_slot_of_step(const ring_schedule *s, int step);

static inline ring_step *ring_step_at(const ring_schedule *s, int rank, int step)
{
    return &s->steps[(size_t)rank * (size_t)s->n_steps + (size_t)step];
}

/* Which backward sends fewer bytes per step and row for these head counts
 * and inputs of in_bytes (4: fp32, 2: bf16): Q-side 2*Hq*d inputs, 2*Hq fp32
 * (lse, delta) and the fp32 dQ of Hq*d; KV-side 2*Hkv*d inputs and the fp32
 * dK, dV of 2*Hkv*d. */
ring_pass ring_choose_backward(ring_bwd_choice choice, int h_q, int h_kv, int d, int in_bytes);
const char *ring_pass_name(ring_pass pass);

/* Plans one pass; NULL with a message on a bad configuration. */
ring_schedule *ring_plan(const ring_plan_config *cfg, ring_pass pass, char *err, size_t err_len);
void ring_schedule_free(ring_schedule *s);

/* Bytes rank sends in this pass (inputs + accumulators), from the schedule. */
uint64_t ring_schedule_bytes_sent(const ring_schedule *s, int rank);
/* Human-readable dump: one line per rank and step. */
void ring_schedule_dump(FILE *out, const ring_schedule *s);

#endif
