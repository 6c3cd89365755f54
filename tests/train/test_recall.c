/* test_recall.c: the associative recall task and its evaluation, in one
 * process: a sample holds what recall.h promises (pairs with distinct keys and
 * values of their key's range in the first half, queries of those keys in the
 * second half, labels at the queries only, no value after the first half);
 * held-out samples differ from training ones; every rank's share read through
 * the synthetic source reassembles the sample; the evaluation keeps exactly
 * the queries whose pair another rank holds, for a hand-made layout (every
 * query with one rank), and counts correct answers; bad shapes are refused
 * naming the key. End to end, under `burst run` on 4 ranks over 2 emulated
 * nodes: a short training run prints the accuracy over exactly the held-out
 * queries whose pair other ranks hold, with the chance level, and over every
 * query, saying so, with dp = 4 x cp = 1; below [eval] min_accuracy it exits
 * 1, saying so; a run stopped early by --stop-after is not evaluated; on the
 * emulated device the same queries are counted. The quickstart's configuration
 * is this task on 4 ranks, failing below 90%. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/data/token_source.h"
#include "src/train/trainer_internal.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

enum { N = 64, MAX_Q = 32 };

static const recall_shape shape = {.seq_len = N, .pairs = 6, .queries = 20, .keys = 9, .values = 5};

/* The key (0-based) whose value range holds token t, or -1. */
static int64_t key_of_value(const recall_shape *s, int64_t t)
{
    int64_t first = recall_value_token(s, 0, 0), k = (t - first) / s->values;
    return t >= first && k < s->keys ? k : -1;
}

static void check_first_half(const recall_shape *s, const int64_t *tokens, const int64_t *labels)
{
    int seen[64] = {0}, pairs = 0;
    for (int64_t i = 0; i < s->seq_len / 2; i++) {
        ck_assert_int_eq(labels[i], TOKEN_IGNORE);
        if (tokens[i] == RECALL_FILLER) continue;
        int64_t k = tokens[i] - recall_key_token(0);
        ck_assert_msg(i % 2 == 0 && k >= 0 && k < s->keys, "position %lld: token %lld",
                      (long long)i, (long long)tokens[i]);
        ck_assert_msg(!seen[k]++, "key %lld twice", (long long)k);
        ck_assert_int_eq(key_of_value(s, tokens[i + 1]), k);
        pairs++, i++;
    }
    ck_assert_int_eq(pairs, s->pairs);
}

static void check_second_half(const recall_shape *s, const int64_t *tokens, const int64_t *labels,
                              const recall_query *q)
{
    int64_t asked = 0, last = -1;
    for (int64_t i = s->seq_len / 2; i < s->seq_len; i++) {
        ck_assert_int_eq(key_of_value(s, tokens[i]), -1); /* no value after the first half */
        if (labels[i] == TOKEN_IGNORE) {
            ck_assert_int_eq(tokens[i], RECALL_FILLER);
            continue;
        }
        const recall_query *x = &q[asked++];
        ck_assert_int_eq(x->query_pos, i);
        ck_assert(x->query_pos > last);
        last = x->query_pos;
        ck_assert(x->key_pos >= 0 && x->key_pos < s->seq_len / 2);
        ck_assert_int_eq(tokens[i], tokens[x->key_pos]);
        ck_assert_int_eq(labels[i], x->answer);
        ck_assert_int_eq(x->answer, tokens[x->key_pos + 1]);
    }
    ck_assert_int_eq(asked, s->queries);
}

START_TEST(sample_keeps_its_promises)
{
    int64_t tokens[N], labels[N], again[N];
    recall_query q[MAX_Q], q_again[MAX_Q];
    for (int64_t index = 0; index < 200; index++) {
        recall_sample(&shape, 7, index, tokens, labels, q);
        check_first_half(&shape, tokens, labels);
        check_second_half(&shape, tokens, labels, q);
        /* a pure function of (seed, index), with or without the token arrays */
        recall_sample(&shape, 7, index, again, NULL, q_again);
        ck_assert(memcmp(tokens, again, sizeof tokens) == 0);
        ck_assert(memcmp(q, q_again, (size_t)shape.queries * sizeof q[0]) == 0);
    }
    recall_sample(&shape, 7, 1, again, NULL, q_again);
    ck_assert(memcmp(tokens, again, sizeof tokens) != 0);
}
END_TEST

