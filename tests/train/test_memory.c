/* test_memory.c: the memory of `burst train`, on 2 ranks under `burst run`.
 * The training state the memory report counts equals, within a small margin,
 * the most bytes the trainer's code holds at once during setup and two
 * steps (counted by tests/train/train_memory with the allocator wrapped), for
 * the fused and the reference head, every checkpoint fraction and several
 * micro-batches, and with the gradients (zero = 2) and the parameters (zero
 * = 3) sharded, which hold less;
 * more micro-batches add only their token buffers. Every large
 * allocation of the setup, made to fail in turn, ends every rank with exit 2
 * and a message naming the size, never a crash. A run just over
 * [memory] limit_bytes is refused before the first step with exit 2, naming
 * the limit and the parts; at the limit it trains. [parallel] zero = auto
 * takes the smallest stage that fits under the limit, and a resume keeps the
 * stage its checkpoint was written with. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

enum { MAX_SETS = 16 };

/* A tiny run of 256 tokens over cp = 2, and the extra --set values. */
static const char *const base_sets[] = {"parallel.cp=2", "data.seq_len=256", "train.steps=2",
                                        "train.warmup_steps=1", NULL};

/* The last lines of a run's output, for a failure's message. */
static const char *tail_of(const test_run_result *r)
{
    size_t len = strlen(r->out);
    return len > 3000 ? r->out + len - 3000 : r->out;
}

typedef struct {
    long long state, peak; /* of rank 0 */
} measured;

/* burst run -n 2 -- train_memory MODE with the base settings and sets. */
static test_run_result run_worker(const char *mode, const char *const *sets)
{
    char worker[4096];
    test_program_path("tests/train/train_memory", worker, sizeof worker);
    char *argv[8 + 2 * MAX_SETS];
    int a = 0;
    argv[a++] = (char *)test_burst_path(), argv[a++] = "run", argv[a++] = "-n", argv[a++] = "2";
    argv[a++] = "--", argv[a++] = worker, argv[a++] = (char *)mode;
    for (int i = 0; base_sets[i]; i++) argv[a++] = (char *)base_sets[i];
    for (int i = 0; sets[i]; i++) argv[a++] = (char *)sets[i];
    argv[a] = NULL;
    return test_run(argv, NULL);
}

static measured measure(const char *const *sets)
{
    test_run_result r = run_worker("peak", sets);
    measured m = {-1, -1};
    const char *line = strstr(r.out, "rank 0: state ");
    ck_assert_msg(r.exit_code == 0 && line && sscanf(line, "rank 0: state %lld peak %lld", &m.state,
                                                     &m.peak) == 2,
                  "train_memory exited %d:\n%s", r.exit_code, tail_of(&r));
    test_run_free(&r);
    return m;
}

/* The state counted and the peak held agree within 2% and 64 KiB (the ring's
 * plans, the communicators and the kernels' tiles are not counted). */
static void expect_close(const measured *m, const char *what)
{
    long long diff = m->peak > m->state ? m->peak - m->state : m->state - m->peak;
    ck_assert_msg(diff <= m->state / 50 + 65536, "%s: report %lld bytes, peak held %lld", what,
                  m->state, m->peak);
}

