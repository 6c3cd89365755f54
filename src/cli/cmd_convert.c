/* cmd_convert.c: `burst convert`: a Hugging Face Llama-family folder into a
 * burst checkpoint of weights only (step 0), and a burst checkpoint into a
 * Hugging Face folder that transformers loads. Nothing is written on a
 * refusal: the checkpoint and the folder are renamed into place when whole. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "src/cli/cli.h"
#include "src/train/hf_model.h"
#include "src/train/init_source.h"
#include "util/options.h"

typedef struct {
    const char *from, *to, *src, *out, *tokenizer;
    hf_write_opts hf;
} convert_args;

static int set_dtype(void *a, const char *v)
{
    if (strcmp(v, "bf16") != 0 && strcmp(v, "fp32") != 0) return -1;
    ((convert_args *)a)->hf.bf16 = strcmp(v, "bf16") == 0;
    return 0;
}

/* SRC, then OUT. */
static int take_path(void *a, const char *arg)
{
    convert_args *c = a;
    if (!c->src)
        c->src = arg;
    else if (!c->out)
        c->out = arg;
    else
        return -1;
    return 0;
}

/* The options, one row each: what is parsed and what --help prints. */
static const bu_option options[] = {
    {"--from", "hf|burst", BU_OPT_STRING, offsetof(convert_args, from), 0, 0, NULL,
     "what SRC is: a Hugging Face folder, or a burst checkpoint (its folder\n"
     "or one step-S folder)"},
    {"--to", "burst|hf", BU_OPT_STRING, offsetof(convert_args, to), 0, 0, NULL,
     "what OUT becomes (the other kind)"},
    {"--dtype", "bf16|fp32", BU_OPT_CUSTOM, 0, 0, 0, set_dtype,
     "--to hf: the weights' type (default bf16)"},
    {"--shard-size", "SIZE", BU_OPT_BYTES, offsetof(convert_args, hf.shard_bytes), 0, 9.2e18, NULL,
     "--to hf: most bytes per safetensors file, e.g. 5G (default;\n"
     "0: one file); above it, shards and model.safetensors.index.json"},
    {"--tokenizer", "DIR", BU_OPT_STRING, offsetof(convert_args, tokenizer), 0, 0, NULL,
     "--to hf: copy the tokenizer files of DIR beside the model"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst convert --from hf --to burst HF_DIR OUT\n"
                 "       burst convert --from burst --to hf CKPT OUT_DIR [--dtype bf16|fp32]\n"
                 "                     [--shard-size SIZE] [--tokenizer DIR]\n\n"
                 "Imports a LlamaForCausalLM or MistralForCausalLM folder (config.json and\n"
                 "safetensors in bf16, fp16 or fp32) as a burst checkpoint of weights only\n"
                 "(OUT/latest, OUT/step-0/model.h5), which [model] init_from starts a run from;\n"
                 "exports a checkpoint as a folder transformers' from_pretrained loads.\n"
                 "RoPE scaling (linear, llama3, yarn, dynamic) is kept. What burstengine does\n"
                 "not compute (biases, another activation or model type, a head_dim other than\n"
                 "hidden_size / heads, another RoPE scaling) is refused, naming the key.\n\n");
    bu_options_print(out, options, N_OPTIONS, 29);
    fprintf(out, "\nExit status: 0 done, 2 bad usage, a refused model or a failed write (then\n"
                 "nothing is left behind).\n");
}

static int parse_args(int argc, char **argv, convert_args *a)
{
    *a = (convert_args){.hf = {.bf16 = 1, .shard_bytes = (int64_t)5 << 30}};
    if (bu_options_parse("burst convert", options, N_OPTIONS, argc, argv, a, take_path) != 0)
        return -1;
    int hf_to_burst = a->from && a->to && !strcmp(a->from, "hf") && !strcmp(a->to, "burst");
    int burst_to_hf = a->from && a->to && !strcmp(a->from, "burst") && !strcmp(a->to, "hf");
    if ((!hf_to_burst && !burst_to_hf) || !a->out) {
        fprintf(stderr, "burst convert: expected --from hf --to burst or --from burst --to hf, "
                        "SRC and OUT\n\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The source: its configuration (model keys), layout and parameters. */
typedef struct {
    train_config cfg;
    model_layout model;
    float *params;
    int64_t max_positions;
} source;

static int read_source(const convert_args *a, source *s, char *err, size_t err_len)
{
    init_source in;
    train_config base;
    train_config_default(&base);
    if (init_source_open(a->src, &in, err, err_len) != 0) return -1;
    if ((in.kind == INIT_HF) != (strcmp(a->from, "hf") == 0)) {
        snprintf(err, err_len, "%s: not a %s", a->src,
                 in.kind == INIT_HF ? "burst checkpoint (it is a Hugging Face folder)"
                                    : "Hugging Face folder (no config.json)");
        return -1;
    }
    if (init_source_config(&in, &base, &s->cfg, &s->max_positions, err, err_len) != 0) return -1;
    model_dims d = model_dims_of(&s->cfg);
    if (model_layout_init(&s->model, &d) != 0 ||
        !(s->params = malloc((size_t)s->model.n_params * sizeof(float)))) {
        snprintf(err, err_len, "out of memory for %" PRId64 " parameters", s->model.n_params);
        return -1;
    }
    return init_source_params(&in, &s->model, s->params, err, err_len);
}

/* The configuration as INI text (what a checkpoint stores), malloc'd. */
static char *config_text(const train_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    train_config_print(f, c);
    fclose(f);
    return text;
}

static int write_checkpoint(const char *out, const source *s, char *err, size_t err_len)
{
    struct stat sb;
    char latest[PATH_MAX];
    snprintf(latest, sizeof latest, "%s/latest", out);
    if (stat(latest, &sb) == 0) {
        snprintf(err, err_len, "%s already holds a checkpoint: nothing written", out);
        return -1;
    }
    char *text = config_text(&s->cfg);
    io_ckpt_meta meta = {.step = 0,
                         .world_size = 1,
                         .n_params = s->model.n_params,
                         .config_text = text ? text : "",
                         .weights_only = 1};
    int rc = io_checkpoint_begin(out, 0, err, err_len) != 0 ||
                     io_checkpoint_write_rank(out, 0, 0, &meta, 0, s->model.n_params, s->params,
                                              NULL, NULL, err, err_len) != 0 ||
                     io_checkpoint_commit(out, 0, 0, err, err_len) != 0
                 ? -1
                 : 0;
    free(text);
    return rc;
}

int cmd_convert(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    convert_args a;
    if (parse_args(argc, argv, &a) != 0) return EXIT_USAGE;
    source s;
    memset(&s, 0, sizeof s);
    char err[1024];
    int rc = read_source(&a, &s, err, sizeof err);
    if (rc == 0) {
        a.hf.max_positions = s.max_positions ? s.max_positions : s.cfg.max_seq;
        a.hf.tokenizer_dir = a.tokenizer;
        rc = strcmp(a.to, "burst") == 0
                 ? write_checkpoint(a.out, &s, err, sizeof err)
                 : hf_model_write(a.out, &s.model, s.params, &a.hf, err, sizeof err);
        if (rc == 0)
            printf("burst convert: %s -> %s (%" PRId64 " parameters, %d layers)\n", a.src, a.out,
                   s.model.n_params, s.cfg.layers);
    }
    if (rc != 0) fprintf(stderr, "burst convert: %s\n", err);
    free(s.params);
    model_layout_free(&s.model);
    return rc == 0 ? 0 : EXIT_USAGE;
}
