/* hf_model.c: see hf_model.h. config.json is read and written with jansson,
 * the weights through io/safetensors.h. One table (hf_tensors) says where
 * every Hugging Face tensor lives in our parameters; reading and writing both
 * walk it. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "kernels/bf16.h"
#include "src/train/hf_model.h"
#include "util/fail.h"

int hf_is_model_dir(const char *path)
{
    char p[PATH_MAX];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/config.json", path) < (int)sizeof p && stat(p, &sb) == 0;
}

/* ---- config.json ------------------------------------------------------ */

/* An integer key: its value, def when absent or null (def < 0: required). */
static int int_key(json_t *root, const char *file, const char *key, int64_t def, int64_t lo,
                   int64_t *out, char *err, size_t err_len)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0) return bu_fail(err, err_len, "%s: no %s", file, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT_MAX)
        return bu_fail(err, err_len, "%s: %s is not an integer >= %" PRId64, file, key, lo);
    *out = json_integer_value(v);
    return 0;
}

/* A positive number: obj's key name (PREFIX.name in messages, with a
 * prefix), def when absent or null (def < 0: required). */
static int positive_key(json_t *obj, const char *file, const char *prefix, const char *name,
                        double def, double *out, char *err, size_t err_len)
{
    char label[96];
    snprintf(label, sizeof label, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", name);
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (def < 0) return bu_fail(err, err_len, "%s: no %s", file, label);
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return bu_fail(err, err_len, "%s: %s is not a positive number", file, label);
    *out = json_number_value(v);
    return 0;
}

/* A key that must be false (or absent) for us to represent the model. */
static int false_key(json_t *root, const char *file, const char *key, const char *why, char *err,
                     size_t err_len)
{
    json_t *v = json_object_get(root, key);
    if (v && !json_is_false(v) && !json_is_null(v))
        return bu_fail(err, err_len, "%s: %s = %s: %s", file, key,
                       json_is_true(v) ? "true" : "(set)", why);
    return 0;
}

/* model_type, architectures, hidden_act and the keys we cannot compute. */
static int check_kind(json_t *root, const char *file, char *err, size_t err_len)
{
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!type || (strcmp(type, "llama") != 0 && strcmp(type, "mistral") != 0))
        return bu_fail(err, err_len, "%s: model_type = '%s': only llama and mistral are read", file,
                       type ? type : "(none)");
    json_t *arch = json_object_get(root, "architectures"), *a;
    size_t i;
    json_array_foreach(arch, i, a)
    {
        const char *s = json_string_value(a);
        if (!s || (strcmp(s, "LlamaForCausalLM") != 0 && strcmp(s, "MistralForCausalLM") != 0))
            return bu_fail(err, err_len,
                           "%s: architectures[%zu] = '%s': only LlamaForCausalLM and "
                           "MistralForCausalLM are read",
                           file, i, s ? s : "(not a string)");
    }
    const char *act = json_string_value(json_object_get(root, "hidden_act"));
    if (act && strcmp(act, "silu") != 0)
        return bu_fail(err, err_len, "%s: hidden_act = '%s': only silu (SwiGLU) is computed", file,
                       act);
    json_t *window = json_object_get(root, "sliding_window");
    if (window && !json_is_null(window))
        return bu_fail(
            err, err_len,
            "%s: sliding_window = %" JSON_INTEGER_FORMAT
            ": a sliding-window model is not read (its window is not mapped to [parallel] window)",
            file, json_integer_value(window));
    if (json_object_get(root, "quantization_config"))
        return bu_fail(err, err_len, "%s: quantization_config: quantized weights are not read",
                       file);
    return false_key(root, file, "attention_bias", "attention biases are not computed", err,
                     err_len) ||
                   false_key(root, file, "mlp_bias", "MLP biases are not computed", err, err_len)
               ? -1
               : 0;
}

static int read_llama3(json_t *p, const char *file, const char *key, bk_rope *r, char *err,
                       size_t err_len)
{
    r->type = BK_ROPE_LLAMA3;
    return positive_key(p, file, key, "low_freq_factor", -1, &r->low_freq_factor, err, err_len) ||
                   positive_key(p, file, key, "high_freq_factor", -1, &r->high_freq_factor, err,
                                err_len) ||
                   positive_key(p, file, key, "original_max_position_embeddings", -1,
                                &r->original_max_positions, err, err_len)
               ? -1
               : 0;
}

