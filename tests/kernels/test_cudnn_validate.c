/* test_cudnn_validate.c: cuDNN's own check of the SDPA calls the ring makes
 * (kernels/cuda/cudnn_sdpa.h's bk_cudnn_sdpa_validate: the cuDNN frontend's
 * validate() of each call's forward and backward graphs, with no device)
 * against the libcudnn this machine has, for compute capability 8.0 and 9.0.
 * Every shape the ring needs must be accepted: dense causal, dense without a
 * band, sliding windows and two-sided bands, a ragged call of three sequences,
 * grouped-query heads, at head dims 64 and 128. What cuDNN documents it
 * refuses must be refused, so that a pass is no accident of a check that
 * accepts everything. Built in CUDA builds with the cuDNN frontend; skips
 * (77) where libcudnn cannot be loaded, since then nothing here can tell. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cudnn_sdpa.h"
#include "tests/lib/check_main.h"

static const int SMS[] = {80, 90};
static const int HEAD_DIMS[] = {64, 128};
enum { N_SMS = sizeof SMS / sizeof SMS[0], N_HEAD_DIMS = sizeof HEAD_DIMS / sizeof HEAD_DIMS[0] };

static const bk_sdpa_seq SQUARE[] = {{0, 256, 0, 256}};
static const bk_sdpa_seq WIDE[] = {{0, 128, 0, 256}};
/* rows apart on both sides, a gap between the last two on the key side */
static const bk_sdpa_seq RAGGED[] = {{0, 100, 0, 100}, {100, 60, 100, 120}, {160, 96, 240, 200}};

typedef struct {
    const char *name;
    int h_q, h_kv;
    bk_sdpa_band band;
    int n_seq;
    const bk_sdpa_seq *seq;
} ring_case;

/* The fields of a band (kernels/sdpa.h): none; causal (a right bound 0); a right and a
 * left bound. */
#define NO_BAND       .align = BK_SDPA_TOP_LEFT
#define CAUSAL(a)     .align = (a), .has_right = 1, .right = 0
#define BAND(a, r, l) .align = (a), .has_right = 1, .right = (r), .has_left = 1, .left = (l)

static const ring_case RING_CASES[] = {
    {"dense causal (top-left, R = 0), 256 x 256", 8, 8, {CAUSAL(BK_SDPA_TOP_LEFT)}, 1, SQUARE},
    {"dense, no band, 256 x 256", 8, 8, {NO_BAND}, 1, SQUARE},
    {"sliding window R = 0, L = 64, 256 x 256", 8, 8, {BAND(BK_SDPA_TOP_LEFT, 0, 64)}, 1, SQUARE},
    {"bottom-right R = 16, L = 48, 128 x 256", 8, 8, {BAND(BK_SDPA_BOTTOM_RIGHT, 16, 48)}, 1, WIDE},
    {"ragged, 3 sequences, bottom-right causal", 8, 8, {CAUSAL(BK_SDPA_BOTTOM_RIGHT)}, 3, RAGGED},
    {"GQA (h_q 8, h_kv 2), causal, 256 x 256", 8, 2, {CAUSAL(BK_SDPA_TOP_LEFT)}, 1, SQUARE},
};
enum { N_RING_CASES = sizeof RING_CASES / sizeof RING_CASES[0] };

static bk_sdpa_call call_of(const ring_case *rc, int d)
{
    bk_sdpa_call c = {rc->h_q, rc->h_kv, d, 1.0f / sqrtf((float)d), rc->band, rc->n_seq, rc->seq};
    return c;
}

/* Test index i: ring case i / N_HEAD_DIMS at head dim HEAD_DIMS[i % N_HEAD_DIMS]. */
START_TEST(the_ring_calls_are_accepted)
{
    const ring_case *rc = &RING_CASES[_i / N_HEAD_DIMS];
    bk_sdpa_call c = call_of(rc, HEAD_DIMS[_i % N_HEAD_DIMS]);
    for (int s = 0; s < N_SMS; s++) {
        char why[512] = "";
        int verdict = bk_cudnn_sdpa_validate(&c, 1, SMS[s], why, sizeof why);
        ck_assert_msg(verdict == 0, "%s, d %d, sm %d: %d (%s)", rc->name, c.d, SMS[s], verdict,
                      why);
    }
}
END_TEST

/* Refused, with cuDNN's reason, for every architecture. */
static void expect_refused(const bk_sdpa_call *c, const char *what)
{
    for (int s = 0; s < N_SMS; s++) {
        char why[512] = "";
        int verdict = bk_cudnn_sdpa_validate(c, 1, SMS[s], why, sizeof why);
        ck_assert_msg(verdict == -1, "%s, sm %d: %d (%s)", what, SMS[s], verdict, why);
        ck_assert_msg(why[0], "%s, sm %d: refused without a reason", what, SMS[s]);
    }
}

START_TEST(what_cudnn_refuses_is_refused)
{
    static const bk_sdpa_seq one_by_one[] = {{0, 1, 0, 1}}, tall[] = {{0, 256, 0, 128}};
    bk_sdpa_call c = {8, 8, 64, 0.125f, {NO_BAND}, 1, one_by_one};
    expect_refused(&c, "q_len = kv_len = 1 (the backward has no kernel for it)");
    c.seq = tall;
    c.band = (bk_sdpa_band){BAND(BK_SDPA_TOP_LEFT, 0, 64)};
    expect_refused(&c, "a left bound with q_len > kv_len in a dense call");
    c.band = (bk_sdpa_band){NO_BAND};
    c.d = 100;
    expect_refused(&c, "head dim 100 (not a multiple of 8)");
}
END_TEST

int main(void)
{
    char why[512] = "";
    bk_sdpa_call probe = call_of(&RING_CASES[0], 64);
    if (bk_cudnn_sdpa_validate(&probe, 0, 90, why, sizeof why) == -2) {
        printf("SKIP: cuDNN cannot check the calls here: %s\n", why);
        return 77;
    }
    long v = bk_cudnn_sdpa_version();
    printf("libcudnn %ld.%ld.%ld\n", v / 10000, v / 100 % 100, v % 100);
    Suite *s = suite_create("cudnn_validate");
    TCase *tc = check_tcase(s, "validate", 60);
    check_add_loop_tests(tc, 0, N_RING_CASES * N_HEAD_DIMS, the_ring_calls_are_accepted);
    check_add_tests(tc, what_cudnn_refuses_is_refused);
    return check_run(s);
}
