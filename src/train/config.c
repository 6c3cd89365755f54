/* config.c: see config.h. One table lists every key of every
 * section with its type, its place in the struct and its allowed values; the
 * INI loader, `--set`, validation of single fields and the printer all walk
 * that table, so a key cannot be readable but not printable, or printed in a
 * form the parser refuses. Values are parsed strictly (no trailing junk, in
 * range) and every error names the key, and for files the file and line.
 *
 * Loading is two passes of inih over the file: the first only looks for
 * [model] preset and applies it, the second applies every key in file order,
 * so keys next to a preset override it wherever they stand. A load or a --set
 * works on a copy and changes the caller's struct only when it succeeds. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include "src/attn/ring.h"
#include "src/attn/ulysses.h"
#include "src/train/config.h"
#include "src/train/choices.h"
#include "util/fail.h"
#include "util/parse.h"

/* inih's line buffer holds INI_MAX_LINE bytes including "\r\n\0"; longer lines
 * would be split silently, so the reader below refuses them, and string values
 * are kept short enough that a printed configuration always fits. */
#define LINE_MAX_CHARS   (INI_MAX_LINE - 3)
#define STRING_MAX_CHARS 180

/* ---- the presets ------------------------------------------------------ */

typedef struct {
    const char *name;
    int layers, d_model, n_heads, n_kv_heads, d_ff, vocab;
    double rope_theta;
    int64_t max_seq; /* the longest sequence trained, not the original model's context */
    int tied;
} model_preset;

/* The presets, one row each: X(name, layers, d_model, n_heads, n_kv_heads,
 * d_ff, vocab, rope_theta, max_seq, tied). tiny is the default; small has
 * 23.5M parameters with the embedding shared by the head; 300m (316M, tied)
 * and 1b (1.10B, untied, the TinyLlama shape) are the GPU benchmark's sizes,
 * small enough for one GPU at long sequences. */
