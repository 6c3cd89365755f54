/* test_simt.cc: the SIMT emulator's own tests (emu/simt/). Kernels written
 * in CUDA C through kernels/cuda/bk_cuda.cuh run in the emulator and their
 * results are checked against what CUDA and the PTX ISA specify, computed here
 * independently of the emulator's code: built-in variables, shuffles of every
 * kind and width, votes, barriers, atomics, cp.async, ldmatrix in every form,
 * and mma.sync m16n8k16 against a scalar matrix product (with fragments built
 * by hand from the ISA's tables, and loaded with ldmatrix). Then every error
 * the emulator promises to catch is provoked, and the message must name the
 * kernel and the block. Last, the cost of a fiber barrier is measured and
 * printed. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/bf16.h"
#include "kernels/cuda/bk_cuda.cuh"
#include "tests/lib/check_main.h"
#include "tests/lib/rng.h"

/* ---------------------------------------------------------------- helpers */

/* The random stream of the running test (each test runs in its own process). */
static uint64_t rng_state = test_rng(7);
/* Uniform in [-1, 1). */
static float runif(void)
{
    return (float)test_rng_uniform(&rng_state, -1.0, 1.0);
}

template <class T> static T *zalloc(size_t n)
{
    T *p = static_cast<T *>(calloc(n ? n : 1, sizeof(T)));
    ck_assert_ptr_nonnull(p);
    return p;
}

/* The launch must fail, with a message that names the kernel, the block and
 * contains `what`. */
static void expect_error(bk_status st, const char *kernel, const char *block, const char *what)
{
    const char *msg = bk_emu::last_error();
    ck_assert_msg(st == BK_ERR_DEVICE, "%s: the launch did not fail", kernel);
    ck_assert_msg(strstr(msg, kernel) != NULL, "message does not name kernel %s: %s", kernel, msg);
    ck_assert_msg(strstr(msg, block) != NULL, "message does not name block %s: %s", block, msg);
    ck_assert_msg(strstr(msg, what) != NULL, "message lacks \"%s\": %s", what, msg);
    printf("detected as expected: %s\n", msg);
}

/* ---------------------------------------------------------------- built-ins, barriers */

/* Each thread writes its coordinates; then the block sums its linear thread
 * indices through a shared-memory tree with barriers. */
__global__ void k_builtins(int *coords, long long *block_sums)
{
    BK_SHARED(long long, part, 256);
    int nt = (int)(blockDim.x * blockDim.y * blockDim.z);
    int t = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    int b = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    int *c = coords + ((long long)b * nt + t) * 6;
    c[0] = (int)threadIdx.x, c[1] = (int)threadIdx.y, c[2] = (int)threadIdx.z;
    c[3] = (int)blockIdx.x, c[4] = (int)blockIdx.y, c[5] = (int)blockIdx.z;
    part[t] = t;
    for (int i = nt; i < 256; i += nt)
        if (t + i < 256) part[t + i] = 0;
    __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        for (int i = t; i < s; i += nt) part[i] += part[i + s];
        __syncthreads();
    }
    if (t == 0) block_sums[b] = part[0];
}

START_TEST(builtins_and_barriers)
{
    dim3 grid(3, 2, 2), block(16, 4, 3);
    int nt = 16 * 4 * 3, nb = 12;
    int *coords = zalloc<int>((size_t)nb * nt * 6);
    long long *sums = zalloc<long long>((size_t)nb);
    ck_assert_int_eq(BK_LAUNCH(k_builtins, grid, block, 0, NULL, coords, sums), BK_OK);
    for (int b = 0; b < nb; b++) {
        ck_assert_int_eq(sums[b], (long long)nt * (nt - 1) / 2);
        for (int t = 0; t < nt; t++) {
            const int *c = coords + ((long long)b * nt + t) * 6;
            ck_assert_int_eq(c[0], t % 16);
            ck_assert_int_eq(c[1], (t / 16) % 4);
            ck_assert_int_eq(c[2], t / 64);
            ck_assert_int_eq(c[3], b % 3);
            ck_assert_int_eq(c[4], (b / 3) % 2);
            ck_assert_int_eq(c[5], b / 6);
        }
    }
    free(coords), free(sums);
}
END_TEST

