/* ring_run.h: the machinery every pass of the ring shares (inside src/attn/
 * only): the buffers, posting the receives and sends a step lists, waiting
 * with the wait counted as exposed communication, the positions of a block,
 * and the attention kernel called on pieces of query rows with the transport
 * polled between pieces so that transfers progress while computing. */
#ifndef BURST_ATTN_RING_RUN_H
#define BURST_ATTN_RING_RUN_H

#include "src/attn/ring.h"

struct ring_buffers {
    unsigned char *slot[RING_N_SLOTS];    /* [input_bytes] each */
    float *acc_out[2], *acc_in[2];         /* trailing accumulators, double-buffered */
    float *home_acc;                       /* the home block's final accumulator */
    float *delta;                          /* [n, Hq] rowsum(dO * O) */
    int64_t *home_pos, *block_pos;         /* [n] global positions */
    int32_t *home_seg, *block_seg;         /* [n] document ids (0 without segments) */
    size_t input_bytes, acc_bytes;         /* capacity of a slot and of an accumulator */
    int64_t n, rows;                       /* capacity in tokens and in token-heads (n * Hq) */
};

typedef struct {
    const ring_exec_ctx *c;
    const ring_schedule *s;
    int rank;
    bt_world *world;
    ring_buffers *b;
    ring_buffers *owned; /* made for this call when the caller gave none */
    bt_request *slot_recv[RING_N_SLOTS];
    bt_request *slot_sends[RING_N_SLOTS][2]; /* outstanding sends reading each slot */
    int n_slot_sends[RING_N_SLOTS];
    bt_request *acc_send[2];
    ring_exec_stats *stats;
} ring_run;

/* The attention of one piece of query rows [r0, r0 + rows) against a block. */
typedef bt_status (*ring_piece_fn)(ring_run *run, int64_t r0, int64_t rows, void *arg);

/* Starts a pass of c->sched for the caller (backward: 0 for ring_forward, 1
 * for ring_backward); BT_ERR_ARG when the schedule is of the other kind, the
 * communicator is not its group or the buffers do not hold it. */
bt_status ring_run_begin(ring_run *run, const ring_exec_ctx *c, int backward,
                         ring_exec_stats *stats);
/* Waits for every send still reading a slot or an accumulator, then ends. */
bt_status ring_run_finish(ring_run *run, bt_status st);

bt_status ring_run_wait(ring_run *run, bt_request **req);
/* Start of a step: post what arrives later, wait for the held block, pass it on. */
bt_status ring_run_begin_step(ring_run *run, const ring_step *x, int step);
/* Positions (and document ids) of block's tokens into pos[n] and seg[n]. */
void ring_run_block_positions(ring_run *run, int block, int64_t *pos, int32_t *seg);
/* The geometry of a piece of n_q query rows against a whole block of keys. */
bk_attn_geom ring_run_geometry(const ring_run *run, int64_t n_q, const int64_t *q_pos,
                               const int32_t *q_seg, const int64_t *kv_pos,
                               const int32_t *kv_seg);
/* Calls fn on every piece of the n local query rows, polling in between, and
 * counts the kernel time and the block as computed. */
bt_status ring_run_pieces(ring_run *run, ring_piece_fn fn, void *arg);
void ring_run_count_tiles(ring_run *run, const bk_attn_stats *ks);

#endif
