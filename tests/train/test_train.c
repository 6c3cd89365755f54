/* test_train.c: the training engine, with real ranks under `burst run`:
 * gradients against finite differences and what each mask isolates
 * (tests/train/train_gradcheck); the same tiny run on P = 1, 2, 4 ranks,
 * DP x CP = 2 x 2 and the double ring gives the same losses step by step, and
 * so do document masks (synthetic and HDF5 documents), block-sparse masks,
 * the sliding window, the Q-side backward (forced, and chosen by auto for
 * multi-head attention) and the kernels called on several pieces of a block;
 * documents and sparse blocks make the rings send fewer bytes and allow
 * fewer attention pairs, which the FLOPs of the GFLOP/s count (each step its
 * own documents; causal, window and sparse counts exact); checkpoint
 * fractions 0, 1/2, 1 and the fused and reference LM heads give the same
 * losses and gradient norms; an injected NaN, and gradients that overflow only
 * in their sum over the ranks, stop (or skip) every rank naming the step; the
 * loss falls on a learnable task (and the start report names whose sgemm rate
 * it measured); bad settings exit 2 before any work, and --print-config
 * refuses them alike; a resume continues bit for bit (synthetic data, a
 * shuffled corpus) and refuses a checkpoint of another configuration or
 * sampler, naming what differs; a sample of the eval corpus that one rank
 * cannot read ends every rank with an error naming the file. Losses,
 * labelled tokens, ring bytes, attention pairs and FLOPs are read from the
 * JSON-lines metrics each run writes. Every rank runs one OpenMP thread: more threads than cores,
 * spinning, would make a multi-rank run crawl. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "io/h5util.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

enum { MAX_STEPS = 64 };

typedef struct {
    int n;
    double loss[MAX_STEPS], grad_norm[MAX_STEPS];
    double tokens[MAX_STEPS], attn_bytes[MAX_STEPS]; /* labelled tokens, ring bytes sent */
    double attn_pairs[MAX_STEPS], flops[MAX_STEPS];  /* pairs the mask allowed, FLOPs counted */
    double attn_s[MAX_STEPS], exposed_s[MAX_STEPS];  /* ring time, exposed communication */
} curve;

static char *one_thread[] = {"OMP_NUM_THREADS=1", NULL};
/* The environment of the runs below: one thread, and where a test says so,
 * emulated nodes of 4 GPUs (the device index of rank r is its local rank). */
static char **run_env = one_thread;

/* The number after "key": in a metrics line, or -1 when absent. */
static double metric(const char *line, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(line, quoted);
    return at ? atof(at + strlen(quoted)) : -1;
}

static char tmpdir[256];

/* The program the ranks run: burst, or burst linked with the device emulator
 * (tests/train/burst_emu) for runs with [train] device = cuda. */
static int on_emulator;

static const char *program(void)
{
    static char emu[4096];
    if (!on_emulator) return test_burst_path();
    return test_program_path("tests/train/burst_emu", emu, sizeof emu);
}

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
    argv[a++] = (char *)program();
    /* --no-kill: every rank must stop by itself, and say why */
    argv[a++] = "run", argv[a++] = "-n", argv[a++] = n, argv[a++] = "--nodes", argv[a++] = m;
    argv[a++] = "--no-kill", argv[a++] = "--";
    argv[a++] = (char *)program();
    argv[a++] = "train";
    const char *base[] = {"data.seq_len=256", "train.steps=6", "train.warmup_steps=2",
                          "train.lr=1e-2", NULL};
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

/* A run that must succeed; its output must hold `says` when given. */
static void run_saying(int ranks, int nodes, const char *const *sets, const char *says, curve *c)
{
    test_run_result r = train(ranks, nodes, sets, NULL, c);
    ck_assert_msg(r.exit_code == 0, "burst train on %d ranks exited %d:\n%s", ranks, r.exit_code, r.out);
    ck_assert_msg(!says || test_output_has(&r, says), "no '%s' in:\n%s", says, r.out);
    test_run_free(&r);
}

static void run_ok(int ranks, int nodes, const char *const *sets, curve *c)
{
    run_saying(ranks, nodes, sets, NULL, c);
}

/* The sets of a run: base (NULL-terminated) followed by more (idem). */
static const char *const *with(const char *const *base, const char *const *more)
{
    static const char *all[32];
    int n = 0;
    for (int i = 0; base[i]; i++) all[n++] = base[i];
    for (int i = 0; more[i]; i++) all[n++] = more[i];
    all[n] = NULL;
    return all;
}

/* On every step, run a sent fewer ring bytes than run b (both on the same ranks). */
static void expect_fewer_bytes(const curve *a, const curve *b, const char *what)
{
    for (int i = 0; i < a->n && i < b->n; i++)
        ck_assert_msg(a->attn_bytes[i] > 0 && a->attn_bytes[i] < b->attn_bytes[i],
                      "%s: step %d sent %.0f ring bytes, the causal mask %.0f", what, i + 1,
                      a->attn_bytes[i], b->attn_bytes[i]);
}

/* Every step spent time in the rings and waited for no more than that (the
 * metrics carry both, the slowest rank's). */
static void expect_ring_times(const curve *c, const char *what)
{
    ck_assert_msg(c->n > 0, "%s: no steps", what);
    for (int i = 0; i < c->n; i++)
        ck_assert_msg(c->attn_s[i] > 0 && c->exposed_s[i] >= 0 && c->exposed_s[i] <= c->attn_s[i],
                      "%s: step %d: %g s in the rings, %g s exposed", what, i + 1, c->attn_s[i],
                      c->exposed_s[i]);
}

