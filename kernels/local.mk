# kernels/local.mk: math on buffers local to one rank (CPU backend, CUDA backend).
# Attention and the other ops keep their file lists in their own fragments.
libburst_kernels_a_SOURCES += kernels/kernels_common.h kernels/status.c kernels/shared_math.h \
	kernels/arena.h kernels/arena.c
# The double-precision references that the tests and `burst selftest` check
# the kernels against (one copy, shared by both).
libburst_kernels_a_SOURCES += kernels/ref/attention_ref.h kernels/ref/attention_ref.c \
	kernels/ref/ops_ref.h kernels/ref/ops_ref.c
include kernels/attention.mk
include kernels/ops.mk
# The CUDA kernels (the emulator that runs them on the CPU: emu/local.mk).
include kernels/cuda.mk
