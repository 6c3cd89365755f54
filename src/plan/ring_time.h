/* ring_time.h: one pass of the ring priced, step by step and rank by rank,
 * as src/attn/ring_run.c executes it:
 *
 *   a step starts when the rank's previous step ended; it posts the receives
 *   of later steps' blocks, waits for the block it holds (the wait is
 *   exposed communication), posts the sends forwarding that block, computes;
 *   the backward then waits for the trailing accumulator from the block's
 *   previous holder, adds it and sends the sum on. A pass ends on a rank when
 *   its last step has, its home accumulator is back and its sends are done.
 *
 * A transfer starts when both its send and its receive are posted and takes
 * the link's latency plus bytes over its bandwidth; the hops of one link kind
 * leaving a node in the same step share that node's links of the kind
 * (profile row per_node: 8 GPUs over 4 network links each get half). A
 * step's compute is its allowed pairs at the profile's attention rate for
 * the rank's block length: the causal rate where the step holds the rank's
 * own block (the diagonal) and not every pair is allowed, the full rate
 * elsewhere (zigzag's off-diagonal pairs are whole chunks). */
#ifndef BURST_PLAN_RING_TIME_H
#define BURST_PLAN_RING_TIME_H

#include <stddef.h>

#include "src/attn/ring_plan.h"
#include "src/plan/profile.h"

typedef struct {
    double total_s;   /* the pass's wall time: its slowest rank */
    double compute_s; /* that rank's attention kernels */
    double comm_s;    /* that rank's transfers, sent, in link time */
    double exposed_s; /* that rank's waits for transfers (total - compute, but for the
                         accumulators' adds) */
    double add_s;     /* the backward's accumulator adds on that rank */
    int rank;         /* the slowest rank */
    int n_computed;   /* block pairs that rank computed */
} ring_pass_time;

/* The pass s priced with p, the group's ranks on nodes of per_node each
 * (the double ring's own; for the flat ring, whose plan knows no nodes, the
 * hops between them go over the network): 0, or -1 with err naming the
 * profile row it lacks. s must have counted pairs
 * (ring_plan_config.count_pairs). */
int ring_pass_price(const ring_schedule *s, const plan_profile *p, int per_node,
                    ring_pass_time *out, char *err, size_t err_len);

/* FLOPs one allowed (query, key) pair costs in the pass, as `burst bench
 * kernels` counts them: 4 d per query head forward, 2.5 times that backward. */
double ring_pair_flops(const ring_schedule *s);

#endif