/* clang-format off */
#define MODEL_PRESETS(X)                                                      \
    X("tiny", 2, 64, 4, 2, 192, 256, 10000.0, 65536, 1)                       \
    X("small", 6, 512, 8, 8, 1408, 8192, 10000.0, 65536, 1)                   \
    X("300m", 24, 1024, 16, 8, 2816, 32000, 10000.0, 1 << 20, 1)              \
    X("1b", 22, 2048, 32, 4, 5632, 32000, 10000.0, 1 << 20, 0)                \
    X("7b", 32, 4096, 32, 32, 11008, 32000, 10000.0, 1 << 20, 0)              \
    X("13b", 40, 5120, 40, 40, 13824, 32000, 10000.0, 1 << 20, 0)             \
    X("70b", 80, 8192, 64, 8, 28672, 32000, 10000.0, 1 << 20, 0)              \
    X("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 500000.0, 1 << 20, 0)
#define PRESET_ROW(name, ...) {name, __VA_ARGS__},
#define PRESET_NAME(name, ...) name,
/* clang-format on */

static const model_preset presets[] = {MODEL_PRESETS(PRESET_ROW)};
/* [model] preset's names: a preset's value is its row in presets, custom's the
 * row after the last */
static const char *const preset_names[] = {MODEL_PRESETS(PRESET_NAME) "custom", NULL};
enum { N_PRESETS = sizeof presets / sizeof presets[0], PRESET_CUSTOM = N_PRESETS };

static void set_string(char *dst, size_t size, const char *src)
{
    memset(dst, 0, size);
    snprintf(dst, size, "%s", src);
}

/* The value of name in a key's NULL-terminated list of names, or -1. */
static int choice_value(const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* Sets [model] preset to value and, for a named preset, its dimensions. */
static void apply_preset(train_config *c, int value)
{
    c->preset = value;
    if (value < 0 || value >= N_PRESETS) return; /* custom */
    const model_preset *p = &presets[value];
    c->layers = p->layers;
    c->d_model = p->d_model;
    c->n_heads = p->n_heads;
    c->n_kv_heads = p->n_kv_heads;
    c->d_ff = p->d_ff;
    c->vocab = p->vocab;
    c->rope_theta = p->rope_theta;
    c->max_seq = p->max_seq;
    c->tied_embeddings = p->tied;
}

int train_config_preset(train_config *c, const char *name)
{
    int value = choice_value(preset_names, name);
    if (value < 0) return -1;
    apply_preset(c, value);
    return 0;
}

/* ---- the table of keys ------------------------------------------------ */

typedef enum {
    F_INT,
    F_I64,
    F_U64,
    F_DBL,
    F_BOOL,
    F_ENUM,
    F_STR,
    F_KEPT_FRACTION,
    F_BOOL_AUTO /* a boolean, or auto (TRAIN_AUTO) */
} field_type;

/* One key: where it lives, what it accepts, its default, whether it changes
 * the numbers of a resumed run, and what it means. Everything the program says
 * about a key (the defaults, --print-config, --list-keys, the resume check,
 * the key table of doc/TRAINING.md) comes from its row. */
typedef struct {
    const char *section, *key;
    field_type type;
    size_t off, size;
    int64_t ilo, ihi;           /* F_INT, F_I64 */
    double dlo, dhi;            /* F_DBL */
    int dlo_open, dhi_open;     /* F_DBL: bound excluded */
    const char *const *choices; /* F_ENUM: NULL-terminated */
    const char *def;            /* the default as a value of the key; NULL: the preset's */
    int resume;                 /* 1: must equal the checkpoint's on resume (see below) */
    const char *doc;            /* one line: what the key means */
} field;

static const char *const source_names[] = {"synthetic", "hdf5", NULL};
static const char *const task_names[] = {"copy", "counting", "recall", NULL};
static const char *const sampling_names[] = {"sequential", "shuffled", NULL};
static const char *const layout_names[] = {"auto", "zigzag", "contiguous", NULL};
static const char *const mask_names[] = {"causal", "window", "document", "sparse", NULL};
static const char *const backward_names[] = {"auto", "q", "kv", NULL};
static const char *const ring_names[] = {"auto", "flat", "double", NULL};
static const char *const nonfinite_names[] = {"stop", "skip", NULL};
static const char *const device_names[] = {"cpu", "cuda", NULL};
static const char *const matmul_names[] = {"auto", "bf16", "fp32", NULL};
static const char *const attn_kernel_names[] = {"auto", "cudnn", "burst", NULL};
static const char *const intra_names[] = {"auto", "ucx", "nccl", NULL};
static const char *const zero_names[] = {"1", "2", "3", "auto", NULL};
static const char *const optimizer_names[] = {"device", "host", NULL};
static const char *const rope_type_names[] = {"default", "linear",  "llama3",
                                              "yarn",    "dynamic", NULL};

/* clang-format off */
#define AT(name) offsetof(train_config, name), sizeof(((train_config *)0)->name)
#define INT(s, k, lo, ...) {s, #k, F_INT, AT(k), lo, INT_MAX, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define INT_IN(s, k, lo, hi, ...) {s, #k, F_INT, AT(k), lo, hi, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define I64(s, k, lo, ...) {s, #k, F_I64, AT(k), lo, INT64_MAX, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define U64(s, k, ...) {s, #k, F_U64, AT(k), 0, 0, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define DBL(s, k, lo, lo_open, hi, hi_open, ...) {s, #k, F_DBL, AT(k), 0, 0, lo, hi, lo_open, hi_open, NULL, __VA_ARGS__}
#define BOOL(s, k, ...) {s, #k, F_BOOL, AT(k), 0, 0, 0, 0, 0, 0, NULL, __VA_ARGS__}
/* an ENUM key is stored as an int-sized enum: the index of its name in names */
#define INT_SIZED(name) (sizeof(((train_config *)0)->name) + 0 * sizeof(char[sizeof(((train_config *)0)->name) == sizeof(int) ? 1 : -1]))
#define ENUM(s, k, names, ...) {s, #k, F_ENUM, offsetof(train_config, k), INT_SIZED(k), 0, 0, 0, 0, 0, 0, names, __VA_ARGS__}
#define STR(s, k, ...) {s, #k, F_STR, AT(k), 0, 0, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define KEPT_FRACTION(s, k, ...) {s, #k, F_KEPT_FRACTION, AT(k), 0, 0, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define BOOL_AUTO(s, k, ...) {s, #k, F_BOOL_AUTO, AT(k), 0, 0, 0, 0, 0, 0, NULL, __VA_ARGS__}
#define PRESET NULL
/* clang-format on */

/* RESUME marks the keys whose value changes the numbers a run computes from a
 * checkpoint: the model's shape and arithmetic, the data stream (source, task
 * and its shape, files, order, seed, sequence length, the synthetic
 * documents' doc_len), which sequences a step takes and which rank holds which
 * tokens (dp, cp, layout, micro_batches), which tokens attend to which (mask,
 * window, sparse_block, sparse_pattern), the optimizer and its schedule (steps
 * included: the cosine decays to step `steps`), the loss. The other keys
 * choose how the same numbers are computed or reported (memory, ring,
 * transport, logging, checkpoints) or only the initialisation the checkpoint
 * replaces (seed, init_std); preset only names the dimensions. device and
 * matmul change the arithmetic, not the state: a run may move between the CPU
 * and a GPU and continue, within the device's tolerance. */
enum { FREE = 0, RESUME = 1 };

/* clang-format off */
static const field fields[] = {
    ENUM("model", preset, preset_names, "tiny", FREE,
        "named dimensions, or custom; sets every key marked 'preset' and is applied before the other keys"),
    INT("model", layers, 1, PRESET, RESUME,
        "transformer layers"),
    INT("model", d_model, 1, PRESET, RESUME,
        "hidden size"),
    INT("model", n_heads, 1, PRESET, RESUME,
        "query heads"),
    INT("model", n_kv_heads, 1, PRESET, RESUME,
        "key/value heads (fewer than n_heads: grouped-query attention)"),
    INT("model", d_ff, 1, PRESET, RESUME,
        "SwiGLU hidden size"),
    INT("model", vocab, 2, PRESET, RESUME,
        "vocabulary size"),
    DBL("model", rope_theta, 0, 1, INFINITY, 0, PRESET, RESUME,
        "RoPE base"),
    ENUM("model", rope_type, rope_type_names, "default", RESUME,
        "RoPE scaling as Hugging Face names it: default (none), linear (positions / rope_scaling), llama3 or yarn (the frequencies rescaled by rope_scaling, see the rope_* keys), dynamic (NTK: the base raised for [data] seq_len beyond rope_original_max_positions)"),
    DBL("model", rope_scaling, 0, 1, INFINITY, 0, "1", RESUME,
        "the RoPE scaling factor of linear, llama3 and yarn; with rope_type = default, a factor other than 1 means linear"),
    DBL("model", rope_low_freq_factor, 0, 1, INFINITY, 0, "1", RESUME,
        "llama3: wavelengths above rope_original_max_positions / this are interpolated"),
    DBL("model", rope_high_freq_factor, 0, 1, INFINITY, 0, "4", RESUME,
        "llama3: wavelengths below rope_original_max_positions / this are kept"),
    DBL("model", rope_original_max_positions, 0, 1, INFINITY, 0, "8192", RESUME,
        "llama3, yarn and dynamic: the context length the model was pretrained on"),
    DBL("model", rope_beta_fast, 0, 1, INFINITY, 0, "32", RESUME,
        "yarn: rotations in the original context below which a pair is interpolated"),
    DBL("model", rope_beta_slow, 0, 1, INFINITY, 0, "1", RESUME,
        "yarn: rotations in the original context above which a pair is kept"),
    DBL("model", rope_attention_factor, 0, 0, INFINITY, 0, "0", RESUME,
        "yarn: what cos and sin are multiplied by (0: 0.1 ln(rope_scaling) + 1)"),
    I64("model", max_seq, 1, PRESET, FREE,
        "the longest [data] seq_len this model may be trained on"),
    BOOL("model", tied_embeddings, PRESET, RESUME,
        "the LM head shares the embedding matrix"),
    DBL("model", init_std, 0, 1, INFINITY, 0, "0.02", FREE,
        "standard deviation of the initial weights"),
    DBL("model", norm_eps, 0, 1, INFINITY, 0, "1e-05", RESUME,
        "RMSNorm epsilon"),
    STR("model", init_from, "", FREE,
        "start from these weights (a burst checkpoint folder, one step-S folder of one, or a Hugging Face folder): the model keys come from them, optimizer and step start afresh"),
    ENUM("data", source, source_names, "synthetic", RESUME,
        "where samples come from: synthetic (generated in memory) or hdf5 (corpus files)"),
    ENUM("data", task, task_names, "copy", RESUME,
        "the synthetic task"),
    INT("data", recall_pairs, 1, "8", RESUME,
        "recall: key-value pairs per sample, distinct keys (at most recall_keys and seq_len / 4)"),
    INT("data", recall_queries, 1, "128", RESUME,
        "recall: queries per sample in its second half; a key may be asked several times"),
    INT("data", recall_keys, 1, "8", RESUME,
        "recall: key tokens"),
    INT("data", recall_values, 1, "16", RESUME,
        "recall: values of each key; chance is 1 / recall_values"),
    STR("data", path, "", RESUME,
        "hdf5: corpus files, comma-separated"),
    ENUM("data", sampling, sampling_names, "sequential", RESUME,
        "hdf5: the order of the windows"),
    I64("data", seq_len, 1, "4096", RESUME,
        "tokens per sequence (global, split over the cp ranks)"),
    I64("data", doc_len, 0, "0", RESUME,
        "synthetic source under mask = document: mean tokens per document (0 only without documents; hdf5 corpora bring their own)"),
    U64("data", data_seed, "1", RESUME,
        "seed of the synthetic data and the shuffled order"),
    INT("parallel", dp, 1, "1", RESUME,
        "data-parallel groups (world = dp x cp, node-major)"),
    INT("parallel", cp, 1, "1", RESUME,
        "context-parallel ranks a sequence is split over"),
    INT("parallel", ulysses, 1, "1", RESUME,
        "cp ranks per Ulysses group (consecutive, inside a node): each group's all-to-all gives every member 1/U of the heads over the group's tokens, and the ring runs between the groups (src/attn/ulysses.h); must divide cp, the ranks per node, n_heads and n_kv_heads; 1: the ring alone"),
    ENUM("parallel", layout, layout_names, "auto", RESUME,
        "which tokens each cp rank holds (auto: zigzag under the causal mask, contiguous under the others)"),
    ENUM("parallel", mask, mask_names, "causal", RESUME,
        "which keys a query sees (see Masks)"),
    I64("parallel", window, 0, "1024", RESUME,
        "tokens a query sees under mask = window, itself included"),
    I64("parallel", sparse_block, 1, "512", RESUME,
        "tokens per block under mask = sparse"),
    STR("parallel", sparse_pattern, "local:4+global:1", RESUME,
        "the blocks a block sees under mask = sparse"),
    ENUM("parallel", backward, backward_names, "auto", FREE,
        "direction of the backward ring: q (Q, dO, lse, delta travel), kv (K, V travel), auto (fewer bytes: Q-side for multi-head attention, KV-side as soon as n_heads >= 2 n_kv_heads)"),
    ENUM("parallel", ring, ring_names, "auto", FREE,
        "the ring's shape: flat, or double (a ring inside each node and one between nodes); auto: double when the cp group spans nodes"),
    ENUM("parallel", zero, zero_names, "1", FREE,
        "ZeRO stage over every rank (dp x cp): 1 shards the optimizer's state; 2 the gradients too, each layer's summed as the backward produces it (over NCCL while the next computes), so a rank holds its block of them and three windows (the embedding's and two buckets for the layers and the tail) instead of all of them; 3 the parameters too, each range gathered into such windows, the next while a pass computes with this one (training; burst eval reads them whole); auto: the smallest stage whose memory fits, chosen at setup and printed, or on --resume the stage the checkpoint was written with"),
    I64("parallel", piece_rows, 0, "0", FREE,
        "query rows per attention kernel call in the ring; 0: 512 on the CPU, where the transport is polled between calls (smaller pieces move the next blocks sooner), and a rank's whole block on a device, where the calls return before their kernels run and small pieces only starve the GPU"),
    ENUM("attention", kernel, attn_kernel_names, "auto", FREE,
        "the kernel of a ring's block pairs on a device: cudnn (cuDNN's fused SDPA, where it can express the mask: causal and window masks; documents and sparse masks stay on ours), burst (ours), auto (cudnn where it is loaded, serves the mask and is not a version with a known bug, else ours; the start report says which and why)"),
    BOOL("attention", deterministic, "false", FREE,
        "bit-identical reruns and resumes on a GPU: auto then takes our kernel, since cuDNN's Hopper backward sums dQ with atomics"),
    I64("train", steps, 1, "100", RESUME,
        "optimizer steps (the learning rate decays to min_lr at the last)"),
    INT("train", micro_batches, 1, "1", RESUME,
        "gradient accumulation: sequences per rank per step"),
    DBL("train", lr, 0, 1, INFINITY, 0, "0.003", RESUME,
        "peak learning rate"),
    DBL("train", min_lr, 0, 0, INFINITY, 0, "0.0003", RESUME,
        "learning rate at the end of the cosine decay"),
    I64("train", warmup_steps, 0, "10", RESUME,
        "steps of linear warm-up"),
    DBL("train", weight_decay, 0, 0, INFINITY, 0, "0.1", RESUME,
        "AdamW weight decay"),
    DBL("train", beta1, 0, 0, 1, 1, "0.9", RESUME,
        "AdamW beta1"),
    DBL("train", beta2, 0, 0, 1, 1, "0.95", RESUME,
        "AdamW beta2"),
    DBL("train", adam_eps, 0, 1, INFINITY, 0, "1e-08", RESUME,
        "AdamW epsilon"),
    DBL("train", grad_clip, 0, 0, INFINITY, 0, "1", RESUME,
        "largest global gradient norm (0: no clipping)"),
    U64("train", seed, "1234", FREE,
        "seed of the initial weights"),
    ENUM("train", on_nonfinite, nonfinite_names, "stop", FREE,
        "what a non-finite gradient norm does: stop the run, or skip the step"),
    ENUM("train", device, device_names, "cpu", FREE,
        "where the model computes"),
    ENUM("train", matmul, matmul_names, "auto", FREE,
        "the parameters' type and the layers' matrix products: bf16 (a device only), fp32, or auto (bf16 on a device, fp32 on the CPU)"),
    INT("train", log_every, 1, "1", FREE,
        "steps between progress lines"),
    STR("train", metrics, "", FREE,
        "JSON-lines file of per-step records (empty: none)"),
    STR("train", checkpoint_dir, "", FREE,
        "where checkpoints go (empty: none)"),
    I64("train", checkpoint_every, 0, "0", FREE,
        "steps between checkpoints (0: only at the end)"),
    INT("train", keep_checkpoints, 0, "3", FREE,
        "newest checkpoints kept (0: all)"),
    STR("eval", eval_path, "", FREE,
        "corpus with answers (passkey) for a retrieval accuracy after training (empty: none)"),
    I64("eval", eval_samples, 1, "64", FREE,
        "held-out samples evaluated"),
    DBL("eval", min_accuracy, 0, 0, 1, 0, "0", FREE,
        "an accuracy below this fails the run (0: never)"),
    KEPT_FRACTION("memory", attn_kept_fraction, "auto", FREE,
        "share of local tokens whose attention output and lse are kept for the backward: 0, 0.5 (causal zigzag only) or 1; auto: the largest whose memory fits, chosen at setup with keep_layers and zero and printed (doc/TRAINING.md, Memory choices)"),
    BOOL_AUTO("memory", keep_layers, "auto", FREE,
        "keep every layer's norms, projections and MLP activations for the backward instead of recomputing them from the layer's stored input (faster, and per layer and token 4 (3 D + Hq*hd + 2 Hkv*hd + 3 F + 2) more bytes); auto: true when its memory fits once every attention output the memory allows is kept"),
    I64("memory", chunk_rows, 1, "4096", FREE,
        "tokens per chunk of all that runs token by token (the norms, the MLP, the head) and of the bf16 operands of the matrix products: their buffers (per token 4 (3 d_model + 6 d_ff + 2) bytes, and 2 max(d_model, 2 d_ff) bytes for each of the two operands) hold one chunk, whatever the sequence; fewer rows, less memory and smaller products"),
    BOOL("memory", offload_activations, "false", FREE,
        "on a device: each layer's stored activations (its input, and the attention output and lse kept by attn_kept_fraction) in page-locked host memory instead of the device's, copied out during the forward and back one layer ahead during the backward on a stream of their own, two layers' worth staying on the device (needs [train] device = cuda)"),
    ENUM("memory", optimizer, optimizer_names, "device", FREE,
        "where a device run keeps the optimizer's state of its shard (fp32 masters, AdamW's moments, the summed gradients) and runs its update: device, or host (page-locked host memory and the CPU's AdamW, each gradient range copied out as the backward sums it, each parameter range copied in as it is gathered; needs bf16 parameters and [parallel] zero = 2, 3 or auto)"),
    BOOL("memory", fused_head, "true", FREE,
        "LM head fused with the loss, chunk by chunk (false: the reference head, CPU only)"),
    I64("memory", head_chunk, 1, "1024", FREE,
        "tokens per chunk of logits of the fused head"),
    DBL("memory", z_loss, 0, 0, INFINITY, 0, "0", RESUME,
        "weight of the z-loss term z_loss * lse^2"),
    I64("memory", limit_bytes, 0, "0", FREE,
        "most bytes one rank's training state may take (0: no limit of its own)"),
    ENUM("transport", intra, intra_names, "auto", FREE,
        "the path of device buffers inside a node (auto: nccl where it serves the node)"),
    DBL("transport", timeout, 0, 1, INFINITY, 0, "60", FREE,
        "seconds a rank waits for its peers before it names them and fails"),
};
/* clang-format on */
enum { N_FIELDS = sizeof fields / sizeof fields[0] };
_Static_assert((int)N_FIELDS <= (int)TRAIN_CONFIG_MAX_KEYS,
               "train_config.given has a flag per key");

static const char *const sections[] = {"model",  "data",   "parallel", "attention",
                                       "train",  "eval",   "memory",   "transport"};
enum { N_SECTIONS = sizeof sections / sizeof sections[0] };

static int known_section(const char *name)
{
    for (int i = 0; i < N_SECTIONS; i++)
        if (strcmp(name, sections[i]) == 0) return 1;
    return 0;
}

static const field *find_field(const char *section, const char *key)
{
    for (int i = 0; i < N_FIELDS; i++)
        if (strcmp(fields[i].section, section) == 0 && strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

/* Keys that were renamed: a file or --set may still give the former name, and
 * is told the new one. */
static const struct {
    const char *section, *former, *key;
} renamed_keys[] = {
    {"memory", "ckpt_fraction", "attn_kept_fraction"},
    {"memory", "mlp_rows", "chunk_rows"},
};
enum { N_RENAMED = sizeof renamed_keys / sizeof renamed_keys[0] };

/* The field a user named: by its name, or by a former name, which is said on
 * stderr once per process. */
static const field *find_named_field(const char *section, const char *key)
{
    const field *f = find_field(section, key);
    static int told[N_RENAMED];
    for (int i = 0; !f && i < N_RENAMED; i++) {
        if (strcmp(renamed_keys[i].section, section) != 0 ||
            strcmp(renamed_keys[i].former, key) != 0)
            continue;
        f = find_field(section, renamed_keys[i].key);
        if (!told[i]++)
            fprintf(stderr, "burst: [%s] %s is now called [%s] %s; the former name will go\n",
                    section, key, section, renamed_keys[i].key);
    }
    return f;
}

static int is_preset(const field *f)
{
    return f->off == offsetof(train_config, preset);
}

/* Records that a file or --set gave f; an explicit preset gives its keys. */
static void mark_given(train_config *c, const field *f)
{
    c->given[f - fields] = 1;
    if (!is_preset(f)) return;
    for (int i = 0; i < N_FIELDS; i++)
        if (!fields[i].def) c->given[i] = 1;
}

/* ---- parsing one value ------------------------------------------------ */

static int parse_double(const char *s, double *out)
{
    if (*s == '\0' || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0') return -1;
    *out = v;
    return 0;
}

static void list_choices(const char *const *choices, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; choices[i]; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", choices[i]);
        if (n < 0 || (size_t)n >= len - used) break;
        used += (size_t)n;
    }
}

/* The setters of one field type: store value at `at`, or return -1 with why
 * (the reason only, without the key: callers prefix where the value came
 * from). */
typedef int (*field_setter)(char *at, const field *f, const char *value, char *why, size_t why_len);

static int set_integer(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    int64_t v;
    int overflow;
    if (bu_parse_i64(value, &v, &overflow) != 0) {
        snprintf(why, why_len, "not an integer");
        return -1;
    }
    if (overflow || v < f->ilo || v > f->ihi) {
        if (f->ihi == INT_MAX || f->ihi == INT64_MAX)
            snprintf(why, why_len, "out of range (must be at least %" PRId64 "%s)", f->ilo,
                     f->ihi == INT_MAX ? " and fit in an int" : "");
        else
            snprintf(why, why_len, "out of range (must be %" PRId64 " to %" PRId64 ")", f->ilo,
                     f->ihi);
        return -1;
    }
    if (f->type == F_INT)
        *(int *)at = (int)v;
    else
        *(int64_t *)at = v;
    return 0;
}

static int set_u64(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    uint64_t v;
    int overflow;
    if (bu_parse_u64(value, &v, &overflow) != 0) {
        snprintf(why, why_len, "not a non-negative integer");
        return -1;
    }
    if (overflow) {
        snprintf(why, why_len, "out of range (must fit in 64 bits)");
        return -1;
    }
    *(uint64_t *)at = v;
    return 0;
}

static int set_double(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    double v;
    if (parse_double(value, &v) != 0) {
        snprintf(why, why_len, "not a number");
        return -1;
    }
    if (!isfinite(v)) {
        snprintf(why, why_len, "not a finite number");
        return -1;
    }
    int low = f->dlo_open ? !(v > f->dlo) : !(v >= f->dlo);
    int high = isfinite(f->dhi) && (f->dhi_open ? !(v < f->dhi) : !(v <= f->dhi));
    if (low || high) {
        if (isfinite(f->dhi))
            snprintf(why, why_len, "out of range (must be %s %g and %s %g)",
                     f->dlo_open ? ">" : ">=", f->dlo, f->dhi_open ? "<" : "<=", f->dhi);
        else
            snprintf(why, why_len, "out of range (must be %s %g)",
                     f->dlo_open ? ">" : ">=", f->dlo);
        return -1;
    }
    *(double *)at = v;
    return 0;
}

static int set_bool(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    static const char *const yes[] = {"true", "yes", "1"}, *const no[] = {"false", "no", "0"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(value, yes[i]) == 0) {
            *(int *)at = 1;
            return 0;
        }
        if (strcasecmp(value, no[i]) == 0) {
            *(int *)at = 0;
            return 0;
        }
    }
    snprintf(why, why_len, "not a boolean (true, false, yes, no, 1 or 0)");
    return -1;
}

static int set_enum(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    int v = choice_value(f->choices, value);
    if (v >= 0) {
        *(int *)at = v;
        return 0;
    }
    char list[160];
    list_choices(f->choices, list, sizeof list);
    snprintf(why, why_len, "not one of %s", list);
    return -1;
}

static int set_text(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    size_t max = f->size - 1 < STRING_MAX_CHARS ? f->size - 1 : STRING_MAX_CHARS;
    if (strlen(value) > max) {
        snprintf(why, why_len, "too long (at most %zu characters)", max);
        return -1;
    }
    if (strpbrk(value, ";\r\n")) {
        snprintf(why, why_len, "must not contain ';' or line breaks");
        return -1;
    }
    if (value[0] &&
        (isspace((unsigned char)value[0]) || isspace((unsigned char)value[strlen(value) - 1]))) {
        snprintf(why, why_len, "must not begin or end with white space");
        return -1;
    }
    set_string(at, f->size, value);
    return 0;
}

static int set_kept_fraction(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    double v;
    if (strcmp(value, "1/2") == 0)
        v = 0.5;
    else if (strcmp(value, "auto") == 0)
        v = TRAIN_KEPT_AUTO;
    else if (parse_double(value, &v) != 0 || !(v == 0.0 || v == 0.5 || v == 1.0)) {
        snprintf(why, why_len, "must be 0, 0.5 (or 1/2), 1 or auto");
        return -1;
    }
    *(double *)at = v;
    return 0;
}

static int set_bool_auto(char *at, const field *f, const char *value, char *why, size_t why_len)
{
    if (strcasecmp(value, "auto") == 0) {
        *(int *)at = TRAIN_AUTO;
        return 0;
    }
    if (set_bool(at, f, value, why, why_len) == 0) return 0;
    snprintf(why, why_len, "not a boolean (true, false, yes, no, 1 or 0) or auto");
    return -1;
}

/* Stores value into the field of c, or returns -1 with why. */
static int set_field(train_config *c, const field *f, const char *value, char *why, size_t why_len)
{
    static const field_setter setters[] = {
        [F_INT] = set_integer, [F_I64] = set_integer,
        [F_U64] = set_u64,     [F_DBL] = set_double,
        [F_BOOL] = set_bool,   [F_ENUM] = set_enum,
        [F_STR] = set_text,    [F_KEPT_FRACTION] = set_kept_fraction,
        [F_BOOL_AUTO] = set_bool_auto,
    };
    _Static_assert(sizeof setters / sizeof *setters == F_BOOL_AUTO + 1,
                   "a setter per field type");
    return setters[f->type]((char *)c + f->off, f, value, why, why_len);
}

/* ---- the defaults ----------------------------------------------------- */

void train_config_default(train_config *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        char why[160];
        /* a default its own key refuses is this table's bug: test_train_config
         * sets every default, so this never fails in a tested build */
        if (f->def && set_field(c, f, f->def, why, sizeof why) != 0) abort();
    }
    apply_preset(c, c->preset); /* the keys marked PRESET */
}

/* The name of value in names, or NULL when out of its range. */
static const char *choice_name(const char *const *names, int value)
{
    for (int i = 0; names[i]; i++)
        if (i == value) return names[i];
    return NULL;
}

const char *train_config_name(const char *section, const char *key, int value)
{
    const field *f = find_field(section, key);
    return f && f->type == F_ENUM ? choice_name(f->choices, value) : NULL;
}

int train_config_value(const char *section, const char *key, const char *name)
{
    const field *f = find_field(section, key);
    return f && f->type == F_ENUM ? choice_value(f->choices, name) : -1;
}

/* ---- formatting one value --------------------------------------------- */

/* The shortest text that strtod reads back to exactly v. */
static void format_double(double v, char *buf, size_t len)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, len, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static void format_field(const train_config *c, const field *f, char *buf, size_t len)
{
    const char *at = (const char *)c + f->off;
    switch (f->type) {
    case F_INT:
        snprintf(buf, len, "%d", *(const int *)at);
        return;
    case F_I64:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)at);
        return;
    case F_U64:
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)at);
        return;
    case F_DBL:
        format_double(*(const double *)at, buf, len);
        return;
    case F_KEPT_FRACTION:
        if (*(const double *)at == TRAIN_KEPT_AUTO)
            snprintf(buf, len, "auto");
        else
            format_double(*(const double *)at, buf, len);
        return;
    case F_BOOL:
        snprintf(buf, len, "%s", *(const int *)at ? "true" : "false");
        return;
    case F_BOOL_AUTO:
        snprintf(buf, len, "%s",
                 *(const int *)at == TRAIN_AUTO ? "auto"
                 : *(const int *)at             ? "true"
                                                : "false");
        return;
    case F_ENUM: {
        /* a value out of range (set in code) shows as its number, which no
         * name matches: validation names the key */
        const char *name = choice_name(f->choices, *(const int *)at);
        if (name)
            snprintf(buf, len, "%s", name);
        else
            snprintf(buf, len, "%d", *(const int *)at);
        return;
    }
    case F_STR:
        snprintf(buf, len, "%.*s", (int)strnlen(at, f->size), at);
        return;
    }
    buf[0] = '\0';
}

