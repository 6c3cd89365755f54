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
#include "src/attn/ring_plan.h"
#include "src/train/data/recall.h"
#include "src/train/data/token_source.h"

enum { TRAIN_CONFIG_MAX_KEYS = 96 };

/* The values of the keys that choose among names. Each key's row in config.c's
 * table lists its names, in the order of these values (a value is its name's
 * index there): that list is the one place where a name and its value meet,
 * and train_config_name gives the name back. Keys whose choice the engine
 * already has a type for store that type: [model] rope_type a bk_rope_type
 * (kernels/ops_math.h), [data] task a synthetic_task (token_source.h),
 * [parallel] backward a ring_bwd_choice (src/attn/ring_plan.h). [model]
 * preset is an index into the list of presets, whose last name is custom. */
typedef enum { SOURCE_SYNTHETIC = 0, SOURCE_HDF5 = 1 } train_source_kind;
typedef enum { SAMPLING_SEQUENTIAL = 0, SAMPLING_SHUFFLED = 1 } train_sampling;
typedef enum {
    LAYOUT_CHOICE_AUTO = 0,
    LAYOUT_CHOICE_ZIGZAG = 1,
    LAYOUT_CHOICE_CONTIGUOUS = 2
} train_layout_choice;
typedef enum {
    MASK_CHOICE_CAUSAL = 0,
    MASK_CHOICE_WINDOW = 1,
    MASK_CHOICE_DOCUMENT = 2,
    MASK_CHOICE_SPARSE = 3
} train_mask_choice;
typedef enum {
    RING_CHOICE_AUTO = 0,
    RING_CHOICE_FLAT = 1,
    RING_CHOICE_DOUBLE = 2
} train_ring_choice;
/* [parallel] zero: the stage less one, or auto (train_config_zero_stage). */
typedef enum { ZERO_1 = 0, ZERO_2 = 1, ZERO_3 = 2, ZERO_AUTO = 3 } train_zero;
/* [memory] attn_kept_fraction = auto and keep_layers = auto, until the setup
 * (or `burst plan memory`) chooses by memory (choose_memory_candidates). */
#define TRAIN_KEPT_AUTO (-1.0)
enum { TRAIN_AUTO = -1 };
typedef enum { NONFINITE_STOP = 0, NONFINITE_SKIP = 1 } train_nonfinite;
typedef enum { TRAIN_DEVICE_CPU = 0, TRAIN_DEVICE_CUDA = 1 } train_device;
typedef enum { MATMUL_AUTO = 0, MATMUL_BF16 = 1, MATMUL_FP32 = 2 } train_matmul;
typedef enum { OPTIMIZER_ON_DEVICE = 0, OPTIMIZER_ON_HOST = 1 } train_optimizer_place;
typedef enum { INTRA_AUTO = 0, INTRA_UCX = 1, INTRA_NCCL = 2 } train_intra;
/* [attention] kernel: which kernel computes a ring's block pairs on a device */
typedef enum { ATTN_KERNEL_AUTO = 0, ATTN_KERNEL_CUDNN = 1, ATTN_KERNEL_BURST = 2 } train_attn_kernel;

