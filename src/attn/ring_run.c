/* ring_run.c: the buffers and the step machinery shared by ring_forward.c and
 * ring_backward.c (ring_run.h). It makes no decisions: a step posts the
 * receives and sends the schedule lists (the next blocks arrive while this one
 * is computed) and waits for the block it holds; a slot is only overwritten
 * once the sends reading it have completed. */
#include <stdlib.h>
#include <string.h>

#include "src/attn/ring_run.h"
#include "util/clock.h"

ring_buffers *ring_buffers_create(const ring_schedule *const *scheds, int n_scheds)
{
    ring_buffers *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    for (int i = 0; i < n_scheds; i++) {
        const ring_schedule *s = scheds[i];
        if (s->input_bytes > b->input_bytes) b->input_bytes = s->input_bytes;
        if (s->acc_bytes > b->acc_bytes) b->acc_bytes = s->acc_bytes;
        if (s->layout.n > b->n) b->n = s->layout.n;
        if (s->layout.n * s->h_q > b->rows) b->rows = s->layout.n * s->h_q;
    }
    int ok = 1;
    for (int k = 0; k < RING_N_SLOTS; k++) ok &= (b->slot[k] = malloc(b->input_bytes)) != NULL;
    for (int k = 0; k < 2 && b->acc_bytes; k++) {
        ok &= (b->acc_out[k] = malloc(b->acc_bytes)) != NULL;
        ok &= (b->acc_in[k] = malloc(b->acc_bytes)) != NULL;
    }
    size_t n = (size_t)b->n;
    ok &= (b->home_acc = malloc(b->acc_bytes ? b->acc_bytes : 1)) != NULL;
    ok &= (b->delta = malloc(((size_t)b->rows + 1) * sizeof(float))) != NULL;
    ok &= (b->home_pos = malloc(n * sizeof(int64_t))) != NULL;
    ok &= (b->block_pos = malloc(n * sizeof(int64_t))) != NULL;
    ok &= (b->home_seg = calloc(n, sizeof(int32_t))) != NULL;
    ok &= (b->block_seg = calloc(n, sizeof(int32_t))) != NULL;
    if (!ok) {
        ring_buffers_free(b);
        return NULL;
    }
    return b;
}

void ring_buffers_free(ring_buffers *b)
{
    if (!b) return;
    for (int k = 0; k < RING_N_SLOTS; k++) free(b->slot[k]);
    for (int k = 0; k < 2; k++) free(b->acc_out[k]), free(b->acc_in[k]);
    free(b->home_acc), free(b->delta);
    free(b->home_pos), free(b->block_pos), free(b->home_seg), free(b->block_seg);
    free(b);
}

size_t ring_buffers_bytes(const ring_buffers *b)
{
    size_t n = (size_t)b->n;
    return RING_N_SLOTS * b->input_bytes + 5 * b->acc_bytes + (size_t)b->rows * sizeof(float) +
           n * 2 * (sizeof(int64_t) + sizeof(int32_t));
}

bt_status ring_run_wait(ring_run *run, bt_request **req)
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
        st = ring_run_wait(run, &run->slot_sends[slot][i]);
    run->n_slot_sends[slot] = 0;
    return st;
}

void ring_run_block_positions(ring_run *run, int block, int64_t *pos, int32_t *seg)
{
    const seq_layout *l = &run->s->layout;
    seq_layout_positions(l, block, pos);
    if (run->c->segments)
        for (int64_t i = 0; i < l->n; i++) seg[i] = run->c->segments[pos[i]];
}

/* The buffers must hold this schedule: the caller's, or made for the call. */
static int buffers_fit(const ring_buffers *b, const ring_schedule *s)
{
    return b->input_bytes >= s->input_bytes && b->acc_bytes >= s->acc_bytes &&
           b->n >= s->layout.n && b->rows >= s->layout.n * s->h_q;
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
    if (bt_comm_size(c->comm) != run->s->P || backward != (run->s->pass != RING_FORWARD))
        return BT_ERR_ARG;
    run->b = c->buffers;
    if (!run->b) run->b = run->owned = ring_buffers_create(&c->sched, 1);
    if (!run->b || !buffers_fit(run->b, run->s)) {
        ring_buffers_free(run->owned);
        run->owned = NULL;
        return BT_ERR_ARG;
    }
    ring_run_block_positions(run, run->rank, run->b->home_pos, run->b->home_seg);
    return BT_OK;
}

bt_status ring_run_finish(ring_run *run, bt_status st)
{
    for (int k = 0; k < RING_N_SLOTS && st == BT_OK; k++) st = drain_slot_sends(run, k);
    for (int k = 0; k < 2 && st == BT_OK; k++) st = ring_run_wait(run, &run->acc_send[k]);
    ring_buffers_free(run->owned);
    run->owned = NULL;
    return st;
}

/* Posts the receives of this step: blocks needed at later steps. */
static bt_status post_receives(ring_run *run, const ring_step *x)
{
    bt_status st = BT_OK;
    for (int k = 0; k < x->n_recv && st == BT_OK; k++) {
        const ring_xfer *r = &x->recv[k];
        st = drain_slot_sends(run, r->slot);
        if (st == BT_OK)
            st = bt_irecv(run->c->comm, r->peer, r->channel, run->b->slot[r->slot],
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
        st = bt_isend(run->c->comm, t->peer, t->channel, run->b->slot[t->slot],
                      run->s->input_bytes, req);
    }
    return st;
}

bt_status ring_run_begin_step(ring_run *run, const ring_step *x, int step)
{
    bt_status st = post_receives(run, x);
    if (st == BT_OK && x->block >= 0 && step > 0)
        st = ring_run_wait(run, &run->slot_recv[x->slot]);
    if (st == BT_OK) st = post_sends(run, x);
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

void ring_run_count_tiles(ring_run *run, const bk_attn_stats *ks)
{
    run->stats->tiles_computed += ks->tiles_total - ks->tiles_skipped;
    run->stats->tiles_skipped += ks->tiles_skipped;
}

bt_status ring_run_pieces(ring_run *run, ring_piece_fn fn, void *arg)
{
    int64_t n = run->s->layout.n;
    int64_t piece = run->c->piece_rows > 0 ? run->c->piece_rows : RING_PIECE_ROWS;
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
