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

/* The vector of the widest instruction set this file is built for (AVX-512,
 * else AVX2 with FMA): BK_VW floats and the few operations the softmax passes
 * use, so that each pass and the exp2 polynomial are written once. Loads and
 * stores are aligned (scratch rows are 64-byte aligned, BK_ATTN_TQ floats
 * apart). BK_ATTN_VEC is 0 without either: the passes then use `omp simd`. */
#if defined(__AVX512F__)
#define BK_ATTN_VEC 1
typedef __m512 bk_vf;
enum { BK_VW = 16 };
static inline bk_vf bk_vload(const float *p) { return _mm512_load_ps(p); }
static inline void bk_vstore(float *p, bk_vf v) { _mm512_store_ps(p, v); }
static inline bk_vf bk_vset1(float x) { return _mm512_set1_ps(x); }
static inline bk_vf bk_vadd(bk_vf a, bk_vf b) { return _mm512_add_ps(a, b); }
static inline bk_vf bk_vfmadd(bk_vf a, bk_vf b, bk_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline bk_vf bk_vfmsub(bk_vf a, bk_vf b, bk_vf c) { return _mm512_fmsub_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__)
#define BK_ATTN_VEC 1
typedef __m256 bk_vf;
enum { BK_VW = 8 };
static inline bk_vf bk_vload(const float *p) { return _mm256_load_ps(p); }
static inline void bk_vstore(float *p, bk_vf v) { _mm256_store_ps(p, v); }
static inline bk_vf bk_vset1(float x) { return _mm256_set1_ps(x); }
static inline bk_vf bk_vadd(bk_vf a, bk_vf b) { return _mm256_add_ps(a, b); }
static inline bk_vf bk_vfmadd(bk_vf a, bk_vf b, bk_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline bk_vf bk_vfmsub(bk_vf a, bk_vf b, bk_vf c) { return _mm256_fmsub_ps(a, b, c); }
#else
#define BK_ATTN_VEC 0
#endif

#if BK_ATTN_VEC
/* 2^f for |f| <= 1/2: the degree-6 Taylor polynomial (relative error < 2e-7). */
static inline bk_vf bk_attn_exp2_poly(bk_vf f)
{
    bk_vf p = bk_vset1(1.5403530393381608e-4f);              /* ln2^6 / 720 */
    p = bk_vfmadd(p, f, bk_vset1(1.3333558146428443e-3f)); /* ln2^5 / 120 */
    p = bk_vfmadd(p, f, bk_vset1(9.6181291076284772e-3f)); /* ln2^4 / 24 */
    p = bk_vfmadd(p, f, bk_vset1(5.5504108664821580e-2f)); /* ln2^3 / 6 */
    p = bk_vfmadd(p, f, bk_vset1(2.4022650695910071e-1f)); /* ln2^2 / 2 */
    p = bk_vfmadd(p, f, bk_vset1(6.9314718055994531e-1f)); /* ln2 */
    return bk_vfmadd(p, f, bk_vset1(1.0f));
}
#endif

#if defined(__AVX512F__)
/* 2^x: round-to-nearest split x = i + f, the polynomial of 2^f, scaled by 2^i
 * (vscalefps). -inf and anything below -150 give exactly 0. */
static inline bk_vf bk_attn_exp2(bk_vf x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
    __m512 xi = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_scalef_ps(bk_attn_exp2_poly(_mm512_sub_ps(x, xi)), xi);
}
#elif BK_ATTN_VEC
/* 2^x as the AVX-512 version, with 2^i built in the exponent field: results
 * below 2^-126 (x < -126, -inf included) are flushed to exactly 0 rather than
 * made denormal. */
static inline bk_vf bk_attn_exp2(bk_vf x)
{
    const __m256 lo = _mm256_set1_ps(-126.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(127.0f));
    __m256 xi = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
    __m256 p = bk_attn_exp2_poly(_mm256_sub_ps(x, xi));
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif

#endif
