/* ring_run.c: the buffers and the step machinery shared by ring_forward.c and
 * ring_backward.c (ring_run.h). It makes no decisions: a step posts the
 * receives and sends the schedule lists (the next blocks arrive while this one
 * is computed) and waits for the block it holds; a slot is only overwritten
 * once the sends reading it have completed. */
#include <stdlib.h>
#include <string.h>

#include "src/attn/ring_run.h"
#include "util/clock.h"

/* The slots, then 4 trailing accumulators, the home accumulator, delta and 4 tables. */
enum { N_BUFFERS = RING_N_SLOTS + 10 };

/* The capacities b needs for each of scheds[n_scheds]: the largest of each. */
static void buffer_capacities(const ring_schedule *const *scheds, int n_scheds, ring_buffers *b)
{
    for (int i = 0; i < n_scheds; i++) {
        const ring_schedule *s = scheds[i];
        if (s->input_bytes > b->input_bytes) b->input_bytes = s->input_bytes;
        if (s->acc_bytes > b->acc_bytes) b->acc_bytes = s->acc_bytes;
        if (s->layout.n > b->n) b->n = s->layout.n;
        if (s->layout.n * s->h_q > b->rows) b->rows = s->layout.n * s->h_q;
    }
}

/* The bytes of each buffer of b, in the order ring_buffers_create allocates
 * them (slots, accumulators out and in, home accumulator, delta, positions,
 * document ids); returns their count. */
static int buffer_sizes(const ring_buffers *b, size_t sizes[N_BUFFERS])
{
    int k = 0;
    size_t n = (size_t)b->n;
    for (int i = 0; i < RING_N_SLOTS; i++) sizes[k++] = b->input_bytes;
    for (int i = 0; i < 4; i++) sizes[k++] = b->acc_bytes;
    sizes[k++] = b->acc_bytes ? b->acc_bytes : 1;
    sizes[k++] = ((size_t)b->rows + 1) * sizeof(float);
    sizes[k++] = n * sizeof(int64_t), sizes[k++] = n * sizeof(int64_t);
    sizes[k++] = n * sizeof(int32_t), sizes[k++] = n * sizeof(int32_t);
    return k;
}

ring_buffers *ring_buffers_create(const ring_schedule *const *scheds, int n_scheds)
{
    ring_buffers *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    buffer_capacities(scheds, n_scheds, b);
    size_t sizes[N_BUFFERS];
    int count = buffer_sizes(b, sizes), ok = 1;
    void *p[N_BUFFERS] = {NULL};
    /* zeroed: the document ids stay 0 when the mask has no segments */
    for (int i = 0; i < count; i++) ok &= !sizes[i] || (p[i] = calloc(1, sizes[i])) != NULL;
    if (!ok) {
        for (int i = 0; i < count; i++) free(p[i]);
        free(b);
        return NULL;
    }
    int k = 0;
    for (int i = 0; i < RING_N_SLOTS; i++) b->slot[i] = p[k++];
    b->acc_out[0] = p[k++], b->acc_out[1] = p[k++], b->acc_in[0] = p[k++], b->acc_in[1] = p[k++];
    b->home_acc = p[k++], b->delta = p[k++];
    b->home_pos = p[k++], b->block_pos = p[k++], b->home_seg = p[k++], b->block_seg = p[k++];
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

size_t ring_buffers_bytes(const ring_schedule *const *scheds, int n_scheds)
{
    ring_buffers b = {0};
    buffer_capacities(scheds, n_scheds, &b);
    size_t sizes[N_BUFFERS], total = 0;
    int k = buffer_sizes(&b, sizes);
    for (int i = 0; i < k; i++) total += sizes[i];
    return total;
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
