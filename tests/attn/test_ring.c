/* test_ring.c: distributed attention against the single-rank double-precision
 * reference, with real processes under `burst run`: O, lse, dQ, dK, dV for
 * P = 1..4 (and 5, 6), every mask, MHA and GQA, both backward directions, the
 * flat ring and the double ring on emulated nodes; the kernels called on
 * several pieces of a block's rows; the byte counters against the schedule;
 * the same on device buffers (the emulated device) and with the inputs
 * travelling in bf16, and over the model of NCCL; a rank killed between the
 * forward and the backward ring. The ranks are tests/attn/ring_worker (or
 * ring_worker_emu), which checks its own rows. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

/* The ranks' program: tests/attn/ring_worker of the build, or the same worker
 * linked with the device emulator. */
static char *ring_worker(int device)
{
    static char path[2][4096];
    return (char *)test_program_path(device ? "tests/attn/ring_worker_emu" : "tests/attn/ring_worker",
                                     path[device], sizeof path[device]);
}

/* The ranks' kernels run on pieces of piece_rows query rows (NULL: the
 * default); device: on the emulated device, the buffers in device memory;
 * bf16: Q, K, V and dO travel in bf16. */
static void expect_ring(int ranks, int nodes, const char *mask, const char *layout,
                        const char *piece_rows, int device, int bf16)
{
    char n[16], m[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[24] = {(char *)test_burst_path(), "run", "-n", n, "--nodes", m, "--",
                      ring_worker(device), "--mask", (char *)mask, "--layout", (char *)layout};
    int a = 12;
    if (nodes > 1) argv[a++] = "--double-ring", argv[a++] = m;
    if (piece_rows) argv[a++] = "--piece-rows", argv[a++] = (char *)piece_rows;
    if (device) argv[a++] = "--device", argv[a++] = "1";
    if (bf16) argv[a++] = "--in-bytes", argv[a++] = "2";
    argv[a] = NULL;
    test_run_result r = test_run(argv, NULL);
    char want[160];
    snprintf(want, sizeof want, "ok ring %s/%s on %d ranks%s%s%s%s", mask, layout, ranks,
             nodes > 1 ? " (double ring)" : "", piece_rows ? " in pieces" : "",
             device ? " on the device" : "", bf16 ? " with bf16 inputs" : "");
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want), "%s/%s P=%d nodes=%d: exit %d\n%s",
                  mask, layout, ranks, nodes, r.exit_code, r.out);
    test_run_free(&r);
}

static void expect_ok_pieces(int ranks, int nodes, const char *mask, const char *layout,
                             const char *piece_rows)
{
    expect_ring(ranks, nodes, mask, layout, piece_rows, 0, 0);
}

static void expect_ok(int ranks, int nodes, const char *mask, const char *layout)
{
    expect_ring(ranks, nodes, mask, layout, NULL, 0, 0);
}

static const char *masks[][2] = {{"none", "contiguous"},   {"causal", "zigzag"},
                                  {"causal", "contiguous"}, {"window", "contiguous"},
                                  {"document", "contiguous"}, {"sparse", "contiguous"}};

START_TEST(flat_ring_equals_single_rank)
{
    for (int P = 1; P <= 4; P++) expect_ok(P, 1, masks[_i][0], masks[_i][1]);
}
END_TEST

START_TEST(double_ring_equals_single_rank)
{
    expect_ok(4, 2, masks[_i][0], masks[_i][1]); /* 2 emulated nodes x 2 ranks */
}
END_TEST

START_TEST(odd_and_larger_worlds)
{
    expect_ok(5, 1, "causal", "zigzag");
    expect_ok(6, 3, "causal", "zigzag"); /* 3 nodes x 2 ranks */
    expect_ok(6, 2, "document", "zigzag"); /* 2 nodes x 3 ranks */
}
END_TEST

/* 48 rows per rank in pieces of 7: six whole pieces and one of 6, in every
 * pass, on both sides of the backward. */
START_TEST(several_kernel_pieces_per_block)
{
    expect_ok_pieces(3, 1, "causal", "zigzag", "7");
    expect_ok_pieces(2, 1, "document", "contiguous", "7");
    expect_ok_pieces(4, 2, "sparse", "contiguous", "7"); /* 2 nodes x 2 ranks */
}
END_TEST