/* yarn, as transformers computes it: the ramp over the context of
 * max_position_embeddings (or of original_max_position_embeddings, which
 * later transformers read, where the two agree on the factor). */
static int read_yarn(json_t *p, const char *file, const char *key, bk_rope *r, char *err,
                     size_t err_len)
{
    r->type = BK_ROPE_YARN;
    double max_positions = r->original_max_positions;
    if (json_object_get(p, "mscale") || json_object_get(p, "mscale_all_dim"))
        return bu_fail(err, err_len, "%s: %s.mscale: DeepSeek's yarn variant is not computed", file,
                       key);
    if (positive_key(p, file, key, "beta_fast", 32, &r->beta_fast, err, err_len) ||
        positive_key(p, file, key, "beta_slow", 1, &r->beta_slow, err, err_len) ||
        positive_key(p, file, key, "attention_factor", 0.1 * log(r->factor) + 1.0,
                     &r->attention_factor, err, err_len) ||
        positive_key(p, file, key, "original_max_position_embeddings", max_positions,
                     &r->original_max_positions, err, err_len))
        return -1;
    if (r->original_max_positions != max_positions &&
        fabs(max_positions / r->original_max_positions - r->factor) > 1e-9 * r->factor)
        return bu_fail(err, err_len,
                       "%s: %s.original_max_position_embeddings = %g with max_position_embeddings "
                       "%g and factor %g: transformers versions read this yarn differently",
                       file, key, r->original_max_positions, max_positions, r->factor);
    return 0;
}

/* rope_theta and the scaling: rope_scaling (transformers 4) or
 * rope_parameters (5). default, linear, llama3 and yarn are computed; any
 * other is refused, so that a model is never silently computed with
 * another RoPE. */
static int read_rope(json_t *root, const char *file, int64_t max_positions, bk_rope *r, char *err,
                     size_t err_len)
{
    json_t *params = json_object_get(root, "rope_parameters");
    const char *key = "rope_parameters";
    if (!params || json_is_null(params))
        params = json_object_get(root, "rope_scaling"), key = "rope_scaling";
    *r = (bk_rope){.type = BK_ROPE_DEFAULT,
                   .factor = 1,
                   .low_freq_factor = 1,
                   .high_freq_factor = 4,
                   .original_max_positions = (double)max_positions,
                   .beta_fast = 32,
                   .beta_slow = 1,
                   .attention_factor = 1};
    if (positive_key(root, file, NULL, "rope_theta", 10000.0, &r->theta, err, err_len) != 0)
        return -1;
    if (!params || json_is_null(params)) return 0;
    if (!json_is_object(params)) return bu_fail(err, err_len, "%s: %s is not an object", file, key);
    if (positive_key(params, file, key, "rope_theta", r->theta, &r->theta, err, err_len) != 0)
        return -1;
    const char *type = json_string_value(json_object_get(params, "rope_type"));
    if (!type) type = json_string_value(json_object_get(params, "type"));
    if (!type || strcmp(type, "default") == 0) return 0;
    int known = !strcmp(type, "linear") || !strcmp(type, "llama3") || !strcmp(type, "yarn") ||
                !strcmp(type, "dynamic");
    if (!known)
        return bu_fail(err, err_len,
                       "%s: %s.rope_type = '%s': burstengine computes default, linear, llama3, "
                       "yarn and dynamic RoPE",
                       file, key, type);
    if (positive_key(params, file, key, "factor", -1, &r->factor, err, err_len) != 0) return -1;
    if (strcmp(type, "linear") == 0) return (r->type = BK_ROPE_LINEAR), 0;
    if (strcmp(type, "dynamic") == 0) return (r->type = BK_ROPE_DYNAMIC), 0;
    return strcmp(type, "llama3") == 0 ? read_llama3(params, file, key, r, err, err_len)
                                       : read_yarn(params, file, key, r, err, err_len);
}

