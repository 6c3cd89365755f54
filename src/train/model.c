/* model.c: the decoder's parameters and one forward + backward over this
 * rank's share of a sequence; see model.h. Activations and gradients are fp32,
 * on the CPU or on a device: every buffer the kernels read lives in the memory
 * of the runner's queue, and every operation on one is a kernel of that queue
 * (bk_copy, bk_axpy), so one text serves both. On a device the parameters and
 * the stored activations may be bf16 and the layers' matrix products take bf16
 * operands (bf16_matmul): the three product helpers (mm, mm_grad_weight,
 * mm_grad_input), the fp32 view of the few parameters other kernels read
 * (param32) and the store's keep and fetch hold every difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/attn/kernel_status.h"
#include "src/train/model.h"
#include "util/alloc.h"
#include "util/rng.h"

/* ------------------------------------------------------------------ parameters */

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
    double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, w = (double)(b >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * w);
}

static void fill_ones(float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
}

void model_init_params(const model_layout *m, float *params, uint64_t seed, double std)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m->n_params; i++) params[i] = (float)(std * normal_at(seed, i));
    int64_t D = m->dims.d_model;
    for (int l = 0; l < m->dims.layers; l++) {
        fill_ones(params + m->layer[l].attn_norm, D);
        fill_ones(params + m->layer[l].mlp_norm, D);
    }
    fill_ones(params + m->final_norm, D);
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

/* ------------------------------------------------------------------ runner */

typedef struct {
    int layer, micro_batch; /* the key this entry was stored under */
    void *x_in;             /* [n, D] the layer's input, in act_bytes elements */
    void *o_kept;           /* [n_kept, Hq*hd] attention output of the kept rows, likewise */
    float *lse_kept;        /* [n_kept, Hq] fp32 always */
} stored_layer;

/* Parameters [at, at + count) widened to fp32 at wide. */
typedef struct {
    int64_t at, count;
    float *wide;
} wide_region;

struct model_runner {
    model_runner_config cfg;
    const model_layout *m;
    int64_t n, D, QD, KD, F, V, Hq, n_kept;
    size_t act_bytes; /* of a stored activation: 2 (bf16, with bf16_matmul) or 4 (fp32) */
    int64_t mlp_rows; /* rows of one MLP chunk: min(n, mlp_rows of the config or the default) */
    int64_t *pos;                    /* [n] global positions, for the kernels */
    int64_t *pos_host;               /* [n] the same on the host (pos itself there) */
    int32_t *segments;               /* [N] document ids (document mask), else NULL */
    ring_plan_config plan;           /* the rings' plan, without the segments */
    ring_schedule *fwd, *bwd, *half; /* half: recompute of the early chunks */
    ring_exec_ctx ring;
    /* [layers]: one micro-batch's forward and backward run back to back, so
     * only the set of the micro-batch in flight is ever live */
    stored_layer *store;
    /* workspace: [n, ...] for the attention part, [mlp_rows, ...] for the
     * MLP's chunk (x1, b, rstd2, g, s, ds, dg). The final norm and the head
     * use a, rstd1 and dx, and the backward's gradients of x1 and of a go
     * into dx and a: no [n, D] buffer beyond these */
    float *x, *a, *rstd1, *q, *k, *v, *o, *lse, *x1, *b, *rstd2, *g, *s;
    float *dx, *d_o, *dq, *dk, *dv, *ds, *dg;
    float *head_scratch; /* fused head: its chunk scratch; else the logits [V] of a prediction */
    float *logits_host;  /* on a device: a prediction's logits [V] copied to the host */
    /* bf16 matrix products only: two operands rounded to bf16 chunk by chunk,
     * of mlp_rows * max(D, QD, 2F) elements each, and the fp32 copies (widened
     * at each step's first micro-batch) of the parameters that fp32 kernels
     * read: the norm gains and the embedding, one region each, in wide */
    uint16_t *op16[2];
    float *wide;
    wide_region *regions;
    int n_regions;
    const float *P;      /* the parameters of the pass in progress: fp32, */
    const uint16_t *p16; /* or bf16 (bf16_matmul) */
    model_memory mem;    /* what the buffers below take, counted as they are made */
    int allocate;        /* make the buffers (1) or only count them (0) */
    int on_device;       /* the buffers the kernels read are device memory */
    char failed[160];    /* the first allocation that failed */
};

/* A zeroed buffer of bytes, counted into *part; made only when allocating,
 * and never after a failure (the first one is named in r->failed). */
static void *take(model_runner *r, size_t bytes, size_t *part, const char *what)
{
    *part += bytes;
    if (!r->allocate || r->failed[0]) return NULL;
    return bu_calloc(bytes, what, r->failed, sizeof r->failed);
}

/* The forward and the backward ring for the current documents. The buffers
 * made for the first plan hold every later one: what travels depends on the
 * layout and the heads, not on the documents. */
static int plan_rings(model_runner *r, char *err, size_t err_len)
{
    const model_dims *d = &r->m->dims;
    ring_plan_config pc = r->plan;
    pc.need.segments = r->segments;
    ring_schedule *fwd = ring_plan(&pc, RING_FORWARD, err, err_len);
    ring_schedule *bwd = fwd ? ring_plan(&pc, ring_choose_backward(r->cfg.backward, d->n_heads,
                                                                   d->n_kv_heads, d->head_dim,
                                                                   pc.in_bytes),
                                         err, err_len)
                             : NULL;
    if (!bwd) {
        ring_schedule_free(fwd);
        return -1;
    }
    ring_schedule_free(r->fwd);
    ring_schedule_free(r->bwd);
    r->fwd = fwd;
    r->bwd = bwd;
    return 0;
}

