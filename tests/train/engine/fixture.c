/* fixture.c: the runs and expectations the parts of tests/train/test_train
 * and of the test_train_device suites share (fixture.h). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

char *one_thread[] = {"OMP_NUM_THREADS=1", NULL};
char **run_env = one_thread;
char train_tmpdir[256];
int on_emulator;
const char *const on_device[] = {"train.device=cuda", "data.seq_len=64", NULL};
const char *const on_cpu[] = {"data.seq_len=64", NULL};
char *deferred[] = {"OMP_NUM_THREADS=1", "BK_EMU_STREAMS=deferred", NULL};

/* The number after "key": in a metrics line, or -1 when absent. */
static double metric(const char *line, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(line, quoted);
    return at ? atof(at + strlen(quoted)) : -1;
}

int run_steps(void)
{
#ifdef BURST_SANITIZERS
    if (on_emulator) return 4;
#endif
    return 6;
}

const char *train_program(void)
{
    static char emu[4096];
    if (!on_emulator) return test_burst_path();
    return test_program_path("tests/train/burst_emu", emu, sizeof emu);
}

/* burst run -n ranks [--nodes nodes] -- burst train --set ... (sets: NULL-terminated) */
test_run_result train_args(int ranks, int nodes, const char *const *sets, const char *const *args,
                           curve *out, char *metrics_text, size_t metrics_len)
{
    static int serial;
    char metrics[512], n[16], m[16], metrics_set[600];
    snprintf(metrics, sizeof metrics, "%s/metrics-%d.jsonl", train_tmpdir, serial++);
    snprintf(metrics_set, sizeof metrics_set, "train.metrics=%s", metrics);
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[64];
    int a = 0;
    argv[a++] = (char *)train_program();
    /* --no-kill: every rank must stop by itself, and say why */
    argv[a++] = "run", argv[a++] = "-n", argv[a++] = n, argv[a++] = "--nodes", argv[a++] = m;
    argv[a++] = "--no-kill", argv[a++] = "--";
    argv[a++] = (char *)train_program();
    argv[a++] = "train";
    char steps[32];
    snprintf(steps, sizeof steps, "train.steps=%d", run_steps());
    const char *base[] = {"data.seq_len=256", steps, "train.warmup_steps=2", "train.lr=1e-2",
                          NULL};
    for (int i = 0; base[i]; i++) argv[a++] = "--set", argv[a++] = (char *)base[i];
    for (int i = 0; sets && sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a++] = "--set", argv[a++] = metrics_set;
    for (int i = 0; args && args[i]; i++) argv[a++] = (char *)args[i];
    argv[a] = NULL;
    test_run_result r = test_run(argv, run_env);
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
            if (!strstr(line, "\"loss\": ") || !strstr(line, "\"grad_norm\": ")) continue;
            out->loss[out->n] = metric(line, "loss");
            out->grad_norm[out->n] = metric(line, "grad_norm");
            out->tokens[out->n] = metric(line, "tokens");
            out->attn_bytes[out->n] = metric(line, "attn_bytes");
            out->attn_pairs[out->n] = metric(line, "attn_pairs");
            out->flops[out->n] = metric(line, "gflops") * metric(line, "seconds") * 1e9;
            out->attn_s[out->n] = metric(line, "attn_s");
            out->exposed_s[out->n] = metric(line, "exposed_s");
            out->reduce_s[out->n] = metric(line, "reduce_s");
            out->gather_s[out->n] = metric(line, "gather_s");
            out->offload_s[out->n] = metric(line, "offload_s");
            out->n++;
        }
        if (f) fclose(f);
    }
    unlink(metrics);
    return r;
}

test_run_result train(int ranks, int nodes, const char *const *sets, const char *inject, curve *out)
{
    const char *args[] = {"--inject-nan", inject, NULL};
    return train_args(ranks, nodes, sets, inject ? args : NULL, out, NULL, 0);
}

