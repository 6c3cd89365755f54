/* ops_math.cu: compiles the non-attention ops' shared math (kernels/ops_math.h)
 * for the device, so a CUDA build proves the header stays device-clean. Each
 * shared function is used once inside a __global__ kernel; nothing launches
 * these kernels, the real CUDA ops will. */
#include "kernels/ops_math.h"

__global__ void bk_ops_math_rmsnorm_kernel(const float *x, const float *w, const float *dy,
                                           float *y, float *dx, float *dw, int d, float eps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d) return;
    float rstd = bk_rmsnorm_rstd(x[0] * x[0] * (float)d, d, eps);
    y[i] = bk_rmsnorm_fwd_elem(x[i], rstd, w[i]);
    dx[i] = bk_rmsnorm_bwd_dx(x[i], w[i], dy[i], rstd, 0.5f);
    dw[i] = bk_rmsnorm_bwd_dw(x[i], dy[i], rstd);
}

__global__ void bk_ops_math_rope_kernel(const long long *pos, const float *x, float *out, int d,
                                        float theta, float factor)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int half = d / 2;
    if (i >= half) return;
    float c, s, a, b;
    bk_rope_sincos(pos[0], bk_rope_inv_freq(i, d, theta), factor, &c, &s);
    bk_rope_rotate(x[i], x[i + half], c, s, &a, &b);
    out[i] = a;
    out[i + half] = b;
}

__global__ void bk_ops_math_swiglu_kernel(const float *g, const float *u, const float *dout,
                                          float *out, float *dg, float *du, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = bk_swiglu_fwd_elem(g[i], u[i]);
    bk_swiglu_bwd_elem(g[i], u[i], dout[i], &dg[i], &du[i]);
}

__global__ void bk_ops_math_adamw_kernel(float *p, float *m, float *v, const float *g, int n,
                                         long long step, double sqnorm)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float scale = bk_clip_scale(sqnorm, 1.0);
    bk_adamw_coef c = bk_adamw_coefs(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, scale);
    bk_adamw_elem(&p[i], &m[i], &v[i], g[i], &c);
}

__global__ void bk_ops_math_ce_kernel(float *x, const long long *labels, float *loss, int V,
                                      float scale, float z)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= V) return;
    float lse = bk_ce_lse(0.0f, (float)V);
    float coef = bk_ce_prob_coef(lse, z, scale);
    x[j] = bk_ce_dlogit(expf(x[j]), 1.0f / (float)V, coef, scale, j == labels[0]);
    if (j == 0) loss[0] = bk_ce_loss(lse, x[labels[0]], z) + bk_logaddexp(lse, 0.0f);
}
