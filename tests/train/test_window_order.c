/* test_window_order.c: the order in which the HDF5 source visits its windows
 * (src/train/data/window_order.h). For many seeds (small, 123456789, around
 * 2^63, the largest) and sizes (1, primes, powers of two, 100000, about a
 * million), one pass of n samples reads every window exactly once, shuffled or
 * not, and the next pass repeats it; for window counts near 2^63 every window
 * read equals a slow reference that cannot overflow (multiplication by doubling,
 * modulo n at every step). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "src/train/data/window_order.h"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

static const uint64_t seeds[] = {0,
                                 1,
                                 2,
                                 42,
                                 123456789,
                                 UINT32_MAX,
                                 (1ull << 63) - 1,
                                 1ull << 63,
                                 (1ull << 63) + 12345,
                                 0x9e3779b97f4a7c15ull,
                                 UINT64_MAX};
enum { N_SEEDS = sizeof seeds / sizeof seeds[0] };

static const uint64_t sizes[] = {1,    2,     3,     4,     6,      7,      64,     97,     1000,
                                 1024, 65536, 65537, 99991, 100000, 131072, 999983, 1 << 20};
enum { N_SIZES = sizeof sizes / sizeof sizes[0] };

/* The number of windows of [0, n) that a pass of n samples misses (each read
 * more than once counts one miss elsewhere; a window out of range, two).
 * (No check assertion inside the loops: each one costs a system call.) */
static uint64_t windows_missed(const window_order *o, uint64_t n, uint64_t first_index)
{
    unsigned char *seen = calloc(n, 1);
    ck_assert_ptr_nonnull(seen);
    uint64_t missed = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t w = window_order_at(o, first_index + i);
        if (w < n)
            seen[w] = 1;
        else
            missed += 2;
    }
    for (uint64_t w = 0; w < n; w++) missed += !seen[w];
    free(seen);
    return missed;
}

START_TEST(every_window_once_per_pass)
{
    for (int s = 0; s < N_SEEDS; s++)
        for (int k = 0; k < N_SIZES; k++)
            for (int shuffled = 0; shuffled <= 1; shuffled++) {
                uint64_t n = sizes[k];
                window_order o = window_order_make(n, shuffled, seeds[s]);
                /* the first pass, and one starting mid-way through a later pass */
                uint64_t firsts[2] = {0, 3 * n + n / 2};
                for (int f = 0; f < 2; f++) {
                    uint64_t missed = windows_missed(&o, n, firsts[f]);
                    ck_assert_msg(missed == 0,
                                  "seed %llu, %llu windows, %s, from sample %llu: %llu never read",
                                  (unsigned long long)seeds[s], (unsigned long long)n,
                                  shuffled ? "shuffled" : "sequential",
                                  (unsigned long long)firsts[f], (unsigned long long)missed);
                }
            }
}
END_TEST

START_TEST(sequential_is_file_order_and_shuffled_is_not)
{
    for (int s = 0; s < N_SEEDS; s++) {
        window_order seq = window_order_make(100000, 0, seeds[s]);
        window_order shuf = window_order_make(100000, 1, seeds[s]);
        uint64_t moved = 0, in_order = 0;
        for (uint64_t i = 0; i < 100000; i++) {
            in_order += window_order_at(&seq, i) == i;
            moved += window_order_at(&shuf, i) != i;
        }
        ck_assert_msg(in_order == 100000, "seed %llu: sequential reads %llu of 100000 in order",
                      (unsigned long long)seeds[s], (unsigned long long)in_order);
        ck_assert_msg(moved > 99000, "seed %llu: only %llu of 100000 windows moved",
                      (unsigned long long)seeds[s], (unsigned long long)moved);
    }
}
END_TEST

/* a * i mod n by doubling, every partial result below n < 2^63 (no overflow). */
static uint64_t mulmod_slow(uint64_t a, uint64_t i, uint64_t n)
{
    uint64_t r = 0;
    a %= n;
    for (; i; i >>= 1) {
        if (i & 1) r = (r + a) % n;
        a = (a + a) % n;
    }
    return r;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    return b ? gcd(b, a % b) : a;
}

START_TEST(huge_window_counts_do_not_wrap)
{
    const uint64_t huge[] = {(1ull << 62) + 3, (1ull << 63) - 25, (1ull << 63) - 1, 1ull << 62};
    uint64_t rng = test_rng(7);
    for (int s = 0; s < N_SEEDS; s++)
        for (int k = 0; k < 4; k++) {
            uint64_t n = huge[k];
            window_order o = window_order_make(n, 1, seeds[s]);
            ck_assert_msg(o.a < n && o.b < n && gcd(o.a, n) == 1,
                          "seed %llu, n %llu: multiplier %llu, offset %llu",
                          (unsigned long long)seeds[s], (unsigned long long)n,
                          (unsigned long long)o.a, (unsigned long long)o.b);
            uint64_t wrong = 0, first_wrong = 0;
            for (int t = 0; t < 2000; t++) {
                uint64_t i = t < 1000 ? (uint64_t)t : bu_rng_next(&rng) >> 1;
                uint64_t want = (mulmod_slow(o.a, i % n, n) + o.b) % n;
                if (window_order_at(&o, i) != want && !wrong++) first_wrong = i;
            }
            ck_assert_msg(wrong == 0, "seed %llu, n %llu: %llu samples wrong, the first %llu",
                          (unsigned long long)seeds[s], (unsigned long long)n,
                          (unsigned long long)wrong, (unsigned long long)first_wrong);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("window_order");
    TCase *tc = check_tcase(s, "window_order", 120);
    check_add_tests(tc, every_window_once_per_pass, sequential_is_file_order_and_shuffled_is_not,
                    huge_window_counts_do_not_wrap);
    return check_run(s);
}
