/* recall.h: the multi-query associative recall task. A sample of seq_len
 * tokens holds, in its first half, `pairs` key-value pairs (a key token
 * followed by its value) at seeded two-token slots, and in its second half
 * `queries` keys of those pairs again, at seeded positions. The label of a
 * query is its pair's value; every other label is ignored. The second half
 * holds no value, so only attention from the query back to its pair, half a
 * sequence or more away, predicts the answer.
 *
 * Each of the `keys` keys has `values` values of its own, and a sample binds
 * each key it uses to one of them, drawn at random: guessing gives 1 / values.
 * Own value ranges let one attention hop find the pair's value from the
 * query (the value shows which key it belongs to); with one value range
 * shared by all keys the answer is only found through the key before it,
 * a two-layer circuit the quickstart's model did not learn in minutes.
 *
 * Tokens: 0 fills the positions that hold nothing, keys are [1, 1 + keys),
 * and key k's values follow: [1 + keys + k * values, 1 + keys + (k + 1) * values).
 * A sample is a pure function of (seed, index). */
#ifndef BURST_TRAIN_DATA_RECALL_H
#define BURST_TRAIN_DATA_RECALL_H

#include <stddef.h>
#include <stdint.h>

enum { RECALL_FILLER = 0 };

typedef struct {
    int64_t seq_len;
    int pairs;   /* per sample, distinct keys: pairs <= keys */
    int queries; /* per sample, each asking one of the pairs (repeats allowed) */
    int keys;    /* key tokens */
    int values;  /* values of each key */
} recall_shape;

/* One query of a sample: where its key is asked, where its pair starts (the
 * key; the value follows), and the answer (the label at query_pos). */
typedef struct {
    int64_t query_pos, key_pos, answer;
} recall_query;

/* The token of key k (0 <= k < keys) and of its value v (0 <= v < values). */
static inline int64_t recall_key_token(int64_t k)
{
    return 1 + k;
}
static inline int64_t recall_value_token(const recall_shape *s, int64_t k, int64_t v)
{
    return 1 + s->keys + k * s->values + v;
}

/* Checks the shape against the vocabulary; 0, or -1 with a message naming the
 * [data] key (or [model] vocab) at fault. */
int recall_check(const recall_shape *s, int vocab, char *err, size_t err_len);

/* Sample `index` of seed: tokens [seq_len] and labels [seq_len] (label =
 * value at a query, TOKEN_IGNORE elsewhere; either may be NULL), and its
 * queries [queries] in order of position. 0, or -1 when its scratch (2 pairs
 * + queries + keys integers) could not be allocated. */
int recall_sample(const recall_shape *s, uint64_t seed, int64_t index, int64_t *tokens,
                  int64_t *labels, recall_query *queries);

#endif