void train_config_print(FILE *out, const train_config *c)
{
    fprintf(out, "; burst train: effective configuration\n");
    const char *section = NULL;
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        if (!section || strcmp(section, f->section) != 0) {
            fprintf(out, "%s[%s]\n", section ? "\n" : "", f->section);
            section = f->section;
        }
        char value[512];
        format_field(c, f, value, sizeof value);
        fprintf(out, "%s =%s%s\n", f->key, value[0] ? " " : "", value);
    }
}

/* ---- loading a file --------------------------------------------------- */

typedef struct {
    FILE *file;
    const char *path; /* the file, or the name of text in messages */
    const char *text; /* the configuration itself, or NULL to read path */
    train_config *c;
    int pass;          /* 1: only [model] preset; 2: every key */
    int lineno;        /* the line inih is parsing */
    int at_line_start; /* the next chunk read starts a new line */
    int preset;        /* found in pass 1; -1: none */
    int err_line;      /* first error of ours, 0 if none */
    char err[512];
} load_state;

static void load_error(load_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void load_error(load_state *st, const char *fmt, ...)
{
    if (st->err_line) return; /* keep the first */
    st->err_line = st->lineno;
    int n = snprintf(st->err, sizeof st->err, "%s:%d: ", st->path, st->lineno);
    if (n < 0 || (size_t)n >= sizeof st->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err + n, sizeof st->err - (size_t)n, fmt, ap);
    va_end(ap);
}

/* fgets for inih that counts lines, refuses lines inih would split, and checks
 * section headers (inih reports no section that has no keys). */
static char *load_reader(char *str, int num, void *stream)
{
    load_state *st = stream;
    if (st->err_line) return NULL;
    if (!fgets(str, num, st->file)) return NULL;
    if (st->at_line_start) st->lineno++;
    size_t n = strlen(str);
    st->at_line_start = n > 0 && str[n - 1] == '\n';
    if (!st->at_line_start && n + 1 == (size_t)num) {
        load_error(st, "line too long (at most %d characters)", LINE_MAX_CHARS);
        return NULL;
    }
    const char *p = str;
    if (st->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '[') {
        const char *end = strchr(p + 1, ']');
        if (end) {
            char name[INI_MAX_LINE];
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
            if (!known_section(name)) {
                load_error(st, "unknown section [%s]", name);
                return NULL;
            }
        }
    }
    return str;
}

static int load_handler(void *user, const char *section, const char *name, const char *value)
{
    load_state *st = user;
    if (st->pass == 1) {
        /* Errors are left to pass 2, which sees every one in file order. */
        const field *f = find_field(section, name);
        train_config scratch;
        char why[8];
        if (f && is_preset(f) && set_field(&scratch, f, value, why, sizeof why) == 0)
            st->preset = scratch.preset;
        return 1;
    }
    if (st->err_line) return 0;
    if (section[0] == '\0') {
        load_error(st, "key '%s' outside any section", name);
        return 0;
    }
    if (!known_section(section)) {
        load_error(st, "unknown section [%s]", section);
        return 0;
    }
    const field *f = find_named_field(section, name);
    if (!f) {
        load_error(st, "unknown key [%s] %s", section, name);
        return 0;
    }
    /* The preset's dimensions were applied after pass 1; here it is only named. */
    char why[256];
    if (set_field(st->c, f, value, why, sizeof why) != 0) {
        load_error(st, "[%s] %s = '%s': %s", section, name, value, why);
        return 0;
    }
    mark_given(st->c, f);
    return 1;
}

/* 0, -1 when the file cannot be opened or read, -2 for an error in it. */
static int load_pass(load_state *st, char *err, size_t err_len)
{
    st->file = st->text ? fmemopen((void *)st->text, strlen(st->text), "r") : fopen(st->path, "r");
    if (!st->file) {
        snprintf(err, err_len, "%s: %s", st->path, strerror(errno));
        return -1;
    }
    st->lineno = 0;
    st->at_line_start = 1;
    st->err_line = 0;
    int rc = ini_parse_stream(load_reader, st, load_handler, st);
    int read_error = ferror(st->file);
    fclose(st->file);
    st->file = NULL;
    if (rc > 0 && (st->err_line == 0 || rc < st->err_line)) {
        snprintf(err, err_len, "%s:%d: syntax error (expected [section] or key = value)", st->path,
                 rc);
        return -2;
    }
    if (st->err_line) {
        snprintf(err, err_len, "%s", st->err);
        return -2;
    }
    if (rc != 0 || read_error) {
        snprintf(err, err_len, "%s: could not be read", st->path);
        return -1;
    }
    return 0;
}

/* Loads path, or text under the name path, over c. */
static int load(train_config *c, const char *path, const char *text, char *err, size_t err_len)
{
    train_config work = *c;
    load_state st = {.path = path, .text = text, .c = &work, .pass = 1, .preset = -1};
    if (load_pass(&st, err, err_len) == -1) return -1; /* errors of content: see pass 2 */
    if (st.preset >= 0) apply_preset(&work, st.preset);
    st.pass = 2;
    if (load_pass(&st, err, err_len) != 0) return -1;
    *c = work;
    return 0;
}

int train_config_load(train_config *c, const char *path, char *err, size_t err_len)
{
    return load(c, path, NULL, err, err_len);
}

int train_config_load_text(train_config *c, const char *text, const char *name, char *err,
                           size_t err_len)
{
    if (!text[0]) return 0; /* nothing to read (fmemopen refuses an empty buffer) */
    return load(c, name, text, err, err_len);
}

/* ---- --set ------------------------------------------------------------ */

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t k = 0;
    while (isspace((unsigned char)s[k])) k++;
    memmove(s, s + k, n - k + 1);
}

