/* device.c (tests/train/test_train_device): the engine on the emulated device
 * (tests/train/burst_emu) against the CPU engine and against itself: on one
 * rank and several, at each ZeRO stage, resumed. With the host keys:
 * device_host.c; where its memory comes from: device_memory.c; over the model
 * of NCCL: device_nccl.c. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* 1 rank (kernels at once), and 4 ranks on 2 emulated nodes with the double
 * ring and with Ulysses groups of 2 (kernels deferred). */
START_TEST(device_engine_matches_the_cpu)
{
    on_emulator = 1;
    curve cpu, one, four;
    run_ok(1, 1, on_cpu, &cpu);
    run_saying(1, 1, on_device, "layer matrix products in bf16", &one);
    expect_same(&cpu, &one, 2e-2, "device P=1 vs CPU");
    run_env = deferred;
    run_ok(4, 2, with(on_device, (const char *[]){"parallel.cp=4", "parallel.ring=double", NULL}),
           &four);
    run_env = one_thread;
    expect_same(&cpu, &four, 2e-2, "device, double ring P=4, kernels deferred, vs CPU");
    expect_ring_times(&four, "device, double ring P=4");
    /* Ulysses groups of 2 inside each node, the ring between the nodes */
    run_env = deferred;
    run_ok(4, 2, with(on_device, (const char *[]){"parallel.cp=4", "parallel.ulysses=2", NULL}),
           &four);
    run_env = one_thread;
    expect_same(&cpu, &four, 2e-2,
                "device, Ulysses 2 x ring over 2 nodes, kernels deferred, vs CPU");
    on_emulator = 0;
}
END_TEST

/* dp x cp = 2 x 2: the gradient reduce-scatter and the parameter all-gather
 * on device memory. */
START_TEST(device_grid_matches_the_cpu)
{
    on_emulator = 1;
    const char *const grid_sets[] = {"parallel.dp=2", "parallel.cp=2", NULL};
    curve grid, cpu_grid;
    run_ok(4, 2, with(on_device, grid_sets), &grid);
    run_ok(4, 2, with(on_cpu, grid_sets), &cpu_grid);
    expect_same(&cpu_grid, &grid, 2e-2, "device dp x cp = 2 x 2 vs CPU");
    on_emulator = 0;
}
END_TEST

/* The gradients sharded (zero = 2), and the bf16 parameters too (zero =
 * 3), on the device, kernels deferred: train as zero = 1 does, bit for bit
 * on 1 and 2 ranks (one order of the sums; the gathers copy exactly). */
START_TEST(device_zeros_2_and_3_train_as_zero_1)
{
    on_emulator = 1;
    run_env = deferred;
    static const char *const zero[] = {"parallel.zero=1", "parallel.zero=2", "parallel.zero=3"};
    for (int ranks = 1; ranks <= 2; ranks++) {
        const char *cp = ranks == 2 ? "parallel.cp=2" : "parallel.cp=1";
        curve c[3];
        for (int z = 0; z < 3; z++)
            run_ok(ranks, 1, with(on_device, (const char *[]){cp, zero[z], NULL}), &c[z]);
        for (int z = 1; z < 3; z++)
            for (int i = 0; i < run_steps(); i++)
                ck_assert_msg(c[0].n == run_steps() && c[z].n == run_steps() &&
                                  c[0].loss[i] == c[z].loss[i] &&
                                  c[0].grad_norm[i] == c[z].grad_norm[i],
                              "%d ranks, step %d: zero = 1 %.17g, zero = %d %.17g", ranks, i + 1,
                              c[0].loss[i], z + 1, c[z].loss[i]);
    }
    run_env = one_thread;
    on_emulator = 0;
}
END_TEST

/* A resume on the device continues bit for bit, and a CPU checkpoint resumed
 * on the device continues the CPU's curve within bf16's tolerance. */
