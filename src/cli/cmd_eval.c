/* cmd_eval.c: `burst eval`: the negative log-likelihood of a model (a burst
 * checkpoint or a Hugging Face folder) on an HDF5 corpus, over the ranks it
 * runs on, with the trainer's configuration, layout and rings
 * (trainer_eval_nll). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/train/trainer.h"
#include "util/parse.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst eval --init-from MODEL --data CORPUS.h5[,MORE.h5] [--samples K]\n"
            "                  [--out F.json] [--config FILE] [--set section.key=value ...]\n\n"
            "The loss of a model on a corpus: consecutive windows of [data] seq_len + 1\n"
            "tokens (the first seq_len are inputs, the next seq_len labels), split over the\n"
            "ranks it runs on as `burst train` would split them (`burst run -n 4 -- burst\n"
            "eval ... --set parallel.cp=4`). Prints one line,\n"
            "  eval: nll X over N tokens (ppl Y)\n"
            "X the mean negative log-likelihood in nats over the N predicted tokens.\n\n"
            "  --init-from MODEL  a burst checkpoint folder, one step-S folder of one, or a\n"
            "                     Hugging Face folder ([model] init_from: the model's keys\n"
            "                     come from it)\n"
            "  --data CORPUS      HDF5 corpora ([data] path), read in order\n"
            "  --samples K        the first K windows (default: every whole window)\n"
            "  --out F.json       also write {nll, tokens, samples: [{index, nll}],\n"
            "                     by_position: [{start, end, tokens, nll}]} with power-of-two\n"
            "                     position buckets\n"
            "  --config, --set    as for burst train: seq_len, mask, dp x cp, device, ...\n\n"
            "The run holds what training would but the gradients and the optimizer's\n"
            "state; [memory] limit_bytes applies as for training.\n"
            "Exit status: 0 done, 1 a failure while running, 2 bad usage or input.\n");
}

typedef struct {
    int64_t samples;
    const char *out_json;
    int have_model, have_data;
} eval_args;

/* --set in the form train_config_set takes. */
static int set(train_config *c, const char *key, const char *value)
{
    char assignment[1024], err[512];
    snprintf(assignment, sizeof assignment, "%s=%s", key, value);
    if (train_config_set(c, assignment, err, sizeof err) == 0) return 0;
    fprintf(stderr, "burst eval: %s\n", err);
    return -1;
}

static int parse_args(int argc, char **argv, train_config *c, eval_args *a)
{
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 0;
        } else if (!value) {
            bad = 1;
        } else if (!strcmp(arg, "--config")) {
            if (train_config_load(c, value, err, sizeof err) != 0) {
                fprintf(stderr, "burst eval: %s\n", err);
                return EXIT_USAGE;
            }
        } else if (!strcmp(arg, "--set")) {
            bad = train_config_set(c, value, err, sizeof err) != 0;
            if (bad) fprintf(stderr, "burst eval: %s\n", err);
            if (bad) return EXIT_USAGE;
        } else if (!strcmp(arg, "--init-from")) {
            a->have_model = 1;
            if (set(c, "model.init_from", value) != 0) return EXIT_USAGE;
        } else if (!strcmp(arg, "--data")) {
            a->have_data = 1;
            if (set(c, "data.source", "hdf5") || set(c, "data.path", value)) return EXIT_USAGE;
        } else if (!strcmp(arg, "--samples")) {
            bad = bu_parse_i64_min(value, 1, &a->samples) != 0;
        } else if (!strcmp(arg, "--out")) {
            a->out_json = value;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "burst eval: unknown argument or bad value '%s%s%s'\n\n", arg,
                    value ? " " : "", value ? value : "");
            usage(stderr);
            return EXIT_USAGE;
        }
        i++;
    }
    if (!a->have_model || !a->have_data) {
        fprintf(stderr, "burst eval: --init-from and --data are required\n\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    /* windows in order; the likelihood comes from the fused head */
    if (set(c, "data.sampling", "sequential") || set(c, "memory.fused_head", "true"))
        return EXIT_USAGE;
    return -1; /* go on */
}

int cmd_eval(int argc, char **argv)
{
    trainer t;
    memset(&t, 0, sizeof t);
    train_config_default(&t.cfg);
    eval_args a = {0};
    int status = parse_args(argc, argv, &t.cfg, &a);
    if (status >= 0) return status;
    t.opts = (trainer_opts){.inject_step = -1, .overflow_step = -1, .forward_only = 1};
    char err[1024];
    bt_options opt;
    bt_options_default(&opt);
    opt.intra = t.cfg.intra;
    opt.timeout_s = t.cfg.timeout;
    if (bt_world_init(&opt, &t.world, err, sizeof err) != BT_OK) {
        fprintf(stderr, "burst eval: transport: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    status = trainer_setup(&t, err, sizeof err);
    if (status != 0) {
        if (t.rank == 0 && err[0]) fprintf(stderr, "burst eval: %s\n", err);
        bt_world_abort(t.world);
        trainer_free(&t);
        return status;
    }
    err[0] = '\0';
    status = trainer_eval_nll(&t, a.samples, a.out_json, err, sizeof err);
    if (status != 0 && err[0] && (t.rank == 0 || status != STOP_AGREED))
        fprintf(stderr, "burst eval: rank %d: %s\n", t.rank, err);
    return trainer_leave_world(&t, status);
}
