/* steps.c (tests/train/test_train): an injected NaN, and gradients that
 * overflow only in their sum over the ranks, stop (or skip) every rank naming
 * the step; the loss falls on a learnable task (and the start report names
 * whose sgemm rate it measured); bad settings exit 2 before any work, and
 * --print-config refuses them alike. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* The record of one step in a metrics file, as text (empty when missing). */
static void step_record(const char *metrics, int step, char *out, size_t len)
{
    char head[32];
    snprintf(head, sizeof head, "{\"step\": %d,", step);
    const char *l = strstr(metrics, head), *end = l ? strchr(l, '\n') : NULL;
    snprintf(out, len, "%.*s", l && end ? (int)(end - l) : 0, l ? l : "");
}

/* Under on_nonfinite = skip, 6 steps are logged and only step 2 is marked
 * skipped, with no gradient norm (JSON null). */
static void expect_only_step_2_skipped(const char *metrics)
{
    char rec[1024];
    for (int step = 1; step <= 6; step++) {
        step_record(metrics, step, rec, sizeof rec);
        ck_assert_msg(rec[0], "no record of step %d:\n%s", step, metrics);
        int skipped = strstr(rec, "\"skipped\": 1") != NULL;
        int no_norm = strstr(rec, "\"grad_norm\": null") != NULL;
        ck_assert_msg(skipped == (step == 2) && no_norm == skipped, "step %d: %s", step, rec);
    }
}

/* With the gradients whole (zero = 1) or sharded (zero = 2 and 3, where the
 * NaN goes in before the reduction as well). */
