/* test_ring_schedule.c: the planner's schedules, checked as data in one
 * process: every (query block, key block) pair the mask needs is computed
 * exactly once and no other; every receive has its send and lands in a slot
 * nothing else overwrites before use; the trailing accumulator visits every
 * holder in step order and ends at home; the byte counts follow the formulas
 * (Q-side vs KV-side per step, auto never worse, a sliding window sends only
 * ceil(W/n) blocks). The block-level mask decisions, and the allowed pairs
 * of a whole sequence under every mask, are checked against the kernels'
 * per-element rule; the layouts' positions and owners agree. Every step that
 * computes maps to cuDNN SDPA calls (src/attn/sdpa_map.h) that allow exactly
 * the pairs of that rule, each once, in calls cuDNN takes. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "src/attn/ring.h"
#include "src/attn/ring_plan.h"
#include "src/attn/sdpa_map.h"
#include "src/attn/ulysses.h"
#include "tests/lib/check_main.h"

typedef struct {
    const char *name;
    bk_attn_mask mask;
    seq_layout_kind layout;
} mask_case;

static uint64_t sparse_bits[1];
static int32_t segments[4096];

static mask_case mask_cases(int i, int64_t N, int P)
{
    bk_attn_mask w = bk_attn_mask_window(N / P + N / P / 2 - 1, 0);
    w.flags |= BK_ATTN_CAUSAL;
    sparse_bits[0] = 0;
    for (int q = 0; q < 8; q++)
        for (int k = 0; k <= q; k++)
            if (k == q || (q + k) % 3 == 0) sparse_bits[0] |= 1ull << (q * 8 + k);
    bk_attn_mask sp = bk_attn_mask_block_sparse(sparse_bits, N / 8, 8);
    for (int64_t p = 0; p < N; p++) segments[p] = (int32_t)(p * 5 / N); /* 5 documents */
    mask_case cases[] = {
        {"none", bk_attn_mask_none(), LAYOUT_CONTIGUOUS},
        {"causal", bk_attn_mask_causal(), LAYOUT_ZIGZAG},
        {"causal-contiguous", bk_attn_mask_causal(), LAYOUT_CONTIGUOUS},
        {"window", w, LAYOUT_CONTIGUOUS},
        {"document", bk_attn_mask_document(1), LAYOUT_CONTIGUOUS},
        {"sparse", sp, LAYOUT_CONTIGUOUS},
    };
    return cases[i];
}
enum { N_MASK_CASES = 6 };

static ring_schedule *plan_case(int P, int nodes, const mask_case *mc, ring_pass pass, int h_q,
                                int h_kv, int d, int64_t N, int in_bytes)
{
    char err[256];
    ring_plan_config cfg = {.topo = nodes > 1 ? TOPO_DOUBLE : TOPO_FLAT, .nodes = nodes,
                            .need = {.mask = mc->mask, .segments = segments, .N = N},
                            .h_q = h_q, .h_kv = h_kv, .d = d, .in_bytes = in_bytes};
    ck_assert(seq_layout_init(&cfg.layout, mc->layout, P, N, err, sizeof err) == 0);
    ring_schedule *s = ring_plan(&cfg, pass, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static ring_schedule *plan_typed(int P, int nodes, int i_mask, ring_pass pass, int h_q, int h_kv,
                                 int d, int64_t N, int in_bytes)
{
    mask_case mc = mask_cases(i_mask, N, P);
    return plan_case(P, nodes, &mc, pass, h_q, h_kv, d, N, in_bytes);
}

/* fp32 inputs */
static ring_schedule *plan(int P, int nodes, int i_mask, ring_pass pass, int h_q, int h_kv, int d,
                           int64_t N)
{
    return plan_typed(P, nodes, i_mask, pass, h_q, h_kv, d, N, 4);
}

/* Brute force over every (query, key) position pair with the kernels' rule. */
static int needs(const ring_schedule *s, const bk_attn_mask *m, int q_rank, int k_rank)
{
    int64_t n = s->layout.n, *qp = malloc(n * sizeof(int64_t)), *kp = malloc(n * sizeof(int64_t));
    seq_layout_positions(&s->layout, q_rank, qp);
    seq_layout_positions(&s->layout, k_rank, kp);
    int any = 0;
    for (int64_t i = 0; i < n && !any; i++)
        for (int64_t j = 0; j < n && !any; j++)
            any = bk_attn_allowed(m, qp[i], kp[j], segments[qp[i]], segments[kp[j]]);
    free(qp);
    free(kp);
    return any;
}

/* The other end of x (posted by rank r at step st): a transfer of the same
 * block on the same channel, the other way, posted by the peer in the same step. */
static int other_end_in_step(const ring_schedule *s, int r, int st, const ring_xfer *x, int sending)
{
    const ring_step *y = ring_step_at(s, x->peer, st);
    const ring_xfer *ends = sending ? y->recv : y->send;
    int n = sending ? y->n_recv : y->n_send, found = 0;
    for (int k = 0; k < n; k++)
        found += ends[k].peer == r && ends[k].block == x->block && ends[k].channel == x->channel;
    return found;
}

/* What the ring's transport groups rest on (doc/TRANSPORT.md: they cannot
 * deadlock on NCCL, whose channels run their posts in order): both ends of
 * every grouped transfer are posted in the same step (an input block's send
 * and receive; a final accumulator's send home and its receive), and a
 * trailing accumulator sent after step st is the one its receiver adds at
 * step st + 1 (the receiver posts that receive after step st, with its own
 * sends), on a channel that carries accumulators only. */
static void check_posting_steps(const ring_schedule *s, const char *what)
{
    for (int r = 0; r < s->P; r++)
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            for (int k = 0; k < x->n_send; k++)
                ck_assert_msg(other_end_in_step(s, r, st, &x->send[k], 1) == 1,
                              "%s: rank %d step %d: send of block %d to %d has no receive there",
                              what, r, st, x->send[k].block, x->send[k].peer);
            for (int k = 0; k < x->n_recv; k++)
                ck_assert_msg(other_end_in_step(s, r, st, &x->recv[k], 0) == 1,
                              "%s: rank %d step %d: receive of block %d from %d has no send there",
                              what, r, st, x->recv[k].block, x->recv[k].peer);
            if (x->home_acc_in) {
                const ring_step *y = ring_step_at(s, s->home_acc_from[r], st);
                ck_assert_msg(y->acc_to == r && y->acc_to_channel == RING_CH_BWD_ACC_HOME,
                              "%s: rank %d receives its accumulator at step %d, rank %d does "
                              "not send it then",
                              what, r, st, s->home_acc_from[r]);
            }
            if (x->acc_to < 0) continue;
            if (x->acc_to_channel == RING_CH_BWD_ACC_HOME) {
                ck_assert_msg(ring_step_at(s, x->acc_to, st)->home_acc_in &&
                                  s->home_acc_from[x->acc_to] == r,
                              "%s: rank %d sends block %d's accumulator home at step %d, "
                              "unreceived then",
                              what, r, x->block, st);
            } else {
                ck_assert(st + 1 < s->n_steps);
                const ring_step *y = ring_step_at(s, x->acc_to, st + 1);
                ck_assert(y->acc_from == r && y->acc_from_channel == x->acc_to_channel);
                ck_assert(x->acc_to_channel == RING_CH_BWD_ACC_INTRA ||
                          x->acc_to_channel == RING_CH_BWD_ACC_INTER);
            }
        }
    for (int b = 0; b < s->P; b++) {
        int received = 0;
        for (int st = 0; st < s->n_steps; st++) received += ring_step_at(s, b, st)->home_acc_in;
        ck_assert_int_eq(received, s->home_acc_from[b] >= 0);
    }
}

static void check_schedule(const ring_schedule *s, const bk_attn_mask *m, const char *what)
{
    check_posting_steps(s, what);
    int P = s->P;
    int *computed = calloc((size_t)P * P, sizeof(int));
    for (int r = 0; r < P; r++)
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            if (x->block < 0) continue;
            if (x->compute) {
                int q = s->pass == RING_BWD_Q_SIDE ? x->block : r;
                int k = s->pass == RING_BWD_Q_SIDE ? r : x->block;
                computed[q * P + k]++;
            }
            if (st == 0) {
                ck_assert_msg(x->block == r && x->slot == SLOT_HOME, "%s: step 0 of rank %d", what, r);
                continue;
            }
            /* The held block was received by this rank at an earlier step, into
             * this slot, and no later receive overwrote the slot before now. */
            int found = -1;
            for (int e = st - 1; e >= 0 && found < 0; e--) {
                const ring_step *y = ring_step_at(s, r, e);
                for (int k = 0; k < y->n_recv; k++)
                    if (y->recv[k].slot == x->slot) {
                        ck_assert_msg(y->recv[k].block == x->block,
                                      "%s: rank %d step %d: slot %d was overwritten by block %d "
                                      "before block %d was used", what, r, st, x->slot,
                                      y->recv[k].block, x->block);
                        found = e;
                    }
            }
            ck_assert_msg(found >= 0, "%s: rank %d holds block %d at step %d without receiving it",
                          what, r, x->block, st);
            /* ... and its sender posted the matching send at that same step. */
            const ring_step *y = ring_step_at(s, r, found);
            for (int k = 0; k < y->n_recv; k++) {
                if (y->recv[k].slot != x->slot) continue;
                const ring_step *z = ring_step_at(s, y->recv[k].peer, found);
                int matched = 0;
                for (int j = 0; j < z->n_send; j++)
                    matched |= z->send[j].peer == r && z->send[j].block == x->block &&
                               z->send[j].channel == y->recv[k].channel;
                ck_assert_msg(matched, "%s: no send matches rank %d's receive of block %d", what,
                              r, x->block);
            }
        }
    for (int q = 0; q < P; q++)
        for (int k = 0; k < P; k++) {
            int want = needs(s, m, q, k);
            ck_assert_msg(computed[q * P + k] == want,
                          "%s: pair (queries of %d, keys of %d) computed %d times, the mask %s it",
                          what, q, k, computed[q * P + k], want ? "needs" : "excludes");
        }
    free(computed);
    if (s->pass == RING_FORWARD) return;
    /* The accumulator of each block: from home through every holder, in step
     * order, back home. */
    for (int b = 0; b < P; b++) {
        int at = b, step = 0, hops = 0;
        for (;;) {
            const ring_step *x = ring_step_at(s, at, step);
            ck_assert_msg(x->block == b, "%s: accumulator of block %d lost at rank %d step %d",
                          what, b, at, step);
            if (x->acc_to < 0) break;
            if (x->acc_to == b && x->acc_to_channel == RING_CH_BWD_ACC_HOME) {
                ck_assert_int_eq(s->home_acc_from[b], at);
                at = b;
                break;
            }
            const ring_step *next = ring_step_at(s, x->acc_to, step + 1);
            ck_assert_msg(next->acc_from == at, "%s: block %d: rank %d does not expect the "
                                                "accumulator from %d", what, b, x->acc_to, at);
            at = x->acc_to;
            step++;
            ck_assert(++hops <= P);
        }
        ck_assert_msg(at == b, "%s: the accumulator of block %d ends at rank %d", what, b, at);
    }
}

