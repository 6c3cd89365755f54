/* synthetic_source.c: the in-memory token source of synthetic tasks; see
 * token_source.h. Each sample, and its documents, are a pure function of
 * (seed, index), so every rank sees the same sequence without communicating. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/data/token_source.h"
#include "util/alloc.h"
#include "util/rng.h"

typedef struct {
    token_source base;
    int copy; /* 1: copy task, 0: counting */
    uint64_t seed;
    int64_t doc_len; /* mean tokens per document; 0: no documents */
    token_shard shard;
} synthetic;

/* Token at global position p (0..seq_len) of sample index. */
static int64_t token_at(const synthetic *s, int64_t index, int64_t seq_len, int64_t p)
{
    uint64_t sample = bu_splitmix64(s->seed ^ bu_splitmix64((uint64_t)index));
    int64_t V = s->base.vocab;
    if (!s->copy) return (int64_t)((sample + (uint64_t)p) % (uint64_t)V);
    int64_t half = (seq_len + 1) / 2;
    if (p >= half) p -= half;
    return 2 + (int64_t)(bu_splitmix64(sample ^ (uint64_t)p) % (uint64_t)(V - 2)); /* 0, 1 reserved */
}

static int synthetic_read(token_source *base, int64_t index, int64_t *tokens, int64_t *labels)
{
    const synthetic *s = (const synthetic *)base;
    const token_shard *sh = &s->shard;
    int64_t seq_len = sh->seq_len, half = (seq_len + 1) / 2, i = 0;
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++) {
            tokens[i] = token_at(s, index, seq_len, p);
            int predictable = !s->copy || p + 1 >= half;
            labels[i] = predictable ? token_at(s, index, seq_len, p + 1) : TOKEN_IGNORE;
        }
    return 0;
}

/* Document lengths uniform in [1, 2 doc_len - 1], drawn in order from a
 * stream of the sample's own (another stream than its tokens'). */
static int synthetic_documents(token_source *base, int64_t index, int32_t *segments)
{
    const synthetic *s = (const synthetic *)base;
    uint64_t stream = bu_splitmix64(s->seed ^ bu_splitmix64((uint64_t)index)) ^ 0x646f63ull;
    uint64_t span = 2 * (uint64_t)s->doc_len - 1;
    int32_t doc = -1;
    int64_t left = 0; /* tokens of the current document still to come */
    for (int64_t p = 0; p <= s->shard.seq_len; p++, left--) {
        if (left == 0) {
            doc++;
            left = 1 + (int64_t)(bu_rng_next(&stream) % span);
        }
        segments[p] = doc;
    }
    return 0;
}

static void synthetic_free(token_source *s) { free(s); }

token_source *synthetic_source_create(const char *task, int vocab, uint64_t seed, int64_t doc_len,
                                      const token_shard *shard, char *err, size_t err_len)
{
    int copy = strcmp(task, "copy") == 0;
    if (!copy && strcmp(task, "counting") != 0) {
        snprintf(err, err_len, "[data] task = '%s': expected copy or counting", task);
        return NULL;
    }
    if (vocab < 3) {
        snprintf(err, err_len, "[model] vocab = %d: synthetic tasks need at least 3 tokens", vocab);
        return NULL;
    }
    synthetic *s = bu_calloc(sizeof *s, "the synthetic source", err, err_len);
    if (!s) return NULL;
    s->base.read = synthetic_read;
    s->base.free = synthetic_free;
    s->base.vocab = vocab;
    s->copy = copy;
    s->seed = seed;
    s->doc_len = doc_len;
    s->shard = *shard;
    if (doc_len > 0) s->base.documents = synthetic_documents;
    return &s->base;
}
