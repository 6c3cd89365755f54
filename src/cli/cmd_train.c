/* cmd_train.c: `burst train`: reads the command line and the configuration,
 * joins the world and runs the trainer (src/train/trainer.h) on this rank.
 * Exit status: 0 done, 1 a failure while training, 2 a bad configuration or
 * a run that does not fit in memory (found before any rank works). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/train/init_source.h"
#include "src/train/trainer.h"
#include "util/options.h"

/* What the command line sets; the configuration first (cli_config_ref). */
typedef struct {
    cli_config_ref config;
    trainer_opts opts;
    int print_config, list_keys;
} train_args;

static int set_inject_nan(void *a, const char *v)
{
    trainer_opts *o = &((train_args *)a)->opts;
    char tail;
    int n = sscanf(v, "%d:%d%c", &o->inject_step, &o->inject_rank, &tail);
    return (n == 1 || n == 2) && o->inject_step >= 1 && o->inject_rank >= 0 ? 0 : -1;
}

#define OPT(field) offsetof(train_args, field)
static const bu_option options[] = {
    {"--config", "FILE", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_file,
     "INI configuration; every key is checked (unknown keys,\n"
     "types and ranges are errors naming the key)"},
    {"--set", "S.K=V", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_key,
     "override one key after the file (repeatable, in order)"},
    {"--print-config", NULL, BU_OPT_FLAG, OPT(print_config), 0, 0, NULL,
     "check the configuration as a run on dp x cp ranks would,\n"
     "print it with defaults and exit (2 when it is not valid)"},
    {"--list-keys", NULL, BU_OPT_FLAG, OPT(list_keys), 0, 0, NULL,
     "print every key with its default, whether a resumed run\n"
     "must keep the checkpoint's value, and its meaning; exit"},
    {"--resume", NULL, BU_OPT_FLAG, OPT(opts.resume), 0, 0, NULL,
     "continue from the latest checkpoint in [train] checkpoint_dir\n"
     "(bit for bit: the losses equal those of an uninterrupted\n"
     "run); refused, naming the key, when the configuration\n"
     "differs in a key that changes the numbers"},
    {"--dry-run", NULL, BU_OPT_FLAG, OPT(opts.dry_run), 0, 0, NULL,
     "set up as the run would (memory check, device arena, model,\n"
     "optimizer, data), print the start report, with what each\n"
     "part holds on a device, and exit before the first step"},
    {"--stop-after", "S", BU_OPT_I64, OPT(opts.stop_after), 1, 9e18, NULL,
     "stop after step S (checkpointed when checkpoint_dir is set),\n"
     "e.g. to fit a job's time limit; --resume continues it"},
    {"--inject-nan", "S[:R]", BU_OPT_CUSTOM, 0, 0, 0, set_inject_nan,
     "testing aid: make rank R's (default 0) gradient NaN at step S"},
    {"--inject-overflow", "S", BU_OPT_I64, OPT(opts.overflow_step), 1, 9e18, NULL,
     "testing aid: make every rank's first gradient the largest\n"
     "float at step S, so that only their sum is infinite"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: burst train [--config FILE] [--set section.key=value ...] [--print-config]\n"
        "       burst train --list-keys\n\n"
        "Trains a LLaMA-style model on sequences split across ranks. Launch it on every\n"
        "rank: `burst run -n 4 -- burst train ...`, or `srun -n 16 burst train ...`.\n"
        "Attention: [parallel] mask = causal, window, document or sparse (every key is\n"
        "listed by --list-keys and in doc/TRAINING.md; --print-config gives their values).\n\n");
    bu_options_print(out, options, N_OPTIONS, 25);
    fprintf(out,
            "\nOutput: a progress line on rank 0 (step, loss, tokens/s, achieved GFLOP/s and its\n"
            "fraction of this machine's sgemm rate, memory, ETA); [train] metrics names a\n"
            "JSON-lines file; [train] checkpoint_dir and checkpoint_every write checkpoints;\n"
            "[eval] eval_path (a passkey corpus) or [data] task = recall measure held-out\n"
            "accuracy after training, printed with the chance level.\n\n"
            "Exit status: 0 done, 1 a failure while training (a lost rank, a non-finite loss,\n"
            "a read error) or an accuracy below [eval] min_accuracy, 2 a bad configuration\n"
            "or a run that does not fit in memory ([memory] limit_bytes, or the node's\n"
            "available memory), found before any rank works.\n");
}

/* 0 to go on, or an exit status (0 after --help or --list-keys). */
static int parse_args(int argc, char **argv, train_args *a)
{
    int parsed = bu_options_parse("burst train", options, N_OPTIONS, argc, argv, a, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed == 0 && a->list_keys) train_config_list_keys(stdout);
    return parsed == 1 || (parsed == 0 && a->list_keys) ? 0 : parsed == 0 ? -1 : EXIT_USAGE;
}

/* --print-config: the configuration ([model] init_from applied) validated as a run on the dp x cp
 * ranks it names would validate it, printed only when valid. */
static int print_config(train_config *c)
{
    char err[1024];
    int64_t world = (int64_t)c->dp * c->cp;
    if (init_source_take_model(c, err, sizeof err) != 0 ||
        train_config_validate(c, world <= INT_MAX ? (int)world : INT_MAX, err, sizeof err) != 0) {
        fprintf(stderr, "burst train: %s\n", err);
        return EXIT_USAGE;
    }
    train_config_print(stdout, c);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    train_config cfg;
    train_args a = {.config = {&cfg, "burst train"},
                    .opts = {.inject_step = -1, .inject_rank = 0, .overflow_step = -1}};
    train_config_default(&cfg);
    int status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    if (a.print_config) return print_config(&cfg);
    trainer *t = cli_start_trainer(&cfg, &a.opts, "burst train", &status);
    if (!t) return status;
    return trainer_leave_world(t, trainer_run(t));
}
