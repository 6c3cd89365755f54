# kernels/ops.mk: GEMM, norms, RoPE, SwiGLU, embedding, AdamW, vectors, cross-entropy. Tests: tests/local.mk.
libburst_kernels_a_SOURCES += kernels/ops.h kernels/ops_math.h kernels/cpu/ops_cpu.h \
	kernels/cpu/gemm.c kernels/cpu/norm.c kernels/cpu/rope.c kernels/cpu/swiglu.c \
	kernels/cpu/embedding.c kernels/cpu/adamw.c kernels/cpu/grad_norm.c kernels/cpu/vector.c \
	kernels/cpu/cross_entropy.c
