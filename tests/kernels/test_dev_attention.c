/* test_dev_attention.c: the attention tile kernels of kernels/cuda/
 * (attention_fwd.cu, attention_bwd.cu) on a device queue, against the
 * double-precision reference kernels/ref/attention_ref.c: ragged n (not
 * multiples of the 64-row tiles), head dims 64 and 128 (and 40, 96: padded),
 * query heads per key/value head 1, 2 and 4, every mask kind over contiguous,
 * random and zigzag global positions, fp32 and bf16 inputs; a sequence split
 * into blocks merged through the running (O, lse); fully masked rows and
 * tiles (NaN in K and V that must not be read); tile counts equal to the CPU
 * kernels'. Built with the emulator (every build) and for a GPU (CUDA builds).
 *
 * Inputs are random values rounded to bf16, so that fp32 and bf16 inputs
 * carry the same numbers and the reference sees exactly what the tensor cores
 * multiply. The kernels round two things to bf16 on the way, each by at most
 * 2^-8 relative (bf16 has 8 significant bits; round to nearest): P before
 * O += P V (forward) and dV += P^T dO (backward), and dS before dK += dS^T Q
 * and dQ += dS K. So each output element may be off by 2^-8 times M, the sum
 * of the absolute values of the terms it adds (M is computed here in double,
 * e.g. M(O[i, c]) = sum_j p_ij |V[j, c]|). The test allows 2^-7 M (twice
 * that: room for the fp32 accumulation, the exp2 approximation and the fp32
 * row sum that divides the bf16-rounded P) plus 1e-5 absolute (fp32 rounding
 * of values that receive nothing), and lse 2e-5 (1 + |lse|) (the scores are
 * exact bf16 products accumulated in fp32). The backward gets the reference
 * lse and delta, so that its error is its own. The worst ratio
 * error / tolerance is printed (observed: up to about 0.5, i.e. errors reach
 * the single-rounding bound 2^-8 M). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kernels/bf16.h"
#include "kernels/ref/attention_ref.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/close.h"
#include "tests/lib/mask_cases.h"
#include "tests/lib/rng.h"

/* The random stream of the running test (each test runs in its own process). */
static uint64_t rs;

#define PUT(x, n)    dev_put((x), (size_t)(n) * sizeof *(x))
#define GET(h, d, n) dev_get((h), (d), (size_t)(n) * sizeof *(h))

#ifdef BURST_SANITIZERS
enum { N_RANDOM = 8 }; /* the emulator is ~20x slower under ASan */
#else
enum { N_RANDOM = 24 };
#endif

/* ---------------------------------------------------------------- problems */

/* One (query block, key/value block) problem, host side. */
typedef struct {
    bk_attn_geom g; /* host pointers */
    mask_case mask_case;
    int64_t *qp, *kp;
    int32_t *qs, *ks;
    float *Q, *K, *V, *dO; /* bf16-exact values */
} prob;

static size_t qn(const bk_attn_geom *g)
{
    return (size_t)g->n_q * (size_t)g->h_q * (size_t)g->d;
}
static size_t kn(const bk_attn_geom *g)
{
    return (size_t)g->n_kv * (size_t)g->h_kv * (size_t)g->d;
}

static float *rand_bf16_exact(size_t n, double amp)
{
    float *x = test_alloc(n * sizeof(float), 1);
    for (size_t i = 0; i < n; i++)
        x[i] = bk_bf16_to_float(bk_float_to_bf16((float)(amp * (2 * bu_rng_unit(&rs) - 1))));
    return x;
}

static prob make_prob(int64_t n_q, int64_t n_kv, int hq, int hkv, int d, int layout, int kind)
{
    prob p;
    memset(&p, 0, sizeof p);
    p.qp = test_alloc((size_t)n_q * 8 + 8, 1), p.kp = test_alloc((size_t)n_kv * 8 + 8, 1);
    p.qs = test_alloc((size_t)n_q * 4 + 4, 1), p.ks = test_alloc((size_t)n_kv * 4 + 4, 1);
    int64_t span;
    mask_case_positions(&rs, layout, n_q, n_kv, p.qp, p.kp, &span);
    p.mask_case = mask_case_draw(&rs, kind, span);
    for (int64_t i = 0; i < n_q; i++) p.qs[i] = mask_case_segment(&p.mask_case, p.qp[i]);
    for (int64_t j = 0; j < n_kv; j++) p.ks[j] = mask_case_segment(&p.mask_case, p.kp[j]);
    bk_attn_geom g = {
        n_q, n_kv, hq, hkv, d, 1.0f / sqrtf((float)d), p.qp, p.kp, p.qs, p.ks, p.mask_case.mask};
    p.g = g;
    p.Q = rand_bf16_exact(qn(&g), 2.0), p.K = rand_bf16_exact(kn(&g), 2.0);
    p.V = rand_bf16_exact(kn(&g), 1.0), p.dO = rand_bf16_exact(qn(&g), 1.0);
    return p;
}

