/* cross_entropy.cu: the loss end of the fused LM head on the device: for a
 * chunk of logits [rows, V] (row stride ld), per-row fp32 lse and loss, and
 * dlogits written over the logits in place (z-loss, ignore_index), with
 * ops_math.h's formulas, as the CPU kernel.
 *
 * One block per row (grid-stride over rows), three passes over the row: the
 * max (block reduction), exp(x - max) stored in place while summed (block
 * reduction), then the scaling into dlogits. The label's logit is read before
 * the first barrier, so before any thread overwrites it. A row whose label is
 * ignore_index is zeroed without reading its logits; a row of all -inf gets
 * loss +inf, lse -inf and zero gradient. The count of rows not ignored is an
 * integer atomic (exact in any order); asking for it makes the call wait.
 * Labels other than ignore_index outside [0, V) return BK_ERR_ARG before
 * anything is written.
 *
 * bk_cross_entropy_sum runs the same kernel for one chunk of a longer pass
 * and waits for nothing: the valid rows and the bad labels (whose rows it
 * zeroes, as ignored ones) are atomics into the pass's bk_ce_sums, and a
 * second launch of one thread adds the chunk's losses in row order, in
 * double, into sums->loss: the host's order, so the device's loss is the
 * host's sum of the same per-row losses to the bit, and a chunk's 1024 or so
 * dependent adds take microseconds. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/ops_math.h"

enum { CE_THREADS = 256 };

/* loss, lse (when not NULL) and valid (when not NULL) of row r; x = 0 */
static __device__ __forceinline__ void ce_zero_row(float *x, int64_t V, float loss_v, float lse_v,
                                                   int64_t r, float *loss, float *lse)
{
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) x[j] = 0.0f;
    if (threadIdx.x == 0) {
        loss[r] = loss_v;
        if (lse != NULL) lse[r] = lse_v;
    }
}

__global__ void bk_cross_entropy_kernel(int64_t rows, int64_t V, float *logits, int64_t ld,
                                        const int64_t *labels, int64_t ignore_index, float scale,
                                        float z, float *loss, float *lse, unsigned long long *valid,
                                        unsigned long long *bad)
{
    BK_SHARED(float, red, 32);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float *x = logits + r * ld; /* logits[r, 0:V], becomes dlogits[r, 0:V] */
        int64_t y = labels[r];
        if (y == ignore_index || y < 0 || y >= V) {
            if (y != ignore_index && threadIdx.x == 0 && bad != NULL) atomicAdd(bad, 1ull);
            ce_zero_row(x, V, 0.0f, 0.0f, r, loss, lse);
            continue;
        }
        if (threadIdx.x == 0 && valid != NULL) atomicAdd(valid, 1ull);
        float x_label = x[y];
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = x[j] > mx ? x[j] : mx;
        mx = bk_block_reduce(mx, red, 1);
        if (mx == -INFINITY) {
            ce_zero_row(x, V, INFINITY, -INFINITY, r, loss, lse);
            continue;
        }
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
            float e = bk_expf(x[j] - mx);
            x[j] = e;
            s += e;
        }
        s = bk_block_reduce(s, red, 0);
        float l = bk_ce_lse(mx, s);
        float coef = bk_ce_prob_coef(l, z, scale), inv_sum = 1.0f / s;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
            x[j] = bk_ce_dlogit(x[j], inv_sum, coef, scale, j == y);
        if (threadIdx.x == 0) {
            loss[r] = bk_ce_loss(l, x_label, z);
            if (lse != NULL) lse[r] = l;
        }
    }
}