int train_config_set(train_config *c, const char *assignment, char *err, size_t err_len)
{
    char buf[1024];
    if (strlen(assignment) >= sizeof buf) {
        snprintf(err, err_len, "--set %.40s...: too long", assignment);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", assignment);
    char *eq = strchr(buf, '='), *dot = strchr(buf, '.');
    if (!eq || !dot || dot > eq) {
        snprintf(err, err_len, "--set %s: expected section.key=value", assignment);
        return -1;
    }
    *eq = '\0';
    *dot = '\0';
    char *section = buf, *key = dot + 1, *value = eq + 1;
    trim(section);
    trim(key);
    trim(value);
    if (!known_section(section)) {
        snprintf(err, err_len, "--set %s: unknown section [%s]", assignment, section);
        return -1;
    }
    const field *f = find_named_field(section, key);
    if (!f) {
        snprintf(err, err_len, "--set %s: unknown key [%s] %s", assignment, section, key);
        return -1;
    }
    train_config work = *c;
    char why[256];
    if (set_field(&work, f, value, why, sizeof why) != 0) {
        snprintf(err, err_len, "--set %s: %s", assignment, why);
        return -1;
    }
    if (is_preset(f)) apply_preset(&work, work.preset);
    mark_given(&work, f);
    *c = work;
    return 0;
}

/* ---- the configuration as a whole ------------------------------------- */

bk_rope train_config_rope(const train_config *c)
{
    bk_rope r = {.type = c->rope_type,
                 .theta = c->rope_theta,
                 .factor = c->rope_scaling,
                 .low_freq_factor = c->rope_low_freq_factor,
                 .high_freq_factor = c->rope_high_freq_factor,
                 .original_max_positions = c->rope_original_max_positions,
                 .beta_fast = c->rope_beta_fast,
                 .beta_slow = c->rope_beta_slow,
                 .attention_factor = c->rope_attention_factor,
                 .sequence_length = (double)c->seq_len};
    if (r.type == BK_ROPE_DEFAULT && r.factor != 1.0) r.type = BK_ROPE_LINEAR;
    if (r.type == BK_ROPE_YARN && r.attention_factor == 0.0)
        r.attention_factor = 0.1 * log(r.factor) + 1.0;
    return r;
}

void train_config_set_rope(train_config *c, const bk_rope *r)
{
    c->rope_type = r->type;
    c->rope_theta = r->theta;
    c->rope_scaling = r->type == BK_ROPE_DEFAULT ? 1.0 : r->factor;
    c->rope_low_freq_factor = r->low_freq_factor;
    c->rope_high_freq_factor = r->high_freq_factor;
    c->rope_original_max_positions = r->original_max_positions;
    c->rope_beta_fast = r->beta_fast;
    c->rope_beta_slow = r->beta_slow;
    c->rope_attention_factor = r->type == BK_ROPE_YARN ? r->attention_factor : 0.0;
}

recall_shape train_config_recall(const train_config *c)
{
    return (recall_shape){.seq_len = c->seq_len, .pairs = c->recall_pairs,
                          .queries = c->recall_queries, .keys = c->recall_keys,
                          .values = c->recall_values};
}

/* Where the documents of mask = document come from: [data] doc_len for the
 * synthetic source, the corpus's own boundaries for hdf5. */
static int validate_documents(const train_config *c, const bk_attn_mask *mask, char *err,
                              size_t err_len)
{
    int documents = (mask->flags & BK_ATTN_DOCUMENT) != 0;
    int synthetic = c->source == SOURCE_SYNTHETIC;
    if (documents && synthetic && c->doc_len == 0)
        return bu_fail(err, err_len,
                       "[parallel] mask = document with [data] source = synthetic needs [data] "
                       "doc_len (the mean tokens per document)");
    if (c->doc_len != 0 && !documents)
        return bu_fail(err, err_len,
                       "[data] doc_len = %" PRId64 " is only used with [parallel] mask = document "
                       "(here mask = %s)",
                       c->doc_len, mask_names[c->mask]);
    if (c->doc_len != 0 && !synthetic)
        return bu_fail(err, err_len,
                       "[data] doc_len = %" PRId64 " is for the synthetic source: an hdf5 corpus "
                       "brings its documents (/doc_offsets); set doc_len = 0",
                       c->doc_len);
    return 0;
}

/* The recall task's shape against the vocabulary; its pairs and queries
 * belong to one sequence, so no documents cut it. */
static int validate_recall(const train_config *c, char *err, size_t err_len)
{
    if (!choose_recall(c->source, c->task)) return 0;
    recall_shape recall = train_config_recall(c);
    if (recall_check(&recall, c->vocab, err, err_len) != 0) return -1;
    if (choose_mask(c->mask, c->window).flags & BK_ATTN_DOCUMENT)
        return bu_fail(err, err_len,
                       "[data] task = recall asks each query of a pair of the same sequence: "
                       "[parallel] mask = document would cut them apart");
    return 0;
}

/* Every field on its own, with the parser's rules (for structs filled in code). */
static int validate_fields(const train_config *c, char *err, size_t err_len)
{
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        char value[512], why[256];
        train_config scratch = *c;
        format_field(c, f, value, sizeof value);
        if (set_field(&scratch, f, value, why, sizeof why) != 0)
            return bu_fail(err, err_len, "[%s] %s = '%s': %s", f->section, f->key, value, why);
    }
    return 0;
}