static void free_prob(prob *p)
{
    free(p->qp), free(p->kp), free(p->qs), free(p->ks), free(p->mask_case.bits);
    free(p->Q), free(p->K), free(p->V), free(p->dO);
}

/* ---------------------------------------------------------------- device side */

/* The problem's geometry with device copies of positions, segments, bitmap. */
typedef struct {
    bk_attn_geom g;
    void *Q, *K, *V, *dO; /* fp32 or bf16 */
} dev_prob;

static void *put_as(const float *x, size_t n, bk_dtype t)
{
    if (t == BK_F32) return dev_put(x, n * sizeof(float));
    uint16_t *h = test_alloc(n * 2 + 2, 1);
    for (size_t i = 0; i < n; i++) h[i] = bk_float_to_bf16(x[i]);
    void *d = dev_put(h, n * 2);
    free(h);
    return d;
}

static dev_prob dev_prob_of(const prob *p, bk_dtype t)
{
    dev_prob d;
    d.g = p->g;
    d.g.q_pos = PUT(p->qp, p->g.n_q), d.g.kv_pos = PUT(p->kp, p->g.n_kv);
    d.g.q_seg = PUT(p->qs, p->g.n_q), d.g.kv_seg = PUT(p->ks, p->g.n_kv);
    if (p->mask_case.bits) d.g.mask.block_bits = PUT(p->mask_case.bits, p->mask_case.n_words);
    d.Q = put_as(p->Q, qn(&p->g), t), d.K = put_as(p->K, kn(&p->g), t);
    d.V = put_as(p->V, kn(&p->g), t), d.dO = put_as(p->dO, qn(&p->g), t);
    return d;
}

static void dev_prob_free(dev_prob *d)
{
    dev_free((void *)d->g.q_pos), dev_free((void *)d->g.kv_pos);
    dev_free((void *)d->g.q_seg), dev_free((void *)d->g.kv_seg);
    if (d->g.mask.flags & BK_ATTN_BLOCK_SPARSE) dev_free((void *)d->g.mask.block_bits);
    dev_free(d->Q), dev_free(d->K), dev_free(d->V), dev_free(d->dO);
}

static bk_status dev_fwd(const bk_queue *q, const bk_attn_geom *g, const void *Q, const void *K,
                         const void *V, bk_dtype t, float *O, float *lse, bk_attn_stats *st)
{
    if (t == BK_F32) return bk_attn_fwd(q, g, Q, K, V, O, lse, st);
    return bk_attn_fwd_bf16(q, g, Q, K, V, O, lse, st);
}

static bk_status dev_bwd(const bk_queue *q, const bk_attn_geom *g, const dev_prob *d, bk_dtype t,
                         const float *lse, const float *delta, float *dQ, float *dK, float *dV,
                         bk_attn_stats *st)
{
    if (t == BK_F32) return bk_attn_bwd(q, g, d->Q, d->K, d->V, d->dO, lse, delta, dQ, dK, dV, st);
    return bk_attn_bwd_bf16(q, g, d->Q, d->K, d->V, d->dO, lse, delta, dQ, dK, dV, st);
}

/* ---------------------------------------------------------------- tolerances */

static double dotd(const double *a, const double *b, int d)
{
    double s = 0;
    for (int c = 0; c < d; c++) s += a[c] * b[c];
    return s;
}

/* M of every output element (see the top of the file), from the reference
 * lse [n_q, h_q] and delta [n_q, h_q]. */
static void magnitudes(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                       const double *dO, const double *lse, const double *delta, double *mO,
                       double *mdQ, double *mdK, double *mdV)
{
    const int d = g->d;
    memset(mO, 0, qn(g) * 8), memset(mdQ, 0, qn(g) * 8);
    memset(mdK, 0, kn(g) * 8), memset(mdV, 0, kn(g) * 8);
    for (int64_t i = 0; i < g->n_q; i++)
        for (int h = 0; h < g->h_q; h++) {
            int64_t r = i * g->h_q + h;
            if (lse[r] == -INFINITY) continue;
            int hk = h / (g->h_q / g->h_kv);
            const double *q = Q + r * d, *go = dO + r * d;
            for (int64_t j = 0; j < g->n_kv; j++) {
                if (!ref_attn_allowed(g, i, j)) continue;
                const double *k = K + (j * g->h_kv + hk) * d, *v = V + (j * g->h_kv + hk) * d;
                double p = exp(g->scale * dotd(q, k, d) - lse[r]);
                double ds = fabs(p * (dotd(go, v, d) - delta[r]) * g->scale);
                for (int c = 0; c < d; c++) {
                    mO[r * d + c] += p * fabs(v[c]);
                    mdQ[r * d + c] += ds * fabs(k[c]);
                    mdK[(j * g->h_kv + hk) * d + c] += ds * fabs(q[c]);
                    mdV[(j * g->h_kv + hk) * d + c] += p * fabs(go[c]);
                }
            }
        }
}

