/* corpus.h: tokenized corpora in HDF5 (format in doc/CORPUS.md), written
 * atomically and read by hyperslab, so a rank reads exactly the tokens its
 * layout needs and a corpus may be far larger than memory. The io wing knows
 * files only: ranks and layouts arrive as plain positions. */
#ifndef BURST_IO_CORPUS_H
#define BURST_IO_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#define IO_CORPUS_FORMAT "burstengine-corpus"
#define IO_CORPUS_VERSION 1

/* ---------------------------------------------------------------- reading */
typedef struct io_corpus io_corpus;

/* Opens and checks a corpus file: format attribute and version, a 1-D
 * "/tokens" dataset of uint16 or uint32, vocab_size, optional "/doc_offsets".
 * Errors name the file and the problem. Nothing is read beyond metadata. */
int io_corpus_open(const char *path, io_corpus **out, char *err, size_t err_len);
void io_corpus_close(io_corpus *c);
int64_t io_corpus_n_tokens(const io_corpus *c);
uint32_t io_corpus_vocab(const io_corpus *c);
const char *io_corpus_tokenizer(const io_corpus *c);
const char *io_corpus_path(const io_corpus *c);
/* tokens [count] = tokens [begin, begin + count) of the file, by hyperslab. */
int io_corpus_read(io_corpus *c, int64_t begin, int64_t count, int64_t *tokens, char *err,
                   size_t err_len);
/* Document starts: offsets [n_docs] (ascending, first 0); 0 docs when absent. */
int64_t io_corpus_n_docs(const io_corpus *c);
int io_corpus_doc_offsets(io_corpus *c, int64_t *offsets, char *err, size_t err_len);

/* ---------------------------------------------------------------- writing */
typedef struct io_corpus_writer io_corpus_writer;

/* Starts a corpus that will appear at path only when committed (written to a
 * temporary name beside it, then renamed). bits: 16 or 32. */
io_corpus_writer *io_corpus_create(const char *path, int bits, uint32_t vocab,
                                   const char *tokenizer, char *err, size_t err_len);
/* Appends tokens (each must be < vocab); returns 0 or -1 with a message. */
int io_corpus_append(io_corpus_writer *w, const int64_t *tokens, int64_t n, char *err,
                     size_t err_len);
/* Marks a document boundary at the current end. */
int io_corpus_mark_document(io_corpus_writer *w, char *err, size_t err_len);
/* Stores an extra int64 dataset (e.g. "/answers" of a synthetic task). */
int io_corpus_put_int64(io_corpus_writer *w, const char *name, const int64_t *data, int64_t rows,
                        int64_t cols, char *err, size_t err_len);
/* Writes, closes, renames into place: 0, or -1 with the previous file intact. */
int io_corpus_commit(io_corpus_writer *w, char *err, size_t err_len);
/* Drops the temporary file. */
void io_corpus_abort(io_corpus_writer *w);

#endif
