/* test_dev_sdpa.c: the fused SDPA calls of kernels/sdpa.h on the emulated
 * device, where the model of cuDNN (emu/cudnn/sdpa_model.cu) serves them, and
 * the state kernels around them (kernels/cuda/sdpa_state.cu).
 *
 * The model against the double-precision reference kernels/ref/attention_ref.c,
 * whose mask predicate is written independently of cuDNN's band rule: a band
 * (alignment, right bound R, left bound L) over rows i and columns j is our
 * window (left L - 1, right R) over positions q = i + shift, k = j. Outputs
 * are bf16 (one rounding: 2^-8 relative) from a double reference; Stats fp32.
 * The state kernels against their host references (kernels/sdpa.c): the same
 * formulas, so bit for bit.
 *
 * What cuDNN refuses, the model refuses (an unprepared plan, a small
 * workspace, s_q = s_kv = 1, a left bound with s_q > s_kv), and each of the
 * model's planted bugs (BK_EMU_SDPA_PLANT) is caught by a check here: a
 * transposed stride, Stats described strided, a window bound off by one,
 * Stats in base 2. The Q-side backward's surrogate O' keeps delta. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/sdpa.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

enum { MAX_SEQ = 4 };

/* One call over host buffers Q [n_q, h_q, d], K and V [n_kv, h_kv, d]. */
typedef struct {
    bk_sdpa_call c;
    bk_sdpa_seq seq[MAX_SEQ];
    int64_t n_q, n_kv;
} sdpa_case;

/* Cases are made in place: the call points at the case's own sequences. */
static void make_case(sdpa_case *out, int h_q, int h_kv, int d, bk_sdpa_band band, int n_seq,
                      const bk_sdpa_seq *seq)
{
    sdpa_case k;
    memset(&k, 0, sizeof k);
    memcpy(k.seq, seq, sizeof(bk_sdpa_seq) * (size_t)n_seq);
    for (int s = 0; s < n_seq; s++) {
        if (seq[s].q_row + seq[s].q_len > k.n_q) k.n_q = seq[s].q_row + seq[s].q_len;
        if (seq[s].kv_row + seq[s].kv_len > k.n_kv) k.n_kv = seq[s].kv_row + seq[s].kv_len;
    }
    k.c = (bk_sdpa_call){.h_q = h_q, .h_kv = h_kv, .d = d, .scale = 1.0f / sqrtf((float)d),
                         .band = band, .n_seq = n_seq};
    *out = k;
    out->c.seq = out->seq;
}

static bk_sdpa_band band(bk_sdpa_align align, int64_t right, int64_t left)
{
    return (bk_sdpa_band){.align = align, .has_right = right >= 0, .has_left = left >= 1,
                          .right = right, .left = left};
}

/* Random bf16 values in [-1, 1). */
static uint16_t *random_bf16(uint64_t *rs, size_t n)
{
    uint16_t *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = bk_float_to_bf16((float)test_rng_uniform(rs, -1, 1));
    return x;
}

/* Sequence s's rows of a bf16 buffer of `heads` heads, widened to double. */
static double *rows_of(const uint16_t *x, int64_t row, int64_t len, int heads, int d)
{
    size_t n = (size_t)(len * heads * d);
    double *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = bk_bf16_to_float(x[(size_t)(row * heads * d) + i]);
    return y;
}

/* The band of sequence s as our geometry: positions i + shift and j, the
 * window (L - 1, R). p_q and p_k are [len] buffers the geometry points at. */
static bk_attn_geom geom_of(const sdpa_case *k, int s, int64_t *p_q, int64_t *p_k)
{
    const bk_sdpa_seq *q = &k->seq[s];
    const bk_sdpa_band *b = &k->c.band;
    int64_t shift = b->align == BK_SDPA_BOTTOM_RIGHT ? q->kv_len - q->q_len : 0;
    for (int64_t i = 0; i < q->q_len; i++) p_q[i] = i + shift;
    for (int64_t j = 0; j < q->kv_len; j++) p_k[j] = j;
    bk_attn_mask m = b->has_left || b->has_right
                         ? bk_attn_mask_window(b->has_left ? b->left - 1 : -1,
                                               b->has_right ? b->right : -1)
                         : bk_attn_mask_none();
    return (bk_attn_geom){.n_q = q->q_len, .n_kv = q->kv_len, .h_q = k->c.h_q, .h_kv = k->c.h_kv,
                          .d = k->c.d, .scale = k->c.scale, .q_pos = p_q, .kv_pos = p_k,
                          .mask = m};
}

