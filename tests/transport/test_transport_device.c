/* test_transport_device.c: the transport on device memory, with real ranks
 * under `burst run` (tests/transport/transport_dev_worker) and the SIMT
 * emulator as their device: ring exchanges through the staging pipeline and
 * the self copy at sizes around the chunk size, grouped with every receive
 * posted before any send; the staging pool taken up front, which the steps
 * then never grow, and one that must grow; device collectives, staged piece
 * by piece, against the host ones to the bit; calls refused with a message
 * that names the backend, the peer and the memory kind; the all-to-all,
 * staged and copied, and (in a build with NCCL) over the model of NCCL. UCX's
 * direct path needs a GPU and a UCX with CUDA and is not run here. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char *dev_worker(void)
{
    static char path[4096];
    return (char *)test_program_path("tests/transport/transport_dev_worker", path, sizeof path);
}

/* burst run -n ranks --nodes nodes -- transport_dev_worker scenario, with the
 * "NAME=VALUE" variables of env (NULL-terminated). */
static test_run_result run_dev_env(int ranks, int nodes, const char *scenario, char **env)
{
    char n[16], m[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[] = {(char *)test_burst_path(), "run", "-n", n, "--nodes", m, "--",
                    dev_worker(), (char *)scenario, NULL};
    return test_run(argv, env);
}

/* The same with an optional variable var. */
static test_run_result run_dev(int ranks, int nodes, const char *scenario, const char *var)
{
    char *env[] = {(char *)var, NULL};
    return run_dev_env(ranks, nodes, scenario, env);
}

static void expect_ok(int ranks, int nodes, const char *scenario, const char *var)
{
    test_run_result r = run_dev(ranks, nodes, scenario, var);
    char want[64];
    snprintf(want, sizeof want, "ok %s on %d ranks", scenario, ranks);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want),
                  "%s on %d ranks / %d nodes (%s) exited %d:\n%s", scenario, ranks, nodes,
                  var ? var : "defaults", r.exit_code, r.out);
    if (ranks > 1)
        ck_assert_msg(strcmp(scenario, "ring") != 0 || test_output_has(&r, ": staged") ||
                          test_output_has(&r, ": direct"),
                      "no staged or direct path reported:\n%s", r.out);
    test_run_free(&r);
}

/* 4 KiB chunks: messages of 0, 1, chunk - 1, chunk, chunk + 1 and 9 chunks +
 * 123 bytes, and six 2.5-chunk messages on one channel in a row. */
START_TEST(device_ring_small_chunks)
{
    static const int ranks[] = {1, 2, 4}, nodes[] = {1, 2, 2};
    expect_ok(ranks[_i], nodes[_i], "ring", "BURST_STAGE_CHUNK=4096");
}
END_TEST

/* The default chunk (1 MiB) and a single slot per message (no overlap, the
 * slot reused for every chunk). */
START_TEST(device_ring_default_chunk_and_one_slot)
{
    expect_ok(4, 2, "ring", NULL);
    expect_ok(2, 2, "ring", "BURST_STAGE_SLOTS=1");
}
END_TEST

/* The staging pool taken up front for a step's messages in flight: no buffer
 * is taken while they travel (2 and 4 ranks over 2 nodes; on 1 rank nothing
 * is staged or taken); a pool reserved for one message grows to what six
 * sends and six receives on one channel need, and counts it. */
START_TEST(staging_pool_reserved_up_front)
{
    static const int ranks[] = {2, 4, 1}, nodes[] = {2, 2, 1};
    expect_ok(ranks[_i], nodes[_i], "reserve", "BURST_STAGE_CHUNK=4096");
    if (_i == 0) expect_ok(2, 2, "outgrow", "BURST_STAGE_CHUNK=4096");
}
END_TEST

/* 4 KiB chunks: the staged collectives run in many pieces (30011 elements
 * over 3 ranks: 30 pieces of 341-element slices, the last shorter, the last
 * block padded), the results equal the host's to the bit. */
START_TEST(device_collectives_match_host)
{
    static const int ranks[] = {1, 4, 3}, nodes[] = {1, 2, 1};
    expect_ok(ranks[_i], nodes[_i], "collectives", "BURST_STAGE_CHUNK=4096");
}
END_TEST

