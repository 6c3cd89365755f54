/* sdpa_model.cu: a model of cuDNN's fused SDPA (forward with Stats, backward)
 * for the emulated device, written from cuDNN's and its frontend's
 * documentation, never from our callers: what a GPU build gives cuDNN
 * (kernels/sdpa_graph.h, the same translation cudnn_sdpa.cc uses) is what
 * this model checks and computes from.
 *
 * It checks what cuDNN checks, and is stricter where the documentation leaves
 * it open: bf16 tensors [b, h, s, d] with d contiguous and d a multiple of 8
 * up to 128; Stats fp32 [b, h, s, 1] packed (what 9.19 reads and writes); a
 * right bound >= 0 and a left bound >= 1; no left bound and no bottom-right
 * alignment with s_q > s_kv on a dense call; not s_q = s_kv = 1; ragged
 * offsets inside their buffers; base pointers 16-byte aligned; a plan made
 * before the call (bk_sdpa_prepare: the first step compiles nothing) and the
 * workspace it asked for. A row with no allowed key is not defined by cuDNN:
 * here it gets NaN in O and Stats, so a caller that lets one through sees it.
 *
 * The arithmetic is a double-precision reference, rounded as cuDNN rounds its
 * outputs: O, dQ, dK, dV to bf16, Stats (natural-log lse) to fp32; the
 * backward computes delta = rowsum(dO O) itself from the bf16 O it is given.
 * One emulated thread per output row (and head), so the streams, hazards and
 * races of the emulator see the model as they see our kernels.
 *
 * Planted bugs (BK_EMU_SDPA_PLANT=NAME, for the tests that must catch them):
 * "transposed-stride" (Q's h and s strides swapped), "stats-strided" (Stats
 * described as our [n, h] lse), "window-bound" (a left bound one wider),
 * "lse-base2" (Stats written in base 2). The version the model answers is
 * BK_EMU_CUDNN_VERSION (default 91900). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/cuda/dev_common.cuh"
#include "kernels/sdpa_graph.h"

enum { MODEL_THREADS = 64, MODEL_MAX_D = 128, MODEL_MAX_PLANS = 256 };

/* ---------------------------------------------------------------- planted bugs */
typedef enum { PLANT_NONE, PLANT_STRIDE, PLANT_STATS, PLANT_WINDOW, PLANT_BASE2 } model_plant;

static model_plant planted(void)
{
    const char *p = getenv("BK_EMU_SDPA_PLANT");
    if (!p || !*p) return PLANT_NONE;
    if (!strcmp(p, "transposed-stride")) return PLANT_STRIDE;
    if (!strcmp(p, "stats-strided")) return PLANT_STATS;
    if (!strcmp(p, "window-bound")) return PLANT_WINDOW;
    if (!strcmp(p, "lse-base2")) return PLANT_BASE2;
    return PLANT_NONE;
}

