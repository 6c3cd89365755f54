/* adamw.c: the AdamW optimizer step on the CPU (decoupled weight decay, bias
 * correction, fp32 moments). The step-dependent factors are computed once per
 * call in double (bk_adamw_coefs); every element then runs bk_adamw_elem, the
 * same function the GPU runs. */
#include "kernels/cpu/ops_cpu.h"

#define ADAMW_PAR_MIN 16384

bk_status bk_adamw_step(const bk_queue *q, int64_t n, float *param, const float *grad, float *m,
                        float *v, const bk_adamw_params *hp, int64_t step, float grad_scale)
{
    BK_CPU_OR_DEVICE(q, adamw_step, (q, n, param, grad, m, v, hp, step, grad_scale, NULL));
    BK_CHECK_ARG(n >= 0 && step >= 1);
    BK_CHECK_ARG(param != NULL && grad != NULL && m != NULL && v != NULL && hp != NULL);
    BK_CHECK_ARG(hp->lr >= 0.0f && hp->eps >= 0.0f && hp->weight_decay >= 0.0f);
    BK_CHECK_ARG(hp->beta1 >= 0.0f && hp->beta1 < 1.0f && hp->beta2 >= 0.0f && hp->beta2 < 1.0f);
    bk_adamw_coef c =
        bk_adamw_coefs(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, step, grad_scale);
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= ADAMW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) bk_adamw_elem(&param[i], &m[i], &v[i], grad[i], &c);
    return BK_OK;
}
