/* optimizer_worker.c: one rank of the ZeRO optimizer test, launched by
 * test_optimizer through `burst run -n P`. Every rank builds the same
 * parameters and its own seeded gradients, runs zero_step, and checks against
 * a serial double-precision AdamW over the SUM of every rank's gradients with
 * the same global-norm clipping (every rank computes the reference itself):
 *   - parameters within 1e-5 relative, and bitwise identical on every rank;
 *   - the reported norm equals the reference norm; clipping fired on some steps;
 *   - the shards cover [0, n) in rank order, disjoint, state bytes as stated;
 *   - a NaN gradient on one rank gives a non-finite norm on every rank and
 *     leaves parameters and moments unchanged (the next step still matches);
 *   - bf16 parameters (the same zero_step, given the same gradients) are at
 *     every step the fp32 parameters rounded, bit for bit, and the masters gathered
 *     (zero_gather_params) are the fp32 parameters, bit for bit;
 *   - stage 3's gathers (zero_gather_range) copy each owner's bits exactly,
 *     fp32 or rounded to bf16, -0, NaN, infinities and subnormals included.
 * Cases: n = 1001 (not a multiple of P) with a patchy decay mask and clipping,
 * n = 12 (a multiple of P = 1..4: the unpadded path), n = 3 (empty shards at
 * P = 4), no mask, no clipping. Prints "ok optimizer on P ranks" on rank 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "src/train/zero.h"
#include "tests/lib/worker_util.h"
#include "util/rng.h"

/* Uniform in [0, 1) from a seed and three indices (the same on every rank). */
static double uni(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = bu_splitmix64(seed ^ bu_splitmix64(a ^ bu_splitmix64(b ^ bu_splitmix64(c))));
    return (double)(h >> 11) * 0x1.0p-53;
}

/* Sign of element i, common to all ranks and steps so that the summed gradient
 * never cancels to near zero (AdamW's first step is sign(g) * lr, which would
 * make a near-zero sum ill-conditioned). */
static double sign_of(int64_t i)
{
    return uni(7, (uint64_t)i, 0, 0) < 0.5 ? -1.0 : 1.0;
}

/* Gradient of element i on rank r at step s, with per-step amplitude amp[s]. */
static float grad_of(int64_t i, int r, int64_t s, const double *amp)
{
    return (float)(sign_of(i) * amp[s] * (0.5 + uni(11, (uint64_t)i, (uint64_t)r, (uint64_t)s)));
}

static uint64_t fnv1a(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    const char *name;
    int64_t n;
    int masked;       /* decay mask with zeros in places, else NULL */
    double grad_clip; /* 0 = none */
    int steps;        /* regular steps before the NaN step */
} test_case;

/* Reference AdamW in double on the summed gradient (PyTorch's formula, as the
 * kernel). Returns the global norm before clipping. */
static double ref_step(int64_t n, double *p, double *m, double *v, const uint8_t *mask,
                       const zero_hparams *hp, double lr, int64_t t, const double *amp)
{
    double *g = malloc((size_t)n * sizeof *g), sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0.0;
        for (int r = 0; r < size; r++) s += (double)grad_of(i, r, t, amp);
        g[i] = s;
        sq += s * s;
    }
    double norm = sqrt(sq);
    double scale = hp->grad_clip > 0.0 && norm > hp->grad_clip ? hp->grad_clip / norm : 1.0;
    double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] * scale, wd = !mask || mask[i] ? hp->weight_decay : 0.0;
        p[i] -= lr * wd * p[i];
        m[i] = hp->beta1 * m[i] + (1.0 - hp->beta1) * gi;
        v[i] = hp->beta2 * v[i] + (1.0 - hp->beta2) * gi * gi;
        p[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + hp->eps);
    }
    free(g);
    return norm;
}

