/* device_memory.c (tests/train/test_train_device_memory): where the engine
 * on the emulated device takes its memory: every buffer from the arena, the
 * transport's staging buffers and the offload's page-locked host memory at
 * setup, and the arena report of several ranks. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/train/engine/fixture.h"

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
/* The memory choices given (auto would take a smaller one where this one does
 * not fit: device_auto_keeps_what_the_device_holds). */
static const char *const pinned[] = {"memory.attn_kept_fraction=1", "memory.keep_layers=true",
                                     NULL};

START_TEST(device_arena_holds_every_buffer)
{
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_TRACE_ALLOC=1", "BK_EMU_DEVICE_BYTES=1073741824",
                   NULL};
    test_run_result r = train_alone_on_device_with(env, pinned);
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
    r = train_alone_on_device_with(env, pinned);
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
    r = train_alone_on_device_with(env, pinned);
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
/* attn_kept_fraction = auto and keep_layers = auto (the defaults) on a
 * device: with room for the arena of everything kept, everything is kept;
 * with one byte less, the layers are recomputed and the run trains, its
 * arena within the device. */
START_TEST(device_auto_keeps_what_the_device_holds)
{
    char *env[] = {"OMP_NUM_THREADS=1", "BK_EMU_DEVICE_BYTES=1073741824", NULL};
    test_run_result r = train_alone_on_device_with(env, pinned);
    long long capacity = number_after(&r, "device arena per rank: ", "capacity ");
    ck_assert_msg(r.exit_code == 0 && capacity > 0, "exit %d:\n%s", r.exit_code, r.out);
    test_run_free(&r);
    char room[64];
    const char *kept = "checkpoint fraction 1, layers kept (auto: the fastest whose memory fits)",
               *recomputed = "checkpoint fraction 1, layers recomputed (auto: the fastest whose "
                             "memory fits)";
    for (int less = 0; less < 2; less++) {
        snprintf(room, sizeof room, "BK_EMU_DEVICE_BYTES=%lld", capacity - less);
        env[1] = room;
        r = train_alone_on_device(env);
        long long taken = number_after(&r, "device arena per rank: ", "capacity ");
        ck_assert_msg(r.exit_code == 0 && test_output_has(&r, less ? recomputed : kept) &&
                          test_output_has(&r, "step     3/3") && taken <= capacity - less &&
                          (less || taken == capacity),
                      "%lld bytes: exit %d, arena %lld:\n%s", capacity - less, r.exit_code, taken,
                      r.out);
        test_run_free(&r);
    }
}
END_TEST

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

void add_device_memory_tests(Suite *s)
{
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device memory", 900), device_arena_holds_every_buffer,
                    device_auto_keeps_what_the_device_holds, device_staging_buffers_taken_at_setup,
                    device_arena_report_names_the_largest_peak, device_host_memory_taken_at_setup);
}
