/* step_time.c: a training step priced part by part (step_time.h). */
#include "src/plan/step_time.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Forward FLOPs of one token's products in a layer, and of those the
 * backward recomputes without keep_layers (Q, K, V, Wo, gate/up: all but the
 * down projection, whose output the backward never reads). */
static double layer_gemm_flops(const model_dims *d, int recompute)
{
    double D = d->d_model, QD = (double)d->n_heads * d->head_dim,
           KD = (double)d->n_kv_heads * d->head_dim, F = d->d_ff;
    return 2.0 * (D * QD + 2 * D * KD + QD * D + (recompute ? 2 : 3) * D * F);
}

double step_layer_pass_bytes(const model_dims *d, int keep_layers)
{
    double D = d->d_model, QD = (double)d->n_heads * d->head_dim,
           KD = (double)d->n_kv_heads * d->head_dim, F = d->d_ff;
    /* forward: two norms (read, write), RoPE on Q and K in place, SwiGLU
     * (gate and up read, one written), two residual adds (two read, one
     * written); backward: two norms (x and dy read, dx written), SwiGLU's
     * (two read, two written from one), RoPE's, two adds */
    double forward = 2 * D + 2 * (QD + KD) + 2 * D + 3 * F + 6 * D;
    double backward = 6 * D + 5 * F + 2 * (QD + KD) + 6 * D;
    return 4.0 * (forward + backward + (keep_layers ? 0 : forward));
}

static int rate(const plan_profile *p, profile_row_kind kind, double *v, char *err, size_t err_len)
{
    const profile_row *r = plan_profile_get(p, kind, err, err_len);
    if (!r) return -1;
    *v = kind == PROFILE_ELEMENTWISE ? r->gbps * 1e9 : r->gflops * 1e9;
    return 0;
}

static void ring_part(step_part *part, const ring_pass_time *t)
{
    part->compute_s = t->compute_s + t->add_s;
    part->comm_s = t->comm_s;
    part->exposed_s = t->exposed_s;
}

/* The three rings of a layer priced into out->ring and the layer's parts. */
static int price_rings(const trainer_step_plan *t, const plan_profile *p, int per_node,
                       step_time *out, char *err, size_t err_len)
{
    const ring_schedule *recompute = t->keep == KEEP_NONE   ? t->rings.fwd
                                     : t->keep == KEEP_HALF ? t->rings.half
                                                            : NULL;
    const ring_schedule *passes[3] = {t->rings.fwd, recompute, t->rings.bwd};
    static const int parts[3] = {PART_ATTN_FORWARD, PART_ATTN_RECOMPUTE, PART_ATTN_BACKWARD};
    for (int i = 0; i < 3; i++) {
        if (!passes[i]) continue;
        if (ring_pass_price(passes[i], p, per_node, &out->ring[i], err, err_len) != 0) return -1;
        ring_part(&out->part[parts[i]], &out->ring[i]);
    }
    return 0;
}

/* Seconds of a reduce-scatter or all-gather of `bytes` over `ranks` ranks
 * as a ring: (W - 1) / W of the bytes through each rank's slowest hop, the
 * network's shared by the node's ranks when they span nodes, staged through
 * the host (device to host and back) where a device's collective crosses
 * nodes. */
static int collective_seconds(const trainer_step_plan *t, const plan_profile *p, int per_node,
                              double bytes, double *s, char *err, size_t err_len)
{
    int W = t->ranks, nodes = (W + per_node - 1) / per_node;
    *s = 0;
    if (W < 2) return 0;
    const profile_row *link =
        plan_profile_link(p, nodes > 1 ? PROFILE_LINK_INTER : PROFILE_LINK_INTRA, err, err_len);
    if (!link) return -1;
    double share = nodes > 1 && per_node > link->per_node ? (double)link->per_node / per_node : 1;
    *s = (W - 1.0) / W * bytes / (link->gbps * 1e9 * share) + (W - 1) * link->latency_us * 1e-6;
    if (nodes > 1 && t->memory.on_device) {
        const profile_row *host = plan_profile_link(p, PROFILE_LINK_HOST, err, err_len);
        if (!host) return -1;
        *s += 2.0 * bytes / (host->gbps * 1e9);
    }
    return 0;
}

/* AdamW over the rank's shard (every rank's whole parameters without ZeRO)
 * at membw (bytes/s)
 * and ZeRO's collectives: reduce-scatter of the fp32 gradients and
 * all-gather of the parameters, twice more at stage 3 (the forward's and the
 * backward's gathers). */