/* ---------------------------------------------------------------- shuffles */

__global__ void k_shuffles(int width, int *oi, long long *ol, double *od)
{
    int t = (int)threadIdx.x;
    int v = 1000 + t;
    oi[t * 4 + 0] = __shfl_sync(0xffffffffu, v, 3, width);
    oi[t * 4 + 1] = __shfl_up_sync(0xffffffffu, v, 2, width);
    oi[t * 4 + 2] = __shfl_down_sync(0xffffffffu, v, 5, width);
    oi[t * 4 + 3] = __shfl_xor_sync(0xffffffffu, v, 1, width);
    ol[t] = __shfl_xor_sync(0xffffffffu, (1LL << 40) + t, 16, width);
    od[t] = __shfl_down_sync(0xffffffffu, 0.25 * t, 1, width);
}

/* The two halves of the warp shuffle separately, each with its own mask. */
__global__ void k_shuffle_halves(int *out)
{
    int lane = (int)threadIdx.x % 32;
    if (lane < 16)
        out[threadIdx.x] = __shfl_sync(0x0000ffffu, lane * 10, 15 - lane);
    else
        out[threadIdx.x] = __shfl_down_sync(0xffff0000u, lane * 10, 1, 16);
}

START_TEST(shuffles)
{
    static const int widths[] = {32, 16, 8, 4, 2, 1};
    for (int wi = 0; wi < 6; wi++) {
        int w = widths[wi], n = 64;
        int *oi = zalloc<int>((size_t)n * 4);
        long long *ol = zalloc<long long>((size_t)n);
        double *od = zalloc<double>((size_t)n);
        ck_assert_int_eq(BK_LAUNCH(k_shuffles, dim3(1), dim3(n), 0, NULL, w, oi, ol, od), BK_OK);
        for (int t = 0; t < n; t++) {
            int lane = t % 32, base = t - lane, seg = lane / w * w, pos = lane % w;
            int idx = base + seg + 3 % w;
            int up = pos >= 2 ? t - 2 : t;
            int down = pos + 5 < w ? t + 5 : t;
            int x = (lane ^ 1) / w == lane / w ? base + (lane ^ 1) : t;
            int x16 = (lane ^ 16) / w == lane / w ? base + (lane ^ 16) : t;
            int d1 = pos + 1 < w ? t + 1 : t;
            ck_assert_int_eq(oi[t * 4 + 0], 1000 + idx);
            ck_assert_int_eq(oi[t * 4 + 1], 1000 + up);
            ck_assert_int_eq(oi[t * 4 + 2], 1000 + down);
            ck_assert_int_eq(oi[t * 4 + 3], 1000 + x);
            ck_assert(ol[t] == (1LL << 40) + x16);
            ck_assert(od[t] == 0.25 * d1);
        }
        free(oi), free(ol), free(od);
    }
    int out[64];
    ck_assert_int_eq(BK_LAUNCH(k_shuffle_halves, dim3(1), dim3(64), 0, NULL, out), BK_OK);
    for (int t = 0; t < 64; t++) {
        int lane = t % 32;
        int want = lane < 16 ? (15 - lane) * 10 : ((lane % 16) < 15 ? lane + 1 : lane) * 10;
        ck_assert_int_eq(out[t], want);
    }
}
END_TEST

/* ---------------------------------------------------------------- votes */

__global__ void k_votes(unsigned *out)
{
    int lane = (int)threadIdx.x % 32, t = (int)threadIdx.x;
    out[t * 5 + 0] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    out[t * 5 + 1] = (unsigned)__any_sync(0xffffffffu, lane == 17);
    out[t * 5 + 2] = (unsigned)__all_sync(0xffffffffu, lane < 31);
    out[t * 5 + 3] = (unsigned)__all_sync(0xffffffffu, 1);
    if (lane < 12)
        out[t * 5 + 4] = __ballot_sync(0x00000fffu, lane & 1);
    else
        out[t * 5 + 4] = (unsigned)__any_sync(0xfffff000u, lane == 40);
    __syncwarp();
}

