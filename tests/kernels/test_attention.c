/* test_attention.c: the tiled fp32 attention kernels against the double-precision
 * reference (kernels/ref/attention_ref.c): random shapes with odd sizes, every mask,
 * MHA and GQA, head dims 8 to 128; a sequence split into blocks and merged
 * through the running (O, lse) equals the whole, forward and backward; finite
 * differences; fully masked rows and tiles; tile skipping; invalid arguments. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/mask_cases.h"
#include "tests/lib/rng.h"

/* ------------------------------------------------------------------ helpers */

/* One (query block, key/value block) problem with its own buffers. */
typedef struct {
    bk_attn_geom g;
    int64_t *q_pos, *kv_pos;
    int32_t *q_seg, *kv_seg;
    float *Q, *K, *V, *dO;
} problem;

static size_t qsize(const bk_attn_geom *g)
{
    return (size_t)g->n_q * g->h_q * g->d;
}
static size_t ksize(const bk_attn_geom *g)
{
    return (size_t)g->n_kv * g->h_kv * g->d;
}

static problem make_problem(uint64_t *r, int64_t n_q, int64_t n_kv, int h_q, int h_kv, int d,
                            int layout, int kind, mask_case *ms)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.q_pos = test_alloc((size_t)n_q, sizeof *p.q_pos);
    p.kv_pos = test_alloc((size_t)n_kv, sizeof *p.kv_pos);
    int64_t span;
    mask_case_positions(r, layout, n_q, n_kv, p.q_pos, p.kv_pos, &span);
    *ms = mask_case_draw(r, kind, span);
    p.q_seg = test_alloc((size_t)n_q, sizeof *p.q_seg);
    p.kv_seg = test_alloc((size_t)n_kv, sizeof *p.kv_seg);
    for (int64_t i = 0; i < n_q; i++) p.q_seg[i] = mask_case_segment(ms, p.q_pos[i]);
    for (int64_t j = 0; j < n_kv; j++) p.kv_seg[j] = mask_case_segment(ms, p.kv_pos[j]);
    bk_attn_geom g = {n_q,     n_kv,     h_q,     h_kv,     d,       1.0f / sqrtf((float)d),
                      p.q_pos, p.kv_pos, p.q_seg, p.kv_seg, ms->mask};
    p.g = g;
    p.Q = test_rand_f(r, qsize(&g), -2, 2);
    p.K = test_rand_f(r, ksize(&g), -2, 2);
    p.V = test_rand_f(r, ksize(&g), -1, 1);
    p.dO = test_rand_f(r, qsize(&g), -1, 1);
    return p;
}

static void free_problem(problem *p, mask_case *ms)
{
    free(p->q_pos);
    free(p->kv_pos);
    free(p->q_seg);
    free(p->kv_seg);
    free(p->Q);
    free(p->K);
    free(p->V);
    free(p->dO);
    free(ms->bits);
}

/* Largest |x - ref| / (atol + rtol |ref|); fails on NaN or a mismatch of -inf. */
static double err_ratio(const float *x, const double *ref, size_t n, double atol, double rtol)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(x[i])) {
            if ((double)x[i] != ref[i]) return INFINITY;
            continue;
        }
        if (!isfinite(x[i])) return INFINITY;
        double e = fabs(x[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (e > worst) worst = e;
    }
    return worst;
}

static void kernel_fwd(const bk_queue *q, const bk_attn_geom *g, const float *Q, const float *K,
                       const float *V, float *O, float *lse, bk_attn_stats *st)
{
    ck_assert_int_eq(bk_attn_fwd_init(q, g->n_q, g->h_q, g->d, O, lse), BK_OK);
    ck_assert_int_eq(bk_attn_fwd(q, g, Q, K, V, O, lse, st), BK_OK);
    ck_assert_int_eq(bk_attn_fwd_finalize(q, g->n_q, g->h_q, g->d, O, lse), BK_OK);
}

static const int dims[] = {8, 24, 64, 128};
static const int heads[][2] = {{1, 1}, {2, 2}, {4, 2}, {8, 2}, {3, 1}, {4, 4}};
static const int64_t nqs[] = {1, 3, 17, 64, 65, 100, 130};
static const int64_t nkvs[] = {1, 5, 63, 64, 97, 129};

