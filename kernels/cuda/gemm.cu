/* gemm.cu: GEMM on a device queue: C[m, n] = alpha op(A) op(B) + beta C,
 * row-major, through cuBLASLt (no hand-written GEMM): fp32 in and out with
 * fp32 compute (bk_gemm), or bf16 in, fp32 accumulation, bf16 or fp32 out
 * (bk_gemm_bf16).
 *
 * cuBLASLt is column-major; a row-major C is the column-major C^T [n, m], so
 * the call computes C^T = op(B)^T op(A)^T with B as the first operand: the
 * transpose flags carry over unchanged and no data moves. One cuBLASLt handle
 * and a 32 MiB workspace per device are created on first use and kept for the
 * life of the process (the only state the kernels keep between calls, like
 * the built-in CPU GEMM's packing buffers).
 *
 * In the SIMT emulator the same entry points run the CPU GEMM
 * (bk_gemm_builtin; bf16 inputs widened to fp32 first), once the copies
 * queued before it on its stream have run, as they would on the GPU. */
#include "kernels/cuda/dev_common.cuh"

#ifdef BK_EMULATOR

extern "C" bk_status BK_DEV_FN(gemm)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    bk_status st = bk_emu_runtime("cublasLtMatmul");
    if (st != BK_OK) return st;
    bk_queue host = bk_host_queue();
    host.n_threads = 1;
    bk_emu::stream_flush(q->stream); /* in its stream's order, like cuBLASLt's */
    return bk_gemm_builtin(&host, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

extern "C" bk_status BK_DEV_FN(gemm_bf16)(const bk_queue *q, bk_transpose ta, bk_transpose tb,
                                          int64_t m, int64_t n, int64_t k, float alpha,
                                          const uint16_t *a, int64_t lda, const uint16_t *b,
                                          int64_t ldb, float beta, void *c, bk_dtype c_type,
                                          int64_t ldc)
{
    bk_status st = bk_emu_runtime("cublasLtMatmul");
    if (st != BK_OK) return st;
    bk_queue host = bk_host_queue();
    host.n_threads = 1;
    bk_emu::stream_flush(q->stream); /* in its stream's order, like cuBLASLt's */
    return bk_gemm_bf16_cpu(&host, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, c_type, ldc);
}

/* The CPU GEMM keeps nothing between calls. */
extern "C" bk_status BK_DEV_FN(prepare)(void)
{
    return BK_OK;
}

#else /* CUDA: cuBLASLt */

#include <cublasLt.h>
#include <pthread.h>

enum { MAX_DEVICES = 64 };
static const size_t WORKSPACE_BYTES = (size_t)32 << 20;

static struct {
    cublasLtHandle_t handle;
    void *workspace;
    int ready;
} g_lt[MAX_DEVICES];
static pthread_mutex_t g_lt_lock = PTHREAD_MUTEX_INITIALIZER;

/* BK_OK, or BK_ERR_DEVICE with call and cuBLASLt's message kept for
 * bk_kernel_error. */
static bk_status lt_status(cublasStatus_t s, const char *call)
{
    return s == CUBLAS_STATUS_SUCCESS ? BK_OK : bk_device_failed(call, cublasLtGetStatusString(s));
}

/* The handle and workspace of the current device, created on first use. */
static bk_status lt_for_device(cublasLtHandle_t *h, void **ws)
{
    int dev = 0;
    *h = NULL;
    *ws = NULL;
    bk_status st = BK_CUDA(cudaGetDevice(&dev));
    if (st != BK_OK) return st;
    if (dev < 0 || dev >= MAX_DEVICES)
        return bk_device_failed("cudaGetDevice", "device index past 64");
    pthread_mutex_lock(&g_lt_lock);
    if (!g_lt[dev].ready) {
        st = lt_status(cublasLtCreate(&g_lt[dev].handle), "cublasLtCreate");
        if (st == BK_OK) st = BK_CUDA(cudaMalloc(&g_lt[dev].workspace, WORKSPACE_BYTES));
        if (st == BK_OK) g_lt[dev].ready = 1;
    }
    *h = g_lt[dev].handle;
    *ws = g_lt[dev].workspace;
    pthread_mutex_unlock(&g_lt_lock);
    return st;
}

extern "C" bk_status BK_DEV_FN(prepare)(void)
{
    cublasLtHandle_t h;
    void *ws;
    return lt_for_device(&h, &ws);
}

/* A row-major matrix of `rows` x `cols` with leading dimension ld, as the
 * column-major layout cuBLASLt sees: cols x rows. */
static cublasLtMatrixLayout_t layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld)
{
    cublasLtMatrixLayout_t l = NULL;
    if (cublasLtMatrixLayoutCreate(&l, t, (uint64_t)cols, (uint64_t)rows, ld) !=
        CUBLAS_STATUS_SUCCESS)
        return NULL;
    return l;
}