START_TEST(votes)
{
    unsigned out[64 * 5];
    ck_assert_int_eq(BK_LAUNCH(k_votes, dim3(1), dim3(64), 0, NULL, out), BK_OK);
    unsigned every3 = 0;
    for (int l = 0; l < 32; l += 3) every3 |= 1u << l;
    for (int t = 0; t < 64; t++) {
        int lane = t % 32;
        ck_assert_uint_eq(out[t * 5 + 0], every3);
        ck_assert_uint_eq(out[t * 5 + 1], 1);
        ck_assert_uint_eq(out[t * 5 + 2], 0);
        ck_assert_uint_eq(out[t * 5 + 3], 1);
        ck_assert_uint_eq(out[t * 5 + 4], lane < 12 ? 0xaaau : 0u);
    }
}
END_TEST

/* ---------------------------------------------------------------- atomics */

__global__ void k_atomics(int *count, float *fsum, double *dsum, int *mx, unsigned *cas_ticket,
                          int *per_block)
{
    BK_SHARED(int, local, 1);
    if (threadIdx.x == 0) local[0] = 0;
    __syncthreads();
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
    atomicAdd(dsum, 0.25);
    atomicMax(mx, (int)((threadIdx.x * 7 + blockIdx.x * 13) % 101));
    atomicAdd(&local[0], 2);
    unsigned old = *cas_ticket, seen;
    while ((seen = atomicCAS(cas_ticket, old, old + 1u)) != old) old = seen;
    __syncthreads();
    if (threadIdx.x == 0) per_block[blockIdx.x] = local[0];
}

START_TEST(atomics)
{
    int count = 0, mx = -1, per_block[4] = {0};
    float fsum = 0;
    double dsum = 0;
    unsigned ticket = 0;
    ck_assert_int_eq(BK_LAUNCH(k_atomics, dim3(4), dim3(96), 0, NULL, &count, &fsum, &dsum, &mx,
                               &ticket, per_block),
                     BK_OK);
    ck_assert_int_eq(count, 384);
    ck_assert(fsum == 192.0f && dsum == 96.0);
    ck_assert_int_eq(mx, 100);
    ck_assert_uint_eq(ticket, 384);
    for (int b = 0; b < 4; b++) ck_assert_int_eq(per_block[b], 192);
}
END_TEST

/* ---------------------------------------------------------------- cp.async */

/* 64 threads copy 16 bytes each into shared memory; thread t reads its slot
 * before waiting (must still be the fill pattern: the copy happens at the
 * wait), then after waiting for group 0 only, then after everything. */
__global__ void k_cp_async(const uint32_t *src, uint32_t *before, uint32_t *mid, uint32_t *after)
{
    BK_SHARED(uint32_t, buf, 64 * 4 * 2);
    int t = (int)threadIdx.x;
    bk_cp_async16(buf + t * 4, src + t * 4, 16);
    bk_cp_async_commit();
    bk_cp_async16(buf + 256 + t * 4, src + 256 + t * 4, t % 2 ? 8 : 0); /* zero fill */
    bk_cp_async_commit();
    before[t] = buf[t * 4];
    bk_cp_async_wait(1);
    mid[t * 2] = buf[t * 4 + 1];
    mid[t * 2 + 1] = buf[256 + t * 4];
    bk_cp_async_wait(0);
    __syncthreads();
    for (int i = 0; i < 4; i++) after[t * 8 + i] = buf[((t + 1) % 64) * 4 + i];
    for (int i = 0; i < 4; i++) after[t * 8 + 4 + i] = buf[256 + ((t + 1) % 64) * 4 + i];
}

