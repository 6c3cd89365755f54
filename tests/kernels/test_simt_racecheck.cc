/* test_simt_racecheck.cc: the SIMT emulator's shared-memory race detector
 * (emu/simt/simt_shared.cc) against planted bugs, built only here: a block
 * that publishes a value through shared memory without the __syncthreads
 * between the write and the other threads' reads, a lane that reads another
 * lane's write with no __syncwarp between (through a plain load and through
 * ldmatrix), a thread that overwrites what others still read, and two threads
 * that write one byte. Each launch must fail with a race report naming the
 * kernel, the array and both threads. The negative controls, the same kernels
 * with their barriers, must pass, as must a shuffle-only warp exchange (no
 * shared memory) and a launch with the detector switched off. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/bk_cuda.cuh"
#include "tests/lib/check_main.h"

/* The launch must fail with a race report naming the kernel and containing
 * each of `what` (NULL-terminated). */
static void expect_race(bk_status st, const char *kernel, const char *const *what)
{
    const char *msg = bk_emu::last_error();
    ck_assert_msg(st == BK_ERR_DEVICE, "%s: the race went unreported", kernel);
    ck_assert_msg(strstr(msg, kernel) != NULL, "message does not name kernel %s: %s", kernel, msg);
    ck_assert_msg(strstr(msg, "shared-memory race") != NULL, "not a race report: %s", msg);
    for (; *what != NULL; what++)
        ck_assert_msg(strstr(msg, *what) != NULL, "message lacks \"%s\": %s", *what, msg);
    printf("detected as expected: %s\n", msg);
}

/* ---------------------------------------------------------------- block barrier */

/* Thread 0 publishes a value in shared memory; every thread reads it. Without
 * the barrier, the readers of other warps may run before the write lands. */
template <int WITH_BARRIER> __global__ void k_publish(const int *in, int *out)
{
    BK_SHARED(int, published, 4);
    if (threadIdx.x == 0) published[2] = in[0];
    if (WITH_BARRIER) __syncthreads();
    out[threadIdx.x] = published[2];
}

/* Every thread reads its neighbour's slot, then overwrites its own: without
 * the barrier between, a neighbour may overwrite a slot not yet read. */
template <int WITH_BARRIER> __global__ void k_overwrite_while_read(int *out)
{
    BK_SHARED(int, slots, 64);
    int t = (int)threadIdx.x;
    slots[t] = t;
    __syncthreads();
    int next = slots[(t + 1) % 64];
    if (WITH_BARRIER) __syncthreads();
    slots[t] = next * 2;
    __syncthreads();
    out[t] = slots[t];
}

/* Two threads of different warps write the same flag. */
__global__ void k_two_writers(int *out)
{
    BK_SHARED(unsigned char, flag, 16);
    if (threadIdx.x == 3 || threadIdx.x == 40) flag[5] = (unsigned char)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = flag[5];
}

/* ---------------------------------------------------------------- warp sync */

/* Lane l writes its slot and reads lane l ^ 1's: a warp's lanes run
 * independently (sm_70 on), so the read needs a __syncwarp after the write. */
template <int WITH_SYNCWARP> __global__ void k_lane_exchange(int *out)
{
    BK_SHARED(int, lanes, 32);
    int l = (int)threadIdx.x;
    lanes[l] = 10 * l;
    if (WITH_SYNCWARP) __syncwarp();
    out[l] = lanes[l ^ 1];
}

/* The same with a shuffle between the write and the read: a shuffle makes the
 * lanes meet but orders no memory, so the race stays. */
__global__ void k_lane_exchange_after_shuffle(int *out)
{
    BK_SHARED(int, lanes, 32);
    int l = (int)threadIdx.x;
    lanes[l] = 10 * l;
    int partner = __shfl_xor_sync(0xffffffffu, l, 1);
    out[l] = lanes[partner];
}

/* Lane l writes row l % 8 of an 8 x 8 bf16 matrix (lanes 8 .. 31 the same
 * rows of copies they alone read); then ldmatrix, where lane l gives the
 * address of row (l + 1) % 8: a row another lane wrote. */
template <int WITH_SYNCWARP> __global__ void k_ldmatrix_lane_written(uint32_t *out)
{
    BK_SHARED(uint16_t, tile, 4 * 64);
    int l = (int)threadIdx.x;
    for (int c = 0; c < 8; c++) tile[(l / 8) * 64 + (l % 8) * 8 + c] = (uint16_t)(l * 8 + c);
    if (WITH_SYNCWARP) __syncwarp();
    uint32_t r[4];
    bk_ldmatrix_x4(r, tile + (l / 8) * 64 + ((l + 1) % 8) * 8);
    for (int j = 0; j < 4; j++) out[4 * l + j] = r[j];
}

/* A partial-mask __syncwarp orders the lanes it names (and only those). */
__global__ void k_half_warp_exchange(int *out)
{
    BK_SHARED(int, lanes, 32);
    int l = (int)threadIdx.x;
    lanes[l] = l;
    if (l < 16) {
        __syncwarp(0x0000ffffu);
        out[l] = lanes[15 - l];
    } else {
        __syncwarp(0xffff0000u);
        out[l] = lanes[(l + 1) % 32]; /* lane 31 reads lane 0, outside its mask */
    }
}

