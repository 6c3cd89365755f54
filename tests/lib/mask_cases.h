/* mask_cases.h: the attention masks the kernel tests cycle through, on the
 * host (tests/kernels/test_attention.c) and on the device
 * (tests/kernels/test_dev_attention.c), drawn alike from a test's random
 * stream: the kinds and their names, the global positions of a query block
 * and a key/value block, and a mask of a kind with the documents that give
 * the segment ids. */
#ifndef BURST_TESTS_MASK_CASES_H
#define BURST_TESTS_MASK_CASES_H

#include <stdint.h>
#include <stdlib.h>

#include "kernels/attention.h"
#include "tests/lib/arrays.h"
#include "tests/lib/rng.h"

/* Kinds of mask the tests cycle through. */
enum {
    MASK_NONE,
    MASK_CAUSAL,
    MASK_WINDOW_CAUSAL, /* window, left only, right = 0 */
    MASK_WINDOW_BOTH,   /* window both sides, not causal */
    MASK_DOC,           /* documents, not causal */
    MASK_DOC_CAUSAL,
    MASK_SPARSE,
    MASK_SPARSE_CAUSAL,
    MASK_KINDS
};

static inline const char *mask_kind_name(int kind)
{
    static const char *const names[MASK_KINDS] = {
        "none",     "causal",          "window-causal", "window-both",
        "document", "document-causal", "block-sparse",  "block-sparse-causal"};
    return names[kind];
}

/* A mask over global positions [0, span) and the segment ids it implies:
 * positions fall in documents of doc_len, whose ids repeat every doc_cycle
 * documents when doc_cycle > 0 (non-monotone documents). */
typedef struct {
    int kind;
    bk_attn_mask mask;
    int64_t doc_len;
    int doc_cycle;
    uint64_t *bits; /* the block-sparse kinds' bitmap (the caller frees it), else NULL */
    int64_t n_words;
} mask_case;

/* Positions of n_q queries (qp) and n_kv keys (kp) in [0, *span): layout 0
 * contiguous (queries at the end, as after a prefix), 1 random distinct
 * positions in any order, 2 two zigzag chunks each. */
static inline void mask_case_positions(uint64_t *r, int layout, int64_t n_q, int64_t n_kv,
                                       int64_t *qp, int64_t *kp, int64_t *span)
{
    int64_t n = n_q > n_kv ? n_q : n_kv;
    if (layout == 0) {
        for (int64_t j = 0; j < n_kv; j++) kp[j] = j;
        for (int64_t i = 0; i < n_q; i++) qp[i] = (n_kv > n_q ? n_kv - n_q : 0) + i;
        *span = n;
    } else if (layout == 1) {
        int64_t total = 2 * n + 3;
        int64_t *perm = test_alloc((size_t)total, sizeof *perm);
        for (int64_t i = 0; i < total; i++) perm[i] = i;
        for (int64_t i = total - 1; i > 0; i--) {
            int64_t j = test_rng_below(r, i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < n_q; i++) qp[i] = perm[i];
        for (int64_t j = 0; j < n_kv; j++) kp[j] = perm[(j + total / 3) % total];
        free(perm);
        *span = total;
    } else {
        /* zigzag: first half of the rows from the start of the sequence, the rest
         * from its end */
        int64_t total = 2 * n;
        for (int64_t i = 0; i < n_q; i++) qp[i] = i < n_q / 2 ? i : total - n_q + i;
        for (int64_t j = 0; j < n_kv; j++) kp[j] = j < n_kv / 2 ? j : total - n_kv + j;
        *span = total;
    }
}

/* A mask of kind over positions [0, span): its documents drawn from *r first,
 * then what the kind draws (window sizes; block size, count and bitmap). */
static inline mask_case mask_case_draw(uint64_t *r, int kind, int64_t span)
{
    mask_case c = {.kind = kind, .mask = bk_attn_mask_none()};
    c.doc_len = 1 + test_rng_below(r, 40);
    c.doc_cycle = test_rng_below(r, 3) == 0 ? 3 : 0;
    switch (kind) {
    case MASK_CAUSAL:
        c.mask = bk_attn_mask_causal();
        break;
    case MASK_WINDOW_CAUSAL:
        c.mask = bk_attn_mask_window(test_rng_below(r, 80), 0);
        break;
    case MASK_WINDOW_BOTH:
        c.mask = bk_attn_mask_window(test_rng_below(r, 50), test_rng_below(r, 30));
        break;
    case MASK_DOC:
    case MASK_DOC_CAUSAL:
        c.mask = bk_attn_mask_document(kind == MASK_DOC_CAUSAL);
        break;
    case MASK_SPARSE:
    case MASK_SPARSE_CAUSAL: {
        static const int64_t sizes[] = {16, 64, 100, 7};
        int64_t bs = sizes[test_rng_below(r, 4)], nb = (span + bs - 1) / bs + test_rng_below(r, 2);
        c.n_words = (nb * nb + 63) / 64;
        c.bits = test_alloc((size_t)c.n_words, sizeof *c.bits);
        for (int64_t b = 0; b < nb * nb; b++)
            if (test_rng_below(r, 2)) c.bits[b / 64] |= 1ULL << (b % 64);
        c.mask = bk_attn_mask_block_sparse(c.bits, bs, nb);
        if (kind == MASK_SPARSE_CAUSAL) c.mask.flags |= BK_ATTN_CAUSAL;
        break;
    }
    default:
        break;
    }
    return c;
}

/* The segment id of position pos under c's documents. */
static inline int32_t mask_case_segment(const mask_case *c, int64_t pos)
{
    int64_t seg = pos / c->doc_len;
    return (int32_t)(c->doc_cycle ? seg % c->doc_cycle : seg);
}

#endif