START_TEST(nonfinite_gradient_stops_every_rank)
{
    static const char *const zero[] = {"parallel.zero=1", "parallel.zero=2", "parallel.zero=3"};
    const char *sets[] = {"parallel.cp=2", zero[_i], NULL};
    test_run_result r = train(2, 1, sets, "2:1", NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d:\n%s", r.exit_code, r.out);
    for (int k = 0; k < 2; k++) {
        char want[160];
        snprintf(want, sizeof want,
                 "[%d] burst train: rank %d: step 2: non-finite loss or gradient seen on rank 1; "
                 "stopping",
                 k, k);
        ck_assert_msg(test_output_has(&r, want), "missing '%s':\n%s", want, r.out);
    }
    test_run_free(&r);
    const char *skip[] = {"parallel.cp=2", "train.on_nonfinite=skip", sets[1], NULL};
    char metrics[8192];
    const char *nan_args[] = {"--inject-nan", "2:1", NULL};
    r = train_args(2, 1, skip, nan_args, NULL, metrics, sizeof metrics);
    ck_assert_msg(r.exit_code == 0, "skip: exit %d:\n%s", r.exit_code, r.out);
    ck_assert(test_output_has(&r, "step 2: non-finite loss or gradient seen on rank 1; skipping"));
    expect_only_step_2_skipped(metrics);
    test_run_free(&r);
}
END_TEST

/* Gradients finite on every rank whose sum is not: the norm after the
 * reduction is infinite on every rank, which stops or skips like a NaN. */
START_TEST(gradient_infinite_only_after_the_reduction)
{
    const char *args[] = {"--inject-overflow", "2", NULL};
    static const char *const zeros[] = {"parallel.zero=1", "parallel.zero=2", "parallel.zero=3"};
    const char *zero = zeros[_i];
    for (int dp = 1; dp <= 2; dp++) {
        const char *sets[] = {dp == 1 ? "parallel.cp=2" : "parallel.dp=2", zero, NULL};
        test_run_result r = train_args(2, 1, sets, args, NULL, NULL, 0);
        ck_assert_msg(r.exit_code == 1, "dp %d: exit %d:\n%s", dp, r.exit_code, r.out);
        for (int k = 0; k < 2; k++) {
            char want[160];
            snprintf(want, sizeof want,
                     "[%d] burst train: rank %d: step 2: non-finite gradient norm after the "
                     "reduction; stopping",
                     k, k);
            ck_assert_msg(test_output_has(&r, want), "missing '%s':\n%s", want, r.out);
        }
        ck_assert_msg(!test_output_has(&r, "step     3/"), "a rank went on:\n%s", r.out);
        test_run_free(&r);
    }
    const char *skip[] = {"parallel.cp=2", "train.on_nonfinite=skip", zero, NULL};
    char metrics[8192];
    test_run_result r = train_args(2, 1, skip, args, NULL, metrics, sizeof metrics);
    ck_assert_msg(r.exit_code == 0, "skip: exit %d:\n%s", r.exit_code, r.out);
    const char *said = "step 2: non-finite gradient norm after the reduction; skipping";
    ck_assert_msg(test_output_has(&r, said), "%s", r.out);
    expect_only_step_2_skipped(metrics);
    test_run_free(&r);
}
END_TEST

START_TEST(loss_falls_on_a_learnable_task)
{
    const char *sets[] = {"parallel.cp=2", "data.task=counting", "train.steps=30", "train.lr=1e-2",
                          NULL};
    test_run_result r = train(2, 1, sets, NULL, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    /* read the progress lines: first and last loss */
    double first = -1, last = -1;
    for (const char *p = r.out; (p = strstr(p, " loss ")); p += 6) {
        double v = atof(p + 6);
        if (first < 0) first = v;
        last = v;
    }
    ck_assert_msg(first > 0 && last < first - 1.0, "loss %.4f -> %.4f:\n%s", first, last, r.out);
    /* The sgemm reference says whose rate it is: one rank's, in its own threads
     * (the one thread every rank of these runs is given). */
    const char *want = "(rank 0 alone, 1 OpenMP thread)";
    const char *sgemm = strstr(r.out, "sgemm");
    ck_assert_msg(test_output_has(&r, "sgemm per rank: ") && test_output_has(&r, want),
                  "no 'sgemm per rank: ... %s' but: %.120s", want, sgemm ? sgemm : "no sgemm");
    ck_assert_msg(test_output_has(&r, " of sgemm x P)"), "progress fraction not of sgemm x P");
    test_run_free(&r);
}
END_TEST

/* burst train --print-config with the settings given, in one process. */
static test_run_result print_config(const char *const *sets)
{
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)test_burst_path();
    argv[a++] = "train";
    for (int i = 0; sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a++] = "--print-config";
    argv[a] = NULL;
    return test_run(argv, NULL);
}

START_TEST(bad_settings_exit_2_before_work)
{
    const char *cases[][2] = {{"model.n_heads=3", "n_heads"},
                              {"parallel.cp=3", "[parallel]"},
                              {"data.seq_len=250", "seq_len"},
                              {"model.n_head=4", "n_head"},
                              {"train.warmup_steps=7", "warmup_steps"},
                              {"train.matmul=bf16", "[train] matmul = bf16 needs [train] device"}};
    for (int i = 0; i < 6; i++) {
        const char *sets[] = {i == 1 ? "parallel.dp=1" : "parallel.cp=2", cases[i][0], NULL};
        test_run_result r = train(2, 1, sets, NULL, NULL);
        ck_assert_msg(r.exit_code == 2 && test_output_has(&r, cases[i][1]),
                      "--set %s: exit %d:\n%s", cases[i][0], r.exit_code, r.out);
        ck_assert_msg(!test_output_has(&r, "step "), "--set %s: training started:\n%s", cases[i][0],
                      r.out);
        /* --print-config refuses it with the run's message; but it checks
         * cp = 3 for 3 ranks, which the run's world of 2 does not reach */
        const char *base[] = {"data.seq_len=256",
                              "train.steps=6",
                              "train.warmup_steps=2",
                              "train.lr=1e-2",
                              sets[0],
                              sets[1],
                              NULL};
        test_run_result p = print_config(base);
        if (i == 1) {
            ck_assert_msg(p.exit_code == 2 && test_output_has(&p, "[parallel] cp = 3)"), "%s",
                          p.out);
        } else {
            const char *msg = strstr(p.out, "burst train: "), *end = msg ? strchr(msg, '\n') : NULL;
            char line[512];
            snprintf(line, sizeof line, "%.*s", msg && end ? (int)(end - msg) : 0, msg ? msg : "");
            ck_assert_msg(p.exit_code == 2 && line[0] && test_output_has(&r, line) &&
                              !test_output_has(&p, "effective configuration"),
                          "--print-config --set %s: exit %d:\n%s\nthe run said:\n%s", cases[i][0],
                          p.exit_code, p.out, r.out);
        }
        test_run_free(&p);
        test_run_free(&r);
    }
}
END_TEST

/* [memory] keep_layers keeps what the backward would recompute: the same
 * operations on the same inputs, so the losses and gradient norms are the
 * same bits, on one rank and on two (the gradients with the MLP in chunks,
 * against finite differences, are ranks.c's). */
START_TEST(keeping_the_layers_changes_no_bit)
{
    for (int ranks = 1; ranks <= 2; ranks++) {
        char cp[32];
        snprintf(cp, sizeof cp, "parallel.cp=%d", ranks);
        const char *recomputed[] = {cp, "data.seq_len=128", NULL},
                   *kept[] = {cp, "data.seq_len=128", "memory.keep_layers=true", NULL};
        curve a, b;
        run_ok(ranks, 1, recomputed, &a);
        run_saying(ranks, 1, kept, "stored activations", &b);
        expect_same(&a, &b, 0.0, ranks == 1 ? "kept layers, 1 rank" : "kept layers, 2 ranks");
    }
}
END_TEST

/* [memory] chunk_rows cuts all that runs token by token (the attention norm
 * and the projections, the MLP, the final norm and the head) into chunks of
 * that many tokens: 128 tokens whole (the default, 4096, holds them) and in
 * chunks of 48, 48 and 32 train alike, within what the weight gradients'
 * sums over the chunks move (they add in another order). */
START_TEST(the_layers_in_chunks_train_as_whole)
{
    const char *whole[] = {"data.seq_len=128", NULL},
               *chunks[] = {"data.seq_len=128", "memory.chunk_rows=48", NULL};
    curve a, b;
    run_ok(1, 1, whole, &a);
    run_ok(1, 1, chunks, &b);
    expect_same(&a, &b, 1e-6, "the layers in chunks of 48 tokens");
}
END_TEST

void add_step_tests(TCase *tc)
{
    /* _i: zero = _i + 1 */
    check_add_loop_tests(tc, 0, 3, nonfinite_gradient_stops_every_rank,
                         gradient_infinite_only_after_the_reduction);
    check_add_tests(tc, loss_falls_on_a_learnable_task, bad_settings_exit_2_before_work,
                    keeping_the_layers_changes_no_bit, the_layers_in_chunks_train_as_whole);
}