START_TEST(device_resumes_its_own_and_the_cpus_checkpoints)
{
    on_emulator = 1;
    char dir[512], dir_set[600];
    checkpoint_dir("ckpt-device", dir, dir_set);
    const char *sets[] = {"train.device=cuda", "data.seq_len=64", "parallel.cp=2", dir_set, NULL};
    expect_resume_bit_for_bit(2, sets, dir, NULL);
    ck_assert_int_eq(test_remove_tree(dir), 0);

    curve cpu;
    run_ok(1, 1, on_cpu, &cpu);
    checkpoint_dir("ckpt-moved", dir, dir_set);
    const char *cpu_ckpt[] = {"data.seq_len=64", dir_set, NULL};
    expect_moved_resume(1, cpu_ckpt, with(cpu_ckpt, (const char *[]){"train.device=cuda", NULL}),
                        &cpu, 2e-2, "on the device after the CPU");
    ck_assert_int_eq(test_remove_tree(dir), 0);
    on_emulator = 0;
}
END_TEST

/* [attention] kernel: the block pairs on cuDNN's SDPA (the emulator's model
 * of it, which auto takes there) and on our kernels, each against the CPU:
 * causal on 1 rank (the zigzag halves, the half-sequence recompute), a
 * sliding window over 2 ranks with the Q-side backward (bounds, trimmed
 * views, the surrogate O'); the KV-side over 4 ranks is the suite's first
 * test, where auto takes cuDNN's model. auto says where it
 * falls back: a cuDNN with a known bug, a mask cuDNN cannot express; cudnn
 * asked where it cannot be had stops at setup naming the key. */
START_TEST(device_attention_kernels_match_the_cpu)
{
    on_emulator = 1;
    curve cpu, cudnn, ours;
    run_ok(1, 1, on_cpu, &cpu);
    run_saying(1, 1, with(on_device, (const char *[]){"attention.kernel=cudnn", NULL}),
               "block pairs on cuDNN's fused SDPA (the emulator's model of cuDNN", &cudnn);
    expect_same(&cpu, &cudnn, 2e-2, "device on cuDNN's SDPA vs CPU");
    run_saying(1, 1, with(on_device, (const char *[]){"attention.kernel=burst", NULL}),
               "block pairs on our kernels ([attention] kernel = burst)", &ours);
    expect_same(&cpu, &ours, 2e-2, "device on our kernels vs CPU");
    const char *const window[] = {"parallel.mask=window", "parallel.window=24", "parallel.cp=2",
                                  "memory.attn_kept_fraction=0", "parallel.backward=q", NULL};
    curve cpu_window, cudnn_window;
    run_ok(2, 1, with(on_cpu, window), &cpu_window);
    run_saying(2, 1, with(with(on_device, window), (const char *[]){"attention.kernel=cudnn", NULL}),
               "block pairs on cuDNN's fused SDPA", &cudnn_window);
    expect_same(&cpu_window, &cudnn_window, 2e-2,
                "window over 2 ranks, Q-side backward, on cuDNN's SDPA vs CPU");
    on_emulator = 0;
}
END_TEST

START_TEST(device_attention_kernel_choice_is_said)
{
    on_emulator = 1;
    char *old_cudnn[] = {"OMP_NUM_THREADS=1", "BK_EMU_CUDNN_VERSION=91000", NULL};
    run_env = old_cudnn;
    curve c;
    run_saying(1, 1, on_device, "block pairs on our kernels: cuDNN 91000 has known bugs", &c);
    run_env = one_thread;
    run_saying(1, 1,
               with(on_device, (const char *[]){"parallel.mask=document", "data.doc_len=16",
                                                "memory.attn_kept_fraction=1", NULL}),
               "block pairs on our kernels: document masks run on our kernels", &c);
    test_run_result r = train(
        1, 1,
        with(on_device, (const char *[]){"parallel.mask=document", "data.doc_len=16",
                                         "memory.attn_kept_fraction=1", "attention.kernel=cudnn",
                                         NULL}),
        NULL, &c);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, "[attention] kernel = cudnn cannot be had: "
                                                          "document masks run on our kernels"),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
    on_emulator = 0;
}
END_TEST

void add_device_tests(Suite *s)
{
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device", 900), device_engine_matches_the_cpu,
                    device_grid_matches_the_cpu, device_resumes_its_own_and_the_cpus_checkpoints,
                    device_zeros_2_and_3_train_as_zero_1);
    check_add_tests(check_tcase(s, "attention kernels", 900), device_attention_kernels_match_the_cpu,
                    device_attention_kernel_choice_is_said);
}
