/* embedding.c: token embedding on the CPU: gather rows of the table for the
 * tokens of a shard, and the backward scatter-add of their gradients.
 *
 * Why the scatter-add is split by columns: several tokens of a shard hit the
 * same table row, so splitting by tokens would race or need atomics (and atomic
 * float sums depend on timing). Each thread instead owns a strip of columns and
 * walks all tokens in order: no races, no sort, and the same sum in the same
 * order whatever the thread count. */
#include <string.h>

#include "kernels/cpu/ops_cpu.h"

#define EMB_PAR_MIN 16384

/* 1 when every token is in [0, V): checked before anything is written. */
static int tokens_valid(int64_t n, int64_t V, const int64_t *tokens)
{
    int64_t bad = 0;
    for (int64_t r = 0; r < n; r++) bad |= (tokens[r] < 0) | (tokens[r] >= V);
    return bad == 0;
}

bk_status bk_embedding_gather(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                              const int64_t *tokens, const float *table, float *out)
{
    BK_CPU_OR_DEVICE(q, embedding_gather, (q, n, V, D, tokens, table, out));
    BK_CHECK_ARG(n >= 0 && V > 0 && D > 0);
    BK_CHECK_ARG(tokens != NULL && table != NULL && out != NULL);
    BK_CHECK_ARG(tokens_valid(n, V, tokens));
    int nt = bk_cpu_threads(q);
#pragma omp parallel for num_threads(nt) schedule(static) if (n * D >= EMB_PAR_MIN)
    for (int64_t r = 0; r < n; r++)
        memcpy(out + r * D, table + tokens[r] * D, (size_t)D * sizeof(float)); /* [D] rows */
    return BK_OK;
}

bk_status bk_embedding_scatter_add(const bk_queue *q, int64_t n, int64_t V, int64_t D,
                                   const int64_t *tokens, const float *dout, float *dtable)
{
    BK_CPU_OR_DEVICE(q, embedding_scatter_add, (q, n, V, D, tokens, dout, dtable));
    BK_CHECK_ARG(n >= 0 && V > 0 && D > 0);
    BK_CHECK_ARG(tokens != NULL && dout != NULL && dtable != NULL);
    BK_CHECK_ARG(tokens_valid(n, V, tokens));
    int nt = bk_cpu_threads(q);
    /* Strips of whole cache lines, a few per thread (load balance: tokens do not
     * hit rows evenly), yet wide enough that each row read is a long run. */
    int64_t strip = (D + 4 * nt - 1) / (4 * nt);
    strip = (strip + 15) / 16 * 16;
    if (strip < 16) strip = 16;
    int64_t n_strips = (D + strip - 1) / strip;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (n * D >= EMB_PAR_MIN)
    for (int64_t s = 0; s < n_strips; s++) {
        int64_t j0 = s * strip, j1 = j0 + strip < D ? j0 + strip : D;
        for (int64_t r = 0; r < n; r++) {
            const float *g = dout + r * D;     /* dout[r, :] */
            float *t = dtable + tokens[r] * D; /* dtable[tokens[r], :] */
#pragma omp simd
            for (int64_t j = j0; j < j1; j++) t[j] += g[j];
        }
    }
    return BK_OK;
}