START_TEST(schedules_compute_every_needed_pair_once)
{
    const int ranks[] = {1, 2, 3, 4, 5, 4, 6, 6};
    const int nodes[] = {1, 1, 1, 1, 1, 2, 2, 3};
    const ring_pass passes[] = {RING_FORWARD, RING_BWD_Q_SIDE, RING_BWD_KV_SIDE};
    for (int t = 0; t < 8; t++)
        for (int mi = 0; mi < N_MASK_CASES; mi++)
            for (int p = 0; p < 3; p++) {
                int P = ranks[t];
                int64_t N = 48 * P;
                ring_schedule *s = plan(P, nodes[t], mi, passes[p], 4, 2, 16, N);
                mask_case mc = mask_cases(mi, N, P);
                char what[128];
                snprintf(what, sizeof what, "%s P=%d nodes=%d %s", mc.name, P, nodes[t],
                         ring_pass_name(passes[p]));
                check_schedule(s, &mc.mask, what);
                ring_schedule_free(s);
            }
}
END_TEST

static uint64_t bytes_at_step(const ring_schedule *s, int rank, int step)
{
    const ring_step *x = ring_step_at(s, rank, step);
    return (uint64_t)x->n_send * s->input_bytes + (x->acc_to >= 0 ? s->acc_bytes : 0);
}

START_TEST(q_side_sends_3d_plus_2_over_4d_of_kv_side_for_mha)
{
    const int dims[] = {64, 128, 16};
    for (int i = 0; i < 3; i++) {
        int d = dims[i], P = 4;
        ring_schedule *q = plan(P, 1, 0, RING_BWD_Q_SIDE, 8, 8, d, 64 * P);
        ring_schedule *kv = plan(P, 1, 0, RING_BWD_KV_SIDE, 8, 8, d, 64 * P);
        for (int r = 0; r < P; r++)
            for (int st = 1; st < P - 1; st++) { /* steady-state steps */
                uint64_t bq = bytes_at_step(q, r, st), bkv = bytes_at_step(kv, r, st);
                ck_assert_msg(bq * (uint64_t)(4 * d) == bkv * (uint64_t)(3 * d + 2),
                              "d=%d rank %d step %d: Q-side %llu bytes, KV-side %llu", d, r, st,
                              (unsigned long long)bq, (unsigned long long)bkv);
            }
        ring_schedule_free(q);
        ring_schedule_free(kv);
    }
}
END_TEST

/* bf16 inputs halve what travels except lse, delta and the fp32 accumulators:
 * [K | V] and [Q | dO] in half the bytes. */
