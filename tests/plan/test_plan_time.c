/* test_plan_time.c: the structure of `burst plan time`'s model (src/plan/).
 * Profiles: rows load with their sources, every malformed row, a row given
 * twice and a row wanted but missing are errors naming them; the attention
 * rate is log-linear between two lengths and an error outside them; the
 * project's profiles load. A ring pass: with free links nothing is exposed
 * and the slowest rank's compute is its pairs at the rate; with slow links
 * each step waits for its block, and the hops leaving a node share its
 * links; the backward direction that sends fewer bytes is the faster on slow
 * links (MHA: Q-side, GQA: KV-side). A step: its parts add up to the step
 * time, each scales with its own rate, the recompute follows the kept
 * fraction and keep_layers, and the MFU is the trainer's FLOPs over the
 * time and the peak. Timings against real runs are a benchmark
 * (build-aux/bench-plan-time.sh), not a test. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/plan/step_time.h"
#include "src/train/config.h"
#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(test_make_tmpdir(tmpdir, sizeof tmpdir, "burst-plan-time"));
}

static void remove_tmpdir(void)
{
    test_remove_tree(tmpdir);
}

static const char *write_file(const char *name, const char *text)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return p;
}

#define DERIVED "\"derived\": \"a test\""
/* A profile whose rates are round numbers: GEMM 1000 GFLOP/s, passes 100
 * GB/s, attention `att` GFLOP/s at d 64 (both masks and passes, blocks 16
 * to 1M), links of `gbps` and `lat` microseconds, per_node links each. */
static void write_profile(const char *name, double att, double gbps, double lat, int per_node)
{
    char text[4096];
    int n = snprintf(text, sizeof text,
                     "{\"profile\": \"%s\", \"rows\": ["
                     "{\"row\": \"peak\", \"gflops\": 2000, " DERIVED "},"
                     "{\"row\": \"gemm\", \"gflops\": 1000, " DERIVED "},"
                     "{\"row\": \"elementwise\", \"gbps\": 100, " DERIVED "}",
                     name);
    const char *passes[] = {"forward", "backward"}, *masks[] = {"full", "causal"};
    for (int p = 0; p < 2; p++)
        for (int m = 0; m < 2; m++)
            for (int b = 0; b < 2; b++)
                n += snprintf(text + n, sizeof text - (size_t)n,
                              ",{\"row\": \"attention\", \"pass\": \"%s\", \"d\": 64, \"mask\": "
                              "\"%s\", \"block\": %d, \"gflops\": %g, " DERIVED "}",
                              passes[p], masks[m], b ? 1 << 20 : 16, att);
    const char *paths[] = {"intra", "inter", "host"};
    for (int l = 0; l < 3; l++)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      ",{\"row\": \"link\", \"path\": \"%s\", \"gbps\": %g, \"latency_us\": %g, "
                      "\"per_node\": %d, " DERIVED "}",
                      paths[l], gbps, lat, per_node);
    snprintf(text + n, sizeof text - (size_t)n, "]}");
    write_file(name, text);
}

static void load(plan_profile *p, const char *name)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    memset(p, 0, sizeof *p);
    ck_assert_msg(plan_profile_load(p, path, err, sizeof err) == 0, "%s", err);
}

