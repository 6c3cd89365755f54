/* test_train.c: the training engine, with real ranks under `burst run`:
 * gradients against finite differences (tests/train/train_gradcheck); the same tiny
 * run on P = 1, 2, 4 ranks, DP x CP = 2 x 2 and the double ring gives the same
 * losses step by step; checkpoint fractions 0, 1/2, 1 and the fused and
 * reference LM heads give the same losses and gradient norms; an injected NaN
 * stops every rank naming the step and the rank; the loss falls on a learnable
 * task; bad settings exit 2 before any work; a sample of the eval corpus that
 * one rank cannot read ends every rank with an error naming the file. Losses
 * are read from the JSON-lines metrics each run writes. */
#define _GNU_SOURCE
#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

enum { MAX_STEPS = 64 };

typedef struct {
    int n;
    double loss[MAX_STEPS], grad_norm[MAX_STEPS];
} curve;

static char tmpdir[256];

/* burst run -n ranks [--nodes nodes] -- burst train --set ... (sets: NULL-terminated) */
static test_run_result train_args(int ranks, int nodes, const char *const *sets,
                                  const char *const *args, curve *out, char *metrics_text,
                                  size_t metrics_len)
{
    static int serial;
    char metrics[512], n[16], m[16], metrics_set[600];
    snprintf(metrics, sizeof metrics, "%s/metrics-%d.jsonl", tmpdir, serial++);
    snprintf(metrics_set, sizeof metrics_set, "train.metrics=%s", metrics);
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[64];
    int a = 0;
    argv[a++] = (char *)test_burst_path();
    /* --no-kill: every rank must stop by itself, and say why */
    argv[a++] = "run", argv[a++] = "-n", argv[a++] = n, argv[a++] = "--nodes", argv[a++] = m;
    argv[a++] = "--no-kill", argv[a++] = "--";
    argv[a++] = (char *)test_burst_path();
    argv[a++] = "train";
    const char *base[] = {"data.seq_len=256", "train.steps=6", "train.warmup_steps=2",
                          "train.lr=1e-2", NULL};
    for (int i = 0; base[i]; i++) argv[a++] = "--set", argv[a++] = (char *)base[i];
    for (int i = 0; sets && sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a++] = "--set", argv[a++] = metrics_set;
    for (int i = 0; args && args[i]; i++) argv[a++] = (char *)args[i];
    argv[a] = NULL;
    test_run_result r = test_run(argv, NULL);
    if (metrics_text) {
        metrics_text[0] = '\0';
        FILE *f = fopen(metrics, "r");
        size_t got = f ? fread(metrics_text, 1, metrics_len - 1, f) : 0;
        metrics_text[got] = '\0';
        if (f) fclose(f);
    }
    if (out) {
        memset(out, 0, sizeof *out);
        FILE *f = fopen(metrics, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f) && out->n < MAX_STEPS) {
            char *l = strstr(line, "\"loss\": "), *g = strstr(line, "\"grad_norm\": ");
            if (!l || !g) continue;
            out->loss[out->n] = atof(l + 8);
            out->grad_norm[out->n] = atof(g + 13);
            out->n++;
        }
        if (f) fclose(f);
    }
    unlink(metrics);
    return r;
}

static test_run_result train(int ranks, int nodes, const char *const *sets, const char *inject,
                             curve *out)
{
    const char *args[] = {"--inject-nan", inject, NULL};
    return train_args(ranks, nodes, sets, inject ? args : NULL, out, NULL, 0);
}

static void expect_same(const curve *a, const curve *b, double tol, const char *what)
{
    ck_assert_msg(a->n == 6 && b->n == 6, "%s: %d and %d steps logged", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= tol * fabs(a->loss[i]),
                      "%s: step %d loss %.9g vs %.9g", what, i + 1, a->loss[i], b->loss[i]);
        ck_assert_msg(fabs(a->grad_norm[i] - b->grad_norm[i]) <= 10 * tol * fabs(a->grad_norm[i]),
                      "%s: step %d grad norm %.9g vs %.9g", what, i + 1, a->grad_norm[i],
                      b->grad_norm[i]);
    }
}

