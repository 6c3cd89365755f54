/* ring_exec.c: runs a ring schedule on the CPU. It makes no decisions: per
 * step it posts the receives and sends the schedule lists (the next blocks
 * arrive while this one is computed), waits for the block it holds, runs the
 * attention kernel on it, and passes the trailing accumulator on. Transfers
 * progress while computing because the kernel is called on pieces of the
 * query rows with the transport polled between pieces.
 *
 * Buffers: one packed message per travelling block (forward and KV-side:
 * [K | V]; Q-side: [Q | dO | lse | delta]), in the slots the planner assigned;
 * a slot is only overwritten once the sends reading it have completed. All
 * accumulation is fp32. */
#include <stdlib.h>
#include <string.h>

#include "src/attn/ring.h"
#include "util/clock.h"

enum { PIECE_ROWS = 512 }; /* query rows per kernel call between transport polls */

typedef struct {
    const ring_exec_ctx *c;
    const ring_schedule *s;
    int rank;
    bt_world *world;
    unsigned char *slot[RING_N_SLOTS];
    bt_request *slot_recv[RING_N_SLOTS];
    bt_request **slot_sends[RING_N_SLOTS]; /* outstanding sends reading each slot */
    int n_slot_sends[RING_N_SLOTS];
    float *acc_out[2], *acc_in[2];
    bt_request *acc_send[2];
    int64_t *home_pos, *block_pos;
    int32_t *home_seg, *block_seg;
    ring_exec_stats *stats;
} ring_run;

static bt_status timed_wait(ring_run *run, bt_request **req)
{
    if (!*req) return BT_OK;
    double t0 = bu_now();
    bt_status st = bt_wait(req);
    run->stats->wait_s += bu_now() - t0;
    return st;
}

static bt_status drain_slot_sends(ring_run *run, int slot)
{
    bt_status st = BT_OK;
    for (int i = 0; i < run->n_slot_sends[slot] && st == BT_OK; i++)
        st = timed_wait(run, &run->slot_sends[slot][i]);
    run->n_slot_sends[slot] = 0;
    return st;
}

static void block_positions(ring_run *run, int block, int64_t *pos, int32_t *seg)
{
    const seq_layout *l = &run->s->layout;
    seq_layout_positions(l, block, pos);
    if (seg && run->c->segments)
        for (int64_t i = 0; i < l->n; i++) seg[i] = run->c->segments[pos[i]];
}

static bt_status setup(ring_run *run, const ring_exec_ctx *c, ring_exec_stats *stats)
{
    memset(run, 0, sizeof *run);
    run->c = c;
    run->s = c->sched;
    run->rank = bt_comm_rank(c->comm);
    run->world = bt_comm_world(c->comm);
    run->stats = stats;
    memset(stats, 0, sizeof *stats);
    if (bt_comm_size(c->comm) != run->s->P) return BT_ERR_ARG;
    size_t n = (size_t)run->s->layout.n;
    for (int k = 0; k < RING_N_SLOTS; k++) {
        run->slot[k] = malloc(run->s->input_bytes);
        run->slot_sends[k] = calloc(2, sizeof(bt_request *)); /* intra + inter */
    }
    for (int k = 0; k < 2 && run->s->acc_bytes; k++) {
        run->acc_out[k] = malloc(run->s->acc_bytes);
        run->acc_in[k] = malloc(run->s->acc_bytes);
    }
    run->home_pos = malloc(n * sizeof(int64_t));
    run->block_pos = malloc(n * sizeof(int64_t));
    run->home_seg = calloc(n, sizeof(int32_t));
    run->block_seg = calloc(n, sizeof(int32_t));
    block_positions(run, run->rank, run->home_pos, run->home_seg);
    return BT_OK;
}

static void teardown(ring_run *run)
{
    for (int k = 0; k < RING_N_SLOTS; k++) {
        free(run->slot[k]);
        free(run->slot_sends[k]);
    }
    for (int k = 0; k < 2; k++) {
        free(run->acc_out[k]);
        free(run->acc_in[k]);
    }
    free(run->home_pos);
    free(run->block_pos);
    free(run->home_seg);
    free(run->block_seg);
}