/* Device buffers of a case. */
typedef struct {
    uint16_t *Q, *K, *V, *O, *dO, *dQ, *dK, *dV; /* host */
    void *dev[8];
    float *stats; /* device */
    void *ws;
    size_t ws_bytes;
} sdpa_bufs;

static void *dev_zero(size_t bytes)
{
    void *host = calloc(1, bytes ? bytes : 1), *d = dev_put(host, bytes);
    free(host);
    return d;
}

static void bufs_make(sdpa_bufs *b, const sdpa_case *k, uint64_t seed, int backward)
{
    uint64_t rs = test_rng(seed);
    size_t q = (size_t)(k->n_q * k->c.h_q * k->c.d), kv = (size_t)(k->n_kv * k->c.h_kv * k->c.d);
    memset(b, 0, sizeof *b);
    b->Q = random_bf16(&rs, q);
    b->K = random_bf16(&rs, kv);
    b->V = random_bf16(&rs, kv);
    b->dO = random_bf16(&rs, q);
    b->dev[0] = dev_put(b->Q, q * 2);
    b->dev[1] = dev_put(b->K, kv * 2);
    b->dev[2] = dev_put(b->V, kv * 2);
    b->dev[3] = dev_zero(q * 2); /* O */
    b->dev[4] = dev_put(b->dO, q * 2);
    b->dev[5] = dev_zero(q * 2);  /* dQ */
    b->dev[6] = dev_zero(kv * 2); /* dK */
    b->dev[7] = dev_zero(kv * 2); /* dV */
    b->stats = dev_zero(bk_sdpa_stats_floats(&k->c) * sizeof(float));
    ck_assert_int_eq(bk_sdpa_prepare(&k->c, 1, backward, &b->ws_bytes), BK_OK);
    b->ws = dev_zero(b->ws_bytes);
}

static void bufs_free(sdpa_bufs *b)
{
    free(b->Q), free(b->K), free(b->V), free(b->dO);
    for (int i = 0; i < 8; i++) dev_free(b->dev[i]);
    dev_free(b->stats), dev_free(b->ws);
}

static bk_status run_fwd(const sdpa_case *k, sdpa_bufs *b)
{
    bk_queue q = dev_queue();
    return bk_sdpa_fwd(&q, &k->c, b->dev[0], b->dev[1], b->dev[2], b->dev[3], b->stats, b->ws,
                       b->ws_bytes);
}

/* The worst error of the forward of case k over tolerances: O within 2^-8
 * |O| + 2^-9 (one bf16 rounding, and fp32 room), Stats within 2e-5 (1 +
 * |lse|). > 1 fails. */
static double forward_error(const sdpa_case *k, sdpa_bufs *b)
{
    size_t q = (size_t)(k->n_q * k->c.h_q * k->c.d);
    uint16_t *O = malloc(q * 2);
    float *st = malloc(bk_sdpa_stats_floats(&k->c) * sizeof *st);
    dev_get(O, b->dev[3], q * 2);
    dev_get(st, b->stats, bk_sdpa_stats_floats(&k->c) * sizeof *st);
    int h = k->c.h_q, d = k->c.d;
    int64_t s_q = bk_sdpa_max_q(&k->c);
    double worst = 0.0;
    for (int s = 0; s < k->c.n_seq; s++) {
        const bk_sdpa_seq *sq = &k->seq[s];
        int64_t *pq = malloc((size_t)sq->q_len * 8), *pk = malloc((size_t)sq->kv_len * 8);
        bk_attn_geom g = geom_of(k, s, pq, pk);
        double *Qd = rows_of(b->Q, sq->q_row, sq->q_len, h, d);
        double *Kd = rows_of(b->K, sq->kv_row, sq->kv_len, k->c.h_kv, d);
        double *Vd = rows_of(b->V, sq->kv_row, sq->kv_len, k->c.h_kv, d);
        double *Or = malloc((size_t)(sq->q_len * h * d) * 8), *lr = malloc((size_t)(sq->q_len * h) * 8);
        ref_attn_fwd(&g, Qd, Kd, Vd, Or, lr);
        for (int64_t i = 0; i < sq->q_len; i++)
            for (int hh = 0; hh < h; hh++) {
                double ref_l = lr[i * h + hh], got_l = st[((int64_t)s * h + hh) * s_q + i];
                worst = fmax(worst, fabs(got_l - ref_l) / (2e-5 * (1 + fabs(ref_l))));
                if (isnan(got_l)) worst = INFINITY;
                for (int e = 0; e < d; e++) {
                    double r = Or[(i * h + hh) * d + e];
                    double g2 = bk_bf16_to_float(O[((sq->q_row + i) * h + hh) * d + e]);
                    worst = fmax(worst, fabs(g2 - r) / (0x1p-8 * fabs(r) + 0x1p-9));
                    if (isnan(g2)) worst = INFINITY;
                }
            }
        free(pq), free(pk), free(Qd), free(Kd), free(Vd), free(Or), free(lr);
    }
    free(O), free(st);
    return worst;
}

