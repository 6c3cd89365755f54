/* model_pass.c: one forward + backward over this rank's share of a
 * sequence, a forward for the loss alone, and a prediction; see model.h.
 * Activations and gradients are fp32; every operation on a buffer is a kernel
 * of the runner's queue (bk_copy, bk_axpy), so one text serves the CPU and a
 * device, and the products and the stored activations go through
 * model_operands.c, which holds every difference bf16 operands make. */
#include "kernels/device.h"
#include "src/train/model_internal.h"
#include "util/clock.h"

static stored_layer *stored(model_runner *r, int layer)
{
    return &r->store[layer];
}

/* The backward's view of model_grads: the bucket in use and its range. */
typedef struct {
    const model_grads *g;
    const model_layout *m;
    float *bucket;      /* windowed: the bucket the backward writes now, */
    int64_t begin, end; /* holding this range */
} grad_sink;

/* Where the gradient of the parameter at flat offset `at` accumulates; NULL
 * (which the kernels refuse) for a range the windows do not hold now. */
static float *grad_at(const grad_sink *s, int64_t at)
{
    const model_grads *g = s->g;
    if (g->whole) return g->whole + at;
    int in_embed;
    int64_t off = model_window_offset(s->m, at, s->begin, s->end, &in_embed);
    return off < 0 ? NULL : (in_embed ? g->embed : s->bucket) + off;
}

/* Windowed: [begin, end) zeroed in its window, the embedding's or its
 * bucket (model_bucket_of), which takes the range at grad_close. */
static bt_status grad_open(model_runner *r, grad_sink *s, int64_t begin, int64_t end)
{
    if (s->g->whole) return BT_OK;
    float *window = s->g->embed;
    if (begin != s->m->embed) {
        window = s->bucket = s->g->bucket[model_bucket_of(s->m, begin)];
        s->begin = begin, s->end = end;
    }
    CHECK_KERNEL(bk_fill(r->cfg.queue, end - begin, window, 0.0f));
    return BT_OK;
}

/* Windowed: the range [begin, end) in its window is whole for this micro-batch. */
static bt_status grad_close(const grad_sink *s, int64_t begin, int64_t end)
{
    if (s->g->whole) return BT_OK;
    return s->g->complete(s->g->ctx, begin == s->m->embed ? s->g->embed : s->bucket, begin, end);
}

/* Where the device holds layer l's stored set (its input, the kept O and
 * lse): the stored buffers, or offloaded its slot. The (layer, micro-batch)
 * key stays in store[l]. */
static stored_layer *device_stored(model_runner *r, int l)
{
    return r->offload ? &r->slot[l % 2] : stored(r, l);
}

/* Offloaded: the compute's next work on slot k after the copy stream's last
 * copy of it (out during the forward, in during the backward). */
static bt_status slot_wait_copied(model_runner *r, int k)
{
    CHECK_KERNEL(bk_device_stream_wait_event(r->cfg.queue, r->copied[k]));
    return BT_OK;
}

/* Offloaded: layer l's stored set copied out of its slot into its host
 * buffers (out), or back, on the copy stream, after everything the compute
 * has queued so far: its writes to the slot, or its last reads of it. */
static bt_status slot_copy(model_runner *r, int l, int out)
{
    int k = l % 2;
    void **host[STORED_SET], **dev[STORED_SET];
    size_t bytes[STORED_SET];
    runner_stored_set(r, stored(r, l), host, bytes);
    runner_stored_set(r, &r->slot[k], dev, bytes);
    CHECK_KERNEL(bk_device_event_record(r->used[k], r->cfg.queue));
    CHECK_KERNEL(bk_device_stream_wait_event(&r->copy, r->used[k]));
    for (int i = 0; i < STORED_SET; i++)
        CHECK_KERNEL(out ? bk_device_download_async(&r->copy, *host[i], *dev[i], bytes[i])
                         : bk_device_upload_async(&r->copy, *dev[i], *host[i], bytes[i]));
    CHECK_KERNEL(bk_device_event_record(r->copied[k], &r->copy));
    return BT_OK;
}

/* Offloaded, as layer l's backward starts: its stored set in its slot for
 * the compute (the host's wait for the copy counted: the offload's exposed
 * time), then layer l - 1's on its way into the other slot while layer l
 * computes, unless the forward left it there (the last two layers' sets). */
