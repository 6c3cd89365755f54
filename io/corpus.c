/* corpus.c: tokenized corpora in HDF5 (doc/CORPUS.md). The writer buffers up
 * to one chunk of tokens and appends whole chunks to a growable dataset in a
 * temporary file beside the target, which it closes, fsyncs and renames into
 * place on commit, so a reader never sees a half-written corpus and a crash
 * leaves the previous file whole. The reader checks every piece of metadata on
 * open and then reads by hyperslab only what it is asked for, so a corpus may
 * be far larger than memory. Errors follow io/h5util.h: HDF5 prints nothing,
 * and every failure becomes one message naming the file and the problem.
 *
 * The serial HDF5 library is not thread-safe: callers that read from several
 * threads must serialise calls into this file. io_corpus_commit releases the
 * writer whether it succeeds or fails (do not call io_corpus_abort after it). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/corpus.h"
#include "io/corpus_inspect.h"
#include "io/h5util.h"

#define CHUNK_TOKENS      ((int64_t)1 << 20)
#define CHUNK_CACHE_BYTES ((size_t)16 << 20)
#define DEFLATE_LEVEL     1

static void seterr(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...)
{
    if (!err || len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- reading */

struct io_corpus {
    char *path;
    hid_t file, tokens;
    int bits;
    int64_t n_tokens;
    uint32_t vocab;
    char tokenizer[256];
    hid_t docs; /* -1 when absent */
    int64_t n_docs;
};

/* A 1-D unsigned integer dataset of path: its length and bits; -1 with a
 * message. */
static int check_1d_unsigned(hid_t d, const char *path, const char *name, int64_t *n, int *bits,
                             char *err, size_t err_len)
{
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    int rc = -1;
    if (t < 0 || s < 0) {
        io_h5_fail(err, err_len, path, "reading the type and shape of %s", name);
    } else if (H5Tget_class(t) != H5T_INTEGER) {
        seterr(err, err_len, "%s: %s is not an integer dataset (it must be unsigned integers)",
               path, name);
    } else if (H5Tget_sign(t) != H5T_SGN_NONE) {
        seterr(err, err_len, "%s: %s holds signed integers (it must be unsigned)", path, name);
    } else if (H5Sget_simple_extent_ndims(s) != 1) {
        seterr(err, err_len, "%s: %s has rank %d (it must be 1-D)", path, name,
               H5Sget_simple_extent_ndims(s));
    } else {
        hsize_t dim = 0;
        H5Sget_simple_extent_dims(s, &dim, NULL);
        *n = (int64_t)dim;
        *bits = (int)H5Tget_size(t) * 8;
        rc = 0;
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return rc;
}

/* The attributes of /: format and version, vocab_size, tokenizer. */
static int read_header(io_corpus *c, char *err, size_t err_len)
{
    int64_t vocab = 0;
    if (io_h5_check_format(c->file, c->path, IO_CORPUS_FORMAT, IO_CORPUS_VERSION,
                           "burstengine corpus", err, err_len) != 0 ||
        io_h5_read_attr_int(c->file, c->path, "vocab_size", &vocab, err, err_len) != 0)
        return -1;
    if (vocab < 1 || vocab > (int64_t)UINT32_MAX) {
        seterr(err, err_len, "%s: vocab_size %lld is out of range [1, 2^32-1]", c->path,
               (long long)vocab);
        return -1;
    }
    c->vocab = (uint32_t)vocab;
    return io_h5_read_attr_string(c->file, c->path, "tokenizer", c->tokenizer,
                                  sizeof c->tokenizer, err, err_len);
}

/* /tokens: 1-D uint16 or uint32 that fit vocab_size, read through a chunk cache. */
static int open_tokens(io_corpus *c, char *err, size_t err_len)
{
    if (H5Lexists(c->file, "tokens", H5P_DEFAULT) <= 0) {
        io_h5_detail(NULL, 0); /* the message below says all there is */
        seterr(err, err_len, "%s: no dataset /tokens", c->path);
        return -1;
    }
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 101, CHUNK_CACHE_BYTES, 0.75);
    c->tokens = io_h5_open_dataset(c->file, c->path, "tokens", dapl, err, err_len);
    H5Pclose(dapl);
    if (c->tokens < 0 ||
        check_1d_unsigned(c->tokens, c->path, "/tokens", &c->n_tokens, &c->bits, err, err_len) != 0)
        return -1;
    if (c->bits != 16 && c->bits != 32) {
        seterr(err, err_len, "%s: /tokens holds %d-bit integers (it must be uint16 or uint32)",
               c->path, c->bits);
        return -1;
    }
    if (c->bits == 16 && c->vocab > 65536) {
        seterr(err, err_len, "%s: vocab_size %u does not fit the uint16 tokens", c->path,
               c->vocab);
        return -1;
    }
    return 0;
}