START_TEST(cp_async_is_deferred_to_the_wait)
{
    uint32_t *src = zalloc<uint32_t>(512);
    for (int i = 0; i < 512; i++) src[i] = 7u * (uint32_t)i + 1u;
    uint32_t before[64], mid[128], after[64 * 8];
    ck_assert_int_eq(BK_LAUNCH(k_cp_async, dim3(1), dim3(64), 0, NULL, src, before, mid, after),
                     BK_OK);
    for (int t = 0; t < 64; t++) {
        ck_assert_uint_eq(before[t], 0xffffffffu);
        ck_assert_uint_eq(mid[t * 2], src[t * 4 + 1]);
        ck_assert_uint_eq(mid[t * 2 + 1], 0xffffffffu);
        int u = (t + 1) % 64;
        for (int i = 0; i < 4; i++) ck_assert_uint_eq(after[t * 8 + i], src[u * 4 + i]);
        for (int i = 0; i < 4; i++) {
            uint32_t want = (u % 2 && i < 2) ? src[256 + u * 4 + i] : 0u;
            ck_assert_uint_eq(after[t * 8 + 4 + i], want);
        }
    }
    free(src);
}
END_TEST

/* ---------------------------------------------------------------- ldmatrix */

/* 4 matrices of 8 x 8 b16 in shared memory, rows 24 elements apart (48 bytes)
 * from element 8 on; lane l gives row l % 8 of matrix l / 8. */
__global__ void k_ldmatrix(const uint16_t *src, uint32_t *out)
{
    BK_SHARED(uint16_t, tile, 32 * 24);
    int l = (int)threadIdx.x;
    for (int i = l; i < 32 * 24; i += 32) tile[i] = src[i];
    __syncwarp();
    BK_SPTR(const uint16_t) row = tile + l * 24 + 8;
    uint32_t r[4];
    bk_ldmatrix_x1(r, row);
    out[l * 14 + 0] = r[0];
    bk_ldmatrix_x2(r, row);
    out[l * 14 + 1] = r[0], out[l * 14 + 2] = r[1];
    bk_ldmatrix_x4(r, row);
    for (int j = 0; j < 4; j++) out[l * 14 + 3 + j] = r[j];
    bk_ldmatrix_x1_trans(r, row);
    out[l * 14 + 7] = r[0];
    bk_ldmatrix_x4_trans(r, row);
    for (int j = 0; j < 4; j++) out[l * 14 + 8 + j] = r[j];
    bk_ldmatrix_x2_trans(r, row);
    out[l * 14 + 12] = r[0], out[l * 14 + 13] = r[1];
}

/* Element (row, col) of matrix j as stored by the test. */
static uint16_t mat_elem(const uint16_t *src, int j, int row, int col)
{
    return src[(j * 8 + row) * 24 + 8 + col];
}