static bt_status slot_arrived(model_runner *r, int l, model_step_stats *stats)
{
    int k = l % 2, done = r->offload_unordered ? 1 : bk_device_event_query(r->copied[k]);
    if (done < 0) return BT_ERR_SYS;
    if (done == 0) {
        double start = bu_now();
        CHECK_KERNEL(bk_device_event_sync(r->copied[k]));
        stats->offload_wait_s += bu_now() - start;
    }
    bt_status st = r->offload_unordered ? BT_OK : slot_wait_copied(r, k);
    if (st == BT_OK && l >= 1 && l - 1 < r->m->dims.layers - 2) st = slot_copy(r, l - 1, 0);
    return st;
}

/* Layer l's input x [n, D], about to enter the layer: stored under (l, mb)
 * when mb >= 0 (offloaded: into its slot, once the slot's last copy is done).
 * With bf16 activations x becomes its rounded values, stored or not, so that
 * the backward recomputes the layer from the input the forward computed it
 * from, and a prediction sees what training saw. */
static bt_status enter_layer(model_runner *r, int l, int mb, float *x)
{
    int64_t D = r->D;
    if (mb >= 0) {
        stored_layer *e = stored(r, l);
        e->layer = l;
        e->micro_batch = mb;
        void *home = device_stored(r, l)->x_in;
        bt_status st = r->offload ? slot_wait_copied(r, l % 2) : BT_OK;
        if (st != BT_OK) return st;
        if (r->act_bytes == 2) /* kept rounded, and x its values, in one pass */
            CHECK_KERNEL(bk_round_bf16_keep(r->cfg.queue, r->n * D, x, home));
        else
            CHECK_KERNEL(runner_keep(r, home, x, r->n * D));
        return BT_OK;
    }
    /* a prediction stores nothing: x rounds through op16, chunk by chunk */
    for (int64_t r0 = 0; r0 < r->n && r->act_bytes == 2; r0 += r->chunk_rows) {
        int64_t count = runner_chunk_rows(r, r0, r->n) * D;
        CHECK_KERNEL(bk_round_bf16_keep(r->cfg.queue, count, x + r0 * D, r->op16[0]));
    }
    return BT_OK;
}

/* A layer's input [n, D] as a pass reads it, chunk by chunk: the residual
 * stream in the forward (fp32), the stored input in the backward (act_bytes
 * elements), never widened whole. */
typedef struct {
    const void *rows;
    size_t elem; /* bytes of an element: 4 (fp32) or 2 (bf16) */
} layer_input;

/* Rows [r0, r0 + rows) of in in fp32: in itself, or widened into x1 (free
 * outside the MLP's chunk). NULL when the device failed. */
static const float *input_rows(model_runner *r, layer_input in, int64_t r0, int64_t rows)
{
    if (in.elem == sizeof(float)) return (const float *)in.rows + r0 * r->D;
    const char *src = (const char *)in.rows + (size_t)(r0 * r->D) * in.elem;
    return runner_fetch(r, r->x1, src, rows * r->D) == BK_OK ? r->x1 : NULL;
}

/* Layer l's stored input (offloaded: once back in its slot); rows NULL when
 * the device failed. */
static layer_input stored_input(model_runner *r, int l, model_step_stats *stats)
{
    if (r->offload && slot_arrived(r, l, stats) != BT_OK) return (layer_input){NULL, 0};
    return (layer_input){device_stored(r, l)->x_in, r->act_bytes};
}

/* Copies a layer's kept intermediates (keep_layers) between the workspace
 * and k: buffers [first, last) (runner_kept_buffers' order), the workspace's
 * from its start, k's from row r0, rows rows; into k after the forward
 * computed them (to_kept), back for the backward. */
static bt_status move_kept(model_runner *r, kept_layer *k, int first, int last, int64_t r0,
                           int64_t rows, int to_kept)
{
    float **kept[KEPT_BUFFERS], *work[KEPT_BUFFERS];
    int64_t width[KEPT_BUFFERS];
    runner_kept_buffers(r, k, kept, work, width);
    for (int i = first; i < last; i++) {
        float *kp = *kept[i] + r0 * width[i];
        CHECK_KERNEL(bk_copy(r->cfg.queue, to_kept ? kp : work[i], to_kept ? work[i] : kp,
                             (size_t)(rows * width[i]) * sizeof(float)));
    }
    return BT_OK;
}

/* The projections (q, k, v after RoPE) of all n rows. */
static bt_status move_projections(model_runner *r, kept_layer *k, int to_kept)
{
    return move_kept(r, k, KEPT_NORM, KEPT_ATTENTION, 0, r->n, to_kept);
}

/* The MLP part's intermediates (x1, b, rstd2, g, s) of rows [r0, r0 + rows),
 * which the chunk buffers hold from their start. */
static bt_status move_mlp_rows(model_runner *r, kept_layer *k, int64_t r0, int64_t rows,
                               int to_kept)
{
    return move_kept(r, k, KEPT_ATTENTION, KEPT_BUFFERS, r0, rows, to_kept);
}

