/* bench.h: entry points of the benchmarks (argv[0] is the benchmark's name). */
#ifndef BURST_BENCH_H
#define BURST_BENCH_H

int bench_kernels(int argc, char **argv);
int bench_transport(int argc, char **argv);
int bench_dist_attention(int argc, char **argv); /* `burst bench attention` */
int bench_train(int argc, char **argv);

/* The per-op part of `burst bench kernels` (RMSNorm, RoPE, SwiGLU, ... in GB/s),
 * printed to out; quick = 1 runs small sizes only; *gbps (when given) gets
 * the per-op kernels' bytes over their seconds, all together. Returns 0 on
 * success. */
#include <stdint.h>
#include <stdio.h>

#include "src/plan/profile.h"
int bench_kernels_ops(FILE *out, int quick, double *gbps);

/* The attention kernels of `burst bench kernels --device cuda --kernel`. */
enum { BENCH_KERNEL_BURST = 1u, BENCH_KERNEL_CUDNN = 2u };

/* `burst bench kernels --device cuda`, as parsed by bench_kernels. */
typedef struct {
    int64_t seqs[16]; /* attention block sizes in tokens */
    int n_seq;
    int hq;                 /* query heads */
    int only_d, only_hkv;   /* 0: every head dim (64, 128), every Hkv (hq, hq / 4) */
    int only_mask;          /* -1: full and causal; 0: full; 1: causal */
    unsigned kernels;       /* BENCH_KERNEL_* bits: the attention kernels timed (0: both) */
    int64_t gemm_n;         /* side of the reference bf16 GEMM */
    int64_t op_bytes;       /* bytes of each per-op buffer */
    int ops;                /* run the per-op part */
    int reps;               /* batches per measurement, the best kept */
    double min_ms;          /* shortest batch that counts */
    profile_writer *profile; /* --profile-out: each attention row at Hkv = Hq written there
                                (one kernel), or NULL */
} bench_device_opts;
/* 0 on success, 1 when there is no device or a kernel failed. */
int bench_kernels_device(const bench_device_opts *o);

#endif
