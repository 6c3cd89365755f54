/* ring_buffers.h: the working buffers of a ring (inside src/attn/ only):
 * their layout, the sizing helpers the plan of a pass implies, and the
 * position tables of the blocks (ring_buffers.c). ring_buffers_create and
 * ring_buffers_free, which the ring's callers use, are in ring.h. */
#ifndef BURST_ATTN_RING_BUFFERS_H
#define BURST_ATTN_RING_BUFFERS_H

#include "src/attn/ring.h"

/* The trailing accumulators a backward lends into its caller's Q and dO
 * (RING_CALLER_MEMORY), in the order they are lent: the i-th is acc_in (in)
 * or acc_out, [index], and lives in Q (i even) or dO (i odd), one
 * accumulator's bytes in when i >= 2. Q then holds acc_out[0] and acc_in[1],
 * dO acc_out[1] and acc_in[0]. */
typedef struct {
    int in, index;
} ring_lent_acc;
static inline ring_lent_acc ring_lent(int i)
{
    static const ring_lent_acc order[4] = {{0, 0}, {0, 1}, {1, 1}, {1, 0}};
    return order[i];
}

/* Layouts one set of buffers serves (the whole sequence's, and the
 * half-sequence recompute's). */
enum { RING_MAX_LAYOUTS = 2 };

/* Every pointer before `memory` is memory of the ring's queue. */
struct ring_buffers {
    unsigned char *slot[RING_N_SLOTS];    /* [input_bytes] each */
    float *acc_out[2], *acc_in[2];         /* trailing accumulators, double-buffered */
    float *home_acc;                       /* the home block's final accumulator */
    uint16_t *home_in;                     /* bf16 inputs only: those of the home block's Q,
                                            * K, V, dO that stay home, rounded,
                                            * [home_in_bytes] */
    float *delta;                          /* [n, Hq] rowsum(dO * O) */
    int64_t *home_pos, *block_pos;         /* [n] global positions, loaded (documents) */
    int32_t *home_seg, *block_seg;         /* [n] document ids (0 without segments) */
    /* every block's positions of each layout the schedules have, [P][n] each,
     * written once when the buffers are made: what a ring without documents
     * reads, so that no step uploads or waits for them */
    int64_t *pos_table[RING_MAX_LAYOUTS];
    seq_layout table_layout[RING_MAX_LAYOUTS];
    int n_tables;
    size_t input_bytes, acc_bytes;         /* capacity of a slot and of an accumulator */
    unsigned used;                         /* bit i: buffer i of slot[], acc_out[], acc_in[],
                                            * home_acc (in that order) exists: one that no
                                            * step of any planned pass can touch is NULL */
    size_t home_in_bytes;                  /* capacity of home_in (0: no bf16 schedule) */
    int lent;                              /* trailing accumulators a backward keeps in its
                                            * Q and dO (RING_CALLER_MEMORY), NULL here:
                                            * the first lent of ring_lent's order */
    int home_lent;                         /* home_acc NULL: received into the gradients */
    int64_t n, rows;                       /* capacity in tokens and in token-heads (n * Hq) */
    bk_queue memory;                       /* the queue whose memory holds the buffers above */
    /* device only: page-locked host mirrors of the position tables [2][n] and the event of
     * each one's last upload; parity: the mirror filled last */
    int64_t *pos_host[2];
    int32_t *seg_host[2];
    void *uploaded[2];
    int parity;
    /* device only: the event of the queue's last use (read or write) of each
     * buffer the transport reads or writes */
    void *slot_used[RING_N_SLOTS];
    void *acc_out_used[2], *acc_in_used[2], *home_acc_used;
    void *queue_mark; /* everything queued when a wait began (exposed time) */
};

/* The travelling bundle of a pass of s: the byte offset in it of each of
 * the home block's Q, K, V and dO (ring_inputs' order), -1 for those that
 * stay home: [K | V] in the forward and the KV-side backward, [Q | dO | lse |
 * delta] in the Q-side one (lse and delta after the inputs). */
static inline void ring_bundle_offsets(const ring_schedule *s, int64_t off[4])
{
    int64_t rows = s->layout.n * s->d * s->in_bytes, q = rows * s->h_q, kv = rows * s->h_kv;
    int q_side = s->pass == RING_BWD_Q_SIDE;
    off[0] = q_side ? 0 : -1, off[1] = q_side ? -1 : 0;
    off[2] = q_side ? -1 : kv, off[3] = q_side ? q : -1;
}

/* Bytes of the bf16 inputs that stay home ([Q] forward, [Q | dO] KV-side,
 * [K | V] Q-side: ring_run_home_inputs rounds the travelling ones straight
 * into the home slot): 0 unless the inputs travel in bf16. */
static inline size_t ring_home_in_bytes(const ring_schedule *s)
{
    if (s->in_bytes != 2) return 0;
    int64_t off[4], heads = 0;
    ring_bundle_offsets(s, off);
    const int64_t h[4] = {s->h_q, s->h_kv, s->h_kv, s->pass == RING_FORWARD ? 0 : s->h_q};
    for (int k = 0; k < 4; k++) heads += off[k] < 0 ? h[k] : 0;
    return (size_t)s->layout.n * (size_t)heads * (size_t)s->d * 2;
}

/* The trailing accumulators a backward of s can keep in its Q and dO
 * (RING_CALLER_MEMORY): with bf16 inputs on the KV side, whose [dK | dV] of
 * 2 Hkv d floats a row fits Hq / (2 Hkv) times into Q's and dO's Hq d, up to
 * two in each; else 0. */
static inline int ring_accs_in_inputs(const ring_schedule *s)
{
    if (s->pass != RING_BWD_KV_SIDE || s->in_bytes != 2) return 0;
    int each = s->h_q / (2 * s->h_kv);
    return 2 * (each < 2 ? each : 2);
}

/* 1 when b has every buffer a step of s may touch (ring_buffers.used). */
int ring_buffers_serve(const ring_buffers *b, const ring_schedule *s);

static inline int ring_buffers_on_device(const ring_buffers *b)
{
    return b->memory.where == BK_DEVICE;
}

/* Positions of block's tokens under layout l, and with segments [N] their
 * document ids (else 0), into pos[n] and seg[n] of b (home or block tables);
 * on a device queued on q after what q runs already. 0, or -1 when the
 * device failed. */
int ring_buffers_load_positions(ring_buffers *b, const bk_queue *q, const seq_layout *l, int block,
                                const int32_t *segments, int64_t *pos, int32_t *seg);
/* block's positions [n] under layout l from the tables made with the
 * buffers, or NULL when b has no table of l. */
const int64_t *ring_buffers_table(const ring_buffers *b, const seq_layout *l, int block);

#endif