int model_runner_set_documents(model_runner *r, const int32_t *segments, char *err,
                               size_t err_len)
{
    if (!r->segments) return 0;
    size_t bytes = (size_t)r->plan.layout.N * sizeof(int32_t);
    if (memcmp(r->segments, segments, bytes) == 0) return 0; /* the rings planned already */
    attn_need_ctx need = r->plan.need;
    need.segments = segments;
    if (attn_need_validate(&need, err, err_len) != 0) return -1; /* keep the last documents */
    memcpy(r->segments, segments, bytes);
    return plan_rings(r, err, err_len);
}

/* A buffer the kernels read, in the memory of the runner's queue (bk_alloc:
 * zeroed on the host; not on a device, where every one is written before it
 * is read), counted as take does. */
static void *take_buffer(model_runner *r, size_t bytes, size_t *part, const char *what)
{
    *part += bytes;
    void *p = NULL;
    if (!r->allocate || r->failed[0]) return NULL;
    if (bk_alloc(r->cfg.queue, bytes, &p) == BK_OK) return p;
    bu_no_memory(r->failed, sizeof r->failed, bytes, what);
    return NULL;
}

static void give_back(const model_runner *r, void *p)
{
    bk_free(r->cfg.queue, p);
}

static size_t floats(int64_t count)
{
    return (size_t)count * sizeof(float);
}

/* Region k: parameters [at, at + count), widened at *total floats into wide. */
static void add_region(wide_region *out, int *k, float *wide, int64_t *total, int64_t at,
                       int64_t count)
{
    if (out) out[*k] = (wide_region){at, count, wide ? wide + *total : NULL};
    (*k)++;
    *total += count;
}

/* The parameters fp32 kernels read (the norm gains and the embedding; the
 * head's products read the bf16 parameters), into out [2 * layers + 2] when
 * given, packed one after the other from wide; returns how many, *total
 * their floats. */
static int wide_regions(const model_layout *m, float *wide, wide_region *out, int64_t *total)
{
    int64_t D = m->dims.d_model, VD = (int64_t)m->dims.vocab * D;
    int k = 0;
    *total = 0;
    for (int l = 0; l < m->dims.layers; l++) {
        add_region(out, &k, wide, total, m->layer[l].attn_norm, D);
        add_region(out, &k, wide, total, m->layer[l].mlp_norm, D);
    }
    add_region(out, &k, wide, total, m->final_norm, D);
    add_region(out, &k, wide, total, m->embed, VD);
    return k;
}

/* With bf16 parameters: the fp32 copy of the parameters fp32 kernels read. */
static void take_wide(model_runner *r)
{
    int64_t total = 0;
    int n = wide_regions(r->m, NULL, NULL, &total);
    r->regions = take(r, (size_t)n * sizeof *r->regions, &r->mem.workspace, "the fp32 parameters");
    r->wide = take_buffer(r, floats(total), &r->mem.workspace, "the fp32 parameters");
    if (r->regions && r->wide) r->n_regions = wide_regions(r->m, r->wide, r->regions, &total);
}

/* The layer's work buffers, the positions and the head's buffer. */
static void take_workspace(model_runner *r)
{
    int64_t n = r->n, D = r->D, QD = r->QD, KD = r->KD, F = r->F;
    const lm_head_opts *ho = &r->cfg.head;
    int64_t head = !r->cfg.fused_head   ? 0
                   : r->cfg.bf16_matmul ? (int64_t)lm_head_bf16_scratch_floats(ho, r->V, D)
                                        : (int64_t)lm_head_scratch_floats(ho, r->V);
    int64_t c = r->mlp_rows; /* the MLP's buffers hold one chunk of rows */
    float **bufs[] = {&r->x,   &r->a,  &r->rstd1, &r->q,     &r->k,  &r->v,  &r->o,
                      &r->lse, &r->x1, &r->b,     &r->rstd2, &r->g,  &r->s,  &r->dx,
                      &r->d_o, &r->dq, &r->dk,    &r->dv,    &r->ds, &r->dg, &r->head_scratch};
    /* clang-format off */
    const int64_t counts[] = {n * D,     n * D,  n,      n * QD,    n * KD, n * KD,    n * QD,
                              n * r->Hq, c * D,  c * D,  c,         c * 2 * F, c * F, n * D,
                              n * QD,    n * QD, n * KD, n * KD,    c * F,  c * 2 * F,
                              head > r->V ? head : r->V};
    /* clang-format on */
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        *bufs[i] = take_buffer(r, floats(counts[i]), &r->mem.workspace, "the layer workspace");
    size_t pos_bytes = (size_t)n * sizeof(int64_t);
    r->pos_host = take(r, pos_bytes, &r->mem.workspace, "the token positions");
    r->pos = r->on_device ? take_buffer(r, pos_bytes, &r->mem.workspace, "the token positions")
                          : r->pos_host;
    if (r->on_device)
        r->logits_host = take(r, floats(r->V), &r->mem.workspace, "a prediction's logits");
    if (r->cfg.bf16_matmul) {
        int64_t widest = D > QD ? D : QD;
        if (2 * F > widest) widest = 2 * F;
        widest *= c;
        const char *what = "the bf16 operands of the matrix products";
        for (int k = 0; k < 2; k++)
            r->op16[k] = take_buffer(r, (size_t)widest * 2, &r->mem.workspace, what);
        take_wide(r);
    }
    /* the reference head makes its logits [n, V] and losses [n] at every step */
    r->mem.head_logits = r->cfg.fused_head ? 0 : floats(n * r->V + n);
}