/* The cases: every band form our translator emits, GQA, two head dims, a
 * ragged call of three sequences. */
static void case_at(sdpa_case *k, int i)
{
    static const bk_sdpa_seq one = {0, 40, 0, 40}, wide = {0, 24, 0, 56}, offset = {8, 24, 16, 40};
    static const bk_sdpa_seq three[3] = {{0, 16, 0, 16}, {16, 24, 20, 32}, {40, 8, 52, 8}};
    /* a ragged call whose lowest rows are not the buffers' first */
    static const bk_sdpa_seq offset_three[3] = {{8, 16, 4, 16}, {24, 24, 24, 32}, {52, 8, 60, 8}};
    static const struct {
        int h_q, h_kv, d;
        bk_sdpa_align align;
        int64_t right, left; /* -1, 0: unset */
        int n_seq;
        const bk_sdpa_seq *seq;
    } cases[] = {
        {2, 2, 32, BK_SDPA_TOP_LEFT, -1, 0, 1, &one},      /* full */
        {4, 2, 32, BK_SDPA_TOP_LEFT, 0, 0, 1, &one},       /* causal, GQA */
        {2, 1, 64, BK_SDPA_TOP_LEFT, 5, 9, 1, &wide},      /* a two-sided band */
        {2, 2, 32, BK_SDPA_BOTTOM_RIGHT, 0, 0, 1, &wide},  /* causal bottom-right */
        {2, 2, 16, BK_SDPA_TOP_LEFT, 3, 0, 1, &offset},    /* a sub-view */
        {4, 1, 32, BK_SDPA_BOTTOM_RIGHT, 0, 0, 3, three},  /* ragged causal */
        {2, 2, 32, BK_SDPA_BOTTOM_RIGHT, 2, 6, 3, three},  /* ragged band */
        {2, 1, 32, BK_SDPA_BOTTOM_RIGHT, 0, 0, 3, offset_three}, /* ragged, offset views */
    };
    make_case(k, cases[i].h_q, cases[i].h_kv, cases[i].d,
              band(cases[i].align, cases[i].right, cases[i].left), cases[i].n_seq, cases[i].seq);
}
enum { N_CASES = 8 };

START_TEST(the_model_computes_the_reference_forward)
{
    sdpa_case k;
    case_at(&k, _i);
    sdpa_bufs b;
    bufs_make(&b, &k, 100 + (uint64_t)_i, 0);
    ck_assert_int_eq(run_fwd(&k, &b), BK_OK);
    double e = forward_error(&k, &b);
    ck_assert_msg(e <= 1.0, "case %d: error %.3g of tolerance", _i, e);
    bufs_free(&b);
}
END_TEST

/* Worst |got - ref| / (2^-7 |ref| + 2^-7 max|ref|) over one gradient of
 * [rows, heads, d] at row0 of the case's buffers; the model's delta comes
 * from the bf16 O it is given, hence the wider bound. */
static double grad_error(const uint16_t *got, int64_t row0, const double *ref, int64_t rows,
                         int heads, int d)
{
    size_t n = (size_t)(rows * heads * d);
    double top = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) top = fmax(top, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        double g = bk_bf16_to_float(got[(size_t)(row0 * heads * d) + i]);
        worst = fmax(worst, fabs(g - ref[i]) / (0x1p-7 * fabs(ref[i]) + 0x1p-7 * top + 1e-12));
        if (isnan(g)) worst = INFINITY;
    }
    return worst;
}

