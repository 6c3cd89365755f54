/* test_lm_head_device.c: the fused LM head (src/train/lm_head.c) on a device
 * queue, the SIMT emulator's: the losses and counts add up on the device
 * (bk_ce_sums) and come back once, without an allocation (every malloc of
 * the program is counted, -Wl,--wrap=malloc in tests/local.mk); a chunk's
 * losses sum, on the device, to the same bits as the host's sum of its
 * per-row losses in row order; small chunks and the host's fused head agree
 * within rounding; a bad label is counted and refused when the sums are
 * read. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/train/lm_head.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

#define IGNORE (-100)

/* ---------------------------------------------------------------- counted mallocs */
void *__real_malloc(size_t bytes);
void *__wrap_malloc(size_t bytes);

/* Set while the thread runs what must not allocate: only its own mallocs count
 * (the emulator may run kernels on threads of its own). */
static _Thread_local int counting;
static long counted;

void *__wrap_malloc(size_t bytes)
{
    if (counting) counted++;
    return __real_malloc(bytes);
}

/* ---------------------------------------------------------------- runs */
typedef struct {
    double loss;
    int64_t nv;
    long mallocs;   /* during the second of two calls */
    double row_sum; /* one chunk only: its per-row losses, left in the scratch, summed in
                       double in row order */
} device_run;

/* The fused head on the device, chunks of `chunk` rows, twice (the first call
 * lets the emulator make what it keeps between calls): the second call's
 * loss sum, valid rows and mallocs. */
static device_run run_on_device(int64_t chunk, int64_t n, int64_t D, int64_t V, const float *h,
                                const float *W, const int64_t *labels, float scale)
{
    bk_queue q = dev_queue();
    lm_head_opts o = {chunk, 1e-3f, IGNORE};
    size_t scratch_bytes = lm_head_scratch_floats(&o, V) * sizeof(float);
    float *zeros = test_zeros_f(n * D > V * D ? n * D : V * D);
    float *dh = dev_put(zeros, (size_t)(n * D) * sizeof(float)),
          *dW = dev_put(zeros, (size_t)(V * D) * sizeof(float)), *scratch = NULL;
    const float *hd = dev_put(h, (size_t)(n * D) * sizeof(float)),
                *Wd = dev_put(W, (size_t)(V * D) * sizeof(float));
    const int64_t *labels_d = dev_put(labels, (size_t)n * sizeof(int64_t));
    bk_ce_sums *sums = NULL;
    ck_assert_int_eq(bk_device_malloc(scratch_bytes, (void **)&scratch), BK_OK);
    ck_assert_int_eq(bk_device_malloc(sizeof *sums, (void **)&sums), BK_OK);
    device_run r = {0};
    for (int call = 0; call < 2; call++) {
        r.loss = 0.0, r.nv = 0;
        counted = 0;
        counting = call == 1;
        bk_status st = bk_ce_sums_clear(&q, sums);
        if (st == BK_OK)
            st = lm_head_fused(&q, &o, n, D, V, hd, Wd, labels_d, scale, sums, dh, dW, scratch);
        if (st == BK_OK) st = lm_head_sums_read(&q, sums, &r.loss, &r.nv);
        counting = 0;
        ck_assert_int_eq(st, BK_OK);
    }
    r.mallocs = counted;
    if (chunk >= n) { /* the scratch is logits [chunk, V], then the per-row losses */
        float *rows = test_zeros_f(n);
        dev_get(rows, scratch + (size_t)chunk * (size_t)V, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) r.row_sum += (double)rows[i];
        free(rows);
    }
    void *bufs[] = {dh, dW, scratch, sums, (void *)hd, (void *)Wd, (void *)labels_d};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dev_free(bufs[i]);
    free(zeros);
    return r;
}

/* 2500 rows: in one chunk the losses sum on the device as all of them in
 * row order on the host, in chunks of 250 rows chunk by chunk; neither
 * allocates, and they and the host's fused head agree.
 * (Chunks of a few rows would make thousands of emulated launches, too slow
 * under the sanitizers.) */