/* The heads and RoPE: what the model's shape needs of its keys together. */
static int validate_model(const train_config *c, char *err, size_t err_len)
{
    if (c->n_heads % c->n_kv_heads != 0)
        return bu_fail(err, err_len,
                       "[model] n_heads = %d is not a multiple of [model] n_kv_heads = %d",
                       c->n_heads, c->n_kv_heads);
    if (c->d_model % c->n_heads != 0)
        return bu_fail(err, err_len,
                       "[model] d_model = %d is not a multiple of [model] n_heads = %d", c->d_model,
                       c->n_heads);
    if ((c->d_model / c->n_heads) % 8 != 0)
        return bu_fail(err, err_len,
                       "[model] d_model / n_heads = %d: the head dimension must be a multiple of 8",
                       c->d_model / c->n_heads);
    if (c->rope_type == BK_ROPE_LLAMA3 && c->rope_high_freq_factor <= c->rope_low_freq_factor)
        return bu_fail(err, err_len,
                       "[model] rope_high_freq_factor = %g must exceed rope_low_freq_factor = %g",
                       c->rope_high_freq_factor, c->rope_low_freq_factor);
    if (c->rope_type == BK_ROPE_DYNAMIC && c->rope_scaling < 1.0)
        return bu_fail(err, err_len,
                       "[model] rope_scaling = %g: dynamic needs a factor of 1 or more",
                       c->rope_scaling);
    if (c->rope_type == BK_ROPE_YARN && c->rope_theta <= 1.0)
        return bu_fail(err, err_len, "[model] rope_theta = %g: yarn needs a base above 1",
                       c->rope_theta);
    return 0;
}

