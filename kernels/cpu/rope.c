/* rope.c: rotary position embedding forward and backward on the CPU, from
 * GLOBAL position ids, LLaMA's half-split pairing (ops_math.h documents it).
 *
 * Why this loop order: the sines and cosines depend on (row, pair) but not on
 * the head, so each row computes them once into a small stack table and
 * applies them to all H heads; the frequencies depend only on the pair, so a
 * thread computes them once for all its rows (with their scaling). Pairs go in chunks of PAIR_CHUNK
 * so the tables live on the stack whatever d is. The backward is the same
 * rotation with the sine negated. */
#include "kernels/cpu/ops_cpu.h"

#define PAIR_CHUNK   256
#define ROPE_PAR_MIN 16384

static bk_status rope_apply(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                            const bk_rope *rope, const float *x, float *out, float sign)
{
    BK_CHECK_ARG(rope != NULL && bk_rope_valid(rope));
    BK_CPU_OR_DEVICE(q, rope, (q, n, H, d, pos, *rope, x, out, sign));
    BK_CHECK_ARG(n >= 0 && H > 0 && d > 0 && d % 2 == 0);
    BK_CHECK_ARG(pos != NULL && x != NULL && out != NULL);
    float scale = bk_rope_scale(rope);
    int nt = bk_cpu_threads(q);
    int64_t half = d / 2, row_len = H * d;

#pragma omp parallel num_threads(nt) if (n * row_len >= ROPE_PAR_MIN)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t r0 = n * tid / nth, r1 = n * (tid + 1) / nth; /* this thread's rows */
        double freq[PAIR_CHUNK];
        float cs[PAIR_CHUNK], sn[PAIR_CHUNK];
        for (int64_t i0 = 0; i0 < half; i0 += PAIR_CHUNK) {
            int64_t ni = half - i0 < PAIR_CHUNK ? half - i0 : PAIR_CHUNK;
            for (int64_t i = 0; i < ni; i++) freq[i] = bk_rope_pair_freq(rope, i0 + i, d);
            for (int64_t r = r0; r < r1; r++) {
#pragma omp simd
                for (int64_t i = 0; i < ni; i++) {
                    float c, s;
                    bk_rope_sincos(pos[r], freq[i], &c, &s);
                    cs[i] = c * scale;
                    sn[i] = s * scale * sign;
                }
                for (int64_t h = 0; h < H; h++) {
                    const float *x1 = x + r * row_len + h * d + i0; /* x[r, h, i0 + i] */
                    const float *x2 = x1 + half;                    /* x[r, h, i0 + i + d/2] */
                    float *o1 = out + r * row_len + h * d + i0, *o2 = o1 + half;
#pragma omp simd
                    for (int64_t i = 0; i < ni; i++) {
                        float a, b;
                        bk_rope_rotate(x1[i], x2[i], cs[i], sn[i], &a, &b);
                        o1[i] = a;
                        o2[i] = b;
                    }
                }
            }
        }
    }
    return BK_OK;
}

bk_status bk_rope_fwd(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                      const bk_rope *rope, const float *x, float *out)
{
    return rope_apply(q, n, H, d, pos, rope, x, out, 1.0f);
}

bk_status bk_rope_bwd(const bk_queue *q, int64_t n, int64_t H, int64_t d, const int64_t *pos,
                      const bk_rope *rope, const float *dy, float *dx)
{
    return rope_apply(q, n, H, d, pos, rope, dy, dx, -1.0f);
}
