/* attn_need.c: see attn_need.h. */
#include <stdio.h>

#include "src/attn/attn_need.h"

int attn_need_validate(const attn_need_ctx *c, char *err, size_t err_len)
{
    const bk_attn_mask *m = &c->mask;
    if ((m->flags & BK_ATTN_DOCUMENT) && !c->segments) {
        snprintf(err, err_len, "document mask without segment ids");
        return -1;
    }
    if (m->flags & BK_ATTN_DOCUMENT)
        for (int64_t i = 1; i < c->N; i++)
            if (c->segments[i] < c->segments[i - 1]) {
                snprintf(err, err_len,
                         "segment ids must not decrease along the sequence (position %lld: %d "
                         "after %d)",
                         (long long)i, c->segments[i], c->segments[i - 1]);
                return -1;
            }
    if ((m->flags & BK_ATTN_BLOCK_SPARSE) && (!m->block_bits || m->block_size < 1)) {
        snprintf(err, err_len, "block-sparse mask without a bitmap or block size");
        return -1;
    }
    return 0;
}

/* End of the run starting at p (< end): the next document or sparse-block boundary. */
static int64_t run_end(const attn_need_ctx *c, int64_t p, int64_t end)
{
    int64_t e = end;
    if (c->mask.flags & BK_ATTN_BLOCK_SPARSE) {
        int64_t next = (p / c->mask.block_size + 1) * c->mask.block_size;
        if (next < e) e = next;
    }
    if (c->mask.flags & BK_ATTN_DOCUMENT) {
        int32_t s = c->segments[p];
        /* Binary search for the first position in (p, e) with another segment. */
        int64_t lo = p + 1, hi = e;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (c->segments[mid] == s) lo = mid + 1;
            else hi = mid;
        }
        e = lo;
    }
    return e;
}

/* Keys allowed for query q by the positional rules: [lo, hi]. */
static void key_range(const bk_attn_mask *m, int64_t q, int64_t *lo, int64_t *hi)
{
    *lo = INT64_MIN / 4;
    *hi = INT64_MAX / 4;
    if ((m->flags & BK_ATTN_WINDOW) && m->window_left >= 0) *lo = q - m->window_left;
    if ((m->flags & BK_ATTN_WINDOW) && m->window_right >= 0) *hi = q + m->window_right;
    if ((m->flags & BK_ATTN_CAUSAL) && q < *hi) *hi = q;
}

/* Pairs between one query run [a, b) and one key run [c0, c1), both of constant
 * document and sparse block. The allowed key interval of q moves right with q,
 * so the union over the run is [lo(a), hi(b-1)]: existence is O(1). */
static int64_t run_pairs(const attn_need_ctx *c, int64_t a, int64_t b, int64_t c0, int64_t c1,
                         int count_all)
{
    const bk_attn_mask *m = &c->mask;
    if ((m->flags & BK_ATTN_DOCUMENT) && c->segments[a] != c->segments[c0]) return 0;
    if ((m->flags & BK_ATTN_BLOCK_SPARSE) && !bk_attn_block_bit(m, a, c0)) return 0;
    int64_t lo, hi, lo_last, hi_last;
    key_range(m, a, &lo, &hi);
    key_range(m, b - 1, &lo_last, &hi_last);
    int64_t first = lo > c0 ? lo : c0, last = hi_last < c1 - 1 ? hi_last : c1 - 1;
    if (first > last) return 0;
    if (!count_all) return 1;
    int64_t total = 0;
    for (int64_t q = a; q < b; q++) {
        key_range(m, q, &lo, &hi);
        int64_t f = lo > c0 ? lo : c0, l = hi < c1 - 1 ? hi : c1 - 1;
        if (l >= f) total += l - f + 1;
    }
    return total;
}

int64_t attn_need_pairs(const attn_need_ctx *c, const seq_chunk *q_chunks, int n_q_chunks,
                        const seq_chunk *k_chunks, int n_k_chunks, int count_all)
{
    int64_t total = 0;
    for (int i = 0; i < n_q_chunks; i++)
        for (int64_t a = q_chunks[i].begin; a < q_chunks[i].end;) {
            int64_t b = run_end(c, a, q_chunks[i].end);
            for (int j = 0; j < n_k_chunks; j++)
                for (int64_t k0 = k_chunks[j].begin; k0 < k_chunks[j].end;) {
                    int64_t k1 = run_end(c, k0, k_chunks[j].end);
                    total += run_pairs(c, a, b, k0, k1, count_all);
                    if (total && !count_all) return 1;
                    k0 = k1;
                }
            a = b;
        }
    return total;
}