/* What the device engine cannot do that the CPU engine can, and back. */
static int validate_device(const train_config *c, char *err, size_t err_len)
{
    int on_device = c->device == TRAIN_DEVICE_CUDA, on_host = c->optimizer == OPTIMIZER_ON_HOST;
    if (!on_device && c->matmul == MATMUL_BF16)
        return bu_fail(err, err_len,
                       "[train] matmul = bf16 needs [train] device = cuda: the CPU "
                       "computes its matrix products in fp32");
    if (on_device && !c->fused_head)
        return bu_fail(err, err_len,
                       "[memory] fused_head = false needs [train] device = cpu: the "
                       "reference head runs on the host");
    if (on_host && !choose_bf16_matmul(c->device, c->matmul))
        return bu_fail(err, err_len,
                       "[memory] optimizer = host needs bf16 parameters ([train] device = cuda, "
                       "[train] matmul = bf16 or auto): elsewhere the optimizer's state is in "
                       "host memory already, or the device's fp32 parameters are its masters");
    if (on_host && train_config_zero_stage(c) == 1)
        return bu_fail(err, err_len,
                       "[memory] optimizer = host needs [parallel] zero = 2, 3 or auto: at "
                       "zero = 1 the device holds every gradient whole");
    if (!on_device && c->offload_activations)
        return bu_fail(err, err_len,
                       "[memory] offload_activations = true needs [train] device = cuda: the "
                       "CPU engine's stored activations are in host memory already");
    if (on_device && c->d_model / c->n_heads > 128)
        return bu_fail(err, err_len,
                       "[model] d_model / n_heads = %d: the device's attention takes head "
                       "dimensions up to 128",
                       c->d_model / c->n_heads);
    return 0;
}