/* Worst |x - ref| / (1e-5 + 2^-7 m); infinite on NaN or a mismatched infinity. */
static double ratio(const float *x, const double *ref, const double *m, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(x[i])) {
            if ((double)x[i] != ref[i]) return INFINITY;
            continue;
        }
        if (!isfinite(x[i])) return INFINITY;
        double e = fabs(x[i] - ref[i]) / (1e-5 + m[i] / 128.0);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double lse_ratio(const float *x, const double *ref, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(x[i])) {
            if ((double)x[i] != ref[i]) return INFINITY;
            continue;
        }
        double e = fabs(x[i] - ref[i]) / (2e-5 * (1 + fabs(ref[i])));
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double *dup_d(const float *x, size_t n)
{
    double *y = test_alloc(n * 8 + 8, 1);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static double g_worst; /* the worst ratio seen by a test, printed at its end */

/* ---------------------------------------------------------------- one problem */

/* Forward and backward of p on the device with inputs of type t, checked
 * against the reference; returns nothing, asserts. */
static void check_prob(const prob *p, bk_dtype t, const char *what)
{
    const bk_attn_geom *g = &p->g;
    size_t nq = qn(g), nk = kn(g), nr = (size_t)g->n_q * g->h_q;
    double *Qd = dup_d(p->Q, nq), *Kd = dup_d(p->K, nk), *Vd = dup_d(p->V, nk);
    double *dOd = dup_d(p->dO, nq), *Or = test_alloc(nq * 8 + 8, 1), *lr = test_alloc(nr * 8 + 8, 1);
    double *dr = test_alloc(nr * 8 + 8, 1), *rQ = test_alloc(nq * 8 + 8, 1), *rK = test_alloc(nk * 8 + 8, 1);
    double *rV = test_alloc(nk * 8 + 8, 1), *mO = test_alloc(nq * 8 + 8, 1), *mQ = test_alloc(nq * 8 + 8, 1);
    double *mK = test_alloc(nk * 8 + 8, 1), *mV = test_alloc(nk * 8 + 8, 1);
    ref_attn_fwd(g, Qd, Kd, Vd, Or, lr);
    ref_attn_bwd(g, Qd, Kd, Vd, dOd, rQ, rK, rV);
    for (size_t r = 0; r < nr; r++) dr[r] = dotd(dOd + r * g->d, Or + r * g->d, g->d);
    magnitudes(g, Qd, Kd, Vd, dOd, lr, dr, mO, mQ, mK, mV);

    bk_queue q = dev_queue();
    dev_prob d = dev_prob_of(p, t);
    float *O = test_alloc(nq * 4 + 4, 1), *lse = test_alloc(nr * 4 + 4, 1);
    float *gO = PUT(O, nq), *gl = PUT(lse, nr);
    bk_attn_stats st;
    ck_assert_int_eq(bk_attn_fwd_init(&q, g->n_q, g->h_q, g->d, gO, gl), BK_OK);
    ck_assert_int_eq(dev_fwd(&q, &d.g, d.Q, d.K, d.V, t, gO, gl, &st), BK_OK);
    ck_assert_int_eq(bk_attn_fwd_finalize(&q, g->n_q, g->h_q, g->d, gO, gl), BK_OK);
    GET(O, gO, nq), GET(lse, gl, nr);
    ck_assert_int_eq(st.tiles_total, st.tiles_skipped + st.tiles_masked + st.tiles_full);

    /* backward from the reference lse and delta; gradients start non-zero (+=) */
    float *lf = test_alloc(nr * 4 + 4, 1), *df = test_alloc(nr * 4 + 4, 1);
    for (size_t r = 0; r < nr; r++) lf[r] = (float)lr[r], df[r] = (float)dr[r];
    float *dQ = test_alloc(nq * 4 + 4, 1), *dK = test_alloc(nk * 4 + 4, 1), *dV = test_alloc(nk * 4 + 4, 1);
    for (size_t i = 0; i < nq; i++) dQ[i] = 0.5f;
    for (size_t i = 0; i < nk; i++) dK[i] = dV[i] = -0.25f;
    float *glf = PUT(lf, nr), *gdf = PUT(df, nr), *gdQ = PUT(dQ, nq), *gdK = PUT(dK, nk);
    float *gdV = PUT(dV, nk);
    ck_assert_int_eq(dev_bwd(&q, &d.g, &d, t, glf, gdf, gdQ, gdK, gdV, &st), BK_OK);
    GET(dQ, gdQ, nq), GET(dK, gdK, nk), GET(dV, gdV, nk);
    for (size_t i = 0; i < nq; i++) rQ[i] += 0.5;
    for (size_t i = 0; i < nk; i++) rK[i] -= 0.25, rV[i] -= 0.25;

    double eo = ratio(O, Or, mO, nq), el = lse_ratio(lse, lr, nr);
    double eq = ratio(dQ, rQ, mQ, nq), ek = ratio(dK, rK, mK, nk), ev = ratio(dV, rV, mV, nk);
    ck_assert_msg(eo <= 1 && el <= 1 && eq <= 1 && ek <= 1 && ev <= 1,
                  "%s: mask %s n_q %ld n_kv %ld h %d/%d d %d %s: error/tolerance O %.3g lse %.3g "
                  "dQ %.3g dK %.3g dV %.3g",
                  what, mask_kind_name(p->mask_case.kind), (long)g->n_q, (long)g->n_kv, g->h_q,
                  g->h_kv, g->d, t == BK_BF16 ? "bf16" : "fp32", eo, el, eq, ek, ev);
    double w = eo > el ? eo : el;
    w = w > eq ? w : eq, w = w > ek ? w : ek, w = w > ev ? w : ev;
    g_worst = w > g_worst ? w : g_worst;

    dev_free(gO), dev_free(gl), dev_free(glf), dev_free(gdf), dev_free(gdQ), dev_free(gdK);
    dev_free(gdV);
    dev_prob_free(&d);
    free(Qd), free(Kd), free(Vd), free(dOd), free(Or), free(lr), free(dr), free(rQ), free(rK);
    free(rV), free(mO), free(mQ), free(mK), free(mV), free(O), free(lse), free(lf), free(df);
    free(dQ), free(dK), free(dV);
}

/* ---------------------------------------------------------------- tests */

START_TEST(matches_reference)
{
    /* head dims 64, 128 and two padded ones; query heads per kv head 1, 2, 4 */
    static const int dims[] = {64, 128, 64, 128, 40, 96};
    static const int heads[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 2}, {2, 2}, {8, 2}};
    static const int64_t nqs[] = {1, 17, 64, 65, 130}, nkvs[] = {1, 5, 63, 64, 97, 129};
    rs = test_rng(1000 + (uint64_t)_i);
    int kind = _i % MASK_KINDS, d = dims[bu_rng_next(&rs) % 6], hc = (int)(bu_rng_next(&rs) % 6);
    int64_t n_q = nqs[bu_rng_next(&rs) % 5], n_kv = nkvs[bu_rng_next(&rs) % 6];
    int layout = (int)(bu_rng_next(&rs) % 3);
    prob p = make_prob(n_q, n_kv, heads[hc][0], heads[hc][1], d, layout, kind);
    char what[32];
    snprintf(what, sizeof what, "case %d", _i);
    check_prob(&p, _i % 2 ? BK_BF16 : BK_F32, what);
    free_prob(&p);
    printf("case %d: worst error / tolerance %.3f\n", _i, g_worst);
}
END_TEST