START_TEST(bf16_inputs_halve_the_travelling_tensors)
{
    const ring_pass passes[] = {RING_FORWARD, RING_BWD_KV_SIDE, RING_BWD_Q_SIDE};
    for (int p = 0; p < 3; p++) {
        int P = 4, hq = 8, hkv = 2, d = 64;
        size_t n = 64, q = n * hq * d, kv = n * hkv * d;
        ring_schedule *f32 = plan_typed(P, 1, 0, passes[p], hq, hkv, d, (int64_t)n * P, 4);
        ring_schedule *b16 = plan_typed(P, 1, 0, passes[p], hq, hkv, d, (int64_t)n * P, 2);
        size_t rows = passes[p] == RING_BWD_Q_SIDE ? 2 * n * hq * 4 : 0; /* lse, delta */
        size_t tensors = passes[p] == RING_BWD_Q_SIDE ? 2 * q : 2 * kv;
        ck_assert_uint_eq(f32->input_bytes, tensors * 4 + rows);
        ck_assert_uint_eq(b16->input_bytes, tensors * 2 + rows);
        ck_assert_uint_eq(b16->acc_bytes, f32->acc_bytes);
        ck_assert_int_eq(b16->in_bytes, 2);
        ring_schedule_free(f32);
        ring_schedule_free(b16);
    }
    char err[128];
    ring_plan_config bad = {.topo = TOPO_FLAT, .nodes = 1, .h_q = 8, .h_kv = 8, .d = 64,
                            .in_bytes = 3, .need = {.mask = bk_attn_mask_causal(), .N = 256}};
    ck_assert(seq_layout_init(&bad.layout, LAYOUT_ZIGZAG, 4, 256, err, sizeof err) == 0);
    ck_assert(ring_plan(&bad, RING_FORWARD, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "3 bytes") != NULL, "%s", err);
}
END_TEST

START_TEST(auto_never_sends_more_than_the_cheaper_direction)
{
    const int heads[][2] = {{8, 8}, {8, 4}, {8, 2}, {8, 1}, {32, 8}, {4, 4}};
    for (int i = 0; i < 12; i++) {
        int hq = heads[i % 6][0], hkv = heads[i % 6][1], P = 4, e = i < 6 ? 4 : 2;
        ring_pass chosen = ring_choose_backward(BWD_AUTO, hq, hkv, 64, e);
        ring_schedule *q = plan_typed(P, 1, 1, RING_BWD_Q_SIDE, hq, hkv, 64, 64 * P, e);
        ring_schedule *kv = plan_typed(P, 1, 1, RING_BWD_KV_SIDE, hq, hkv, 64, 64 * P, e);
        ring_schedule *a = plan_typed(P, 1, 1, chosen, hq, hkv, 64, 64 * P, e);
        uint64_t tq = 0, tkv = 0, ta = 0;
        for (int r = 0; r < P; r++) {
            tq += ring_schedule_bytes_sent(q, r);
            tkv += ring_schedule_bytes_sent(kv, r);
            ta += ring_schedule_bytes_sent(a, r);
        }
        ck_assert_msg(ta <= tq && ta <= tkv,
                      "Hq=%d Hkv=%d, %d-byte inputs: auto sends %llu, Q-side %llu, KV-side %llu",
                      hq, hkv, e, (unsigned long long)ta, (unsigned long long)tq,
                      (unsigned long long)tkv);
        if (hkv * 2 <= hq) ck_assert_int_eq(chosen, RING_BWD_KV_SIDE); /* GQA with g >= 2 */
        if (hkv == hq) ck_assert_int_eq(chosen, RING_BWD_Q_SIDE);
        ring_schedule_free(q);
        ring_schedule_free(kv);
        ring_schedule_free(a);
    }
    ck_assert_int_eq(ring_choose_backward(BWD_KV_SIDE, 8, 8, 64, 4), RING_BWD_KV_SIDE);
    ck_assert_int_eq(ring_choose_backward(BWD_Q_SIDE, 8, 1, 64, 2), RING_BWD_Q_SIDE);
}
END_TEST

START_TEST(sliding_window_sends_only_the_window)
{
    /* W = 2.5 local blocks: each rank needs its block and ceil(W/n) = 3 before it. */
    const int P = 8;
    const int64_t n = 64, N = n * P, W = 2 * n + n / 2;
    bk_attn_mask m = bk_attn_mask_window(W - 1, 0);
    m.flags |= BK_ATTN_CAUSAL;
    char err[256];
    ring_plan_config cfg = {.topo = TOPO_FLAT, .nodes = 1, .need = {.mask = m, .N = N},
                            .h_q = 4, .h_kv = 4, .d = 16};
    ck_assert(seq_layout_init(&cfg.layout, LAYOUT_CONTIGUOUS, P, N, err, sizeof err) == 0);
    ring_schedule *s = ring_plan(&cfg, RING_FORWARD, err, sizeof err);
    int64_t window_blocks = (W + n - 1) / n;
    for (int r = 0; r < P; r++) {
        int sends = 0;
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            sends += x->n_send;
            for (int k = 0; k < x->n_send; k++) /* nobody gets a block outside its window */
                ck_assert_msg(x->send[k].peer - x->send[k].block <= window_blocks &&
                                  x->send[k].peer > x->send[k].block,
                              "rank %d sends block %d to rank %d", r, x->send[k].block,
                              x->send[k].peer);
        }
        /* Rank r forwards its own block and the blocks of up to W/n - 1
         * predecessors, while the next rank is within their window; the last
         * rank has no one to feed. */
        int expect = r == P - 1 ? 0 : (int)(r + 1 < window_blocks ? r + 1 : window_blocks);
        ck_assert_msg(sends == expect, "rank %d sends %d blocks, expected %d (not P-1 = %d)", r,
                      sends, expect, P - 1);
    }
    ck_assert_int_eq(s->n_steps, P);
    ring_schedule_free(s);
    /* The Q-side backward moves query bundles towards the earlier keys: each
     * rank sends at most ceil(W/n) bundles too, never P-1. */
    s = ring_plan(&cfg, RING_BWD_Q_SIDE, err, sizeof err);
    for (int r = 0; r < P; r++) {
        int sends = 0;
        for (int st = 0; st < s->n_steps; st++) sends += ring_step_at(s, r, st)->n_send;
        ck_assert_msg(sends <= window_blocks, "Q-side: rank %d sends %d bundles (window %lld blocks)",
                      r, sends, (long long)window_blocks);
    }
    ring_schedule_free(s);
}
END_TEST

START_TEST(block_level_need_matches_the_per_element_rule)
{
    /* attn_need_pairs counts exactly the pairs bk_attn_allowed lets through. */
    for (int mi = 0; mi < N_MASK_CASES; mi++) {
        int P = 4;
        int64_t N = 48 * P;
        mask_case mc = mask_cases(mi, N, P);
        seq_layout l;
        char err[128];
        ck_assert(seq_layout_init(&l, mc.layout, P, N, err, sizeof err) == 0);
        attn_need_ctx ctx = {.mask = mc.mask, .segments = segments, .N = N};
        for (int q = 0; q < P; q++)
            for (int k = 0; k < P; k++) {
                seq_chunk qc[2], kc[2];
                int nq = seq_layout_chunks(&l, q, qc), nk = seq_layout_chunks(&l, k, kc);
                int64_t counted = attn_need_pairs(&ctx, qc, nq, kc, nk, 1), brute = 0;
                for (int a = 0; a < nq; a++)
                    for (int64_t i = qc[a].begin; i < qc[a].end; i++)
                        for (int b = 0; b < nk; b++)
                            for (int64_t j = kc[b].begin; j < kc[b].end; j++)
                                brute += bk_attn_allowed(&mc.mask, i, j, segments[i], segments[j]);
                ck_assert_msg(counted == brute, "%s: ranks (%d, %d): %lld pairs counted, %lld allowed",
                              mc.name, q, k, (long long)counted, (long long)brute);
            }
    }
}
END_TEST

