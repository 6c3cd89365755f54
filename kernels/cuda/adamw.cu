/* adamw.cu: the AdamW step on the device: param, m, v [n] fp32 updated in
 * place from grad [n] * grad_scale, and optionally the updated parameters
 * rounded to bf16 into param_bf16 [n] in the same pass (the copy the forward
 * GEMMs read). The step's factors are computed once on the host
 * (bk_adamw_coefs, in double) and every element runs bk_adamw_elem, the same
 * function as the CPU kernel. */
#include "kernels/bf16.h"
#include "kernels/cuda/dev_common.cuh"
#include "kernels/ops_math.h"

enum { ADAMW_THREADS = 256 };

__global__ void bk_adamw_kernel(int64_t n, float *param, const float *grad, float *m, float *v,
                                bk_adamw_coef c, uint16_t *param_bf16)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float p = param[i], mi = m[i], vi = v[i];
        bk_adamw_elem(&p, &mi, &vi, grad[i], &c);
        param[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (param_bf16 != NULL) param_bf16[i] = bk_float_to_bf16(p);
    }
}

extern "C" bk_status BK_DEV_FN(adamw_step)(const bk_queue *q, int64_t n, float *param,
                                           const float *grad, float *m, float *v,
                                           const bk_adamw_params *hp, int64_t step,
                                           float grad_scale, uint16_t *param_bf16)
{
    BK_CHECK_ARG(n >= 0 && step >= 1);
    BK_CHECK_ARG(param != NULL && grad != NULL && m != NULL && v != NULL && hp != NULL);
    BK_CHECK_ARG(hp->lr >= 0.0f && hp->eps >= 0.0f && hp->weight_decay >= 0.0f);
    BK_CHECK_ARG(hp->beta1 >= 0.0f && hp->beta1 < 1.0f && hp->beta2 >= 0.0f && hp->beta2 < 1.0f);
    BK_DEV_PTRS(param, grad, m, v, param_bf16);
    if (n == 0) return BK_OK;
    bk_adamw_coef c =
        bk_adamw_coefs(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, step, grad_scale);
    /* param, grad, m, v read; param, m, v (and the bf16 copy) written */
    BK_FOOTPRINT(4 * n * sizeof(float),
                 3 * n * sizeof(float) + (param_bf16 ? n * sizeof(uint16_t) : 0));
    return BK_LAUNCH(bk_adamw_kernel, dim3(bk_grid_for(n, ADAMW_THREADS)), dim3(ADAMW_THREADS), 0,
                     q->stream, n, param, grad, m, v, c, param_bf16);
}
