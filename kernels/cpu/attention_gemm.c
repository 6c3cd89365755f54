/* attention_gemm.c: the register-blocked tile product every attention tile is
 * made of. One shape serves all seven products of the forward and backward:
 * C (+)= A * B with A read by broadcast through arbitrary strides (so K, V, P^T
 * and dS^T are used in place, never repacked) and B, C contiguous along the
 * vectorised dimension N.
 *
 * With AVX-512 an 8 x 32 block of C lives in 16 zmm accumulators for the whole
 * K loop: per k, 2 vector loads of B, 8 broadcasts of A, 16 FMAs, so the loop
 * is bound by FMA throughput. Lanes beyond N are handled by masked loads and
 * stores. With AVX2 and FMA (no AVX-512) a 6 x 16 block in 12 ymm accumulators
 * does the same; without either a plain loop nest with `omp simd` over N. */
#include "kernels/cpu/attention_cpu.h"

#ifdef __AVX512F__

static inline __attribute__((always_inline)) void
micro(int R, int64_t K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
      ptrdiff_t ldb, float *C, ptrdiff_t ldc, __mmask16 m0, __mmask16 m1, int accumulate)
{
    __m512 c0[8], c1[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        if (accumulate) {
            c0[r] = _mm512_maskz_loadu_ps(m0, C + r * ldc);
            c1[r] = _mm512_maskz_loadu_ps(m1, C + r * ldc + 16);
        } else {
            c0[r] = _mm512_setzero_ps();
            c1[r] = _mm512_setzero_ps();
        }
    }
    const float *a_row[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) a_row[r] = A + r * a_rs;
    for (int64_t k = 0; k < K; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, B + k * ldb);
        __m512 b1 = _mm512_maskz_loadu_ps(m1, B + k * ldb + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(a_row[r][k * a_cs]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(C + r * ldc, m0, c0[r]);
        _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c1[r]);
    }
}

