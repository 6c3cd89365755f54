/* attention_ref.c: the double-precision attention reference: for every query
 * row and head, the scores of the allowed keys, their softmax, the output, and
 * the textbook gradients. Quadratic and slow by design; used on small shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ref/attention_ref.h"

int ref_attn_allowed(const bk_attn_geom *g, int64_t i, int64_t j)
{
    const bk_attn_mask *m = &g->mask;
    int64_t qp = g->q_pos ? g->q_pos[i] : 0, kp = g->kv_pos ? g->kv_pos[j] : 0;
    int ok = 1;
    if (m->flags & BK_ATTN_CAUSAL) ok = ok && kp <= qp;
    if (m->flags & BK_ATTN_WINDOW) {
        if (m->window_left >= 0) ok = ok && kp >= qp - m->window_left;
        if (m->window_right >= 0) ok = ok && kp <= qp + m->window_right;
    }
    if (m->flags & BK_ATTN_DOCUMENT) ok = ok && g->q_seg[i] == g->kv_seg[j];
    if (m->flags & BK_ATTN_BLOCK_SPARSE) {
        int64_t lim = m->block_size * m->n_blocks;
        if (qp < 0 || kp < 0 || qp >= lim || kp >= lim) {
            ok = 0;
        } else {
            uint64_t idx = (uint64_t)(qp / m->block_size) * (uint64_t)m->n_blocks +
                           (uint64_t)(kp / m->block_size);
            ok = ok && ((m->block_bits[idx / 64] >> (idx % 64)) & 1u);
        }
    }
    return ok;
}

static double dot(const double *a, const double *b, int d)
{
    double s = 0;
    for (int c = 0; c < d; c++) s += a[c] * b[c];
    return s;
}

/* Softmax probabilities p [n_kv] of query row i, head h; returns lse. */
static double probs(const bk_attn_geom *g, const double *Q, const double *K, int64_t i, int h,
                    double *p)
{
    int d = g->d, hk = h / (g->h_q / g->h_kv);
    const double *q = Q + (i * g->h_q + h) * d;
    double mx = -INFINITY;
    for (int64_t j = 0; j < g->n_kv; j++) {
        p[j] = ref_attn_allowed(g, i, j) ? g->scale * dot(q, K + (j * g->h_kv + hk) * d, d)
                                         : -INFINITY;
        if (p[j] > mx) mx = p[j];
    }
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < g->n_kv; j++) p[j] = 0;
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < g->n_kv; j++) sum += p[j] = exp(p[j] - mx);
    for (int64_t j = 0; j < g->n_kv; j++) p[j] /= sum;
    return mx + log(sum);
}

void ref_attn_fwd(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                  double *O, double *lse)
{
    int d = g->d;
    double *p = malloc(((size_t)g->n_kv + 1) * sizeof *p);
    for (int64_t i = 0; i < g->n_q; i++)
        for (int h = 0; h < g->h_q; h++) {
            int hk = h / (g->h_q / g->h_kv);
            lse[i * g->h_q + h] = probs(g, Q, K, i, h, p);
            double *o = O + (i * g->h_q + h) * d;
            for (int c = 0; c < d; c++) o[c] = 0;
            for (int64_t j = 0; j < g->n_kv; j++)
                for (int c = 0; c < d; c++) o[c] += p[j] * V[(j * g->h_kv + hk) * d + c];
        }
    free(p);
}

void ref_attn_bwd(const bk_attn_geom *g, const double *Q, const double *K, const double *V,
                  const double *dO, double *dQ, double *dK, double *dV)
{
    int d = g->d;
    memset(dQ, 0, (size_t)g->n_q * g->h_q * d * sizeof *dQ);
    memset(dK, 0, (size_t)g->n_kv * g->h_kv * d * sizeof *dK);
    memset(dV, 0, (size_t)g->n_kv * g->h_kv * d * sizeof *dV);
    double *p = malloc(((size_t)g->n_kv + 1) * sizeof *p);
    double *o = malloc((size_t)d * sizeof *o);
    for (int64_t i = 0; i < g->n_q; i++)
        for (int h = 0; h < g->h_q; h++) {
            int hk = h / (g->h_q / g->h_kv);
            probs(g, Q, K, i, h, p);
            const double *q = Q + (i * g->h_q + h) * d, *go = dO + (i * g->h_q + h) * d;
            for (int c = 0; c < d; c++) o[c] = 0;
            for (int64_t j = 0; j < g->n_kv; j++)
                for (int c = 0; c < d; c++) o[c] += p[j] * V[(j * g->h_kv + hk) * d + c];
            double delta = dot(go, o, d); /* rowsum(dO * O) */
            for (int64_t j = 0; j < g->n_kv; j++) {
                if (p[j] == 0) continue;
                const double *k = K + (j * g->h_kv + hk) * d, *v = V + (j * g->h_kv + hk) * d;
                double ds = p[j] * (dot(go, v, d) - delta) * g->scale;
                for (int c = 0; c < d; c++) {
                    dQ[(i * g->h_q + h) * d + c] += ds * k[c];
                    dK[(j * g->h_kv + hk) * d + c] += ds * q[c];
                    dV[(j * g->h_kv + hk) * d + c] += p[j] * go[c];
                }
            }
        }
    free(o);
    free(p);
}
