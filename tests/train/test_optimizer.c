/* test_optimizer.c: the learning-rate schedule (single process) and ZeRO's
 * AdamW against a serial double-precision reference on P = 1..4 real ranks:
 * tests/train/optimizer_worker under `burst run`, which checks its own results
 * (parameters, norms, clipping, shards, a NaN gradient) and exits 0 or 1;
 * and the state on the host beside the emulated device against the optimizer
 * wholly on the host (tests/train/optimizer_host_worker). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/train/zero.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char worker[4096];

#define ck_assert_close(a, b)                                                                      \
    ck_assert_msg(fabs((a) - (b)) <= 1e-12 * fmax(1.0, fabs(b)), "%.17g != %.17g", (a), (b))

START_TEST(schedule_warmup_then_cosine)
{
    const double lr = 3e-4, min_lr = 3e-5;
    /* warm-up over 10 steps, cosine until step 110 */
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 1), lr / 10);
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 5), lr / 2);
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 10), lr);
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 60), (lr + min_lr) / 2);
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 110), min_lr);
    ck_assert_close(lr_schedule(lr, min_lr, 10, 110, 1000), min_lr);
    /* monotone: up during the warm-up, down after */
    for (int64_t s = 1; s < 110; s++) {
        double a = lr_schedule(lr, min_lr, 10, 110, s), b = lr_schedule(lr, min_lr, 10, 110, s + 1);
        if (s < 10)
            ck_assert_msg(b > a, "step %lld", (long long)s);
        else
            ck_assert_msg(b < a, "step %lld", (long long)s);
    }
    /* no warm-up: lr at the start, the cosine midpoint halfway */
    ck_assert_close(lr_schedule(lr, min_lr, 0, 100, 0), lr);
    ck_assert_close(lr_schedule(lr, min_lr, 0, 100, 50), (lr + min_lr) / 2);
    ck_assert_close(lr_schedule(lr, min_lr, 0, 100, 100), min_lr);
    ck_assert(lr_schedule(lr, min_lr, 0, 100, 1) < lr);
}
END_TEST

/* program on P ranks under `burst run` with env (NULL: as this process's),
 * which must say "ok <what> on P ranks". */
static void expect_ranks_ok(const char *program, int P, char *const *env, const char *what)
{
    char n[16], want[96];
    snprintf(n, sizeof n, "%d", P);
    snprintf(want, sizeof want, "ok %s on %d ranks", what, P);
    char *prog = (char *)test_program_path(program, worker, sizeof worker);
    char *argv[] = {(char *)test_burst_path(), "run", "-n", n, "--", prog, NULL};
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want), "%s, P=%d: exit %d\n%s", program,
                  P, r.exit_code, r.out);
    test_run_free(&r);
}

START_TEST(zero_matches_serial_adamw)
{
    expect_ranks_ok("tests/train/optimizer_worker", _i, NULL, "optimizer");
}
END_TEST

/* The state on the host beside the emulated device, its copies deferred as
 * late as the program allows, against the optimizer wholly on the host:
 * tests/train/optimizer_host_worker on 1 and 2 ranks. */
START_TEST(host_state_matches_the_host_optimizer)
{
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_STREAMS=deferred", NULL};
    expect_ranks_ok("tests/train/optimizer_host_worker", _i, env, "host state");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optimizer");
    TCase *sched = check_tcase(s, "schedule", 0);
    tcase_add_test(sched, schedule_warmup_then_cosine);
    TCase *z = check_tcase(s, "zero", 300);
    tcase_add_loop_test(z, zero_matches_serial_adamw, 1, 5);
    tcase_add_loop_test(z, host_state_matches_the_host_optimizer, 1, 3);
    return check_run(s);
}