/* What our translation would give cuDNN, with the planted bug if any. */
static int model_graph(const bk_sdpa_call *c, bk_sdpa_graph *g)
{
    if (bk_sdpa_describe(c, g) != 0) return -1;
    model_plant p = planted();
    if (p == PLANT_STRIDE) {
        int64_t t = g->q.stride[1];
        g->q.stride[1] = g->q.stride[2];
        g->q.stride[2] = t;
    } else if (p == PLANT_STATS) {
        g->stats.stride[1] = 1;
        g->stats.stride[2] = g->stats.dim[1];
    } else if (p == PLANT_WINDOW && g->band.has_left) {
        g->band.left += 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- cuDNN's checks */
static bk_status refuse(const char *what)
{
    return bk_device_failed("cudnn sdpa (emulator model)", what);
}

static bool tensor_ok(const bk_sdpa_tensor *t)
{
    return t->dim[3] % 8 == 0 && t->dim[3] <= MODEL_MAX_D && t->stride[3] == 1 &&
           t->stride[1] >= t->dim[3] && t->stride[2] >= t->dim[3];
}

static bool stats_packed(const bk_sdpa_graph *g)
{
    const bk_sdpa_tensor *s = &g->stats;
    return s->dim[3] == 1 && s->stride[2] == 1 && s->stride[1] == s->dim[2] &&
           s->stride[0] == s->dim[1] * s->dim[2];
}

/* The frontend's and the backend's refusals that concern our calls. */
static const char *graph_refusal(const bk_sdpa_graph *g)
{
    int64_t s_q = g->q.dim[2], s_kv = g->k.dim[2];
    if (!tensor_ok(&g->q) || !tensor_ok(&g->k) || !tensor_ok(&g->v) || !tensor_ok(&g->o))
        return "a tensor is not [b, h, s, d] bf16 with d contiguous, d % 8 == 0 and d <= 128";
    if (g->q.dim[1] % g->k.dim[1] != 0) return "h_q is not a multiple of h_kv";
    if (!stats_packed(g)) return "Stats must be fp32 [b, h, s, 1] packed (strides h s, s, 1, 1)";
    if (s_q == 1 && s_kv == 1) return "s_q = s_kv = 1 is not supported";
    if (g->band.has_right && g->band.right < 0) return "right bound must be >= 0";
    if (g->band.has_left && g->band.left <= 0) return "left bound must be > 0";
    if (!g->ragged && g->band.has_left && s_q > s_kv)
        return "sliding window needs s_q <= s_kv without a padding mask";
    if (!g->ragged && g->band.align == BK_SDPA_BOTTOM_RIGHT && g->band.has_right && s_q > s_kv)
        return "bottom-right alignment does not support s_q > s_kv";
    return NULL;
}

/* ---------------------------------------------------------------- plans */
/* A plan is a graph's shape and mask: what cuDNN compiles; the ragged
 * lengths and offsets are data given at execution. */
typedef struct {
    int backward, ragged;
    int64_t q_dim[4], k_dim[4];
    bk_sdpa_band band;
} model_plan;

static model_plan plans[MODEL_MAX_PLANS];
static int n_plans;

static model_plan plan_of(const bk_sdpa_graph *g, int backward)
{
    model_plan p;
    memset(&p, 0, sizeof p);
    p.backward = backward;
    p.ragged = g->ragged;
    memcpy(p.q_dim, g->q.dim, sizeof p.q_dim);
    memcpy(p.k_dim, g->k.dim, sizeof p.k_dim);
    p.band = g->band;
    return p;
}

static bool plan_made(const model_plan *p)
{
    for (int k = 0; k < n_plans; k++)
        if (memcmp(&plans[k], p, sizeof *p) == 0) return true;
    return false;
}

/* The workspace the model's plans ask for: the backward's fp32 dQ
 * accumulator and its delta, as cuDNN's Hopper backward keeps them. */
static size_t workspace_of(const bk_sdpa_graph *g, int backward)
{
    if (!backward) return 0;
    size_t rows = (size_t)g->q.dim[0] * (size_t)g->q.dim[1] * (size_t)g->q.dim[2];
    return rows * ((size_t)g->q.dim[3] + 1) * sizeof(float);
}

extern "C" long bk_emu_sdpa_version(void)
{
    const char *v = getenv("BK_EMU_CUDNN_VERSION");
    return v && *v ? strtol(v, NULL, 10) : 91900;
}

extern "C" int bk_emu_sdpa_available(char *why, size_t why_len)
{
    snprintf(why, why_len, "the emulator's model of cuDNN %ld", bk_emu_sdpa_version());
    return 1;
}

extern "C" bk_status bk_emu_sdpa_prepare(const bk_sdpa_call *calls, int n, int backward,
                                         size_t *workspace_bytes)
{
    *workspace_bytes = 0;
    for (int k = 0; k < n; k++) {
        bk_sdpa_graph g;
        if (model_graph(&calls[k], &g) != 0) return refuse("not a well-formed SDPA call");
        const char *no = graph_refusal(&g);
        if (no) return bk_device_failed("cudnn sdpa (emulator model): graph refused", no);
        for (int pass = 0; pass <= backward; pass++) {
            model_plan p = plan_of(&g, pass);
            if (!plan_made(&p)) {
                if (n_plans == MODEL_MAX_PLANS) return refuse("too many plans");
                plans[n_plans++] = p;
            }
            size_t ws = workspace_of(&g, pass);
            if (ws > *workspace_bytes) *workspace_bytes = ws;
        }
    }
    return BK_OK;
}

/* The checks every execution makes: the graph cuDNN takes, its plan made at
 * setup, the workspace, the pointers' alignment. */
static bk_status check_execution(const bk_sdpa_call *c, int backward, bk_sdpa_graph *g,
                                 const void *const *ptrs, int n_ptrs, size_t workspace_bytes)
{
    if (model_graph(c, g) != 0) return refuse("not a well-formed SDPA call");
    const char *no = graph_refusal(g);
    if (no) return bk_device_failed("cudnn sdpa (emulator model): graph refused", no);
    model_plan p = plan_of(g, backward);
    if (!plan_made(&p))
        return refuse("no plan made for this graph: bk_sdpa_prepare it at setup, not at a step");
    if (workspace_bytes < workspace_of(g, backward)) return refuse("workspace too small");
    for (int k = 0; k < n_ptrs; k++)
        if ((uintptr_t)ptrs[k] % 16 != 0) return refuse("a tensor's pointer is not 16-byte aligned");
    return BK_OK;
}

/* Bytes of the bf16 tensors a fused call touches once each (the account's
 * footprint, kernels/cuda/bk_cuda.cuh): `tensors` of Q's and K's sizes in
 * turn (Q, K, V, then O and dO as Q), from the graph's dims. */
static int64_t model_bytes(const bk_sdpa_graph *g, int tensors)
{
    int64_t q = g->q.dim[0] * g->q.dim[1] * g->q.dim[2] * g->q.dim[3] * 2;
    int64_t k = g->k.dim[0] * g->k.dim[1] * g->k.dim[2] * g->k.dim[3] * 2;
    const int64_t each[5] = {q, k, k, q, q};
    int64_t sum = 0;
    for (int t = 0; t < tensors && t < 5; t++) sum += each[t];
    return sum;
}

/* ---------------------------------------------------------------- the reference */
/* The calling thread's index in the grid, and the grid's threads: each
 * kernel strides its rows by them. Read through functions that are not
 * inlined: at -O3 GCC otherwise takes the address of the thread-local grid
 * size's GOT slot in a way the linker cannot relax. */
static __device__ __attribute__((noinline)) int64_t model_thread(void)
{
    return blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
}
static __device__ __attribute__((noinline)) int64_t model_threads(void)
{
    return (int64_t)gridDim.x * blockDim.x;
}

/* The element offset of (b, h, s, e) of t in a graph. */
static __device__ __forceinline__ int64_t at(const bk_sdpa_tensor *t, int ragged, int64_t b,
                                              int64_t h, int64_t s, int64_t e)
{
    int64_t start = t->base + (ragged ? t->ragged_offset[b] : b * t->stride[0]);
    return start + h * t->stride[1] + s * t->stride[2] + e * t->stride[3];
}

static __device__ __forceinline__ int64_t len_q(const bk_sdpa_graph *g, int64_t b)
{
    return g->ragged ? g->seq_len_q[b] : g->q.dim[2];
}
static __device__ __forceinline__ int64_t len_kv(const bk_sdpa_graph *g, int64_t b)
{
    return g->ragged ? g->seq_len_kv[b] : g->k.dim[2];
}

/* The scaled score of (b, h, i) against key j, in double. */
static __device__ double score(const bk_sdpa_graph *g, const uint16_t *Q, const uint16_t *K,
                               int64_t b, int64_t h, int64_t i, int64_t j)
{
    int64_t hk = h / (g->q.dim[1] / g->k.dim[1]);
    double s = 0.0;
    for (int64_t e = 0; e < g->q.dim[3]; e++)
        s += (double)bk_bf16_to_float(Q[at(&g->q, g->ragged, b, h, i, e)]) *
             (double)bk_bf16_to_float(K[at(&g->k, g->ragged, b, hk, j, e)]);
    return s * (double)g->attn_scale;
}

/* Natural-log lse of row (b, h, i) over its allowed keys; -inf when none. */
static __device__ double row_lse(const bk_sdpa_graph *g, const uint16_t *Q, const uint16_t *K,
                                 int64_t b, int64_t h, int64_t i)
{
    int64_t lq = len_q(g, b), lk = len_kv(g, b);
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < lk; j++)
        if (bk_sdpa_allowed(&g->band, lq, lk, i, j)) m = fmax(m, score(g, Q, K, b, h, i, j));
    if (m == -INFINITY) return m;
    for (int64_t j = 0; j < lk; j++)
        if (bk_sdpa_allowed(&g->band, lq, lk, i, j)) sum += exp(score(g, Q, K, b, h, i, j) - m);
    return m + log(sum);
}

/* One thread per (b, h, i) of the query rows: O_blk and Stats. */
__global__ void bk_sdpa_model_fwd_kernel(bk_sdpa_graph g, const uint16_t *Q, const uint16_t *K,
                                         const uint16_t *V, uint16_t *O, float *stats, int base2)
{
    int64_t H = g.q.dim[1], S = g.q.dim[2], rows = g.q.dim[0] * H * S;
    for (int64_t t = model_thread(); t < rows; t += model_threads()) {
        int64_t b = t / (H * S), h = (t / S) % H, i = t % S;
        float *st = &stats[b * g.stats.stride[0] + h * g.stats.stride[1] + i * g.stats.stride[2]];
        if (i >= len_q(&g, b)) {
            *st = NAN; /* padding: undefined */
            continue;
        }
        double lse = row_lse(&g, Q, K, b, h, i), acc[MODEL_MAX_D];
        int64_t D = g.q.dim[3], lk = len_kv(&g, b), hk = h / (H / g.k.dim[1]);
        for (int64_t e = 0; e < D; e++) acc[e] = lse == -INFINITY ? NAN : 0.0;
        for (int64_t j = 0; lse != -INFINITY && j < lk; j++) {
            if (!bk_sdpa_allowed(&g.band, len_q(&g, b), lk, i, j)) continue;
            double p = exp(score(&g, Q, K, b, h, i, j) - lse);
            for (int64_t e = 0; e < D; e++)
                acc[e] += p * (double)bk_bf16_to_float(V[at(&g.v, g.ragged, b, hk, j, e)]);
        }
        for (int64_t e = 0; e < D; e++)
            O[at(&g.o, g.ragged, b, h, i, e)] = bk_float_to_bf16((float)acc[e]);
        *st = lse == -INFINITY ? NAN : (float)(base2 ? lse * 1.4426950408889634 : lse);
    }
}

extern "C" bk_status bk_emu_sdpa_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                                     const uint16_t *K, const uint16_t *V, uint16_t *O_blk,
                                     float *stats, void *workspace, size_t workspace_bytes)
{
    BK_CHECK_ARG(q != NULL && c != NULL && Q != NULL && K != NULL && V != NULL && O_blk != NULL &&
                 stats != NULL);
    BK_DEV_PTRS(Q, K, V, O_blk, stats);
    bk_sdpa_graph g;
    const void *ptrs[] = {Q, K, V, O_blk, stats};
    bk_status st = check_execution(c, 0, &g, ptrs, 5, workspace_bytes);
    if (st != BK_OK) return st;
    (void)workspace;
    int64_t rows = g.q.dim[0] * g.q.dim[1] * g.q.dim[2];
    BK_FOOTPRINT_TILES(model_bytes(&g, 3), model_bytes(&g, 0) / 3 + rows * sizeof(float));
    return BK_LAUNCH(bk_sdpa_model_fwd_kernel, dim3(bk_grid_for(rows, MODEL_THREADS)),
                     dim3(MODEL_THREADS), 0, q->stream, g, Q, K, V, O_blk, stats,
                     planted() == PLANT_BASE2);
}

