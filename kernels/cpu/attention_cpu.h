/* attention_cpu.h: internals shared by the CPU attention kernels (not a public
 * interface): tile sizes, per-tile position summaries and their classification
 * against a mask, argument checks, the register-blocked tile product, and a
 * vectorised exp2. */
#ifndef BURST_KERNELS_CPU_ATTENTION_CPU_H
#define BURST_KERNELS_CPU_ATTENTION_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/attention_tile.h"
#include "kernels/device_ops.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

/* Rows per query tile and per key tile. Query tiles are padded to a multiple of
 * 16 (one AVX-512 vector) in scratch. 64 x 64 keeps the per-thread scratch
 * (Q^T, O^T [d, 64], S^T [64, 64]) within L2 for d = 128. */
enum { BK_ATTN_TQ = 64, BK_ATTN_TK = 64 };

/* Query tiles processed together by one unit, sharing each K/V tile while it is
 * in cache: divides the K/V traffic from memory by this factor, which matters
 * once a head's K/V no longer fits in the caches (long blocks, many heads). */
enum { BK_ATTN_QGROUP = 4 };

/* bk_attn_range and the tile classes: kernels/attention_tile.h (shared with
 * the CUDA kernels). */

/* Ranges of the n_tiles = ceil(n / tile) tiles of rows [n]; pos and seg may be
 * NULL (treated as 0). */
void bk_attn_ranges(const int64_t *pos, const int32_t *seg, int64_t n, int tile,
                    bk_attn_range *out);

/* SKIP when no (query, key) pair of the tiles can be allowed, FULL when every
 * pair is, PARTIAL otherwise (conservative: PARTIAL when unsure). */
int bk_attn_tile_class(const bk_attn_mask *m, const bk_attn_range *qr, const bk_attn_range *kr);

/* Sets to -inf the scores of S^T [bk, TQ] (row = key j0 + j, column = query
 * i0 + i) whose pair the mask forbids: the same predicate as bk_attn_allowed,
 * arranged so that causal, window and document masks vectorise over queries. */
void bk_attn_tile_mask(const bk_attn_geom *g, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                       float *st);

/* Checks every argument of a forward/backward call; BK_OK when valid. */
bk_status bk_attn_check_geom(const bk_queue *q, const bk_attn_geom *g);

/* Adds the tile counts of one call into *stats (when stats is not NULL). */
void bk_attn_stats_set(bk_attn_stats *stats, int64_t total, int64_t skipped, int64_t masked,
                       int64_t full);

/* Tile product C[m][n] (+)= sum_k A(m, k) * B[k][n] for m < M, n < N, k < K, with
 * A(m, k) = A[m * a_rs + k * a_cs] (any strides), B row-major (row stride ldb),
 * C row-major (row stride ldc). accumulate = 0 overwrites C. N need not be a
 * multiple of the vector width; elements beyond N are neither read nor written. */
void bk_attn_tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, ptrdiff_t a_rs,
                       ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc,
                       int accumulate);

/* Threads to use for a queue. */
int bk_attn_threads(const bk_queue *q);

/* Scratch: 64-byte aligned, zero-initialised; NULL when memory is exhausted
 * (the caller reports it with bk_out_of_memory, on the calling thread). */
float *bk_attn_scratch(size_t n_floats);
/* In a parallel region, whether this thread has its scratch (had != 0); when
 * not, sets the shared *short_of_memory, so that the call ends with
 * BK_ERR_NOMEM (the thread then computes nothing). Returns had. */
int bk_attn_scratch_had(int had, int *short_of_memory);

#ifdef __AVX512F__
/* 2^x for 16 lanes: round-to-nearest split x = i + f, |f| <= 1/2, degree-6
 * Taylor polynomial of 2^f (relative error < 2e-7), scaled by 2^i. -inf and
 * anything below -150 give exactly 0. */
static inline __m512 bk_attn_exp2_ps(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
    __m512 xi = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, xi);
    __m512 p = _mm512_set1_ps(1.5403530393381608e-4f);                 /* ln2^6 / 720 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f)); /* ln2^5 / 120 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f)); /* ln2^4 / 24 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f)); /* ln2^3 / 6 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f)); /* ln2^2 / 2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f)); /* ln2 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, xi);
}
#elif defined(__AVX2__) && defined(__FMA__)
/* 2^x for 8 lanes, the same polynomial as the AVX-512 bk_attn_exp2_ps; 2^i is
 * built in the exponent field, so results below 2^-126 (x < -126, -inf
 * included) are flushed to exactly 0 rather than made denormal. */
static inline __m256 bk_attn_exp2_ps256(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-126.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    x = _mm256_min_ps(x, _mm256_set1_ps(127.0f));
    __m256 xi = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, xi);
    __m256 p = _mm256_set1_ps(1.5403530393381608e-4f);                 /* ln2^6 / 720 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f)); /* ln2^5 / 120 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f)); /* ln2^4 / 24 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f)); /* ln2^3 / 6 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f)); /* ln2^2 / 2 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f)); /* ln2 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif

#endif