/* One set of stored activations: per layer its input and the kept O, lse. */
static void take_store(model_runner *r)
{
    int layers = r->m->dims.layers;
    const char *what = "the stored activations";
    r->store = take(r, (size_t)layers * sizeof *r->store, &r->mem.stored, what);
    for (int l = 0; l < layers; l++) {
        stored_layer e = {.layer = -1};
        size_t a = r->act_bytes;
        e.x_in = take_buffer(r, (size_t)(r->n * r->D) * a, &r->mem.stored, what);
        e.o_kept = take_buffer(r, (size_t)(r->n_kept * r->QD + 1) * a, &r->mem.stored, what);
        e.lse_kept = take_buffer(r, floats(r->n_kept * r->Hq + 1), &r->mem.stored, what);
        if (r->store) r->store[l] = e;
    }
}

/* The ring's buffers, sized for every pass the runner makes. */
static void take_ring(model_runner *r)
{
    const ring_schedule *passes[3] = {r->fwd, r->bwd, r->half};
    int n_passes = r->half ? 3 : 2;
    size_t bytes = ring_buffers_bytes(passes, n_passes);
    r->mem.ring += bytes;
    if (!r->allocate || r->failed[0]) return;
    if (!(r->ring.buffers = ring_buffers_create(passes, n_passes, r->cfg.queue)))
        bu_no_memory(r->failed, sizeof r->failed, bytes, "the ring's buffers");
}

/* The runner's dimensions and its planned ring passes; nothing large yet. */
static model_runner *runner_plan(const model_runner_config *cfg, char *err, size_t err_len)
{
    const model_dims *d = &cfg->model->dims;
    model_runner *r = bu_calloc(sizeof *r, "the model runner", err, err_len);
    if (!r) return NULL;
    r->cfg = *cfg;
    r->m = cfg->model;
    r->on_device = cfg->queue->where == BK_DEVICE;
    if (cfg->bf16_matmul && (!r->on_device || !cfg->fused_head)) {
        snprintf(err, err_len, "bf16 matrix products need a device queue and the fused LM head");
        free(r);
        return NULL;
    }
    r->n = cfg->layout.n;
    r->act_bytes = cfg->bf16_matmul ? 2 : sizeof(float);
    r->mlp_rows = cfg->mlp_rows > 0 ? cfg->mlp_rows : MODEL_MLP_ROWS;
    if (r->mlp_rows > r->n) r->mlp_rows = r->n > 0 ? r->n : 1;
    r->D = d->d_model;
    r->Hq = d->n_heads;
    r->QD = (int64_t)d->n_heads * d->head_dim;
    r->KD = (int64_t)d->n_kv_heads * d->head_dim;
    r->F = d->d_ff;
    r->V = d->vocab;
    int half = cfg->keep == KEEP_HALF;
    if (half && !plan_keep_half_allowed(cfg->layout.kind, &cfg->mask)) {
        snprintf(err, err_len, "[memory] ckpt_fraction = 0.5 needs a causal mask with the zigzag layout");
        free(r);
        return NULL;
    }
    r->n_kept = cfg->keep == KEEP_ALL ? r->n : half ? r->n / 2 : 0;
    /* a chunk of the fused head never spans more than this rank's tokens */
    if (r->cfg.head.chunk_tokens > r->n && r->n > 0) r->cfg.head.chunk_tokens = r->n;

    ring_plan_config pc = {.topo = cfg->topo, .nodes = cfg->nodes, .layout = cfg->layout,
                           .need = {.mask = cfg->mask, .N = cfg->layout.N}, .h_q = d->n_heads,
                           .h_kv = d->n_kv_heads, .d = d->head_dim,
                           .in_bytes = cfg->ring_bf16 ? 2 : 4};
    r->plan = pc;
    if (cfg->mask.flags & BK_ATTN_DOCUMENT) { /* one document until told otherwise */
        size_t seg_bytes = (size_t)cfg->layout.N * sizeof(int32_t);
        r->mem.workspace += seg_bytes;
        if (!(r->segments = bu_calloc(seg_bytes, "the document ids", err, err_len))) {
            free(r);
            return NULL;
        }
    }
    if (plan_rings(r, err, err_len) == 0 && half) {
        /* The early chunks of the zigzag layout are the first half of the
         * sequence, laid out contiguously: chunk r on rank r. */
        ring_plan_config hc = pc;
        hc.topo = TOPO_FLAT;
        if (seq_layout_init(&hc.layout, LAYOUT_CONTIGUOUS, cfg->layout.P, cfg->layout.N / 2, err,
                            err_len) == 0)
            r->half = ring_plan(&hc, RING_FORWARD, err, err_len);
    }
    if (!r->fwd || !r->bwd || (half && !r->half)) {
        model_runner_free(r);
        return NULL;
    }
    r->ring = (ring_exec_ctx){.comm = cfg->cp, .queue = cfg->queue,
                              .scale = 1.0f / sqrtf((float)d->head_dim), .mask = cfg->mask,
                              .segments = r->segments, .piece_rows = cfg->piece_rows,
                              .in_type = pc.in_bytes == 2 ? BK_BF16 : BK_F32};
    return r;
}

