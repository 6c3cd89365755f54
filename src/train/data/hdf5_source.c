/* hdf5_source.c: the token source over HDF5 corpora (io/corpus.h). Sample i is
 * a window of seq_len + 1 tokens inside one file: windows follow each other
 * with a stride of seq_len + 1, in file order (sequential) or in a seeded
 * permutation (shuffled), both from window_order.h. A rank reads by hyperslab
 * only its layout's chunks, each with one extra token for the last label,
 * never a whole file. A background thread reads the sample the engine
 * announces next (token_source.prefetch) while the step computes; the time
 * the engine still had to wait is counted. (HDF5 here is built thread-safe
 * with one global lock, so one reader thread is all that helps.) With
 * documents, each file's /doc_offsets are read once at the start and a
 * window's document ids are computed from them in memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/corpus.h"
#include "src/train/data/token_source.h"
#include "src/train/data/window_order.h"
#include "util/alloc.h"
#include "util/clock.h"

typedef struct {
    token_source base;
    io_corpus **files;
    int n_files;
    int64_t *first_window; /* [n_files + 1]: cumulative window counts */
    window_order order;    /* over all files' windows */
    int64_t **doc_offsets; /* [n_files][n_docs[f]] document starts, when documents are asked */
    int64_t *n_docs;       /* [n_files] */
    token_shard shard;
    /* prefetch: one slot, filled by the thread */
    pthread_t thread;
    pthread_mutex_t io_lock; /* one reader of the files at a time */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running, want_valid, have_valid;
    int64_t want_index, have_index;
    int64_t *have_tokens, *have_labels;
    int have_status;
    char have_err[256];
    double wait_s;
} hdf5_source;

/* The file of sample index and the offset of its window in that file. */
static int locate(const hdf5_source *s, int64_t index, int64_t *start)
{
    int64_t w = (int64_t)window_order_at(&s->order, (uint64_t)index);
    int f = 0;
    while (w >= s->first_window[f + 1]) f++;
    *start = (w - s->first_window[f]) * (s->shard.seq_len + 1);
    return f;
}

static int read_sample(hdf5_source *s, int64_t index, int64_t *tokens, int64_t *labels, char *err,
                       size_t err_len)
{
    const token_shard *sh = &s->shard;
    int64_t start, i = 0;
    int f = locate(s, index, &start);
    int64_t *buf = bu_calloc((size_t)(sh->n + 2) * sizeof(int64_t), "a sample's tokens", err, err_len);
    if (!buf) return -1;
    for (int c = 0; c < sh->n_chunks; c++) {
        int64_t len = sh->chunks[c].end - sh->chunks[c].begin;
        pthread_mutex_lock(&s->io_lock);
        int st = io_corpus_read(s->files[f], start + sh->chunks[c].begin, len + 1, buf, err, err_len);
        pthread_mutex_unlock(&s->io_lock);
        if (st != 0) {
            free(buf);
            return -1;
        }
        for (int64_t k = 0; k < len; k++, i++) {
            tokens[i] = buf[k];
            labels[i] = buf[k + 1];
        }
    }
    free(buf);
    return 0;
}

