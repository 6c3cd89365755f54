# io/local.mk: files (HDF5 corpora, checkpoints).
libburst_io_a_SOURCES += io/io.h io/io_version.c
# The one HDF5 error policy (nothing printed, "<file>: <doing>: <detail>", the
# error stack left empty) and the attribute helpers every HDF5 file uses.
libburst_io_a_SOURCES += io/h5util.h io/h5util.c
# HDF5 corpora: the format (doc/CORPUS.md), the atomic writer, the hyperslab reader.
libburst_io_a_SOURCES += io/corpus.h io/corpus.c io/corpus_inspect.h io/corpus_inspect.c

# Training checkpoints (model.h5 + optim-R.h5 per step, atomic commit).
libburst_io_a_SOURCES += io/checkpoint.h io/checkpoint.c
libburst_io_a_SOURCES += io/dataset_int64.h io/dataset_int64.c
# NumPy .npy headers, for `burst data import --from npy`.
libburst_io_a_SOURCES += io/npy.h io/npy.c

# safetensors (Hugging Face weights): mmap'd reader, atomic writer.
libburst_io_a_SOURCES += io/safetensors.h io/safetensors.c

# The corpus format.
dist_doc_DATA += doc/CORPUS.md
