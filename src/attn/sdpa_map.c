/* sdpa_map.c: see sdpa_map.h. A block pair is read as views (rectangles of
 * consecutive positions on both sides, with their band), each trimmed into a
 * piece that cuDNN takes (split by query rows where a left bound would need
 * more queries than keys), full pieces side by side joined, then pieces
 * grouped into calls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/attn/sdpa_map.h"

/* Farther than any two positions: the side of a band nothing bounds. */
#define BAND_UNBOUNDED (INT64_MAX / 4)

/* A rectangle of the block pair: query rows q_row .. q_row + q_len, key rows
 * kv_row .. kv_row + kv_len (local rows), where key j of query i, both
 * counted from the rectangle's corner, is allowed iff lo <= j - i <= hi. */
typedef struct {
    bk_sdpa_seq rows;
    int64_t lo, hi;
} band_view;

/* A trimmed view, one sequence of a call: the band it takes as a dense call
 * of its own (top-left), the band it is batched under in a ragged call, and
 * the group (the call) it went to, -1 before grouping. */
typedef struct {
    bk_sdpa_seq rows;
    bk_sdpa_band dense, ragged;
    int group;
} sdpa_piece;

typedef struct {
    sdpa_piece *pieces; /* [n] of [cap] */
    int n, cap;
    bk_sdpa_band *groups; /* [n_groups]: the band of each group as a ragged call */
    int n_groups;
} piece_list;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* A view's band in top-left terms: right bound R = hi (j - i <= R), left bound
 * L = 1 - lo (i - j < L), each set only where it excludes a key: j - i spans
 * -(q_len - 1) .. kv_len - 1 over the rectangle. */
static bk_sdpa_band top_left_band(const band_view *v)
{
    bk_sdpa_band b = {.align = BK_SDPA_TOP_LEFT};
    if (v->hi < v->rows.kv_len - 1) b.has_right = 1, b.right = v->hi;
    if (v->lo > 1 - v->rows.q_len) b.has_left = 1, b.left = 1 - v->lo;
    return b;
}

/* The band a piece is batched under: bottom-right (shift kv_len - q_len), in
 * which pieces of different shapes cut from one diagonal agree (a document's
 * queries ending where its keys end). A trimmed piece's bottom-right bounds are
 * in cuDNN's range: its last key has a row and its last row a key, so
 * kv_len - q_len lies in [lo, hi], which makes R - shift >= 0 and L + shift >=
 * 1. A full band is top-left, so that all full pieces share it. */
static bk_sdpa_band ragged_band(bk_sdpa_band top_left, const bk_sdpa_seq *s)
{
    if (!top_left.has_right && !top_left.has_left) return top_left;
    int64_t shift = s->kv_len - s->q_len;
    bk_sdpa_band b = top_left;
    b.align = BK_SDPA_BOTTOM_RIGHT;
    if (b.has_right) b.right -= shift;
    if (b.has_left) b.left += shift;
    return b;
}

static int band_equal(const bk_sdpa_band *a, const bk_sdpa_band *b)
{
    return a->align == b->align && a->has_right == b->has_right && a->has_left == b->has_left &&
           (!a->has_right || a->right == b->right) && (!a->has_left || a->left == b->left);
}

static int is_full(const sdpa_piece *p)
{
    return !p->dense.has_right && !p->dense.has_left;
}

/* Cuts the view down to the query rows that reach a key and the keys that some
 * row reaches; 0 when nothing is left. Afterwards lo <= 0 <= hi: the first row
 * reaches the first key, which is what makes R >= 0 and L >= 1. */
static int trim_view(band_view *v)
{
    int64_t q_len = v->rows.q_len, kv_len = v->rows.kv_len;
    int64_t lo = max64(v->lo, 1 - q_len), hi = min64(v->hi, kv_len - 1);
    if (lo > hi) return 0;
    int64_t i0 = max64(0, -hi), i1 = min64(q_len, kv_len - lo); /* rows with a key */
    int64_t j0 = max64(0, lo), j1 = min64(kv_len, q_len + hi);  /* keys with a row */
    v->rows = (bk_sdpa_seq){v->rows.q_row + i0, i1 - i0, v->rows.kv_row + j0, j1 - j0};
    v->lo = lo - (j0 - i0);
    v->hi = hi - (j0 - i0);
    return 1;
}

