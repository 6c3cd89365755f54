/* grad_norm.cu: the squared norm of the gradient over several device buffers
 * (in double) and the in-place scaling that applies a clipping factor.
 *
 * Deterministic, like the CPU kernel, by fixed blocks: every buffer is cut
 * into blocks of SQN_BLOCK elements; one CUDA block sums a block in double
 * (each thread a fixed stride of it, then a fixed tree), writing one partial
 * per block into scratch; a last kernel adds the partials in a fixed order.
 * The result does not depend on the device or the stream's timing (it may
 * differ from the CPU's in the last bits: the order of the additions within
 * a block is not the same). It is copied to the host, so this waits. */
#include "kernels/cuda/dev_common.cuh"

enum { SQN_BLOCK = 8192, SQN_THREADS = 256 };

/* part[b] = sum of x[b * SQN_BLOCK ...][...]^2 in double, for the nb blocks of x[n] */
__global__ void bk_sqnorm_blocks_kernel(const float *x, int64_t n, int64_t nb, double *part)
{
    BK_SHARED(double, red, 32);
    for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
        int64_t i0 = b * SQN_BLOCK, i1 = i0 + SQN_BLOCK < n ? i0 + SQN_BLOCK : n;
        double s = 0.0;
        for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            s += (double)x[i] * (double)x[i];
        s = bk_block_sum_d(s, red);
        if (threadIdx.x == 0) part[b] = s;
    }
}

/* *out = sum of part[n]: thread t adds a contiguous range in order, then a fixed tree */
__global__ void bk_sqnorm_total_kernel(int64_t n, const double *part, double *out)
{
    BK_SHARED(double, red, 32);
    int64_t per = (n + blockDim.x - 1) / blockDim.x, i0 = threadIdx.x * per;
    double s = 0.0;
    for (int64_t i = i0; i < i0 + per && i < n; i++) s += part[i];
    s = bk_block_sum_d(s, red);
    if (threadIdx.x == 0) *out = s;
}

__global__ void bk_scale_kernel(int64_t n, float *x, float alpha)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

static int64_t n_blocks(int64_t count)
{
    return (count + SQN_BLOCK - 1) / SQN_BLOCK;
}

/* The scratch of a norm over one buffer of at most `elements` floats: one
 * partial per block and the total (several buffers may take a block more
 * each: their last blocks are partial). */
extern "C" size_t BK_DEV_FN(sqnorm_scratch_bytes)(int64_t elements)
{
    return (size_t)(n_blocks(elements) + 1) * sizeof(double);
}

extern "C" bk_status BK_DEV_FN(grad_sqnorm)(const bk_queue *q, int n_bufs, const float *const *bufs,
                                            const int64_t *counts, double *sqnorm)
{
    BK_CHECK_ARG(n_bufs >= 0 && sqnorm != NULL);
    BK_CHECK_ARG(n_bufs == 0 || (bufs != NULL && counts != NULL));
    for (int b = 0; b < n_bufs; b++) BK_CHECK_ARG(bufs[b] != NULL && counts[b] >= 0);
    for (int b = 0; b < n_bufs; b++) BK_DEV_PTRS(bufs[b]);
    int64_t total = 0;
    for (int b = 0; b < n_bufs; b++) total += n_blocks(counts[b]);
    *sqnorm = 0.0;
    if (total == 0) return BK_OK;
    double *part = NULL;
    bk_status st = BK_DEV_FN(scratch)(q, (size_t)(total + 1) * sizeof(double), (void **)&part);
    if (st != BK_OK) return st;
    int64_t off = 0;
    for (int b = 0; b < n_bufs && st == BK_OK; b++) {
        int64_t nb = n_blocks(counts[b]);
        if (nb == 0) continue;
        unsigned grid = bk_blocks_for(nb);
        BK_FOOTPRINT(counts[b] * sizeof(float), nb * sizeof(double));
        st = BK_LAUNCH(bk_sqnorm_blocks_kernel, dim3(grid), dim3(SQN_THREADS), 0, q->stream,
                       bufs[b], counts[b], nb, part + off);
        off += nb;
    }
    if (st == BK_OK) {
        BK_FOOTPRINT(total * sizeof(double), sizeof(double));
        st = BK_LAUNCH(bk_sqnorm_total_kernel, dim3(1), dim3(SQN_THREADS), 0, q->stream, total,
                       part, part + total);
    }
    if (st == BK_OK) st = BK_DEV_FN(copy)(q, sqnorm, part + total, sizeof(double), 1);
    BK_DEV_FN(scratch_free)(q, part);
    return st;
}

extern "C" bk_status BK_DEV_FN(scale)(const bk_queue *q, int64_t n, float *x, float alpha)
{
    BK_CHECK_ARG(n >= 0 && x != NULL);
    BK_DEV_PTRS(x);
    if (n == 0) return BK_OK;
    BK_FOOTPRINT(n * sizeof(float), n * sizeof(float));
    return BK_LAUNCH(bk_scale_kernel, dim3(bk_grid_for(n, SQN_THREADS)), dim3(SQN_THREADS), 0,
                     q->stream, n, x, alpha);
}
