/* attention_fwd.c: CPU forward attention over one (query block, key/value
 * block) pair, merged in place into the running (O, lse) of a ring.
 *
 * Work is split over units of (query head, up to BK_ATTN_QGROUP consecutive
 * query tiles), OpenMP dynamic so that the uneven units of causal masks
 * balance; a unit loops over key tiles outside its query tiles, so each K/V
 * tile comes from memory once per group of query tiles. A unit keeps a query tile transposed
 * (Q^T [d, TQ]) and its output accumulator transposed (O^T [d, TQ]) so that the
 * query index is the vector lane everywhere: the scores S^T = K Q^T [TK, TQ],
 * the column max, exp2, the per-query rescale and O^T += V^T P^T all vectorise
 * along queries with no horizontal reductions, and K, V are read in place
 * (never transposed or expanded for GQA). Scores live only in the per-thread
 * TK x TQ tile; no n_q x n_kv matrix exists.
 *
 * Inside the block the softmax runs online in base 2 (running max m2 and sum l
 * per query); at the end of the block the normalised block output and its lse
 * are merged into (O, lse) with bk_attn_merge_weights, so O stays normalised. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"

/* Per-thread scratch of one query tile of a forward unit. */
typedef struct {
    float *qt;    /* [d, TQ] Q^T of the query tile, zero-padded beyond bq */
    float *ot;    /* [d, TQ] O^T accumulator (unnormalised) */
    float *m2;    /* [TQ] running max, base-2 units */
    float *l;     /* [TQ] running sum of exp2(s2 - offset) */
    float *alpha; /* [TQ] rescale factor of this key tile */
    float *off;   /* [TQ] exp2 offset of this key tile */
} fwd_scratch;

/* The call-wide constants a unit reads. */
typedef struct {
    const bk_attn_geom *g;
    const float *Q, *K, *V;
    float *O, *lse;
    const bk_attn_range *qr, *kr; /* per query tile, per key tile */
    int64_t n_qt, n_kt;
} fwd_args;

/* Per query, the online rescale factor alpha and the exp2 offset after this
 * tile of raw scores S^T [bk, nq]; the scores stay raw (tile_exp_sum scales
 * them on the way), and their max scales with them since sl2 > 0. nq is a
 * multiple of 16. */
static void tile_max(const float *restrict st, int64_t bk, int64_t nq, float sl2,
                     float *restrict m2, float *restrict alpha, float *restrict off)
{
    float mx[BK_ATTN_TQ];
    for (int64_t i = 0; i < nq; i++) mx[i] = -INFINITY;
    for (int64_t j = 0; j < bk; j++) {
        const float *restrict s = st + j * BK_ATTN_TQ;
#pragma omp simd
        for (int64_t i = 0; i < nq; i++) mx[i] = mx[i] > s[i] ? mx[i] : s[i];
    }
    for (int64_t i = 0; i < nq; i++) {
        alpha[i] = bk_attn_online_rescale(&m2[i], mx[i] * sl2);
        off[i] = bk_attn_exp_offset(m2[i]);
    }
}

/* P^T = exp2(S^T * sl2 - off) in place, with the per-query sums added to l
 * after scaling l by alpha. */
static void tile_exp_sum(float *restrict st, int64_t bk, int64_t nq, float sl2,
                         const float *restrict off, const float *restrict alpha,
                         float *restrict l)
{
#if BK_ATTN_VEC
    const bk_vf s2 = bk_vset1(sl2);
    for (int64_t i = 0; i < nq; i += BK_VW) {
        bk_vf o = bk_vload(off + i), sum = bk_vset1(0.0f);
        for (int64_t j = 0; j < bk; j++) {
            float *s = st + j * BK_ATTN_TQ + i;
            bk_vf p = bk_attn_exp2(bk_vfmsub(bk_vload(s), s2, o));
            bk_vstore(s, p);
            sum = bk_vadd(sum, p);
        }
        bk_vstore(l + i, bk_vfmadd(bk_vload(l + i), bk_vload(alpha + i), sum));
    }
#else
    float sum[BK_ATTN_TQ];
    for (int64_t i = 0; i < nq; i++) sum[i] = 0.0f;
    for (int64_t j = 0; j < bk; j++) {
        float *restrict s = st + j * BK_ATTN_TQ;
#pragma omp simd
        for (int64_t i = 0; i < nq; i++) {
            float p = exp2f(s[i] * sl2 - off[i]);
            s[i] = p;
            sum[i] += p;
        }
    }
    for (int64_t i = 0; i < nq; i++) l[i] = l[i] * alpha[i] + sum[i];
#endif
}

