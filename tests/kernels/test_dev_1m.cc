/* test_dev_1m.cc: the device kernels at a 1M-token sequence's index ranges,
 * in the SIMT emulator. Llama-3-8B's shapes on 1,048,560 tokens (16 x 65,535,
 * so that the last block of a 65,535-block grid-stride loop takes the last
 * row): the hidden state [n, 4096] is 2^32 floats, 16 GiB, and every offset
 * past 2^31 or 2^32 must be computed in 64 bits. The buffers are sparse (the
 * emulator maps allocations of 1 GiB or more with MAP_NORESERVE: only the
 * pages written take memory) and each launch runs only the first and the last
 * block of its grid (bk_emu::set_edge_blocks), whose grid-stride loops reach
 * from row 0 to row n - 1; the rows they cover are checked against the double
 * reference, and a poisoned row next to them must stay untouched. Every
 * pointer and vector load is checked against its allocation as in the other
 * emulator tests, so an offset that wrapped lands outside and fails there. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "kernels/cuda/bk_cuda.cuh"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "tests/lib/check_main.h"
extern "C" {
#include "kernels/ref/ops_ref.h"
}

static const int64_t GRID = 65535;         /* bk_grid_cap() */
static const int64_t N_TOKENS = 16 * GRID; /* 1,048,560 */
static const int64_t HIDDEN = 4096, HEADS = 32, HEAD_DIM = 128;
static const float POISON = -1234.5f;

/* The rows a grid-stride loop over rows runs in its first and last blocks of
 * GRID: b, b + GRID, ... for b = 0 and GRID - 1. */
static std::vector<int64_t> edge_rows(void)
{
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < N_TOKENS; r += GRID) rows.push_back(r), rows.push_back(r + GRID - 1);
    return rows;
}

static void *device_bytes(size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(bk_device_malloc(bytes, &p), BK_OK);
    return p;
}

/* A value of row r, column j, in [-1, 1): the same on the device and in the
 * reference, different across rows. */
static float value_at(int64_t r, int64_t j)
{
    uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (uint64_t)j * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return (float)(h % 2000) / 1000.0f - 1.0f;
}

/* Writes row r of a [*, cols] device buffer (device memory is the emulator's
 * host memory: a blocking upload of one row). */
static void put_row(float *buf, int64_t r, int64_t cols, const float *row)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(bk_device_upload(&q, buf + r * cols, row, (size_t)cols * sizeof(float)),
                     BK_OK);
}

static std::vector<float> get_row(const float *buf, int64_t r, int64_t cols)
{
    std::vector<float> row((size_t)cols);
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(
        bk_device_download(&q, row.data(), buf + r * cols, (size_t)cols * sizeof(float)), BK_OK);
    return row;
}

static void expect_close(const char *what, int64_t r, const std::vector<float> &got,
                         const std::vector<double> &want, double tol)
{
    for (size_t j = 0; j < got.size(); j++)
        ck_assert_msg(fabs(got[j] - want[j]) <= tol * (1.0 + fabs(want[j])),
                      "%s: row %lld, column %zu: %.7g, expected %.7g", what, (long long)r, j,
                      (double)got[j], want[j]);
}

/* Row r of out left as poisoned: the kernels wrote no row outside their
 * blocks' rows (r = 1: the second block's first row; that block did not run). */
static void expect_untouched(const char *what, const float *out, int64_t r, int64_t cols)
{
    std::vector<float> row = get_row(out, r, cols);
    for (size_t j = 0; j < row.size(); j++)
        ck_assert_msg(row[j] == POISON, "%s: row %lld was written", what, (long long)r);
}

static void poison_row(float *out, int64_t r, int64_t cols)
{
    std::vector<float> row((size_t)cols, POISON);
    put_row(out, r, cols, row.data());
}

static std::vector<float> input_row(int64_t r, int64_t cols)
{
    std::vector<float> row((size_t)cols);
    for (int64_t j = 0; j < cols; j++) row[(size_t)j] = value_at(r, j);
    return row;
}

static std::vector<double> widened(const std::vector<float> &v)
{
    return std::vector<double>(v.begin(), v.end());
}