/* Posts the receives of this step: blocks needed at later steps. */
static bt_status post_receives(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_recv && st == BT_OK; k++) {
        const ring_xfer *r = &x->recv[k];
        st = drain_slot_sends(run, r->slot);
        if (st == BT_OK)
            st = bt_irecv(run->c->comm, r->peer, r->channel, run->slot[r->slot],
                          run->s->input_bytes, &run->slot_recv[r->slot]);
    }
    return st;
}

/* Forwards the held block (it has arrived) to its next holders. */
static bt_status post_sends(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_send && st == BT_OK; k++) {
        const ring_xfer *t = &x->send[k];
        bt_request **req = &run->slot_sends[t->slot][run->n_slot_sends[t->slot]++];
        st = bt_isend(run->c->comm, t->peer, t->channel, run->slot[t->slot], run->s->input_bytes,
                      req);
    }
    return st;
}

/* Start of a step: post what arrives later, wait for the held block, pass it on. */
static bt_status begin_step(ring_run *run, const ring_step *x, int step)
{
    bt_status st = post_receives(run, x);
    if (st == BT_OK && x->block >= 0 && step > 0) st = timed_wait(run, &run->slot_recv[x->slot]);
    if (st == BT_OK) st = post_sends(run, x);
    return st;
}

static bk_attn_geom geometry(const ring_run *run, int64_t n_q, const int64_t *q_pos,
                             const int32_t *q_seg, const int64_t *kv_pos, const int32_t *kv_seg)
{
    const ring_schedule *s = run->s;
    bk_attn_geom g = {.n_q = n_q, .n_kv = s->layout.n, .h_q = s->h_q, .h_kv = s->h_kv, .d = s->d,
                      .scale = run->c->scale, .q_pos = q_pos, .kv_pos = kv_pos, .q_seg = q_seg,
                      .kv_seg = kv_seg, .mask = run->c->mask};
    return g;
}