/* Whether the norms' and SwiGLU's outputs, which only products read, are
 * written straight in bf16 (bk_rmsnorm_fwd_bf16, bk_swiglu_fwd_bf16: the
 * bits bf16 products would round them to, without an fp32 pass): with bf16
 * products, unless keep_layers keeps (or gives back) their fp32 values. */
static int outputs_in_bf16(const model_runner *r, const kept_layer *kept)
{
    return r->cfg.bf16_matmul && !kept;
}

/* A chunk buffer's memory [chunk_rows, width] floats holding the bf16 operand
 * [rows, width] its kernel wrote (outputs_in_bf16): the MLP's b and s. */
static runner_operand bf16_in(float *buf)
{
    return (runner_operand){NULL, (const uint16_t *)buf};
}

/* Rows [r0, r0 + rows) of layer l's attention norm, a = RMSNorm(x_in) and
 * its factors, and x_in's rows in fp32 into *x_rows; *a the products'
 * operand: written in bf16 into op16[0] (outputs_in_bf16), or into the chunk
 * buffer a (from kept's rows when given: keep_layers' backward; fp32: the
 * forward keeps it) and rounded once there. rstd1 takes the factors. */
static bt_status attention_norm_rows(model_runner *r, int l, layer_input in, int64_t r0,
                                     int64_t rows, kept_layer *kept, int fp32,
                                     const float **x_rows, runner_operand *a)
{
    *x_rows = input_rows(r, in, r0, rows);
    if (!*x_rows) return BT_ERR_SYS;
    const float *w = runner_param32(r, r->m->layer[l].attn_norm);
    float eps = r->m->dims.norm_eps;
    if (outputs_in_bf16(r, kept) && !fp32) {
        CHECK_KERNEL(bk_rmsnorm_fwd_bf16(r->cfg.queue, rows, r->D, *x_rows, w, eps, r->op16[0],
                                         r->rstd1));
        *a = (runner_operand){NULL, r->op16[0]};
        return BT_OK;
    }
    if (kept) {
        bt_status st = move_kept(r, kept, 0, KEPT_NORM, r0, rows, 0);
        if (st != BT_OK) return st;
    } else {
        CHECK_KERNEL(bk_rmsnorm_fwd(r->cfg.queue, rows, r->D, *x_rows, w, eps, r->a, r->rstd1));
    }
    CHECK_KERNEL(runner_round(r, 0, r->a, rows * r->D, a));
    return BT_OK;
}

/* q, k, v = RMSNorm(x_in) W, chunk by chunk, then RoPE on q and k at the
 * global positions. With keep (keep_layers, the forward), each chunk's norm
 * and then q, k and v are kept there. */
static bt_status attention_inputs(model_runner *r, int l, layer_input in, kept_layer *keep)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    const model_dims *d = &r->m->dims;
    int64_t D = r->D;
    for (int64_t r0 = 0; r0 < r->n; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        const float *x_rows;
        runner_operand a; /* rounded once for the three products */
        bt_status st = attention_norm_rows(r, l, in, r0, rows, NULL, keep != NULL, &x_rows, &a);
        if (st == BT_OK && keep) st = move_kept(r, keep, 0, KEPT_NORM, r0, rows, 1);
        if (st != BT_OK) return st;
        CHECK_KERNEL(runner_mm(r, a, rows, D, o->wq, r->QD, r->q + r0 * r->QD, 0));
        CHECK_KERNEL(runner_mm(r, a, rows, D, o->wk, r->KD, r->k + r0 * r->KD, 0));
        CHECK_KERNEL(runner_mm(r, a, rows, D, o->wv, r->KD, r->v + r0 * r->KD, 0));
    }
    CHECK_KERNEL(bk_rope_fwd(q, r->n, d->n_heads, d->head_dim, r->pos, &d->rope, r->q, r->q));
    CHECK_KERNEL(bk_rope_fwd(q, r->n, d->n_kv_heads, d->head_dim, r->pos, &d->rope, r->k, r->k));
    return keep ? move_projections(r, keep, 1) : BT_OK;
}

/* Rows [r0, r0 + rows) of the MLP part, into the chunk buffers: x1 = x_in +
 * O Wo; b = RMSNorm(x1); g = b W_gate_up; s = SwiGLU(g); and, when out is
 * given, out = x1 + s W_down (out may be x_in's rows: a chunk reads its rows
 * of x_in before it writes them). b and s in bf16 in their buffers'
 * memory (outputs_in_bf16) unless fp32 (keep_layers keeps them). */
