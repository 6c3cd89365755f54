/* launcher.c: `burst run`, the local launcher. */
#include <stdio.h>

#include "src/cli.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "burst run: not built\n");
    return EXIT_USAGE;
}