START_TEST(gradients_match_finite_differences)
{
    char path[4096];
    test_program_path("tests/train/train_gradcheck", path, sizeof path);
    /* ranks, then the worker's options */
    const char *cases[][11] = {
        {"1", "--mask", "causal", "--fraction", "1", "--fused", "1", NULL},
        {"1", "--mask", "causal", "--fraction", "0", "--fused", "0", "--mlp-rows", "5", NULL},
        {"2", "--mask", "causal", "--fraction", "0.5", "--mlp-rows", "7", NULL},
        {"4", "--mask", "causal", "--fraction", "1", "--fused", "0", NULL},
        {"2", "--mask", "causal", "--fraction", "0", "--bwd", "q", NULL},
        {"2", "--mask", "window", "--fraction", "1", "--piece-rows", "5", NULL},
        {"4", "--mask", "window", "--fraction", "0", "--bwd", "q", NULL},
        {"2", "--mask", "document", "--fraction", "1", NULL},
        {"4", "--mask", "document", "--bwd", "q", "--piece-rows", "3", NULL},
        {"2", "--mask", "sparse", "--fraction", "1", NULL},
        {"4", "--mask", "sparse", "--fraction", "0", "--bwd", "q", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[16] = {(char *)test_burst_path(), "run", "-n", (char *)cases[i][0], "--", path};
        char options[160] = "";
        int a = 6;
        for (int k = 1; cases[i][k]; k++) {
            argv[a++] = (char *)cases[i][k];
            snprintf(options + strlen(options), sizeof options - strlen(options), " %s",
                     cases[i][k]);
        }
        argv[a] = NULL;
        test_run_result r = test_run(argv, one_thread);
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok gradcheck"),
                      "gradcheck P=%s%s:\n%s", cases[i][0], options, r.out);
        test_run_free(&r);
    }
}
END_TEST

/* Every step of c counted `pairs` (query, key) pairs of attention. */
static void expect_pairs(const curve *c, double pairs, const char *what)
{
    for (int i = 0; i < c->n; i++)
        ck_assert_msg(c->attn_pairs[i] == pairs, "%s: step %d counted %.0f attention pairs, not %.0f",
                      what, i + 1, c->attn_pairs[i], pairs);
}

/* On every step, run a's mask allowed fewer attention pairs than run b's, and
 * the FLOPs of its GFLOP/s counted fewer (the same sequences otherwise). */
static void expect_less_work(const curve *a, const curve *b, const char *what)
{
    for (int i = 0; i < a->n && i < b->n; i++) {
        ck_assert_msg(a->attn_pairs[i] > 0 && a->attn_pairs[i] < b->attn_pairs[i],
                      "%s: step %d allowed %.0f attention pairs, the causal mask %.0f", what, i + 1,
                      a->attn_pairs[i], b->attn_pairs[i]);
        ck_assert_msg(a->flops[i] < 0.999 * b->flops[i],
                      "%s: step %d counted %.6g FLOPs, the causal mask %.6g", what, i + 1,
                      a->flops[i], b->flops[i]);
    }
}

START_TEST(same_losses_whatever_the_number_of_ranks)
{
    curve one, other;
    const char *p1[] = {"parallel.cp=1", "train.micro_batches=2", NULL};
    run_ok(1, 1, p1, &one);
    expect_pairs(&one, 2 * 256 * 257 / 2, "causal, two sequences of 256"); /* every k <= q */
    const char *p2[] = {"parallel.cp=2", "train.micro_batches=2", NULL};
    run_ok(2, 1, p2, &other);
    expect_same(&one, &other, 1e-4, "P=2 vs P=1");
    const char *p4[] = {"parallel.cp=4", "train.micro_batches=2", NULL};
    run_ok(4, 1, p4, &other);
    expect_same(&one, &other, 1e-4, "P=4 vs P=1");
    expect_ring_times(&other, "P=4");
    /* two sequences per step either way: 2 micro-batches, or 2 data-parallel groups */
    const char *grid[] = {"parallel.dp=2", "parallel.cp=2", "train.micro_batches=1", NULL};
    run_ok(4, 1, grid, &other);
    expect_same(&one, &other, 1e-4, "DP x CP = 2 x 2 vs P=1");
    const char *dbl[] = {"parallel.cp=4", "train.micro_batches=2", "parallel.ring=double", NULL};
    run_ok(4, 2, dbl, &other);
    expect_same(&one, &other, 1e-4, "double ring on 2 nodes x 2 vs P=1");
}
END_TEST

/* Under mask (sets, two samples a step), runs on P = 2 and 4 ranks (zigzag
 * with the Q-side backward, and contiguous) give the losses of P = 1, and on 4
 * contiguous ranks the rings send fewer bytes than the causal mask's; *four
 * and *causal are those two runs on 4 contiguous ranks. */
static void mask_matches_single_rank(const char *const *mask, const char *name, curve *four,
                                     curve *causal)
{
    static const char *const splits[][4] = {
        {"parallel.cp=2", NULL},
        {"parallel.cp=4", "parallel.layout=zigzag", "parallel.backward=q", NULL},
        {"parallel.cp=4", "parallel.layout=contiguous", NULL},
    };
    static const int ranks[] = {2, 4, 4};
    char says[64], what[128];
    curve one;
    snprintf(says, sizeof says, "attention: mask %s", name);
    run_saying(1, 1, with(mask, (const char *[]){"parallel.cp=1", NULL}), says, &one);
    for (int i = 0; i < 3; i++) {
        run_ok(ranks[i], 1, with(mask, splits[i]), four);
        snprintf(what, sizeof what, "%s mask, %s %s %s vs P=1", name, splits[i][0],
                 splits[i][1] ? splits[i][1] : "", splits[i][1] ? splits[i][2] : "");
        expect_same(&one, four, 1e-4, what);
    }
    const char *plain[] = {"parallel.cp=4", "parallel.layout=contiguous", "memory.ckpt_fraction=1",
                           "train.micro_batches=2", NULL};
    run_ok(4, 1, plain, causal);
    expect_fewer_bytes(four, causal, name);
    expect_less_work(four, causal, name);
}

/* Documents of 24 tokens on average, other ones in each sample: the last
 * token of each document is not a label, and a block is not sent to a rank
 * whose tokens share no document with it. */
START_TEST(document_masks_match_single_rank)
{
    const char *docs[] = {"parallel.mask=document", "data.doc_len=24", "memory.ckpt_fraction=1",
                          "train.micro_batches=2", NULL};
    curve four, causal;
    mask_matches_single_rank(docs, "document", &four, &causal);
    int pairs_vary = 0; /* each step counts its own documents */
    for (int i = 0; i < causal.n; i++) { /* each document's last token went unlabelled */
        ck_assert_msg(four.tokens[i] < causal.tokens[i],
                      "step %d: %.0f labels with documents, %.0f without", i + 1, four.tokens[i],
                      causal.tokens[i]);
        pairs_vary |= four.attn_pairs[i] != four.attn_pairs[0];
    }
    ck_assert_msg(pairs_vary, "every step counted %.0f attention pairs", four.attn_pairs[0]);
}
END_TEST

