/* test_device_account.c: the emulated device's account of a training step
 * (emu/simt/simt_account.h), read after a tiny step of the whole trainer in
 * this process on one rank. What must always hold: the account is not empty,
 * its kernels sum to its totals, every launch declared its footprint, the
 * products' FLOPs and the step's copies are there, every wait names the
 * entry point it happened in, and the counting mode that skips the
 * arithmetic (BK_EMU_COUNT=skip) gives the same account as the full step.
 * And a budget: the host waits of a step, written as today's counts, so that
 * none creeps back once removed (doc/BENCHMARKS.md, "The device step's
 * account on the emulator", says where they come from). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/simt/simt_account.h"
#include "src/train/trainer.h"
#include "tests/lib/check_main.h"

/* The account of the step of a tiny model with `layers` layers at 64 tokens
 * on one rank, the head in chunks of head_chunk rows, the arithmetic skipped
 * or not; the account is kept in *out (large: the caller's static storage). */
static void step_account_chunked(int layers, int head_chunk, int skip, bk_emu_account *out)
{
    train_config c;
    train_config_default(&c);
    char layers_set[32], chunk_set[40], err[1024];
    snprintf(layers_set, sizeof layers_set, "model.layers=%d", layers);
    snprintf(chunk_set, sizeof chunk_set, "memory.head_chunk=%d", head_chunk);
    const char *sets[] = {"model.preset=tiny",  "train.device=cuda", "data.seq_len=64",
                          "data.task=counting", "train.steps=1",     "train.warmup_steps=1",
                          "train.log_every=1",  layers_set,          chunk_set};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        ck_assert_msg(train_config_set(&c, sets[i], err, sizeof err) == 0, "%s: %s", sets[i], err);
    bt_options opt;
    bt_options_default(&opt);
    bt_world *world = NULL;
    ck_assert_msg(bt_world_init(&opt, &world, err, sizeof err) == BT_OK, "world: %s", err);
    trainer_opts opts = {.inject_step = -1, .overflow_step = -1};
    trainer *t = trainer_create(&c, &opts, world);
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(trainer_setup(t, err, sizeof err) == 0, "setup: %s", err);
    bk_emu_account_set_skip(skip);
    ck_assert_int_eq(trainer_leave_world(t, trainer_run(t)), 0);
    bk_emu_account_get(out); /* the step's, kept at its end */
}

/* The head in one chunk (the default's 1024 rows hold the 64 tokens). */
static void step_account(int layers, int skip, bk_emu_account *out)
{
    step_account_chunked(layers, 1024, skip, out);
}

static int64_t kernel_launches(const bk_emu_account *a, const char *name)
{
    for (int i = 0; i < a->n_kernels; i++)
        if (strcmp(a->kernels[i].name, name) == 0) return a->kernels[i].launches;
    return 0;
}

static bk_emu_account full, skipped, one_layer, chunked;

START_TEST(a_steps_account_adds_up)
{
    step_account(2, 0, &full);
    const bk_emu_account *a = &full;
    ck_assert_int_eq(a->step, 1);
    ck_assert_int_gt(a->launches, 0);
    ck_assert_int_eq(a->undeclared, 0);
    ck_assert_int_eq(a->unlisted, 0);
    bk_emu_kernel_count sum = {.launches = 0};
    for (int i = 0; i < a->n_kernels; i++) {
        sum.launches += a->kernels[i].launches, sum.flops += a->kernels[i].flops;
        sum.read_bytes += a->kernels[i].read_bytes;
        sum.written_bytes += a->kernels[i].written_bytes;
    }
    ck_assert_int_eq(sum.launches, a->launches);
    ck_assert_int_eq(sum.read_bytes, a->read_bytes);
    ck_assert_int_eq(sum.written_bytes, a->written_bytes);
    ck_assert_int_eq(sum.flops, a->flops);
    ck_assert_int_gt(kernel_launches(a, "cublasLtMatmul"), 0);
    ck_assert_int_gt(a->flops, 0);
    ck_assert_int_gt(a->read_bytes, 0);
    ck_assert_int_gt(a->written_bytes, 0);
    /* the step's tokens and labels go up, its loss comes down */
    ck_assert_int_ge(a->copies[0], 2);
    ck_assert_int_ge(a->copies[1], 1);
    int64_t waits = 0, by_kind = 0;
    for (int k = 0; k < BK_EMU_WAIT_KINDS; k++)
        by_kind += k == BK_EMU_WAIT_QUERY ? 0 : a->waits_by_kind[k];
    for (int i = 0; i < a->n_wait_sites; i++) {
        const bk_emu_wait_site *w = &a->wait_sites[i];
        ck_assert_msg(strncmp(w->entry, "bk_", 3) == 0, "a wait in %s", w->entry);
        ck_assert_ptr_nonnull(w->caller);
        waits += w->kind == BK_EMU_WAIT_QUERY ? 0 : w->count;
    }
    ck_assert_int_eq(waits, a->waits);
    ck_assert_int_eq(by_kind, a->waits);
}
END_TEST

