/* ring_backward.c: the backward pass of the ring, in either direction.
 *
 *   KV-side: [K | V] travels, the trailing accumulator is [dK | dV]; home
 *            keeps Q, dO, lse, delta and accumulates dQ.
 *   Q-side:  [Q | dO | lse | delta] travels, the trailing accumulator is dQ;
 *            home keeps K, V and accumulates dK, dV.
 *
 * Two helpers hold every difference between the directions: bundle_pack puts
 * the home block's travelling inputs into its slot, and pair_views says, for a
 * held bundle, which tensors come from it and which from home, and where the
 * gradients go. delta = rowsum(dO * O) is computed once at home (from the
 * fp32 dO), so the bundle never needs O. Q, K, V and dO travel in the ring's
 * input type (fp32 or bf16, ring_exec_ctx.in_type); lse, delta and the
 * accumulators are fp32 always. */
#include "kernels/device.h"
#include "src/attn/ring_run.h"
#include "util/clock.h"

/* What stays at home, and where its gradients go; Q, K, V, dO of the
 * travelling type (ring_run.elem). */
typedef struct {
    const void *Q, *K, *V, *dO;
    const float *lse, *delta;
    float *dQ, *dK, *dV;
} bwd_home;

/* One kernel call's operands: queries from one block, keys from another. */
typedef struct {
    const void *Q, *K, *V, *dO;
    const float *lse, *delta;
    float *dQ, *dK, *dV;
    const int64_t *q_pos, *kv_pos;
    const int32_t *q_seg, *kv_seg;
} bwd_pair;

/* Elements of Q [n, Hq, d], K [n, Hkv, d] and lse [n, Hq] of one block. */
typedef struct {
    size_t q, kv, rows;
} block_floats;

static block_floats sizes_of(const ring_schedule *s)
{
    size_t n = (size_t)s->layout.n;
    block_floats f = {n * (size_t)s->h_q * (size_t)s->d, n * (size_t)s->h_kv * (size_t)s->d,
                      n * (size_t)s->h_q};
    return f;
}

/* dst[bytes] = src on the ring's queue. */
static bt_status copy_bytes(const ring_run *run, void *dst, const void *src, size_t bytes)
{
    return attn_kernel_status(bk_copy(run->c->queue, dst, src, bytes));
}

static int q_side(const ring_run *run)
{
    return run->s->pass == RING_BWD_Q_SIDE;
}

static bt_status zero_floats(const ring_run *run, float *dst, size_t floats)
{
    return attn_kernel_status(bk_fill(run->c->queue, (int64_t)floats, dst, 0.0f));
}

/* The home block's travelling inputs into slot: [Q | dO | lse | delta]
 * (Q-side) or [K | V] (ring_bundle_offsets), the tensors of the travelling
 * type; those rounded there at home are there already. */
static bt_status bundle_pack(const ring_run *run, const bwd_home *h, unsigned char *slot)
{
    block_floats f = sizes_of(run->s);
    size_t e = run->elem, rows = f.rows * sizeof(float);
    int64_t off[4];
    ring_bundle_offsets(run->s, off);
    const void *const src[4] = {h->Q, h->K, h->V, h->dO};
    const size_t bytes[4] = {f.q * e, f.kv * e, f.kv * e, f.q * e};
    for (int k = 0; k < 4; k++)
        if (off[k] >= 0 && src[k] != slot + off[k])
            BT_CHECK(copy_bytes(run, slot + off[k], src[k], bytes[k]));
    if (!q_side(run)) return BT_OK;
    BT_CHECK(copy_bytes(run, slot + 2 * f.q * e, h->lse, rows));
    return copy_bytes(run, slot + 2 * f.q * e + rows, h->delta, rows);
}

/* The operands of a held bundle against home; its gradients go to acc. */
static bwd_pair pair_views(const ring_run *run, const bwd_home *h, const unsigned char *in,
                           float *acc)
{
    block_floats f = sizes_of(run->s);
    size_t e = run->elem;
    if (q_side(run)) { /* the visiting queries against the home keys */
        const float *lse = (const float *)(in + 2 * f.q * e);
        return (bwd_pair){in,  h->K,  h->V,         in + f.q * e,  lse,           lse + f.rows,
                          acc, h->dK, h->dV,        run->block_pos, run->home_pos, run->block_seg,
                          run->home_seg};
    }
    /* the home queries against the visiting keys */
    return (bwd_pair){h->Q,  in,           in + f.kv * e, h->dO,        h->lse,       h->delta,
                      h->dQ, acc,          acc + f.kv,    run->home_pos, run->block_pos, run->home_seg,
                      run->block_seg};
}

