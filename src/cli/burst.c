/* burst.c: the single `burst` program; dispatches to a subcommand. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/placement.h"

static const cli_subcommand subcommands[] = {
    {"train", cmd_train, "train a LLaMA-style model across ranks (HDF5 corpus or synthetic tasks)"},
    {"convert", cmd_convert, "Hugging Face safetensors folders to and from burst checkpoints"},
    {"eval", cmd_eval, "the loss of a model (checkpoint or Hugging Face folder) on a corpus"},
    {"data", cmd_data, "HDF5 corpora: import, synth (passkey, copy), info, validate"},
    {"bench", cmd_bench, "benchmarks: kernels, transport, attention, train"},
    {"plan", cmd_plan, "plan attention (bytes, steps) or memory (a rank's parts, what fits)"},
    {"run", cmd_run, "local launcher: start N ranks of a program on this machine"},
    {"selftest", cmd_selftest,
     "check the kernels and the transport on this machine (any world size)"},
    {"version", cmd_version, "print the version and which optional parts were built"},
};
enum { N_SUBCOMMANDS = sizeof subcommands / sizeof subcommands[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst COMMAND [ARGS...]\n\n"
                 "burstengine trains transformers on sequences of a million tokens and more,\n"
                 "split along the sequence across ranks.\n\ncommands:\n");
    cli_print_subcommands(out, subcommands, N_SUBCOMMANDS, 13);
    fprintf(out, "\n'burst COMMAND --help' describes a command.\n"
                 "exit status: 0 success, 1 failure while running, 2 bad usage or input.\n");
}

int main(int argc, char **argv)
{
    cli_place_slurm_task(); /* before OpenMP starts its threads */
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) return cmd_version(1, argv + 1);
    const cli_subcommand *sub = cli_find_subcommand(subcommands, N_SUBCOMMANDS, argv[1]);
    if (sub) return sub->run(argc - 1, argv + 1);
    fprintf(stderr, "burst: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
