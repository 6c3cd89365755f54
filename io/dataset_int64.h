/* dataset_int64.h: reads a whole small int64 dataset of an HDF5 file (for
 * instance the "/answers" a synthetic task stores beside its tokens). */
#ifndef BURST_IO_DATASET_INT64_H
#define BURST_IO_DATASET_INT64_H

#include <stddef.h>
#include <stdint.h>

/* *data (malloc'd, [rows, cols]) = dataset name of path; a 1-D dataset has
 * cols = 1. Returns 0, or -1 with a message naming the file and dataset. */
int io_read_int64_dataset(const char *path, const char *name, int64_t **data, int64_t *rows,
                          int64_t *cols, char *err, size_t err_len);

#endif