/* The home block's gradients that the chain accumulates: from acc (nothing
 * to do when it was received there), or zero when acc is NULL (no query
 * ever meets this block). */
static bt_status home_gradients(const ring_run *run, const bwd_home *h, const float *acc)
{
    block_floats f = sizes_of(run->s);
    float *dst[2] = {q_side(run) ? h->dQ : h->dK, q_side(run) ? NULL : h->dV};
    if (acc == dst[0]) return BT_OK;
    size_t len = q_side(run) ? f.q : f.kv;
    for (int k = 0; k < 2 && dst[k]; k++)
        BT_CHECK(acc ? copy_bytes(run, dst[k], acc + k * len, len * sizeof(float))
                     : zero_floats(run, dst[k], len));
    return BT_OK;
}

/* The gradients accumulated at home in place start from zero. */
static bt_status zero_home_accumulators(const ring_run *run, const bwd_home *h)
{
    block_floats f = sizes_of(run->s);
    if (!q_side(run)) return zero_floats(run, h->dQ, f.q);
    BT_CHECK(zero_floats(run, h->dK, f.kv));
    return zero_floats(run, h->dV, f.kv);
}

static bt_status backward_piece(ring_run *run, int64_t r0, int64_t rows, void *arg)
{
    const bwd_pair *p = arg;
    const ring_schedule *s = run->s;
    size_t qo = (size_t)r0 * (size_t)s->h_q * (size_t)s->d, lo = (size_t)r0 * (size_t)s->h_q;
    bk_attn_geom g = ring_run_geometry(run, rows, p->q_pos + r0, p->q_seg + r0, p->kv_pos,
                                       p->kv_seg);
    bk_attn_stats ks;
    bt_status st = attn_kernel_status(ring_run_attn_bwd(
        run, &g, ring_run_at(run, p->Q, qo), p->K, p->V, ring_run_at(run, p->dO, qo), p->lse + lo,
        p->delta + lo, p->dQ + qo, p->dK, p->dV, ring_run_tile_stats(run, &ks)));
    ring_run_count_tiles(run, &ks);
    return st;
}

/* The held bundle's pair: SDPA calls where the ring has them (on the Q-side
 * with the surrogate O' made from the bundle's delta), else our kernel piece
 * by piece; its gradients go to acc. */
static bt_status backward_block(ring_run *run, const bwd_home *h, const ring_step *x, float *acc)
{
    ring_sdpa *sdpa = run->c->sdpa;
    const sdpa_calls *calls = q_side(run) ? ring_sdpa_pair(sdpa, x->block, run->rank)
                                          : ring_sdpa_pair(sdpa, run->rank, x->block);
    if (!calls) BT_CHECK(ring_run_block_positions(run, x->block)); /* pair_views reads them */
    bwd_pair p = pair_views(run, h, run->b->slot[x->slot], acc);
    double t0 = bu_now();
    if (calls)
        return ring_run_sdpa(run, t0,
                             ring_sdpa_backward(sdpa, run->c->queue, calls, p.Q, p.K, p.V, p.dO,
                                                p.lse, q_side(run) ? p.delta : NULL, p.dQ, p.dK,
                                                p.dV));
    return ring_run_pieces(run, backward_piece, &p);
}

/* Receives in flight: the trailing accumulator of each step parity (posted
 * in the step before, with the send it matches) and this rank's own final one. */
typedef struct {
    bt_request *acc[2];
    bt_request *home;
} bwd_recvs;

/* One step: compute on the held bundle into a fresh accumulator, add the one
 * trailing from the previous holder (acc_recv, posted by the step before);
 * keep it if this is its home (else post_accumulators passes it on). */
