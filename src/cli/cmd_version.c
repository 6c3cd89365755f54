/* cmd_version.c: `burst version` prints the version and the optional parts
 * built in; --verbose adds this process's OpenMP threads and CPUs. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/placement.h"

int cmd_version(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: burst version [--verbose]\n\n"
               "Prints the version and which optional parts were built.\n"
               "  --verbose   also the OpenMP threads and the CPUs this process runs on\n"
               "              (burst run -n 4 -- burst version --verbose: each rank's share)\n");
        return 0;
    }
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verbose") != 0) {
            fprintf(stderr, "burst version: unexpected argument '%s'\n", argv[i]);
            return EXIT_USAGE;
        }
        verbose = 1;
    }
    printf("burstengine %s\n", PACKAGE_VERSION);
#ifdef HAVE_CUDA
    printf("cuda:  yes (%s)\n", BURST_CUDA_ARCHS);
#else
    printf("cuda:  no\n");
#endif
#ifdef HAVE_NCCL
    printf("nccl:  yes\n");
#else
    printf("nccl:  no\n");
#endif
#ifdef HAVE_PMIX
    printf("pmix:  yes\n");
#else
    printf("pmix:  no\n");
#endif
    printf("blas:  %s\n", BURST_BLAS_NAME);
#ifdef BURST_SANITIZERS
    printf("build: sanitizers (ASan, UBSan)\n");
#endif
    if (verbose) {
        printf("openmp: ");
        cli_placement_print(stdout);
        printf("\n");
    }
    return 0;
}
