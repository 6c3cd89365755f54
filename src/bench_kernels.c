/* bench_kernels.c: `burst bench kernels`. */
#include <stdio.h>

#include "src/bench.h"
#include "src/cli.h"

int bench_kernels(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "burst bench kernels: not built in this version\n");
    return EXIT_USAGE;
}
