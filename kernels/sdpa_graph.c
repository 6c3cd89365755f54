/* sdpa_graph.c: bk_sdpa_describe, an SDPA call turned into cuDNN's tensors
 * and attributes (kernels/sdpa_graph.h). */
#include <stdint.h>
#include <string.h>

#include "kernels/sdpa_graph.h"

static int band_ok(const bk_sdpa_band *b)
{
    return (b->align == BK_SDPA_TOP_LEFT || b->align == BK_SDPA_BOTTOM_RIGHT) &&
           (!b->has_right || b->right >= 0) && (!b->has_left || b->left >= 1);
}

static int call_ok(const bk_sdpa_call *c)
{
    if (c->h_q <= 0 || c->h_kv <= 0 || c->h_q % c->h_kv != 0 || c->d <= 0 || c->d % 8 != 0 ||
        c->d > 128 || !(c->scale > 0.0f) || c->n_seq < 1 || c->n_seq > BK_SDPA_MAX_SEQ ||
        c->seq == NULL || !band_ok(&c->band))
        return 0;
    for (int k = 0; k < c->n_seq; k++) {
        const bk_sdpa_seq *s = &c->seq[k];
        if (s->q_len < 1 || s->kv_len < 1 || s->q_row < 0 || s->kv_row < 0) return 0;
    }
    return 1;
}

static int64_t max_kv(const bk_sdpa_call *c)
{
    int64_t m = 0;
    for (int k = 0; k < c->n_seq; k++)
        if (c->seq[k].kv_len > m) m = c->seq[k].kv_len;
    return m;
}

/* [b, h, s, d] over rows of h heads of d: strides (s h d, d, h d, 1). */
static void bshd(bk_sdpa_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d)
{
    int64_t dim[4] = {b, h, s, d}, stride[4] = {s * h * d, d, h * d, 1};
    memcpy(t->dim, dim, sizeof dim);
    memcpy(t->stride, stride, sizeof stride);
}

/* Where each sequence's rows start: the view begins at the lowest row of its
 * side (base); a ragged call's sequences start at their offsets from there,
 * the last offset where the furthest one ends. */
static void place(bk_sdpa_tensor *t, const bk_sdpa_call *c, int kv_side, int ragged)
{
    int64_t row_elems = t->dim[1] * t->dim[3], lowest = INT64_MAX, end = 0;
    for (int k = 0; k < c->n_seq; k++) {
        int64_t row = kv_side ? c->seq[k].kv_row : c->seq[k].q_row;
        if (row < lowest) lowest = row;
    }
    for (int k = 0; k < c->n_seq; k++) {
        int64_t row = kv_side ? c->seq[k].kv_row : c->seq[k].q_row;
        int64_t len = kv_side ? c->seq[k].kv_len : c->seq[k].q_len;
        t->ragged_offset[k] = ragged ? (row - lowest) * row_elems : 0;
        if ((row - lowest + len) * row_elems > end) end = (row - lowest + len) * row_elems;
    }
    t->ragged_offset[c->n_seq] = ragged ? end : 0;
    t->base = lowest * row_elems;
}

int bk_sdpa_describe(const bk_sdpa_call *c, bk_sdpa_graph *g)
{
    memset(g, 0, sizeof *g);
    if (!call_ok(c)) return -1;
    int64_t b = c->n_seq, s_q = bk_sdpa_max_q(c), s_kv = max_kv(c);
    g->ragged = c->n_seq > 1;
    bshd(&g->q, b, c->h_q, s_q, c->d);
    bshd(&g->o, b, c->h_q, s_q, c->d);
    bshd(&g->k, b, c->h_kv, s_kv, c->d);
    bshd(&g->v, b, c->h_kv, s_kv, c->d);
    place(&g->q, c, 0, g->ragged);
    place(&g->o, c, 0, g->ragged);
    place(&g->k, c, 1, g->ragged);
    place(&g->v, c, 1, g->ragged);
    /* Stats [b, h, s, 1], packed: what cuDNN 9.19 reads and writes */
    int64_t sdim[4] = {b, c->h_q, s_q, 1}, sstride[4] = {c->h_q * s_q, s_q, 1, 1};
    memcpy(g->stats.dim, sdim, sizeof sdim);
    memcpy(g->stats.stride, sstride, sizeof sstride);
    for (int k = 0; k < c->n_seq; k++) {
        g->seq_len_q[k] = c->seq[k].q_len;
        g->seq_len_kv[k] = c->seq[k].kv_len;
    }
    g->attn_scale = c->scale;
    g->band = c->band;
    g->generate_stats = 1;
    return 0;
}