static bt_status mlp_chunk(model_runner *r, int l, int64_t r0, int64_t rows, layer_input in,
                           float *out, int fp32)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    int64_t D = r->D, F = r->F;
    const float *x_rows = input_rows(r, in, r0, rows); /* x1 itself when widened */
    if (!x_rows) return BT_ERR_SYS;
    /* x1's rows: the chunk buffer; or, in a pass whose output is its input's
     * rows (the forward's residual stream, read no more) and that keeps
     * nothing, those rows, where x1 and then the output add up in place,
     * without a copy either way */
    float *x1 = r->x1;
    int in_place = out && !fp32 && x_rows == out + r0 * D;
    if (in_place)
        x1 = out + r0 * D;
    else if (x_rows != r->x1)
        CHECK_KERNEL(bk_copy(q, r->x1, x_rows, (size_t)(rows * D) * sizeof(float)));
    CHECK_KERNEL(runner_mm(r, runner_fp32(r->o + r0 * r->QD), rows, r->QD, o->wo, D, x1, 1));
    const float *w = runner_param32(r, o->mlp_norm);
    float eps = r->m->dims.norm_eps;
    int bf16 = outputs_in_bf16(r, NULL) && !fp32;
    runner_operand b = bf16 ? bf16_in(r->b) : runner_fp32(r->b),
                   s = bf16 ? bf16_in(r->s) : runner_fp32(r->s);
    if (bf16)
        CHECK_KERNEL(bk_rmsnorm_fwd_bf16(q, rows, D, x1, w, eps, (uint16_t *)r->b, r->rstd2));
    else
        CHECK_KERNEL(bk_rmsnorm_fwd(q, rows, D, x1, w, eps, r->b, r->rstd2));
    CHECK_KERNEL(runner_mm(r, b, rows, D, o->w_gate_up, 2 * F, r->g, 0));
    if (bf16)
        CHECK_KERNEL(bk_swiglu_fwd_bf16(q, rows, F, r->g, r->g + F, 2 * F, (uint16_t *)r->s));
    else
        CHECK_KERNEL(bk_swiglu_fwd(q, rows, F, r->g, r->g + F, 2 * F, r->s));
    if (out) {
        if (!in_place)
            CHECK_KERNEL(bk_copy(q, out + r0 * D, r->x1, (size_t)(rows * D) * sizeof(float)));
        CHECK_KERNEL(runner_mm(r, s, rows, F, o->w_down, D, out + r0 * D, 1));
    }
    return BT_OK;
}

/* The MLP part of layer l forward, out[n, D] = x1 + MLP(x1) with x1 = x_in +
 * O Wo, chunk by chunk: the MLP is token by token, so its buffers hold one
 * chunk of chunk_rows rows, not the whole sequence. With keep (keep_layers,
 * training), each chunk's intermediates are kept there. */
static bt_status mlp_forward(model_runner *r, int l, layer_input in, float *out, kept_layer *keep)
{
    bt_status st = BT_OK;
    for (int64_t r0 = 0; r0 < r->n && st == BT_OK; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        st = mlp_chunk(r, l, r0, rows, in, out, keep != NULL);
        if (st == BT_OK && keep) st = move_mlp_rows(r, keep, r0, rows, 1);
    }
    return st;
}

/* The MLP part of layer l backward, chunk by chunk, each recomputed from
 * x_in first or, with kept (keep_layers), copied back from there: from dx
 * [n, D] (the gradient of the layer's output), the weight and gain gradients
 * accumulated into gs, and dx += the gradient through the MLP branch, so that
 * dx becomes the gradient of x1 (a chunk's rows of dx are read by that chunk
 * alone, before it adds to them). */