static int read_dims(json_t *root, const char *file, hf_config *c, char *err, size_t err_len)
{
    model_dims *d = &c->dims;
    int64_t layers = 0, hidden = 0, heads = 1, kv = 1, ff = 0, vocab = 0, head_dim = 0, maxpos = 0;
    int tied = json_is_true(json_object_get(root, "tie_word_embeddings"));
    double eps = 0;
    if (int_key(root, file, "num_hidden_layers", -1, 1, &layers, err, err_len) ||
        int_key(root, file, "hidden_size", -1, 1, &hidden, err, err_len) ||
        int_key(root, file, "num_attention_heads", -1, 1, &heads, err, err_len) ||
        int_key(root, file, "num_key_value_heads", heads, 1, &kv, err, err_len) ||
        int_key(root, file, "intermediate_size", -1, 1, &ff, err, err_len) ||
        int_key(root, file, "vocab_size", -1, 2, &vocab, err, err_len) ||
        int_key(root, file, "head_dim", hidden / heads, 1, &head_dim, err, err_len) ||
        int_key(root, file, "max_position_embeddings", 2048, 1, &maxpos, err, err_len) ||
        positive_key(root, file, NULL, "rms_norm_eps", 1e-6, &eps, err, err_len))
        return -1;
    if (hidden % heads != 0 || head_dim != hidden / heads)
        return bu_fail(err, err_len,
                       "%s: head_dim = %" PRId64 " with hidden_size %" PRId64 " and %" PRId64
                       " heads: only head_dim = hidden_size / num_attention_heads is computed",
                       file, head_dim, hidden, heads);
    if (heads % kv != 0)
        return bu_fail(err, err_len,
                       "%s: num_key_value_heads = %" PRId64 " does not divide %" PRId64
                       " attention heads",
                       file, kv, heads);
    *d = (model_dims){.layers = (int)layers,
                      .d_model = (int)hidden,
                      .n_heads = (int)heads,
                      .n_kv_heads = (int)kv,
                      .head_dim = (int)head_dim,
                      .d_ff = (int)ff,
                      .vocab = (int)vocab,
                      .tied = tied,
                      .norm_eps = (float)eps};
    c->max_positions = maxpos;
    c->norm_eps = eps;
    return read_rope(root, file, maxpos, &d->rope, err, err_len);
}

int hf_config_read(const char *path, hf_config *out, char *err, size_t err_len)
{
    char file[PATH_MAX];
    if (snprintf(file, sizeof file, "%s/config.json", path) >= (int)sizeof file)
        return bu_fail(err, err_len, "%s: path too long", path);
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) return bu_fail(err, err_len, "%s: %s", file, je.text);
    memset(out, 0, sizeof *out);
    int rc = !json_is_object(root) ? bu_fail(err, err_len, "%s: not a JSON object", file)
             : check_kind(root, file, err, err_len) != 0 ? -1
                                                         : read_dims(root, file, out, err, err_len);
    json_decref(root);
    return rc;
}

/* ---- the tensors ------------------------------------------------------ */

/* One Hugging Face tensor [rows, cols] ([rows] when cols is 0) and where it
 * lives in our parameters: plain at params + at, or transposed, element
 * [r, c] at params[at + c * ld + col0 + r]. */
typedef struct {
    char name[80];
    int64_t at, rows, cols, ld, col0;
    int transposed;
} hf_tensor;

