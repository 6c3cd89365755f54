/* config.h: the configuration of `burst train`: an INI file (parsed with
 * inih) plus `--set section.key=value` overrides, every key validated with a
 * message naming it, named model presets, and a printable effective
 * configuration that loads back to the same values. */
#ifndef BURST_TRAIN_CONFIG_H
#define BURST_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/ops_math.h"
#include "src/train/data/recall.h"

enum { TRAIN_CONFIG_MAX_KEYS = 96 };

typedef struct {
    /* [model] */
    char preset[32];        /* a name of config.c's MODEL_PRESETS, or custom */
    int layers;
    int d_model;
    int n_heads;            /* query heads */
    int n_kv_heads;
    int d_ff;               /* SwiGLU hidden size */
    int vocab;
    double rope_theta;
    char rope_type[8];   /* default | linear | llama3 | yarn (kernels/ops_math.h) */
    double rope_scaling; /* the factor of linear, llama3, yarn (with rope_type default,
                          * a factor other than 1 is linear) */
    double rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    double rope_original_max_positions;                 /* llama3, yarn, dynamic */
    double rope_beta_fast, rope_beta_slow;              /* yarn */
    double rope_attention_factor;                       /* yarn; 0: 0.1 ln(factor) + 1 */
    int64_t max_seq;
    int tied_embeddings;    /* LM head shares the embedding matrix */
    double init_std;
    double norm_eps;
    char init_from[180]; /* weights to start from: a burst checkpoint or a Hugging Face folder */
    /* [data] */
    char source[16];        /* synthetic (in memory) | hdf5 (corpus files) */
    char task[16];          /* synthetic task: copy | counting | recall */
    int recall_pairs;       /* recall: key-value pairs in the first half of a sample */
    int recall_queries;     /* recall: keys asked again in the second half */
    int recall_keys;        /* recall: key tokens */
    int recall_values;      /* recall: values of each key */
    char path[180];         /* hdf5: corpus files, comma-separated */
    char sampling[16];      /* hdf5: sequential | shuffled */
    int64_t seq_len;        /* tokens per sequence (global, split over cp ranks) */
    int64_t doc_len;        /* synthetic, mask = document: mean tokens per document (0: none) */
    uint64_t data_seed;
    /* [parallel] */
    int dp, cp;             /* world = dp * cp, node-major */
    char layout[16];        /* auto | zigzag | contiguous */
    char mask[16];          /* causal | window | document | sparse */
    int64_t window;         /* tokens, for mask = window */
    int64_t sparse_block;   /* tokens per block, for mask = sparse */
    char sparse_pattern[64]; /* mask = sparse: e.g. local:4+global:1 (src/attn/sparse_pattern.h) */
    char backward[8];       /* auto | q | kv */
    char ring[8];           /* auto | flat | double */
    char zero[8];           /* 1 | 2 | 3 | auto: the ZeRO stage (train_config_zero_stage) */
    int64_t piece_rows;     /* query rows per attention kernel call between transport polls;
                             * 0: ring_piece_rows' default */
    /* [train] */
    int64_t steps;
    int micro_batches;      /* gradient accumulation: sequences per rank per step */
    double lr, min_lr;
    int64_t warmup_steps;
    double weight_decay, beta1, beta2, adam_eps;
    double grad_clip;       /* max global gradient norm; 0 = off */
    uint64_t seed;          /* initialisation */
    char on_nonfinite[8];   /* stop | skip */
    char device[8];         /* cpu | cuda: where the model computes */
    char matmul[8];         /* auto | bf16 | fp32: the parameters' type and the layers'
                             * matrix products (auto: bf16 on a device, fp32 on the CPU) */
    int log_every;
    char metrics[256];      /* JSON-lines file; empty = none */
    char checkpoint_dir[180]; /* where checkpoints go; empty = none */
    int64_t checkpoint_every; /* steps between checkpoints (0: only at the end) */
    int keep_checkpoints;   /* newest checkpoints kept (0 = all) */
    /* [eval] */
    char eval_path[180];    /* corpus with "/answers" (passkey): retrieval accuracy after training */
    int64_t eval_samples;
    double min_accuracy;    /* a held-out accuracy below this fails the run (0: never) */
    /* [memory] */
    double
        attn_kept_fraction; /* share of local tokens whose attention O, lse are kept: 0, 0.5, 1 */
    int keep_layers;        /* every layer's intermediates kept for the backward (1), or
                               recomputed from its stored input (0) */
    int offload_activations; /* on a device, each layer's stored activations in page-locked
                                host memory, copied out and back on a stream of their own */
    char optimizer[8];       /* device | host: where a device run keeps the optimizer's state */
    int64_t chunk_rows;      /* tokens per chunk of the token-wise work and the bf16 operands */
    int fused_head;         /* LM head fused with the loss, chunked (1) or the reference (0) */
    int64_t head_chunk;     /* tokens per chunk of logits */
    double z_loss;
    int64_t limit_bytes;    /* most bytes the training state of one rank may take; 0 = none */
    /* [transport] */
    char intra[8];          /* auto | ucx | nccl */
    double timeout;         /* seconds */
    /* which keys a file or --set gave (an explicit preset gives its keys), by
     * the key's row in config.c's table */
    unsigned char given[TRAIN_CONFIG_MAX_KEYS];
} train_config;