START_TEST(rows_load_with_their_sources)
{
    const char *path = write_file(
        "m.json", "{\"profile\": \"m\", \"device\": \"a card\", \"rows\": ["
                  "{\"row\": \"gemm\", \"gflops\": 5, \"measured\": {\"command\": \"burst bench "
                  "kernels\", \"machine\": \"here\", \"commit\": \"abc\"}},"
                  "{\"row\": \"link\", \"path\": \"inter\", \"gbps\": 25, \"latency_us\": 2, "
                  "\"per_node\": 4, \"derived\": \"a datasheet\"}]}");
    plan_profile p = {0};
    char err[512] = "";
    ck_assert_msg(plan_profile_load(&p, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(p.n_rows, 2);
    ck_assert_str_eq(p.device, "a card");
    const profile_row *g = plan_profile_get(&p, PROFILE_GEMM, err, sizeof err);
    ck_assert_ptr_nonnull(g);
    ck_assert(g->measured && g->gflops == 5);
    ck_assert_str_eq(g->source, "burst bench kernels; here; abc");
    const profile_row *l = plan_profile_link(&p, PROFILE_LINK_INTER, err, sizeof err);
    ck_assert_ptr_nonnull(l);
    ck_assert(!l->measured && l->per_node == 4 && l->gbps == 25 && l->latency_us == 2);
    ck_assert_ptr_null(plan_profile_link(&p, PROFILE_LINK_INTRA, err, sizeof err));
    ck_assert_msg(strstr(err, "no row \"link intra\""), "%s", err);
    ck_assert_ptr_null(plan_profile_get(&p, PROFILE_PEAK, err, sizeof err));
    ck_assert_msg(strstr(err, "no row \"peak\""), "%s", err);
    plan_profile_free(&p);
}
END_TEST

/* Each malformed row, and the words its error must have. */
static const struct {
    const char *rows, *says;
} bad_rows[] = {
    {"{\"row\": \"gemm\", \"gflops\": 5}", "either \"measured\" or \"derived\""},
    {"{\"row\": \"gemm\", \"gflops\": 5, \"derived\": \"x\", \"measured\": {}}", "one of them"},
    {"{\"row\": \"gemm\", \"gflops\": 5, \"measured\": {\"command\": \"c\", \"machine\": \"m\"}}",
     "needs \"commit\""},
    {"{\"row\": \"gemm\", \"gflops\": -5, " DERIVED "}", "\"gflops\" must be a positive number"},
    {"{\"row\": \"fpga\", \"gflops\": 5, " DERIVED "}", "\"row\" is one of"},
    {"{\"row\": \"attention\", \"pass\": \"sideways\", \"d\": 64, \"mask\": \"full\", \"block\": "
     "16, \"gflops\": 1, " DERIVED "}",
     "\"pass\" (forward | backward)"},
    {"{\"row\": \"link\", \"path\": \"pigeon\", \"gbps\": 1, \"latency_us\": 1, " DERIVED "}",
     "intra, inter or host"},
    {"{\"row\": \"link\", \"path\": \"intra\", \"gbps\": 1, " DERIVED "}", "\"latency_us\""},
    {"{\"row\": \"gemm\", \"gflops\": 5, " DERIVED "}, {\"row\": \"gemm\", \"gflops\": 6, " DERIVED
     "}",
     "given twice"},
};
enum { N_BAD_ROWS = sizeof bad_rows / sizeof bad_rows[0] };

START_TEST(bad_rows_are_refused_naming_file_and_row)
{
    char text[1024], err[512] = "";
    snprintf(text, sizeof text, "{\"profile\": \"bad\", \"rows\": [%s]}", bad_rows[_i].rows);
    const char *path = write_file("bad.json", text);
    plan_profile p = {0};
    ck_assert_int_eq(plan_profile_load(&p, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, bad_rows[_i].says) && strstr(err, "bad.json"), "%s", err);
    plan_profile_free(&p);
}
END_TEST

START_TEST(a_row_in_two_files_names_both)
{
    const char *a = write_file("a.json", "{\"profile\": \"a\", \"rows\": [{\"row\": \"peak\", "
                                         "\"gflops\": 1, " DERIVED "}]}");
    const char *b = write_file("b.json", "{\"profile\": \"b\", \"rows\": [{\"row\": \"peak\", "
                                         "\"gflops\": 2, " DERIVED "}]}");
    plan_profile p = {0};
    char err[512] = "";
    ck_assert_int_eq(plan_profile_load(&p, a, err, sizeof err), 0);
    ck_assert_int_eq(plan_profile_load(&p, b, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "a.json") && strstr(err, "b.json") && strstr(err, "\"peak\""), "%s",
                  err);
    plan_profile_free(&p);
}
END_TEST

START_TEST(attention_rate_is_log_linear_between_lengths_and_refused_outside)
{
    write_file("att.json",
               "{\"profile\": \"att\", \"rows\": ["
               "{\"row\": \"attention\", \"pass\": \"forward\", \"d\": 64, \"mask\": \"causal\", "
               "\"block\": 1024, \"gflops\": 100, " DERIVED "},"
               "{\"row\": \"attention\", \"pass\": \"forward\", \"d\": 64, \"mask\": \"causal\", "
               "\"block\": 4096, \"gflops\": 400, " DERIVED "}]}");
    plan_profile p;
    load(&p, "att.json");
    char err[512] = "";
    ck_assert_double_eq_tol(plan_profile_attention(&p, 0, 64, 1, 2048, err, sizeof err), 200, 1e-9);
    ck_assert_double_eq(plan_profile_attention(&p, 0, 64, 1, 4096, err, sizeof err), 400);
    ck_assert(plan_profile_attention(&p, 0, 64, 1, 8192, err, sizeof err) < 0);
    ck_assert_msg(strstr(err, "attention forward d 64 causal block 8192"), "%s", err);
    ck_assert(plan_profile_attention(&p, 1, 64, 1, 2048, err, sizeof err) < 0);
    ck_assert_msg(strstr(err, "attention backward d 64 causal block 2048"), "%s", err);
    ck_assert(plan_profile_attention(&p, 0, 128, 0, 2048, err, sizeof err) < 0);
    plan_profile_free(&p);
}
END_TEST

START_TEST(the_projects_profiles_load)
{
    const char *src = getenv("BURST_TEST_SRCDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/profiles", src ? src : ".");
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "no %s", dir);
    int loaded = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        plan_profile p = {0};
        ck_assert_msg(plan_profile_load(&p, path, err, sizeof err) == 0, "%s", err);
        ck_assert_int_gt(p.n_rows, 0);
        plan_profile_free(&p);
        loaded++;
    }
    closedir(d);
    ck_assert_int_ge(loaded, 5);
}
END_TEST

