/* attention_bwd.cu: backward attention of one (query block, key/value block)
 * pair on the device: the contract of bk_attn_bwd (kernels/attention.h),
 * adding (+=) into fp32 dQ, dK, dV, on tensor cores (mma.sync m16n8k16, bf16
 * operands, fp32 accumulation). Q, K, V, dO are fp32 or bf16 (rounded to bf16
 * as they are loaded); lse and delta are the forward's.
 *
 * Two kernels, so that every output row has exactly one owner and the sums
 * need no atomics (deterministic, run to run and device to device):
 *   - dK/dV: one block per (key tile of 64 rows, key/value head); it walks the
 *     query tiles of every query head of its GQA group (K and V are never
 *     expanded) and, per warp of 16 keys, computes S^T = K Q^T,
 *     P^T = exp2(S^T scale log2 e - lse log2 e), dV += P^T dO,
 *     dP^T = V dO^T, dS^T = P^T (dP^T - delta) scale, dK += dS^T Q;
 *   - dQ: one block per (query tile, query head); it walks the key tiles and
 *     computes S = Q K^T, P, dP = dO V^T, dS, dQ += dS K.
 * S and dP are thus computed twice (7 tile products instead of the 5 of a
 * backward that adds dQ with float atomics), the price of determinism.
 * Both kernels skip the tiles the mask empties (the CPU's classification),
 * mask elementwise on PARTIAL tiles and past the ragged ends; a row with
 * lse = -inf (no allowed key) has offset +inf (bk_attn_bwd_offset), so its
 * probabilities and gradient contributions are exactly 0. All four tiles of a
 * block live in dynamic shared memory ([64][D + 8] bf16 each: 68 KiB at
 * D = 128) and fragments are reloaded with ldmatrix, which keeps the
 * accumulators (dK and dV, or dQ) in registers without spilling. */
#include "kernels/cuda/attention_tile.cuh"

/* lse2[t] = base-2 offset of query row r0 + t (+inf past n or for an empty
 * row), dlt[t] = delta of that row. */
static __device__ __forceinline__ void bk_att_load_rowstats(BK_SPTR(float) lse2, BK_SPTR(float) dlt,
                                                            const float *lse, const float *delta,
                                                            int64_t r0, int64_t n, int h, int h_q)
{
    for (int t = (int)threadIdx.x; t < ATT_ROWS; t += (int)blockDim.x) {
        int in = r0 + t < n;
        lse2[t] = in ? bk_attn_bwd_offset(lse[(r0 + t) * h_q + h]) : INFINITY;
        dlt[t] = in ? delta[(r0 + t) * h_q + h] : 0.0f;
    }
}

/* Adds the warp's accumulators acc[16 x D] into rows r0 + .. of X (rows past
 * n and columns past d are not written). */
template <int D>
static __device__ __forceinline__ void bk_att_add_rows(float *X, float acc[D / 8][4], int64_t row0,
                                                       int64_t n, int64_t rs, int64_t ho, int d)
{
    int lane = (int)threadIdx.x % 32, gr = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t row = row0 + gr + 8 * r;
        if (row >= n) continue;
        float *x = X + row * rs + ho;
#pragma unroll
        for (int jd = 0; jd < D / 8; jd++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * jd + 2 * t + e;
                if (c < d) x[c] += acc[jd][2 * r + e];
            }
    }
}

/* Classifies the pair of tiles whose ranges are in ranges[0] (queries) and
 * ranges[1] (keys); every thread gets the class. */
static __device__ __forceinline__ int
bk_att_classify(const bk_attn_mask *m, BK_SPTR(bk_attn_range) ranges, BK_SPTR(int) cls)
{
    __syncthreads();
    if (threadIdx.x == 0) cls[0] = bk_attn_classify_tiles(m, &ranges[0], &ranges[1]);
    __syncthreads();
    return cls[0];
}

/* ---------------------------------------------------------------- dK, dV */