static hf_tensor plain(const char *name, int64_t at, int64_t rows, int64_t cols)
{
    hf_tensor t = {.at = at, .rows = rows, .cols = cols};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

static hf_tensor transposed(const char *name, int layer, int64_t at, int64_t rows, int64_t cols,
                            int64_t ld, int64_t col0)
{
    hf_tensor t = {.at = at, .rows = rows, .cols = cols, .ld = ld, .col0 = col0, .transposed = 1};
    snprintf(t.name, sizeof t.name, "model.layers.%d.%s.weight", layer, name);
    return t;
}

static hf_tensor layer_norm(const char *name, int layer, int64_t at, int64_t D)
{
    hf_tensor t = {.at = at, .rows = D};
    snprintf(t.name, sizeof t.name, "model.layers.%d.%s.weight", layer, name);
    return t;
}

/* Every tensor of m in Hugging Face's order; *n of them, malloc'd. */
static hf_tensor *hf_tensors(const model_layout *m, int64_t *n)
{
    const model_dims *d = &m->dims;
    int64_t D = d->d_model, QD = (int64_t)d->n_heads * d->head_dim,
            KD = (int64_t)d->n_kv_heads * d->head_dim, F = d->d_ff, V = d->vocab;
    hf_tensor *t = malloc((size_t)(9 * d->layers + 3) * sizeof *t);
    if (!t) return NULL;
    int64_t k = 0;
    t[k++] = plain("model.embed_tokens.weight", m->embed, V, D);
    for (int l = 0; l < d->layers; l++) {
        const layer_offsets *o = &m->layer[l];
        t[k++] = layer_norm("input_layernorm", l, o->attn_norm, D);
        t[k++] = transposed("self_attn.q_proj", l, o->wq, QD, D, QD, 0);
        t[k++] = transposed("self_attn.k_proj", l, o->wk, KD, D, KD, 0);
        t[k++] = transposed("self_attn.v_proj", l, o->wv, KD, D, KD, 0);
        t[k++] = transposed("self_attn.o_proj", l, o->wo, D, QD, D, 0);
        t[k++] = layer_norm("post_attention_layernorm", l, o->mlp_norm, D);
        t[k++] = transposed("mlp.gate_proj", l, o->w_gate_up, F, D, 2 * F, 0);
        t[k++] = transposed("mlp.up_proj", l, o->w_gate_up, F, D, 2 * F, F);
        t[k++] = transposed("mlp.down_proj", l, o->w_down, D, F, D, 0);
    }
    t[k++] = plain("model.norm.weight", m->final_norm, D, 0);
    if (!d->tied) t[k++] = plain("lm_head.weight", m->head, V, D);
    *n = k;
    return t;
}

static int64_t elements(const hf_tensor *t)
{
    return t->rows * (t->cols ? t->cols : 1);
}

static float f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31u, man = h & 1023u;
    if (exp == 31) return bk_bits_to_float(sign | 0x7f800000u | man << 13); /* inf, NaN */
    if (exp == 0) {                                                         /* zero, subnormal */
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return bk_bits_to_float(sign | (exp + 112) << 23 | man << 13);
}

/* Element i of a safetensors tensor as fp32. */
static float element(const io_st_tensor *s, int64_t i)
{
    const uint8_t *p = (const uint8_t *)s->data;
    uint32_t u = 0;
    switch (s->dtype) {
    case IO_ST_BF16:
        return bk_bf16_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    case IO_ST_F16:
        return f16_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    default:
        for (int b = 3; b >= 0; b--) u = u << 8 | p[4 * i + b];
        return bk_bits_to_float(u);
    }
}

/* Calls fn(ctx, i, j) for every element of t: i its index in HF's tensor,
 * j in our parameters; transposed tensors in blocks of 64 x 64, so that the
 * strided side stays in cache. */
typedef void (*element_fn)(void *ctx, int64_t hf_index, int64_t our_index);
static void each_element(const hf_tensor *t, element_fn fn, void *ctx)
{
    if (!t->transposed) {
        for (int64_t i = 0; i < elements(t); i++) fn(ctx, i, t->at + i);
        return;
    }
    enum { B = 64 };
    for (int64_t r0 = 0; r0 < t->rows; r0 += B)
        for (int64_t c0 = 0; c0 < t->cols; c0 += B)
            for (int64_t r = r0; r < r0 + B && r < t->rows; r++)
                for (int64_t c = c0; c < c0 + B && c < t->cols; c++)
                    fn(ctx, r * t->cols + c, t->at + c * t->ld + t->col0 + r);
}

/* Where t's elements fall in our parameters: [*first, *end). */
static void footprint(const hf_tensor *t, int64_t *first, int64_t *end)
{
    *first = t->at + t->col0;
    *end = t->transposed ? t->at + (t->cols - 1) * t->ld + t->col0 + t->rows : t->at + elements(t);
}

/* The parameters [begin, end) take their elements from s, into out [end - begin]. */
typedef struct {
    const io_st_tensor *s;
    int64_t begin, end;
    float *out;
} scatter_ctx;

static void scatter_one(void *ctx, int64_t i, int64_t j)
{
    scatter_ctx *x = ctx;
    if (j >= x->begin && j < x->end) x->out[j - x->begin] = element(x->s, i);
}

static int shape_matches(const hf_tensor *t, const io_st_tensor *s)
{
    return t->cols ? s->rank == 2 && s->shape[0] == t->rows && s->shape[1] == t->cols
                   : s->rank == 1 && s->shape[0] == t->rows;
}

/* Tensor t checked against the file, and what of it falls in [begin, end) of
 * our parameters read into out [end - begin]. */
static int read_tensor(const io_st_model *st, const char *path, const hf_tensor *t, int64_t begin,
                       int64_t end, float *out, char *err, size_t err_len)
{
    io_st_tensor s;
    if (io_st_find(st, t->name, &s) != 0)
        return bu_fail(err, err_len, "%s: no tensor '%s'", path, t->name);
    if (s.dtype == IO_ST_OTHER)
        return bu_fail(err, err_len, "%s: tensor '%s': dtype %s, expected F32, F16 or BF16", s.path,
                       t->name, s.dtype_name);
    if (!shape_matches(t, &s)) {
        char got[160] = "", want[64];
        for (int i = 0; i < s.rank; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, i ? ", " : "",
                     s.shape[i]);
        if (t->cols)
            snprintf(want, sizeof want, "%" PRId64 ", %" PRId64, t->rows, t->cols);
        else
            snprintf(want, sizeof want, "%" PRId64, t->rows);
        return bu_fail(err, err_len, "%s: tensor '%s' has shape [%s], config.json gives [%s]",
                       s.path, t->name, got, want);
    }
    int64_t first, last;
    footprint(t, &first, &last);
    if (first >= end || last <= begin) return 0;
    scatter_ctx x = {&s, begin, end, out};
    each_element(t, scatter_one, &x);
    return 0;
}

/* Nothing in the files is left unread, but rotary inv_freq buffers that old
 * exports carry (recomputed from config.json). */
static int check_all_used(const io_st_model *st, const hf_tensor *t, int64_t n, char *err,
                          size_t err_len)
{
    for (int64_t i = 0; i < io_st_count(st); i++) {
        io_st_tensor s = io_st_at(st, i);
        if (strstr(s.name, "rotary_emb.inv_freq")) continue;
        int known = 0;
        for (int64_t k = 0; k < n && !known; k++) known = strcmp(t[k].name, s.name) == 0;
        if (!known)
            return bu_fail(err, err_len,
                           "%s: tensor '%s' is not part of the model config.json describes", s.path,
                           s.name);
    }
    return 0;
}

int hf_weights_read(const char *path, const model_layout *m, float *params, char *err,
                    size_t err_len)
{
    return hf_weights_read_range(path, m, 0, m->n_params, params, err, err_len);
}

int hf_weights_read_range(const char *path, const model_layout *m, int64_t begin, int64_t end,
                          float *out, char *err, size_t err_len)
{
    int64_t n = 0;
    hf_tensor *t = hf_tensors(m, &n);
    if (!t) return bu_fail(err, err_len, "out of memory for the tensor table");
    io_st_model *st = io_st_model_open(path, err, err_len);
    int rc = st ? check_all_used(st, t, n, err, err_len) : -1;
    for (int64_t k = 0; k < n && rc == 0; k++)
        rc = read_tensor(st, path, &t[k], begin, end, out, err, err_len);
    io_st_model_close(st);
    free(t);
    return rc;
}

/* ---- writing ---------------------------------------------------------- */

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data are little-endian: the writer stores host floats as they are"
#endif

static size_t out_elem_bytes(int bf16)
{
    return bf16 ? 2 : 4;
}

typedef struct {
    const float *params;
    int bf16;
    void *buf;
} gather_ctx;

/* Our value j into element i of the output tensor, in its dtype. */
static void gather_one(void *ctx, int64_t i, int64_t j)
{
    gather_ctx *x = ctx;
    if (x->bf16)
        ((uint16_t *)x->buf)[i] = bk_float_to_bf16(x->params[j]);
    else
        ((float *)x->buf)[i] = x->params[j];
}

/* Tensors t[first, first + count) as one safetensors file. */
static int write_shard(const char *file, const hf_tensor *t, int64_t first, int64_t count,
                       const float *params, int bf16, char *err, size_t err_len)
{
    io_st_out *out = calloc((size_t)count, sizeof *out);
    int rc = out ? 0 : bu_fail(err, err_len, "out of memory writing %s", file);
    for (int64_t k = 0; k < count && rc == 0; k++) {
        const hf_tensor *h = &t[first + k];
        void *buf = malloc((size_t)elements(h) * out_elem_bytes(bf16));
        if (!buf) {
            rc = bu_fail(err, err_len, "out of memory for tensor '%s' (%" PRId64 " elements)",
                         h->name, elements(h));
            break;
        }
        gather_ctx x = {params, bf16, buf};
        each_element(h, gather_one, &x);
        out[k] = (io_st_out){.name = h->name,
                             .dtype = bf16 ? IO_ST_BF16 : IO_ST_F32,
                             .rank = h->cols ? 2 : 1,
                             .shape = {h->rows, h->cols},
                             .data = buf};
    }
    const char *const metadata[] = {"format", "pt", NULL};
    if (rc == 0) rc = io_st_write(file, out, count, metadata, err, err_len);
    for (int64_t k = 0; out && k < count; k++) free((void *)out[k].data);
    free(out);
    return rc;
}

static int write_json(const char *file, json_t *j, char *err, size_t err_len)
{
    int rc = j && json_dump_file(j, file, JSON_INDENT(2) | JSON_SORT_KEYS) == 0
                 ? 0
                 : bu_fail(err, err_len, "%s: cannot be written", file);
    json_decref(j);
    return rc;
}

/* rope_scaling as transformers reads it: null, or the type and its
 * parameters. The context of yarn and dynamic goes in max_position_embeddings,
 * which every transformers version reads for them (see read_yarn). */
static json_t *rope_json(const bk_rope *r)
{
    switch (r->type) {
    case BK_ROPE_LINEAR:
        return json_pack("{s:s, s:f}", "rope_type", "linear", "factor", r->factor);
    case BK_ROPE_LLAMA3:
        return json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor", r->factor,
                         "low_freq_factor", r->low_freq_factor, "high_freq_factor",
                         r->high_freq_factor, "original_max_position_embeddings",
                         (json_int_t)r->original_max_positions);
    case BK_ROPE_YARN:
        return json_pack("{s:s, s:f, s:f, s:f, s:f}", "rope_type", "yarn", "factor", r->factor,
                         "beta_fast", r->beta_fast, "beta_slow", r->beta_slow, "attention_factor",
                         r->attention_factor);
    case BK_ROPE_DYNAMIC:
        return json_pack("{s:s, s:f}", "rope_type", "dynamic", "factor", r->factor);
    default:
        return json_null();
    }
}

