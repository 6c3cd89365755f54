/* attention_fwd.cu: forward attention of one (query block, key/value block)
 * pair on the device, merged in place into the running (O, lse): the contract
 * of bk_attn_fwd (kernels/attention.h), on tensor cores.
 *
 * Q, K, V [n, heads, d] are fp32 or bf16 (rounded to bf16 as they are loaded:
 * the products run in bf16 with fp32 accumulation); O [n_q, h_q, d] and
 * lse [n_q, h_q] are fp32. One block per (query tile of 64 rows, query head);
 * GQA reads key/value head h / (h_q / h_kv) in place. The block keeps its Q
 * tile in registers (A fragments) and walks the key tiles:
 *   - the key tile's positions and segments are summarised and the pair of
 *     tiles classified (kernels/attention_tile.h, the CPU's classification):
 *     a SKIP tile costs no K/V load and no arithmetic;
 *   - S = Q K^T (mma.sync m16n8k16), masked elementwise on PARTIAL tiles
 *     (bk_attn_allowed on global positions) and past the ragged ends,
 *     scaled to base 2;
 *   - online softmax per row (max over the 4 lanes of a row's quad;
 *     bk_attn_online_rescale / bk_attn_exp_offset), P = exp2(S - offset);
 *   - O += P V, with P rounded to bf16 straight from the accumulators.
 * At the end each row's block lse (bk_attn_block_lse) and normalised output
 * are merged into (O, lse) with bk_attn_merge_weights, exactly as the CPU
 * kernel does. A query tile whose key tiles are all skipped writes nothing;
 * a row with no allowed key ends as O = 0, lse = -inf. */
#include "kernels/cuda/attention_tile.cuh"

/* The row max of the quad (4 lanes holding one row), and the online-softmax
 * update of the running max m2 and sum l of the lane's two rows. */
static __device__ __forceinline__ void bk_att_softmax_tile(float s[8][4], float m2[2], float l[2],
                                                           float alpha[2])
{
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) mx = s[j][2 * r + e] > mx ? s[j][2 * r + e] : mx;
#pragma unroll
        for (int o = 1; o < 4; o *= 2) {
            float w = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = w > mx ? w : mx;
        }
        alpha[r] = bk_attn_online_rescale(&m2[r], mx);
        float off = bk_attn_exp_offset(m2[r]), sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp2f(s[j][2 * r + e] - off);
                s[j][2 * r + e] = p;
                sum += p;
            }
        l[r] = l[r] * alpha[r] + sum; /* this lane's part of the row sum */
    }
}

/* Merges the warp's rows (normalised by their sums) into the running (O, lse). */
template <int D>
static __device__ __forceinline__ void
bk_att_merge_rows(const bk_attn_geom &g, int h, int64_t i0, int r0, float o[D / 8][4],
                  const float m2[2], float l[2], float *O, float *lse)
{
    int lane = (int)threadIdx.x % 32, gr = lane / 4, t = lane % 4;
    float w_old[2], cb[2], lse_new[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int o2 = 1; o2 < 4; o2 *= 2) l[r] += __shfl_xor_sync(0xffffffffu, l[r], o2);
        int64_t row = i0 + r0 + gr + 8 * r;
        float lse_old = row < g.n_q ? lse[row * g.h_q + h] : -INFINITY, w_blk;
        lse_new[r] =
            bk_attn_merge_weights(lse_old, bk_attn_block_lse(m2[r], l[r]), &w_old[r], &w_blk);
        cb[r] = l[r] > 0.0f ? w_blk / l[r] : 0.0f;
    }
    __syncwarp(); /* every lane has read lse before one lane of each quad writes it */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t row = i0 + r0 + gr + 8 * r;
        if (row >= g.n_q) continue;
        float *orow = O + (row * g.h_q + h) * (int64_t)g.d; /* O[row, h, :] */
#pragma unroll
        for (int jd = 0; jd < D / 8; jd++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * jd + 2 * t + e;
                if (c < g.d) orow[c] = orow[c] * w_old[r] + o[jd][2 * r + e] * cb[r];
            }
        if (t == 0) lse[row * g.h_q + h] = lse_new[r];
    }
}

