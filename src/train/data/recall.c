/* recall.c: the samples of the associative recall task; see recall.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/train/data/recall.h"
#include "src/train/data/token_source.h"
#include "util/rng.h"

/* The pairs stand in two-token slots of the first half [0, half); queries
 * anywhere in the second half [half, seq_len). */
static int64_t first_half(const recall_shape *s)
{
    return s->seq_len / 2;
}
static int64_t pair_slots(const recall_shape *s)
{
    return first_half(s) / 2;
}

int recall_check(const recall_shape *s, int vocab, char *err, size_t err_len)
{
    int64_t tokens = 1 + (int64_t)s->keys * (1 + (int64_t)s->values);
    if (s->pairs > s->keys)
        snprintf(err, err_len,
                 "[data] recall_pairs = %d exceeds [data] recall_keys = %d: the pairs "
                 "of a sample have distinct keys",
                 s->pairs, s->keys);
    else if (s->pairs > pair_slots(s))
        snprintf(err, err_len,
                 "[data] recall_pairs = %d: the first half of [data] seq_len = %" PRId64
                 " holds at most %" PRId64 " pairs",
                 s->pairs, s->seq_len, pair_slots(s));
    else if (s->queries > s->seq_len - first_half(s))
        snprintf(err, err_len,
                 "[data] recall_queries = %d: the second half of [data] seq_len = %" PRId64
                 " holds at most %" PRId64 " queries",
                 s->queries, s->seq_len, s->seq_len - first_half(s));
    else if (tokens > vocab)
        snprintf(err, err_len,
                 "[data] recall_keys = %d with recall_values = %d each needs %" PRId64
                 " tokens (the filler, the keys, their values), more than [model] vocab = %d",
                 s->keys, s->values, tokens, vocab);
    else
        return 0;
    return -1;
}

/* k of n in increasing order into chosen[k] (selection sampling: each i is
 * taken with probability still needed / still left). */
static void choose_sorted(uint64_t *st, int64_t n, int64_t k, int64_t *chosen)
{
    for (int64_t i = 0, got = 0; got < k; i++)
        if ((int64_t)(bu_rng_next(st) % (uint64_t)(n - i)) < k - got) chosen[got++] = i;
}

/* a [n] = a seeded permutation of 0..n-1 in its first k entries (partial Fisher-Yates). */
static void shuffle_prefix(uint64_t *st, int64_t *a, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n; i++) a[i] = i;
    for (int64_t i = 0; i < k; i++) {
        int64_t j = bu_rng_range(st, i, n - 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Pair p (key key[p], value value[p]) at slot[p], into tokens. */
static void write_pairs(const recall_shape *s, const int64_t *slot, const int64_t *key,
                        const int64_t *value, int64_t *tokens)
{
    for (int64_t i = 0; i < s->seq_len; i++) tokens[i] = RECALL_FILLER;
    for (int64_t p = 0; p < s->pairs; p++) {
        tokens[2 * slot[p]] = recall_key_token(key[p]);
        tokens[2 * slot[p] + 1] = value[p];
    }
}

int recall_sample(const recall_shape *s, uint64_t seed, int64_t index, int64_t *tokens,
                  int64_t *labels, recall_query *queries)
{
    uint64_t st = bu_splitmix64(seed ^ bu_splitmix64((uint64_t)index));
    int64_t P = s->pairs, Q = s->queries, K = s->keys, V = s->values, half = first_half(s);
    /* scratch: pair slots [P], query offsets into the second half [Q], key
     * permutation [K] (pair p has key key[p]), values [P] */
    int64_t *slot = malloc((size_t)(2 * P + Q + K) * sizeof(int64_t));
    if (!slot) return -1;
    int64_t *query_at = slot + P, *key = query_at + Q, *value = key + K;
    choose_sorted(&st, pair_slots(s), P, slot);
    choose_sorted(&st, s->seq_len - half, Q, query_at);
    shuffle_prefix(&st, key, K, P);
    for (int64_t p = 0; p < P; p++)
        value[p] = recall_value_token(s, key[p], bu_rng_range(&st, 0, V - 1));

    if (tokens) write_pairs(s, slot, key, value, tokens);
    for (int64_t i = 0; labels && i < s->seq_len; i++) labels[i] = TOKEN_IGNORE;
    for (int64_t q = 0; q < Q; q++) {
        int64_t p = bu_rng_range(&st, 0, P - 1), pos = half + query_at[q];
        queries[q] = (recall_query){.query_pos = pos, .key_pos = 2 * slot[p], .answer = value[p]};
        if (tokens) tokens[pos] = recall_key_token(key[p]);
        if (labels) labels[pos] = value[p];
    }
    free(slot);
    return 0;
}