/* ---------------------------------------------------------------- the backward */
typedef struct {
    const uint16_t *Q, *K, *V, *O, *dO;
    const float *stats;
    uint16_t *dQ, *dK, *dV;
    float *delta; /* [b, h, s] in the workspace */
} model_bwd_bufs;

static __device__ __forceinline__ double stat_of(const bk_sdpa_graph *g, const float *stats,
                                                  int64_t b, int64_t h, int64_t i)
{
    return (double)stats[b * g->stats.stride[0] + h * g->stats.stride[1] + i * g->stats.stride[2]];
}

/* dP - delta of row (b, h, i) against key j, times P. */
static __device__ double dscore(const bk_sdpa_graph *g, const model_bwd_bufs *m, int64_t b,
                                int64_t h, int64_t i, int64_t j)
{
    int64_t H = g->q.dim[1], S = g->q.dim[2], hk = h / (H / g->k.dim[1]);
    double p = exp(score(g, m->Q, m->K, b, h, i, j) - stat_of(g, m->stats, b, h, i)), dp = 0.0;
    for (int64_t e = 0; e < g->q.dim[3]; e++)
        dp += (double)bk_bf16_to_float(m->dO[at(&g->o, g->ragged, b, h, i, e)]) *
              (double)bk_bf16_to_float(m->V[at(&g->v, g->ragged, b, hk, j, e)]);
    return p * (dp - (double)m->delta[(b * H + h) * S + i]);
}