/* 16-wide variant for the last 16 or fewer columns: no wasted second vector. */
static inline __attribute__((always_inline)) void
micro16(int R, int64_t K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
        ptrdiff_t ldb, float *C, ptrdiff_t ldc, __mmask16 m0, int accumulate)
{
    __m512 c0[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        c0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, C + r * ldc) : _mm512_setzero_ps();
    const float *a_row[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) a_row[r] = A + r * a_rs;
    for (int64_t k = 0; k < K; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, B + k * ldb);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(a_row[r][k * a_cs]), b0, c0[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(C + r * ldc, m0, c0[r]);
}

/* 64-wide variant: R <= 6 rows x 4 vectors = 24 accumulators, for full 64-column
 * chunks. Per k: 4 vector loads, R broadcasts, 4R FMAs: fewer load and issue slots
 * per FMA than 8 x 32, which keeps the loop FMA-bound rather than issue-bound. */
static inline __attribute__((always_inline)) void micro64(int R, int64_t K, const float *A,
                                                          ptrdiff_t a_rs, ptrdiff_t a_cs,
                                                          const float *B, ptrdiff_t ldb, float *C,
                                                          ptrdiff_t ldc, int accumulate)
{
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            c[r][v] = accumulate ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_setzero_ps();
    const float *a_row[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) a_row[r] = A + r * a_rs;
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(a_row[r][k * a_cs]);
            c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
            c[r][2] = _mm512_fmadd_ps(a, b2, c[r][2]);
            c[r][3] = _mm512_fmadd_ps(a, b3, c[r][3]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
}

static __mmask16 lanes(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

void bk_attn_tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, ptrdiff_t a_rs,
                       ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                       int accumulate)
{
    int64_t n = 0;
    for (; n + 64 <= N; n += 64) {
        int64_t m = 0;
        for (; m + 6 <= M; m += 6)
            micro64(6, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, accumulate);
        const float *a = A + m * a_rs;
        float *c = C + m * ldc + n;
        switch (M - m) {
        case 5:
            micro64(5, K, a, a_rs, a_cs, B + n, ldb, c, ldc, accumulate);
            break;
        case 4:
            micro64(4, K, a, a_rs, a_cs, B + n, ldb, c, ldc, accumulate);
            break;
        case 3:
            micro64(3, K, a, a_rs, a_cs, B + n, ldb, c, ldc, accumulate);
            break;
        case 2:
            micro64(2, K, a, a_rs, a_cs, B + n, ldb, c, ldc, accumulate);
            break;
        case 1:
            micro64(1, K, a, a_rs, a_cs, B + n, ldb, c, ldc, accumulate);
            break;
        default:
            break;
        }
    }
    for (; n < N; n += 32) {
        int64_t left = N - n;
        __mmask16 m0 = lanes(left), m1 = left > 16 ? lanes(left - 16) : 0;
        int64_t m = 0;
        if (left > 16) {
            for (; m + 8 <= M; m += 8)
                micro(8, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
            switch (M - m) {
            case 7:
                micro(7, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 6:
                micro(6, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 5:
                micro(5, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 4:
                micro(4, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 3:
                micro(3, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 2:
                micro(2, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            case 1:
                micro(1, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0, m1,
                      accumulate);
                break;
            default:
                break;
            }
        } else {
            for (; m + 8 <= M; m += 8)
                micro16(8, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
            switch (M - m) {
            case 7:
                micro16(7, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 6:
                micro16(6, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 5:
                micro16(5, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 4:
                micro16(4, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 3:
                micro16(3, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 2:
                micro16(2, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            case 1:
                micro16(1, K, A + m * a_rs, a_rs, a_cs, B + n, ldb, C + m * ldc + n, ldc, m0,
                        accumulate);
                break;
            default:
                break;
            }
        }
    }
}

#elif defined(__AVX2__) && defined(__FMA__)

/* AVX2 + FMA (16 ymm registers): a block of up to 6 rows x 16 columns of C
 * lives in 12 accumulators for the whole K loop; per k, 2 vector loads of B, 6
 * broadcasts of A and 12 FMAs, which keeps both FMA pipes busy. With full set
 * (a compile-time constant after inlining) the loads and stores are plain;
 * otherwise lanes beyond N are masked. */
static inline __attribute__((always_inline)) void
micro8x2(int R, int64_t K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
         ptrdiff_t ldb, float *C, ptrdiff_t ldc, __m256i m0, __m256i m1, int full, int accumulate)
{
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (!accumulate) {
            c0[r] = _mm256_setzero_ps();
            c1[r] = _mm256_setzero_ps();
        } else if (full) {
            c0[r] = _mm256_loadu_ps(C + r * ldc);
            c1[r] = _mm256_loadu_ps(C + r * ldc + 8);
        } else {
            c0[r] = _mm256_maskload_ps(C + r * ldc, m0);
            c1[r] = _mm256_maskload_ps(C + r * ldc + 8, m1);
        }
    }
    const float *a_row[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) a_row[r] = A + r * a_rs;
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m256 b0 = full ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
        __m256 b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 a = _mm256_broadcast_ss(a_row[r] + k * a_cs);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (full) {
            _mm256_storeu_ps(C + r * ldc, c0[r]);
            _mm256_storeu_ps(C + r * ldc + 8, c1[r]);
        } else {
            _mm256_maskstore_ps(C + r * ldc, m0, c0[r]);
            _mm256_maskstore_ps(C + r * ldc + 8, m1, c1[r]);
        }
    }
}

/* The lanes of a vector of 8 that hold columns n < left. */
static __m256i lanes8(int64_t left)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int n = left < 0 ? 0 : left > 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* One column panel of 16 (full) or fewer (masked) columns, every row of C.
 * The row-count switch gives each remainder its own fully unrolled block. */
static inline __attribute__((always_inline)) void
panel16(int64_t M, int64_t K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B,
        ptrdiff_t ldb, float *C, ptrdiff_t ldc, __m256i m0, __m256i m1, int full, int accumulate)
{
    int64_t m = 0;
    for (; m + 6 <= M; m += 6)
        micro8x2(6, K, A + m * a_rs, a_rs, a_cs, B, ldb, C + m * ldc, ldc, m0, m1, full,
                 accumulate);
    const float *a = A + m * a_rs;
    float *c = C + m * ldc;
    switch (M - m) {
    case 5: micro8x2(5, K, a, a_rs, a_cs, B, ldb, c, ldc, m0, m1, full, accumulate); break;
    case 4: micro8x2(4, K, a, a_rs, a_cs, B, ldb, c, ldc, m0, m1, full, accumulate); break;
    case 3: micro8x2(3, K, a, a_rs, a_cs, B, ldb, c, ldc, m0, m1, full, accumulate); break;
    case 2: micro8x2(2, K, a, a_rs, a_cs, B, ldb, c, ldc, m0, m1, full, accumulate); break;
    case 1: micro8x2(1, K, a, a_rs, a_cs, B, ldb, c, ldc, m0, m1, full, accumulate); break;
    default: break;
    }
}

void bk_attn_tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, ptrdiff_t a_rs,
                       ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                       int accumulate)
{
    const __m256i all = _mm256_set1_epi32(-1);
    /* full and accumulate passed as literals, so that each inlined panel has
     * neither test nor masked access in its k loop */
    int64_t n = 0;
    for (; n + 16 <= N; n += 16) {
        if (accumulate)
            panel16(M, K, A, a_rs, a_cs, B + n, ldb, C + n, ldc, all, all, 1, 1);
        else
            panel16(M, K, A, a_rs, a_cs, B + n, ldb, C + n, ldc, all, all, 1, 0);
    }
    if (n < N) {
        __m256i m0 = lanes8(N - n), m1 = lanes8(N - n - 8);
        if (accumulate)
            panel16(M, K, A, a_rs, a_cs, B + n, ldb, C + n, ldc, m0, m1, 0, 1);
        else
            panel16(M, K, A, a_rs, a_cs, B + n, ldb, C + n, ldc, m0, m1, 0, 0);
    }
}

#else /* portable fallback */

void bk_attn_tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, ptrdiff_t a_rs,
                       ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                       int accumulate)
{
    for (int64_t m = 0; m < M; m++) {
        float *restrict c = C + m * ldc;
        if (!accumulate) {
#pragma omp simd
            for (int64_t n = 0; n < N; n++) c[n] = 0.0f;
        }
        for (int64_t k = 0; k < K; k++) {
            float a = A[m * a_rs + k * a_cs];
            const float *restrict b = B + k * ldb;
#pragma omp simd
            for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
        }
    }
}

#endif
