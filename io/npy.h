/* npy.h: the header of a NumPy .npy file (format versions 1 to 3) holding a
 * 1-D C-order array of little-endian integers, for `burst data import`. */
#ifndef BURST_IO_NPY_H
#define BURST_IO_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int64_t n;      /* elements */
    int itemsize;   /* bytes per element: 1, 2, 4 or 8 */
    int is_signed;
} io_npy_array;

/* Reads and checks the header of f (named path in messages) and leaves f at
 * the first element. Errors name the file and what is wrong: no magic, an
 * unsupported version, dtype or shape, Fortran order, a truncated file.
 * Returns 0 or -1 with the message in err. */
int io_npy_open(FILE *f, const char *path, io_npy_array *a, char *err, size_t len);

#endif