/* Blocks of 16 tokens, each seeing itself, the one before and the first. */
START_TEST(block_sparse_masks_match_single_rank)
{
    const char *sparse[] = {"parallel.mask=sparse", "parallel.sparse_block=16",
                            "parallel.sparse_pattern=local:2+global:1", "memory.ckpt_fraction=1",
                            "train.micro_batches=2", NULL};
    curve four, causal;
    mask_matches_single_rank(sparse, "sparse", &four, &causal);
    /* 16 blocks: block 0 sees itself (136 causal pairs), block 1 itself and
     * block 0 (136 + 256), each later one itself, the one before and block 0
     * (136 + 512); two sequences a step */
    expect_pairs(&four, 2 * (136 + 392 + 14 * 648), "local:2+global:1 over blocks of 16");
}
END_TEST

/* A window of 40 tokens, shorter than a rank's share: recomputed (fraction 0)
 * or kept (1), contiguous or zigzag, either backward direction. */
START_TEST(sliding_window_matches_single_rank)
{
    const char *window[] = {"parallel.mask=window", "parallel.window=40", NULL};
    curve one, other;
    run_ok(1, 1, with(window, (const char *[]){"memory.ckpt_fraction=1", NULL}), &one);
    /* 40 keys a query, but for the first 39 queries 1, 2, ..., 39 */
    expect_pairs(&one, 39 * 40 / 2 + (256 - 39) * 40, "window of 40 over 256 tokens");
    const char *p2[] = {"parallel.cp=2", "memory.ckpt_fraction=0", NULL};
    run_ok(2, 1, with(window, p2), &other);
    expect_same(&one, &other, 1e-4, "window, fraction 0, P=2 vs P=1");
    const char *p4[] = {"parallel.cp=4", "memory.ckpt_fraction=1", "parallel.backward=q", NULL};
    run_ok(4, 1, with(window, p4), &other);
    expect_same(&one, &other, 1e-4, "window, Q-side backward, P=4 vs P=1");
    const char *zigzag[] = {"parallel.cp=4", "memory.ckpt_fraction=0", "parallel.layout=zigzag",
                            NULL};
    run_ok(4, 1, with(window, zigzag), &other);
    expect_same(&one, &other, 1e-4, "window, zigzag, P=4 vs P=1");
}
END_TEST

/* The tiny preset has grouped-query attention, where auto sends K and V; the
 * Q-side backward forced, and multi-head attention, where auto takes it. */
START_TEST(q_side_backward_matches_single_rank)
{
    curve one, other;
    run_saying(1, 1, (const char *[]){"parallel.cp=1", NULL}, "backward (KV-side", &one);
    const char *q2[] = {"parallel.cp=2", "parallel.backward=q", NULL};
    run_saying(2, 1, q2, "backward (Q-side", &other);
    expect_same(&one, &other, 1e-4, "GQA, Q-side forced, P=2 vs P=1");
    const char *q4[] = {"parallel.cp=4", "parallel.backward=q", "memory.ckpt_fraction=0", NULL};
    run_saying(4, 1, q4, "backward (Q-side", &other);
    expect_same(&one, &other, 1e-4, "GQA, Q-side forced, P=4 vs P=1");
    const char *mha1[] = {"model.n_kv_heads=4", "parallel.cp=1", NULL};
    run_saying(1, 1, mha1, "backward (Q-side", &one);
    const char *mha4[] = {"model.n_kv_heads=4", "parallel.cp=4", NULL};
    run_saying(4, 1, mha4, "backward (Q-side", &other);
    expect_same(&one, &other, 1e-4, "MHA, auto (Q-side), P=4 vs P=1");
    const char *mha_double[] = {"model.n_kv_heads=4", "parallel.cp=4", "parallel.ring=double",
                                NULL};
    run_saying(4, 2, mha_double, "backward (Q-side", &other);
    expect_same(&one, &other, 1e-4, "MHA, auto (Q-side), double ring on 2 nodes x 2 vs P=1");
}
END_TEST