template <int D, class T>
__global__ void __launch_bounds__(ATT_THREADS)
    bk_attn_bwd_dkdv_kernel(bk_attn_geom g, const T *Q, const T *K, const T *V, const T *dO,
                            const float *lse, const float *delta, float *dK, float *dV,
                            unsigned long long *stats)
{
    BK_SHARED_DYN(uint16_t, smem); /* K, V, Q, dO tiles [64][D + 8] */
    BK_ATT_PROLOGUE(g, D);
    BK_SHARED(float, lse2, ATT_ROWS);
    BK_SHARED(float, dlt, ATT_ROWS);
    const int hk = (int)blockIdx.y, group = g.h_q / g.h_kv;
    const int64_t j0 = (int64_t)blockIdx.x * ATT_ROWS;
    const int bk = g.n_kv - j0 < ATT_ROWS ? (int)(g.n_kv - j0) : ATT_ROWS;
    BK_SPTR(uint16_t) sk = smem;
    BK_SPTR(uint16_t) sv = smem + ATT_ROWS * LD;
    BK_SPTR(uint16_t) sq = smem + 2 * ATT_ROWS * LD;
    BK_SPTR(uint16_t) sdo = smem + 3 * ATT_ROWS * LD;
    const int lane = (int)threadIdx.x % 32, t4 = lane % 4;

    bk_att_load_pos(kpos, kseg, g.kv_pos, g.kv_seg, j0, g.n_kv, doc);
    bk_att_load_tile<D>(sk, K, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
    bk_att_load_tile<D>(sv, V, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
    __syncthreads();
    bk_att_tile_range(kpos, kseg, bk, ranges + 1);
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int v = 0; v < 4; v++) dk[j][v] = dv[j][v] = 0.0f;
    bk_att_counts counts = {0, 0, 0};

    for (int h = hk * group; h < (hk + 1) * group; h++)
        for (int64_t i0 = 0; i0 < g.n_q; i0 += ATT_ROWS) {
            const int bq = g.n_q - i0 < ATT_ROWS ? (int)(g.n_q - i0) : ATT_ROWS;
            bk_att_load_pos(qpos, qseg, g.q_pos, g.q_seg, i0, g.n_q, doc);
            __syncthreads();
            bk_att_tile_range(qpos, qseg, bq, ranges);
            const int cls = bk_att_classify(&g.mask, ranges, tile_class);
            bk_att_tally(&counts, cls);
            if (cls == BK_ATTN_TILE_SKIP) continue;
            bk_att_load_tile<D>(sq, Q, i0, g.n_q, qs, (int64_t)h * g.d, g.d);
            bk_att_load_tile<D>(sdo, dO, i0, g.n_q, qs, (int64_t)h * g.d, g.d);
            bk_att_load_rowstats(lse2, dlt, lse, delta, i0, g.n_q, h, g.h_q);
            __syncthreads();
/* 32 queries at a time, so that only P^T [16 x 32] and a 16 x 16
 * slice of dP^T are live beside the dK and dV accumulators */
/* unrolled, the two halves' loads are hoisted and spill */
#pragma unroll 1
            for (int half = 0; half < 2; half++) {
                float p[4][4];
                bk_att_mma_abt<D, 2>(p, sk, r0, sq, 2 * half); /* S^T */
                if (cls == BK_ATTN_TILE_PARTIAL || bk < ATT_ROWS || bq < ATT_ROWS)
                    bk_att_mask<4>(p, r0, 32 * half, bk, bq, cls == BK_ATTN_TILE_PARTIAL, 0,
                                   &g.mask, kpos, kseg, qpos, qseg);
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int v = 0; v < 4; v++)
                        p[j][v] = exp2f(p[j][v] * sl2 - lse2[32 * half + 8 * j + 2 * t4 + v % 2]);
                /* dV += P^T dO */
                bk_att_mma_pb_step<D>(dv, p[0], p[1], sdo, 2 * half);
                bk_att_mma_pb_step<D>(dv, p[2], p[3], sdo, 2 * half + 1);
#pragma unroll
                for (int k2 = 0; k2 < 2; k2++) {
                    const int kk = 2 * half + k2;
                    float ds[2][4];
                    bk_att_mma_abt<D, 1>(ds, sv, r0, sdo, kk); /* dP^T = V dO^T */
#pragma unroll
                    for (int j = 0; j < 2; j++)
#pragma unroll
                        for (int v = 0; v < 4; v++)
                            ds[j][v] =
                                bk_attn_dscore(p[2 * k2 + j][v], ds[j][v],
                                               dlt[16 * kk + 8 * j + 2 * t4 + v % 2], g.scale);
                    bk_att_mma_pb_step<D>(dk, ds[0], ds[1], sq, kk); /* dK += dS^T Q */
                }
            }
            __syncthreads(); /* Q, dO and the query positions are replaced next */
        }
    bk_att_count(stats, counts);
    bk_att_add_rows<D>(dK, dk, j0 + r0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
    bk_att_add_rows<D>(dV, dv, j0 + r0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
}

/* ---------------------------------------------------------------- dQ */

template <int D, class T>
__global__ void __launch_bounds__(ATT_THREADS)
    bk_attn_bwd_dq_kernel(bk_attn_geom g, const T *Q, const T *K, const T *V, const T *dO,
                          const float *lse, const float *delta, float *dQ)
{
    BK_SHARED_DYN(uint16_t, smem); /* Q, dO, K, V tiles [64][D + 8] */
    BK_ATT_PROLOGUE(g, D);
    BK_SHARED(float, lse2, ATT_ROWS);
    BK_SHARED(float, dlt, ATT_ROWS);
    const int h = (int)blockIdx.y, hk = h / (g.h_q / g.h_kv);
    const int64_t i0 = (int64_t)blockIdx.x * ATT_ROWS;
    const int bq = g.n_q - i0 < ATT_ROWS ? (int)(g.n_q - i0) : ATT_ROWS;
    BK_SPTR(uint16_t) sq = smem;
    BK_SPTR(uint16_t) sdo = smem + ATT_ROWS * LD;
    BK_SPTR(uint16_t) sk = smem + 2 * ATT_ROWS * LD;
    BK_SPTR(uint16_t) sv = smem + 3 * ATT_ROWS * LD;
    const int lane = (int)threadIdx.x % 32, g4 = lane / 4;

    bk_att_load_pos(qpos, qseg, g.q_pos, g.q_seg, i0, g.n_q, doc);
    bk_att_load_tile<D>(sq, Q, i0, g.n_q, qs, (int64_t)h * g.d, g.d);
    bk_att_load_tile<D>(sdo, dO, i0, g.n_q, qs, (int64_t)h * g.d, g.d);
    bk_att_load_rowstats(lse2, dlt, lse, delta, i0, g.n_q, h, g.h_q);
    __syncthreads();
    bk_att_tile_range(qpos, qseg, bq, ranges);
    float dq[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int64_t j0 = 0; j0 < g.n_kv; j0 += ATT_ROWS) {
        const int bk = g.n_kv - j0 < ATT_ROWS ? (int)(g.n_kv - j0) : ATT_ROWS;
        bk_att_load_pos(kpos, kseg, g.kv_pos, g.kv_seg, j0, g.n_kv, doc);
        __syncthreads();
        bk_att_tile_range(kpos, kseg, bk, ranges + 1);
        const int cls = bk_att_classify(&g.mask, ranges, tile_class);
        if (cls == BK_ATTN_TILE_SKIP) continue;
        bk_att_load_tile<D>(sk, K, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
        bk_att_load_tile<D>(sv, V, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
        __syncthreads();
        float p[8][4], ds[8][4];
        bk_att_mma_abt<D, 4>(p, sq, r0, sk, 0); /* S = Q K^T */
        if (cls == BK_ATTN_TILE_PARTIAL || bk < ATT_ROWS || bq < ATT_ROWS)
            bk_att_mask<8>(p, r0, 0, bq, bk, cls == BK_ATTN_TILE_PARTIAL, 1, &g.mask, qpos, qseg,
                           kpos, kseg);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int v = 0; v < 4; v++)
                p[j][v] = exp2f(p[j][v] * sl2 - lse2[r0 + g4 + 8 * (v / 2)]);
        bk_att_mma_abt<D, 4>(ds, sdo, r0, sv, 0); /* dP = dO V^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int v = 0; v < 4; v++)
                ds[j][v] = bk_attn_dscore(p[j][v], ds[j][v], dlt[r0 + g4 + 8 * (v / 2)], g.scale);
        bk_att_mma_pb<D>(dq, ds, sk); /* dQ += dS K */
        __syncthreads();              /* K, V and the key positions are replaced next */
    }
    bk_att_add_rows<D>(dQ, dq, i0 + r0, g.n_q, qs, (int64_t)h * g.d, g.d);
}

/* ---------------------------------------------------------------- launcher */

template <class T> static const char *type_name(void)
{
    return sizeof(T) == 2 ? "bf16" : "float";
}

template <int D, class T>
static bk_status launch_bwd(const bk_queue *q, const bk_attn_geom *g, const void *Qv,
                            const void *Kv, const void *Vv, const void *dOv, const float *lse,
                            const float *delta, float *dQ, float *dK, float *dV,
                            unsigned long long *stats)
{
    const T *Q = static_cast<const T *>(Qv), *K = static_cast<const T *>(Kv);
    const T *V = static_cast<const T *>(Vv), *dO = static_cast<const T *>(dOv);
    void (*dkdv)(bk_attn_geom, const T *, const T *, const T *, const T *, const float *,
                 const float *, float *, float *, unsigned long long *) =
        bk_attn_bwd_dkdv_kernel<D, T>;
    void (*dq)(bk_attn_geom, const T *, const T *, const T *, const T *, const float *,
               const float *, float *) = bk_attn_bwd_dq_kernel<D, T>;
    size_t smem = bk_att_smem(D, 4);
    bk_status st = bk_att_allow_smem((const void *)dkdv, smem);
    if (st == BK_OK) st = bk_att_allow_smem((const void *)dq, smem);
    if (st != BK_OK) return st;
    char name[64];
    snprintf(name, sizeof name, "bk_attn_bwd_dkdv_kernel<%d, %s>", D, type_name<T>());
    dim3 grid_kv((unsigned)((g->n_kv + ATT_ROWS - 1) / ATT_ROWS), (unsigned)g->h_kv);
    /* both kernels read Q, K, V, dO, lse, delta and the mask's rows, and add
     * into their gradients (read and written) */
    int64_t inputs = 2 * bk_att_q_bytes(g, sizeof(T)) + 2 * bk_att_kv_bytes(g, sizeof(T)) +
                     2 * bk_att_row_floats_bytes(g) + bk_att_mask_bytes(g);
    int64_t dkdv_bytes = 2 * bk_att_kv_bytes(g, sizeof(float)),
            dq_bytes = bk_att_q_bytes(g, sizeof(float));
    BK_FOOTPRINT_TILES(inputs + dkdv_bytes, dkdv_bytes);
    st = BK_LAUNCH_NAMED(name, dkdv, grid_kv, dim3(ATT_THREADS), smem, q->stream, *g, Q, K, V, dO,
                         lse, delta, dK, dV, stats);
    if (st != BK_OK) return st;
    snprintf(name, sizeof name, "bk_attn_bwd_dq_kernel<%d, %s>", D, type_name<T>());
    dim3 grid_q((unsigned)((g->n_q + ATT_ROWS - 1) / ATT_ROWS), (unsigned)g->h_q);
    BK_FOOTPRINT_TILES(inputs + dq_bytes, dq_bytes);
    return BK_LAUNCH_NAMED(name, dq, grid_q, dim3(ATT_THREADS), smem, q->stream, *g, Q, K, V, dO,
                           lse, delta, dQ);
}

extern "C" bk_status BK_DEV_FN(attn_bwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q,
                                         const void *K, const void *V, const void *dO,
                                         bk_dtype in_type, const float *lse, const float *delta,
                                         float *dQ, float *dK, float *dV, bk_attn_stats *stats)
{
    const void *bufs[4] = {Q, K, V, dO};
    bk_status st = bk_att_check(q, g, bufs, 4);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(in_type == BK_F32 || in_type == BK_BF16);
    if (g->n_q > 0)
        BK_CHECK_ARG(Q != NULL && dO != NULL && lse != NULL && delta != NULL && dQ != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL && dK != NULL && dV != NULL);
    BK_DEV_PTRS(Q, K, V, dO, lse, delta, dQ, dK, dV, g->q_pos, g->kv_pos, g->mask.block_bits);
    if (g->mask.flags & BK_ATTN_DOCUMENT) BK_DEV_PTRS(g->q_seg, g->kv_seg);
    if (g->n_q == 0 || g->n_kv == 0) return bk_att_stats_end(q, g, stats, NULL, BK_OK);
    unsigned long long *dev = NULL;
    st = bk_att_stats_begin(q, stats, &dev);
    if (st == BK_OK) {
        if (g->d <= 64)
            st = in_type == BK_BF16
                     ? launch_bwd<64, uint16_t>(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, dev)
                     : launch_bwd<64, float>(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, dev);
        else
            st = in_type == BK_BF16
                     ? launch_bwd<128, uint16_t>(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, dev)
                     : launch_bwd<128, float>(q, g, Q, K, V, dO, lse, delta, dQ, dK, dV, dev);
    }
    return bk_att_stats_end(q, g, stats, dev, st);
}