START_TEST(report_counts_what_the_trainer_allocates)
{
    const char *cases[][4] = {
        {"memory.attn_kept_fraction=0.5", NULL},
        {"memory.attn_kept_fraction=1", NULL},
        {"memory.attn_kept_fraction=0", NULL},
        /* the reference head's logits [n, V], made at every step:
         * 8 MiB, more than the reduce-scatter's copy */
        {"memory.fused_head=0", "model.vocab=4096", "data.seq_len=1024", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        measured m = measure(cases[i]);
        expect_close(&m, cases[i][0]);
    }
}
END_TEST

/* With the gradients sharded (zero = 2) a rank holds the embedding's window
 * and one layer's instead of every gradient: on 8 layers with a 1 MiB
 * embedding, the count and the peak both fall by more than 1 MiB. With the
 * parameters sharded too (zero = 3) it holds its masters and two windows
 * instead of every parameter: on 16 layers with a small embedding, 1 MiB
 * less again. Each count still matches what is held. */
START_TEST(zeros_2_and_3_hold_windows_not_every_gradient_and_parameter)
{
    const char *one[] = {"model.layers=8", "model.vocab=4096", "parallel.zero=1", NULL},
               *two[] = {"model.layers=8", "model.vocab=4096", "parallel.zero=2", NULL};
    measured m1 = measure(one), m2 = measure(two);
    expect_close(&m1, "zero = 1");
    expect_close(&m2, "zero = 2");
    ck_assert_msg(m2.state + (1 << 20) < m1.state && m2.peak + (1 << 20) < m1.peak,
                  "zero = 1: report %lld, peak %lld; zero = 2: report %lld, peak %lld", m1.state,
                  m1.peak, m2.state, m2.peak);
    const char *deep2[] = {"model.layers=16", "model.vocab=1024", "parallel.zero=2", NULL},
               *deep3[] = {"model.layers=16", "model.vocab=1024", "parallel.zero=3", NULL};
    measured d2 = measure(deep2), d3 = measure(deep3);
    expect_close(&d3, "zero = 3");
    ck_assert_msg(d3.state + (1 << 20) < d2.state && d3.peak + (1 << 20) < d2.peak,
                  "zero = 2: report %lld, peak %lld; zero = 3: report %lld, peak %lld", d2.state,
                  d2.peak, d3.state, d3.peak);
}
END_TEST

START_TEST(micro_batches_add_only_their_tokens)
{
    const char *one[] = {"train.micro_batches=1", NULL}, *four[] = {"train.micro_batches=4", NULL};
    measured m1 = measure(one), m4 = measure(four);
    expect_close(&m4, "4 micro-batches");
    /* 3 more micro-batches of 128 tokens and 128 labels (int64) on each rank */
    long long tokens = 3 * 2 * 128 * 8;
    ck_assert_msg(m4.state - m1.state == tokens, "report: %lld bytes more for 3 micro-batches",
                  m4.state - m1.state);
    ck_assert_msg(m4.peak - m1.peak <= tokens + 16384,
                  "peak held: %lld bytes more for 3 micro-batches (their tokens: %lld)",
                  m4.peak - m1.peak, tokens);
}
END_TEST

START_TEST(failed_allocations_end_every_rank_with_exit_2)
{
    const char *none[] = {NULL};
    test_run_result r = run_worker("fail", none);
    int refused = 0;
    const char *line = strstr(r.out, "ok fail: ");
    ck_assert_msg(r.exit_code == 0 && line && sscanf(line, "ok fail: %d", &refused) == 1,
                  "train_memory fail exited %d:\n%s", r.exit_code, tail_of(&r));
    /* the workspace alone is 20 buffers of more than 4 KiB */
    ck_assert_msg(refused >= 20, "only %d allocations refused:\n%s", refused, tail_of(&r));
    ck_assert_msg(test_output_has(&r, "out of memory: cannot allocate ") &&
                      test_output_has(&r, " bytes (") && test_output_has(&r, "for the layer workspace"),
                  "%s", tail_of(&r));
    test_run_free(&r);
}
END_TEST

/* burst run -n 2 -- burst train with the base settings, limit_bytes = limit
 * (none when 0) and extra arguments (NULL-terminated: --set S.K=V pairs and
 * options). */
static test_run_result train_limited(long long limit, const char *const *extra)
{
    char set[64];
    snprintf(set, sizeof set, "memory.limit_bytes=%lld", limit);
    char *argv[10 + 4 * MAX_SETS];
    int a = 0;
    argv[a++] = (char *)test_burst_path(), argv[a++] = "run", argv[a++] = "-n", argv[a++] = "2";
    argv[a++] = "--", argv[a++] = (char *)test_burst_path(), argv[a++] = "train";
    for (int i = 0; base_sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)base_sets[i];
    argv[a++] = "--set", argv[a++] = set;
    for (int i = 0; extra[i]; i++) argv[a++] = (char *)extra[i];
    argv[a] = NULL;
    return test_run(argv, NULL);
}

static test_run_result train_with_limit(long long limit)
{
    const char *none[] = {NULL};
    return train_limited(limit, none);
}

/* What a rank needs at a ZeRO stage ("1", "2", "3"), as the refusal of a
 * 1-byte limit says. */
static long long need_at_stage(const char *stage)
{
    char set[32];
    snprintf(set, sizeof set, "parallel.zero=%s", stage);
    const char *extra[] = {"--set", set, NULL};
    test_run_result r = train_limited(1, extra);
    long long need = 0;
    const char *at = strstr(r.out, "a rank needs ");
    char says[64];
    snprintf(says, sizeof says, "at ZeRO stage %s, more than", stage);
    ck_assert_msg(r.exit_code == 2 && at && sscanf(at, "a rank needs %lld bytes", &need) == 1 &&
                      test_output_has(&r, says),
                  "zero = %s: exit %d:\n%s", stage, r.exit_code, tail_of(&r));
    test_run_free(&r);
    return need;
}

START_TEST(just_over_the_limit_is_refused_before_work)
{
    /* what a rank needs, as the refusal of a 1-byte limit says */
    test_run_result r = train_with_limit(1);
    long long need = 0;
    const char *at = strstr(r.out, "a rank needs ");
    ck_assert_msg(r.exit_code == 2 && at && sscanf(at, "a rank needs %lld bytes", &need) == 1 &&
                      need > 1000000,
                  "exit %d:\n%s", r.exit_code, tail_of(&r));
    test_run_free(&r);

    r = train_with_limit(need - 1);
    char limit[80];
    snprintf(limit, sizeof limit, "more than [memory] limit_bytes = %lld (", need - 1);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, limit), "limit %lld: exit %d:\n%s",
                  need - 1, r.exit_code, tail_of(&r));
    const char *parts[] = {"parameters ", "gradients ", "optimizer ", "stored activations ",
                           "layer workspace ", "ring buffers ", "head logits ", "tokens "};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        ck_assert_msg(test_output_has(&r, parts[i]), "no '%s' in:\n%s", parts[i], tail_of(&r));
    ck_assert_msg(!test_output_has(&r, "step "), "training started:\n%s", tail_of(&r));
    test_run_free(&r);

    r = train_with_limit(need);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "step     2/2"), "limit %lld: exit %d:\n%s",
                  need, r.exit_code, tail_of(&r));
    test_run_free(&r);
}
END_TEST

