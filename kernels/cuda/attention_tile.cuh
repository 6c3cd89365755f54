/* attention_tile.cuh: the pieces the device attention kernels
 * (attention_fwd.cu, attention_bwd.cu) are made of.
 *
 * Tiles are 64 rows (queries or keys) of a head, held in shared memory as bf16
 * [64][D + 8] (D = 64 or 128: the head dim d zero-padded; the 8 extra
 * elements shift each row by 16 bytes so that the 8 rows one ldmatrix reads
 * fall in different banks). A block has 4 warps; a warp owns 16 rows of its
 * tile and computes with mma.sync m16n8k16 (bf16 in, fp32 accumulate):
 * fragments come from shared memory through ldmatrix (A operands and B
 * operands stored [n][k]) or ldmatrix.trans (B operands stored [k][n]), and a
 * product's fp32 accumulators become the A operand of the next product in
 * registers (bk_att_c_to_a), FlashAttention-2's arrangement.
 *
 * An accumulator tile s[8][4] holds, in lane (g = lane / 4, t = lane % 4),
 * element v of n-tile j at row g + 8 (v / 2) and column 8 j + 2 t + v % 2 of
 * the warp's 16 x 64 block (the PTX ISA's C layout). */
#ifndef BURST_KERNELS_CUDA_ATTENTION_TILE_CUH
#define BURST_KERNELS_CUDA_ATTENTION_TILE_CUH

#include "kernels/attention_tile.h"
#include "kernels/bf16.h"
#include "kernels/cuda/dev_common.cuh"

enum { ATT_ROWS = 64, ATT_WARPS = 4, ATT_THREADS = 128 };

/* The opening every attention kernel (the forward, dK/dV, dQ) shares: the
 * shared position and document tables of its two tiles, their ranges and
 * the pair's class, and what the block reads of the geometry g: LD, a tile
 * row's stride in the [64][D + 8] shared tiles (padded against bank
 * conflicts); the warp and its first row r0 of a tile; doc, a document mask;
 * qs and ks, the row strides of Q (and dO) and of K, V; sl2, the scale in
 * base 2. */
#define BK_ATT_PROLOGUE(g, D)                                                                      \
    BK_SHARED(int64_t, qpos, ATT_ROWS);                                                            \
    BK_SHARED(int64_t, kpos, ATT_ROWS);                                                            \
    BK_SHARED(int32_t, qseg, ATT_ROWS);                                                            \
    BK_SHARED(int32_t, kseg, ATT_ROWS);                                                            \
    BK_SHARED(bk_attn_range, ranges, 2);                                                           \
    BK_SHARED(int, tile_class, 1);                                                                 \
    const int LD = (D) + 8, warp = (int)threadIdx.x / 32, r0 = 16 * warp,                          \
              doc = ((g).mask.flags & BK_ATTN_DOCUMENT) != 0;                                      \
    const int64_t qs = (int64_t)(g).h_q * (g).d, ks = (int64_t)(g).h_kv * (g).d;                   \
    const float sl2 = (g).scale * 1.44269504088896341f

/* ---------------------------------------------------------------- loading tiles */

static __device__ __forceinline__ void bk_att_load8(const float *src, uint16_t v[8])
{
    float4 a = BK_LOAD_GLOBAL(float4, src);
    float4 b = BK_LOAD_GLOBAL(float4, src + 4);
    v[0] = bk_float_to_bf16(a.x), v[1] = bk_float_to_bf16(a.y);
    v[2] = bk_float_to_bf16(a.z), v[3] = bk_float_to_bf16(a.w);
    v[4] = bk_float_to_bf16(b.x), v[5] = bk_float_to_bf16(b.y);
    v[6] = bk_float_to_bf16(b.z), v[7] = bk_float_to_bf16(b.w);
}