/* Pieces of 24 query rows: 128 rows per rank in five whole pieces and one of 8. */
START_TEST(ring_in_several_kernel_pieces_matches_single_rank)
{
    curve one, other;
    run_ok(1, 1, (const char *[]){"parallel.cp=1", NULL}, &one);
    const char *pieces[] = {"parallel.cp=2", "parallel.piece_rows=24", NULL};
    run_saying(2, 1, pieces, "kernel pieces of 24 query rows", &other);
    expect_same(&one, &other, 1e-4, "pieces of 24 rows, P=2 vs P=1");
    const char *q_pieces[] = {"parallel.cp=2", "parallel.piece_rows=24", "parallel.backward=q",
                              "memory.ckpt_fraction=0", NULL};
    run_ok(2, 1, q_pieces, &other);
    expect_same(&one, &other, 1e-4, "pieces of 24 rows, Q-side backward, P=2 vs P=1");
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
    for (int dp = 1; dp <= 2; dp++) {
        const char *sets[] = {dp == 1 ? "parallel.cp=2" : "parallel.dp=2", NULL};
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
    const char *skip[] = {"parallel.cp=2", "train.on_nonfinite=skip", NULL};
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
        ck_assert_msg(!test_output_has(&r, "step "), "--set %s: training started:\n%s", cases[i][0], r.out);
        /* --print-config refuses it with the run's message; but it checks
         * cp = 3 for 3 ranks, which the run's world of 2 does not reach */
        const char *base[] = {"data.seq_len=256", "train.steps=6", "train.warmup_steps=2",
                              "train.lr=1e-2", sets[0], sets[1], NULL};
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

/* Swaps the 8-byte attribute `name` of file (of HDF5 type `type`) with *value,
 * in place: a test's tampering, which io/ never does to a checkpoint. */
static void swap_attribute(const char *file, const char *name, hid_t type, void *value)
{
    char err[512];
    hid_t f = io_h5_open(file, H5F_ACC_RDWR, err, sizeof err);
    ck_assert_msg(f >= 0, "%s", err);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a < 0) io_h5_fail(err, sizeof err, file, "opening attribute \"%s\"", name);
    ck_assert_msg(a >= 0, "%s", err);
    unsigned char old[8];
    ck_assert(H5Aread(a, type, old) >= 0 && H5Awrite(a, type, value) >= 0);
    memcpy(value, old, sizeof old);
    ck_assert(H5Aclose(a) >= 0 && H5Fclose(f) >= 0);
}

/* Resuming with sets (and the checkpoint of dir) on `ranks` ranks is refused
 * with exit 2 and a message containing want. */
static void expect_resume_refused(int ranks, const char *const *sets, const char *want)
{
    const char *resume[] = {"--resume", NULL};
    test_run_result r = train_args(ranks, 1, sets, resume, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, want), "wanted exit 2 and '%s':\n%s",
                  want, r.out);
    ck_assert_msg(!test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
}

/* 6 steps in one go, and 3 steps, a stop and a resume to 6 with sets (which
 * name the checkpoint directory dir), log the same losses for steps 4..6, to
 * the last bit; refused lists [settings, expected message] pairs (NULL-ended)
 * that a resume must refuse before the good one. */
static void expect_resume_bit_for_bit(int ranks, const char *const *sets, const char *dir,
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
    loss_lines(whole, 4, 6, a, sizeof a);
    loss_lines(second, 4, 6, b, sizeof b);
    ck_assert_msg(strlen(a) > 0 && strcmp(a, b) == 0, "uninterrupted:\n%s\nresumed:\n%s", a, b);
}

START_TEST(resume_continues_bit_for_bit)
{
    char dir[512], dir_set[600], model[600];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    snprintf(model, sizeof model, "%s/step-3/model.h5", dir);
    /* keys that change the numbers are refused, each named with both values;
     * the checkpoint is left whole by every refusal */
    const char *const refused[][2] = {
        {"model.d_model=128", "was written with [model] d_model = 64, this run has 128"},
        {"data.data_seed=7", "was written with [data] data_seed = 1, this run has 7"},
        {"train.steps=8", "was written with [train] steps = 6, this run has 8"},
        {"train.lr=0.02", "was written with [train] lr = 0.01, this run has 0.02"},
        {NULL, NULL}};
    const char *sets[] = {"parallel.cp=2", dir_set, "train.keep_checkpoints=1", NULL};
    expect_resume_bit_for_bit(2, sets, dir, refused);
    /* another split of the world, and another world */
    const char *contiguous[] = {"parallel.cp=2", dir_set, "parallel.layout=contiguous",
                                "memory.ckpt_fraction=1", NULL};
    expect_resume_refused(2, contiguous, "[parallel] layout = auto, this run has contiguous");
    const char *one[] = {"parallel.cp=1", dir_set, NULL};
    expect_resume_refused(1, one, "was written with [parallel] cp = 2, this run has 1");
    /* a sampler position or an RNG state that this configuration does not
     * reach after step 6 is refused, naming it */
    int64_t position = 0;
    uint64_t state = 99;
    snprintf(model, sizeof model, "%s/step-6/model.h5", dir);
    swap_attribute(model, "sample_position", H5T_NATIVE_INT64, &position);
    ck_assert_int_eq(position, 6); /* (step 7 - 1) * dp 1 * micro-batches 1 */
    const char *again[] = {"parallel.cp=2", dir_set, "train.steps=6", NULL};
    expect_resume_refused(2, again, "sample_position = 0, this run continues at sample 6");
    swap_attribute(model, "sample_position", H5T_NATIVE_INT64, &position);
    swap_attribute(model, "rng_state", H5T_NATIVE_UINT64, &state);
    ck_assert_uint_eq(state, 1); /* [data] data_seed */
    expect_resume_refused(2, again, "rng_state = 99, this run has [data] data_seed = 1");
    swap_attribute(model, "rng_state", H5T_NATIVE_UINT64, &state);
    ck_assert_int_eq(test_remove_tree(dir), 0);
}
END_TEST

/* burst data synth --task TASK --seq-len N --samples S --seed SEED -o OUT */
static void synth(const char *task, const char *seq_len, const char *samples, const char *seed,
                  const char *out)
{
    char *argv[] = {(char *)test_burst_path(), "data", "synth", "--task", (char *)task,
                    "--seq-len", (char *)seq_len, "--samples", (char *)samples, "--seed",
                    (char *)seed, "-o", (char *)out, NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
}

START_TEST(trains_from_an_hdf5_corpus)
{
    char corpus[512], eval[512], path_set[600], eval_set[600];
    snprintf(corpus, sizeof corpus, "%s/train.h5", tmpdir);
    snprintf(eval, sizeof eval, "%s/eval.h5", tmpdir);
    synth("passkey", "256", "12", "1", corpus);
    synth("passkey", "256", "12", "2", eval);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *sets[] = {"parallel.cp=2", "data.source=hdf5", path_set, eval_set,
                          "eval.eval_samples=8", "data.sampling=shuffled", NULL};
    curve c;
    test_run_result r = train_args(2, 1, sets, NULL, &c, NULL, 0);
    ck_assert_msg(r.exit_code == 0 && c.n == 6 && isfinite(c.loss[5]), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "eval: passkey retrieval accuracy "), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "over 8 held-out samples"), "%s", r.out);
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

/* Shuffled windows of a corpus, two data-parallel groups of two micro-batches:
 * the resumed run reads the samples the uninterrupted one read at steps 4..6
 * (a sampler restarted at sample 0 would not), and a resume under another
 * sampling or data seed is refused. */
START_TEST(resume_continues_a_shuffled_corpus_bit_for_bit)
{
    char corpus[512], path_set[600], dir[512], dir_set[600];
    snprintf(corpus, sizeof corpus, "%s/resume.h5", tmpdir);
    char *argv[] = {(char *)test_burst_path(), "data", "synth", "--task", "passkey", "--seq-len",
                    "256", "--samples", "40", "--seed", "3", "-o", corpus, NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(dir, sizeof dir, "%s/ckpt-corpus", tmpdir);
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    const char *const refused[][2] = {
        {"data.sampling=sequential", "was written with [data] sampling = shuffled, this run has "
                                     "sequential"},
        {"data.data_seed=1", "was written with [data] data_seed = 123456789, this run has 1"},
        {"train.micro_batches=1", "was written with [train] micro_batches = 2, this run has 1"},
        {NULL, NULL}};
    const char *sets[] = {"parallel.dp=2", "parallel.cp=1", "train.micro_batches=2",
                          "data.source=hdf5", path_set, "data.sampling=shuffled",
                          "data.data_seed=123456789", dir_set, NULL};
    expect_resume_bit_for_bit(2, sets, dir, refused);
    ck_assert_int_eq(test_remove_tree(dir), 0);
    unlink(corpus);
}
END_TEST

/* A corpus of 32-token documents (samples of --seq-len 31): every window of
 * 257 tokens holds 8 document starts after its first token, so 248 of its 256
 * tokens have a label. Two ranks give the single rank's losses, evaluation
 * (within the eval corpus's documents) included; a corpus without document
 * boundaries is refused, and named. */
START_TEST(documents_from_an_hdf5_corpus)
{
    char corpus[512], eval[512], text[512], flat[512], path_set[600], eval_set[600], flat_set[600];
    snprintf(corpus, sizeof corpus, "%s/docs.h5", tmpdir);
    snprintf(eval, sizeof eval, "%s/docs-eval.h5", tmpdir);
    synth("copy", "31", "64", "1", corpus);
    synth("passkey", "256", "4", "2", eval);
    snprintf(path_set, sizeof path_set, "data.path=%s", corpus);
    snprintf(eval_set, sizeof eval_set, "eval.eval_path=%s", eval);
    const char *docs[] = {"data.source=hdf5", path_set, "parallel.mask=document",
                          "memory.ckpt_fraction=1", eval_set, "eval.eval_samples=4", NULL};
    curve one, other;
    run_saying(1, 1, with(docs, (const char *[]){"parallel.cp=1", NULL}), "over 4 held-out samples",
               &one);
    for (int i = 0; i < one.n; i++)
        ck_assert_msg(one.tokens[i] == 248, "step %d: %.0f labelled tokens, not 256 - 8", i + 1,
                      one.tokens[i]);
    run_saying(2, 1, with(docs, (const char *[]){"parallel.cp=2", NULL}), "over 4 held-out samples",
               &other);
    expect_same(&one, &other, 1e-4, "HDF5 documents, P=2 vs P=1");

    snprintf(text, sizeof text, "%s/plain.txt", tmpdir);
    snprintf(flat, sizeof flat, "%s/plain.h5", tmpdir);
    FILE *f = fopen(text, "w");
    for (int i = 0; i < 40; i++) fputs("no documents here\n", f);
    fclose(f);
    char *import[] = {(char *)test_burst_path(), "data", "import", "--from", "text", text, "-o",
                      flat, NULL};
    test_run_result r = test_run(import, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    snprintf(flat_set, sizeof flat_set, "data.path=%s", flat);
    const char *flat_sets[] = {"data.source=hdf5", flat_set, "parallel.mask=document",
                               "memory.ckpt_fraction=1", NULL};
    r = train(1, 1, flat_sets, NULL, NULL);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, flat) &&
                      test_output_has(&r, "no /doc_offsets"),
                  "exit %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(!test_output_has(&r, "step "), "training started:\n%s", r.out);
    test_run_free(&r);
    unlink(corpus), unlink(eval), unlink(text), unlink(flat);
}
END_TEST

/* Overwrites token pos of the corpus at path with value, through HDF5 itself
 * (the corpus writer refuses a token beyond the vocabulary). */
static void poke_token(const char *path, hsize_t pos, unsigned value)
{
    char err[512] = "";
    hid_t f = io_h5_open(path, H5F_ACC_RDWR, err, sizeof err);
    hid_t d = f < 0 ? -1 : io_h5_open_dataset(f, path, "tokens", H5P_DEFAULT, err, sizeof err);
    hid_t fs = d < 0 ? -1 : H5Dget_space(d);
    hsize_t one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    if (fs >= 0 && (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &pos, NULL, &one, NULL) < 0 ||
                    H5Dwrite(d, H5T_NATIVE_UINT, ms, fs, H5P_DEFAULT, &value) < 0))
        io_h5_fail(err, sizeof err, path, "writing token %llu", (unsigned long long)pos);
    ck_assert_msg(fs >= 0 && !err[0], "%s", err);
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

/* The engine on the (emulated) device: every buffer of the model, the ring
 * and the optimizer in device memory, the transport staging device buffers
 * between ranks. Against the CPU engine, step by step, within what bf16
 * attention moves (the device's tensor cores round Q, K, V, P and dS to bf16;
 * the host computes in fp32): 1 rank, and 4 ranks on 2 emulated nodes with
 * the double ring and dp x cp = 2 x 2 (the gradient reduce-scatter and the
 * parameter all-gather on device memory). A resume on the device continues
 * bit for bit, and a CPU checkpoint resumed on the device continues the
 * CPU's curve within the same tolerance. Sequences of 64 tokens: the emulator runs every kernel thread
 * by thread on the CPU. */
START_TEST(device_engine_matches_the_cpu)
{
    on_emulator = 1;
    const char *dev[] = {"train.device=cuda", "data.seq_len=64", NULL};
    curve cpu, one, four, grid;
    run_ok(1, 1, (const char *[]){"data.seq_len=64", NULL}, &cpu);
    run_saying(1, 1, dev, "layer matrix products in bf16", &one);
    expect_same(&cpu, &one, 2e-2, "device P=1 vs CPU");
    run_ok(4, 2, with(dev, (const char *[]){"parallel.cp=4", "parallel.ring=double", NULL}), &four);
    expect_same(&cpu, &four, 2e-2, "device, double ring P=4 vs CPU");
    expect_ring_times(&four, "device, double ring P=4");
    run_ok(4, 2, with(dev, (const char *[]){"parallel.dp=2", "parallel.cp=2", NULL}), &grid);
    curve cpu_grid;
    run_ok(4, 2, (const char *[]){"parallel.dp=2", "parallel.cp=2", "data.seq_len=64", NULL},
           &cpu_grid);
    expect_same(&cpu_grid, &grid, 2e-2, "device dp x cp = 2 x 2 vs CPU");

    char dir[512], dir_set[600];
    snprintf(dir, sizeof dir, "%s/ckpt-device", tmpdir);
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    const char *sets[] = {"train.device=cuda", "data.seq_len=64", "parallel.cp=2", dir_set, NULL};
    expect_resume_bit_for_bit(2, sets, dir, NULL);
    ck_assert_int_eq(test_remove_tree(dir), 0);

    /* A CPU checkpoint resumed on the device continues the CPU's curve. */
    snprintf(dir, sizeof dir, "%s/ckpt-moved", tmpdir);
    snprintf(dir_set, sizeof dir_set, "train.checkpoint_dir=%s", dir);
    const char *on_cpu[] = {"data.seq_len=64", dir_set, NULL};
    const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
    test_run_result r = train_args(1, 1, on_cpu, stop, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    curve moved;
    r = train_args(1, 1, with(on_cpu, (const char *[]){"train.device=cuda", NULL}), resume, &moved,
                   NULL, 0);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
    ck_assert_int_eq(moved.n, cpu.n - 3);
    for (int i = 0; i < moved.n; i++)
        ck_assert_msg(fabs(moved.loss[i] - cpu.loss[i + 3]) <= 2e-2 * fabs(cpu.loss[i + 3]),
                      "step %d: resumed on the device %.6f, the CPU %.6f", i + 4, moved.loss[i],
                      cpu.loss[i + 3]);
    ck_assert_int_eq(test_remove_tree(dir), 0);
    on_emulator = 0;
}
END_TEST

#ifdef HAVE_NCCL
/* The device engine over NCCL (the emulated programs link the model of NCCL,
 * kernels/emu/nccl_emu.cc): emulated nodes of 4 GPUs, a GPU per rank, and
 * [transport] intra = nccl, which fails unless NCCL serves every node. On one
 * node of 2 and of 4 ranks the losses equal the staged path's within 1e-4
 * (the same kernels and bytes; the gradient sums of NCCL's reduce-scatter add
 * in another order than the host's); on 2 nodes of 2 (double ring:
 * NCCL inside, staged between) and dp x cp = 2 x 2 they match the CPU. A
 * posting order that can deadlock on NCCL deadlocks there (the model fails
 * it and names the pending operations). */
START_TEST(device_engine_over_nccl)
{
    on_emulator = 1;
    static char *four_gpus[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=4",
                                "BK_EMU_NCCL_TIMEOUT=300", NULL};
    const char *dev[] = {"train.device=cuda", "data.seq_len=64", NULL},
               *nccl[] = {"train.device=cuda", "data.seq_len=64", "transport.intra=nccl", NULL};
    curve staged, over_nccl, cpu, grid;
    for (int p = 2; p <= 4; p += 2) {
        char cp[32];
        snprintf(cp, sizeof cp, "parallel.cp=%d", p);
        /* one emulated GPU shared: staged; four: NCCL (rank 0 prints every pair's path) */
        run_saying(p, 1, with(dev, (const char *[]){cp, NULL}), p == 2 ? "rank 1: sc" : NULL,
                   &staged);
        run_env = four_gpus;
        run_ok(p, 1, with(nccl, (const char *[]){cp, NULL}), &over_nccl);
        run_env = one_thread;
        expect_same(&staged, &over_nccl, 1e-4,
                    p == 2 ? "2 ranks: NCCL vs staged" : "4 ranks: NCCL vs staged");
    }
    run_ok(1, 1, (const char *[]){"data.seq_len=64", NULL}, &cpu);
    run_env = four_gpus;
    run_saying(4, 2, with(nccl, (const char *[]){"parallel.cp=4", "parallel.ring=double", NULL}),
               "rank 2: sscn", &over_nccl); /* NCCL inside a node, staged between */
    run_ok(4, 1, with(nccl, (const char *[]){"parallel.dp=2", "parallel.cp=2", NULL}), &grid);
    run_env = one_thread;
    expect_same(&cpu, &over_nccl, 2e-2, "2 nodes x 2 GPUs, double ring over NCCL vs CPU");
    curve cpu_grid;
    run_ok(4, 1, (const char *[]){"parallel.dp=2", "parallel.cp=2", "data.seq_len=64", NULL},
           &cpu_grid);
    expect_same(&cpu_grid, &grid, 2e-2, "dp x cp = 2 x 2 over NCCL vs CPU");
    /* the ring's former order, each post its own group with receives first,
     * deadlocks over NCCL: the model of NCCL stops it, naming the stall */
    static char *ungrouped[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=4",
                                "BK_EMU_NCCL_TIMEOUT=5", "BURST_TEST_RING_UNGROUPED=1", NULL};
    run_env = ungrouped;
    test_run_result r =
        train(2, 1, with(nccl, (const char *[]){"parallel.cp=2", NULL}), NULL, NULL);
    run_env = one_thread;
    ck_assert_msg(r.exit_code != 0 && test_output_has(&r, "no progress for 5 s"),
                  "the ungrouped ring over NCCL exited %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
    on_emulator = 0;
}
END_TEST
#endif

/* The number after `key` in the line holding `line`, or -1. */
static long long number_after(const test_run_result *r, const char *line, const char *key)
{
    const char *at = strstr(r->out, line), *end = at ? strchr(at, '\n') : NULL;
    const char *k = at ? strstr(at, key) : NULL;
    return k && (!end || k < end) ? atoll(k + strlen(key)) : -1;
}

/* burst_emu train on the emulated device, one rank without a launcher (its
 * output and the emulator's in one pipe, in the order they were written), 3
 * steps of 64 tokens, in the environment env. */
static test_run_result train_alone_on_device(char *const *env)
{
    on_emulator = 1;
    const char *sets[] = {"train.device=cuda", "data.seq_len=64", "train.steps=3",
                          "train.warmup_steps=1", NULL};
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)program(), argv[a++] = "train";
    for (int i = 0; sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a] = NULL;
    on_emulator = 0;
    return test_run(argv, env);
}

/* On a device every buffer of the engine and the kernels' scratch come from
 * one arena, taken at setup: with the emulator printing every runtime
 * allocation (BK_EMU_TRACE_ALLOC), none comes after the report, in the steps,
 * the evaluation or the end; the peak measured in the arena after step 1 and
 * at the end is within its capacity and within 2% and 64 KiB of the estimate
 * of the device parts, and the device's used memory is reported. On an
 * emulated device with less memory than the device parts the run is refused
 * before the first step, naming them; on one that holds the parts but not the
 * arena's margin, taking the arena fails, naming its size, the free memory and
 * the parts: exit 2 both times. */
START_TEST(device_arena_holds_every_buffer)
{
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_TRACE_ALLOC=1", "BK_EMU_DEVICE_BYTES=1073741824",
                   NULL};
    test_run_result r = train_alone_on_device(env);
    ck_assert_msg(r.exit_code == 0, "exit %d:\n%s", r.exit_code, r.out);
    long long capacity = number_after(&r, "device arena per rank: ", "capacity "),
              peak1 = number_after(&r, "device arena after step 1: ", "peak "),
              peak = number_after(&r, "device arena at the end: ", "peak "),
              estimate = number_after(&r, "device arena at the end: ", "estimated ");
    ck_assert_msg(capacity > 0 && peak1 > 0 && peak1 <= peak && peak <= capacity,
                  "capacity %lld, peak after step 1 %lld, at the end %lld:\n%s", capacity, peak1,
                  peak, r.out);
    long long diff = peak > estimate ? peak - estimate : estimate - peak;
    ck_assert_msg(diff <= estimate / 50 + 65536, "estimated %lld bytes, peak %lld", estimate, peak);
    ck_assert_msg(test_output_has(&r, "; device memory used ") && test_output_has(&r, " of 1.0 GiB"),
                  "%s", r.out);
    const char *started = strstr(r.out, "device: emulator"), *first = strstr(r.out, "emu: cudaMalloc ");
    ck_assert_msg(started && first && first < started && !strstr(started, "emu: cudaMalloc") &&
                      test_output_has(&r, "step     3/3"),
                  "a runtime allocation after setup:\n%s", r.out);
    test_run_free(&r);

    char small[] = "BK_EMU_DEVICE_BYTES=1048576";
    env[2] = small;
    r = train_alone_on_device(env);
    long long parts = number_after(&r, "burst train: a rank needs ", "needs ");
    ck_assert_msg(r.exit_code == 2 && parts > 1048576 && parts < capacity &&
                      test_output_has(&r, " bytes of device memory (") &&
                      test_output_has(&r, "more than a device has free for each of the ranks "
                                          "that drive it (1.0 MiB): parameters ") &&
                      !test_output_has(&r, "step "),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);

    char exact[64], asked[160];
    snprintf(exact, sizeof exact, "BK_EMU_DEVICE_BYTES=%lld", parts);
    env[2] = exact;
    r = train_alone_on_device(env);
    snprintf(asked, sizeof asked,
             "out of device memory: cannot take the device arena of %lld bytes (", capacity);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, asked) &&
                      test_output_has(&r, "), the device has ") &&
                      test_output_has(&r, "; the estimate: parameters ") &&
                      test_output_has(&r, " for alignment and kernel scratch") &&
                      !test_output_has(&r, "step "),
                  "exit %d, no '%s':\n%s", r.exit_code, asked, r.out);
    test_run_free(&r);
}
END_TEST

