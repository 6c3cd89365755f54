/* zero.c (tests/train/test_train): [parallel] zero = 2, the gradients
 * sharded, trains as zero = 1 on every grid, mask and micro-batch count, on
 * the CPU and the emulated device; a checkpoint of either stage resumes with
 * the other. The two stages sum the ranks' gradients in different orders
 * (zero = 1 reduce-scatters the whole buffer, zero = 2 all-reduces each
 * layer's range, and over micro-batches it sums after the reduction), so
 * they agree bit for bit where there is one order: up to 2 ranks and one
 * micro-batch. Elsewhere the first step agrees to rounding and the later
 * steps drift apart as the updates amplify it. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

static const char *const stage1[] = {"parallel.zero=1", NULL}, *const stage2[] = {"parallel.zero=2",
                                                                                  NULL};

/* Relative difference of a and b. */
static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(a), 1e-30);
}

/* The curves of zero = 1 and zero = 2 on `ranks` ranks (nodes) with sets:
 * bit for bit when `exact`; else step 1 within 1e-6 and every step within
 * 1e-4, losses and gradient norms. */
static void expect_stages_agree(int ranks, int nodes, const char *const *sets, int exact,
                                const char *what)
{
    curve one, two;
    run_ok(ranks, nodes, with(sets, stage1), &one);
    run_ok(ranks, nodes, with(sets, stage2), &two);
    ck_assert_msg(one.n == 6 && two.n == 6, "%s: %d and %d steps logged", what, one.n, two.n);
    for (int i = 0; i < one.n; i++) {
        double tol = exact ? 0.0 : i == 0 ? 1e-6 : 1e-4;
        ck_assert_msg(
            rel(one.loss[i], two.loss[i]) <= tol && rel(one.grad_norm[i], two.grad_norm[i]) <= tol,
            "%s: step %d: zero = 1 loss %.17g grad norm %.17g, zero = 2 %.17g and "
            "%.17g (tolerance %g)",
            what, i + 1, one.loss[i], one.grad_norm[i], two.loss[i], two.grad_norm[i], tol);
    }
}

START_TEST(zero_2_trains_as_zero_1_on_every_grid)
{
    static const struct {
        int ranks, nodes, exact;
        const char *sets[5];
    } grids[] = {
        {1, 1, 1, {NULL}},
        {2, 1, 1, {"parallel.cp=2", NULL}},
        {2, 1, 1, {"parallel.dp=2", NULL}},
        {2,
         1,
         1,
         {"parallel.cp=2", "parallel.mask=window", "parallel.window=100",
          "memory.attn_kept_fraction=1", NULL}},
        {2,
         1,
         1,
         {"parallel.cp=2", "parallel.mask=document", "data.doc_len=60",
          "memory.attn_kept_fraction=1", NULL}},
        {2, 1, 0, {"parallel.cp=2", "train.micro_batches=2", NULL}},
        {4, 2, 0, {"parallel.cp=4", "parallel.ring=double", "model.tied_embeddings=false", NULL}},
        {4, 1, 0, {"parallel.dp=2", "parallel.cp=2", NULL}},
        {4, 1, 0, {"parallel.dp=4", NULL}},
    };
    for (size_t i = 0; i < sizeof grids / sizeof *grids; i++) {
        char what[160];
        snprintf(what, sizeof what, "%d ranks %s %s %s", grids[i].ranks,
                 grids[i].sets[0] ? grids[i].sets[0] : "",
                 grids[i].sets[0] && grids[i].sets[1] ? grids[i].sets[1] : "",
                 grids[i].sets[0] && grids[i].sets[1] && grids[i].sets[2] ? grids[i].sets[2] : "");
        expect_stages_agree(grids[i].ranks, grids[i].nodes, grids[i].sets, grids[i].exact, what);
    }
}
END_TEST

/* A checkpoint of one stage resumed with the other continues the
 * uninterrupted run of the first bit for bit (2 ranks: one order). */
START_TEST(a_checkpoint_resumes_with_the_other_stage)
{
    for (int first = 1; first <= 2; first++) {
        char dir[512], dir_set[600];
        snprintf(dir, sizeof dir, "%s/ckpt-zero%d", train_tmpdir, first);
        snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
        const char *sets[] = {"parallel.cp=2", dir_set, NULL};
        const char *const *before = with(sets, first == 1 ? stage1 : stage2),
                          *const *after = with(sets, first == 1 ? stage2 : stage1);
        curve whole, resumed;
        run_ok(2, 1, before, &whole);
        const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
        test_run_result r = train_args(2, 1, before, stop, NULL, NULL, 0);
        ck_assert_msg(r.exit_code == 0, "%s", r.out);
        test_run_free(&r);
        r = train_args(2, 1, after, resume, &resumed, NULL, 0);
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from") &&
                          test_output_has(&r, first == 1 ? "ZeRO stage 2" : "ZeRO stage 1"),
                      "%s", r.out);
        test_run_free(&r);
        ck_assert_int_eq(resumed.n, 3);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(resumed.loss[i] == whole.loss[i + 3] &&
                              resumed.grad_norm[i] == whole.grad_norm[i + 3],
                          "zero = %d then %d: step %d: %.17g, uninterrupted %.17g", first,
                          3 - first, i + 4, resumed.loss[i], whole.loss[i + 3]);
        ck_assert_int_eq(test_remove_tree(dir), 0);
    }
}
END_TEST

void add_zero_tests(TCase *tc)
{
    check_add_tests(tc, zero_2_trains_as_zero_1_on_every_grid,
                    a_checkpoint_resumes_with_the_other_stage);
}
