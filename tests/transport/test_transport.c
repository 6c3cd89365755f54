/* test_transport.c: the transport and the launcher, with real processes talking
 * through UCX over this machine's shared memory: point-to-point, collectives
 * against serial references, sub-communicators, and failures (a rank killed, a
 * rank that stops answering, a wait that times out, a peer with a wrong secret).
 * The ranks are tests/transport/transport_worker under `burst run`; each checks its own
 * results and the launcher's exit status carries the verdict. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"
#include "transport/internal.h"
#include "transport/launch.h"

/* The ranks' program, tests/transport/transport_worker of the build. */
static char *transport_worker(void)
{
    static char path[4096];
    return (char *)test_program_path("tests/transport/transport_worker", path, sizeof path);
}

/* burst run -n ranks [--nodes nodes] [extra...] -- transport_worker scenario */
static test_run_result run_worker(int ranks, int nodes, const char *extra1, const char *extra2,
                                  const char *scenario)
{
    char n[16], m[16];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(m, sizeof m, "%d", nodes);
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)test_burst_path();
    argv[a++] = "run";
    argv[a++] = "-n";
    argv[a++] = n;
    argv[a++] = "--nodes";
    argv[a++] = m;
    if (extra1) argv[a++] = (char *)extra1;
    if (extra2) argv[a++] = (char *)extra2;
    argv[a++] = "--";
    argv[a++] = transport_worker();
    argv[a++] = (char *)scenario;
    argv[a] = NULL;
    return test_run(argv, NULL);
}

static void expect_ok(int ranks, int nodes, const char *scenario)
{
    test_run_result r = run_worker(ranks, nodes, NULL, NULL, scenario);
    char want[64];
    snprintf(want, sizeof want, "ok %s on %d ranks", scenario, ranks);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, want),
                  "%s on %d ranks / %d nodes exited %d:\n%s", scenario, ranks, nodes, r.exit_code,
                  r.out);
    test_run_free(&r);
}

START_TEST(p2p_sizes_channels_and_counters)
{
    expect_ok(_i, 1, "p2p");
}
END_TEST

START_TEST(collectives_against_serial_reference)
{
    expect_ok(_i, 1, "collectives");
}
END_TEST

START_TEST(collectives_on_two_emulated_nodes)
{
    expect_ok(4, 2, "collectives"); /* two-level all-reduce over 2 nodes x 2 ranks */
    expect_ok(6, 3, "collectives");
}
END_TEST

/* The all-to-all on the world and on groups of 2, 3 and 1 ranks: equal
 * blocks of 0 to 100003 bytes, uneven ones with gaps, checked to the byte,
 * its channel's counters; on 1 to 4 ranks and on 2 emulated nodes (UCX
 * between them too). */
START_TEST(alltoall_against_local_reference)
{
    expect_ok(_i, 1, "alltoall");
}
END_TEST

START_TEST(alltoall_on_two_emulated_nodes)
{
    expect_ok(4, 2, "alltoall");
}
END_TEST

/* Block sizes that disagree (rank 0 expects 6 bytes of rank 1's 5) fail the
 * receiving rank's call, naming both sizes and the channel. */
