/* ops_math.h: per-element and per-row arithmetic of the non-attention ops
 * (RMSNorm, RoPE, SwiGLU, AdamW, cross-entropy, gradient clipping), written
 * once for both backends.
 *
 * Why here and not in the kernels: the CPU kernels (kernels/cpu/) and the CUDA
 * kernels must compute bit-for-bit the same formula, so the CPU tests that diff
 * against double-precision references also vouch for the GPU's arithmetic.
 * Reductions (sum of squares of a row, max and sum of exponentials) are the
 * backend's business: a CPU loop, a warp shuffle on the GPU; only what happens
 * to one element, or to a finished reduction, lives here.
 *
 * Everything compiles as host C11 and as CUDA device code (BK_HOSTDEV):
 * no pragmas, no libc beyond <math.h> and memcpy, no host-only pointers. */
#ifndef BURST_KERNELS_OPS_MATH_H
#define BURST_KERNELS_OPS_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/shared_math.h"

/* ---------------------------------------------------------------- exp
 * exp(x) in fp32, accurate to about 2 ulp, written so that a compiler can
 * vectorise it (libm's expf is an opaque call that stops SIMD in the CPU
 * loops of SwiGLU and cross-entropy) and so that the GPU computes the same
 * values. Cody-Waite reduction x = k ln2 + r with |r| <= ln2/2, exp(r) by its
 * Taylor series to degree 7 (truncation error < 3e-9 relative), then 2^k
 * built from exponent bits in two halves so that k = 128 needs no special case.
 * Results below FLT_MIN (x < -87.34) flush to 0; x > 88.72 gives +inf; NaN
 * stays NaN. */
BK_HOSTDEV float bk_expf(float x)
{
    const float lo = -87.33654f, hi = 88.72283f;
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;      /* few mantissa bits: k * ln2_hi is exact */
    const float ln2_lo = 1.428606765330187e-06f;  /* ln2 - ln2_hi */
    float xc = x >= lo ? (x <= hi ? x : hi) : lo; /* NaN goes to lo: no UB in the cast */
    float kf = rintf(xc * log2e);
    float r = (xc - kf * ln2_hi) - kf * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t k = (int32_t)kf, k1 = k / 2, k2 = k - k1; /* each in [-63, 64] */
    float s1 = bk_bits_to_float((uint32_t)(k1 + 127) << 23);
    float s2 = bk_bits_to_float((uint32_t)(k2 + 127) << 23);
    float y = p * s1 * s2;
    y = x < lo ? 0.0f : y;
    y = x > hi ? INFINITY : y;
    return x != x ? x : y;
}

/* ---------------------------------------------------------------- RMSNorm
 * y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) over a row of d.
 * Backward, with c = sum_j(w_j * dy_j * x_j) / d over the row:
 *   dx_i = rstd * (w_i * dy_i - x_i * rstd^2 * c),   dw_i += dy_i * x_i * rstd. */

/* rstd of a row from its sum of squares (accumulated by the backend). */
BK_HOSTDEV float bk_rmsnorm_rstd(float sumsq, int64_t d, float eps)
{
    return 1.0f / sqrtf(sumsq / (float)d + eps);
}

BK_HOSTDEV float bk_rmsnorm_fwd_elem(float x, float rstd, float w)
{
    return x * rstd * w;
}

/* c_over_d = sum_j(w_j * dy_j * x_j) / d of the row. */
BK_HOSTDEV float bk_rmsnorm_bwd_dx(float x, float w, float dy, float rstd, float c_over_d)
{
    return rstd * (w * dy - x * rstd * rstd * c_over_d);
}

BK_HOSTDEV float bk_rmsnorm_bwd_dw(float x, float dy, float rstd)
{
    return dy * x * rstd;
}

