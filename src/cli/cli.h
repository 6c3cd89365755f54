/* cli.h: the subcommands of the `burst` program and the conventions they share.
 * Exit status (util/exit_codes.h): 0 success, 1 failure while running, 2 bad
 * usage or input found before work starts. */
#ifndef BURST_CLI_H
#define BURST_CLI_H

#include <stdio.h>

#include "src/train/config.h"
#include "src/train/trainer.h"
#include "util/exit_codes.h"

/* Each subcommand takes argv with argv[0] = its own name. */
int cmd_train(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plan_memory(int argc, char **argv); /* burst plan memory (from cmd_plan) */
int cmd_plan_time(int argc, char **argv);   /* burst plan time (from cmd_plan) */
int cmd_run(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_version(int argc, char **argv);

/* --config FILE and --set S.K=V, applied in order to a training
 * configuration, as option-table setters (util/options.h): a command's
 * settings begin with this struct. Errors name the command and the key. */
typedef struct {
    train_config *cfg;
    const char *cmd; /* "burst train" */
} cli_config_ref;
int cli_set_config_file(void *settings, const char *path);
int cli_set_config_key(void *settings, const char *assignment);

/* A command's subcommands as one table, from which both the dispatch and
 * the help's list read (burst, burst bench). */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] = name */
    const char *summary;               /* lines separated by '\n' */
} cli_subcommand;
/* The row of subs[n] named name, or NULL. */
const cli_subcommand *cli_find_subcommand(const cli_subcommand *subs, int n, const char *name);
/* "  name" padded to width columns, then the summary, its later lines
 * indented to the same column. */
void cli_print_subcommands(FILE *out, const cli_subcommand *subs, int n, int width);
/* `CMD SUBCOMMAND ...`: runs the row of subs[n] that argv[1] names with
 * argv + 1. -h, --help or help prints usage on stdout (0); no subcommand, or
 * one not in the table (named on stderr), prints it on stderr (EXIT_USAGE). */
int cli_dispatch(const char *cmd, const cli_subcommand *subs, int n, void (*usage)(FILE *out),
                 int argc, char **argv);

/* Joins the world (cfg's [transport] intra and timeout) and sets up a
 * trainer of cfg and opts on it (burst train, burst eval: command names the
 * messages). The trainer, or NULL with *status the exit status, the reason
 * said (rank 0 the setup's error) and the world aborted. */
trainer *cli_start_trainer(const train_config *cfg, const trainer_opts *opts, const char *command,
                           int *status);

/* True when argv holds -h or --help before a "--". */
int cli_wants_help(int argc, char **argv);

#endif
