/* swiglu.c: SwiGLU forward and backward on the CPU, out = silu(gate) * up.
 * Elementwise; OpenMP over rows, SIMD along a row, the math from ops_math.h.
 * Rows have their own stride so that the two halves of a fused [rows, 2F]
 * GEMM output can be passed without copying. */
#include <stdlib.h>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/device.h" /* bk_round_bf16 */

#define SWIGLU_PAR_MIN 16384

bk_status bk_swiglu_fwd(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                        const float *up, int64_t ld_in, float *out)
{
    BK_CPU_OR_DEVICE(q, swiglu_fwd, (q, rows, cols, gate, up, ld_in, out));
    BK_CHECK_ARG(rows >= 0 && cols >= 0 && ld_in >= cols);
    BK_CHECK_ARG(gate != NULL && up != NULL && out != NULL);
    int nt = bk_cpu_threads(q);
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= SWIGLU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate + r * ld_in, *u = up + r * ld_in; /* [cols] */
        float *o = out + r * cols;                              /* [cols] */
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) o[j] = bk_swiglu_fwd_elem(g[j], u[j]);
    }
    return BK_OK;
}

/* The host's is the definition: the fp32 output, rounded (a buffer of rows
 * cols floats for the call). */
bk_status bk_swiglu_fwd_bf16(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                             const float *up, int64_t ld_in, uint16_t *out16)
{
    BK_CPU_OR_DEVICE(q, swiglu_fwd_bf16, (q, rows, cols, gate, up, ld_in, out16));
    BK_CHECK_ARG(rows >= 0 && cols >= 0 && out16 != NULL);
    float *out = malloc((size_t)(rows * cols) * sizeof *out + 1); /* [rows, cols] */
    if (!out) return BK_ERR_NOMEM;
    bk_status st = bk_swiglu_fwd(q, rows, cols, gate, up, ld_in, out);
    if (st == BK_OK) st = bk_round_bf16(q, rows * cols, out, out16);
    free(out);
    return st;
}

bk_status bk_swiglu_bwd(const bk_queue *q, int64_t rows, int64_t cols, const float *gate,
                        const float *up, int64_t ld_in, const float *dout, float *dgate, float *dup)
{
    BK_CPU_OR_DEVICE(q, swiglu_bwd, (q, rows, cols, gate, up, ld_in, dout, dgate, dup));
    BK_CHECK_ARG(rows >= 0 && cols >= 0 && ld_in >= cols);
    BK_CHECK_ARG(gate != NULL && up != NULL && dout != NULL && dgate != NULL && dup != NULL);
    int nt = bk_cpu_threads(q);
#pragma omp parallel for num_threads(nt) schedule(static) if (rows * cols >= SWIGLU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate + r * ld_in, *u = up + r * ld_in; /* [cols] */
        const float *d = dout + r * cols;                       /* [cols] */
        float *dg = dgate + r * ld_in, *du = dup + r * ld_in;   /* [cols] */
        /* simd is safe with dg == g: element j is read before it is written and
         * no other element depends on it. */
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) {
            float a, b;
            bk_swiglu_bwd_elem(g[j], u[j], d[j], &a, &b);
            dg[j] = a;
            du[j] = b;
        }
    }
    return BK_OK;
}
