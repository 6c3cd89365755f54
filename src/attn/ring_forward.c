/* ring_forward.c: the forward pass of the ring. K and V travel packed as one
 * message [K | V]; each holder merges the attention of its home queries
 * against the held block into the running (O, lse), so no accumulator
 * travels. */
#include "src/attn/ring_run.h"
#include "util/clock.h"

typedef struct {
    const void *Q, *K, *V; /* home queries; the held block's keys and values */
    float *O, *lse;
} fwd_piece;

static bt_status forward_piece(ring_run *run, int64_t r0, int64_t rows, void *arg)
{
    const fwd_piece *p = arg;
    const ring_schedule *s = run->s;
    size_t q_row = (size_t)s->h_q * (size_t)s->d;
    bk_attn_geom g = ring_run_geometry(run, rows, run->home_pos + r0, run->home_seg + r0,
                                       run->block_pos, run->block_seg);
    bk_attn_stats ks;
    bt_status st = attn_kernel_status(ring_run_attn_fwd(
        run, &g, ring_run_at(run, p->Q, (size_t)r0 * q_row), p->K, p->V, p->O + (size_t)r0 * q_row,
        p->lse + (size_t)r0 * (size_t)s->h_q, ring_run_tile_stats(run, &ks)));
    ring_run_count_tiles(run, &ks);
    return st;
}

/* The attention of the home queries against the held block: SDPA calls
 * where the ring has them for this pair, else our kernel piece by piece. */
static bt_status forward_block(ring_run *run, const ring_step *x, const void *Q, float *O,
                               float *lse)
{
    const ring_schedule *s = run->s;
    size_t kv_bytes = (size_t)s->layout.n * (size_t)s->h_kv * (size_t)s->d * run->elem;
    const unsigned char *kv = run->b->slot[x->slot];
    const sdpa_calls *calls = ring_sdpa_pair(run->c->sdpa, run->rank, x->block);
    double t0 = bu_now();
    if (calls)
        return ring_run_sdpa(run, t0,
                             ring_sdpa_forward(run->c->sdpa, run->c->queue, calls, Q,
                                               (const uint16_t *)kv,
                                               (const uint16_t *)(kv + kv_bytes), O, lse));
    BT_CHECK(ring_run_block_positions(run, x->block));
    fwd_piece p = {Q, kv, kv + kv_bytes, O, lse};
    return ring_run_pieces(run, forward_piece, &p);
}

bt_status ring_forward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                       float *O, float *lse, ring_exec_stats *stats)
{
    ring_run run;
    bt_status st = ring_run_begin(&run, c, 0, stats);
    if (st != BT_OK) return st;
    const ring_schedule *s = run.s;
    double t_start = bu_now();
    size_t kv_bytes = (size_t)s->layout.n * (size_t)s->h_kv * (size_t)s->d * run.elem;
    unsigned char *home = run.b->slot[SLOT_HOME];
    ring_inputs in;
    st = attn_kernel_status(bk_attn_fwd_init(c->queue, s->layout.n, s->h_q, s->d, O, lse));
    if (st == BT_OK) st = ring_run_home_inputs(&run, Q, K, V, NULL, &in);
    /* [K | V] into the home slot, unless rounded there already. The copies
     * last: the emulator runs copies late and kernels at once, so a send of
     * the home slot that did not wait for them shows in the tests. */
    if (st == BT_OK && in.K != home)
        st = attn_kernel_status(bk_copy(c->queue, home, in.K, kv_bytes));
    if (st == BT_OK && in.V != home + kv_bytes)
        st = attn_kernel_status(bk_copy(c->queue, home + kv_bytes, in.V, kv_bytes));
    if (st == BT_OK) st = ring_run_mark(&run, run.b->slot_used[SLOT_HOME]); /* sent at step 0 */

    for (int step = 0; step < s->n_steps && st == BT_OK; step++) {
        const ring_step *x = ring_step_at(s, run.rank, step);
        st = ring_run_begin_step(&run, x, step);
        if (st != BT_OK || x->block < 0 || !x->compute) continue;
        st = forward_block(&run, x, in.Q, O, lse);
        if (st == BT_OK) st = ring_run_mark(&run, run.b->slot_used[x->slot]);
    }
    st = ring_run_finish(&run, st);
    if (st == BT_OK)
        st = attn_kernel_status(bk_attn_fwd_finalize(c->queue, s->layout.n, s->h_q, s->d, O, lse));
    stats->total_s = bu_now() - t_start;
    return st;
}
