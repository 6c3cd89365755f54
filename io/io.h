/* io.h: reading and writing files (HDF5 corpora, checkpoints). Takes rank and
 * layout as plain parameters; never calls the transport. */
#ifndef BURST_IO_H
#define BURST_IO_H

/* Version of the HDF5 library linked, "major.minor.release". */
const char *io_hdf5_version(void);

#endif
