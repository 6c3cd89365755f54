/* bench.h: entry points of the benchmarks (argv[0] is the benchmark's name). */
#ifndef BURST_BENCH_H
#define BURST_BENCH_H

int bench_kernels(int argc, char **argv);
int bench_transport(int argc, char **argv);

/* Wall-clock seconds from a monotonic clock. */
double bench_now(void);

#endif
