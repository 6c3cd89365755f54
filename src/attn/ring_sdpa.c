/* ring_sdpa.c: the ring's block pairs on SDPA calls (ring_sdpa.h): the calls
 * made and planned at setup, and the few kernels around each call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/arena.h"
#include "kernels/device.h"
#include "src/attn/kernel_status.h"
#include "src/attn/ring_sdpa.h"

struct ring_sdpa {
    ring_sdpa_config cfg;
    sdpa_calls *as_queries; /* [P]: this rank's queries against block k's keys */
    sdpa_calls *as_keys;    /* [P]: block q's queries against this rank's keys */
    bk_queue memory;        /* the queue whose memory holds what follows */
    uint16_t *rows;         /* [n, Hq, d] bf16: a call's block output, or the final O */
    float *stats;           /* the largest call's Stats */
    uint16_t *grads;        /* [n, Hq + 2 Hkv, d] bf16: a call's dQ | dK | dV */
    void *workspace;
    size_t workspace_bytes, stats_floats;
    int borrowed; /* the buffers above are a lender's (ring_sdpa_create) */
};

int ring_sdpa_supported(const ring_sdpa_config *cfg, char *why, size_t why_len)
{
    unsigned f = cfg->need.mask.flags;
    if (f & (BK_ATTN_BLOCK_SPARSE | BK_ATTN_DOCUMENT)) {
        snprintf(why, why_len, "%s masks run on our kernels",
                 f & BK_ATTN_BLOCK_SPARSE ? "block-sparse" : "document");
        return 0;
    }
    if (cfg->d % 8 != 0 || cfg->d > 128) {
        snprintf(why, why_len, "head dim %d: cuDNN's SDPA takes multiples of 8 up to 128", cfg->d);
        return 0;
    }
    return 1;
}

/* Every pair's calls, both ways; -1 when out of memory. */
static int map_pairs(ring_sdpa *rs)
{
    const ring_sdpa_config *c = &rs->cfg;
    int P = c->layout.P;
    rs->as_queries = calloc((size_t)P, sizeof *rs->as_queries);
    rs->as_keys = calloc((size_t)P, sizeof *rs->as_keys);
    if (!rs->as_queries || !rs->as_keys) return -1;
    for (int b = 0; b < P; b++)
        if (sdpa_map_block_pair(&c->need, &c->layout, c->rank, b, c->h_q, c->h_kv, c->d, c->scale,
                                &rs->as_queries[b]) != 0 ||
            sdpa_map_block_pair(&c->need, &c->layout, b, c->rank, c->h_q, c->h_kv, c->d, c->scale,
                                &rs->as_keys[b]) != 0)
            return -1;
    return 0;
}

/* Pair i of the 2P the rank can compute: its queries against block i's keys
 * (i < P), then block i - P's queries against its keys. */
static const sdpa_calls *pair_at(const ring_sdpa *rs, int i)
{
    int P = rs->cfg.layout.P;
    return i < P ? &rs->as_queries[i] : &rs->as_keys[i - P];
}

/* The most Stats floats of any call; and the workspace bound of the backward
 * (the fp32 dQ and delta a call's rows need, as cuDNN's Hopper backward keeps). */
static void call_sizes(const ring_sdpa *rs, size_t *stats_floats, size_t *workspace)
{
    *stats_floats = *workspace = 0;
    for (int b = 0; b < 2 * rs->cfg.layout.P; b++) {
        const sdpa_calls *p = pair_at(rs, b);
        for (int k = 0; p->mapped && k < p->n_calls; k++) {
            size_t s = bk_sdpa_stats_floats(&p->calls[k]);
            if (s > *stats_floats) *stats_floats = s;
            size_t ws = s * ((size_t)rs->cfg.d + 1) * sizeof(float);
            if (ws > *workspace) *workspace = ws;
        }
    }
}

/* bytes as an arena hands them out (kernels/arena.h) */
static size_t piece(size_t bytes, size_t align)
{
    return (bytes + align - 1) / align * align;
}

static size_t row_bytes(const ring_sdpa_config *c, int heads)
{
    return (size_t)c->layout.n * (size_t)heads * (size_t)c->d * 2;
}

static size_t bytes_of(const ring_sdpa *rs, size_t stats_floats, size_t workspace)
{
    const ring_sdpa_config *c = &rs->cfg;
    return piece(row_bytes(c, c->h_q), BK_ARENA_ALIGN) +
           piece(stats_floats * sizeof(float), BK_ARENA_ALIGN) +
           piece(row_bytes(c, c->h_q + 2 * c->h_kv), BK_ARENA_ALIGN) + piece(workspace, BK_ARENA_ALIGN);
}

