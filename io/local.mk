# io/local.mk: files (HDF5 corpora, checkpoints).
libburst_io_a_SOURCES += io/io.h io/io_version.c
