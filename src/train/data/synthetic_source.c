/* synthetic_source.c: the in-memory token source of synthetic tasks; see
 * token_source.h. Each sample is a pure function of (seed, index), so every
 * rank sees the same sequence without communicating. Copy and counting give
 * the token at any position directly; a recall sample (recall.h) is made
 * whole and this rank's positions taken from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/data/token_source.h"
#include "util/rng.h"

typedef enum { TASK_COUNTING, TASK_COPY, TASK_RECALL } synthetic_task;

typedef struct {
    token_source base;
    synthetic_task task;
    uint64_t seed;
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

static int synthetic_read(token_source *base, int64_t index, int64_t *tokens, int64_t *labels)
{
    synthetic *s = (synthetic *)base;
    const token_shard *sh = &s->shard;
    int64_t seq_len = sh->seq_len, half = (seq_len + 1) / 2, i = 0;
    if (s->task == TASK_RECALL)
        recall_sample(&s->recall, s->seed, index, s->sample_tokens, s->sample_labels, s->queries);
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++) {
            if (s->task == TASK_RECALL) {
                tokens[i] = s->sample_tokens[p];
                labels[i] = s->sample_labels[p];
                continue;
            }
            tokens[i] = token_at(s, index, seq_len, p);
            int predictable = s->task == TASK_COUNTING || p + 1 >= half;
            labels[i] = predictable ? token_at(s, index, seq_len, p + 1) : TOKEN_IGNORE;
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

token_source *synthetic_source_create(const char *task, const recall_shape *recall, int vocab,
                                      uint64_t seed, const token_shard *shard, char *err,
                                      size_t err_len)
{
    synthetic_task kind = strcmp(task, "copy") == 0     ? TASK_COPY
                          : strcmp(task, "recall") == 0 ? TASK_RECALL
                                                        : TASK_COUNTING;
    if (kind == TASK_COUNTING && strcmp(task, "counting") != 0) {
        snprintf(err, err_len, "[data] task = '%s': expected copy, counting or recall", task);
        return NULL;
    }
    if (vocab < 3) {
        snprintf(err, err_len, "[model] vocab = %d: synthetic tasks need at least 3 tokens", vocab);
        return NULL;
    }
    recall_shape shape = {0};
    if (kind == TASK_RECALL) {
        shape = *recall;
        shape.seq_len = shard->seq_len;
        if (recall_check(&shape, vocab, err, err_len) != 0) return NULL;
    }
    synthetic *s = calloc(1, sizeof *s);
    s->base.read = synthetic_read;
    s->base.free = synthetic_free;
    s->base.vocab = vocab;
    s->task = kind;
    s->seed = seed;
    s->shard = *shard;
    if (kind == TASK_RECALL) {
        s->recall = shape;
        s->sample_tokens = malloc((size_t)shard->seq_len * sizeof(int64_t));
        s->sample_labels = malloc((size_t)shard->seq_len * sizeof(int64_t));
        s->queries = malloc((size_t)shape.queries * sizeof(recall_query));
    }
    return &s->base;
}
