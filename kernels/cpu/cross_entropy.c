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

/* Label y of a row that counts: not ignore_index, in [0, V). */
static int label_counts(int64_t y, int64_t V, int64_t ignore_index)
{
    return y != ignore_index && y >= 0 && y < V;
}

/* The rows' losses (lse when not NULL) and dlogits in place; returns the
 * rows that count. A row whose label does not count (ignore_index, or a bad
 * label bk_cross_entropy_sum has counted) is zeroed without reading its
 * logits. */
static int64_t ce_rows(const bk_queue *q, int64_t rows, int64_t V, float *logits, int64_t ld,
                       const int64_t *labels, int64_t ignore_index, float scale, float z_loss,
                       float *loss, float *lse)
{
    int nt = bk_cpu_threads(q);
    int64_t valid = 0;

#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : valid) \
    if (rows * V >= 16384)
    for (int64_t r = 0; r < rows; r++) {
        float *x = logits + r * ld; /* logits[r, 0:V], becomes dlogits[r, 0:V] */
        int64_t y = labels[r];
        if (!label_counts(y, V, ignore_index)) {
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
    return valid;
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
    int64_t valid = ce_rows(q, rows, V, logits, ld, labels, ignore_index, scale, z_loss, loss, lse);
    if (n_valid) *n_valid = valid;
    return BK_OK;
}

bk_status bk_ce_sums_clear(const bk_queue *q, bk_ce_sums *sums)
{
    BK_CPU_OR_DEVICE(q, ce_sums_clear, (q, sums));
    BK_CHECK_ARG(sums != NULL);
    *sums = (bk_ce_sums){0};
    return BK_OK;
}

bk_status bk_cross_entropy_sum(const bk_queue *q, int64_t rows, int64_t V, float *logits,
                               int64_t ld, const int64_t *labels, int64_t ignore_index, float scale,
                               float z_loss, float *loss, bk_ce_sums *sums)
{
    BK_CPU_OR_DEVICE(q, cross_entropy_sum,
                     (q, rows, V, logits, ld, labels, ignore_index, scale, z_loss, loss, sums));
    BK_CHECK_ARG(rows >= 0 && V > 0 && ld >= V);
    BK_CHECK_ARG(logits != NULL && labels != NULL && loss != NULL && sums != NULL);
    BK_CHECK_ARG(z_loss >= 0.0f);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        bad += labels[r] != ignore_index && !label_counts(labels[r], V, ignore_index);
    sums->valid += ce_rows(q, rows, V, logits, ld, labels, ignore_index, scale, z_loss, loss, NULL);
    sums->bad += bad;
    double s = 0.0;
    for (int64_t r = 0; r < rows; r++) s += (double)loss[r];
    sums->loss += s;
    return BK_OK;
}
