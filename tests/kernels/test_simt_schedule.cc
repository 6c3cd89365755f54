/* test_simt_schedule.cc: the SIMT emulator's schedules (simt_runtime.cc,
 * bk_emu::set_schedule) against planted bugs, built only here: grid blocks
 * that each read what the block before them wrote in global memory (an order
 * between blocks CUDA does not promise), which every fixed seed of a random
 * schedule breaks while the forward and reverse orders compute it "right";
 * and a read-modify-write of one shared word by every thread with the race
 * detector off, which only preemption between the read and the write shows.
 * A launch that fails under a random schedule names the seed. The negative
 * controls, the same work done as CUDA allows (atomics, barriers, shuffles),
 * give the same results under every schedule, and a random block order runs
 * every block of a three-dimensional grid exactly once. */
#include <check.h>
#include <string.h>

#include "kernels/cuda/bk_cuda.cuh"
#include "tests/lib/check_main.h"

/* The seeds `make check` uses: fixed, so that a result is the same every run. */
static const char *const random_seeds[] = {"random:1", "random:2", "random:3", "random:4", NULL};

/* ---------------------------------------------------------------- planted bugs */

/* Block b adds one to what block b - 1 left in chain[b - 1]: right only when
 * the blocks run in index order, which nothing in CUDA promises. */
__global__ void k_chain_between_blocks(int *chain)
{
    int b = (int)blockIdx.x;
    if (threadIdx.x == 0) chain[b] = b == 0 ? 1 : chain[b - 1] + 1;
}

/* Every thread increments one shared counter with a plain read and write. */
__global__ void k_unguarded_count(int *out)
{
    BK_SHARED(int, count, 1);
    if (threadIdx.x == 0) count[0] = 0;
    __syncthreads();
    count[0] += 1;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = count[0];
}

/* Thread 0 publishes a value with no barrier before the others read it. */
__global__ void k_unpublished(const int *in, int *out)
{
    BK_SHARED(int, value, 1);
    if (threadIdx.x == 0) value[0] = in[0];
    out[threadIdx.x] = value[0];
}

/* ---------------------------------------------------------------- done right */

/* The count with an atomic, a block sum through shared memory and barriers,
 * and a warp sum by shuffles: out[0..2] per block at out[3 * block]. */
__global__ void k_counted_right(int *out)
{
    BK_SHARED(int, count, 1);
    BK_SHARED(int, partial, 128);
    int t = (int)threadIdx.x;
    if (t == 0) count[0] = 0;
    partial[t] = t + 1;
    __syncthreads();
    atomicAdd(&count[0], 1);
    for (int half = 64; half > 0; half /= 2) {
        if (t < half) partial[t] = partial[t] + partial[t + half];
        __syncthreads();
    }
    int lane_sum = t % 32;
    for (int d = 16; d > 0; d /= 2) lane_sum += __shfl_xor_sync(0xffffffffu, lane_sum, d);
    if (t == 0) {
        int *o = out + 3 * blockIdx.x;
        o[0] = count[0], o[1] = partial[0], o[2] = lane_sum;
    }
}

/* Each block of the grid notes its linear index's turn: order[b] is how many
 * blocks ran before block b. */
__global__ void k_note_turn(int *order, int *turns)
{
    if (threadIdx.x != 0) return;
    int b = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    order[b] = atomicAdd(turns, 1);
}

/* ---------------------------------------------------------------- tests */

static void use(const char *schedule)
{
    ck_assert_int_eq(bk_emu::set_schedule(schedule), 0);
}

/* The chain is right in the fixed orders (which is why they miss the bug)
 * and broken under every random seed. */
START_TEST(random_block_order_breaks_a_chain_between_blocks)
{
    enum { BLOCKS = 16 };
    int chain[BLOCKS];
    const char *fixed[] = {"forward", "reverse", NULL};
    for (const char *const *s = fixed; *s; s++) {
        use(*s);
        ck_assert_int_eq(BK_LAUNCH(k_chain_between_blocks, dim3(BLOCKS), dim3(32), 0, NULL, chain),
                         BK_OK);
        for (int b = 0; b < BLOCKS; b++) ck_assert_int_eq(chain[b], b + 1);
    }
    for (const char *const *s = random_seeds; *s; s++) {
        use(*s);
        memset(chain, 0, sizeof chain);
        ck_assert_int_eq(BK_LAUNCH(k_chain_between_blocks, dim3(BLOCKS), dim3(32), 0, NULL, chain),
                         BK_OK);
        int broken = 0;
        for (int b = 0; b < BLOCKS; b++) broken |= chain[b] != b + 1;
        ck_assert_msg(broken, "%s ran the blocks in index order", *s);
    }
    use("forward");
}
END_TEST