/* [parallel] ulysses against cp, the heads and the kept share (the recompute's
 * half-sequence ring has no Ulysses groups). */
static int validate_ulysses(const train_config *c, char *err, size_t err_len)
{
    int U = c->ulysses;
    if (c->cp % U != 0)
        return bu_fail(err, err_len, "[parallel] ulysses = %d does not divide [parallel] cp = %d",
                       U, c->cp);
    char why[200];
    if (ulysses_check(U, c->n_heads, c->n_kv_heads, why, sizeof why) != 0)
        return bu_fail(err, err_len, "[parallel] %s ([model] n_heads, n_kv_heads)", why);
    if (U > 1 && c->attn_kept_fraction != TRAIN_KEPT_AUTO &&
        choose_keep(c->attn_kept_fraction) == KEEP_HALF)
        return bu_fail(err, err_len,
                       "[memory] attn_kept_fraction = 0.5 is not built with [parallel] ulysses = "
                       "%d (the half-sequence recompute runs on the ring alone); use 0 or 1",
                       U);
    return 0;
}

/* The mask, the layout and the sequence length, and what the kept share of
 * the attention outputs needs of them. */
static int validate_sequence(const train_config *c, char *err, size_t err_len)
{
    bk_attn_mask mask = choose_mask(c->mask, c->window);
    if ((mask.flags & BK_ATTN_WINDOW) && c->window < 1)
        return bu_fail(err, err_len,
                       "[parallel] window = %" PRId64 " must be at least 1 for mask = window",
                       c->window);
    if (validate_documents(c, &mask, err, err_len) != 0) return -1;
    if ((mask.flags & BK_ATTN_BLOCK_SPARSE) &&
        choose_sparse_mask(c->sparse_pattern, c->sparse_block, c->seq_len, &mask, NULL, err,
                           err_len) != 0)
        return -1;
    seq_layout_kind kind = choose_layout(c->layout, c->mask);
    const char *layout = seq_layout_name(kind);
    int zigzag = kind == LAYOUT_ZIGZAG;
    int64_t unit = zigzag ? 2 * (int64_t)c->cp : c->cp;
    if (c->seq_len % unit != 0)
        return bu_fail(err, err_len,
                       "[data] seq_len = %" PRId64 " is not a multiple of %" PRId64
                       " (%s[parallel] cp = %d) as the %s layout needs",
                       c->seq_len, unit, zigzag ? "2 * " : "", c->cp, layout);
    if (c->seq_len > c->max_seq)
        return bu_fail(err, err_len,
                       "[data] seq_len = %" PRId64 " exceeds [model] max_seq = %" PRId64,
                       c->seq_len, c->max_seq);

    if (validate_ulysses(c, err, err_len) != 0) return -1;
    if (c->attn_kept_fraction != TRAIN_KEPT_AUTO &&
        choose_keep(c->attn_kept_fraction) == KEEP_HALF && !keep_half_allowed(kind, &mask))
        return bu_fail(
            err, err_len,
            "[memory] attn_kept_fraction = 0.5 needs the causal mask with the zigzag layout "
            "(here mask = %s, layout = %s); use 0 or 1",
            mask_names[c->mask], layout);
    return 0;
}