/* Every rank's parameters hash to the same value. */
static void expect_identical(const float *params, int64_t n, const char *tc, int64_t step)
{
    uint64_t h = fnv1a(params, (size_t)n * sizeof(float));
    uint64_t *all = calloc((size_t)size, sizeof *all);
    must(bt_allgather(bt_world_comm(world), &h, all, sizeof h), "allgather hash");
    for (int r = 0; r < size; r++)
        EXPECT(all[r] == all[0], "%s step %lld: parameters of rank %d differ from rank 0's", tc,
               (long long)step, r);
    free(all);
}

static double max_rel_err(const float *a, const double *ref, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / fmax(fabs(ref[i]), 1e-2);
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    return worst;
}

/* The bf16 run's parameters are the fp32 run's rounded, and its masters
 * gathered are the fp32 run's parameters, bit for bit. */
static void expect_bf16_follows(zero *z16, const uint16_t *params16, const float *params, int64_t n,
                                const char *tc, int64_t step)
{
    int64_t off = -1;
    for (int64_t i = 0; i < n && off < 0; i++)
        if (params16[i] != bk_float_to_bf16(params[i])) off = i;
    EXPECT(off < 0, "%s step %lld: bf16 parameter %lld is %04x, the fp32 one rounded %04x", tc,
           (long long)step, (long long)off, off < 0 ? 0 : params16[off],
           off < 0 ? 0 : bk_float_to_bf16(params[off]));
    float *gathered = malloc((size_t)(n > 0 ? n : 1) * sizeof *gathered);
    must(zero_gather_params(z16, gathered), "zero_gather_params");
    EXPECT(memcmp(gathered, params, (size_t)n * sizeof *params) == 0,
           "%s step %lld: the gathered masters differ from the fp32 parameters", tc,
           (long long)step);
    free(gathered);
}