void train_config_default(train_config *c);
/* Sets the [model] dimensions of a named preset; -1 for an unknown name. */
int train_config_preset(train_config *c, const char *name);
/* Reads an INI file over c. The [model] preset key is applied first, so keys
 * given next to it override the preset. Unknown sections or keys, values of
 * the wrong type and out-of-range values are errors naming file, line and
 * section.key. Returns 0 or -1 with the message in err. */
int train_config_load(train_config *c, const char *path, char *err, size_t err_len);
/* The same as train_config_load for configuration text held in memory (e.g. a
 * checkpoint's); messages name it `name`. Empty text changes nothing. */
int train_config_load_text(train_config *c, const char *text, const char *name, char *err,
                           size_t err_len);
/* Applies one "section.key=value" override, with the same checks. Overrides
 * apply in the order given: "model.preset=NAME" sets all the preset's model
 * dimensions, replacing any model key set before it, so put it first. */
int train_config_set(train_config *c, const char *assignment, char *err, size_t err_len);
/* Checks the configuration as a whole against the world size: heads dividing,
 * dp * cp = world, sequence length compatible with the layout and the ranks,
 * and so on. Returns 0 or -1 with a message naming the key. */
int train_config_validate(const train_config *c, int world_size, char *err, size_t err_len);
/* The RoPE of [model] rope_* (rope_type default with a factor other than 1
 * is linear; yarn's attention factor 0 is 0.1 ln(factor) + 1; dynamic's
 * sequence is [data] seq_len). */
bk_rope train_config_rope(const train_config *c);
/* The rope_* keys of c set to r's values. */
void train_config_set_rope(train_config *c, const bk_rope *r);
/* The shape of the recall task ([data] recall_* and seq_len). */
recall_shape train_config_recall(const train_config *c);
/* [parallel] zero as a number: 1, 2 or 3, and 0 for auto. */
int train_config_zero_stage(const train_config *c);
/* The lowest stage the configuration allows: 2 with the optimizer on the
 * host ([memory] optimizer = host), else 1; and whether it is there. */
int train_config_lowest_zero_stage(const train_config *c);
int train_config_optimizer_on_host(const train_config *c);
/* The effective configuration as INI text (loads back to the same values). */
void train_config_print(FILE *out, const train_config *c);
/* Every key as a Markdown table (key, default, whether a resumed run must
 * keep the checkpoint's value, meaning): `burst train --list-keys`, and the
 * table of doc/TRAINING.md, which test_train_config compares with it. */
void train_config_list_keys(FILE *out);
/* Takes the model from src (the configuration of the weights [model]
 * init_from names, called src_name): the shape keys (layers, d_model,
 * n_heads, n_kv_heads, d_ff, vocab, tied_embeddings) must be src's where c was
 * given them (-1 naming both values), and are src's otherwise; the other
 * [model] keys that change the numbers (rope_theta, rope_scaling, norm_eps)
 * are src's unless given, so that a later stage may change RoPE. */
int train_config_take_model(train_config *c, const train_config *src, const char *src_name,
                            char *err, size_t err_len);
/* Whether a run configured as `now` continues the numbers of a checkpoint
 * written under `was`: 0 when every key that changes them is equal (the model's
 * dimensions, the data, dp, cp, layout, mask and window, micro-batches, the
 * optimizer and its schedule, the loss: the keys marked RESUME in config.c's
 * table, which says why), or -1
 * with the first that differs named with both values, as
 * "[model] d_model = 64, this run has 128". */
int train_config_resume_check(const train_config *was, const train_config *now, char *err,
                              size_t err_len);

#endif