/* /doc_offsets when present: 1-D unsigned integers. */
static int open_doc_offsets(io_corpus *c, char *err, size_t err_len)
{
    if (H5Lexists(c->file, "doc_offsets", H5P_DEFAULT) <= 0) {
        io_h5_detail(NULL, 0); /* absent: no documents */
        return 0;
    }
    int bits = 0;
    c->docs = io_h5_open_dataset(c->file, c->path, "doc_offsets", H5P_DEFAULT, err, err_len);
    if (c->docs < 0) return -1;
    return check_1d_unsigned(c->docs, c->path, "/doc_offsets", &c->n_docs, &bits, err, err_len);
}

int io_corpus_open(const char *path, io_corpus **out, char *err, size_t err_len)
{
    io_h5_quiet();
    *out = NULL;
    if (access(path, R_OK) != 0) {
        seterr(err, err_len, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    if (H5Fis_hdf5(path) <= 0)
        return io_h5_fail(err, err_len, path, "not an HDF5 file (or its header is corrupt)");
    io_corpus *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        seterr(err, err_len, "%s: out of memory", path);
        return -1;
    }
    c->file = c->tokens = c->docs = -1;
    c->file = io_h5_open(path, H5F_ACC_RDONLY, err, err_len);
    if (c->file < 0 || read_header(c, err, err_len) != 0 || open_tokens(c, err, err_len) != 0 ||
        open_doc_offsets(c, err, err_len) != 0) {
        io_corpus_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void io_corpus_close(io_corpus *c)
{
    if (!c) return;
    if (c->docs >= 0) H5Dclose(c->docs);
    if (c->tokens >= 0) H5Dclose(c->tokens);
    if (c->file >= 0) H5Fclose(c->file);
    io_h5_detail(NULL, 0); /* closing a file that failed to open says nothing new */
    free(c->path);
    free(c);
}

int64_t io_corpus_n_tokens(const io_corpus *c)
{
    return c->n_tokens;
}
uint32_t io_corpus_vocab(const io_corpus *c)
{
    return c->vocab;
}
const char *io_corpus_tokenizer(const io_corpus *c)
{
    return c->tokenizer;
}
const char *io_corpus_path(const io_corpus *c)
{
    return c->path;
}
int64_t io_corpus_n_docs(const io_corpus *c)
{
    return c->n_docs;
}

/* Reads [begin, begin + count) of a 1-D dataset into int64 (HDF5 widens). */
static int read_range(hid_t d, int64_t begin, int64_t count, int64_t *out)
{
    if (count == 0) return 0;
    hid_t fs = H5Dget_space(d);
    hsize_t start = (hsize_t)begin, n = (hsize_t)count;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL) >= 0 &&
        H5Dread(d, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, out) >= 0)
        rc = 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

int io_corpus_read(io_corpus *c, int64_t begin, int64_t count, int64_t *tokens, char *err,
                   size_t err_len)
{
    io_h5_quiet();
    if (begin < 0 || count < 0 || begin > c->n_tokens || count > c->n_tokens - begin) {
        seterr(err, err_len, "%s: tokens [%lld, %lld) are outside the %lld tokens of the file",
               c->path, (long long)begin, (long long)begin + (long long)count,
               (long long)c->n_tokens);
        return -1;
    }
    if (read_range(c->tokens, begin, count, tokens) != 0)
        return io_h5_fail(err, err_len, c->path, "reading tokens [%lld, %lld)", (long long)begin,
                          (long long)(begin + count));
    for (int64_t i = 0; i < count; i++)
        if (tokens[i] < 0 || tokens[i] >= (int64_t)c->vocab) {
            seterr(err, err_len, "%s: token %lld at position %lld is beyond vocab_size %u", c->path,
                   (long long)tokens[i], (long long)(begin + i), c->vocab);
            return -1;
        }
    return 0;
}

int io_corpus_doc_offsets(io_corpus *c, int64_t *offsets, char *err, size_t err_len)
{
    io_h5_quiet();
    if (c->n_docs == 0) return 0;
    if (read_range(c->docs, 0, c->n_docs, offsets) != 0)
        return io_h5_fail(err, err_len, c->path, "reading /doc_offsets");
    if (offsets[0] != 0) {
        seterr(err, err_len, "%s: /doc_offsets[0] is %lld, not 0", c->path, (long long)offsets[0]);
        return -1;
    }
    for (int64_t i = 1; i < c->n_docs; i++) {
        if (offsets[i] <= offsets[i - 1]) {
            seterr(err, err_len, "%s: /doc_offsets is not strictly ascending at index %lld",
                   c->path, (long long)i);
            return -1;
        }
        if (offsets[i] < 0 || offsets[i] >= c->n_tokens) {
            seterr(err, err_len,
                   "%s: /doc_offsets[%lld] = %lld is beyond the %lld tokens of the file", c->path,
                   (long long)i, (long long)offsets[i], (long long)c->n_tokens);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- writing */

struct io_corpus_writer {
    char *path, *tmp;
    hid_t file, tokens; /* tokens: -1 until the first chunk is flushed */
    int bits;
    uint32_t vocab;
    int64_t written; /* tokens in the dataset */
    int64_t *buf;    /* up to CHUNK_TOKENS tokens not yet written */
    int64_t buffered;
    int64_t *docs;
    int64_t n_docs, docs_cap;
    int failed;
};

static void free_writer(io_corpus_writer *w)
{
    free(w->path);
    free(w->tmp);
    free(w->buf);
    free(w->docs);
    free(w);
}

static void close_writer_handles(io_corpus_writer *w)
{
    if (w->tokens >= 0) H5Dclose(w->tokens);
    if (w->file >= 0) H5Fclose(w->file);
    w->tokens = w->file = -1;
    io_h5_detail(NULL, 0); /* closing a writer given up on says nothing new */
}

io_corpus_writer *io_corpus_create(const char *path, int bits, uint32_t vocab,
                                   const char *tokenizer, char *err, size_t err_len)
{
    io_h5_quiet();
    if (bits != 16 && bits != 32) {
        seterr(err, err_len, "%s: token width %d bits; it must be 16 or 32", path, bits);
        return NULL;
    }
    if (vocab == 0 || (bits == 16 && vocab > 65536)) {
        seterr(err, err_len, "%s: vocab_size %u does not fit %d-bit tokens", path, vocab, bits);
        return NULL;
    }
    io_corpus_writer *w = calloc(1, sizeof *w);
    size_t tl = strlen(path) + 32;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(tl)) ||
        !(w->buf = malloc(CHUNK_TOKENS * sizeof *w->buf))) {
        if (w) free_writer(w);
        seterr(err, err_len, "%s: out of memory", path);
        return NULL;
    }
    snprintf(w->tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    w->bits = bits;
    w->vocab = vocab;
    w->tokens = -1;
    w->file = io_h5_create(w->tmp, err, err_len);
    if (w->file < 0) {
        free_writer(w);
        return NULL;
    }
    if (io_h5_write_format(w->file, w->tmp, IO_CORPUS_FORMAT, IO_CORPUS_VERSION, err, err_len) ||
        io_h5_write_attr_int(w->file, w->tmp, "vocab_size", H5T_STD_U32LE, vocab, err, err_len) ||
        io_h5_write_attr_string(w->file, w->tmp, "tokenizer", tokenizer ? tokenizer : "", err,
                                err_len)) {
        io_corpus_abort(w);
        return NULL;
    }
    return w;
}

/* Creates /tokens with a chunk of `chunk` tokens, growable without limit. */
static int create_tokens(io_corpus_writer *w, int64_t chunk)
{
    hsize_t dim = 0, maxdim = H5S_UNLIMITED, ch = (hsize_t)(chunk > 0 ? chunk : 1);
    hid_t s = H5Screate_simple(1, &dim, &maxdim);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &ch);
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, DEFLATE_LEVEL);
    }
    hid_t t = w->bits == 16 ? H5T_STD_U16LE : H5T_STD_U32LE;
    w->tokens = H5Dcreate2(w->file, "tokens", t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(s);
    return w->tokens >= 0 ? 0 : -1;
}

static int flush_tokens(io_corpus_writer *w)
{
    if (w->buffered == 0) return 0;
    if (w->tokens < 0 && create_tokens(w, CHUNK_TOKENS) != 0) return -1;
    hsize_t total = (hsize_t)(w->written + w->buffered), start = (hsize_t)w->written,
            n = (hsize_t)w->buffered;
    if (H5Dset_extent(w->tokens, &total) < 0) return -1;
    hid_t fs = H5Dget_space(w->tokens), ms = H5Screate_simple(1, &n, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL) >= 0 &&
        H5Dwrite(w->tokens, H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, w->buf) >= 0)
        rc = 0;
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (rc == 0) {
        w->written += w->buffered;
        w->buffered = 0;
    }
    return rc;
}

int io_corpus_append(io_corpus_writer *w, const int64_t *tokens, int64_t n, char *err,
                     size_t err_len)
{
    io_h5_quiet();
    if (w->failed) {
        seterr(err, err_len, "%s: an earlier write failed", w->path);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= (int64_t)w->vocab) {
            seterr(err, err_len, "%s: token %lld (at position %lld) is beyond vocab_size %u",
                   w->path, (long long)tokens[i], (long long)(w->written + w->buffered + i),
                   w->vocab);
            return -1;
        }
    while (n > 0) {
        int64_t take = CHUNK_TOKENS - w->buffered;
        if (take > n) take = n;
        memcpy(w->buf + w->buffered, tokens, (size_t)take * sizeof *tokens);
        w->buffered += take;
        tokens += take;
        n -= take;
        if (w->buffered == CHUNK_TOKENS && flush_tokens(w) != 0) {
            w->failed = 1;
            return io_h5_fail(err, err_len, w->tmp, "writing tokens");
        }
    }
    return 0;
}

int io_corpus_mark_document(io_corpus_writer *w, char *err, size_t err_len)
{
    int64_t at = w->written + w->buffered;
    if (w->n_docs == 0) {
        if (!(w->docs = malloc(16 * sizeof *w->docs))) goto oom;
        w->docs_cap = 16;
        w->docs[w->n_docs++] = 0;
    }
    if (at == w->docs[w->n_docs - 1]) return 0; /* empty documents are not kept */
    if (w->n_docs == w->docs_cap) {
        int64_t *d = realloc(w->docs, (size_t)w->docs_cap * 2 * sizeof *d);
        if (!d) goto oom;
        w->docs = d;
        w->docs_cap *= 2;
    }
    w->docs[w->n_docs++] = at;
    return 0;
oom:
    seterr(err, err_len, "%s: out of memory for document offsets", w->path);
    w->failed = 1;
    return -1;
}

/* Writes a whole int64 (or uint64 when file_type says so) array dataset. */
static int write_array(hid_t file, const char *name, hid_t file_type, const int64_t *data, int rank,
                       const hsize_t *dims)
{
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t d =
        s < 0 ? -1 : H5Dcreate2(file, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc =
        d >= 0 && H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    return rc;
}

int io_corpus_put_int64(io_corpus_writer *w, const char *name, const int64_t *data, int64_t rows,
                        int64_t cols, char *err, size_t err_len)
{
    io_h5_quiet();
    const char *bare = name[0] == '/' ? name + 1 : name;
    if (!bare[0] || strchr(bare, '/') || strcmp(bare, "tokens") == 0 ||
        strcmp(bare, "doc_offsets") == 0 || rows < 0 || cols < 1) {
        seterr(err, err_len, "%s: cannot store dataset \"%s\" [%lld, %lld]", w->path, name,
               (long long)rows, (long long)cols);
        return -1;
    }
    hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
    if (H5Lexists(w->file, bare, H5P_DEFAULT) > 0) {
        seterr(err, err_len, "%s: dataset /%s is already stored", w->path, bare);
        return -1;
    }
    if (write_array(w->file, bare, H5T_STD_I64LE, data, 2, dims) != 0)
        return io_h5_fail(err, err_len, w->tmp, "writing dataset /%s", bare);
    return 0;
}

int io_corpus_commit(io_corpus_writer *w, char *err, size_t err_len)
{
    io_h5_quiet();
    int rc = -1;
    if (w->failed) {
        seterr(err, err_len, "%s: not committed: an earlier write failed", w->path);
        goto fail;
    }
    if (w->tokens < 0 && create_tokens(w, w->buffered > 0 ? w->buffered : 1) != 0) goto h5fail;
    if (flush_tokens(w) != 0) goto h5fail;
    int64_t total = w->written;
    /* Document starts strictly inside the tokens ([0] alone when nothing was marked). */
    while (w->n_docs > 1 && w->docs[w->n_docs - 1] >= total) w->n_docs--;
    if (w->n_docs > 0 && total > 0) {
        hsize_t n = (hsize_t)w->n_docs;
        if (write_array(w->file, "doc_offsets", H5T_STD_U64LE, w->docs, 1, &n) != 0) goto h5fail;
    }
    if (H5Dclose(w->tokens) < 0) {
        w->tokens = -1;
        goto h5fail;
    }
    w->tokens = -1;
    herr_t closed = H5Fclose(w->file);
    w->file = -1;
    if (closed < 0) goto h5fail;
    int fd = open(w->tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        seterr(err, err_len, "%s: cannot sync %s: %s", w->path, w->tmp, strerror(errno));
        if (fd >= 0) close(fd);
        goto fail;
    }
    close(fd);
    if (rename(w->tmp, w->path) != 0) {
        seterr(err, err_len, "%s: cannot rename %s into place: %s", w->path, w->tmp,
               strerror(errno));
        goto fail;
    }
    /* Make the rename itself durable. */
    char *dir = strdup(w->path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
        int dfd = open(d, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    free_writer(w);
    return 0;
h5fail:
    io_h5_fail(err, err_len, w->tmp, "completing the corpus before its rename");
fail:
    close_writer_handles(w);
    unlink(w->tmp);
    free_writer(w);
    return rc;
}

void io_corpus_abort(io_corpus_writer *w)
{
    if (!w) return;
    close_writer_handles(w);
    unlink(w->tmp);
    free_writer(w);
}