static void run_case(const test_case *tc)
{
    bt_comm *comm = bt_world_comm(world);
    int64_t n = tc->n;
    const double amp[] = {0, 0.01, 1.0, 0.02, 3.0, 0.005, 0.5, 0.03};
    const int n_amp = (int)(sizeof amp / sizeof amp[0]);
    zero_hparams hp = {0.9, 0.95, 1e-8, 0.1, tc->grad_clip};
    const double lr0 = 1e-2, min_lr = 1e-3;
    const int64_t warmup = 2, total = tc->steps + 1;
    if (tc->steps + 2 > n_amp) {
        fprintf(stderr, "too many steps\n");
        exit(2);
    }

    uint8_t *mask = NULL;
    if (tc->masked) {
        mask = malloc((size_t)n);
        /* Runs of zeros of various lengths, some crossing shard boundaries. */
        for (int64_t i = 0; i < n; i++) mask[i] = !(i % 97 < 13 || i % 5 == 0 || i == n - 1);
    }
    float *params = malloc((size_t)n * sizeof *params), *grads = malloc((size_t)n * sizeof *grads);
    double *rp = malloc((size_t)n * sizeof *rp), *rm = calloc((size_t)n, sizeof *rm),
           *rv = calloc((size_t)n, sizeof *rv);
    for (int64_t i = 0; i < n; i++) {
        params[i] = (float)((uni(3, (uint64_t)i, 0, 0) < 0.5 ? -1.0 : 1.0) *
                            (0.5 + uni(5, (uint64_t)i, 0, 0)));
        rp[i] = params[i];
    }

    zero *z = zero_create(comm, n, mask, &hp, NULL, BK_F32, (zero_sharding){.stage = 1});
    zero *z16 = zero_create(comm, n, mask, &hp, NULL, BK_BF16, (zero_sharding){.stage = 1});
    if (!z || !z16) {
        fprintf(stderr, "rank %d: %s: zero_create failed\n", rank, tc->name);
        exit(1);
    }
    uint16_t *params16 = malloc((size_t)n * 2 + 2);
    float *grads16 = malloc((size_t)n * sizeof *grads16 + 4);
    EXPECT(zero_set_params(z16, params, params16) == 0, "%s: zero_set_params failed", tc->name);
    expect_bf16_follows(z16, params16, params, n, tc->name, 0);

    /* Shards: in rank order, disjoint, covering [0, n), at most ceil(n / P) each. */
    int64_t be[2];
    zero_shard(z, &be[0], &be[1]);
    EXPECT(zero_state_bytes(z) == 2 * sizeof(float) * (size_t)(be[1] - be[0]),
           "%s: state bytes %zu for shard [%lld, %lld)", tc->name, zero_state_bytes(z),
           (long long)be[0], (long long)be[1]);
    int64_t *all = calloc(2 * (size_t)size, sizeof *all);
    must(bt_allgather(comm, be, all, sizeof be), "allgather shard");
    int64_t expect_begin = 0, max_shard = (n + size - 1) / size;
    for (int r = 0; r < size; r++) {
        EXPECT(all[2 * r] == expect_begin && all[2 * r + 1] >= all[2 * r] &&
                   all[2 * r + 1] - all[2 * r] <= max_shard,
               "%s: shard of rank %d is [%lld, %lld), expected to start at %lld", tc->name, r,
               (long long)all[2 * r], (long long)all[2 * r + 1], (long long)expect_begin);
        expect_begin = all[2 * r + 1];
    }
    EXPECT(expect_begin == n, "%s: shards end at %lld, not at n = %lld", tc->name,
           (long long)expect_begin, (long long)n);
    free(all);

    int clipped = 0, unclipped = 0;
    for (int64_t t = 1; t <= tc->steps + 1; t++) {
        /* Step steps + 1 comes after the NaN step: the moments must be untouched. */
        if (t == tc->steps + 1) {
            float *before = malloc((size_t)n * sizeof *before);
            memcpy(before, params, (size_t)n * sizeof *before);
            for (int64_t i = 0; i < n; i++) grads[i] = grad_of(i, rank, t, amp);
            if (rank == size - 1) grads[n / 2] = NAN;
            double norm = 0.0, norm16 = 0.0;
            memcpy(grads16, grads, (size_t)n * sizeof *grads);
            must(zero_step(z, params, grads, lr0, t, &norm), "zero_step (NaN)");
            must(zero_step(z16, params16, grads16, lr0, t, &norm16), "zero_step of bf16 (NaN)");
            EXPECT(!isfinite(norm) && !isfinite(norm16),
                   "%s: NaN gradient on rank %d gave a finite norm %g (bf16: %g)", tc->name,
                   size - 1, norm, norm16);
            EXPECT(memcmp(before, params, (size_t)n * sizeof *before) == 0,
                   "%s: a step with a NaN gradient changed the parameters", tc->name);
            free(before);
        }
        double lr = lr_schedule(lr0, min_lr, warmup, total, t);
        for (int64_t i = 0; i < n; i++) grads[i] = grad_of(i, rank, t, amp);
        double norm = -1.0, norm16 = -1.0;
        memcpy(grads16, grads, (size_t)n * sizeof *grads);
        must(zero_step(z, params, grads, lr, t, &norm), "zero_step");
        must(zero_step(z16, params16, grads16, lr, t, &norm16), "zero_step of bf16");
        EXPECT(norm16 == norm, "%s step %lld: bf16 run's norm %.17g, fp32 run's %.17g", tc->name,
               (long long)t, norm16, norm);
        double ref_norm = ref_step(n, rp, rm, rv, mask, &hp, lr, t, amp);
        EXPECT(fabs(norm - ref_norm) <= 1e-6 * ref_norm, "%s step %lld: norm %.9g, reference %.9g",
               tc->name, (long long)t, norm, ref_norm);
        if (hp.grad_clip > 0.0) {
            if (ref_norm > hp.grad_clip)
                clipped++;
            else
                unclipped++;
        }
        double err = max_rel_err(params, rp, n);
        EXPECT(err < 1e-5, "%s step %lld: max relative error %.3g against the reference", tc->name,
               (long long)t, err);
        expect_identical(params, n, tc->name, t);
        expect_bf16_follows(z16, params16, params, n, tc->name, t);
    }
    if (hp.grad_clip > 0.0)
        EXPECT(clipped > 0 && unclipped > 0,
               "%s: clipping should fire on some steps only (%d clipped, %d not)", tc->name,
               clipped, unclipped);

    EXPECT(zero_step(z16, NULL, grads, lr0, 1, &(double){0}) == BT_ERR_ARG &&
               zero_step(z, NULL, grads, lr0, 1, &(double){0}) == BT_ERR_ARG,
           "%s: a step without its parameters was not refused", tc->name);
    zero_free(z);
    zero_free(z16);
    free(params16);
    free(grads16);
    free(mask);
    free(params);
    free(grads);
    free(rp);
    free(rm);
    free(rv);
}