/* Counts (and with r->allocate, makes) every buffer of the runner. */
static void take_buffers(model_runner *r)
{
    take_ring(r);
    take_workspace(r);
    take_store(r);
}

int model_runner_memory(const model_runner_config *cfg, model_memory *mem, char *err, size_t err_len)
{
    model_runner *r = runner_plan(cfg, err, err_len);
    if (!r) return -1;
    take_buffers(r);
    *mem = r->mem;
    model_runner_free(r);
    return 0;
}

model_runner *model_runner_create(const model_runner_config *cfg, char *err, size_t err_len)
{
    model_runner *r = runner_plan(cfg, err, err_len);
    if (!r) return NULL;
    r->allocate = 1;
    take_buffers(r);
    if (r->failed[0]) {
        snprintf(err, err_len, "%s", r->failed);
        model_runner_free(r);
        return NULL;
    }
    seq_layout_positions(&cfg->layout, bt_comm_rank(cfg->cp), r->pos_host);
    bk_queue q = *cfg->queue;
    if (r->on_device &&
        bk_device_upload(&q, r->pos, r->pos_host, (size_t)r->n * sizeof(int64_t)) != BK_OK) {
        snprintf(err, err_len, "cannot copy the token positions to the device");
        model_runner_free(r);
        return NULL;
    }
    return r;
}

void model_runner_free(model_runner *r)
{
    if (!r) return;
    ring_schedule_free(r->fwd);
    ring_schedule_free(r->bwd);
    ring_schedule_free(r->half);
    ring_buffers_free(r->ring.buffers);
    float *bufs[] = {r->x,   r->a,  r->rstd1, r->q,     r->k,  r->v,  r->o,
                     r->lse, r->x1, r->b,     r->rstd2, r->g,  r->s,  r->dx,
                     r->d_o, r->dq, r->dk,    r->dv,    r->ds, r->dg, r->head_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) give_back(r, bufs[i]);
    for (int e = 0; r->store && e < r->m->dims.layers; e++) {
        give_back(r, r->store[e].x_in);
        give_back(r, r->store[e].o_kept);
        give_back(r, r->store[e].lse_kept);
    }
    free(r->store);
    if (r->on_device) give_back(r, r->pos);
    give_back(r, r->wide);
    free(r->regions);
    give_back(r, r->op16[0]);
    give_back(r, r->op16[1]);
    free(r->pos_host);
    free(r->logits_host);
    free(r->segments);
    free(r);
}

/* ------------------------------------------------------------------ math helpers */

/* A kernel call's failure returned as the engine's status (BT_ERR_ARG for a
 * refused call, BT_ERR_SYS for a failed device; src/attn/kernel_status.h). */
#define CHECK_KERNEL(call)                                                                     \
    do {                                                                                       \
        bt_status check_st_ = attn_kernel_status(call);                                        \
        if (check_st_ != BT_OK) return check_st_;                                              \
    } while (0)

/* Rows of the chunk that starts at row r0 of m rows: the MLP's chunks and
 * the bf16 products' operands hold at most mlp_rows rows. */
static int64_t chunk_rows(const model_runner *r, int64_t r0, int64_t m)
{
    return m - r0 < r->mlp_rows ? m - r0 : r->mlp_rows;
}

/* The matrix products of the layers, with the weight W[k, n] at offset w of
 * the parameters. In fp32, or with bf16_matmul on bf16 operands: the weight
 * from the bf16 parameters, the activation or gradient rounded as it enters
 * (into op16, mlp_rows rows at a time, so the operands never take [n, ...]),
 * fp32 accumulation and results. */

/* src[count] rounded into r->op16[which] (NULL when the device failed) */
static const uint16_t *operand16(model_runner *r, int which, const float *src, int64_t count)
{
    return bk_round_bf16(r->cfg.queue, count, src, r->op16[which]) == BK_OK ? r->op16[which]
                                                                            : NULL;
}

/* out[m, cols] (+)= X[m, inner] op(W), op(W) [inner, cols]: W itself
 * (tw = BK_NO_TRANS, W [inner, cols]) or its transpose (BK_TRANS, W
 * [cols, inner]), at offset w of the parameters. */
static bk_status times_weight(model_runner *r, const float *X, int64_t m, int64_t inner, int64_t w,
                              bk_transpose tw, int64_t cols, float *out, int accumulate)
{
    const bk_queue *q = r->cfg.queue;
    float beta = accumulate ? 1.0f : 0.0f;
    int64_t ldw = tw == BK_NO_TRANS ? cols : inner;
    if (!r->p16)
        return bk_gemm(q, BK_NO_TRANS, tw, m, cols, inner, 1.0f, X, inner, r->P + w, ldw, beta, out,
                       cols);
    bk_status st = BK_OK;
    for (int64_t r0 = 0; r0 < m && st == BK_OK; r0 += r->mlp_rows) {
        int64_t rows = chunk_rows(r, r0, m);
        const uint16_t *x = operand16(r, 0, X + r0 * inner, rows * inner);
        st = x ? bk_gemm_bf16(q, BK_NO_TRANS, tw, rows, cols, inner, 1.0f, x, inner, r->p16 + w,
                              ldw, beta, out + r0 * cols, BK_F32, cols)
               : BK_ERR_DEVICE;
    }
    return st;
}