static __device__ __forceinline__ void bk_att_load8(const uint16_t *src, uint16_t v[8])
{
    uint4 a = BK_LOAD_GLOBAL(uint4, src);
    v[0] = (uint16_t)(a.x & 0xffffu), v[1] = (uint16_t)(a.x >> 16);
    v[2] = (uint16_t)(a.y & 0xffffu), v[3] = (uint16_t)(a.y >> 16);
    v[4] = (uint16_t)(a.z & 0xffffu), v[5] = (uint16_t)(a.z >> 16);
    v[6] = (uint16_t)(a.w & 0xffffu), v[7] = (uint16_t)(a.w >> 16);
}

/* tile[64][D + 8] = bf16 of rows [r0, r0 + 64) of X (row stride rs elements,
 * this head's columns from ho), zero for rows >= n and columns >= d. */
template <int D, class T>
static __device__ __forceinline__ void bk_att_load_tile(BK_SPTR(uint16_t) tile, const T *X,
                                                        int64_t r0, int64_t n, int64_t rs,
                                                        int64_t ho, int d)
{
    for (int c = (int)threadIdx.x; c < ATT_ROWS * (D / 8); c += (int)blockDim.x) {
        int row = c / (D / 8), col = (c % (D / 8)) * 8;
        uint16_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (r0 + row < n && col < d) bk_att_load8(X + (r0 + row) * rs + ho + col, v);
        uint4 w;
        w.x = (uint32_t)v[0] | ((uint32_t)v[1] << 16),
        w.y = (uint32_t)v[2] | ((uint32_t)v[3] << 16);
        w.z = (uint32_t)v[4] | ((uint32_t)v[5] << 16),
        w.w = (uint32_t)v[6] | ((uint32_t)v[7] << 16);
        BK_SPTR(uint4) dst = BK_SPTR_CAST(uint4, tile + row * (D + 8) + col);
        dst[0] = w;
    }
}

/* Positions and segment ids of rows [r0, r0 + 64) (0 past n, or when the mask
 * does not need them: the CPU kernels treat absent ones as 0 too). */
static __device__ __forceinline__ void bk_att_load_pos(BK_SPTR(int64_t) pos, BK_SPTR(int32_t) seg,
                                                       const int64_t *gpos, const int32_t *gseg,
                                                       int64_t r0, int64_t n, int use_seg)
{
    for (int t = (int)threadIdx.x; t < ATT_ROWS; t += (int)blockDim.x) {
        int in = r0 + t < n;
        pos[t] = in && gpos != NULL ? gpos[r0 + t] : 0;
        seg[t] = in && use_seg ? gseg[r0 + t] : 0;
    }
}

/* *out = the ranges of pos[0, n) and seg[0, n) (warp 0 computes; the caller
 * synchronises before and after). */
static __device__ __forceinline__ void bk_att_tile_range(BK_SPTR(const int64_t) pos,
                                                         BK_SPTR(const int32_t) seg, int n,
                                                         BK_SPTR(bk_attn_range) out)
{
    if (threadIdx.x >= 32) return;
    int l = (int)threadIdx.x;
    int64_t pmin = INT64_MAX, pmax = INT64_MIN;
    int32_t smin = INT32_MAX, smax = INT32_MIN;
    for (int i = l; i < n; i += 32) {
        pmin = pos[i] < pmin ? pos[i] : pmin, pmax = pos[i] > pmax ? pos[i] : pmax;
        smin = seg[i] < smin ? seg[i] : smin, smax = seg[i] > smax ? seg[i] : smax;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        int64_t a = __shfl_xor_sync(0xffffffffu, pmin, o),
                b = __shfl_xor_sync(0xffffffffu, pmax, o);
        int32_t c = __shfl_xor_sync(0xffffffffu, smin, o),
                e = __shfl_xor_sync(0xffffffffu, smax, o);
        pmin = a < pmin ? a : pmin, pmax = b > pmax ? b : pmax;
        smin = c < smin ? c : smin, smax = e > smax ? e : smax;
    }
    if (l == 0) {
        bk_attn_range r;
        r.pmin = pmin, r.pmax = pmax, r.smin = smin, r.smax = smax;
        out[0] = r;
    }
}

