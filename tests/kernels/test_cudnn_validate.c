/* test_cudnn_validate.c: cuDNN's own check of the SDPA calls the ring makes
 * (kernels/cuda/cudnn_sdpa.h's bk_cudnn_sdpa_validate: the cuDNN frontend's
 * validate() of each call's forward and backward graphs, with no device)
 * against the libcudnn this machine has, for compute capability 8.0 and 9.0.
 * Every shape the ring needs must be accepted: dense causal, dense without a
 * band, sliding windows and two-sided bands, a ragged call of three sequences,
 * grouped-query heads, at head dims 64 and 128. What cuDNN documents it
 * refuses must be refused, so that a pass is no accident of a check that
 * accepts everything. And every call the engine's rings make, mapped as the
 * ring maps them. Built in CUDA builds with the cuDNN frontend; skips
 * (77) where libcudnn cannot be loaded, since then nothing here can tell. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cudnn_sdpa.h"
#include "src/attn/sdpa_map.h"
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

/* Every call the engine's rings make (src/attn/sdpa_map.c over every block
 * pair of a layout, as ring_sdpa_create maps them), for the layouts, masks
 * and head shapes the presets train with: zigzag causal over 1, 2 and 8
 * ranks (the double ring's pairs are the flat ring's), a causal window over
 * contiguous blocks, full attention; MHA (16 over 16) and GQA (32 over 8) at
 * head dims 64 and 128, 2048 tokens per rank. Each is accepted, forward and
 * backward, for sm 80 and 90. */
typedef struct {
    seq_layout_kind layout;
    int P;
    bk_attn_mask mask;
} engine_ring;

static int validate_pairs(const engine_ring *e, int h_q, int h_kv, int d)
{
    seq_layout l;
    char err[256];
    ck_assert_int_eq(seq_layout_init(&l, e->layout, e->P, 2048 * (int64_t)e->P, err, sizeof err), 0);
    attn_need_ctx need = {.mask = e->mask, .N = l.N};
    int calls = 0;
    for (int q = 0; q < e->P; q++)
        for (int k = 0; k < e->P; k++) {
            sdpa_calls out;
            ck_assert_int_eq(sdpa_map_block_pair(&need, &l, q, k, h_q, h_kv, d,
                                                 1.0f / sqrtf((float)d), &out),
                             0);
            ck_assert_msg(out.mapped, "pair (%d, %d) unmapped: %s", q, k, out.why);
            for (int c = 0; c < out.n_calls; c++, calls++)
                for (int s = 0; s < N_SMS; s++) {
                    char why[512] = "";
                    int verdict = bk_cudnn_sdpa_validate(&out.calls[c], 1, SMS[s], why, sizeof why);
                    ck_assert_msg(verdict == 0, "P %d pair (%d, %d) call %d, sm %d: %d (%s)",
                                  e->P, q, k, c, SMS[s], verdict, why);
                }
            sdpa_calls_free(&out);
        }
    return calls;
}

START_TEST(every_call_the_engine_makes_is_accepted)
{
    const engine_ring rings[] = {
        {LAYOUT_ZIGZAG, 1, bk_attn_mask_causal()},
        {LAYOUT_ZIGZAG, 2, bk_attn_mask_causal()},
        {LAYOUT_ZIGZAG, 8, bk_attn_mask_causal()},
        {LAYOUT_CONTIGUOUS, 4, bk_attn_mask_window(3000, 0)},
        {LAYOUT_CONTIGUOUS, 2, bk_attn_mask_none()},
    };
    static const int heads[][2] = {{16, 16}, {32, 8}};
    int calls = 0;
    for (size_t r = 0; r < sizeof rings / sizeof rings[0]; r++)
        for (int h = 0; h < 2; h++)
            for (int di = 0; di < N_HEAD_DIMS; di++)
                calls += validate_pairs(&rings[r], heads[h][0], heads[h][1], HEAD_DIMS[di]);
    ck_assert_int_gt(calls, 0);
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
    check_add_tests(tc, what_cudnn_refuses_is_refused, every_call_the_engine_makes_is_accepted);
    return check_run(s);
}