/* C[m, n] = A[m, k] W[k, n] (+ C when accumulate) */
static bk_status mm(model_runner *r, const float *A, int64_t m, int64_t k, int64_t w, int64_t n,
                    float *C, int accumulate)
{
    return times_weight(r, A, m, k, w, BK_NO_TRANS, n, C, accumulate);
}

/* dW[k, n] += A[m, k]^T dY[m, n] */
static bk_status mm_grad_weight(model_runner *r, const float *A, int64_t m, int64_t k,
                                const float *dY, int64_t n, float *dW)
{
    const bk_queue *q = r->cfg.queue;
    if (!r->p16) return bk_gemm(q, BK_TRANS, BK_NO_TRANS, k, n, m, 1.0f, A, k, dY, n, 1.0f, dW, n);
    bk_status st = BK_OK;
    for (int64_t r0 = 0; r0 < m && st == BK_OK; r0 += r->mlp_rows) {
        int64_t rows = chunk_rows(r, r0, m);
        const uint16_t *a = operand16(r, 0, A + r0 * k, rows * k);
        const uint16_t *dy = operand16(r, 1, dY + r0 * n, rows * n);
        st = a && dy ? bk_gemm_bf16(q, BK_TRANS, BK_NO_TRANS, k, n, rows, 1.0f, a, k, dy, n, 1.0f,
                                    dW, BK_F32, n)
                     : BK_ERR_DEVICE;
    }
    return st;
}

/* dA[m, k] (+)= dY[m, n] W[k, n]^T */
static bk_status mm_grad_input(model_runner *r, const float *dY, int64_t m, int64_t n, int64_t w,
                               int64_t k, float *dA, int accumulate)
{
    return times_weight(r, dY, m, n, w, BK_TRANS, k, dA, accumulate);
}

/* The parameters of the pass about to run (their type the runner's); with
 * bf16 parameters, the fp32 copy of what fp32 kernels read widened from them
 * (once per step: at the first micro-batch, and for every prediction). */
static bt_status use_params(model_runner *r, model_params p, int refresh)
{
    if (r->cfg.bf16_matmul ? !p.bf16 || p.f32 : !p.f32 || p.bf16) return BT_ERR_ARG;
    r->P = p.f32;
    r->p16 = p.bf16;
    for (int i = 0; i < r->n_regions && refresh; i++) {
        const wide_region *g = &r->regions[i];
        CHECK_KERNEL(bk_widen_bf16(r->cfg.queue, g->count, r->p16 + g->at, g->wide));
    }
    return BT_OK;
}

/* The fp32 parameters from offset at of the flat index, for an fp32 kernel:
 * the parameters themselves, or their widened copy. */
static const float *param32(const model_runner *r, int64_t at)
{
    if (r->P) return r->P + at;
    for (int i = 0; i < r->n_regions; i++)
        if (r->regions[i].at == at) return r->regions[i].wide;
    return NULL; /* not a region: a kernel refuses the NULL */
}

static stored_layer *stored(model_runner *r, int layer)
{
    return &r->store[layer];
}

/* Activations as they are stored: dst[count] (act_bytes elements) = src,
 * rounded to bf16 with bf16_matmul. */
static bk_status keep(const model_runner *r, void *dst, const float *src, int64_t count)
{
    if (r->act_bytes == 2) return bk_round_bf16(r->cfg.queue, count, src, dst);
    return bk_copy(r->cfg.queue, dst, src, (size_t)count * sizeof(float));
}

/* The stored activations back: dst[count] (fp32) = src (act_bytes elements). */
static bk_status fetch(const model_runner *r, float *dst, const void *src, int64_t count)
{
    if (r->act_bytes == 2) return bk_widen_bf16(r->cfg.queue, count, src, dst);
    return bk_copy(r->cfg.queue, dst, src, (size_t)count * sizeof(float));
}

/* Layer l's input x [n, D], about to enter the layer: stored under (l, mb)
 * when mb >= 0. With bf16 activations x becomes its rounded values, stored or
 * not, so that the backward recomputes the layer from the input the forward
 * computed it from, and a prediction sees what training saw. */
static bt_status enter_layer(model_runner *r, int l, int mb, float *x)
{
    int64_t D = r->D;
    if (mb >= 0) {
        stored_layer *e = stored(r, l);
        e->layer = l;
        e->micro_batch = mb;
        CHECK_KERNEL(keep(r, e->x_in, x, r->n * D));
        if (r->act_bytes == 2) CHECK_KERNEL(fetch(r, x, e->x_in, r->n * D));
        return BT_OK;
    }
    /* a prediction stores nothing: x rounds through op16, chunk by chunk */
    for (int64_t r0 = 0; r0 < r->n && r->act_bytes == 2; r0 += r->mlp_rows) {
        int64_t count = chunk_rows(r, r0, r->n) * D;
        CHECK_KERNEL(keep(r, r->op16[0], x + r0 * D, count));
        CHECK_KERNEL(fetch(r, x + r0 * D, r->op16[0], count));
    }
    return BT_OK;
}

/* The input of stored layer e in fp32: the stored buffer itself, or widened
 * into r->x (free during the backward). NULL when the device failed. */
static const float *stored_input(model_runner *r, const stored_layer *e)
{
    if (r->act_bytes != 2) return e->x_in;
    return fetch(r, r->x, e->x_in, r->n * r->D) == BK_OK ? r->x : NULL;
}

