/* test_arena.c: the caching arena (kernels/arena.h) against a model of what it
 * promises: pieces aligned, inside the arena and never overlapping; the
 * accounting (in use, peak, pieces, largest free) exact after every call; a
 * request refused only when no free piece holds it; best fit; freed neighbours
 * merged back into one piece; bad frees refused with nothing changed. In host
 * memory and in (emulated) device memory. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/arena.h"
#include "tests/kernels/dev_util.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

#define MAX_LIVE 512

typedef struct {
    uintptr_t at;
    size_t bytes; /* rounded up to the alignment */
} live_piece;

static size_t rounded(size_t bytes)
{
    return (bytes + BK_ARENA_ALIGN - 1) / BK_ARENA_ALIGN * BK_ARENA_ALIGN;
}

/* in_use, pieces and peak as the model has them. */
static void assert_stats(const bk_arena *a, const live_piece *live, int n, size_t peak)
{
    size_t in_use = 0;
    for (int i = 0; i < n; i++) in_use += live[i].bytes;
    bk_arena_stats s = bk_arena_stats_of(a);
    ck_assert_uint_eq(s.in_use, in_use);
    ck_assert_uint_eq(s.pieces, (size_t)n);
    ck_assert_uint_eq(s.peak, peak);
    ck_assert_uint_le(s.largest_free, s.capacity - in_use);
}

/* Random allocations and frees (_i: host or device memory). */
START_TEST(random_use_keeps_every_promise)
{
    bk_arena *a = NULL;
    const size_t capacity = 1 << 20;
    ck_assert_int_eq(bk_arena_create(capacity, (bk_arena_memory)_i, &a), BK_OK);
    live_piece *live = test_alloc(MAX_LIVE, sizeof *live);
    int n = 0, refused = 0;
    size_t peak = 0, in_use = 0;
    uint64_t rs = test_rng(7 + (uint64_t)_i);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int op = 0; op < 4000; op++) {
        if (n > 0 && (n == MAX_LIVE || bu_rng_next(&rs) % 2)) {
            int k = (int)test_rng_below(&rs, n);
            ck_assert_int_eq(bk_arena_free(a, (void *)live[k].at), BK_OK);
            in_use -= live[k].bytes;
            live[k] = live[--n];
        } else {
            size_t bytes = 1 + (size_t)test_rng_below(&rs, 48 << 10);
            size_t largest = bk_arena_stats_of(a).largest_free;
            void *p = bk_arena_alloc(a, bytes);
            if (p == NULL) {
                ck_assert_msg(largest < rounded(bytes), "refused %zu bytes with %zu free in one piece",
                              bytes, largest);
                refused++;
                continue;
            }
            uintptr_t at = (uintptr_t)p;
            ck_assert_uint_eq(at % BK_ARENA_ALIGN, 0);
            for (int k = 0; k < n; k++)
                ck_assert_msg(at + rounded(bytes) <= live[k].at || live[k].at + live[k].bytes <= at,
                              "piece %#lx overlaps a live piece", (unsigned long)at);
            live[n++] = (live_piece){at, rounded(bytes)};
            in_use += rounded(bytes);
            if (in_use > peak) peak = in_use;
            if (at < lo) lo = at;
            if (at + rounded(bytes) > hi) hi = at + rounded(bytes);
        }
        assert_stats(a, live, n, peak);
    }
    ck_assert_uint_le(hi - lo, capacity); /* all inside one arena's span */
    ck_assert_int_gt(refused, 0);          /* the test did fill the arena */
    while (n > 0) ck_assert_int_eq(bk_arena_free(a, (void *)live[--n].at), BK_OK);
    bk_arena_stats s = bk_arena_stats_of(a);
    ck_assert_uint_eq(s.largest_free, capacity); /* merged back into one piece */
    ck_assert_uint_eq(s.in_use, 0);
    bk_arena_reset_peak(a);
    ck_assert_uint_eq(bk_arena_stats_of(a).peak, 0);
    free(live);
    bk_arena_destroy(a);
}
END_TEST

START_TEST(best_fit_and_merging)
{
    bk_arena *a = NULL;
    ck_assert_int_eq(bk_arena_create(64 << 10, BK_ARENA_HOST, &a), BK_OK);
    char *p1 = bk_arena_alloc(a, 1024), *hole4 = bk_arena_alloc(a, 4096);
    char *p2 = bk_arena_alloc(a, 1024), *hole2 = bk_arena_alloc(a, 2048);
    char *p3 = bk_arena_alloc(a, 1024);
    ck_assert(p1 && hole4 && p2 && hole2 && p3);
    ck_assert_int_eq(bk_arena_free(a, hole4), BK_OK);
    ck_assert_int_eq(bk_arena_free(a, hole2), BK_OK);
    ck_assert_ptr_eq(bk_arena_alloc(a, 2000), hole2); /* the 2 KiB hole, not the 4 KiB one */
    ck_assert_ptr_eq(bk_arena_alloc(a, 3000), hole4);
    /* freeing p2 between two used pieces, then its neighbours: one piece again */
    ck_assert_int_eq(bk_arena_free(a, p2), BK_OK);
    ck_assert_int_eq(bk_arena_free(a, hole4), BK_OK);
    ck_assert_int_eq(bk_arena_free(a, hole2), BK_OK);
    ck_assert_ptr_eq(bk_arena_alloc(a, 4096 + 1024 + 2048), hole4);
    bk_arena_destroy(a);
}
END_TEST

START_TEST(bad_calls_are_refused)
{
    bk_arena *a = NULL;
    ck_assert_int_eq(bk_arena_create(0, BK_ARENA_HOST, &a), BK_ERR_ARG);
    ck_assert_int_eq(bk_arena_create(4096, BK_ARENA_HOST, NULL), BK_ERR_ARG);
    ck_assert_int_eq(bk_arena_create(4096, BK_ARENA_HOST, &a), BK_OK);
    ck_assert_ptr_null(bk_arena_alloc(a, 0));
    ck_assert_ptr_null(bk_arena_alloc(a, 4097));
    char *p = bk_arena_alloc(a, 100);
    ck_assert_ptr_nonnull(p);
    int outside;
    ck_assert_int_eq(bk_arena_free(a, &outside), BK_ERR_ARG);
    ck_assert_int_eq(bk_arena_free(a, p + BK_ARENA_ALIGN), BK_ERR_ARG); /* inside a free piece */
    ck_assert_int_eq(bk_arena_free(a, p + 8), BK_ERR_ARG);             /* not a piece's start */
    ck_assert_int_eq(bk_arena_free(a, NULL), BK_OK);
    ck_assert_uint_eq(bk_arena_stats_of(a).in_use, BK_ARENA_ALIGN); /* nothing changed */
    ck_assert_int_eq(bk_arena_free(a, p), BK_OK);
    ck_assert_int_eq(bk_arena_free(a, p), BK_ERR_ARG); /* twice */
    ck_assert_uint_eq(bk_arena_stats_of(a).peak, BK_ARENA_ALIGN);
    bk_arena_destroy(a);
    bk_arena_destroy(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = check_tcase(s, "arena", 120);
    check_add_loop_tests(tc, BK_ARENA_HOST, BK_ARENA_DEVICE + 1, random_use_keeps_every_promise);
    check_add_tests(tc, best_fit_and_merging, bad_calls_are_refused);
    return dev_test_main(s);
}