typedef struct {
    /* [model] */
    int preset;             /* a row of config.c's MODEL_PRESETS, or custom (the last name) */
    int layers;
    int d_model;
    int n_heads;            /* query heads */
    int n_kv_heads;
    int d_ff;               /* SwiGLU hidden size */
    int vocab;
    double rope_theta;
    bk_rope_type rope_type; /* default | linear | llama3 | yarn | dynamic */
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
    train_source_kind source; /* synthetic (in memory) | hdf5 (corpus files) */
    synthetic_task task;    /* synthetic task: copy | counting | recall */
    int recall_pairs;       /* recall: key-value pairs in the first half of a sample */
    int recall_queries;     /* recall: keys asked again in the second half */
    int recall_keys;        /* recall: key tokens */
    int recall_values;      /* recall: values of each key */
    char path[180];         /* hdf5: corpus files, comma-separated */
    train_sampling sampling; /* hdf5: sequential | shuffled */
    int64_t seq_len;        /* tokens per sequence (global, split over cp ranks) */
    int64_t doc_len;        /* synthetic, mask = document: mean tokens per document (0: none) */
    uint64_t data_seed;
    /* [parallel] */
    int dp, cp;             /* world = dp * cp, node-major */
    int ulysses;            /* cp ranks per Ulysses group (1: the ring alone) */
    train_layout_choice layout; /* auto | zigzag | contiguous */
    train_mask_choice mask; /* causal | window | document | sparse */
    int64_t window;         /* tokens, for mask = window */
    int64_t sparse_block;   /* tokens per block, for mask = sparse */
    char sparse_pattern[64]; /* mask = sparse: e.g. local:4+global:1 (src/attn/sparse_pattern.h) */
    ring_bwd_choice backward; /* auto | q | kv */
    train_ring_choice ring; /* auto | flat | double */
    train_zero zero;        /* 1 | 2 | 3 | auto: the ZeRO stage (train_config_zero_stage) */
    int64_t piece_rows;     /* query rows per attention kernel call between transport polls;
                             * 0: ring_piece_rows' default */
    /* [attention] */
    train_attn_kernel kernel; /* auto | cudnn | burst (choose_attn_kernel) */
    int deterministic;      /* bit-identical reruns on a GPU: our kernel, no atomics */
    /* [train] */
    int64_t steps;
    int micro_batches;      /* gradient accumulation: sequences per rank per step */
    double lr, min_lr;
    int64_t warmup_steps;
    double weight_decay, beta1, beta2, adam_eps;
    double grad_clip;       /* max global gradient norm; 0 = off */
    uint64_t seed;          /* initialisation */
    train_nonfinite on_nonfinite; /* stop | skip */
    train_device device;    /* cpu | cuda: where the model computes */
    train_matmul matmul;    /* auto | bf16 | fp32: the parameters' type and the layers'
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
    double attn_kept_fraction; /* share of local tokens whose attention O, lse are kept: 0,
                                  0.5, 1, or TRAIN_KEPT_AUTO until the setup chooses */
    int keep_layers;           /* every layer's intermediates kept for the backward (1), or
                                  recomputed from its stored input (0), or TRAIN_AUTO until
                                  the setup chooses */
    int offload_activations; /* on a device, each layer's stored activations in page-locked
                                host memory, copied out and back on a stream of their own */
    train_optimizer_place optimizer; /* device | host: where a device run keeps the optimizer's state */
    int64_t chunk_rows;      /* tokens per chunk of the token-wise work and the bf16 operands */
    int fused_head;         /* LM head fused with the loss, chunked (1) or the reference (0) */
    int64_t head_chunk;     /* tokens per chunk of logits */
    double z_loss;
    int64_t limit_bytes;    /* most bytes the training state of one rank may take; 0 = none */
    /* [transport] */
    train_intra intra;      /* auto | ucx | nccl (bt_options.intra: train_config_name) */
    double timeout;         /* seconds */
    /* which keys a file or --set gave (an explicit preset gives its keys), by
     * the key's row in config.c's table */
    unsigned char given[TRAIN_CONFIG_MAX_KEYS];
} train_config;

void train_config_default(train_config *c);
/* Sets the [model] dimensions of a named preset; -1 for an unknown name. */
int train_config_preset(train_config *c, const char *name);
/* The name of `value` of the key [section] key that chooses among names (its
 * row's list in config.c), e.g. train_config_name("transport", "intra",
 * c->intra); NULL for another key or a value out of its range. */
const char *train_config_name(const char *section, const char *key, int value);
/* The value of `name` for such a key, or -1 when it names none of its values. */
int train_config_value(const char *section, const char *key, const char *name);
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
/* [parallel] zero as a number: 1, 2 or 3, and 0 for auto; and set to stage 1, 2
 * or 3. */
int train_config_zero_stage(const train_config *c);
void train_config_set_zero_stage(train_config *c, int stage);
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