/* burst_emu run -n ranks --nodes nodes: a CP group of every rank training 3
 * steps of 64 tokens on its emulated device, the emulator printing every
 * runtime allocation (BK_EMU_TRACE_ALLOC) on the rank's stderr, in order.
 * With head_chunk0 > 0, the LM head of rank 0 works on chunks of that many
 * tokens and every other rank's on chunks of head_chunk1: each rank's device
 * memory is its own setting's (no rank checks another's). */
static test_run_result train_ranks_on_device_steps(int ranks, int nodes, int head_chunk0,
                                                   int head_chunk1, int steps)
{
    on_emulator = 1;
    char n[16], m[16], cp[32], script[160], n_steps[32];
    snprintf(n_steps, sizeof n_steps, "train.steps=%d", steps);
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    snprintf(cp, sizeof cp, "parallel.cp=%d", ranks);
    snprintf(script, sizeof script,
             "if [ \"$BURST_RANK\" = 0 ]; then exec \"$@\" --set memory.head_chunk=%d; fi; "
             "exec \"$@\" --set memory.head_chunk=%d",
             head_chunk0, head_chunk1);
    const char *sets[] = {
        "train.device=cuda", "data.seq_len=64", n_steps, "train.warmup_steps=1", cp, NULL};
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)program(), argv[a++] = "run", argv[a++] = "-n", argv[a++] = n;
    argv[a++] = "--nodes", argv[a++] = m, argv[a++] = "--";
    if (head_chunk0 > 0)
        argv[a++] = "/bin/sh", argv[a++] = "-c", argv[a++] = script, argv[a++] = "sh";
    argv[a++] = (char *)program(), argv[a++] = "train";
    for (int i = 0; sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a] = NULL;
    on_emulator = 0;
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_TRACE_ALLOC=1", NULL};
    return test_run(argv, env);
}

