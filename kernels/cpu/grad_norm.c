/* grad_norm.c: the squared norm of the gradient over several buffers (in
 * double) and the in-place scaling that applies a clipping factor.
 *
 * Why fixed blocks: an OpenMP reduction adds partial sums in an order that
 * depends on the thread count, so the norm (and through clipping, the
 * training run) would change with OMP_NUM_THREADS. Here every buffer is cut
 * into blocks of a fixed size, each block summed in double, and the block sums
 * added in order; threads only decide who computes which block. */
#include <stdlib.h>

#include "kernels/cpu/ops_cpu.h"

#define SQN_BLOCK 8192 /* elements per partial sum */
#define SQN_BATCH 256  /* block sums kept on the stack at a time */

bk_status bk_grad_sqnorm(const bk_queue *q, int n_bufs, const float *const *bufs,
                         const int64_t *counts, double *sqnorm)
{
    BK_CPU_OR_DEVICE(q, grad_sqnorm, (q, n_bufs, bufs, counts, sqnorm));
    BK_CHECK_ARG(n_bufs >= 0 && sqnorm != NULL);
    BK_CHECK_ARG(n_bufs == 0 || (bufs != NULL && counts != NULL));
    for (int b = 0; b < n_bufs; b++) BK_CHECK_ARG(bufs[b] != NULL && counts[b] >= 0);
    int nt = bk_cpu_threads(q);
    double total = 0.0;
    for (int b = 0; b < n_bufs; b++) {
        const float *x = bufs[b];
        int64_t n = counts[b], n_blocks = (n + SQN_BLOCK - 1) / SQN_BLOCK;
        for (int64_t b0 = 0; b0 < n_blocks; b0 += SQN_BATCH) {
            int64_t nb = n_blocks - b0 < SQN_BATCH ? n_blocks - b0 : SQN_BATCH;
            double part[SQN_BATCH];
#pragma omp parallel for num_threads(nt) schedule(static) if (nb > 1)
            for (int64_t k = 0; k < nb; k++) {
                int64_t i0 = (b0 + k) * SQN_BLOCK, i1 = i0 + SQN_BLOCK < n ? i0 + SQN_BLOCK : n;
                double s = 0.0;
#pragma omp simd reduction(+ : s)
                for (int64_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
                part[k] = s;
            }
            for (int64_t k = 0; k < nb; k++) total += part[k];
        }
    }
    *sqnorm = total;
    return BK_OK;
}

bk_status bk_scale(const bk_queue *q, int64_t n, float *x, float alpha)
{
    BK_CPU_OR_DEVICE(q, scale, (q, n, x, alpha));
    BK_CHECK_ARG(n >= 0 && x != NULL);
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) x[i] *= alpha;
    return BK_OK;
}
