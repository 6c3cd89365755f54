/* hf_model.h: Hugging Face Llama-family model folders (config.json and
 * safetensors weights) read into, and written from, our flat parameters.
 *
 * The mapping (HF's matrices are [out, in], ours [in, out]):
 *   model.embed_tokens.weight [V, D]             -> embed [V, D]
 *   model.layers.L.input_layernorm.weight [D]    -> attn_norm
 *   model.layers.L.self_attn.{q,k,v}_proj.weight -> wq [D, Hq hd], wk, wv [D, Hkv hd] (transposed)
 *   model.layers.L.self_attn.o_proj.weight       -> wo [Hq hd, D] (transposed)
 *   model.layers.L.post_attention_layernorm.weight -> mlp_norm
 *   model.layers.L.mlp.{gate,up}_proj.weight [F, D] -> w_gate_up [D, 2F]: gate in columns
 *                                                   [0, F), up in [F, 2F) (transposed)
 *   model.layers.L.mlp.down_proj.weight [D, F]   -> w_down [F, D] (transposed)
 *   model.norm.weight                            -> final_norm
 *   lm_head.weight [V, D]                        -> head [V, D] (absent when tied)
 * Heads are contiguous hd-wide slices of the projections in both, the K/V
 * head of query head h is h / (Hq / Hkv) in both, and RoPE pairs element i
 * with i + hd/2 of a head in both (HF's rotate_half), so no permutation is
 * needed. */
#ifndef BURST_TRAIN_HF_MODEL_H
#define BURST_TRAIN_HF_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "src/train/model.h"

/* What config.json says that we represent. */
typedef struct {
    model_dims dims;
    double norm_eps;                    /* as config.json gives it (dims rounds to float) */
    int64_t max_positions;              /* max_position_embeddings */
} hf_config;

/* Whether path is a Hugging Face model folder (it holds config.json). */
int hf_is_model_dir(const char *path);

/* Reads path/config.json. Refused, naming the key and its value: another
 * model_type or architecture, an activation other than silu, attention or MLP
 * biases, a head_dim other than hidden_size / num_attention_heads, a sliding
 * window, RoPE scaling we do not compute. 0, or -1 with err. */
int hf_config_read(const char *path, hf_config *out, char *err, size_t err_len);

/* Reads the weights of the folder path into params [m->n_params] (fp32,
 * converted from bf16, fp16 or fp32). Every tensor must be present with its
 * shape, and none may be left over (rotary inv_freq buffers excepted);
 * otherwise refused naming the tensor. 0, or -1 with err. */
int hf_weights_read(const char *path, const model_layout *m, float *params, char *err,
                    size_t err_len);
/* The same for the parameters [begin, end) alone, into out [end - begin]:
 * every tensor checked, only those that reach into the range read. */
int hf_weights_read_range(const char *path, const model_layout *m, int64_t begin, int64_t end,
                          float *out, char *err, size_t err_len);

/* What `burst convert --to hf` writes. */
typedef struct {
    int bf16;            /* weights in bf16 (else fp32) */
    int64_t shard_bytes; /* most bytes of one safetensors file; 0: one file */
    int64_t max_positions;
    const char *tokenizer_dir; /* its tokenizer files are copied beside the model; NULL: none */
} hf_write_opts;

/* Writes the folder out (absent or empty): config.json, generation_config.json
 * and the weights (model.safetensors, or model-0000K-of-0000N.safetensors and
 * model.safetensors.index.json above shard_bytes), through out.tmp renamed
 * when complete. 0, or -1 with err. */
int hf_model_write(const char *out, const model_layout *m, const float *params,
                   const hf_write_opts *o, char *err, size_t err_len);

#endif
