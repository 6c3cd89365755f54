# kernels/ops.mk: GEMM, norms, RoPE, SwiGLU, embedding, AdamW, cross-entropy, their tests.