static void run_ok(int ranks, int nodes, const char *const *sets, curve *c)
{
    test_run_result r = train(ranks, nodes, sets, NULL, c);
    ck_assert_msg(r.exit_code == 0, "burst train on %d ranks exited %d:\n%s", ranks, r.exit_code, r.out);
    test_run_free(&r);
}

START_TEST(gradients_match_finite_differences)
{
    char path[4096];
    test_program_path("tests/train/train_gradcheck", path, sizeof path);
    const char *cases[][3] = {{"1", "1", "1"}, {"1", "0", "0"}, {"2", "0.5", "1"}, {"4", "1", "0"}};
    for (int i = 0; i < 4; i++) {
        char *argv[] = {(char *)test_burst_path(), "run", "-n", (char *)cases[i][0], "--", path,
                        (char *)cases[i][1], (char *)cases[i][2], NULL};
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok gradcheck"),
                      "gradcheck P=%s fraction %s fused %s:\n%s", cases[i][0], cases[i][1],
                      cases[i][2], r.out);
        test_run_free(&r);
    }
}
END_TEST

START_TEST(same_losses_whatever_the_number_of_ranks)
{
    curve one, other;
    const char *p1[] = {"parallel.cp=1", "train.micro_batches=2", NULL};
    run_ok(1, 1, p1, &one);
    const char *p2[] = {"parallel.cp=2", "train.micro_batches=2", NULL};
    run_ok(2, 1, p2, &other);
    expect_same(&one, &other, 1e-4, "P=2 vs P=1");
    const char *p4[] = {"parallel.cp=4", "train.micro_batches=2", NULL};
    run_ok(4, 1, p4, &other);
    expect_same(&one, &other, 1e-4, "P=4 vs P=1");
    /* two sequences per step either way: 2 micro-batches, or 2 data-parallel groups */
    const char *grid[] = {"parallel.dp=2", "parallel.cp=2", "train.micro_batches=1", NULL};
    run_ok(4, 1, grid, &other);
    expect_same(&one, &other, 1e-4, "DP x CP = 2 x 2 vs P=1");
    const char *dbl[] = {"parallel.cp=4", "train.micro_batches=2", "parallel.ring=double", NULL};
    run_ok(4, 2, dbl, &other);
    expect_same(&one, &other, 1e-4, "double ring on 2 nodes x 2 vs P=1");
}
END_TEST

START_TEST(checkpoint_fraction_and_head_fusion_change_nothing)
{
    curve base, other;
    const char *f1[] = {"parallel.cp=2", "memory.ckpt_fraction=1", NULL};
    run_ok(2, 1, f1, &base);
    const char *f0[] = {"parallel.cp=2", "memory.ckpt_fraction=0", NULL};
    run_ok(2, 1, f0, &other);
    expect_same(&base, &other, 1e-5, "checkpoint fraction 0 vs 1");
    const char *fh[] = {"parallel.cp=2", "memory.ckpt_fraction=0.5", NULL};
    run_ok(2, 1, fh, &other);
    expect_same(&base, &other, 1e-5, "checkpoint fraction 1/2 vs 1");
    const char *unfused[] = {"parallel.cp=2", "memory.ckpt_fraction=1", "memory.fused_head=0", NULL};
    run_ok(2, 1, unfused, &other);
    expect_same(&base, &other, 1e-5, "reference head vs fused head");
}
END_TEST

