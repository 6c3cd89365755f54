/* cmd_eval.c: `burst eval`: the negative log-likelihood of a model (a burst
 * checkpoint or a Hugging Face folder) on an HDF5 corpus, over the ranks it
 * runs on, with the trainer's configuration, layout and rings
 * (trainer_eval_nll). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/train/trainer.h"
#include "util/options.h"

/* What the command line sets; the configuration first (cli_config_ref). */
typedef struct {
    cli_config_ref config;
    int64_t samples;
    const char *out_json;
    int have_model, have_data;
} eval_args;

/* One key of the configuration, as --set would set it: 0, or -2 (said). */
static int set_key(eval_args *a, const char *key, const char *value)
{
    char assignment[1024];
    snprintf(assignment, sizeof assignment, "%s=%s", key, value);
    return cli_set_config_key(a, assignment);
}

static int set_model(void *a, const char *v)
{
    ((eval_args *)a)->have_model = 1;
    return set_key(a, "model.init_from", v);
}

static int set_data(void *a, const char *v)
{
    ((eval_args *)a)->have_data = 1;
    int rc = set_key(a, "data.source", "hdf5");
    return rc != 0 ? rc : set_key(a, "data.path", v);
}

static const bu_option options[] = {
    {"--init-from", "MODEL", BU_OPT_CUSTOM, 0, 0, 0, set_model,
     "a burst checkpoint folder, one step-S folder of one, or a\n"
     "Hugging Face folder ([model] init_from: the model's keys\n"
     "come from it)"},
    {"--data", "CORPUS", BU_OPT_CUSTOM, 0, 0, 0, set_data,
     "HDF5 corpora ([data] path), read in order"},
    {"--samples", "K", BU_OPT_I64, offsetof(eval_args, samples), 1, 9e18, NULL,
     "the first K windows (default: every whole window)"},
    {"--out", "F.json", BU_OPT_STRING, offsetof(eval_args, out_json), 0, 0, NULL,
     "also write {nll, tokens, samples: [{index, nll}],\n"
     "by_position: [{start, end, tokens, nll}]} with power-of-two\n"
     "position buckets"},
    {"--config", "FILE", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_file,
     "as for burst train: seq_len, mask, dp x cp, device, ..."},
    {"--set", "S.K=V", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_key,
     "one key after the file (repeatable, in order)"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

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
            "X the mean negative log-likelihood in nats over the N predicted tokens.\n\n");
    bu_options_print(out, options, N_OPTIONS, 22);
    fprintf(out, "\nThe run holds what training would but the gradients and the optimizer's\n"
                 "state; [memory] limit_bytes applies as for training.\n"
                 "Exit status: 0 done, 1 a failure while running, 2 bad usage or input.\n");
}

/* -1 to go on, or an exit status (0 after --help). */
static int parse_args(int argc, char **argv, eval_args *a)
{
    int parsed = bu_options_parse("burst eval", options, N_OPTIONS, argc, argv, a, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    if (!a->have_model || !a->have_data) {
        fprintf(stderr, "burst eval: --init-from and --data are required\n\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    /* windows in order; the likelihood comes from the fused head */
    if (set_key(a, "data.sampling", "sequential") || set_key(a, "memory.fused_head", "true"))
        return EXIT_USAGE;
    return -1; /* go on */
}

int cmd_eval(int argc, char **argv)
{
    train_config cfg;
    train_config_default(&cfg);
    eval_args a = {.config = {&cfg, "burst eval"}};
    int status = parse_args(argc, argv, &a);
    if (status >= 0) return status;
    const trainer_opts opts = {.inject_step = -1, .overflow_step = -1, .forward_only = 1};
    trainer *t = cli_start_trainer(&cfg, &opts, "burst eval", &status);
    if (!t) return status;
    char err[1024] = "";
    status = trainer_eval_nll(t, a.samples, a.out_json, err, sizeof err);
    if (status != 0 && err[0] && (trainer_rank(t) == 0 || status != STOP_AGREED))
        fprintf(stderr, "burst eval: rank %d: %s\n", trainer_rank(t), err);
    return trainer_leave_world(t, status);
}
