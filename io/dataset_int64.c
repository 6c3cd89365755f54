/* dataset_int64.c: see dataset_int64.h. Errors follow io/h5util.h. */
#include <stdio.h>
#include <stdlib.h>

#include <hdf5.h>

#include "io/dataset_int64.h"
#include "io/h5util.h"

/* The whole of d (1-D or 2-D) into a malloc'd int64 array. */
static int read_all(hid_t d, const char *path, const char *name, int64_t **data, int64_t *rows,
                    int64_t *cols, char *err, size_t err_len)
{
    hid_t space = H5Dget_space(d);
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    hsize_t dims[2] = {0, 1};
    if (rank < 0 || H5Sget_simple_extent_dims(space, dims, NULL) != rank) {
        if (space >= 0) H5Sclose(space);
        return io_h5_fail(err, err_len, path, "reading the shape of dataset %s", name);
    }
    H5Sclose(space);
    if (rank != 1 && rank != 2) {
        snprintf(err, err_len, "%s: dataset %s has rank %d (it must be 1-D or 2-D)", path, name,
                 rank);
        return -1;
    }
    *rows = (int64_t)dims[0];
    *cols = rank == 2 ? (int64_t)dims[1] : 1;
    *data = malloc((size_t)(*rows * *cols + 1) * sizeof(int64_t));
    if (!*data) {
        snprintf(err, err_len, "%s: out of memory for dataset %s", path, name);
        return -1;
    }
    if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) >= 0) return 0;
    free(*data);
    *data = NULL;
    return io_h5_fail(err, err_len, path, "reading dataset %s as integers", name);
}

int io_read_int64_dataset(const char *path, const char *name, int64_t **data, int64_t *rows,
                          int64_t *cols, char *err, size_t err_len)
{
    *data = NULL;
    hid_t f = io_h5_open(path, H5F_ACC_RDONLY, err, err_len);
    if (f < 0) return -1;
    hid_t d = io_h5_open_dataset(f, path, name, H5P_DEFAULT, err, err_len);
    int rc = d < 0 ? -1 : read_all(d, path, name, data, rows, cols, err, err_len);
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
    io_h5_detail(NULL, 0); /* closing a file only read from: nothing to report */
    return rc;
}
