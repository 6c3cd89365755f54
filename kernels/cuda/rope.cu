/* rope.cu: rotary position embedding on the device, x, out [n, H, d] with
 * GLOBAL positions pos [n], LLaMA's half-split pairing; the backward is the
 * same rotation with the sine negated (sign = -1). ops_math.h computes the
 * angle in double and its sine and cosine, as on the CPU.
 *
 * One block per row (grid-stride over rows); a thread takes pairs i of the
 * row, computes their sine and cosine once and rotates pair i of every head,
 * so the double-precision angle costs d/2 per row, not H d/2. out may be x:
 * each pair is read and written by the same thread. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/ops_math.h"

enum { ROPE_THREADS = 128 };

__global__ void bk_rope_kernel(int64_t n, int64_t H, int64_t d, const int64_t *pos, bk_rope rope,
                               const float *x, float *out, float sign)
{
    int64_t half = d / 2, row_len = H * d;
    float scale = bk_rope_scale(&rope);
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
            float c, s;
            bk_rope_sincos(pos[r], bk_rope_pair_freq(&rope, i, d), &c, &s);
            c *= scale;
            s *= scale * sign;
            for (int64_t h = 0; h < H; h++) {
                const float *xh = x + r * row_len + h * d; /* x[r, h, :] */
                float *oh = out + r * row_len + h * d;
                float a, b;
                bk_rope_rotate(xh[i], xh[i + half], c, s, &a, &b);
                oh[i] = a;
                oh[i + half] = b;
            }
        }
    }
}

extern "C" bk_status BK_DEV_FN(rope)(const bk_queue *q, int64_t n, int64_t H, int64_t d,
                                     const int64_t *pos, bk_rope rope, const float *x, float *out,
                                     float sign)
{
    BK_CHECK_ARG(n >= 0 && H > 0 && d > 0 && d % 2 == 0);
    BK_CHECK_ARG(pos != NULL && x != NULL && out != NULL);
    BK_CHECK_ARG(bk_rope_valid(&rope));
    BK_DEV_PTRS(pos, x, out);
    if (n == 0) return BK_OK;
    unsigned blocks = bk_blocks_for(n);
    BK_FOOTPRINT(n * (sizeof *pos + H * d * sizeof(float)), n * H * d * sizeof(float));
    return BK_LAUNCH(bk_rope_kernel, dim3(blocks), dim3(ROPE_THREADS), 0, q->stream, n, H, d, pos,
                     rope, x, out, sign);
}