/* Documents of lengths 1, 5, 2, 13, 3, 29, 1, 5, ... (ids non-decreasing). */
static void varied_documents(int32_t *seg, int64_t N)
{
    static const int64_t lengths[] = {1, 5, 2, 13, 3, 29};
    for (int64_t p = 0, id = 0, left = lengths[0]; p < N; p++, left--) {
        if (left == 0) left = lengths[++id % 6];
        seg[p] = (int32_t)id;
    }
}

/* Block q sees itself, block 0, every third block back from q - 1, and (not
 * causal) block q + 1 when q is even. */
static void varied_bitmap(uint64_t *bits, int64_t nb)
{
    memset(bits, 0, (size_t)(nb * nb + 63) / 64 * sizeof *bits);
    for (int64_t q = 0; q < nb; q++)
        for (int64_t k = 0; k < nb; k++)
            if (k == q || k == 0 || (q > k && (q - k) % 3 == 1) || (k == q + 1 && q % 2 == 0))
                bits[(q * nb + k) / 64] |= 1ull << ((q * nb + k) % 64);
}

/* attn_need_sequence_pairs counts the pairs bk_attn_allowed lets through over
 * the whole sequence, for every mask and combination the kernels know. */
START_TEST(sequence_pairs_match_a_brute_force_count)
{
    enum { BLOCK = 6 };
    static const int64_t sizes[] = {1, 7, 48, 100, 193};
    static uint64_t bits[64], short_bits[64]; /* the second covers one block less */
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t N = sizes[si], nb = (N + BLOCK - 1) / BLOCK;
        varied_documents(segments, N);
        varied_bitmap(bits, nb);
        varied_bitmap(short_bits, nb - 1);
        bk_attn_mask sparse = bk_attn_mask_block_sparse(bits, BLOCK, nb),
                     short_sparse = bk_attn_mask_block_sparse(short_bits, BLOCK, nb - 1),
                     window = bk_attn_mask_window(9, 0), doc_window = bk_attn_mask_window(7, 0),
                     causal_sparse = sparse, doc_sparse = sparse;
        window.flags |= BK_ATTN_CAUSAL;
        doc_window.flags |= BK_ATTN_CAUSAL | BK_ATTN_DOCUMENT;
        causal_sparse.flags |= BK_ATTN_CAUSAL;
        short_sparse.flags |= BK_ATTN_CAUSAL;
        doc_sparse.flags |= BK_ATTN_CAUSAL | BK_ATTN_DOCUMENT;
        const struct {
            const char *name;
            bk_attn_mask mask;
        } cases[] = {
            {"none", bk_attn_mask_none()},
            {"causal", bk_attn_mask_causal()},
            {"window", window},
            {"two-sided window", bk_attn_mask_window(4, 3)},
            {"left-only window", bk_attn_mask_window(5, -1)},
            {"document", bk_attn_mask_document(1)},
            {"document, not causal", bk_attn_mask_document(0)},
            {"sparse", causal_sparse},
            {"sparse, not causal", sparse},
            {"sparse, bitmap short of the sequence", short_sparse},
            {"sparse documents", doc_sparse},
            {"window in documents", doc_window},
        };
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            attn_need_ctx ctx = {.mask = cases[ci].mask, .segments = segments, .N = N};
            double brute = 0;
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < N; j++)
                    brute += bk_attn_allowed(&cases[ci].mask, i, j, segments[i], segments[j]);
            int64_t counted = attn_need_sequence_pairs(&ctx);
            ck_assert_msg((double)counted == brute, "%s, N = %lld: %lld pairs counted, %.0f allowed",
                          cases[ci].name, (long long)N, (long long)counted, brute);
        }
    }
}
END_TEST

START_TEST(layouts_give_true_global_positions)
{
    seq_layout l;
    char err[128];
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 4, 32, err, sizeof err) == 0);
    int64_t pos[8];
    seq_layout_positions(&l, 1, pos); /* chunks 1 and 6 of 8 chunks of 4 */
    const int64_t want[8] = {4, 5, 6, 7, 24, 25, 26, 27};
    for (int i = 0; i < 8; i++) ck_assert_int_eq(pos[i], want[i]);
    /* scatter then gather is the identity, and every position is held once */
    int global[32], local[8], back[32];
    for (int i = 0; i < 32; i++) global[i] = 100 + i, back[i] = -1;
    for (int r = 0; r < 4; r++) {
        seq_layout_scatter(&l, r, global, local, sizeof(int));
        seq_layout_positions(&l, r, pos);
        for (int i = 0; i < 8; i++) ck_assert_int_eq(local[i], 100 + pos[i]);
        seq_layout_gather(&l, r, local, back, sizeof(int));
    }
    for (int i = 0; i < 32; i++) ck_assert_int_eq(back[i], global[i]);
    /* the owner of a position, and its row, are where the positions put it */
    for (int kind = 0; kind < 2; kind++)
        for (int P = 1; P <= 4; P++) {
            ck_assert(seq_layout_init(&l, kind ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS, P, 8 * P, err,
                                      sizeof err) == 0);
            for (int r = 0; r < P; r++) {
                seq_layout_positions(&l, r, pos);
                for (int64_t i = 0, row; i < l.n; i++) {
                    ck_assert_int_eq(seq_layout_owner(&l, pos[i], &row), r);
                    ck_assert_int_eq(row, i);
                }
            }
        }
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 4, 36, err, sizeof err) != 0);
    ck_assert(strstr(err, "multiple of 8") != NULL);
}
END_TEST

/* Ulysses groups: the members of group g, their rows in member order, hold
 * exactly rank g's block of the ring's layout over the groups (what the
 * group's all-to-all relies on); every position has one owner, found where
 * the positions put it; a U that does not divide the ranks, or leaves the
 * groups' layout unsplittable, is refused by name. */