START_TEST(heldout_samples_are_not_training_samples)
{
    uint64_t seed = 1, heldout = synthetic_heldout_seed(seed);
    ck_assert(heldout != seed);
    static int64_t train[2000][N];
    recall_query q[MAX_Q];
    for (int i = 0; i < 2000; i++) recall_sample(&shape, seed, i, train[i], NULL, q);
    for (int j = 0; j < 64; j++) {
        int64_t held[N];
        recall_sample(&shape, heldout, j, held, NULL, q);
        for (int i = 0; i < 2000; i++)
            ck_assert_msg(memcmp(held, train[i], sizeof held) != 0,
                          "held-out sample %d is training sample %d", j, i);
    }
}
END_TEST

START_TEST(source_shards_reassemble_the_sample)
{
    char err[256];
    for (int kind = 0; kind < 2; kind++) {
        seq_layout l;
        ck_assert(seq_layout_init(&l, kind ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS, 4, N, err,
                                  sizeof err) == 0);
        int64_t want[N], want_labels[N], got[N], got_labels[N], local[N], local_labels[N];
        recall_query q[MAX_Q];
        const synthetic_spec spec = {.task = TASK_RECALL, .recall = shape};
        recall_sample(&shape, 3, 5, want, want_labels, q);
        for (int r = 0; r < 4; r++) {
            token_shard sh = token_shard_of(&l, r);
            token_source *src = synthetic_source_create(&spec, 256, 3, &sh, err, sizeof err);
            ck_assert_msg(src != NULL, "%s", err);
            ck_assert_int_eq(src->read(src, 5, local, local_labels), 0);
            seq_layout_gather(&l, r, local, got, sizeof(int64_t));
            seq_layout_gather(&l, r, local_labels, got_labels, sizeof(int64_t));
            src->free(src);
        }
        ck_assert(memcmp(got, want, sizeof got) == 0);
        ck_assert(memcmp(got_labels, want_labels, sizeof got_labels) == 0);
    }
}
END_TEST

/* Queries of a 32-token sample, for 4 ranks of both layouts. */
static const recall_query hand_made[] = {
    {.query_pos = 17, .key_pos = 0, .answer = 100},
    {.query_pos = 18, .key_pos = 14, .answer = 101},
    {.query_pos = 29, .key_pos = 12, .answer = 102},
    {.query_pos = 20, .key_pos = 6, .answer = 103},
    {.query_pos = 30, .key_pos = 3, .answer = 104},
    {.query_pos = 25, .key_pos = 3, .answer = 105},
    {.query_pos = 21, .key_pos = 3, .answer = 106},
};

/* What rank r of layout must keep: n of them, their rows and answers. */
typedef struct {
    int n;
    int64_t rows[4], answers[4];
} kept;

static void expect_kept(seq_layout_kind kind, const kept want[4])
{
    seq_layout l;
    char err[128];
    ck_assert(seq_layout_init(&l, kind, 4, 32, err, sizeof err) == 0);
    for (int r = 0; r < 4; r++) {
        int64_t rows[8], answers[8];
        int n = trainer_recall_select(&l, r, hand_made, 7, rows, answers);
        ck_assert_msg(n == want[r].n, "%s rank %d: %d kept", seq_layout_name(kind), r, n);
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(rows[i], want[r].rows[i]);
            ck_assert_int_eq(answers[i], want[r].answers[i]);
        }
    }
}

START_TEST(evaluation_keeps_only_cross_rank_queries)
{
    /* zigzag: chunks of 4, rank r holds chunks r and 7 - r
     *   rank 0: 0-3, 28-31   rank 1: 4-7, 24-27   rank 2: 8-11, 20-23   rank 3: 12-15, 16-19
     * dropped: 18 (pair 14-15 on rank 3), 30 (key 3 on rank 0), 25 (value 4 on rank 1) */
    const kept zigzag[4] = {
        {1, {5}, {102}}, {0, {0}, {0}}, {2, {4, 5}, {103, 106}}, {1, {5}, {100}}};
    expect_kept(LAYOUT_ZIGZAG, zigzag);
    /* contiguous: rank r holds 8r..8r+7; every pair is on rank 0 or 1, every query on 2 or 3 */
    const kept contiguous[4] = {{0, {0}, {0}},
                                {0, {0}, {0}},
                                {4, {1, 2, 4, 5}, {100, 101, 103, 106}},
                                {3, {5, 6, 1}, {102, 104, 105}}};
    expect_kept(LAYOUT_CONTIGUOUS, contiguous);
}
END_TEST

/* With one context-parallel rank no pair is on another rank: every query is
 * kept, at its own position, whichever layout. */