/* Random problem number i: every mask kind in turn, everything else random. */
static problem random_problem(int i, uint64_t *r, mask_case *ms, bk_queue *q)
{
    int d = dims[test_rng_below(r, 4)];
    int hc = (int)test_rng_below(r, 6);
    int64_t n_q = nqs[test_rng_below(r, 7)], n_kv = nkvs[test_rng_below(r, 6)];
    int layout = (int)test_rng_below(r, 3);
    *q = bk_host_queue();
    q->n_threads = 1 + (int)test_rng_below(r, 4);
    return make_problem(r, n_q, n_kv, heads[hc][0], heads[hc][1], d, layout, i % MASK_KINDS, ms);
}

/* ------------------------------------------------------------------ tests */

START_TEST(mask_predicate_matches_reference)
{
    uint64_t r = test_rng(77);
    for (int kind = 0; kind < MASK_KINDS; kind++) {
        mask_case ms;
        problem p = make_problem(&r, 40, 50, 1, 1, 8, 1, kind, &ms);
        for (int64_t i = 0; i < p.g.n_q; i++)
            for (int64_t j = 0; j < p.g.n_kv; j++)
                ck_assert_int_eq(
                    bk_attn_allowed(&p.g.mask, p.q_pos[i], p.kv_pos[j], p.q_seg[i], p.kv_seg[j]),
                    ref_attn_allowed(&p.g, i, j));
        free_problem(&p, &ms);
    }
    /* merge of two empty sides stays empty, with zero weights */
    float wo = 1, wb = 1;
    ck_assert(bk_attn_merge_weights(-INFINITY, -INFINITY, &wo, &wb) == -INFINITY);
    ck_assert(wo == 0 && wb == 0);
    float l = bk_attn_merge_weights(logf(2), logf(6), &wo, &wb);
    ck_assert(fabsf(l - logf(8)) < 1e-6f && fabsf(wo - 0.25f) < 1e-6f && fabsf(wb - 0.75f) < 1e-6f);
}
END_TEST

START_TEST(forward_matches_reference)
{
    uint64_t r = test_rng((uint64_t)_i + 1);
    mask_case ms;
    bk_queue q;
    problem p = random_problem(_i, &r, &ms, &q);
    const bk_attn_geom *g = &p.g;
    float *O = test_alloc(qsize(g), sizeof *O),
          *lse = test_alloc((size_t)g->n_q * g->h_q, sizeof *lse);
    bk_attn_stats st;
    kernel_fwd(&q, g, p.Q, p.K, p.V, O, lse, &st);
    double *Qd = test_to_d(p.Q, qsize(g)), *Kd = test_to_d(p.K, ksize(g)),
           *Vd = test_to_d(p.V, ksize(g));
    double *Or = test_alloc(qsize(g), sizeof *Or),
           *lr = test_alloc((size_t)g->n_q * g->h_q, sizeof *lr);
    ref_attn_fwd(g, Qd, Kd, Vd, Or, lr);
    double eo = err_ratio(O, Or, qsize(g), 2e-5, 2e-4);
    double el = err_ratio(lse, lr, (size_t)g->n_q * g->h_q, 2e-5, 2e-5);
    ck_assert_msg(
        eo <= 1 && el <= 1, "case %d: mask %s n_q %ld n_kv %ld h %d/%d d %d: O err %g lse err %g",
        _i, mask_kind_name(ms.kind), (long)g->n_q, (long)g->n_kv, g->h_q, g->h_kv, g->d, eo, el);
    ck_assert_int_eq(st.tiles_total, st.tiles_skipped + st.tiles_masked + st.tiles_full);
    free(Qd), free(Kd), free(Vd), free(Or), free(lr), free(O), free(lse);
    free_problem(&p, &ms);
}
END_TEST