START_TEST(ulysses_groups_hold_the_ring_layouts_blocks)
{
    char err[128];
    for (int kind = 0; kind < 2; kind++)
        for (int P = 1; P <= 8; P++)
            for (int U = 1; U <= P; U++) {
                if (P % U) continue;
                seq_layout l;
                int64_t N = 2 * (int64_t)P * 3; /* n = 6: odd U splits a zigzag half */
                ck_assert(seq_layout_init(&l, kind ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS, P, N, err,
                                          sizeof err) == 0);
                ck_assert_msg(seq_layout_set_ulysses(&l, U, err, sizeof err) == 0, "%s", err);
                seq_layout ring = seq_layout_ring(&l);
                ck_assert_int_eq(ring.P, P / U);
                ck_assert_int_eq(ring.n, U * l.n);
                int64_t *pos = malloc((size_t)ring.n * sizeof *pos),
                        *want = malloc((size_t)ring.n * sizeof *want);
                for (int g = 0; g < ring.P; g++) {
                    seq_layout_positions(&ring, g, want);
                    for (int m = 0; m < U; m++) {
                        int rank = g * U + m;
                        seq_chunk c[2];
                        ck_assert_int_le(seq_layout_chunks(&l, rank, c), 2);
                        seq_layout_positions(&l, rank, pos + m * l.n);
                        for (int64_t i = 0, row; i < l.n; i++) {
                            ck_assert_int_eq(seq_layout_owner(&l, pos[m * l.n + i], &row), rank);
                            ck_assert_int_eq(row, i);
                        }
                    }
                    for (int64_t i = 0; i < ring.n; i++) ck_assert_int_eq(pos[i], want[i]);
                }
                free(pos), free(want);
            }
    seq_layout l;
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 6, 24, err, sizeof err) == 0);
    ck_assert(seq_layout_set_ulysses(&l, 4, err, sizeof err) != 0);
    ck_assert(strstr(err, "ulysses = 4") != NULL);
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 4, 8, err, sizeof err) == 0);
    ck_assert(seq_layout_set_ulysses(&l, 2, err, sizeof err) == 0); /* 2 groups: 4 | 8 */
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 6, 12, err, sizeof err) == 0);
    ck_assert(seq_layout_set_ulysses(&l, 3, err, sizeof err) == 0);
    /* each member takes 1/U of the query and of the key/value heads */
    ck_assert(ulysses_check(4, 32, 8, err, sizeof err) == 0);
    ck_assert(ulysses_check(8, 32, 4, err, sizeof err) != 0);
    ck_assert(strstr(err, "ulysses = 8") && strstr(err, "key/value heads (4)"));
    ck_assert(ulysses_check(3, 32, 8, err, sizeof err) != 0);
}
END_TEST

/* The ring's buffers are made only for what a step can touch: the slots and
 * accumulators the steps of a maskless plan (which prunes nothing) hold,
 * receive into or compute into, and the positions of every block of the one
 * layout they share. One rank: the home slot and one accumulator; one node:
 * never an inter-node slot. */
START_TEST(ring_buffers_make_only_what_steps_touch)
{
    const int cases[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 2}, {8, 2}}; /* ranks, nodes */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int P = cases[c][0], M = cases[c][1];
        const ring_schedule *s[2] = {plan(P, M, 0, RING_FORWARD, 4, 2, 8, 64 * P),
                                     plan(P, M, 0, RING_BWD_KV_SIDE, 4, 2, 8, 64 * P)};
        int slot[RING_N_SLOTS] = {0}, acc_out[2] = {0}, acc_in[2] = {0}, home_acc = 0;
        for (int k = 0; k < 2; k++)
            for (int r = 0; r < P; r++) {
                home_acc |= s[k]->home_acc_from[r] >= 0;
                for (int t = 0; t < P; t++) {
                    const ring_step *x = ring_step_at(s[k], r, t);
                    slot[x->slot] = 1;
                    for (int i = 0; i < x->n_recv; i++) slot[x->recv[i].slot] = 1;
                    if (s[k]->pass == RING_FORWARD) continue;
                    acc_out[t % 2] = 1;
                    acc_in[t % 2] |= x->acc_from >= 0;
                }
            }
        size_t n = (size_t)s[0]->layout.n, want = 0;
        for (int i = 0; i < RING_N_SLOTS; i++) want += slot[i] * s[0]->input_bytes;
        want +=
            (size_t)(acc_out[0] + acc_out[1] + acc_in[0] + acc_in[1] + home_acc) * s[1]->acc_bytes;
        want += (n * 4 + 1) * sizeof(float) + 2 * n * sizeof(int64_t) + 2 * n * sizeof(int32_t);
        want += (size_t)s[0]->layout.N * sizeof(int64_t); /* every block's positions, one layout */
        size_t got = ring_buffers_bytes(s, 2, 0);
        ck_assert_msg(got == want, "P=%d M=%d: %zu bytes, the steps touch %zu", P, M, got, want);
        ck_assert_int_eq(slot[SLOT_INTER0] || slot[SLOT_INTER0 + 1], M > 1);
        if (P == 1)
            ck_assert(!slot[1] && !slot[2] && !slot[3] && !slot[4] && !acc_out[1] && !acc_in[0] &&
                      !acc_in[1] && !home_acc);
        ring_schedule_free((ring_schedule *)s[0]), ring_schedule_free((ring_schedule *)s[1]);
    }
}
END_TEST

/* RING_CALLER_MEMORY: every backward of more than one rank receives its
 * home accumulator into its gradients; one with bf16 inputs on the KV side
 * keeps as many trailing accumulators in Q and dO as they hold, two in each
 * at most: Hq = 4 Hkv spares all four, Hq = 2 Hkv two, MHA none; fp32
 * inputs or a Q-side backward among the passes none. A forward alone keeps
 * no accumulator. */