static int push_piece(piece_list *pl, const band_view *v)
{
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 16;
        sdpa_piece *grown = realloc(pl->pieces, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        pl->pieces = grown;
        pl->cap = cap;
    }
    sdpa_piece *p = &pl->pieces[pl->n++];
    p->rows = v->rows;
    p->dense = top_left_band(v);
    p->ragged = ragged_band(p->dense, &v->rows);
    p->group = -1;
    return 0;
}

static int add_view(piece_list *pl, band_view v);

/* cuDNN takes a left bound only with q_len <= kv_len (without a padding
 * mask): the view's rows in runs of kv_len, each trimmed again. Every run then
 * reaches at least as many keys as it has rows (the band is as wide as the
 * keys' span along the diagonal), so none is cut again. */
static int add_row_runs(piece_list *pl, const band_view *v)
{
    int64_t run = v->rows.kv_len;
    for (int64_t a = 0; a < v->rows.q_len; a += run) {
        band_view part = *v;
        part.rows.q_row += a;
        part.rows.q_len = min64(run, v->rows.q_len - a);
        part.lo += a; /* row a of the view is row 0 of the part */
        part.hi += a;
        if (add_view(pl, part) != 0) return -1;
    }
    return 0;
}

/* The pieces of one view: none when its band allows nothing. */
static int add_view(piece_list *pl, band_view v)
{
    if (!trim_view(&v)) return 0;
    if (top_left_band(&v).has_left && v.rows.q_len > v.rows.kv_len) return add_row_runs(pl, &v);
    return push_piece(pl, &v);
}

/* The view of query positions q and key positions k (runs of consecutive
 * positions at local rows q_row and kv_row): the band of the first query,
 * which every later query shifts along the diagonal. */
static band_view chunk_view(const attn_need_ctx *need, seq_chunk q, int64_t q_row, seq_chunk k,
                            int64_t kv_row)
{
    int64_t lo, hi;
    attn_need_key_range(&need->mask, q.begin, &lo, &hi);
    return (band_view){
        {q_row, q.end - q.begin, kv_row, k.end - k.begin}, lo - k.begin, hi - k.begin};
}

/* Under a document mask, one view per document present on both sides: ids
 * are non-decreasing, so each side's document is one run, found by walking
 * both chunks' documents in order. */
static int add_document_views(piece_list *pl, const attn_need_ctx *need, seq_chunk q, int64_t q_row,
                              seq_chunk k, int64_t kv_row)
{
    const int32_t *seg = need->segments;
    for (int64_t a = q.begin, c = k.begin; a < q.end && c < k.end;) {
        int64_t b = attn_need_document_end(need, a, q.end);
        int64_t e = attn_need_document_end(need, c, k.end);
        int32_t q_doc = seg[a], k_doc = seg[c];
        if (q_doc == k_doc) {
            band_view v = chunk_view(need, (seq_chunk){a, b}, q_row + a - q.begin,
                                     (seq_chunk){c, e}, kv_row + c - k.begin);
            if (add_view(pl, v) != 0) return -1;
        }
        if (q_doc <= k_doc) a = b;
        if (k_doc <= q_doc) c = e;
    }
    return 0;
}

static int add_chunk_pair(piece_list *pl, const attn_need_ctx *need, seq_chunk q, int64_t q_row,
                          seq_chunk k, int64_t kv_row)
{
    if (need->mask.flags & BK_ATTN_DOCUMENT)
        return add_document_views(pl, need, q, q_row, k, kv_row);
    return add_view(pl, chunk_view(need, q, q_row, k, kv_row));
}

