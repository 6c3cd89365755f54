/* model_operands.c: the layers' matrix products and the stored activations'
 * conversions, where every difference between fp32 and bf16 operands lies
 * (model_internal.h). On a device the parameters and the stored activations
 * may be bf16 and the products take bf16 operands (bf16_matmul); the fp32 view
 * of the few parameters other kernels read is widened here too. */
#include "src/train/model_internal.h"

/* The bf16 rows [r0, r0 + rows) of x, an operand of `width` values a row in
 * the role that rounds into op16[slot]: x's own copy when rounded already
 * (runner_round), else rounded now into op16[slot] (NULL when the device
 * failed). */
static const uint16_t *rows16(model_runner *r, int slot, runner_operand x, int64_t r0,
                              int64_t rows, int64_t width)
{
    if (x.bf16) return x.bf16 + r0 * width;
    uint16_t *to = r->op16[slot];
    return bk_round_bf16(r->cfg.queue, rows * width, x.f32 + r0 * width, to) == BK_OK ? to : NULL;
}

bk_status runner_round(model_runner *r, int slot, const float *x, int64_t count,
                       runner_operand *out)
{
    *out = runner_fp32(x);
    if (!r->cfg.bf16_matmul) return BK_OK;
    bk_status st = bk_round_bf16(r->cfg.queue, count, x, r->op16[slot]);
    if (st == BK_OK) out->bf16 = r->op16[slot];
    return st;
}

bk_status runner_times_weight(model_runner *r, runner_operand X, int64_t m, int64_t inner,
                              int64_t w, bk_transpose tw, int64_t cols, float *out, int accumulate)
{
    const bk_queue *q = r->cfg.queue;
    float beta = accumulate ? 1.0f : 0.0f;
    int64_t ldw = tw == BK_NO_TRANS ? cols : inner;
    if (!r->cfg.bf16_matmul)
        return bk_gemm(q, BK_NO_TRANS, tw, m, cols, inner, 1.0f, X.f32, inner,
                       runner_weight32(r, w), ldw, beta, out, cols);
    const uint16_t *w16 = runner_weight16(r, w);
    bk_status st = BK_OK;
    for (int64_t r0 = 0; r0 < m && st == BK_OK; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, m);
        const uint16_t *x = rows16(r, 0, X, r0, rows, inner);
        st = x ? bk_gemm_bf16(q, BK_NO_TRANS, tw, rows, cols, inner, 1.0f, x, inner, w16, ldw, beta,
                              out + r0 * cols, BK_F32, cols)
               : BK_ERR_DEVICE;
    }
    return st;
}

bk_status runner_mm(model_runner *r, runner_operand A, int64_t m, int64_t k, int64_t w, int64_t n,
                    float *C, int accumulate)
{
    return runner_times_weight(r, A, m, k, w, BK_NO_TRANS, n, C, accumulate);
}

bk_status runner_mm_grad_weight(model_runner *r, runner_operand A, int64_t m, int64_t k,
                                runner_operand dY, int64_t n, float *dW)
{
    const bk_queue *q = r->cfg.queue;
    if (!r->cfg.bf16_matmul)
        return bk_gemm(q, BK_TRANS, BK_NO_TRANS, k, n, m, 1.0f, A.f32, k, dY.f32, n, 1.0f, dW, n);
    bk_status st = BK_OK;
    for (int64_t r0 = 0; r0 < m && st == BK_OK; r0 += r->chunk_rows) {
        int64_t rows = runner_chunk_rows(r, r0, m);
        const uint16_t *a = rows16(r, 0, A, r0, rows, k);
        const uint16_t *dy = a ? rows16(r, 1, dY, r0, rows, n) : NULL;
        st = a && dy ? bk_gemm_bf16(q, BK_TRANS, BK_NO_TRANS, k, n, rows, 1.0f, a, k, dy, n, 1.0f,
                                    dW, BK_F32, n)
                     : BK_ERR_DEVICE;
    }
    return st;
}

bk_status runner_mm_grad_input(model_runner *r, runner_operand dY, int64_t m, int64_t n, int64_t w,
                               int64_t k, float *dA, int accumulate)
{
    return runner_times_weight(r, dY, m, n, w, BK_TRANS, k, dA, accumulate);
}

/* No bucket holds a range (the parameters changed). */
static void forget_buckets(model_runner *r)
{
    for (int k = 0; k < 2; k++) r->bucket_range[k].begin = r->bucket_range[k].end = 0;
    r->reading = -1;
}

/* Waits for the fill on its way, if any. */
static bt_status fill_arrived(model_runner *r)
{
    if (r->filling < 0) return BT_OK;
    bt_status st = r->gather->wait(r->gather->ctx);
    if (st != BT_OK) forget_buckets(r); /* what it holds is not known */
    r->filling = -1;
    return st;
}

bt_status runner_use_params(model_runner *r, model_params p, int refresh)
{
    if (r->gather) { /* the windows, filled by runner_gather */
        if (p.f32 || p.bf16) return BT_ERR_ARG;
        bt_status st = fill_arrived(r);
        if (refresh) r->embed_gathered = 0, forget_buckets(r);
        return st;
    }
    if (r->cfg.bf16_matmul ? !p.bf16 || p.f32 : !p.f32 || p.bf16) return BT_ERR_ARG;
    r->P = p.f32;
    r->p16 = p.bf16;
    for (int i = 0; i < r->n_regions && refresh; i++) {
        const wide_region *g = &r->regions[i];
        CHECK_KERNEL(bk_widen_bf16(r->cfg.queue, g->count, r->p16 + g->at, g->wide));
    }
    return BT_OK;
}