static bt_status backward_step(ring_run *run, const bwd_home *h, const ring_step *x, int step,
                               bt_request **acc_recv, int *home_done)
{
    const ring_schedule *s = run->s;
    ring_buffers *b = run->b;
    int a = step % 2;
    size_t acc_floats = s->acc_bytes / sizeof(float);
    BT_CHECK(ring_run_wait(run, &run->acc_send[a])); /* acc_out[a] free again */
    BT_CHECK(zero_floats(run, run->acc_out[a], acc_floats));
    if (x->compute) {
        BT_CHECK(backward_block(run, h, x, run->acc_out[a]));
        BT_CHECK(ring_run_mark(run, b->slot_used[x->slot]));
    }
    if (x->acc_from >= 0) {
        BT_CHECK(ring_run_wait(run, acc_recv));
        CHECK_KERNEL(
            bk_axpy(run->c->queue, (int64_t)acc_floats, 1.0f, run->acc_in[a], run->acc_out[a]));
        BT_CHECK(ring_run_mark(run, b->acc_in_used[a]));
    }
    BT_CHECK(ring_run_mark(run, b->acc_out_used[a]));
    if (x->acc_to >= 0 || x->block != run->rank) return BT_OK;
    *home_done = 1; /* the chain ends where it began: at home */
    return home_gradients(run, h, run->acc_out[a]);
}

/* After computing step x (next: this rank's step after it, or NULL), one
 * transport group: the step's accumulator passed on, the accumulator the next
 * step adds (its holder sends it now), and this rank's own final accumulator
 * in the step its last holder sends it. Every send is matched by a receive of
 * the same step: a receive posted alone later would sit behind this rank's
 * send on the channel's NCCL stream while the peer's sits behind its own, on
 * every rank (doc/TRANSPORT.md). */
static bt_status post_accumulators(ring_run *run, const ring_step *x, const ring_step *next,
                                   int step, bwd_recvs *r)
{
    const ring_schedule *s = run->s;
    ring_buffers *b = run->b;
    int a = step % 2, send = x->block >= 0 && x->acc_to >= 0,
        take = next && next->block >= 0 && next->acc_from >= 0;
    if (!send && !take && !x->home_acc_in) return BT_OK;
    if (send) BT_CHECK(ring_run_await(run, b->acc_out_used[a]));
    if (take) /* acc_in may still be read by the add of the step before */
        BT_CHECK(ring_run_await(run, b->acc_in_used[1 - a]));
    if (x->home_acc_in) /* once the last pass's copy out of it has run */
        BT_CHECK(ring_run_await(run, b->home_acc_used));
    BT_CHECK(bt_group_start(run->world));
    bt_status st = BT_OK;
    if (take)
        st = ring_run_irecv(run, next->acc_from, next->acc_from_channel, run->acc_in[1 - a],
                            s->acc_bytes, &r->acc[1 - a]);
    if (st == BT_OK && x->home_acc_in)
        st = ring_run_irecv(run, s->home_acc_from[run->rank], s->home_acc_channel[run->rank],
                            run->home_acc, s->acc_bytes, &r->home);
    if (st == BT_OK && send)
        st = ring_run_isend(run, x->acc_to, x->acc_to_channel, run->acc_out[a], s->acc_bytes,
                            &run->acc_send[a]);
    bt_status ended = bt_group_end(run->world);
    return st != BT_OK ? st : ended;
}

/* The accumulators (RING_CALLER_MEMORY): the buffers', or
 * - the home block's final one in its gradients, dQ or [dK | dV] (home_lent);
 * - the first b->lent trailing ones in the memory of Q and dO, which c->spend
 *   must name, as ring_lent places them; the kernels on one and the
 *   transfers of another overlap in time, not in bytes (note_lent_parts
 *   tells the emulator).
 * Nothing is written there before the ring has read what it reads of the
 * caller's (delta, the rounding at home): the kernels run in the queue's
 * order, and a receive waits for its buffer's event, marked once those are
 * queued (spend_inputs). */
static bt_status place_accumulators(ring_run *run, const float *Q, const float *dO, float *dQ,
                                    float *dK, const float *dV)
{
    const ring_buffers *b = run->b;
    float *const *spend = run->c->spend;
    block_floats f = sizes_of(run->s);
    if (b->lent && (spend[0] != Q || spend[1] != dO || !Q || !dO)) return BT_ERR_ARG;
    if (b->home_lent && !q_side(run) && dV != dK + f.kv) return BT_ERR_ARG;
    size_t acc_floats = run->s->acc_bytes / sizeof(float);
    for (int i = 0; i < 4; i++) {
        ring_lent_acc l = ring_lent(i);
        float **acc = l.in ? &run->acc_in[l.index] : &run->acc_out[l.index];
        float *own = l.in ? b->acc_in[l.index] : b->acc_out[l.index];
        *acc = i < b->lent ? spend[i % 2] + (size_t)(i / 2) * acc_floats : own;
    }
    run->home_acc = !b->home_lent ? b->home_acc : q_side(run) ? dQ : dK;
    return BT_OK;
}