/* The whole block pair as one view where its mask is one band over local
 * rows: a mask that reads no position, or causal alone on a rank's own block
 * (both sides list the same positions in increasing order, so k_pos <= q_pos
 * is j <= i): one dense call, as TransformerEngine makes of the diagonal. */
static int whole_block_view(const attn_need_ctx *need, const seq_layout *l, int q_rank, int k_rank,
                            band_view *v)
{
    unsigned f = need->mask.flags;
    if (f != 0 && !(f == BK_ATTN_CAUSAL && q_rank == k_rank)) return 0;
    *v = (band_view){{0, l->n, 0, l->n}, -BAND_UNBOUNDED, f ? 0 : BAND_UNBOUNDED};
    return 1;
}

static int64_t chunk_len(seq_chunk c)
{
    return c.end - c.begin;
}

static int collect_pieces(piece_list *pl, const attn_need_ctx *need, const seq_layout *l,
                          int q_rank, int k_rank)
{
    band_view whole;
    if (whole_block_view(need, l, q_rank, k_rank, &whole)) return add_view(pl, whole);
    seq_chunk qc[2], kc[2];
    int n_q = seq_layout_chunks(l, q_rank, qc), n_k = seq_layout_chunks(l, k_rank, kc);
    int64_t q_row = 0;
    for (int a = 0; a < n_q; q_row += chunk_len(qc[a]), a++) {
        int64_t kv_row = 0;
        for (int b = 0; b < n_k; kv_row += chunk_len(kc[b]), b++)
            if (add_chunk_pair(pl, need, qc[a], q_row, kc[b], kv_row) != 0) return -1;
    }
    return 0;
}

enum { NOT_SIDE_BY_SIDE = 0, NEXT_KEYS = 1, NEXT_ROWS = 2 };

/* How b continues a: the same query rows and the next keys, the same keys and
 * the next query rows, or not at all. */
static int side_by_side(const bk_sdpa_seq *a, const bk_sdpa_seq *b)
{
    if (a->q_row == b->q_row && a->q_len == b->q_len && a->kv_row + a->kv_len == b->kv_row)
        return NEXT_KEYS;
    if (a->kv_row == b->kv_row && a->kv_len == b->kv_len && a->q_row + a->q_len == b->q_row)
        return NEXT_ROWS;
    return NOT_SIDE_BY_SIDE;
}

/* Joins one pair of full pieces side by side into the first; 0 when there is
 * none. Zigzag chunk pairs come back together so: a causal off-diagonal pair
 * is the one full half TransformerEngine computes. */
static int join_two_full(piece_list *pl)
{
    for (int x = 0; x < pl->n; x++)
        for (int y = 0; y < pl->n; y++) {
            sdpa_piece *a = &pl->pieces[x], *b = &pl->pieces[y];
            if (x == y || !is_full(a) || !is_full(b)) continue;
            int how = side_by_side(&a->rows, &b->rows);
            if (how == NOT_SIDE_BY_SIDE) continue;
            if (how == NEXT_KEYS)
                a->rows.kv_len += b->rows.kv_len;
            else
                a->rows.q_len += b->rows.q_len;
            memmove(b, b + 1, (size_t)(pl->n - y - 1) * sizeof *b);
            pl->n--;
            return 1;
        }
    return 0;
}

static int rows_disjoint(const bk_sdpa_seq *a, const bk_sdpa_seq *b)
{
    int q = a->q_row + a->q_len <= b->q_row || b->q_row + b->q_len <= a->q_row;
    int kv = a->kv_row + a->kv_len <= b->kv_row || b->kv_row + b->kv_len <= a->kv_row;
    return q && kv;
}

/* Whether x may join group g: it shares no row, on either side, with any
 * member (sdpa.h: the sequences of a call are disjoint). */
static int fits_group(const piece_list *pl, int g, const sdpa_piece *x)
{
    for (int k = 0; k < pl->n; k++)
        if (pl->pieces[k].group == g && !rows_disjoint(&pl->pieces[k].rows, &x->rows)) return 0;
    return 1;
}