/* Per query tile of a unit: where it is and whether any key tile is live. */
typedef struct {
    int64_t t, i0, bq, nq; /* tile index, first row, rows, padded vector lanes */
    int live;
} fwd_tile;

/* One unit: query head h, query tiles [t0, t0 + n_sub), against every key tile
 * of the block. The key tiles are the outer loop, so each K/V tile is read from
 * memory once for all the unit's query tiles (then from L1/L2). */
static void fwd_unit(const fwd_args *a, const fwd_scratch *ws, float *st, int h, int64_t t0,
                     int n_sub, int64_t *n_skip, int64_t *n_mask, int64_t *n_full)
{
    const bk_attn_geom *g = a->g;
    const int d = g->d, hq = g->h_q, hk = h / (g->h_q / g->h_kv);
    const ptrdiff_t qs = (ptrdiff_t)hq * d, ks = (ptrdiff_t)g->h_kv * d;
    const float sl2 = g->scale * 1.44269504088896341f;
    fwd_tile tl[BK_ATTN_QGROUP];
    int any = 0;

    for (int s = 0; s < n_sub; s++) {
        fwd_tile *u = &tl[s];
        const fwd_scratch *w = &ws[s];
        u->t = t0 + s;
        u->i0 = u->t * BK_ATTN_TQ;
        u->bq = g->n_q - u->i0 < BK_ATTN_TQ ? g->n_q - u->i0 : BK_ATTN_TQ;
        u->nq = (u->bq + 15) / 16 * 16;
        u->live = 0;
        for (int64_t kt = 0; kt < a->n_kt && !u->live; kt++)
            u->live = bk_attn_tile_class(&g->mask, &a->qr[u->t], &a->kr[kt]) != BK_ATTN_TILE_SKIP;
        if (!u->live) { /* the mask empties the whole row of tiles: nothing to merge */
            *n_skip += a->n_kt;
            continue;
        }
        any = 1;
        /* Q^T, zero-padded; O^T = 0; running max -inf, sum 0 */
        for (int c = 0; c < d; c++) {
            float *restrict q = w->qt + (ptrdiff_t)c * BK_ATTN_TQ;
            const float *src = a->Q + u->i0 * qs + (ptrdiff_t)h * d + c;
            for (int64_t i = 0; i < u->bq; i++) q[i] = src[i * qs];
            for (int64_t i = u->bq; i < u->nq; i++) q[i] = 0.0f;
            memset(w->ot + (ptrdiff_t)c * BK_ATTN_TQ, 0, (size_t)u->nq * sizeof(float));
        }
        for (int64_t i = 0; i < u->nq; i++) {
            w->m2[i] = -INFINITY;
            w->l[i] = 0.0f;
        }
    }
    if (!any) return;

    for (int64_t kt = 0; kt < a->n_kt; kt++) {
        const int64_t j0 = kt * BK_ATTN_TK;
        const int64_t bk = g->n_kv - j0 < BK_ATTN_TK ? g->n_kv - j0 : BK_ATTN_TK;
        const float *Kt = a->K + j0 * ks + (ptrdiff_t)hk * d;
        const float *Vt = a->V + j0 * ks + (ptrdiff_t)hk * d;
        for (int s = 0; s < n_sub; s++) {
            const fwd_tile *u = &tl[s];
            const fwd_scratch *w = &ws[s];
            if (!u->live) continue;
            const int64_t nq = u->nq;
            int cls = bk_attn_tile_class(&g->mask, &a->qr[u->t], &a->kr[kt]);
            if (cls == BK_ATTN_TILE_SKIP) {
                (*n_skip)++;
                continue;
            }
            /* S^T [bk, nq] = K_tile [bk, d] . Q^T [d, nq] */
            bk_attn_tile_gemm(bk, nq, d, Kt, ks, 1, w->qt, BK_ATTN_TQ, st, BK_ATTN_TQ, 0);
            if (cls == BK_ATTN_TILE_PARTIAL) {
                bk_attn_tile_mask(g, u->i0, u->bq, j0, bk, st);
                (*n_mask)++;
            } else {
                (*n_full)++;
            }
            tile_max(st, bk, nq, sl2, w->m2, w->alpha, w->off);
            tile_exp_sum(st, bk, nq, sl2, w->off, w->alpha, w->l);

            int rescale = 0;
            for (int64_t i = 0; i < nq; i++) rescale |= w->alpha[i] != 1.0f;
            if (rescale) {
                for (int c = 0; c < d; c++) {
                    float *restrict o = w->ot + (ptrdiff_t)c * BK_ATTN_TQ;
#pragma omp simd
                    for (int64_t i = 0; i < nq; i++) o[i] *= w->alpha[i];
                }
            }
            /* O^T [d, nq] += V_tile^T [d, bk] . P^T [bk, nq]; V read in place */
            bk_attn_tile_gemm(d, nq, bk, Vt, 1, ks, st, BK_ATTN_TQ, w->ot, BK_ATTN_TQ, 1);
        }
    }

    /* merge each tile's normalised block output and lse into the running (O, lse) */
    for (int s = 0; s < n_sub; s++) {
        const fwd_tile *u = &tl[s];
        const fwd_scratch *w = &ws[s];
        if (!u->live) continue;
        for (int64_t i = 0; i < u->bq; i++) {
            float *lse = a->lse + (u->i0 + i) * hq + h;
            float lse_blk = bk_attn_block_lse(w->m2[i], w->l[i]);
            float w_old, w_blk;
            *lse = bk_attn_merge_weights(*lse, lse_blk, &w_old, &w_blk);
            float cb = w->l[i] > 0.0f ? w_blk / w->l[i] : 0.0f;
            float *restrict o = a->O + (u->i0 + i) * qs + (ptrdiff_t)h * d;
            const float *ot = w->ot + i;
            for (int c = 0; c < d; c++) o[c] = o[c] * w_old + ot[(ptrdiff_t)c * BK_ATTN_TQ] * cb;
        }
    }
}