static ring_sdpa *make_mapped(const ring_sdpa_config *cfg)
{
    ring_sdpa *rs = calloc(1, sizeof *rs);
    if (!rs) return NULL;
    rs->cfg = *cfg;
    if (map_pairs(rs) != 0) {
        ring_sdpa_free(rs);
        return NULL;
    }
    return rs;
}

/* The calls of cfg mapped, and the sizes of what they need. */
static ring_sdpa *sized(const ring_sdpa_config *cfg, size_t *stats_floats, size_t *workspace)
{
    ring_sdpa *rs = make_mapped(cfg);
    if (rs) call_sizes(rs, stats_floats, workspace);
    return rs;
}

/* Whether a lender's buffers, made for its own calls, hold those of rs. */
static int holds(const ring_sdpa *lender, const ring_sdpa *rs, size_t stats_floats,
                 size_t workspace)
{
    const ring_sdpa_config *a = &lender->cfg, *b = &rs->cfg;
    return a->layout.n >= b->layout.n && a->h_q == b->h_q && a->h_kv == b->h_kv &&
           a->d == b->d && lender->stats_floats >= stats_floats &&
           lender->workspace_bytes >= workspace;
}

size_t ring_sdpa_bytes(const ring_sdpa_config *cfg, const ring_sdpa_config *lender_cfg)
{
    size_t stats_floats, workspace, lent_stats, lent_workspace;
    ring_sdpa *rs = sized(cfg, &stats_floats, &workspace);
    ring_sdpa *lender = lender_cfg ? sized(lender_cfg, &lent_stats, &lent_workspace) : NULL;
    if (lender) lender->stats_floats = lent_stats, lender->workspace_bytes = lent_workspace;
    size_t bytes = !rs                                              ? 0
                   : lender && holds(lender, rs, stats_floats, workspace) ? 0
                                                                  : bytes_of(rs, stats_floats, workspace);
    ring_sdpa_free(rs);
    ring_sdpa_free(lender);
    return bytes;
}

/* The plans of every mapped call, forward and backward. */
static bk_status prepare_all(ring_sdpa *rs, size_t *workspace)
{
    *workspace = 0;
    for (int b = 0; b < 2 * rs->cfg.layout.P; b++) {
        const sdpa_calls *p = pair_at(rs, b);
        size_t ws = 0;
        bk_status st = p->mapped ? bk_sdpa_prepare(p->calls, p->n_calls, 1, &ws) : BK_OK;
        if (st != BK_OK) return st;
        if (ws > *workspace) *workspace = ws;
    }
    return BK_OK;
}

static int take(ring_sdpa *rs, size_t bytes, void **p)
{
    return bytes == 0 || bk_alloc(&rs->memory, bytes, p) == BK_OK ? 0 : -1;
}

/* The lender's buffers as these calls' own. */
static void borrow(ring_sdpa *rs, const ring_sdpa *lender)
{
    rs->rows = lender->rows, rs->stats = lender->stats, rs->grads = lender->grads;
    rs->workspace = lender->workspace;
    rs->stats_floats = lender->stats_floats, rs->workspace_bytes = lender->workspace_bytes;
    rs->borrowed = 1;
}

ring_sdpa *ring_sdpa_create(const ring_sdpa_config *cfg, const bk_queue *q,
                            const ring_sdpa *lender, char *why, size_t why_len)
{
    ring_sdpa *rs = make_mapped(cfg);
    if (!rs) {
        snprintf(why, why_len, "out of memory mapping the ring's pairs to SDPA calls");
        return NULL;
    }
    rs->memory = *q;
    size_t bound;
    call_sizes(rs, &rs->stats_floats, &bound);
    if (prepare_all(rs, &rs->workspace_bytes) != BK_OK) {
        snprintf(why, why_len, "%s", bk_kernel_error());
        ring_sdpa_free(rs);
        return NULL;
    }
    if (lender && holds(lender, rs, rs->stats_floats, rs->workspace_bytes)) {
        borrow(rs, lender);
        return rs;
    }
    const ring_sdpa_config *c = &rs->cfg;
    if (take(rs, row_bytes(c, c->h_q), (void **)&rs->rows) != 0 ||
        take(rs, rs->stats_floats * sizeof(float), (void **)&rs->stats) != 0 ||
        take(rs, row_bytes(c, c->h_q + 2 * c->h_kv), (void **)&rs->grads) != 0 ||
        take(rs, rs->workspace_bytes, &rs->workspace) != 0) {
        snprintf(why, why_len, "out of memory: %zu bytes for the SDPA calls' buffers",
                 bytes_of(rs, rs->stats_floats, rs->workspace_bytes));
        ring_sdpa_free(rs);
        return NULL;
    }
    return rs;
}