/* a = RMSNorm(x_in), q, k, v = a W, RoPE on q and k at the global positions. */
static bt_status attention_inputs(model_runner *r, int l, const float *x_in)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    const model_dims *d = &r->m->dims;
    int64_t n = r->n, D = r->D;
    CHECK_KERNEL(
        bk_rmsnorm_fwd(q, n, D, x_in, param32(r, o->attn_norm), d->norm_eps, r->a, r->rstd1));
    CHECK_KERNEL(mm(r, r->a, n, D, o->wq, r->QD, r->q, 0));
    CHECK_KERNEL(mm(r, r->a, n, D, o->wk, r->KD, r->k, 0));
    CHECK_KERNEL(mm(r, r->a, n, D, o->wv, r->KD, r->v, 0));
    CHECK_KERNEL(bk_rope_fwd(q, n, d->n_heads, d->head_dim, r->pos, &d->rope, r->q, r->q));
    CHECK_KERNEL(bk_rope_fwd(q, n, d->n_kv_heads, d->head_dim, r->pos, &d->rope, r->k, r->k));
    return BT_OK;
}

/* Rows [r0, r0 + rows) of the MLP part, into the chunk buffers: x1 = x_in +
 * O Wo; b = RMSNorm(x1); g = b W_gate_up; s = SwiGLU(g); and, when out is
 * given, out = x1 + s W_down (out may be x_in: a chunk reads its rows of x_in
 * before it writes them). */
static bt_status mlp_chunk(model_runner *r, int l, int64_t r0, int64_t rows, const float *x_in,
                           float *out)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    int64_t D = r->D, F = r->F;
    CHECK_KERNEL(bk_copy(q, r->x1, x_in + r0 * D, (size_t)(rows * D) * sizeof(float)));
    CHECK_KERNEL(mm(r, r->o + r0 * r->QD, rows, r->QD, o->wo, D, r->x1, 1));
    CHECK_KERNEL(bk_rmsnorm_fwd(q, rows, D, r->x1, param32(r, o->mlp_norm), r->m->dims.norm_eps,
                                r->b, r->rstd2));
    CHECK_KERNEL(mm(r, r->b, rows, D, o->w_gate_up, 2 * F, r->g, 0));
    CHECK_KERNEL(bk_swiglu_fwd(q, rows, F, r->g, r->g + F, 2 * F, r->s));
    if (out) {
        CHECK_KERNEL(bk_copy(q, out + r0 * D, r->x1, (size_t)(rows * D) * sizeof(float)));
        CHECK_KERNEL(mm(r, r->s, rows, F, o->w_down, D, out + r0 * D, 1));
    }
    return BT_OK;
}

/* The MLP part of layer l forward, out[n, D] = x1 + MLP(x1) with x1 = x_in +
 * O Wo, chunk by chunk: the MLP is token by token, so its buffers hold one
 * chunk of mlp_rows rows, not the whole sequence. */
static bt_status mlp_forward(model_runner *r, int l, const float *x_in, float *out)
{
    bt_status st = BT_OK;
    for (int64_t r0 = 0; r0 < r->n && st == BT_OK; r0 += r->mlp_rows)
        st = mlp_chunk(r, l, r0, chunk_rows(r, r0, r->n), x_in, out);
    return st;
}

/* The MLP part of layer l backward, chunk by chunk, each recomputed from
 * x_in first: from dx [n, D] (the gradient of the layer's output), the
 * weight and gain gradients accumulated into G, and dx += the gradient
 * through the MLP branch, so that dx becomes the gradient of x1 (a chunk's
 * rows of dx are read by that chunk alone, before it adds to them). */
static bt_status mlp_backward(model_runner *r, int l, const float *x_in, float *G)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    int64_t D = r->D, F = r->F;
    for (int64_t r0 = 0; r0 < r->n; r0 += r->mlp_rows) {
        int64_t rows = chunk_rows(r, r0, r->n);
        bt_status st = mlp_chunk(r, l, r0, rows, x_in, NULL);
        if (st != BT_OK) return st;
        float *dx = r->dx + r0 * D;
        CHECK_KERNEL(mm_grad_weight(r, r->s, rows, F, dx, D, G + o->w_down));
        CHECK_KERNEL(mm_grad_input(r, dx, rows, D, o->w_down, F, r->ds, 0));
        CHECK_KERNEL(bk_swiglu_bwd(q, rows, F, r->g, r->g + F, 2 * F, r->ds, r->dg, r->dg + F));
        CHECK_KERNEL(mm_grad_weight(r, r->b, rows, D, r->dg, 2 * F, G + o->w_gate_up));
        /* b is free once its weight gradient is taken: the MLP branch's
         * gradient of x1 goes there, then into dx */
        CHECK_KERNEL(mm_grad_input(r, r->dg, rows, 2 * F, o->w_gate_up, D, r->b, 0));
        CHECK_KERNEL(bk_rmsnorm_bwd(q, rows, D, r->x1, param32(r, o->mlp_norm), r->rstd2, r->b,
                                    r->b, G + o->mlp_norm));
        CHECK_KERNEL(bk_axpy(q, rows * D, 1.0f, r->b, dx));
    }
    return BT_OK;
}

static bt_status ring_fwd_timed(model_runner *r, const ring_schedule *s, const float *q,
                                const float *k, const float *v, float *o, float *lse, double *t,
                                model_step_stats *stats)
{
    ring_exec_ctx c = r->ring;
    c.sched = s;
    ring_exec_stats rs;
    bt_status st = ring_forward(&c, q, k, v, o, lse, &rs);
    *t += rs.total_s;
    stats->attn_wait_s += rs.wait_s;
    return st;
}

