/* swiglu.cu: SwiGLU forward and backward on the device, out [rows, cols] =
 * silu(gate) * up with gate and up rows ld_in apart (the two halves of a fused
 * [rows, 2F] GEMM output). Elementwise, grid-stride over rows * cols; the
 * formulas are ops_math.h's. The gradients may overwrite gate and up: each
 * element is read before it is written, by the same thread. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/ops_math.h"

enum { SWIGLU_THREADS = 256 };

/* out [rows, cols] as Out: float, or uint16_t for the bf16 operand of a product */
template <typename Out>
__global__ void bk_swiglu_fwd_kernel(int64_t rows, int64_t cols, const float *gate, const float *up,
                                     int64_t ld_in, Out *out)
{
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, j = i % cols;
        bk_store_elem(&out[i], bk_swiglu_fwd_elem(gate[r * ld_in + j], up[r * ld_in + j]));
    }
}

__global__ void bk_swiglu_bwd_kernel(int64_t rows, int64_t cols, const float *gate, const float *up,
                                     int64_t ld_in, const float *dout, float *dgate, float *dup)
{
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, j = i % cols, k = r * ld_in + j;
        float a, b;
        bk_swiglu_bwd_elem(gate[k], up[k], dout[i], &a, &b);
        dgate[k] = a;
        dup[k] = b;
    }
}

/* Both outputs' launcher: out [rows, cols] as Out, the launch named name */
template <typename Out>
static bk_status swiglu_fwd_launch(const bk_queue *q, int64_t rows, int64_t cols,
                                   const float *gate, const float *up, int64_t ld_in, Out *out,
                                   const char *name)
{
    BK_CHECK_ARG(rows >= 0 && cols >= 0 && ld_in >= cols);
    BK_CHECK_ARG(gate != NULL && up != NULL && out != NULL);
    BK_DEV_PTRS(gate, up, out);
    if (rows * cols == 0) return BK_OK;
    BK_FOOTPRINT(2 * rows * cols * sizeof(float), rows * cols * sizeof(Out));
    return BK_LAUNCH_NAMED(name, bk_swiglu_fwd_kernel<Out>,
                           dim3(bk_grid_for(rows * cols, SWIGLU_THREADS)), dim3(SWIGLU_THREADS), 0,
                           q->stream, rows, cols, gate, up, ld_in, out);
}

extern "C" bk_status BK_DEV_FN(swiglu_fwd)(const bk_queue *q, int64_t rows, int64_t cols,
                                           const float *gate, const float *up, int64_t ld_in,
                                           float *out)
{
    return swiglu_fwd_launch(q, rows, cols, gate, up, ld_in, out, "bk_swiglu_fwd_kernel<float>");
}

extern "C" bk_status BK_DEV_FN(swiglu_fwd_bf16)(const bk_queue *q, int64_t rows, int64_t cols,
                                                const float *gate, const float *up, int64_t ld_in,
                                                uint16_t *out16)
{
    return swiglu_fwd_launch(q, rows, cols, gate, up, ld_in, out16,
                             "bk_swiglu_fwd_kernel<uint16_t>");
}

extern "C" bk_status BK_DEV_FN(swiglu_bwd)(const bk_queue *q, int64_t rows, int64_t cols,
                                           const float *gate, const float *up, int64_t ld_in,
                                           const float *dout, float *dgate, float *dup)
{
    BK_CHECK_ARG(rows >= 0 && cols >= 0 && ld_in >= cols);
    BK_CHECK_ARG(gate != NULL && up != NULL && dout != NULL && dgate != NULL && dup != NULL);
    BK_DEV_PTRS(gate, up, dout, dgate, dup);
    if (rows * cols == 0) return BK_OK;
    BK_FOOTPRINT(3 * rows * cols * sizeof(float), 2 * rows * cols * sizeof(float));
    return BK_LAUNCH(bk_swiglu_bwd_kernel, dim3(bk_grid_for(rows * cols, SWIGLU_THREADS)),
                     dim3(SWIGLU_THREADS), 0, q->stream, rows, cols, gate, up, ld_in, dout, dgate,
                     dup);
}