/* Each piece into the first group of its band it fits, else a new group. */
static int group_pieces(piece_list *pl)
{
    pl->groups = malloc((size_t)(pl->n > 0 ? pl->n : 1) * sizeof *pl->groups);
    if (!pl->groups) return -1;
    for (int k = 0; k < pl->n; k++) {
        sdpa_piece *x = &pl->pieces[k];
        int g = 0;
        while (g < pl->n_groups &&
               !(band_equal(&pl->groups[g], &x->ragged) && fits_group(pl, g, x)))
            g++;
        if (g == pl->n_groups) pl->groups[pl->n_groups++] = x->ragged;
        x->group = g;
    }
    return 0;
}

static int is_single_pair(const bk_sdpa_seq *s)
{
    return s->q_len == 1 && s->kv_len == 1;
}

/* Members of group g, and how many of them are one query row and one key row. */
static int group_size(const piece_list *pl, int g, int *single_pairs)
{
    int n = 0;
    *single_pairs = 0;
    for (int k = 0; k < pl->n; k++)
        if (pl->pieces[k].group == g) n++, *single_pairs += is_single_pair(&pl->pieces[k].rows);
    return n;
}

/* A group with a piece larger than 1 x 1 that every member of g fits, or -1. */
static int host_group(const piece_list *pl, int g)
{
    for (int h = 0; h < pl->n_groups; h++) {
        int single_pairs, n = group_size(pl, h, &single_pairs);
        if (h == g || single_pairs == n) continue;
        int fits = 1;
        for (int k = 0; k < pl->n && fits; k++)
            if (pl->pieces[k].group == g) fits = fits_group(pl, h, &pl->pieces[k]);
        if (fits) return h;
    }
    return -1;
}

/* A 1 x 1 piece as 1 x 2 (of n_kv >= 2 key rows), the added key excluded by
 * the band: the next key row under a top-left right bound 0, or, where the key
 * is the block's last row, the previous one under a bottom-right left bound 1
 * (with a right bound 0 that excludes nothing: cuDNN before 9.10.2 takes no
 * left bound alone). */
static void widen_single_pair(sdpa_piece *p, int64_t n_kv)
{
    p->rows.kv_len = 2;
    if (p->rows.kv_row + 1 < n_kv) {
        p->dense = (bk_sdpa_band){.align = BK_SDPA_TOP_LEFT, .has_right = 1, .right = 0};
        return;
    }
    p->rows.kv_row--;
    p->dense = (bk_sdpa_band){
        .align = BK_SDPA_BOTTOM_RIGHT, .has_right = 1, .right = 0, .has_left = 1, .left = 1};
}

/* Every member of g widened, each a dense call of its own: the first stays in
 * g, the others take new groups (never more groups than pieces in all). */
static void widen_group(piece_list *pl, int g, int64_t n_kv)
{
    int first = 1;
    for (int k = 0; k < pl->n; k++) {
        sdpa_piece *p = &pl->pieces[k];
        if (p->group != g) continue;
        widen_single_pair(p, n_kv);
        if (!first) p->group = pl->n_groups, pl->groups[pl->n_groups++] = p->dense;
        first = 0;
    }
}

/* cuDNN refuses a call whose every sequence is one query row and one key row
 * (s_q = s_kv = 1). A 1 x 1 sequence is allowed under any band (i = j = 0),
 * so such a group joins a larger call it shares no row with, or else its
 * pieces are widened. 0 (why) on blocks of one row, where neither can be done. */
static int settle_single_pairs(piece_list *pl, int64_t n_kv, char *why, size_t why_len)
{
    for (int g = 0; g < pl->n_groups; g++) {
        int single_pairs, n = group_size(pl, g, &single_pairs);
        if (n == 0 || single_pairs < n) continue;
        int h = host_group(pl, g);
        if (h >= 0) {
            for (int k = 0; k < pl->n; k++)
                if (pl->pieces[k].group == g) pl->pieces[k].group = h;
        } else if (n_kv >= 2) {
            widen_group(pl, g, n_kv);
        } else {
            snprintf(why, why_len,
                     "blocks of one row: cuDNN refuses s_q = s_kv = 1, and there is no key row "
                     "to widen the call with");
            return 0;
        }
    }
    return 1;
}