/* zero = auto takes the smallest stage whose memory fits, says so, and
 * records it: a run resumed with zero = auto keeps it, whatever fits now. */
START_TEST(zero_auto_takes_the_smallest_stage_that_fits_and_a_resume_keeps_it)
{
    long long one = need_at_stage("1"), two = need_at_stage("2");
    ck_assert_msg(two < one, "zero = 2 needs %lld bytes, zero = 1 %lld", two, one);
    char dir[512], dir_set[600];
    ck_assert_ptr_nonnull(test_make_tmpdir(dir, sizeof dir, "burst-zero-auto"));
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    const char *first[] = {"--set", "parallel.zero=auto", "--set", dir_set, "--stop-after", "1",
                           NULL};
    test_run_result r = train_limited(two, first);
    ck_assert_msg(r.exit_code == 0 &&
                      test_output_has(&r, "ZeRO stage 2 (zero = auto: the smallest stage whose "
                                          "memory fits)"),
                  "limit %lld: exit %d:\n%s", two, r.exit_code, tail_of(&r));
    test_run_free(&r);
    /* without the limit zero = 1 fits; the resumed run keeps the checkpoint's 2 */
    const char *fresh[] = {"--set", "parallel.zero=auto", NULL};
    r = train_limited(0, fresh);
    ck_assert_msg(r.exit_code == 0 &&
                      test_output_has(&r, "ZeRO stage 1 (zero = auto: the smallest"),
                  "exit %d:\n%s", r.exit_code, tail_of(&r));
    test_run_free(&r);
    const char *resume[] = {"--set", "parallel.zero=auto", "--set", dir_set, "--resume", NULL};
    r = train_limited(0, resume);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from") &&
                      test_output_has(&r, "ZeRO stage 2 (zero = auto: the stage of the "
                                          "checkpoint resumed from)") &&
                      test_output_has(&r, "step     2/2"),
                  "exit %d:\n%s", r.exit_code, tail_of(&r));
    test_run_free(&r);
    ck_assert_int_eq(test_remove_tree(dir), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = check_tcase(s, "memory", 600);
    check_add_tests(tc, report_counts_what_the_trainer_allocates,
                    zeros_2_and_3_hold_windows_not_every_gradient_and_parameter,
                    micro_batches_add_only_their_tokens,
                    failed_allocations_end_every_rank_with_exit_2,
                    just_over_the_limit_is_refused_before_work,
                    zero_auto_takes_the_smallest_stage_that_fits_and_a_resume_keeps_it);
    return check_run(s);
}