static int price_optimizer(const trainer_step_plan *t, const plan_profile *p, int per_node,
                           double membw, double layers_s, step_time *out, char *err, size_t err_len)
{
    double N = (double)t->memory.n_params;
    int stage = t->memory.zero_stage;
    double shard = stage >= 1 ? N / t->ranks : N;
    /* p, g, m, v read; p, m, v written: 7 fp32 values */
    out->part[PART_OPTIMIZER].compute_s = 28.0 * shard / membw;
    double param_bytes = (t->bf16_matmul ? 2.0 : 4.0) * N, grads, params;
    if (collective_seconds(t, p, per_node, 4.0 * N, &grads, err, err_len) != 0 ||
        collective_seconds(t, p, per_node, param_bytes, &params, err, err_len) != 0)
        return -1;
    /* without a shard: an all-reduce, a reduce-scatter and an all-gather */
    double comm = stage == 0 ? 2 * grads : grads + params * (stage == 3 ? 3 : 1);
    step_part *c = &out->part[PART_COLLECTIVES];
    c->comm_s = comm;
    c->exposed_s = stage >= 2 ? fmax(0, comm - layers_s) : comm;
    return 0;
}

/* The largest part of the step, in words; layers: layers x micro-batches. */
static void name_bottleneck(step_time *out, double layers)
{
    static const char *const words[] = {"the matrix products",         "attention kernels",
                                        "exposed ring communication",  "passes over memory",
                                        "the head and the embedding",  "the optimizer",
                                        "ZeRO's collectives (exposed)"};
    const step_part *L = out->part;
    double share[7] = {layers * L[PART_PRODUCTS].compute_s,
                       layers * (L[PART_ATTN_FORWARD].compute_s + L[PART_ATTN_RECOMPUTE].compute_s +
                                 L[PART_ATTN_BACKWARD].compute_s),
                       layers * (L[PART_ATTN_FORWARD].exposed_s + L[PART_ATTN_RECOMPUTE].exposed_s +
                                 L[PART_ATTN_BACKWARD].exposed_s),
                       layers * L[PART_PASSES].compute_s,
                       L[PART_HEAD].compute_s,
                       L[PART_OPTIMIZER].compute_s,
                       L[PART_COLLECTIVES].exposed_s};
    int best = 0;
    for (int i = 1; i < 7; i++)
        if (share[i] > share[best]) best = i;
    snprintf(out->bottleneck, sizeof out->bottleneck, "%s (%.0f%% of the step)", words[best],
             100.0 * share[best] / out->step_s);
}

static double part_s(const step_part *p)
{
    return p->compute_s + p->exposed_s;
}

int step_time_price(const trainer_step_plan *t, const plan_profile *p, int per_node, step_time *out,
                    char *err, size_t err_len)
{
    static const char *const names[STEP_PARTS] = {
        "products", "attention forward",  "attention recompute", "attention backward", "passes",
        "layers",   "head and embedding", "optimizer",           "ZeRO collectives"};
    memset(out, 0, sizeof *out);
    for (int i = 0; i < STEP_PARTS; i++) out->part[i].name = names[i];
    const model_dims *d = &t->dims;
    double gemm, membw, peak, n = (double)t->memory.tokens_per_rank;
    if (rate(p, PROFILE_GEMM, &gemm, err, err_len) != 0 ||
        rate(p, PROFILE_ELEMENTWISE, &membw, err, err_len) != 0 ||
        rate(p, PROFILE_PEAK, &peak, err, err_len) != 0 ||
        price_rings(t, p, per_node, out, err, err_len) != 0)
        return -1;
    double fwd = layer_gemm_flops(d, 0), rec = t->keep_layers ? 0 : layer_gemm_flops(d, 1);
    out->part[PART_PRODUCTS].compute_s = n * (3 * fwd + rec) / gemm;
    out->part[PART_PASSES].compute_s = n * step_layer_pass_bytes(d, t->keep_layers) / membw;
    for (int i = 0; i < LAYER_PARTS; i++) out->layer_s += part_s(&out->part[i]);
    double layers = (double)d->layers * t->micro_batches;
    step_part *all = &out->part[PART_LAYERS];
    for (int i = 0; i < LAYER_PARTS; i++) {
        all->compute_s += layers * out->part[i].compute_s;
        all->comm_s += layers * out->part[i].comm_s;
        all->exposed_s += layers * out->part[i].exposed_s;
    }
    /* the head's three products, its logits written, read and their
     * gradient written (fp32), the final norm and the embedding's two passes */
    double D = d->d_model, V = d->vocab;
    out->part[PART_HEAD].compute_s =
        t->micro_batches * n * (6.0 * D * V / gemm + (12.0 * V + 40.0 * D) / membw);
    if (price_optimizer(t, p, per_node, membw, all->compute_s, out, err, err_len) != 0) return -1;
    out->step_s = part_s(all) + part_s(&out->part[PART_HEAD]) + part_s(&out->part[PART_OPTIMIZER]) +
                  part_s(&out->part[PART_COLLECTIVES]);
    out->tokens_per_s_per_rank = (double)t->tokens_per_step / out->step_s / t->ranks;
    out->mfu = t->flops_per_step / (out->step_s * t->ranks * peak);
    name_bottleneck(out, layers);
    return 0;
}
