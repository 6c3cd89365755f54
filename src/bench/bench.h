/* bench.h: entry points of the benchmarks (argv[0] is the benchmark's name). */
#ifndef BURST_BENCH_H
#define BURST_BENCH_H

int bench_kernels(int argc, char **argv);
int bench_transport(int argc, char **argv);
int bench_dist_attention(int argc, char **argv); /* `burst bench attention` */
int bench_train(int argc, char **argv);

/* The per-op part of `burst bench kernels` (RMSNorm, RoPE, SwiGLU, ... in GB/s),
 * printed to out; quick = 1 runs small sizes only. Returns 0 on success. */
#include <stdio.h>
int bench_kernels_ops(FILE *out, int quick);

#endif