/* The same executor on device buffers (the emulated device): the kernels on
 * the device queue, the slots and accumulators in device memory, the
 * transport staging them between ranks; flat and double ring, both layouts,
 * a document mask, a block-sparse one, several pieces. */
START_TEST(device_ring_equals_single_rank)
{
    expect_ring(1, 1, "causal", "zigzag", NULL, 1, 0);
    expect_ring(2, 1, "causal", "zigzag", NULL, 1, 1);
    expect_ring(4, 2, "causal", "zigzag", NULL, 1, 0); /* 2 emulated nodes x 2 ranks */
    expect_ring(4, 2, "document", "contiguous", "7", 1, 1);
    expect_ring(3, 1, "sparse", "contiguous", NULL, 1, 1); /* the bitmap in device memory */
}
END_TEST

/* The device ring with its block pairs on SDPA calls (the emulator's model
 * of cuDNN), bf16 inputs: the zigzag halves and the half-block pairs, flat
 * and double ring, a window over contiguous blocks (bounds, trimmed views),
 * both backward directions (the Q-side through the surrogate O'), MHA and
 * GQA, element by element against the double reference. */
START_TEST(device_ring_on_sdpa_calls_equals_single_rank)
{
    static const struct {
        int ranks, nodes;
        const char *mask, *layout, *want;
    } runs[] = {
        {1, 1, "causal", "zigzag", "ok ring causal/zigzag on 1 ranks on the device"},
        {2, 1, "causal", "zigzag", "ok ring causal/zigzag on 2 ranks on the device"},
        {4, 2, "causal", "zigzag", "ok ring causal/zigzag on 4 ranks (double ring) on the device"},
        {3, 1, "window", "contiguous", "ok ring window/contiguous on 3 ranks on the device"},
        {2, 1, "none", "contiguous", "ok ring none/contiguous on 2 ranks on the device"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char n[16], m[16];
        snprintf(n, sizeof n, "%d", runs[i].ranks);
        snprintf(m, sizeof m, "%d", runs[i].nodes);
        char *argv[24] = {(char *)test_burst_path(), "run", "-n", n, "--nodes", m, "--",
                          ring_worker(1), "--mask", (char *)runs[i].mask, "--layout",
                          (char *)runs[i].layout, "--device", "1", "--in-bytes", "2", "--sdpa",
                          "1"};
        int a = 18;
        if (runs[i].nodes > 1) argv[a++] = "--double-ring", argv[a++] = m;
        argv[a] = NULL;
        test_run_result r = test_run(argv, NULL);
        char want[200];
        snprintf(want, sizeof want, "%s with bf16 inputs on SDPA calls", runs[i].want);
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want), "%s: exit %d\n%s", want,
                      r.exit_code, r.out);
        test_run_free(&r);
    }
}
END_TEST

#ifdef HAVE_NCCL
/* The device ring over the model of NCCL (a GPU per rank, kernels queued on
 * their streams), bf16 inputs: a causal window on contiguous blocks, where
 * the last rank's home block goes nowhere, so its first step posts the
 * receive of a trailing accumulator (kept in Q's memory) and nothing else. */
START_TEST(device_ring_over_nccl_equals_single_rank)
{
    static char *const env[] = {"BK_EMU_GPUS_PER_NODE=4", "BK_EMU_STREAMS=deferred",
                                "BK_EMU_NCCL_TIMEOUT=120", NULL};
    char *argv[] = {(char *)test_burst_path(),
                    "run",
                    "-n",
                    "4",
                    "--",
                    ring_worker(1),
                    "--mask",
                    "window",
                    "--layout",
                    "contiguous",
                    "--device",
                    "1",
                    "--in-bytes",
                    "2",
                    "--intra",
                    "nccl",
                    NULL};
    test_run_result r = test_run(argv, env);
    const char *want =
        "ok ring window/contiguous on 4 ranks on the device with bf16 inputs over NCCL";
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want), "exit %d\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST
#endif

/* Q, K, V and dO travelling in bf16 on the host: inputs rounded to bf16 first,
 * the fp32 tolerances, the halved bundles in the byte counters; flat and
 * double ring, pieces, a sparse mask. */