/* Every mask with d = 64 and 128, group sizes 1, 2 and 4, ragged n: the
 * systematic sweep beside the random cases. */
START_TEST(every_mask_and_group)
{
    static const int groups[] = {1, 2, 4};
    int kind = _i % MASK_KINDS, grp = groups[_i % 3], d = _i % 2 ? 128 : 64;
    rs = test_rng(2000 + (uint64_t)_i);
    prob p = make_prob(77, 93, grp * 1, 1, d, (_i / 3) % 3, kind);
    check_prob(&p, (_i / 2) % 2 ? BK_BF16 : BK_F32, "sweep");
    free_prob(&p);
    printf("sweep %d (%s, group %d, d %d): worst error / tolerance %.3f\n", _i,
           mask_kind_name(kind), grp, d, g_worst);
}
END_TEST

/* One block of a split sequence on the device: its rows' positions,
 * segments, inputs, reference lse and delta, and its outputs. */
typedef struct {
    int64_t m, idx[160];
    int64_t *pos;
    int32_t *seg;
    void *Q, *K, *V, *dO;
    float *O, *lse, *lse_ref, *delta, *dQ, *dK, *dV;
} block;

static void block_make(block *b, const prob *w, bk_dtype t, const double *lr, const double *dr)
{
    const bk_attn_geom *G = &w->g;
    const size_t rq = (size_t)G->h_q * G->d, rk = (size_t)G->h_kv * G->d, m = (size_t)b->m;
    int64_t *pos = test_alloc(m * 8, 1);
    int32_t *seg = test_alloc(m * 4, 1);
    float *Q = test_alloc(m * rq * 4, 1), *K = test_alloc(m * rk * 4, 1), *V = test_alloc(m * rk * 4, 1);
    float *dO = test_alloc(m * rq * 4, 1), *l = test_alloc(m * G->h_q * 4, 1), *dl = test_alloc(m * G->h_q * 4, 1);
    for (size_t i = 0; i < m; i++) {
        int64_t r = b->idx[i];
        pos[i] = w->qp[r], seg[i] = w->qs[r];
        memcpy(Q + i * rq, w->Q + r * rq, rq * 4), memcpy(dO + i * rq, w->dO + r * rq, rq * 4);
        memcpy(K + i * rk, w->K + r * rk, rk * 4), memcpy(V + i * rk, w->V + r * rk, rk * 4);
        for (int h = 0; h < G->h_q; h++)
            l[i * G->h_q + h] = (float)lr[r * G->h_q + h],
                           dl[i * G->h_q + h] = (float)dr[r * G->h_q + h];
    }
    b->pos = PUT(pos, m), b->seg = PUT(seg, m);
    b->Q = put_as(Q, m * rq, t), b->K = put_as(K, m * rk, t), b->V = put_as(V, m * rk, t);
    b->dO = put_as(dO, m * rq, t);
    b->lse_ref = PUT(l, m * G->h_q), b->delta = PUT(dl, m * G->h_q);
    memset(Q, 0, m * rq * 4), memset(K, 0, m * rk * 4);
    b->O = PUT(Q, m * rq), b->dQ = PUT(Q, m * rq), b->dK = PUT(K, m * rk), b->dV = PUT(K, m * rk);
    b->lse = PUT(l, m * G->h_q);
    free(pos), free(seg), free(Q), free(K), free(V), free(dO), free(l), free(dl);
}

