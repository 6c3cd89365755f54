/* ranks.c (tests/train/test_train): gradients against finite differences
 * and what each mask isolates (tests/train/train_gradcheck); the same tiny
 * run on P = 1, 2, 4 ranks, DP x CP = 2 x 2 and the double ring gives the
 * same losses step by step, and so do document masks, block-sparse masks,
 * the sliding window, the Q-side backward (forced, and chosen by auto for
 * multi-head attention) and the kernels called on several pieces of a block;
 * documents and sparse blocks make the rings send fewer bytes and allow
 * fewer attention pairs, which the FLOPs of the GFLOP/s count (each step its
 * own documents; causal, window and sparse counts exact); checkpoint
 * fractions 0, 1/2, 1 and the fused and reference LM heads give the same
 * losses and gradient norms. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* On every step, run a sent fewer ring bytes than run b (both on the same ranks). */
static void expect_fewer_bytes(const curve *a, const curve *b, const char *what)
{
    for (int i = 0; i < a->n && i < b->n; i++)
        ck_assert_msg(a->attn_bytes[i] > 0 && a->attn_bytes[i] < b->attn_bytes[i],
                      "%s: step %d sent %.0f ring bytes, the causal mask %.0f", what, i + 1,
                      a->attn_bytes[i], b->attn_bytes[i]);
}

START_TEST(gradients_match_finite_differences)
{
    char path[4096];
    test_program_path("tests/train/train_gradcheck", path, sizeof path);
    /* ranks, then the worker's options */
    const char *cases[][11] = {
        {"1", "--mask", "causal", "--fraction", "1", "--fused", "1", NULL},
        {"1", "--mask", "causal", "--fraction", "0", "--fused", "0", "--chunk-rows", "5", NULL},
        {"2", "--mask", "causal", "--fraction", "0.5", "--chunk-rows", "7", NULL},
        {"2", "--mask", "window", "--keep-layers", "1", "--chunk-rows", "3", "--fraction", "1",
         NULL},
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
        ck_assert_msg(c->attn_pairs[i] == pairs,
                      "%s: step %d counted %.0f attention pairs, not %.0f", what, i + 1,
                      c->attn_pairs[i], pairs);
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
    const char *plain[] = {"parallel.cp=4", "parallel.layout=contiguous",
                           "memory.attn_kept_fraction=1", "train.micro_batches=2", NULL};
    run_ok(4, 1, plain, causal);
    expect_fewer_bytes(four, causal, name);
    expect_less_work(four, causal, name);
}

/* Documents of 24 tokens on average, other ones in each sample: the last
 * token of each document is not a label, and a block is not sent to a rank
 * whose tokens share no document with it. */
START_TEST(document_masks_match_single_rank)
{
    const char *docs[] = {"parallel.mask=document", "data.doc_len=24",
                          "memory.attn_kept_fraction=1", "train.micro_batches=2", NULL};
    curve four, causal;
    mask_matches_single_rank(docs, "document", &four, &causal);
    int pairs_vary = 0;                  /* each step counts its own documents */
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
    const char *sparse[] = {"parallel.mask=sparse",
                            "parallel.sparse_block=16",
                            "parallel.sparse_pattern=local:2+global:1",
                            "memory.attn_kept_fraction=1",
                            "train.micro_batches=2",
                            NULL};
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
    run_ok(1, 1, with(window, (const char *[]){"memory.attn_kept_fraction=1", NULL}), &one);
    /* 40 keys a query, but for the first 39 queries 1, 2, ..., 39 */
    expect_pairs(&one, 39 * 40 / 2 + (256 - 39) * 40, "window of 40 over 256 tokens");
    const char *p2[] = {"parallel.cp=2", "memory.attn_kept_fraction=0", NULL};
    run_ok(2, 1, with(window, p2), &other);
    expect_same(&one, &other, 1e-4, "window, fraction 0, P=2 vs P=1");
    const char *p4[] = {"parallel.cp=4", "memory.attn_kept_fraction=1", "parallel.backward=q",
                        NULL};
    run_ok(4, 1, with(window, p4), &other);
    expect_same(&one, &other, 1e-4, "window, Q-side backward, P=4 vs P=1");
    const char *zigzag[] = {"parallel.cp=4", "memory.attn_kept_fraction=0",
                            "parallel.layout=zigzag", NULL};
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
    const char *q4[] = {"parallel.cp=4", "parallel.backward=q", "memory.attn_kept_fraction=0",
                        NULL};
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
                              "memory.attn_kept_fraction=0", NULL};
    run_ok(2, 1, q_pieces, &other);
    expect_same(&one, &other, 1e-4, "pieces of 24 rows, Q-side backward, P=2 vs P=1");
}
END_TEST

START_TEST(checkpoint_fraction_and_head_fusion_change_nothing)
{
    curve base, other;
    const char *f1[] = {"parallel.cp=2", "memory.attn_kept_fraction=1", NULL};
    run_ok(2, 1, f1, &base);
    const char *f0[] = {"parallel.cp=2", "memory.attn_kept_fraction=0", NULL};
    run_ok(2, 1, f0, &other);
    expect_same(&base, &other, 1e-5, "checkpoint fraction 0 vs 1");
    const char *fh[] = {"parallel.cp=2", "memory.attn_kept_fraction=0.5", NULL};
    run_ok(2, 1, fh, &other);
    expect_same(&base, &other, 1e-5, "checkpoint fraction 1/2 vs 1");
    const char *unfused[] = {"parallel.cp=2", "memory.attn_kept_fraction=1", "memory.fused_head=0",
                             NULL};
    run_ok(2, 1, unfused, &other);
    expect_same(&base, &other, 1e-5, "reference head vs fused head");
}
END_TEST