START_TEST(bf16_inputs_equal_single_rank)
{
    expect_ring(1, 1, "causal", "zigzag", NULL, 0, 1);
    expect_ring(3, 1, "causal", "zigzag", NULL, 0, 1);
    expect_ring(4, 2, "window", "contiguous", "7", 0, 1); /* 2 nodes x 2 ranks */
    expect_ring(4, 1, "sparse", "contiguous", NULL, 0, 1);
}
END_TEST

/* Ulysses groups of U ranks around a ring over the groups (ring_worker
 * --ulysses): each rank's O, lse, dQ, dK, dV against the single-rank double
 * reference, MHA and GQA, both backward directions, the ring's bytes as its
 * schedule over the groups says; nodes > 1: the double ring between nodes. */
static void expect_ulysses(int ranks, int nodes, int U, const char *mask, const char *layout,
                           int device)
{
    char n[16], m[16], u[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    snprintf(u, sizeof u, "%d", U);
    char *argv[24] = {(char *)test_burst_path(),
                      "run",
                      "-n",
                      n,
                      "--nodes",
                      m,
                      "--",
                      ring_worker(device),
                      "--mask",
                      (char *)mask,
                      "--layout",
                      (char *)layout,
                      "--ulysses",
                      u};
    int a = 14;
    if (nodes > 1) argv[a++] = "--double-ring", argv[a++] = m;
    if (device) argv[a++] = "--device", argv[a++] = "1", argv[a++] = "--in-bytes", argv[a++] = "2";
    argv[a] = NULL;
    test_run_result r = test_run(argv, NULL);
    char want[160];
    snprintf(want, sizeof want, "ok ring %s/%s on %d ranks in Ulysses groups%s%s", mask, layout,
             ranks, nodes > 1 ? " (double ring)" : "",
             device ? " on the device with bf16 inputs" : "");
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want), "%s/%s P=%d U=%d: exit %d\n%s",
                  mask, layout, ranks, U, r.exit_code, r.out);
    test_run_free(&r);
}

START_TEST(ulysses_groups_equal_single_rank)
{
    expect_ulysses(2, 1, 2, "causal", "zigzag", 0); /* one group: no ring steps */
    expect_ulysses(4, 1, 2, "causal", "zigzag", 0);
    expect_ulysses(4, 2, 2, "window", "contiguous", 0); /* 2 nodes: U inside, the ring across */
    expect_ulysses(8, 2, 4, "causal", "zigzag", 0);
    expect_ulysses(8, 2, 2, "document", "zigzag", 0); /* ring steps inside and across nodes */
    expect_ulysses(6, 1, 3, "none", "zigzag", 0);     /* a member across a zigzag chunk's end */
    expect_ulysses(4, 1, 2, "causal", "zigzag", 1);
    expect_ulysses(4, 2, 2, "window", "contiguous", 1);
}
END_TEST

START_TEST(rank_lost_during_the_ring_is_named)
{
    char *argv[] = {(char *)test_burst_path(), "run", "-n", "3", "--no-kill", "--", ring_worker(0),
                    "--mask", "causal", "--layout", "zigzag", "--kill-rank", "1", NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code != 0, "%s", r.out);
    /* A survivor may still be finishing the forward ring's transfers when rank 1
     * dies, or already be in the backward: either way it names rank 1. */
    for (int k = 0; k < 3; k += 2) {
        char fwd[96], bwd[96];
        snprintf(fwd, sizeof fwd, "[%d] rank %d: ring forward: rank %d: lost rank 1 (", k, k, k);
        snprintf(bwd, sizeof bwd, "[%d] rank %d: ring backward: rank %d: lost rank 1 (", k, k, k);
        ck_assert_msg(test_output_has(&r, fwd) || test_output_has(&r, bwd),
                      "rank %d did not name rank 1:\n%s", k, r.out);
    }
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = check_tcase(s, "ring", 600);
    check_add_loop_tests(tc, 0, 6, flat_ring_equals_single_rank, double_ring_equals_single_rank);
    check_add_tests(tc, odd_and_larger_worlds, several_kernel_pieces_per_block,
                    device_ring_equals_single_rank, device_ring_on_sdpa_calls_equals_single_rank,
                    bf16_inputs_equal_single_rank, ulysses_groups_equal_single_rank,
                    rank_lost_during_the_ring_is_named);
#ifdef HAVE_NCCL
    check_add_tests(tc, device_ring_over_nccl_equals_single_rank);
#endif
    return check_run(s);
}