START_TEST(alltoall_size_mismatch_is_an_error)
{
    test_run_result r = run_worker(3, 1, NULL, NULL, "alltoall-mismatch");
    ck_assert_msg(r.exit_code != 0 &&
                      test_output_has(&r, "rank 0: alltoallv: rank 0: message size mismatch from "
                                          "rank 1 on channel 64: expected 6 bytes, got 5"),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

/* The wires UCX picked, read from UCX itself: shared memory between the ranks
 * of a node, the network between nodes. The same check on a UCX held to TCP
 * must fail, naming the endpoint, so a silent fall-back cannot pass. */
START_TEST(endpoints_use_shared_memory_on_a_node)
{
    expect_ok(4, 2, "wires");
    char *argv[] = {(char *)test_burst_path(), "run", "-n", "2", "--", transport_worker(), "wires", NULL};
    char *env[] = {"UCX_TLS=tcp,self", NULL};
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code != 0 && test_output_has(&r, "rank 0 to rank 1 of its node: ucx: tcp/"),
                  "TCP between the ranks of a node went unnoticed (exit %d):\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(sub_communicators)
{
    expect_ok(4, 2, "split");
    expect_ok(3, 1, "split");
    expect_ok(3, 3, "split");
}
END_TEST

START_TEST(launcher_numbers_ranks_node_major)
{
    test_run_result r = run_worker(4, 2, NULL, NULL, "whoami");
    ck_assert_msg(r.exit_code == 0, "whoami exited %d:\n%s", r.exit_code, r.out);
    const char *want[] = {
        "[0] whoami rank=0 size=4 node=0 nodes=2 local=0 local_size=2 bootstrap=burst-run",
        "[1] whoami rank=1 size=4 node=0 nodes=2 local=1 local_size=2 bootstrap=burst-run",
        "[2] whoami rank=2 size=4 node=1 nodes=2 local=0 local_size=2 bootstrap=burst-run",
        "[3] whoami rank=3 size=4 node=1 nodes=2 local=1 local_size=2 bootstrap=burst-run",
    };
    for (int i = 0; i < 4; i++) ck_assert_msg(test_output_has(&r, want[i]), "missing '%s' in:\n%s", want[i], r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(killed_rank_is_named_by_every_survivor)
{
    int ranks = _i, victim = ranks - 1;
    test_run_result r = run_worker(ranks, 1, "--no-kill", NULL, "kill");
    /* With --no-kill the launcher reports every failure; which one it reaped
     * first (and so its exit status) depends on scheduling, as does whether a
     * survivor was still in the barrier or already in the receive. */
    char killed[64];
    snprintf(killed, sizeof killed, "burst run: rank %d was killed by signal 9", victim);
    ck_assert_msg(r.exit_code != 0, "launcher exited 0:\n%s", r.out);
    ck_assert_msg(test_output_has(&r, killed), "%s", r.out);
    /* Each survivor fails wherever it was (the barrier or the receive). */
    for (int k = 0; k < victim; k++) {
        char prefix[32], lost[32];
        snprintf(prefix, sizeof prefix, "[%d] rank %d: ", k, k);
        snprintf(lost, sizeof lost, "lost rank %d (", victim);
        int named = 0;
        for (const char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            size_t len = strcspn(line, "\n");
            char *copy = strndup(line, len);
            if (strncmp(copy, prefix, strlen(prefix)) == 0 && strstr(copy, lost)) named = 1;
            free(copy);
        }
        ck_assert_msg(named, "rank %d did not name the lost rank %d:\n%s", k, victim, r.out);
    }
    /* Detection is by the closed socket, far inside the 60 s default timeout. */
    ck_assert_msg(r.seconds < 30, "survivors took %.1f s to notice", r.seconds);
    test_run_free(&r);
}
END_TEST

/* The last rank dies just before an all-to-all: every survivor's all-to-all
 * fails naming it, far inside the timeout (on one node and on two). */
START_TEST(rank_lost_before_an_alltoall_is_named_by_every_survivor)
{
    static const int ranks[] = {2, 3, 4}, nodes[] = {1, 1, 2};
    int victim = ranks[_i] - 1;
    test_run_result r = run_worker(ranks[_i], nodes[_i], "--no-kill", NULL, "alltoall-kill");
    ck_assert_msg(r.exit_code != 0, "launcher exited 0:\n%s", r.out);
    for (int k = 0; k < victim; k++) {
        char want[96];
        snprintf(want, sizeof want, "rank %d: alltoall: rank %d: lost rank %d (", k, k, victim);
        ck_assert_msg(test_output_has(&r, want), "rank %d's all-to-all did not name rank %d:\n%s",
                      k, victim, r.out);
    }
    ck_assert_msg(r.seconds < 30, "survivors took %.1f s to notice", r.seconds);
    test_run_free(&r);
}
END_TEST

/* A rank killed while its neighbour reads a large message out of its memory
 * (cma on one node): the reader names it and exits as a survivor, whatever
 * the moment of the kill (before, during or after the read started). */
START_TEST(rank_killed_during_a_large_transfer_is_named)
{
    test_run_result r = run_worker(2, 1, "--no-kill", NULL, "kill-large");
    ck_assert_msg(test_output_has(&r, "rank 0: large receive from the last rank: rank 0: lost rank 1 ("),
                  "rank 0 did not name rank 1:\n%s", r.out);
    ck_assert_msg(test_output_has(&r, "burst run: rank 0 exited with status 3"),
                  "rank 0 did not exit as a survivor of a lost peer:\n%s", r.out);
    test_run_free(&r);
}
END_TEST

/* A failed data connection reported by one rank: every other rank names the
 * lost rank (through rank 0), though its heartbeats go on. */
START_TEST(failed_link_is_announced_to_every_rank)
{
    test_run_result r = run_worker(4, 2, "--no-kill", NULL, "link-lost");
    ck_assert_msg(r.exit_code != 0, "launcher exited 0:\n%s", r.out);
    for (int k = 0; k < 3; k++) {
        char want[96];
        snprintf(want, sizeof want, "rank %d: lost rank 3 (", k); /* wherever it was */
        ck_assert_msg(test_output_has(&r, want), "rank %d did not name rank 3:\n%s", k, r.out);
    }
    ck_assert_msg(test_output_has(&r, "its data connection failed"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(silent_rank_is_declared_lost_after_timeout)
{
    test_run_result r = run_worker(3, 1, "--timeout", "3", "hang");
    ck_assert_msg(r.exit_code != 0, "a stopped rank went unnoticed:\n%s", r.out);
    ck_assert_msg(test_output_has(&r, "lost rank 2 (it stopped answering"),
                  "no rank named the silent rank 2:\n%s", r.out);
    ck_assert_msg(r.seconds < 30, "took %.1f s with a 3 s timeout", r.seconds);
    test_run_free(&r);
}
END_TEST

START_TEST(wait_times_out_and_says_what_it_waited_for)
{
    test_run_result r = run_worker(2, 1, "--timeout", "2", "timeout");
    ck_assert_msg(r.exit_code == 4, "exited %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "timed out after 2 s waiting to receive 8 bytes from rank 1 "
                                      "on channel 5"),
                  "timeout message missing:\n%s", r.out);
    test_run_free(&r);
}
END_TEST

/* A port that was free a moment ago (the launcher's listening socket, closed). */
static int free_port(void)
{
    char err[256];
    int port = 0, fd = bt_launch_listen(&port, err, sizeof err);
    if (fd >= 0) close(fd);
    return port;
}

/* Rank 0 and a rank 1 that presents another job's secret, started by hand. */
static void secret_script(char *script, size_t len, int port)
{
    snprintf(script, len,
             "export BURST_SIZE=2 BURST_ROOT=127.0.0.1:%d BURST_TIMEOUT=3\n"
             "BURST_RANK=0 BURST_SECRET=0123456789abcdef0123456789abcdef %s whoami & p0=$!\n"
             "sleep 0.3\n"
             "BURST_RANK=1 BURST_SECRET=ffffffffffffffffffffffffffffffff %s whoami; c1=$?\n"
             "wait $p0; c0=$?\n"
             "echo \"codes $c0 $c1\"\n",
             port, transport_worker(), transport_worker());
}

START_TEST(peer_with_wrong_secret_is_refused)
{
    /* Rank 0 and a rank 1 that presents another job's secret, started by hand. */
    char script[8192];
    int port = free_port();
    secret_script(script, sizeof script, port);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    test_run_result r = test_run(argv, NULL);
    /* The port was free when chosen; another process may take it before rank 0
     * binds it. Then choose again. */
    for (int retry = 0; retry < 5 && test_output_has(&r, "Address already in use"); retry++) {
        test_run_free(&r);
        port = free_port();
        secret_script(script, sizeof script, port);
        r = test_run(argv, NULL);
    }
    ck_assert_msg(test_output_has(&r, "codes 1 5"), "expected rank 0 to time out (1) and rank 1 to "
                                                    "be refused (5):\n%s", r.out);
    ck_assert_msg(test_output_has(&r, "refused this rank: wrong secret"), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "refused a connection from 127.0.0.1"), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "waiting for 1 of 2 ranks to connect to rank 0"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

START_TEST(launcher_stops_the_others_when_a_rank_fails)
{
    char *argv[] = {(char *)test_burst_path(), "run", "-n", "3", "--", "/bin/sh", "-c",
                    "echo hello; if [ \"$BURST_RANK\" = 1 ]; then exit 7; fi; sleep 60", NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 7, "exit %d:\n%s", r.exit_code, r.out);
    ck_assert(test_output_has(&r, "[1] hello"));
    ck_assert(test_output_has(&r, "burst run: rank 1 exited with status 7; stopping the other ranks"));
    ck_assert_msg(r.seconds < 20, "took %.1f s: the sleeping ranks were not stopped", r.seconds);
    test_run_free(&r);
}
END_TEST

START_TEST(launcher_forwards_sigterm)
{
    char script[1024];
    snprintf(script, sizeof script,
             "%s run -n 2 -- /bin/sh -c 'echo started; exec sleep 60' & p=$!\n"
             "sleep 1; kill -TERM $p; wait $p; echo \"code=$?\"\n",
             test_burst_path());
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(test_output_has(&r, "code=143"), "%s", r.out);
    ck_assert_msg(test_output_has(&r, "forwarding signal 15"), "%s", r.out);
    ck_assert_msg(r.seconds < 20, "took %.1f s", r.seconds);
    test_run_free(&r);
}
END_TEST

START_TEST(launcher_rejects_bad_usage)
{
    const char *cases[][6] = {
        {"run", "--", "true", NULL},
        {"run", "-n", "0", "--", "true", NULL},
        {"run", "-n", "3", "--nodes", "2", "true"},
        {"run", "-n", "2", NULL},
        {"run", "-n", "2", "--bogus", "--", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[8] = {(char *)test_burst_path()};
        for (int k = 0; k < 6 && cases[i][k]; k++) argv[k + 1] = (char *)cases[i][k];
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 2, "case %zu exited %d:\n%s", i, r.exit_code, r.out);
        test_run_free(&r);
    }
}
END_TEST

START_TEST(bad_transport_settings_exit_2_before_work)
{
    const char *cases[][3] = {{"--intra", "bogus", "transport.intra: unknown backend 'bogus'"},
                              {"--timeout", "0", "--timeout: bad value '0'"}};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {(char *)test_burst_path(), "run", "-n", "2", "--",
                        (char *)test_burst_path(), "selftest", (char *)cases[i][0],
                        (char *)cases[i][1], NULL};
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 2 && test_output_has(&r, cases[i][2]), "exit %d:\n%s",
                      r.exit_code, r.out);
        test_run_free(&r);
    }
}
END_TEST

START_TEST(selftest_on_two_emulated_nodes)
{
    char *argv[] = {(char *)test_burst_path(), "run", "-n", "4", "--nodes", "2", "--",
                    (char *)test_burst_path(), "selftest", NULL};
    test_run_result r = test_run(argv, NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "[0] selftest: passed on all ranks"),
                  "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
}
END_TEST

/* BURST_STAGE_CHUNK is a byte count with an optional K, M or G
 * (util/parse.h); anything else gives 0, which the device setup refuses. */
START_TEST(staging_chunk_setting_is_a_byte_count)
{
    static const struct {
        const char *value;
        size_t bytes;
    } cases[] = {{"4096", 4096},  {"64K", 65536},  {"64k", 65536}, {"1M", 1 << 20},
                 {"2g", (size_t)2 << 30}, {"", 0}, {"1X", 0},       {"-1", 0},
                 {"1MB", 0},      {"K", 0},        {"99999999999999999999", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("BURST_STAGE_CHUNK", cases[i].value, 1);
        ck_assert_msg(bt_staging_chunk_bytes() == cases[i].bytes, "'%s': %zu bytes, expected %zu",
                      cases[i].value, bt_staging_chunk_bytes(), cases[i].bytes);
    }
    unsetenv("BURST_STAGE_CHUNK");
    ck_assert_int_eq(bt_staging_chunk_bytes(), 1 << 20);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transport");
    TCase *ok = check_tcase(s, "correctness", 300);
    check_add_loop_tests(ok, 1, 6, p2p_sizes_channels_and_counters,
                         collectives_against_serial_reference);
    tcase_add_loop_test(ok, alltoall_against_local_reference, 1, 5);
    check_add_tests(ok, alltoall_on_two_emulated_nodes, alltoall_size_mismatch_is_an_error);
    check_add_tests(ok, collectives_on_two_emulated_nodes, endpoints_use_shared_memory_on_a_node,
                    sub_communicators, launcher_numbers_ranks_node_major,
                    selftest_on_two_emulated_nodes, staging_chunk_setting_is_a_byte_count);
    TCase *fail = check_tcase(s, "failures", 120);
    tcase_add_loop_test(fail, killed_rank_is_named_by_every_survivor, 2, 5);
    tcase_add_loop_test(fail, rank_lost_before_an_alltoall_is_named_by_every_survivor, 0, 3);
    check_add_tests(fail, rank_killed_during_a_large_transfer_is_named,
                    failed_link_is_announced_to_every_rank,
                    silent_rank_is_declared_lost_after_timeout,
                    wait_times_out_and_says_what_it_waited_for, peer_with_wrong_secret_is_refused,
                    launcher_stops_the_others_when_a_rank_fails, launcher_forwards_sigterm,
                    launcher_rejects_bad_usage, bad_transport_settings_exit_2_before_work);
    return check_run(s);
}
