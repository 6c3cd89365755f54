/* vector.c: the element-wise helpers an engine needs on either kind of
 * memory, so that its code reads the same on the host and on a device: fill,
 * y += alpha x, and a copy within the queue's memory. */
#include <string.h>

#include "kernels/cpu/ops_cpu.h"

bk_status bk_fill(const bk_queue *q, int64_t n, float *x, float value)
{
    BK_CPU_OR_DEVICE(q, fill, (q, n, x, value));
    BK_CHECK_ARG(n >= 0 && (n == 0 || x != NULL));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) x[i] = value;
    return BK_OK;
}

bk_status bk_axpy(const bk_queue *q, int64_t n, float alpha, const float *x, float *y)
{
    BK_CPU_OR_DEVICE(q, axpy, (q, n, alpha, x, y));
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for simd num_threads(nt) schedule(static) if (n >= 16384)
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
    return BK_OK;
}

bk_status bk_copy(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    if (q->where == BK_DEVICE) return bk_device_copy(q, dst, src, bytes);
    if (q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
    if (bytes) memmove(dst, src, bytes);
    return BK_OK;
}