/* With the race detector off, the unguarded count loses increments only
 * under a random schedule, which preempts threads between read and write. */
START_TEST(preemption_shows_a_lost_update)
{
    bk_emu::set_racecheck(0);
    int out = 0;
    use("forward");
    ck_assert_int_eq(BK_LAUNCH(k_unguarded_count, dim3(1), dim3(64), 0, NULL, &out), BK_OK);
    ck_assert_int_eq(out, 64);
    use("reverse");
    ck_assert_int_eq(BK_LAUNCH(k_unguarded_count, dim3(1), dim3(64), 0, NULL, &out), BK_OK);
    ck_assert_int_eq(out, 64);
    for (const char *const *s = random_seeds; *s; s++) {
        use(*s);
        ck_assert_int_eq(BK_LAUNCH(k_unguarded_count, dim3(1), dim3(64), 0, NULL, &out), BK_OK);
        ck_assert_msg(out < 64, "%s: no increment lost (%d)", *s, out);
    }
    use("forward");
    bk_emu::set_racecheck(1);
}
END_TEST

/* A launch that fails under a random schedule says which, to rerun it. */
START_TEST(a_failure_names_the_seed)
{
    bk_emu::set_fatal(0);
    use("random:1234567");
    int in = 5, out[64];
    ck_assert_int_eq(BK_LAUNCH(k_unpublished, dim3(1), dim3(64), 0, NULL, &in, out), BK_ERR_DEVICE);
    const char *msg = bk_emu::last_error();
    ck_assert_msg(strstr(msg, "shared-memory race") && strstr(msg, "[schedule random:1234567, "),
                  "%s", msg);
    use("forward");
}
END_TEST

/* What CUDA allows gives the same results under every schedule. */
START_TEST(correct_kernels_agree_under_every_schedule)
{
    enum { BLOCKS = 3 };
    const char *all[] = {"forward",  "reverse",  "random:1", "random:2",
                         "random:3", "random:4", NULL};
    for (const char *const *s = all; *s; s++) {
        use(*s);
        int out[3 * BLOCKS];
        ck_assert_int_eq(BK_LAUNCH(k_counted_right, dim3(BLOCKS), dim3(128), 0, NULL, out), BK_OK);
        for (int b = 0; b < BLOCKS; b++) {
            ck_assert_int_eq(out[3 * b], 128);
            ck_assert_int_eq(out[3 * b + 1], 128 * 129 / 2);
            ck_assert_int_eq(out[3 * b + 2], 31 * 32 / 2);
        }
    }
    use("forward");
}
END_TEST

/* A random block order runs each block of a 5 x 3 x 2 grid once, not in the
 * x, y, z order. */
START_TEST(random_block_order_runs_every_block_once)
{
    enum { N = 5 * 3 * 2 };
    int order[N], turns = 0, seen[N] = {0}, in_index_order = 1;
    use("random:9");
    ck_assert_int_eq(BK_LAUNCH(k_note_turn, dim3(5, 3, 2), dim3(1), 0, NULL, order, &turns), BK_OK);
    ck_assert_int_eq(turns, N);
    for (int b = 0; b < N; b++) {
        ck_assert(order[b] >= 0 && order[b] < N);
        seen[order[b]]++;
        in_index_order &= order[b] == b;
    }
    for (int k = 0; k < N; k++) ck_assert_int_eq(seen[k], 1);
    ck_assert_msg(!in_index_order, "random:9 ran the blocks in x, y, z order");
    use("forward");
}
END_TEST

START_TEST(unknown_schedules_are_refused)
{
    const char *bad[] = {"",          "random",    "random:",  "random:x",
                         "random:-1", "random:1x", "sideways", "random:99999999999999999999999",
                         NULL};
    for (const char *const *s = bad; *s; s++)
        ck_assert_msg(bk_emu::set_schedule(*s) == -1, "'%s' was accepted", *s);
    ck_assert_int_eq(bk_emu::set_schedule("random:0"), 0);
    use("forward");
}
END_TEST

int main(void)
{
    /* the planted kernels are handed host arrays; test_simt_memory checks
     * the kernels' pointers */
    bk_emu::set_kernel_pointer_check(0);
    Suite *s = suite_create("simt_schedule");
    TCase *tc = check_tcase(s, "schedules", 60);
    tcase_add_test(tc, random_block_order_breaks_a_chain_between_blocks);
    tcase_add_test(tc, preemption_shows_a_lost_update);
    tcase_add_test(tc, a_failure_names_the_seed);
    tcase_add_test(tc, correct_kernels_agree_under_every_schedule);
    tcase_add_test(tc, random_block_order_runs_every_block_once);
    tcase_add_test(tc, unknown_schedules_are_refused);
    return check_run(s);
}