/* ---------------------------------------------------------------- RoPE
 * LLaMA's half-split ("rotate_half") pairing: in a head of d values, element i
 * pairs with element i + d/2 for i < d/2, and the pair rotates by the angle
 *   angle_i = pos * freq_i,   freq_i = scaled(theta^(-2i / d))
 * where pos is the token's GLOBAL position (so a rank holding a zigzag or
 * striped shard rotates exactly as the unsplit sequence would) and the
 * scaling is Hugging Face's rope_type (transformers' modeling_rope_utils):
 *   default  freq_i unchanged
 *   linear   freq_i / factor (position interpolation)
 *   llama3   wavelengths 2 pi / freq_i above original / low_freq_factor
 *            interpolated (/ factor), below original / high_freq_factor kept,
 *            a smooth mix between
 *   yarn     a linear ramp over the pair index between the dimensions where
 *            beta_fast and beta_slow rotations fit in the original context:
 *            kept below it, interpolated (/ factor) above it; cos and sin are
 *            multiplied by attention_factor.
 *   dynamic  (dynamic NTK) the base raised for a sequence of sequence_length
 *            tokens beyond the original context: theta (factor L / original -
 *            (factor - 1))^(d / (d - 2)), L = max(sequence_length, original),
 *            as transformers computes it for a batch of that length.
 * The angle is computed in double: at pos ~ 1e6 an fp32 product would be off
 * by ~0.06 rad. */
typedef enum {
    BK_ROPE_DEFAULT,
    BK_ROPE_LINEAR,
    BK_ROPE_LLAMA3,
    BK_ROPE_YARN,
    BK_ROPE_DYNAMIC
} bk_rope_type;

typedef struct {
    bk_rope_type type;
    double theta;                             /* the base */
    double factor;                            /* linear, llama3, yarn: the extension factor */
    double low_freq_factor, high_freq_factor; /* llama3 */
    double original_max_positions;            /* llama3, yarn, dynamic: the context pretrained on */
    double beta_fast, beta_slow;              /* yarn: rotations bounding the ramp */
    double attention_factor;                  /* yarn: cos and sin are scaled by it */
    double sequence_length;                   /* dynamic: the tokens of the sequences computed */
} bk_rope;

BK_HOSTDEV double bk_rope_inv_freq(int64_t i, int64_t d, double theta)
{
    return pow(theta, -2.0 * (double)i / (double)d);
}

BK_HOSTDEV double bk_rope_llama3_freq(const bk_rope *r, double f)
{
    const double two_pi = 6.28318530717958647693;
    double wavelen = two_pi / f, low_wavelen = r->original_max_positions / r->low_freq_factor,
           high_wavelen = r->original_max_positions / r->high_freq_factor;
    if (wavelen < high_wavelen) return f;
    if (wavelen > low_wavelen) return f / r->factor;
    double smooth = (r->original_max_positions / wavelen - r->low_freq_factor) /
                    (r->high_freq_factor - r->low_freq_factor);
    return (1.0 - smooth) * f / r->factor + smooth * f;
}

/* The pair index at which `rotations` full turns fit in the original context. */
BK_HOSTDEV double bk_rope_yarn_dim(const bk_rope *r, double rotations, int64_t d)
{
    const double two_pi = 6.28318530717958647693;
    return (double)d * log(r->original_max_positions / (rotations * two_pi)) /
           (2.0 * log(r->theta));
}

BK_HOSTDEV double bk_rope_yarn_freq(const bk_rope *r, int64_t i, int64_t d, double f)
{
    double low = floor(bk_rope_yarn_dim(r, r->beta_fast, d));
    double high = ceil(bk_rope_yarn_dim(r, r->beta_slow, d));
    low = low > 0.0 ? low : 0.0;
    high = high < (double)(d - 1) ? high : (double)(d - 1);
    if (low == high) high += 0.001; /* a ramp of one step, as transformers makes it */
    double ramp = ((double)i - low) / (high - low);
    ramp = ramp < 0.0 ? 0.0 : (ramp > 1.0 ? 1.0 : ramp);
    return f / r->factor * ramp + f * (1.0 - ramp);
}

/* dynamic NTK's base for heads of d values. */
BK_HOSTDEV double bk_rope_dynamic_theta(const bk_rope *r, int64_t d)
{
    double len = r->sequence_length > r->original_max_positions ? r->sequence_length
                                                                : r->original_max_positions;
    double grow = r->factor * len / r->original_max_positions - (r->factor - 1.0);
    return r->theta * pow(grow, (double)d / (double)(d - 2));
}