static test_run_result train_ranks_on_device(int ranks, int nodes, int head_chunk0, int head_chunk1)
{
    return train_ranks_on_device_steps(ranks, nodes, head_chunk0, head_chunk1, 3);
}

/* The lines of rank in out that start with text after the rank's prefix
 * "[rank] ": how many, and the first and the last of them (NULL when none). */
static int rank_lines(const char *out, int rank, const char *text, const char **first,
                      const char **last)
{
    char want[160];
    snprintf(want, sizeof want, "[%d] %s", rank, text);
    int n = 0;
    *first = *last = NULL;
    for (const char *at = strstr(out, want); at; at = strstr(at + 1, want))
        if (at == out || at[-1] == '\n') {
            if (n++ == 0) *first = at;
            *last = at;
        }
    return n;
}

/* r's output without the emulator's allocation lines, its last 3000
 * characters at most: what a failure message can carry. */
static const char *untraced(const test_run_result *r)
{
    static char kept[1 << 16];
    size_t n = 0;
    for (const char *line = r->out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (!memmem(line, len, "emu: cuda", 9) && n + len < sizeof kept)
            memcpy(kept + n, line, len), n += len;
        line += len;
    }
    kept[n] = '\0';
    return n > 3000 ? kept + n - 3000 : kept;
}

