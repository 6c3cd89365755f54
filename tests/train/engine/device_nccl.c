/* device_nccl.c (tests/train/test_train_device_nccl): the engine on the
 * emulated device over the model of NCCL (emu/nccl/), against
 * the staged path and the CPU engine: the ring on one node and on two, the
 * masks and backwards, a resume, and ZeRO's collectives overlapped with the
 * compute. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

/* The device engine over NCCL (the emulated programs link the model of NCCL,
 * emu/nccl/): emulated nodes of 4 GPUs, a GPU per rank, and
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

void add_device_nccl_tests(Suite *s)
{
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device over NCCL", 900), device_engine_over_nccl,
                    device_masks_backwards_and_resume_over_nccl,
                    device_zero_collectives_overlap_over_nccl,
                    device_two_nodes_of_four_gpus_over_nccl);
}
