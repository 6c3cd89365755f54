/* test_cli.c: the `burst` command line keeps its promises: help exits 0 and lists
 * every command, bad usage exits 2, version names the optional parts, the
 * device benchmark refuses bad options and a machine without a device, the
 * training benchmark refuses bad options and runs on the emulated device. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static test_run_result burst(const char *a1, const char *a2)
{
    char *argv[] = {(char *)test_burst_path(), (char *)a1, (char *)a2, NULL};
    return test_run(argv, NULL);
}

/* `burst WORDS...` (words NULL-terminated, at most 7). */
static test_run_result burst_words(const char *const *words)
{
    char *argv[9] = {(char *)test_burst_path()};
    for (int k = 0; k < 7 && words[k]; k++) argv[k + 1] = (char *)words[k];
    return test_run(argv, NULL);
}

/* `burst WORDS... --help` exits 0 and lists each of the options (NULL-
 * terminated), each at the start of a line of the list. */
static void expect_help_lists(const char *const *words, const char *const *options)
{
    const char *argv[9] = {0};
    int n = 0;
    while (n < 7 && words[n]) argv[n] = words[n], n++;
    argv[n] = "--help";
    test_run_result r = burst_words(argv);
    ck_assert_msg(r.exit_code == 0, "%s --help exited %d", words[0], r.exit_code);
    for (int i = 0; options[i]; i++) {
        char line[96];
        snprintf(line, sizeof line, "\n  %s ", options[i]);
        ck_assert_msg(test_output_has(&r, line), "%s --help does not list %s:\n%s", words[0],
                      options[i], r.out);
    }
    test_run_free(&r);
}

/* `burst WORDS...` exits 2 saying says, and where the options are listed. */
static void expect_refusal(const char *const *words, const char *says)
{
    test_run_result r = burst_words(words);
    ck_assert_msg(r.exit_code == 2, "%s: exited %d: %s", says, r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, says), "not '%s' in: %s", says, r.out);
    ck_assert_msg(test_output_has(&r, "--help` lists the options"), "no --help hint: %s", r.out);
    test_run_free(&r);
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

/* `burst plan time`: a step priced from the project's H200 profiles (small,
 * two ranks on a device), each part and the totals printed; --sweep ranks
 * the backward directions, and a value that does not fit comes last,
 * refused; `burst plan attention --profile` prices its
 * passes; no profile, a profile without the rate a step needs and a bad
 * sweep are refused naming what is missing. */
