/* ulysses.h: attention over Ulysses groups and a ring between them (the
 * head-parallel hybrid). The cp ranks form groups of U consecutive ranks
 * (seq_layout_set_ulysses); before the ring each group's all-to-all turns
 * every member's tokens with all heads, [n, H, d], into the group's U n
 * tokens with 1/U of the heads, [U n, H / U, d] (member j gets head group j);
 * the ring then runs over the groups' matching members (ring_exec_ctx.comm:
 * the member's ring communicator, its schedule planned on
 * seq_layout_ring), and the all-to-all turns the outputs back.
 *
 * What crosses the group, per rank and pass, in fp32: the forward's Q, K, V
 * and its O and lse back; the backward's Q, K, V, O, dO and lse, and dQ, dK,
 * dV back ((U - 1) / U of each buffer leaves the rank). The ring's blocks are
 * U times longer and it has P / U ranks. Blocking: each all-to-all waits for
 * the queue's work on its input. */
#ifndef BURST_ATTN_ULYSSES_H
#define BURST_ATTN_ULYSSES_H

#include "src/attn/ring.h"

typedef struct {
    bt_comm *group;   /* this rank's Ulysses group, its U members in member order */
    int64_t n;        /* tokens per rank */
    int h_q, h_kv, d; /* the model's heads; U divides h_q and h_kv */
} ulysses_config;

/* The group's work buffers: the head-split inputs, outputs and gradients of
 * one pass, and the staging of the heads' split. */
typedef struct ulysses ulysses;

/* 0, or -1 with err naming what U does not divide (the heads). */
int ulysses_check(int U, int h_q, int h_kv, char *err, size_t err_len);
/* Bytes ulysses_create allocates for cfg (a rank's share of the heads'
 * layout holds as many elements as its own, whatever U). */
size_t ulysses_bytes(const ulysses_config *cfg);
/* Buffers in the memory of q; NULL when out of memory. */
ulysses *ulysses_create(const ulysses_config *cfg, const bk_queue *q);
void ulysses_free(ulysses *u);

/* ring_forward over the group: Q [n, Hq, d], K, V [n, Hkv, d] this rank's
 * tokens; O, lse [n, Hq] its outputs. c is the ring over the groups (its
 * comm, sched and buffers for the U n-token blocks). The all-to-alls' time
 * counts in stats' total and wait. */
bt_status ulysses_forward(ulysses *u, const ring_exec_ctx *c, const float *Q, const float *K,
                          const float *V, float *O, float *lse, ring_exec_stats *stats);
/* ring_backward over the group, as ring_backward's contract (dQ may be O;
 * dK, dV may be K, V: every input is read before a gradient is written). */
bt_status ulysses_backward(ulysses *u, const ring_exec_ctx *c, const float *Q, const float *K,
                           const float *V, const float *O, const float *dO, const float *lse,
                           float *dQ, float *dK, float *dV, ring_exec_stats *stats);

#endif
