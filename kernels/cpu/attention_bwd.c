/* attention_bwd.c: CPU backward attention over one (query block, key/value
 * block) pair, accumulating (+=) into fp32 dQ, dK, dV, and the delta kernel.
 *
 * Race-free by ownership: a unit is (key/value head, slice of key tiles). It
 * owns dK and dV of its rows outright, and the dQ of the query heads of its
 * group. When there are fewer key/value heads than threads, the key tiles are
 * cut into S slices balanced by unmasked work; slice 0 adds into dQ directly,
 * slices 1..S-1 into private zeroed copies summed into dQ at the end, so no
 * atomics are needed and memory grows by (S-1) * |dQ| only in that case.
 *
 * A unit walks its (query head, query tile) items in groups of BK_ATTN_QGROUP
 * with the key tiles as the outer loop, so each K, V, dK, dV tile comes from
 * memory once per group (items of one group may belong to different query heads
 * of the same GQA group: they share the key/value head).
 *
 * Per (query tile, key tile) the five products, all with the query index as
 * the vector lane where a query dimension exists (see attention_fwd.c):
 *   S^T  = K Q^T           P^T = exp2(S^T * scale*log2e - lse*log2e)
 *   dV  += P^T dO          dP^T = V dO^T
 *   dS^T = P^T (dP^T - delta) * scale
 *   dK  += dS^T Q          dQ  += (dS^T)^T K
 * Q^T, dO^T and the rows of Q and dO are packed once per item and reused
 * across the unit's key tiles; K and V are packed once per key tile and dK, dV
 * gathered in a contiguous tile added to the unit's rows after the group's
 * items. Rows read in place lie h * d floats apart, a power of two that maps a
 * tile's rows onto a few L1 sets; packed, they stay in L1 (1.2-1.4x faster). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention_cpu.h"

typedef struct {
    float *qt;    /* [d, TQ] Q^T, zero-padded */
    float *dot;   /* [d, TQ] dO^T, zero-padded */
    float *q;     /* [TQ, d] Q rows, packed */
    float *dor;   /* [TQ, d] dO rows, packed */
    float *dq;    /* [TQ, d] dQ of the query tile over this unit's key tiles */
    float *off;   /* [TQ] base-2 lse of each query (+inf: row fully masked, or padding) */
    float *delta; /* [TQ] delta of each query (0 for padding) */
} bwd_scratch;

typedef struct {
    const bk_attn_geom *g;
    const float *Q, *K, *V, *dO, *lse, *delta;
    float *dQ, *dK, *dV;
    float **dq_slice; /* [S] dQ targets: dq_slice[0] = dQ, others private copies */
    const bk_attn_range *qr, *kr;
    int64_t n_qt, n_kt;
    const int64_t *cut; /* [S + 1] key-tile boundaries of the slices */
    int n_slices;
} bwd_args;

/* P^T = exp2(S^T * sl2 - off) in place, masked pairs 0. */
static void tile_probs(const bk_attn_geom *g, int cls, int64_t i0, int64_t bq, int64_t j0,
                       int64_t bk, int64_t nq, float sl2, const float *restrict off,
                       float *restrict st)
{
    if (cls == BK_ATTN_TILE_PARTIAL) bk_attn_tile_mask(g, i0, bq, j0, bk, st);
#if BK_ATTN_VEC
    const bk_vf s2 = bk_vset1(sl2);
    for (int64_t j = 0; j < bk; j++) {
        float *s = st + j * BK_ATTN_TQ;
        for (int64_t i = 0; i < nq; i += BK_VW)
            bk_vstore(s + i, bk_attn_exp2(bk_vfmsub(bk_vload(s + i), s2, bk_vload(off + i))));
    }
#else
    for (int64_t j = 0; j < bk; j++) {
        float *restrict s = st + j * BK_ATTN_TQ;
#pragma omp simd
        for (int64_t i = 0; i < nq; i++) s[i] = exp2f(s[i] * sl2 - off[i]);
    }
#endif
}