START_TEST(nonfinite_gradient_stops_every_rank)
{
    const char *sets[] = {"parallel.cp=2", NULL};
    test_run_result r = train(2, 1, sets, "2:1", NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d:\n%s", r.exit_code, r.out);
    for (int k = 0; k < 2; k++) {
        char want[160];
        snprintf(want, sizeof want,
                 "[%d] burst train: rank %d: step 2: non-finite loss or gradient seen on rank 1; stopping",
                 k, k);
        ck_assert_msg(test_output_has(&r, want), "missing '%s':\n%s", want, r.out);
    }
    test_run_free(&r);
    const char *skip[] = {"parallel.cp=2", "train.on_nonfinite=skip", NULL};
    curve c;
    r = train(2, 1, skip, "2:1", &c);
    ck_assert_msg(r.exit_code == 0 && c.n == 6, "skip: exit %d, %d steps:\n%s", r.exit_code, c.n, r.out);
    ck_assert(test_output_has(&r, "step 2: non-finite loss or gradient on rank 1; skipping"));
    test_run_free(&r);
}
END_TEST

START_TEST(loss_falls_on_a_learnable_task)
{
    const char *sets[] = {"parallel.cp=2", "data.task=counting", "train.steps=30",
                          "train.lr=1e-2", NULL};
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
    test_run_free(&r);
}
END_TEST

START_TEST(bad_settings_exit_2_before_work)
{
    const char *cases[][2] = {{"model.n_heads=3", "n_heads"},
                              {"parallel.cp=3", "[parallel]"},
                              {"data.seq_len=250", "seq_len"},
                              {"model.n_head=4", "n_head"}};
    for (int i = 0; i < 4; i++) {
        const char *sets[] = {i == 1 ? "parallel.dp=1" : "parallel.cp=2", cases[i][0], NULL};
        test_run_result r = train(2, 1, sets, NULL, NULL);
        ck_assert_msg(r.exit_code == 2 && test_output_has(&r, cases[i][1]),
                      "--set %s: exit %d:\n%s", cases[i][0], r.exit_code, r.out);
        ck_assert_msg(!test_output_has(&r, "step "), "--set %s: training started:\n%s", cases[i][0], r.out);
        test_run_free(&r);
    }
}
END_TEST

/* The loss lines of a metrics file for steps from..to, as text. */
static void loss_lines(const char *metrics, int from, int to, char *out, size_t len)
{
    out[0] = '\0';
    for (const char *l = metrics; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int step = atoi(l + 9); /* {"step": N */
        const char *loss = strstr(l, "\"loss\""), *end = loss ? strchr(loss, ',') : NULL;
        if (step >= from && step <= to && loss && end)
            snprintf(out + strlen(out), len - strlen(out), "%d %.*s\n", step, (int)(end - loss), loss);
    }
}

START_TEST(resume_continues_bit_for_bit)
{
    char dir[512], dir_set[600], whole[8192], first[8192], second[8192], a[2048], b[2048];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    const char *plain[] = {"parallel.cp=2", NULL};
    test_run_result r = train_args(2, 1, plain, NULL, NULL, whole, sizeof whole);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    const char *ckpt[] = {"parallel.cp=2", dir_set, "train.keep_checkpoints=1", NULL};
    const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
    r = train_args(2, 1, ckpt, stop, NULL, first, sizeof first);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "checkpoint: "), "%s", r.out);
    test_run_free(&r);
    r = train_args(2, 1, ckpt, resume, NULL, second, sizeof second);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
    loss_lines(whole, 4, 6, a, sizeof a);
    loss_lines(second, 4, 6, b, sizeof b);
    ck_assert_msg(strlen(a) > 0 && strcmp(a, b) == 0, "uninterrupted:\n%s\nresumed:\n%s", a, b);
    /* a checkpoint of 2 ranks is refused by a world of 1 */
    const char *one[] = {"parallel.cp=1", dir_set, NULL};
    r = train_args(1, 1, one, resume, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, "2 ranks"), "%s", r.out);
    test_run_free(&r);
    ck_assert_int_eq(test_remove_tree(dir), 0);
}
END_TEST