START_TEST(the_backward_keeps_accumulators_in_its_inputs)
{
    const struct {
        int h_q, h_kv, in_bytes;
        ring_pass bwd;
        int lent;
    } cases[] = {{8, 2, 2, RING_BWD_KV_SIDE, 4}, {16, 2, 2, RING_BWD_KV_SIDE, 4},
                 {4, 2, 2, RING_BWD_KV_SIDE, 2}, {2, 2, 2, RING_BWD_KV_SIDE, 0},
                 {8, 2, 4, RING_BWD_KV_SIDE, 0}, {8, 2, 2, RING_BWD_Q_SIDE, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int P = 4, h_q = cases[c].h_q, h_kv = cases[c].h_kv, e = cases[c].in_bytes;
        const ring_schedule *s[2] = {plan_typed(P, 1, 0, RING_FORWARD, h_q, h_kv, 8, 64 * P, e),
                                     plan_typed(P, 1, 0, cases[c].bwd, h_q, h_kv, 8, 64 * P, e)};
        size_t own = ring_buffers_bytes(s, 2, 0),
               lent = ring_buffers_bytes(s, 2, RING_CALLER_MEMORY);
        ck_assert_msg(own - lent == (size_t)(cases[c].lent + 1) * s[1]->acc_bytes,
                      "Hq %d Hkv %d, %d-byte inputs: %zu bytes spared", h_q, h_kv, e, own - lent);
        ck_assert_int_eq(ring_buffers_bytes(s, 1, RING_CALLER_MEMORY), ring_buffers_bytes(s, 1, 0));
        ring_schedule_free((ring_schedule *)s[0]), ring_schedule_free((ring_schedule *)s[1]);
    }
}
END_TEST

/* The kernel's pieces: what the caller asks, else 512 query rows on the host
 * and the whole block on a device (where a call returns before its kernel
 * runs, and 512-row pieces leave most of a GPU idle). */
START_TEST(kernel_pieces_are_whole_blocks_on_a_device)
{
    ck_assert_int_eq(ring_piece_rows(24, 4096, 0), 24);
    ck_assert_int_eq(ring_piece_rows(24, 4096, 1), 24);
    ck_assert_int_eq(ring_piece_rows(0, 4096, 0), RING_PIECE_ROWS);
    ck_assert_int_eq(ring_piece_rows(0, 4096, 1), 4096);
    ck_assert_int_eq(ring_piece_rows(0, 1 << 20, 1), 1 << 20);
    ck_assert_int_eq(ring_piece_rows(0, 0, 1), RING_PIECE_ROWS); /* no rows: any positive size */
}
END_TEST

/* The ring's block pairs as cuDNN SDPA calls (src/attn/sdpa_map.h). These
 * checks run millions of times: they test with if and abort on failure, as
 * check's ck_assert records every passing assertion too (a write each). */

/* A call as sdpa.h and cuDNN take it, on blocks of n rows: bounds in range,
 * sequences of at least one row inside the blocks and disjoint on both sides,
 * not s_q = s_kv = 1, and, without a padding mask (one sequence), a left bound
 * or a bottom-right right bound only with q_len <= kv_len. */
static void check_call_conventions(const bk_sdpa_call *c, int64_t n, const char *what)
{
    const bk_sdpa_band *b = &c->band;
    if (c->n_seq < 1) ck_abort_msg("%s: a call of %d sequences", what, c->n_seq);
    if ((b->has_right && b->right < 0) || (b->has_left && b->left < 1))
        ck_abort_msg("%s: bounds %lld, %lld", what, (long long)b->right, (long long)b->left);
    int64_t max_kv = 0;
    for (int k = 0; k < c->n_seq; k++) {
        const bk_sdpa_seq *x = &c->seq[k];
        if (x->q_len < 1 || x->kv_len < 1 || x->q_row < 0 || x->kv_row < 0 ||
            x->q_row + x->q_len > n || x->kv_row + x->kv_len > n)
            ck_abort_msg("%s: sequence %d: rows %lld + %lld, keys %lld + %lld of %lld", what, k,
                         (long long)x->q_row, (long long)x->q_len, (long long)x->kv_row,
                         (long long)x->kv_len, (long long)n);
        if (x->kv_len > max_kv) max_kv = x->kv_len;
        for (int o = 0; o < k; o++) {
            const bk_sdpa_seq *y = &c->seq[o];
            if (x->q_row < y->q_row + y->q_len && y->q_row < x->q_row + x->q_len)
                ck_abort_msg("%s: sequences %d and %d share query rows", what, o, k);
            if (x->kv_row < y->kv_row + y->kv_len && y->kv_row < x->kv_row + x->kv_len)
                ck_abort_msg("%s: sequences %d and %d share key rows", what, o, k);
        }
    }
    int64_t max_q = bk_sdpa_max_q(c);
    if (max_q == 1 && max_kv == 1) ck_abort_msg("%s: a call of s_q = s_kv = 1", what);
    if (c->n_seq == 1 && (b->has_left || (b->align == BK_SDPA_BOTTOM_RIGHT && b->has_right)) &&
        max_q > max_kv)
        ck_abort_msg("%s: a dense call of %lld rows over %lld keys with a left or bottom-right "
                     "bound",
                     what, (long long)max_q, (long long)max_kv);
}

/* Marks in covered [n query rows][n key rows] the pairs sequence x of a call
 * allows (sdpa.h's rule), failing on a pair already marked, and on a row
 * that sees no key or a key that no row sees (cuDNN's work for nothing; but
 * for the added key of a widened 1 x 2 sequence). */
static void cover_sequence(const bk_sdpa_call *call, const bk_sdpa_seq *x, int64_t n,
                           unsigned char *covered, const char *what)
{
    int64_t keys_seen = 0;
    for (int64_t i = 0; i < x->q_len; i++) {
        int64_t keys = 0;
        for (int64_t j = 0; j < x->kv_len; j++) {
            if (!bk_sdpa_allowed(&call->band, x->q_len, x->kv_len, i, j)) continue;
            unsigned char *pair = &covered[(x->q_row + i) * n + x->kv_row + j];
            if (*pair)
                ck_abort_msg("%s: pair (row %lld, key row %lld) twice", what,
                             (long long)(x->q_row + i), (long long)(x->kv_row + j));
            *pair = 1;
            keys++;
        }
        if (keys == 0) ck_abort_msg("%s: row %lld sees no key", what, (long long)(x->q_row + i));
    }
    for (int64_t j = 0; j < x->kv_len; j++) {
        int seen = 0;
        for (int64_t i = 0; i < x->q_len && !seen; i++)
            seen = bk_sdpa_allowed(&call->band, x->q_len, x->kv_len, i, j);
        keys_seen += seen;
    }
    int widened = x->q_len == 1 && x->kv_len == 2;
    if (keys_seen < x->kv_len - widened)
        ck_abort_msg("%s: sequence of keys %lld + %lld: %lld seen", what, (long long)x->kv_row,
                     (long long)x->kv_len, (long long)keys_seen);
}

/* covered [n query rows][n key rows]: 1 where a call allows the pair. */
static void cover_calls(const sdpa_calls *m, int64_t n, unsigned char *covered, const char *what)
{
    for (int c = 0; c < m->n_calls; c++) {
        char where[300];
        snprintf(where, sizeof where, "%s, call %d", what, c);
        check_call_conventions(&m->calls[c], n, where);
        for (int k = 0; k < m->calls[c].n_seq; k++)
            cover_sequence(&m->calls[c], &m->calls[c].seq[k], n, covered, where);
    }
}

/* Maps (queries of q_rank, keys of k_rank) with h_q, h_kv, d and checks, pair
 * by pair of local rows, that the calls allow what bk_attn_allowed allows at
 * those rows' global positions; block-sparse must come back unmapped. Returns
 * the number of calls. */
static int check_pair_maps_exactly(const attn_need_ctx *need, const seq_layout *l, int q_rank,
                                   int k_rank, int h_q, int h_kv, int d, const char *case_name)
{
    char what[256];
    snprintf(what, sizeof what, "%s, queries of %d, keys of %d", case_name, q_rank, k_rank);
    sdpa_calls m;
    if (sdpa_map_block_pair(need, l, q_rank, k_rank, h_q, h_kv, d, 0.125f, &m) != 0)
        ck_abort_msg("%s: out of memory", what);
    if (need->mask.flags & BK_ATTN_BLOCK_SPARSE) {
        if (m.mapped || !strstr(m.why, "block-sparse")) ck_abort_msg("%s: mapped", what);
        sdpa_calls_free(&m);
        return 0;
    }
    if (!m.mapped) ck_abort_msg("%s: unmapped: %s", what, m.why);
    int64_t n = l->n, *qp = malloc(n * sizeof(int64_t)), *kp = malloc(n * sizeof(int64_t));
    unsigned char *covered = calloc((size_t)(n * n), 1);
    seq_layout_positions(l, q_rank, qp);
    seq_layout_positions(l, k_rank, kp);
    cover_calls(&m, n, covered, what);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            int want = bk_attn_allowed(&need->mask, qp[i], kp[j], need->segments[qp[i]],
                                       need->segments[kp[j]]);
            if (covered[i * n + j] != want)
                ck_abort_msg("%s: row %lld (position %lld), key row %lld (position %lld): %s by "
                             "the calls, %s by the mask",
                             what, (long long)i, (long long)qp[i], (long long)j, (long long)kp[j],
                             want ? "not allowed" : "allowed", want ? "allowed" : "not");
        }
    for (int c = 0; c < m.n_calls; c++)
        if (m.calls[c].h_q != h_q || m.calls[c].h_kv != h_kv || m.calls[c].d != d ||
            m.calls[c].scale != 0.125f)
            ck_abort_msg("%s: call %d has other heads", what, c);
    int n_calls = m.n_calls;
    free(qp), free(kp), free(covered);
    sdpa_calls_free(&m);
    return n_calls;
}