START_TEST(rmsnorm_reaches_the_last_row)
{
    bk_emu::set_edge_blocks(1);
    const size_t bytes = (size_t)N_TOKENS * HIDDEN * sizeof(float);
    float *x = (float *)device_bytes(bytes), *y = (float *)device_bytes(bytes);
    float *w = (float *)device_bytes(HIDDEN * sizeof(float));
    float *rstd = (float *)device_bytes(N_TOKENS * sizeof(float));
    std::vector<float> wh = input_row(-1, HIDDEN);
    for (float &v : wh) v += 1.5f;
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(bk_device_upload(&q, w, wh.data(), HIDDEN * sizeof(float)), BK_OK);
    std::vector<int64_t> rows = edge_rows();
    for (int64_t r : rows) put_row(x, r, HIDDEN, input_row(r, HIDDEN).data());
    poison_row(y, 1, HIDDEN);
    ck_assert_int_eq(bk_rmsnorm_fwd(&q, N_TOKENS, HIDDEN, x, w, 1e-5f, y, rstd), BK_OK);
    std::vector<double> wd = widened(wh), want((size_t)HIDDEN);
    for (int64_t r : rows) {
        double rs;
        ref_rmsnorm_fwd(1, HIDDEN, widened(input_row(r, HIDDEN)).data(), wd.data(), 1e-5,
                        want.data(), &rs);
        expect_close("rmsnorm", r, get_row(y, r, HIDDEN), want, 1e-5);
    }
    ck_assert_int_eq(rows.back(), N_TOKENS - 1);
    expect_untouched("rmsnorm", y, 1, HIDDEN);
    bk_device_free(x), bk_device_free(y), bk_device_free(w), bk_device_free(rstd);
}
END_TEST

START_TEST(rope_reaches_the_last_row)
{
    bk_emu::set_edge_blocks(1);
    const int64_t row_len = HEADS * HEAD_DIM;
    float *x = (float *)device_bytes((size_t)N_TOKENS * row_len * sizeof(float));
    float *out = (float *)device_bytes((size_t)N_TOKENS * row_len * sizeof(float));
    int64_t *pos = (int64_t *)device_bytes(N_TOKENS * sizeof(int64_t));
    std::vector<int64_t> ph((size_t)N_TOKENS);
    for (int64_t r = 0; r < N_TOKENS; r++) ph[(size_t)r] = r; /* one whole sequence */
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(bk_device_upload(&q, pos, ph.data(), ph.size() * sizeof(int64_t)), BK_OK);
    std::vector<int64_t> rows = edge_rows();
    for (int64_t r : rows) put_row(x, r, row_len, input_row(r, row_len).data());
    poison_row(out, 1, row_len);
    bk_rope rope = {BK_ROPE_DEFAULT, 500000.0, 1.0, 1.0, 1.0, 8192.0, 32.0, 1.0, 1.0, 0.0};
    ck_assert_int_eq(bk_rope_fwd(&q, N_TOKENS, HEADS, HEAD_DIM, pos, &rope, x, out), BK_OK);
    std::vector<double> want((size_t)row_len);
    for (int64_t r : rows) {
        ref_rope(1, HEADS, HEAD_DIM, &ph[(size_t)r], &rope, widened(input_row(r, row_len)).data(),
                 1.0, want.data());
        expect_close("rope", r, get_row(out, r, row_len), want, 1e-5);
    }
    expect_untouched("rope", out, 1, row_len);
    bk_device_free(x), bk_device_free(out), bk_device_free(pos);
}
END_TEST