static bt_status mlp_backward(model_runner *r, int l, layer_input in, kept_layer *kept,
                              const grad_sink *gs)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    int64_t D = r->D, F = r->F;
    for (int64_t r0 = 0; r0 < r->n; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        bt_status st =
            kept ? move_mlp_rows(r, kept, r0, rows, 0) : mlp_chunk(r, l, r0, rows, in, NULL, 0);
        if (st != BT_OK) return st;
        float *dx = r->dx + r0 * D;
        /* each operand rounded once: dx and dg for their weight's two products;
         * s and b as mlp_chunk wrote them, in bf16 already (outputs_in_bf16) */
        int bf16 = outputs_in_bf16(r, kept);
        runner_operand s16 = bf16_in(r->s), dx16, b16 = bf16_in(r->b), dg16;
        if (!bf16) CHECK_KERNEL(runner_round(r, 0, r->s, rows * F, &s16));
        CHECK_KERNEL(runner_round(r, 1, dx, rows * D, &dx16));
        CHECK_KERNEL(runner_mm_grad_weight(r, s16, rows, F, dx16, D, grad_at(gs, o->w_down)));
        CHECK_KERNEL(runner_mm_grad_input(r, dx16, rows, D, o->w_down, F, r->ds, 0));
        CHECK_KERNEL(bk_swiglu_bwd(q, rows, F, r->g, r->g + F, 2 * F, r->ds, r->dg, r->dg + F));
        if (!bf16) CHECK_KERNEL(runner_round(r, 0, r->b, rows * D, &b16));
        CHECK_KERNEL(runner_round(r, 1, r->dg, rows * 2 * F, &dg16));
        CHECK_KERNEL(
            runner_mm_grad_weight(r, b16, rows, D, dg16, 2 * F, grad_at(gs, o->w_gate_up)));
        /* b is free once its weight gradient is taken: the MLP branch's
         * gradient of x1 goes there, then into dx */
        CHECK_KERNEL(runner_mm_grad_input(r, dg16, rows, 2 * F, o->w_gate_up, D, r->b, 0));
        CHECK_KERNEL(bk_rmsnorm_bwd(q, rows, D, r->x1, runner_param32(r, o->mlp_norm), r->rstd2,
                                    r->b, r->b, grad_at(gs, o->mlp_norm)));
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
    c.sdpa = s == r->half ? r->sdpa_half : r->sdpa;
    ring_exec_stats rs;
    bt_status st = r->uly ? ulysses_forward(r->uly, &c, q, k, v, o, lse, &rs)
                          : ring_forward(&c, q, k, v, o, lse, &rs);
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
    CHECK_KERNEL(runner_fetch(r, r->o + first_kept * r->QD, e->o_kept, kept * r->QD));
    CHECK_KERNEL(bk_copy(q, r->lse + first_kept * r->Hq, e->lse_kept,
                         (size_t)(kept * r->Hq) * sizeof(float)));
    return BT_OK;
}

/* The forward's next range after layer l (the tail after the last) fills
 * while layer l computes. */
static bt_status prefetch_after(model_runner *r, int l)
{
    int64_t begin = r->m->final_norm, end = r->m->n_params;
    if (l + 1 < r->m->dims.layers) model_layer_range(r->m, l + 1, &begin, &end);
    return runner_prefetch(r, begin, end);
}

/* Embedding and every layer; with mb >= 0 each layer's input and the kept part
 * of O, lse are stored under (layer, mb). Leaves the last hidden state in r->x. */
static bt_status forward_layers(model_runner *r, const int64_t *tokens, int mb,
                                model_step_stats *stats)
{
    const model_dims *d = &r->m->dims;
    int64_t n = r->n, D = r->D, QD = r->QD, first_kept = n - r->n_kept;
    bt_status st = runner_gather(r, r->m->embed, r->m->embed + model_embed_floats(r->m));
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_embedding_gather(r->cfg.queue, n, r->V, D, tokens,
                                     runner_param32(r, r->m->embed), r->x));
    for (int l = 0; l < d->layers && st == BT_OK; l++) {
        kept_layer *keep = mb >= 0 && r->cfg.keep_layers ? &stored(r, l)->kept : NULL;
        int64_t begin, end;
        model_layer_range(r->m, l, &begin, &end);
        st = runner_gather(r, begin, end);
        if (st == BT_OK) st = prefetch_after(r, l);
        layer_input in = {r->x, sizeof(float)};
        if (st == BT_OK) st = enter_layer(r, l, mb, r->x);
        if (st == BT_OK) st = attention_inputs(r, l, in, keep);
        if (st == BT_OK)
            st = ring_fwd_timed(r, r->fwd, r->q, r->k, r->v, r->o, r->lse, &stats->attn_fwd_s,
                                stats);
        if (st != BT_OK) break;
        if (mb >= 0) {
            stored_layer *e = device_stored(r, l);
            CHECK_KERNEL(runner_keep(r, e->o_kept, r->o + first_kept * QD, r->n_kept * QD));
            CHECK_KERNEL(bk_copy(r->cfg.queue, e->lse_kept, r->lse + first_kept * r->Hq,
                                 (size_t)(r->n_kept * r->Hq) * sizeof(float)));
            if (r->offload) st = slot_copy(r, l, 1); /* the set whole: out while the MLP runs */
        }
        if (st != BT_OK) break;
        st = mlp_forward(r, l, in, r->x, keep);
    }
    return st;
}

/* Rows [r0, r0 + rows) of the final norm of x, the last hidden states:
 * into the chunk buffer a, their factors into rstd when given. */
