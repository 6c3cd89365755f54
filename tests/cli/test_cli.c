/* test_cli.c: the `burst` command line keeps its promises: help exits 0 and lists
 * every command, bad usage exits 2, version names the optional parts, the
 * device benchmark refuses bad options and a machine without a device. */
#include <check.h>
#include <stdlib.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static test_run_result burst(const char *a1, const char *a2)
{
    char *argv[] = {(char *)test_burst_path(), (char *)a1, (char *)a2, NULL};
    return test_run(argv, NULL);
}

START_TEST(help_lists_every_command)
{
    test_run_result r = burst("--help", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    const char *commands[] = {"train", "data", "bench", "plan", "run", "selftest", "version"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        ck_assert_msg(test_output_has(&r, commands[i]), "--help does not list %s", commands[i]);
    test_run_free(&r);
}
END_TEST

START_TEST(no_command_is_usage_error)
{
    char *argv[] = {(char *)test_burst_path(), NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert(test_output_has(&r, "usage: burst"));
    test_run_free(&r);
}
END_TEST

START_TEST(unknown_command_is_usage_error)
{
    test_run_result r = burst("frobnicate", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert(test_output_has(&r, "unknown command 'frobnicate'"));
    test_run_free(&r);
}
END_TEST

START_TEST(every_command_has_help)
{
    const char *commands[] = {"train", "data", "bench", "plan", "run", "selftest", "version"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        test_run_result r = burst(commands[i], "--help");
        ck_assert_msg(r.exit_code == 0, "burst %s --help exited %d", commands[i], r.exit_code);
        ck_assert_msg(test_output_has(&r, "usage: burst"), "burst %s --help prints no usage",
                      commands[i]);
        test_run_free(&r);
    }
}
END_TEST

START_TEST(version_names_optional_parts)
{
    test_run_result r = burst("version", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert(test_output_has(&r, "burstengine "));
    ck_assert(test_output_has(&r, "cuda:"));
    ck_assert(test_output_has(&r, "nccl:"));
    ck_assert(test_output_has(&r, "pmix:"));
    ck_assert(test_output_has(&r, "blas:"));
    test_run_free(&r);
    r = burst("version", "--verbos");
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert(test_output_has(&r, "unexpected argument '--verbos'"));
    test_run_free(&r);
}
END_TEST

/* The device kernels' benchmark: its usage errors, and a clear error (not a
 * crash) where no device is visible, whatever the build and machine. */
START_TEST(bench_kernels_device_errors)
{
    const char *bad[][3] = {{"--device", "gpu", "--device must be cpu or cuda, not 'gpu'"},
                            {"--gemm", "64", "apply to --device cuda only"},
                            {"--hkv", "3", "--hkv 3 does not divide Hq = 8"}};
    for (int i = 0; i < 3; i++) {
        char *argv[] = {(char *)test_burst_path(), "bench", "kernels", (char *)bad[i][0],
                        (char *)bad[i][1], NULL};
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 2, "%s %s exited %d", bad[i][0], bad[i][1], r.exit_code);
        ck_assert_msg(test_output_has(&r, bad[i][2]), "%s %s: %s", bad[i][0], bad[i][1], r.out);
        test_run_free(&r);
    }
    char *argv[] = {(char *)test_burst_path(), "bench", "kernels", "--device", "cuda", "--quick",
                    NULL};
    char *env[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code == 1, "no device: exited %d: %s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "--device cuda: no device"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = check_tcase(s, "cli", 60);
    check_add_tests(tc, help_lists_every_command, no_command_is_usage_error,
                    unknown_command_is_usage_error, every_command_has_help,
                    version_names_optional_parts, bench_kernels_device_errors);
    return check_run(s);
}
