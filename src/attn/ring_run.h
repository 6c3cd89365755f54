/* ring_run.h: the machinery every pass of the ring shares (inside src/attn/
 * only): the buffers (ring_buffers.c), posting the receives and sends a step
 * lists, waiting with the wait counted as exposed communication, the positions
 * of a block, and the attention kernel called on pieces of query rows with the
 * transport polled between pieces so that transfers progress while computing
 * (ring_run.c).
 *
 * One executor for both memories: every buffer operation is a kernel of the
 * ring's queue (bk_copy, bk_fill, bk_axpy) and every transfer names the
 * memory it reads (bt_isend_mem), so the same code runs on host buffers and
 * on device buffers.
 *
 * On a device the queue (the compute stream) and the transport (its own
 * streams, or the host) run side by side, so each buffer the transport
 * touches carries the event of the queue's last use of it: a send waits until
 * the kernels that wrote the buffer have run, a receive until the kernels that
 * read the old content have; only that buffer's kernels, never the whole queue,
 * and the transport is polled meanwhile (ring_run_await). */
#ifndef BURST_ATTN_RING_RUN_H
#define BURST_ATTN_RING_RUN_H

#include "src/attn/kernel_status.h"
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

/* Every pointer before `memory` is memory of the ring's queue. */
struct ring_buffers {
    unsigned char *slot[RING_N_SLOTS];    /* [input_bytes] each */
    float *acc_out[2], *acc_in[2];         /* trailing accumulators, double-buffered */
    float *home_acc;                       /* the home block's final accumulator */
    uint16_t *home_in;                     /* bf16 inputs only: those of the home block's Q,
                                            * K, V, dO that stay home, rounded,
                                            * [home_in_bytes] */
    float *delta;                          /* [n, Hq] rowsum(dO * O) */
    int64_t *home_pos, *block_pos;         /* [n] global positions */
    int32_t *home_seg, *block_seg;         /* [n] document ids (0 without segments) */
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

/* Sends reading one slot at once (a step forwards its block to at most two
 * holders), and the most transfers one rank of a pass has under way at once:
 * a receive into each slot but home's, RING_SLOT_SENDS sends reading each
 * slot, the two trailing accumulators sent, one received, and the home
 * block's final accumulator received. Passes run one after the other, so the
 * transport's staging pool is taken for that many messages when the device
 * is linked (transport_link_device). */
enum {
    RING_SLOT_SENDS = 2,
    RING_MAX_IN_FLIGHT = (RING_N_SLOTS - 1) + RING_N_SLOTS * RING_SLOT_SENDS + 2 + 1 + 1,
};

typedef struct {
    const ring_exec_ctx *c;
    const ring_schedule *s;
    int rank;
    bt_world *world;
    ring_buffers *b;
    ring_buffers *owned; /* made for this call when the caller gave none */
    bt_request *slot_recv[RING_N_SLOTS];
    bt_request *slot_sends[RING_N_SLOTS][RING_SLOT_SENDS]; /* outstanding sends reading each slot */
    int n_slot_sends[RING_N_SLOTS];
    bt_request *acc_send[2];
    float *acc_out[2], *acc_in[2]; /* backward: the trailing accumulators, the buffers' or
                                    * (ring_buffers.lent) in the caller's Q and dO */
    float *home_acc;               /* backward: the home block's final accumulator, the
                                    * buffers' or (home_lent) the caller's dQ or [dK | dV] */
    ring_exec_stats *stats;
    bt_mem mem;        /* where the buffers live, for the transport */
    size_t elem;       /* bytes of a travelling input element: 4 (fp32) or 2 (bf16) */
    int ungrouped;     /* testing aid (BURST_TEST_RING_UNGROUPED=1): a step's posts each in a
                        * group of its own, receives first: the order that deadlocks over NCCL */
} ring_run;

/* The home block's inputs as the kernels and the slots take them (fp32 or
 * bf16: ring_run.elem); dO is NULL in the forward. */
typedef struct {
    const void *Q, *K, *V, *dO;
} ring_inputs;

/* The caller's fp32 inputs as ring_inputs: themselves, or rounded to bf16
 * on the ring's queue, those that travel into the home slot where the
 * bundle has them (ring_bundle_offsets), the others into the buffers'
 * home_in. */
bt_status ring_run_home_inputs(ring_run *run, const float *Q, const float *K, const float *V,
                               const float *dO, ring_inputs *in);
/* base + elements of the travelling type: an input offset by rows. */
static inline const void *ring_run_at(const ring_run *run, const void *base, size_t elements)
{
    return (const unsigned char *)base + elements * run->elem;
}
/* The attention kernels on inputs of the travelling type. */
bk_status ring_run_attn_fwd(const ring_run *run, const bk_attn_geom *g, const void *Q,
                            const void *K, const void *V, float *O, float *lse,
                            bk_attn_stats *stats);
bk_status ring_run_attn_bwd(const ring_run *run, const bk_attn_geom *g, const void *Q,
                            const void *K, const void *V, const void *dO, const float *lse,
                            const float *delta, float *dQ, float *dK, float *dV,
                            bk_attn_stats *stats);

/* The attention of one piece of query rows [r0, r0 + rows) against a block. */
typedef bt_status (*ring_piece_fn)(ring_run *run, int64_t r0, int64_t rows, void *arg);

/* Starts a pass of c->sched for the caller (backward: 0 for ring_forward, 1
 * for ring_backward); BT_ERR_ARG when the schedule is of the other kind, the
 * communicator is not its group or the buffers do not hold it. */
bt_status ring_run_begin(ring_run *run, const ring_exec_ctx *c, int backward,
                         ring_exec_stats *stats);
/* Waits for every send still reading a slot or an accumulator, then ends. */
bt_status ring_run_finish(ring_run *run, bt_status st);

/* Waits for a transfer. The time it keeps the queue idle counts as exposed
 * communication (stats->wait_s): on the host all of it; on a device only the
 * part after the queue has run out of work, since until then the device was
 * computing while the host waited. */
bt_status ring_run_wait(ring_run *run, bt_request **req);
/* Start of a step, as one transport group: post what arrives later, wait for
 * the held block, pass it on. */
bt_status ring_run_begin_step(ring_run *run, const ring_step *x, int step);
/* Positions (and document ids) of block's tokens into the block tables. */
bt_status ring_run_block_positions(ring_run *run, int block);
/* After queuing work on a buffer the transport touches: *used (one of the
 * buffers' *_used events) stands for it from now on. No-op on the host. */
bt_status ring_run_mark(ring_run *run, void *used);
/* Before the transport reads or writes that buffer: waits until the queue
 * has run the work *used stands for, polling the transport meanwhile. No-op
 * on the host, where kernels have run when they return. */
bt_status ring_run_await(ring_run *run, void *used);
bt_status ring_run_isend(ring_run *run, int peer, int channel, const void *buf, size_t bytes,
                         bt_request **req);
bt_status ring_run_irecv(ring_run *run, int peer, int channel, void *buf, size_t bytes,
                         bt_request **req);
/* The geometry of a piece of n_q query rows against a whole block of keys. */
bk_attn_geom ring_run_geometry(const ring_run *run, int64_t n_q, const int64_t *q_pos,
                               const int32_t *q_seg, const int64_t *kv_pos,
                               const int32_t *kv_seg);
/* Calls fn on every piece of the n local query rows, polling in between, and
 * counts the kernel time and the block as computed. */
bt_status ring_run_pieces(ring_run *run, ring_piece_fn fn, void *arg);
/* Where a kernel call counts its tiles: ks zeroed, or NULL on a device,
 * where counting would make the host wait for every kernel (tiles then go
 * uncounted). */
bk_attn_stats *ring_run_tile_stats(const ring_run *run, bk_attn_stats *ks);
void ring_run_count_tiles(ring_run *run, const bk_attn_stats *ks);

#endif