START_TEST(embedding_gather_reaches_the_last_row)
{
    bk_emu::set_edge_blocks(1);
    const int64_t vocab = 128256;
    float *table = (float *)device_bytes((size_t)vocab * HIDDEN * sizeof(float));
    float *out = (float *)device_bytes((size_t)N_TOKENS * HIDDEN * sizeof(float));
    int64_t *tokens = (int64_t *)device_bytes(N_TOKENS * sizeof(int64_t));
    std::vector<int64_t> th((size_t)N_TOKENS), rows = edge_rows();
    for (int64_t r = 0; r < N_TOKENS; r++) th[(size_t)r] = (r * 7919) % vocab;
    th[(size_t)rows.back()] = vocab - 1; /* the table's last row too */
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    ck_assert_int_eq(bk_device_upload(&q, tokens, th.data(), th.size() * sizeof(int64_t)), BK_OK);
    for (int64_t r : rows)
        put_row(table, th[(size_t)r], HIDDEN, input_row(th[(size_t)r], HIDDEN).data());
    poison_row(out, 1, HIDDEN);
    ck_assert_int_eq(bk_embedding_gather(&q, N_TOKENS, vocab, HIDDEN, tokens, table, out), BK_OK);
    for (int64_t r : rows)
        expect_close("embedding gather", r, get_row(out, r, HIDDEN),
                     widened(input_row(th[(size_t)r], HIDDEN)), 0.0);
    expect_untouched("embedding gather", out, 1, HIDDEN);
    bk_device_free(table), bk_device_free(out), bk_device_free(tokens);
}
END_TEST

/* An element-wise grid-stride loop over rows x cols = 65,535 x 65,536
 * elements (the MLP's [n, 4096] at 1M tokens), 256 threads a block: the edge
 * blocks take the elements b * 256 + t + k * GRID * 256, the last one ending
 * at the last element. gate and up are the halves of a fused [n, 2 cols]
 * buffer (32 GiB), as the model gives them. */
START_TEST(swiglu_reaches_the_last_element)
{
    bk_emu::set_edge_blocks(1);
    const int64_t rows = N_TOKENS, cols = HIDDEN, threads = 256;
    const int64_t n = rows * cols, stride = GRID * threads;
    ck_assert_int_eq(n % stride, 0);
    float *fused = (float *)device_bytes((size_t)rows * 2 * cols * sizeof(float));
    float *out = (float *)device_bytes((size_t)n * sizeof(float));
    /* the edge blocks' runs of 256 elements: k * stride + b * 256 */
    std::vector<int64_t> starts;
    for (int64_t k = 0; k < n / stride; k++)
        starts.push_back(k * stride), starts.push_back(k * stride + (GRID - 1) * threads);
    ck_assert_int_eq(starts.back() + threads, n);
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    for (int64_t s : starts) { /* 256 elements never cross a row of 4096 */
        int64_t r = s / cols, c = s % cols;
        std::vector<float> g(threads), u(threads);
        for (int64_t t = 0; t < threads; t++)
            g[t] = 4 * value_at(r, c + t), u[t] = value_at(-r, c + t);
        ck_assert_int_eq(bk_device_upload(&q, fused + r * 2 * cols + c, g.data(), threads * 4),
                         BK_OK);
        ck_assert_int_eq(
            bk_device_upload(&q, fused + r * 2 * cols + cols + c, u.data(), threads * 4), BK_OK);
    }
    poison_row(out, 1, threads); /* elements 256..511: the second block's, not run */
    ck_assert_int_eq(bk_swiglu_fwd(&q, rows, cols, fused, fused + cols, 2 * cols, out), BK_OK);
    for (int64_t s : starts) {
        int64_t r = s / cols, c = s % cols;
        std::vector<double> g(threads), u(threads), want(threads);
        for (int64_t t = 0; t < threads; t++)
            g[t] = 4 * value_at(r, c + t), u[t] = value_at(-r, c + t);
        ref_swiglu_fwd(threads, g.data(), u.data(), want.data());
        std::vector<float> got(threads);
        ck_assert_int_eq(bk_device_download(&q, got.data(), out + s, threads * 4), BK_OK);
        expect_close("swiglu", r, got, want, 1e-6);
    }
    expect_untouched("swiglu", out, 1, threads);
    bk_device_free(fused), bk_device_free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dev_1m");
    TCase *tc = check_tcase(s, "1m", 120);
    tcase_add_test(tc, rmsnorm_reaches_the_last_row);
    tcase_add_test(tc, rope_reaches_the_last_row);
    tcase_add_test(tc, embedding_gather_reaches_the_last_row);
    tcase_add_test(tc, swiglu_reaches_the_last_element);
    return check_run(s);
}