static json_t *config_json(const model_layout *m, const hf_write_opts *o)
{
    const model_dims *d = &m->dims;
    int own_context = d->rope.type == BK_ROPE_YARN || d->rope.type == BK_ROPE_DYNAMIC;
    int64_t max_positions =
        own_context ? (int64_t)d->rope.original_max_positions : o->max_positions;
    return json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:o, s:b, s:I, "
        "s:s, s:b, s:b, s:s, s:f, s:b}",
        "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", d->d_model,
        "intermediate_size", d->d_ff, "num_hidden_layers", d->layers, "num_attention_heads",
        d->n_heads, "num_key_value_heads", d->n_kv_heads, "head_dim", d->head_dim, "vocab_size",
        d->vocab, "rms_norm_eps", (double)d->norm_eps, "rope_theta", d->rope.theta, "rope_scaling",
        rope_json(&d->rope), "tie_word_embeddings", d->tied, "max_position_embeddings",
        (json_int_t)max_positions, "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0,
        "torch_dtype", o->bf16 ? "bfloat16" : "float32", "initializer_range", 0.02, "use_cache", 1);
}

/* How many files t[n] take with at most shard_bytes each (0: one); the
 * first tensor of file f in first[f]. */
static int plan_shards(const hf_tensor *t, int64_t n, const hf_write_opts *o, int64_t *first)
{
    int files = 0;
    int64_t bytes = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t b = elements(&t[k]) * (int64_t)out_elem_bytes(o->bf16);
        if (k == 0 || (o->shard_bytes > 0 && bytes > 0 && bytes + b > o->shard_bytes)) {
            first[files++] = k;
            bytes = 0;
        }
        bytes += b;
    }
    first[files] = n;
    return files;
}