START_TEST(the_model_computes_the_reference_backward)
{
    sdpa_case k;
    case_at(&k, _i);
    sdpa_bufs b;
    bufs_make(&b, &k, 200 + (uint64_t)_i, 1);
    bk_queue q = dev_queue();
    ck_assert_int_eq(run_fwd(&k, &b), BK_OK); /* O and Stats as the backward reads them */
    ck_assert_int_eq(bk_sdpa_bwd(&q, &k.c, b.dev[0], b.dev[1], b.dev[2], b.dev[3], b.dev[4],
                                 b.stats, b.dev[5], b.dev[6], b.dev[7], b.ws, b.ws_bytes),
                     BK_OK);
    int h = k.c.h_q, hk = k.c.h_kv, d = k.c.d;
    size_t nq = (size_t)(k.n_q * h * d), nkv = (size_t)(k.n_kv * hk * d);
    uint16_t *dQ = malloc(nq * 2), *dK = malloc(nkv * 2), *dV = malloc(nkv * 2);
    dev_get(dQ, b.dev[5], nq * 2), dev_get(dK, b.dev[6], nkv * 2), dev_get(dV, b.dev[7], nkv * 2);
    for (int s = 0; s < k.c.n_seq; s++) {
        const bk_sdpa_seq *sq = &k.seq[s];
        int64_t *pq = malloc((size_t)sq->q_len * 8), *pk = malloc((size_t)sq->kv_len * 8);
        bk_attn_geom g = geom_of(&k, s, pq, pk);
        double *Qd = rows_of(b.Q, sq->q_row, sq->q_len, h, d);
        double *Kd = rows_of(b.K, sq->kv_row, sq->kv_len, hk, d);
        double *Vd = rows_of(b.V, sq->kv_row, sq->kv_len, hk, d);
        double *dOd = rows_of(b.dO, sq->q_row, sq->q_len, h, d);
        double *rq = malloc((size_t)(sq->q_len * h * d) * 8);
        double *rk = malloc((size_t)(sq->kv_len * hk * d) * 8), *rv = malloc((size_t)(sq->kv_len * hk * d) * 8);
        ref_attn_bwd(&g, Qd, Kd, Vd, dOd, rq, rk, rv);
        double e = fmax(grad_error(dQ, sq->q_row, rq, sq->q_len, h, d),
                        fmax(grad_error(dK, sq->kv_row, rk, sq->kv_len, hk, d),
                             grad_error(dV, sq->kv_row, rv, sq->kv_len, hk, d)));
        ck_assert_msg(e <= 1.0, "case %d sequence %d: error %.3g of tolerance", _i, s, e);
        free(pq), free(pk), free(Qd), free(Kd), free(Vd), free(dOd), free(rq), free(rk), free(rv);
    }
    free(dQ), free(dK), free(dV);
    bufs_free(&b);
}
END_TEST

START_TEST(the_model_refuses_what_cudnn_refuses)
{
    sdpa_case k;
    case_at(&k, 1);
    sdpa_bufs b;
    bufs_make(&b, &k, 7, 1);
    bk_queue q = dev_queue();
    sdpa_case unprepared;
    case_at(&unprepared, 1);
    unprepared.seq[0].q_len = unprepared.seq[0].kv_len = 32; /* another shape: another plan */
    ck_assert_int_eq(run_fwd(&unprepared, &b), BK_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(bk_kernel_error(), "no plan made"));
    ck_assert_int_eq(bk_sdpa_bwd(&q, &k.c, b.dev[0], b.dev[1], b.dev[2], b.dev[3], b.dev[4],
                                 b.stats, b.dev[5], b.dev[6], b.dev[7], b.ws, b.ws_bytes - 4),
                     BK_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(bk_kernel_error(), "workspace"));
    size_t ws;
    bk_sdpa_seq single = {0, 1, 0, 1}, tall = {0, 40, 0, 20};
    sdpa_case one, window_tall;
    make_case(&one, 2, 2, 32, band(BK_SDPA_TOP_LEFT, -1, 0), 1, &single);
    ck_assert_int_eq(bk_sdpa_prepare(&one.c, 1, 0, &ws), BK_ERR_DEVICE);
    make_case(&window_tall, 2, 2, 32, band(BK_SDPA_TOP_LEFT, 0, 4), 1, &tall);
    ck_assert_int_eq(bk_sdpa_prepare(&window_tall.c, 1, 0, &ws), BK_ERR_DEVICE);
    bufs_free(&b);
}
END_TEST