/* On a device, Q and dO as the parts the lent accumulators are (parts 0:
 * as whole buffers again), for the emulator, which otherwise takes a kernel
 * on one accumulator to touch the other's bytes too (bk_device_note_parts). */
static void note_lent_parts(const ring_run *run, int parts)
{
    int each = run->b->lent > 2 ? 2 : 1;
    for (int k = 0; k < 2 && run->b->lent && run->mem == BT_MEM_DEVICE; k++)
        bk_device_note_parts(run->c->spend[k], run->s->acc_bytes, parts ? each : 0);
}

/* After the caller's inputs are read: the events of the accumulators in the
 * caller's memory, so that no transfer touches them before that, and Q and
 * dO noted as their parts. */
static bt_status spend_inputs(ring_run *run)
{
    ring_buffers *b = run->b;
    bt_status st = BT_OK;
    for (int i = 0; i < b->lent && st == BT_OK; i++) {
        ring_lent_acc l = ring_lent(i);
        st = ring_run_mark(run, l.in ? b->acc_in_used[l.index] : b->acc_out_used[l.index]);
    }
    if (st == BT_OK && b->home_lent) st = ring_run_mark(run, b->home_acc_used);
    if (st == BT_OK) note_lent_parts(run, 1);
    return st;
}

bt_status ring_backward(const ring_exec_ctx *c, const float *Q, const float *K, const float *V,
                        const float *O, const float *dO, const float *lse, float *dQ, float *dK,
                        float *dV, ring_exec_stats *stats)
{
    ring_run run;
    bt_status st = ring_run_begin(&run, c, 1, stats);
    if (st != BT_OK) return st;
    const ring_schedule *s = run.s;
    double t_start = bu_now();
    ring_inputs in;
    /* delta from the fp32 dO, whatever travels */
    st =
        attn_kernel_status(bk_attn_delta(c->queue, s->layout.n, s->h_q, s->d, dO, O, run.b->delta));
    /* the final O in bf16 for the SDPA calls, before dQ (which may be O) is written */
    if (st == BT_OK && c->sdpa && !q_side(&run))
        st = ring_sdpa_backward_begin(c->sdpa, c->queue, O);
    if (st == BT_OK) st = place_accumulators(&run, Q, dO, dQ, dK, dV);
    if (st == BT_OK) st = ring_run_home_inputs(&run, Q, K, V, dO, &in);
    if (st == BT_OK) st = spend_inputs(&run);
    bwd_home h = {in.Q, in.K, in.V, in.dO, lse, run.b->delta, dQ, dK, dV};
    if (st == BT_OK) st = zero_home_accumulators(&run, &h);
    /* the copies last, as in ring_forward.c */
    if (st == BT_OK) st = bundle_pack(&run, &h, run.b->slot[SLOT_HOME]);
    if (st == BT_OK) st = ring_run_mark(&run, run.b->slot_used[SLOT_HOME]); /* sent at step 0 */
    int from = s->home_acc_from[run.rank], home_done = 0;
    bwd_recvs recvs = {{NULL, NULL}, NULL};
    for (int step = 0; step < s->n_steps && st == BT_OK; step++) {
        const ring_step *x = ring_step_at(s, run.rank, step),
                        *next = step + 1 < s->n_steps ? ring_step_at(s, run.rank, step + 1) : NULL;
        st = ring_run_begin_step(&run, x, step);
        if (st == BT_OK && x->block >= 0)
            st = backward_step(&run, &h, x, step, &recvs.acc[step % 2], &home_done);
        if (st == BT_OK) st = post_accumulators(&run, x, next, step, &recvs);
    }
    if (st == BT_OK && from >= 0) {
        st = ring_run_wait(&run, &recvs.home);
        if (st == BT_OK) st = home_gradients(&run, &h, run.home_acc), home_done = 1;
        if (st == BT_OK) st = ring_run_mark(&run, run.b->home_acc_used);
    }
    if (st == BT_OK && !home_done) st = home_gradients(&run, &h, NULL);
    note_lent_parts(&run, 0); /* no kernel touches them after this */
    st = ring_run_finish(&run, st);
    stats->total_s = bu_now() - t_start;
    return st;
}
