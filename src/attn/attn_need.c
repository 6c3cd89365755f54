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

int64_t attn_need_document_end(const attn_need_ctx *c, int64_t p, int64_t end)
{
    int32_t s = c->segments[p];
    int64_t lo = p + 1, hi = end;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->segments[mid] == s) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The first position of p's document (binary search below p). */
static int64_t document_start(const attn_need_ctx *c, int64_t p)
{
    int32_t s = c->segments[p];
    int64_t lo = 0, hi = p;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c->segments[mid] == s) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* End of the run starting at p (< end): the next document or sparse-block boundary. */
static int64_t run_end(const attn_need_ctx *c, int64_t p, int64_t end)
{
    int64_t e = end;
    if (c->mask.flags & BK_ATTN_BLOCK_SPARSE) {
        int64_t next = (p / c->mask.block_size + 1) * c->mask.block_size;
        if (next < e) e = next;
    }
    if (c->mask.flags & BK_ATTN_DOCUMENT) e = attn_need_document_end(c, p, e);
    return e;
}

void attn_need_key_range(const bk_attn_mask *m, int64_t q, int64_t *lo, int64_t *hi)
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
    attn_need_key_range(m, a, &lo, &hi);
    attn_need_key_range(m, b - 1, &lo_last, &hi_last);
    int64_t first = lo > c0 ? lo : c0, last = hi_last < c1 - 1 ? hi_last : c1 - 1;
    if (first > last) return 0;
    if (!count_all) return 1;
    /* every query of the run sees every key of it: the first query's interval
     * reaches the last key, the last query's reaches the first */
    if (hi >= c1 - 1 && lo_last <= c0) return (b - a) * (c1 - c0);
    int64_t total = 0;
    for (int64_t q = a; q < b; q++) {
        attn_need_key_range(m, q, &lo, &hi);
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

/* The first key block in [kb, kb_end) that query block qb may see, or kb_end:
 * the bitmap's row read 64 blocks at a time. */
static int64_t next_key_block(const bk_attn_mask *m, int64_t qb, int64_t kb, int64_t kb_end)
{
    int64_t row = qb * m->n_blocks;
    for (int64_t bit = row + kb, stop = row + kb_end; bit < stop;) {
        uint64_t word = m->block_bits[bit >> 6] >> (bit & 63);
        if (word) {
            bit += __builtin_ctzll(word);
            return bit < stop ? bit - row : kb_end;
        }
        bit = (bit | 63) + 1;
    }
    return kb_end;
}

/* The keys [*k0, *k1) that some query of the run [a, b) may see by position
 * and document (the allowed intervals move right with the query). */
static void run_reach(const attn_need_ctx *c, int64_t a, int64_t b, int64_t *k0, int64_t *k1)
{
    int64_t lo, hi, lo_last, hi_last;
    attn_need_key_range(&c->mask, a, &lo, &hi);
    attn_need_key_range(&c->mask, b - 1, &lo_last, &hi_last);
    *k0 = lo > 0 ? lo : 0;
    *k1 = hi_last < c->N - 1 ? hi_last + 1 : c->N;
    if (!(c->mask.flags & BK_ATTN_DOCUMENT)) return;
    int64_t first = document_start(c, a), end = attn_need_document_end(c, a, c->N);
    if (first > *k0) *k0 = first;
    if (end < *k1) *k1 = end;
}

int64_t attn_need_sequence_pairs(const attn_need_ctx *c)
{
    const bk_attn_mask *m = &c->mask;
    int sparse = (m->flags & BK_ATTN_BLOCK_SPARSE) != 0;
    int64_t total = 0;
    for (int64_t a = 0, b; a < c->N; a = b) {
        b = run_end(c, a, c->N);
        int64_t k0, k1;
        run_reach(c, a, b, &k0, &k1);
        if (k0 >= k1) continue;
        if (!sparse) { /* one document: the reach is one run of keys */
            total += run_pairs(c, a, b, k0, k1, 1);
            continue;
        }
        int64_t bs = m->block_size, qb = a / bs;
        if (qb >= m->n_blocks) break; /* positions past the bitmap see nothing */
        int64_t kb_end = (k1 - 1) / bs + 1 < m->n_blocks ? (k1 - 1) / bs + 1 : m->n_blocks;
        for (int64_t kb = next_key_block(m, qb, k0 / bs, kb_end); kb < kb_end;
             kb = next_key_block(m, qb, kb + 1, kb_end)) {
            int64_t c0 = kb * bs > k0 ? kb * bs : k0, c1 = (kb + 1) * bs < k1 ? (kb + 1) * bs : k1;
            total += run_pairs(c, a, b, c0, c1, 1);
        }
    }
    return total;
}