static void block_free(block *b)
{
    dev_free(b->pos), dev_free(b->seg), dev_free(b->Q), dev_free(b->K), dev_free(b->V);
    dev_free(b->dO), dev_free(b->O), dev_free(b->lse), dev_free(b->lse_ref), dev_free(b->delta);
    dev_free(b->dQ), dev_free(b->dK), dev_free(b->dV);
}

/* Rows of block b's device buffer x [m, width] back to their places in all [n, width]. */
static void scatter(float *all, const float *x_dev, const block *b, size_t width)
{
    float *h = test_alloc((size_t)b->m * width * 4, 1);
    GET(h, x_dev, (size_t)b->m * width);
    for (int64_t i = 0; i < b->m; i++) memcpy(all + b->idx[i] * width, h + i * width, width * 4);
    free(h);
}

/* A sequence split into 2 zigzag blocks: each query block merges both key
 * blocks into its running (O, lse), in ring order (the second call merges
 * into a finite lse); the gradients sum over the 4 block pairs. The result
 * must equal the whole sequence's reference. */
START_TEST(split_blocks_equal_whole)
{
    const int kind = _i, hq = 4, hkv = 2, d = 64;
    const int64_t n = 150;
    const bk_dtype t = _i % 2 ? BK_BF16 : BK_F32;
    rs = test_rng(3000 + (uint64_t)_i);
    prob w = make_prob(n, n, hq, hkv, d, 0, kind);
    const bk_attn_geom *G = &w.g;
    size_t nq = qn(G), nk = kn(G), nr = (size_t)n * hq;
    double *Qd = dup_d(w.Q, nq), *Kd = dup_d(w.K, nk), *Vd = dup_d(w.V, nk), *dOd = dup_d(w.dO, nq);
    double *Or = test_alloc(nq * 8, 1), *lr = test_alloc(nr * 8, 1), *dr = test_alloc(nr * 8, 1);
    double *rQ = test_alloc(nq * 8, 1), *rK = test_alloc(nk * 8, 1), *rV = test_alloc(nk * 8, 1);
    double *mO = test_alloc(nq * 8, 1), *mQ = test_alloc(nq * 8, 1), *mK = test_alloc(nk * 8, 1),
           *mV = test_alloc(nk * 8, 1);
    ref_attn_fwd(G, Qd, Kd, Vd, Or, lr);
    ref_attn_bwd(G, Qd, Kd, Vd, dOd, rQ, rK, rV);
    for (size_t r = 0; r < nr; r++) dr[r] = dotd(dOd + r * d, Or + r * d, d);
    magnitudes(G, Qd, Kd, Vd, dOd, lr, dr, mO, mQ, mK, mV);

    block blk[2];
    blk[0].m = blk[1].m = 0;
    for (int64_t r = 0; r < n; r++) { /* block b holds chunks b and 3 - b of 4 */
        int c = (int)(r * 4 / n), b = c < 2 ? c : 3 - c;
        blk[b].idx[blk[b].m++] = r;
    }
    for (int b = 0; b < 2; b++) block_make(&blk[b], &w, t, lr, dr);
    uint64_t *bits = w.mask_case.bits ? PUT(w.mask_case.bits, w.mask_case.n_words) : NULL;
    bk_queue q = dev_queue();
    for (int b = 0; b < 2; b++) {
        ck_assert_int_eq(bk_attn_fwd_init(&q, blk[b].m, hq, d, blk[b].O, blk[b].lse), BK_OK);
        for (int s2 = 0; s2 < 2; s2++) {
            const block *c = &blk[(b + s2) % 2];
            bk_attn_geom g = {blk[b].m,   c->m,   hq,         hkv,    d,      G->scale,
                              blk[b].pos, c->pos, blk[b].seg, c->seg, G->mask};
            g.mask.block_bits = bits;
            ck_assert_int_eq(dev_fwd(&q, &g, blk[b].Q, c->K, c->V, t, blk[b].O, blk[b].lse, NULL),
                             BK_OK);
        }
        ck_assert_int_eq(bk_attn_fwd_finalize(&q, blk[b].m, hq, d, blk[b].O, blk[b].lse), BK_OK);
    }
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < 2; c++) {
            bk_attn_geom g = {blk[b].m,   blk[c].m,   hq,         hkv,        d,      G->scale,
                              blk[b].pos, blk[c].pos, blk[b].seg, blk[c].seg, G->mask};
            g.mask.block_bits = bits;
            dev_prob dp = {g, blk[b].Q, blk[c].K, blk[c].V, blk[b].dO};
            ck_assert_int_eq(dev_bwd(&q, &g, &dp, t, blk[b].lse_ref, blk[b].delta, blk[b].dQ,
                                     blk[c].dK, blk[c].dV, NULL),
                             BK_OK);
        }
    float *O = test_alloc(nq * 4, 1), *lse = test_alloc(nr * 4, 1);
    float *dQ = test_alloc(nq * 4, 1), *dK = test_alloc(nk * 4, 1), *dV = test_alloc(nk * 4, 1);
    for (int b = 0; b < 2; b++) {
        scatter(O, blk[b].O, &blk[b], (size_t)hq * d), scatter(lse, blk[b].lse, &blk[b], hq);
        scatter(dQ, blk[b].dQ, &blk[b], (size_t)hq * d);
        scatter(dK, blk[b].dK, &blk[b], (size_t)hkv * d),
            scatter(dV, blk[b].dV, &blk[b], (size_t)hkv * d);
    }
    double eo = ratio(O, Or, mO, nq), el = lse_ratio(lse, lr, nr);
    double eq = ratio(dQ, rQ, mQ, nq), ek = ratio(dK, rK, mK, nk), ev = ratio(dV, rV, mV, nk);
    ck_assert_msg(eo <= 1 && el <= 1 && eq <= 1 && ek <= 1 && ev <= 1,
                  "split, mask %s %s: error/tolerance O %.3g lse %.3g dQ %.3g dK %.3g dV %.3g",
                  mask_kind_name(kind), t == BK_BF16 ? "bf16" : "fp32", eo, el, eq, ek, ev);
    printf("split %d (%s): error / tolerance O %.3f lse %.3f dQ %.3f dK %.3f dV %.3f\n", _i,
           mask_kind_name(kind), eo, el, eq, ek, ev);
    for (int b = 0; b < 2; b++) block_free(&blk[b]);
    if (bits) dev_free(bits);
    free(Qd), free(Kd), free(Vd), free(dOd), free(Or), free(lr), free(dr), free(rQ), free(rK);
    free(rV), free(mO), free(mQ), free(mK), free(mV), free(O), free(lse), free(dQ), free(dK);
    free(dV);
    free_prob(&w);
}
END_TEST