/* A row the band empties (a ragged sequence with more rows than keys,
 * aligned bottom-right: its first rows see no key): cuDNN does not define
 * it, the model makes it NaN, never a value a caller could take for an
 * answer. */
START_TEST(a_row_with_no_key_is_nan)
{
    bk_sdpa_seq two[2] = {{0, 16, 0, 16}, {16, 24, 16, 8}};
    sdpa_case k;
    make_case(&k, 2, 2, 32, band(BK_SDPA_BOTTOM_RIGHT, 0, 0), 2, two);
    sdpa_bufs b;
    bufs_make(&b, &k, 9, 0);
    ck_assert_int_eq(run_fwd(&k, &b), BK_OK);
    int64_t s_q = bk_sdpa_max_q(&k.c);
    float *st = malloc(bk_sdpa_stats_floats(&k.c) * sizeof *st);
    dev_get(st, b.stats, bk_sdpa_stats_floats(&k.c) * sizeof *st);
    ck_assert(isnan(st[2 * s_q + 0]) && isnan(st[2 * s_q + 15])); /* sequence 1, head 0 */
    ck_assert(!isnan(st[2 * s_q + 16]) && !isnan(st[0]));
    uint16_t O0;
    dev_get(&O0, (uint16_t *)b.dev[3] + 16 * 2 * 32, 2);
    ck_assert(isnan(bk_bf16_to_float(O0)));
    free(st);
    bufs_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- planted bugs */
/* Each planted bug of the model, against the check that must catch it. */
START_TEST(planted_bugs_are_caught)
{
    static const struct {
        const char *plant;
        int the_case;
    } bugs[] = {{"transposed-stride", 1}, {"stats-strided", 1}, {"window-bound", 2},
                {"lse-base2", 0}};
    setenv("BK_EMU_SDPA_PLANT", bugs[_i].plant, 1);
    sdpa_case k;
    case_at(&k, bugs[_i].the_case);
    sdpa_bufs b;
    memset(&b, 0, sizeof b);
    size_t ws;
    bk_status prepared = bk_sdpa_prepare(&k.c, 1, 0, &ws);
    if (prepared == BK_OK) {
        bufs_make(&b, &k, 300 + (uint64_t)_i, 0);
        bk_status st = run_fwd(&k, &b);
        ck_assert_msg(st != BK_OK || forward_error(&k, &b) > 1.0, "%s: not caught",
                      bugs[_i].plant);
        bufs_free(&b);
    } else {
        ck_assert_int_eq(prepared, BK_ERR_DEVICE); /* refused, as cuDNN would */
    }
    unsetenv("BK_EMU_SDPA_PLANT");
}
END_TEST

/* ---------------------------------------------------------------- state kernels */
static float *random_f32(uint64_t *rs, size_t n, double lo, double hi)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)test_rng_uniform(rs, lo, hi);
    return x;
}

/* The merge, the packing and the add on the device, bit for bit their host
 * references, over the ragged case (rows outside its sequences untouched);
 * some rows empty on either side (-inf). */
