/* dataset_int64.c: see dataset_int64.h. */
#include <stdio.h>
#include <stdlib.h>

#include <hdf5.h>

#include "io/dataset_int64.h"

int io_read_int64_dataset(const char *path, const char *name, int64_t **data, int64_t *rows,
                          int64_t *cols, char *err, size_t err_len)
{
    *data = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        snprintf(err, err_len, "%s: not a readable HDF5 file", path);
        return -1;
    }
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) {
        snprintf(err, err_len, "%s: no dataset %s", path, name);
        H5Fclose(f);
        return -1;
    }
    hid_t space = H5Dget_space(d);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[2] = {0, 1};
    int ok = (rank == 1 || rank == 2) && H5Sget_simple_extent_dims(space, dims, NULL) == rank;
    if (ok) {
        *rows = (int64_t)dims[0];
        *cols = rank == 2 ? (int64_t)dims[1] : 1;
        *data = malloc((size_t)(*rows * *cols + 1) * sizeof(int64_t));
        ok = H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) >= 0;
    }
    H5Sclose(space);
    H5Dclose(d);
    H5Fclose(f);
    if (!ok) {
        free(*data);
        *data = NULL;
        snprintf(err, err_len, "%s: dataset %s is not a readable 1-D or 2-D integer array", path,
                 name);
        return -1;
    }
    return 0;
}
