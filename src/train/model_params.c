/* model_params.c: the decoder's parameters as one flat buffer: where each
 * tensor lies, their initial values, which of them decay, and the FLOPs of a
 * sequence; see model.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/model.h"
#include "util/rng.h"

int model_layout_init(model_layout *m, const model_dims *d)
{
    memset(m, 0, sizeof *m);
    m->dims = *d;
    int64_t D = d->d_model, QD = (int64_t)d->n_heads * d->head_dim,
            KD = (int64_t)d->n_kv_heads * d->head_dim, F = d->d_ff, V = d->vocab, at = 0;
    m->embed = at;
    at += V * D;
    m->layer = calloc((size_t)d->layers, sizeof *m->layer);
    if (!m->layer) return -1;
    for (int l = 0; l < d->layers; l++) {
        layer_offsets *o = &m->layer[l];
        o->attn_norm = at, at += D;
        o->wq = at, at += D * QD;
        o->wk = at, at += D * KD;
        o->wv = at, at += D * KD;
        o->wo = at, at += QD * D;
        o->mlp_norm = at, at += D;
        o->w_gate_up = at, at += D * 2 * F;
        o->w_down = at, at += F * D;
    }
    m->final_norm = at, at += D;
    if (d->tied) {
        m->head = m->embed;
    } else {
        m->head = at;
        at += V * D;
    }
    m->n_params = at;
    return 0;
}

int64_t model_embed_floats(const model_layout *m)
{
    return (int64_t)m->dims.vocab * m->dims.d_model;
}

int64_t model_window_offset(const model_layout *m, int64_t at, int64_t begin, int64_t end,
                            int *in_embed)
{
    int64_t embed_end = m->embed + model_embed_floats(m);
    *in_embed = at >= m->embed && at < embed_end;
    if (*in_embed) return at - m->embed;
    return at >= begin && at < end ? at - begin : -1;
}

void model_layer_range(const model_layout *m, int l, int64_t *begin, int64_t *end)
{
    *begin = m->layer[l].attn_norm;
    *end = l + 1 < m->dims.layers ? m->layer[l + 1].attn_norm : m->final_norm;
}

int model_bucket_of(const model_layout *m, int64_t begin)
{
    int layers = m->dims.layers;
    for (int l = 0; l < layers; l++)
        if (m->layer[l].attn_norm == begin) return (layers - l) % 2;
    return 0; /* the tail */
}

int64_t model_bucket_floats(const model_layout *m, int k)
{
    int64_t most = k == 0 ? m->n_params - m->final_norm : 0; /* the tail */
    for (int l = 0; l < m->dims.layers; l++) {
        int64_t begin, end;
        model_layer_range(m, l, &begin, &end);
        if (model_bucket_of(m, begin) == k && end - begin > most) most = end - begin;
    }
    return most;
}

void model_layout_free(model_layout *m)
{
    free(m->layer);
    m->layer = NULL;
}

/* N(0, 1) for parameter index i: a function of (seed, i) only. */
static double normal_at(uint64_t seed, int64_t i)
{
    uint64_t a = bu_splitmix64(seed ^ bu_splitmix64((uint64_t)i * 2)),
             b = bu_splitmix64(seed ^ bu_splitmix64((uint64_t)i * 2 + 1));
    double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0,
           w = (double)(b >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * w);
}

static void fill_ones(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
}

/* The gains [at, at + D) that fall in [begin, end), set to 1 in out. */
static void ones_in_range(float *out, int64_t begin, int64_t end, int64_t at, int64_t D)
{
    int64_t lo = at > begin ? at : begin, hi = at + D < end ? at + D : end;
    if (lo < hi) fill_ones(out + (lo - begin), hi - lo);
}

void model_init_params_range(const model_layout *m, float *out, int64_t begin, int64_t end,
                             uint64_t seed, double std)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = begin; i < end; i++) out[i - begin] = (float)(std * normal_at(seed, i));
    int64_t D = m->dims.d_model;
    for (int l = 0; l < m->dims.layers; l++) {
        ones_in_range(out, begin, end, m->layer[l].attn_norm, D);
        ones_in_range(out, begin, end, m->layer[l].mlp_norm, D);
    }
    ones_in_range(out, begin, end, m->final_norm, D);
}

void model_init_params(const model_layout *m, float *params, uint64_t seed, double std)
{
    model_init_params_range(m, params, 0, m->n_params, seed, std);
}

void model_decay_mask(const model_layout *m, uint8_t *mask)
{
    memset(mask, 1, (size_t)m->n_params);
    int64_t D = m->dims.d_model;
    for (int l = 0; l < m->dims.layers; l++) {
        memset(mask + m->layer[l].attn_norm, 0, (size_t)D);
        memset(mask + m->layer[l].mlp_norm, 0, (size_t)D);
    }
    memset(mask + m->final_norm, 0, (size_t)D);
}

double model_flops_per_sequence(const model_layout *m, int64_t N, double attn_pair_fraction)
{
    const model_dims *d = &m->dims;
    double D = d->d_model, QD = (double)d->n_heads * d->head_dim,
           KD = (double)d->n_kv_heads * d->head_dim, F = d->d_ff, V = d->vocab;
    double per_token = 2.0 * d->layers * (D * QD + 2 * D * KD + QD * D + 3 * D * F) + 2.0 * V * D;
    double attention = 4.0 * d->layers * (double)N * (double)N * QD * attn_pair_fraction;
    return per_token * (double)N + attention;
}

double model_train_flops(const model_layout *m, int64_t N, double attn_pair_fraction,
                         double sequences)
{
    return 3.0 * model_flops_per_sequence(m, N, attn_pair_fraction) * sequences;
}