/* One thread's scratch: 0, or -1 when memory ran out (fwd_scratch_free
 * frees what was had either way). */
static int fwd_scratch_take(size_t d, fwd_scratch w[BK_ATTN_QGROUP], float **st)
{
    int ok = 1;
    for (int s = 0; s < BK_ATTN_QGROUP; s++) {
        w[s].qt = bk_attn_scratch(d * BK_ATTN_TQ);
        w[s].ot = bk_attn_scratch(d * BK_ATTN_TQ);
        w[s].m2 = bk_attn_scratch(4 * BK_ATTN_TQ);
        ok = ok && w[s].qt && w[s].ot && w[s].m2;
        if (!w[s].m2) continue;
        w[s].l = w[s].m2 + BK_ATTN_TQ;
        w[s].alpha = w[s].l + BK_ATTN_TQ;
        w[s].off = w[s].alpha + BK_ATTN_TQ;
    }
    *st = bk_attn_scratch((size_t)BK_ATTN_TK * BK_ATTN_TQ);
    return ok && *st ? 0 : -1;
}

/* What fwd_scratch_take asks for (each piece is rounded up to 64 bytes). */
static size_t fwd_scratch_bytes(size_t d)
{
    return ((size_t)BK_ATTN_QGROUP * (2 * d + 4) * BK_ATTN_TQ + (size_t)BK_ATTN_TK * BK_ATTN_TQ) *
           sizeof(float);
}

static void fwd_scratch_free(fwd_scratch w[BK_ATTN_QGROUP], float *st)
{
    for (int s = 0; s < BK_ATTN_QGROUP; s++) {
        free(w[s].qt);
        free(w[s].ot);
        free(w[s].m2);
    }
    free(st);
}