/* A block where every key follows every query: O = 0, lse = -inf, gradients
 * untouched, every tile skipped, and K, V (all NaN) never read. Then document
 * rows with no key in the block mixed with rows that have some. */
START_TEST(fully_masked_rows_and_tiles)
{
    const int64_t n_q = 70, n_kv = 130;
    const int hq = 4, hkv = 2, d = 64;
    rs = test_rng(42);
    prob p = make_prob(n_q, n_kv, hq, hkv, d, 0, MASK_CAUSAL);
    for (int64_t i = 0; i < n_q; i++) p.qp[i] = i;
    for (int64_t j = 0; j < n_kv; j++) p.kp[j] = 1000 + j;
    for (size_t i = 0; i < kn(&p.g); i++) p.K[i] = p.V[i] = NAN;
    for (int tt = 0; tt < 2; tt++) {
        bk_dtype t = tt ? BK_BF16 : BK_F32;
        dev_prob d2 = dev_prob_of(&p, t);
        size_t nq = qn(&p.g), nk = kn(&p.g), nr = (size_t)n_q * hq;
        bk_queue q = dev_queue();
        float *O = test_alloc(nq * 4, 1), *lse = test_alloc(nr * 4, 1), *z = calloc(nq + nk, 4);
        float *gO = PUT(O, nq), *gl = PUT(lse, nr), *gdQ = PUT(z, nq), *gdK = PUT(z, nk);
        float *gdV = PUT(z, nk), *gd = PUT(z, nr);
        bk_attn_stats st;
        ck_assert_int_eq(bk_attn_fwd_init(&q, n_q, hq, d, gO, gl), BK_OK);
        ck_assert_int_eq(dev_fwd(&q, &d2.g, d2.Q, d2.K, d2.V, t, gO, gl, &st), BK_OK);
        ck_assert_int_eq(st.tiles_skipped, st.tiles_total);
        ck_assert_int_eq(bk_attn_fwd_finalize(&q, n_q, hq, d, gO, gl), BK_OK);
        GET(O, gO, nq), GET(lse, gl, nr);
        for (size_t i = 0; i < nq; i++) ck_assert(O[i] == 0.0f);
        for (size_t i = 0; i < nr; i++) ck_assert(lse[i] == -INFINITY);
        ck_assert_int_eq(dev_bwd(&q, &d2.g, &d2, t, gl, gd, gdQ, gdK, gdV, &st), BK_OK);
        ck_assert_int_eq(st.tiles_skipped, st.tiles_total);
        float *back = test_alloc((nq + nk) * 4, 1);
        GET(back, gdQ, nq), GET(back + nq, gdK, nk);
        for (size_t i = 0; i < nq + nk; i++) ck_assert(back[i] == 0.0f);
        GET(back, gdV, nk);
        for (size_t i = 0; i < nk; i++) ck_assert(back[i] == 0.0f);
        dev_free(gO), dev_free(gl), dev_free(gdQ), dev_free(gdK), dev_free(gdV), dev_free(gd);
        dev_prob_free(&d2);
        free(O), free(lse), free(z), free(back);
    }
    /* documents: rows whose document has no key here, beside rows that have */
    for (int64_t j = 0; j < n_kv; j++) p.kp[j] = j, p.ks[j] = (int32_t)(j / 20) * 2;
    for (int64_t i = 0; i < n_q; i++) p.qp[i] = 60 + i, p.qs[i] = (int32_t)(i % 3);
    p.g.mask = bk_attn_mask_document(1);
    p.mask_case.kind = MASK_DOC_CAUSAL;
    free(p.K), free(p.V);
    p.K = rand_bf16_exact(kn(&p.g), 2.0), p.V = rand_bf16_exact(kn(&p.g), 1.0);
    check_prob(&p, BK_BF16, "document rows without keys");
    free_prob(&p);
}
END_TEST