/* ---------------------------------------------------------------- fragments */

/* A operand rows r0 .. r0 + 15, columns k0 .. k0 + 15 of a row-major tile. */
static __device__ __forceinline__ void bk_att_frag_a(uint32_t a[4], BK_SPTR(const uint16_t) tile,
                                                     int ld, int r0, int k0)
{
    int l = (int)threadIdx.x % 32;
    bk_ldmatrix_x4(a, tile + (r0 + l % 16) * ld + k0 + (l / 16) * 8);
}

/* B operands of two n-tiles (n0 .. n0 + 15) by k0 .. k0 + 15 from a tile
 * stored [n][k] (row n holds the k values): b[i] is n-tile n0 + 8 i. */
static __device__ __forceinline__ void
bk_att_frag_b_nk(uint32_t b[2][2], BK_SPTR(const uint16_t) tile, int ld, int n0, int k0)
{
    int l = (int)threadIdx.x % 32;
    uint32_t r[4];
    bk_ldmatrix_x4(r, tile + (n0 + l % 8 + 8 * (l / 16)) * ld + k0 + 8 * ((l / 8) % 2));
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

/* The same from a tile stored [k][n] (row k holds the n values), through
 * ldmatrix.trans. */
static __device__ __forceinline__ void
bk_att_frag_b_kn(uint32_t b[2][2], BK_SPTR(const uint16_t) tile, int ld, int k0, int n0)
{
    int l = (int)threadIdx.x % 32;
    uint32_t r[4];
    bk_ldmatrix_x4_trans(r, tile + (k0 + l % 8 + 8 * ((l / 8) % 2)) * ld + n0 + 8 * (l / 16));
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

/* The A operand (16 rows x 16 columns 16 kk ..) made of accumulator n-tiles
 * 2 kk and 2 kk + 1, rounded to bf16. */
static __device__ __forceinline__ void bk_att_c_to_a(uint32_t a[4], const float c0[4],
                                                     const float c1[4])
{
    a[0] = bk_pack_bf16x2(c0[0], c0[1]);
    a[1] = bk_pack_bf16x2(c0[2], c0[3]);
    a[2] = bk_pack_bf16x2(c1[0], c1[1]);
    a[3] = bk_pack_bf16x2(c1[2], c1[3]);
}

/* acc[2 NP][4] = n-tiles 2 jp0 .. 2 (jp0 + NP) - 1 (columns 16 jp0 ..
 * 16 (jp0 + NP) - 1) of A-tile [16 x D] (rows ar0 of a, row-major) times the
 * transpose of b [64 x D] (stored [n][k]). NP = 4: the whole 16 x 64 tile. */
template <int D, int NP>
static __device__ __forceinline__ void bk_att_mma_abt(float acc[2 * NP][4],
                                                      BK_SPTR(const uint16_t) a, int ar0,
                                                      BK_SPTR(const uint16_t) b, int jp0)
{
#pragma unroll
    for (int j = 0; j < 2 * NP; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t af[4];
        bk_att_frag_a(af, a, D + 8, ar0, 16 * kk);
#pragma unroll
        for (int jp = 0; jp < NP; jp++) {
            uint32_t bf[2][2];
            bk_att_frag_b_nk(bf, b, D + 8, 16 * (jp0 + jp), 16 * kk);
            bk_mma_bf16_16816(acc[2 * jp], af, bf[0], acc[2 * jp]);
            bk_mma_bf16_16816(acc[2 * jp + 1], af, bf[1], acc[2 * jp + 1]);
        }
    }
}

/* out[16 x D] += c[16 x 16] (accumulator n-tiles c0, c1, rounded to bf16)
 * times rows 16 kk .. 16 kk + 15 of b [64 x D] (stored [k][n]). */
template <int D>
static __device__ __forceinline__ void bk_att_mma_pb_step(float out[D / 8][4], const float c0[4],
                                                          const float c1[4],
                                                          BK_SPTR(const uint16_t) b, int kk)
{
    uint32_t af[4];
    bk_att_c_to_a(af, c0, c1);
#pragma unroll
    for (int jd = 0; jd < D / 16; jd++) {
        uint32_t bf[2][2];
        bk_att_frag_b_kn(bf, b, D + 8, 16 * kk, 16 * jd);
        bk_mma_bf16_16816(out[2 * jd], af, bf[0], out[2 * jd]);
        bk_mma_bf16_16816(out[2 * jd + 1], af, bf[1], out[2 * jd + 1]);
    }
}

/* out[16 x D] += p[16 x 64] (accumulators, rounded to bf16) times b [64 x D]
 * (stored [k][n]). */
template <int D>
static __device__ __forceinline__ void bk_att_mma_pb(float out[D / 8][4], const float p[8][4],
                                                     BK_SPTR(const uint16_t) b)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) bk_att_mma_pb_step<D>(out, p[2 * kk], p[2 * kk + 1], b, kk);
}