static uint32_t pair(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

START_TEST(ldmatrix_fragments)
{
    uint16_t *src = zalloc<uint16_t>(32 * 24);
    for (int i = 0; i < 32 * 24; i++) src[i] = (uint16_t)(bu_rng_next(&rng_state) & 0xffff);
    uint32_t out[32 * 14];
    ck_assert_int_eq(BK_LAUNCH(k_ldmatrix, dim3(1), dim3(32), 0, NULL, src, out), BK_OK);
    for (int l = 0; l < 32; l++) {
        /* PTX ISA: lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of each
         * matrix; with .trans, rows 2(l%4), 2(l%4)+1 of column l/4 */
        int r = l / 4, c = 2 * (l % 4);
        const uint32_t *o = out + l * 14;
        uint32_t plain[4], trans[4];
        for (int j = 0; j < 4; j++) {
            plain[j] = pair(mat_elem(src, j, r, c), mat_elem(src, j, r, c + 1));
            trans[j] = pair(mat_elem(src, j, c, r), mat_elem(src, j, c + 1, r));
        }
        ck_assert_uint_eq(o[0], plain[0]);
        ck_assert_uint_eq(o[1], plain[0]);
        ck_assert_uint_eq(o[2], plain[1]);
        for (int j = 0; j < 4; j++) ck_assert_uint_eq(o[3 + j], plain[j]);
        ck_assert_uint_eq(o[7], trans[0]);
        for (int j = 0; j < 4; j++) ck_assert_uint_eq(o[8 + j], trans[j]);
        ck_assert_uint_eq(o[12], trans[0]);
        ck_assert_uint_eq(o[13], trans[1]);
    }
    free(src);
}
END_TEST

/* ---------------------------------------------------------------- mma */

/* D[16, 8] = A[16, 16] B[16, 8] + C with the fragments built by hand from the
 * PTX ISA's tables (g = lane / 4, t = lane % 4). */
__global__ void k_mma_by_hand(const uint16_t *A, const uint16_t *B, const float *C, float *D)
{
    int l = (int)threadIdx.x, g = l / 4, t = l % 4;
#define PK(lo, hi) ((uint32_t)(lo) | ((uint32_t)(hi) << 16))
    uint32_t a[4] = {PK(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                     PK(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                     PK(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                     PK(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
    uint32_t b[2] = {PK(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]),
                     PK(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g])};
#undef PK
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                  C[(g + 8) * 8 + 2 * t + 1]};
    float d[4];
    bk_mma_bf16_16816(d, a, b, c);
    D[g * 8 + 2 * t] = d[0], D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2], D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

/* The same product with A loaded by ldmatrix.x4 from a row-major tile, and B
 * twice: by ldmatrix.x2.trans from B [k][n] and by ldmatrix.x2 from B^T [n][k]
 * (the two ways attention loads V and K). */
__global__ void k_mma_ldmatrix(const uint16_t *A, const uint16_t *B, const float *C, float *D)
{
    BK_SHARED(uint16_t, sa, 16 * 24);
    BK_SHARED(uint16_t, sb, 16 * 16);
    BK_SHARED(uint16_t, sbt, 8 * 24);
    int l = (int)threadIdx.x, g = l / 4, t = l % 4;
    for (int i = l; i < 256; i += 32) sa[(i / 16) * 24 + i % 16] = A[i];
    for (int i = l; i < 128; i += 32) {
        sb[(i / 8) * 16 + i % 8] = B[i];
        sbt[(i % 8) * 24 + i / 8] = B[i];
    }
    __syncwarp();
    uint32_t a[4], b[2], bt[2];
    bk_ldmatrix_x4(a, sa + (l % 16) * 24 + (l / 16) * 8);
    bk_ldmatrix_x2_trans(b, sb + (l % 16) * 16);
    bk_ldmatrix_x2(bt, sbt + (l % 8) * 24 + ((l / 8) % 2) * 8);
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                  C[(g + 8) * 8 + 2 * t + 1]};
    float d[4], e[4];
    bk_mma_bf16_16816(d, a, b, c);
    bk_mma_bf16_16816(e, a, bt, c);
    for (int i = 0; i < 4; i++) {
        int r = g + 8 * (i / 2), n = 2 * t + i % 2;
        D[r * 8 + n] = d[i];
        D[128 + r * 8 + n] = e[i];
    }
}

/* Random bf16 A [16, 16], B [16, 8], fp32 C; D must be A B + C. */
static void check_mma(int with_ldmatrix)
{
    for (int rep = 0; rep < 8; rep++) {
        uint16_t A[256], B[128];
        float C[128], D[256];
        for (int i = 0; i < 256; i++) A[i] = bk_float_to_bf16(runif() * 4);
        for (int i = 0; i < 128; i++) B[i] = bk_float_to_bf16(runif() * 4);
        for (int i = 0; i < 128; i++) C[i] = runif();
        if (with_ldmatrix)
            ck_assert_int_eq(BK_LAUNCH(k_mma_ldmatrix, dim3(1), dim3(32), 0, NULL, A, B, C, D),
                             BK_OK);
        else
            ck_assert_int_eq(BK_LAUNCH(k_mma_by_hand, dim3(1), dim3(32), 0, NULL, A, B, C, D),
                             BK_OK);
        for (int v = 0; v < (with_ldmatrix ? 2 : 1); v++)
            for (int r = 0; r < 16; r++)
                for (int n = 0; n < 8; n++) {
                    double s = C[r * 8 + n], mag = fabs(s);
                    for (int k = 0; k < 16; k++) {
                        double p = (double)bk_bf16_to_float(A[r * 16 + k]) *
                                   (double)bk_bf16_to_float(B[k * 8 + n]);
                        s += p;
                        mag += fabs(p);
                    }
                    /* bf16 products are exact; one fp32 rounding of the sum */
                    double got = D[v * 128 + r * 8 + n];
                    ck_assert_msg(fabs(got - s) <= 1e-6 * mag,
                                  "mma%s: D[%d][%d] = %.9g, scalar product %.9g",
                                  with_ldmatrix ? (v ? " (ldmatrix, B^T)" : " (ldmatrix)") : "", r,
                                  n, got, s);
                }
    }
}

START_TEST(mma_matches_scalar_product)
{
    check_mma(0);
}
END_TEST

START_TEST(mma_with_ldmatrix_matches_scalar_product)
{
    check_mma(1);
}
END_TEST

/* ---------------------------------------------------------------- errors */

__global__ void k_early_exit_barrier(int *out)
{
    if (blockIdx.x == 1 && threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void k_divergent_barriers(void)
{
    if (threadIdx.x < 32)
        __syncthreads();
    else
        __syncthreads();
}

__global__ void k_shared_overflow(float *out)
{
    BK_SHARED(float, buf, 64);
    buf[threadIdx.x + 1] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x];
}

__global__ void k_shared_underflow(float *out)
{
    BK_SHARED(float, buf, 64);
    BK_SPTR(float) p = buf + 3;
    buf[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = p[(int)threadIdx.x - 4];
}

__global__ void k_shfl_exited_lane(int *out)
{
    if (threadIdx.x % 32 == 7) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}

__global__ void k_shfl_absent_lane(int *out)
{
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void k_lane_not_in_mask(int *out)
{
    out[threadIdx.x] = __shfl_sync(0x1u, (int)threadIdx.x, 0);
}

__global__ void k_shfl_outside_mask(int *out)
{
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 20);
}

__global__ void k_mma_exited_lane(float *out)
{
    if (threadIdx.x == 31) return;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    bk_mma_bf16_16816(d, a, b, c);
    out[threadIdx.x] = d[0];
}

__global__ void k_ldmatrix_out_of_bounds(uint32_t *out)
{
    BK_SHARED(uint16_t, tile, 8 * 8);
    for (int i = (int)threadIdx.x; i < 64; i += 32) tile[i] = 0;
    __syncwarp();
    uint32_t r[4];
    bk_ldmatrix_x4(r, tile + (threadIdx.x % 8) * 8); /* in bounds: lanes 8-31 repeat rows 0-7 */
    out[threadIdx.x] = r[0];
    bk_ldmatrix_x1(r, tile + 1 + (threadIdx.x % 8) * 8); /* misaligned rows */
    out[threadIdx.x] = r[0];
}

__global__ void k_ldmatrix_past_end(uint32_t *out)
{
    BK_SHARED(uint16_t, tile, 8 * 8);
    for (int i = (int)threadIdx.x; i < 64; i += 32) tile[i] = 0;
    __syncwarp();
    uint32_t r[2];
    bk_ldmatrix_x2(r, tile + threadIdx.x * 8); /* matrix 1 = rows 8..15: past the end */
    out[threadIdx.x] = r[0];
}

__global__ void k_deadlock(void)
{
    if (threadIdx.x == 0)
        __syncwarp(0x3u);
    else
        __syncthreads();
}

/* Half the warp reaches one mma.sync, half another: .aligned forbids it,
 * though both have the full mask and the same kind. */
__global__ void k_mma_unaligned(float *out)
{
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    if (threadIdx.x < 16)
        bk_mma_bf16_16816(d, a, b, c);
    else
        bk_mma_bf16_16816(d, a, b, c);
    out[threadIdx.x] = d[0];
}

__global__ void k_mismatched_collectives(int *out)
{
    if (threadIdx.x == 0)
        out[0] = (int)__ballot_sync(0xffffffffu, 1);
    else
        out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
}

/* Writes every byte of its dynamic shared memory and sums them back. */
__global__ void k_dynamic_smem(size_t bytes, unsigned long long *sum)
{
    BK_SHARED_DYN(unsigned char, buf);
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) buf[i] = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long s = 0;
        for (size_t i = 0; i < bytes; i++) s += buf[i];
        *sum = s;
    }
}

/* 64 KiB of dynamic shared memory needs the kernel's limit raised first, as
 * on a GPU; more than a block may have cannot be allowed. */
START_TEST(dynamic_shared_memory_over_48k_needs_the_attribute)
{
    bk_emu::set_fatal(0);
    const size_t big = 64 * 1024;
    unsigned long long sum = 0;
    ck_assert_int_eq(
        BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), 48 * 1024, NULL, (size_t)48 * 1024, &sum),
        BK_OK);
    ck_assert_int_eq(sum, 48 * 1024);
    expect_error(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), big, NULL, big, &sum),
                 "k_dynamic_smem", "bk_emu: kernel", "over the 48 KiB");
    ck_assert_int_eq(bk_allow_dynamic_smem(reinterpret_cast<const void *>(k_dynamic_smem), big),
                     BK_OK);
    ck_assert_int_eq(BK_LAUNCH(k_dynamic_smem, dim3(1), dim3(64), big, NULL, big, &sum), BK_OK);
    ck_assert_int_eq(sum, big);
    ck_assert_int_eq(
        bk_allow_dynamic_smem(reinterpret_cast<const void *>(k_dynamic_smem), 200 * 1024),
        BK_ERR_DEVICE);
}
END_TEST

