/* ring_run.h: the machinery every pass of the ring shares (inside src/attn/
 * only): posting the receives and sends a step
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
#include "src/attn/ring_buffers.h"
#include "src/attn/ring_sdpa.h"

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
    /* the positions and document ids of the home block and of the held one, as
     * the kernels read them: the buffers' tables, or their loaded copies */
    const int64_t *home_pos, *block_pos;
    const int32_t *home_seg, *block_seg;
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
/* The held block's positions (and document ids): run->block_pos and
 * block_seg point at them, from the buffers' table when there are no
 * documents (nothing uploaded), else loaded into the block tables. */
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
/* A block computed by SDPA calls (ring_sdpa.h), since t0, rather than by
 * pieces: polls the transport and counts the block and its time as
 * ring_run_pieces does; returns st, the calls' status. */
bt_status ring_run_sdpa(ring_run *run, double t0, bt_status st);
/* Where a kernel call counts its tiles: ks zeroed, or NULL on a device,
 * where counting would make the host wait for every kernel (tiles then go
 * uncounted). */
bk_attn_stats *ring_run_tile_stats(const ring_run *run, bk_attn_stats *ks);
void ring_run_count_tiles(ring_run *run, const bk_attn_stats *ks);

#endif