/* freq_i of pair i of a head of d values under r. */
BK_HOSTDEV double bk_rope_pair_freq(const bk_rope *r, int64_t i, int64_t d)
{
    if (r->type == BK_ROPE_DYNAMIC) return bk_rope_inv_freq(i, d, bk_rope_dynamic_theta(r, d));
    double f = bk_rope_inv_freq(i, d, r->theta);
    switch (r->type) {
    case BK_ROPE_LINEAR:
        return f / r->factor;
    case BK_ROPE_LLAMA3:
        return bk_rope_llama3_freq(r, f);
    case BK_ROPE_YARN:
        return bk_rope_yarn_freq(r, i, d, f);
    default:
        return f;
    }
}

/* What cos and sin are multiplied by: yarn's attention factor, else 1. */
BK_HOSTDEV float bk_rope_scale(const bk_rope *r)
{
    return r->type == BK_ROPE_YARN ? (float)r->attention_factor : 1.0f;
}

/* Whether r is one the kernels compute (the parameters of its type in range). */
BK_HOSTDEV int bk_rope_valid(const bk_rope *r)
{
    int scaled = r->type != BK_ROPE_DEFAULT;
    return r->theta > 0.0 && (!scaled || r->factor > 0.0) &&
           (r->type != BK_ROPE_LLAMA3 ||
            (r->original_max_positions > 0.0 && r->low_freq_factor > 0.0 &&
             r->high_freq_factor > r->low_freq_factor)) &&
           (r->type != BK_ROPE_YARN ||
            (r->theta > 1.0 && r->original_max_positions > 0.0 && r->beta_fast > 0.0 &&
             r->beta_slow > 0.0 && r->attention_factor > 0.0)) &&
           (r->type != BK_ROPE_DYNAMIC ||
            (r->factor >= 1.0 && r->original_max_positions > 0.0 && r->sequence_length > 0.0)) &&
           (int)r->type >= 0 && r->type <= BK_ROPE_DYNAMIC;
}

/* cos and sin of the angle pos * freq. The angle is reduced in
 * double to t = angle - q pi/2 with |t| <= pi/4 (exact enough even at
 * angle ~ 1e6), then sin t and cos t come from their Taylor series in fp32
 * (degree 9 and 10: error < 2e-9 on |t| <= pi/4) and the quadrant q mod 4
 * picks signs and swaps. No libm call, so the CPU loop vectorises and the GPU
 * computes the same values. */
BK_HOSTDEV void bk_rope_sincos(int64_t pos, double freq, float *c, float *s)
{
    const double two_over_pi = 0.63661977236758134308, pi_over_2 = 1.57079632679489661923;
    double angle = (double)pos * freq;
    double qd = rint(angle * two_over_pi);
    float t = (float)(angle - qd * pi_over_2), t2 = t * t;
    float sn = 1.0f / 362880.0f;
    sn = sn * t2 - 1.0f / 5040.0f;
    sn = sn * t2 + 1.0f / 120.0f;
    sn = sn * t2 - 1.0f / 6.0f;
    sn = (sn * t2 + 1.0f) * t;
    float cs = -1.0f / 3628800.0f;
    cs = cs * t2 + 1.0f / 40320.0f;
    cs = cs * t2 - 1.0f / 720.0f;
    cs = cs * t2 + 1.0f / 24.0f;
    cs = cs * t2 - 0.5f;
    cs = cs * t2 + 1.0f;
    /* quadrant: angle = t + q pi/2 rotates (cos, sin) by q quarter turns */
    int q = (int)((int64_t)qd & 3);
    float c_out = q == 0 ? cs : (q == 1 ? -sn : (q == 2 ? -cs : sn));
    float s_out = q == 0 ? sn : (q == 1 ? cs : (q == 2 ? -sn : -cs));
    *c = c_out;
    *s = s_out;
}

/* Rotates the pair (x1, x2) = (x[i], x[i + d/2]) by the angle whose cosine and
 * sine are c and s. The backward rotates by the negative angle: pass -s. */
BK_HOSTDEV void bk_rope_rotate(float x1, float x2, float c, float s, float *o1, float *o2)
{
    *o1 = x1 * c - x2 * s;
    *o2 = x1 * s + x2 * c;
}

/* ---------------------------------------------------------------- SwiGLU
 * out = silu(gate) * up with silu(g) = g * sigmoid(g). */
BK_HOSTDEV float bk_sigmoid(float g)
{
    /* exp(-g) overflows to inf for g < -88: 1 / inf = 0, the right limit. */
    return 1.0f / (1.0f + bk_expf(-g));
}

