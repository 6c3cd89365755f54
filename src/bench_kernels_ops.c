/* bench_kernels_ops.c: the per-op part of `burst bench kernels`. */
#include "src/bench.h"

int bench_kernels_ops(FILE *out, int quick)
{
    (void)quick;
    fprintf(out, "per-op kernels: not built in this version\n");
    return 0;
}