/* Ranks on two emulated nodes stage their device messages through pinned
 * host buffers, and the ring uploads block positions from pinned mirrors:
 * the transport takes its pool when the device is linked, before the arena,
 * the ring its mirrors with its buffers, and nothing is taken in the steps,
 * the evaluation or the end (cudaMallocHost is slow and waits for the
 * device): a run of 3 steps takes as many as a run of 1. */
START_TEST(device_staging_buffers_taken_at_setup)
{
    test_run_result one = train_ranks_on_device_steps(2, 2, 0, 0, 1);
    test_run_result r = train_ranks_on_device(2, 2, 0, 0);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "step     3/3"), "exit %d:\n%s",
                  r.exit_code, untraced(&r));
    ck_assert_msg(one.exit_code == 0, "exit %d:\n%s", one.exit_code, untraced(&one));
    long long capacity = number_after(&r, "device arena per rank: ", "capacity ");
    char arena[64];
    snprintf(arena, sizeof arena, "emu: cudaMalloc %lld bytes\n", capacity);
    for (int rank = 0; rank < 2; rank++) {
        const char *taken, *first, *last, *ignored;
        rank_lines(r.out, rank, arena, &taken, &ignored);
        int n3 = rank_lines(r.out, rank, "emu: cudaMallocHost ", &first, &last),
            n1 = rank_lines(one.out, rank, "emu: cudaMallocHost ", &ignored, &ignored);
        ck_assert_msg(capacity > 0 && taken && first && first < taken && last,
                      "rank %d: its arena of %lld bytes taken at byte %td of the output, its "
                      "pinned buffers from byte %td to %td (-1: none)",
                      rank, capacity, taken ? taken - r.out : -1, first ? first - r.out : -1,
                      last ? last - r.out : -1);
        ck_assert_msg(n3 == n1, "rank %d: %d pinned allocations in 3 steps, %d in 1", rank, n3, n1);
    }
    test_run_free(&r);
    test_run_free(&one);
}
END_TEST