START_TEST(evaluation_keeps_every_query_on_one_rank)
{
    for (int kind = 0; kind < 2; kind++) {
        seq_layout l;
        char err[128];
        ck_assert(seq_layout_init(&l, kind ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS, 1, 32, err,
                                  sizeof err) == 0);
        int64_t rows[8], answers[8];
        ck_assert_int_eq(trainer_recall_select(&l, 0, hand_made, 7, rows, answers), 7);
        for (int i = 0; i < 7; i++) {
            ck_assert_int_eq(rows[i], hand_made[i].query_pos);
            ck_assert_int_eq(answers[i], hand_made[i].answer);
        }
    }
}
END_TEST

START_TEST(counting_compares_predictions_with_answers)
{
    const int64_t predicted[] = {5, 6, 7, 8, 9}, answers[] = {5, 0, 7, 9, 9};
    ck_assert_int_eq(trainer_count_correct(predicted, answers, 5), 3);
    ck_assert_int_eq(trainer_count_correct(predicted, answers, 2), 1);
    ck_assert_int_eq(trainer_count_correct(predicted, answers, 0), 0);
}
END_TEST

START_TEST(bad_shapes_are_refused_naming_the_key)
{
    const struct {
        recall_shape s;
        int vocab;
        const char *names;
    } cases[] = {
        {{.seq_len = 64, .pairs = 10, .queries = 4, .keys = 9, .values = 5},
         256,
         "recall_pairs = 10"},
        {{.seq_len = 32, .pairs = 9, .queries = 4, .keys = 9, .values = 5},
         256,
         "recall_pairs = 9"},
        {{.seq_len = 32, .pairs = 4, .queries = 17, .keys = 9, .values = 5},
         256,
         "recall_queries = 17"},
        {{.seq_len = 64, .pairs = 4, .queries = 4, .keys = 9, .values = 5},
         54,
         "[model] vocab = 54"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        ck_assert_int_eq(recall_check(&cases[i].s, cases[i].vocab, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].names) != NULL, "case %zu: %s", i, err);
    }
    recall_shape fits = cases[3].s;
    ck_assert_int_eq(recall_check(&fits, 55, err, sizeof err), 0); /* 1 + 9 keys + 45 values */
}
END_TEST

/* ---- end to end ------------------------------------------------------- */

/* The shape the runs below train on, and their fixed settings. */
static const recall_shape small = {
    .seq_len = 64, .pairs = 8, .queries = 32, .keys = 8, .values = 16};
static const char *const small_sets[] = {
    "parallel.cp=4",          "data.task=recall",    "data.seq_len=64",
    "data.recall_queries=32", "train.steps=6",       "train.warmup_steps=2",
    "train.lr=1e-2",          "eval.eval_samples=5", NULL};

/* burst run -n 4 --nodes 2 -- PROGRAM train (small_sets, then sets, then
 * args); PROGRAM is burst, or burst linked with the device emulator. */