static int write_weights(const char *dir, const hf_tensor *t, int64_t n, const float *params,
                         const hf_write_opts *o, char *err, size_t err_len)
{
    int64_t *first = malloc((size_t)(n + 1) * sizeof *first);
    if (!first) return bu_fail(err, err_len, "out of memory");
    int files = plan_shards(t, n, o, first), rc = 0;
    json_t *map = json_object();
    int64_t total = 0;
    for (int f = 0; f < files && rc == 0; f++) {
        char base[64], file[PATH_MAX];
        if (files == 1)
            snprintf(base, sizeof base, "model.safetensors");
        else
            snprintf(base, sizeof base, "model-%05d-of-%05d.safetensors", f + 1, files);
        snprintf(file, sizeof file, "%s/%s", dir, base);
        rc = write_shard(file, t, first[f], first[f + 1] - first[f], params, o->bf16, err, err_len);
        for (int64_t k = first[f]; k < first[f + 1]; k++) {
            json_object_set_new(map, t[k].name, json_string(base));
            total += elements(&t[k]) * (int64_t)out_elem_bytes(o->bf16);
        }
    }
    free(first);
    char index[PATH_MAX];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (rc == 0 && files > 1)
        return write_json(index,
                          json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                                    "weight_map", map),
                          err, err_len);
    json_decref(map);
    return rc;
}