/* Every step of s that computes: the rank's queries against the block it holds,
 * or on the Q side the held query block against the rank's keys. */
static void check_steps_map_exactly(const ring_schedule *s, const attn_need_ctx *need,
                                    const char *what)
{
    for (int r = 0; r < s->P; r++)
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            if (!x->compute) continue;
            int q = s->pass == RING_BWD_Q_SIDE ? x->block : r;
            int k = s->pass == RING_BWD_Q_SIDE ? r : x->block;
            check_pair_maps_exactly(need, &s->layout, q, k, s->h_q, s->h_kv, s->d, what);
        }
}

/* Masks beyond mask_cases, for blocks of n tokens: windows no multiple of n,
 * one-sided and two-sided, and documents of varied lengths (varied_documents,
 * crossing chunk boundaries) with and without causal and inside windows. */
static mask_case sdpa_mask_case(int i, int64_t n)
{
    bk_attn_mask w5 = bk_attn_mask_window(4, 0), wide = bk_attn_mask_window(n + 2, 0),
                 doc_w = bk_attn_mask_window(7, 0), doc_two = bk_attn_mask_window(1, 7);
    w5.flags |= BK_ATTN_CAUSAL;
    wide.flags |= BK_ATTN_CAUSAL;
    doc_w.flags |= BK_ATTN_CAUSAL | BK_ATTN_DOCUMENT;
    doc_two.flags |= BK_ATTN_DOCUMENT;
    mask_case cases[] = {
        {"causal window of 5", w5, LAYOUT_ZIGZAG},
        {"causal window of n + 3", wide, LAYOUT_ZIGZAG},
        {"two-sided window", bk_attn_mask_window(n / 2 + 1, 3), LAYOUT_CONTIGUOUS},
        {"two-sided window, zigzag", bk_attn_mask_window(n + 1, n / 2), LAYOUT_ZIGZAG},
        {"left-only window", bk_attn_mask_window(n + 2, -1), LAYOUT_CONTIGUOUS},
        {"right-only window, zigzag", bk_attn_mask_window(-1, 5), LAYOUT_ZIGZAG},
        {"documents, not causal", bk_attn_mask_document(0), LAYOUT_CONTIGUOUS},
        {"documents, not causal, zigzag", bk_attn_mask_document(0), LAYOUT_ZIGZAG},
        {"documents, causal, zigzag", bk_attn_mask_document(1), LAYOUT_ZIGZAG},
        {"causal window in documents", doc_w, LAYOUT_CONTIGUOUS},
        {"two-sided window in documents, zigzag", doc_two, LAYOUT_ZIGZAG},
    };
    return cases[i];
}
enum { N_SDPA_MASK_CASES = 11 };

/* Case i of mask_cases then sdpa_mask_case, with its segments filled. */
static mask_case any_mask_case(int i, int64_t N, int P)
{
    if (i < N_MASK_CASES) return mask_cases(i, N, P);
    varied_documents(segments, N);
    return sdpa_mask_case(i - N_MASK_CASES, N / P);
}

/* Every step that computes, in the schedules of
 * schedules_compute_every_needed_pair_once (flat and double ring, the three
 * passes) with blocks of 48 and of 14 tokens (zigzag halves of 7), GQA 8 over
 * 2, under every mask: its calls allow exactly the mask's pairs, each once,
 * in calls cuDNN takes. */
START_TEST(ring_steps_map_to_sdpa_calls_exactly)
{
    const int ranks[] = {1, 2, 3, 4, 5, 4, 6, 6};
    const int nodes[] = {1, 1, 1, 1, 1, 2, 2, 3};
    const ring_pass passes[] = {RING_FORWARD, RING_BWD_Q_SIDE, RING_BWD_KV_SIDE};
    const int64_t block_tokens[] = {48, 14}; /* zigzag halves of 24 and of 7 */
    for (int t = 0; t < 8; t++)
        for (int b = 0; b < 2; b++)
            for (int mi = 0; mi < N_MASK_CASES + N_SDPA_MASK_CASES; mi++)
                for (int p = 0; p < 3; p++) {
                    int P = ranks[t];
                    int64_t N = block_tokens[b] * P;
                    mask_case mc = any_mask_case(mi, N, P);
                    ring_schedule *s = plan_case(P, nodes[t], &mc, passes[p], 8, 2, 64, N, 2);
                    attn_need_ctx need = {.mask = mc.mask, .segments = segments, .N = N};
                    char what[128];
                    snprintf(what, sizeof what, "%s, N = %lld, P = %d, %d nodes, %s", mc.name,
                             (long long)N, P, nodes[t], ring_pass_name(passes[p]));
                    check_steps_map_exactly(s, &need, what);
                    ring_schedule_free(s);
                }
}
END_TEST

/* A block pair the mask excludes (a step the planner skips) maps to no call. */
START_TEST(pairs_the_mask_excludes_map_to_no_call)
{
    const int P = 4;
    const int64_t N = 14 * P;
    int skipped = 0;
    for (int mi = 0; mi < N_MASK_CASES + N_SDPA_MASK_CASES; mi++) {
        mask_case mc = any_mask_case(mi, N, P);
        if (mc.mask.flags & BK_ATTN_BLOCK_SPARSE) continue;
        attn_need_ctx need = {.mask = mc.mask, .segments = segments, .N = N};
        seq_layout l;
        char err[128];
        ck_assert(seq_layout_init(&l, mc.layout, P, N, err, sizeof err) == 0);
        for (int q = 0; q < P; q++)
            for (int k = 0; k < P; k++) {
                seq_chunk qc[2], kc[2];
                int nq = seq_layout_chunks(&l, q, qc), nk = seq_layout_chunks(&l, k, kc);
                if (attn_need_pairs(&need, qc, nq, kc, nk, 0)) continue;
                sdpa_calls m;
                ck_assert(sdpa_map_block_pair(&need, &l, q, k, 8, 2, 64, 0.125f, &m) == 0);
                ck_assert_msg(m.mapped && m.n_calls == 0, "%s: (%d, %d): %d calls for no pair",
                              mc.name, q, k, m.n_calls);
                sdpa_calls_free(&m);
                skipped++;
            }
    }
    ck_assert_int_ge(skipped, 20);
}
END_TEST

/* Zigzag causal, as TransformerEngine computes it: a rank's own block is one
 * causal call (right bound 0, top-left), an off-diagonal pair one or two full
 * dense calls: all queries against the early half of the keys (keys of an
 * earlier rank), or the late half of the queries against all keys. */
