/* io_version.c: which HDF5 library the io wing is linked against. */
#include <stdio.h>

#include <hdf5.h>

#include "io/io.h"

const char *io_hdf5_version(void)
{
    static char text[32];
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    snprintf(text, sizeof text, "%u.%u.%u", maj, min, rel);
    return text;
}