template <int D, class T>
__global__ void __launch_bounds__(ATT_THREADS)
    bk_attn_fwd_kernel(bk_attn_geom g, const T *Q, const T *K, const T *V, float *O, float *lse,
                       unsigned long long *stats)
{
    BK_SHARED_DYN(uint16_t, smem); /* Q, K, V tiles [64][D + 8] */
    BK_ATT_PROLOGUE(g, D);
    const int h = (int)blockIdx.y, hk = h / (g.h_q / g.h_kv);
    const int64_t i0 = (int64_t)blockIdx.x * ATT_ROWS;
    const int bq = g.n_q - i0 < ATT_ROWS ? (int)(g.n_q - i0) : ATT_ROWS;
    BK_SPTR(uint16_t) sq = smem;
    BK_SPTR(uint16_t) sk = smem + ATT_ROWS * LD;
    BK_SPTR(uint16_t) sv = smem + 2 * ATT_ROWS * LD;

    bk_att_load_pos(qpos, qseg, g.q_pos, g.q_seg, i0, g.n_q, doc);
    bk_att_load_tile<D>(sq, Q, i0, g.n_q, qs, (int64_t)h * g.d, g.d);
    __syncthreads();
    bk_att_tile_range(qpos, qseg, bq, ranges);
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) bk_att_frag_a(qf[kk], sq, LD, r0, 16 * kk);
    float o[D / 8][4], m2[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    bk_att_counts counts = {0, 0, 0};
    int live = 0;

    for (int64_t j0 = 0; j0 < g.n_kv; j0 += ATT_ROWS) {
        const int bk = g.n_kv - j0 < ATT_ROWS ? (int)(g.n_kv - j0) : ATT_ROWS;
        bk_att_load_pos(kpos, kseg, g.kv_pos, g.kv_seg, j0, g.n_kv, doc);
        __syncthreads();
        bk_att_tile_range(kpos, kseg, bk, ranges + 1);
        __syncthreads();
        if (threadIdx.x == 0)
            tile_class[0] = bk_attn_classify_tiles(&g.mask, &ranges[0], &ranges[1]);
        __syncthreads();
        const int cls = tile_class[0];
        bk_att_tally(&counts, cls);
        if (cls == BK_ATTN_TILE_SKIP) continue;
        live = 1;
        bk_att_load_tile<D>(sk, K, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
        bk_att_load_tile<D>(sv, V, j0, g.n_kv, ks, (int64_t)hk * g.d, g.d);
        __syncthreads();
        float s[8][4];
        bk_att_mma_abt<D, 4>(s, sq, r0, sk, 0);
        if (cls == BK_ATTN_TILE_PARTIAL || bk < ATT_ROWS || bq < ATT_ROWS)
            bk_att_mask<8>(s, r0, 0, bq, bk, cls == BK_ATTN_TILE_PARTIAL, 1, &g.mask, qpos, qseg,
                           kpos, kseg);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) s[j][v] *= sl2;
        float alpha[2];
        bk_att_softmax_tile(s, m2, l, alpha);
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) o[j][v] *= alpha[v / 2];
        bk_att_mma_pb<D>(o, s, sv);
        __syncthreads(); /* K, V and the key positions are replaced next */
    }
    bk_att_count(stats, counts);
    if (live) bk_att_merge_rows<D>(g, h, i0, r0, o, m2, l, O, lse);
}

/* ---------------------------------------------------------------- launcher */

template <int D, class T>
static bk_status launch_fwd(const bk_queue *q, const bk_attn_geom *g, const void *Q, const void *K,
                            const void *V, float *O, float *lse, unsigned long long *stats)
{
    void (*kernel)(bk_attn_geom, const T *, const T *, const T *, float *, float *,
                   unsigned long long *) = bk_attn_fwd_kernel<D, T>;
    size_t smem = bk_att_smem(D, 3);
    bk_status st = bk_att_allow_smem((const void *)kernel, smem);
    if (st != BK_OK) return st;
    dim3 grid((unsigned)((g->n_q + ATT_ROWS - 1) / ATT_ROWS), (unsigned)g->h_q);
    const char *name =
        D == 64
            ? (sizeof(T) == 2 ? "bk_attn_fwd_kernel<64, bf16>" : "bk_attn_fwd_kernel<64, float>")
            : (sizeof(T) == 2 ? "bk_attn_fwd_kernel<128, bf16>" : "bk_attn_fwd_kernel<128, float>");
    /* Q, K, V, the mask's rows, and O and lse, merged into in place */
    int64_t out = bk_att_q_bytes(g, sizeof(float)) + bk_att_row_floats_bytes(g);
    BK_FOOTPRINT_TILES(bk_att_q_bytes(g, sizeof(T)) + 2 * bk_att_kv_bytes(g, sizeof(T)) +
                           bk_att_mask_bytes(g) + out,
                       out);
    return BK_LAUNCH_NAMED(name, kernel, grid, dim3(ATT_THREADS), smem, q->stream, *g,
                           static_cast<const T *>(Q), static_cast<const T *>(K),
                           static_cast<const T *>(V), O, lse, stats);
}

extern "C" bk_status BK_DEV_FN(attn_fwd)(const bk_queue *q, const bk_attn_geom *g, const void *Q,
                                         const void *K, const void *V, bk_dtype in_type, float *O,
                                         float *lse, bk_attn_stats *stats)
{
    const void *bufs[3] = {Q, K, V};
    bk_status st = bk_att_check(q, g, bufs, 3);
    if (st != BK_OK) return st;
    BK_CHECK_ARG(in_type == BK_F32 || in_type == BK_BF16);
    if (g->n_q > 0) BK_CHECK_ARG(Q != NULL && O != NULL && lse != NULL);
    if (g->n_kv > 0) BK_CHECK_ARG(K != NULL && V != NULL);
    BK_DEV_PTRS(Q, K, V, O, lse, g->q_pos, g->kv_pos, g->mask.block_bits);
    if (g->mask.flags & BK_ATTN_DOCUMENT) BK_DEV_PTRS(g->q_seg, g->kv_seg);
    if (g->n_q == 0 || g->n_kv == 0) return bk_att_stats_end(q, g, stats, NULL, BK_OK);
    unsigned long long *dev = NULL;
    st = bk_att_stats_begin(q, stats, &dev);
    if (st == BK_OK) {
        if (g->d <= 64)
            st = in_type == BK_BF16 ? launch_fwd<64, uint16_t>(q, g, Q, K, V, O, lse, dev)
                                    : launch_fwd<64, float>(q, g, Q, K, V, O, lse, dev);
        else
            st = in_type == BK_BF16 ? launch_fwd<128, uint16_t>(q, g, Q, K, V, O, lse, dev)
                                    : launch_fwd<128, float>(q, g, Q, K, V, O, lse, dev);
    }
    return bk_att_stats_end(q, g, stats, dev, st);
}