void expect_same(const curve *a, const curve *b, double tol, const char *what)
{
    ck_assert_msg(a->n == run_steps() && b->n == run_steps(), "%s: %d and %d steps logged", what,
                  a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        ck_assert_msg(a->tokens[i] > 0 && a->tokens[i] == b->tokens[i],
                      "%s: step %d labelled tokens %.0f vs %.0f", what, i + 1, a->tokens[i],
                      b->tokens[i]);
        ck_assert_msg(a->attn_pairs[i] > 0 && a->attn_pairs[i] == b->attn_pairs[i],
                      "%s: step %d attention pairs %.0f vs %.0f", what, i + 1, a->attn_pairs[i],
                      b->attn_pairs[i]);
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= tol * fabs(a->loss[i]),
                      "%s: step %d loss %.9g vs %.9g", what, i + 1, a->loss[i], b->loss[i]);
        ck_assert_msg(fabs(a->grad_norm[i] - b->grad_norm[i]) <= 10 * tol * fabs(a->grad_norm[i]),
                      "%s: step %d grad norm %.9g vs %.9g", what, i + 1, a->grad_norm[i],
                      b->grad_norm[i]);
    }
}

void expect_close(const curve *a, const curve *b, double tol, const char *what)
{
    ck_assert_msg(a->n >= 4 && a->n == b->n, "%s: %d and %d steps", what, a->n, b->n);
    for (int i = 0; i < a->n; i++)
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= tol * fabs(a->loss[i]) &&
                          fabs(a->grad_norm[i] - b->grad_norm[i]) <= tol * fabs(a->grad_norm[i]),
                      "%s, step %d: loss %.17g and %.17g, gradient norm %.17g and %.17g", what,
                      i + 1, a->loss[i], b->loss[i], a->grad_norm[i], b->grad_norm[i]);
}

/* A run that must succeed; its output must hold `says` when given. */
void run_saying(int ranks, int nodes, const char *const *sets, const char *says, curve *c)
{
    test_run_result r = train(ranks, nodes, sets, NULL, c);
    ck_assert_msg(r.exit_code == 0, "burst train on %d ranks exited %d:\n%s", ranks, r.exit_code,
                  r.out);
    ck_assert_msg(!says || test_output_has(&r, says), "no '%s' in:\n%s", says, r.out);
    test_run_free(&r);
}

void run_ok(int ranks, int nodes, const char *const *sets, curve *c)
{
    run_saying(ranks, nodes, sets, NULL, c);
}

/* The sets of a run: base (NULL-terminated) followed by more (idem). */
void checkpoint_dir(const char *name, char *dir, char *set)
{
    snprintf(dir, 512, "%s/%s", train_tmpdir, name);
    snprintf(set, 600, "train.checkpoint_dir=%s", dir);
}

const char *const *with(const char *const *base, const char *const *more)
{
    static const char *all[32];
    int n = 0;
    for (int i = 0; base[i]; i++) all[n++] = base[i];
    for (int i = 0; more[i]; i++) all[n++] = more[i];
    all[n] = NULL;
    return all;
}

/* Every step spent time in the rings and waited for no more than that (the
 * metrics carry both, the slowest rank's). */
void expect_ring_times(const curve *c, const char *what)
{
    ck_assert_msg(c->n > 0, "%s: no steps", what);
    for (int i = 0; i < c->n; i++)
        ck_assert_msg(c->attn_s[i] > 0 && c->exposed_s[i] >= 0 && c->exposed_s[i] <= c->attn_s[i],
                      "%s: step %d: %g s in the rings, %g s exposed", what, i + 1, c->attn_s[i],
                      c->exposed_s[i]);
}

/* The loss lines of a metrics file for steps from..to, as text. */
static void loss_lines(const char *metrics, int from, int to, char *out, size_t len)
{
    out[0] = '\0';
    for (const char *l = metrics; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int step = atoi(l + 9); /* {"step": N */
        const char *loss = strstr(l, "\"loss\""), *end = loss ? strchr(loss, ',') : NULL;
        if (step >= from && step <= to && loss && end)
            snprintf(out + strlen(out), len - strlen(out), "%d %.*s\n", step, (int)(end - loss),
                     loss);
    }
}