/* The device all-to-all (4 KiB chunks: its larger blocks staged in many)
 * over the world, the node, groups of 2, 3 and 1: equal blocks of 0, 1,
 * chunk + 1 and 100003 bytes, uneven ones with gaps, to the byte against the
 * reference, nothing outside the blocks written; the block to itself copied. */
START_TEST(device_alltoall_matches_reference)
{
    static const int ranks[] = {1, 2, 3, 4}, nodes[] = {1, 1, 1, 2};
    expect_ok(ranks[_i], nodes[_i], "alltoall", "BURST_STAGE_CHUNK=4096");
}
END_TEST

#ifdef HAVE_NCCL
/* The same over the model of NCCL (emu/nccl/), a GPU per rank and the
 * emulator's copies deferred: one node of 4 (the world and the node all
 * NCCL's, groups of 2 part of it, groups of 3 one of NCCL's and one alone)
 * and 2 nodes of 2 (NCCL inside, staged between); rank 0 prints its paths. */
START_TEST(device_alltoall_over_nccl)
{
    static const int nodes[] = {1, 2};
    static const char *const paths[] = {"rank 0: device paths cnnn", "rank 0: device paths cnss"};
    char *env[] = {"BK_EMU_GPUS_PER_NODE=4", "BK_EMU_NCCL_TIMEOUT=60", "BK_EMU_STREAMS=deferred",
                   "BURST_STAGE_CHUNK=4096", NULL};
    test_run_result r = run_dev_env(4, nodes[_i], "alltoall-nccl", env);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok alltoall-nccl on 4 ranks") &&
                      test_output_has(&r, paths[_i]),
                  "4 ranks on %d node(s) over NCCL exited %d:\n%s", nodes[_i], r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST
#endif

START_TEST(misuse_is_refused_without_failing)
{
    expect_ok(2, 1, "misuse", NULL);
    expect_ok(1, 1, "misuse", NULL);
}
END_TEST

/* Device memory without hooks, on a world of one (self) and of two (UCX). */
START_TEST(device_memory_without_hooks_is_refused)
{
    int ranks = _i;
    test_run_result r = run_dev(ranks, 1, "refuse", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d:\n%s", r.exit_code, r.out);
    for (int k = 0; k < ranks; k++) {
        char want[64];
        snprintf(want, sizeof want, "ok refuse on rank %d of %d", k, ranks);
        ck_assert_msg(test_output_has(&r, want), "missing '%s':\n%s", want, r.out);
    }
    ck_assert_msg(test_output_has(&r, "no device hooks were set"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(host_memory_to_a_device_only_backend_is_refused)
{
    test_run_result r = run_dev(1, 1, "refuse-host", NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "ok refuse-host on rank 0 of 1") &&
                      test_output_has(&r, "the nccl transport to rank 0 takes no host memory"),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

/* Chunk sizes that differ between ranks would split messages differently:
 * bt_world_set_device refuses them. */
START_TEST(unequal_chunk_sizes_are_refused)
{
    char script[8192];
    snprintf(script, sizeof script,
             "%s run -n 2 -- /bin/sh -c 'if [ \"$BURST_RANK\" = 1 ]; then export "
             "BURST_STAGE_CHUNK=8192; fi; exec %s ring'",
             test_burst_path(), dev_worker());
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code != 0 && test_output_has(&r, "BURST_STAGE_CHUNK differs"),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transport_device");
    TCase *tc = check_tcase(s, "device", 300);
    tcase_add_loop_test(tc, device_ring_small_chunks, 0, 3);
    tcase_add_loop_test(tc, staging_pool_reserved_up_front, 0, 3);
    tcase_add_loop_test(tc, device_collectives_match_host, 0, 3);
    tcase_add_loop_test(tc, device_alltoall_matches_reference, 0, 4);
#ifdef HAVE_NCCL
    tcase_add_loop_test(tc, device_alltoall_over_nccl, 0, 2);
#endif
    tcase_add_loop_test(tc, device_memory_without_hooks_is_refused, 1, 3);
    check_add_tests(tc, device_ring_default_chunk_and_one_slot, misuse_is_refused_without_failing,
                    host_memory_to_a_device_only_backend_is_refused, unequal_chunk_sizes_are_refused);
    return check_run(s);
}