extern "C" bk_status BK_DEV_FN(cross_entropy)(const bk_queue *q, int64_t rows, int64_t V,
                                              float *logits, int64_t ld, const int64_t *labels,
                                              int64_t ignore_index, float scale, float z_loss,
                                              float *loss, float *lse, int64_t *n_valid)
{
    BK_CHECK_ARG(rows >= 0 && V > 0 && ld >= V);
    BK_CHECK_ARG(logits != NULL && labels != NULL && loss != NULL);
    BK_CHECK_ARG(z_loss >= 0.0f);
    BK_DEV_PTRS(logits, labels, loss, lse);
    int64_t bad = 0;
    bk_status st = BK_DEV_FN(count_outside)(q, labels, rows, 0, V, ignore_index, 1, &bad);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(bad == 0);
    if (n_valid) *n_valid = 0;
    if (rows == 0) return BK_OK;
    unsigned long long *valid = NULL, counted = 0;
    if (n_valid) {
        st = BK_DEV_FN(scratch)(q, sizeof *valid, (void **)&valid);
        if (st == BK_OK) st = BK_DEV_FN(zero_async)(q, valid, sizeof *valid);
    }
    unsigned blocks = bk_blocks_for(rows);
    if (st == BK_OK) {
        /* the logits and labels read; dlogits over the logits, the losses (lse) written */
        BK_FOOTPRINT(rows * (V * sizeof(float) + sizeof(int64_t)),
                     rows * (V + 1 + (lse != NULL)) * sizeof(float) + (valid ? sizeof *valid : 0));
        st = BK_LAUNCH(bk_cross_entropy_kernel, dim3(blocks), dim3(CE_THREADS), 0, q->stream, rows,
                       V, logits, ld, labels, ignore_index, scale, z_loss, loss, lse, valid,
                       (unsigned long long *)NULL);
    }
    if (st == BK_OK && n_valid) {
        st = BK_DEV_FN(copy)(q, &counted, valid, sizeof counted, 1);
        *n_valid = (int64_t)counted;
    }
    BK_DEV_FN(scratch_free)(q, valid);
    return st;
}

/* *acc += loss[0] + ... + loss[rows - 1], in double, in row order: one thread. */
__global__ void bk_cross_entropy_add_kernel(int64_t rows, const float *loss, double *acc)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0.0;
    for (int64_t r = 0; r < rows; r++) s += (double)loss[r];
    *acc += s;
}

extern "C" bk_status BK_DEV_FN(ce_sums_clear)(const bk_queue *q, bk_ce_sums *sums)
{
    BK_CHECK_ARG(sums != NULL);
    BK_DEV_PTRS(sums);
    return BK_DEV_FN(zero_async)(q, sums, sizeof *sums);
}

extern "C" bk_status BK_DEV_FN(cross_entropy_sum)(const bk_queue *q, int64_t rows, int64_t V,
                                                  float *logits, int64_t ld, const int64_t *labels,
                                                  int64_t ignore_index, float scale, float z_loss,
                                                  float *loss, bk_ce_sums *sums)
{
    BK_CHECK_ARG(rows >= 0 && V > 0 && ld >= V);
    BK_CHECK_ARG(logits != NULL && labels != NULL && loss != NULL && sums != NULL);
    BK_CHECK_ARG(z_loss >= 0.0f);
    BK_DEV_PTRS(logits, labels, loss, sums);
    if (rows == 0) return BK_OK;
    /* int64_t and unsigned long long: the same 8 bytes, counts that stay positive */
    unsigned long long *valid = (unsigned long long *)&sums->valid,
                       *bad = (unsigned long long *)&sums->bad;
    /* the logits and labels read; dlogits over the logits, the losses and the counts written */
    BK_FOOTPRINT(rows * (V * sizeof(float) + sizeof(int64_t)),
                 rows * (V + 1) * sizeof(float) + 2 * sizeof(unsigned long long));
    bk_status st = BK_LAUNCH(bk_cross_entropy_kernel, dim3(bk_blocks_for(rows)), dim3(CE_THREADS),
                             0, q->stream, rows, V, logits, ld, labels, ignore_index, scale, z_loss,
                             loss, (float *)NULL, valid, bad);
    BK_FOOTPRINT(rows * sizeof(float) + sizeof(double), sizeof(double));
    if (st == BK_OK)
        st = BK_LAUNCH(bk_cross_entropy_add_kernel, dim3(1), dim3(1), 0, q->stream, rows,
                       (const float *)loss, &sums->loss);
    return st;
}