START_TEST(backward_matches_reference)
{
    uint64_t r = test_rng((uint64_t)_i + 1001);
    mask_case ms;
    bk_queue q;
    problem p = random_problem(_i, &r, &ms, &q);
    const bk_attn_geom *g = &p.g;
    size_t nr = (size_t)g->n_q * g->h_q;
    float *O = test_alloc(qsize(g), sizeof *O), *lse = test_alloc(nr, sizeof *lse);
    float *delta = test_alloc(nr, sizeof *delta);
    kernel_fwd(&q, g, p.Q, p.K, p.V, O, lse, NULL);
    ck_assert_int_eq(bk_attn_delta(&q, g->n_q, g->h_q, g->d, p.dO, O, delta), BK_OK);
    /* gradients start non-zero: the kernel must add, not overwrite */
    float *dQ = test_alloc(qsize(g), sizeof *dQ), *dK = test_alloc(ksize(g), sizeof *dK),
          *dV = test_alloc(ksize(g), sizeof *dV);
    for (size_t i = 0; i < qsize(g); i++) dQ[i] = 0.5f;
    for (size_t i = 0; i < ksize(g); i++) dK[i] = dV[i] = -0.25f;
    bk_attn_stats st;
    ck_assert_int_eq(bk_attn_bwd(&q, g, p.Q, p.K, p.V, p.dO, lse, delta, dQ, dK, dV, &st), BK_OK);

    double *Qd = test_to_d(p.Q, qsize(g)), *Kd = test_to_d(p.K, ksize(g)),
           *Vd = test_to_d(p.V, ksize(g)), *dOd = test_to_d(p.dO, qsize(g));
    double *rQ = test_alloc(qsize(g), sizeof *rQ), *rK = test_alloc(ksize(g), sizeof *rK),
           *rV = test_alloc(ksize(g), sizeof *rV);
    ref_attn_bwd(g, Qd, Kd, Vd, dOd, rQ, rK, rV);
    for (size_t i = 0; i < qsize(g); i++) rQ[i] += 0.5;
    for (size_t i = 0; i < ksize(g); i++) rK[i] -= 0.25, rV[i] -= 0.25;
    double eq = err_ratio(dQ, rQ, qsize(g), 1e-4, 1e-3);
    double ek = err_ratio(dK, rK, ksize(g), 1e-4, 1e-3);
    double ev = err_ratio(dV, rV, ksize(g), 1e-4, 1e-3);
    ck_assert_msg(eq <= 1 && ek <= 1 && ev <= 1,
                  "case %d: mask %s n_q %ld n_kv %ld h %d/%d d %d threads %d: dQ %g dK %g dV %g",
                  _i, mask_kind_name(ms.kind), (long)g->n_q, (long)g->n_kv, g->h_q, g->h_kv, g->d,
                  q.n_threads, eq, ek, ev);
    ck_assert_int_eq(st.tiles_total, st.tiles_skipped + st.tiles_masked + st.tiles_full);
    free(Qd), free(Kd), free(Vd), free(dOd), free(rQ), free(rK), free(rV);
    free(O), free(lse), free(delta), free(dQ), free(dK), free(dV);
    free_problem(&p, &ms);
}
END_TEST

/* Token indices of block b when n tokens are split into k blocks: layout 0
 * contiguous, 1 zigzag (chunks b and 2k-1-b of 2k), 2 striped (t % k == b). */
static int64_t split_block(int64_t n, int k, int layout, int b, int64_t *idx)
{
    int64_t m = 0;
    for (int64_t t = 0; t < n; t++) {
        int owner;
        if (layout == 0) {
            owner = (int)(t * k / n);
        } else if (layout == 1) {
            int c = (int)(t * 2 * k / n);
            owner = c < k ? c : 2 * k - 1 - c;
        } else {
            owner = (int)(t % k);
        }
        if (owner == b) idx[m++] = t;
    }
    return m;
}

/* The whole sequence through the reference vs k query blocks x k key blocks
 * through the kernels, merged in (O, lse) and summed in dQ, dK, dV. */