/* [parallel] ulysses: Ulysses groups around the ring give the single rank's
 * losses and gradient norms: U 2 and 4 on 2 nodes (the ring across them; with
 * U 2 it also has steps inside a node), window and document masks, the
 * Q-side backward, every attention output kept, dp x cp = 2 x 4; what is not
 * built is refused by name. */
START_TEST(ulysses_groups_match_single_rank)
{
    curve one, other;
    const char *kv4[] = {"model.n_kv_heads=4", NULL};
    const char *p1[] = {"parallel.cp=1", "train.micro_batches=2", NULL};
    run_ok(1, 1, p1, &one);
    const char *u2[] = {"parallel.cp=4", "parallel.ulysses=2", "train.micro_batches=2", NULL};
    run_saying(4, 2, u2, "block pairs on our kernels: Ulysses groups", &other);
    expect_same(&one, &other, 1e-4, "ulysses 2, cp 4 on 2 nodes vs P=1");
    const char *q_side[] = {"parallel.backward=q", "memory.attn_kept_fraction=0", NULL};
    run_ok(4, 2, with(u2, q_side), &other);
    expect_same(&one, &other, 1e-4, "ulysses 2, Q-side, kept 0, cp 4 on 2 nodes vs P=1");
    curve one_kv4;
    run_ok(1, 1, with(p1, kv4), &one_kv4);
    const char *u4[] = {"parallel.cp=8", "parallel.ulysses=4", "train.micro_batches=2",
                        "model.n_kv_heads=4", NULL};
    run_ok(8, 2, u4, &other);
    expect_same(&one_kv4, &other, 1e-4, "ulysses 4, cp 8 on 2 nodes vs P=1");
    const char *grid[] = {"parallel.dp=2",
                          "parallel.cp=4",
                          "parallel.ulysses=2",
                          "train.micro_batches=1",
                          "memory.attn_kept_fraction=1",
                          NULL};
    run_ok(8, 2, grid, &other);
    expect_same(&one, &other, 1e-4, "ulysses 2, dp x cp = 2 x 4 on 2 nodes vs P=1");
    const char *masks[][3] = {{"parallel.mask=window", "parallel.window=40", NULL},
                              {"parallel.mask=document", "data.doc_len=48", NULL}};
    for (int i = 0; i < 2; i++) {
        const char *mp1[] = {"parallel.cp=1", "train.micro_batches=2", masks[i][0], masks[i][1],
                             NULL};
        run_ok(1, 1, mp1, &one);
        run_ok(4, 2, with(u2, masks[i]), &other);
        expect_same(&one, &other, 1e-4, masks[i][0]);
    }
    static const char *const refused[][3] = {
        {"memory.attn_kept_fraction=0.5", "attn_kept_fraction = 0.5 is not built with", NULL},
        {"parallel.ulysses=3", "[parallel] ulysses = 3 does not divide [parallel] cp = 4", NULL},
        {"model.n_kv_heads=1",
         "ulysses = 2 must divide the query heads (4) and the key/value "
         "heads (1)",
         NULL},
        {"attention.kernel=cudnn", "kernel = cudnn cannot be had: [parallel] ulysses = 2", NULL},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const char *sets[] = {refused[i][0], NULL};
        test_run_result r = train(4, 2, with(u2, sets), NULL, NULL);
        ck_assert_msg(r.exit_code != 0 && test_output_has(&r, refused[i][1]), "%s: exit %d\n%s",
                      refused[i][0], r.exit_code, r.out);
        test_run_free(&r);
    }
    /* a group's all-to-all stays inside a node: 3 ranks a node, groups of 2 */
    const char *across[] = {"parallel.cp=6", "parallel.ulysses=2", "data.seq_len=240", NULL};
    test_run_result r = train(6, 2, across, NULL, NULL);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, "does not divide the 3 ranks of a node"),
                  "exit %d\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

void add_rank_tests(TCase *tc)
{
    check_add_tests(tc, gradients_match_finite_differences,
                    same_losses_whatever_the_number_of_ranks, document_masks_match_single_rank,
                    block_sparse_masks_match_single_rank, sliding_window_matches_single_rank,
                    q_side_backward_matches_single_rank,
                    ring_in_several_kernel_pieces_matches_single_rank,
                    checkpoint_fraction_and_head_fusion_change_nothing);
}

/* A run of Ulysses groups of 4 stopped after step 3 resumes bit for bit; U
 * is fixed by the checkpoint (it decides which rank holds which tokens). */
START_TEST(ulysses_resume_continues_bit_for_bit)
{
    char dir[512], dir_set[600];
    checkpoint_dir("ckpt-ulysses", dir, dir_set);
    const char *const refused[][2] = {
        {"parallel.ulysses=2", "was written with [parallel] ulysses = 4, this run has 2"},
        {NULL, NULL}};
    const char *sets[] = {"parallel.cp=4", "parallel.ulysses=4",       "model.n_kv_heads=4",
                          dir_set,         "train.keep_checkpoints=1", NULL};
    expect_resume_bit_for_bit(4, sets, dir, refused);
}
END_TEST

void add_ulysses_tests(TCase *tc)
{
    check_add_tests(tc, ulysses_groups_match_single_rank, ulysses_resume_continues_bit_for_bit);
}