void ring_sdpa_free(ring_sdpa *rs)
{
    if (!rs) return;
    for (int b = 0; b < rs->cfg.layout.P; b++) {
        if (rs->as_queries) sdpa_calls_free(&rs->as_queries[b]);
        if (rs->as_keys) sdpa_calls_free(&rs->as_keys[b]);
    }
    free(rs->as_queries);
    free(rs->as_keys);
    void *bufs[4] = {rs->rows, rs->stats, rs->grads, rs->workspace};
    for (int k = 0; k < 4 && !rs->borrowed; k++)
        if (bufs[k]) bk_free(&rs->memory, bufs[k]);
    free(rs);
}

const sdpa_calls *ring_sdpa_pair(const ring_sdpa *rs, int q_rank, int k_rank)
{
    if (!rs) return NULL;
    const sdpa_calls *p = q_rank == rs->cfg.rank ? &rs->as_queries[k_rank]
                          : k_rank == rs->cfg.rank ? &rs->as_keys[q_rank]
                                                   : NULL;
    return p && p->mapped ? p : NULL;
}

bt_status ring_sdpa_forward(ring_sdpa *rs, const bk_queue *q, const sdpa_calls *pair,
                            const uint16_t *Q, const uint16_t *K, const uint16_t *V, float *O,
                            float *lse)
{
    int64_t n = rs->cfg.layout.n;
    for (int k = 0; k < pair->n_calls; k++) {
        const bk_sdpa_call *c = &pair->calls[k];
        CHECK_KERNEL(bk_sdpa_fwd(q, c, Q, K, V, rs->rows, rs->stats, rs->workspace,
                                 rs->workspace_bytes));
        CHECK_KERNEL(bk_attn_merge_sdpa(q, c, n, rs->cfg.d, O, lse, rs->rows, rs->stats));
    }
    return BT_OK;
}

bt_status ring_sdpa_backward_begin(ring_sdpa *rs, const bk_queue *q, const float *O)
{
    const ring_sdpa_config *c = &rs->cfg;
    return attn_kernel_status(
        bk_round_bf16(q, c->layout.n * c->h_q * c->d, O, rs->rows));
}

/* y += x over the rows [row, row + len) of [_, heads, d] buffers. */
static bk_status add_rows(const bk_queue *q, int64_t row, int64_t len, int heads, int d,
                          const uint16_t *x, float *y)
{
    size_t at = (size_t)row * (size_t)heads * (size_t)d;
    return bk_add_bf16(q, len * heads * d, x + at, y + at);
}

bt_status ring_sdpa_backward(ring_sdpa *rs, const bk_queue *q, const sdpa_calls *pair,
                             const uint16_t *Q, const uint16_t *K, const uint16_t *V,
                             const uint16_t *dO, const float *lse, const float *delta, float *dQ,
                             float *dK, float *dV)
{
    const ring_sdpa_config *cf = &rs->cfg;
    int64_t n = cf->layout.n;
    uint16_t *gq = rs->grads, *gk = gq + (size_t)(n * cf->h_q * cf->d),
             *gv = gk + (size_t)(n * cf->h_kv * cf->d);
    if (delta) /* the Q-side: the visiting queries' O' (sdpa.h), for cuDNN's rowsum */
        CHECK_KERNEL(bk_attn_surrogate_o(q, n, cf->h_q, cf->d, dO, delta, rs->rows));
    for (int k = 0; k < pair->n_calls; k++) {
        const bk_sdpa_call *c = &pair->calls[k];
        CHECK_KERNEL(bk_attn_pack_stats(q, c, n, lse, rs->stats));
        CHECK_KERNEL(bk_sdpa_bwd(q, c, Q, K, V, rs->rows, dO, rs->stats, gq, gk, gv,
                                 rs->workspace, rs->workspace_bytes));
        for (int s = 0; s < c->n_seq; s++) {
            const bk_sdpa_seq *x = &c->seq[s];
            CHECK_KERNEL(add_rows(q, x->q_row, x->q_len, cf->h_q, cf->d, gq, dQ));
            CHECK_KERNEL(add_rows(q, x->kv_row, x->kv_len, cf->h_kv, cf->d, gk, dK));
            CHECK_KERNEL(add_rows(q, x->kv_row, x->kv_len, cf->h_kv, cf->d, gv, dV));
        }
    }
    return BT_OK;
}
