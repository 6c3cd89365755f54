/* bench_transport.c: `burst bench transport`. */
#include <stdio.h>

#include "src/bench.h"
#include "src/cli.h"

int bench_transport(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "burst bench transport: not built in this version\n");
    return EXIT_USAGE;
}
