/* cmd_version.c: `burst version` prints the version and the optional parts built in. */
#include "config.h"

#include <stdio.h>

#include "src/cli/cli.h"

int cmd_version(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: burst version\n\nPrints the version and which optional parts were built.\n");
        return 0;
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
    return 0;
}
