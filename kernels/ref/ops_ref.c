/* ops_ref.c: the double-precision references of kernels/ref/ops_ref.h: each a
 * direct transcription of the formula, no blocking, no tricks. */
#include <math.h>
#include <string.h>

#include "kernels/ref/ops_ref.h"

void ref_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, double beta, const float *c_in, int64_t ldc,
              double *c_out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
            }
            double c0 = beta == 0.0 ? 0.0 : beta * c_in[i * ldc + j];
            c_out[i * n + j] = alpha * s + c0;
        }
}

void ref_rmsnorm_fwd(int64_t n, int64_t d, const double *x, const double *w, double eps, double *y,
                     double *rstd)
{
    for (int64_t r = 0; r < n; r++) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; j++) ss += x[r * d + j] * x[r * d + j];
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        for (int64_t j = 0; j < d; j++) y[r * d + j] = x[r * d + j] * rs * w[j];
        if (rstd) rstd[r] = rs;
    }
}

void ref_rmsnorm_bwd(int64_t n, int64_t d, const double *x, const double *w, double eps,
                     const double *dy, double *dx, double *dw)
{
    for (int64_t j = 0; j < d; j++) dw[j] = 0.0;
    for (int64_t r = 0; r < n; r++) {
        const double *xr = x + r * d, *g = dy + r * d;
        double ss = 0.0;
        for (int64_t j = 0; j < d; j++) ss += xr[j] * xr[j];
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        /* y_j = x_j rs w_j, d rs / d x_i = -rs^3 x_i / d */
        double dot = 0.0;
        for (int64_t j = 0; j < d; j++) dot += g[j] * w[j] * xr[j];
        for (int64_t i = 0; i < d; i++) {
            dx[r * d + i] = g[i] * w[i] * rs - rs * rs * rs * xr[i] * dot / (double)d;
            dw[i] += g[i] * xr[i] * rs;
        }
    }
}

/* transformers' llama3: low frequencies divided by the factor, high ones
 * kept, the medium band a mix weighted by where the wavelength falls. */
static double ref_llama3(const bk_rope *r, double inv)
{
    double wavelen = 2.0 * M_PI / inv, old_len = r->original_max_positions;
    double low_wavelen = old_len / r->low_freq_factor, high_wavelen = old_len / r->high_freq_factor;
    double llama = wavelen > low_wavelen ? inv / r->factor : inv;
    double smooth =
        (old_len / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    double smoothed = (1.0 - smooth) * llama / r->factor + smooth * llama;
    int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    return medium ? smoothed : llama;
}

/* transformers' yarn: find_correction_range, then a linear ramp. */
static double ref_yarn(const bk_rope *r, int64_t i, int64_t d, double inv)
{
    double dim_fast =
        d * log(r->original_max_positions / (r->beta_fast * 2.0 * M_PI)) / (2.0 * log(r->theta));
    double dim_slow =
        d * log(r->original_max_positions / (r->beta_slow * 2.0 * M_PI)) / (2.0 * log(r->theta));
    double low = fmax(floor(dim_fast), 0.0), high = fmin(ceil(dim_slow), (double)(d - 1));
    if (low == high) high += 0.001;
    double ramp = fmin(fmax(((double)i - low) / (high - low), 0.0), 1.0);
    double extrapolation = 1.0 - ramp;
    return inv / r->factor * (1.0 - extrapolation) + inv * extrapolation;
}

static double ref_freq(const bk_rope *r, int64_t i, int64_t d)
{
    double base = r->theta;
    if (r->type == BK_ROPE_DYNAMIC) { /* transformers' _compute_dynamic_ntk_parameters */
        double seq = fmax(r->sequence_length, r->original_max_positions);
        base *= pow(r->factor * seq / r->original_max_positions - (r->factor - 1.0),
                    (double)d / (double)(d - 2));
    }
    double inv = 1.0 / pow(base, (double)(2 * i) / (double)d);
    if (r->type == BK_ROPE_LINEAR) return inv / r->factor;
    if (r->type == BK_ROPE_LLAMA3) return ref_llama3(r, inv);
    if (r->type == BK_ROPE_YARN) return ref_yarn(r, i, d, inv);
    return inv;
}

void ref_rope(int64_t n, int64_t H, int64_t d, const int64_t *pos, const bk_rope *r,
              const double *x, double sign, double *out)
{
    int64_t half = d / 2;
    double scale = r->type == BK_ROPE_YARN ? r->attention_factor : 1.0;
    for (int64_t r0 = 0; r0 < n; r0++)
        for (int64_t h = 0; h < H; h++) {
            const double *xh = x + (r0 * H + h) * d;
            double *oh = out + (r0 * H + h) * d;
            for (int64_t i = 0; i < half; i++) {
                double angle = sign * (double)pos[r0] * ref_freq(r, i, d);
                double c = scale * cos(angle), s = scale * sin(angle);
                double x1 = xh[i], x2 = xh[i + half];
                oh[i] = x1 * c - x2 * s;
                oh[i + half] = x1 * s + x2 * c;
            }
        }
}

static double ref_sigmoid(double g)
{
    return 1.0 / (1.0 + exp(-g));
}

void ref_swiglu_fwd(int64_t n, const double *g, const double *u, double *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = g[i] * ref_sigmoid(g[i]) * u[i];
}

void ref_swiglu_bwd(int64_t n, const double *g, const double *u, const double *dout, double *dg,
                    double *du)
{
    for (int64_t i = 0; i < n; i++) {
        double s = ref_sigmoid(g[i]);
        /* d/dg (g s(g)) = s + g s (1 - s) */
        dg[i] = dout[i] * u[i] * (s + g[i] * s * (1.0 - s));
        du[i] = dout[i] * g[i] * s;
    }
}

void ref_embedding_gather(int64_t n, int64_t D, const int64_t *tokens, const double *table,
                          double *out)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < D; j++) out[r * D + j] = table[tokens[r] * D + j];
}

void ref_embedding_scatter_add(int64_t n, int64_t D, const int64_t *tokens, const double *dout,
                               double *dtable)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < D; j++) dtable[tokens[r] * D + j] += dout[r * D + j];
}

void ref_adamw_step(int64_t n, double *p, double *m, double *v, const double *g, double lr,
                    double beta1, double beta2, double eps, double wd, int64_t step,
                    double grad_scale)
{
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] * grad_scale;
        p[i] -= lr * wd * p[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi;
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        p[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

int64_t ref_cross_entropy(int64_t rows, int64_t V, const double *logits, const int64_t *labels,
                          int64_t ignore_index, double scale, double z, double *loss, double *lse,
                          double *dlogits)
{
    int64_t valid = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *x = logits + r * V;
        if (labels[r] == ignore_index) {
            if (loss) loss[r] = 0.0;
            if (lse) lse[r] = 0.0;
            if (dlogits) memset(dlogits + r * V, 0, (size_t)V * sizeof(double));
            continue;
        }
        valid++;
        double mx = -INFINITY;
        for (int64_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double s = 0.0;
        for (int64_t j = 0; j < V; j++) s += exp(x[j] - mx);
        double l = mx + log(s);
        if (loss) loss[r] = l - x[labels[r]] + z * l * l;
        if (lse) lse[r] = l;
        if (dlogits)
            for (int64_t j = 0; j < V; j++) {
                double p = exp(x[j] - l);
                /* d/dx_j (lse - x_y + z lse^2) = p_j - [j = y] + 2 z lse p_j */
                dlogits[r * V + j] = scale * (p - (j == labels[r] ? 1.0 : 0.0) + 2.0 * z * l * p);
            }
    }
    return valid;
}
