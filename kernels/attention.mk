# kernels/attention.mk: tiled attention with running (O, lse), its tests.
libburst_kernels_a_SOURCES += kernels/attention.h kernels/attention_math.h \
	kernels/cpu/attention_cpu.h kernels/cpu/attention_mask.c kernels/cpu/attention_gemm.c \
	kernels/cpu/attention_fwd.c kernels/cpu/attention_bwd.c
if HAVE_CUDA
libburst_kernels_a_SOURCES += kernels/cuda/attention_math.cu
endif

check_PROGRAMS += tests/test_attention
TESTS += tests/test_attention
tests_test_attention_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_attention_LDADD = libburst_kernels.a $(EXTERNAL_LIBS) $(CHECK_LIBS)
tests_test_attention_SOURCES = tests/test_attention.c