START_TEST(barrier_not_reached_is_reported)
{
    bk_emu::set_fatal(0);
    int out[64];
    expect_error(BK_LAUNCH(k_early_exit_barrier, dim3(2), dim3(64), 0, NULL, out),
                 "k_early_exit_barrier", "block (1,0,0)", "__syncthreads");
    expect_error(BK_LAUNCH(k_divergent_barriers, dim3(1), dim3(64), 0, NULL),
                 "k_divergent_barriers", "block (0,0,0)", "different __syncthreads");
    expect_error(BK_LAUNCH(k_deadlock, dim3(1), dim3(32), 0, NULL), "k_deadlock", "block (0,0,0)",
                 "deadlock");
    /* the emulator recovers: the next launch runs */
    int coords[2 * 64 * 6];
    long long sums[2];
    ck_assert_int_eq(BK_LAUNCH(k_builtins, dim3(2), dim3(64), 0, NULL, coords, sums), BK_OK);
    ck_assert_int_eq(sums[1], 64 * 63 / 2);
}
END_TEST

START_TEST(shared_out_of_bounds_is_reported)
{
    bk_emu::set_fatal(0);
    float out[64];
    expect_error(BK_LAUNCH(k_shared_overflow, dim3(1), dim3(64), 0, NULL, out), "k_shared_overflow",
                 "block (0,0,0)", "buf[64] of 64");
    expect_error(BK_LAUNCH(k_shared_underflow, dim3(1), dim3(64), 0, NULL, out),
                 "k_shared_underflow", "block (0,0,0)", "buf[-1] of 64");
    uint32_t o[32];
    expect_error(BK_LAUNCH(k_ldmatrix_past_end, dim3(1), dim3(32), 0, NULL, o),
                 "k_ldmatrix_past_end", "block (0,0,0)", "out of bounds");
    expect_error(BK_LAUNCH(k_ldmatrix_out_of_bounds, dim3(1), dim3(32), 0, NULL, o),
                 "k_ldmatrix_out_of_bounds", "block (0,0,0)", "not 16-byte aligned");
}
END_TEST

