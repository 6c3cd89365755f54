/* gemm.cu: GEMM on a device queue: C[m, n] = alpha op(A) op(B) + beta C,
 * row-major, through cuBLASLt (no hand-written GEMM): fp32 in and out with
 * fp32 compute (bk_gemm), or bf16 in, fp32 accumulation, bf16 or fp32 out
 * (bk_gemm_bf16).
 *
 * cuBLASLt is column-major; a row-major C is the column-major C^T [n, m], so
 * the call computes C^T = op(B)^T op(A)^T with B as the first operand: the
 * transpose flags carry over unchanged and no data moves (lt_describe, the
 * one place that mapping is written). The preferences tell cuBLASLt each
 * pointer's true alignment (a sub-buffer such as `out + r0 * cols` may be
 * only 4-byte aligned, where the documented default is 256 bytes); k = 0
 * never reaches it (C = beta C is done here). One cuBLASLt handle, a 32 MiB
 * workspace and the heuristic's answers per call shape are kept per device
 * for the life of the process (the only state the kernels keep between
 * calls, like the built-in CPU GEMM's packing buffers).
 *
 * In the SIMT emulator the same entry points build the same description and
 * hand it to a model of cuBLASLt (lt_try below BK_EMULATOR): its heuristic has
 * no algorithm below 16-byte alignment (so the staged call runs), it refuses
 * what cuBLASLt's documentation refuses (pointer alignment below the
 * preference, leading dimensions shorter than a column, an unsupported type
 * combination, k = 0, operand shapes that do not chain) and runs the
 * column-major product the description states on the CPU GEMM, once the
 * copies queued before it on its stream have run, as they would on the GPU.
 * A wrong mapping gives wrong products in every emulated test. */
#include "kernels/cuda/dev_common.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the call cuBLASLt sees */

/* A stored column-major matrix: rows x cols, column stride ld (elements). */
typedef struct {
    int64_t rows, cols, ld;
} lt_layout;

/* One matmul as cuBLASLt is told it: column-major
 * D[c.rows, c.cols] = alpha op1(first) op2(second) + beta C, D = C. */
typedef struct {
    int trans_first, trans_second; /* op: 1 transposes the stored layout */
    lt_layout first, second, c;
    int64_t k;
    bk_dtype ab_type, c_type; /* BK_F32 or BK_BF16 */
    const void *first_ptr, *second_ptr;
    void *c_ptr;
    unsigned align_first, align_second, align_c; /* MIN_ALIGNMENT preferences, bytes */
    float alpha, beta;
} lt_desc;

/* The largest power of two (at most 256, cuBLASLt's default requirement)
 * that divides the address. */
static unsigned lt_alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al != 0) al /= 2;
    return al;
}

/* The least of the description's three alignment preferences, in bytes. */
static unsigned lt_min_alignment(const lt_desc *d)
{
    unsigned m = d->align_first < d->align_second ? d->align_first : d->align_second;
    return m < d->align_c ? m : d->align_c;
}

/* A row-major rows x cols matrix with leading dimension ld is the column-major
 * cols x rows one. */
static lt_layout lt_col_major(int64_t rows, int64_t cols, int64_t ld)
{
    lt_layout l = {cols, rows, ld};
    return l;
}

/* The row-major call C[m, n] = alpha op(A) op(B) + beta C as cuBLASLt's
 * column-major C^T [n, m] = op(B)^T op(A)^T: B first, A second, the transpose
 * flags unchanged. */