typedef struct {
    bk_transpose ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *a, *b;
    void *c;
    cudaDataType ab_type, c_type;
} lt_call;

static bk_status lt_matmul(const bk_queue *q, const lt_call *p)
{
    cublasLtHandle_t h;
    void *ws;
    if (lt_for_device(&h, &ws) != BK_OK) return BK_ERR_DEVICE; /* its failure kept */
    cublasOperation_t op_b = p->tb == BK_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = p->ta == BK_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    /* first operand: op(B)^T [n, k]; second: op(A)^T [k, m]; C^T [n, m] */
    cublasLtMatrixLayout_t lb = p->tb == BK_TRANS ? layout(p->ab_type, p->n, p->k, p->ldb)
                                                  : layout(p->ab_type, p->k, p->n, p->ldb);
    cublasLtMatrixLayout_t la = p->ta == BK_TRANS ? layout(p->ab_type, p->k, p->m, p->lda)
                                                  : layout(p->ab_type, p->m, p->k, p->lda);
    cublasLtMatrixLayout_t lc = layout(p->c_type, p->m, p->n, p->ldc);
    bk_status st =
        (lb && la && lc) ? BK_OK : bk_device_failed("cublasLtMatrixLayoutCreate", "failed");
    if (st == BK_OK)
        st = lt_status(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                       "cublasLtMatmulDescCreate");
    if (st == BK_OK) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a);
        st = lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    }
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (st == BK_OK) {
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &WORKSPACE_BYTES, sizeof WORKSPACE_BYTES);
        if (cublasLtMatmulAlgoGetHeuristic(h, desc, lb, la, lc, lc, pref, 1, &heur, &found) !=
                CUBLAS_STATUS_SUCCESS ||
            found == 0)
            st = BK_ERR_UNSUPPORTED;
    }
    if (st == BK_OK)
        st = lt_status(cublasLtMatmul(h, desc, &p->alpha, p->b, lb, p->a, la, &p->beta, p->c, lc,
                                      p->c, lc, &heur.algo, ws, WORKSPACE_BYTES,
                                      static_cast<cudaStream_t>(q->stream)),
                       "cublasLtMatmul");
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    return st;
}

static int gemm_args_ok(bk_transpose ta, bk_transpose tb, int64_t m, int64_t n, int64_t k,
                        const void *a, int64_t lda, const void *b, int64_t ldb, const void *c,
                        int64_t ldc)
{
    if (m < 0 || n < 0 || k < 0 || a == NULL || b == NULL || c == NULL) return 0;
    if ((ta != BK_NO_TRANS && ta != BK_TRANS) || (tb != BK_NO_TRANS && tb != BK_TRANS)) return 0;
    int64_t a_cols = ta == BK_NO_TRANS ? k : m, b_cols = tb == BK_NO_TRANS ? n : k;
    return lda >= (a_cols > 1 ? a_cols : 1) && ldb >= (b_cols > 1 ? b_cols : 1) &&
           ldc >= (n > 1 ? n : 1);
}

extern "C" bk_status BK_DEV_FN(gemm)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    BK_CHECK_ARG(gemm_args_ok(ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
    BK_DEV_PTRS(a, b, c);
    if (m == 0 || n == 0) return BK_OK;
    lt_call p = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, CUDA_R_32F, CUDA_R_32F};
    return lt_matmul(q, &p);
}

extern "C" bk_status BK_DEV_FN(gemm_bf16)(const bk_queue *q, bk_transpose ta, bk_transpose tb,
                                          int64_t m, int64_t n, int64_t k, float alpha,
                                          const uint16_t *a, int64_t lda, const uint16_t *b,
                                          int64_t ldb, float beta, void *c, bk_dtype c_type,
                                          int64_t ldc)
{
    BK_CHECK_ARG(gemm_args_ok(ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
    BK_CHECK_ARG(c_type == BK_F32 || c_type == BK_BF16);
    BK_DEV_PTRS(a, b, c);
    if (m == 0 || n == 0) return BK_OK;
    lt_call p = {ta,  tb,  m,   n,           k,
                 lda, ldb, ldc, alpha,       beta,
                 a,   b,   c,   CUDA_R_16BF, c_type == BK_F32 ? CUDA_R_32F : CUDA_R_16BF};
    return lt_matmul(q, &p);
}

#endif
