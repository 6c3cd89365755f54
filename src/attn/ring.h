/* ring.h: running a planned ring (ring_plan.h) on the CPU or on a device.
 * Collective over the context-parallel communicator, whose ranks are the
 * layout's ranks. Local buffers follow the kernel layouts (kernels/attention.h):
 *   Q, O, dO, dQ [n, Hq, d]; K, V, dK, dV [n, Hkv, d]; lse [n, Hq]
 * where n = N / P tokens of this rank, in the layout's local order, fp32 (what
 * travels may be bf16: ring_exec_ctx.in_type), in the
 * memory of the context's queue: host memory for a host queue, device memory
 * for a device queue (the transport then needs the device's hooks,
 * bt_world_set_device).
 *
 * The executor lives in four files: ring_buffers.c (the buffers in either
 * memory, the position tables), ring_run.c (slots, posting, waiting, the
 * kernel called piece by piece), ring_forward.c and ring_backward.c. */
#ifndef BURST_ATTN_RING_H
#define BURST_ATTN_RING_H

#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/attn/ring_plan.h"
#include "transport/transport.h"

/* The working buffers of a ring: the input slots, the trailing accumulators,
 * delta and the positions of the home and the held block. Made once for the
 * schedules a caller will run and reused by every pass. */
typedef struct ring_buffers ring_buffers;

/* ring_buffers_create's flags. RING_CALLER_MEMORY: the backward keeps
 * accumulators in its caller's memory, so that the buffers need not hold
 * them (on a device at long sequences, the ring's largest buffers):
 * - the home block's final accumulator is received straight into its
 *   gradients: dQ (Q-side), or dK and dV, which every call then gives as one
 *   buffer [dK | dV] (dV = dK + n Hkv d);
 * - where the inputs travel in bf16 on the KV side (read once, rounded at
 *   home), the trailing [dK | dV] accumulators go into Q's and dO's memory
 *   once the ring has read them: up to four, as many as Q's [n, Hq, d] holds
 *   two of; every call then gives Q and dO writable (ring_exec_ctx.spend). */
enum { RING_CALLER_MEMORY = 1 };

/* Buffers large enough for each of scheds[n_scheds], in the memory of q (device
 * memory for a device queue; q NULL: host), with flags (RING_CALLER_MEMORY or
 * 0); NULL when out of memory. */
ring_buffers *ring_buffers_create(const ring_schedule *const *scheds, int n_scheds,
                                  const bk_queue *q, unsigned flags);
void ring_buffers_free(ring_buffers *b);
/* Bytes ring_buffers_create allocates for scheds[n_scheds] and flags, known
 * before allocating (what a memory report and its pre-check count for the
 * ring). */
size_t ring_buffers_bytes(const ring_schedule *const *scheds, int n_scheds, unsigned flags);

/* Query rows per kernel call on the host unless a ring_exec_ctx says
 * otherwise: small enough that the transport is polled often, large enough
 * for the kernel's tiles. */
enum { RING_PIECE_ROWS = 512 };

/* The query rows per kernel call of a ring over blocks of n rows: piece_rows
 * when > 0; else RING_PIECE_ROWS on the host, and on a device the whole block,
 * since there the calls return before their kernels run (the host polls the
 * transport no sooner for smaller pieces) and a piece of 512 rows gives the
 * kernel a grid of 8 blocks per head, too few to fill a GPU. */
int64_t ring_piece_rows(int64_t piece_rows, int64_t n, int on_device);

typedef struct {
    bt_comm *comm;               /* the context-parallel group */
    const ring_schedule *sched;  /* the pass to run */
    const bk_queue *queue;
    float scale;                 /* softmax scale */
    bk_attn_mask mask;           /* the kernel mask, the one the schedule was planned with;
                                  * on a device queue its block_bits in device memory */
    const int32_t *segments;     /* [N] global document ids (document mask), else NULL */
    ring_buffers *buffers;       /* made for sched by ring_buffers_create; NULL: made for this call */
    int64_t piece_rows;          /* query rows per kernel call between transport polls;
                                  * 0: ring_piece_rows' default */
    bk_dtype in_type;            /* what Q, K, V and dO travel and reach the kernels as:
                                  * BK_F32 (0), or BK_BF16, rounded once at home (bk_round_bf16:
                                  * half the bytes on the wire and in the slots, and on a device
                                  * the same bits, since its kernels round fp32 inputs so); the
                                  * schedule is planned with the same (in_bytes 2) */
    struct ring_sdpa *sdpa;      /* the block pairs SDPA calls compute (src/attn/ring_sdpa.h,
                                  * made for this layout; in_type BK_BF16 on a device), the
                                  * others on our kernels; NULL: all on our kernels */
    float *spend[2];             /* backward on buffers made with RING_CALLER_MEMORY: the
                                  * Q and dO it is given, writable: the ring may overwrite
                                  * them (else NULL; a call whose buffers are made for it
                                  * makes them so when given these) */
} ring_exec_ctx;

typedef struct {
    double total_s;      /* wall time of the pass */
    double compute_s;    /* in attention kernels */
    double wait_s;       /* waiting for transfers: the exposed communication */
    int64_t blocks_computed;
    int64_t tiles_computed, tiles_skipped;
} ring_exec_stats;

bt_status ring_forward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                       float *O, float *lse, ring_exec_stats *stats);
/* dQ, dK, dV are overwritten with this rank's gradients. dQ may be O: O is
 * read once, for delta = rowsum(dO * O), on the queue before anything is
 * written to dQ. With in_type BK_BF16, dK and dV may also be K and V: Q, K,
 * V and dO are then read once, rounded at home, before any gradient is
 * written. (The model runner's backward keeps its gradients so.) On buffers
 * made with RING_CALLER_MEMORY, c->spend must be {Q, dO}, whose content is
 * lost, and dV must be dK + n Hkv d. */
bt_status ring_backward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                        const float *O, const float *dO, const float *lse, float *dQ, float *dK,
                        float *dV, ring_exec_stats *stats);

#endif
