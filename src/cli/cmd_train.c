/* cmd_train.c: `burst train`: reads the command line and the configuration,
 * joins the world and runs the trainer (src/train/trainer.h) on this rank.
 * Exit status: 0 done, 1 a failure while training, 2 a bad configuration or
 * a run that does not fit in memory (found before any rank works). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/train/init_source.h"
#include "src/train/trainer.h"
#include "util/parse.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst train [--config FILE] [--set section.key=value ...] [--print-config]\n"
            "       burst train --list-keys\n\n"
            "Trains a LLaMA-style model on sequences split across ranks. Launch it on every\n"
            "rank: `burst run -n 4 -- burst train ...`, or `srun -n 16 burst train ...`.\n"
            "Attention: [parallel] mask = causal, window, document or sparse (every key is\n"
            "listed by --list-keys and in doc/TRAINING.md; --print-config gives their values).\n\n"
            "  --config FILE        INI configuration; every key is checked (unknown keys,\n"
            "                       types and ranges are errors naming the key)\n"
            "  --set S.K=V          override one key after the file (repeatable, in order)\n"
            "  --print-config       check the configuration as a run on dp x cp ranks would,\n"
            "                       print it with defaults and exit (2 when it is not valid)\n"
            "  --list-keys          print every key with its default, whether a resumed run\n"
            "                       must keep the checkpoint's value, and its meaning; exit\n"
            "  --resume             continue from the latest checkpoint in [train] checkpoint_dir\n"
            "                       (bit for bit: the losses equal those of an uninterrupted\n"
            "                       run); refused, naming the key, when the configuration\n"
            "                       differs in a key that changes the numbers\n"
            "  --stop-after S       stop after step S (checkpointed when checkpoint_dir is set),\n"
            "                       e.g. to fit a job's time limit; --resume continues it\n"
            "  --inject-nan S[:R]   testing aid: make rank R's (default 0) gradient NaN at step S\n"
            "  --inject-overflow S  testing aid: make every rank's first gradient the largest\n"
            "                       float at step S, so that only their sum is infinite\n\n"
            "Output: a progress line on rank 0 (step, loss, tokens/s, achieved GFLOP/s and its\n"
            "fraction of this machine's sgemm rate, memory, ETA); [train] metrics names a\n"
            "JSON-lines file; [train] checkpoint_dir and checkpoint_every write checkpoints;\n"
            "[eval] eval_path (a passkey corpus) or [data] task = recall measure held-out\n"
            "accuracy after training, printed with the chance level.\n\n"
            "Exit status: 0 done, 1 a failure while training (a lost rank, a non-finite loss,\n"
            "a read error) or an accuracy below [eval] min_accuracy, 2 a bad configuration\n"
            "or a run that does not fit in memory ([memory] limit_bytes, or the node's\n"
            "available memory), found before any rank works.\n");
}

typedef struct {
    trainer_opts opts;
    int print_config;
    const char *config_path;
} train_args;

static int parse_args(int argc, char **argv, train_config *c, train_args *a)
{
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            a->config_path = argv[++i];
            if (train_config_load(c, a->config_path, err, sizeof err) != 0) {
                fprintf(stderr, "burst train: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (train_config_set(c, argv[++i], err, sizeof err) != 0) {
                fprintf(stderr, "burst train: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--print-config") == 0) {
            a->print_config = 1;
        } else if (strcmp(argv[i], "--list-keys") == 0) {
            train_config_list_keys(stdout);
            return 0;
        } else if (strcmp(argv[i], "--resume") == 0) {
            a->opts.resume = 1;
        } else if (strcmp(argv[i], "--stop-after") == 0 && i + 1 < argc) {
            if (bu_parse_i64_min(argv[++i], 1, &a->opts.stop_after) != 0) {
                fprintf(stderr, "burst train: --stop-after '%s': expected a step >= 1\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--inject-overflow") == 0 && i + 1 < argc) {
            if (bu_parse_i64_min(argv[++i], 1, &a->opts.overflow_step) != 0) {
                fprintf(stderr, "burst train: --inject-overflow '%s': expected a step >= 1\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--inject-nan") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%d:%d", &a->opts.inject_step, &a->opts.inject_rank) < 1) {
                fprintf(stderr, "burst train: --inject-nan '%s': expected STEP or STEP:RANK\n", argv[i]);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "burst train: unknown argument '%s'\n\n", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    return -1; /* go on */
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
    trainer t;
    memset(&t, 0, sizeof t);
    train_args a = {.opts = {.inject_step = -1, .inject_rank = 0, .overflow_step = -1}};
    train_config_default(&t.cfg);
    int status = parse_args(argc, argv, &t.cfg, &a);
    if (status >= 0) return status;
    if (a.print_config) return print_config(&t.cfg);
    t.opts = a.opts;
    char err[512];
    bt_options opt;
    bt_options_default(&opt);
    opt.intra = t.cfg.intra;
    opt.timeout_s = t.cfg.timeout;
    if (bt_world_init(&opt, &t.world, err, sizeof err) != BT_OK) {
        fprintf(stderr, "burst train: transport: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    status = trainer_setup(&t, err, sizeof err);
    if (status != 0) {
        if (t.rank == 0 && err[0]) fprintf(stderr, "burst train: %s\n", err);
        bt_world_abort(t.world);
        trainer_free(&t);
        return status;
    }
    return trainer_leave_world(&t, trainer_run(&t));
}