/* dS^T = P^T (dP^T - delta) * scale, in place over P^T. */
static void tile_dscore(int64_t bk, int64_t nq, float scale, const float *restrict delta,
                        const float *restrict dp, float *restrict st)
{
    for (int64_t j = 0; j < bk; j++) {
        float *restrict s = st + j * BK_ATTN_TQ;
        const float *restrict p = dp + j * BK_ATTN_TQ;
#pragma omp simd
        for (int64_t i = 0; i < nq; i++) s[i] = bk_attn_dscore(s[i], p[i], delta[i], scale);
    }
}

/* One thread's key tile: K and V packed, and the dK, dV its items add. */
typedef struct {
    float *k, *v;   /* [TK, d] */
    float *dk, *dv; /* [TK, d] */
} bwd_kv_tile;

/* One (query head, query tile) item of a unit. */
typedef struct {
    int h;
    int64_t t, i0, bq, nq; /* tile index, first row, rows, padded vector lanes */
    int live;
} bwd_item;

/* Up to BK_ATTN_QGROUP (query head, query tile) items of one key/value head
 * against the key tiles [kt0, kt1) of a unit. Key tiles are the outer loop, so
 * each K, V, dK, dV tile comes from memory once for all the items. */
static void bwd_group(const bwd_args *a, const bwd_scratch *ws, const bwd_kv_tile *kv, float *st,
                      float *dp, const bwd_item *items, int n_items, int64_t kt0, int64_t kt1,
                      float *dq_target, int64_t *n_skip, int64_t *n_mask, int64_t *n_full)
{
    const bk_attn_geom *g = a->g;
    const int d = g->d, hq = g->h_q, hk = items[0].h / (g->h_q / g->h_kv);
    const ptrdiff_t qs = (ptrdiff_t)hq * d, ks = (ptrdiff_t)g->h_kv * d;
    const float sl2 = g->scale * 1.44269504088896341f;
    bwd_item it[BK_ATTN_QGROUP];
    int any = 0;

    for (int s = 0; s < n_items; s++) {
        bwd_item *u = &it[s];
        const bwd_scratch *w = &ws[s];
        *u = items[s];
        u->live = 0;
        for (int64_t kt = kt0; kt < kt1 && !u->live; kt++)
            u->live = bk_attn_tile_class(&g->mask, &a->qr[u->t], &a->kr[kt]) != BK_ATTN_TILE_SKIP;
        if (!u->live) {
            *n_skip += kt1 - kt0;
            continue;
        }
        any = 1;
        const float *Qh = a->Q + u->i0 * qs + (ptrdiff_t)u->h * d;
        const float *dOh = a->dO + u->i0 * qs + (ptrdiff_t)u->h * d;
        for (int64_t i = 0; i < u->bq; i++) {
            memcpy(w->q + i * d, Qh + i * qs, (size_t)d * sizeof(float));
            memcpy(w->dor + i * d, dOh + i * qs, (size_t)d * sizeof(float));
        }
        for (int c = 0; c < d; c++) {
            float *restrict q = w->qt + (ptrdiff_t)c * BK_ATTN_TQ;
            float *restrict o = w->dot + (ptrdiff_t)c * BK_ATTN_TQ;
            for (int64_t i = 0; i < u->bq; i++) {
                q[i] = w->q[i * d + c];
                o[i] = w->dor[i * d + c];
            }
            for (int64_t i = u->bq; i < u->nq; i++) q[i] = o[i] = 0.0f;
        }
        for (int64_t i = 0; i < u->nq; i++) {
            int64_t r = (u->i0 + i) * hq + u->h;
            w->off[i] = i < u->bq ? bk_attn_bwd_offset(a->lse[r]) : INFINITY;
            w->delta[i] = i < u->bq ? a->delta[r] : 0.0f;
        }
        memset(w->dq, 0, (size_t)u->bq * (size_t)d * sizeof(float));
    }
    if (!any) return;

    for (int64_t kt = kt0; kt < kt1; kt++) {
        const int64_t j0 = kt * BK_ATTN_TK;
        const int64_t bk = g->n_kv - j0 < BK_ATTN_TK ? g->n_kv - j0 : BK_ATTN_TK;
        const ptrdiff_t koff = j0 * ks + (ptrdiff_t)hk * d;
        const size_t tile_bytes = (size_t)bk * (size_t)d * sizeof(float);
        int packed = 0;
        for (int s = 0; s < n_items; s++) {
            const bwd_item *u = &it[s];
            const bwd_scratch *w = &ws[s];
            if (!u->live) continue;
            int cls = bk_attn_tile_class(&g->mask, &a->qr[u->t], &a->kr[kt]);
            if (cls == BK_ATTN_TILE_SKIP) {
                (*n_skip)++;
                continue;
            }
            if (!packed) { /* K, V in, dK, dV zeroed: once per key tile, for every item */
                for (int64_t j = 0; j < bk; j++) {
                    memcpy(kv->k + j * d, a->K + koff + j * ks, (size_t)d * sizeof(float));
                    memcpy(kv->v + j * d, a->V + koff + j * ks, (size_t)d * sizeof(float));
                }
                memset(kv->dk, 0, tile_bytes);
                memset(kv->dv, 0, tile_bytes);
                packed = 1;
            }
            if (cls == BK_ATTN_TILE_PARTIAL)
                (*n_mask)++;
            else
                (*n_full)++;
            const int64_t bq = u->bq, nq = u->nq;

            /* S^T [bk, nq] = K [bk, d] . Q^T [d, nq], then P^T in place */
            bk_attn_tile_gemm(bk, nq, d, kv->k, d, 1, w->qt, BK_ATTN_TQ, st, BK_ATTN_TQ, 0);
            tile_probs(g, cls, u->i0, bq, j0, bk, nq, sl2, w->off, st);
            /* dV [bk, d] += P^T [bk, bq] . dO [bq, d] */
            bk_attn_tile_gemm(bk, d, bq, st, BK_ATTN_TQ, 1, w->dor, d, kv->dv, d, 1);
            /* dP^T [bk, nq] = V [bk, d] . dO^T [d, nq] */
            bk_attn_tile_gemm(bk, nq, d, kv->v, d, 1, w->dot, BK_ATTN_TQ, dp, BK_ATTN_TQ, 0);
            tile_dscore(bk, nq, g->scale, w->delta, dp, st);
            /* dK [bk, d] += dS^T [bk, bq] . Q [bq, d] */
            bk_attn_tile_gemm(bk, d, bq, st, BK_ATTN_TQ, 1, w->q, d, kv->dk, d, 1);
            /* dQ [bq, d] += (dS^T)^T [bq, bk] . K [bk, d] */
            bk_attn_tile_gemm(bq, d, bk, st, 1, BK_ATTN_TQ, kv->k, d, w->dq, d, 1);
        }
        if (packed) /* the items' dK, dV of this key tile into the unit's rows */
            for (int64_t j = 0; j < bk; j++) {
                float *restrict dk = a->dK + koff + j * ks, *restrict dv = a->dV + koff + j * ks;
                const float *restrict pk = kv->dk + j * d, *restrict pv = kv->dv + j * d;
#pragma omp simd
                for (int c = 0; c < d; c++) {
                    dk[c] += pk[c];
                    dv[c] += pv[c];
                }
            }
    }

    for (int s = 0; s < n_items; s++) {
        const bwd_item *u = &it[s];
        if (!u->live) continue;
        float *dst = dq_target + u->i0 * qs + (ptrdiff_t)u->h * d;
        for (int64_t i = 0; i < u->bq; i++) {
            float *restrict o = dst + i * qs;
            const float *restrict src = ws[s].dq + i * d;
#pragma omp simd
            for (int c = 0; c < d; c++) o[c] += src[c];
        }
    }
}