START_TEST(trains_from_an_hdf5_corpus)
{
    char corpus[512], eval[512], path_set[600], eval_set[600];
    snprintf(corpus, sizeof corpus, "%s/train.h5", tmpdir);
    snprintf(eval, sizeof eval, "%s/eval.h5", tmpdir);
    const char *outs[2] = {corpus, eval}, *seeds[2] = {"1", "2"};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {(char *)test_burst_path(), "data", "synth", "--task", "passkey",
                        "--seq-len", "256", "--samples", "12", "--seed", (char *)seeds[i], "-o",
                        (char *)outs[i], NULL};
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 0, "%s", r.out);
        test_run_free(&r);
    }
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *sets[] = {"parallel.cp=2", "data.source=hdf5", path_set, eval_set,
                          "eval.eval_samples=8", "data.sampling=shuffled", NULL};
    curve c;
    test_run_result r = train_args(2, 1, sets, NULL, &c, NULL, 0);
    ck_assert_msg(r.exit_code == 0 && c.n == 6 && isfinite(c.loss[5]), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "passkey retrieval accuracy: "), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "of 8 held-out samples"), "%s", r.out);
    test_run_free(&r);
    /* a file that is not a corpus is refused before any work, and named */
    char bad[512], bad_set[600];
    snprintf(bad, sizeof bad, "%s/not-a-corpus.h5", tmpdir);
    FILE *f = fopen(bad, "w");
    fputs("garbage", f);
    fclose(f);
    snprintf(bad_set, sizeof bad_set, "data.path=%s", bad);
    const char *bad_sets[] = {"parallel.cp=2", "data.source=hdf5", bad_set, NULL};
    r = train_args(2, 1, bad_sets, NULL, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, bad), "%s", r.out);
    test_run_free(&r);
    unlink(bad), unlink(corpus), unlink(eval);
}
END_TEST

/* Overwrites token pos of the corpus at path with value, through HDF5 itself
 * (the corpus writer refuses a token beyond the vocabulary). */
static void poke_token(const char *path, hsize_t pos, unsigned value)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = f < 0 ? -1 : H5Dopen2(f, "tokens", H5P_DEFAULT);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    hsize_t one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    ck_assert_msg(fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &pos, NULL, &one, NULL) >= 0 &&
                      H5Dwrite(d, H5T_NATIVE_UINT, ms, fs, H5P_DEFAULT, &value) >= 0,
                  "cannot write token %llu of %s", (unsigned long long)pos, path);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(d), H5Fclose(f);
}

START_TEST(eval_read_failure_on_one_rank_stops_every_rank)
{
    char eval[512], eval_set[600];
    snprintf(eval, sizeof eval, "%s/eval-bad.h5", tmpdir);
    char *argv[] = {(char *)test_burst_path(), "data", "synth", "--task", "passkey", "--seq-len",
                    "256", "--samples", "4", "-o", eval, NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    /* zigzag over 2 ranks: rank 0 reads tokens [0, 65) and [192, 257) of a
     * sample, rank 1 [64, 193); token 100 of sample 0 is rank 1's alone */
    poke_token(eval, 100, 256);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *sets[] = {"parallel.cp=2", "parallel.layout=zigzag", eval_set, NULL};
    r = train(2, 1, sets, NULL, NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "[1] burst train: ") && test_output_has(&r, "beyond vocab_size"),
                  "rank 1 does not say why it could not read:\n%s", r.out);
    /* every rank ends with an error naming the file; rank 0 names rank 1 */
    for (int k = 0; k < 2; k++) {
        char want[700];
        snprintf(want, sizeof want, "[%d] burst train: rank %d: evaluation: %s: ", k, k, eval);
        const char *line = strstr(r.out, want);
        ck_assert_msg(line, "missing '%s':\n%s", want, r.out);
        if (k == 0) {
            const char *end = strchr(line, '\n');
            ck_assert_msg(end && memmem(line, (size_t)(end - line), "rank 1 ", 7),
                          "rank 0 does not name rank 1:\n%s", r.out);
        }
    }
    ck_assert_msg(!test_output_has(&r, "timed out"), "a transport timeout:\n%s", r.out);
    test_run_free(&r);
    unlink(eval);
}
END_TEST

int main(void)
{
    if (!test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-train")) return 1;
    Suite *s = suite_create("train");
    TCase *tc = check_tcase(s, "train", 900);
    check_add_tests(
        tc, gradients_match_finite_differences, same_losses_whatever_the_number_of_ranks,
        checkpoint_fraction_and_head_fusion_change_nothing, nonfinite_gradient_stops_every_rank,
        loss_falls_on_a_learnable_task, bad_settings_exit_2_before_work,
        resume_continues_bit_for_bit, trains_from_an_hdf5_corpus,
        eval_read_failure_on_one_rank_stops_every_rank);
    int status = check_run(s);
    test_remove_tree(tmpdir);
    return status;
}
