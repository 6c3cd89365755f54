# kernels/local.mk: math on buffers local to one rank (CPU backend, CUDA backend).
libburst_kernels_a_SOURCES += kernels/shared_math.h
if HAVE_CUDA
libburst_kernels_a_SOURCES += kernels/cuda/shared_math.cu
endif