static bt_status final_norm_rows(model_runner *r, int64_t r0, int64_t rows, float *rstd)
{
    CHECK_KERNEL(bk_rmsnorm_fwd(r->cfg.queue, rows, r->D, r->x + r0 * r->D,
                                runner_param32(r, r->m->final_norm), r->m->dims.norm_eps, r->a,
                                rstd));
    return BT_OK;
}

/* The head with the loss on rows [r0, r0 + rows) of the final-normed states
 * hn [rows, D]: their losses and counts added into the runner's head_sums,
 * their gradient into dh [rows, D], the head's weight gradient added into
 * dW. */
static bt_status head_rows(model_runner *r, int64_t r0, int64_t rows, const float *hn,
                           const int64_t *labels, float loss_scale, float *dh, float *dW)
{
    const bk_queue *q = r->cfg.queue;
    const lm_head_opts *ho = &r->cfg.head;
    int64_t D = r->D, V = r->V, head = r->m->head;
    bk_ce_sums *sums = r->head_sums;
    labels += r0;
    if (r->cfg.bf16_matmul)
        CHECK_KERNEL(lm_head_fused_bf16(q, ho, rows, D, V, hn, runner_weight16(r, head), labels,
                                        loss_scale, sums, dh, dW, r->head_scratch));
    else if (r->cfg.fused_head)
        CHECK_KERNEL(lm_head_fused(q, ho, rows, D, V, hn, runner_weight32(r, head), labels,
                                   loss_scale, sums, dh, dW, r->head_scratch));
    else
        CHECK_KERNEL(lm_head_unfused(q, ho, rows, D, V, hn, runner_weight32(r, head), labels,
                                     loss_scale, sums, dh, dW));
    return BT_OK;
}

/* A pass of the head over the rank's rows adds into head_sums, cleared
 * before it and read once after it: on a device the pass's one wait, which
 * a training step takes once the whole backward is queued. */
static bt_status head_sums_clear(model_runner *r)
{
    CHECK_KERNEL(bk_ce_sums_clear(r->cfg.queue, r->head_sums));
    return BT_OK;
}

static bt_status head_sums_read(model_runner *r, double *loss_sum, int64_t *n_valid)
{
    CHECK_KERNEL(lm_head_sums_read(r->cfg.queue, r->head_sums, loss_sum, n_valid));
    return BT_OK;
}