START_TEST(bad_lane_masks_are_reported)
{
    bk_emu::set_fatal(0);
    int out[64];
    float fo[32];
    expect_error(BK_LAUNCH(k_shfl_exited_lane, dim3(1), dim3(32), 0, NULL, out),
                 "k_shfl_exited_lane", "block (0,0,0)", "lane 7 exits");
    expect_error(BK_LAUNCH(k_shfl_absent_lane, dim3(1), dim3(48), 0, NULL, out),
                 "k_shfl_absent_lane", "block (0,0,0)", "does not have");
    expect_error(BK_LAUNCH(k_lane_not_in_mask, dim3(1), dim3(32), 0, NULL, out),
                 "k_lane_not_in_mask", "block (0,0,0)", "does not name it");
    expect_error(BK_LAUNCH(k_shfl_outside_mask, dim3(1), dim3(32), 0, NULL, out),
                 "k_shfl_outside_mask", "block (0,0,0)", "reads lane 20");
    expect_error(BK_LAUNCH(k_mma_exited_lane, dim3(1), dim3(32), 0, NULL, fo), "k_mma_exited_lane",
                 "block (0,0,0)", "lane 31 exits");
    expect_error(BK_LAUNCH(k_mma_unaligned, dim3(1), dim3(32), 0, NULL, fo), "k_mma_unaligned",
                 "block (0,0,0)", "mma.sync is .aligned, every lane of the warp must execute");
    expect_error(BK_LAUNCH(k_mismatched_collectives, dim3(1), dim3(32), 0, NULL, out),
                 "k_mismatched_collectives", "block (0,0,0)", "waits for it in");
}
END_TEST

