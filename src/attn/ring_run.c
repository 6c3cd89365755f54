/* ring_run.c: the step machinery shared by ring_forward.c and
 * ring_backward.c (ring_run.h). It makes no decisions: a step posts the
 * receives and sends the schedule lists as one transport group (the next
 * blocks arrive while this one is computed) and waits for the block it holds;
 * a slot is only overwritten once the sends reading it have completed. */
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "src/attn/ring_run.h"
#include "util/clock.h"

/* Host time the transfer kept the queue idle: the whole wait on the host; on
 * a device, from the moment the queue had run everything queued before the
 * wait (queue_mark) until the transfer completed. */
static bt_status wait_on_device(ring_run *run, bt_request **req)
{
    void *mark = run->b->queue_mark;
    bt_status recorded = attn_kernel_status(bk_device_event_record(mark, run->c->queue));
    if (recorded != BT_OK) return recorded;
    double idle_since = -1.0;
    for (;;) {
        int done = 0;
        bt_status st = bt_test(req, &done);
        if (st != BT_OK || done) {
            if (idle_since >= 0.0) run->stats->wait_s += bu_now() - idle_since;
            return st;
        }
        if (idle_since < 0.0) {
            int ran = bk_device_event_query(mark);
            if (ran < 0) return BT_ERR_SYS;
            if (ran) idle_since = bu_now();
        }
        st = bt_progress(run->world);
        if (st != BT_OK) return st;
    }
}

bt_status ring_run_wait(ring_run *run, bt_request **req)
{
    if (!*req) return BT_OK;
    if (run->mem == BT_MEM_DEVICE) return wait_on_device(run, req);
    double t0 = bu_now();
    bt_status st = bt_wait(req);
    run->stats->wait_s += bu_now() - t0;
    return st;
}

bt_status ring_run_mark(ring_run *run, void *used)
{
    if (run->mem != BT_MEM_DEVICE) return BT_OK;
    return attn_kernel_status(bk_device_event_record(used, run->c->queue));
}

bt_status ring_run_await(ring_run *run, void *used)
{
    if (run->mem != BT_MEM_DEVICE) return BT_OK;
    for (;;) {
        int ran = bk_device_event_query(used);
        if (ran != 0) return ran > 0 ? BT_OK : BT_ERR_SYS;
        bt_status st = bt_progress(run->world);
        if (st != BT_OK) return st;
    }
}

static bt_status drain_slot_sends(ring_run *run, int slot)
{
    bt_status st = BT_OK;
    for (int i = 0; i < run->n_slot_sends[slot] && st == BT_OK; i++)
        st = ring_run_wait(run, &run->slot_sends[slot][i]);
    run->n_slot_sends[slot] = 0;
    return st;
}

/* block's positions and ids for the kernels: *pos into the table when the
 * ring has no documents, else loaded into pos_buf and seg_buf. */
static bt_status positions_of(ring_run *run, int block, int64_t *pos_buf, int32_t *seg_buf,
                              const int64_t **pos, const int32_t **seg)
{
    ring_buffers *b = run->b;
    const int64_t *table = run->c->segments ? NULL : ring_buffers_table(b, &run->s->layout, block);
    *pos = table ? table : pos_buf;
    *seg = seg_buf; /* read only under a document mask, which loads them */
    if (table) return BT_OK;
    return ring_buffers_load_positions(b, run->c->queue, &run->s->layout, block, run->c->segments,
                                       pos_buf, seg_buf) == 0
               ? BT_OK
               : BT_ERR_SYS;
}

bt_status ring_run_block_positions(ring_run *run, int block)
{
    return positions_of(run, block, run->b->block_pos, run->b->block_seg, &run->block_pos,
                        &run->block_seg);
}

bt_status ring_run_isend(ring_run *run, int peer, int channel, const void *buf, size_t bytes,
                         bt_request **req)
{
    return bt_isend_mem(run->c->comm, peer, channel, buf, bytes, run->mem, req);
}

bt_status ring_run_irecv(ring_run *run, int peer, int channel, void *buf, size_t bytes,
                         bt_request **req)
{
    return bt_irecv_mem(run->c->comm, peer, channel, buf, bytes, run->mem, req);
}

/* The buffers must hold this schedule: the caller's, or made for the call. */
static int buffers_fit(const ring_buffers *b, const ring_schedule *s)
{
    return b->input_bytes >= s->input_bytes && b->acc_bytes >= s->acc_bytes &&
           b->n >= s->layout.n && b->rows >= s->layout.n * s->h_q &&
           b->home_in_bytes >= ring_home_in_bytes(s) && ring_buffers_serve(b, s) &&
           (s->pass == RING_FORWARD || ring_accs_in_inputs(s) >= b->lent);
}