static test_run_result train_on(const char *program, const char *const *sets,
                                const char *const *args)
{
    char *argv[64];
    int a = 0;
    argv[a++] = (char *)test_burst_path();
    argv[a++] = "run", argv[a++] = "-n", argv[a++] = "4", argv[a++] = "--nodes", argv[a++] = "2";
    argv[a++] = "--no-kill", argv[a++] = "--", argv[a++] = (char *)program;
    argv[a++] = "train";
    for (int i = 0; small_sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)small_sets[i];
    for (int i = 0; sets && sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    for (int i = 0; args && args[i]; i++) argv[a++] = (char *)args[i];
    argv[a] = NULL;
    static char *one_thread[] = {"OMP_NUM_THREADS=1", NULL};
    return test_run(argv, one_thread);
}

static test_run_result train_small(const char *const *sets, const char *const *args)
{
    return train_on(test_burst_path(), sets, args);
}

/* How many queries of held-out samples [0, samples) a 4-rank zigzag run must
 * count: those whose pair other ranks hold. */
static int64_t cross_rank_queries(const recall_shape *s, uint64_t data_seed, int samples)
{
    seq_layout l;
    char err[128];
    ck_assert(seq_layout_init(&l, LAYOUT_ZIGZAG, 4, s->seq_len, err, sizeof err) == 0);
    recall_query q[MAX_Q];
    int64_t rows[MAX_Q], answers[MAX_Q], total = 0;
    for (int i = 0; i < samples; i++) {
        recall_sample(s, synthetic_heldout_seed(data_seed), i, NULL, NULL, q);
        for (int r = 0; r < 4; r++)
            total += trainer_recall_select(&l, r, q, s->queries, rows, answers);
    }
    return total;
}

/* r succeeded and printed the accuracy over the cross-rank queries of the
 * first `samples` held-out samples, with the chance level; r is freed. */
static void expect_accuracy_line(test_run_result *r, int samples)
{
    char want[128];
    ck_assert_msg(r->exit_code == 0, "%s", r->out);
    ck_assert_msg(test_output_has(r, "eval: recall accuracy "), "%s", r->out);
    snprintf(want, sizeof want, "over %lld cross-rank queries (chance 6.2%%)",
             (long long)cross_rank_queries(&small, 1, samples));
    ck_assert_msg(test_output_has(r, want), "no '%s' in:\n%s", want, r->out);
    test_run_free(r);
}

START_TEST(training_reports_accuracy_over_cross_rank_queries)
{
    test_run_result r = train_small(NULL, NULL);
    expect_accuracy_line(&r, 5);
}
END_TEST

/* dp = 4 x cp = 1: each rank holds whole sequences, so every query of the
 * held-out samples counts (5 samples of 32 queries), and the line says why;
 * min_accuracy judges them (six steps are far from 100%). */
START_TEST(one_context_parallel_rank_counts_every_query)
{
    const char *alone[] = {"parallel.cp=1", "parallel.dp=4", "eval.min_accuracy=1", NULL};
    test_run_result r = train_small(alone, NULL);
    const char *want = "over 160 queries (one context-parallel rank: all queries) (chance 6.2%)";
    ck_assert_msg(r.exit_code == 1 && test_output_has(&r, want) &&
                      test_output_has(&r, "is below [eval] min_accuracy = 100%"),
                  "exit %d, no '%s' and the verdict in:\n%s", r.exit_code, want, r.out);
    test_run_free(&r);
}
END_TEST

/* With [train] device = cuda (the emulator) each held-out sample goes to the
 * device before its prediction: the same queries are counted. */
START_TEST(device_engine_evaluates_the_same_queries)
{
    char emu[4096];
    test_program_path("tests/train/burst_emu", emu, sizeof emu);
    const char *dev[] = {"train.device=cuda", "train.steps=2", "eval.eval_samples=3", NULL};
    test_run_result r = train_on(emu, dev, NULL);
    ck_assert_msg(test_output_has(&r, "device: emulator"), "%s", r.out);
    expect_accuracy_line(&r, 3);
}
END_TEST

START_TEST(accuracy_below_the_minimum_fails_the_run)
{
    /* six steps are far from 100%: every rank stops with exit 1, rank 0 says why */
    const char *strict[] = {"eval.min_accuracy=1", NULL};
    test_run_result r = train_small(strict, NULL);
    ck_assert_msg(r.exit_code == 1, "exit %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "eval: recall accuracy ") &&
                      test_output_has(&r, "is below [eval] min_accuracy = 100%"),
                  "%s", r.out);
    test_run_free(&r);
    /* a run stopped early is not evaluated: its training goes on after --resume */
    const char *stop[] = {"--stop-after", "3", NULL};
    r = train_small(strict, stop);
    ck_assert_msg(r.exit_code == 0 && !test_output_has(&r, "eval: "), "%s", r.out);
    test_run_free(&r);
}
END_TEST

/* The quickstart's configuration is this task on 4 ranks, failing below 90%:
 * README's main command proves attention across ranks only while it is. */
START_TEST(quickstart_trains_recall_across_ranks_and_requires_90_percent)
{
    const char *src = getenv("BURST_TEST_SRCDIR");
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/examples/quickstart.ini", src ? src : ".");
    train_config c;
    train_config_default(&c);
    ck_assert_msg(train_config_load(&c, path, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(train_config_validate(&c, 4, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.task, TASK_RECALL);
    ck_assert_int_eq(c.cp, 4);
    ck_assert(c.min_accuracy >= 0.9);
    ck_assert(c.eval_samples > 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("recall");
    TCase *tc = check_tcase(s, "recall", 30);
    check_add_tests(tc, sample_keeps_its_promises, heldout_samples_are_not_training_samples,
                    source_shards_reassemble_the_sample, evaluation_keeps_only_cross_rank_queries,
                    evaluation_keeps_every_query_on_one_rank,
                    counting_compares_predictions_with_answers,
                    bad_shapes_are_refused_naming_the_key,
                    quickstart_trains_recall_across_ranks_and_requires_90_percent);
    TCase *runs = check_tcase(s, "runs", 120);
    check_add_tests(runs, training_reports_accuracy_over_cross_rank_queries,
                    one_context_parallel_rank_counts_every_query,
                    accuracy_below_the_minimum_fails_the_run);
    /* the emulated device runs its kernels on the CPU, slowly (several times
     * more under the sanitizers and a loaded machine): a case of its own */
    check_add_tests(check_tcase(s, "device", 600), device_engine_evaluates_the_same_queries);
    return check_run(s);
}