/* A ring pass of P ranks (nodes M: the double ring when M > 1) over N
 * tokens, causal zigzag, d 64, pairs counted. */
static ring_schedule *plan_ring(ring_pass pass, int P, int M, int64_t N, int h_q, int h_kv)
{
    ring_plan_config c = {.topo = M > 1 ? TOPO_DOUBLE : TOPO_FLAT,
                          .nodes = M,
                          .need = {.mask = bk_attn_mask_causal(), .N = N},
                          .h_q = h_q,
                          .h_kv = h_kv,
                          .d = 64,
                          .count_pairs = 1,
                          .in_bytes = 2};
    char err[256];
    ck_assert_int_eq(seq_layout_init(&c.layout, LAYOUT_ZIGZAG, P, N, err, sizeof err), 0);
    ring_schedule *s = ring_plan(&c, pass, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static ring_pass_time price(const ring_schedule *s, const char *profile, int per_node)
{
    plan_profile p;
    load(&p, profile);
    ring_pass_time t;
    char err[512] = "";
    ck_assert_msg(ring_pass_price(s, &p, per_node, &t, err, sizeof err) == 0, "%s", err);
    plan_profile_free(&p);
    return t;
}

START_TEST(free_links_expose_nothing_and_compute_is_pairs_at_the_rate)
{
    write_profile("free.json", 10, 1e12, 0, 8);
    ring_schedule *s = plan_ring(RING_FORWARD, 4, 1, 4096, 8, 8);
    ring_pass_time t = price(s, "free.json", 4);
    double most = 0;
    for (int r = 0; r < s->P; r++) {
        double pairs = 0;
        for (int st = 0; st < s->n_steps; st++) pairs += (double)ring_step_at(s, r, st)->pairs;
        if (pairs > most) most = pairs;
    }
    double compute = most * ring_pair_flops(s) / 10e9;
    ck_assert_double_eq_tol(t.compute_s, compute, 1e-12 * compute);
    ck_assert_double_eq_tol(t.total_s, compute, 1e-6 * compute);
    ck_assert(t.exposed_s < 1e-6 * compute);
    ring_schedule_free(s);
}
END_TEST

START_TEST(slow_links_make_every_step_wait_for_its_block)
{
    write_profile("slow.json", 1e6, 1e-3, 10, 8); /* 1 MB/s: communication is everything */
    ring_schedule *s = plan_ring(RING_FORWARD, 4, 1, 4096, 8, 8);
    ring_pass_time t = price(s, "slow.json", 4);
    double hop = 10e-6 + (double)s->input_bytes / 1e6;
    /* each of the P - 1 blocks a rank receives arrives a hop after the last */
    ck_assert_double_ge(t.total_s, 3 * hop * (1 - 1e-9));
    ck_assert_double_le(t.total_s, 3 * hop * 1.01 + t.compute_s);
    ck_assert(t.exposed_s > 100 * t.compute_s);
    ck_assert_double_eq_tol(t.comm_s, 3 * hop, 1e-9 * hop);
    ring_schedule_free(s);
}
END_TEST

START_TEST(hops_leaving_a_node_share_its_network_links)
{
    /* 2 nodes x 2 ranks, the double ring: a round's two inter-node hops leave
     * each node at once, at half the bandwidth on one link */
    write_profile("one.json", 1e6, 1e-3, 0, 1);
    write_profile("two.json", 1e6, 1e-3, 0, 2);
    ring_schedule *s = plan_ring(RING_FORWARD, 4, 2, 4096, 8, 8);
    ring_pass_time shared = price(s, "one.json", 2), own = price(s, "two.json", 2);
    ck_assert_msg(shared.total_s > 1.3 * own.total_s, "%g vs %g", shared.total_s, own.total_s);
    /* the flat ring over the same two nodes: one hop crosses each boundary */
    ring_schedule *f = plan_ring(RING_FORWARD, 4, 1, 4096, 8, 8);
    ring_pass_time flat_one = price(f, "one.json", 2), flat_two = price(f, "two.json", 2);
    ck_assert_double_eq_tol(flat_one.total_s, flat_two.total_s, 1e-9 * flat_two.total_s);
    ring_schedule_free(s);
    ring_schedule_free(f);
}
END_TEST

START_TEST(the_backward_that_sends_fewer_bytes_is_faster_on_slow_links)
{
    write_profile("slow.json", 1e6, 1e-3, 0, 8);
    for (int gqa = 0; gqa < 2; gqa++) {
        int h_kv = gqa ? 2 : 8;
        ring_schedule *q = plan_ring(RING_BWD_Q_SIDE, 4, 1, 4096, 8, h_kv),
                      *kv = plan_ring(RING_BWD_KV_SIDE, 4, 1, 4096, 8, h_kv);
        double tq = price(q, "slow.json", 4).total_s, tkv = price(kv, "slow.json", 4).total_s;
        ring_pass fewer = ring_choose_backward(BWD_AUTO, 8, h_kv, 64, 2);
        ck_assert_msg((tq < tkv) == (fewer == RING_BWD_Q_SIDE), "gqa %d: Q-side %g, KV-side %g",
                      gqa, tq, tkv);
        ring_schedule_free(q);
        ring_schedule_free(kv);
    }
}
END_TEST

/* The small preset on one CPU rank at N tokens, with the memory choices given. */
static void plan_small(trainer_step_plan *t, int64_t N, const char *kept, const char *layers)
{
    train_config c;
    train_config_default(&c);
    char err[512] = "", set[128];
    ck_assert_int_eq(train_config_set(&c, "model.preset=small", err, sizeof err), 0);
    snprintf(set, sizeof set, "data.seq_len=%lld", (long long)N);
    ck_assert_int_eq(train_config_set(&c, set, err, sizeof err), 0);
    snprintf(set, sizeof set, "memory.attn_kept_fraction=%s", kept);
    ck_assert_int_eq(train_config_set(&c, set, err, sizeof err), 0);
    snprintf(set, sizeof set, "memory.keep_layers=%s", layers);
    ck_assert_int_eq(train_config_set(&c, set, err, sizeof err), 0);
    ck_assert_int_eq(train_config_set(&c, "parallel.zero=1", err, sizeof err), 0);
    ck_assert_msg(trainer_plan_step_offline(&c, 1, 1, t, err, sizeof err) == 0, "%s", err);
}

static step_time price_step(const trainer_step_plan *t, const char *profile)
{
    plan_profile p;
    load(&p, profile);
    step_time s;
    char err[512] = "";
    ck_assert_msg(step_time_price(t, &p, 1, &s, err, sizeof err) == 0, "%s", err);
    plan_profile_free(&p);
    return s;
}

START_TEST(a_steps_parts_add_up_and_follow_their_rates)
{
    write_profile("p.json", 100, 10, 1, 8);
    trainer_step_plan t;
    plan_small(&t, 2048, "0.5", "false");
    step_time s = price_step(&t, "p.json");
    double parts = 0, layer = 0;
    for (int i = PART_LAYERS; i < STEP_PARTS; i++)
        parts += s.part[i].compute_s + s.part[i].exposed_s;
    for (int i = 0; i < LAYER_PARTS; i++) layer += s.part[i].compute_s + s.part[i].exposed_s;
    ck_assert_double_eq_tol(s.step_s, parts, 1e-12 * parts);
    ck_assert_double_eq_tol(s.layer_s, layer, 1e-12 * layer);
    ck_assert_double_eq_tol(s.part[PART_LAYERS].compute_s + s.part[PART_LAYERS].exposed_s,
                            6 * layer, 1e-9 * layer);
    /* products: (3 forwards + the recompute) of every token at 1000 GFLOP/s */
    const model_dims *d = &t.dims;
    double D = d->d_model, F = d->d_ff, n = 2048;
    double fwd = 2 * (4 * D * D + 3 * D * F), rec = 2 * (4 * D * D + 2 * D * F);
    ck_assert_double_eq_tol(s.part[PART_PRODUCTS].compute_s, n * (3 * fwd + rec) / 1e12, 1e-12);
    ck_assert_double_eq_tol(s.part[PART_PASSES].compute_s, n * step_layer_pass_bytes(d, 0) / 100e9,
                            1e-12);
    /* the half-sequence recompute: a quarter of the forward's causal pairs */
    ck_assert_double_eq_tol(s.part[PART_ATTN_RECOMPUTE].compute_s,
                            s.part[PART_ATTN_FORWARD].compute_s / 4,
                            0.01 * s.part[PART_ATTN_FORWARD].compute_s);
    ck_assert_double_eq_tol(s.mfu, t.flops_per_step / (s.step_s * 2000e9), 1e-12);
    ck_assert_double_eq_tol(s.tokens_per_s_per_rank, 2048 / s.step_s, 1e-9);
    trainer_step_plan_free(&t);
}
END_TEST

START_TEST(the_recompute_follows_the_memory_choices)
{
    write_profile("p.json", 100, 10, 1, 8);
    trainer_step_plan none, all;
    plan_small(&none, 2048, "0", "false");
    plan_small(&all, 2048, "1", "true");
    step_time a = price_step(&none, "p.json"), b = price_step(&all, "p.json");
    ck_assert_double_eq_tol(a.part[PART_ATTN_RECOMPUTE].compute_s,
                            a.part[PART_ATTN_FORWARD].compute_s, 1e-12);
    ck_assert_double_eq(b.part[PART_ATTN_RECOMPUTE].compute_s, 0);
    ck_assert(b.part[PART_PRODUCTS].compute_s < a.part[PART_PRODUCTS].compute_s);
    ck_assert(b.step_s < a.step_s);
    /* the same FLOPs counted: recompute is not useful work */
    ck_assert_double_eq(none.flops_per_step, all.flops_per_step);
    trainer_step_plan_free(&none);
    trainer_step_plan_free(&all);
}
END_TEST

START_TEST(a_missing_rate_names_its_row)
{
    write_file("no-gemm.json", "{\"profile\": \"no-gemm\", \"rows\": [{\"row\": \"peak\", "
                               "\"gflops\": 1, " DERIVED "}]}");
    trainer_step_plan t;
    plan_small(&t, 2048, "1", "true");
    plan_profile p;
    load(&p, "no-gemm.json");
    step_time s;
    char err[512] = "";
    ck_assert_int_eq(step_time_price(&t, &p, 1, &s, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no row \"gemm\""), "%s", err);
    plan_profile_free(&p);
    trainer_step_plan_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_time");
    TCase *tc = check_tcase(s, "plan_time", 0);
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    check_add_tests(
        tc, rows_load_with_their_sources, a_row_in_two_files_names_both,
        attention_rate_is_log_linear_between_lengths_and_refused_outside,
        the_projects_profiles_load, free_links_expose_nothing_and_compute_is_pairs_at_the_rate,
        slow_links_make_every_step_wait_for_its_block, hops_leaving_a_node_share_its_network_links,
        the_backward_that_sends_fewer_bytes_is_faster_on_slow_links,
        a_steps_parts_add_up_and_follow_their_rates, the_recompute_follows_the_memory_choices,
        a_missing_rate_names_its_row);
    tcase_add_loop_test(tc, bad_rows_are_refused_naming_file_and_row, 0, N_BAD_ROWS);
    return check_run(s);
}
