/* zero.c (tests/train/test_train): [parallel] zero = 2, the gradients
 * sharded, and zero = 3, the parameters too, train as zero = 1 on every grid,
 * mask and micro-batch count, on the CPU and the emulated device; a
 * checkpoint of one stage resumes with another. zero = 3 gathers exact
 * copies of the masters, so it matches zero = 2 bit for bit everywhere.
 * zero = 1 and 2 sum the ranks' gradients in different orders
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

static const char *const stages[3][2] = {
    {"parallel.zero=1", NULL}, {"parallel.zero=2", NULL}, {"parallel.zero=3", NULL}};

/* Relative difference of a and b. */
static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(a), 1e-30);
}

/* Curves a and b (zero = za and zb) agree: bit for bit when `exact`; else
 * step 1 within 1e-6 and every step within 1e-4, losses and gradient norms. */
static void expect_curves_agree(const curve *a, const curve *b, int za, int zb, int exact,
                                const char *what)
{
    ck_assert_msg(a->n == 6 && b->n == 6, "%s: %d and %d steps logged", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        double tol = exact ? 0.0 : i == 0 ? 1e-6 : 1e-4;
        ck_assert_msg(
            rel(a->loss[i], b->loss[i]) <= tol && rel(a->grad_norm[i], b->grad_norm[i]) <= tol,
            "%s: step %d: zero = %d loss %.17g grad norm %.17g, zero = %d %.17g and "
            "%.17g (tolerance %g)",
            what, i + 1, za, a->loss[i], a->grad_norm[i], zb, b->loss[i], b->grad_norm[i], tol);
    }
}

/* The metrics time each step's ZeRO collectives: the reductions from stage
 * 2, the gathers at 3, none below. */
static void expect_zero_times(const curve *c, int stage, const char *what)
{
    for (int i = 0; i < c->n; i++)
        ck_assert_msg((c->reduce_s[i] > 0) == (stage >= 2) && (c->gather_s[i] > 0) == (stage == 3),
                      "%s: zero = %d, step %d: reductions %g s, gathers %g s", what, stage, i + 1,
                      c->reduce_s[i], c->gather_s[i]);
}

/* The three stages on `ranks` ranks (nodes) with sets: zero = 2 as zero = 1
 * (bit for bit when `exact`), zero = 3 as zero = 2 bit for bit. */
static void expect_stages_agree(int ranks, int nodes, const char *const *sets, int exact,
                                const char *what)
{
    curve c[3];
    for (int z = 0; z < 3; z++) {
        run_ok(ranks, nodes, with(sets, stages[z]), &c[z]);
        expect_zero_times(&c[z], z + 1, what);
    }
    expect_curves_agree(&c[0], &c[1], 1, 2, exact, what);
    expect_curves_agree(&c[1], &c[2], 2, 3, 1, what);
}

START_TEST(zeros_2_and_3_train_as_zero_1_on_every_grid)
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

/* A checkpoint of one stage resumed with another continues the
 * uninterrupted run of the first bit for bit (2 ranks: one order). */
START_TEST(a_checkpoint_resumes_with_another_stage)
{
    static const int pairs[][2] = {{1, 2}, {2, 1}, {3, 1}, {1, 3}};
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        int first = pairs[k][0], then = pairs[k][1];
        char dir[512], dir_set[600], says[32];
        char name[32];
        snprintf(name, sizeof name, "ckpt-zero%d%d", first, then);
        checkpoint_dir(name, dir, dir_set);
        snprintf(says, sizeof says, "ZeRO stage %d", then);
        const char *sets[] = {"parallel.cp=2", dir_set, NULL};
        const char *const *before = with(sets, stages[first - 1]), *const *after =
                                                                       with(sets, stages[then - 1]);
        curve whole, resumed;
        run_ok(2, 1, before, &whole);
        const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
        test_run_result r = train_args(2, 1, before, stop, NULL, NULL, 0);
        ck_assert_msg(r.exit_code == 0, "%s", r.out);
        test_run_free(&r);
        r = train_args(2, 1, after, resume, &resumed, NULL, 0);
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from") &&
                          test_output_has(&r, says),
                      "%s", r.out);
        test_run_free(&r);
        ck_assert_int_eq(resumed.n, 3);
        for (int i = 0; i < 3; i++)
            ck_assert_msg(resumed.loss[i] == whole.loss[i + 3] &&
                              resumed.grad_norm[i] == whole.grad_norm[i + 3],
                          "zero = %d then %d: step %d: %.17g, uninterrupted %.17g", first, then,
                          i + 4, resumed.loss[i], whole.loss[i + 3]);
        ck_assert_int_eq(test_remove_tree(dir), 0);
    }
}
END_TEST

/* The line of text after `key` in r's output, into out. */
static void line_of(const test_run_result *r, const char *key, char *out, size_t len)
{
    const char *at = strstr(r->out, key);
    snprintf(out, len, "%.*s", at ? (int)strcspn(at, "\n") : 0, at ? at : "");
}

/* The evaluation at the end of training with the parameters gathered: DP
 * groups with uneven numbers of samples (3 over 2 groups) make the same
 * gathers, and count what zero = 1 counts. */
START_TEST(zero_3_evaluates_with_uneven_groups)
{
    char lines[2][256];
    for (int k = 0; k < 2; k++) {
        const char *sets[] = {"data.task=recall",
                              "parallel.dp=2",
                              "parallel.cp=2",
                              "eval.eval_samples=3",
                              k ? "parallel.zero=3" : "parallel.zero=1",
                              NULL};
        test_run_result r = train_args(4, 1, sets, NULL, NULL, NULL, 0);
        line_of(&r, "eval: recall accuracy", lines[k], sizeof lines[k]);
        ck_assert_msg(r.exit_code == 0 && lines[k][0], "zero = %d:\n%s", k ? 3 : 1, r.out);
        test_run_free(&r);
    }
    ck_assert_str_eq(lines[0], lines[1]);
}
END_TEST

void add_zero_tests(TCase *tc)
{
    check_add_tests(tc, zeros_2_and_3_train_as_zero_1_on_every_grid,
                    a_checkpoint_resumes_with_another_stage, zero_3_evaluates_with_uneven_groups);
}
