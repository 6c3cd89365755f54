/* token_source.h: where training sequences come from. A source hands a rank the
 * tokens at the global positions its layout gives it, plus the label of each
 * (the token that follows; ignore_index where nothing is to be predicted), for
 * sample `index` of the run. A source may read only those positions, so a
 * corpus far larger than memory can be streamed. Two sources plug in here:
 * the synthetic tasks (synthetic_source.c) and HDF5 corpora (hdf5_source.c). */
#ifndef BURST_TRAIN_TOKEN_SOURCE_H
#define BURST_TRAIN_TOKEN_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "src/attn/seq_layout.h"
#include "src/train/data/recall.h"

enum { TOKEN_IGNORE = -100 };

/* This rank's share of every sample: the global positions of its layout
 * place, as at most two runs (zigzag) in local order. Fixed for a run. */
typedef struct {
    int64_t seq_len;      /* tokens per sequence (global) */
    seq_chunk chunks[2];  /* [begin, end) global positions */
    int n_chunks;
    int64_t n;            /* local tokens: the sum of the chunk lengths */
} token_shard;

static inline token_shard token_shard_of(const seq_layout *layout, int rank)
{
    token_shard sh = {.seq_len = layout->N, .n = layout->n};
    sh.n_chunks = seq_layout_chunks(layout, rank, sh.chunks);
    return sh;
}

typedef struct token_source token_source;
struct token_source {
    /* tokens [n] and labels [n] of sample `index` at the positions of the
     * shard the source was made for (in chunk order). */
    int (*read)(token_source *s, int64_t index, int64_t *tokens, int64_t *labels);
    void (*free)(token_source *s);
    /* Optional: the sample the engine will ask for next, to read it ahead. */
    void (*prefetch)(token_source *s, int64_t index);
    /* Optional: seconds read() made the engine wait so far. */
    double (*wait_seconds)(token_source *s);
    /* Present when the source was made with documents: the document ids
     * [seq_len + 1] of sample `index` at every global position 0..seq_len (the
     * last is the token after the sequence, which the last label predicts).
     * They start at 0 and never decrease; every rank computes the same ids
     * without communicating. 0, or -1 with a message on stderr. */
    int (*documents)(token_source *s, int64_t index, int32_t *segments);
    int vocab;
    int64_t n_samples; /* distinct samples (a corpus's windows); 0: unbounded (synthetic) */
};

/* The last token of a document predicts nothing: labels [n] (in the shard's
 * order) whose next token starts another document become TOKEN_IGNORE.
 * segments [seq_len + 1] as token_source.documents gives them. */
static inline void token_shard_end_documents(const token_shard *sh, const int32_t *segments,
                                             int64_t *labels)
{
    int64_t i = 0;
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++)
            if (segments[p + 1] != segments[p]) labels[i] = TOKEN_IGNORE;
}

/* Synthetic tasks over a vocabulary of `vocab` tokens, seeded per sample:
 *   copy:     a random first half, then the same tokens again; only the second
 *             half is predicted, and only by attending half a sequence back;
 *   counting: each token is the previous plus one (mod vocab), from a random start;
 *   recall:   multi-query associative recall (recall.h) of the given shape.
 * doc_len > 0 gives the source documents: each sample is cut into documents of
 * seeded lengths, uniform in [1, 2 doc_len - 1] (doc_len on average). */
/* the values of [data] task, in the order of its names (src/train/config.c) */
typedef enum { TASK_COPY = 0, TASK_COUNTING = 1, TASK_RECALL = 2 } synthetic_task;
typedef struct {
    synthetic_task task;
    int64_t doc_len;     /* mean tokens per document; 0: no documents */
    recall_shape recall; /* recall only; its seq_len is taken from the shard */
} synthetic_spec;
token_source *synthetic_source_create(const synthetic_spec *spec, int vocab, uint64_t seed,
                                      const token_shard *shard, char *err, size_t err_len);
/* The seed of held-out samples of a run whose training samples come from
 * seed: another seed, so evaluation never sees a training sample. */
uint64_t synthetic_heldout_seed(uint64_t seed);

/* Corpora in HDF5 (io/corpus.h): paths is a comma-separated list of files;
 * sample i is a window of seq_len + 1 tokens (stride seq_len + 1) inside one
 * file, taken in order or in a seeded permutation; a rank reads only the
 * chunks of its shard, and a thread reads the announced next sample ahead.
 * With documents != 0 every rank keeps each file's /doc_offsets (8 bytes per
 * document) and the source gives the documents of each window. Errors (a file
 * that is not a corpus, a vocabulary larger than the model's, fewer tokens
 * than one sequence, no /doc_offsets when documents are asked) name the file. */
token_source *hdf5_source_create(const char *paths, int vocab, int shuffled, uint64_t seed,
                                 int documents, const token_shard *shard, char *err,
                                 size_t err_len);

#endif