void model_runner_gather(model_runner *r, const model_gather *g)
{
    r->gather = g;
    r->P = NULL, r->p16 = NULL;
    r->filling = -1;
    r->embed_gathered = 0;
    forget_buckets(r);
}

/* Gathered: the element offset of `at` in the window that holds it, and the
 * window; NULL when no window holds it now. */
static void *window_of(const model_runner *r, int64_t at, int64_t *offset)
{
    int in_embed, k = r->reading;
    int64_t begin = k < 0 ? 0 : r->bucket_range[k].begin, end = k < 0 ? 0 : r->bucket_range[k].end;
    *offset = model_window_offset(r->m, at, begin, end, &in_embed);
    return *offset < 0 ? NULL : in_embed ? r->gather->embed : r->gather->bucket[k];
}

const float *runner_weight32(const model_runner *r, int64_t at)
{
    int64_t off = 0;
    if (!r->gather) return r->P ? r->P + at : NULL;
    const float *w = window_of(r, at, &off);
    return w ? w + off : NULL;
}

const uint16_t *runner_weight16(const model_runner *r, int64_t at)
{
    int64_t off = 0;
    if (!r->gather) return r->p16 ? r->p16 + at : NULL;
    const uint16_t *w = window_of(r, at, &off);
    return w ? w + off : NULL;
}

/* Bucket k holds or is filling [begin, end). */
static int bucket_holds(const model_runner *r, int k, int64_t begin, int64_t end)
{
    return r->bucket_range[k].begin == begin && r->bucket_range[k].end == end && end > begin;
}

/* Starts filling bucket k with [begin, end) after the fill on its way. */
static bt_status start_fill(model_runner *r, int k, int64_t begin, int64_t end)
{
    bt_status st = fill_arrived(r);
    r->bucket_range[k].begin = r->bucket_range[k].end = 0; /* until filled */
    if (st == BT_OK) st = r->gather->start(r->gather->ctx, r->gather->bucket[k], begin, end);
    if (st != BT_OK) return st;
    r->bucket_range[k].begin = begin, r->bucket_range[k].end = end;
    r->filling = k;
    return BT_OK;
}

bt_status runner_prefetch(model_runner *r, int64_t begin, int64_t end)
{
    if (!r->gather) return BT_OK;
    int k = model_bucket_of(r->m, begin);
    if (k == r->reading || bucket_holds(r, k, begin, end)) return BT_OK;
    return start_fill(r, k, begin, end);
}

/* The embedding's window filled (once a step). */
static bt_status gather_embedding(model_runner *r, int64_t begin, int64_t end)
{
    bt_status st = fill_arrived(r);
    if (st == BT_OK) st = r->gather->start(r->gather->ctx, r->gather->embed, begin, end);
    if (st == BT_OK) st = r->gather->wait(r->gather->ctx);
    r->embed_gathered = st == BT_OK;
    return st;
}

/* [begin, end) in its bucket, filled now unless it held it or was filling it. */
static bt_status gather_bucket(model_runner *r, int64_t begin, int64_t end)
{
    int k = model_bucket_of(r->m, begin);
    bt_status st = bucket_holds(r, k, begin, end) ? BT_OK : start_fill(r, k, begin, end);
    if (st == BT_OK && r->filling == k) st = fill_arrived(r);
    r->reading = st == BT_OK ? k : -1;
    return st;
}

bt_status runner_gather(model_runner *r, int64_t begin, int64_t end)
{
    if (!r->gather) return BT_OK;
    int embed = begin == r->m->embed;
    if (embed && r->embed_gathered) return BT_OK; /* the same parameters, still there */
    bt_status st = embed ? gather_embedding(r, begin, end) : gather_bucket(r, begin, end);
    if (st != BT_OK) return st;
    for (int i = 0; i < r->n_regions; i++) { /* bf16: the fp32 copies of the range's regions */
        const wide_region *g = &r->regions[i];
        if (g->at >= begin && g->at < end)
            CHECK_KERNEL(bk_widen_bf16(r->cfg.queue, g->count, runner_weight16(r, g->at), g->wide));
    }
    return BT_OK;
}

const float *runner_param32(const model_runner *r, int64_t at)
{
    if (!r->cfg.bf16_matmul) return runner_weight32(r, at);
    for (int i = 0; i < r->n_regions; i++)
        if (r->regions[i].at == at) return r->regions[i].wide;
    return NULL; /* not a region: a kernel refuses the NULL */
}

bk_status runner_keep(const model_runner *r, void *dst, const float *src, int64_t count)
{
    if (r->act_bytes == 2) return bk_round_bf16(r->cfg.queue, count, src, dst);
    return bk_copy(r->cfg.queue, dst, src, (size_t)count * sizeof(float));
}

bk_status runner_fetch(const model_runner *r, float *dst, const void *src, int64_t count)
{
    if (r->act_bytes == 2) return bk_widen_bf16(r->cfg.queue, count, src, dst);
    return bk_copy(r->cfg.queue, dst, src, (size_t)count * sizeof(float));
}