__global__ void bk_sdpa_model_delta_kernel(bk_sdpa_graph g, model_bwd_bufs m)
{
    int64_t H = g.q.dim[1], S = g.q.dim[2], rows = g.q.dim[0] * H * S;
    for (int64_t t = model_thread(); t < rows; t += model_threads()) {
        int64_t b = t / (H * S), h = (t / S) % H, i = t % S;
        double acc = 0.0;
        for (int64_t e = 0; i < len_q(&g, b) && e < g.q.dim[3]; e++)
            acc += (double)bk_bf16_to_float(m.dO[at(&g.o, g.ragged, b, h, i, e)]) *
                   (double)bk_bf16_to_float(m.O[at(&g.o, g.ragged, b, h, i, e)]);
        m.delta[t] = (float)acc; /* cuDNN keeps delta in fp32 */
    }
}

/* One thread per (b, h, i): dQ = scale sum_j P (dP - delta) K. */
__global__ void bk_sdpa_model_dq_kernel(bk_sdpa_graph g, model_bwd_bufs m)
{
    int64_t H = g.q.dim[1], S = g.q.dim[2], D = g.q.dim[3], rows = g.q.dim[0] * H * S;
    for (int64_t t = model_thread(); t < rows; t += model_threads()) {
        int64_t b = t / (H * S), h = (t / S) % H, i = t % S, hk = h / (H / g.k.dim[1]);
        if (i >= len_q(&g, b)) continue;
        double acc[MODEL_MAX_D];
        for (int64_t e = 0; e < D; e++) acc[e] = 0.0;
        for (int64_t j = 0; j < len_kv(&g, b); j++) {
            if (!bk_sdpa_allowed(&g.band, len_q(&g, b), len_kv(&g, b), i, j)) continue;
            double ds = dscore(&g, &m, b, h, i, j) * (double)g.attn_scale;
            for (int64_t e = 0; e < D; e++)
                acc[e] += ds * (double)bk_bf16_to_float(m.K[at(&g.k, g.ragged, b, hk, j, e)]);
        }
        for (int64_t e = 0; e < D; e++)
            m.dQ[at(&g.q, g.ragged, b, h, i, e)] = bk_float_to_bf16((float)acc[e]);
    }
}

