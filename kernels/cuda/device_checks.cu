/* device_checks.cu: argument checks that need the data, on the device: how
 * many int64 values (tokens, labels) fall outside their range. The launchers
 * call it before writing anything, so an invalid token or label returns
 * BK_ERR_ARG with every output untouched, as on the host; the price is the
 * counter zeroed on the stream, one small kernel and a wait for its 8-byte
 * result. */
#include "kernels/cuda/dev_common.cuh"

enum { CHECK_THREADS = 256 };

/* count[0] += values of v[n] outside [lo, hi) (and != skip when use_skip);
 * integer atomics, so the count does not depend on the order. */
__global__ void bk_count_outside_kernel(const int64_t *v, int64_t n, int64_t lo, int64_t hi,
                                        int64_t skip, int use_skip, unsigned long long *count)
{
    unsigned long long bad = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t x = v[i];
        bad += (x < lo || x >= hi) && !(use_skip && x == skip);
    }
    if (bad) atomicAdd(count, bad);
}

extern "C" bk_status BK_DEV_FN(count_outside)(const bk_queue *q, const int64_t *v, int64_t n,
                                              int64_t lo, int64_t hi, int64_t skip, int use_skip,
                                              int64_t *count)
{
    *count = 0;
    if (n == 0) return BK_OK;
    unsigned long long *d = NULL, h = 0;
    bk_status st = BK_DEV_FN(scratch)(q, sizeof *d, (void **)&d);
    if (st != BK_OK) return st;
    st = BK_DEV_FN(zero_async)(q, d, sizeof *d);
    if (st == BK_OK) {
        BK_FOOTPRINT(n * sizeof *v, sizeof *d);
        st = BK_LAUNCH(bk_count_outside_kernel, dim3(bk_grid_for(n, CHECK_THREADS)),
                       dim3(CHECK_THREADS), 0, q->stream, v, n, lo, hi, skip, use_skip, d);
    }
    if (st == BK_OK) st = BK_DEV_FN(copy)(q, &h, d, sizeof h, 1);
    BK_DEV_FN(scratch_free)(q, d);
    *count = (int64_t)h;
    return st;
}