/* The device kernels skip, mask and fully compute the same tiles as the CPU
 * kernels (same 64-row tiles, same classification), forward and backward. */
START_TEST(tile_counts_match_the_cpu)
{
    rs = test_rng(4000 + (uint64_t)_i);
    prob p = make_prob(200, 180, 2, 1, 64, (int)(_i % 3), _i % MASK_KINDS);
    if (_i % MASK_KINDS == MASK_WINDOW_CAUSAL) p.g.mask.window_left = 70;
    dev_prob d = dev_prob_of(&p, BK_F32);
    bk_queue q = dev_queue(), h = bk_host_queue();
    size_t nq = qn(&p.g), nk = kn(&p.g), nr = (size_t)p.g.n_q * p.g.h_q;
    float *O = calloc(nq, 4), *lse = test_alloc(nr * 4, 1), *z = calloc(nq + nk, 4);
    bk_attn_stats sc, sd;
    ck_assert_int_eq(bk_attn_fwd_init(&h, p.g.n_q, 2, 64, O, lse), BK_OK);
    ck_assert_int_eq(bk_attn_fwd(&h, &p.g, p.Q, p.K, p.V, O, lse, &sc), BK_OK);
    float *gO = PUT(O, nq), *gl = PUT(lse, nr), *gz = PUT(z, nq), *gk = PUT(z, nk),
          *gv = PUT(z, nk);
    ck_assert_int_eq(bk_attn_fwd(&q, &d.g, d.Q, d.K, d.V, gO, gl, &sd), BK_OK);
    ck_assert_int_eq(sd.tile_q, sc.tile_q);
    ck_assert_int_eq(sd.tile_kv, sc.tile_kv);
    ck_assert_int_eq(sd.tiles_total, sc.tiles_total);
    ck_assert_int_eq(sd.tiles_skipped, sc.tiles_skipped);
    ck_assert_int_eq(sd.tiles_masked, sc.tiles_masked);
    ck_assert_int_eq(sd.tiles_full, sc.tiles_full);
    float *dz = calloc(nq + nk, 4);
    ck_assert_int_eq(bk_attn_bwd(&h, &p.g, p.Q, p.K, p.V, p.dO, lse, z, dz, dz + nq, dz + nq, &sc),
                     BK_OK);
    ck_assert_int_eq(bk_attn_bwd(&q, &d.g, d.Q, d.K, d.V, d.dO, gl, gz, gz, gk, gv, &sd), BK_OK);
    ck_assert_int_eq(sd.tiles_skipped, sc.tiles_skipped);
    ck_assert_int_eq(sd.tiles_masked, sc.tiles_masked);
    ck_assert_int_eq(sd.tiles_full, sc.tiles_full);
    dev_free(gO), dev_free(gl), dev_free(gz), dev_free(gk), dev_free(gv);
    dev_prob_free(&d);
    free(O), free(lse), free(z), free(dz);
    free_prob(&p);
}
END_TEST

