/* safetensors.h: the safetensors format (Hugging Face's weights files), read
 * through mmap and written atomically. A file is an 8-byte little-endian
 * header length N, N bytes of JSON (name -> {dtype, shape, data_offsets},
 * and an optional "__metadata__" object of strings), then the tensors' raw
 * little-endian bytes; data_offsets are [begin, end) relative to the end of
 * the header.
 *
 * Opening checks everything before a byte of data is read: the header lies
 * inside the file, every entry has a dtype, a shape of non-negative sizes and
 * offsets inside the data, and its byte count equals the product of its shape
 * and the dtype's size; a refused file is named with the tensor or key that is
 * wrong. A model folder holds one model.safetensors, or shards listed by
 * model.safetensors.index.json ("weight_map": name -> file); io_st_model
 * opens either. */
#ifndef BURST_IO_SAFETENSORS_H
#define BURST_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { IO_ST_MAX_RANK = 8 };

typedef enum { IO_ST_F32, IO_ST_F16, IO_ST_BF16, IO_ST_OTHER } io_st_dtype;

typedef struct {
    const char *name;       /* owned by the file */
    const char *dtype_name; /* as the header spells it, e.g. "BF16" */
    io_st_dtype dtype;      /* IO_ST_OTHER: a dtype we do not convert (named by dtype_name) */
    int rank;
    int64_t shape[IO_ST_MAX_RANK];
    const void *data; /* mapped, read-only: [product of shape] elements */
    size_t bytes;
    const char *path; /* the file holding it */
} io_st_tensor;

/* Bytes per element of a dtype (0 for IO_ST_OTHER). */
size_t io_st_dtype_size(io_st_dtype t);
const char *io_st_dtype_name(io_st_dtype t);

/* A model's weights: one file or the shards of an index. */
typedef struct io_st_model io_st_model;

/* Opens path: a .safetensors file, or a folder holding model.safetensors or
 * model.safetensors.index.json. NULL with err naming the file and what is
 * wrong. */
io_st_model *io_st_model_open(const char *path, char *err, size_t err_len);
void io_st_model_close(io_st_model *m);
/* 0 and the tensor called name, or -1 when there is none. */
int io_st_find(const io_st_model *m, const char *name, io_st_tensor *t);
/* Every tensor, by index in [0, io_st_count): for the check that nothing is
 * left unused. */
int64_t io_st_count(const io_st_model *m);
io_st_tensor io_st_at(const io_st_model *m, int64_t i);

/* One tensor to write: its elements in `dtype` (raw little-endian bytes). */
typedef struct {
    const char *name;
    io_st_dtype dtype;
    int rank;
    int64_t shape[IO_ST_MAX_RANK];
    const void *data;
} io_st_out;

/* Writes the tensors t[n] as path, through path.tmp renamed when complete
 * (a failure leaves no path.tmp and an existing path untouched). metadata
 * (may be NULL) is a NULL-terminated list of key, value strings. */
int io_st_write(const char *path, const io_st_out *t, int64_t n, const char *const *metadata,
                char *err, size_t err_len);

#endif
