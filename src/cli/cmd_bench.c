/* cmd_bench.c: `burst bench WHAT` dispatches to one benchmark. Benchmarks report
 * speed as ratios against a reference measured in the same run. */
#include <stdio.h>
#include <string.h>

#include "src/bench/bench.h"
#include "src/cli/cli.h"

static const cli_subcommand benchmarks[] = {
    {"kernels", bench_kernels,
     "attention and per-op kernels against cblas_sgemm (--device cuda:\n"
     "the GPU kernels against the cuBLASLt bf16 GEMM and copies)"},
    {"transport", bench_transport, "ring bandwidth/latency and all-reduce against ucx_perftest"},
    {"attention", bench_dist_attention,
     "distributed attention (ring Q-side, KV-side, all-gather) against\n"
     "the single-rank kernels"},
    {"train", bench_train, "`burst train` tokens/s, fraction of sgemm and peak memory"},
};
enum { N_BENCHMARKS = sizeof benchmarks / sizeof benchmarks[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst bench WHAT [OPTIONS]\n\n");
    cli_print_subcommands(out, benchmarks, N_BENCHMARKS, 13);
    fprintf(out, "\n'burst bench WHAT --help' lists the options of one benchmark.\n");
}

int cmd_bench(int argc, char **argv)
{
    return cli_dispatch("burst bench", benchmarks, N_BENCHMARKS, usage, argc, argv);
}
