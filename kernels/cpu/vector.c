/* vector.c: the whole-buffer helpers an engine needs on either kind of
 * memory, so that its code reads the same on the host and on a device: fill,
 * y += alpha x, two axes swapped, a copy within the queue's memory, and allocation in it (from
 * the queue's arena when it has one). */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SANITIZE_ADDRESS__
/* AddressSanitizer's own count of the heap in use (its runtime exports it;
 * the header that declares it is not always installed) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "kernels/arena.h"
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

bk_status bk_swap_axes(const bk_queue *q, int64_t a, int64_t b, int64_t width, const float *src,
                       float *dst)
{
    BK_CPU_OR_DEVICE(q, swap_axes, (q, a, b, width, src, dst));
    BK_CHECK_ARG(a >= 0 && b >= 0 && width >= 0 && (a * b * width == 0 || (src && dst)));
    int nt = bk_cpu_threads(q);
    size_t row_bytes = (size_t)width * sizeof(float);
#pragma omp parallel for num_threads(nt) schedule(static) if (a * b * width >= 16384)
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            memcpy(dst + (j * a + i) * width, src + (i * b + j) * width, row_bytes);
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

bk_status bk_alloc(const bk_queue *q, size_t bytes, void **p)
{
    BK_CHECK_ARG(q != NULL && p != NULL);
    *p = NULL;
    size_t n = bytes ? bytes : 1;
    if (q->where != BK_DEVICE && q->where != BK_HOST) return BK_ERR_UNSUPPORTED;
    if (q->arena) {
        *p = bk_arena_alloc(q->arena, n);
        if (*p && q->where == BK_HOST) memset(*p, 0, n); /* a piece may have been used before */
        return *p ? BK_OK : BK_ERR_NOMEM;
    }
    if (q->where == BK_DEVICE) return bk_device_malloc(n, p) == BK_OK ? BK_OK : BK_ERR_NOMEM;
    *p = calloc(1, n);
    return *p ? BK_OK : BK_ERR_NOMEM;
}

bk_status bk_free(const bk_queue *q, void *p)
{
    BK_CHECK_ARG(q != NULL);
    if (q->arena) return bk_arena_free(q->arena, p);
    if (q->where == BK_DEVICE) return bk_device_free(p);
    free(p);
    return BK_OK;
}

size_t bk_held_bytes(const bk_queue *q)
{
    if (q->arena) return bk_arena_stats_of(q->arena).in_use;
    if (q->where != BK_HOST) return 0;
#ifdef __SANITIZE_ADDRESS__
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#endif
}

bk_status bk_alloc_floats(const bk_queue *q, int64_t count, float value, float **p)
{
    BK_CHECK_ARG(p != NULL && count >= 0);
    int64_t n = count > 0 ? count : 1;
    void *buf = NULL;
    bk_status st = bk_alloc(q, (size_t)n * sizeof(float), &buf);
    /* host memory comes zeroed */
    if (st == BK_OK && (value != 0.0f || q->where == BK_DEVICE)) st = bk_fill(q, n, buf, value);
    if (st != BK_OK) {
        bk_free(q, buf);
        buf = NULL;
    }
    *p = buf;
    return st;
}
