/* cmd_selftest.c: `burst selftest` checks the kernels and the transport built
 * into this program, on whatever world it is launched in. */
#include <stdio.h>

#include "src/cli.h"
#include "src/selftest.h"

int cmd_selftest(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: burst selftest\n\nChecks the kernels and the transport on this machine.\n");
        return 0;
    }
    int failed = selftest_kernels();
    printf("selftest kernels: %s\n", failed ? "FAILED" : "ok");
    return failed ? EXIT_RUN_FAILURE : 0;
}