START_TEST(invalid_arguments_are_refused)
{
    rs = test_rng(5);
    prob p = make_prob(10, 10, 2, 1, 64, 0, MASK_CAUSAL);
    dev_prob d = dev_prob_of(&p, BK_F32);
    bk_queue q = dev_queue();
    float *gO = PUT(p.Q, qn(&p.g)), *gl = PUT(p.Q, 20);
    bk_attn_geom g = d.g;
    g.h_kv = 3; /* h_q not a multiple */
    ck_assert_int_eq(bk_attn_fwd(&q, &g, d.Q, d.K, d.V, gO, gl, NULL), BK_ERR_ARG);
    g = d.g, g.d = 60; /* not a multiple of 8 */
    ck_assert_int_eq(bk_attn_fwd(&q, &g, d.Q, d.K, d.V, gO, gl, NULL), BK_ERR_ARG);
    g = d.g, g.scale = 0.0f;
    ck_assert_int_eq(bk_attn_fwd(&q, &g, d.Q, d.K, d.V, gO, gl, NULL), BK_ERR_ARG);
    g = d.g, g.q_pos = NULL; /* a mask needs positions */
    ck_assert_int_eq(bk_attn_fwd(&q, &g, d.Q, d.K, d.V, gO, gl, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_attn_fwd(&q, &d.g, NULL, d.K, d.V, gO, gl, NULL), BK_ERR_ARG);
    ck_assert_int_eq(
        bk_attn_fwd(&q, &d.g, (const float *)((const char *)d.Q + 4), d.K, d.V, gO, gl, NULL),
        BK_ERR_ARG);    /* not 16-byte aligned */
    g = d.g, g.d = 136; /* the device kernels stop at 128 */
    ck_assert_int_eq(bk_attn_fwd(&q, &g, d.Q, d.K, d.V, gO, gl, NULL), BK_ERR_UNSUPPORTED);
    ck_assert_int_eq(bk_attn_bwd(&q, &d.g, d.Q, d.K, d.V, d.dO, gl, NULL, gO, gO, gO, NULL),
                     BK_ERR_ARG);
    dev_free(gO), dev_free(gl);
    dev_prob_free(&d);
    free_prob(&p);
}
END_TEST

static Suite *dev_attention_suite(void)
{
    Suite *s = suite_create("dev_attention");
    check_add_loop_tests(check_tcase(s, "random", 1800), 0, N_RANDOM, matches_reference);
    check_add_loop_tests(check_tcase(s, "sweep", 1800), 0, 2 * MASK_KINDS, every_mask_and_group);
    check_add_loop_tests(check_tcase(s, "split", 1800), 0, MASK_KINDS, split_blocks_equal_whole);
    TCase *edges = check_tcase(s, "edges", 1800);
    check_add_tests(edges, fully_masked_rows_and_tiles, invalid_arguments_are_refused);
    check_add_loop_tests(edges, 0, MASK_KINDS, tile_counts_match_the_cpu);
    return s;
}

int main(void)
{
    return dev_test_main(dev_attention_suite());
}