/* One thread per (b, key head, j): dK = scale sum P (dP - delta) Q and
 * dV = sum P dO over the query heads of the group and their rows. */
__global__ void bk_sdpa_model_dkv_kernel(bk_sdpa_graph g, model_bwd_bufs m)
{
    int64_t H = g.q.dim[1], HK = g.k.dim[1], SK = g.k.dim[2], D = g.q.dim[3];
    int64_t rows = g.k.dim[0] * HK * SK, group = H / HK;
    for (int64_t t = model_thread(); t < rows; t += model_threads()) {
        int64_t b = t / (HK * SK), hk = (t / SK) % HK, j = t % SK;
        if (j >= len_kv(&g, b)) continue;
        double dk[MODEL_MAX_D], dv[MODEL_MAX_D];
        for (int64_t e = 0; e < D; e++) dk[e] = dv[e] = 0.0;
        for (int64_t h = hk * group; h < (hk + 1) * group; h++)
            for (int64_t i = 0; i < len_q(&g, b); i++) {
                if (!bk_sdpa_allowed(&g.band, len_q(&g, b), len_kv(&g, b), i, j)) continue;
                double p = exp(score(&g, m.Q, m.K, b, h, i, j) - stat_of(&g, m.stats, b, h, i));
                double ds = dscore(&g, &m, b, h, i, j) * (double)g.attn_scale;
                for (int64_t e = 0; e < D; e++) {
                    dk[e] += ds * (double)bk_bf16_to_float(m.Q[at(&g.q, g.ragged, b, h, i, e)]);
                    dv[e] += p * (double)bk_bf16_to_float(m.dO[at(&g.o, g.ragged, b, h, i, e)]);
                }
            }
        for (int64_t e = 0; e < D; e++) {
            m.dK[at(&g.k, g.ragged, b, hk, j, e)] = bk_float_to_bf16((float)dk[e]);
            m.dV[at(&g.v, g.ragged, b, hk, j, e)] = bk_float_to_bf16((float)dv[e]);
        }
    }
}