START_TEST(split_blocks_equal_whole)
{
    const int kind = _i / 4, k = _i % 4 + 1, layout = _i % 3;
    const int64_t n = 157 + 40 * (_i % 2);
    const int hq = 4, hkv = 2, d = (_i % 2) ? 64 : 24;
    uint64_t r = test_rng((uint64_t)_i + 5000);
    mask_case ms;
    /* the whole sequence: positions 0..n-1 */
    problem w = make_problem(&r, n, n, hq, hkv, d, 0, kind, &ms);
    const size_t rq = (size_t)hq * d, rk = (size_t)hkv * d;
    double *Qd = test_to_d(w.Q, qsize(&w.g)), *Kd = test_to_d(w.K, ksize(&w.g)),
           *Vd = test_to_d(w.V, ksize(&w.g)), *dOd = test_to_d(w.dO, qsize(&w.g));
    double *Or = test_alloc(qsize(&w.g), sizeof *Or), *lr = test_alloc((size_t)n * hq, sizeof *lr);
    double *rQ = test_alloc(qsize(&w.g), sizeof *rQ), *rK = test_alloc(ksize(&w.g), sizeof *rK),
           *rV = test_alloc(ksize(&w.g), sizeof *rV);
    ref_attn_fwd(&w.g, Qd, Kd, Vd, Or, lr);
    ref_attn_bwd(&w.g, Qd, Kd, Vd, dOd, rQ, rK, rV);

    /* per-block gathered copies */
    int64_t *idx[4], cnt[4];
    float *Qb[4], *Kb[4], *Vb[4], *dOb[4], *Ob[4], *lb[4], *db[4], *dQb[4], *dKb[4], *dVb[4];
    int64_t *pos[4];
    int32_t *seg[4];
    for (int b = 0; b < k; b++) {
        idx[b] = test_alloc((size_t)n, sizeof *idx[b]);
        cnt[b] = split_block(n, k, layout, b, idx[b]);
        int64_t m = cnt[b];
        pos[b] = test_alloc((size_t)m, sizeof *pos[b]);
        seg[b] = test_alloc((size_t)m, sizeof *seg[b]);
        Qb[b] = test_alloc((size_t)m * rq, sizeof(float));
        dOb[b] = test_alloc((size_t)m * rq, sizeof(float));
        Ob[b] = test_alloc((size_t)m * rq, sizeof(float));
        dQb[b] = test_alloc((size_t)m * rq, sizeof(float));
        Kb[b] = test_alloc((size_t)m * rk, sizeof(float));
        Vb[b] = test_alloc((size_t)m * rk, sizeof(float));
        dKb[b] = test_alloc((size_t)m * rk, sizeof(float));
        dVb[b] = test_alloc((size_t)m * rk, sizeof(float));
        lb[b] = test_alloc((size_t)m * hq, sizeof(float));
        db[b] = test_alloc((size_t)m * hq, sizeof(float));
        for (int64_t i = 0; i < m; i++) {
            int64_t t = idx[b][i];
            pos[b][i] = w.q_pos[t];
            seg[b][i] = w.q_seg[t];
            memcpy(Qb[b] + i * rq, w.Q + t * rq, rq * sizeof(float));
            memcpy(dOb[b] + i * rq, w.dO + t * rq, rq * sizeof(float));
            memcpy(Kb[b] + i * rk, w.K + t * rk, rk * sizeof(float));
            memcpy(Vb[b] + i * rk, w.V + t * rk, rk * sizeof(float));
        }
    }
    bk_queue q = bk_host_queue();
    q.n_threads = 1 + _i % 3;
    for (int b = 0; b < k; b++) { /* query block b meets every key block: a ring */
        ck_assert_int_eq(bk_attn_fwd_init(&q, cnt[b], hq, d, Ob[b], lb[b]), BK_OK);
        for (int s = 0; s < k; s++) {
            int c = (b + k - s) % k;
            bk_attn_geom g = {cnt[b], cnt[c], hq,     hkv,    d,      w.g.scale,
                              pos[b], pos[c], seg[b], seg[c], ms.mask};
            ck_assert_int_eq(bk_attn_fwd(&q, &g, Qb[b], Kb[c], Vb[c], Ob[b], lb[b], NULL), BK_OK);
        }
        ck_assert_int_eq(bk_attn_fwd_finalize(&q, cnt[b], hq, d, Ob[b], lb[b]), BK_OK);
        ck_assert_int_eq(bk_attn_delta(&q, cnt[b], hq, d, dOb[b], Ob[b], db[b]), BK_OK);
    }
    for (int b = 0; b < k; b++)
        for (int c = 0; c < k; c++) {
            bk_attn_geom g = {cnt[b], cnt[c], hq,     hkv,    d,      w.g.scale,
                              pos[b], pos[c], seg[b], seg[c], ms.mask};
            ck_assert_int_eq(bk_attn_bwd(&q, &g, Qb[b], Kb[c], Vb[c], dOb[b], lb[b], db[b], dQb[b],
                                         dKb[c], dVb[c], NULL),
                             BK_OK);
        }
    /* scatter back to sequence order and compare with the whole */
    float *O = test_alloc(qsize(&w.g), sizeof *O), *lse = test_alloc((size_t)n * hq, sizeof *lse);
    float *dQ = test_alloc(qsize(&w.g), sizeof *dQ), *dK = test_alloc(ksize(&w.g), sizeof *dK),
          *dV = test_alloc(ksize(&w.g), sizeof *dV);
    for (int b = 0; b < k; b++)
        for (int64_t i = 0; i < cnt[b]; i++) {
            int64_t t = idx[b][i];
            memcpy(O + t * rq, Ob[b] + i * rq, rq * sizeof(float));
            memcpy(dQ + t * rq, dQb[b] + i * rq, rq * sizeof(float));
            memcpy(dK + t * rk, dKb[b] + i * rk, rk * sizeof(float));
            memcpy(dV + t * rk, dVb[b] + i * rk, rk * sizeof(float));
            memcpy(lse + t * hq, lb[b] + i * hq, (size_t)hq * sizeof(float));
        }
    double eo = err_ratio(O, Or, qsize(&w.g), 2e-5, 2e-4);
    double el = err_ratio(lse, lr, (size_t)n * hq, 2e-5, 2e-5);
    double eq = err_ratio(dQ, rQ, qsize(&w.g), 1e-4, 1e-3);
    double ek = err_ratio(dK, rK, ksize(&w.g), 1e-4, 1e-3);
    double ev = err_ratio(dV, rV, ksize(&w.g), 1e-4, 1e-3);
    ck_assert_msg(eo <= 1 && el <= 1 && eq <= 1 && ek <= 1 && ev <= 1,
                  "mask %s, %d blocks, layout %d, d %d: O %g lse %g dQ %g dK %g dV %g",
                  mask_kind_name(kind), k, layout, d, eo, el, eq, ek, ev);
    for (int b = 0; b < k; b++) {
        free(idx[b]), free(pos[b]), free(seg[b]), free(Qb[b]), free(dOb[b]), free(Ob[b]);
        free(dQb[b]), free(Kb[b]), free(Vb[b]), free(dKb[b]), free(dVb[b]), free(lb[b]);
        free(db[b]);
    }
    free(O), free(lse), free(dQ), free(dK), free(dV);
    free(Qd), free(Kd), free(Vd), free(dOd), free(Or), free(lr), free(rQ), free(rK), free(rV);
    free_problem(&w, &ms);
}
END_TEST

