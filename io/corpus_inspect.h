/* corpus_inspect.h: what `burst data info` shows of a corpus file beyond the
 * reader's view (token width, chunking, filters, every dataset), kept in the io
 * wing so the engine never calls HDF5 itself. */
#ifndef BURST_IO_CORPUS_INSPECT_H
#define BURST_IO_CORPUS_INSPECT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int bits;             /* width of a token: 16 or 32 */
    int64_t chunk_tokens; /* chunk length of /tokens, 0 when contiguous */
    int deflate_level;    /* -1 when /tokens is not compressed with deflate */
    int shuffle;          /* 1 when the shuffle filter is on */
    char datasets[2048];  /* one line per dataset of /: "name type [dims]\n" */
} io_corpus_layout;

/* Describes the storage of a corpus that io_corpus_open accepts. */
int io_corpus_inspect(const char *path, io_corpus_layout *out, char *err, size_t err_len);

#endif