START_TEST(plan_time_prices_a_step_and_refuses_what_it_cannot)
{
    const char *src = getenv("BURST_TEST_SRCDIR");
    char sxm[512], att[512];
    snprintf(sxm, sizeof sxm, "%s/profiles/h200-sxm.json", src ? src : ".");
    snprintf(att, sizeof att, "%s/profiles/h200-attention-burst.json", src ? src : ".");
    char *args[] = {(char *)test_burst_path(),
                    "plan",
                    "time",
                    "--profile",
                    sxm,
                    "--profile",
                    att,
                    "--set",
                    "model.preset=small",
                    "--set",
                    "data.seq_len=8192",
                    "--set",
                    "train.device=cuda",
                    "--set",
                    "attention.kernel=burst",
                    "--set",
                    "parallel.cp=2",
                    "--sweep",
                    "parallel.backward=q,kv",
                    NULL};
    test_run_result r = test_run(args, NULL);
    ck_assert_msg(r.exit_code == 0, "exited %d: %s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "parallel.backward swept, fastest first") &&
                      test_output_has(&r, "\nq ") && test_output_has(&r, "\nkv "),
                  "%s", r.out);
    test_run_free(&r);
    args[18] = "memory.limit_bytes=1024,107374182400"; /* a value that cannot fit */
    r = test_run(args, NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "\n1024 ") &&
                      test_output_has(&r, "does not fit memory") &&
                      strstr(r.out, "107374182400") < strstr(r.out, "\n1024 "),
                  "exited %d: %s", r.exit_code, r.out);
    test_run_free(&r);
    args[17] = NULL; /* no sweep: the parts */
    r = test_run(args, NULL);
    ck_assert_msg(r.exit_code == 0, "exited %d: %s", r.exit_code, r.out);
    static const char *const lines[] = {"attention forward", "attention backward", "products",
                                        "ZeRO collectives",  "step time",          "MFU",
                                        "bottleneck: "};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(test_output_has(&r, lines[i]), "no '%s' in: %s", lines[i], r.out);
    test_run_free(&r);
    char *lacking[] = {args[0],
                       "plan",
                       "time",
                       "--profile",
                       sxm,
                       "--set",
                       "model.preset=small",
                       "--set",
                       "data.seq_len=8192",
                       NULL};
    r = test_run(lacking, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(test_output_has(&r, "no row \"attention forward d 64 causal block 8192\""), "%s",
                  r.out);
    test_run_free(&r);
    char *none[] = {args[0], "plan", "time", NULL};
    r = test_run(none, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(test_output_has(&r, "--profile FILE"), "%s", r.out);
    test_run_free(&r);
    char *bad[] = {args[0], "plan", "time", "--profile", sxm, "--sweep", "parallel.ring=round",
                   NULL};
    r = test_run(bad, NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(test_output_has(&r, "parallel.ring=round"), "%s", r.out);
    test_run_free(&r);
    char *ring[] = {args[0], "plan", "--seq",  "16384",     "--ranks", "2",         "--hq", "16",
                    "--hkv", "16",   "--bf16", "--profile", sxm,       "--profile", att,    NULL};
    r = test_run(ring, NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "priced, forward + backward"), "%s",
                  r.out);
    test_run_free(&r);
}
END_TEST

/* `burst plan attention` is `burst plan`. */
START_TEST(plan_attention_is_plan)
{
    test_run_result a, b;
    char *args[] = {
        (char *)test_burst_path(), "plan", "attention", "--ranks", "4", "--seq", "512", NULL};
    a = test_run(args, NULL);
    char *plain[] = {(char *)test_burst_path(), "plan", "--ranks", "4", "--seq", "512", NULL};
    b = test_run(plain, NULL);
    ck_assert_int_eq(a.exit_code, 0);
    ck_assert_int_eq(b.exit_code, 0);
    ck_assert(test_output_has(&a, "plan: N=512 over 4 ranks"));
    ck_assert_str_eq(a.out, b.out);
    test_run_free(&a), test_run_free(&b);
}
END_TEST

/* plan attention's options, one table: --help lists each, a bad value and an
 * unknown option are refused naming them. */
START_TEST(plan_attention_options)
{
    static const char *const plan[] = {"plan", NULL}, *const attention[] = {"plan", "attention",
                                                                            NULL};
    static const char *const options[] = {
        "--seq",    "--ranks", "--nodes",  "--flat",          "--hq",           "--hkv",
        "--d",      "--mask",  "--window", "--doc-len",       "--sparse-block", "--sparse-density",
        "--layout", "--bwd",   "--pass",   "--dump-schedule", "--bf16",         "--profile",
        NULL};
    expect_help_lists(plan, options);
    expect_help_lists(attention, options);
    static const struct {
        const char *words[5];
        const char *says;
    } bad[] = {
        {{"plan", "--d", "12"}, "burst plan: --d: bad value '12'"},
        {{"plan", "attention", "--pass", "sideways"}, "burst plan: --pass: bad value 'sideways'"},
        {{"plan", "--mask", "square"}, "burst plan: --mask: bad value 'square'"},
        {{"plan", "--layout", "spiral"}, "burst plan: --layout: bad value 'spiral'"},
        {{"plan", "--bwd", "sideways"}, "burst plan: --bwd: bad value 'sideways'"},
        {{"plan", "--sparse-density", "2"}, "burst plan: --sparse-density: bad value '2'"},
        {{"plan", "--ranks", "0"}, "burst plan: --ranks: bad value '0'"},
        {{"plan", "--seq"}, "burst plan: --seq needs a value"},
        {{"plan", "--frobnicate"}, "burst plan: unknown option '--frobnicate'"},
        {{"plan", "attention", "extra"}, "burst plan: unexpected argument 'extra'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refusal(bad[i].words, bad[i].says);
}
END_TEST

/* The text after `label` on its line, up to `stop` (or the line's end), in a
 * static buffer. */
static const char *line_after(const test_run_result *r, const char *label, const char *stop)
{
    static char buf[1024];
    const char *at = strstr(r->out, label);
    ck_assert_msg(at != NULL, "no '%s' in:\n%s", label, r->out);
    at += strlen(label);
    size_t n = strcspn(at, "\n");
    const char *cut = stop ? strstr(at, stop) : NULL;
    if (cut && (size_t)(cut - at) < n) n = (size_t)(cut - at);
    snprintf(buf, sizeof buf, "%.*s", (int)n, at);
    return buf;
}

/* `burst plan memory` counts a rank's memory part by part as the run counts
 * it (the same function): the parts it prints are those `burst train` prints
 * at setup, on the CPU (burst) and on the emulated device (burst_emu, in the
 * device test case for its time under the sanitizers). */
static void expect_plan_counts_what_the_run_counts(int on_device)
{
    char emu[4096];
    test_program_path("tests/train/burst_emu", emu, sizeof emu);
    char *program = on_device ? emu : (char *)test_burst_path();
    char *device = on_device ? "train.device=cuda" : "train.device=cpu";
    char *plan[] = {program, "plan", "memory", "--set", "data.seq_len=64", "--set", device, NULL};
    char *train[] = {program, "train",         "--set", "data.seq_len=64",      "--set", device,
                     "--set", "train.steps=1", "--set", "train.warmup_steps=0", NULL};
    test_run_result p = test_run(plan, NULL), t = test_run(train, NULL);
    ck_assert_msg(p.exit_code == 0 && test_output_has(&p, "fits: yes"), "%s", p.out);
    ck_assert_msg(t.exit_code == 0, "%s", t.out);
    char planned[1024];
    snprintf(planned, sizeof planned, "%s", line_after(&p, "memory per rank: ", NULL));
    ck_assert_str_eq(planned, line_after(&t, "memory per rank: ", "; process baseline"));
    if (on_device) { /* the arena planned, the arena the run takes */
        ck_assert_msg(test_output_has(&p, "device per rank: arena "), "%s", p.out);
        ck_assert_msg(test_output_has(&t, "device arena per rank: capacity "), "%s", t.out);
    }
    test_run_free(&p), test_run_free(&t);
}

START_TEST(plan_memory_counts_what_a_run_counts)
{
    expect_plan_counts_what_the_run_counts(0);
}
END_TEST

START_TEST(plan_memory_counts_what_a_device_run_counts)
{
    expect_plan_counts_what_the_run_counts(1);
}
END_TEST

/* What a rank holds at setup (`burst train --dry-run`: on the CPU the heap,
 * on the emulated device its arena, measured between the parts) against what
 * `burst plan memory` counts for the same configuration, part by part within
 * 5%: tiny at 64K tokens, where the per-token parts dominate, on 1 rank and on
 * 2 (cp 2) at each ZeRO stage, and on the device with the stored activations
 * offloaded (the arena then holds their two slots; the page-locked host
 * memory is taken whole, so it is not measured). */
static void expect_held_as_planned(int on_device)
{
    char emu[4096];
    test_program_path("tests/train/burst_emu", emu, sizeof emu);
    char *program = on_device ? emu : (char *)test_burst_path();
    static const char *const grids[][3] = {{"1", "1", "false"},
                                           {"2", "1", "false"},
                                           {"2", "2", "false"},
                                           {"2", "3", "false"},
                                           {"2", "3", "true"}};
    for (size_t g = 0; g < sizeof grids / sizeof *grids; g++) {
        if (!on_device && strcmp(grids[g][2], "true") == 0) continue;
        char cp[32], zero[32], offload[64];
        snprintf(cp, sizeof cp, "parallel.cp=%s", grids[g][0]);
        snprintf(zero, sizeof zero, "parallel.zero=%s", grids[g][1]);
        snprintf(offload, sizeof offload, "memory.offload_activations=%s", grids[g][2]);
        char *sets[] = {"--set", on_device ? "train.device=cuda" : "train.device=cpu",
                        "--set", "data.seq_len=65536",
                        "--set", "model.max_seq=65536",
                        "--set", cp,
                        "--set", zero,
                        "--set", offload};
        enum { N_SETS = sizeof sets / sizeof *sets };
        char *plan[5 + N_SETS] = {program, "plan", "memory", "--json"};
        char *train[9 + N_SETS] = {(char *)test_burst_path(),
                                   "run",
                                   "-n",
                                   (char *)grids[g][0],
                                   "--",
                                   program,
                                   "train",
                                   "--dry-run"};
        memcpy(plan + 4, sets, sizeof sets), memcpy(train + 8, sets, sizeof sets);
        plan[4 + N_SETS] = NULL, train[8 + N_SETS] = NULL;
        char *env[] = {"OMP_NUM_THREADS=1", NULL};
        test_run_result p = test_run(plan, NULL), t = test_run(train, env);
        json_error_t e;
        json_t *o = json_loads(p.out, 0, &e), *parts = json_object_get(o, "parts");
        ck_assert_msg(o && p.exit_code == 0, "plan: exit %d, %s:\n%s", p.exit_code, e.text, p.out);
        ck_assert_msg(t.exit_code == 0 && test_output_has(&t, "dry run: set up and fits"), "%s",
                      t.out);
        /* "name H of C, name H of C, ...": each part's name up to " (" is its key */
        const char *at = line_after(&t, "by part (bytes held of counted): ", NULL);
        int checked = 0;
        for (char name[64]; *at; checked++) {
            long long held = 0, counted = 0;
            int used = 0;
            ck_assert_msg(sscanf(at, "%63[^0-9] %lld of %lld%n", name, &held, &counted, &used) == 3,
                          "cannot read '%s'", at);
            name[strcspn(name, "(")] = '\0';
            for (size_t k = strlen(name); k > 0 && name[k - 1] == ' '; k--) name[k - 1] = '\0';
            for (char *c = name; *c; c++) *c = *c == ' ' ? '_' : *c;
            json_t *v = json_object_get(parts, name);
            double planned = (double)json_integer_value(v);
            ck_assert_msg(json_is_integer(v) && planned == (double)counted &&
                              fabs((double)held - planned) <= 0.05 * planned,
                          "cp %s, zero %s, offload %s, %s: held %lld bytes, planned %.0f (run's "
                          "count %lld)",
                          grids[g][0], grids[g][1], grids[g][2], name, held, planned, counted);
            at += used;
            at += strspn(at, ", ");
        }
        /* on the emulated device auto takes cuDNN's model: its calls are a part too */
        ck_assert_int_eq(checked, on_device ? 8 : 7);
        json_decref(o);
        test_run_free(&p), test_run_free(&t);
    }
}

START_TEST(a_run_holds_what_plan_memory_counts)
{
    expect_held_as_planned(0);
}
END_TEST

START_TEST(a_device_run_holds_what_plan_memory_counts)
{
    expect_held_as_planned(1);
}
END_TEST

/* On a device, NCCL's own buffers are a part of their own on nodes of several
 * GPUs: at NCCL's defaults 32 collective channels x (4 MiB + 512 KiB +
 * 4,915,200 B) and 7 ring communicators x 2 peers x 2 channels x 4 MiB, 406.0
 * MiB; smaller with NCCL_BUFFSIZE and NCCL_MAX_NCHANNELS set; none with a GPU
 * per node or intra = ucx. They decide whether a run fits. */
START_TEST(plan_memory_counts_nccls_buffers)
{
    char emu[4096];
    test_program_path("tests/train/burst_emu", emu, sizeof emu);
    static const struct {
        const char *gpus, *intra, *memory;
        char *env[3];
        const char *says;
        int exit_code;
    } cases[] = {
        {"8", "auto", "80G", {NULL}, "NCCL's buffers (estimated) 406.0 MiB", 0},
        {"8",
         "auto",
         "80G",
         {"NCCL_BUFFSIZE=1048576", "NCCL_MAX_NCHANNELS=8", NULL},
         "NCCL's buffers (estimated) 77.5 MiB",
         0},
        {"8", "auto", "200M", {NULL}, "fits: no", 2},
        {"1", "auto", "200M", {NULL}, "fits: yes", 0},
        {"8", "ucx", "200M", {NULL}, "fits: yes", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char intra[64];
        snprintf(intra, sizeof intra, "transport.intra=%s", cases[i].intra);
        char *argv[] = {emu,
                        "plan",
                        "memory",
                        "--set",
                        "train.device=cuda",
                        "--set",
                        "parallel.cp=8",
                        "--set",
                        "data.seq_len=64",
                        "--set",
                        intra,
                        "--ranks",
                        "8",
                        "--gpus-per-node",
                        (char *)cases[i].gpus,
                        "--device-memory",
                        (char *)cases[i].memory,
                        NULL};
        test_run_result r = test_run(argv, (char **)cases[i].env);
        ck_assert_msg(r.exit_code == cases[i].exit_code && test_output_has(&r, cases[i].says),
                      "case %zu: exit %d, no '%s' in:\n%s", i, r.exit_code, cases[i].says, r.out);
        ck_assert_msg(test_output_has(&r, "NCCL's buffers") ==
                          (cases[i].gpus[0] == '8' && cases[i].intra[0] == 'a'),
                      "case %zu: NCCL's buffers counted only where NCCL serves:\n%s", i, r.out);
        test_run_free(&r);
    }
}
END_TEST

/* --json: the same report as one object, bytes exact: every part of the text
 * by key, the total their sum with the larger transient (on the CPU all of it
 * the host's), the verdict and the exit status alike. */
START_TEST(plan_memory_speaks_json)
{
    for (int tight = 0; tight <= 1; tight++) {
        char *argv[] = {(char *)test_burst_path(),
                        "plan",
                        "memory",
                        "--json",
                        "--set",
                        "parallel.zero=2",
                        "--host-memory",
                        tight ? "1M" : "64G",
                        NULL};
        test_run_result r = test_run(argv, NULL);
        json_error_t e;
        json_t *o = json_loads(r.out, 0, &e);
        ck_assert_msg(o && r.exit_code == (tight ? 2 : 0), "exit %d, %s:\n%s", r.exit_code, e.text,
                      r.out);
        json_t *parts = json_object_get(o, "parts");
        static const char *const keys[] = {
            "parameters",   "gradients", "optimizer",   "stored_activations",     "layer_workspace",
            "ring_buffers", "tokens",    "head_logits", "gradient_reduction_copy"};
        json_int_t sum = 0;
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            json_t *v = json_object_get(parts, keys[k]);
            ck_assert_msg(json_is_integer(v), "no part %s:\n%s", keys[k], r.out);
            if (k < 7) sum += json_integer_value(v);
        }
        json_int_t logits = json_integer_value(json_object_get(parts, "head_logits")),
                   copy = json_integer_value(json_object_get(parts, "gradient_reduction_copy"));
        sum += logits > copy ? logits : copy;
        ck_assert_msg(json_integer_value(json_object_get(o, "total")) == sum &&
                          json_is_boolean(json_object_get(o, "fits")) &&
                          json_boolean_value(json_object_get(o, "fits")) == !tight &&
                          json_integer_value(json_object_get(o, "zero")) == 2 &&
                          json_integer_value(json_object_get(o, "host_per_rank")) == sum,
                      "%s", r.out);
        json_decref(o);
        test_run_free(&r);
    }
}
END_TEST

/* `burst plan memory --json` with zero = z and host memory host: the object. */
static json_t *plan_json(const char *zero, const char *host, int exit_code)
{
    char set[32];
    snprintf(set, sizeof set, "parallel.zero=%s", zero);
    char *argv[] = {(char *)test_burst_path(), "plan",       "memory", "--json", "--set", set,
                    "--host-memory",           (char *)host, NULL};
    test_run_result r = test_run(argv, NULL);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o && r.exit_code == exit_code, "zero = %s, host %s: exit %d, %s:\n%s", zero, host,
                  r.exit_code, e.text, r.out);
    test_run_free(&r);
    return o;
}

static long long total_of(const json_t *o)
{
    return (long long)json_integer_value(json_object_get(o, "total"));
}

/* zero = auto: the smallest stage that fits the memory given, and says it
 * chose; 3 (and exit 2) when none does. */
START_TEST(plan_memory_chooses_zero_auto)
{
    json_t *one = plan_json("1", "64G", 0), *two = plan_json("2", "64G", 0);
    long long t1 = total_of(one), t2 = total_of(two);
    ck_assert_msg(t2 < t1, "zero = 2 needs %lld, zero = 1 %lld", t2, t1);
    ck_assert(json_is_false(json_object_get(one, "zero_auto")));
    char host[32];
    snprintf(host, sizeof host, "%lld", t2);
    json_t *chosen = plan_json("auto", host, 0), *none = plan_json("auto", "1M", 2);
    ck_assert_msg(json_integer_value(json_object_get(chosen, "zero")) == 2 &&
                      json_is_true(json_object_get(chosen, "zero_auto")) && total_of(chosen) == t2,
                  "zero = auto in %s bytes chose stage %lld", host,
                  (long long)json_integer_value(json_object_get(chosen, "zero")));
    ck_assert_int_eq(json_integer_value(json_object_get(none, "zero")), 3);
    json_decref(one), json_decref(two), json_decref(chosen), json_decref(none);
}
END_TEST

/* `burst plan memory --json` of tiny at 4K tokens with the sets given. */
static json_t *plan_tiny(const char *const *sets, int n_sets, int exit_code)
{
    char *argv[16] = {(char *)test_burst_path(), "plan", "memory", "--json", "--set",
                      "data.seq_len=4096"};
    int argc = 6;
    for (int i = 0; i < n_sets; i++) argv[argc++] = "--set", argv[argc++] = (char *)sets[i];
    argv[argc] = NULL;
    test_run_result r = test_run(argv, NULL);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o && r.exit_code == exit_code, "exit %d, %s:\n%s", r.exit_code, e.text, r.out);
    test_run_free(&r);
    return o;
}

/* attn_kept_fraction = auto and keep_layers = auto (the defaults): every
 * attention output and the layers kept when they fit, then the layers
 * recomputed, then half the outputs, then none, as [memory] limit_bytes
 * tightens (each limit the total of the choice it should take); and the run's
 * setup takes the same choice as the plan (`burst train --dry-run`). */
START_TEST(plan_memory_chooses_kept_auto)
{
    static const char *const fixed[][2] = {
        {"memory.attn_kept_fraction=1", "memory.keep_layers=true"},
        {"memory.attn_kept_fraction=1", "memory.keep_layers=false"},
        {"memory.attn_kept_fraction=0.5", "memory.keep_layers=false"},
        {"memory.attn_kept_fraction=0", "memory.keep_layers=false"}};
    static const char *const said[] = {"checkpoint fraction 1, layers kept (auto",
                                       "checkpoint fraction 1, layers recomputed (auto",
                                       "checkpoint fraction 0.5, layers recomputed (auto",
                                       "checkpoint fraction 0, layers recomputed (auto"};
    long long last = 0;
    for (int i = 0; i < 4; i++) {
        json_t *f = plan_tiny(fixed[i], 2, 0);
        long long total = total_of(f);
        ck_assert_msg(i == 0 || total < last, "choice %d needs %lld, the one before %lld", i, total,
                      last);
        last = total;
        char limit[64];
        snprintf(limit, sizeof limit, "memory.limit_bytes=%lld", total);
        const char *sets[] = {limit};
        json_t *a = plan_tiny(sets, 1, 0);
        double kept = strstr(fixed[i][0], "=0.5") ? 0.5 : strstr(fixed[i][0], "=1") ? 1.0 : 0.0;
        ck_assert_msg(json_real_value(json_object_get(a, "attn_kept_fraction")) == kept &&
                          json_is_true(json_object_get(a, "keep_layers")) == (i == 0) &&
                          json_is_true(json_object_get(a, "memory_auto")) && total_of(a) == total,
                      "in %lld bytes auto chose kept %g, layers %d", total,
                      json_real_value(json_object_get(a, "attn_kept_fraction")),
                      json_is_true(json_object_get(a, "keep_layers")));
        json_decref(f), json_decref(a);
        char *train[] = {(char *)test_burst_path(), "train", "--dry-run", "--set",
                         "data.seq_len=4096",       "--set", limit,       NULL};
        test_run_result t = test_run(train, NULL);
        ck_assert_msg(t.exit_code == 0 && test_output_has(&t, said[i]), "%s", t.out);
        test_run_free(&t);
    }
    const char *tight[] = {"memory.limit_bytes=1000000"};
    json_t *none = plan_tiny(tight, 1, 2); /* the last choice, refused */
    ck_assert(json_real_value(json_object_get(none, "attn_kept_fraction")) == 0.0);
    ck_assert(json_is_false(json_object_get(none, "fits")));
    json_decref(none);
}
END_TEST

/* A budget the run does not fit in exits 2, saying so; bad options are
 * refused naming them. */
/* Llama-3-8B at seq tokens on 8 GPUs of 80 GiB, zero = 3, host memory host,
 * offload_activations offload, the optimizer's state where optimizer says:
 * the object, the exit status as expected. */
static json_t *plan_8b(const char *seq, const char *offload, const char *optimizer,
                       const char *host, int exit_code)
{
    char set[64], where[64], seq_len[64], max_seq[64];
    snprintf(set, sizeof set, "memory.offload_activations=%s", offload);
    snprintf(where, sizeof where, "memory.optimizer=%s", optimizer);
    snprintf(seq_len, sizeof seq_len, "data.seq_len=%s", seq);
    snprintf(max_seq, sizeof max_seq, "model.max_seq=%s", seq);
    char *argv[] = {(char *)test_burst_path(),
                    "plan",
                    "memory",
                    "--json",
                    "--gpus-per-node",
                    "8",
                    "--host-memory",
                    (char *)host,
                    "--set",
                    "model.preset=llama3-8b",
                    "--set",
                    "train.device=cuda",
                    "--set",
                    "parallel.cp=8",
                    "--set",
                    seq_len,
                    "--set",
                    max_seq,
                    "--set",
                    "parallel.zero=3",
                    "--set",
                    "memory.attn_kept_fraction=0",
                    /* our kernels: cuDNN's whole-block calls would add 19 GiB at 512K
                     * tokens a rank (doc/ATTENTION.md, Limits), which these budgets
                     * of the optimizer's placement do not mean to test */
                    "--set",
                    "attention.kernel=burst",
                    "--set",
                    set,
                    "--set",
                    where,
                    NULL};
    test_run_result r = test_run(argv, NULL);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o && r.exit_code == exit_code,
                  "%s tokens, offload %s, optimizer %s, host %s: "
                  "exit %d, %s:\n%s",
                  seq, offload, optimizer, host, r.exit_code, e.text, r.out);
    test_run_free(&r);
    return o;
}