START_TEST(device_losses_come_back_without_allocating)
{
    const int64_t n = 2500, D = 8, V = 16;
    uint64_t rng = test_rng(700);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    int64_t *labels = test_alloc((size_t)n, sizeof *labels), valid = 0;
    for (int64_t r = 0; r < n; r++) {
        labels[r] = r % 10 == 3 ? IGNORE : (int64_t)(bu_rng_next(&rng) % (uint64_t)V);
        valid += labels[r] != IGNORE;
    }
    float scale = 1.0f / (float)valid;
    device_run whole = run_on_device(n, n, D, V, h, W, labels, scale),
               small = run_on_device(250, n, D, V, h, W, labels, scale);
    ck_assert_msg(whole.mallocs == 0 && small.mallocs == 0,
                  "the head allocated %ld times in one chunk of %lld rows, %ld in chunks of 250",
                  whole.mallocs, (long long)n, small.mallocs);
    ck_assert_int_eq(whole.nv, valid);
    ck_assert_int_eq(small.nv, valid);
    ck_assert_msg(whole.loss == whole.row_sum,
                  "loss sum %.17g in one chunk, %.17g summing its rows in order", whole.loss,
                  whole.row_sum);
    ck_assert_msg(fabs(whole.loss - small.loss) <= 1e-6 * fabs(whole.loss),
                  "loss sum %.17g in one chunk, %.17g in chunks of 250", whole.loss, small.loss);

    bk_queue host = bk_host_queue();
    lm_head_opts o = {n, 1e-3f, IGNORE};
    float *scratch = test_zeros_f((int64_t)lm_head_scratch_floats(&o, V));
    float *dh = test_zeros_f(n * D), *dW = test_zeros_f(V * D);
    bk_ce_sums sums = {0};
    ck_assert_int_eq(lm_head_fused(&host, &o, n, D, V, h, W, labels, scale, &sums, dh, dW, scratch),
                     BK_OK);
    ck_assert_int_eq(sums.valid, valid);
    ck_assert_msg(fabs(whole.loss - sums.loss) <= 1e-6 * fabs(sums.loss),
                  "loss sum %.17g on the device, %.17g on the host", whole.loss, sums.loss);
    free(h), free(W), free(labels), free(scratch), free(dh), free(dW);
}
END_TEST

/* Labels outside [0, V) (a late chunk's, and a negative one) on the device:
 * the calls do not wait to check them; they are counted, their rows add no
 * loss, and reading the sums refuses the pass, adding nothing. */
START_TEST(bad_labels_are_refused_when_the_sums_are_read)
{
    const int64_t n = 40, D = 8, V = 16;
    uint64_t rng = test_rng(710);
    float *h = test_rand_f(&rng, n * D, -1, 1), *W = test_rand_f(&rng, V * D, -1, 1);
    int64_t *labels = test_alloc((size_t)n, sizeof *labels);
    for (int64_t r = 0; r < n; r++) labels[r] = r % 7 == 2 ? IGNORE : r % V;
    labels[37] = V, labels[5] = -1;
    bk_queue q = dev_queue();
    lm_head_opts o = {16, 0.0f, IGNORE};
    float *zeros = test_zeros_f(n * D > V * D ? n * D : V * D);
    float *dh = dev_put(zeros, (size_t)(n * D) * sizeof(float)),
          *dW = dev_put(zeros, (size_t)(V * D) * sizeof(float)), *scratch = NULL;
    const float *hd = dev_put(h, (size_t)(n * D) * sizeof(float)),
                *Wd = dev_put(W, (size_t)(V * D) * sizeof(float));
    const int64_t *labels_d = dev_put(labels, (size_t)n * sizeof(int64_t));
    bk_ce_sums *sums = NULL, seen;
    ck_assert_int_eq(
        bk_device_malloc(lm_head_scratch_floats(&o, V) * sizeof(float), (void **)&scratch), BK_OK);
    ck_assert_int_eq(bk_device_malloc(sizeof *sums, (void **)&sums), BK_OK);
    ck_assert_int_eq(bk_ce_sums_clear(&q, sums), BK_OK);
    ck_assert_int_eq(lm_head_fused(&q, &o, n, D, V, hd, Wd, labels_d, 1.0f, sums, dh, dW, scratch),
                     BK_OK);
    dev_get(&seen, sums, sizeof seen);
    ck_assert_int_eq(seen.bad, 2);
    ck_assert_int_eq(seen.valid, n - 5 - 2); /* ignored: rows 2, 9, 16, 23, 30 */
    ck_assert(isfinite(seen.loss) && seen.loss > 0.0);
    double loss = 0.0;
    int64_t nv = 0;
    ck_assert_int_eq(lm_head_sums_read(&q, sums, &loss, &nv), BK_ERR_ARG);
    ck_assert(loss == 0.0 && nv == 0);
    void *bufs[] = {dh, dW, scratch, sums, (void *)hd, (void *)Wd, (void *)labels_d};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dev_free(bufs[i]);
    free(h), free(W), free(labels), free(zeros);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lm_head_device");
    TCase *tc = check_tcase(s, "device", 600); /* the emulator, slower under the sanitizers */
    check_add_tests(tc, device_losses_come_back_without_allocating,
                    bad_labels_are_refused_when_the_sums_are_read);
    return dev_test_main(s);
}