/* ---------------------------------------------------------------- masks */

/* Sets to -inf the accumulators of s[16 x 8 NT] (columns col0 .. of the
 * tile) whose (row, column) pair may not attend: column past n_col, row past
 * n_row, or (when partial) forbidden by the mask. rows_are_queries says which
 * side the rows are (forward and dQ: queries; dK/dV: keys). */
template <int NT>
static __device__ __forceinline__ void
bk_att_mask(float s[NT][4], int r0, int col0, int n_row, int n_col, int partial,
            int rows_are_queries, const bk_attn_mask *m, BK_SPTR(const int64_t) rpos,
            BK_SPTR(const int32_t) rseg, BK_SPTR(const int64_t) cpos, BK_SPTR(const int32_t) cseg)
{
    int l = (int)threadIdx.x % 32, g = l / 4, t = l % 4;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            int row = r0 + g + 8 * (v / 2), col = col0 + 8 * j + 2 * t + v % 2;
            int ok = row < n_row && col < n_col;
            if (ok && partial)
                ok = rows_are_queries
                         ? bk_attn_allowed(m, rpos[row], cpos[col], rseg[row], cseg[col])
                         : bk_attn_allowed(m, cpos[col], rpos[row], cseg[col], rseg[row]);
            if (!ok) s[j][v] = -INFINITY;
        }
}

/* ---------------------------------------------------------------- launch */

/* Bytes of dynamic shared memory for `tiles` tiles of head dim D. */
static inline size_t bk_att_smem(int D, int tiles)
{
    return (size_t)tiles * ATT_ROWS * (size_t)(D + 8) * sizeof(uint16_t);
}

/* Lets a kernel use more than 48 KiB of dynamic shared memory: on a GPU and
 * in the emulator alike, a launch past 48 KiB without it fails. */
static inline bk_status bk_att_allow_smem(const void *kernel, size_t bytes)
{
    return bytes <= 48 * 1024 ? BK_OK : bk_allow_dynamic_smem(kernel, bytes);
}

/* For the footprints (BK_FOOTPRINT): the bytes of the query side's rows (Q,
 * dO, O, dQ: n_q rows of h_q heads) and of the key side's (K, V, dK, dV: n_kv
 * rows of h_kv heads) of elem-byte elements, of the per-row floats (lse,
 * delta), and of the positions and document ids the mask reads. */
static inline int64_t bk_att_q_bytes(const bk_attn_geom *g, size_t elem)
{
    return g->n_q * g->h_q * (int64_t)g->d * (int64_t)elem;
}
static inline int64_t bk_att_kv_bytes(const bk_attn_geom *g, size_t elem)
{
    return g->n_kv * g->h_kv * (int64_t)g->d * (int64_t)elem;
}
static inline int64_t bk_att_row_floats_bytes(const bk_attn_geom *g)
{
    return g->n_q * g->h_q * (int64_t)sizeof(float);
}
static inline int64_t bk_att_mask_bytes(const bk_attn_geom *g)
{
    int64_t rows = g->n_q + g->n_kv;
    int64_t seg = (g->mask.flags & BK_ATTN_DOCUMENT) ? (int64_t)sizeof(int32_t) : 0;
    return rows * ((g->q_pos ? (int64_t)sizeof(int64_t) : 0) + seg);
}