static long long part_of(const json_t *o, const char *key)
{
    return (long long)json_integer_value(json_object_get(json_object_get(o, "parts"), key));
}

/* Offloaded, the stored sets of Llama-3-8B at 256K tokens a rank (32 layers
 * x 262144 x 4096 bf16 inputs: 64 GiB; no attention output kept, so O and
 * lse are their one element, 2 + 4 bytes) leave the device for the host, two
 * layers' slots staying: 2M tokens then fit on 8 GPUs and the host part is
 * the offloaded bytes, compared with a node's memory over its ranks (2 TiB:
 * fits; 128 GiB, 16 GiB a rank: does not, exit 2). */
START_TEST(plan_memory_counts_offloaded_activations_on_the_host)
{
    const long long set = 262144LL * 4096 * 2 + 2 + 4, inputs = 32 * set, slots = 2 * set;
    json_t *kept = plan_8b("2097152", "false", "device", "2048G", 2),
           *off = plan_8b("2097152", "true", "device", "2048G", 0),
           *tight = plan_8b("2097152", "true", "device", "128G", 2);
    ck_assert_int_eq(part_of(kept, "offloaded_activations"), 0);
    ck_assert_int_eq(part_of(off, "offloaded_activations"), inputs);
    ck_assert_int_eq(part_of(kept, "stored_activations") - part_of(off, "stored_activations"),
                     inputs - slots);
    long long host = (long long)json_integer_value(json_object_get(off, "host_per_rank"));
    ck_assert_msg(host >= inputs && host < inputs + (1LL << 20), "host per rank %lld", host);
    ck_assert(json_is_false(json_object_get(kept, "fits")));
    ck_assert(json_is_true(json_object_get(off, "fits")));
    ck_assert(json_is_false(json_object_get(tight, "fits")));
    json_decref(kept), json_decref(off), json_decref(tight);
}
END_TEST