bt_status model_predict(model_runner *r, model_params params, const int64_t *tokens,
                        const int64_t *rows, int n_rows, int64_t *predicted)
{
    model_step_stats stats = {0};
    bt_status st = runner_use_params(r, params, 1);
    if (st == BT_OK) st = forward_layers(r, tokens, -1, &stats);
    if (st == BT_OK) st = runner_gather(r, r->m->final_norm, r->m->n_params);
    if (st != BT_OK) return st;
    int64_t V = r->V;
    float *logits = r->head_scratch;                      /* [V], in the queue's memory */
    float *seen = r->on_device ? r->logits_host : logits; /* the same on the host */
    bk_status kst = BK_OK;
    for (int i = 0; i < n_rows && kst == BK_OK; i++) {
        /* logits [1, V] = hn [1, D] W_head [V, D]^T, hn the row's final norm in a */
        bt_status st_row = final_norm_rows(r, rows[i], 1, NULL);
        if (st_row != BT_OK) return st_row;
        kst = runner_times_weight(r, runner_fp32(r->a), 1, r->D, r->m->head, BK_TRANS, V, logits,
                                  0);
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
    bt_status st = runner_use_params(r, params, 1);
    if (st == BT_OK) st = forward_layers(r, tokens, -1, &stats);
    if (st == BT_OK) st = runner_gather(r, r->m->final_norm, r->m->n_params);
    lm_head_opts ho = r->cfg.head;
    ho.z_loss = 0.0f; /* the likelihood alone */
    int bf16 = r->cfg.bf16_matmul;
    if (st == BT_OK) st = head_sums_clear(r);
    for (int64_t r0 = 0; r0 < r->n && st == BT_OK; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        st = final_norm_rows(r, r0, rows, NULL);
        if (st == BT_OK)
            st = attn_kernel_status(lm_head_loss(r->cfg.queue, &ho, rows, r->D, r->V, r->a,
                                                 bf16 ? NULL : runner_weight32(r, r->m->head),
                                                 bf16 ? runner_weight16(r, r->m->head) : NULL,
                                                 labels + r0, r->head_sums,
                                                 row_loss ? row_loss + r0 : NULL, r->head_scratch));
    }
    return st == BT_OK ? head_sums_read(r, loss_sum, n_valid) : st;
}

/* The final norm and the head with the loss (the forward's last op: its
 * gradient comes with it), chunk by chunk, their gradients the tail's range
 * (a tied head's the embedding's). A chunk's final-normed states and their
 * factors take a and rstd1; the head's gradient goes into dx, which the
 * final norm's backward turns in place into the gradient of the last layer's
 * output; the losses and counts into head_sums, which model_forward_backward
 * reads at its end. */
static bt_status head_backward(model_runner *r, const int64_t *labels, float loss_scale,
                               grad_sink *gs)
{
    const model_layout *m = r->m;
    int64_t D = r->D;
    bt_status st = grad_open(r, gs, m->final_norm, m->n_params);
    if (st == BT_OK) st = runner_gather(r, m->final_norm, m->n_params);
    if (st == BT_OK) st = head_sums_clear(r);
    for (int64_t r0 = 0; r0 < r->n && st == BT_OK; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        float *x = r->x + r0 * D, *dx = r->dx + r0 * D;
        st = final_norm_rows(r, r0, rows, r->rstd1);
        if (st == BT_OK)
            st = head_rows(r, r0, rows, r->a, labels, loss_scale, dx, grad_at(gs, m->head));
        if (st == BT_OK)
            st = attn_kernel_status(bk_rmsnorm_bwd(r->cfg.queue, rows, D, x,
                                                   runner_param32(r, m->final_norm), r->rstd1, dx,
                                                   dx, grad_at(gs, m->final_norm)));
    }
    return st == BT_OK ? grad_close(gs, m->final_norm, m->n_params) : st;
}

/* The attention norm and the projections of layer l backward, chunk by
 * chunk, each chunk's norm recomputed from x_in or, with kept (keep_layers),
 * copied back from there: from dq, dk, dv [n, ...] (after RoPE's backward),
 * the weight and gain gradients accumulated into gs, and dx += the gradient
 * through the attention branch, so that dx becomes the gradient of x_in. */
static bt_status projections_backward(model_runner *r, int l, layer_input in, kept_layer *kept,
                                      const grad_sink *gs)
{
    const bk_queue *q = r->cfg.queue;
    const layer_offsets *o = &r->m->layer[l];
    int64_t D = r->D, QD = r->QD, KD = r->KD;
    for (int64_t r0 = 0; r0 < r->n; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        const float *x_rows, *dq = r->dq + r0 * QD, *dk = r->dk + r0 * KD, *dv = r->dv + r0 * KD;
        runner_operand a16;
        bt_status st = attention_norm_rows(r, l, in, r0, rows, kept, 0, &x_rows, &a16);
        if (st != BT_OK) return st;
        /* a rounded once for the three weight gradients, each of dq, dk, dv
         * once for its weight's two products; the attention branch's
         * gradient of a, then of x_in, goes into b (free outside the MLP's
         * chunk: a is read until the last weight gradient), then into dx */
        runner_operand d16;
        const float *const grads[3] = {dq, dk, dv};
        const int64_t widths[3] = {QD, KD, KD}, weights[3] = {o->wq, o->wk, o->wv};
        for (int i = 0; i < 3; i++) {
            CHECK_KERNEL(runner_round(r, 1, grads[i], rows * widths[i], &d16));
            CHECK_KERNEL(runner_mm_grad_weight(r, a16, rows, D, d16, widths[i],
                                               grad_at(gs, weights[i])));
            CHECK_KERNEL(runner_mm_grad_input(r, d16, rows, widths[i], weights[i], D, r->b, i > 0));
        }
        CHECK_KERNEL(bk_rmsnorm_bwd(q, rows, D, x_rows, runner_param32(r, o->attn_norm), r->rstd1,
                                    r->b, r->b, grad_at(gs, o->attn_norm)));
        CHECK_KERNEL(bk_axpy(q, rows * D, 1.0f, r->b, r->dx + r0 * D));
    }
    return BT_OK;
}

/* The output projection's backward, chunk by chunk, from dx (the gradient
 * of x1 = x_in + O Wo): Wo's gradient, and dO into d_o; O and dx rounded
 * once each. */
static bt_status output_projection_backward(model_runner *r, int l, const grad_sink *gs)
{
    int64_t D = r->D, QD = r->QD, wo = r->m->layer[l].wo;
    for (int64_t r0 = 0; r0 < r->n; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, r->n);
        runner_operand o16, dx16;
        CHECK_KERNEL(runner_round(r, 0, r->o + r0 * QD, rows * QD, &o16));
        CHECK_KERNEL(runner_round(r, 1, r->dx + r0 * D, rows * D, &dx16));
        CHECK_KERNEL(runner_mm_grad_weight(r, o16, rows, QD, dx16, D, grad_at(gs, wo)));
        CHECK_KERNEL(runner_mm_grad_input(r, dx16, rows, D, wo, QD, r->d_o + r0 * QD, 0));
    }
    return BT_OK;
}