/* One call per non-empty group: dense with the piece's own band when it has
 * one sequence, ragged with the group's band otherwise. */
static int emit_calls(const piece_list *pl, const bk_sdpa_call *shape, sdpa_calls *out)
{
    out->calls = malloc((size_t)(pl->n_groups > 0 ? pl->n_groups : 1) * sizeof *out->calls);
    out->seqs = malloc((size_t)(pl->n > 0 ? pl->n : 1) * sizeof *out->seqs);
    if (!out->calls || !out->seqs) return -1;
    int n_seqs = 0;
    for (int g = 0; g < pl->n_groups; g++) {
        bk_sdpa_call c = *shape;
        c.seq = out->seqs + n_seqs;
        c.n_seq = 0;
        for (int k = 0; k < pl->n; k++)
            if (pl->pieces[k].group == g) {
                out->seqs[n_seqs++] = pl->pieces[k].rows;
                c.band = pl->pieces[k].dense; /* kept when it is the only one */
                c.n_seq++;
            }
        if (c.n_seq > 1) c.band = pl->groups[g];
        if (c.n_seq > 0) out->calls[out->n_calls++] = c;
    }
    out->mapped = 1;
    return 0;
}

/* 1 with why set when cuDNN's SDPA would refuse these heads (the frontend's
 * checks) or this mask. */
static int refuses(const bk_attn_mask *m, int h_q, int h_kv, int d, float scale, char *why,
                   size_t why_len)
{
    if (m->flags & BK_ATTN_BLOCK_SPARSE)
        snprintf(why, why_len, "a block-sparse mask is no diagonal band: it stays on our kernels");
    else if (d < 8 || d > 128 || d % 8 != 0)
        snprintf(why, why_len, "head dim %d: cuDNN's SDPA takes a multiple of 8 up to 128", d);
    else if (h_q < 1 || h_kv < 1 || h_q % h_kv != 0)
        snprintf(why, why_len, "%d query heads over %d key heads: not a whole group", h_q, h_kv);
    else if (!isfinite(scale) || !(scale > 0))
        snprintf(why, why_len, "softmax scale %g: not finite and > 0", (double)scale);
    else
        return 0;
    return 1;
}

static int map_pieces(piece_list *pl, const attn_need_ctx *need, const seq_layout *l, int q_rank,
                      int k_rank, const bk_sdpa_call *shape, sdpa_calls *out)
{
    if (collect_pieces(pl, need, l, q_rank, k_rank) != 0) return -1;
    while (join_two_full(pl)) continue;
    if (group_pieces(pl) != 0) return -1;
    if (!settle_single_pairs(pl, l->n, out->why, sizeof out->why)) return 0;
    return emit_calls(pl, shape, out);
}

int sdpa_map_block_pair(const attn_need_ctx *need, const seq_layout *l, int q_rank, int k_rank,
                        int h_q, int h_kv, int d, float scale, sdpa_calls *out)
{
    memset(out, 0, sizeof *out);
    if (refuses(&need->mask, h_q, h_kv, d, scale, out->why, sizeof out->why)) return 0;
    bk_sdpa_call shape = {.h_q = h_q, .h_kv = h_kv, .d = d, .scale = scale};
    piece_list pl = {0};
    int rc = map_pieces(&pl, need, l, q_rank, k_rank, &shape, out);
    free(pl.pieces);
    free(pl.groups);
    if (rc != 0) sdpa_calls_free(out);
    return rc;
}

void sdpa_calls_free(sdpa_calls *c)
{
    free(c->calls);
    free(c->seqs);
    c->calls = NULL;
    c->seqs = NULL;
    c->n_calls = 0;
}