bt_status ring_run_home_inputs(ring_run *run, const float *Q, const float *K, const float *V,
                               const float *dO, ring_inputs *in)
{
    *in = (ring_inputs){Q, K, V, dO};
    if (run->elem == sizeof(float)) return BT_OK;
    const ring_schedule *s = run->s;
    int64_t q = s->layout.n * s->h_q * s->d, kv = s->layout.n * s->h_kv * s->d, off[4];
    ring_bundle_offsets(s, off);
    const float *from[4] = {Q, K, V, dO};
    const int64_t count[4] = {q, kv, kv, q};
    const void **to[4] = {&in->Q, &in->K, &in->V, &in->dO};
    uint16_t *at = run->b->home_in;
    for (int k = 0; k < 4; k++) {
        if (!from[k]) continue;
        uint16_t *dst = off[k] >= 0 ? (uint16_t *)(run->b->slot[SLOT_HOME] + off[k]) : at;
        bt_status st = attn_kernel_status(bk_round_bf16(run->c->queue, count[k], from[k], dst));
        if (st != BT_OK) return st;
        *to[k] = dst;
        if (dst == at) at += count[k];
    }
    return BT_OK;
}

bk_status ring_run_attn_fwd(const ring_run *run, const bk_attn_geom *g, const void *Q,
                            const void *K, const void *V, float *O, float *lse,
                            bk_attn_stats *stats)
{
    const bk_queue *q = run->c->queue;
    return run->elem == sizeof(float) ? bk_attn_fwd(q, g, Q, K, V, O, lse, stats)
                                      : bk_attn_fwd_bf16(q, g, Q, K, V, O, lse, stats);
}

bk_status ring_run_attn_bwd(const ring_run *run, const bk_attn_geom *g, const void *Q,
                            const void *K, const void *V, const void *dO, const float *lse,
                            const float *delta, float *dQ, float *dK, float *dV,
                            bk_attn_stats *stats)
{
    const bk_queue *q = run->c->queue;
    return run->elem == sizeof(float)
               ? bk_attn_bwd(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, stats)
               : bk_attn_bwd_bf16(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, stats);
}

bt_status ring_run_begin(ring_run *run, const ring_exec_ctx *c, int backward,
                         ring_exec_stats *stats)
{
    memset(run, 0, sizeof *run);
    memset(stats, 0, sizeof *stats);
    run->c = c;
    run->s = c->sched;
    run->rank = bt_comm_rank(c->comm);
    run->world = bt_comm_world(c->comm);
    run->stats = stats;
    run->elem = c->in_type == BK_BF16 ? 2 : sizeof(float);
    const char *ungrouped = getenv("BURST_TEST_RING_UNGROUPED");
    run->ungrouped = ungrouped && strcmp(ungrouped, "1") == 0;
    if (bt_comm_size(c->comm) != run->s->P || backward != (run->s->pass != RING_FORWARD) ||
        (size_t)run->s->in_bytes != run->elem)
        return BT_ERR_ARG;
    run->b = c->buffers;
    unsigned flags = c->spend[0] ? RING_CALLER_MEMORY : 0;
    if (!run->b) run->b = run->owned = ring_buffers_create(&c->sched, 1, c->queue, flags);
    int on_device = c->queue->where == BK_DEVICE;
    if (!run->b || !buffers_fit(run->b, run->s) || ring_buffers_on_device(run->b) != on_device) {
        ring_buffers_free(run->owned);
        run->owned = NULL;
        return BT_ERR_ARG;
    }
    run->mem = on_device ? BT_MEM_DEVICE : BT_MEM_HOST;
    return positions_of(run, run->rank, run->b->home_pos, run->b->home_seg, &run->home_pos,
                        &run->home_seg);
}

bt_status ring_run_finish(ring_run *run, bt_status st)
{
    for (int k = 0; k < RING_N_SLOTS && st == BT_OK; k++) st = drain_slot_sends(run, k);
    for (int k = 0; k < 2 && st == BT_OK; k++) st = ring_run_wait(run, &run->acc_send[k]);
    ring_buffers_free(run->owned);
    run->owned = NULL;
    return st;
}

/* The receive slots free again: the sends and the kernels reading their old
 * blocks done. */
static bt_status ready_receive_slots(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_recv && st == BT_OK; k++) {
        st = drain_slot_sends(run, x->recv[k].slot);
        if (st == BT_OK) st = ring_run_await(run, run->b->slot_used[x->recv[k].slot]);
    }
    return st;
}

