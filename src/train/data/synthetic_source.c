/* synthetic_source.c: the in-memory token source of synthetic tasks; see
 * token_source.h. Each sample, and its documents, are a pure function of
 * (seed, index), so every rank sees the same sequence without communicating.
 * Copy and counting give the token at any position directly; a recall sample
 * (recall.h) is made whole and this rank's positions taken from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/data/token_source.h"
#include "util/alloc.h"
#include "util/rng.h"

typedef struct {
    token_source base;
    synthetic_task task;
    uint64_t seed;
    int64_t doc_len; /* mean tokens per document; 0: no documents */
    token_shard shard;
    recall_shape recall;
    int64_t *sample_tokens, *sample_labels; /* recall: the whole sample [seq_len] each */
    recall_query *queries;                  /* recall: [queries] */
} synthetic;

/* Token at global position p (0..seq_len) of sample index (copy, counting). */
static int64_t token_at(const synthetic *s, int64_t index, int64_t seq_len, int64_t p)
{
    uint64_t sample = bu_splitmix64(s->seed ^ bu_splitmix64((uint64_t)index));
    int64_t V = s->base.vocab;
    if (s->task == TASK_COUNTING) return (int64_t)((sample + (uint64_t)p) % (uint64_t)V);
    int64_t half = (seq_len + 1) / 2;
    if (p >= half) p -= half;
    return 2 + (int64_t)(bu_splitmix64(sample ^ (uint64_t)p) % (uint64_t)(V - 2)); /* 0, 1 reserved */
}

/* A recall sample is made whole; this rank's positions are taken from it.
 * 0, or -1 saying so on stderr. */
static int read_recall(synthetic *s, int64_t index, int64_t *tokens, int64_t *labels)
{
    const token_shard *sh = &s->shard;
    if (recall_sample(&s->recall, s->seed, index, s->sample_tokens, s->sample_labels,
                      s->queries) != 0) {
        fprintf(stderr, "burst train: recall sample %lld: out of memory\n", (long long)index);
        return -1;
    }
    int64_t i = 0;
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++) {
            tokens[i] = s->sample_tokens[p];
            labels[i] = s->sample_labels[p];
        }
    return 0;
}

static int synthetic_read(token_source *base, int64_t index, int64_t *tokens, int64_t *labels)
{
    synthetic *s = (synthetic *)base;
    if (s->task == TASK_RECALL) return read_recall(s, index, tokens, labels);
    const token_shard *sh = &s->shard;
    int64_t seq_len = sh->seq_len, half = (seq_len + 1) / 2, i = 0;
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++) {
            tokens[i] = token_at(s, index, seq_len, p);
            int predictable = s->task == TASK_COUNTING || p + 1 >= half;
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

static void synthetic_free(token_source *base)
{
    synthetic *s = (synthetic *)base;
    free(s->sample_tokens), free(s->sample_labels), free(s->queries);
    free(s);
}

uint64_t synthetic_heldout_seed(uint64_t seed)
{
    return seed ^ 0x5bd1e9955bd1e995ull; /* never seed itself */
}

token_source *synthetic_source_create(const synthetic_spec *spec, int vocab, uint64_t seed,
                                      const token_shard *shard, char *err, size_t err_len)
{
    synthetic_task kind = spec->task;
    if (kind != TASK_COPY && kind != TASK_COUNTING && kind != TASK_RECALL) {
        snprintf(err, err_len, "[data] task %d: not a synthetic task", (int)kind);
        return NULL;
    }
    if (vocab < 3) {
        snprintf(err, err_len, "[model] vocab = %d: synthetic tasks need at least 3 tokens", vocab);
        return NULL;
    }
    recall_shape shape = spec->recall;
    shape.seq_len = shard->seq_len;
    if (kind == TASK_RECALL && recall_check(&shape, vocab, err, err_len) != 0) return NULL;
    synthetic *s = bu_calloc(sizeof *s, "the synthetic source", err, err_len);
    if (!s) return NULL;
    s->base.read = synthetic_read;
    s->base.free = synthetic_free;
    s->base.vocab = vocab;
    s->task = kind;
    s->seed = seed;
    s->doc_len = spec->doc_len;
    s->shard = *shard;
    if (spec->doc_len > 0) s->base.documents = synthetic_documents;
    if (kind != TASK_RECALL) return &s->base;
    s->recall = shape;
    size_t sample_bytes = (size_t)shard->seq_len * sizeof(int64_t);
    if (!(s->sample_tokens = bu_calloc(sample_bytes, "a recall sample", err, err_len)) ||
        !(s->sample_labels = bu_calloc(sample_bytes, "a recall sample", err, err_len)) ||
        !(s->queries = bu_calloc((size_t)shape.queries * sizeof(recall_query),
                                 "a recall sample's queries", err, err_len))) {
        synthetic_free(&s->base);
        return NULL;
    }
    return &s->base;
}