/* ---------------------------------------------------------------- tests */

START_TEST(missing_syncthreads_is_a_race)
{
    bk_emu::set_fatal(0);
    int in = 7, out[64];
    const char *publish[] = {"published byte 8", "written by thread (0,0,0)", "then read by thread",
                             NULL};
    expect_race(BK_LAUNCH_NAMED("k_publish", k_publish<0>, dim3(1), dim3(64), 0, NULL, &in, out),
                "k_publish", publish);
    const char *overwrite[] = {"slots byte", "read by thread", "then written by thread", NULL};
    expect_race(BK_LAUNCH_NAMED("k_overwrite_while_read", k_overwrite_while_read<0>, dim3(1),
                                dim3(64), 0, NULL, out),
                "k_overwrite_while_read", overwrite);
    const char *writers[] = {"flag byte 5", "written by thread (3,0,0)",
                             "then written by thread (40,0,0)", NULL};
    expect_race(BK_LAUNCH(k_two_writers, dim3(1), dim3(64), 0, NULL, out), "k_two_writers",
                writers);
}
END_TEST

START_TEST(missing_syncwarp_is_a_race)
{
    bk_emu::set_fatal(0);
    int out[32];
    uint32_t frag[128];
    const char *exchange[] = {"lanes byte", "or __syncwarp naming both", NULL};
    expect_race(
        BK_LAUNCH_NAMED("k_lane_exchange", k_lane_exchange<0>, dim3(1), dim3(32), 0, NULL, out),
        "k_lane_exchange", exchange);
    expect_race(BK_LAUNCH(k_lane_exchange_after_shuffle, dim3(1), dim3(32), 0, NULL, out),
                "k_lane_exchange_after_shuffle", exchange);
    const char *ldm[] = {"tile byte", "then read by thread", NULL};
    expect_race(BK_LAUNCH_NAMED("k_ldmatrix_lane_written", k_ldmatrix_lane_written<0>, dim3(1),
                                dim3(32), 0, NULL, frag),
                "k_ldmatrix_lane_written", ldm);
    const char *half[] = {"lanes byte 0", "written by thread (0,0,0)", "read by thread (31,0,0)",
                          NULL};
    expect_race(BK_LAUNCH(k_half_warp_exchange, dim3(1), dim3(32), 0, NULL, out),
                "k_half_warp_exchange", half);
}
END_TEST

/* The negative controls: the same kernels with their barriers are race-free
 * and compute what they should, in either thread order. */
START_TEST(barriers_make_them_race_free)
{
    bk_emu::set_fatal(0);
    int in = 7, out[64];
    for (int reverse = 0; reverse < 2; reverse++) {
        bk_emu::set_schedule(reverse ? "reverse" : "forward");
        ck_assert_int_eq(BK_LAUNCH(k_publish<1>, dim3(2), dim3(64), 0, NULL, &in, out), BK_OK);
        for (int t = 0; t < 64; t++) ck_assert_int_eq(out[t], 7);
        ck_assert_int_eq(BK_LAUNCH(k_overwrite_while_read<1>, dim3(1), dim3(64), 0, NULL, out),
                         BK_OK);
        for (int t = 0; t < 64; t++) ck_assert_int_eq(out[t], 2 * ((t + 1) % 64));
        ck_assert_int_eq(BK_LAUNCH(k_lane_exchange<1>, dim3(1), dim3(32), 0, NULL, out), BK_OK);
        for (int l = 0; l < 32; l++) ck_assert_int_eq(out[l], 10 * (l ^ 1));
        uint32_t frag[128];
        ck_assert_int_eq(BK_LAUNCH(k_ldmatrix_lane_written<1>, dim3(1), dim3(32), 0, NULL, frag),
                         BK_OK);
        /* lane 0's register 0: elements (0, 0) and (0, 1) of matrix 0, whose
         * row 0 is the tile's row 1, written by lane 1 */
        ck_assert_uint_eq(frag[0], (uint32_t)(1 * 8) | ((uint32_t)(1 * 8 + 1) << 16));
    }
    bk_emu::set_schedule("forward");
}
END_TEST

/* Switched off, the detector lets the racy kernel run (its result is then
 * whatever the thread order gave). */
START_TEST(racecheck_can_be_switched_off)
{
    bk_emu::set_fatal(0);
    bk_emu::set_racecheck(0);
    int in = 7, out[64];
    ck_assert_int_eq(BK_LAUNCH(k_publish<0>, dim3(1), dim3(64), 0, NULL, &in, out), BK_OK);
    bk_emu::set_racecheck(1);
}
END_TEST

static Suite *racecheck_suite(void)
{
    Suite *s = suite_create("simt_racecheck");
    TCase *tc = check_tcase(s, "races", 60);
    tcase_add_test(tc, missing_syncthreads_is_a_race);
    tcase_add_test(tc, missing_syncwarp_is_a_race);
    tcase_add_test(tc, barriers_make_them_race_free);
    tcase_add_test(tc, racecheck_can_be_switched_off);
    return s;
}

int main(void)
{
    /* the planted kernels are handed host arrays; test_simt_memory checks
     * the kernels' pointers */
    bk_emu::set_kernel_pointer_check(0);
    return check_run(racecheck_suite());
}
