/* device.c (tests/train/test_train_device): the engine on the emulated device
 * (tests/train/burst_emu) against the CPU engine, and over the model of NCCL;
 * its arena, its staging buffers and the arena report of several ranks. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* The engine on the (emulated) device: every buffer of the model, the ring
 * and the optimizer in device memory, the transport staging device buffers
 * between ranks. Against the CPU engine, step by step, within what bf16
 * attention moves (the device's tensor cores round Q, K, V, P and dS to bf16;
 * the host computes in fp32). Sequences of 64 tokens: the emulator runs every
 * kernel thread by thread on the CPU, so each comparison is a test of its
 * own, under its own timeout. */
static const char *const on_device[] = {"train.device=cuda", "data.seq_len=64", NULL};
static const char *const on_cpu[] = {"data.seq_len=64", NULL};

/* Kernels queued on their streams like copies (kernels/emu/simt_stream.h):
 * work the engine did not order after what it reads would read old data. */
static char *deferred[] = {"OMP_NUM_THREADS=1", "BK_EMU_STREAMS=deferred", NULL};

/* 1 rank (kernels at once), and 4 ranks on 2 emulated nodes with the double
 * ring (kernels deferred). */
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
            for (int i = 0; i < 6; i++)
                ck_assert_msg(c[0].n == 6 && c[z].n == 6 && c[0].loss[i] == c[z].loss[i] &&
                                  c[0].grad_norm[i] == c[z].grad_norm[i],
                              "%d ranks, step %d: zero = 1 %.17g, zero = %d %.17g", ranks, i + 1,
                              c[0].loss[i], z + 1, c[z].loss[i]);
    }
    run_env = one_thread;
    on_emulator = 0;
}
END_TEST

/* Runs a and b logged the same steps (at least 4), with losses and
 * gradient norms within tol of each other, relative (0: the same bits). */
static void expect_close(const curve *a, const curve *b, double tol, const char *what)
{
    ck_assert_msg(a->n >= 4 && a->n == b->n, "%s: %d and %d steps", what, a->n, b->n);
    for (int i = 0; i < a->n; i++)
        ck_assert_msg(fabs(a->loss[i] - b->loss[i]) <= tol * fabs(a->loss[i]) &&
                          fabs(a->grad_norm[i] - b->grad_norm[i]) <= tol * fabs(a->grad_norm[i]),
                      "%s, step %d: loss %.17g and %.17g, gradient norm %.17g and %.17g", what,
                      i + 1, a->loss[i], b->loss[i], a->grad_norm[i], b->grad_norm[i]);
}

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

/* A run of sets stopped after step 3 (checkpointing where sets say) and
 * resumed with moved (other settings, the same directory) continues whole,
 * the uninterrupted curve of sets, within tol. */
static void expect_moved_resume(int ranks, const char *const *sets, const char *const *moved,
                                const curve *whole, double tol, const char *what)
{
    const char *stop[] = {"--stop-after", "3", NULL}, *resume[] = {"--resume", NULL};
    test_run_result r = train_args(ranks, 1, sets, stop, NULL, NULL, 0);
    ck_assert_msg(r.exit_code == 0, "%s", r.out);
    test_run_free(&r);
    curve c;
    r = train_args(ranks, 1, moved, resume, &c, NULL, 0);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "resumed from"), "%s", r.out);
    test_run_free(&r);
    ck_assert_int_eq(c.n, whole->n - 3);
    for (int i = 0; i < c.n; i++)
        ck_assert_msg(fabs(c.loss[i] - whole->loss[i + 3]) <= tol * fabs(whole->loss[i + 3]),
                      "step %d: resumed %s %.17g, uninterrupted %.17g", i + 4, what, c.loss[i],
                      whole->loss[i + 3]);
}

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

#ifdef HAVE_NCCL
/* The device engine over NCCL (the emulated programs link the model of NCCL,
 * kernels/emu/nccl_emu.cc): emulated nodes of 4 GPUs, a GPU per rank, and
 * [transport] intra = nccl, which fails unless NCCL serves every node. On one
 * node of 2 and of 4 ranks the losses equal the staged path's within 1e-4
 * (the same kernels and bytes; the gradient sums of NCCL's reduce-scatter add
 * in another order than the host's; the NCCL runs queue their kernels on
 * their streams, BK_EMU_STREAMS=deferred); on 2 nodes of 2 (double ring:
 * NCCL inside, staged between) and dp x cp = 2 x 2 they match the CPU. A
 * posting order that can deadlock on NCCL deadlocks there (the model fails
 * it and names the pending operations). */