bk_status bk_attn_fwd(const bk_queue *q, const bk_attn_geom *g, const float *Q, const float *K,
                      const float *V, float *O, float *lse, bk_attn_stats *stats)
{
    BK_CHECK_ARG(q != NULL);
    BK_DEVICE_DISPATCH(q, attn_fwd, (q, g, Q, K, V, BK_F32, O, lse, stats));
    bk_status status = bk_attn_check_geom(q, g);
    if (status != BK_OK) return status;
    if (g->n_q > 0) BK_CHECK_ARG(Q != NULL && O != NULL && lse != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL);
    const int64_t n_qt = (g->n_q + BK_ATTN_TQ - 1) / BK_ATTN_TQ;
    const int64_t n_kt = (g->n_kv + BK_ATTN_TK - 1) / BK_ATTN_TK;
    if (n_qt == 0 || n_kt == 0) {
        bk_attn_stats_set(stats, 0, 0, 0, 0);
        return BK_OK;
    }

    bk_attn_range *qr = malloc((size_t)n_qt * sizeof *qr);
    bk_attn_range *kr = malloc((size_t)n_kt * sizeof *kr);
    if (!qr || !kr) {
        free(qr);
        free(kr);
        return bk_out_of_memory((size_t)(n_qt + n_kt) * sizeof *qr, "the attention's tile ranges");
    }
    bk_attn_ranges(g->q_pos, g->mask.flags & BK_ATTN_DOCUMENT ? g->q_seg : NULL, g->n_q, BK_ATTN_TQ,
                   qr);
    bk_attn_ranges(g->kv_pos, g->mask.flags & BK_ATTN_DOCUMENT ? g->kv_seg : NULL, g->n_kv,
                   BK_ATTN_TK, kr);
    fwd_args a = {g, Q, K, V, O, lse, qr, kr, n_qt, n_kt};
    const int64_t n_grp = (n_qt + BK_ATTN_QGROUP - 1) / BK_ATTN_QGROUP;
    const int64_t units = (int64_t)g->h_q * n_grp;
    int64_t n_skip = 0, n_mask = 0, n_full = 0;
    int short_of_memory = 0;

#pragma omp parallel num_threads(bk_attn_threads(q)) reduction(+ : n_skip, n_mask, n_full)
    {
        fwd_scratch w[BK_ATTN_QGROUP];
        float *st;
        int have =
            bk_attn_scratch_had(fwd_scratch_take((size_t)g->d, w, &st) == 0, &short_of_memory);
        /* head-major, so that the threads stream the same K/V head together (it
         * then comes from the shared cache rather than memory once per thread);
         * within a head later query tiles first: under a causal mask they are
         * the longest, which leaves short units for the end of the schedule */
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            if (!have) continue;
            int64_t t0 = (n_grp - 1 - u % n_grp) * BK_ATTN_QGROUP;
            int n_sub = n_qt - t0 < BK_ATTN_QGROUP ? (int)(n_qt - t0) : BK_ATTN_QGROUP;
            fwd_unit(&a, w, st, (int)(u / n_grp), t0, n_sub, &n_skip, &n_mask, &n_full);
        }
        fwd_scratch_free(w, st);
    }
    free(qr);
    free(kr);
    if (short_of_memory)
        return bk_out_of_memory(fwd_scratch_bytes((size_t)g->d),
                                "the attention's scratch of a thread");
    bk_attn_stats_set(stats, (int64_t)g->h_q * n_qt * n_kt, n_skip, n_mask, n_full);
    return BK_OK;
}

bk_status bk_attn_fwd_init(const bk_queue *q, int64_t n_q, int h_q, int d, float *O, float *lse)
{
    BK_CHECK_ARG(q != NULL && n_q >= 0 && h_q > 0 && d > 0 && d % 8 == 0);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL));
    BK_DEVICE_DISPATCH(q, attn_fwd_init, (q, n_q, h_q, d, O, lse));
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
#pragma omp parallel for num_threads(bk_attn_threads(q)) schedule(static)
    for (int64_t i = 0; i < n_q; i++) {
        memset(O + i * h_q * d, 0, (size_t)h_q * (size_t)d * sizeof(float));
        for (int h = 0; h < h_q; h++) lse[i * h_q + h] = -INFINITY;
    }
    return BK_OK;
}

bk_status bk_attn_fwd_finalize(const bk_queue *q, int64_t n_q, int h_q, int d, float *O,
                               const float *lse)
{
    BK_CHECK_ARG(q != NULL && n_q >= 0 && h_q > 0 && d > 0 && d % 8 == 0);
    BK_CHECK_ARG(n_q == 0 || (O != NULL && lse != NULL));
    BK_DEVICE_DISPATCH(q, attn_fwd_finalize, (q, n_q, h_q, d, O, lse));
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
#pragma omp parallel for num_threads(bk_attn_threads(q)) schedule(static)
    for (int64_t i = 0; i < n_q; i++)
        for (int h = 0; h < h_q; h++)
            if (lse[i * h_q + h] == -INFINITY)
                memset(O + (i * h_q + h) * d, 0, (size_t)d * sizeof(float));
    return BK_OK;
}
