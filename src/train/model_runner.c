/* model_runner.c: the runner's dimensions, ring passes and buffers, counted
 * before anything is made (model_runner_memory) and made by the same code
 * (model_runner_create). Every buffer the kernels read lives in the memory of
 * the runner's queue, so one text serves the CPU and a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "src/train/model_internal.h"
#include "util/alloc.h"

/* A zeroed buffer of bytes, counted into *part; made only when allocating,
 * and never after a failure (the first one is named in r->failed). */
static void *take(model_runner *r, size_t bytes, size_t *part, const char *what)
{
    *part += bytes;
    if (!r->allocate || r->failed[0]) return NULL;
    return bu_calloc(bytes, what, r->failed, sizeof r->failed);
}

/* The backward ring of the direction `choice` takes for pc's heads and inputs. */
static ring_schedule *plan_backward(const ring_plan_config *pc, ring_bwd_choice choice, char *err,
                                    size_t err_len)
{
    return ring_plan(pc, ring_choose_backward(choice, pc->h_q, pc->h_kv, pc->d, pc->in_bytes), err,
                     err_len);
}

/* The forward and the backward ring for the current documents. The buffers
 * made for the first plan hold every later one: what travels depends on the
 * layout and the heads, not on the documents. */
static int schedule_rings(model_runner *r, char *err, size_t err_len)
{
    ring_plan_config pc = r->ring_cfg;
    pc.need.segments = r->segments;
    ring_schedule *fwd = ring_plan(&pc, RING_FORWARD, err, err_len);
    ring_schedule *bwd = fwd ? plan_backward(&pc, r->cfg.backward, err, err_len) : NULL;
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

int model_runner_set_documents(model_runner *r, const int32_t *segments, char *err, size_t err_len)
{
    if (!r->segments) return 0;
    size_t bytes = (size_t)r->ring_cfg.layout.N * sizeof(int32_t);
    if (memcmp(r->segments, segments, bytes) == 0) return 0; /* the rings planned already */
    attn_need_ctx need = r->ring_cfg.need;
    need.segments = segments;
    if (attn_need_validate(&need, err, err_len) != 0) return -1; /* keep the last documents */
    memcpy(r->segments, segments, bytes);
    return schedule_rings(r, err, err_len);
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
    int64_t D = m->dims.d_model, VD = model_embed_floats(m);
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

enum { WORK_BUFFERS = 19 };

/* dk and dv in k's and v's memory: when the ring's inputs travel in bf16,
 * it reads K and V once, rounding them at home (ring.h). */
static int grads_over_kv(const model_runner *r)
{
    return r->ring.in_type == BK_BF16;
}

/* The workspace's buffers (model_internal.h) and their floats, in one
 * order, for take_workspace and model_runner_free: [n, ...] the streams and
 * what the ring reads and writes, [chunk_rows, ...] the rest; 0 floats for
 * a buffer in another's memory: v in k's and dv in dk's (the ring receives
 * [dK | dV] as one: RING_CALLER_MEMORY), dk and dv in k's (grads_over_kv). */
static void work_buffers(model_runner *r, float **bufs[WORK_BUFFERS], int64_t counts[WORK_BUFFERS])
{
    int64_t n = r->n, c = r->chunk_rows, D = r->D, QD = r->QD, KD = r->KD, F = r->F;
    int64_t dkv = grads_over_kv(r) ? 0 : 2 * n * KD;
    const lm_head_opts *ho = &r->cfg.head;
    int64_t head = !r->cfg.fused_head   ? 0
                   : r->cfg.bf16_matmul ? (int64_t)lm_head_bf16_scratch_floats(ho, r->V, D)
                                        : (int64_t)lm_head_scratch_floats(ho, r->V);
    /* clang-format off */
    float **const b[WORK_BUFFERS] = {&r->x, &r->dx, &r->q, &r->k, &r->v, &r->o, &r->lse, &r->dk,
                                     &r->dv,
                                     &r->a, &r->rstd1, &r->x1, &r->b, &r->rstd2, &r->g, &r->s,
                                     &r->ds, &r->dg, &r->head_scratch};
    const int64_t k[WORK_BUFFERS] = {n * (D > QD ? D : QD), n * D, n * QD, 2 * n * KD, 0, n * QD,
                                     n * r->Hq, dkv, 0,
                                     c * D, c, c * D, c * D, c, c * 2 * F, c * F,
                                     c * F, c * 2 * F, head > r->V ? head : r->V};
    /* clang-format on */
    for (int i = 0; i < WORK_BUFFERS; i++) bufs[i] = b[i], counts[i] = k[i];
}

/* The layer's work buffers, the positions and the head's buffer. */
static void take_workspace(model_runner *r)
{
    int64_t n = r->n, D = r->D, QD = r->QD, F = r->F, c = r->chunk_rows;
    float **bufs[WORK_BUFFERS];
    int64_t counts[WORK_BUFFERS];
    work_buffers(r, bufs, counts);
    for (int i = 0; i < WORK_BUFFERS; i++)
        if (counts[i] > 0)
            *bufs[i] = take_buffer(r, floats(counts[i]), &r->mem.workspace, "the layer workspace");
    r->d_o = r->x; /* free in the backward */
    r->dq = r->o;  /* read once by the ring's backward, before it writes dQ */
    if (grads_over_kv(r)) r->dk = r->k;
    if (r->k) r->v = r->k + n * r->KD;
    if (r->dk) r->dv = r->dk + n * r->KD;
    size_t pos_bytes = (size_t)n * sizeof(int64_t);
    r->pos_host = take(r, pos_bytes, &r->mem.workspace, "the token positions");
    r->pos = r->on_device ? take_buffer(r, pos_bytes, &r->mem.workspace, "the token positions")
                          : r->pos_host;
    if (r->on_device)
        r->logits_host = take(r, floats(r->V), &r->mem.workspace, "a prediction's logits");
    r->head_sums = take_buffer(r, sizeof(bk_ce_sums), &r->mem.workspace, "the head's sums");
    if (r->on_device && (r->cfg.mask.flags & BK_ATTN_BLOCK_SPARSE))
        r->mask_bits = take_buffer(r, bk_attn_block_bytes(r->cfg.mask.n_blocks), &r->mem.workspace,
                                   "the block-sparse mask");
    if (r->cfg.bf16_matmul) {
        int64_t widest = D > QD ? D : QD;
        if (2 * F > widest) widest = 2 * F;
        widest *= c;
        const char *what = "the bf16 operands of the matrix products";
        for (int k = 0; k < 2; k++)
            r->op16[k] = take_buffer(r, (size_t)widest * 2, &r->mem.workspace, what);
        take_wide(r);
    }
    /* the reference head makes its logits [chunk, V] and losses [chunk] at every chunk */
    r->mem.head_logits = r->cfg.fused_head ? 0 : floats(c * r->V + c);
}

void runner_kept_buffers(model_runner *r, kept_layer *k, float **kept[KEPT_BUFFERS],
                         float *work[KEPT_BUFFERS], int64_t width[KEPT_BUFFERS])
{
    int64_t D = r->D, F = r->F;
    float **const k_bufs[KEPT_BUFFERS] = {&k->a,  &k->rstd1, &k->q,     &k->k, &k->v,
                                          &k->x1, &k->b,     &k->rstd2, &k->g, &k->s};
    float *const w_bufs[KEPT_BUFFERS] = {r->a,  r->rstd1, r->q,     r->k, r->v,
                                         r->x1, r->b,     r->rstd2, r->g, r->s};
    const int64_t widths[KEPT_BUFFERS] = {D, 1, r->QD, r->KD, r->KD, D, D, 1, 2 * F, F};
    for (int i = 0; i < KEPT_BUFFERS; i++)
        kept[i] = k_bufs[i], work[i] = w_bufs[i], width[i] = widths[i];
}

/* A layer's kept intermediates (keep_layers), counted as stored activations. */
static void take_kept(model_runner *r, kept_layer *k)
{
    float **kept[KEPT_BUFFERS], *work[KEPT_BUFFERS];
    int64_t width[KEPT_BUFFERS];
    runner_kept_buffers(r, k, kept, work, width);
    for (int i = 0; i < KEPT_BUFFERS; i++)
        *kept[i] =
            take_buffer(r, floats(r->n * width[i]), &r->mem.stored, "the kept layer activations");
}

/* Page-locked host memory of bytes, counted into *part as take does. */
static void *take_pinned(model_runner *r, size_t bytes, size_t *part, const char *what)
{
    *part += bytes;
    void *p = NULL;
    if (!r->allocate || r->failed[0]) return NULL;
    if (bk_host_pinned_malloc(bytes, &p) == BK_OK) return p;
    bu_no_memory(r->failed, sizeof r->failed, bytes, what);
    return NULL;
}

void runner_stored_set(const model_runner *r, stored_layer *e, void **buf[STORED_SET],
                       size_t bytes[STORED_SET])
{
    size_t a = r->act_bytes;
    buf[0] = &e->x_in, bytes[0] = (size_t)(r->n * r->D) * a;
    buf[1] = &e->o_kept, bytes[1] = (size_t)(r->n_kept * r->QD + 1) * a;
    buf[2] = (void **)&e->lse_kept, bytes[2] = floats(r->n_kept * r->Hq + 1);
}

/* A stored set into e: device memory, or page-locked host memory (pinned). */
static void take_stored_set(model_runner *r, stored_layer *e, int pinned, size_t *part,
                            const char *what)
{
    void **buf[STORED_SET];
    size_t bytes[STORED_SET];
    runner_stored_set(r, e, buf, bytes);
    for (int i = 0; i < STORED_SET; i++)
        *buf[i] =
            pinned ? take_pinned(r, bytes[i], part, what) : take_buffer(r, bytes[i], part, what);
}

/* One set of stored activations: per layer its input, the kept O, lse and,
 * with keep_layers, its intermediates. Offloaded, the first three are
 * page-locked host memory, and two sets of the device carry them. */
static void take_store(model_runner *r)
{
    int layers = r->m->dims.layers;
    const char *what = "the stored activations";
    r->store = take(r, (size_t)layers * sizeof *r->store, &r->mem.stored, what);
    for (int k = 0; k < 2 && r->offload && layers > 0; k++)
        take_stored_set(r, &r->slot[k], 0, &r->mem.stored, "the offload's device slots");
    for (int l = 0; l < layers; l++) {
        stored_layer e = {.layer = -1};
        if (r->offload)
            take_stored_set(r, &e, 1, &r->mem.offloaded,
                            "the offloaded activations (page-locked host memory)");
        else
            take_stored_set(r, &e, 0, &r->mem.stored, what);
        if (r->cfg.keep_layers) take_kept(r, &e.kept);
        if (r->store) r->store[l] = e;
    }
}

/* A stored set given back, as take_stored_set made it. */
static void give_back_stored_set(const model_runner *r, stored_layer *e, int pinned)
{
    void **buf[STORED_SET];
    size_t bytes[STORED_SET];
    runner_stored_set(r, e, buf, bytes);
    for (int i = 0; i < STORED_SET; i++)
        if (pinned)
            bk_host_pinned_free(*buf[i]);
        else
            give_back(r, *buf[i]);
}

/* With Ulysses groups: the heads' layout of a pass (src/attn/ulysses.h),
 * counted with the ring's buffers. */
static void take_ulysses(model_runner *r)
{
    const model_dims *d = &r->m->dims;
    ulysses_config uc = {.group = r->cfg.ulysses_group,
                         .n = r->n,
                         .h_q = d->n_heads,
                         .h_kv = d->n_kv_heads,
                         .d = d->head_dim};
    size_t bytes = ulysses_bytes(&uc);
    r->mem.ring += bytes;
    if (!r->allocate || r->failed[0]) return;
    if (!(r->uly = ulysses_create(&uc, r->cfg.queue)))
        bu_no_memory(r->failed, sizeof r->failed, bytes, "the Ulysses groups' buffers");
}

/* The ring's buffers, sized for every pass the runner makes. Its backward
 * gives the ring q and d_o to keep accumulators in (RING_CALLER_MEMORY),
 * neither read after it, and dk and dv as one [dK | dV]. */
static void take_ring(model_runner *r)
{
    if (r->cfg.layout.U > 1) take_ulysses(r);
    const ring_schedule *passes[3] = {r->fwd, r->bwd, r->half};
    int n_passes = r->half ? 3 : 2;
    size_t bytes = ring_buffers_bytes(passes, n_passes, RING_CALLER_MEMORY);
    r->mem.ring += bytes;
    if (!r->allocate || r->failed[0]) return;
    if (!(r->ring.buffers =
              ring_buffers_create(passes, n_passes, r->cfg.queue, RING_CALLER_MEMORY)))
        bu_no_memory(r->failed, sizeof r->failed, bytes, "the ring's buffers");
}

/* The SDPA calls of the rings over layout (src/attn/ring_sdpa.h). */
static ring_sdpa_config sdpa_config(const model_runner *r, const seq_layout *layout)
{
    const model_dims *d = &r->m->dims;
    return (ring_sdpa_config){.layout = *layout,
                              .need = r->ring_cfg.need,
                              .rank = r->cfg.cp ? bt_comm_rank(r->cfg.cp) : 0, /* counted
                                                                      * offline: rank 0's */
                              .h_q = d->n_heads,
                              .h_kv = d->n_kv_heads,
                              .d = d->head_dim,
                              .scale = r->ring.scale};
}

static void take_sdpa_for(model_runner *r, const seq_layout *layout, ring_sdpa **out,
                          const seq_layout *lender_layout, const ring_sdpa *lender)
{
    ring_sdpa_config sc = sdpa_config(r, layout);
    ring_sdpa_config lc = lender_layout ? sdpa_config(r, lender_layout) : sc;
    r->mem.sdpa += ring_sdpa_bytes(&sc, lender_layout ? &lc : NULL);
    if (!r->allocate || r->failed[0]) return;
    char why[256];
    if (!(*out = ring_sdpa_create(&sc, r->cfg.queue, lender, why, sizeof why)))
        snprintf(r->failed, sizeof r->failed, "the SDPA calls of the ring: %s", why);
}

/* With sdpa: the calls of the rings' layouts, the main one and the half
 * ring's (which borrows the main one's buffers); the ring context then hands
 * the main one to its passes. */
static void take_sdpa(model_runner *r)
{
    if (!r->cfg.sdpa) return;
    take_sdpa_for(r, &r->fwd->layout, &r->sdpa, NULL, NULL);
    if (r->half) take_sdpa_for(r, &r->half->layout, &r->sdpa_half, &r->fwd->layout, r->sdpa);
    r->ring.sdpa = r->sdpa;
}

/* The rings' plan for cfg (one document: segments are the runner's). */
static ring_plan_config ring_config_of(const model_runner_config *cfg)
{
    const model_dims *d = &cfg->model->dims;
    int U = cfg->layout.U; /* the ring over the Ulysses groups, 1/U of the heads */
    return (ring_plan_config){.topo = cfg->topo,
                              .nodes = cfg->nodes,
                              .layout = seq_layout_ring(&cfg->layout),
                              .need = {.mask = cfg->mask, .N = cfg->layout.N},
                              .h_q = d->n_heads / U,
                              .h_kv = d->n_kv_heads / U,
                              .d = d->head_dim,
                              .in_bytes = cfg->ring_bf16 ? 2 : 4};
}

/* The half-sequence ring of attn_kept_fraction = 0.5: the early chunks of
 * the zigzag layout are the first half of the sequence, laid out
 * contiguously (chunk r on rank r), on the flat ring. */
static ring_schedule *plan_half(const ring_plan_config *pc, char *err, size_t err_len)
{
    ring_plan_config hc = *pc;
    hc.topo = TOPO_FLAT;
    if (seq_layout_init(&hc.layout, LAYOUT_CONTIGUOUS, pc->layout.P, pc->layout.N / 2, err,
                        err_len) != 0)
        return NULL;
    return ring_plan(&hc, RING_FORWARD, err, err_len);
}

int model_runner_plan_rings(const model_runner_config *cfg, model_rings *out, char *err,
                            size_t err_len)
{
    ring_plan_config pc = ring_config_of(cfg);
    pc.count_pairs = 1; /* what each step computes, for its price */
    *out = (model_rings){NULL, NULL, NULL};
    if (cfg->mask.flags & BK_ATTN_DOCUMENT) {
        snprintf(err, err_len, "a document mask's rings change with every sample's documents");
        return -1;
    }
    out->fwd = ring_plan(&pc, RING_FORWARD, err, err_len);
    if (out->fwd) out->bwd = plan_backward(&pc, cfg->backward, err, err_len);
    if (out->bwd && cfg->keep == KEEP_HALF) out->half = plan_half(&pc, err, err_len);
    if (!out->bwd || (cfg->keep == KEEP_HALF && !out->half)) {
        model_rings_free(out);
        return -1;
    }
    return 0;
}

void model_rings_free(model_rings *rings)
{
    ring_schedule_free(rings->fwd);
    ring_schedule_free(rings->bwd);
    ring_schedule_free(rings->half);
    *rings = (model_rings){NULL, NULL, NULL};
}

/* The runner's dimensions and its planned ring passes; nothing large yet. */
static model_runner *runner_new(const model_runner_config *cfg, char *err, size_t err_len)
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
    r->offload = cfg->offload_activations && r->on_device;
    const char *unordered = getenv("BURST_TEST_OFFLOAD_UNORDERED");
    r->offload_unordered = r->offload && unordered && strcmp(unordered, "1") == 0;
    r->act_bytes = cfg->bf16_matmul ? 2 : sizeof(float);
    r->chunk_rows = cfg->chunk_rows > 0 ? cfg->chunk_rows : MODEL_CHUNK_ROWS;
    if (r->chunk_rows > r->n) r->chunk_rows = r->n > 0 ? r->n : 1;
    r->D = d->d_model;
    r->Hq = d->n_heads;
    r->QD = (int64_t)d->n_heads * d->head_dim;
    r->KD = (int64_t)d->n_kv_heads * d->head_dim;
    r->F = d->d_ff;
    r->V = d->vocab;
    int half = cfg->keep == KEEP_HALF;
    if (half && (!keep_half_allowed(cfg->layout.kind, &cfg->mask) || cfg->layout.U > 1)) {
        snprintf(err, err_len,
                 "[memory] attn_kept_fraction = 0.5 needs a causal mask with the zigzag layout, "
                 "and no Ulysses groups");
        free(r);
        return NULL;
    }
    r->n_kept = cfg->keep == KEEP_ALL ? r->n : half ? r->n / 2 : 0;
    /* a chunk of the fused head never spans more than this rank's tokens */
    if (r->cfg.head.chunk_tokens > r->n && r->n > 0) r->cfg.head.chunk_tokens = r->n;

    ring_plan_config pc = ring_config_of(cfg);
    r->ring_cfg = pc;
    if (cfg->mask.flags & BK_ATTN_DOCUMENT) { /* one document until told otherwise */
        size_t seg_bytes = (size_t)cfg->layout.N * sizeof(int32_t);
        r->mem.workspace += seg_bytes;
        if (!(r->segments = bu_calloc(seg_bytes, "the document ids", err, err_len))) {
            free(r);
            return NULL;
        }
    }
    if (schedule_rings(r, err, err_len) == 0 && half) r->half = plan_half(&pc, err, err_len);
    if (!r->fwd || !r->bwd || (half && !r->half)) {
        model_runner_free(r);
        return NULL;
    }
    r->ring = (ring_exec_ctx){.comm = cfg->layout.U > 1 ? cfg->ulysses_ring : cfg->cp,
                              .queue = cfg->queue,
                              .scale = 1.0f / sqrtf((float)d->head_dim),
                              .mask = cfg->mask,
                              .segments = r->segments,
                              .piece_rows = cfg->piece_rows,
                              .in_type = pc.in_bytes == 2 ? BK_BF16 : BK_F32};
    return r;
}

/* Counts (and with r->allocate, makes) every buffer of the runner, one part
 * after the other, so that what the queue's memory holds between them
 * measures each. */
static void take_buffers(model_runner *r)
{
    size_t before = bk_held_bytes(r->cfg.queue);
    take_ring(r);
    size_t ring = bk_held_bytes(r->cfg.queue);
    take_sdpa(r);
    size_t sdpa = bk_held_bytes(r->cfg.queue);
    take_workspace(r);
    size_t workspace = bk_held_bytes(r->cfg.queue);
    take_store(r);
    r->held.ring = ring - before;
    r->held.sdpa = sdpa - ring;
    r->held.workspace = workspace - sdpa;
    r->held.stored = bk_held_bytes(r->cfg.queue) - workspace;
    r->held.offloaded = r->mem.offloaded; /* page-locked memory: taken whole or not at all */
}

/* The offload's copy stream and its events. 0, or -1 with err. */
static int make_copy_stream(model_runner *r, char *err, size_t err_len)
{
    r->copy = *r->cfg.queue;
    r->copy.stream = NULL;
    int failed = bk_device_stream_create(&r->copy.stream) != BK_OK;
    for (int k = 0; k < 2 && !failed; k++)
        failed = bk_device_event_create(&r->copied[k]) != BK_OK ||
                 bk_device_event_create(&r->used[k]) != BK_OK;
    if (failed)
        snprintf(err, err_len, "cannot make the offload's copy stream: %s", bk_kernel_error());
    return failed ? -1 : 0;
}

model_memory model_runner_held(const model_runner *r)
{
    return r->held;
}

int model_runner_memory(const model_runner_config *cfg, model_memory *mem, char *err,
                        size_t err_len)
{
    model_runner *r = runner_new(cfg, err, err_len);
    if (!r) return -1;
    take_buffers(r);
    *mem = r->mem;
    model_runner_free(r);
    return 0;
}

model_runner *model_runner_create(const model_runner_config *cfg, char *err, size_t err_len)
{
    model_runner *r = runner_new(cfg, err, err_len);
    if (!r) return NULL;
    r->allocate = 1;
    take_buffers(r);
    if (r->failed[0]) {
        snprintf(err, err_len, "%s", r->failed);
        model_runner_free(r);
        return NULL;
    }
    if (r->offload && make_copy_stream(r, err, err_len) != 0) {
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
    if (r->mask_bits) { /* the device kernels read the mask's bitmap from device memory */
        size_t bytes = bk_attn_block_bytes(cfg->mask.n_blocks);
        if (bk_device_upload(&q, r->mask_bits, cfg->mask.block_bits, bytes) != BK_OK) {
            snprintf(err, err_len, "cannot copy the block-sparse mask to the device");
            model_runner_free(r);
            return NULL;
        }
        r->ring.mask.block_bits = r->mask_bits;
    }
    return r;
}

void model_runner_free(model_runner *r)
{
    if (!r) return;
    if (r->copy.stream) { /* its copies done before their buffers go */
        bk_device_sync(&r->copy);
        bk_device_stream_destroy(r->copy.stream);
    }
    ring_schedule_free(r->fwd);
    ring_schedule_free(r->bwd);
    ring_schedule_free(r->half);
    ring_buffers_free(r->ring.buffers);
    ulysses_free(r->uly);
    ring_sdpa_free(r->sdpa_half); /* the borrower first */
    ring_sdpa_free(r->sdpa);
    float **bufs[WORK_BUFFERS];
    int64_t counts[WORK_BUFFERS];
    work_buffers(r, bufs, counts);
    for (int i = 0; i < WORK_BUFFERS; i++)
        if (counts[i] > 0) give_back(r, *bufs[i]);
    for (int e = 0; r->store && e < r->m->dims.layers; e++) {
        stored_layer *st = &r->store[e];
        float **kept[KEPT_BUFFERS], *work[KEPT_BUFFERS];
        int64_t width[KEPT_BUFFERS];
        runner_kept_buffers(r, &st->kept, kept, work, width);
        for (int i = 0; i < KEPT_BUFFERS; i++) give_back(r, *kept[i]);
        give_back_stored_set(r, st, r->offload);
    }
    free(r->store);
    for (int k = 0; k < 2; k++) {
        give_back_stored_set(r, &r->slot[k], 0);
        if (r->copied[k]) bk_device_event_destroy(r->copied[k]);
        if (r->used[k]) bk_device_event_destroy(r->used[k]);
    }
    if (r->on_device) give_back(r, r->pos);
    give_back(r, r->mask_bits);
    give_back(r, r->wide);
    free(r->regions);
    give_back(r, r->op16[0]);
    give_back(r, r->op16[1]);
    give_back(r, r->head_sums);
    free(r->pos_host);
    free(r->logits_host);
    free(r->segments);
    free(r);
}
