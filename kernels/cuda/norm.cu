/* norm.cu: RMSNorm forward and backward on the device, x, y, dy, dx [n, d],
 * w, dw [d], rstd [n], fp32. The per-element formulas are ops_math.h's, the
 * same the CPU kernels run.
 *
 * Forward and dx: one block of NORM_THREADS threads per row (grid-stride over
 * rows); the row's sum (of x^2, or of w dy x) is a warp-shuffle tree then a
 * pass over the warps in shared memory (bk_block_reduce), so the whole row is
 * read before any thread writes (y may be x, dx may be dy).
 *
 * dw += sum over rows of dy x rstd, deterministic without atomics: rows are
 * cut into chunks of a size that depends only on n; one thread per column
 * sums a chunk's rows in order into scratch [chunks, d], then one thread per
 * column adds the chunks in order into dw. The dw kernels run before dx, which
 * may overwrite dy. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/ops_math.h"

enum { NORM_THREADS = 256, NORM_CHUNK = 256, NORM_COL_THREADS = 128, NORM_MAX_CHUNKS = 65535 };

/* y [n, d] as Out: float, or uint16_t for the bf16 operand of a product */
template <typename Out>
__global__ void bk_rmsnorm_fwd_kernel(int64_t n, int64_t d, const float *x, const float *w,
                                      float eps, Out *y, float *rstd)
{
    BK_SHARED(float, red, 32);
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = x + r * d; /* [d] */
        Out *yr = y + r * d;         /* [d] */
        float ss = 0.0f;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
        ss = bk_block_reduce(ss, red, 0);
        float rs = bk_rmsnorm_rstd(ss, d, eps);
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            bk_store_elem(&yr[j], bk_rmsnorm_fwd_elem(xr[j], rs, w[j]));
        if (threadIdx.x == 0 && rstd != NULL) rstd[r] = rs;
    }
}

/* part[c, j] (or dw[j] += when direct) = sum of rows [c chunk, (c + 1) chunk) of column j */
__global__ void bk_rmsnorm_dw_chunk_kernel(int64_t n, int64_t d, int64_t chunk, const float *x,
                                           const float *rstd, const float *dy, float *part,
                                           int direct)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, c = blockIdx.y;
    if (j >= d) return;
    int64_t r0 = c * chunk, r1 = r0 + chunk < n ? r0 + chunk : n;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        acc += bk_rmsnorm_bwd_dw(x[r * d + j], dy[r * d + j], rstd[r]);
    if (direct)
        part[j] += acc;
    else
        part[c * d + j] = acc;
}

/* dw[j] += sum over chunks c in order of part[c, j] */
__global__ void bk_rmsnorm_dw_sum_kernel(int64_t chunks, int64_t d, const float *part, float *dw)
{
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= d) return;
    float acc = 0.0f;
    for (int64_t c = 0; c < chunks; c++) acc += part[c * d + j];
    dw[j] += acc;
}

__global__ void bk_rmsnorm_dx_kernel(int64_t n, int64_t d, const float *x, const float *w,
                                     const float *rstd, const float *dy, float *dx)
{
    BK_SHARED(float, red, 32);
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = x + r * d, *dyr = dy + r * d; /* [d] */
        float *dxr = dx + r * d;
        float c = 0.0f;
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x) c += w[j] * dyr[j] * xr[j];
        c = bk_block_reduce(c, red, 0);
        float c_over_d = c / (float)d, rs = rstd[r];
        for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
            dxr[j] = bk_rmsnorm_bwd_dx(xr[j], w[j], dyr[j], rs, c_over_d);
    }
}

static unsigned row_blocks(int64_t n)
{
    return bk_blocks_for(n);
}

/* Both outputs' launcher: y [n, d] as Out, the launch named name */
template <typename Out>
static bk_status rmsnorm_fwd_launch(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                    const float *w, float eps, Out *y, float *rstd,
                                    const char *name)
{
    BK_CHECK_ARG(n >= 0 && d > 0);
    BK_CHECK_ARG(x != NULL && w != NULL && y != NULL);
    BK_CHECK_ARG(eps >= 0.0f);
    BK_DEV_PTRS(x, w, y, rstd);
    if (n == 0) return BK_OK;
    BK_FOOTPRINT((n + 1) * d * sizeof(float), n * d * sizeof(Out) + (rstd ? n : 0) * sizeof(float));
    return BK_LAUNCH_NAMED(name, bk_rmsnorm_fwd_kernel<Out>, dim3(row_blocks(n)),
                           dim3(NORM_THREADS), 0, q->stream, n, d, x, w, eps, y, rstd);
}