/* Layer l's backward, recomputing what was not kept (with keep_layers: the
 * attention outputs not kept alone): dx, the gradient of its output, becomes
 * that of its input; its gradients are its range's. d_o takes x's memory and
 * dq o's (model_internal.h). */
static bt_status layer_backward(model_runner *r, int l, int mb, grad_sink *gs,
                                model_step_stats *stats)
{
    const bk_queue *q = r->cfg.queue;
    const model_dims *d = &r->m->dims;
    int64_t n = r->n, begin, end;
    stored_layer *e = stored(r, l);
    if (e->layer != l || e->micro_batch != mb) return BT_ERR_ARG; /* keyed by (layer, mb) */
    model_layer_range(r->m, l, &begin, &end);
    bt_status st = grad_open(r, gs, begin, end);
    if (st == BT_OK) st = runner_gather(r, begin, end);
    if (st == BT_OK && l > 0) { /* the layer below fills while this one computes */
        int64_t below_begin, below_end;
        model_layer_range(r->m, l - 1, &below_begin, &below_end);
        st = runner_prefetch(r, below_begin, below_end);
    }
    layer_input in = st == BT_OK ? stored_input(r, l, stats) : (layer_input){NULL, 0};
    if (!in.rows) return st != BT_OK ? st : BT_ERR_SYS; /* the device failed */
    kept_layer *kept = r->cfg.keep_layers ? &e->kept : NULL;
    st = kept ? move_projections(r, kept, 0) : attention_inputs(r, l, in, NULL);
    if (st == BT_OK) st = attention_output_for_backward(r, device_stored(r, l), stats);
    if (st == BT_OK) st = mlp_backward(r, l, in, kept, gs);
    if (st != BT_OK) return st;
    /* output projection and attention, from dx: now the gradient of x1 */
    st = output_projection_backward(r, l, gs);
    if (st != BT_OK) return st;
    ring_exec_ctx c = r->ring;
    c.sched = r->bwd;
    c.spend[0] = r->q, c.spend[1] = r->d_o; /* read no more: the ring's to overwrite */
    ring_exec_stats rs;
    st = r->uly
             ? ulysses_backward(r->uly, &c, r->q, r->k, r->v, r->o, r->d_o, r->lse, r->dq, r->dk,
                                r->dv, &rs)
             : ring_backward(&c, r->q, r->k, r->v, r->o, r->d_o, r->lse, r->dq, r->dk, r->dv, &rs);
    stats->attn_bwd_s += rs.total_s;
    stats->attn_wait_s += rs.wait_s;
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_rope_bwd(q, n, d->n_heads, d->head_dim, r->pos, &d->rope, r->dq, r->dq));
    CHECK_KERNEL(bk_rope_bwd(q, n, d->n_kv_heads, d->head_dim, r->pos, &d->rope, r->dk, r->dk));
    st = projections_backward(r, l, in, kept, gs);
    return st == BT_OK ? grad_close(gs, begin, end) : st;
}

bt_status model_forward_backward(model_runner *r, int mb, model_params params,
                                 const model_grads *grads, const int64_t *tokens,
                                 const int64_t *labels, float loss_scale, double *loss_sum,
                                 int64_t *n_valid, model_step_stats *stats)
{
    const model_layout *m = r->m;
    int64_t embed_end = m->embed + model_embed_floats(m);
    if (mb < 0 || mb >= r->cfg.micro_batches || !grads ||
        (!grads->whole &&
         (!grads->embed || !grads->bucket[0] || !grads->bucket[1] || !grads->complete)))
        return BT_ERR_ARG;
    grad_sink gs = {grads, m, NULL, 0, 0};
    bt_status st = runner_use_params(r, params, mb == 0);
    if (st == BT_OK) st = forward_layers(r, tokens, mb, stats);
    if (st == BT_OK) st = grad_open(r, &gs, m->embed, embed_end);
    if (st == BT_OK) st = head_backward(r, labels, loss_scale, &gs);
    for (int l = m->dims.layers - 1; l >= 0 && st == BT_OK; l--)
        st = layer_backward(r, l, mb, &gs, stats);
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_embedding_scatter_add(r->cfg.queue, r->n, r->V, r->D, tokens, r->dx,
                                          grad_at(&gs, m->embed)));
    st = grad_close(&gs, m->embed, embed_end);
    return st == BT_OK ? head_sums_read(r, loss_sum, n_valid) : st;
}