extern "C" bk_status bk_emu_sdpa_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                                     const uint16_t *K, const uint16_t *V, const uint16_t *O,
                                     const uint16_t *dO, const float *stats, uint16_t *dQ,
                                     uint16_t *dK, uint16_t *dV, void *workspace,
                                     size_t workspace_bytes)
{
    BK_CHECK_ARG(q != NULL && c != NULL && Q && K && V && O && dO && stats && dQ && dK && dV);
    BK_DEV_PTRS(Q, K, V, O, dO, stats, dQ, dK, dV, workspace);
    bk_sdpa_graph g;
    const void *ptrs[] = {Q, K, V, O, dO, stats, dQ, dK, dV};
    bk_status st = check_execution(c, 1, &g, ptrs, 9, workspace_bytes);
    if (st != BK_OK) return st;
    model_bwd_bufs m = {Q, K, V, O, dO, stats, dQ, dK, dV, (float *)workspace};
    int64_t q_rows = g.q.dim[0] * g.q.dim[1] * g.q.dim[2];
    int64_t k_rows = g.k.dim[0] * g.k.dim[1] * g.k.dim[2];
    dim3 block(MODEL_THREADS);
    /* one footprint for the three launches, declared before each: the
     * tensors a fused backward reads (Q, K, V, O, dO, Stats) and writes */
    BK_FOOTPRINT_TILES(model_bytes(&g, 5), model_bytes(&g, 3));
    st = BK_LAUNCH(bk_sdpa_model_delta_kernel, dim3(bk_grid_for(q_rows, MODEL_THREADS)), block, 0,
                   q->stream, g, m);
    BK_FOOTPRINT_TILES(0, 0);
    if (st == BK_OK)
        st = BK_LAUNCH(bk_sdpa_model_dq_kernel, dim3(bk_grid_for(q_rows, MODEL_THREADS)), block,
                       0, q->stream, g, m);
    BK_FOOTPRINT_TILES(0, 0);
    if (st == BK_OK)
        st = BK_LAUNCH(bk_sdpa_model_dkv_kernel, dim3(bk_grid_for(k_rows, MODEL_THREADS)), block,
                       0, q->stream, g, m);
    return st;
}
