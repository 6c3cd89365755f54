/* model_operands.c: the layers' matrix products and the stored activations'
 * conversions, where every difference between fp32 and bf16 operands lies
 * (model_internal.h). On a device the parameters and the stored activations
 * may be bf16 and the products take bf16 operands (bf16_matmul); the fp32 view
 * of the few parameters other kernels read is widened here too. */
#include "src/train/model_internal.h"

/* src[count] rounded into r->op16[which] (NULL when the device failed) */
static const uint16_t *operand16(model_runner *r, int which, const float *src, int64_t count)
{
    return bk_round_bf16(r->cfg.queue, count, src, r->op16[which]) == BK_OK ? r->op16[which] : NULL;
}

bk_status runner_times_weight(model_runner *r, const float *X, int64_t m, int64_t inner, int64_t w,
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
        int64_t rows = runner_chunk_rows(r, r0, m);
        const uint16_t *x = operand16(r, 0, X + r0 * inner, rows * inner);
        st = x ? bk_gemm_bf16(q, BK_NO_TRANS, tw, rows, cols, inner, 1.0f, x, inner, r->p16 + w,
                              ldw, beta, out + r0 * cols, BK_F32, cols)
               : BK_ERR_DEVICE;
    }
    return st;
}

bk_status runner_mm(model_runner *r, const float *A, int64_t m, int64_t k, int64_t w, int64_t n,
                    float *C, int accumulate)
{
    return runner_times_weight(r, A, m, k, w, BK_NO_TRANS, n, C, accumulate);
}

bk_status runner_mm_grad_weight(model_runner *r, const float *A, int64_t m, int64_t k,
                                const float *dY, int64_t n, float *dW)
{
    const bk_queue *q = r->cfg.queue;
    if (!r->p16) return bk_gemm(q, BK_TRANS, BK_NO_TRANS, k, n, m, 1.0f, A, k, dY, n, 1.0f, dW, n);
    bk_status st = BK_OK;
    for (int64_t r0 = 0; r0 < m && st == BK_OK; r0 += r->mlp_rows) {
        int64_t rows = runner_chunk_rows(r, r0, m);
        const uint16_t *a = operand16(r, 0, A + r0 * k, rows * k);
        const uint16_t *dy = operand16(r, 1, dY + r0 * n, rows * n);
        st = a && dy ? bk_gemm_bf16(q, BK_TRANS, BK_NO_TRANS, k, n, rows, 1.0f, a, k, dy, n, 1.0f,
                                    dW, BK_F32, n)
                     : BK_ERR_DEVICE;
    }
    return st;
}

bk_status runner_mm_grad_input(model_runner *r, const float *dY, int64_t m, int64_t n, int64_t w,
                               int64_t k, float *dA, int accumulate)
{
    return runner_times_weight(r, dY, m, n, w, BK_TRANS, k, dA, accumulate);
}

bt_status runner_use_params(model_runner *r, model_params p, int refresh)
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

const float *runner_param32(const model_runner *r, int64_t at)
{
    if (r->P) return r->P + at;
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