START_TEST(device_engine_over_nccl)
{
    on_emulator = 1;
    static char *four_gpus[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=4",
                                "BK_EMU_NCCL_TIMEOUT=300", "BK_EMU_STREAMS=deferred", NULL};
    const char *nccl[] = {"train.device=cuda", "data.seq_len=64", "transport.intra=nccl", NULL};
    curve staged, over_nccl, cpu, grid;
    for (int p = 2; p <= 4; p += 2) {
        char cp[32];
        snprintf(cp, sizeof cp, "parallel.cp=%d", p);
        /* one emulated GPU shared: staged; four: NCCL (rank 0 prints every pair's path) */
        run_saying(p, 1, with(on_device, (const char *[]){cp, NULL}), p == 2 ? "rank 1: sc" : NULL,
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

/* ZeRO's collectives over NCCL (one node of two emulated GPUs, cp = 2,
 * kernels deferred) run while the engine computes: a layer's gradient sum
 * during the backward of the layer below, the next layer's gather during
 * this one's (model.h's two buckets). Three layers and two micro-batches, so
 * that each bucket is written again while the other's sum may run, and the
 * embedding's window at the next micro-batch. The emulator's hazard check
 * refuses any kernel that touches a bucket NCCL may still be writing, and
 * NCCL a bucket a kernel may still be writing or reading. zero = 2 over
 * NCCL trains as zero = 2 staged (both ranks sharing one GPU; the
 * collectives run whole there) bit for bit (a sum of two ranks is the same
 * in either order), and zero = 3 as zero = 2 (its gathers copy exactly). */
START_TEST(device_zero_collectives_overlap_over_nccl)
{
    on_emulator = 1;
    static char *two_gpus[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=2",
                               "BK_EMU_NCCL_TIMEOUT=300", "BK_EMU_STREAMS=deferred", NULL};
    const char *run[] = {"train.device=cuda",
                         "data.seq_len=64",
                         "model.layers=3",
                         "train.steps=4",
                         "train.micro_batches=2",
                         "parallel.cp=2",
                         NULL};
    const char *over_nccl[] = {"transport.intra=nccl", NULL};
    curve staged, zero2, zero3;
    run_env = deferred;
    run_ok(2, 1, with(run, (const char *[]){"parallel.zero=2", NULL}), &staged);
    run_env = two_gpus;
    run_ok(2, 1, with(with(run, over_nccl), (const char *[]){"parallel.zero=2", NULL}), &zero2);
    run_ok(2, 1, with(with(run, over_nccl), (const char *[]){"parallel.zero=3", NULL}), &zero3);
    run_env = one_thread;
    expect_close(&staged, &zero2, 0, "zero = 2 over NCCL against staged");
    expect_close(&zero2, &zero3, 0, "over NCCL, zero = 3 against zero = 2");
    on_emulator = 0;
}
END_TEST

/* The masks, backward directions and resume over NCCL on one node of two
 * emulated GPUs (cp = 2, kernels deferred): the window mask with the Q-side
 * backward and the document mask with the KV-side one match the CPU engine's
 * single rank within bf16's tolerance, and a resume continues bit for bit. */
START_TEST(device_masks_backwards_and_resume_over_nccl)
{
    on_emulator = 1;
    static char *two_gpus[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=2",
                               "BK_EMU_NCCL_TIMEOUT=300", "BK_EMU_STREAMS=deferred", NULL};
    const char *window[] = {"data.seq_len=64", "parallel.mask=window", "parallel.window=24",
                            "memory.attn_kept_fraction=1", NULL},
               *document[] = {"data.seq_len=64", "parallel.mask=document", "data.doc_len=20",
                              "memory.attn_kept_fraction=1", NULL},
               *over_nccl[] = {"train.device=cuda", "transport.intra=nccl", "parallel.cp=2", NULL};
    const struct {
        const char *const *mask, *backward, *what;
    } cases[] = {
        {window, "parallel.backward=q", "window mask, Q-side backward over NCCL vs CPU"},
        {document, "parallel.backward=kv", "document mask, KV-side backward over NCCL vs CPU"}};
    for (int i = 0; i < 2; i++) {
        curve cpu, nccl;
        run_ok(1, 1, cases[i].mask, &cpu);
        run_env = two_gpus;
        run_ok(2, 1,
               with(with(cases[i].mask, over_nccl), (const char *[]){cases[i].backward, NULL}),
               &nccl);
        run_env = one_thread;
        expect_same(&cpu, &nccl, 2e-2, cases[i].what);
    }
    char dir[512], dir_set[600];
    checkpoint_dir("ckpt-nccl", dir, dir_set);
    const char *resumed[] = {"data.seq_len=64",
                             "parallel.mask=window",
                             "parallel.window=24",
                             "memory.attn_kept_fraction=1",
                             "train.device=cuda",
                             "transport.intra=nccl",
                             "parallel.cp=2",
                             dir_set,
                             NULL};
    run_env = two_gpus;
    expect_resume_bit_for_bit(2, resumed, dir, NULL);
    run_env = one_thread;
    ck_assert_int_eq(test_remove_tree(dir), 0);
    on_emulator = 0;
}
END_TEST

/* The node users run, twice over: 2 emulated nodes of 4 GPUs each, NCCL
 * inside a node and staged between (kernels deferred). The double ring over
 * all 8 ranks against the CPU engine's single rank; dp x cp = 2 x 4, each
 * ring inside a node and the optimizer's collectives across both, against
 * the CPU engine on the same grid. */
START_TEST(device_two_nodes_of_four_gpus_over_nccl)
{
    on_emulator = 1;
    static char *four_gpus[] = {"OMP_NUM_THREADS=1", "BK_EMU_GPUS_PER_NODE=4",
                                "BK_EMU_NCCL_TIMEOUT=300", "BK_EMU_STREAMS=deferred", NULL};
    const char *nccl[] = {"train.device=cuda", "data.seq_len=64", "transport.intra=nccl", NULL},
               *grid[] = {"parallel.dp=2", "parallel.cp=4", NULL};
    curve cpu, ring, cpu_grid, nccl_grid;
    run_ok(1, 1, on_cpu, &cpu);
    run_ok(8, 2, with(on_cpu, grid), &cpu_grid);
    run_env = four_gpus;
    /* rank 5, GPU 1 of node 1: staged to node 0, NCCL to its node's others */
    run_saying(8, 2, with(nccl, (const char *[]){"parallel.cp=8", "parallel.ring=double", NULL}),
               "rank 5: ssssncnn", &ring);
    run_ok(8, 2, with(nccl, grid), &nccl_grid);
    run_env = one_thread;
    expect_same(&cpu, &ring, 2e-2, "2 nodes x 4 GPUs, double ring over NCCL vs CPU");
    expect_same(&cpu_grid, &nccl_grid, 2e-2, "2 nodes x 4 GPUs, dp x cp = 2 x 4 vs CPU");
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
static test_run_result train_alone_on_device_with(char *const *env, const char *const *more)
{
    on_emulator = 1;
    const char *base[] = {"train.device=cuda", "data.seq_len=64", "train.steps=3",
                          "train.warmup_steps=1", NULL};
    const char *const *sets = with(base, more);
    char *argv[32];
    int a = 0;
    argv[a++] = (char *)train_program(), argv[a++] = "train";
    for (int i = 0; sets[i]; i++) argv[a++] = "--set", argv[a++] = (char *)sets[i];
    argv[a] = NULL;
    on_emulator = 0;
    return test_run(argv, env);
}

static test_run_result train_alone_on_device(char *const *env)
{
    return train_alone_on_device_with(env, (const char *[]){NULL});
}

/* The page-locked host memory of the offloaded activations is taken at
 * setup, as the arena is (with the optimizer's state on the host, plain host
 * memory made with the optimizer): with the emulator printing every runtime
 * allocation, cudaMallocHost comes before the report and no allocation of
 * any kind after it. */
START_TEST(device_host_memory_taken_at_setup)
{
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_TRACE_ALLOC=1", NULL};
    test_run_result r = train_alone_on_device_with(
        env, (const char *[]){"memory.offload_activations=true", "memory.optimizer=host",
                              "parallel.zero=3", NULL});
    const char *started = strstr(r.out, "device: emulator"),
               *pinned = strstr(r.out, "emu: cudaMallocHost ");
    ck_assert_msg(r.exit_code == 0 && started && pinned && pinned < started &&
                      !strstr(started, "emu: cudaMalloc") && test_output_has(&r, "step     3/3"),
                  "exit %d, a runtime allocation after setup or none page-locked:\n%s", r.exit_code,
                  r.out);
    test_run_free(&r);
}
END_TEST

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
    ck_assert_msg(test_output_has(&r, "; device memory used ") &&
                      test_output_has(&r, " of 1.0 GiB"),
                  "%s", r.out);
    const char *started = strstr(r.out, "device: emulator"),
               *first = strstr(r.out, "emu: cudaMalloc ");
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
    argv[a++] = (char *)train_program(), argv[a++] = "run", argv[a++] = "-n", argv[a++] = n;
    argv[a++] = "--nodes", argv[a++] = m, argv[a++] = "--";
    if (head_chunk0 > 0)
        argv[a++] = "/bin/sh", argv[a++] = "-c", argv[a++] = script, argv[a++] = "sh";
    argv[a++] = (char *)train_program(), argv[a++] = "train";
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

void add_device_tests(Suite *s)
{
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device", 900), device_engine_matches_the_cpu,
                    device_grid_matches_the_cpu, device_resumes_its_own_and_the_cpus_checkpoints,
                    device_zeros_2_and_3_train_as_zero_1, device_arena_holds_every_buffer,
                    device_staging_buffers_taken_at_setup,
                    device_arena_report_names_the_largest_peak,
                    device_offloaded_activations_train_as_kept_on_device,
                    device_optimizer_on_the_host_trains_as_on_the_device,
                    host_keys_resume_bit_for_bit_and_across, device_host_memory_taken_at_setup);
#ifdef HAVE_NCCL
    check_add_tests(check_tcase(s, "device over NCCL", 900), device_engine_over_nccl,
                    device_masks_backwards_and_resume_over_nccl,
                    device_zero_collectives_overlap_over_nccl,
                    device_two_nodes_of_four_gpus_over_nccl);
#endif
}