START_TEST(errors_abort_by_default)
{
    int out[64] = {0};
    /* fatal mode (the default): the message goes to stderr and the process aborts */
    (void)BK_LAUNCH(k_early_exit_barrier, dim3(2), dim3(64), 0, NULL, out);
}
END_TEST

/* ---------------------------------------------------------------- cost */

__global__ void k_barrier_loop(int rounds, int *out)
{
    int acc = 0;
    for (int i = 0; i < rounds; i++) {
        acc += i;
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}

START_TEST(fiber_barrier_cost)
{
    const int threads = 256, rounds = 200;
    int *out = zalloc<int>(threads);
    struct timespec t0, t1;
    bk_emu::reset_stats();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(BK_LAUNCH(k_barrier_loop, dim3(1), dim3(threads), 0, NULL, rounds, out),
                     BK_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    bk_emu::stats st = bk_emu::get_stats();
    ck_assert_int_eq(out[threads - 1], rounds * (rounds - 1) / 2);
    printf("emulator cost: %.3f us per fiber barrier (%d threads x %d __syncthreads in %.3f s, "
           "%lld switches)\n",
           1e6 * s / ((double)threads * rounds), threads, rounds, s, st.switches);
    free(out);
}
END_TEST

static Suite *simt_suite(void)
{
    Suite *s = suite_create("simt");
    TCase *tc = check_tcase(s, "primitives", 120);
    tcase_add_test(tc, builtins_and_barriers);
    tcase_add_test(tc, shuffles);
    tcase_add_test(tc, votes);
    tcase_add_test(tc, atomics);
    tcase_add_test(tc, cp_async_is_deferred_to_the_wait);
    tcase_add_test(tc, ldmatrix_fragments);
    TCase *mma = check_tcase(s, "mma", 120);
    tcase_add_test(mma, mma_matches_scalar_product);
    tcase_add_test(mma, mma_with_ldmatrix_matches_scalar_product);
    TCase *err = check_tcase(s, "errors", 120);
    tcase_add_test(err, barrier_not_reached_is_reported);
    tcase_add_test(err, dynamic_shared_memory_over_48k_needs_the_attribute);
    tcase_add_test(err, shared_out_of_bounds_is_reported);
    tcase_add_test(err, bad_lane_masks_are_reported);
    tcase_add_test_raise_signal(err, errors_abort_by_default, SIGABRT);
    tcase_add_test(err, fiber_barrier_cost);
    return s;
}

int main(void)
{
    /* these tests of the SIMT semantics hand their kernels host arrays;
     * test_simt_memory checks the kernels' pointers */
    bk_emu::set_kernel_pointer_check(0);
    return check_run(simt_suite());
}