/* The learning-rate schedule and the head's chunks. */
static int validate_schedule(const train_config *c, char *err, size_t err_len)
{
    if (c->min_lr > c->lr)
        return bu_fail(err, err_len, "[train] min_lr = %g exceeds [train] lr = %g", c->min_lr,
                       c->lr);
    if (c->warmup_steps > c->steps)
        return bu_fail(err, err_len,
                       "[train] warmup_steps = %" PRId64 " exceeds [train] steps = %" PRId64,
                       c->warmup_steps, c->steps);
    if (c->head_chunk < 1)
        return bu_fail(err, err_len, "[memory] head_chunk = %" PRId64 " must be at least 1",
                       c->head_chunk);
    return 0;
}

int train_config_zero_stage(const train_config *c)
{
    return c->zero == ZERO_AUTO ? 0 : (int)c->zero - ZERO_1 + 1;
}

void train_config_set_zero_stage(train_config *c, int stage)
{
    c->zero = (train_zero)(ZERO_1 + stage - 1);
}

int train_config_lowest_zero_stage(const train_config *c)
{
    return train_config_optimizer_on_host(c) ? 2 : 1;
}

int train_config_optimizer_on_host(const train_config *c)
{
    return c->optimizer == OPTIMIZER_ON_HOST;
}

int train_config_validate(const train_config *c, int world_size, char *err, size_t err_len)
{
    if (validate_fields(c, err, err_len) != 0) return -1;
    if (world_size < 1)
        return bu_fail(err, err_len, "the world size %d is not positive", world_size);
    if (validate_model(c, err, err_len) != 0 || validate_device(c, err, err_len) != 0) return -1;
    if ((int64_t)c->dp * c->cp != world_size)
        return bu_fail(err, err_len,
                       "[parallel] dp = %d times cp = %d is %" PRId64
                       " ranks, but the world size is %d",
                       c->dp, c->cp, (int64_t)c->dp * c->cp, world_size);

    if (c->source == SOURCE_HDF5 && !c->path[0])
        return bu_fail(err, err_len, "[data] source = hdf5 needs [data] path (corpus files)");
    if (validate_recall(c, err, err_len) != 0) return -1;
    if (validate_sequence(c, err, err_len) != 0) return -1;
    return validate_schedule(c, err, err_len);
}

/* ---- what a resumed run must share with its checkpoint ----------------- */

int train_config_resume_check(const train_config *was, const train_config *now, char *err,
                              size_t err_len)
{
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        if (!f->resume) continue;
        char a[512], b[512];
        format_field(was, f, a, sizeof a);
        format_field(now, f, b, sizeof b);
        if (strcmp(a, b) == 0) continue;
        const char *q = f->type == F_STR ? "'" : "";
        return bu_fail(err, err_len, "[%s] %s = %s%s%s, this run has %s%s%s", f->section, f->key, q,
                       a, q, q, b, q);
    }
    return 0;
}

/* ---- a model taken from the weights it starts from --------------------- */

/* The [model] keys that fix the parameters' shapes: a run cannot load
 * weights of another shape. */
static int is_shape_key(const field *f)
{
    static const char *const keys[] = {"layers", "d_model", "n_heads",        "n_kv_heads",
                                       "d_ff",   "vocab",   "tied_embeddings"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(f->key, keys[i]) == 0) return 1;
    return 0;
}

int train_config_take_model(train_config *c, const train_config *src, const char *src_name,
                            char *err, size_t err_len)
{
    train_config work = *c;
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        if (strcmp(f->section, "model") != 0 || !f->resume) continue;
        char mine[512], theirs[512], why[256];
        format_field(c, f, mine, sizeof mine);
        format_field(src, f, theirs, sizeof theirs);
        if (c->given[i] && is_shape_key(f) && strcmp(mine, theirs) != 0)
            return bu_fail(err, err_len,
                           "[model] %s = %s, but %s has %s (init_from sets the model's shape)",
                           f->key, mine, src_name, theirs);
        if (!c->given[i] && set_field(&work, f, theirs, why, sizeof why) != 0)
            return bu_fail(err, err_len, "%s: [model] %s = %s: %s", src_name, f->key, theirs, why);
    }
    if (!c->given[find_field("model", "preset") - fields]) work.preset = PRESET_CUSTOM;
    *c = work;
    return 0;
}

/* ---- the list of keys ------------------------------------------------- */

void train_config_list_keys(FILE *out)
{
    fprintf(out, "| key | default | on resume | meaning |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const char *def = !f->def ? "preset" : f->def[0] ? f->def : "(empty)";
        char list[160], choices[180] = "";
        if (f->choices) {
            list_choices(f->choices, list, sizeof list);
            snprintf(choices, sizeof choices, " (one of: %s)", list);
        }
        fprintf(out, "| `[%s] %s` | %s | %s | %s%s |\n", f->section, f->key, def,
                f->resume ? "must match" : "free", f->doc, choices);
    }
}
