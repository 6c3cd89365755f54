/* cmd_version.c: `burst version` prints the version and the optional parts
 * built in; --verbose adds this process's OpenMP threads and CPUs. */
#include "config.h"

#include <stdio.h>

#include "src/cli/cli.h"
#include "src/cli/placement.h"
#include "util/options.h"

static const bu_option options[] = {
    {"--verbose", NULL, BU_OPT_FLAG, 0, 0, 0, NULL,
     "also the OpenMP threads and the CPUs this process runs on\n"
     "(burst run -n 4 -- burst version --verbose: each rank's share)"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst version [--verbose]\n\n"
                 "Prints the version and which optional parts were built.\n");
    bu_options_print(out, options, N_OPTIONS, 14);
}

int cmd_version(int argc, char **argv)
{
    int verbose = 0; /* the one field the table sets */
    int parsed = bu_options_parse("burst version", options, N_OPTIONS, argc, argv, &verbose, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
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
#ifdef HAVE_CUDNN_FRONTEND
    printf("cudnn: yes (frontend %s; libcudnn loaded at run time)\n", BURST_CUDNN_FRONTEND_VERSION);
#else
    printf("cudnn: no\n");
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