static lt_desc lt_describe(bk_transpose ta, bk_transpose tb, int64_t m, int64_t n, int64_t k,
                           float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                           float beta, void *c, int64_t ldc, bk_dtype ab_type, bk_dtype c_type)
{
    lt_desc d;
    d.trans_first = tb == BK_TRANS;
    d.trans_second = ta == BK_TRANS;
    d.first = tb == BK_TRANS ? lt_col_major(n, k, ldb) : lt_col_major(k, n, ldb);
    d.second = ta == BK_TRANS ? lt_col_major(k, m, lda) : lt_col_major(m, k, lda);
    d.c = lt_col_major(m, n, ldc);
    d.k = k;
    d.ab_type = ab_type, d.c_type = c_type;
    d.first_ptr = b, d.second_ptr = a, d.c_ptr = c;
    d.align_first = lt_alignment(b), d.align_second = lt_alignment(a), d.align_c = lt_alignment(c);
    d.alpha = alpha, d.beta = beta;
    return d;
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

/* k = 0: C = beta C, without cuBLASLt (whose documentation does not promise
 * it). A bf16 C is only left as it is (beta = 1). */
static bk_status scale_c(const bk_queue *q, const lt_desc *d)
{
    if (d->beta == 1.0f) return BK_OK;
    if (d->c_type != BK_F32) return BK_ERR_UNSUPPORTED;
    float *c = (float *)d->c_ptr;
    int64_t rows = d->c.cols, cols = d->c.rows, ld = d->c.ld; /* row-major C [rows, ld] */
    if (ld == cols) cols *= rows, rows = 1;                   /* dense: one call */
    for (int64_t i = 0; i < rows; i++) {
        float *row = c + i * ld;
        bk_status st = d->beta == 0.0f ? BK_DEV_FN(fill)(q, cols, row, 0.0f)
                                       : BK_DEV_FN(scale)(q, cols, row, d->beta);
        if (st != BK_OK) return st;
    }
    return BK_OK;
}

/* Runs d if cuBLASLt has an algorithm for it; BK_ERR_UNSUPPORTED when its
 * heuristic has none (one per build, below). */
static bk_status lt_try(const bk_queue *q, const lt_desc *d);

static size_t dtype_bytes(bk_dtype t)
{
    return t == BK_BF16 ? 2 : 4;
}

/* The bytes a stored layout spans from its first element. */
static size_t span_bytes(const lt_layout *l, bk_dtype t)
{
    return ((size_t)l->ld * (size_t)(l->cols - 1) + (size_t)l->rows) * dtype_bytes(t);
}

enum { LT_STAGE_ALIGN = 256 };

/* The call again on copies of its operands at 256-byte-aligned scratch (the
 * spans copied whole, leading dimensions kept, C copied in and back), for a
 * description the heuristic has no algorithm for at the operands' own
 * alignment: on an H200 it has none for fp32 operands 4-byte aligned. */
static bk_status lt_run_staged(const bk_queue *q, const lt_desc *d)
{
    const void *from[3] = {d->first_ptr, d->second_ptr, d->c_ptr};
    size_t bytes[3] = {span_bytes(&d->first, d->ab_type), span_bytes(&d->second, d->ab_type),
                       span_bytes(&d->c, d->c_type)},
           at[3], total = 0;
    for (int i = 0; i < 3; i++)
        at[i] = total, total += (bytes[i] + LT_STAGE_ALIGN - 1) / LT_STAGE_ALIGN * LT_STAGE_ALIGN;
    unsigned char *scratch = NULL;
    bk_status st = BK_DEV_FN(scratch)(q, total + LT_STAGE_ALIGN, (void **)&scratch);
    if (st != BK_OK) return st;
    unsigned char *base =
        scratch + (LT_STAGE_ALIGN - (uintptr_t)scratch % LT_STAGE_ALIGN) % LT_STAGE_ALIGN;
    for (int i = 0; i < 3 && st == BK_OK; i++)
        st = BK_DEV_FN(copy)(q, base + at[i], from[i], bytes[i], BK_COPY_DEVICE_TO_DEVICE);
    lt_desc s = *d;
    s.first_ptr = base + at[0], s.second_ptr = base + at[1], s.c_ptr = base + at[2];
    s.align_first = s.align_second = s.align_c = LT_STAGE_ALIGN;
    if (st == BK_OK) st = lt_try(q, &s);
    if (st == BK_OK) st = BK_DEV_FN(copy)(q, d->c_ptr, s.c_ptr, bytes[2], BK_COPY_DEVICE_TO_DEVICE);
    BK_DEV_FN(scratch_free)(q, scratch);
    return st;
}

static bk_status lt_run(const bk_queue *q, const lt_desc *d)
{
    bk_status st = lt_try(q, d);
    return st == BK_ERR_UNSUPPORTED && lt_min_alignment(d) < LT_STAGE_ALIGN ? lt_run_staged(q, d)
                                                                            : st;
}

static bk_status gemm_call(const bk_queue *q, const lt_desc *d)
{
    if (d->c.rows == 0 || d->c.cols == 0) return BK_OK;
    return d->k == 0 ? scale_c(q, d) : lt_run(q, d);
}

extern "C" bk_status BK_DEV_FN(gemm)(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m,
                                     int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    BK_CHECK_ARG(gemm_args_ok(ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
    BK_DEV_PTRS(k > 0 ? a : NULL, k > 0 ? b : NULL, c); /* empty operands are not read */
    lt_desc d = lt_describe(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, BK_F32, BK_F32);
    return gemm_call(q, &d);
}

extern "C" bk_status BK_DEV_FN(gemm_bf16)(const bk_queue *q, bk_transpose ta, bk_transpose tb,
                                          int64_t m, int64_t n, int64_t k, float alpha,
                                          const uint16_t *a, int64_t lda, const uint16_t *b,
                                          int64_t ldb, float beta, void *c, bk_dtype c_type,
                                          int64_t ldc)
{
    BK_CHECK_ARG(gemm_args_ok(ta, tb, m, n, k, a, lda, b, ldb, c, ldc));
    BK_CHECK_ARG(c_type == BK_F32 || c_type == BK_BF16);
    BK_DEV_PTRS(k > 0 ? a : NULL, k > 0 ? b : NULL, c); /* empty operands are not read */
    lt_desc d = lt_describe(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, BK_BF16, c_type);
    return gemm_call(q, &d);
}

#ifdef BK_EMULATOR

/* ------------------------------------------------------------------ a model of cuBLASLt */

/* The model's heuristic: no algorithm when a pointer's alignment preference is
 * below 16 bytes. The documentation lets the heuristic answer none for any
 * preferences; on an H200 it did for fp32 operands 4-byte aligned. */
enum { LT_MODEL_MIN_ALIGN = 16 };

/* What cuBLASLt's documentation requires of a matmul, as far as we call it:
 * compute and scale type fp32 with fp32 A, B, C, or bf16 A, B and bf16 or
 * fp32 C; every dimension positive; a column-major layout's ld at least its
 * rows; op1(first) [c.rows, k] and op2(second) [k, c.cols]; each pointer
 * aligned to its element and to the MIN_ALIGNMENT preference given (256
 * bytes when none is). Stricter than the library where it could accept. */
static const char *lt_model_refuses(const lt_desc *d)
{
    if (!((d->ab_type == BK_F32 && d->c_type == BK_F32) ||
          (d->ab_type == BK_BF16 && (d->c_type == BK_F32 || d->c_type == BK_BF16))))
        return "unsupported type combination";
    if (d->k <= 0 || d->c.rows <= 0 || d->c.cols <= 0) return "a dimension is not positive";
    const lt_layout *ls[3] = {&d->first, &d->second, &d->c};
    for (int i = 0; i < 3; i++)
        if (ls[i]->rows <= 0 || ls[i]->cols <= 0 || ls[i]->ld < ls[i]->rows)
            return "a leading dimension is shorter than a column";
    int64_t f_rows = d->trans_first ? d->first.cols : d->first.rows,
            f_cols = d->trans_first ? d->first.rows : d->first.cols,
            s_rows = d->trans_second ? d->second.cols : d->second.rows,
            s_cols = d->trans_second ? d->second.rows : d->second.cols;
    if (f_rows != d->c.rows || f_cols != d->k || s_rows != d->k || s_cols != d->c.cols)
        return "the operands' shapes do not chain";
    const void *ptrs[3] = {d->first_ptr, d->second_ptr, d->c_ptr};
    const unsigned align[3] = {d->align_first, d->align_second, d->align_c};
    const size_t elem[3] = {dtype_bytes(d->ab_type), dtype_bytes(d->ab_type),
                            dtype_bytes(d->c_type)};
    static const int default_alignment = getenv("BK_EMU_LT_DEFAULT_ALIGNMENT") != NULL;
    for (int i = 0; i < 3; i++) {
        unsigned want = default_alignment || align[i] == 0 ? 256 : align[i];
        if ((uintptr_t)ptrs[i] % elem[i] != 0 || (uintptr_t)ptrs[i] % want != 0)
            return "misaligned address (a pointer below its alignment preference)";
    }
    return NULL;
}

/* Computes the description on the host: the column-major D[R, C] =
 * op1(F) op2(S) is the row-major D^T [C, R] = op2(S)^T op1(F)^T, where a
 * stored column-major matrix read row-major is its transpose; so S comes
 * first, with its own flag, then F. */
static bk_status lt_compute(const lt_desc *d)
{
    bk_queue host = bk_host_queue();
    host.n_threads = 1;
    bk_transpose t1 = d->trans_second ? BK_TRANS : BK_NO_TRANS,
                 t2 = d->trans_first ? BK_TRANS : BK_NO_TRANS;
    if (d->ab_type == BK_F32)
        return bk_gemm_builtin(&host, t1, t2, d->c.cols, d->c.rows, d->k, d->alpha,
                               (const float *)d->second_ptr, d->second.ld,
                               (const float *)d->first_ptr, d->first.ld, d->beta, (float *)d->c_ptr,
                               d->c.ld);
    return bk_gemm_bf16_cpu(&host, t1, t2, d->c.cols, d->c.rows, d->k, d->alpha,
                            (const uint16_t *)d->second_ptr, d->second.ld,
                            (const uint16_t *)d->first_ptr, d->first.ld, d->beta, d->c_ptr,
                            d->c_type, d->c.ld);
}

/* The product's footprint for the account (emu/simt/simt_account.h): A and
 * B read, C read too when beta is not 0, C written; 2 m n k FLOPs. */
static bk_emu::footprint lt_footprint(const lt_desc *d)
{
    int64_t ab = (int64_t)dtype_bytes(d->ab_type), cb = (int64_t)dtype_bytes(d->c_type);
    int64_t c = d->c.rows * d->c.cols * cb;
    bk_emu::footprint fp = {};
    fp.read_bytes = (d->c.rows + d->c.cols) * d->k * ab + (d->beta != 0.0f ? c : 0);
    fp.written_bytes = c;
    fp.flops = 2 * d->c.rows * d->c.cols * d->k;
    fp.declared = fp.arithmetic = 1;
    return fp;
}

/* What BK_EMU_COUNT=skip leaves of a product not computed: C = beta C + 0,
 * so zeros when beta is 0 and C as it was otherwise (finite either way). */
static void lt_skip(const lt_desc *d)
{
    if (d->beta != 0.0f) return;
    size_t cb = dtype_bytes(d->c_type);
    for (int64_t j = 0; j < d->c.cols; j++) /* column-major: a column is contiguous */
        memset(static_cast<char *>(d->c_ptr) + (size_t)(j * d->c.ld) * cb, 0,
               (size_t)d->c.rows * cb);
}

/* Runs the description in its stream's order, as cuBLASLt does: after what
 * the stream holds, or queued on it (bk_emu::streams_deferred). */
static bk_status lt_try(const bk_queue *q, const lt_desc *d)
{
    bk_status st = bk_emu_runtime("cublasLtMatmul");
    if (st != BK_OK) return st;
    if (lt_min_alignment(d) < LT_MODEL_MIN_ALIGN) return BK_ERR_UNSUPPORTED;
    const char *why = lt_model_refuses(d);
    if (why) return bk_device_failed("cublasLtMatmul", why);
    const bk_emu::access acc[3] = {{d->first_ptr, 0, 0}, {d->second_ptr, 0, 0}, {d->c_ptr, 1, 0}};
    bk_emu::account_launch("cublasLtMatmul", lt_footprint(d));
    lt_desc product = *d;
    int skip = bk_emu_account_skipping();
    auto work = [product, skip]() {
        if (skip) {
            lt_skip(&product);
            return 0;
        }
        return lt_compute(&product) == BK_OK
                   ? 0
                   : bk_emu::refuse_launch("cublasLtMatmul", bk_kernel_error());
    };
    return bk_emu_ran(bk_emu::stream_launch(q->stream, "cublasLtMatmul", acc, 3, work),
                      "cublasLtMatmul");
}

/* The model keeps nothing between calls. */
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

/* The handle and workspace of the current device (*dev), created on first use. */
static bk_status lt_for_device(cublasLtHandle_t *h, void **ws, int *device)
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
    *device = dev;
    pthread_mutex_unlock(&g_lt_lock);
    return st;
}

extern "C" bk_status BK_DEV_FN(prepare)(void)
{
    cublasLtHandle_t h;
    void *ws;
    int dev;
    return lt_for_device(&h, &ws, &dev);
}

static cudaDataType lt_type(bk_dtype t)
{
    return t == BK_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasLtMatrixLayout_t lt_layout_create(bk_dtype t, const lt_layout *l)
{
    cublasLtMatrixLayout_t h = NULL;
    if (cublasLtMatrixLayoutCreate(&h, lt_type(t), (uint64_t)l->rows, (uint64_t)l->cols, l->ld) !=
        CUBLAS_STATUS_SUCCESS)
        return NULL;
    return h;
}

/* ------------------------------------------------------------------ heuristic answers per shape */

/* What the heuristic's answer depends on: everything in the description but
 * the pointers (their alignment is in) and the scalars. */
typedef struct {
    int device, trans_first, trans_second;
    lt_layout first, second, c;
    int64_t k;
    bk_dtype ab_type, c_type;
    unsigned align_first, align_second, align_c;
} lt_shape;

enum { LT_CACHE = 256 };
static struct {
    lt_shape shape;
    cublasLtMatmulAlgo_t algo;
} g_algos[LT_CACHE];
static int g_n_algos;

static lt_shape shape_of(int device, const lt_desc *d)
{
    lt_shape s;
    memset(&s, 0, sizeof s); /* compared bytewise */
    s.device = device, s.trans_first = d->trans_first, s.trans_second = d->trans_second;
    s.first = d->first, s.second = d->second, s.c = d->c, s.k = d->k;
    s.ab_type = d->ab_type, s.c_type = d->c_type;
    s.align_first = d->align_first, s.align_second = d->align_second, s.align_c = d->align_c;
    return s;
}

static int cached_algo(const lt_shape *s, cublasLtMatmulAlgo_t *algo)
{
    pthread_mutex_lock(&g_lt_lock);
    int found = 0;
    for (int i = 0; i < g_n_algos && !found; i++)
        if (memcmp(&g_algos[i].shape, s, sizeof *s) == 0) *algo = g_algos[i].algo, found = 1;
    pthread_mutex_unlock(&g_lt_lock);
    return found;
}

/* Keeps the answer while there is room (a run has a few dozen shapes). */
static void cache_algo(const lt_shape *s, const cublasLtMatmulAlgo_t *algo)
{
    pthread_mutex_lock(&g_lt_lock);
    if (g_n_algos < LT_CACHE) g_algos[g_n_algos].shape = *s, g_algos[g_n_algos++].algo = *algo;
    pthread_mutex_unlock(&g_lt_lock);
}

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t first, second, c;
} lt_handles;

static void handles_free(lt_handles *x)
{
    if (x->desc) cublasLtMatmulDescDestroy(x->desc);
    if (x->c) cublasLtMatrixLayoutDestroy(x->c);
    if (x->second) cublasLtMatrixLayoutDestroy(x->second);
    if (x->first) cublasLtMatrixLayoutDestroy(x->first);
}

static bk_status handles_make(const lt_desc *d, lt_handles *x)
{
    memset(x, 0, sizeof *x);
    x->first = lt_layout_create(d->ab_type, &d->first);
    x->second = lt_layout_create(d->ab_type, &d->second);
    x->c = lt_layout_create(d->c_type, &d->c);
    if (!x->first || !x->second || !x->c)
        return bk_device_failed("cublasLtMatrixLayoutCreate", "failed");
    bk_status st = lt_status(cublasLtMatmulDescCreate(&x->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
    cublasOperation_t op1 = d->trans_first ? CUBLAS_OP_T : CUBLAS_OP_N,
                      op2 = d->trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (st == BK_OK)
        st = lt_status(
            cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1),
            "cublasLtMatmulDescSetAttribute");
    if (st == BK_OK)
        st = lt_status(
            cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2),
            "cublasLtMatmulDescSetAttribute");
    return st;
}

/* The heuristic's best algorithm for the description, with the pointers'
 * true alignment as preferences (A is cuBLASLt's first operand, B its second). */
static bk_status ask_heuristic(cublasLtHandle_t h, const lt_desc *d, const lt_handles *x,
                               cublasLtMatmulAlgo_t *algo)
{
    cublasLtMatmulPreference_t pref = NULL;
    bk_status st =
        lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = WORKSPACE_BYTES;
    if (st == BK_OK)
        st = lt_status(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace, sizeof workspace),
            "cublasLtMatmulPreferenceSetAttribute");
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t align[4] = {d->align_first, d->align_second, d->align_c, d->align_c};
    for (int i = 0; st == BK_OK && i < 4; i++)
        st = lt_status(
            cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align[i], sizeof align[i]),
            "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t asked = CUBLAS_STATUS_SUCCESS;
    if (st == BK_OK)
        asked = cublasLtMatmulAlgoGetHeuristic(h, x->desc, x->first, x->second, x->c, x->c, pref,
                                               1, &heur, &found);
    if (st == BK_OK && (asked != CUBLAS_STATUS_SUCCESS || found == 0)) {
        /* kept for bk_kernel_error, while the status says a staged call may do */
        (void)bk_device_failed("cublasLtMatmulAlgoGetHeuristic",
                               asked != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(asked)
                                                              : "no algorithm");
        st = BK_ERR_UNSUPPORTED;
    }
    if (st == BK_OK) *algo = heur.algo;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

static bk_status lt_try(const bk_queue *q, const lt_desc *d)
{
    cublasLtHandle_t h;
    void *ws;
    int dev = 0;
    if (lt_for_device(&h, &ws, &dev) != BK_OK) return BK_ERR_DEVICE; /* its failure kept */
    lt_handles x;
    bk_status st = handles_make(d, &x);
    lt_shape shape = shape_of(dev, d);
    cublasLtMatmulAlgo_t algo;
    if (st == BK_OK && !cached_algo(&shape, &algo)) {
        st = ask_heuristic(h, d, &x, &algo);
        if (st == BK_OK) cache_algo(&shape, &algo);
    }
    if (st == BK_OK)
        st = lt_status(cublasLtMatmul(h, x.desc, &d->alpha, d->first_ptr, x.first, d->second_ptr,
                                      x.second, &d->beta, d->c_ptr, x.c, d->c_ptr, x.c, &algo, ws,
                                      WORKSPACE_BYTES, static_cast<cudaStream_t>(q->stream)),
                       "cublasLtMatmul");
    handles_free(&x);
    return st;
}

#endif
