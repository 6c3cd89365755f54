/* device_host.c (tests/train/test_train_device_host): the host keys of the
 * engine on the emulated device, [memory] offload_activations and optimizer
 * = host, against the same runs kept on the device, and their resumes. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* The emulated device's runs of the host keys: 4 steps of 64 tokens and 3
 * layers (so that the backward copies a stored set back into a slot that
 * held another), kernels deferred on their streams. */
static const char *const short_run[] = {"train.device=cuda", "data.seq_len=64", "model.layers=3",
                                        "train.steps=4", NULL};

/* [memory] offload_activations: every layer's stored set in page-locked host
 * memory, through two device slots on a copy stream: the same losses and
 * gradient norms as kept on the device, bit for bit, on 1 rank with fp32
 * products and on 2 (cp = 2) with bf16 products at zero = 3, the wait for
 * the copies reported. Without the compute's wait for a copy back
 * (BURST_TEST_OFFLOAD_UNORDERED=1) the emulator stops the run at the stream
 * hazard. (Its resume: host_keys_resume_bit_for_bit_and_across.) */
START_TEST(device_offloaded_activations_train_as_kept_on_device)
{
    on_emulator = 1;
    run_env = deferred;
    const char *offload[] = {"memory.offload_activations=true", NULL};
    const struct {
        int ranks;
        const char *const *more, *what;
    } cases[] = {{1, (const char *[]){"train.matmul=fp32", NULL}, "1 rank, fp32 products"},
                 {2, (const char *[]){"parallel.cp=2", "parallel.zero=3", NULL},
                  "cp = 2, zero = 3, bf16 products"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        curve kept, offloaded;
        run_ok(cases[i].ranks, 1, with(short_run, cases[i].more), &kept);
        run_saying(cases[i].ranks, 1, with(with(short_run, cases[i].more), offload),
                   "offloaded activations (host) ", &offloaded);
        expect_close(&kept, &offloaded, 0.0, cases[i].what);
        for (int s = 0; s < kept.n; s++)
            ck_assert_msg(kept.offload_s[s] == 0 && offloaded.offload_s[s] >= 0,
                          "%s, step %d: offload wait %g kept, %g offloaded", cases[i].what, s + 1,
                          kept.offload_s[s], offloaded.offload_s[s]);
    }
    static char *unordered[] = {"OMP_NUM_THREADS=1", "BK_EMU_STREAMS=deferred",
                                "BURST_TEST_OFFLOAD_UNORDERED=1", NULL};
    run_env = unordered;
    test_run_result r = train(1, 1, with(short_run, offload), NULL, NULL);
    ck_assert_msg(r.exit_code != 0 && test_output_has(&r, "stream hazard") &&
                      test_output_has(&r, "cudaMemcpyAsync"),
                  "the compute not waiting for the copies back exited %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
    run_env = one_thread;
    on_emulator = 0;
}
END_TEST

/* [memory] optimizer = host: the shard's masters, moments and summed
 * gradients in host memory and AdamW on the CPU, each range's own part
 * crossing through a host buffer: zero = 2 on 1 rank and zero = 3 on 2 (cp
 * = 2) train with the losses and gradient norms of the optimizer on the
 * device within 1e-6 (the norm's sum adds in another order). */
START_TEST(device_optimizer_on_the_host_trains_as_on_the_device)
{
    on_emulator = 1;
    run_env = deferred;
    const struct {
        int ranks;
        const char *cp, *zero;
    } cases[] = {{1, "parallel.cp=1", "parallel.zero=2"}, {2, "parallel.cp=2", "parallel.zero=3"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        curve dev, on_host;
        char what[96];
        snprintf(what, sizeof what, "%d ranks, %s: optimizer on the host vs the device",
                 cases[i].ranks, cases[i].zero);
        run_ok(cases[i].ranks, 1,
               with(short_run, (const char *[]){cases[i].cp, cases[i].zero, NULL}), &dev);
        run_saying(cases[i].ranks, 1,
                   with(short_run, (const char *[]){cases[i].cp, cases[i].zero,
                                                    "memory.optimizer=host", NULL}),
                   "optimizer (host) ", &on_host);
        expect_close(&dev, &on_host, 1e-6, what);
    }
    run_env = one_thread;
    on_emulator = 0;
}
END_TEST

/* Both host keys at once, 2 ranks at zero = 3: a resume continues bit for
 * bit, and their checkpoint resumes with the activations and the
 * optimizer's state on the device (one format), continuing the curve of the
 * uninterrupted run within 1e-6. */
START_TEST(host_keys_resume_bit_for_bit_and_across)
{
    on_emulator = 1;
    run_env = deferred;
    char dir[512], dir_set[600];
    checkpoint_dir("ckpt-host-keys", dir, dir_set);
    const char *sets[] = {"train.device=cuda",
                          "data.seq_len=64",
                          "parallel.cp=2",
                          "parallel.zero=3",
                          "memory.offload_activations=true",
                          "memory.optimizer=host",
                          dir_set,
                          NULL};
    expect_resume_bit_for_bit(2, sets, dir, NULL);
    ck_assert_int_eq(test_remove_tree(dir), 0);
    curve whole;
    run_ok(2, 1, sets, &whole);
    ck_assert_int_eq(test_remove_tree(dir), 0);
    expect_moved_resume(2, sets,
                        with(sets, (const char *[]){"memory.optimizer=device",
                                                    "memory.offload_activations=false", NULL}),
                        &whole, 1e-6, "with both on the device after the host");
    ck_assert_int_eq(test_remove_tree(dir), 0);
    run_env = one_thread;
    on_emulator = 0;
}
END_TEST

void add_device_host_tests(Suite *s)
{
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device host keys", 900),
                    device_offloaded_activations_train_as_kept_on_device,
                    device_optimizer_on_the_host_trains_as_on_the_device,
                    host_keys_resume_bit_for_bit_and_across);
}