/* Rows with no allowed key end with O = 0 and lse = -inf, and add nothing to
 * the gradients; key tiles the mask empties are not even read (they hold NaN). */
START_TEST(fully_masked_rows_and_blocks)
{
    uint64_t r = test_rng(42);
    const int64_t n_q = 70, n_kv = 130;
    const int hq = 4, hkv = 2, d = 64;
    mask_case ms;
    problem p = make_problem(&r, n_q, n_kv, hq, hkv, d, 0, MASK_CAUSAL, &ms);
    /* every key after every query: the whole block is masked */
    for (int64_t i = 0; i < n_q; i++) p.q_pos[i] = i;
    for (int64_t j = 0; j < n_kv; j++) p.kv_pos[j] = 1000 + j;
    for (size_t i = 0; i < ksize(&p.g); i++) p.K[i] = p.V[i] = NAN;
    float *O = test_alloc(qsize(&p.g), sizeof *O), *lse = test_alloc((size_t)n_q * hq, sizeof *lse);
    float *delta = test_alloc((size_t)n_q * hq, sizeof *delta);
    float *dQ = test_alloc(qsize(&p.g), sizeof *dQ), *dK = test_alloc(ksize(&p.g), sizeof *dK),
          *dV = test_alloc(ksize(&p.g), sizeof *dV);
    bk_queue q = bk_host_queue();
    bk_attn_stats st;
    kernel_fwd(&q, &p.g, p.Q, p.K, p.V, O, lse, &st);
    for (size_t i = 0; i < qsize(&p.g); i++) ck_assert(O[i] == 0.0f);
    for (int64_t i = 0; i < n_q * hq; i++) ck_assert(lse[i] == -INFINITY);
    ck_assert_int_eq(st.tiles_skipped, st.tiles_total);
    ck_assert_int_eq(bk_attn_delta(&q, n_q, hq, d, p.dO, O, delta), BK_OK);
    ck_assert_int_eq(bk_attn_bwd(&q, &p.g, p.Q, p.K, p.V, p.dO, lse, delta, dQ, dK, dV, &st),
                     BK_OK);
    ck_assert_int_eq(st.tiles_skipped, st.tiles_total);
    for (size_t i = 0; i < qsize(&p.g); i++) ck_assert(dQ[i] == 0.0f);
    for (size_t i = 0; i < ksize(&p.g); i++) ck_assert(dK[i] == 0.0f && dV[i] == 0.0f);

    /* documents: query rows whose document has no key in the block, mixed in
     * partially masked tiles with rows that do have keys */
    for (int64_t j = 0; j < n_kv; j++) p.kv_pos[j] = j, p.kv_seg[j] = (int32_t)(j / 20) * 2;
    for (int64_t i = 0; i < n_q; i++) p.q_pos[i] = 60 + i, p.q_seg[i] = (int32_t)(i % 3);
    p.g.mask = bk_attn_mask_document(1);
    free(p.K), free(p.V);
    p.K = test_rand_f(&r, ksize(&p.g), -2, 2);
    p.V = test_rand_f(&r, ksize(&p.g), -1, 1);
    kernel_fwd(&q, &p.g, p.Q, p.K, p.V, O, lse, &st);
    double *Qd = test_to_d(p.Q, qsize(&p.g)), *Kd = test_to_d(p.K, ksize(&p.g)),
           *Vd = test_to_d(p.V, ksize(&p.g));
    double *Or = test_alloc(qsize(&p.g), sizeof *Or),
           *lr = test_alloc((size_t)n_q * hq, sizeof *lr);
    ref_attn_fwd(&p.g, Qd, Kd, Vd, Or, lr);
    int64_t empty_rows = 0;
    for (int64_t i = 0; i < n_q * hq; i++) empty_rows += lr[i] == -INFINITY;
    ck_assert(empty_rows > 0 && empty_rows < n_q * hq);
    ck_assert(err_ratio(O, Or, qsize(&p.g), 2e-5, 2e-4) <= 1);
    ck_assert(err_ratio(lse, lr, (size_t)n_q * hq, 2e-5, 2e-5) <= 1);
    free(Qd), free(Kd), free(Vd), free(Or), free(lr);
    free(O), free(lse), free(delta), free(dQ), free(dK), free(dV);
    free_problem(&p, &ms);
}
END_TEST

