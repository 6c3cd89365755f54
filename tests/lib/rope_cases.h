/* rope_cases.h: the RoPE scalings the kernel and model tests run through. */
#ifndef BURST_TESTS_ROPE_CASES_H
#define BURST_TESTS_ROPE_CASES_H

#include <math.h>

#include "kernels/ops_math.h"

enum { TEST_ROPE_CASES = 5 };

/* The RoPE of test case k (mod TEST_ROPE_CASES) at base theta: default;
 * linear (factor 4); llama3 (factor 8, Llama 3.1's band factors 1 and 4, 8192
 * positions); yarn (factor 4, betas 32 and 1, 4096 positions, the default
 * attention factor); dynamic NTK (factor 2, 4096 positions, sequences of
 * 16384). */
static inline bk_rope test_rope(int k, double theta)
{
    bk_rope r = {.type = BK_ROPE_DEFAULT, .theta = theta, .factor = 1.0};
    k %= TEST_ROPE_CASES;
    if (k == 1) r.type = BK_ROPE_LINEAR, r.factor = 4.0;
    if (k == 2)
        r = (bk_rope){.type = BK_ROPE_LLAMA3,
                      .theta = theta,
                      .factor = 8.0,
                      .low_freq_factor = 1.0,
                      .high_freq_factor = 4.0,
                      .original_max_positions = 8192.0};
    if (k == 3)
        r = (bk_rope){.type = BK_ROPE_YARN,
                      .theta = theta,
                      .factor = 4.0,
                      .beta_fast = 32.0,
                      .beta_slow = 1.0,
                      .original_max_positions = 4096.0,
                      .attention_factor = 0.1 * log(4.0) + 1.0};
    if (k == 4)
        r = (bk_rope){.type = BK_ROPE_DYNAMIC,
                      .theta = theta,
                      .factor = 2.0,
                      .original_max_positions = 4096.0,
                      .sequence_length = 16384.0};
    return r;
}

#endif