/* Cuts key tiles [0, n_kt) into n contiguous slices of about equal unmasked
 * work (query tiles the mask leaves for each key tile). */
static bk_status cut_slices(const bwd_args *a, int n, int64_t *cut)
{
    int64_t *work = calloc((size_t)a->n_kt + 1, sizeof *work); /* prefix sums */
    if (!work)
        return bk_out_of_memory(((size_t)a->n_kt + 1) * sizeof *work, "the attention's slices");
    for (int64_t kt = 0; kt < a->n_kt; kt++) {
        int64_t live = 0;
        for (int64_t t = 0; t < a->n_qt; t++)
            live += bk_attn_tile_class(&a->g->mask, &a->qr[t], &a->kr[kt]) != BK_ATTN_TILE_SKIP;
        work[kt + 1] = work[kt] + live + 1; /* +1: a skipped tile still costs a little */
    }
    cut[0] = 0;
    int64_t kt = 0;
    for (int s = 1; s < n; s++) {
        int64_t goal = work[a->n_kt] * s / n;
        while (kt < a->n_kt && work[kt] < goal) kt++;
        cut[s] = kt;
    }
    cut[n] = a->n_kt;
    free(work);
    return BK_OK;
}

/* One thread's scratch: 0, or -1 when memory ran out (bwd_scratch_free
 * frees what was had either way). */