/* The arena line "device arena WHEN: " of a run: its peak, the rank it names
 * (0 when it names none), capacity and estimate; every number -1 when
 * absent. */
typedef struct {
    long long peak, rank, capacity, estimate;
} arena_line;

static arena_line arena_line_of(const test_run_result *r, const char *when)
{
    char line[64];
    snprintf(line, sizeof line, "device arena %s: ", when);
    arena_line a = {number_after(r, line, "peak "), number_after(r, line, " on rank "),
                    number_after(r, line, "capacity "), number_after(r, line, "estimated ")};
    if (a.rank < 0 && a.peak >= 0) a.rank = 0;
    return a;
}

/* On several ranks the arena line names the rank whose arena peaked highest
 * (asked of every rank, after step 1 and at the end). Rank 1's LM head works
 * on larger chunks than rank 0's, so its arena holds more: the line names
 * rank 1 with the peak, capacity and estimate of a run where every rank
 * works as rank 1 does, above the peak of a run where every rank works as
 * rank 0 does. With rank 0 the larger, the line names rank 0. */
START_TEST(device_arena_report_names_the_largest_peak)
{
    const char *whens[] = {"after step 1", "at the end"};
    test_run_result runs[4] = {
        train_ranks_on_device(2, 1, 8, 8), train_ranks_on_device(2, 1, 32, 32),
        train_ranks_on_device(2, 1, 8, 32), train_ranks_on_device(2, 1, 32, 8)};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(runs[i].exit_code == 0 && test_output_has(&runs[i], "step     3/3"),
                      "run %d exited %d:\n%s", i, runs[i].exit_code, untraced(&runs[i]));
    for (int w = 0; w < 2; w++) {
        arena_line s = arena_line_of(&runs[0], whens[w]), l = arena_line_of(&runs[1], whens[w]),
                   m = arena_line_of(&runs[2], whens[w]), o = arena_line_of(&runs[3], whens[w]);
        ck_assert_msg(s.peak > 0 && s.peak < l.peak && l.peak <= l.capacity,
                      "%s: peak %lld with the smaller head chunks, %lld with the larger", whens[w],
                      s.peak, l.peak);
        ck_assert_msg(m.rank == 1 && m.peak == l.peak && m.capacity == l.capacity &&
                          m.estimate == l.estimate,
                      "%s: the line names rank %lld, peak %lld of %lld (estimated %lld); rank 1 "
                      "measures %lld of %lld (estimated %lld):\n%s",
                      whens[w], m.rank, m.peak, m.capacity, m.estimate, l.peak, l.capacity,
                      l.estimate, untraced(&runs[2]));
        ck_assert_msg(o.rank == 0 && o.peak == l.peak, "%s: the line names rank %lld, peak %lld",
                      whens[w], o.rank, o.peak);
    }
    for (int i = 0; i < 4; i++) test_run_free(&runs[i]);
}
END_TEST

int main(void)
{
    if (!test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-train")) return 1;
    Suite *s = suite_create("train");
    TCase *tc = check_tcase(s, "train", 900);
    check_add_tests(
        tc, gradients_match_finite_differences, same_losses_whatever_the_number_of_ranks,
        document_masks_match_single_rank, block_sparse_masks_match_single_rank,
        sliding_window_matches_single_rank, q_side_backward_matches_single_rank,
        ring_in_several_kernel_pieces_matches_single_rank,
        checkpoint_fraction_and_head_fusion_change_nothing, nonfinite_gradient_stops_every_rank,
        gradient_infinite_only_after_the_reduction, loss_falls_on_a_learnable_task,
        bad_settings_exit_2_before_work, resume_continues_bit_for_bit,
        resume_continues_a_shuffled_corpus_bit_for_bit, trains_from_an_hdf5_corpus,
        documents_from_an_hdf5_corpus, eval_read_failure_on_one_rank_stops_every_rank);
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device", 900), device_engine_matches_the_cpu,
                    device_arena_holds_every_buffer, device_staging_buffers_taken_at_setup,
                    device_arena_report_names_the_largest_peak);
#ifdef HAVE_NCCL
    check_add_tests(check_tcase(s, "device over NCCL", 900), device_engine_over_nccl);
#endif
    int status = check_run(s);
    test_remove_tree(tmpdir);
    return status;
}