/* O and lse of layer l for the backward: kept, recomputed, or both. */
static bt_status attention_output_for_backward(model_runner *r, stored_layer *e,
                                               model_step_stats *stats)
{
    int64_t n = r->n, kept = r->n_kept, first_kept = n - kept;
    bt_status st = BT_OK;
    if (kept < n && !r->half)
        st = ring_fwd_timed(r, r->fwd, r->q, r->k, r->v, r->o, r->lse, &stats->attn_recompute_s,
                            stats);
    else if (kept < n) /* the early chunk alone, through the half-sequence ring */
        st = ring_fwd_timed(r, r->half, r->q, r->k, r->v, r->o, r->lse, &stats->attn_recompute_s,
                            stats);
    if (st != BT_OK) return st;
    const bk_queue *q = r->cfg.queue;
    CHECK_KERNEL(fetch(r, r->o + first_kept * r->QD, e->o_kept, kept * r->QD));
    CHECK_KERNEL(bk_copy(q, r->lse + first_kept * r->Hq, e->lse_kept,
                         (size_t)(kept * r->Hq) * sizeof(float)));
    return BT_OK;
}

/* Embedding and every layer; with mb >= 0 each layer's input and the kept part
 * of O, lse are stored under (layer, mb). Leaves the last hidden state in r->x. */
static bt_status forward_layers(model_runner *r, const int64_t *tokens, int mb,
                                model_step_stats *stats)
{
    const model_dims *d = &r->m->dims;
    int64_t n = r->n, D = r->D, QD = r->QD, first_kept = n - r->n_kept;
    bt_status st = BT_OK;
    CHECK_KERNEL(
        bk_embedding_gather(r->cfg.queue, n, r->V, D, tokens, param32(r, r->m->embed), r->x));
    for (int l = 0; l < d->layers && st == BT_OK; l++) {
        st = enter_layer(r, l, mb, r->x);
        if (st == BT_OK) st = attention_inputs(r, l, r->x);
        if (st == BT_OK)
            st = ring_fwd_timed(r, r->fwd, r->q, r->k, r->v, r->o, r->lse, &stats->attn_fwd_s, stats);
        if (st != BT_OK) break;
        if (mb >= 0) {
            stored_layer *e = stored(r, l);
            CHECK_KERNEL(keep(r, e->o_kept, r->o + first_kept * QD, r->n_kept * QD));
            CHECK_KERNEL(bk_copy(r->cfg.queue, e->lse_kept, r->lse + first_kept * r->Hq,
                                 (size_t)(r->n_kept * r->Hq) * sizeof(float)));
        }
        st = mlp_forward(r, l, r->x, r->x);
    }
    return st;
}

bt_status model_predict(model_runner *r, model_params params, const int64_t *tokens,
                        const int64_t *rows, int n_rows, int64_t *predicted)
{
    model_step_stats stats = {0};
    bt_status st = use_params(r, params, 1);
    if (st == BT_OK) st = forward_layers(r, tokens, -1, &stats);
    if (st != BT_OK) return st;
    int64_t D = r->D, V = r->V;
    float *hn = r->a; /* [n, D] the final-normed hidden states; a is free after the layers */
    CHECK_KERNEL(bk_rmsnorm_fwd(r->cfg.queue, r->n, D, r->x, param32(r, r->m->final_norm),
                                r->m->dims.norm_eps, hn, NULL));
    float *logits = r->head_scratch;                      /* [V], in the queue's memory */
    float *seen = r->on_device ? r->logits_host : logits; /* the same on the host */
    bk_status kst = BK_OK;
    for (int i = 0; i < n_rows && kst == BK_OK; i++) {
        /* logits [1, V] = h [1, D] W_head [V, D]^T */
        kst = times_weight(r, hn + rows[i] * D, 1, D, r->m->head, BK_TRANS, V, logits, 0);
        if (kst == BK_OK && r->on_device)
            kst = bk_device_download(r->cfg.queue, seen, logits, (size_t)V * sizeof(float));
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (seen[v] > seen[best]) best = v;
        predicted[i] = best;
    }
    return attn_kernel_status(kst);
}

bt_status model_forward_loss(model_runner *r, model_params params, const int64_t *tokens,
                             const int64_t *labels, double *loss_sum, int64_t *n_valid,
                             float *row_loss)
{
    model_step_stats stats = {0};
    bt_status st = use_params(r, params, 1);
    if (st == BT_OK) st = forward_layers(r, tokens, -1, &stats);
    if (st != BT_OK) return st;
    const bk_queue *q = r->cfg.queue;
    float *hn = r->a; /* [n, D] the final-normed hidden states; a is free after the layers */
    CHECK_KERNEL(bk_rmsnorm_fwd(q, r->n, r->D, r->x, param32(r, r->m->final_norm),
                                r->m->dims.norm_eps, hn, NULL));
    lm_head_opts ho = r->cfg.head;
    ho.z_loss = 0.0f; /* the likelihood alone */
    CHECK_KERNEL(lm_head_loss(q, &ho, r->n, r->D, r->V, hn, r->P ? r->P + r->m->head : NULL,
                              r->p16 ? r->p16 + r->m->head : NULL, labels, loss_sum, n_valid,
                              row_loss, r->head_scratch));
    return BT_OK;
}