/* Tiles counted as computed are exactly those holding at least one allowed
 * pair, for masks whose tile classification is exact on contiguous positions;
 * for the others (documents, conjunctions) never fewer. */
START_TEST(empty_tiles_are_skipped)
{
    const int kind = _i;
    uint64_t r = test_rng((uint64_t)kind + 900);
    const int64_t n = 300;
    mask_case ms;
    problem p = make_problem(&r, n, n, 2, 1, 8, 0, kind, &ms);
    if (kind == MASK_WINDOW_CAUSAL) p.g.mask.window_left = 70; /* spans tiles but not all */
    bk_queue q = bk_host_queue();
    float *O = test_alloc(qsize(&p.g), sizeof *O), *lse = test_alloc((size_t)n * 2, sizeof *lse);
    bk_attn_stats st;
    kernel_fwd(&q, &p.g, p.Q, p.K, p.V, O, lse, &st);
    const int64_t tq = st.tile_q, tk = st.tile_kv;
    const int64_t nqt = (n + tq - 1) / tq, nkt = (n + tk - 1) / tk;
    int64_t needed = 0;
    for (int64_t a = 0; a < nqt; a++)
        for (int64_t b = 0; b < nkt; b++) {
            int any = 0;
            for (int64_t i = a * tq; i < n && i < (a + 1) * tq && !any; i++)
                for (int64_t j = b * tk; j < n && j < (b + 1) * tk && !any; j++)
                    any = ref_attn_allowed(&p.g, i, j);
            needed += any;
        }
    needed *= p.g.h_q;
    ck_assert_int_eq(st.tiles_total, p.g.h_q * nqt * nkt);
    int64_t computed = st.tiles_masked + st.tiles_full;
    if (kind == MASK_DOC || kind == MASK_DOC_CAUSAL || kind == MASK_SPARSE_CAUSAL)
        ck_assert_int_ge(computed, needed); /* conjunctions are classified conservatively */
    else
        ck_assert_msg(computed == needed, "mask %s: %ld tiles computed, %ld needed",
                      mask_kind_name(kind), (long)computed, (long)needed);
    if (kind == MASK_CAUSAL) ck_assert_int_eq(st.tiles_masked, p.g.h_q * nqt); /* the diagonal */
    if (kind == MASK_NONE) ck_assert_int_eq(st.tiles_full, st.tiles_total);
    /* the backward skips the same tiles */
    bk_attn_stats sb;
    float *delta = test_alloc((size_t)n * 2, sizeof *delta);
    float *dQ = test_alloc(qsize(&p.g), sizeof *dQ), *dK = test_alloc(ksize(&p.g), sizeof *dK),
          *dV = test_alloc(ksize(&p.g), sizeof *dV);
    ck_assert_int_eq(bk_attn_bwd(&q, &p.g, p.Q, p.K, p.V, p.dO, lse, delta, dQ, dK, dV, &sb),
                     BK_OK);
    ck_assert_int_eq(sb.tiles_skipped, st.tiles_skipped);
    ck_assert_int_eq(sb.tiles_masked, st.tiles_masked);
    free(O), free(lse), free(delta), free(dQ), free(dK), free(dV);
    free_problem(&p, &ms);
}
END_TEST

