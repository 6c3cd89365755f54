/* ops_ref.h: slow, obviously right double-precision references of the
 * non-attention kernels (kernels/ops.h), for the tests and `burst selftest`. They follow the
 * textbook formulas loop by loop, share no code with the kernels (not even
 * ops_math.h), and compute everything in double. */
#ifndef BURST_KERNELS_REF_OPS_REF_H
#define BURST_KERNELS_REF_OPS_REF_H

#include <stdint.h>

#include "kernels/ops_math.h"

/* C[m, n] = alpha op(A) op(B) + beta C; c_in (float, may hold NaN when beta = 0)
 * is read, c_out[m, n] (dense, double) written. trans flags are 0/1. */
void ref_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, double beta, const float *c_in, int64_t ldc,
              double *c_out);

/* y[n, d], rstd[n]. */
void ref_rmsnorm_fwd(int64_t n, int64_t d, const double *x, const double *w, double eps, double *y,
                     double *rstd);
/* dx[n, d] and dw[d] (dw written, not accumulated). */
void ref_rmsnorm_bwd(int64_t n, int64_t d, const double *x, const double *w, double eps,
                     const double *dy, double *dx, double *dw);

/* out[n, H, d]: half-split rotation by sign * pos * freq_i, freq_i the
 * frequency theta^(-2i/d) scaled as r->type says, written here from
 * transformers' formulas (modeling_rope_utils), independently of ops_math.h;
 * yarn scales cos and sin by its attention factor. */
void ref_rope(int64_t n, int64_t H, int64_t d, const int64_t *pos, const bk_rope *r,
              const double *x, double sign, double *out);

void ref_swiglu_fwd(int64_t n, const double *g, const double *u, double *out);
void ref_swiglu_bwd(int64_t n, const double *g, const double *u, const double *dout, double *dg,
                    double *du);

/* out[n, D] = table[tokens]; dtable[V, D] += dout at tokens. */
void ref_embedding_gather(int64_t n, int64_t D, const int64_t *tokens, const double *table,
                          double *out);
void ref_embedding_scatter_add(int64_t n, int64_t D, const int64_t *tokens, const double *dout,
                               double *dtable);

/* One AdamW step in double on p, m, v. */
void ref_adamw_step(int64_t n, double *p, double *m, double *v, const double *g, double lr,
                    double beta1, double beta2, double eps, double wd, int64_t step,
                    double grad_scale);

/* Cross-entropy of logits[rows, V]: loss[rows], lse[rows], dlogits[rows, V]
 * (any may be NULL); returns the number of rows not ignored. */
int64_t ref_cross_entropy(int64_t rows, int64_t V, const double *logits, const int64_t *labels,
                          int64_t ignore_index, double scale, double z, double *loss, double *lse,
                          double *dlogits);

#endif
