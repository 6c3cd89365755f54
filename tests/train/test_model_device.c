/* test_model_device.c: the model runner on the (emulated) device against the
 * host, with real ranks under `burst run`: one rank, a flat ring of 2, and
 * the double ring over 2 emulated nodes x 2; the causal mask with half the
 * attention outputs kept (the early chunks recomputed through their own
 * ring), a document mask and a block-sparse one; the same with the layers' products on bf16
 * operands. The ranks are tests/train/model_device_worker,
 * which compares its own loss and gradients. A kernel that fails on the
 * device in a step is a device error with its message, not refused
 * arguments (tests/train/model_fail_worker). */
#include <check.h>
#include <stdio.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static void expect_same_with(int ranks, int nodes, const char *mask, const char *fraction,
                             const char *matmul)
{
    static char worker[4096];
    test_program_path("tests/train/model_device_worker", worker, sizeof worker);
    char n[16], m[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[20] = {(char *)test_burst_path(), "run", "-n", n, "--nodes", m, "--", worker,
                      "--mask", (char *)mask, "--fraction", (char *)fraction};
    int a = 12;
    if (nodes > 1) argv[a++] = "--double-ring", argv[a++] = m;
    argv[a++] = "--matmul", argv[a++] = (char *)matmul;
    argv[a] = NULL;
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok model on the device"),
                  "%s mask, fraction %s, P=%d, nodes=%d, %s products: exit %d\n%s", mask,
                  fraction, ranks, nodes, matmul, r.exit_code, r.out);
    test_run_free(&r);
}

static void expect_same(int ranks, int nodes, const char *mask, const char *fraction)
{
    expect_same_with(ranks, nodes, mask, fraction, "fp32");
}

START_TEST(device_runner_matches_host)
{
    expect_same(1, 1, "causal", "1");
    expect_same(2, 1, "causal", "0.5");
    expect_same(4, 2, "causal", "0"); /* 2 emulated nodes x 2 ranks, double ring */
    expect_same(2, 1, "document", "1");
    expect_same(2, 1, "sparse", "1"); /* the bitmap copied to the device for its kernels */
}
END_TEST

/* The layers' matrix products on bf16 operands (the device's default). */
START_TEST(bf16_products_match_host)
{
    expect_same_with(1, 1, "causal", "1", "bf16");
    expect_same_with(4, 2, "causal", "0.5", "bf16");
}
END_TEST

/* A device failure in the model's kernels or the ring's is a device error
 * with the device's message; a refused call stays an argument error; the
 * emulator's failed allocation names cudaMalloc. */
START_TEST(device_failure_is_a_device_error)
{
    static char worker[4096];
    test_program_path("tests/train/model_fail_worker", worker, sizeof worker);
    char *argv[] = {(char *)test_burst_path(), "run", "-n", "1", "--", worker, NULL};
    char *env[] = {"BK_EMU_DEVICE_BYTES=268435456", NULL}; /* 256 MiB */
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok device failures"), "exit %d\n%s",
                  r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_device");
    check_add_tests(check_tcase(s, "model_device", 600), device_runner_matches_host,
                    bf16_products_match_host, device_failure_is_a_device_error);
    return check_run(s);
}