bt_status model_forward_backward(model_runner *r, int mb, model_params params, float *G,
                                 const int64_t *tokens, const int64_t *labels, float loss_scale,
                                 double *loss_sum, int64_t *n_valid, model_step_stats *stats)
{
    const bk_queue *q = r->cfg.queue;
    const model_dims *d = &r->m->dims;
    int64_t n = r->n, D = r->D, QD = r->QD, KD = r->KD, V = r->V;
    bt_status st = BT_OK;
    if (mb < 0 || mb >= r->cfg.micro_batches) return BT_ERR_ARG;
    st = use_params(r, params, mb == 0);
    if (st == BT_OK) st = forward_layers(r, tokens, mb, stats);
    if (st != BT_OK) return st;
    const float *final_norm = param32(r, r->m->final_norm);

    /* ---- head and loss (the last op: its gradient comes with it). The
     * final-normed states hn [n, D] and their rstd take a and rstd1, free
     * until the backward recomputes the last layer's inputs; the head's
     * gradient dh goes into dx, which the final norm's backward turns in
     * place into the gradient of the last layer's output. */
    float *hn = r->a, *rstd_f = r->rstd1;
    CHECK_KERNEL(bk_rmsnorm_fwd(q, n, D, r->x, final_norm, d->norm_eps, hn, rstd_f));
    const lm_head_opts *ho = &r->cfg.head;
    float *dW = G + r->m->head;
    if (r->p16)
        CHECK_KERNEL(lm_head_fused_bf16(q, ho, n, D, V, hn, r->p16 + r->m->head, labels, loss_scale,
                                        loss_sum, n_valid, r->dx, dW, r->head_scratch));
    else if (r->cfg.fused_head)
        CHECK_KERNEL(lm_head_fused(q, ho, n, D, V, hn, r->P + r->m->head, labels, loss_scale,
                                   loss_sum, n_valid, r->dx, dW, r->head_scratch));
    else
        CHECK_KERNEL(lm_head_unfused(q, ho, n, D, V, hn, r->P + r->m->head, labels, loss_scale,
                                     loss_sum, n_valid, r->dx, dW));
    CHECK_KERNEL(
        bk_rmsnorm_bwd(q, n, D, r->x, final_norm, rstd_f, r->dx, r->dx, G + r->m->final_norm));

    /* ---- backward, layer by layer, recomputing what was not kept */
    for (int l = d->layers - 1; l >= 0 && st == BT_OK; l--) {
        const layer_offsets *o = &r->m->layer[l];
        stored_layer *e = stored(r, l);
        if (e->layer != l || e->micro_batch != mb) return BT_ERR_ARG; /* keyed by (layer, mb) */
        const float *x_in = stored_input(r, e);
        if (!x_in) return BT_ERR_SYS; /* the device failed */
        st = attention_inputs(r, l, x_in);
        if (st == BT_OK) st = attention_output_for_backward(r, e, stats);
        if (st == BT_OK) st = mlp_backward(r, l, x_in, G);
        if (st != BT_OK) break;
        /* output projection and attention, from dx: now the gradient of x1 */
        CHECK_KERNEL(mm_grad_weight(r, r->o, n, QD, r->dx, D, G + o->wo));
        CHECK_KERNEL(mm_grad_input(r, r->dx, n, D, o->wo, QD, r->d_o, 0));
        ring_exec_ctx c = r->ring;
        c.sched = r->bwd;
        ring_exec_stats rs;
        st = ring_backward(&c, r->q, r->k, r->v, r->o, r->d_o, r->lse, r->dq, r->dk, r->dv, &rs);
        stats->attn_bwd_s += rs.total_s;
        stats->attn_wait_s += rs.wait_s;
        if (st != BT_OK) break;
        CHECK_KERNEL(bk_rope_bwd(q, n, d->n_heads, d->head_dim, r->pos, &d->rope, r->dq, r->dq));
        CHECK_KERNEL(bk_rope_bwd(q, n, d->n_kv_heads, d->head_dim, r->pos, &d->rope, r->dk, r->dk));
        /* Q/K/V projections and the attention norm */
        CHECK_KERNEL(mm_grad_weight(r, r->a, n, D, r->dq, QD, G + o->wq));
        CHECK_KERNEL(mm_grad_weight(r, r->a, n, D, r->dk, KD, G + o->wk));
        CHECK_KERNEL(mm_grad_weight(r, r->a, n, D, r->dv, KD, G + o->wv));
        /* a is free once the weight gradients are taken: the attention
         * branch's gradient of a, then of x_in, goes there, then into dx */
        CHECK_KERNEL(mm_grad_input(r, r->dq, n, QD, o->wq, D, r->a, 0));
        CHECK_KERNEL(mm_grad_input(r, r->dk, n, KD, o->wk, D, r->a, 1));
        CHECK_KERNEL(mm_grad_input(r, r->dv, n, KD, o->wv, D, r->a, 1));
        CHECK_KERNEL(bk_rmsnorm_bwd(q, n, D, x_in, param32(r, o->attn_norm), r->rstd1, r->a, r->a,
                                    G + o->attn_norm));
        CHECK_KERNEL(bk_axpy(q, n * D, 1.0f, r->a, r->dx));
    }
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_embedding_scatter_add(q, n, V, D, tokens, r->dx, G + r->m->embed));
    return BT_OK;
}