START_TEST(state_kernels_match_their_host_references)
{
    sdpa_case k;
    case_at(&k, 5);
    uint64_t rs = test_rng(11);
    int h = k.c.h_q, d = k.c.d;
    int64_t n = k.n_q + 5;
    size_t o = (size_t)(n * h * d), l = (size_t)(n * h), st = bk_sdpa_stats_floats(&k.c);
    float *O = random_f32(&rs, o, -1, 1), *lse = random_f32(&rs, l, -3, 3);
    float *stats = random_f32(&rs, st, -3, 3);
    uint16_t *Ob = random_bf16(&rs, o);
    lse[3] = -INFINITY, stats[5] = -INFINITY, lse[7] = stats[7] = -INFINITY;
    float *dO = dev_put(O, o * 4), *dl = dev_put(lse, l * 4), *ds = dev_put(stats, st * 4);
    uint16_t *dOb = dev_put(Ob, o * 2);
    bk_queue host = bk_host_queue(), dev = dev_queue();
    ck_assert_int_eq(bk_attn_merge_sdpa(&host, &k.c, n, d, O, lse, Ob, stats), BK_OK);
    ck_assert_int_eq(bk_attn_merge_sdpa(&dev, &k.c, n, d, dO, dl, dOb, ds), BK_OK);
    float *got = malloc(o * 4);
    dev_get(got, dO, o * 4);
    ck_assert_mem_eq(got, O, o * 4);
    dev_get(got, dl, l * 4);
    ck_assert_mem_eq(got, lse, l * 4);
    ck_assert_int_eq(bk_attn_pack_stats(&host, &k.c, n, lse, stats), BK_OK);
    ck_assert_int_eq(bk_attn_pack_stats(&dev, &k.c, n, dl, ds), BK_OK);
    dev_get(got, ds, st * 4);
    ck_assert_mem_eq(got, stats, st * 4);
    ck_assert_int_eq(bk_add_bf16(&host, (int64_t)o, Ob, O), BK_OK);
    ck_assert_int_eq(bk_add_bf16(&dev, (int64_t)o, dOb, dO), BK_OK);
    dev_get(got, dO, o * 4);
    ck_assert_mem_eq(got, O, o * 4);
    free(O), free(lse), free(stats), free(Ob), free(got);
    dev_free(dO), dev_free(dl), dev_free(ds), dev_free(dOb);
}
END_TEST

/* The Q-side backward's surrogate O' (bk_attn_surrogate_o): bit for bit its
 * host reference on the device, and rowsum(dO O') within 2^-9 |delta| of
 * delta, as cuDNN sums it (fp32 over bf16 values; here in double), with a
 * row of zeros in dO giving O' = 0. The worst relative error is printed:
 * doc/ATTENTION.md records it. */
START_TEST(the_surrogate_output_keeps_delta)
{
    enum { N = 64, H = 4, D = 64 };
    uint64_t rs = test_rng(21);
    uint16_t *dO = random_bf16(&rs, N * H * D);
    float *delta = random_f32(&rs, N * H, -2, 2);
    for (int e = 0; e < D; e++) dO[5 * D + e] = 0; /* row 1, head 1 */
    uint16_t host_o[N * H * D], got[N * H * D];
    bk_queue host = bk_host_queue(), dev = dev_queue();
    ck_assert_int_eq(bk_attn_surrogate_o(&host, N, H, D, dO, delta, host_o), BK_OK);
    uint16_t *d_dO = dev_put(dO, sizeof host_o), *d_o = dev_put(host_o, sizeof host_o);
    float *d_delta = dev_put(delta, N * H * sizeof(float));
    ck_assert_int_eq(bk_attn_surrogate_o(&dev, N, H, D, d_dO, d_delta, d_o), BK_OK);
    dev_get(got, d_o, sizeof got);
    ck_assert_mem_eq(got, host_o, sizeof got);
    double worst = 0.0;
    for (int r = 0; r < N * H; r++) {
        double sum = 0.0;
        for (int e = 0; e < D; e++)
            sum += (double)bk_bf16_to_float(dO[r * D + e]) * bk_bf16_to_float(host_o[r * D + e]);
        if (r == 5) {
            ck_assert(sum == 0.0 && host_o[r * D] == 0);
            continue;
        }
        double rel = fabs(sum - delta[r]) / fabs(delta[r]);
        ck_assert_msg(rel <= 0x1p-9, "row-head %d: rowsum %.9g, delta %.9g", r, sum, delta[r]);
        if (rel > worst) worst = rel;
    }
    printf("surrogate O': worst |rowsum(dO O') - delta| / |delta| = %.3g (bound 2^-9 = %.3g)\n",
           worst, 0x1p-9);
    free(dO), free(delta);
    dev_free(d_dO), dev_free(d_o), dev_free(d_delta);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dev_sdpa");
    TCase *t = tcase_create("model");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, the_model_computes_the_reference_forward, 0, N_CASES);
    tcase_add_loop_test(t, the_model_computes_the_reference_backward, 0, N_CASES);
    tcase_add_test(t, the_model_refuses_what_cudnn_refuses);
    tcase_add_test(t, a_row_with_no_key_is_nan);
    tcase_add_loop_test(t, planted_bugs_are_caught, 0, 4);
    tcase_add_test(t, state_kernels_match_their_host_references);
    tcase_add_test(t, the_surrogate_output_keeps_delta);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return dev_test_main(suite());
}
