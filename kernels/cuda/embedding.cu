/* embedding.cu: token embedding on the device: out [n, D] = table [V, D] at
 * tokens [n], and the backward dtable [V, D] += dout [n, D] at tokens.
 *
 * The scatter-add is deterministic without atomics or sorting, by per-row
 * ownership: warp w of W owns the table rows v with v % W == w. Each warp
 * reads the token list 32 at a time, finds with a ballot the positions whose
 * token it owns, and adds those gradient rows in increasing position, its 32
 * lanes along D. A table row therefore receives its additions in token order,
 * one after another, whatever W and the scheduling: the same sums, bit for
 * bit, as the CPU kernel. Every warp reads the whole token list (8 bytes per
 * token, from L2), the price of needing no sort.
 *
 * Tokens outside [0, V) are refused (BK_ERR_ARG) before anything is written. */
#include "kernels/cuda/dev_common.cuh"

enum { EMB_THREADS = 128 };
static const int64_t EMB_MAX_OWNERS = 4096;

__global__ void bk_embedding_gather_kernel(int64_t n, int64_t D, const int64_t *tokens,
                                           const float *table, float *out)
{
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *src = table + tokens[r] * D; /* table[tokens[r], :] */
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) out[r * D + j] = src[j];
    }
}

__global__ void bk_embedding_scatter_kernel(int64_t n, int64_t D, const int64_t *tokens,
                                            const float *dout, float *dtable, int64_t owners)
{
    int lane = (int)threadIdx.x % 32;
    int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    if (w >= owners) return; /* whole warps: owners is counted in warps */
    for (int64_t r0 = 0; r0 < n; r0 += 32) {
        int64_t r = r0 + lane, tok = r < n ? tokens[r] : 0;
        unsigned mine = __ballot_sync(0xffffffffu, r < n && tok % owners == w);
        while (mine != 0u) {
            int b = __ffs((int)mine) - 1;
            mine &= mine - 1u;
            int64_t t = __shfl_sync(0xffffffffu, tok, b);
            const float *g = dout + (r0 + b) * D; /* dout[r0 + b, :] */
            float *dst = dtable + t * D;          /* dtable[t, :] */
            for (int64_t j = lane; j < D; j += 32) dst[j] += g[j];
        }
    }
}

static bk_status check_tokens(const bk_queue *q, int64_t n, int64_t V, const int64_t *tokens)
{
    int64_t bad = 0;
    bk_status st = BK_DEV_FN(count_outside)(q, tokens, n, 0, V, 0, 0, &bad);
    if (st != BK_OK) return st;
    return bad == 0 ? BK_OK : BK_ERR_ARG;
}

extern "C" bk_status BK_DEV_FN(embedding_gather)(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                                 const int64_t *tokens, const float *table,
                                                 float *out)
{
    BK_CHECK_ARG(n >= 0 && V > 0 && D > 0);
    BK_CHECK_ARG(tokens != NULL && table != NULL && out != NULL);
    BK_DEV_PTRS(tokens, table, out);
    if (n == 0) return BK_OK;
    bk_status st = check_tokens(q, n, V, tokens);
    if (st != BK_OK) return st;
    unsigned blocks = bk_blocks_for(n);
    BK_FOOTPRINT(n * (sizeof *tokens + D * sizeof(float)), n * D * sizeof(float)); /* rows */
    return BK_LAUNCH(bk_embedding_gather_kernel, dim3(blocks), dim3(EMB_THREADS), 0, q->stream, n,
                     D, tokens, table, out);
}

extern "C" bk_status BK_DEV_FN(embedding_scatter_add)(const bk_queue *q, int64_t n, int64_t V,
                                                      int64_t D, const int64_t *tokens,
                                                      const float *dout, float *dtable)
{
    BK_CHECK_ARG(n >= 0 && V > 0 && D > 0);
    BK_CHECK_ARG(tokens != NULL && dout != NULL && dtable != NULL);
    BK_DEV_PTRS(tokens, dout, dtable);
    if (n == 0) return BK_OK;
    bk_status st = check_tokens(q, n, V, tokens);
    if (st != BK_OK) return st;
    int64_t owners = V < EMB_MAX_OWNERS ? V : EMB_MAX_OWNERS;
    unsigned blocks = (unsigned)((owners * 32 + EMB_THREADS - 1) / EMB_THREADS);
    /* the tokens, dout and the table's rows they name read; those rows written */
    BK_FOOTPRINT(n * (sizeof *tokens + 2 * D * sizeof(float)), n * D * sizeof(float));
    return BK_LAUNCH(bk_embedding_scatter_kernel, dim3(blocks), dim3(EMB_THREADS), 0, q->stream, n,
                     D, tokens, dout, dtable, owners);
}
