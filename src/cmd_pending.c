/* cmd_pending.c: subcommands whose engine is not built yet. They say so
 * truthfully and exit 2, so scripts never mistake them for success. */
#include <stdio.h>

#include "src/cli.h"

/* Unused while no subcommand is pending; kept for the next one. */
__attribute__((unused)) static int pending(int argc, char **argv, const char *what)
{
    FILE *out = cli_wants_help(argc, argv) ? stdout : stderr;
    fprintf(out,
            "usage: burst %s ...\n\n"
            "burst %s (%s) is not built in this version of burstengine.\n",
            argv[0], argv[0], what);
    return cli_wants_help(argc, argv) ? 0 : EXIT_USAGE;
}