/* Removes the folder dir.tmp this writer made, with the files in it. */
static void remove_folder(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[PATH_MAX];
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static int copy_file(const char *from, const char *to, char *err, size_t err_len)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[1 << 16];
    size_t n;
    int ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (out && fclose(out) != 0) ok = 0;
    if (in) fclose(in);
    return ok ? 0 : bu_fail(err, err_len, "cannot copy %s to %s", from, to);
}

/* The tokenizer files of dir (those of the common formats it has) into to. */
static int copy_tokenizer(const char *dir, const char *to, char *err, size_t err_len)
{
    static const char *const names[] = {"tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "tokenizer.model",
                                        "vocab.json",
                                        "merges.txt"};
    int copied = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char from[PATH_MAX], dst[PATH_MAX];
        struct stat sb;
        snprintf(from, sizeof from, "%s/%s", dir, names[i]);
        if (stat(from, &sb) != 0) continue;
        snprintf(dst, sizeof dst, "%s/%s", to, names[i]);
        if (copy_file(from, dst, err, err_len) != 0) return -1;
        copied++;
    }
    return copied ? 0
                  : bu_fail(err, err_len,
                            "--tokenizer %s: no tokenizer.json, tokenizer_config.json "
                            "or tokenizer.model there",
                            dir);
}

/* out may be written: absent, or an empty folder. */
static int may_write(const char *out, char *err, size_t err_len)
{
    DIR *d = opendir(out);
    if (!d) return errno == ENOENT ? 0 : bu_fail(err, err_len, "%s: %s", out, strerror(errno));
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty ? 0 : bu_fail(err, err_len, "%s exists and is not empty: nothing written", out);
}

int hf_model_write(const char *out, const model_layout *m, const float *params,
                   const hf_write_opts *o, char *err, size_t err_len)
{
    char tmp[PATH_MAX], file[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out) >= (int)sizeof tmp - 40)
        return bu_fail(err, err_len, "%s: path too long", out);
    if (may_write(out, err, err_len) != 0) return -1;
    remove_folder(tmp); /* a previous attempt's */
    if (mkdir(tmp, 0777) != 0) return bu_fail(err, err_len, "%s: %s", tmp, strerror(errno));
    int64_t n = 0;
    hf_tensor *t = hf_tensors(m, &n);
    int rc = t ? write_weights(tmp, t, n, params, o, err, err_len)
               : bu_fail(err, err_len, "out of memory for the tensor table");
    free(t);
    snprintf(file, sizeof file, "%s/config.json", tmp);
    if (rc == 0) rc = write_json(file, config_json(m, o), err, err_len);
    snprintf(file, sizeof file, "%s/generation_config.json", tmp);
    if (rc == 0) rc = write_json(file, json_pack("{s:b}", "_from_model_config", 1), err, err_len);
    if (rc == 0 && o->tokenizer_dir) rc = copy_tokenizer(o->tokenizer_dir, tmp, err, err_len);
    rmdir(out); /* empty, or absent */
    if (rc == 0 && rename(tmp, out) != 0)
        rc = bu_fail(err, err_len, "%s: %s", out, strerror(errno));
    if (rc != 0) remove_folder(tmp);
    return rc;
}