/* The optimizer's state on the host: Llama-3-8B's shard on 8 ranks (its
 * masters, two moments and summed gradients, 4 x 4 bytes for each of its
 * 1,003,782,656 parameters, the masters rounded to bf16 for the gathers, 2
 * bytes each, and the buffer a range's gradients cross) leaves the
 * device, whose optimizer part is then empty, and 4M tokens fit on 8 GPUs
 * with the activations offloaded, which they do not with the state on the
 * device. */
START_TEST(plan_memory_counts_the_optimizer_on_the_host)
{
    const long long own = 8030261248LL / 8;
    json_t *dev = plan_8b("4194304", "true", "device", "2048G", 2),
           *host = plan_8b("4194304", "true", "host", "2048G", 0);
    ck_assert_int_eq(part_of(dev, "optimizer_host"), 0);
    ck_assert_int_eq(part_of(host, "optimizer"), 0);
    long long state = part_of(host, "optimizer_host");
    ck_assert_msg(state >= 18 * own && state <= 18 * own + (3LL << 30) &&
                      part_of(dev, "optimizer") >= 12 * own,
                  "the state on the host %lld bytes, on the device %lld", state,
                  part_of(dev, "optimizer"));
    json_decref(dev), json_decref(host);
}
END_TEST

START_TEST(plan_memory_refuses_what_does_not_fit)
{
    char *tight[] = {(char *)test_burst_path(), "plan", "memory", "--host-memory", "1M", NULL};
    test_run_result r = test_run(tight, NULL);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, "fits: no"), "%s", r.out);
    test_run_free(&r);
    char *bad[] = {(char *)test_burst_path(), "plan", "memory", "--ranks", "0", NULL};
    r = test_run(bad, NULL);
    ck_assert_msg(r.exit_code == 2 && test_output_has(&r, "--ranks: bad value '0'"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

/* --shard-size of convert and the memories of plan memory are read alike
 * (util/options BU_OPT_BYTES): units with or without B, refusals naming the
 * option and the value. */
START_TEST(byte_sizes_are_read_alike)
{
    char *fits[] = {(char *)test_burst_path(), "plan", "memory", "--device-memory", "80GiB",
                    "--host-memory",           "64GB", NULL};
    test_run_result r = test_run(fits, NULL);
    ck_assert_msg(r.exit_code == 0 && test_output_has(&r, "fits: yes"), "%s", r.out);
    test_run_free(&r);
    static const struct {
        const char *words[5]; /* after `burst` */
        const char *says;
    } bad[] = {{{"plan", "memory", "--device-memory", "0"}, "--device-memory: bad value '0'"},
               {{"plan", "memory", "--host-memory", "2T"}, "--host-memory: bad value '2T'"},
               {{"convert", "--shard-size", "5X"}, "--shard-size: bad value '5X'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refusal(bad[i].words, bad[i].says);
}
END_TEST

START_TEST(version_names_optional_parts)
{
    test_run_result r = burst("version", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert(test_output_has(&r, "burstengine "));
    ck_assert(test_output_has(&r, "cuda:"));
    ck_assert(test_output_has(&r, "nccl:"));
    ck_assert(test_output_has(&r, "cudnn:"));
    ck_assert(test_output_has(&r, "pmix:"));
    ck_assert(test_output_has(&r, "blas:"));
    test_run_free(&r);
}
END_TEST

/* version and selftest: options from one table each; --help lists them, bad
 * values and unknown options are refused naming them (selftest refuses before
 * it starts any transport; a transport name it passes on, which
 * tests/transport/test_transport checks is refused by the transport). */
START_TEST(version_and_selftest_options)
{
    static const char *const version[] = {"version", NULL}, *const selftest[] = {"selftest", NULL};
    static const char *const version_options[] = {"--verbose", NULL}, *const selftest_options[] = {
                                                                          "--intra", "--timeout",
                                                                          NULL};
    expect_help_lists(version, version_options);
    expect_help_lists(selftest, selftest_options);
    static const struct {
        const char *words[5];
        const char *says;
    } bad[] = {
        {{"version", "--verbos"}, "burst version: unknown option '--verbos'"},
        {{"version", "now"}, "burst version: unexpected argument 'now'"},
        {{"selftest", "--timeout", "0"}, "burst selftest: --timeout: bad value '0'"},
        {{"selftest", "--timeout", "soon"}, "burst selftest: --timeout: bad value 'soon'"},
        {{"selftest", "--timeout"}, "burst selftest: --timeout needs a value"},
        {{"selftest", "--quick"}, "burst selftest: unknown option '--quick'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refusal(bad[i].words, bad[i].says);
}
END_TEST

/* The device kernels' benchmark: its usage errors, and a clear error (not a
 * crash) where no device is visible, whatever the build and machine. */
START_TEST(bench_kernels_device_errors)
{
    const char *bad[][3] = {{"--device", "gpu", "--device: bad value 'gpu'"},
                            {"--gemm", "64", "apply to --device cuda only"},
                            {"--hkv", "3", "--hkv 3 does not divide Hq = 8"}};
    for (int i = 0; i < 3; i++) {
        char *argv[] = {(char *)test_burst_path(), "bench",           "kernels",
                        (char *)bad[i][0],         (char *)bad[i][1], NULL};
        test_run_result r = test_run(argv, NULL);
        ck_assert_msg(r.exit_code == 2, "%s %s exited %d", bad[i][0], bad[i][1], r.exit_code);
        ck_assert_msg(test_output_has(&r, bad[i][2]), "%s %s: %s", bad[i][0], bad[i][1], r.out);
        test_run_free(&r);
    }
    char *argv[] = {
        (char *)test_burst_path(), "bench", "kernels", "--device", "cuda", "--quick", NULL};
    char *env[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code == 1, "no device: exited %d: %s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "--device cuda: no device"), "%s", r.out);
    test_run_free(&r);
}
END_TEST

/* `burst bench` lists every benchmark it dispatches to, and so does the
 * summary of `burst --help`; an unknown one is refused. */
START_TEST(bench_lists_every_benchmark)
{
    test_run_result help = burst("bench", "--help"), top = burst("--help", NULL);
    ck_assert_int_eq(help.exit_code, 0);
    const char *benchmarks[] = {"kernels", "transport", "attention", "train"};
    for (size_t i = 0; i < sizeof benchmarks / sizeof benchmarks[0]; i++) {
        char row[32];
        snprintf(row, sizeof row, "\n  %s ", benchmarks[i]);
        ck_assert_msg(test_output_has(&help, row), "bench --help lacks %s: %s", benchmarks[i],
                      help.out);
        ck_assert_msg(test_output_has(&top, benchmarks[i]), "--help lacks %s", benchmarks[i]);
    }
    test_run_free(&help), test_run_free(&top);
    test_run_result r = burst("bench", "sideways");
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert(test_output_has(&r, "burst bench: unknown subcommand 'sideways'"));
    test_run_free(&r);
}
END_TEST

/* bench attention and bench transport: options from one table each; --help
 * lists them, bad values and unknown options are refused naming them before
 * any rank starts. */
START_TEST(bench_attention_and_transport_options)
{
    static const char *const attention[] = {"bench", "attention", NULL}, *const transport[] = {
                                                                             "bench", "transport",
                                                                             NULL};
    static const char *const attention_options[] = {"--seq",  "--window", "--d",      "--ranks",
                                                    "--reps", "--quick",  "--worker", NULL},
                             *const transport_options[] = {"--ranks", "--quick", "--device",
                                                           "--worker", NULL};
    expect_help_lists(attention, attention_options);
    expect_help_lists(transport, transport_options);
    static const struct {
        const char *words[5];
        const char *says;
    } bad[] = {
        {{"bench", "attention", "--d", "7"}, "burst bench attention: --d: bad value '7'"},
        {{"bench", "attention", "--seq", "8"}, "burst bench attention: --seq: bad value '8'"},
        {{"bench", "attention", "--reps", "0"}, "burst bench attention: --reps: bad value '0'"},
        {{"bench", "attention", "--ranks", "1,2"},
         "burst bench attention: --ranks: bad value '1,2'"},
        {{"bench", "attention", "--ranks", "2,,4"},
         "burst bench attention: --ranks: bad value '2,,4'"},
        {{"bench", "attention", "--ranks", "2,3,4,5,6,7,8"},
         "burst bench attention: --ranks: bad value '2,3,4,5,6,7,8'"},
        {{"bench", "attention", "--slow"}, "burst bench attention: unknown option '--slow'"},
        {{"bench", "transport", "--ranks", "65"}, "burst bench transport: --ranks: bad value '65'"},
        {{"bench", "transport", "--ranks", "2x"}, "burst bench transport: --ranks: bad value '2x'"},
        {{"bench", "transport", "--ranks", "2,3,4,5,6,7,8,9"},
         "burst bench transport: --ranks: bad value '2,3,4,5,6,7,8,9'"},
        {{"bench", "transport", "--ranks"}, "burst bench transport: --ranks needs a value"},
        {{"bench", "transport", "now"}, "burst bench transport: unexpected argument 'now'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refusal(bad[i].words, bad[i].says);
}
END_TEST

/* The training benchmark's usage errors name the option and the value. */
START_TEST(bench_train_refuses_bad_options)
{
    const char *bad[][2] = {{"--device", "gpu"},
                            {"--models", "tiny,huge"},
                            {"--models", "custom"},
                            {"--peak-tflops", "0"},
                            {"--peak-tflops", "9x"},
                            {"--gpus", "0"},
                            {"--attn-kept-fraction", "1.5"},
                            {"--attn-kept-fraction", "half"}};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        char *argv[] = {(char *)test_burst_path(), "bench",           "train",
                        (char *)bad[i][0],         (char *)bad[i][1], NULL};
        test_run_result r = test_run(argv, NULL);
        char says[96];
        snprintf(says, sizeof says, "%s: bad value '%s'", bad[i][0], bad[i][1]);
        ck_assert_msg(r.exit_code == 2, "%s %s exited %d", bad[i][0], bad[i][1], r.exit_code);
        ck_assert_msg(test_output_has(&r, says), "%s %s: %s", bad[i][0], bad[i][1], r.out);
        test_run_free(&r);
    }
}
END_TEST

/* `burst bench train --device cuda` on the emulated device (burst linked with
 * the emulator): a row with the device's sgemm as the reference, the exposed
 * communication, the MFU against the stated peak, and the memory of the
 * device arena (not the host's resident set, which is ten times the tiny
 * model's device parts) against the estimate of the device parts; with
 * --count, rank 0's account of its step as the emulator printed it. */
START_TEST(bench_train_runs_on_the_device)
{
    char emu[4096];
    test_program_path("tests/train/burst_emu", emu, sizeof emu);
    /* a peak of 0.01 GFLOP/s, so that even the emulator under the sanitizers
     * (a few MFLOP/s) prints a non-zero MFU */
    char *argv[] = {
        emu,    "bench",     "train", "--device",      "cuda",    "--models",
        "tiny", "--ranks",   "2",     "--seq",         "64",      "--steps",
        "2",    "--mem-seq", "0",     "--peak-tflops", "0.00001", "--attn-kept-fraction",
        "1",    "--count",   NULL};
    char *env[] = {"OMP_NUM_THREADS=1", NULL};
    test_run_result r = test_run(argv, env);
    ck_assert_msg(r.exit_code == 0, "exited %d:\n%s", r.exit_code, r.out);
    ck_assert_msg(test_output_has(&r, "checkpoint fraction 1, ZeRO stage 1, attention kernel auto)"),
                  "%s", r.out);
    const char *row = strstr(r.out, "| tiny | 2 | 64 | ");
    ck_assert_msg(row != NULL, "no row:\n%s", r.out);
    double s_step, tokens, gflops, ref, fraction, exposed, zero_s, mfu, peak, estimate, ratio;
    char peak_unit[8], estimate_unit[8];
    ck_assert_msg(sscanf(row,
                         "| tiny | 2 | 64 | %lf | %lf | %lf | %lf | %lf | %lf | %lf | %lf%% | "
                         "%lf %7s | %lf %7s | %lf |",
                         &s_step, &tokens, &gflops, &ref, &fraction, &exposed, &zero_s, &mfu, &peak,
                         peak_unit, &estimate, estimate_unit, &ratio) == 13,
                  "row: %.200s", row);
    ck_assert_msg(test_output_has(&r, "| device peak | estimate | peak/est |"), "%s", r.out);
    ck_assert_msg(ratio >= 0.95 && ratio <= 1.05, "device peak / estimate %g: %.200s", ratio, row);
    ck_assert_msg(s_step > 0 && tokens > 0 && gflops >= 0 && ref > 0 && mfu > 0, "row: %.200s",
                  row);
    ck_assert_msg(exposed >= 0 && exposed <= s_step, "exposed %g of a %g s step", exposed, s_step);
    ck_assert_msg(zero_s == 0, "ZeRO stage 1 spent %g s in range reductions or gathers", zero_s);
    /* MFU = achieved over one GPU's peak: the two ranks share the one device;
     * within the rounding of the printed GFLOP/s (0.005) and MFU (0.05) */
    ck_assert_msg(fabs(mfu - 100.0 * gflops / 0.01) <= 100.0 * 0.005 / 0.01 + 0.05,
                  "MFU %g%%, %g GFLOP/s", mfu, gflops);
    const char *account = strstr(r.out, "### The device step's account");
    ck_assert_msg(account != NULL, "no account:\n%s", r.out);
    const char *all = strstr(account, "| all | ");
    double launches = 0;
    ck_assert_msg(all && sscanf(all, "| all | %lf |", &launches) == 1 && launches > 0,
                  "account: %.400s", account);
    ck_assert_msg(strstr(account, "host waits ") && strstr(account, "| cublasLtMatmul | "),
                  "account: %.400s", account);
    test_run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = check_tcase(s, "cli", 60);
    check_add_tests(tc, plan_memory_speaks_json, plan_memory_chooses_zero_auto,
                    plan_memory_chooses_kept_auto, a_run_holds_what_plan_memory_counts);
    check_add_tests(
        tc, help_lists_every_command, no_command_is_usage_error, plan_attention_is_plan,
        plan_attention_options, plan_memory_counts_what_a_run_counts,
        plan_memory_refuses_what_does_not_fit, plan_memory_counts_offloaded_activations_on_the_host,
        plan_memory_counts_the_optimizer_on_the_host, byte_sizes_are_read_alike,
        unknown_command_is_usage_error, every_command_has_help, version_names_optional_parts,
        version_and_selftest_options, bench_kernels_device_errors, bench_lists_every_benchmark,
        bench_attention_and_transport_options, bench_train_refuses_bad_options,
        plan_time_prices_a_step_and_refuses_what_it_cannot);
    /* the emulated device runs its kernels on the CPU, slowly: a case of its own */
    check_add_tests(check_tcase(s, "device", 600), bench_train_runs_on_the_device,
                    plan_memory_counts_what_a_device_run_counts, plan_memory_counts_nccls_buffers,
                    a_device_run_holds_what_plan_memory_counts);
    return check_run(s);
}
