# kernels/attention.mk: tiled attention with running (O, lse). Its tests: tests/local.mk.
libburst_kernels_a_SOURCES += kernels/attention.h kernels/attention_math.h \
	kernels/cpu/attention_cpu.h kernels/cpu/attention_mask.c kernels/cpu/attention_gemm.c \
	kernels/cpu/attention_fwd.c kernels/cpu/attention_bwd.c
