/* cross_entropy.c: the loss end of the fused LM head on the
 * CPU: for a chunk of logits [rows, V], per-row fp32 lse and loss, and dlogits
 * written over the logits, so that the n x V logits of the whole sequence never
 * exist and the chunk's buffer is reused for its gradient.
 *
 * Per row, three passes over V: the max; exp(x - max) stored in place while
 * summing it (one exponential per element); then the scaling into dlogits. The
 * max keeps every exponent <= 0, so large logits cannot overflow. Rows whose
 * label is ignore_index are zeroed without reading their logits, so a chunk
 * that is all padding yields zeros, not NaN. */
#include "kernels/cpu/ops_cpu.h"

/* 1 when every label is ignore_index or in [0, V). */
static int labels_valid(int64_t rows, int64_t V, const int64_t *labels, int64_t ignore_index)
{
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore_index && (labels[r] < 0 || labels[r] >= V)) return 0;
    return 1;
}

bk_status bk_cross_entropy_fwd_bwd(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                                   int64_t ld, const int64_t *labels, int64_t ignore_index,
                                   float scale, float z_loss, float *loss, float *lse,
                                   int64_t *n_valid)
{
    BK_CPU_OR_DEVICE(
        q, cross_entropy,
        (q, rows, V, logits, ld, labels, ignore_index, scale, z_loss, loss, lse, n_valid));
    BK_CHECK_ARG(rows >= 0 && V > 0 && ld >= V);
    BK_CHECK_ARG(logits != NULL && labels != NULL && loss != NULL);
    BK_CHECK_ARG(z_loss >= 0.0f);
    BK_CHECK_ARG(labels_valid(rows, V, labels, ignore_index));
    int nt = bk_cpu_threads(q);
    int64_t valid = 0;

#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : valid) \
    if (rows * V >= 16384)
    for (int64_t r = 0; r < rows; r++) {
        float *x = logits + r * ld; /* logits[r, 0:V], becomes dlogits[r, 0:V] */
        int64_t y = labels[r];
        if (y == ignore_index) {
#pragma omp simd
            for (int64_t j = 0; j < V; j++) x[j] = 0.0f;
            loss[r] = 0.0f;
            if (lse) lse[r] = 0.0f;
            continue;
        }
        valid++;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        if (mx == -INFINITY) {
            /* Every logit -inf: the label has probability 0; say so (+inf loss)
             * instead of computing -inf - -inf = NaN everywhere. */
#pragma omp simd
            for (int64_t j = 0; j < V; j++) x[j] = 0.0f;
            loss[r] = INFINITY;
            if (lse) lse[r] = -INFINITY;
            continue;
        }
        float x_label = x[y];
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < V; j++) {
            float e = bk_expf(x[j] - mx);
            x[j] = e;
            s += e;
        }
        float l = bk_ce_lse(mx, s);
        float coef = bk_ce_prob_coef(l, z_loss, scale), inv_sum = 1.0f / s;
        float e_label = x[y];
#pragma omp simd
        for (int64_t j = 0; j < V; j++) x[j] = bk_ce_dlogit(x[j], inv_sum, coef, scale, 0);
        x[y] = bk_ce_dlogit(e_label, inv_sum, coef, scale, 1);
        loss[r] = bk_ce_loss(l, x_label, z_loss);
        if (lse) lse[r] = l;
    }
    if (n_valid) *n_valid = valid;
    return BK_OK;
}