/* Resuming with sets (and the checkpoint of dir) on `ranks` ranks is refused
 * with exit 2 and a message containing want. */
void expect_resume_refused(int ranks, const char *const *sets, const char *want)
{
    const char *resume[] = {"--resume", NULL};
    test_run_result r = train_args(ranks, 1, sets, resume, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, want), "wanted exit 2 and '%s':\n%s",
                  want, r.out);
    ck_assert_msg(!test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
}

/* run_steps() in one go, and 3 steps, a stop and a resume to the end with
 * sets (which name the checkpoint directory dir), log the same losses for
 * steps 4 and on, to
 * the last bit; refused lists [settings, expected message] pairs (NULL-ended)
 * that a resume must refuse before the good one. */
void expect_resume_bit_for_bit(int ranks, const char *const *sets, const char *dir,
                               const char *const (*refused)[2])
{
    char whole[8192], first[8192], second[8192], a[2048], b[2048];
    const char *plain[16], *changed[16];
    int n = 0;
    for (; sets[n]; n++) plain[n] = sets[n];
    plain[n] = NULL;
    test_run_result r = train_args(ranks, 1, plain, NULL, NULL, whole, sizeof whole);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
    r = train_args(ranks, 1, sets, stop, NULL, first, sizeof first);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "checkpoint: "), "%s", r.out);
    test_run_free(&r);
    for (int k = 0; refused && refused[k][0]; k++) {
        memcpy(changed, plain, sizeof changed);
        changed[n] = refused[k][0], changed[n + 1] = NULL;
        char want[1024];
        snprintf(want, sizeof want, "checkpoint %s/step-3 %s", dir, refused[k][1]);
        expect_resume_refused(ranks, changed, want);
    }
    r = train_args(ranks, 1, sets, resume, NULL, second, sizeof second);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
    loss_lines(whole, 4, run_steps(), a, sizeof a);
    loss_lines(second, 4, run_steps(), b, sizeof b);
    ck_assert_msg(strlen(a) > 0 && strcmp(a, b) == 0, "uninterrupted:\n%s\nresumed:\n%s", a, b);
}

void expect_moved_resume(int ranks, const char *const *sets, const char *const *moved,
                         const curve *whole, double tol, const char *what)
{
    const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
    test_run_result r = train_args(ranks, 1, sets, stop, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    curve c;
    r = train_args(ranks, 1, moved, resume, &c, NULL, 0);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
    ck_assert_int_eq(c.n, whole->n - 3);
    for (int i = 0; i < c.n; i++)
        ck_assert_msg(fabs(c.loss[i] - whole->loss[i + 3]) <= tol * fabs(whole->loss[i + 3]),
                      "step %d: resumed %s %.17g, uninterrupted %.17g", i + 4, what, c.loss[i],
                      whole->loss[i + 3]);
}

void synth(const char *task, const char *seq_len, const char *samples, const char *seed,
           const char *out)
{
    char *argv[16] = {
        (char *)test_burst_path(), "data",      "synth",        "--task", (char *)task, "--seq-len",
        (char *)seq_len,           "--samples", (char *)samples};
    int a = 9;
    if (seed) argv[a++] = "--seed", argv[a++] = (char *)seed;
    argv[a++] = "-o", argv[a++] = (char *)out;
    argv[a] = NULL;
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
}

int train_suite_main(const char *name, const char *tmp_prefix, void (*add)(Suite *s))
{
    if (!test_make_tmpdir(train_tmpdir, sizeof train_tmpdir, tmp_prefix)) return 1;
    Suite *s = suite_create(name);
    add(s);
    int status = check_run(s);
    test_remove_tree(train_tmpdir);
    return status;
}