static int bwd_scratch_take(size_t d, bwd_scratch w[BK_ATTN_QGROUP], bwd_kv_tile *kv, float **st,
                            float **dp)
{
    const size_t item = d * BK_ATTN_TQ, tile = d * BK_ATTN_TK;
    int ok = 1;
    for (int s = 0; s < BK_ATTN_QGROUP; s++) {
        w[s].qt = bk_attn_scratch(5 * item);
        w[s].off = bk_attn_scratch(2 * BK_ATTN_TQ);
        ok = ok && w[s].qt && w[s].off;
        /* one allocation for the item's five [d, TQ] pieces */
        w[s].dot = w[s].qt ? w[s].qt + item : NULL;
        w[s].q = w[s].qt ? w[s].dot + item : NULL;
        w[s].dor = w[s].qt ? w[s].q + item : NULL;
        w[s].dq = w[s].qt ? w[s].dor + item : NULL;
        if (w[s].off) w[s].delta = w[s].off + BK_ATTN_TQ;
    }
    kv->k = bk_attn_scratch(4 * tile);
    kv->v = kv->k ? kv->k + tile : NULL;
    kv->dk = kv->k ? kv->v + tile : NULL;
    kv->dv = kv->k ? kv->dk + tile : NULL;
    *st = bk_attn_scratch((size_t)BK_ATTN_TK * BK_ATTN_TQ); /* S^T, P^T, dS^T */
    *dp = bk_attn_scratch((size_t)BK_ATTN_TK * BK_ATTN_TQ); /* dP^T */
    return ok && kv->k && *st && *dp ? 0 : -1;
}

/* What bwd_scratch_take asks for (each piece is rounded up to 64 bytes). */
static size_t bwd_scratch_bytes(size_t d)
{
    return ((size_t)BK_ATTN_QGROUP * (5 * d + 2) * BK_ATTN_TQ + 4 * d * BK_ATTN_TK +
            2 * (size_t)BK_ATTN_TK * BK_ATTN_TQ) *
           sizeof(float);
}

static void bwd_scratch_free(bwd_scratch w[BK_ATTN_QGROUP], bwd_kv_tile *kv, float *st, float *dp)
{
    for (int s = 0; s < BK_ATTN_QGROUP; s++) {
        free(w[s].qt);
        free(w[s].off);
    }
    free(kv->k);
    free(st);
    free(dp);
}

/* The private dQ copies of slices 1..n_slices-1 (slice 0 writes dQ itself):
 * BK_OK, or BK_ERR_NOMEM with the ones had freed. */
static bk_status dq_copies(float **dq_slice, int64_t n_slices, size_t dq_size)
{
    for (int64_t s = 1; s < n_slices; s++) {
        dq_slice[s] = bk_attn_scratch(dq_size);
        if (dq_slice[s]) continue;
        for (int64_t t = 1; t < s; t++) free(dq_slice[t]);
        return bk_out_of_memory(dq_size * sizeof(float), "a private copy of the attention's dQ");
    }
    return BK_OK;
}