/* loss = sum(O * W) with W = dO; central differences. */
static double ref_loss(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                       const double *W)
{
    double *O = test_alloc(qsize(g), sizeof *O),
           *lse = test_alloc((size_t)g->n_q * g->h_q, sizeof *lse);
    ref_attn_fwd(g, Q, K, V, O, lse);
    double s = 0;
    for (size_t i = 0; i < qsize(g); i++) s += O[i] * W[i];
    free(O), free(lse);
    return s;
}

/* Small problem for finite differences: 2 query heads sharing 1 key head, a
 * causal window so that some scores are masked and one query row is empty. */
static problem fd_problem(uint64_t *r, mask_case *ms)
{
    problem p = make_problem(r, 4, 5, 2, 1, 8, 0, MASK_WINDOW_CAUSAL, ms);
    p.g.mask = bk_attn_mask_window(2, 0);
    int64_t qp[4] = {1, 3, 4, -5}, kp[5] = {0, 1, 2, 3, 4};
    memcpy(p.q_pos, qp, sizeof qp);
    memcpy(p.kv_pos, kp, sizeof kp);
    return p;
}

START_TEST(reference_gradient_matches_finite_differences)
{
    uint64_t r = test_rng(31);
    mask_case ms;
    problem p = fd_problem(&r, &ms);
    const bk_attn_geom *g = &p.g;
    double *X[3] = {test_to_d(p.Q, qsize(g)), test_to_d(p.K, ksize(g)), test_to_d(p.V, ksize(g))};
    double *W = test_to_d(p.dO, qsize(g));
    double *G[3] = {test_alloc(qsize(g), sizeof(double)), test_alloc(ksize(g), sizeof(double)),
                    test_alloc(ksize(g), sizeof(double))};
    ref_attn_bwd(g, X[0], X[1], X[2], W, G[0], G[1], G[2]);
    size_t sizes[3] = {qsize(g), ksize(g), ksize(g)};
    const double h = 1e-5;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < sizes[t]; i++) {
            double x0 = X[t][i];
            X[t][i] = x0 + h;
            double lp = ref_loss(g, X[0], X[1], X[2], W);
            X[t][i] = x0 - h;
            double lm = ref_loss(g, X[0], X[1], X[2], W);
            X[t][i] = x0;
            double fd = (lp - lm) / (2 * h);
            ck_assert_msg(fabs(fd - G[t][i]) < 1e-7 + 1e-6 * fabs(fd),
                          "tensor %d element %zu: analytic %.10g, finite difference %.10g", t, i,
                          G[t][i], fd);
        }
    for (int t = 0; t < 3; t++) free(X[t]), free(G[t]);
    free(W);
    free_problem(&p, &ms);
}
END_TEST

START_TEST(kernel_gradient_matches_finite_differences)
{
    uint64_t r = test_rng(32);
    mask_case ms;
    problem p = fd_problem(&r, &ms);
    const bk_attn_geom *g = &p.g;
    bk_queue q = bk_host_queue();
    size_t nr = (size_t)g->n_q * g->h_q;
    float *O = test_alloc(qsize(g), sizeof *O), *lse = test_alloc(nr, sizeof *lse),
          *delta = test_alloc(nr, sizeof *delta);
    float *G[3] = {test_alloc(qsize(g), sizeof(float)), test_alloc(ksize(g), sizeof(float)),
                   test_alloc(ksize(g), sizeof(float))};
    kernel_fwd(&q, g, p.Q, p.K, p.V, O, lse, NULL);
    ck_assert_int_eq(bk_attn_delta(&q, g->n_q, g->h_q, g->d, p.dO, O, delta), BK_OK);
    ck_assert_int_eq(bk_attn_bwd(&q, g, p.Q, p.K, p.V, p.dO, lse, delta, G[0], G[1], G[2], NULL),
                     BK_OK);
    float *X[3] = {p.Q, p.K, p.V};
    size_t sizes[3] = {qsize(g), ksize(g), ksize(g)};
    const float h = 1e-2f;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < sizes[t]; i++) {
            float x0 = X[t][i];
            double l[2];
            for (int s = 0; s < 2; s++) {
                X[t][i] = x0 + (s ? -h : h);
                kernel_fwd(&q, g, p.Q, p.K, p.V, O, lse, NULL);
                l[s] = 0;
                for (size_t k = 0; k < qsize(g); k++) l[s] += (double)O[k] * p.dO[k];
            }
            X[t][i] = x0;
            double fd = (l[0] - l[1]) / (2.0 * h);
            ck_assert_msg(fabs(fd - G[t][i]) < 2e-3 + 2e-2 * fabs(fd),
                          "tensor %d element %zu: kernel gradient %.7g, finite difference %.7g", t,
                          i, G[t][i], fd);
        }
    for (int t = 0; t < 3; t++) free(G[t]);
    free(O), free(lse), free(delta);
    free_problem(&p, &ms);
}
END_TEST