/* The checks of bk_attn_check_geom (kernels/cpu/attention_mask.c), plus what
 * the device kernels need: d <= 128, buffers aligned to 16 bytes. */
extern "C" bk_status bk_attn_check_geom(const bk_queue *q, const bk_attn_geom *g);

static inline bk_status bk_att_check(const bk_queue *q, const bk_attn_geom *g,
                                     const void *const *bufs, int n_bufs)
{
    BK_CHECK_ARG(q != NULL && g != NULL);
    bk_queue host = *q;
    host.where = BK_HOST; /* the geometry checks only; nothing is read through it */
    bk_status st = bk_attn_check_geom(&host, g);
    if (st != BK_OK) return st;
    if (g->d > 128) return BK_ERR_UNSUPPORTED;
    for (int i = 0; i < n_bufs; i++) BK_CHECK_ARG((uintptr_t)bufs[i] % 16 == 0);
    return BK_OK;
}

/* ---------------------------------------------------------------- stats */

/* Per-block tile counts for bk_attn_stats (skipped, masked, full), kept as
 * three scalars: an array indexed by the class would live in local memory. */
typedef struct {
    unsigned skipped, masked, full;
} bk_att_counts;

static __device__ __forceinline__ void bk_att_tally(bk_att_counts *c, int cls)
{
    c->skipped += cls == BK_ATTN_TILE_SKIP;
    c->masked += cls == BK_ATTN_TILE_PARTIAL;
    c->full += cls == BK_ATTN_TILE_FULL;
}

static __device__ __forceinline__ void bk_att_count(unsigned long long *stats, bk_att_counts c)
{
    if (stats == NULL || threadIdx.x != 0) return;
    if (c.skipped) atomicAdd(&stats[0], (unsigned long long)c.skipped);
    if (c.masked) atomicAdd(&stats[1], (unsigned long long)c.masked);
    if (c.full) atomicAdd(&stats[2], (unsigned long long)c.full);
}

/* Tile counts for bk_attn_stats: device counters, copied back (a wait). */
static inline bk_status bk_att_stats_begin(const bk_queue *q, bk_attn_stats *stats,
                                           unsigned long long **dev)
{
    *dev = NULL;
    if (stats == NULL) return BK_OK;
    const size_t bytes = 3 * sizeof **dev;
    bk_status st = BK_DEV_FN(scratch)(q, bytes, (void **)dev);
    if (st == BK_OK) st = BK_DEV_FN(zero_async)(q, *dev, bytes);
    return st;
}

static inline bk_status bk_att_stats_end(const bk_queue *q, const bk_attn_geom *g,
                                         bk_attn_stats *stats, unsigned long long *dev,
                                         bk_status st)
{
    if (stats != NULL) {
        unsigned long long c[3] = {0, 0, 0};
        if (st == BK_OK) st = BK_DEV_FN(copy)(q, c, dev, sizeof c, 1);
        int64_t nqt = (g->n_q + ATT_ROWS - 1) / ATT_ROWS, nkt = (g->n_kv + ATT_ROWS - 1) / ATT_ROWS;
        stats->tile_q = ATT_ROWS;
        stats->tile_kv = ATT_ROWS;
        stats->tiles_total = (int64_t)g->h_q * nqt * nkt;
        stats->tiles_skipped = (int64_t)c[0];
        stats->tiles_masked = (int64_t)c[1];
        stats->tiles_full = (int64_t)c[2];
    }
    BK_DEV_FN(scratch_free)(q, dev);
    return st;
}

#endif