static int gcd(int x, int y)
{
    while (y) {
        int r = x % y;
        x = y;
        y = r;
    }
    return x;
}

/* Every unit (key/value head, key slice) on nt threads, the tile counts
 * added into *n_skip, *n_mask, *n_full: BK_OK, or BK_ERR_NOMEM when a thread
 * could not have its scratch (it computes nothing, the others go on). */
static bk_status bwd_units(const bwd_args *a, int nt, int64_t *n_skip_out, int64_t *n_mask_out,
                           int64_t *n_full_out)
{
    const bk_attn_geom *g = a->g;
    const int64_t n_slices = a->n_slices, n_qt = a->n_qt, units = (int64_t)g->h_kv * n_slices;
    const int grp = g->h_q / g->h_kv;
    int64_t n_skip = 0, n_mask = 0, n_full = 0;
    int short_of_memory = 0;
#pragma omp parallel num_threads(nt) reduction(+ : n_skip, n_mask, n_full)
    {
        bwd_scratch w[BK_ATTN_QGROUP];
        bwd_kv_tile kv;
        float *st, *dp;
        int have = bk_attn_scratch_had(bwd_scratch_take((size_t)g->d, w, &kv, &st, &dp) == 0,
                                       &short_of_memory);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            if (!have) continue;
            int hk = (int)(u / n_slices);
            int64_t s = u % n_slices;
            /* the unit's (query head, query tile) items, head-major, in groups that
             * share each key tile */
            bwd_item items[BK_ATTN_QGROUP];
            int n_items = 0;
            for (int h = hk * grp; h < (hk + 1) * grp; h++)
                for (int64_t t = 0; t < n_qt; t++) {
                    bwd_item *e = &items[n_items++];
                    e->h = h;
                    e->t = t;
                    e->i0 = t * BK_ATTN_TQ;
                    e->bq = g->n_q - e->i0 < BK_ATTN_TQ ? g->n_q - e->i0 : BK_ATTN_TQ;
                    e->nq = (e->bq + 15) / 16 * 16;
                    e->live = 0;
                    if (n_items == BK_ATTN_QGROUP) {
                        bwd_group(a, w, &kv, st, dp, items, n_items, a->cut[s], a->cut[s + 1],
                                  a->dq_slice[s], &n_skip, &n_mask, &n_full);
                        n_items = 0;
                    }
                }
            if (n_items > 0)
                bwd_group(a, w, &kv, st, dp, items, n_items, a->cut[s], a->cut[s + 1],
                          a->dq_slice[s], &n_skip, &n_mask, &n_full);
        }
        bwd_scratch_free(w, &kv, st, dp);
    }
    *n_skip_out += n_skip, *n_mask_out += n_mask, *n_full_out += n_full;
    return short_of_memory ? bk_out_of_memory(bwd_scratch_bytes((size_t)g->d),
                                              "the attention's scratch of a thread")
                           : BK_OK;
}

