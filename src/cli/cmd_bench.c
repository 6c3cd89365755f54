/* cmd_bench.c: `burst bench WHAT` dispatches to one benchmark. Benchmarks report
 * speed as ratios against a reference measured in the same run. */
#include <stdio.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/bench/bench.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: burst bench WHAT [OPTIONS]\n\n"
                 "  kernels    attention and per-op kernels against cblas_sgemm (--device cuda:\n"
                 "             the GPU kernels against the cuBLASLt bf16 GEMM and copies)\n"
                 "  transport  ring bandwidth/latency and all-reduce against ucx_perftest\n"
                 "  attention  distributed attention (ring Q-side, KV-side, all-gather) against\n"
                 "             the single-rank kernels\n"
                 "  train      `burst train` tokens/s, fraction of sgemm and peak memory\n\n"
                 "'burst bench WHAT --help' lists the options of one benchmark.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "kernels") == 0) return bench_kernels(argc - 1, argv + 1);
    if (strcmp(argv[1], "transport") == 0) return bench_transport(argc - 1, argv + 1);
    if (strcmp(argv[1], "attention") == 0) return bench_dist_attention(argc - 1, argv + 1);
    if (strcmp(argv[1], "train") == 0) return bench_train(argc - 1, argv + 1);
    fprintf(stderr, "burst bench: unknown benchmark '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