extern "C" bk_status BK_DEV_FN(rmsnorm_fwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                            const float *w, float eps, float *y, float *rstd)
{
    return rmsnorm_fwd_launch(q, n, d, x, w, eps, y, rstd, "bk_rmsnorm_fwd_kernel<float>");
}

extern "C" bk_status BK_DEV_FN(rmsnorm_fwd_bf16)(const bk_queue *q, int64_t n, int64_t d,
                                                 const float *x, const float *w, float eps,
                                                 uint16_t *y16, float *rstd)
{
    return rmsnorm_fwd_launch(q, n, d, x, w, eps, y16, rstd, "bk_rmsnorm_fwd_kernel<uint16_t>");
}

/* The chunks the weight gradient of n rows is cut into. */
static int64_t dw_chunks(int64_t n, int64_t *chunk_rows)
{
    int64_t chunk = NORM_CHUNK;
    if ((n + chunk - 1) / chunk > NORM_MAX_CHUNKS)
        chunk = (n + NORM_MAX_CHUNKS - 1) / NORM_MAX_CHUNKS;
    *chunk_rows = chunk;
    return (n + chunk - 1) / chunk;
}

/* The scratch of the backward of at most n rows of d: [chunks, d] floats */
extern "C" size_t BK_DEV_FN(rmsnorm_scratch_bytes)(int64_t n, int64_t d)
{
    int64_t chunk, chunks = dw_chunks(n, &chunk);
    return chunks > 1 ? (size_t)(chunks * d) * sizeof(float) : 0;
}

/* dw += the weight gradient of the n rows, through scratch when n > one chunk */
static bk_status rmsnorm_dw(const bk_queue *q, int64_t n, int64_t d, const float *x,
                            const float *rstd, const float *dy, float *dw)
{
    int64_t chunk, chunks = dw_chunks(n, &chunk);
    unsigned cols = (unsigned)((d + NORM_COL_THREADS - 1) / NORM_COL_THREADS);
    int64_t rows_read = (2 * n * d + n) * sizeof(float); /* x, dy, rstd */
    if (chunks == 1) {
        BK_FOOTPRINT(rows_read + d * sizeof(float), d * sizeof(float)); /* dw += */
        return BK_LAUNCH(bk_rmsnorm_dw_chunk_kernel, dim3(cols, 1), dim3(NORM_COL_THREADS), 0,
                         q->stream, n, d, chunk, x, rstd, dy, dw, 1);
    }
    float *part = NULL;
    bk_status st = BK_DEV_FN(scratch)(q, (size_t)(chunks * d) * sizeof(float), (void **)&part);
    if (st != BK_OK) return st;
    BK_FOOTPRINT(rows_read, chunks * d * sizeof(float));
    st = BK_LAUNCH(bk_rmsnorm_dw_chunk_kernel, dim3(cols, (unsigned)chunks), dim3(NORM_COL_THREADS),
                   0, q->stream, n, d, chunk, x, rstd, dy, part, 0);
    if (st == BK_OK) {
        BK_FOOTPRINT((chunks + 1) * d * sizeof(float), d * sizeof(float)); /* dw += */
        st = BK_LAUNCH(bk_rmsnorm_dw_sum_kernel, dim3(cols), dim3(NORM_COL_THREADS), 0, q->stream,
                       chunks, d, part, dw);
    }
    BK_DEV_FN(scratch_free)(q, part);
    return st;
}

extern "C" bk_status BK_DEV_FN(rmsnorm_bwd)(const bk_queue *q, int64_t n, int64_t d, const float *x,
                                            const float *w, const float *rstd, const float *dy,
                                            float *dx, float *dw)
{
    BK_CHECK_ARG(n >= 0 && d > 0);
    BK_CHECK_ARG(x != NULL && w != NULL && rstd != NULL && dy != NULL && dx != NULL && dw != NULL);
    BK_DEV_PTRS(x, w, rstd, dy, dx, dw);
    if (n == 0) return BK_OK;
    bk_status st = rmsnorm_dw(q, n, d, x, rstd, dy, dw);
    if (st != BK_OK) return st;
    BK_FOOTPRINT((2 * n * d + d + n) * sizeof(float), n * d * sizeof(float)); /* x, dy, w, rstd */
    return BK_LAUNCH(bk_rmsnorm_dx_kernel, dim3(row_blocks(n)), dim3(NORM_THREADS), 0, q->stream, n,
                     d, x, w, rstd, dy, dx);
}