START_TEST(zigzag_causal_pairs_map_to_the_halves)
{
    const int P = 4;
    for (int64_t half = 7; half <= 24; half += 17) {
        int64_t N = 2 * P * half, n = 2 * half;
        mask_case mc = mask_cases(1, N, P);
        ck_assert_int_eq(mc.layout, LAYOUT_ZIGZAG);
        seq_layout l;
        char err[128];
        ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, P, N, err, sizeof err) == 0);
        attn_need_ctx need = {.mask = mc.mask, .segments = segments, .N = N};
        for (int q = 0; q < P; q++)
            for (int k = 0; k < P; k++) {
                int n_calls = check_pair_maps_exactly(&need, &l, q, k, 8, 8, 128, "zigzag causal");
                sdpa_calls m;
                ck_assert(sdpa_map_block_pair(&need, &l, q, k, 8, 8, 128, 0.125f, &m) == 0);
                ck_assert(m.n_calls == n_calls && n_calls >= 1 && n_calls <= 2);
                int64_t rows = 0;
                for (int c = 0; c < n_calls; c++) {
                    const bk_sdpa_call *x = &m.calls[c];
                    ck_assert_int_eq(x->n_seq, 1);
                    ck_assert(!x->band.has_left && x->band.has_right == (q == k));
                    ck_assert(q != k || (x->band.align == BK_SDPA_TOP_LEFT && x->band.right == 0));
                    rows += x->seq[0].q_len * x->seq[0].kv_len;
                }
                ck_assert_int_eq(rows, q == k ? n * n : n * half); /* the half, or the block */
                sdpa_calls_free(&m);
            }
    }
}
END_TEST

/* Ragged pieces of one query row and one key row join a larger call; a lone
 * one takes a neighbouring key its band excludes (cuDNN refuses s_q = s_kv =
 * 1), or, on blocks of one row, comes back unmapped. */
START_TEST(single_pairs_join_a_call_or_widen)
{
    static const int32_t joined[16] = {0, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 4, 5, 5, 5};
    seq_layout l;
    char err[128];
    sdpa_calls m;
    memcpy(segments, joined, sizeof joined);
    attn_need_ctx need = {.mask = bk_attn_mask_document(1), .segments = segments, .N = 16};
    ck_assert(seq_layout_init(&l, LAYOUT_CONTIGUOUS, 1, 16, err, sizeof err) == 0);
    ck_assert_int_eq(check_pair_maps_exactly(&need, &l, 0, 0, 4, 4, 32, "joined"), 1);
    ck_assert(sdpa_map_block_pair(&need, &l, 0, 0, 4, 4, 32, 1.0f, &m) == 0);
    ck_assert_int_eq(m.calls[0].n_seq, 6); /* three causal documents, three of one token */
    sdpa_calls_free(&m);
    /* one document across the boundary of two ranks, one token on each side */
    for (int64_t p = 0; p < 16; p++) segments[p] = p < 7 ? 0 : p < 9 ? 1 : 2;
    ck_assert(seq_layout_init(&l, LAYOUT_CONTIGUOUS, 2, 16, err, sizeof err) == 0);
    for (int causal = 0; causal < 2; causal++) {
        need.mask = bk_attn_mask_document(causal);
        int q = causal ? 1 : 0, k = 1 - q; /* the key at row 7, the block's last; or at row 0 */
        ck_assert_int_eq(check_pair_maps_exactly(&need, &l, q, k, 4, 4, 32, "lone pair"), 1);
        ck_assert(sdpa_map_block_pair(&need, &l, q, k, 4, 4, 32, 1.0f, &m) == 0);
        const bk_sdpa_seq *x = &m.calls[0].seq[0];
        ck_assert(x->q_len == 1 && x->kv_len == 2 && x->kv_row == (causal ? 6 : 0));
        ck_assert_int_eq(m.calls[0].band.align, causal ? BK_SDPA_BOTTOM_RIGHT : BK_SDPA_TOP_LEFT);
        sdpa_calls_free(&m);
    }
    /* blocks of one row: nothing to widen into */
    segments[0] = segments[1] = 0;
    need.N = 2;
    ck_assert(seq_layout_init(&l, LAYOUT_CONTIGUOUS, 2, 2, err, sizeof err) == 0);
    ck_assert(sdpa_map_block_pair(&need, &l, 1, 0, 4, 4, 32, 1.0f, &m) == 0);
    ck_assert_msg(!m.mapped && m.n_calls == 0 && strstr(m.why, "s_q = s_kv = 1"), "%s", m.why);
    sdpa_calls_free(&m);
}
END_TEST

/* Head shapes cuDNN's SDPA refuses, and block-sparse masks, come back
 * unmapped with the reason; the edges of the range map. */
START_TEST(sdpa_map_refuses_what_cudnn_cannot_take)
{
    seq_layout l;
    char err[128];
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 2, 32, err, sizeof err) == 0);
    mask_case sparse = mask_cases(5, 32, 2);
    const struct {
        bk_attn_mask mask;
        int h_q, h_kv, d;
        float scale;
        const char *why; /* NULL: mapped */
    } cases[] = {
        {sparse.mask, 8, 2, 64, 0.125f, "block-sparse"},
        {bk_attn_mask_causal(), 8, 2, 12, 1, "head dim"},
        {bk_attn_mask_causal(), 8, 2, 136, 1, "head dim"},
        {bk_attn_mask_causal(), 8, 2, 0, 1, "head dim"},
        {bk_attn_mask_causal(), 6, 4, 64, 1, "heads"},
        {bk_attn_mask_causal(), 8, 2, 64, 0, "scale"},
        {bk_attn_mask_causal(), 8, 2, 64, NAN, "scale"},
        {bk_attn_mask_causal(), 8, 2, 8, 1, NULL},
        {bk_attn_mask_causal(), 8, 1, 128, 1, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_need_ctx need = {.mask = cases[c].mask, .segments = segments, .N = 32};
        sdpa_calls m;
        ck_assert(sdpa_map_block_pair(&need, &l, 1, 0, cases[c].h_q, cases[c].h_kv, cases[c].d,
                                      cases[c].scale, &m) == 0);
        if (cases[c].why)
            ck_assert_msg(!m.mapped && m.n_calls == 0 && strstr(m.why, cases[c].why),
                          "case %zu: %s", c, m.why);
        else
            ck_assert_msg(m.mapped && m.n_calls == 1, "case %zu: %s", c, m.why);
        sdpa_calls_free(&m);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring_schedule");
    TCase *tc = check_tcase(s, "schedule", 300);
    check_add_tests(
        tc, layouts_give_true_global_positions, ulysses_groups_hold_the_ring_layouts_blocks,
        block_level_need_matches_the_per_element_rule, sequence_pairs_match_a_brute_force_count,
        schedules_compute_every_needed_pair_once, q_side_sends_3d_plus_2_over_4d_of_kv_side_for_mha,
        auto_never_sends_more_than_the_cheaper_direction, bf16_inputs_halve_the_travelling_tensors,
        sliding_window_sends_only_the_window, ring_buffers_make_only_what_steps_touch,
        the_backward_keeps_accumulators_in_its_inputs, kernel_pieces_are_whole_blocks_on_a_device,
        ring_steps_map_to_sdpa_calls_exactly, pairs_the_mask_excludes_map_to_no_call,
        zigzag_causal_pairs_map_to_the_halves, single_pairs_join_a_call_or_widen,
        sdpa_map_refuses_what_cudnn_cannot_take);
    return check_run(s);
}