static void *prefetch_thread(void *arg)
{
    hdf5_source *s = arg;
    pthread_mutex_lock(&s->lock);
    while (s->running) {
        if (!s->want_valid || (s->have_valid && s->have_index == s->want_index)) {
            pthread_cond_wait(&s->cond, &s->lock);
            continue;
        }
        int64_t index = s->want_index;
        s->have_valid = 0;
        pthread_mutex_unlock(&s->lock);
        char err[256] = "";
        int st = read_sample(s, index, s->have_tokens, s->have_labels, err, sizeof err);
        pthread_mutex_lock(&s->lock);
        s->have_index = index;
        s->have_status = st;
        snprintf(s->have_err, sizeof s->have_err, "%s", err);
        s->have_valid = 1;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void source_prefetch(token_source *base, int64_t index)
{
    hdf5_source *s = (hdf5_source *)base;
    pthread_mutex_lock(&s->lock);
    s->want_index = index;
    s->want_valid = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static int source_read(token_source *base, int64_t index, int64_t *tokens, int64_t *labels)
{
    hdf5_source *s = (hdf5_source *)base;
    double t0 = bu_now();
    pthread_mutex_lock(&s->lock);
    int prefetched = s->want_valid && s->want_index == index;
    while (prefetched && !(s->have_valid && s->have_index == index))
        pthread_cond_wait(&s->cond, &s->lock);
    int st = -1;
    if (prefetched) {
        st = s->have_status;
        if (st == 0) {
            memcpy(tokens, s->have_tokens, (size_t)s->shard.n * sizeof(int64_t));
            memcpy(labels, s->have_labels, (size_t)s->shard.n * sizeof(int64_t));
        } else {
            fprintf(stderr, "burst train: %s\n", s->have_err);
        }
        s->want_valid = 0;
    }
    pthread_mutex_unlock(&s->lock);
    if (!prefetched) {
        char err[256];
        st = read_sample(s, index, tokens, labels, err, sizeof err);
        if (st != 0) fprintf(stderr, "burst train: %s\n", err);
    }
    s->wait_s += bu_now() - t0;
    return st;
}

static double source_wait(token_source *base) { return ((hdf5_source *)base)->wait_s; }

/* Document ids of the window: how many documents start after its first token
 * and at or before each position. */
static int source_documents(token_source *base, int64_t index, int32_t *segments)
{
    const hdf5_source *s = (const hdf5_source *)base;
    int64_t start;
    int f = locate(s, index, &start);
    const int64_t *offsets = s->doc_offsets[f], n = s->n_docs[f];
    int64_t lo = 0, hi = n; /* the first offset after start */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= start) lo = mid + 1;
        else hi = mid;
    }
    int32_t doc = 0;
    for (int64_t p = 0; p <= s->shard.seq_len; p++) {
        for (; lo < n && offsets[lo] <= start + p; lo++) doc++;
        segments[p] = doc;
    }
    return 0;
}

/* Every file's document starts, for source_documents. */
static int load_documents(hdf5_source *s, char *err, size_t err_len)
{
    size_t files = (size_t)s->n_files;
    if (!(s->doc_offsets = bu_calloc(files * sizeof *s->doc_offsets, "the document lists", err,
                                     err_len)) ||
        !(s->n_docs = bu_calloc(files * sizeof *s->n_docs, "the document lists", err, err_len)))
        return -1;
    for (int f = 0; f < s->n_files; f++) {
        int64_t n = io_corpus_n_docs(s->files[f]);
        if (n == 0) {
            snprintf(err, err_len, "%s: no /doc_offsets (document boundaries), which [parallel] "
                                   "mask = document needs", io_corpus_path(s->files[f]));
            return -1;
        }
        if (!(s->doc_offsets[f] = bu_calloc((size_t)n * sizeof(int64_t), "the document offsets",
                                            err, err_len)))
            return -1;
        if (io_corpus_doc_offsets(s->files[f], s->doc_offsets[f], err, err_len) != 0) return -1;
        s->n_docs[f] = n;
    }
    s->base.documents = source_documents;
    return 0;
}

static void source_free(token_source *base)
{
    hdf5_source *s = (hdf5_source *)base;
    if (s->running) {
        pthread_mutex_lock(&s->lock);
        s->running = 0;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    for (int f = 0; f < s->n_files; f++) {
        io_corpus_close(s->files[f]);
        if (s->doc_offsets) free(s->doc_offsets[f]);
    }
    free(s->doc_offsets);
    free(s->n_docs);
    free(s->files);
    free(s->first_window);
    free(s->have_tokens);
    free(s->have_labels);
    free(s);
}

/* Room for one more file in s->files and s->first_window; 0 or -1 with err. */
static int grow_lists(hdf5_source *s, char *err, size_t err_len)
{
    size_t files = (size_t)(s->n_files + 1) * sizeof *s->files,
           windows = (size_t)(s->n_files + 2) * sizeof(int64_t);
    io_corpus **f = realloc(s->files, files);
    if (f) s->files = f;
    int64_t *w = f ? realloc(s->first_window, windows) : NULL;
    if (w) s->first_window = w;
    if (f && w) return 0;
    bu_no_memory(err, err_len, f ? windows : files, "the corpus list");
    return -1;
}

token_source *hdf5_source_create(const char *paths, int vocab, int shuffled, uint64_t seed,
                                 int documents, const token_shard *shard, char *err,
                                 size_t err_len)
{
    hdf5_source *s = bu_calloc(sizeof *s, "the corpus source", err, err_len);
    if (!s) return NULL;
    s->base.read = source_read;
    s->base.free = source_free;
    s->base.prefetch = source_prefetch;
    s->base.wait_seconds = source_wait;
    s->base.vocab = vocab;
    s->shard = *shard;
    int64_t seq_len = shard->seq_len;
    size_t list_len = strlen(paths) + 1;
    char *list = bu_calloc(list_len, "the corpus list", err, err_len), *save = NULL;
    if (!list || !(s->first_window = bu_calloc(sizeof(int64_t), "the corpus list", err, err_len)))
        goto fail;
    memcpy(list, paths, list_len);
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        io_corpus *c;
        if (io_corpus_open(p, &c, err, err_len) != 0) goto fail;
        if ((int64_t)io_corpus_vocab(c) > vocab) {
            snprintf(err, err_len, "%s: vocab_size %u exceeds the model's [model] vocab = %d", p,
                     io_corpus_vocab(c), vocab);
            io_corpus_close(c);
            goto fail;
        }
        int64_t windows = io_corpus_n_tokens(c) / (seq_len + 1);
        if (windows < 1) {
            snprintf(err, err_len, "%s: %lld tokens, fewer than one sequence of [data] seq_len + 1 = %lld",
                     p, (long long)io_corpus_n_tokens(c), (long long)seq_len + 1);
            io_corpus_close(c);
            goto fail;
        }
        if (grow_lists(s, err, err_len) != 0) {
            io_corpus_close(c);
            goto fail;
        }
        s->files[s->n_files] = c;
        s->first_window[s->n_files + 1] = s->first_window[s->n_files] + windows;
        s->n_files++;
    }
    if (s->n_files == 0) {
        snprintf(err, err_len, "[data] path names no corpus file");
        goto fail;
    }
    if (documents && load_documents(s, err, err_len) != 0) goto fail;
    s->order = window_order_make((uint64_t)s->first_window[s->n_files], shuffled, seed);
    s->base.n_samples = s->first_window[s->n_files];
    size_t sample_bytes = (size_t)s->shard.n * sizeof(int64_t);
    if (!(s->have_tokens = bu_calloc(sample_bytes, "the prefetched tokens", err, err_len)) ||
        !(s->have_labels = bu_calloc(sample_bytes, "the prefetched labels", err, err_len)))
        goto fail;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->io_lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->running = 1;
    if (pthread_create(&s->thread, NULL, prefetch_thread, s) != 0) {
        s->running = 0;
        s->base.prefetch = NULL; /* no reader thread: every sample is read when asked */
    }
    free(list);
    return &s->base;
fail:
    free(list);
    source_free(&s->base);
    return NULL;
}