BK_HOSTDEV float bk_swiglu_fwd_elem(float g, float u)
{
    return g * bk_sigmoid(g) * u;
}

/* dgate = dout * up * silu'(g), silu'(g) = sig * (1 + g * (1 - sig));
 * dup = dout * silu(g). */
BK_HOSTDEV void bk_swiglu_bwd_elem(float g, float u, float dout, float *dg, float *du)
{
    float sig = bk_sigmoid(g);
    float silu = g * sig;
    *dg = dout * u * (sig * (1.0f + g * (1.0f - sig)));
    *du = dout * silu;
}

/* ---------------------------------------------------------------- AdamW
 * PyTorch's AdamW (decoupled weight decay, bias correction), per element:
 *   p -= lr * wd * p
 *   m  = b1 * m + (1 - b1) * g
 *   v  = b2 * v + (1 - b2) * g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The step-dependent factors are computed once per step (bk_adamw_coefs). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float step_size;    /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* 1 / sqrt(1 - beta2^t) */
    float grad_scale;   /* gradients are multiplied by this first (clipping, loss scale) */
} bk_adamw_coef;

/* step >= 1; bias corrections in double so that beta2^t is exact enough at
 * large t. */
BK_HOSTDEV bk_adamw_coef bk_adamw_coefs(float lr, float beta1, float beta2, float eps,
                                        float weight_decay, int64_t step, float grad_scale)
{
    bk_adamw_coef c;
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    c.lr = lr;
    c.beta1 = beta1;
    c.beta2 = beta2;
    c.eps = eps;
    c.weight_decay = weight_decay;
    c.step_size = (float)((double)lr / bc1);
    c.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    c.grad_scale = grad_scale;
    return c;
}

BK_HOSTDEV void bk_adamw_elem(float *p, float *m, float *v, float grad, const bk_adamw_coef *c)
{
    float g = grad * c->grad_scale;
    float pv = *p * (1.0f - c->lr * c->weight_decay);
    float mv = c->beta1 * *m + (1.0f - c->beta1) * g;
    float vv = c->beta2 * *v + (1.0f - c->beta2) * g * g;
    float denom = sqrtf(vv) * c->inv_sqrt_bc2 + c->eps;
    *p = pv - c->step_size * (mv / denom);
    *m = mv;
    *v = vv;
}

/* ---------------------------------------------------------------- clipping
 * Scale that brings a gradient of squared norm sqnorm to at most max_norm:
 * min(1, max_norm / norm). A zero norm needs no scaling; a non-finite norm
 * gives a NaN scale on purpose, so the step visibly fails instead of silently
 * zeroing the update. */
BK_HOSTDEV float bk_clip_scale(double sqnorm, double max_norm)
{
    double norm = sqrt(sqnorm);
    if (!isfinite(norm)) return NAN;
    if (norm <= max_norm || norm == 0.0) return 1.0f;
    return (float)(max_norm / norm);
}

/* ---------------------------------------------------------------- cross-entropy
 * One row of logits x[V] with label y (not ignored):
 *   lse  = max + log(sum_j exp(x_j - max))
 *   loss = lse - x_y + z * lse^2                         (z = 0: no z-loss)
 *   dx_j = scale * (p_j * (1 + 2 z lse) - [j == y])      with p_j = exp(x_j - lse)
 * The backend finds max and sumexp = sum_j exp(x_j - max). */
BK_HOSTDEV float bk_ce_lse(float rowmax, float sumexp)
{
    return rowmax + logf(sumexp);
}

BK_HOSTDEV float bk_ce_loss(float lse, float x_label, float z)
{
    return lse - x_label + z * lse * lse;
}

/* The factor every probability is multiplied by: scale * (1 + 2 z lse). */
BK_HOSTDEV float bk_ce_prob_coef(float lse, float z, float scale)
{
    return scale * (1.0f + 2.0f * z * lse);
}

/* e = exp(x_j - max), inv_sum = 1 / sumexp: p_j = e * inv_sum. is_label is 0/1. */
BK_HOSTDEV float bk_ce_dlogit(float e, float inv_sum, float prob_coef, float scale, int is_label)
{
    return e * inv_sum * prob_coef - (is_label ? scale : 0.0f);
}

#endif