/* The forward of one held block, in pieces of query rows with polls between. */
static bt_status forward_block(ring_run *run, const float *Q, const float *K, const float *V,
                               float *O, float *lse)
{
    const ring_schedule *s = run->s;
    int64_t n = s->layout.n;
    size_t q_row = (size_t)s->h_q * (size_t)s->d;
    for (int64_t r0 = 0; r0 < n; r0 += PIECE_ROWS) {
        int64_t rows = n - r0 < PIECE_ROWS ? n - r0 : PIECE_ROWS;
        bk_attn_geom g = geometry(run, rows, run->home_pos + r0, run->home_seg + r0,
                                  run->block_pos, run->block_seg);
        bk_attn_stats ks;
        if (bk_attn_fwd(run->c->queue, &g, Q + (size_t)r0 * q_row, K, V, O + (size_t)r0 * q_row,
                        lse + (size_t)r0 * (size_t)s->h_q, &ks) != BK_OK)
            return BT_ERR_ARG;
        run->stats->tiles_computed += ks.tiles_total - ks.tiles_skipped;
        run->stats->tiles_skipped += ks.tiles_skipped;
        bt_status st = bt_progress(run->world);
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

bt_status ring_forward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                       float *O, float *lse, ring_exec_stats *stats)
{
    ring_run run;
    bt_status st = setup(&run, c, stats);
    if (st != BT_OK || c->sched->pass != RING_FORWARD) return st != BT_OK ? st : BT_ERR_ARG;
    const ring_schedule *s = run.s;
    double t_start = bu_now();
    size_t kv_floats = (size_t)s->layout.n * (size_t)s->h_kv * (size_t)s->d;
    memcpy(run.slot[SLOT_HOME], K, kv_floats * sizeof(float));
    memcpy(run.slot[SLOT_HOME] + kv_floats * sizeof(float), V, kv_floats * sizeof(float));
    bk_attn_fwd_init(c->queue, s->layout.n, s->h_q, s->d, O, lse);

    for (int step = 0; step < s->n_steps && st == BT_OK; step++) {
        const ring_step *x = ring_step_at(s, run.rank, step);
        st = begin_step(&run, x, step);
        if (st != BT_OK || x->block < 0 || !x->compute) continue;
        double t0 = bu_now();
        block_positions(&run, x->block, run.block_pos, run.block_seg);
        const float *kv = (const float *)run.slot[x->slot];
        st = forward_block(&run, Q, kv, kv + kv_floats, O, lse);
        run.stats->compute_s += bu_now() - t0;
        run.stats->blocks_computed++;
    }
    for (int k = 0; k < RING_N_SLOTS && st == BT_OK; k++) st = drain_slot_sends(&run, k);
    if (st == BT_OK) bk_attn_fwd_finalize(c->queue, s->layout.n, s->h_q, s->d, O, lse);
    run.stats->total_s = bu_now() - t_start;
    teardown(&run);
    return st;
}

/* Backward of one held block: adds this pair's gradients; dq/dk/dv point at
 * home buffers or at the trailing accumulator, as the pass dictates. */
static bt_status backward_block(ring_run *run, const float *Q, const float *K, const float *V,
                                const float *dO, const float *lse, const float *delta, float *dQ,
                                float *dK, float *dV, const int64_t *q_pos, const int32_t *q_seg,
                                const int64_t *kv_pos, const int32_t *kv_seg)
{
    const ring_schedule *s = run->s;
    int64_t n = s->layout.n;
    size_t q_row = (size_t)s->h_q * (size_t)s->d;
    for (int64_t r0 = 0; r0 < n; r0 += PIECE_ROWS) {
        int64_t rows = n - r0 < PIECE_ROWS ? n - r0 : PIECE_ROWS;
        bk_attn_geom g = geometry(run, rows, q_pos + r0, q_seg + r0, kv_pos, kv_seg);
        size_t qo = (size_t)r0 * q_row, lo = (size_t)r0 * (size_t)s->h_q;
        bk_attn_stats ks;
        if (bk_attn_bwd(run->c->queue, &g, Q + qo, K, V, dO + qo, lse + lo, delta + lo, dQ + qo,
                        dK, dV, &ks) != BK_OK)
            return BT_ERR_ARG;
        run->stats->tiles_computed += ks.tiles_total - ks.tiles_skipped;
        run->stats->tiles_skipped += ks.tiles_skipped;
        bt_status st = bt_progress(run->world);
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

static void add_into(float *acc, const float *in, size_t count)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; i++) acc[i] += in[i];
}

bt_status ring_backward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                        const float *O, const float *dO, const float *lse, float *dQ, float *dK,
                        float *dV, ring_exec_stats *stats)
{
    ring_run run;
    bt_status st = setup(&run, c, stats);
    const ring_schedule *s = run.s;
    int q_side = s->pass == RING_BWD_Q_SIDE;
    if (st != BT_OK || s->pass == RING_FORWARD) return st != BT_OK ? st : BT_ERR_ARG;
    double t_start = bu_now();
    size_t n = (size_t)s->layout.n, q_floats = n * (size_t)s->h_q * (size_t)s->d,
           kv_floats = n * (size_t)s->h_kv * (size_t)s->d, row_floats = n * (size_t)s->h_q;
    size_t acc_floats = s->acc_bytes / sizeof(float);

    /* delta is computed once at home, so the travelling bundle never needs O. */
    float *delta = malloc(row_floats * sizeof(float));
    bk_attn_delta(c->queue, (int64_t)n, s->h_q, s->d, dO, O, delta);
    float *home = (float *)run.slot[SLOT_HOME];
    if (q_side) {
        memcpy(home, Q, q_floats * sizeof(float));
        memcpy(home + q_floats, dO, q_floats * sizeof(float));
        memcpy(home + 2 * q_floats, lse, row_floats * sizeof(float));
        memcpy(home + 2 * q_floats + row_floats, delta, row_floats * sizeof(float));
        memset(dK, 0, kv_floats * sizeof(float));
        memset(dV, 0, kv_floats * sizeof(float));
    } else {
        memcpy(home, K, kv_floats * sizeof(float));
        memcpy(home + kv_floats, V, kv_floats * sizeof(float));
        memset(dQ, 0, q_floats * sizeof(float));
    }
    /* The home block's final accumulator: dQ (Q-side) or [dK | dV] (KV-side). */
    float *home_acc_dst[2] = {q_side ? dQ : dK, q_side ? NULL : dV};
    int home_acc_done = 0;
    /* The final accumulator of the home block is received from the start, so
     * its sender never waits on this rank to reach the end. */
    int from = s->home_acc_from[run.rank];
    float *home_acc = malloc(s->acc_bytes);
    bt_request *home_recv = NULL;
    if (from >= 0)
        st = bt_irecv(c->comm, from, s->home_acc_channel[run.rank], home_acc, s->acc_bytes,
                      &home_recv);

    for (int step = 0; step < s->n_steps && st == BT_OK; step++) {
        const ring_step *x = ring_step_at(s, run.rank, step);
        st = begin_step(&run, x, step);
        if (st != BT_OK || x->block < 0) continue;
        int a = step % 2;
        bt_request *acc_recv = NULL;
        if (x->acc_from >= 0)
            st = bt_irecv(c->comm, x->acc_from, x->acc_from_channel, run.acc_in[a], s->acc_bytes,
                          &acc_recv);
        if (st == BT_OK) st = timed_wait(&run, &run.acc_send[a]); /* acc_out[a] free again */
        if (st != BT_OK) break;
        memset(run.acc_out[a], 0, s->acc_bytes);
        if (x->compute) {
            double t0 = bu_now();
            block_positions(&run, x->block, run.block_pos, run.block_seg);
            const float *in = (const float *)run.slot[x->slot];
            if (q_side) /* the visiting queries against the home keys */
                st = backward_block(&run, in, K, V, in + q_floats, in + 2 * q_floats,
                                    in + 2 * q_floats + row_floats, run.acc_out[a], dK, dV,
                                    run.block_pos, run.block_seg, run.home_pos, run.home_seg);
            else /* the home queries against the visiting keys */
                st = backward_block(&run, Q, in, in + kv_floats, dO, lse, delta, dQ,
                                    run.acc_out[a], run.acc_out[a] + kv_floats, run.home_pos,
                                    run.home_seg, run.block_pos, run.block_seg);
            run.stats->compute_s += bu_now() - t0;
            run.stats->blocks_computed++;
        }
        if (st == BT_OK && acc_recv) {
            st = timed_wait(&run, &acc_recv);
            if (st == BT_OK) add_into(run.acc_out[a], run.acc_in[a], acc_floats);
        }
        if (st != BT_OK) break;
        if (x->acc_to >= 0) {
            st = bt_isend(c->comm, x->acc_to, x->acc_to_channel, run.acc_out[a], s->acc_bytes,
                          &run.acc_send[a]);
        } else if (x->block == run.rank) { /* the chain ends where it began: at home */
            memcpy(home_acc_dst[0], run.acc_out[a], (q_side ? q_floats : kv_floats) * sizeof(float));
            if (!q_side) memcpy(home_acc_dst[1], run.acc_out[a] + kv_floats, kv_floats * sizeof(float));
            home_acc_done = 1;
        }
    }
    if (st == BT_OK && from >= 0) {
        st = timed_wait(&run, &home_recv);
        if (st == BT_OK) {
            memcpy(home_acc_dst[0], home_acc, (q_side ? q_floats : kv_floats) * sizeof(float));
            if (!q_side) memcpy(home_acc_dst[1], home_acc + kv_floats, kv_floats * sizeof(float));
            home_acc_done = 1;
        }
    }
    if (st == BT_OK && !home_acc_done) { /* no query ever meets this block */
        memset(home_acc_dst[0], 0, (q_side ? q_floats : kv_floats) * sizeof(float));
        if (!q_side) memset(home_acc_dst[1], 0, kv_floats * sizeof(float));
    }
    for (int k = 0; k < RING_N_SLOTS && st == BT_OK; k++) st = drain_slot_sends(&run, k);
    for (int k = 0; k < 2 && st == BT_OK; k++) st = timed_wait(&run, &run.acc_send[k]);
    run.stats->total_s = bu_now() - t_start;
    free(delta);
    free(home_acc);
    teardown(&run);
    return st;
}