static bt_status post_receives(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_recv && st == BT_OK; k++) {
        const ring_xfer *r = &x->recv[k];
        st = ring_run_irecv(run, r->peer, r->channel, run->b->slot[r->slot], run->s->input_bytes,
                            &run->slot_recv[r->slot]);
    }
    return st;
}

/* Forwards the held block (it has arrived, or the queue has packed it at
 * home) to its next holders. */
static bt_status post_sends(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_send && st == BT_OK; k++) {
        const ring_xfer *t = &x->send[k];
        st = ring_run_await(run, run->b->slot_used[t->slot]);
        if (st != BT_OK) break;
        bt_request **req = &run->slot_sends[t->slot][run->n_slot_sends[t->slot]++];
        st = ring_run_isend(run, t->peer, t->channel, run->b->slot[t->slot], run->s->input_bytes,
                            req);
    }
    return st;
}

/* The step's receives (blocks for later steps) and sends (the held block)
 * form one transport group; the peers post the other ends in their group of
 * the same step (ring_plan.c), so on NCCL, which issues a group's posts
 * together at its end, no rank's receive waits behind its own send. The
 * receives are posted first and the held block waited for inside the group
 * (it came in an earlier group): on the backends that post at once (UCX, the
 * staged path) the next blocks then start to travel before this one is in,
 * as the ring needs to overlap. Nothing in the group waits for a request
 * posted in it, which would complete only after the group's end. */
bt_status ring_run_begin_step(ring_run *run, const ring_step *x, int step)
{
    bt_status st = ready_receive_slots(run, x);
    if (st == BT_OK && !run->ungrouped) st = bt_group_start(run->world);
    if (st != BT_OK) return st;
    st = post_receives(run, x);
    if (st == BT_OK && x->block >= 0 && step > 0) st = ring_run_wait(run, &run->slot_recv[x->slot]);
    if (st == BT_OK) st = post_sends(run, x);
    bt_status ended = run->ungrouped ? BT_OK : bt_group_end(run->world);
    if (st == BT_OK) st = ended;
    /* start the transfers now rather than at the first poll between pieces */
    if (st == BT_OK && x->n_send > 0) st = bt_progress(run->world);
    return st;
}

bk_attn_geom ring_run_geometry(const ring_run *run, int64_t n_q, const int64_t *q_pos,
                               const int32_t *q_seg, const int64_t *kv_pos, const int32_t *kv_seg)
{
    const ring_schedule *s = run->s;
    bk_attn_geom g = {.n_q = n_q, .n_kv = s->layout.n, .h_q = s->h_q, .h_kv = s->h_kv, .d = s->d,
                      .scale = run->c->scale, .q_pos = q_pos, .kv_pos = kv_pos, .q_seg = q_seg,
                      .kv_seg = kv_seg, .mask = run->c->mask};
    return g;
}

bk_attn_stats *ring_run_tile_stats(const ring_run *run, bk_attn_stats *ks)
{
    memset(ks, 0, sizeof *ks);
    return run->mem == BT_MEM_DEVICE ? NULL : ks;
}

void ring_run_count_tiles(ring_run *run, const bk_attn_stats *ks)
{
    run->stats->tiles_computed += ks->tiles_total - ks->tiles_skipped;
    run->stats->tiles_skipped += ks->tiles_skipped;
}

int64_t ring_piece_rows(int64_t piece_rows, int64_t n, int on_device)
{
    if (piece_rows > 0) return piece_rows;
    return on_device && n > 0 ? n : RING_PIECE_ROWS;
}

bt_status ring_run_pieces(ring_run *run, ring_piece_fn fn, void *arg)
{
    int64_t n = run->s->layout.n;
    int64_t piece = ring_piece_rows(run->c->piece_rows, n, run->mem == BT_MEM_DEVICE);
    double t0 = bu_now();
    bt_status st = BT_OK;
    for (int64_t r0 = 0; r0 < n && st == BT_OK; r0 += piece) {
        st = fn(run, r0, n - r0 < piece ? n - r0 : piece, arg);
        if (st == BT_OK) st = bt_progress(run->world);
    }
    run->stats->compute_s += bu_now() - t0;
    run->stats->blocks_computed++;
    return st;
}

bt_status ring_run_sdpa(ring_run *run, double t0, bt_status st)
{
    if (st == BT_OK) st = bt_progress(run->world);
    run->stats->compute_s += bu_now() - t0;
    run->stats->blocks_computed++;
    return st;
}