/* Stage 3's gathers copy every owner's bits exactly: -0, a NaN, infinities
 * and a subnormal among the masters, fp32 as they are and bf16 rounded as
 * bk_float_to_bf16 rounds, over ranges across the shards' edges, of odd
 * lengths, empty; a window that is not 8-byte aligned is refused. */
static void gather_case(int64_t n)
{
    bt_comm *comm = bt_world_comm(world);
    zero_hparams hp = {0.9, 0.95, 1e-8, 0.0, 0.0};
    float *full = malloc((size_t)n * sizeof *full);
    uint64_t *window = calloc((size_t)n / 2 + 2, sizeof *window);
    for (int64_t i = 0; i < n; i++) full[i] = (float)(uni(7, (uint64_t)i, 0, 0) - 0.5);
    const float planted[] = {-0.0f, NAN, INFINITY, -INFINITY, 1e-42f};
    for (int k = 0; k < 5 && k < n; k++) full[(k * 7 + 1) % n] = planted[k];
    const int64_t ranges[][2] = {{0, n},     {1, n - 1},     {n / 3, n / 3 + 3},
                                 {n - 1, n}, {n / 2, n / 2}, {0, 1}};
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        zero *z = zero_create(comm, n, NULL, &hp, NULL, bf16 ? BK_BF16 : BK_F32,
                              (zero_sharding){.stage = 3});
        int64_t b = 0, e = 0;
        if (z) zero_shard(z, &b, &e);
        EXPECT(z && zero_set_masters(z, full + b) == 0, "n=%lld: a stage-3 optimizer failed",
               (long long)n);
        for (size_t r = 0; z && r < sizeof ranges / sizeof *ranges; r++) {
            int64_t lo = ranges[r][0], hi = ranges[r][1] < n ? ranges[r][1] : n;
            if (hi < lo) continue;
            EXPECT(zero_gather_range(z, window, lo, hi) == BT_OK, "gather [%lld, %lld) failed",
                   (long long)lo, (long long)hi);
            for (int64_t i = lo; i < hi; i++) {
                uint32_t want = bf16 ? bk_float_to_bf16(full[i]) : bk_float_to_bits(full[i]);
                uint32_t got = bf16 ? ((uint16_t *)window)[i - lo]
                                    : bk_float_to_bits(((float *)window)[i - lo]);
                EXPECT(got == want, "n=%lld %s: [%lld, %lld): parameter %lld is %08x, not %08x",
                       (long long)n, bf16 ? "bf16" : "fp32", (long long)lo, (long long)hi,
                       (long long)i, got, want);
            }
        }
        EXPECT(!z || zero_gather_range(z, (char *)window + 2, 0, 1) == BT_ERR_ARG,
               "a misaligned window was not refused");
        zero_free(z);
    }
    free(window);
    free(full);
}

int main(void)
{
    worker_init("optimizer_worker");
    /* grad_clip 2: the summed gradient's norm is about 32 * P * amplitude, so the
     * small-amplitude steps are not clipped and the large ones are. */
    const test_case cases[] = {
        {"n=1001 masked clipped", 1001, 1, 2.0, 5},
        {"n=12 masked clipped", 12, 1, 0.5, 5},
        {"n=3 unmasked unclipped", 3, 0, 0.0, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) run_case(&cases[c]);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) gather_case(cases[c].n);

    int64_t total_failures = worker_finish();
    if (rank == 0 && total_failures == 0) printf("ok optimizer on %d ranks\n", size);
    if (rank == 0 && total_failures)
        fprintf(stderr, "optimizer: %lld failures\n", (long long)total_failures);
    return total_failures ? WORKER_FAILED : 0;
}