bk_status bk_attn_bwd(const bk_queue *q, const bk_attn_geom *g, const float *Q, const float *K,
                      const float *V, const float *dO, const float *lse, const float *delta,
                      float *dQ, float *dK, float *dV, bk_attn_stats *stats)
{
    BK_CHECK_ARG(q != NULL);
    BK_DEVICE_DISPATCH(q, attn_bwd, (q, g, Q, K, V, dO, BK_F32, lse, delta, dQ, dK, dV, stats));
    bk_status status = bk_attn_check_geom(q, g);
    if (status != BK_OK) return status;
    if (g->n_q > 0)
        BK_CHECK_ARG(Q != NULL && dO != NULL && lse != NULL && delta != NULL && dQ != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL && dK != NULL && dV != NULL);
    const int64_t n_qt = (g->n_q + BK_ATTN_TQ - 1) / BK_ATTN_TQ;
    const int64_t n_kt = (g->n_kv + BK_ATTN_TK - 1) / BK_ATTN_TK;
    if (n_qt == 0 || n_kt == 0) {
        bk_attn_stats_set(stats, 0, 0, 0, 0);
        return BK_OK;
    }
    const int nt = bk_attn_threads(q);
    /* slices so that units = h_kv * S is a multiple of the thread count, capped
     * to bound the memory of private dQ copies */
    int64_t n_slices = nt / gcd(g->h_kv, nt);
    if (n_slices > 16) n_slices = 16;
    if (n_slices > n_kt) n_slices = n_kt;

    bk_attn_range *qr = malloc((size_t)n_qt * sizeof *qr);
    bk_attn_range *kr = malloc((size_t)n_kt * sizeof *kr);
    int64_t *cut = malloc(((size_t)n_slices + 1) * sizeof *cut);
    float **dq_slice = calloc((size_t)n_slices, sizeof *dq_slice);
    const size_t dq_size = (size_t)g->n_q * (size_t)g->h_q * (size_t)g->d;
    if (!qr || !kr || !cut || !dq_slice)
        status = bk_out_of_memory((size_t)(n_qt + n_kt) * sizeof *qr +
                                      ((size_t)n_slices + 1) * sizeof *cut +
                                      (size_t)n_slices * sizeof *dq_slice,
                                  "the attention's tiles and slices");
    else
        status = dq_copies(dq_slice, n_slices, dq_size);
    if (status != BK_OK) {
        free(qr), free(kr), free(cut), free(dq_slice);
        return status;
    }
    bk_attn_ranges(g->q_pos, g->mask.flags & BK_ATTN_DOCUMENT ? g->q_seg : NULL, g->n_q, BK_ATTN_TQ,
                   qr);
    bk_attn_ranges(g->kv_pos, g->mask.flags & BK_ATTN_DOCUMENT ? g->kv_seg : NULL, g->n_kv,
                   BK_ATTN_TK, kr);
    dq_slice[0] = dQ;
    bwd_args a = {g,  Q,        K,  V,  dO,   lse,  delta, dQ,           dK,
                  dV, dq_slice, qr, kr, n_qt, n_kt, cut,   (int)n_slices};
    if (n_slices > 1)
        status = cut_slices(&a, (int)n_slices, cut);
    else
        cut[0] = 0, cut[1] = n_kt;

    int64_t n_skip = 0, n_mask = 0, n_full = 0;
    if (status == BK_OK) status = bwd_units(&a, nt, &n_skip, &n_mask, &n_full);
    if (status == BK_OK && n_slices > 1) {
        /* sum the private dQ copies into dQ */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < (int64_t)dq_size; i++) {
            float acc = 0.0f;
            for (int64_t s = 1; s < n_slices; s++) acc += dq_slice[s][i];
            dQ[i] += acc;
        }
    }
    for (int64_t s = 1; s < n_slices; s++) free(dq_slice[s]);
    free(dq_slice);
    free(cut);
    free(qr);
    free(kr);
    if (status == BK_OK)
        bk_attn_stats_set(stats, (int64_t)g->h_q * n_qt * n_kt, n_skip, n_mask, n_full);
    return status;
}

bk_status bk_attn_delta(const bk_queue *q, int64_t n_q, int h_q, int d, const float *dO,
                        const float *O, float *delta)
{
    BK_CHECK_ARG(q != NULL && n_q >= 0 && h_q > 0 && d > 0 && d % 8 == 0);
    BK_CHECK_ARG(n_q == 0 || (dO != NULL && O != NULL && delta != NULL));
    BK_DEVICE_DISPATCH(q, attn_delta, (q, n_q, h_q, d, dO, O, delta));
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
#pragma omp parallel for num_threads(bk_attn_threads(q)) schedule(static)
    for (int64_t r = 0; r < n_q * h_q; r++) {
        const float *restrict a = dO + r * d, *restrict b = O + r * d;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int c = 0; c < d; c++) acc += a[c] * b[c];
        delta[r] = acc;
    }
    return BK_OK;
}