/* Each case is one invalid call; every kernel must refuse it with BK_ERR_ARG
 * (and abort in --enable-debug builds) without touching the buffers. */
enum { N_INVALID = 14 };
START_TEST(invalid_arguments_are_refused)
{
    float buf[4096];
    uint64_t bits[1] = {1};
    int64_t pos[64];
    int32_t seg[64];
    for (int i = 0; i < 64; i++) pos[i] = i, seg[i] = 0;
    for (int i = 0; i < 4096; i++) buf[i] = 0.0f;
    bk_queue q = bk_host_queue();
    bk_attn_geom g = {4, 4, 2, 1, 8, 0.35f, pos, pos, seg, seg, bk_attn_mask_causal()};
    const float *Q = buf, *K = buf + 512, *V = buf + 1024, *dO = buf + 1536;
    float *O = buf + 2048, *lse = buf + 2560, *delta = buf + 2600;
    float *dQ = buf + 2700, *dK = buf + 3200, *dV = buf + 3700;
    bk_status st = BK_OK;
    switch (_i) {
    case 0:
        st = bk_attn_fwd(&q, &g, NULL, K, V, O, lse, NULL);
        break;
    case 1:
        g.n_q = -1;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 2:
        g.n_kv = -3;
        st = bk_attn_bwd(&q, &g, Q, K, V, dO, lse, delta, dQ, dK, dV, NULL);
        break;
    case 3:
        g.h_q = 3, g.h_kv = 2;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 4:
        g.d = 12;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 5:
        g.d = 0;
        st = bk_attn_bwd(&q, &g, Q, K, V, dO, lse, delta, dQ, dK, dV, NULL);
        break;
    case 6:
        st = bk_attn_bwd(&q, &g, Q, K, V, dO, lse, NULL, dQ, dK, dV, NULL);
        break;
    case 7:
        st = bk_attn_bwd(&q, &g, Q, K, V, dO, lse, delta, dQ, NULL, dV, NULL);
        break;
    case 8:
        g.q_pos = NULL;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 9:
        g.mask = bk_attn_mask_document(1), g.kv_seg = NULL;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 10:
        g.mask = bk_attn_mask_block_sparse(bits, 0, 1);
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    case 11:
        st = bk_attn_fwd_init(&q, -2, 2, 8, O, lse);
        break;
    case 12:
        st = bk_attn_delta(&q, 4, 2, 8, dO, NULL, delta);
        break;
    case 13:
        g.scale = -1.0f;
        st = bk_attn_fwd(&q, &g, Q, K, V, O, lse, NULL);
        break;
    default:
        break;
    }
    ck_assert_int_eq(st, BK_ERR_ARG);
    for (int i = 0; i < 4096; i++) ck_assert(buf[i] == 0.0f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = check_tcase(s, "attention", 120);
    tcase_add_test(tc, mask_predicate_matches_reference);
    check_add_loop_tests(tc, 0, 4 * MASK_KINDS, forward_matches_reference,
                         backward_matches_reference, split_blocks_equal_whole);
    tcase_add_test(tc, fully_masked_rows_and_blocks);
    tcase_add_loop_test(tc, empty_tiles_are_skipped, 0, MASK_KINDS);
    check_add_tests(tc, reference_gradient_matches_finite_differences,
                    kernel_gradient_matches_finite_differences);
#ifdef BURST_DEBUG
    tcase_add_loop_test_raise_signal(tc, invalid_arguments_are_refused, SIGABRT, 0, N_INVALID);
#else
    tcase_add_loop_test(tc, invalid_arguments_are_refused, 0, N_INVALID);
#endif
    return check_run(s);
}
