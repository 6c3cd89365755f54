/* attention_ref.h: slow, obviously right double-precision attention (forward
 * and backward over one block, whole softmax at once) that the tests diff the
 * tiled fp32 kernels against. The mask predicate is written here again, on
 * purpose independently of kernels/attention_math.h. */
#ifndef BURST_KERNELS_REF_ATTENTION_REF_H
#define BURST_KERNELS_REF_ATTENTION_REF_H

#include "kernels/attention.h"

/* Whether query row i may attend to key row j of g (positions, segments, mask). */
int ref_attn_allowed(const bk_attn_geom *g, int64_t i, int64_t j);

/* O [n_q, h_q, d] and lse [n_q, h_q] (natural log; -inf and O = 0 for a row with
 * no allowed key). Inputs in the layouts of kernels/attention.h. */
void ref_attn_fwd(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                  double *O, double *lse);

/* dQ, dK, dV (overwritten) of loss = sum(O * dO) for the attention of g. */
void ref_attn_bwd(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                  const double *dO, double *dQ, double *dK, double *dV);

#endif