/* The same step counted without its products and attention tiles: the same
 * launches, bytes, FLOPs, copies and waits, site by site. */
START_TEST(the_counting_mode_counts_the_same_step)
{
    step_account(2, 0, &full);
    step_account(2, 1, &skipped);
    ck_assert_int_eq(skipped.n_kernels, full.n_kernels);
    for (int i = 0; i < full.n_kernels; i++) {
        const bk_emu_kernel_count *f = &full.kernels[i], *s = &skipped.kernels[i];
        ck_assert_str_eq(s->name, f->name);
        ck_assert_msg(s->launches == f->launches && s->read_bytes == f->read_bytes &&
                          s->written_bytes == f->written_bytes && s->flops == f->flops,
                      "%s counted otherwise when skipped", f->name);
    }
    for (int d = 0; d < BK_EMU_COPY_DIRECTIONS; d++) {
        ck_assert_int_eq(skipped.copies[d], full.copies[d]);
        ck_assert_int_eq(skipped.copy_bytes[d], full.copy_bytes[d]);
    }
    ck_assert_int_eq(skipped.n_wait_sites, full.n_wait_sites);
    for (int i = 0; i < full.n_wait_sites; i++) {
        const bk_emu_wait_site *f = &full.wait_sites[i], *s = &skipped.wait_sites[i];
        ck_assert_msg(s->kind == f->kind && s->entry == f->entry && s->caller == f->caller &&
                          s->count == f->count,
                      "wait site %d (%s) differs when skipped", i, f->entry);
    }
}
END_TEST

/* Today's host waits of a step on one rank (doc/BENCHMARKS.md has them by
 * call site): 13 at one layer, none that grows with the layers or the head's
 * chunks: tokens and labels up (2), the embedding's token checks (1 forward,
 * 1 backward: their counts down), the head's losses and counts, summed on
 * the device and read once (1), the gradient norm (2), ZeRO's update through
 * the transport's blocking copies (4) and its stream waits (2). Gone: the
 * ring's block positions, uploaded and waited for at each of its three calls
 * a layer (6 a layer; every block's positions are now in a table made with
 * the ring's buffers, src/attn/ring_buffers.c); the checks' and the valid
 * count's zeros, set on the stream (25 waits at one layer before either);
 * the head's label check, valid count and losses read back chunk by chunk (3
 * a chunk, now 1 a pass: bk_cross_entropy_sum). Lower these when a wait
 * goes; never raise them. */
enum { WAITS_AT_ONE_LAYER_TODAY = 13, WAITS_PER_LAYER_TODAY = 0 };

START_TEST(host_waits_stay_within_todays_budget)
{
    step_account(1, 1, &one_layer);
    step_account(2, 1, &skipped);
    ck_assert_int_le(one_layer.waits, WAITS_AT_ONE_LAYER_TODAY);
    ck_assert_int_le(skipped.waits - one_layer.waits, WAITS_PER_LAYER_TODAY);
}
END_TEST

/* The head in 4 chunks of 16 rows waits as often as in one: its sums stay on
 * the device until the step reads them. */
START_TEST(host_waits_do_not_grow_with_the_heads_chunks)
{
    step_account(1, 1, &one_layer);
    step_account_chunked(1, 16, 1, &chunked);
    ck_assert_int_gt(kernel_launches(&chunked, "bk_cross_entropy_kernel"),
                     kernel_launches(&one_layer, "bk_cross_entropy_kernel"));
    ck_assert_int_eq(chunked.waits, one_layer.waits);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_account");
    TCase *tc = check_tcase(s, "account", 60);
    check_add_tests(tc, a_steps_account_adds_up, the_counting_mode_counts_the_same_step,
                    host_waits_stay_within_todays_budget,
                    host_waits_do_not_grow_with_the_heads_chunks);
    return check_run(s);
}
