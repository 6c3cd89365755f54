/* vector.cu: fill, y += alpha x, two axes swapped and the rounding to bf16 on the device
 * (kernels/cpu/vector.c and kernels/cpu/bf16_ops.c are the host side;
 * bk_copy reaches bk_device_copy). Grid-stride loops: any n with a bounded
 * grid. */
#include "kernels/bf16.h"
#include "kernels/cuda/dev_common.cuh"

enum { VEC_THREADS = 256 };

__global__ void bk_fill_kernel(int64_t n, float *x, float value)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = value;
}

__global__ void bk_axpy_kernel(int64_t n, float alpha, const float *x, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += alpha * x[i];
}

/* dst [b, a, w] = src [a, b, w]: one thread per element, reading src in
 * order (so a warp's loads are contiguous) */
__global__ void bk_swap_axes_kernel(int64_t a, int64_t b, int64_t w, const float *src, float *dst)
{
    int64_t total = a * b * w;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / (b * w), j = e / w % b, k = e % w;
        dst[(j * a + i) * w + k] = src[e];
    }
}

/* The rounding every bf16 tile load of the attention kernels does
 * (bk_float_to_bf16), so rounded inputs give those kernels the same bits. */
__global__ void bk_round_bf16_kernel(int64_t n, const float *x, uint16_t *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bk_float_to_bf16(x[i]);
}

/* y = x rounded, x = y widened */
__global__ void bk_round_bf16_keep_kernel(int64_t n, float *x, uint16_t *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint16_t r = bk_float_to_bf16(x[i]);
        y[i] = r;
        x[i] = bk_bf16_to_float(r);
    }
}

__global__ void bk_widen_bf16_kernel(int64_t n, const uint16_t *x, float *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bk_bf16_to_float(x[i]);
}

extern "C" bk_status BK_DEV_FN(fill)(const bk_queue *q, int64_t n, float *x, float value)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || x != NULL));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x);
    BK_FOOTPRINT(0, n * sizeof(float));
    return BK_LAUNCH(bk_fill_kernel, dim3(bk_grid_for(n, VEC_THREADS)), dim3(VEC_THREADS), 0,
                     q->stream, n, x, value);
}

extern "C" bk_status BK_DEV_FN(axpy)(const bk_queue *q, int64_t n, float alpha, const float *x,
                                     float *y)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x, y);
    BK_FOOTPRINT(2 * n * sizeof(float), n * sizeof(float));
    return BK_LAUNCH(bk_axpy_kernel, dim3(bk_grid_for(n, VEC_THREADS)), dim3(VEC_THREADS), 0,
                     q->stream, n, alpha, x, y);
}

extern "C" bk_status BK_DEV_FN(swap_axes)(const bk_queue *q, int64_t a, int64_t b, int64_t width,
                                          const float *src, float *dst)
{
    BK_CHECK_ARG(a >= 0 && b >= 0 && width >= 0);
    int64_t n = a * b * width;
    BK_CHECK_ARG(n == 0 || (src != NULL && dst != NULL));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(src, dst);
    BK_FOOTPRINT(n * sizeof(float), n * sizeof(float));
    return BK_LAUNCH(bk_swap_axes_kernel, dim3(bk_grid_for(n, VEC_THREADS)), dim3(VEC_THREADS), 0,
                     q->stream, a, b, width, src, dst);
}

extern "C" bk_status BK_DEV_FN(round_bf16)(const bk_queue *q, int64_t n, const float *x,
                                           uint16_t *y)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x, y);
    BK_FOOTPRINT(n * sizeof(float), n * sizeof(uint16_t));
    return BK_LAUNCH(bk_round_bf16_kernel, dim3(bk_grid_for(n, VEC_THREADS)), dim3(VEC_THREADS),
                     0, q->stream, n, x, y);
}

extern "C" bk_status BK_DEV_FN(round_bf16_keep)(const bk_queue *q, int64_t n, float *x,
                                                uint16_t *y)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x, y);
    BK_FOOTPRINT(n * sizeof(float), n * (sizeof(uint16_t) + sizeof(float)));
    return BK_LAUNCH(bk_round_bf16_keep_kernel, dim3(bk_grid_for(n, VEC_THREADS)),
                     dim3(VEC_THREADS), 0, q->stream, n, x, y);
}

extern "C" bk_status BK_DEV_FN(widen_bf16)(const bk_queue *q, int64_t n, const uint16_t *x,
                                           float *y)
{
    BK_CHECK_ARG(n >= 0 && (n == 0 || (x != NULL && y != NULL)));
    if (n == 0) return BK_OK;
    BK_DEV_PTRS(x, y);
    BK_FOOTPRINT(n * sizeof(uint16_t), n * sizeof(float));
    return BK_LAUNCH(bk_widen_bf16_kernel, dim3(bk_grid_for(n, VEC_THREADS)), dim3(VEC_THREADS), 0,
                     q->stream, n, x, y);
}
